#include "bench/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "bench/stopping.hpp"

namespace loupe::bench {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string fixed(double value, int digits = 4) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

std::string general(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%g", value);
  return buffer;
}

std::string percent(double confidence) { return general(confidence * 100.0) + "%"; }

std::string interval_text(Interval interval) {
  return "[" + fixed(interval.low) + ", " + fixed(interval.high) + "]";
}

Interval percentile_interval(std::vector<double>& replicates, double confidence) {
  std::sort(replicates.begin(), replicates.end());
  double tail = (1.0 - confidence) / 2.0;
  return {quantile_sorted(replicates, tail), quantile_sorted(replicates, 1.0 - tail)};
}

// Fills everything but the interval-derived fields from the sorted sample.
ArmSummary describe_sorted(const std::vector<double>& sorted) {
  ArmSummary summary;
  summary.n = static_cast<int64_t>(sorted.size());
  if (sorted.empty()) return summary;
  OnlineMoments moments;
  for (double value : sorted) moments.add(value);
  summary.median = quantile_sorted(sorted, 0.5);
  summary.cv = moments.coefficient_of_variation();
  summary.mean = moments.mean();
  summary.min = sorted.front();
  summary.max = sorted.back();
  return summary;
}

void set_interval(ArmSummary& summary, Interval interval, double confidence) {
  summary.median_ci = interval;
  summary.relative_half_width =
      summary.median > 0.0 ? interval.width() / 2.0 / summary.median : kNaN;
  summary.minimum_detectable_effect =
      minimum_detectable_effect(std::sqrt(2.0) * summary.relative_half_width, confidence);
}

std::vector<double> sorted_copy(std::span<const double> sample) {
  std::vector<double> copy(sample.begin(), sample.end());
  std::sort(copy.begin(), copy.end());
  return copy;
}

bool finite(Interval interval) {
  return std::isfinite(interval.low) && std::isfinite(interval.high);
}

}  // namespace

std::string_view ab_verdict_name(AbVerdict verdict) {
  switch (verdict) {
    case AbVerdict::kFaster:
      return "FASTER";
    case AbVerdict::kSlower:
      return "SLOWER";
    case AbVerdict::kSame:
      return "SAME";
    case AbVerdict::kAmbiguous:
      return "AMBIGUOUS";
  }
  return "AMBIGUOUS";
}

std::string_view ab_verdict_id(AbVerdict verdict) {
  switch (verdict) {
    case AbVerdict::kFaster:
      return "faster";
    case AbVerdict::kSlower:
      return "slower";
    case AbVerdict::kSame:
      return "same";
    case AbVerdict::kAmbiguous:
      return "ambiguous";
  }
  return "ambiguous";
}

ArmSummary summarize(std::span<const double> samples, const SummaryOptions& options) {
  auto sorted = sorted_copy(samples);
  ArmSummary summary = describe_sorted(sorted);
  if (sorted.empty()) return summary;
  SplitMix64 rng(options.seed);
  auto medians = bootstrap_medians_sorted(sorted, options.resamples, rng);
  set_interval(summary, percentile_interval(medians, options.confidence), options.confidence);
  return summary;
}

Decision decide(double ratio, Interval ci, double threshold, double confidence) {
  const std::string lower_band = fixed(1.0 - threshold);
  const std::string upper_band = fixed(1.0 + threshold);
  const std::string ci_text = "the " + percent(confidence) + " CI of B/A " + interval_text(ci);
  if (!finite(ci) || !std::isfinite(ratio)) {
    return {AbVerdict::kAmbiguous,
            "AMBIGUOUS: the CI of B/A is not finite (too few samples, or a median of zero)"};
  }
  if (ci.low >= 1.0 - threshold && ci.high <= 1.0 + threshold) {
    return {AbVerdict::kSame, "SAME: " + ci_text + " lies within [" + lower_band + ", " +
                                  upper_band + "] (threshold " + general(threshold) + ")"};
  }
  if (ci.low > 1.0 && ratio > 1.0 + threshold) {
    return {AbVerdict::kSlower, "SLOWER: " + ci_text + " lies above 1 and the estimate " +
                                    fixed(ratio) + " exceeds 1 + threshold = " + upper_band};
  }
  if (ci.high < 1.0 && ratio < 1.0 - threshold) {
    return {AbVerdict::kFaster, "FASTER: " + ci_text + " lies below 1 and the estimate " +
                                    fixed(ratio) + " is under 1 - threshold = " + lower_band};
  }
  if (ci.low > 1.0) {
    return {AbVerdict::kAmbiguous,
            "AMBIGUOUS: " + ci_text + " lies above 1, but the estimate " + fixed(ratio) +
                " does not exceed 1 + threshold = " + upper_band + " and the CI is not inside [" +
                lower_band + ", " + upper_band + "]"};
  }
  if (ci.high < 1.0) {
    return {AbVerdict::kAmbiguous,
            "AMBIGUOUS: " + ci_text + " lies below 1, but the estimate " + fixed(ratio) +
                " is not under 1 - threshold = " + lower_band + " and the CI is not inside [" +
                lower_band + ", " + upper_band + "]"};
  }
  return {AbVerdict::kAmbiguous, "AMBIGUOUS: " + ci_text + " contains 1 and is not inside [" +
                                     lower_band + ", " + upper_band + "] (threshold " +
                                     general(threshold) + ")"};
}

