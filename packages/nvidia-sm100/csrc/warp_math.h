// Integer helpers of the warp-per-row kernel (topk_warp.cuh) that compile on
// the host as well, so packages/nvidia-sm100/tests/test_warp_math_host.py can
// hold them to brute force on a CPU-only machine.
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

}  // namespace stk_nv
