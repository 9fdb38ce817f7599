// Read rates of the streaming patterns a long-row gather can use, on the
// 64 x 1M fp32 shape (256 MB per call, two buffers alternated: past L2), with
// the cluster kernel's residency: 128 blocks of 512 threads, one per SM (the
// dynamic shared memory forces it), block b reading the 2 MB chunk b. Each
// kernel only counts x > 2.5 (so the loads cannot be dropped):
//   warp-span V      warp w streams its own contiguous 1/16 of the chunk, V
//                    16-byte vectors per lane per step, the next step's loads
//                    in flight in registers (gather_warps)
//   warp-span-rot    the same, each warp starting at a different step of its
//                    span and wrapping (different DRAM pages at the same time)
//   block-stride V   the block reads 512 x V contiguous vectors per step
//   warp-tma S D     per warp, a ring of D stages of S bytes filled by bulk
//                    copies (cp.async.bulk, mbarrier per stage): the copy
//                    engine holds the bytes in flight, not the SM's L1
//   full             every SM full (8 blocks of 256 threads), grid-stride:
//                    the copy floor for reference
// Build and run (on the GPU machine):
//   nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/stream_probe ci/gpu/stream_probe.cu && /tmp/stream_probe
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "probe_check.h"

constexpr int kRows = 64;
constexpr int64_t kCols = 1 << 20;
constexpr int kChunkVec = int(kCols / 2 / 4);  // 16-byte vectors per block chunk (2 MB)

__device__ __forceinline__ int cnt4(const float4& v) {
  return int(v.x > 2.5f) + int(v.y > 2.5f) + int(v.z > 2.5f) + int(v.w > 2.5f);
}

// Counts over `steps` steps of V vectors per thread, the next step's loads in
// flight in registers; at(st, v) is the thread's v-th vector of step st.
template <int V, class At>
__device__ __forceinline__ int stream_count(int steps, At at) {
  float4 nxt[V];
  auto load = [&](int st) {
#pragma unroll
    for (int v = 0; v < V; ++v) nxt[v] = __ldg(at(st, v));
  };
  int n = 0;
  load(0);
  for (int st = 0; st < steps; ++st) {
    float4 cur[V];
#pragma unroll
    for (int v = 0; v < V; ++v) cur[v] = nxt[v];
    if (st + 1 < steps) load(st + 1);
#pragma unroll
    for (int v = 0; v < V; ++v) n += cnt4(cur[v]);
  }
  return n;
}

template <int V>
__global__ void __launch_bounds__(512) warp_span(const float4* x, int* out, int rot) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int span = kChunkVec / 16, steps = span / (32 * V);
  const float4* s = x + int64_t(blockIdx.x) * kChunkVec + w * span;
  const int r0 = rot ? (w * 5) % steps : 0;
  atomicAdd(out, stream_count<V>(steps, [&](int st, int v) { return s + ((st + r0) % steps) * 32 * V + v * 32 + lane; }));
}

template <int V>
__global__ void __launch_bounds__(512) block_stride(const float4* x, int* out) {
  const float4* c = x + int64_t(blockIdx.x) * kChunkVec;
  const int per = 512 * V;
  atomicAdd(out, stream_count<V>(kChunkVec / per, [&](int st, int v) { return c + st * per + v * 512 + threadIdx.x; }));
}

__device__ __forceinline__ uint32_t sa(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

template <int S, int D>
__global__ void __launch_bounds__(512) warp_tma(const float4* x, int* out) {
  extern __shared__ __align__(128) unsigned char sm[];
  __shared__ uint64_t bars[16][D];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int span = kChunkVec / 16;        // vectors
  const int per = S / 16, steps = span / per;
  const float4* s = x + int64_t(blockIdx.x) * kChunkVec + w * span;
  unsigned char* ring = sm + w * D * S;
  if (lane == 0)
    for (int i = 0; i < D; ++i) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sa(&bars[w][i])) : "memory");
    }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncwarp();
  auto issue = [&](int st) {
    const int slot = st % D;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(&bars[w][slot])), "r"(S)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     sa(ring + slot * S)),
                 "l"(s + int64_t(st) * per), "r"(S), "r"(sa(&bars[w][slot]))
                 : "memory");
  };
  if (lane == 0)
    for (int i = 0; i < D && i < steps; ++i) issue(i);
  int n = 0;
  for (int st = 0; st < steps; ++st) {
    const int slot = st % D;
    const uint32_t par = uint32_t(st / D) & 1u;
    uint32_t done = 0;
    while (!done)
      asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                   : "=r"(done)
                   : "r"(sa(&bars[w][slot])), "r"(par)
                   : "memory");
    const float4* t = reinterpret_cast<const float4*>(ring + slot * S);
