#include "kda/serve/interpreter_lock.hpp"

#include <limits>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <cstdint>

#include "kda/faults.hpp"

namespace kda::serve {

namespace {
constexpr int64_t kNobodyWaits = std::numeric_limits<int64_t>::max();

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}
}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void spin_until(int64_t deadline_ns) {
  while (now_ns() < deadline_ns) {
    for (int spin = 0; spin < 32; ++spin) cpu_relax();
  }
}

void poll_until(int64_t deadline_ns) {
  constexpr int64_t kSpinTailNs = 200'000;
  const int64_t sleep_until_ns = deadline_ns - kSpinTailNs;
  if (sleep_until_ns > now_ns()) {
    std::this_thread::sleep_until(std::chrono::steady_clock::time_point(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::nanoseconds(sleep_until_ns))));
  }
  spin_until(deadline_ns);
}

InterpreterLock::InterpreterLock(std::chrono::nanoseconds switch_interval)
    : switch_interval_ns_(switch_interval.count()), oldest_wait_start_ns_(kNobodyWaits) {}

std::chrono::nanoseconds InterpreterLock::acquire() {
  const int64_t start = now_ns();
  if (mutex_.try_lock()) {
    acquisitions_.fetch_add(1, std::memory_order_acq_rel);
    return std::chrono::nanoseconds(0);
  }
  waiters_.fetch_add(1, std::memory_order_acq_rel);
  int64_t oldest = oldest_wait_start_ns_.load(std::memory_order_acquire);
  while (start < oldest &&
         !oldest_wait_start_ns_.compare_exchange_weak(oldest, start, std::memory_order_acq_rel)) {
  }
  mutex_.lock();
  if (waiters_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    oldest_wait_start_ns_.store(kNobodyWaits, std::memory_order_release);
  } else {
    // Another thread still waits; it began no earlier than now for the purpose of switching.
    oldest_wait_start_ns_.store(now_ns(), std::memory_order_release);
  }
  acquisitions_.fetch_add(1, std::memory_order_acq_rel);
  return std::chrono::nanoseconds(now_ns() - start);
}

void InterpreterLock::release() { mutex_.unlock(); }

std::chrono::nanoseconds InterpreterLock::yield_if_requested() {
  if (waiters_.load(std::memory_order_acquire) == 0) return std::chrono::nanoseconds(0);
  const int64_t oldest = oldest_wait_start_ns_.load(std::memory_order_acquire);
  if (oldest == kNobodyWaits || now_ns() - oldest < switch_interval_ns_) {
    return std::chrono::nanoseconds(0);
  }
  // CPython's FORCE_SWITCHING: the dropping thread does not retake the lock before another
  // thread has taken it.
  const uint64_t before = acquisitions_.load(std::memory_order_acquire);
  forced_switches_.fetch_add(1, std::memory_order_relaxed);
  release();
  // Planted fault lock_yield_retakes: the holder offers the lock with a yield of its time slice
  // and takes it straight back, without waiting for a waiter to have taken it (the convoy of the
  // old GIL: the woken waiter usually finds the lock taken again and keeps waiting).
  if (fault("lock_yield_retakes")) {
    std::this_thread::yield();
    return acquire();
  }
  // Planted fault lock_switch_gives_up (written after the lock_handoff scenario): the holder waits
  // for a waiter to take the lock for 20 us at most ("a bounded spin"), then takes it back; a
  // waiter woken from its futex usually needs longer.
  const int64_t give_up = fault("lock_switch_gives_up") ? now_ns() + 20'000 : INT64_MAX;
  while (acquisitions_.load(std::memory_order_acquire) == before &&
         waiters_.load(std::memory_order_acquire) > 0 && now_ns() < give_up) {
    std::this_thread::yield();
  }
  return acquire();
}

}  // namespace kda::serve
