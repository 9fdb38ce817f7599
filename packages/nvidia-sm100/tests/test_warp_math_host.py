"""The warp kernel's host-compilable integer helpers (csrc/warp_math.h) on the
CPU, against brute force: `half_counts`, which recovers how many 16-bit halves
passed a packed compare from the 32-bit sum of the compare's 0xffff / 0 masks
(the count behind `warp_kth16`'s threshold), and `cut_threshold`, the key
below which `warp_cut` drops survivors before the sort (it must keep the top
k and at most 64 / 128 / 256 keys). Needs a host C++ compiler."""

from host_cxx import compile_and_run

SRC = r"""
#include <cstdint>
#include <cstdio>
#include <random>
#include "warp_math.h"
using stk_nv::half_counts;
int main() {
  uint64_t bad = 0, n = 0;
  // every (L, H) below 1024, and random ones below 2^16
  auto one = [&](uint32_t L, uint32_t H) {
    const uint32_t s = L * 0xffffu + H * 0xffff0000u;  // mod 2^32
    bad += half_counts(s) != L + H;
    ++n;
  };
  for (uint32_t L = 0; L < 1024; ++L)
    for (uint32_t H = 0; H < 1024; ++H) one(L, H);
  std::mt19937 g(1);
  for (int i = 0; i < 1000000; ++i) one(g() & 0xffffu, g() & 0xffffu);
  // as the kernel uses it: 16 words of two halves, each compared with the
  // threshold in both halves (0xffff where the half is >= it), the masks summed
  for (int t = 0; t < 200000; ++t) {
    const uint32_t th = g() & 0xffffu, spread = 1u + (g() & 0xffu);
    uint32_t s = 0, want = 0;
    for (int w = 0; w < 16; ++w) {
      const uint32_t lo = (th + g() % (2 * spread)) - spread, hi = (th + g() % (2 * spread)) - spread;
      const uint32_t m = ((lo & 0xffffu) >= th ? 0xffffu : 0u) | ((hi & 0xffffu) >= th ? 0xffff0000u : 0u);
      want += ((lo & 0xffffu) >= th) + ((hi & 0xffffu) >= th);
      s += m;
    }
    bad += half_counts(s) != want;
    ++n;
  }
  std::printf("%llu %llu\n", (unsigned long long)bad, (unsigned long long)n);
  return bad != 0;
}
"""


CUT_SRC = r"""
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>
#include "warp_math.h"
struct One {  // a single holder: no reduction
  uint32_t max(uint32_t x) const { return x; }
  uint32_t bor(uint32_t x) const { return x; }
  uint32_t add(uint32_t x) const { return x; }
};
int main() {
  std::mt19937 g(7);
  uint64_t bad = 0, n = 0, tie_steps = 0;
  for (int t = 0; t < 300000; ++t) {
    // k <= 64 cuts 65-256 keys to 64; k = 65-128 129-256 to 128 (held here
    // up to 512); k = 129-160 257-512 to 256; k = 161-224 257-1024 to 256
    const int mode = t % 4;
    const int keep = mode == 0 ? 64 : (mode == 1 ? 128 : 256);
    const int S = keep + 1 + int(g() % ((mode == 0 ? 256 : (mode == 3 ? 1024 : 512)) - keep));
    const int k = mode == 2 ? 129 + int(g() % 32) : (mode == 3 ? 161 + int(g() % 64) : 1 + int(g() % keep));
    uint32_t hw[1024] = {}, lw[1024] = {};
    // scores: spread, a few tied values, one ulp apart, 16-bit (low half 0)
    const int kind = int(g() % 4);
    const uint32_t base = 1u + (g() >> 1);
    std::vector<uint32_t> cols(4096);
    for (uint32_t j = 0; j < 4096; ++j) cols[j] = (t & 2) ? ~j : j;  // either tie rule's word
    std::shuffle(cols.begin(), cols.end(), g);
    for (int i = 0; i < S; ++i) {
      uint32_t h;
      if (kind == 0) h = 1u + g() % 0xfffffffeu;
      else if (kind == 1) h = base + g() % (1u + g() % 6u);
      else if (kind == 2) h = base + g() % uint32_t(S);
      else h = ((base >> 16) + g() % 64u) << 16 | 0u;
      hw[i] = h ? h : 1u;
      lw[i] = cols[i];  // distinct columns: distinct keys
    }
    const uint64_t Lk = stk_nv::cut_threshold<1024>(hw, lw, S, k, keep, [S](int i) { return i < S; }, One{});
    std::vector<uint64_t> keys(S);
    int C = 0;
    for (int i = 0; i < S; ++i) {
      keys[i] = (uint64_t(hw[i]) << 32) | lw[i];
      C += keys[i] >= Lk;
    }
    std::sort(keys.begin(), keys.end(), [](uint64_t a, uint64_t b) { return a > b; });
    tie_steps += uint32_t(Lk) != 0u;
    // the top k kept (Lk <= the k-th key), and no more than keep keys
    bad += !(Lk <= keys[k - 1] && C >= k && C <= keep);
    ++n;
  }
  std::printf("%llu %llu %llu\n", (unsigned long long)bad, (unsigned long long)n, (unsigned long long)tie_steps);
  return bad != 0;
}
"""



def test_half_counts_recovers_both_halves(tmp_path):
    r = compile_and_run(tmp_path, SRC)
    bad, n = r.stdout.split()
    assert r.returncode == 0 and bad == "0" and int(n) > 2_000_000, r.stdout + r.stderr


def test_cut_threshold_keeps_the_top_k(tmp_path):
    # random survivor sets of 65-256 keys (k <= 64, keep 64), 129-512 (k <= 128,
    # keep 128), 257-512 (k = 129-160, keep 256) and 257-1024 (k = 161-224, keep 256):
    # spread scores, a few tied values (the tie-word step must run), scores one
    # unit apart, 16-bit scores; tie words of either tie rule
    r = compile_and_run(tmp_path, CUT_SRC)
    bad, n, tie_steps = r.stdout.split()
    assert r.returncode == 0 and bad == "0" and int(n) == 300_000, r.stdout + r.stderr
    assert int(tie_steps) > 10_000, r.stdout  # the tie-word step ran often
