// The thread count a bench sample is judged by (guard.thread_count): the threads that still have
// the process's memory, so a worker the body joined and that is still leaving is not counted and
// a thread still running is.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "subject/isolation.hpp"

namespace loupe::subject {
namespace {

TEST(LiveThreadCount, TheLiveCountIsTheThreadCountWhenNoThreadIsLeaving) {
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

TEST(LiveThreadCount, WorkersJoinedByTheCallAreNotCounted) {
  const int64_t resting = live_thread_count(0);
  ASSERT_GE(resting, 1);
  // The honest shape of kda's parallel_for: threads started and joined inside each call.
  for (int call = 0; call < 300; ++call) {
    std::vector<std::thread> workers;
    for (int worker = 0; worker < 2; ++worker) workers.emplace_back([] {});
    for (std::thread& worker : workers) worker.join();
    ASSERT_EQ(live_thread_count(0), resting) << "call " << call;
  }
}

}  // namespace
}  // namespace loupe::subject
