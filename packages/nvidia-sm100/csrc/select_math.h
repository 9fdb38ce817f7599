// Radix-select bookkeeping of the one-block and cluster selects that compiles
// on the host as well (the digit widths, the key bits a select may pin
// without a pass), so packages/nvidia-sm100/tests/test_select_math_host.py
// can run a select built on them against sorting on a CPU-only machine.
#pragma once

#include <stdint.h>

#include "sparsetopk/canonical.h"  // STK_HD, tie_word
#include "warp_math.h"             // clz32

namespace stk_nv {

namespace stk = sparsetopk;

// Digit widths of the 64-bit key, most significant first: 11,11,10 | 11,11,10.
STK_HD int digit_bits(int depth) { return (depth == 22 || depth == 54) ? 10 : 11; }

// The digit of a one-block select pass at depth: digit_bits at those depths;
// past skipped bits (KeySkip), the rest in as few passes of at most 11 bits
// as digit_bits would take, split evenly.
STK_HD int pass_bits(int depth) {
  const int rem = 64 - depth;
  return rem <= 11 ? rem : (rem <= 22 ? (rem + 1) >> 1 : digit_bits(depth));
}

// Radix select state.
struct SelState {
  uint64_t prefix;  // resolved top `depth` bits of the k-th key, low bits 0
  int depth;
  int kk;           // how many keys matching prefix still to take
};

// Key bits that every key of a row shares once the bits above them are
// pinned, so a pass over them would put every remaining key into one bin and
// cost a pass (a cluster barrier) for nothing:
//  - score_lo low bits of the ordered score: a bf16 score widens to float32
//    with 16 zero low bits, an fp16 one with 13 (canonical NaN, +-0 and
//    forced +inf too), so ordering makes them all zeros (non-negative score,
//    ordered sign bit 1) or all ones (negative) once the sign is pinned;
//  - tie_hi top bits of the tie word: every global index of the row lies in
//    [g(0), g(n - 1)] (g = j scale + offset is linear in j), so the bits
//    above the first one where the two ends differ are common (tie_val).
// (bf16 N(0,1) rows usually have exact ties at the k-th key, so their select
// runs through the tie word: in the cluster kernel at 40K columns 8 passes,
// 4 of them over bits that are shared; in the rows kernel at 1344 columns 6,
// 2 of them shared.)
struct KeySkip {
  int score_lo;
  int tie_hi;
  uint32_t tie_val;
};

// The tie-word part of ks for keys whose global indices lie between g_a and
// g_b (either order).
STK_HD void key_skip_span(KeySkip& ks, int64_t g_a, int64_t g_b, int tie) {
#ifdef __CUDA_ARCH__
  const int64_t lo = min(g_a, g_b), hi = max(g_a, g_b);
#else
  const int64_t lo = g_a < g_b ? g_a : g_b, hi = g_a < g_b ? g_b : g_a;
#endif
  if (lo >= 0 && hi <= int64_t(0xffffffffll)) {
    ks.tie_hi = clz32(uint32_t(lo) ^ uint32_t(hi));  // 32 when lo == hi (0 passes needed then anyway)
    ks.tie_val = stk::tie_word(uint32_t(lo), tie);
  }
}

// Pins the shared bits at st.depth (if any), moving depth past them (the tie
// word's to a multiple of Round bits: the cluster select's fixed digits); kk
// and the bin's count are unchanged, as a pass would leave them. A zero
// KeySkip skips nothing.
template <int Round>
STK_HD void skip_shared_bits(const KeySkip& ks, SelState& st) {
  if (st.depth >= 1 && st.depth < 32 && st.depth >= 32 - ks.score_lo) {
    if (!(st.prefix >> 63)) st.prefix |= ((1ull << (32 - st.depth)) - 1) << 32;  // negative: ones
    st.depth = 32;
  }
  const int top = 32 + ks.tie_hi / Round * Round;
  if (st.depth >= 32 && st.depth < top) {
    const int from = st.depth - 32, to = top - 32;  // tie-word bits [from, to) counted from its MSB
    const uint32_t mask = (0xffffffffu >> from) & (to >= 32 ? 0xffffffffu : ~(0xffffffffu >> to));
    st.prefix |= uint64_t(ks.tie_val & mask);
    st.depth = top;
  }
}

}  // namespace stk_nv
