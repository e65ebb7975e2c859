// core/statistics.hpp — the statistics primitives every layer uses: quantiles, medians, seeded
// bootstrap confidence intervals, online moments.
//
// Conventions: samples are spans of doubles; a function that needs order copies and sorts unless
// its name says `_sorted` (the caller guarantees ascending order) or `_in_place` (it reorders the
// caller's buffer). Randomness comes only from SplitMix64 seeded by the caller, who records the
// seed, so every interval is reproducible bit for bit on any platform (no std::*_distribution,
// whose output differs between standard libraries).
// Thread-safety: free functions are pure; SplitMix64 and OnlineMoments are value types owned by
// one thread.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace loupe {

// A closed interval [low, high].
struct Interval {
  double low = 0.0;
  double high = 0.0;
  bool contains(double value) const { return low <= value && value <= high; }
  double width() const { return high - low; }
  bool operator==(const Interval&) const = default;
};

// Quantile by linear interpolation between order statistics (Hyndman & Fan type 7, the default
// of R, NumPy and Excel): with x sorted ascending and h = (n − 1)·p, the quantile is
// x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋ + 1] − x[⌊h⌋]). p = 0 gives the minimum, p = 1 the maximum.
// REQUIRES: sample not empty, 0 ≤ p ≤ 1, and for quantile_sorted ascending order.
double quantile_sorted(std::span<const double> sorted, double p);
double quantile(std::span<const double> sample, double p);
// The type-7 median: the middle value, or the mean of the two middle values for even n.
double median(std::span<const double> sample);
// The same median, computed with nth_element; reorders `sample`. REQUIRES: sample not empty.
double median_in_place(std::span<double> sample);

double mean(std::span<const double> sample);
// Sample standard deviation (n − 1 in the denominator); 0 for fewer than two values.
double standard_deviation(std::span<const double> sample);
// Coefficient of variation: sample standard deviation / mean. NaN when the mean is 0.
double coefficient_of_variation(std::span<const double> sample);

// SplitMix64 (Steele, Lea & Flood 2014): 64 bits of state, passes BigCrush, and identical output
// everywhere, which makes a recorded seed enough to reproduce an interval.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound), by Lemire's multiply-shift with rejection (no modulo bias).
  // REQUIRES: 0 < bound < 2^32.
  uint32_t below(uint32_t bound);
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

struct BootstrapOptions {
  int resamples = 2000;
  double confidence = 0.95;
  uint64_t seed = 0;
};

// The statistic a bootstrap resamples; it may reorder its argument.
using Statistic = std::function<double(std::span<double>)>;

// Percentile-method bootstrap interval: draws `resamples` samples of size n with replacement,
// evaluates `statistic` on each, and returns the type-7 quantiles (1 − confidence)/2 and
// (1 + confidence)/2 of those values. REQUIRES: sample not empty, resamples ≥ 2,
// 0 < confidence < 1.
Interval bootstrap_ci(std::span<const double> sample, const Statistic& statistic,
                      const BootstrapOptions& options);

// `resamples` bootstrap replicates of the type-7 median of `sorted`, drawn with `rng`. Below
// kWindowedBootstrapFrom values it counts how often each index is drawn instead of sorting each
// resample (O(n) per replicate, the same draws as bootstrap_ci would make). From there on it
// draws, with two binomials, how many of the n draws fall below and above a window of ±3√n
// indices around the middle and places only the rest (O(√n) per replicate); the median leaves
// that window with probability ~2e-9, and then the replicate is drawn in full.
// REQUIRES: sorted ascending, not empty, size < 2^32.
inline constexpr uint32_t kWindowedBootstrapFrom = 4096;
std::vector<double> bootstrap_medians_sorted(std::span<const double> sorted, int resamples,
                                             SplitMix64& rng);
// Percentile-method bootstrap interval of the median (bootstrap_medians_sorted, then quantiles).
Interval bootstrap_median_ci(std::span<const double> sample, const BootstrapOptions& options);

// Distribution-free interval of the median from two order statistics (the sign-test interval,
// normal approximation to the binomial): the order statistics of 1-based ranks ⌊n/2 − z·√n/2⌋
// and ⌈1 + n/2 + z·√n/2⌉, clamped to [1, n] (ranks 40 and 61 for n = 100 at 95 %). Needs no
// resampling and no seed, so it suits checks repeated while sampling. Returns [min, max] when n is
// too small for the requested confidence. REQUIRES: sorted ascending and not empty; 0 < confidence
// < 1.
Interval order_statistic_median_ci_sorted(std::span<const double> sorted, double confidence);
// The same interval without sorting the whole sample (two nth_element calls); reorders `sample`.
Interval order_statistic_median_ci_in_place(std::span<double> sample, double confidence);

// z such that P(|Z| ≤ z) = confidence for a standard normal Z (two-sided critical value),
// accurate to ~1e-9 (Acklam's rational approximation, one Newton step).
// REQUIRES: 0 < confidence < 1.
double normal_two_sided_critical(double confidence);
// Standard normal quantile Φ⁻¹(p). REQUIRES: 0 < p < 1.
double normal_quantile(double p);
// Two-sided p-value of a standard normal statistic: P(|Z| ≥ |z|).
double normal_two_sided_p(double z);
// The regularized incomplete beta function I_x(a, b), by its continued fraction (evaluated with
// Lentz's method, on the side of the symmetry I_x(a, b) = 1 − I_{1−x}(b, a) where it converges
// fast), to ~1e-14. 0 for x ≤ 0, 1 for x ≥ 1. REQUIRES: a > 0, b > 0.
double regularized_incomplete_beta(double a, double b, double x);
// Two-sided p-value of Student's t statistic with `df` degrees of freedom: P(|T| ≥ |t|) =
// I_{df/(df+t²)}(df/2, 1/2). 1 for t = 0 or a NaN t, 0 for an infinite t. REQUIRES: df > 0.
double student_t_two_sided_p(double t, double df);

// Mean and variance in one pass (Welford 1962), mergeable (Chan, Golub & LeVeque 1979), so
// threads or files can each keep one and combine them exactly.
class OnlineMoments {
 public:
  void add(double value);
  void merge(const OnlineMoments& other);
  int64_t count() const { return count_; }
  double mean() const { return mean_; }
  // Sample variance (n − 1); 0 for fewer than two values.
  double variance() const { return count_ > 1 ? m2_ / static_cast<double>(count_ - 1) : 0.0; }
  // Population variance (n); 0 when empty.
  double population_variance() const {
    return count_ > 0 ? m2_ / static_cast<double>(count_) : 0.0;
  }
  double standard_deviation() const { return std::sqrt(variance()); }
  // standard_deviation() / mean(); NaN when the mean is 0.
  double coefficient_of_variation() const;
  double min() const { return min_; }
  double max() const { return max_; }

 private:
  int64_t count_ = 0;
  double mean_ = 0.0;
  double m2_ = 0.0;  // sum of squared deviations from the mean
  double min_ = 0.0;
  double max_ = 0.0;
};

}  // namespace loupe