std::optional<int64_t> more_samples_to_decide(double ratio, Interval ci, double threshold,
                                              int64_t n_per_arm) {
  if (!finite(ci) || !std::isfinite(ratio) || n_per_arm <= 0) return std::nullopt;
  double target;
  if (ratio > 1.0 - threshold && ratio < 1.0 + threshold) {
    target = std::min(ratio - (1.0 - threshold), (1.0 + threshold) - ratio);
  } else if (ratio > 1.0 + threshold) {
    target = ratio - 1.0;
  } else if (ratio < 1.0 - threshold) {
    target = 1.0 - ratio;
  } else {
    return std::nullopt;  // exactly on 1 ± t: neither SAME nor a change can be called
  }
  double current = std::max(ratio - ci.low, ci.high - ratio);
  if (!(target > 0.0)) return std::nullopt;
  if (current <= target) return int64_t{1};
  double needed = static_cast<double>(n_per_arm) * (current / target) * (current / target);
  if (needed > 1e15) return std::nullopt;
  auto more = static_cast<int64_t>(std::ceil(needed)) - n_per_arm;
  return std::max<int64_t>(more, 1);
}

double mann_whitney_p(std::span<const double> a, std::span<const double> b) {
  if (a.empty() || b.empty()) return 1.0;
  struct Labeled {
    double value;
    bool from_b;
  };
  std::vector<Labeled> merged;
  merged.reserve(a.size() + b.size());
  for (double value : a) merged.push_back({value, false});
  for (double value : b) merged.push_back({value, true});
  std::sort(merged.begin(), merged.end(),
            [](const Labeled& left, const Labeled& right) { return left.value < right.value; });
  const auto total = static_cast<double>(merged.size());
  double rank_sum_b = 0.0;
  double tie_term = 0.0;  // Σ (t³ − t) over groups of t tied values
  for (size_t begin = 0; begin < merged.size();) {
    size_t end = begin + 1;
    while (end < merged.size() && merged[end].value == merged[begin].value) ++end;
    // 1-based ranks begin+1 .. end share their average.
    double average_rank = (static_cast<double>(begin + 1) + static_cast<double>(end)) / 2.0;
    for (size_t index = begin; index < end; ++index) {
      if (merged[index].from_b) rank_sum_b += average_rank;
    }
    auto tied = static_cast<double>(end - begin);
    tie_term += tied * tied * tied - tied;
    begin = end;
  }
  const auto n_a = static_cast<double>(a.size());
  const auto n_b = static_cast<double>(b.size());
  double u_b = rank_sum_b - n_b * (n_b + 1.0) / 2.0;
  double expected = n_a * n_b / 2.0;
  double variance = n_a * n_b / 12.0 * ((total + 1.0) - tie_term / (total * (total - 1.0)));
  if (!(variance > 0.0)) return 1.0;
  double distance = std::fabs(u_b - expected);
  double z = std::max(distance - 0.5, 0.0) / std::sqrt(variance);
  return std::min(1.0, normal_two_sided_p(z));
}

std::vector<double> benjamini_hochberg(std::span<const double> p_values) {
  const size_t m = p_values.size();
  std::vector<size_t> order(m);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t left, size_t right) { return p_values[left] < p_values[right]; });
  std::vector<double> adjusted(m);
  double running_min = 1.0;
  for (size_t position = m; position-- > 0;) {
    size_t index = order[position];
    double scaled = p_values[index] * static_cast<double>(m) / static_cast<double>(position + 1);
    running_min = std::min(running_min, scaled);
    adjusted[index] = running_min;
  }
  return adjusted;
}