#pragma unroll
    for (int v = 0; v < per / 32; ++v) n += cnt4(t[v * 32 + lane]);
    __syncwarp();
    if (lane == 0 && st + D < steps) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      issue(st + D);
    }
  }
  atomicAdd(out, n);
}

__global__ void full_grid(const float4* x, int* out, int64_t nvec) {
  int n = 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + stride < nvec; i += 2 * stride) {
    const float4 a = __ldg(x + i), b = __ldg(x + i + stride);
    n += cnt4(a) + cnt4(b);
  }
  if (i < nvec) n += cnt4(__ldg(x + i));
  atomicAdd(out, n);
}

template <class F>
static float time_ms(F launch, int iters) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) launch(i);
  cudaEventRecord(a);
  for (int i = 0; i < iters; ++i) launch(i);
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms / iters;
}

int main() {
  const int64_t nvec = kRows * kCols / 4;
  const size_t bytes = size_t(nvec) * 16;
  float4* buf[2];
  int* out;
  CK(cudaMalloc(&buf[0], bytes));
  CK(cudaMalloc(&buf[1], bytes));
  CK(cudaMalloc(&out, 4));
  CK(cudaMemset(buf[0], 0x3c, bytes));
  CK(cudaMemset(buf[1], 0x40, bytes));
  const int big = 200 * 1024;
  CK(cudaFuncSetAttribute(warp_span<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
  CK(cudaFuncSetAttribute(warp_span<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
  CK(cudaFuncSetAttribute(block_stride<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
  CK(cudaFuncSetAttribute(block_stride<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
  CK(cudaFuncSetAttribute(warp_tma<2048, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
  CK(cudaFuncSetAttribute(warp_tma<4096, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
  CK(cudaFuncSetAttribute(warp_tma<1024, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
  const int G = 2 * kRows;  // 128 blocks, one per SM
  auto report = [&](const char* name, float ms) {
    printf("%-22s %8.1f us  %6.2f TB/s  %5.1f GB/s per block\n", name, ms * 1e3, bytes / ms / 1e9,
           bytes / ms / 1e6 / G);
  };
  const int it = 20;
  report("warp-span 4", time_ms([&](int i) { warp_span<4><<<G, 512, big>>>(buf[i & 1], out, 0); }, it));
  report("warp-span 8", time_ms([&](int i) { warp_span<8><<<G, 512, big>>>(buf[i & 1], out, 0); }, it));
  report("warp-span-rot 4", time_ms([&](int i) { warp_span<4><<<G, 512, big>>>(buf[i & 1], out, 1); }, it));
  report("block-stride 4", time_ms([&](int i) { block_stride<4><<<G, 512, big>>>(buf[i & 1], out); }, it));
  report("block-stride 8", time_ms([&](int i) { block_stride<8><<<G, 512, big>>>(buf[i & 1], out); }, it));
  report("warp-tma 2048x4", time_ms([&](int i) { warp_tma<2048, 4><<<G, 512, 16 * 4 * 2048>>>(buf[i & 1], out); }, it));
  report("warp-tma 4096x3", time_ms([&](int i) { warp_tma<4096, 3><<<G, 512, 16 * 3 * 4096>>>(buf[i & 1], out); }, it));
  report("warp-tma 1024x8", time_ms([&](int i) { warp_tma<1024, 8><<<G, 512, 16 * 8 * 1024>>>(buf[i & 1], out); }, it));
  report("full", time_ms([&](int i) { full_grid<<<132 * 8, 256>>>(buf[i & 1], out, nvec); }, it));
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  return 0;
}
