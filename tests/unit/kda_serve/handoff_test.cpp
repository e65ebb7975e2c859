// Handoff residence on synthetic timelines (nanoseconds; the consumer's scheduler times given):
// residence, idle residence and blocked residence per item, the consumer's running and runnable
// time after the push left out of the blocked part, a poll's repeated looks, unknown times, and
// misuse; then the scheduler times of a real thread.
#include "kda/serve/handoff.hpp"

#include <gtest/gtest.h>

#include <optional>

#include "loupe/error.hpp"

namespace kda::serve {
namespace {

ConsumerTimes times(int64_t running_ns, int64_t runnable_ns) {
  return ConsumerTimes{running_ns, runnable_ns};
}

TEST(HandoffResidence, ItemWaitingForABusyConsumerIsResidenceOnly) {
  HandoffResidence residence;
  EXPECT_FALSE(residence.consumer_waiting());
  residence.pushed(1000, std::nullopt);
  residence.taken(4000, std::nullopt);  // the consumer was busy: it never waited
  const HandoffStats stats = residence.stats();
  EXPECT_EQ(stats.items, 1);
  EXPECT_DOUBLE_EQ(stats.residence_s, 3e-6);
  EXPECT_DOUBLE_EQ(stats.residence_max_s, 3e-6);
  EXPECT_DOUBLE_EQ(stats.idle_residence_s, 0);
  EXPECT_DOUBLE_EQ(stats.blocked_residence_s, 0);
  EXPECT_TRUE(stats.consumer_times_known);
}

TEST(HandoffResidence, PromptWakeUpLeavesOnlyTheRunnableTimeIdle) {
  HandoffResidence residence;
  // Waits at 100; the item arrives at 150 and wakes the consumer, which sits runnable for 240 ns
  // and runs 10 ns before it takes the item at 400: never blocked after the push.
  residence.consumer_waits(100);
  EXPECT_TRUE(residence.consumer_waiting());
  residence.pushed(150, times(5000, 7000));
  residence.taken(400, times(5010, 7240));
  EXPECT_FALSE(residence.consumer_waiting());
  const HandoffStats stats = residence.stats();
  EXPECT_DOUBLE_EQ(stats.residence_s, 250e-9);
  EXPECT_DOUBLE_EQ(stats.idle_residence_s, 250e-9);
  EXPECT_DOUBLE_EQ(stats.blocked_residence_s, 0);
}

TEST(HandoffResidence, LateWakeUpIsBlockedResidence) {
  HandoffResidence residence;
  // Waits at 0; the first item arrives at 100 and nobody wakes the consumer; the second arrives
  // at 1100 and wakes it; 40 ns runnable and 5 ns running before it takes the first at 1150.
  residence.consumer_waits(0);
  residence.pushed(100, times(0, 0));
  residence.pushed(1100, times(0, 0));
  residence.taken(1150, times(5, 40));
  residence.taken(1300, std::nullopt);  // the second, without a wait
  const HandoffStats stats = residence.stats();
  EXPECT_EQ(stats.items, 2);
  EXPECT_DOUBLE_EQ(stats.residence_s, 1050e-9 + 200e-9);
  EXPECT_DOUBLE_EQ(stats.residence_max_s, 1050e-9);
  EXPECT_DOUBLE_EQ(stats.idle_residence_s, 1050e-9 + 50e-9);
  EXPECT_DOUBLE_EQ(stats.idle_residence_max_s, 1050e-9);
  EXPECT_DOUBLE_EQ(stats.blocked_residence_s, 1005e-9 + 5e-9);
  EXPECT_DOUBLE_EQ(stats.blocked_residence_max_s, 1005e-9);
}

TEST(HandoffResidence, APollIsOneWaitAndItsLooksAfterThePushAreNotBlocked) {
  HandoffResidence residence;
  residence.consumer_waits(0);
  residence.consumer_waits(500);  // looked again, still empty: the wait goes on
  residence.pushed(600, times(20, 30));
  // Two more looks after the push: 40 ns running, 60 ns runnable; asleep the other 300 ns.
  residence.taken(1000, times(60, 90));
  const HandoffStats stats = residence.stats();
  EXPECT_DOUBLE_EQ(stats.idle_residence_s, 400e-9);
  EXPECT_DOUBLE_EQ(stats.blocked_residence_s, 300e-9);
}

TEST(HandoffResidence, UnknownTimesCountTheWholeIdleResidenceAndSaySo) {
  HandoffResidence residence;
  residence.consumer_waits(0);
  residence.pushed(100, std::nullopt);
  residence.taken(400, times(10, 10));
  const HandoffStats stats = residence.stats();
  EXPECT_DOUBLE_EQ(stats.blocked_residence_s, 300e-9);
  EXPECT_FALSE(stats.consumer_times_known);
}

TEST(HandoffResidence, SchedulerTimesBeyondTheWaitGiveNoNegativeBlockedTime) {
  HandoffResidence residence;
  residence.consumer_waits(0);
  residence.pushed(100, times(0, 0));
  residence.taken(400, times(100, 500));  // 600 ns accounted in 300 ns (clock skew)
  EXPECT_DOUBLE_EQ(residence.stats().blocked_residence_s, 0);
  EXPECT_DOUBLE_EQ(residence.stats().idle_residence_s, 300e-9);
}

TEST(HandoffResidence, QuantilesInterpolateBetweenOrderStatistics) {
  HandoffResidence residence;
  // Residences 10, 20, 30, 40, 100 ns.
  for (int64_t length : {30, 10, 100, 20, 40}) {
    residence.pushed(0, std::nullopt);
    residence.taken(length, std::nullopt);
  }
  const HandoffStats stats = residence.stats();
  EXPECT_EQ(stats.items, 5);
  EXPECT_DOUBLE_EQ(stats.residence_median_s, 30e-9);
  EXPECT_DOUBLE_EQ(stats.residence_p90_s, 76e-9);  // 40 + 0.6 x (100 - 40)
  EXPECT_DOUBLE_EQ(stats.residence_max_s, 100e-9);
  EXPECT_DOUBLE_EQ(stats.residence_s, 200e-9);
}

TEST(HandoffResidence, NoItemsGiveZeros) {
  const HandoffStats stats = HandoffResidence().stats();
  EXPECT_EQ(stats.items, 0);
  EXPECT_DOUBLE_EQ(stats.residence_median_s, 0);
  EXPECT_DOUBLE_EQ(stats.blocked_residence_s, 0);
}

TEST(HandoffResidence, MisuseIsAnInternalError) {
  HandoffResidence residence;
  EXPECT_THROW(residence.taken(10, std::nullopt), loupe::Error);
  residence.pushed(0, std::nullopt);
  EXPECT_THROW(residence.consumer_waits(5), loupe::Error);
}

TEST(HandoffResidence, ThisThreadsSchedulerTimesAreReadWhereTheKernelKeepsThem) {
  const ConsumerThread thread = current_consumer_thread();
  const std::optional<ConsumerTimes> first = read_consumer_times(thread);
  if (!first) GTEST_SKIP() << "/proc/self/task/" << thread.id << "/schedstat cannot be read here";
  // Running comes from the thread's CPU-time clock, which grows while the thread works.
  volatile double sink = 0;
  for (int step = 0; step < 1'000'000; ++step) sink = sink + step * 0.5;
  const std::optional<ConsumerTimes> later = read_consumer_times(thread);
  ASSERT_TRUE(later);
  EXPECT_GT(later->running_ns, first->running_ns);
  EXPECT_GE(later->runnable_ns, first->runnable_ns);
  EXPECT_FALSE(read_consumer_times(ConsumerThread{-1, thread.handle}));  // no such thread
}

}  // namespace
}  // namespace kda::serve
