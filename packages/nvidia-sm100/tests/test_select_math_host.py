"""The radix-select bookkeeping of csrc/select_math.h on the CPU: the
kernels' pass loops run on it (select_passes in topk_kernels.cuh: a
histogram of the next pass_bits digit over the keys matching the prefix,
the bin of the kk-th key, then the shared bits pinned; the cluster select:
fixed 8-bit digits, the shared bits pinned before each pass) over rows built
as the kernels build them (ordered canonical scores of fp32 / bf16 / fp16
values, tie words of g = j scale + offset under either tie rule), against
sorting: the keys at or above the threshold found must be the top k. With
skip_shared_bits and without; the skip must never take more passes, and
fewer where keys tie. Needs a host C++ compiler."""

from host_cxx import compile_and_run

SRC = r"""
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include "select_math.h"
namespace stk = sparsetopk;
using namespace stk_nv;

static uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// the threshold T of the top k, as select_passes finds it (one pass: one
// histogram): the keys >= T are the top k (T is the k-th key, or the prefix of
// a bin taken whole)
template <int Round>
static uint64_t kth(const std::vector<uint64_t>& keys, int k, const KeySkip& ks, bool skip, int* passes) {
  SelState st{0ull, 0, k};
  std::vector<uint32_t> hist(2048);
  while (true) {
    if (skip && Round > 1) skip_shared_bits<Round>(ks, st);  // the cluster select: before each pass
    const int dbits = Round > 1 ? Round : pass_bits(st.depth);
    const int shift = 64 - st.depth - dbits;
    std::fill(hist.begin(), hist.end(), 0u);
    for (uint64_t key : keys)
      if (st.depth == 0 || ((key ^ st.prefix) >> (64 - st.depth)) == 0) ++hist[(key >> shift) & ((1u << dbits) - 1)];
    ++*passes;
    int above = 0, b = (1 << dbits) - 1;
    for (; b >= 0; --b) {
      if (above + int(hist[b]) >= st.kk) break;
      above += int(hist[b]);
    }
    const int E = int(hist[b]);
    st.kk -= above;
    st.prefix |= uint64_t(b) << shift;
    st.depth += dbits;
    if (E == st.kk || st.depth >= 64) return st.prefix;
    if (skip && Round == 1) skip_shared_bits<1>(ks, st);  // select_passes: after each pass
    if (st.depth >= 64) return ~0ull;  // (never: distinct keys)
  }
}

int main() {
  std::mt19937 g(11);
  std::normal_distribution<float> nd;
  uint64_t bad = 0, n = 0, passes_skip = 0, passes_plain = 0;
  for (int t = 0; t < 6000; ++t) {
    const int dtype = t % 3;  // fp32, bf16, fp16
    const int kind = (t / 3) % 5;  // N(0,1), small integers (heavy ties), negative band, specials, mixed signs
    const int64_t scale = 1 + int64_t(g() % 8), offset = int64_t(g() % uint32_t(scale));
    const int tie = int(g() % 2);
    const int n_cols = 1 + int(g() % 5000);
    const int64_t base = (t % 7 == 0) ? int64_t(g() % 3000000) * scale : 0;  // shard views far out
    std::vector<uint64_t> keys(n_cols);
    for (int j = 0; j < n_cols; ++j) {
      float v;
      if (kind == 0) v = nd(g);
      else if (kind == 1) v = float(1 + int(g() % 4)) * 0.5f;
      else if (kind == 2) v = -2.0f - 0.01f * float(g() % 8);
      else if (kind == 3) {
        const float sp[6] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.5f};
        v = sp[g() % 6];
      } else v = (g() % 2 ? 1.0f : -1.0f) * float(g() % 3);
      uint32_t b = f32_bits(v);
      if (dtype == 1) b = stk::bf16_to_f32_bits(uint16_t((b + 0x7fffu + ((b >> 16) & 1u)) >> 16));
      if (dtype == 2) {  // round through an fp16 value of the same magnitude class (exact widening)
        b &= 0xffffe000u;
        const uint32_t e = (b >> 23) & 0xffu;
        if (e != 0xffu && e != 0u && (e < 113u || e > 142u)) b = (b & 0x80000000u) | 0x3f800000u;
        if (e == 0u) b &= 0x80000000u;
      }
      const bool forced = (kind == 4) && j < 3;
      const uint32_t gidx = uint32_t(base + int64_t(j) * scale + offset);
      keys[j] = stk::column_key(b, gidx, forced, tie);
    }
    const int score_lo = dtype == 1 ? 16 : (dtype == 2 ? 13 : 0);
    KeySkip ks{score_lo, 0, 0u};
    key_skip_span(ks, base + offset, base + int64_t(n_cols - 1) * scale + offset, tie);
    std::vector<uint64_t> sorted = keys;
    std::sort(sorted.begin(), sorted.end(), [](uint64_t a, uint64_t b) { return a > b; });
    for (int rep = 0; rep < 3; ++rep) {
      const int k = rep == 0 ? 1 : (rep == 1 ? 1 + int(g() % uint32_t(n_cols)) : n_cols);
      int p0 = 0, p1 = 0, p2 = 0, p3 = 0;
      const uint64_t a = kth<1>(keys, k, ks, false, &p0);
      const uint64_t b = kth<1>(keys, k, ks, true, &p1);
      const uint64_t c = kth<8>(keys, k, ks, true, &p2);  // the cluster select's 8-bit digits
      const uint64_t d = kth<8>(keys, k, ks, false, &p3);
      auto ok = [&](uint64_t T) { return T <= sorted[k - 1] && (k == n_cols || T > sorted[k]); };
      bad += !ok(a) || !ok(b) || !ok(c) || !ok(d) || p1 > p0 || p2 > p3;
      passes_plain += p0;
      passes_skip += p1;
      ++n;
    }
  }
  std::printf("%llu %llu %llu %llu\n", (unsigned long long)bad, (unsigned long long)n,
              (unsigned long long)passes_plain, (unsigned long long)passes_skip);
  return bad != 0;
}
"""



def test_select_with_shared_bits_finds_the_kth_key(tmp_path):
    r = compile_and_run(tmp_path, SRC)
    bad, n, plain, skip = r.stdout.split()
    assert r.returncode == 0 and bad == "0" and int(n) == 18_000, r.stdout + r.stderr
    assert int(skip) < 0.8 * int(plain), r.stdout  # the tied rows skip passes
