// kda/serve/handoff.hpp — how long work sits in a handoff between two threads before its consumer
// takes it, and how much of that time the consumer spent waiting for work, blocked.
//
// A queue between a producer thread and a consumer thread reports, under its own mutex and with
// the steady-clock time of each event, every push, every moment its consumer finds nothing to take
// and begins to wait (on a condition, in a sleep, in a spin: how does not matter), and every item
// the consumer takes. Per item, HandoffResidence keeps
//   residence          from the item's push to the moment the consumer took it;
//   idle residence     the part of it during which the consumer was waiting for work;
//   blocked residence  the part of the idle residence during which the consumer was neither
//                      running nor runnable: asleep, and nobody had woken it yet.
// An honest queue wakes a waiting consumer when an item arrives, so an item's blocked residence
// is the latency of the wake-up itself, at any load (on the shared 2-core VM, about 30 us: the
// woken thread is accounted runnable once its CPU took the wake-up). Its idle residence also
// holds the time the woken consumer then waits for a core, which on a loaded machine is
// milliseconds (kda's transfer thread on the shared 2-core machine: 8-42 ms summed over 12
// layers at load 3.5). A missed or late wake-up, a consumer that polls with a sleep, a notify
// before the item is visible or a batcher that waits for a full batch leaves items sitting while
// the consumer sleeps, for as long as whatever finally wakes it takes: blocked residence. Work
// that waits while its consumer is busy with earlier work is residence only: throughput, not a
// late wake-up.
// The blocked part comes from the consumer thread's scheduler accounting (ConsumerTimes): read by
// the producer when it pushes onto the queue of a waiting consumer and by the consumer when it
// takes the item, it is the time between the two less what the consumer ran and sat runnable
// meanwhile. The kernel adds a runnable spell to the thread's account when the spell ends, so a
// consumer that was runnable at the push has that whole spell counted after it: the blocked
// residence can come out too small, never too large. Without the accounting (a kernel without
// schedstat) the blocked residence is the idle residence, an upper bound, and stats() says so.
// Thread-safety: none; the queue's mutex serialises the calls. Items are taken in push order.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace kda::serve {

// A thread's scheduler accounting, cumulative since it started: time on a core and time runnable
// but waiting for one (nanoseconds).
struct ConsumerTimes {
  int64_t running_ns = 0;
  int64_t runnable_ns = 0;
};

// A thread whose times can be read from another: its kernel id and its POSIX handle.
struct ConsumerThread {
  pid_t id = 0;
  pthread_t handle{};
};
ConsumerThread current_consumer_thread();
// The times of `thread` (a thread of this process): running from its CPU-time clock, which
// includes the spell it may be running now; runnable from /proc/self/task/ID/schedstat. nullopt
// where either cannot be read.
std::optional<ConsumerTimes> read_consumer_times(const ConsumerThread& thread);

// Over the items taken so far (an item still queued counts in none of these).
struct HandoffStats {
  int64_t items = 0;
  // Residence of the items: median and 90th percentile (linear interpolation between order
  // statistics), longest, and sum; seconds.
  double residence_median_s = 0, residence_p90_s = 0, residence_max_s = 0, residence_s = 0;
  // Idle and blocked residence: summed over the items, and the longest of one item; seconds.
  double idle_residence_s = 0, idle_residence_max_s = 0;
  double blocked_residence_s = 0, blocked_residence_max_s = 0;
  // False when some item's blocked residence had no consumer times: it is then its idle
  // residence (an upper bound).
  bool consumer_times_known = true;
};

class HandoffResidence {
 public:
  // Whether the consumer is waiting for work now: the queue then reads the consumer's times for
  // pushed().
  bool consumer_waiting() const { return waiting_since_ns_ >= 0; }
  // `consumer_times`: the consumer's when the item was pushed, if it was waiting (nullopt:
  // unknown, or it was not waiting).
  void pushed(int64_t now_ns, std::optional<ConsumerTimes> consumer_times);
  // The consumer found nothing to take and waits. A consumer that keeps finding nothing (a poll)
  // may call it again: the wait began at the first call.
  // REQUIRES: no item is queued (throws loupe::Error(kInternal) otherwise).
  void consumer_waits(int64_t now_ns);
  // The consumer took the oldest queued item; a wait it was in has ended, `consumer_times` the
  // consumer's now (nullopt: unknown; not needed when it did not wait).
  // REQUIRES: an item is queued (throws loupe::Error(kInternal) otherwise).
  void taken(int64_t now_ns, std::optional<ConsumerTimes> consumer_times);

  HandoffStats stats() const;

 private:
  struct Queued {
    int64_t pushed_ns = 0;
    std::optional<ConsumerTimes> consumer_at_push;
    int64_t idle_ns = 0;
    int64_t blocked_ns = 0;
  };
  std::deque<Queued> queued_;
  int64_t waiting_since_ns_ = -1;  // −1: the consumer is not waiting
  bool times_known_ = true;
  // Per item taken, in order.
  std::vector<int64_t> residence_ns_, idle_residence_ns_, blocked_residence_ns_;
};

}  // namespace kda::serve
