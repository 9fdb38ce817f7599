// Cycles of the distributed-shared-memory traffic a cluster-wide rank sort
// would need, in one 16-block cluster of 512 threads (the cluster kernel's
// shape at 4 x 40K), 2048 64-bit keys (16 KB) per block, each timed with
// its closing cluster barrier, per block (clock64), mean and max over the
// blocks of 8 clusters:
//   barrier   the cluster barrier alone
//   funnel    blocks 1..15 each copy block 0's 16 KB into their own memory
//             (a list gathered in block 0, then read by all)
//   push      each block stores its 1 KB slice (128 keys) into every block
//   pull      each block loads every block's 1 KB slice
//   gather    each block stores its slice into block 0 (what "rank" does now)
// 16-byte accesses throughout. Build and run (on the GPU machine):
//   nvcc -O3 -arch=sm_90a -o /tmp/dsmem_probe ci/gpu/dsmem_probe.cu && /tmp/dsmem_probe
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "probe_check.h"

namespace cg = cooperative_groups;

constexpr int kC = 16, kThreads = 512, kKeys = 2048;
constexpr int kSlice = kKeys / kC / 2;  // one block's slice, in 16-byte vectors

__global__ void __launch_bounds__(kThreads) probe(int mode, int reps, long long* out) {
  __shared__ __align__(16) unsigned long long buf[kKeys];
  cg::cluster_group cl = cg::this_cluster();
  const int q = int(cl.block_rank());
  uint4* const mine = reinterpret_cast<uint4*>(buf);
  for (int i = threadIdx.x; i < kKeys; i += kThreads) buf[i] = (unsigned long long)(q * kKeys + i);
  cl.sync();
  const long long t0 = clock64();
  for (int r = 0; r < reps; ++r) {
    if (mode == 1 && q != 0) {
      const uint4* src = cl.map_shared_rank(mine, 0);
      for (int i = threadIdx.x; i < kKeys / 2; i += kThreads) mine[i] = src[i];
    } else if (mode == 2) {
      for (int j = threadIdx.x; j < kSlice * kC; j += kThreads) {
        const int d = j / kSlice, i = q * kSlice + j % kSlice;
        cl.map_shared_rank(mine, d)[i] = mine[i];
      }
    } else if (mode == 3) {
      for (int j = threadIdx.x; j < kSlice * kC; j += kThreads) {
        const int d = j / kSlice, i = d * kSlice + j % kSlice;
        mine[i] = cl.map_shared_rank(mine, d)[i];  // (block d's slice d: the same values it holds)
      }
    } else if (mode == 4) {
      for (int i = threadIdx.x; i < kSlice; i += kThreads) cl.map_shared_rank(mine, 0)[q * kSlice + i] = mine[q * kSlice + i];
    }
    cl.sync();
  }
  const long long t1 = clock64();
  if (threadIdx.x == 0) out[blockIdx.x] = (t1 - t0) / reps;
}

int main() {
  const int blocks = 8 * kC, reps = 50;
  long long* d = nullptr;
  CK(cudaMalloc(&d, blocks * sizeof(long long)));
  const char* names[] = {"barrier", "funnel", "push", "pull", "gather"};
  std::vector<long long> h(blocks);
  // 16 blocks is a non-portable cluster size: opted into, launched with the attribute
  CK(cudaFuncSetAttribute(probe, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = kC;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(kThreads);
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  for (int mode = 0; mode < 5; ++mode) {
    for (int warm = 0; warm < 2; ++warm) CK(cudaLaunchKernelEx(&cfg, probe, mode, reps, d));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h.data(), d, blocks * sizeof(long long), cudaMemcpyDeviceToHost));
    long long sum = 0, mx = 0;
    for (long long v : h) sum += v, mx = std::max(mx, v);
    std::printf("%-8s cycles per round (incl. the cluster barrier): mean %lld, max %lld\n", names[mode], sum / blocks, mx);
  }
  return 0;
}
