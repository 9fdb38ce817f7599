// The canonical order of SPEC §1 in native code, shared by every CUDA and HIP
// source (and host C++). One definition, so no kernel can drift from it.
//
//   canonical(x) = +inf if forced; -inf if NaN; +0 if x == 0; else float(x)
//   key(x, g)    = ordered_u32(canonical(x)) << 32 | (tie low ? ~g : g)
//
// Larger keys rank first. Keys of distinct global columns are distinct, so
// the top-k under this key is unique: the answer every backend must give.
#pragma once

#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define STK_HD __host__ __device__ __forceinline__
#else
#define STK_HD inline
#endif

namespace sparsetopk {

// Bit patterns of the float32 values the canonical map produces.
constexpr uint32_t kPosInfBits = 0x7f800000u;
constexpr uint32_t kNegInfBits = 0xff800000u;
constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kSignBit = 0x80000000u;

// Ordered images of the canonical extremes (ordered_u32 of +inf / -inf).
constexpr uint32_t kOrderedPosInf = 0xff800000u;
constexpr uint32_t kOrderedNegInf = 0x007fffffu;

// Sentinel below every valid key (an invalid column, an empty slot). A valid
// key is at least kOrderedNegInf << 32, so 0 can never collide with one.
constexpr uint64_t kInvalidKey = 0ull;

// Largest global index an int32 output can carry (-1 is the padding).
constexpr int64_t kMaxGlobalIndex = 0x7fffffffll - 1;

enum TieBreak : int { kTieLow = 0, kTieHigh = 1 };
enum Order : int { kOrderRank = 0, kOrderIndex = 1, kOrderAny = 2 };

// Monotone map float32 bits -> uint32: flip every bit of a negative float,
// only the sign bit of a non-negative one. Unsigned order == float order.
STK_HD uint32_t ordered_u32(uint32_t bits) {
  return (bits & kSignBit) ? ~bits : (bits | kSignBit);
}

STK_HD uint32_t unordered_u32(uint32_t ordered) {
  return (ordered & kSignBit) ? (ordered & kAbsMask) : ~ordered;
}

// Canonical float32 bits of a raw float32 score (not forced).
STK_HD uint32_t canonical_bits(uint32_t bits) {
  const uint32_t mag = bits & kAbsMask;
  if (mag > kPosInfBits) return kNegInfBits;  // NaN ranks last
  if (mag == 0u) return 0u;                   // -0 == +0
  return bits;
}

// ordered_u32(canonical_bits(bits)) in a few branch-free operations (hot
// loops): order first, then map NaN (above ordered +inf, or below ordered
// -inf) to ordered -inf and ordered -0 to ordered +0.
STK_HD uint32_t ordered_canonical_u32(uint32_t bits) {
  uint32_t u = bits ^ (uint32_t(int32_t(bits) >> 31) | kSignBit);
  u = (u - kOrderedNegInf) > (kOrderedPosInf - kOrderedNegInf) ? kOrderedNegInf : u;
  return u == 0x7fffffffu ? kSignBit : u;
}

// The same for bits known not to be NaN (a score that passed a compare
// against a threshold above -inf): order, then ordered -0 to ordered +0,
// without the NaN map. (For NaN bits the result is not the canonical image.)
STK_HD uint32_t ordered_nonnan_u32(uint32_t bits) {
  const uint32_t u = bits ^ (uint32_t(int32_t(bits) >> 31) | kSignBit);
  return u == kAbsMask ? kSignBit : u;
}

// bfloat16 / float16 widen exactly to float32; callers convert first, then
// call canonical_bits. These helpers keep the widening in one place.
STK_HD uint32_t bf16_to_f32_bits(uint16_t h) { return uint32_t(h) << 16; }

STK_HD uint32_t f16_to_f32_bits(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) return sign | 0x7f800000u | (man << 13);  // inf / NaN
  if (exp == 0u) {
    if (man == 0u) return sign;  // zero
    // Subnormal: normalise (exact in float32).
    exp = 127 - 15 + 1;
    while ((man & 0x400u) == 0u) {
      man <<= 1;
      --exp;
    }
    man &= 0x3ffu;
    return sign | (exp << 23) | (man << 13);
  }
  return sign | ((exp + 127 - 15) << 23) | (man << 13);
}

// The low word of the key: larger wins, so "low" stores ~g.
STK_HD uint32_t tie_word(uint32_t g, int tie) { return tie == kTieLow ? ~g : g; }

STK_HD uint32_t tie_word_to_index(uint32_t w, int tie) { return tie == kTieLow ? ~w : w; }

STK_HD uint64_t make_key(uint32_t ordered, uint32_t g, int tie) {
  return (uint64_t(ordered) << 32) | tie_word(g, tie);
}

// Key of valid global column g holding raw float32 bits, with forcing applied.
STK_HD uint64_t column_key(uint32_t raw_bits, uint32_t g, bool forced, int tie) {
  const uint32_t c = forced ? kPosInfBits : canonical_bits(raw_bits);
  return make_key(ordered_u32(c), g, tie);
}

STK_HD uint32_t key_index(uint64_t key, int tie) {
  return tie_word_to_index(uint32_t(key), tie);
}

// Canonical float32 bits stored in a key (for the values output).
STK_HD uint32_t key_value_bits(uint64_t key) { return unordered_u32(uint32_t(key >> 32)); }

// Row geometry of SPEC §1, identical in every kernel.
//   start_r = clamp(starts[r], 0, width);  W_r = width - start_r
//   L_r = clamp(lengths[r], 0, W_r * scale)
//   column j valid iff j < W_r and j * scale + offset < L_r
struct RowGeometry {
  int64_t start;     // first buffer column of the row
  int64_t n_cols;    // number of valid buffer columns j (0..n_cols-1)
  int64_t length;    // L_r, the clamped global length
};

STK_HD int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

STK_HD RowGeometry row_geometry(int64_t width, int64_t start_raw, int64_t length_raw,
                                int64_t scale, int64_t offset) {
  RowGeometry rg;
  rg.start = clamp64(start_raw, 0, width);
  const int64_t w = width - rg.start;
  rg.length = clamp64(length_raw, 0, w * scale);
  // valid j: j*scale + offset < L  <=>  j < ceil((L - offset) / scale)
  const int64_t lim = rg.length - offset;
  // (scale 1, the common case, skips a 64-bit division: ~100s of GPU cycles)
  const int64_t nj = lim <= 0 ? 0 : scale == 1 ? lim : (lim + scale - 1) / scale;
  rg.n_cols = nj < w ? nj : w;
  return rg;
}

// Forced iff g < force_begin or g >= L - force_end.
STK_HD bool is_forced(int64_t g, int64_t length, int64_t force_begin, int64_t force_end) {
  return g < force_begin || g >= length - force_end;
}

}  // namespace sparsetopk
