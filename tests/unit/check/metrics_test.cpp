#include "check/metrics.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "loupe/error.hpp"

namespace loupe::check {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

template <class T>
Tensor make(std::vector<T> values) {
  Tensor tensor(dtype_of<T>(), {static_cast<int64_t>(values.size())});
  auto data = tensor.template mutable_data<T>();
  std::copy(values.begin(), values.end(), data.begin());
  return tensor;
}

Tensor make_bits16(DType dtype, std::vector<uint16_t> bits) {
  Tensor tensor(dtype, {static_cast<int64_t>(bits.size())});
  std::memcpy(tensor.mutable_bytes(), bits.data(), bits.size() * 2);
  return tensor;
}

TEST(MetricsTest, EveryMetricOnAHandComputedPair) {
  // diff = (0, 0, 0, -1); |B|^2 = 39, |A|^2 = 30, <A,B> = 34.
  const Metrics m = compute_metrics(make<float>({1, 2, 3, 4}), make<float>({1, 2, 3, 5}));
  EXPECT_EQ(m.numel, 4);
  EXPECT_EQ(m.finite_count, 4);
  EXPECT_DOUBLE_EQ(m.max_abs, 1.0);
  EXPECT_DOUBLE_EQ(m.max_rel, 0.2);
  EXPECT_DOUBLE_EQ(m.rms_diff, 0.5);
  EXPECT_DOUBLE_EQ(m.rms_b, std::sqrt(39.0 / 4));
  EXPECT_DOUBLE_EQ(m.rms_ratio, 0.5 / (std::sqrt(39.0 / 4) + 1e-8));
  EXPECT_DOUBLE_EQ(m.cos_dist, 1.0 - 68.0 / 69.0);
  // 4.0f and 5.0f share an exponent; 5 = 4 * 1.25, so they are 0.25 * 2^23 ULPs apart.
  EXPECT_DOUBLE_EQ(m.ulp_max, 2097152.0);
  // Nearest rank ceil(0.99 * 4) = 4 is 2^21 ULPs; above 256 ULPs p99 is the upper edge of its
  // 1/32-binade bucket [2^21, 2^21 + 2^16 - 1].
  EXPECT_DOUBLE_EQ(m.ulp_p99, 2097152.0 + 65535.0);
  EXPECT_EQ(m.mismatch_count, 1);
  EXPECT_DOUBLE_EQ(m.mismatch_frac, 0.25);
  EXPECT_EQ(m.nonfinite_mismatch, 0);
  EXPECT_EQ(m.worst_index, 3);
  EXPECT_DOUBLE_EQ(m.worst_a, 4.0);
  EXPECT_DOUBLE_EQ(m.worst_b, 5.0);
  EXPECT_EQ(m.ulp_dtype, DType::kF32);
}

TEST(MetricsTest, IdenticalTensorsHaveZeroErrorAndNoWorstPosition) {
  const Metrics m = compute_metrics(make<float>({1, -2, 0}), make<float>({1, -2, 0}));
  EXPECT_EQ(m.max_abs, 0);
  EXPECT_EQ(m.max_rel, 0);
  EXPECT_EQ(m.rms_ratio, 0);
  EXPECT_EQ(m.cos_dist, 0);
  EXPECT_EQ(m.ulp_max, 0);
  EXPECT_EQ(m.mismatch_count, 0);
  EXPECT_EQ(m.worst_index, -1);
}

TEST(MetricsTest, ZeroTensorsHaveZeroCosDistance) {
  EXPECT_EQ(compute_metrics(make<float>({0, 0}), make<float>({0, 0})).cos_dist, 0);
}

TEST(MetricsTest, RelativeErrorAgainstZeroIsInfinite) {
  EXPECT_EQ(compute_metrics(make<float>({1, 0}), make<float>({0, 0})).max_rel, kInf);
  EXPECT_EQ(compute_metrics(make<float>({0, 3}), make<float>({0, 2})).max_rel, 0.5);
}

TEST(MetricsTest, NanAndDisagreeingInfPositionsAreMismatches) {
  // 0: NaN/NaN; 1: 1 vs NaN; 2: +Inf/+Inf; 3: -Inf vs +Inf; 4: equal. torch's rule: the same
  // infinity on both sides agrees; NaN agrees with nothing unless equal_nan.
  const float inf = std::numeric_limits<float>::infinity();
  const Metrics m =
      compute_metrics(make<float>({kNaN, 1, inf, -inf, 2}), make<float>({kNaN, kNaN, inf, inf, 2}));
  EXPECT_EQ(m.nonfinite_mismatch, 3);
  EXPECT_EQ(m.nonfinite_equal, 1);
  EXPECT_EQ(m.mismatch_count, 3);
  EXPECT_EQ(m.finite_count, 1);
  EXPECT_EQ(m.worst_index, 0);
  EXPECT_EQ(m.max_abs, kInf);
  EXPECT_EQ(m.max_rel, kInf);
  EXPECT_EQ(m.rms_ratio, kInf);
  EXPECT_EQ(m.cos_dist, kInf);
  EXPECT_TRUE(std::isnan(m.cosine));
  EXPECT_EQ(m.ulp_max, kInf);
  EXPECT_EQ(m.ulp_p99, kInf);
}

// Regression (diff_identical_nonfinite_passed): `loupe diff` of [nan, inf, nan, 1] against
// itself reported rms_ratio 0 and passed. The NaN positions still fail; the infinity, the same on
// both sides, agrees as torch.testing.assert_close says (issue 38).
TEST(MetricsTest, DiffIdenticalNonfinitePassedRegression) {
  const float inf = std::numeric_limits<float>::infinity();
  const Metrics m =
      compute_metrics(make<float>({kNaN, inf, kNaN, 1}), make<float>({kNaN, inf, kNaN, 1}));
  EXPECT_EQ(m.nonfinite_mismatch, 2);
  EXPECT_EQ(m.nonfinite_equal, 1);
  EXPECT_EQ(m.mismatch_count, 2);
  EXPECT_EQ(m.rms_ratio, kInf);
  EXPECT_EQ(m.worst_index, 0);
}

TEST(MetricsTest, EqualNanLetsNanMeetNanAndNothingElse) {
  const float inf = std::numeric_limits<float>::infinity();
  Tolerance tolerance = default_tolerance(DType::kF32);
  tolerance.equal_nan = true;
  const Metrics same = compute_metrics(make<float>({kNaN, inf, -inf, 1}),
                                       make<float>({kNaN, inf, -inf, 1}), tolerance);
  EXPECT_EQ(same.mismatch_count, 0);
  EXPECT_EQ(same.nonfinite_equal, 3);
  EXPECT_EQ(same.rms_ratio, 0);
  EXPECT_EQ(same.ulp_p99, 0);
  // NaN against a number, and NaN against an infinity, still disagree; so does Inf vs -Inf.
  const Metrics other =
      compute_metrics(make<float>({kNaN, kNaN, inf}), make<float>({1, inf, -inf}), tolerance);
  EXPECT_EQ(other.mismatch_count, 3);
  EXPECT_EQ(other.nonfinite_equal, 0);
  // The generic (decoded) path follows the same rule: float16 NaN (0x7e00) and +Inf (0x7c00).
  const Metrics half =
      compute_metrics(make_bits16(DType::kF16, {0x7e00, 0x7c00, 0xfc00}),
                      make_bits16(DType::kF16, {0x7e00, 0x7c00, 0x7c00}), tolerance);
  EXPECT_EQ(half.mismatch_count, 1);
  EXPECT_EQ(half.nonfinite_equal, 2);
}

TEST(MetricsTest, UlpDistanceCrossesZeroAndIgnoresTheSignOfZero) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(compute_metrics(make<float>({-0.0f}), make<float>({0.0f})).ulp_max, 0);
  EXPECT_EQ(compute_metrics(make<float>({tiny}), make<float>({-tiny})).ulp_max, 2);
  EXPECT_EQ(compute_metrics(make<float>({1.0f}), make<float>({std::nextafter(1.0f, 2.0f)})).ulp_max,
            1);
}

