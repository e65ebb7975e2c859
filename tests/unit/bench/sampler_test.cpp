#include "bench/sampler.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "loupe/error.hpp"

namespace loupe::bench {
namespace {

// Synthetic time: each run advances the clock by the sample it returns.
struct FakeTime {
  double now = 0.0;
  MonotonicClock clock() {
    return [this] { return now; };
  }
  // Runs returning center · (1 + spread · sin(step · k)) for the k-th call.
  TimedRun run(double center, double spread, int* calls) {
    return [this, center, spread, calls] {
      int call = (*calls)++;
      double sample = center * (1.0 + spread * std::sin(0.9 * call));
      now += sample;
      return sample;
    };
  }
};

SamplerOptions options_with(FakeTime& time, double budget_s) {
  SamplerOptions options;
  options.stopping = {.precision = 0.01, .budget_s = budget_s, .min_samples = 10};
  options.warmup = 2;
  options.seed = 5;
  options.clock = time.clock();
  return options;
}

TEST(SamplerTest, InterleavesInSeededBlocksAndStopsOnPrecision) {
  FakeTime time;
  int calls_a = 0;
  int calls_b = 0;
  SamplerOptions options = options_with(time, 1000.0);
  SamplingResult result =
      sample_interleaved(time.run(1.0, 0.001, &calls_a), time.run(1.1, 0.001, &calls_b), options);
  EXPECT_EQ(result.stop.reason, StopReason::kPrecisionReached);
  EXPECT_LE(result.stop.relative_half_width, 0.01);
  EXPECT_EQ(result.a.size(), 10u);
  EXPECT_EQ(result.b.size(), 10u);
  EXPECT_EQ(result.warmup_runs, 2);
  EXPECT_EQ(calls_a, 12);
  EXPECT_EQ(calls_b, 12);
  ASSERT_EQ(result.order.size(), 20u);
  for (size_t block = 0; block < 10; ++block) {
    std::string pair = result.order.substr(2 * block, 2);
    EXPECT_TRUE(pair == "AB" || pair == "BA") << pair;
  }
  EXPECT_NE(result.order.find("AB"), std::string::npos);
  EXPECT_NE(result.order.find("BA"), std::string::npos);
  EXPECT_DOUBLE_EQ(result.elapsed_s, time.now);

  FakeTime again_time;
  int again_a = 0;
  int again_b = 0;
  SamplingResult again =
      sample_interleaved(again_time.run(1.0, 0.001, &again_a), again_time.run(1.1, 0.001, &again_b),
                         options_with(again_time, 1000.0));
  EXPECT_EQ(again.order, result.order);
  EXPECT_EQ(again.a, result.a);
}

TEST(SamplerTest, BudgetEndsANoisyComparison) {
  FakeTime time;
  int calls_a = 0;
  int calls_b = 0;
  SamplerOptions options = options_with(time, 50.0);
  SamplingResult result =
      sample_interleaved(time.run(1.0, 0.3, &calls_a), time.run(1.0, 0.3, &calls_b), options);
  EXPECT_EQ(result.stop.reason, StopReason::kBudgetSpent);
  EXPECT_TRUE(result.stop.stop);
  EXPECT_GT(result.stop.relative_half_width, 0.01);
  EXPECT_GT(result.stop.minimum_detectable_effect, result.stop.relative_half_width);
  EXPECT_GE(result.elapsed_s, 50.0);
  EXPECT_EQ(result.a.size(), result.b.size());
  // About one second per sample, four seconds of warm-up.
  EXPECT_GE(result.a.size(), 20u);
  EXPECT_LE(result.a.size(), 26u);
}

TEST(SamplerTest, OneArmStopsAtTheSampleCap) {
  FakeTime time;
  int calls = 0;
  SamplerOptions options = options_with(time, 1e9);
  options.stopping.max_samples = 30;
  SamplingResult result = sample_one(time.run(1.0, 0.3, &calls), options);
  EXPECT_EQ(result.stop.reason, StopReason::kSampleCapReached);
  EXPECT_EQ(result.a.size(), 30u);
  EXPECT_TRUE(result.b.empty());
  EXPECT_EQ(result.order, std::string(30, 'A'));
  EXPECT_EQ(calls, 32);
}

TEST(SamplerTest, OneArmStopsOnPrecision) {
  FakeTime time;
  int calls = 0;
  SamplingResult result = sample_one(time.run(2.0, 0.002, &calls), options_with(time, 1e9));
  EXPECT_EQ(result.stop.reason, StopReason::kPrecisionReached);
  EXPECT_EQ(result.a.size(), 10u);
}

TEST(SamplerTest, AFailingRunAbortsSampling) {
  int calls = 0;
  TimedRun failing = [&calls]() -> double {
    if (++calls == 5) throw Error(ErrorCode::kSubject, "run 5 failed");
    return 1.0;
  };
  TimedRun fine = [] { return 1.0; };
  SamplerOptions options;
  options.stopping.min_samples = 100;
  EXPECT_THROW(sample_interleaved(failing, fine, options), Error);
  EXPECT_EQ(calls, 5);
}

}  // namespace
}  // namespace loupe::bench
