// Hopper/Blackwell transfers completed on an mbarrier (sm_90+ only):
//  - 1-D bulk copies (cp.async.bulk, the TMA engine without a tensor map)
//    from global into this block's shared memory; the copy engine holds the
//    bytes in flight, not registers. Sizes and both addresses must be
//    multiples of 16 bytes.
//  - st.async stores into another block of the cluster, counted on that
//    block's barrier, so a receiver waits for its own data only.
#pragma once

#include <stdint.h>

namespace stk_nv {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One thread: arm the barrier (arrival count 1), then make the init visible
// to the async proxy before any copy can signal it.
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One thread: a copy of `bytes` from src (global) to dst (shared), which
// completes the barrier's current phase (the arrival and the byte count).
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// Whether the phase with this parity has completed (a bounded wait).
// Cluster: with cluster-scope acquire, so the st_async data of the phase are
// visible after it.
template <bool Cluster>
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  if constexpr (Cluster)
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                 " selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  else
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  return done != 0;
}

// Every waiting thread: spin until the phase with this parity has completed.
template <bool Cluster = false>
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  while (!mbar_try_wait<Cluster>(bar, parity)) {
  }
}

// The same barrier in the cluster's block `rank` (a shared::cluster address).
__device__ __forceinline__ uint32_t cluster_addr(const void* p, int rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr(p)), "r"(rank));
  return r;
}

// One thread of the receiving block: this phase completes once `bytes` have
// arrived through st_async (before or after this call: the count may dip
// below zero meanwhile).
__device__ __forceinline__ void mbar_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cluster.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

// 16 bytes into another block's shared memory (dst: cluster_addr), counted
// on that block's barrier rbar (cluster_addr): no cluster barrier needed.
__device__ __forceinline__ void st_async16(uint32_t dst, const uint4& v, uint32_t rbar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(dst),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(rbar)
               : "memory");
}

__device__ __forceinline__ void st_async8(uint32_t dst, uint64_t v, uint32_t rbar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];" ::"r"(dst), "l"(v), "r"(rbar)
               : "memory");
}

__device__ __forceinline__ void st_async4(uint32_t dst, uint32_t v, uint32_t rbar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(dst), "r"(v), "r"(rbar)
               : "memory");
}

// Before a bulk copy overwrites shared memory that threads read with ordinary
// loads (after a barrier): order those reads before the async-proxy writes.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

}  // namespace stk_nv
