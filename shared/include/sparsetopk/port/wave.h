// sparsetopk/port/wave.h — the portability layer over wave intrinsics.
//
// One kernel source, three targets:
//   * HIP (clang -x hip, with or without ROCm headers; -nogpuinc works): AMD
//     gfx9 wave64 (gfx942, gfx950). Only the handful of device declarations
//     the kernels use are provided here, mapped to clang's amdgcn builtins.
//   * CUDA (nvcc or clang -x cuda): wave = warp of 32.
//   * STK_PORT_EMU (plain host C++): a cooperative-fiber emulator of one
//     workgroup at a time (see emu.h), used to run the kernel logic on a CPU.
//
// The wave width is a compile-time constant, STK_WAVE (64 on AMD, 32 on
// NVIDIA; the emulator takes it from -DSTK_WAVE=32|64). Kernels use only:
//   stk::lane_id(), stk::wave_ballot(pred) -> wave_mask_t, stk::popc(mask),
//   stk::lanemask_lt(), stk::shfl(u32, src_lane), stk::wave_sync(),
//   stk::block_sync(), stk::atomic_add_u32_local(p, v) (workgroup-scope
//   counter; results never depend on the order of the adds),
//   stk::thread_idx(), stk::block_idx(), STK_KERNEL(block) for entry points.
// Every wave-level call must be reached by every lane of the wave (the
// emulator checks this: a divergent call deadlocks it and it reports so).
#pragma once

#include <stdint.h>

#if defined(STK_PORT_EMU)
// ---------------------------------------------------------------- emulator
#ifndef STK_WAVE
#define STK_WAVE 32
#endif
#include "emu.h"

#elif defined(__HIP__)
// ---------------------------------------------------------------- HIP/AMD
#ifndef __HIPCC__
#define __HIPCC__ 1  // canonical.h keys its __host__ __device__ on this
#endif
#if !defined(__HIP_INCLUDE_HIP_HIP_RUNTIME_H) && !defined(__global__)
// -nogpuinc: no HIP headers, so declare the attributes ourselves.
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#endif
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif
#ifndef STK_WAVE
#define STK_WAVE 64  // gfx9 (gfx942, gfx950) is wave64 only
#endif
#define STK_KERNEL(block) \
  extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(block, block))) void
#define STK_DEVICE __device__ __forceinline__

namespace stk {
#if STK_WAVE == 64
typedef uint64_t wave_mask_t;
#else
typedef uint32_t wave_mask_t;
#endif
STK_DEVICE uint32_t thread_idx() { return __builtin_amdgcn_workitem_id_x(); }
STK_DEVICE uint32_t block_idx() { return __builtin_amdgcn_workgroup_id_x(); }
STK_DEVICE uint32_t lane_id() {
#if STK_WAVE == 64
  return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
#else
  return __builtin_amdgcn_mbcnt_lo(~0u, 0u);
#endif
}
STK_DEVICE wave_mask_t wave_ballot(bool p) {
#if __has_builtin(__builtin_amdgcn_ballot_w64)
#if STK_WAVE == 64
  return __builtin_amdgcn_ballot_w64(p);
#else
  return __builtin_amdgcn_ballot_w32(p);
#endif
#else
  // Older ROCm clang (e.g. ROCm 5.x's clang 15) lacks the ballot builtins;
  // an integer compare "!= 0" (predicate 33) across the wave is the same mask.
  return (wave_mask_t)__builtin_amdgcn_uicmp((unsigned)p, 0u, 33);
#endif
}
STK_DEVICE uint32_t shfl(uint32_t v, uint32_t src) {
  return (uint32_t)__builtin_amdgcn_ds_bpermute((int)(src << 2), (int)v);
}
STK_DEVICE void wave_sync() {  // order LDS traffic between lanes of one wave
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
STK_DEVICE void block_sync() {  // __syncthreads
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
STK_DEVICE uint32_t atomic_add_u32_local(uint32_t* p, uint32_t v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
}
}  // namespace stk

#elif defined(__CUDACC__)
// ---------------------------------------------------------------- CUDA
#ifndef STK_WAVE
#define STK_WAVE 32
#endif
#if STK_WAVE != 32
#error "CUDA waves (warps) are 32 lanes"
#endif
#define STK_KERNEL(block) extern "C" __global__ void __launch_bounds__(block)
#define STK_DEVICE __device__ __forceinline__

namespace stk {
typedef uint32_t wave_mask_t;
STK_DEVICE uint32_t thread_idx() { return threadIdx.x; }
STK_DEVICE uint32_t block_idx() { return blockIdx.x; }
STK_DEVICE uint32_t lane_id() { return threadIdx.x & 31u; }
STK_DEVICE wave_mask_t wave_ballot(bool p) { return __ballot_sync(0xffffffffu, p); }
STK_DEVICE uint32_t shfl(uint32_t v, uint32_t src) { return __shfl_sync(0xffffffffu, v, (int)src); }
STK_DEVICE void wave_sync() { __syncwarp(); }
STK_DEVICE void block_sync() { __syncthreads(); }
STK_DEVICE uint32_t atomic_add_u32_local(uint32_t* p, uint32_t v) { return atomicAdd(p, v); }
}  // namespace stk
#else
#error "sparsetopk/port/wave.h: compile as HIP, CUDA, or host with -DSTK_PORT_EMU"
#endif

namespace stk {
constexpr int kWave = STK_WAVE;

// Lanes below this one (for ordered ballot prefix counts).
STK_DEVICE wave_mask_t lanemask_lt() {
  const uint32_t l = lane_id();
  return (wave_mask_t)((((uint64_t)1) << l) - 1u);
}
#if defined(__CUDACC__) && !defined(STK_PORT_EMU) && !defined(__HIP__)
STK_DEVICE uint32_t popc(uint64_t m) { return (uint32_t)__popcll(m); }
STK_DEVICE uint32_t popc(uint32_t m) { return (uint32_t)__popc(m); }
STK_DEVICE uint32_t ffs_lane(wave_mask_t m) { return (uint32_t)(__ffsll((long long)m) - 1); }
#else
STK_DEVICE uint32_t popc(uint64_t m) { return (uint32_t)__builtin_popcountll(m); }
STK_DEVICE uint32_t popc(uint32_t m) { return (uint32_t)__builtin_popcount(m); }
STK_DEVICE uint32_t ffs_lane(wave_mask_t m) {  // lowest set lane; m != 0
  return (uint32_t)__builtin_ctzll((uint64_t)m);
}
#endif
STK_DEVICE uint64_t shfl64(uint64_t v, uint32_t src) {
  const uint32_t lo = shfl((uint32_t)v, src);
  const uint32_t hi = shfl((uint32_t)(v >> 32), src);
  return ((uint64_t)hi << 32) | lo;
}
// Wave-wide inclusive prefix sum (Hillis-Steele over shuffles).
STK_DEVICE uint32_t wave_inclusive_sum(uint32_t v) {
  const uint32_t l = lane_id();
#pragma unroll
  for (uint32_t d = 1; d < (uint32_t)kWave; d <<= 1) {
    const uint32_t o = shfl(v, l >= d ? l - d : l);
    if (l >= d) v += o;
  }
  return v;
}
STK_DEVICE uint64_t wave_min_u64(uint64_t v) {
  const uint32_t l = lane_id();
#pragma unroll
  for (uint32_t d = 1; d < (uint32_t)kWave; d <<= 1) {
    const uint64_t o = shfl64(v, l ^ d);
    v = o < v ? o : v;
  }
  return v;
}
}  // namespace stk
