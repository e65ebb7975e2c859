#include "core/statistics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace loupe {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> sorted_copy(std::span<const double> sample) {
  std::vector<double> copy(sample.begin(), sample.end());
  std::sort(copy.begin(), copy.end());
  return copy;
}

// 0-based rank of an order statistic.
size_t rank_to_index(int64_t rank_1_based, size_t n) {
  int64_t clamped = std::clamp<int64_t>(rank_1_based, 1, static_cast<int64_t>(n));
  return static_cast<size_t>(clamped - 1);
}

// 1-based ranks of the sign-test interval of the median.
std::pair<size_t, size_t> median_ci_indices(size_t n, double confidence) {
  double z = normal_two_sided_critical(confidence);
  double half = z * std::sqrt(static_cast<double>(n)) / 2.0;
  double n_half = static_cast<double>(n) / 2.0;
  auto lower = static_cast<int64_t>(std::floor(n_half - half));
  auto upper = static_cast<int64_t>(std::ceil(1.0 + n_half + half));
  return {rank_to_index(lower, n), rank_to_index(upper, n)};
}

// Binomial(trials, p) by inversion, searching outward from the mode, so the expected number of
// steps is about √(trials·p·(1 − p)). Exact up to rounding of the probabilities.
uint64_t binomial(SplitMix64& rng, uint64_t trials, double p) {
  if (trials == 0 || p <= 0.0) return 0;
  if (p >= 1.0) return trials;
  const double q = 1.0 - p;
  const auto count = static_cast<double>(trials);
  uint64_t mode = std::min<uint64_t>(trials, static_cast<uint64_t>((count + 1.0) * p));
  const auto m = static_cast<double>(mode);
  int sign = 0;
  double log_mode_probability = lgamma_r(count + 1.0, &sign) - lgamma_r(m + 1.0, &sign) -
                                lgamma_r(count - m + 1.0, &sign) + m * std::log(p) +
                                (count - m) * std::log(q);
  double u = rng.uniform() - std::exp(log_mode_probability);
  if (u < 0.0) return mode;
  double up_probability = std::exp(log_mode_probability);
  double down_probability = up_probability;
  uint64_t up = mode;
  uint64_t down = mode;
  while (up < trials || down > 0) {
    if (up < trials) {
      up_probability *= static_cast<double>(trials - up) / static_cast<double>(up + 1) * p / q;
      ++up;
      u -= up_probability;
      if (u < 0.0) return up;
    }
    if (down > 0) {
      down_probability *=
          static_cast<double>(down) / static_cast<double>(trials - down + 1) * q / p;
      --down;
      u -= down_probability;
      if (u < 0.0) return down;
    }
    // What is left of u is rounding error in the probabilities summed so far.
    if (up_probability < 1e-300 && down_probability < 1e-300) break;
  }
  return mode;
}

}  // namespace

double quantile_sorted(std::span<const double> sorted, double p) {
  if (sorted.empty()) return kNaN;
  double h = static_cast<double>(sorted.size() - 1) * std::clamp(p, 0.0, 1.0);
  auto lower = static_cast<size_t>(std::floor(h));
  if (lower + 1 >= sorted.size()) return sorted.back();
  double fraction = h - static_cast<double>(lower);
  return sorted[lower] + fraction * (sorted[lower + 1] - sorted[lower]);
}

double quantile(std::span<const double> sample, double p) {
  auto sorted = sorted_copy(sample);
  return quantile_sorted(sorted, p);
}

double median(std::span<const double> sample) { return quantile(sample, 0.5); }

double median_in_place(std::span<double> sample) {
  if (sample.empty()) return kNaN;
  size_t n = sample.size();
  size_t upper = n / 2;
  std::nth_element(sample.begin(), sample.begin() + upper, sample.end());
  double upper_value = sample[upper];
  if (n % 2 == 1) return upper_value;
  // Everything before `upper` is ≤ it after nth_element; the largest of those is the lower middle.
  double lower_value = *std::max_element(sample.begin(), sample.begin() + upper);
  return lower_value + 0.5 * (upper_value - lower_value);
}

double mean(std::span<const double> sample) {
  OnlineMoments moments;
  for (double value : sample) moments.add(value);
  return sample.empty() ? kNaN : moments.mean();
}

double standard_deviation(std::span<const double> sample) {
  OnlineMoments moments;
  for (double value : sample) moments.add(value);
  return moments.standard_deviation();
}

double coefficient_of_variation(std::span<const double> sample) {
  OnlineMoments moments;
  for (double value : sample) moments.add(value);
  return moments.coefficient_of_variation();
}

uint32_t SplitMix64::below(uint32_t bound) {
  uint64_t product = static_cast<uint64_t>(static_cast<uint32_t>(next())) * bound;
  auto low = static_cast<uint32_t>(product);
  if (low < bound) {
    uint32_t threshold = static_cast<uint32_t>(-bound) % bound;
    while (low < threshold) {
      product = static_cast<uint64_t>(static_cast<uint32_t>(next())) * bound;
      low = static_cast<uint32_t>(product);
    }
  }
  return static_cast<uint32_t>(product >> 32);
}

