// kda/serve/interpreter_lock.hpp — a process-wide "interpreter lock" modelled on CPython's GIL.
//
// Python-level work in the server (the prefill worker's per-stage code, the transfer thread's
// per-layer bookkeeping) runs holding this lock, a loupe::trace::TracedMutex named
// "interpreter_lock", so loupe's lock analysis sees every contended wait, its holder and the
// holder's zone. Like CPython (Python/ceval_gil.c), a thread that has waited for the switch
// interval (5 ms by default, sys.getswitchinterval()) asks the holder to drop the lock, and the
// holder honours the request only at its next eval-breaker point — here, yield_if_requested()
// between stages. C code that blocks without releasing the lock (the incident's spinning MoE
// dispatch) has no such point, so waiters stay blocked until it returns.
// Thread-safety: every method may be called from any thread; release() and yield_if_requested()
// only by the holder.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "loupe/trace.hpp"

namespace kda::serve {

class InterpreterLock {
 public:
  explicit InterpreterLock(std::chrono::nanoseconds switch_interval);

  // Blocks until the lock is held; returns the time spent waiting.
  std::chrono::nanoseconds acquire();
  void release();
  // The eval-breaker point: when a waiter has waited at least the switch interval, drops the lock,
  // lets a waiter take it, and takes it back (returning the time spent getting it back).
  std::chrono::nanoseconds yield_if_requested();

  uint64_t forced_switches() const { return forced_switches_.load(std::memory_order_relaxed); }

 private:
  loupe::trace::TracedMutex mutex_{"interpreter_lock"};
  const int64_t switch_interval_ns_;
  std::atomic<int> waiters_{0};
  // When the longest-waiting thread began waiting (steady clock ns); INT64_MAX when none waits.
  std::atomic<int64_t> oldest_wait_start_ns_;
  std::atomic<uint64_t> acquisitions_{0};
  std::atomic<uint64_t> forced_switches_{0};
};

// Monotonic nanoseconds (std::chrono::steady_clock).
int64_t now_ns();

// Spins on the CPU (with a pause hint) until now_ns() reaches `deadline_ns`.
void spin_until(int64_t deadline_ns);

// Polls a deadline the way the dispatch polls its remote counter: sleeps until shortly before it,
// then spins the rest. A pure spin would hold a core for the whole wait, and on a shared 2-core
// machine a preempted spinner overshoots by whole scheduler slices; sleeping keeps the wait's
// length exact and leaves the effect to the lock, not to core contention.
void poll_until(int64_t deadline_ns);

}  // namespace kda::serve
