// Latency floors for short decode rows, timed the way `sparsetopk bench` times
// a cell (one CUDA graph of back-to-back calls over rotating buffers past L2,
// median replay / calls). Stand-alone, so it says what any top-k kernel of
// that shape must pay before it selects anything:
//   empty      a launch that does nothing
//   read-max   one block per row loads the row (16-byte loads), reduces the
//              maximum through shared memory and writes k slots per row
//   read-big   read-max with a ~230-byte parameter block and 256 B / 26 / 64 KB
//              of dynamic shared memory
// Build and run (on the GPU machine):
//   nvcc -O3 -arch=sm_90a -o /tmp/latency_floor ci/gpu/latency_floor.cu && /tmp/latency_floor
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "probe_check.h"

__global__ void empty_kernel() {}

// One block per row: the row's maximum (16-byte loads, a warp shuffle
// reduction, then across warps through red: THREADS / 32 words of shared
// memory), written to the row's k slots.
template <int THREADS>
__device__ __forceinline__ void read_max_row(const float* x, int width, int k, float* out, float* red) {
  const float* row = x + size_t(blockIdx.x) * width;
  float m = -INFINITY;
  for (int i = threadIdx.x * 4; i < width; i += THREADS * 4) {
    const float4 v = *reinterpret_cast<const float4*>(row + i);
    m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
  }
  for (int o = 16; o; o >>= 1) m = fmaxf(m, __shfl_xor_sync(~0u, m, o));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x < k) {
    float t = red[0];
    for (int w = 1; w < THREADS / 32; ++w) t = fmaxf(t, red[w]);
    out[size_t(blockIdx.x) * k + threadIdx.x] = t;
  }
}

template <int THREADS>
__global__ void __launch_bounds__(THREADS) read_max_kernel(const float* x, int width, int k, float* out) {
  __shared__ float red[THREADS / 32];
  read_max_row<THREADS>(x, width, k, out, red);
}

// the same with a large parameter block (TopkParams is ~230 bytes) and
// dynamic shared memory (the one-block kernel asks for ~26 KB at 1344 columns)
struct BigParams {
  const float* x;
  float* out;
  long long pad[26];
  int width, k;
};
template <int THREADS>
__global__ void __launch_bounds__(1024) read_max_big(BigParams p) {
  extern __shared__ float dyn[];
  read_max_row<THREADS>(p.x, p.width, p.k, p.out, dyn);
}

template <class F>
static float per_call_us(F launch, int calls, int reps) {
  cudaStream_t s;
  cudaStreamCreate(&s);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  for (int i = 0; i < calls; ++i) launch(i, s);
  cudaError_t e = cudaStreamEndCapture(s, &g);
  if (e == cudaSuccess) e = cudaGraphInstantiate(&ge, g, 0);
  if (e != cudaSuccess) {
    printf("capture: %s\n", cudaGetErrorString(e));
    cudaGetLastError();
    return -1.f;
  }
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> ts;
  for (int r = 0; r < reps + 2; ++r) {
    cudaEventRecord(a, s);
    cudaGraphLaunch(ge, s);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    if (r >= 2) ts.push_back(ms);
  }
  std::sort(ts.begin(), ts.end());
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  return ts[ts.size() / 2] * 1e3f / calls;
}

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  const int calls = 200, reps = 30, k = 16;
  printf("%-10s %6s %6s %10s\n", "kernel", "rows", "width", "us/call");
  printf("%-10s %6s %6s %10.2f\n", "empty", "-", "-",
         per_call_us([](int, cudaStream_t s) { empty_kernel<<<1, 32, 0, s>>>(); }, calls, reps));
  const int shapes[][2] = {{64, 1344}, {512, 1344}, {4096, 4096}};
  for (auto& sh : shapes) {
    const int rows = sh[0], width = sh[1];
    const size_t view = size_t(rows) * width;
    // rotate over views totalling > 2 x L2 (50 MB), as the bench does
    const int views = int(std::max<size_t>(2, (size_t(128) << 20) / (view * 4)));
    float *x, *out;
    CK(cudaMalloc(&x, view * views * 4));
    CK(cudaMalloc(&out, size_t(rows) * k * 4));
    CK(cudaMemset(x, 0, view * views * 4));
    auto run = [&](auto kern, int threads, const char* name) {
      const float us = per_call_us(
          [&](int i, cudaStream_t s) { kern<<<rows, threads, 0, s>>>(x + (i % views) * view, width, k, out); },
          calls, reps);
      printf("%-10s %6d %6d %10.2f\n", name, rows, width, us);
    };
    run(read_max_kernel<128>, 128, "read-max128");
    run(read_max_kernel<256>, 256, "read-max256");
    run(read_max_kernel<512>, 512, "read-max512");
    for (int smem : {256, 26 << 10, 64 << 10}) {
      CK(cudaFuncSetAttribute(read_max_big<256>, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10));
      BigParams bp{};
      bp.out = out;
      bp.width = width;
      bp.k = k;
      const float us = per_call_us(
          [&](int i, cudaStream_t s) {
            BigParams q = bp;
            q.x = x + (i % views) * view;
            read_max_big<256><<<rows, 256, smem, s>>>(q);
          },
          calls, reps);
      printf("%-10s %6d %6d %10.2f   (256 threads, %d-byte params, %d B dynamic smem)\n", "read-big", rows, width,
             us, int(sizeof(BigParams)), smem);
    }
    CK(cudaFree(x));
    CK(cudaFree(out));
  }
  return 0;
}