Interval bootstrap_ci(std::span<const double> sample, const Statistic& statistic,
                      const BootstrapOptions& options) {
  if (sample.empty()) return {kNaN, kNaN};
  SplitMix64 rng(options.seed);
  auto n = static_cast<uint32_t>(sample.size());
  std::vector<double> resample(n);
  std::vector<double> replicates;
  replicates.reserve(static_cast<size_t>(std::max(options.resamples, 0)));
  for (int replicate = 0; replicate < options.resamples; ++replicate) {
    for (auto& value : resample) value = sample[rng.below(n)];
    replicates.push_back(statistic(resample));
  }
  std::sort(replicates.begin(), replicates.end());
  double tail = (1.0 - options.confidence) / 2.0;
  return {quantile_sorted(replicates, tail), quantile_sorted(replicates, 1.0 - tail)};
}

std::vector<double> bootstrap_medians_sorted(std::span<const double> sorted, int resamples,
                                             SplitMix64& rng) {
  std::vector<double> medians;
  if (sorted.empty() || resamples <= 0) return medians;
  medians.reserve(static_cast<size_t>(resamples));
  auto n = static_cast<uint32_t>(sorted.size());
  // The type-7 median of n values is the order statistic (n − 1)/2 (0-based) for odd n, and the
  // mean of order statistics n/2 − 1 and n/2 for even n.
  const uint32_t lower_rank = (n - 1) / 2;
  const uint32_t upper_rank = n / 2;
  auto median_of_counts = [&](const std::vector<uint32_t>& draws_per_index, uint32_t first_index,
                              uint64_t drawn_before) {
    // The resample's order statistic r is sorted[j] for the first j whose cumulative count
    // exceeds r.
    uint64_t cumulative = drawn_before;
    uint32_t offset = 0;
    for (;; ++offset) {
      cumulative += draws_per_index[offset];
      if (cumulative > lower_rank) break;
    }
    double lower_value = sorted[first_index + offset];
    if (upper_rank == lower_rank) return lower_value;
    while (cumulative <= upper_rank) cumulative += draws_per_index[++offset];
    double upper_value = sorted[first_index + offset];
    return lower_value + 0.5 * (upper_value - lower_value);
  };
  std::vector<uint32_t> all_counts;
  auto full_replicate = [&]() {
    all_counts.assign(n, 0u);
    for (uint32_t draw = 0; draw < n; ++draw) ++all_counts[rng.below(n)];
    return median_of_counts(all_counts, 0, 0);
  };

  if (n < kWindowedBootstrapFrom) {
    for (int replicate = 0; replicate < resamples; ++replicate) {
      medians.push_back(full_replicate());
    }
    return medians;
  }

  // Large n: only order statistics near the middle can become a resample's median (the median's
  // rank moves by about √n / 2), so draw how many of the n draws land below and above a window
  // of ±3√n indices (two binomials), and place only the rest, one by one, inside it.
  const auto half_window = static_cast<uint32_t>(std::ceil(3.0 * std::sqrt(double(n))));
  const uint32_t window_begin = lower_rank > half_window ? lower_rank - half_window : 0;
  const uint32_t window_end = std::min<uint32_t>(n, upper_rank + half_window + 1);
  const uint32_t window = window_end - window_begin;
  const double below_probability = static_cast<double>(window_begin) / n;
  const double above_probability =
      static_cast<double>(n - window_end) / static_cast<double>(n - window_begin);
  std::vector<uint32_t> window_counts(window);
  for (int replicate = 0; replicate < resamples; ++replicate) {
    uint64_t below = binomial(rng, n, below_probability);
    uint64_t above = binomial(rng, n - below, above_probability);
    uint64_t inside = n - below - above;
    if (below > lower_rank || below + inside <= upper_rank) {
      // The median left the window (about 2e-9 of replicates): resample in full.
      medians.push_back(full_replicate());
      continue;
    }
    std::fill(window_counts.begin(), window_counts.end(), 0u);
    for (uint64_t draw = 0; draw < inside; ++draw) ++window_counts[rng.below(window)];
    medians.push_back(median_of_counts(window_counts, window_begin, below));
  }
  return medians;
}

Interval bootstrap_median_ci(std::span<const double> sample, const BootstrapOptions& options) {
  if (sample.empty()) return {kNaN, kNaN};
  auto sorted = sorted_copy(sample);
  SplitMix64 rng(options.seed);
  auto medians = bootstrap_medians_sorted(sorted, options.resamples, rng);
  std::sort(medians.begin(), medians.end());
  double tail = (1.0 - options.confidence) / 2.0;
  return {quantile_sorted(medians, tail), quantile_sorted(medians, 1.0 - tail)};
}