Comparison compare(std::span<const double> a, std::span<const double> b,
                   const CompareOptions& options) {
  Comparison result;
  result.threshold = options.threshold;
  result.confidence = options.confidence;
  result.resamples = options.resamples;
  result.seed = options.seed;

  auto sorted_a = sorted_copy(a);
  auto sorted_b = sorted_copy(b);
  result.a = describe_sorted(sorted_a);
  result.b = describe_sorted(sorted_b);
  result.p_value = mann_whitney_p(a, b);
  if (sorted_a.empty() || sorted_b.empty()) {
    result.ratio = kNaN;
    result.ci = {kNaN, kNaN};
    result.relative_half_width = kNaN;
    result.minimum_detectable_effect = kNaN;
    result.rule = "AMBIGUOUS: an arm has no samples";
    result.more_samples_per_arm = kMinSamplesForVerdict;
    return result;
  }

  SplitMix64 rng(options.seed);
  auto medians_a = bootstrap_medians_sorted(sorted_a, options.resamples, rng);
  auto medians_b = bootstrap_medians_sorted(sorted_b, options.resamples, rng);
  std::vector<double> ratios(medians_a.size());
  for (size_t index = 0; index < ratios.size(); ++index) {
    ratios[index] = medians_b[index] / medians_a[index];
  }
  result.ratio = result.b.median / result.a.median;
  result.ci = percentile_interval(ratios, options.confidence);
  result.relative_half_width = result.ci.width() / 2.0 / result.ratio;
  result.minimum_detectable_effect =
      minimum_detectable_effect(result.relative_half_width, options.confidence);
  set_interval(result.a, percentile_interval(medians_a, options.confidence), options.confidence);
  set_interval(result.b, percentile_interval(medians_b, options.confidence), options.confidence);

  Decision decision = decide(result.ratio, result.ci, options.threshold, options.confidence);
  result.verdict = decision.verdict;
  result.rule = std::move(decision.rule);
  const int64_t n_per_arm = std::min(result.a.n, result.b.n);
  if (n_per_arm < kMinSamplesForVerdict) {
    // A bootstrap of a handful of values collapses onto them and would claim false certainty.
    result.rule = "AMBIGUOUS: only " + std::to_string(n_per_arm) +
                  " samples in the smaller arm; a verdict needs at least " +
                  std::to_string(kMinSamplesForVerdict) + " per arm (" + result.rule + ")";
    result.verdict = AbVerdict::kAmbiguous;
    result.more_samples_per_arm = kMinSamplesForVerdict - n_per_arm;
    return result;
  }
  if (result.verdict == AbVerdict::kAmbiguous) {
    result.more_samples_per_arm =
        more_samples_to_decide(result.ratio, result.ci, options.threshold, n_per_arm);
    if (result.more_samples_per_arm) {
      result.rule += "; about " + std::to_string(*result.more_samples_per_arm) +
                     " more samples per arm would likely decide";
    } else {
      result.rule += "; the estimate sits on the threshold, so more samples are unlikely to decide";
    }
  }
  return result;
}

void control_false_discovery(std::span<Comparison> points, double alpha) {
  std::vector<double> p_values;
  p_values.reserve(points.size());
  for (const auto& point : points) p_values.push_back(point.p_value);
  auto adjusted = benjamini_hochberg(p_values);
  for (size_t index = 0; index < points.size(); ++index) {
    Comparison& point = points[index];
    point.adjusted_p_value = adjusted[index];
    bool change = point.verdict == AbVerdict::kFaster || point.verdict == AbVerdict::kSlower;
    if (change && adjusted[index] > alpha) {
      point.rule = "AMBIGUOUS: the CI alone says " + std::string(ab_verdict_name(point.verdict)) +
                   ", but the Mann-Whitney p-value adjusted for " + std::to_string(points.size()) +
                   " points (Benjamini-Hochberg) is " + general(adjusted[index]) + " > " +
                   general(alpha) + " (" + point.rule + ")";
      point.verdict = AbVerdict::kAmbiguous;
    }
  }
}

GateVerdict non_inferiority_verdict(Interval ci, double bound) {
  if (!finite(ci)) return GateVerdict::kInconclusive;
  if (ci.high <= bound) return GateVerdict::kPass;
  if (ci.low > bound) return GateVerdict::kFail;
  return GateVerdict::kInconclusive;
}

NonInferiority non_inferiority(std::span<const double> a, std::span<const double> b, double bound,
                               const CompareOptions& options) {
  Comparison comparison = compare(a, b, options);
  NonInferiority result;
  result.ratio = comparison.ratio;
  result.ci = comparison.ci;
  result.bound = bound;
  result.n_a = comparison.a.n;
  result.n_b = comparison.b.n;
  result.verdict = non_inferiority_verdict(comparison.ci, bound);
  const std::string ci_text =
      "the " + percent(options.confidence) + " CI of B/A " + interval_text(comparison.ci);
  switch (result.verdict) {
    case GateVerdict::kPass:
      result.rule = "pass: the upper bound of " + ci_text + " is at most " + fixed(bound);
      break;
    case GateVerdict::kFail:
      result.rule = "fail: the lower bound of " + ci_text + " exceeds " + fixed(bound);
      break;
    default:
      result.rule = "inconclusive: " + ci_text + " contains the bound " + fixed(bound) +
                    " (or is not finite); more samples would narrow it";
      break;
  }
  return result;
}

}  // namespace loupe::bench
