#include "kda/serve/handoff.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>

#include "loupe/error.hpp"

namespace kda::serve {

namespace {

double seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

// REQUIRES: `sorted` is not empty and ascending; 0 <= fraction <= 1.
double quantile_s(const std::vector<int64_t>& sorted, double fraction) {
  const double position = fraction * static_cast<double>(sorted.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double weight = position - static_cast<double>(below);
  return seconds(sorted[below]) * (1.0 - weight) + seconds(sorted[above]) * weight;
}

int64_t sum_of(const std::vector<int64_t>& values) {
  int64_t sum = 0;
  for (int64_t value : values) sum += value;
  return sum;
}

int64_t max_of(const std::vector<int64_t>& values) {
  int64_t largest = 0;
  for (int64_t value : values) largest = std::max(largest, value);
  return largest;
}

}  // namespace

ConsumerThread current_consumer_thread() {
  return ConsumerThread{static_cast<pid_t>(::syscall(SYS_gettid)), ::pthread_self()};
}

std::optional<ConsumerTimes> read_consumer_times(const ConsumerThread& thread) {
  // schedstat's running time is brought up to date only when the thread stops running or at a
  // scheduler tick, so a consumer reading its own just after it woke would count the spell since
  // as blocked; its CPU-time clock includes the spell.
  clockid_t clock = 0;
  timespec running{};
  if (::pthread_getcpuclockid(thread.handle, &clock) != 0 ||
      ::clock_gettime(clock, &running) != 0) {
    return std::nullopt;
  }
  // "running_ns runnable_ns timeslices" (the kernel's Documentation/scheduler/sched-stats.rst).
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", static_cast<int>(thread.id));
  std::FILE* file = std::fopen(path, "r");
  if (file == nullptr) return std::nullopt;
  long long running_schedstat = 0, runnable = 0;
  const int fields = std::fscanf(file, "%lld %lld", &running_schedstat, &runnable);
  std::fclose(file);
  if (fields != 2) return std::nullopt;
  return ConsumerTimes{static_cast<int64_t>(running.tv_sec) * 1'000'000'000 + running.tv_nsec,
                       runnable};
}

void HandoffResidence::pushed(int64_t now_ns, std::optional<ConsumerTimes> consumer_times) {
  queued_.push_back(Queued{now_ns, consumer_times, 0, 0});
}

void HandoffResidence::consumer_waits(int64_t now_ns) {
  if (!queued_.empty()) {
    throw loupe::Error(loupe::ErrorCode::kInternal, "handoff residence: the consumer waits while " +
                                                        std::to_string(queued_.size()) +
                                                        " item(s) are queued");
  }
  if (waiting_since_ns_ < 0) waiting_since_ns_ = now_ns;
}

void HandoffResidence::taken(int64_t now_ns, std::optional<ConsumerTimes> consumer_times) {
  if (queued_.empty()) {
    throw loupe::Error(loupe::ErrorCode::kInternal,
                       "handoff residence: the consumer took an item from an empty queue");
  }
  if (waiting_since_ns_ >= 0) {
    // Every item queued now arrived during the wait (the queue was empty when it began): each sat
    // idle from its push until now, and blocked for that time less what the consumer ran and sat
    // runnable since the push. Clock skew between the scheduler's accounting and the steady clock
    // keeps the blocked part within [0, idle].
    for (Queued& item : queued_) {
      const int64_t idle = now_ns - std::max(item.pushed_ns, waiting_since_ns_);
      int64_t blocked = idle;
      if (consumer_times && item.consumer_at_push) {
        blocked -= (consumer_times->running_ns - item.consumer_at_push->running_ns) +
                   (consumer_times->runnable_ns - item.consumer_at_push->runnable_ns);
        blocked = std::clamp<int64_t>(blocked, 0, idle);
      } else {
        times_known_ = false;
      }
      item.idle_ns += idle;
      item.blocked_ns += blocked;
    }
    waiting_since_ns_ = -1;
  }
  const Queued item = queued_.front();
  queued_.pop_front();
  residence_ns_.push_back(now_ns - item.pushed_ns);
  idle_residence_ns_.push_back(item.idle_ns);
  blocked_residence_ns_.push_back(item.blocked_ns);
}

HandoffStats HandoffResidence::stats() const {
  HandoffStats stats;
  stats.consumer_times_known = times_known_;
  stats.items = static_cast<int64_t>(residence_ns_.size());
  if (residence_ns_.empty()) return stats;
  std::vector<int64_t> sorted = residence_ns_;
  std::sort(sorted.begin(), sorted.end());
  stats.residence_median_s = quantile_s(sorted, 0.5);
  stats.residence_p90_s = quantile_s(sorted, 0.9);
  stats.residence_max_s = seconds(sorted.back());
  stats.residence_s = seconds(sum_of(residence_ns_));
  stats.idle_residence_s = seconds(sum_of(idle_residence_ns_));
  stats.idle_residence_max_s = seconds(max_of(idle_residence_ns_));
  stats.blocked_residence_s = seconds(sum_of(blocked_residence_ns_));
  stats.blocked_residence_max_s = seconds(max_of(blocked_residence_ns_));
  return stats;
}

}  // namespace kda::serve