Interval order_statistic_median_ci_sorted(std::span<const double> sorted, double confidence) {
  if (sorted.empty()) return {kNaN, kNaN};
  auto [lower, upper] = median_ci_indices(sorted.size(), confidence);
  return {sorted[lower], sorted[upper]};
}

Interval order_statistic_median_ci_in_place(std::span<double> sample, double confidence) {
  if (sample.empty()) return {kNaN, kNaN};
  auto [lower, upper] = median_ci_indices(sample.size(), confidence);
  std::nth_element(sample.begin(), sample.begin() + upper, sample.end());
  double upper_value = sample[upper];
  std::nth_element(sample.begin(), sample.begin() + lower, sample.begin() + upper);
  return {sample[lower], upper_value};
}

double normal_quantile(double p) {
  if (!(p > 0.0 && p < 1.0)) {
    if (p == 0.0) return -std::numeric_limits<double>::infinity();
    if (p == 1.0) return std::numeric_limits<double>::infinity();
    return kNaN;
  }
  // Acklam's rational approximation (relative error < 1.15e-9), refined by one Halley step.
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                 -2.759285104469687e+02, 1.383577518672690e+02,
                                 -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                 -1.556989798598866e+02, 6.680131188771972e+01,
                                 -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                 -2.400758277161838e+00, -2.549732539343734e+00,
                                 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                 2.445134137142996e+00, 3.754408661907416e+00};
  constexpr double kLow = 0.02425;
  double x;
  if (p < kLow) {
    double q = std::sqrt(-2.0 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  } else if (p <= 1.0 - kLow) {
    double q = p - 0.5;
    double r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
  } else {
    double q = std::sqrt(-2.0 * std::log(1.0 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  }
  double error = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
  double u = error * std::sqrt(2.0 * M_PI) * std::exp(x * x / 2.0);
  return x - u / (1.0 + x * u / 2.0);
}

double normal_two_sided_critical(double confidence) {
  return normal_quantile(0.5 + confidence / 2.0);
}

double normal_two_sided_p(double z) { return std::erfc(std::fabs(z) / std::sqrt(2.0)); }

double regularized_incomplete_beta(double a, double b, double x) {
  if (!(x > 0.0)) return 0.0;
  if (x >= 1.0) return 1.0;
  // The continued fraction converges quickly for x < (a + 1) / (a + b + 2); past that, the
  // symmetric side does.
  if (x > (a + 1.0) / (a + b + 2.0)) return 1.0 - regularized_incomplete_beta(b, a, 1.0 - x);
  // I_x(a, b) = x^a (1 − x)^b / (a B(a, b)) · 1 / (1 + d1 / (1 + d2 / (1 + ...))), with
  // d(2m+1) = −(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)) and
  // d(2m)   =  m (b − m) x / ((a + 2m − 1)(a + 2m)).
  const double log_front =
      std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  constexpr double kTiny = 1e-300;
  double value = 1.0, upper = 1.0, lower = 0.0;  // Lentz: value = upper-ratio products
  for (int step = 0; step <= 400; ++step) {
    const double m = static_cast<double>(step / 2);
    double term;
    if (step == 0) {
      term = 1.0;
    } else if (step % 2 == 0) {
      term = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
    } else {
      term = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0));
    }
    lower = 1.0 + term * lower;
    if (std::fabs(lower) < kTiny) lower = kTiny;
    lower = 1.0 / lower;
    upper = 1.0 + term / upper;
    if (std::fabs(upper) < kTiny) upper = kTiny;
    const double factor = upper * lower;
    value *= factor;
    if (std::fabs(1.0 - factor) < 1e-15) break;
  }
  return std::clamp(std::exp(log_front) * (value - 1.0) / a, 0.0, 1.0);
}

double student_t_two_sided_p(double t, double df) {
  if (std::isnan(t) || t == 0.0) return 1.0;
  if (std::isinf(t)) return 0.0;
  return regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
}

void OnlineMoments::add(double value) {
  if (count_ == 0) {
    min_ = value;
    max_ = value;
  } else {
    min_ = std::min(min_, value);
    max_ = std::max(max_, value);
  }
  ++count_;
  double delta = value - mean_;
  mean_ += delta / static_cast<double>(count_);
  m2_ += delta * (value - mean_);
}

void OnlineMoments::merge(const OnlineMoments& other) {
  if (other.count_ == 0) return;
  if (count_ == 0) {
    *this = other;
    return;
  }
  auto n_a = static_cast<double>(count_);
  auto n_b = static_cast<double>(other.count_);
  double total = n_a + n_b;
  double delta = other.mean_ - mean_;
  mean_ += delta * n_b / total;
  m2_ += other.m2_ + delta * delta * n_a * n_b / total;
  count_ += other.count_;
  min_ = std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
}

double OnlineMoments::coefficient_of_variation() const {
  if (count_ == 0 || mean_ == 0.0) return kNaN;
  return standard_deviation() / mean_;
}

}  // namespace loupe