TEST(MetricsTest, UlpP99AboveTheExactRangeIsItsBucketsUpperEdge) {
  // 985 equal positions and 15 at 1000..1014 ULPs: nearest rank 990 is the 5th of those, 1004,
  // in the bucket [992, 1007] (binade [512, 1024) cut in 32): p99 reads 1007, never less.
  std::vector<float> a(1000, 1.0f), b(1000, 1.0f);
  for (int index = 0; index < 15; ++index) {
    b[985 + index] = std::bit_cast<float>(std::bit_cast<uint32_t>(1.0f) + 1000 + index);
  }
  const Metrics m = compute_metrics(std::span<const float>(a), std::span<const float>(b),
                                    default_tolerance(DType::kF32));
  EXPECT_EQ(m.ulp_p99, 1007);
  EXPECT_EQ(m.ulp_max, 1014);
}

TEST(MetricsTest, UlpP99FromTheExactBuckets) {
  std::vector<float> a(100, 1.0f), b(100, 1.0f);
  for (int index = 0; index < 100; ++index) {
    b[index] = std::bit_cast<float>(std::bit_cast<uint32_t>(1.0f) + index);  // 0..99 ULPs
  }
  const Metrics m = compute_metrics(std::span<const float>(a), std::span<const float>(b),
                                    default_tolerance(DType::kF32));
  EXPECT_EQ(m.ulp_p99, 98);  // rank 99 of 0..99
}

