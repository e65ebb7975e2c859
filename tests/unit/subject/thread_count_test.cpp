// The thread count a bench sample is judged by (guard.thread_count): the threads that still have
// the process's memory, once the threads a body joined have left, so an honest body that starts
// and joins workers in every call reads the same count before and after; a thread still running
// stays counted.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "subject/isolation.hpp"

namespace loupe::subject {
namespace {

TEST(SettledThreadCount, TheLiveCountIsTheThreadCountWhenNoThreadIsLeaving) {
  EXPECT_EQ(live_thread_count(0), thread_count());
  std::atomic<bool> stop{false};
  std::thread running([&stop] {
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  });
  EXPECT_EQ(live_thread_count(0), thread_count());
  EXPECT_EQ(live_thread_count(::getpid()), thread_count());
  stop = true;
  running.join();
  EXPECT_EQ(live_thread_count(-5), -1);  // no such process
}

TEST(SettledThreadCount, WorkersJoinedByTheCallAreNotCounted) {
  const int64_t resting = thread_count();
  ASSERT_GE(resting, 1);
  // The honest shape of kda's parallel_for: threads started and joined inside each call. The
  // kernel may still count a joined thread for a moment; the settled count never does.
  for (int call = 0; call < 300; ++call) {
    std::vector<std::thread> workers;
    for (int worker = 0; worker < 2; ++worker) workers.emplace_back([] {});
    for (std::thread& worker : workers) worker.join();
    ASSERT_EQ(settled_thread_count(0, resting), resting) << "call " << call;
  }
}

TEST(SettledThreadCount, AThreadStillRunningIsCountedAfterTheWait) {
  const int64_t resting = thread_count();
  std::atomic<bool> stop{false};
  std::thread running([&stop] {
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(settled_thread_count(0, resting), resting + 1);
  const auto waited = std::chrono::steady_clock::now() - start;
  // It waited for the thread to leave, up to the bound, and no longer than a little past it.
  EXPECT_GE(waited, std::chrono::nanoseconds(kThreadSettleNs));
  EXPECT_LT(waited, std::chrono::nanoseconds(kThreadSettleNs) + std::chrono::milliseconds(500));
  stop = true;
  running.join();
  EXPECT_EQ(settled_thread_count(0, resting), resting);
}

TEST(SettledThreadCount, ACountAtOrBelowTheSettledOneIsReadOnce) {
  const int64_t resting = thread_count();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(settled_thread_count(0, resting + 5), resting);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::nanoseconds(kThreadSettleNs));
}

}  // namespace
}  // namespace loupe::subject
