#include "bench/stopping.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

namespace loupe::bench {
namespace {

std::vector<double> one_to(int n) {
  std::vector<double> values(n);
  std::iota(values.begin(), values.end(), 1.0);
  return values;
}

TEST(StoppingTest, RelativeHalfWidthUsesTheSignTestInterval) {
  // 1..100: median 50.5, 95 % interval [40, 61].
  EXPECT_DOUBLE_EQ(median_relative_half_width(one_to(100), 0.95), 21.0 / 2.0 / 50.5);
  EXPECT_TRUE(std::isinf(median_relative_half_width(std::vector<double>{1.0}, 0.95)));
  EXPECT_TRUE(std::isinf(median_relative_half_width(std::vector<double>{0.0, 0.0}, 0.95)));
}

TEST(StoppingTest, MinimumDetectableEffectIsAboutOnePointFourThreeHalfWidths) {
  // (1.9599640 + 0.8416212) / 1.9599640 = 1.4294065.
  EXPECT_NEAR(minimum_detectable_effect(0.01), 0.014294064790024, 1e-12);
  EXPECT_NEAR(minimum_detectable_effect(0.02, 0.95, 0.5), 0.02, 1e-12);
}

TEST(StoppingTest, StopsOnPrecisionOnlyAfterMinSamples) {
  std::vector<double> tight(20, 1.0);
  tight[3] = 1.001;
  StoppingRule rule{.precision = 0.01, .budget_s = 10.0, .min_samples = 10};
  StopDecision decision = should_stop(tight, 0.5, rule);
  EXPECT_TRUE(decision.stop);
  EXPECT_EQ(decision.reason, StopReason::kPrecisionReached);
  EXPECT_DOUBLE_EQ(decision.relative_half_width, 0.0);

  rule.min_samples = 21;
  decision = should_stop(tight, 0.5, rule);
  EXPECT_FALSE(decision.stop);
  EXPECT_EQ(decision.reason, StopReason::kContinue);
}

TEST(StoppingTest, BudgetEndsFirstAndReportsWhatWasReached) {
  StoppingRule rule{.precision = 0.01, .budget_s = 1.0, .min_samples = 5};
  auto wide = one_to(100);  // relative half-width 0.208
  StopDecision running = should_stop(wide, 0.9, rule);
  EXPECT_FALSE(running.stop);
  StopDecision spent = should_stop(wide, 1.0, rule);
  EXPECT_TRUE(spent.stop);
  EXPECT_EQ(spent.reason, StopReason::kBudgetSpent);
  EXPECT_DOUBLE_EQ(spent.relative_half_width, 21.0 / 2.0 / 50.5);
  EXPECT_NEAR(spent.minimum_detectable_effect,
              minimum_detectable_effect(std::sqrt(2.0) * 21.0 / 2.0 / 50.5), 1e-12);
  EXPECT_EQ(stop_reason_name(spent.reason), "budget_spent");
}

TEST(StoppingTest, SampleCapStopsSampling) {
  StoppingRule rule{.precision = 0.001, .budget_s = 100.0, .min_samples = 5, .max_samples = 100};
  StopDecision decision = should_stop(one_to(100), 0.0, rule);
  EXPECT_TRUE(decision.stop);
  EXPECT_EQ(decision.reason, StopReason::kSampleCapReached);
}

TEST(StoppingTest, RatioHalfWidthCombinesBothArms) {
  auto a = one_to(100);
  std::vector<double> b(100, 2.0);  // zero width
  StoppingRule rule{.precision = 0.5, .budget_s = 100.0, .min_samples = 5};
  StopDecision decision = should_stop_ab(a, b, 0.0, rule);
  EXPECT_DOUBLE_EQ(decision.relative_half_width, 21.0 / 2.0 / 50.5);
  EXPECT_TRUE(decision.stop);
  StopDecision both = should_stop_ab(a, a, 0.0, rule);
  EXPECT_NEAR(both.relative_half_width, std::sqrt(2.0) * 21.0 / 2.0 / 50.5, 1e-15);
}

TEST(StoppingTest, PairedHalfWidthIsTheRoundRatiosOwn) {
  // Ratios 0.01..1.00 (1..100 scaled): the sign-test interval [0.40, 0.61] around 0.505, with no
  // √2: the ratios already carry both arms' noise.
  std::vector<double> ratios = one_to(100);
  for (double& ratio : ratios) ratio /= 100.0;
  StoppingRule rule{.precision = 0.21, .budget_s = 100.0, .min_samples = 100};
  StopDecision decision = should_stop_paired(ratios, 0.0, rule);
  EXPECT_NEAR(decision.relative_half_width, 21.0 / 2.0 / 50.5, 1e-12);
  EXPECT_NEAR(decision.minimum_detectable_effect,
              minimum_detectable_effect(21.0 / 2.0 / 50.5, 0.95), 1e-12);
  EXPECT_TRUE(decision.stop);
  EXPECT_EQ(decision.reason, StopReason::kPrecisionReached);
  // min_samples counts rounds.
  rule.min_samples = 101;
  EXPECT_FALSE(should_stop_paired(ratios, 0.0, rule).stop);
}

TEST(StoppingTest, PairByRoundSkipsRoundsMissingFromEitherArm) {
  const std::vector<double> a = {1.0, 2.0, 3.0, 4.0};
  const std::vector<int64_t> rounds_a = {0, 1, 2, 4};
  const std::vector<double> b = {10.0, 30.0, 40.0, 50.0};
  const std::vector<int64_t> rounds_b = {0, 2, 4, 5};
  const RoundPairs pairs = pair_by_round(a, rounds_a, b, rounds_b);
  EXPECT_EQ(pairs.a, (std::vector<double>{1.0, 3.0, 4.0}));
  EXPECT_EQ(pairs.b, (std::vector<double>{10.0, 30.0, 40.0}));
}

TEST(StoppingTest, RoundRatiosDivideTheSamplesThatShareARound) {
  const std::vector<double> a = {1.0, 2.0, 4.0, 5.0};
  const std::vector<int64_t> rounds_a = {0, 1, 2, 4};
  const std::vector<double> b = {3.0, 8.0, 10.0, 7.0};
  const std::vector<int64_t> rounds_b = {0, 2, 4, 5};
  EXPECT_EQ(round_ratios(a, rounds_a, b, rounds_b), (std::vector<double>{3.0, 2.0, 2.0}));
  EXPECT_TRUE(round_ratios(a, {}, b, rounds_b).empty());
}

}  // namespace
}  // namespace loupe::bench