TEST(MetricsTest, MismatchUsesAtolPlusRtolTimesB) {
  // fp32 defaults: atol 1e-5, rtol 1.3e-6. |B| = 100: the bound is 1e-5 + 1.3e-4 = 1.4e-4.
  const Metrics m = compute_metrics(make<double>({100.0001, 100.0002, 0.000009, 0.000011}),
                                    make<double>({100, 100, 0, 0}), default_tolerance(DType::kF32));
  EXPECT_EQ(m.mismatch_count, 2);  // 2e-4 > 1.4e-4 and 1.1e-5 > 1e-5
}

TEST(MetricsTest, DefaultTolerancesFollowAssertClose) {
  EXPECT_EQ(default_tolerance(DType::kF32).atol, 1e-5);
  EXPECT_EQ(default_tolerance(DType::kF32).rtol, 1.3e-6);
  EXPECT_EQ(default_tolerance(DType::kF64).atol, 1e-7);
  EXPECT_EQ(default_tolerance(DType::kF64).rtol, 1e-7);
  EXPECT_EQ(default_tolerance(DType::kBF16).rtol, 1.6e-2);
  EXPECT_EQ(default_tolerance(DType::kF16).rtol, 1e-3);
  EXPECT_EQ(default_tolerance(DType::kI32).atol, 0);
  EXPECT_EQ(default_tolerance(DType::kF32, DType::kBF16).rtol, 1.6e-2);
  // torch has no default for fp8 (_DTYPE_PRECISIONS): exact, like integers.
  EXPECT_EQ(default_tolerance(DType::kF8E4M3).rtol, 0);
  EXPECT_EQ(default_tolerance(DType::kF8E4M3).atol, 0);
  EXPECT_EQ(default_tolerance(DType::kF8E5M2).rtol, 0);
  EXPECT_EQ(default_tolerance(DType::kF8E5M2).atol, 0);
  // A pair takes the larger rtol and the larger atol of its two dtypes, as torch does.
  EXPECT_EQ(default_tolerance(DType::kF8E4M3, DType::kF32).rtol, 1.3e-6);
  EXPECT_EQ(default_tolerance(DType::kF8E4M3, DType::kF32).atol, 1e-5);
  EXPECT_EQ(default_tolerance(DType::kF64, DType::kF16).rtol, 1e-3);
  EXPECT_EQ(default_tolerance(DType::kF64, DType::kF16).atol, 1e-5);
  EXPECT_EQ(coarser_dtype(DType::kF32, DType::kBF16), DType::kBF16);
  EXPECT_EQ(coarser_dtype(DType::kF16, DType::kBF16), DType::kBF16);
  EXPECT_EQ(coarser_dtype(DType::kI32, DType::kF64), DType::kF64);
}

TEST(MetricsTest, UlpsOfMixedDtypesAreCountedInTheCoarserOne) {
  // 1.0 in bf16 (0x3F80) against 1 + 2^-7 in f32: exactly one bf16 ULP apart.
  const Metrics m =
      compute_metrics(make_bits16(DType::kBF16, {0x3F80}), make<float>({1.0f + 0x1.0p-7f}));
  EXPECT_EQ(m.ulp_dtype, DType::kBF16);
  EXPECT_EQ(m.ulp_max, 1);
  EXPECT_DOUBLE_EQ(m.max_abs, 0x1.0p-7);
  EXPECT_EQ(m.tolerance.rtol, 1.6e-2);
  EXPECT_EQ(m.mismatch_count, 0);
}

