// tests/unit/kda_cuda/cuda_event_timer_test.cpp — the CUDA-event timer (src/bench/cuda) behind
// loupe::Timer. Without a device: a clear subject error. With one: it orders work 16x apart,
// records the SM clock, and drops a sample whose body synchronised inside the timed region.
#include <gtest/gtest.h>

#ifdef LOUPE_CUDA_TIMER_TESTS
#include <cuda_runtime.h>

#include <string>

#include "loupe/bench.hpp"

namespace loupe {
namespace {

TEST(CudaEventTimerTest, WithoutADeviceItSaysSo) {
  if (cuda_device_available()) GTEST_SKIP() << "a CUDA device is present";
  try {
    make_cuda_event_timer();
    FAIL() << "expected loupe::Error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kSubject);
    EXPECT_NE(error.message().find("no CUDA device"), std::string::npos) << error.message();
  }
}

class CudaEventTimerDeviceTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device: the timer is not exercised";
    ASSERT_EQ(cudaMalloc(&buffer_, kBytes), cudaSuccess);
  }
  void TearDown() override {
    if (buffer_ != nullptr) cudaFree(buffer_);
  }
  static constexpr size_t kBytes = size_t{1} << 30;
  void* buffer_ = nullptr;
};

TEST_F(CudaEventTimerDeviceTest, SixteenTimesTheBytesTakesLonger) {
  auto timer = make_cuda_event_timer();
  EXPECT_EQ(timer->name(), "cuda_events");
  auto time_memset = [&](size_t bytes) {
    timer->start();
    EXPECT_EQ(cudaMemsetAsync(buffer_, 1, bytes, cudaStreamLegacy), cudaSuccess);
    return timer->stop();
  };
  time_memset(kBytes);  // warm-up
  const double small = time_memset(kBytes / 16);
  const double large = time_memset(kBytes);
  EXPECT_GT(small, 0.0);
  EXPECT_GT(large, 4.0 * small) << "small " << small << " s, large " << large << " s";
  double clock_mhz = 0;
  for (const auto& [name, value] : timer->sample_facts()) {
    if (name == "sm_clock_mhz") clock_mhz = value;
  }
  EXPECT_GT(clock_mhz, 100.0);
  bool has_clock_source = false;
  for (const auto& [key, value] : timer->method()) has_clock_source |= key == "sm_clock_source";
  EXPECT_TRUE(has_clock_source);
}

TEST_F(CudaEventTimerDeviceTest, ASampleThatSynchronisesInsideIsDropped) {
  CudaTimerOptions options;
  options.flush_l2 = false;
  options.throttle_tolerance = 1.0;  // an idle second may lower the clock; not the point here
  auto timer = make_cuda_event_timer(options);
  timer->start();
  // The hold keeps the stream busy, so this waits for the hold's 1 s timeout.
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  timer->stop();
  EXPECT_NE(timer->drop_reason().find("stream hold timed out"), std::string::npos)
      << timer->drop_reason();
  timer->start();
  timer->stop();
  EXPECT_EQ(timer->drop_reason(), "");
}

}  // namespace
}  // namespace loupe
#else
TEST(CudaEventTimerTest, Skipped) {
  GTEST_SKIP() << "loupe_cuda_timer not built: no CUDA compiler at configure time";
}
#endif
