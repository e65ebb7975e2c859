#include "kda/serve/handoff.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
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

std::optional<ConsumerTimes> read_consumer_times() {
  // "running_ns runnable_ns timeslices" (Documentation/scheduler/sched-stats.rst).
  std::FILE* file = std::fopen("/proc/thread-self/schedstat", "r");
  if (file == nullptr) return std::nullopt;
  long long running = 0, runnable = 0;
  const int fields = std::fscanf(file, "%lld %lld", &running, &runnable);
  std::fclose(file);
  if (fields != 2) return std::nullopt;
  return ConsumerTimes{running, runnable};
}

void HandoffResidence::pushed(int64_t now_ns) { queued_.push_back(Queued{now_ns, 0}); }

void HandoffResidence::consumer_waits(int64_t now_ns, std::optional<ConsumerTimes> times) {
  if (!queued_.empty()) {
    throw loupe::Error(loupe::ErrorCode::kInternal,
                       "handoff residence: the consumer waits while " +
                           std::to_string(queued_.size()) + " item(s) are queued");
  }
  if (waiting_since_ns_ < 0) {
    waiting_since_ns_ = now_ns;
    times_at_wait_ = times;
  }
}

void HandoffResidence::taken(int64_t now_ns, std::optional<ConsumerTimes> times) {
  if (queued_.empty()) {
    throw loupe::Error(loupe::ErrorCode::kInternal,
                       "handoff residence: the consumer took an item from an empty queue");
  }
  if (waiting_since_ns_ >= 0) {
    // The wait's blocked time: its elapsed time less what the consumer ran and sat runnable,
    // taken as the wait's beginning (the runnable spells as its end: header). Clock skew between
    // the scheduler's accounting and the steady clock keeps it within [0, elapsed].
    const int64_t elapsed = now_ns - waiting_since_ns_;
    int64_t blocked = elapsed;
    if (times && times_at_wait_) {
      blocked -= (times->running_ns - times_at_wait_->running_ns) +
                 (times->runnable_ns - times_at_wait_->runnable_ns);
      blocked = std::clamp<int64_t>(blocked, 0, elapsed);
    } else {
      times_known_ = false;
    }
    const int64_t blocked_until = waiting_since_ns_ + blocked;
    // Every item queued now arrived during the wait (the queue was empty when it began): each sat
    // idle from its push, or from the wait's start if that came later, until now, and blocked
    // until the consumer was woken.
    for (Queued& item : queued_) {
      const int64_t since = std::max(item.pushed_ns, waiting_since_ns_);
      item.idle_ns += now_ns - since;
      item.blocked_ns += std::max<int64_t>(0, blocked_until - since);
    }
    waiting_since_ns_ = -1;
    times_at_wait_.reset();
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