TEST(MetricsTest, Float32RoundsToBFloat16NearestEvenForUlps) {
  // 1 + 2^-8 lies halfway between bf16 1.0 (0x3F80) and 1 + 2^-7 (0x3F81): ties to even, 0x3F80.
  // 1 + 3 * 2^-8 lies halfway between 0x3F81 and 0x3F82: ties to even, 0x3F82.
  const Metrics m = compute_metrics(make_bits16(DType::kBF16, {0x3F80, 0x3F80, 0x3F80}),
                                    make<float>({1.0f + 0x1.0p-8f, 1.0f + 0x3.0p-8f, -1.0f}));
  EXPECT_EQ(m.ulp_dtype, DType::kBF16);
  EXPECT_EQ(m.ulp_max, 0x3F80 + 0x3F80);  // 1.0 against -1.0: across zero
  EXPECT_EQ(m.ulp_p99, 32767);            // 32512 is in the bucket [32256, 32767]
  const Metrics ties = compute_metrics(make_bits16(DType::kBF16, {0x3F80, 0x3F80}),
                                       make<float>({1.0f + 0x1.0p-8f, 1.0f + 0x3.0p-8f}));
  EXPECT_EQ(ties.ulp_max, 2);  // 0x3F80 vs 0x3F80 and 0x3F82
}

TEST(MetricsTest, HalfPrecisionPairsDecodeExactly) {
  // 1.0 (0x3C00) against 1.0009765625 (0x3C01) and 2.0 (0x4000): one and 1024 ULPs.
  const Metrics m = compute_metrics(make_bits16(DType::kF16, {0x3C00, 0x3C00}),
                                    make_bits16(DType::kF16, {0x3C01, 0x4000}));
  EXPECT_EQ(m.ulp_max, 1024);
  EXPECT_DOUBLE_EQ(m.max_abs, 1.0);
  EXPECT_EQ(m.mismatch_count, 1);  // 2^-10 <= 1e-5 + 1e-3 * 1.0009765625 ; 1.0 is not
}

TEST(MetricsTest, IntegersCompareExactly) {
  const Metrics m = compute_metrics(make<int32_t>({1, 2, 3}), make<int32_t>({1, 2, 5}));
  EXPECT_EQ(m.mismatch_count, 1);
  EXPECT_EQ(m.ulp_max, 2);
  EXPECT_EQ(m.max_abs, 2);
  EXPECT_EQ(m.tolerance.atol, 0);
  EXPECT_EQ(m.tolerance.rtol, 0);
}

TEST(MetricsTest, BoolAgainstNumbersIsRefused) {
  try {
    compute_metrics(make<bool>({true}), make<float>({1.0f}));
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_NE(error.message().find("bool compares only with bool"), std::string::npos);
  }
}

TEST(MetricsTest, Float32LoopAgreesWithTheGenericPath) {
  std::vector<float> a(10007), b(10007);
  uint32_t state = 12345;
  for (size_t index = 0; index < a.size(); ++index) {
    state = state * 1664525u + 1013904223u;
    b[index] = static_cast<float>(state >> 8) / 65536.0f - 128.0f;
    a[index] = b[index] * (1.0f + static_cast<float>((state & 0xff) - 128) * 1e-6f);
  }
  a[17] = kNaN;
  Tensor tensor_a(DType::kF32, {10007}), tensor_b(DType::kF32, {10007});
  std::copy(a.begin(), a.end(), tensor_a.mutable_data<float>().begin());
  std::copy(b.begin(), b.end(), tensor_b.mutable_data<float>().begin());
  const Tolerance tolerance = default_tolerance(DType::kF32);
  const Metrics fast = compute_metrics(tensor_a, tensor_b);
  const Metrics generic = detail::compute_metrics_generic(tensor_a, tensor_b, tolerance);
  for (Metric metric : all_metrics()) {
    if (metric == Metric::kOracleRatio) continue;
    EXPECT_EQ(metric_value(fast, metric), metric_value(generic, metric)) << metric_name(metric);
  }
  EXPECT_EQ(fast.worst_index, generic.worst_index);
  EXPECT_EQ(fast.worst_index, 17);
}

TEST(MetricsTest, MetricNamesRoundTrip) {
  for (Metric metric : all_metrics()) EXPECT_EQ(parse_metric(metric_name(metric)), metric);
  EXPECT_FALSE(parse_metric("rms"));
  for (Metric metric : statistic_metrics()) EXPECT_EQ(parse_metric(metric_name(metric)), metric);
  // SGLang's comparator names and DeepGEMM's: rel is 1 - 2<x,y>/(|x|^2+|y|^2), loupe's cos_dist.
  EXPECT_EQ(parse_metric("rel"), Metric::kCosDist);
  EXPECT_EQ(parse_metric("rel_diff"), Metric::kCosDist);
  EXPECT_EQ(parse_metric("max_abs_diff"), Metric::kMaxAbs);
  EXPECT_EQ(parse_metric("mean_abs_diff"), Metric::kMeanAbs);
  EXPECT_EQ(metric_names_list().substr(0, 17), "max_abs, max_rel,");
}

