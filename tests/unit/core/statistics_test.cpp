#include "core/statistics.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

namespace loupe {
namespace {

TEST(StatisticsTest, QuantileIsTypeSevenLinearInterpolation) {
  const std::vector<double> sorted = {1, 2, 3, 4};
  // h = (n − 1)·p = 3p.
  EXPECT_DOUBLE_EQ(quantile_sorted(sorted, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(quantile_sorted(sorted, 0.25), 1.75);  // h = 0.75
  EXPECT_DOUBLE_EQ(quantile_sorted(sorted, 0.5), 2.5);    // h = 1.5
  EXPECT_DOUBLE_EQ(quantile_sorted(sorted, 0.9), 3.7);    // h = 2.7
  EXPECT_DOUBLE_EQ(quantile_sorted(sorted, 1.0), 4.0);
  const std::vector<double> unsorted = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(quantile(unsorted, 0.25), 1.75);
  const std::vector<double> one = {7};
  EXPECT_DOUBLE_EQ(quantile(one, 0.3), 7.0);
  EXPECT_TRUE(std::isnan(quantile(std::vector<double>{}, 0.5)));
}

TEST(StatisticsTest, MedianOddAndEven) {
  EXPECT_DOUBLE_EQ(median(std::vector<double>{3, 1, 2}), 2.0);
  EXPECT_DOUBLE_EQ(median(std::vector<double>{5, 1, 4, 2}), 3.0);
  std::vector<double> odd = {9, 3, 7, 1, 5};
  EXPECT_DOUBLE_EQ(median_in_place(odd), 5.0);
  std::vector<double> even = {10, 1, 4, 2, 8, 6};
  EXPECT_DOUBLE_EQ(median_in_place(even), 5.0);  // (4 + 6) / 2
  std::vector<double> empty;
  EXPECT_TRUE(std::isnan(median_in_place(empty)));
}

TEST(StatisticsTest, MeanDeviationAndCv) {
  const std::vector<double> sample = {2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_DOUBLE_EQ(mean(sample), 5.0);
  // Squared deviations sum to 32.
  EXPECT_DOUBLE_EQ(standard_deviation(sample), std::sqrt(32.0 / 7.0));
  EXPECT_DOUBLE_EQ(coefficient_of_variation(sample), std::sqrt(32.0 / 7.0) / 5.0);
  EXPECT_DOUBLE_EQ(standard_deviation(std::vector<double>{3}), 0.0);
  EXPECT_TRUE(std::isnan(coefficient_of_variation(std::vector<double>{-1, 1})));
}

TEST(StatisticsTest, OnlineMomentsMatchTwoPassAndMerge) {
  const std::vector<double> sample = {2, 4, 4, 4, 5, 5, 7, 9};
  OnlineMoments all;
  for (double value : sample) all.add(value);
  EXPECT_EQ(all.count(), 8);
  EXPECT_DOUBLE_EQ(all.mean(), 5.0);
  EXPECT_DOUBLE_EQ(all.variance(), 32.0 / 7.0);
  EXPECT_DOUBLE_EQ(all.population_variance(), 4.0);
  EXPECT_DOUBLE_EQ(all.min(), 2.0);
  EXPECT_DOUBLE_EQ(all.max(), 9.0);

  OnlineMoments left;
  OnlineMoments right;
  for (size_t index = 0; index < 3; ++index) left.add(sample[index]);
  for (size_t index = 3; index < sample.size(); ++index) right.add(sample[index]);
  left.merge(right);
  EXPECT_EQ(left.count(), 8);
  EXPECT_DOUBLE_EQ(left.mean(), 5.0);
  EXPECT_DOUBLE_EQ(left.variance(), 32.0 / 7.0);
  EXPECT_DOUBLE_EQ(left.min(), 2.0);
  EXPECT_DOUBLE_EQ(left.max(), 9.0);

  OnlineMoments empty;
  empty.merge(all);
  EXPECT_DOUBLE_EQ(empty.variance(), 32.0 / 7.0);
  all.merge(OnlineMoments{});
  EXPECT_EQ(all.count(), 8);
  EXPECT_TRUE(std::isnan(OnlineMoments{}.coefficient_of_variation()));
}

TEST(StatisticsTest, WelfordStaysAccurateFarFromZero) {
  // A naive sum-of-squares formula loses every digit here; Welford keeps the variance exact.
  OnlineMoments moments;
  for (double value : {1e9 + 4, 1e9 + 7, 1e9 + 13, 1e9 + 16}) moments.add(value);
  EXPECT_DOUBLE_EQ(moments.mean(), 1e9 + 10);
  EXPECT_DOUBLE_EQ(moments.variance(), 30.0);  // (36 + 9 + 9 + 36) / 3
}

TEST(StatisticsTest, SplitMixMatchesReferenceOutput) {
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(rng.next(), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(rng.next(), 0x06c45d188009454fULL);
}

TEST(StatisticsTest, BoundedDrawsStayInRangeAndCoverIt) {
  SplitMix64 rng(42);
  std::vector<int> seen(7, 0);
  for (int draw = 0; draw < 7000; ++draw) {
    uint32_t value = rng.below(7);
    ASSERT_LT(value, 7u);
    ++seen[value];
  }
  for (int count : seen) EXPECT_GT(count, 800);
  for (int draw = 0; draw < 100; ++draw) EXPECT_EQ(rng.below(1), 0u);
  for (int draw = 0; draw < 100; ++draw) {
    double value = rng.uniform();
    EXPECT_GE(value, 0.0);
    EXPECT_LT(value, 1.0);
  }
}

TEST(StatisticsTest, OrderStatisticMedianInterval) {
  std::vector<double> sorted(100);
  std::iota(sorted.begin(), sorted.end(), 1.0);
  // n = 100 at 95 %: ranks ⌊50 − 9.8⌋ = 40 and ⌈51 + 9.8⌉ = 61.
  EXPECT_EQ(order_statistic_median_ci_sorted(sorted, 0.95), (Interval{40, 61}));
  std::vector<double> shuffled = sorted;
  std::reverse(shuffled.begin(), shuffled.end());
  std::swap(shuffled[3], shuffled[70]);
  EXPECT_EQ(order_statistic_median_ci_in_place(shuffled, 0.95), (Interval{40, 61}));
  // Too few values for 95 %: the interval is the whole range.
  const std::vector<double> five = {1, 2, 3, 4, 5};
  EXPECT_EQ(order_statistic_median_ci_sorted(five, 0.95), (Interval{1, 5}));
}

TEST(StatisticsTest, NormalQuantiles) {
  EXPECT_NEAR(normal_quantile(0.975), 1.9599639845400536, 1e-12);
  EXPECT_NEAR(normal_quantile(0.001), -3.090232306167813, 1e-12);
  EXPECT_NEAR(normal_quantile(0.5), 0.0, 1e-15);
  EXPECT_NEAR(normal_two_sided_critical(0.99), 2.5758293035489, 1e-12);
  EXPECT_NEAR(normal_two_sided_p(1.9599639845400536), 0.05, 1e-12);
  EXPECT_NEAR(normal_two_sided_p(-1.9599639845400536), 0.05, 1e-12);
  EXPECT_DOUBLE_EQ(normal_two_sided_p(0.0), 1.0);
}

TEST(StatisticsTest, IncompleteBetaClosedForms) {
  // I_x(1, 1) = x; I_x(a, 1) = x^a; I_x(1, b) = 1 − (1 − x)^b; I_½(a, a) = ½.
  for (double x : {0.01, 0.3, 0.5, 0.77, 0.999}) {
    EXPECT_NEAR(regularized_incomplete_beta(1.0, 1.0, x), x, 1e-14) << x;
    EXPECT_NEAR(regularized_incomplete_beta(3.5, 1.0, x), std::pow(x, 3.5), 1e-14) << x;
    EXPECT_NEAR(regularized_incomplete_beta(1.0, 2.5, x), 1.0 - std::pow(1.0 - x, 2.5), 1e-14) << x;
  }
  EXPECT_NEAR(regularized_incomplete_beta(7.0, 7.0, 0.5), 0.5, 1e-14);
  EXPECT_EQ(regularized_incomplete_beta(2.0, 3.0, 0.0), 0.0);
  EXPECT_EQ(regularized_incomplete_beta(2.0, 3.0, -1.0), 0.0);
  EXPECT_EQ(regularized_incomplete_beta(2.0, 3.0, 1.0), 1.0);
}

TEST(StatisticsTest, StudentTTwoSidedP) {
  // df = 1 is Cauchy: P(|T| ≥ 1) = ½; df = 2 has P(|T| ≥ t) = 1 − t / √(2 + t²).
  EXPECT_NEAR(student_t_two_sided_p(1.0, 1.0), 0.5, 1e-13);
  EXPECT_NEAR(student_t_two_sided_p(2.0, 2.0), 1.0 - 2.0 / std::sqrt(6.0), 1e-13);
  EXPECT_NEAR(student_t_two_sided_p(-2.0, 2.0), 1.0 - 2.0 / std::sqrt(6.0), 1e-13);
  // Tabulated 97.5 % quantiles.
  EXPECT_NEAR(student_t_two_sided_p(2.5705818366147395, 5.0), 0.05, 1e-9);
  EXPECT_NEAR(student_t_two_sided_p(2.2281388519649385, 10.0), 0.05, 1e-9);
  EXPECT_NEAR(student_t_two_sided_p(12.706204736174698, 1.0), 0.05, 1e-9);
  // Many degrees of freedom: the normal's.
  EXPECT_NEAR(student_t_two_sided_p(1.9599639845400536, 1e7), 0.05, 1e-6);
  // Far tails stay positive and small instead of rounding to 0 through 1 − (1 − p).
  const double far = student_t_two_sided_p(40.0, 7.0);
  EXPECT_GT(far, 0.0);
  EXPECT_LT(far, 1e-8);
  EXPECT_EQ(student_t_two_sided_p(0.0, 4.0), 1.0);
  EXPECT_EQ(student_t_two_sided_p(std::nan(""), 4.0), 1.0);
  EXPECT_EQ(student_t_two_sided_p(INFINITY, 4.0), 0.0);
}

TEST(StatisticsTest, BootstrapMedianOfConstantSampleIsThatConstant) {
  const std::vector<double> sample(25, 3.5);
  EXPECT_EQ(bootstrap_median_ci(sample, {.resamples = 500, .confidence = 0.95, .seed = 9}),
            (Interval{3.5, 3.5}));
  EXPECT_EQ(bootstrap_median_ci(std::vector<double>{2.0}, {}), (Interval{2.0, 2.0}));
}

TEST(StatisticsTest, CountingBootstrapEqualsSortingEachResample) {
  // Both draw the same indices from the same seed, so on a sorted sample the fast counting
  // method must give exactly the replicates that sorting each resample gives.
  for (size_t n : {1u, 2u, 7u, 10u, 101u}) {
    std::vector<double> sorted(n);
    for (size_t index = 0; index < n; ++index) sorted[index] = 1.0 + 0.37 * index * index;
    BootstrapOptions options{.resamples = 400, .confidence = 0.9, .seed = 1234 + n};
    Interval fast = bootstrap_median_ci(sorted, options);
    Interval slow = bootstrap_ci(
        sorted, [](std::span<double> resample) { return median_in_place(resample); }, options);
    EXPECT_EQ(fast, slow) << "n = " << n;
  }
}

TEST(StatisticsTest, BootstrapMedianIntervalIsSeededAndSensible) {
  std::vector<double> sample(101);
  std::iota(sample.begin(), sample.end(), 0.0);  // median 50
  BootstrapOptions options{.resamples = 2000, .confidence = 0.95, .seed = 1};
  Interval first = bootstrap_median_ci(sample, options);
  Interval again = bootstrap_median_ci(sample, options);
  EXPECT_EQ(first, again);
  EXPECT_TRUE(first.contains(50.0));
  EXPECT_FALSE(first.contains(35.0));
  EXPECT_FALSE(first.contains(65.0));
  options.seed = 2;
  EXPECT_NE(bootstrap_median_ci(sample, options), first);
}

TEST(StatisticsTest, WindowedBootstrapMatchesTheMediansSamplingDistribution) {
  // On the values 0..n−1 a resampled median's position has mean ≈ (n − 1)/2 and standard
  // deviation ≈ √n / 2, whichever method drew it: just below the windowed method's threshold
  // (counting every draw) and above it (binomials for the tails), for odd and even n.
  for (uint32_t n : {kWindowedBootstrapFrom - 1, kWindowedBootstrapFrom + 1, 40000u}) {
    std::vector<double> sorted(n);
    std::iota(sorted.begin(), sorted.end(), 0.0);
    SplitMix64 rng(77 + n);
    auto medians = bootstrap_medians_sorted(sorted, 2000, rng);
    ASSERT_EQ(medians.size(), 2000u);
    OnlineMoments moments;
    for (double value : medians) moments.add(value);
    const double expected_sd = std::sqrt(static_cast<double>(n)) / 2.0;
    // Five standard errors of the mean of 2000 replicates.
    EXPECT_NEAR(moments.mean(), (n - 1) / 2.0, 5.0 * expected_sd / std::sqrt(2000.0)) << n;
    EXPECT_NEAR(moments.standard_deviation() / expected_sd, 1.0, 0.1) << n;
    for (double value : medians) ASSERT_EQ(value, std::floor(value * 2.0) / 2.0);
  }
}

TEST(StatisticsTest, GenericBootstrapOfTheMean) {
  std::vector<double> sample = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  Interval interval =
      bootstrap_ci(sample, [](std::span<double> resample) { return mean(resample); },
                   {.resamples = 2000, .confidence = 0.95, .seed = 5});
  EXPECT_TRUE(interval.contains(5.5));
  EXPECT_GT(interval.low, 3.0);
  EXPECT_LT(interval.high, 8.0);
  EXPECT_LT(interval.low, interval.high);
}

}  // namespace
}  // namespace loupe
