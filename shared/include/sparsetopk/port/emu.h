// sparsetopk/port/emu.h — run wave kernels on a CPU, one workgroup at a time.
//
// Included by wave.h when STK_PORT_EMU is defined (plain host C++). Each
// work-item is a cooperative fiber (ucontext); wave and workgroup barriers are
// the only switch points, so a run is deterministic and single-threaded.
// Ballots and shuffles exchange through a per-lane slot between two wave
// barriers, exactly the convergence the real hardware needs: a wave-level
// call that not every lane of the wave reaches deadlocks here, and the
// emulator reports it instead of hanging. __shared__ variables are function
// statics (one workgroup runs at a time, so one instance suffices).
//
// It exists to test kernel logic (both wave widths: -DSTK_WAVE=32 or 64)
// where no GPU is present; it is not fast. Build it with -fvisibility=hidden
// (and -fno-gnu-unique on GCC) so that a wave32 and a wave64 build can live in
// one process without sharing the scheduler's statics.
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>

#include <string>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define STK_DEVICE inline
#define STK_KERNEL(block) extern "C" void

namespace stk {
namespace emu {

enum State : int { kRun = 0, kWaveWait = 1, kBlockWait = 2, kDone = 3 };

struct Fiber {
  ucontext_t ctx;
  int state;
};

typedef void (*Thunk)(const void*);

struct Sched {
  ucontext_t main;
  std::vector<Fiber> fibers;
  std::vector<char> stacks;
  std::vector<uint64_t> xchg;
  uint32_t cur = 0;
  uint32_t bid = 0;
  uint32_t block = 0;
  Thunk thunk = nullptr;
  const void* params = nullptr;
  std::string error;
};

inline Sched& sched() {
  static Sched s;
  return s;
}

struct Kernel {
  const char* name;
  Thunk thunk;
};
inline std::vector<Kernel>& kernels() {
  static std::vector<Kernel> k;
  return k;
}
struct Reg {
  Reg(const char* n, Thunk t) { kernels().push_back(Kernel{n, t}); }
};

inline void wait(int st) {
  Sched& s = sched();
  const uint32_t me = s.cur;
  s.fibers[me].state = st;
  swapcontext(&s.fibers[me].ctx, &s.main);
}

inline void fiber_entry() {
  Sched& s = sched();
  s.thunk(s.params);
  s.fibers[s.cur].state = kDone;  // uc_link returns to main
}

// Runs one kernel over `grid` workgroups of `block` work-items. Returns 0 or
// writes a message (divergent wave call, ...) and returns 1.
inline int launch(Thunk thunk, uint32_t grid, uint32_t block, const void* params, int wave) {
  Sched& s = sched();
  const size_t kStack = 128 * 1024;
  s.fibers.assign(block, Fiber());
  s.stacks.resize(kStack * block);
  s.xchg.assign(block, 0);
  s.block = block;
  s.thunk = thunk;
  s.params = params;
  s.error.clear();
  const uint32_t nwaves = (block + wave - 1) / wave;
  for (uint32_t b = 0; b < grid; ++b) {
    s.bid = b;
    for (uint32_t t = 0; t < block; ++t) {
      Fiber& f = s.fibers[t];
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = s.stacks.data() + kStack * t;
      f.ctx.uc_stack.ss_size = kStack;
      f.ctx.uc_link = &s.main;
      makecontext(&f.ctx, (void (*)())fiber_entry, 0);
      f.state = kRun;
    }
    for (;;) {
      for (uint32_t t = 0; t < block; ++t) {
        if (s.fibers[t].state != kRun) continue;
        s.cur = t;
        swapcontext(&s.main, &s.fibers[t].ctx);
      }
      // Everyone is now waiting or done.
      bool any_released = false, all_done = true, any_wave_wait = false;
      for (uint32_t w = 0; w < nwaves; ++w) {
        int n_wave = 0, n_other = 0;
        const uint32_t lo = w * wave, hi = lo + wave < block ? lo + wave : block;
        for (uint32_t t = lo; t < hi; ++t) {
          if (s.fibers[t].state == kWaveWait) ++n_wave; else ++n_other;
          if (s.fibers[t].state != kDone) all_done = false;
        }
        if (n_wave == 0) continue;
        any_wave_wait = true;
        if (n_other != 0) {
          char buf[160];
          snprintf(buf, sizeof buf,
                   "divergent wave-level call: block %u wave %u has %d lanes at a wave op, %d elsewhere",
                   b, w, n_wave, n_other);
          s.error = buf;
          return 1;
        }
        for (uint32_t t = lo; t < hi; ++t) s.fibers[t].state = kRun;
        any_released = true;
      }
      if (all_done) break;
      if (any_released) continue;
      if (!any_wave_wait) {  // block barrier: every live item waits there
        for (uint32_t t = 0; t < block; ++t)
          if (s.fibers[t].state == kBlockWait) s.fibers[t].state = kRun;
        continue;
      }
      s.error = "emulator deadlock";
      return 1;
    }
  }
  return 0;
}

}  // namespace emu

inline uint32_t thread_idx() { return emu::sched().cur; }
inline uint32_t block_idx() { return emu::sched().bid; }
inline uint32_t lane_id() { return emu::sched().cur % STK_WAVE; }
#if STK_WAVE == 64
typedef uint64_t wave_mask_t;
#else
typedef uint32_t wave_mask_t;
#endif
inline void wave_sync() { emu::wait(emu::kWaveWait); }
inline void block_sync() { emu::wait(emu::kBlockWait); }
inline wave_mask_t wave_ballot(bool p) {
  emu::Sched& s = emu::sched();
  const uint32_t me = s.cur, base = me - me % STK_WAVE;
  s.xchg[me] = p ? 1u : 0u;
  wave_sync();
  wave_mask_t m = 0;
  for (uint32_t l = 0; l < STK_WAVE && base + l < s.block; ++l)
    if (s.xchg[base + l]) m |= (wave_mask_t)1 << l;
  wave_sync();
  return m;
}
inline uint32_t shfl(uint32_t v, uint32_t src) {
  emu::Sched& s = emu::sched();
  const uint32_t me = s.cur, base = me - me % STK_WAVE;
  s.xchg[me] = v;
  wave_sync();
  const uint32_t r = (uint32_t)s.xchg[base + (src % STK_WAVE)];
  wave_sync();
  return r;
}
inline uint32_t atomic_add_u32_local(uint32_t* p, uint32_t v) {
  const uint32_t o = *p;
  *p = o + v;
  return o;
}

}  // namespace stk

#define STK_EMU_REGISTER(name, ParamT)                                               \
  static void name##_emu_thunk(const void* p) { name(*static_cast<const ParamT*>(p)); } \
  static ::stk::emu::Reg name##_emu_reg(#name, name##_emu_thunk);

// The C entry point of an emulator build (one per shared library).
#define STK_EMU_DEFINE_LAUNCHER()                                                        \
  extern "C" __attribute__((visibility("default"))) int stk_emu_launch(const char* name, uint32_t grid, uint32_t block,         \
                                const void* params, char* err, int err_len) {            \
    for (const auto& k : ::stk::emu::kernels())                                          \
      if (strcmp(k.name, name) == 0) {                                                   \
        const int rc = ::stk::emu::launch(k.thunk, grid, block, params, STK_WAVE);       \
        if (rc && err && err_len > 0) snprintf(err, err_len, "%s", ::stk::emu::sched().error.c_str()); \
        return rc;                                                                       \
      }                                                                                  \
    if (err && err_len > 0) snprintf(err, err_len, "no kernel named %s", name);          \
    return 2;                                                                            \
  }                                                                                      \
  extern "C" __attribute__((visibility("default"))) int stk_emu_wave_size() { return STK_WAVE; }