TEST(StatisticsTest, EveryStatisticOnAHandComputedPair) {
  // diff = (0, 0, 0, -1); |A|^2 = 30, |B|^2 = 39, <A,B> = 34.
  const Tensor a = make<float>({1, 2, 3, 4});
  const Tensor b = make<float>({1, 2, 3, 5});
  Metrics m = compute_metrics(a, b);
  add_statistics(a, b, m);
  EXPECT_DOUBLE_EQ(m.cosine, 34.0 / (std::sqrt(30.0) * std::sqrt(39.0)));
  EXPECT_DOUBLE_EQ(m.mean_abs, 0.25);
  EXPECT_EQ(m.abs_p50, 0);  // nearest rank 2 of (0, 0, 0, 1)
  EXPECT_EQ(m.abs_p90, 1);  // rank 4: the bucket's edge 1.03125, capped at max_abs
  EXPECT_EQ(m.abs_p99, 1);
  EXPECT_EQ(m.abs_p999, 1);
  EXPECT_DOUBLE_EQ(m.a.mean, 2.5);
  EXPECT_DOUBLE_EQ(m.a.abs_mean, 2.5);
  EXPECT_DOUBLE_EQ(m.a.std, std::sqrt(1.25));
  EXPECT_EQ(m.a.min, 1);
  EXPECT_EQ(m.a.max, 4);
  EXPECT_DOUBLE_EQ(m.b.mean, 2.75);
  EXPECT_DOUBLE_EQ(m.b.std, std::sqrt(9.75 - 2.75 * 2.75));
  EXPECT_EQ(m.b.max, 5);
  EXPECT_EQ(m.downcast_dtype, DType::kF32);
  EXPECT_EQ(m.downcast_max_abs, m.max_abs);
  EXPECT_EQ(m.downcast_mismatch_count, 1);
  EXPECT_EQ(metric_value(m, Metric::kMeanAbs), 0.25);
  EXPECT_EQ(metric_value(m, Metric::kBMin), 1);
}

TEST(StatisticsTest, PercentilesAreTheirBucketsUpperEdgeCappedAtMaxAbs) {
  // 99 differences of 3 and one of 10: 3 lies in [3, 3.0625) (binade [2, 4) cut in 32), so the
  // median reads 3.0625; the 99.9th percentile is 10 (its bucket edge 10.25, capped at max_abs).
  std::vector<double> a(100, 3.0), b(100, 0.0);
  a[99] = 10.0;
  Metrics m = compute_metrics(make<double>(a), make<double>(b));
  add_statistics(make<double>(a), make<double>(b), m);
  EXPECT_EQ(m.abs_p50, 3.0625);
  EXPECT_EQ(m.abs_p99, 3.0625);
  EXPECT_EQ(m.abs_p999, 10);
  EXPECT_DOUBLE_EQ(m.mean_abs, (99 * 3.0 + 10.0) / 100);
}

TEST(StatisticsTest, NonfinitePositionsAreInfiniteInPercentilesAndLeftOutOfSides) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor a = make<float>({1, 2, kNaN, inf});
  const Tensor b = make<float>({1, 2, 1, inf});
  Metrics m = compute_metrics(a, b);
  add_statistics(a, b, m);
  EXPECT_EQ(m.abs_p50, 0);      // ranks 1-2: the two equal pairs; the agreeing Inf is 0 too
  EXPECT_EQ(m.abs_p999, kInf);  // the NaN position
  EXPECT_EQ(m.mean_abs, kInf);
  EXPECT_DOUBLE_EQ(m.a.mean, 1.5);  // finite values of A only: 1, 2
  EXPECT_DOUBLE_EQ(m.b.mean, 4.0 / 3.0);
}

TEST(StatisticsTest, DowncastRoundsBothSidesToTheNarrowerDtype) {
  // 1.0001 in float32 against bfloat16 1.0: 1.0001 rounds to bfloat16 1.0, so the downcast diff
  // is 0 while the plain one is about 1e-4.
  const Tensor a = make<float>({1.0001f, 2.5f});
  const Tensor b = make_bits16(DType::kBF16, {0x3f80, 0x4020});  // 1.0, 2.5
  Metrics m = compute_metrics(a, b);
  add_statistics(a, b, m);
  EXPECT_EQ(m.downcast_dtype, DType::kBF16);
  EXPECT_GT(m.max_abs, 9e-5);
  EXPECT_EQ(m.downcast_max_abs, 0);
  EXPECT_EQ(m.downcast_rms_ratio, 0);
  EXPECT_EQ(m.downcast_mismatch_count, 0);
}

}  // namespace
}  // namespace loupe::check
