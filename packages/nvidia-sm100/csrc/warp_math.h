// Integer helpers of the warp-per-row kernel (topk_warp.cuh; clz32 serves
// select_math.h too) that compile on the host as well (the packed-count
// decode, the survivor cut's threshold), so
// packages/nvidia-sm100/tests/test_warp_math_host.py can hold them to brute
// force on a CPU-only machine.
#pragma once

#include <stdint.h>

#include "sparsetopk/canonical.h"  // STK_HD

namespace stk_nv {

// Two lanes a packed compare: set.ge.u32.{b}f16x2 gives 0xffff in each half
// that passes. s, the 32-bit sum of such words, is L 0xffff + H 0xffff0000 =
// (L - H) 2^16 - L (mod 2^32), with L / H the low / high halves that passed;
// L + H comes back from it while L, H < 2^16 (the warp kernel sums 16 words:
// L, H <= 16).
STK_HD uint32_t half_counts(uint32_t s) {
  const uint32_t lo = (0u - s) & 0xffffu;
  const uint32_t hi = (lo - ((s + lo) >> 16)) & 0xffffu;
  return lo + hi;
}

STK_HD uint32_t umax32(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  return max(a, b);
#else
  return a > b ? a : b;
#endif
}

STK_HD int clz32(uint32_t x) {
#ifdef __CUDA_ARCH__
  return __clz(x);
#else
  return x ? __builtin_clz(x) : 32;
#endif
}

// The threshold key of warp_cut (topk_warp.cuh), for S > keep >= k distinct
// keys (score word hw << 32 | tie word lw): a key Lk <= the k-th largest
// with k <= (keys >= Lk) <= keep. Built bit by bit, a bit kept when at least
// k keys stay >= it, until at most keep do: first on the score word (enough
// unless more than keep - k keys tie with the k-th score), then on the tie
// word of the keys tied there, which ends at the exact k-th key at the
// latest. Only bits where those words differ are tried: the others take the
// common value, so the threshold stays <= every key. Each holder (a lane on
// the device) has Q keys, valid(i) for the ones it has (hw = 0 otherwise:
// scores are >= 1); red sums, maximises and ors across holders (warp
// reductions on the device; nothing for a single holder on the host).
template <int Q, class Valid, class Red>
STK_HD uint64_t cut_threshold(const uint32_t (&hw)[Q], const uint32_t (&lw)[Q], int S, int k, int keep,
                              Valid valid, const Red& red) {
  uint32_t hi = 0;
#pragma unroll
  for (int i = 0; i < Q; ++i) hi = umax32(hi, hw[i]);
  hi = red.max(hi);
  uint32_t var = 0;  // bits where some score differs from hi
#pragma unroll
  for (int i = 0; i < Q; ++i) var |= valid(i) ? hw[i] ^ hi : 0u;
  var = red.bor(var);
  uint32_t L = hi & ~var;  // every score is hi with some bits of var cleared
  int C = S;               // keys >= L
  while (var && C > keep) {
    const uint32_t bit = 0x80000000u >> clz32(var);
    var ^= bit;
    uint32_t n = 0;
#pragma unroll
    for (int i = 0; i < Q; ++i) n += hw[i] >= (L | bit);
    n = red.add(n);
    if (int(n) >= k) {
      L |= bit;
      C = int(n);
    }
  }
  uint32_t Lw = 0;
  if (C > keep) {
    // L is the k-th largest score and more than keep - k keys tie there:
    // the same on their tie words, above them the keys scoring above L
    uint32_t above = 0, ref = 0;
#pragma unroll
    for (int i = 0; i < Q; ++i) {
      above += hw[i] > L;
      ref = hw[i] == L ? umax32(ref, lw[i]) : ref;
    }
    above = red.add(above);
    ref = red.max(ref);
    uint32_t var2 = 0;
#pragma unroll
    for (int i = 0; i < Q; ++i) var2 |= hw[i] == L ? lw[i] ^ ref : 0u;
    var2 = red.bor(var2);
    Lw = ref & ~var2;
    while (var2 && C > keep) {
      const uint32_t bit = 0x80000000u >> clz32(var2);
      var2 ^= bit;
      uint32_t n = 0;
#pragma unroll
      for (int i = 0; i < Q; ++i) n += hw[i] == L && lw[i] >= (Lw | bit);
      n = above + red.add(n);
      if (int(n) >= k) {
        Lw |= bit;
        C = int(n);
      }
    }
  }
  return (uint64_t(L) << 32) | Lw;
}

}  // namespace stk_nv
