#include "check/compare.hpp"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "loupe/error.hpp"

namespace loupe::check {
namespace {

Tensor make(std::vector<double> values) {
  Tensor tensor(DType::kF64, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), tensor.mutable_data<double>().begin());
  return tensor;
}

TEST(CompareTest, OracleRatioIsAsErrorOverBsError) {
  const Tensor oracle = make({1, 1, 1, 1});
  const Tensor a = make({1.5, 1.5, 1.5, 1.5});
  const Tensor b = make({1.125, 1.125, 1.125, 1.125});
  const TensorComparison comparison = compare_tensors("x", a, b, &oracle, {});
  ASSERT_TRUE(comparison.oracle);
  EXPECT_DOUBLE_EQ(comparison.oracle->ratio, 4.0);  // 0.5 / 0.125
  EXPECT_DOUBLE_EQ(comparison_value(comparison, Metric::kOracleRatio), 4.0);
}

TEST(CompareTest, OracleRatioOfTwoExactSidesIsOne) {
  const Tensor oracle = make({1, 2});
  const TensorComparison both = compare_tensors("x", oracle, oracle, &oracle, {});
  EXPECT_EQ(both.oracle->ratio, 1.0);
  const TensorComparison only_b = compare_tensors("x", make({1, 3}), oracle, &oracle, {});
  EXPECT_EQ(only_b.oracle->ratio, std::numeric_limits<double>::infinity());
}

TEST(CompareTest, DifferentShapesAreRefusedNamingBoth) {
  Tensor a(DType::kF32, {2, 3}), b(DType::kF32, {3, 2});
  try {
    compare_tensors("x", a, b, nullptr, {});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_EQ(error.message(), "shapes differ: A is [2, 3], B is [3, 2]; expected the same shape");
  }
}

TEST(CompareTest, AxesComeFromOptionsThenTheTensor) {
  Tensor a(DType::kF32, {2, 3}), b(DType::kF32, {2, 3});
  EXPECT_EQ(compare_tensors("x", a, b, nullptr, {}).axes, (std::vector<std::string>{"d0", "d1"}));
  a.axes = {"T", "V"};
  EXPECT_EQ(compare_tensors("x", a, b, nullptr, {}).axes, (std::vector<std::string>{"T", "V"}));
  CompareOptions options;
  options.axes = {"B", "C"};
  EXPECT_EQ(compare_tensors("x", a, b, nullptr, options).axes,
            (std::vector<std::string>{"B", "C"}));
}

TEST(BoundTest, ParsesMetricEqualsValue) {
  const Bound bound = parse_bound("rms_ratio=5e-3");
  EXPECT_EQ(bound.metric, Metric::kRmsRatio);
  EXPECT_EQ(bound.limit, 5e-3);
}

TEST(BoundTest, UnknownMetricListsTheValidOnes) {
  try {
    parse_bound("rms=1");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(),
              "--tol rms=1: unknown metric 'rms'; valid metrics: max_abs, max_rel, rms_ratio, "
              "cos_dist, ulp_max, ulp_p99, mismatch_count, mismatch_frac, nonfinite_mismatch, "
              "oracle_ratio"
              ", cosine, mean_abs, abs_p50, abs_p90, abs_p99, abs_p999, a_mean, a_abs_mean, a_std, "
              "a_min, a_max, b_mean, b_abs_mean, b_std, b_min, b_max, downcast_max_abs, "
              "downcast_rms_ratio, downcast_mismatch_count (aliases: rel=cos_dist "
              "rel_diff=cos_dist max_abs_diff=max_abs mean_abs_diff=mean_abs)");
  }
}

TEST(BoundTest, MalformedBoundsAreUsageErrors) {
  for (const char* text : {"rms_ratio", "rms_ratio=", "rms_ratio=abc", "rms_ratio=1e-3x"}) {
    try {
      parse_bound(text);
      FAIL() << "expected an error for " << text;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUsage) << text;
    }
  }
}

TEST(BoundTest, BoundsHoldAtTheLimitAndNanNeverPasses) {
  const TensorComparison comparison = compare_tensors("x", make({1, 2}), make({1, 3}), nullptr, {});
  const std::vector<Bound> bounds = {
      {Metric::kMaxAbs, 1.0}, {Metric::kMaxAbs, 0.5}, {Metric::kOracleRatio, 10}};
  const auto results = evaluate_bounds(comparison, bounds);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].pass);
  EXPECT_FALSE(results[1].pass);
  EXPECT_TRUE(std::isnan(results[2].value));  // no oracle
  EXPECT_FALSE(results[2].pass);
}

TEST(BoundTest, DivergedUsesBoundsElseAssertCloseRule) {
  const TensorComparison comparison =
      compare_tensors("x", make({1, 2.001}), make({1, 2}), nullptr, {});
  EXPECT_TRUE(diverged(comparison, {}));  // 1e-3 > 1e-7 + 1e-7 * 2
  const std::vector<Bound> loose = {{Metric::kMaxAbs, 1e-2}};
  EXPECT_FALSE(diverged(comparison, loose));
}

TEST(FormatTest, NumbersAreCompact) {
  EXPECT_EQ(format_number(0.0587), "0.0587");
  EXPECT_EQ(format_number(8.69e-7), "8.69e-07");
  EXPECT_EQ(format_number(12), "12");
  EXPECT_EQ(format_number(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(shape_to_string({4096, 4, 16}), "[4096, 4, 16]");
}

}  // namespace
}  // namespace loupe::check
