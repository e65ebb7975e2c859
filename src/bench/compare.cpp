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

// The verdict from result's ratio and interval, then AMBIGUOUS below kMinSamplesForVerdict and
// the "how many more" estimate. n counts samples per arm, or rounds when result.pairs > 0.
void finish_verdict(Comparison& result, int64_t n) {
  const bool paired = result.pairs > 0;
  Decision decision = decide(result.ratio, result.ci, result.threshold, result.confidence);
  result.verdict = decision.verdict;
  result.rule = std::move(decision.rule);
  if (n < kMinSamplesForVerdict) {
    // A bootstrap of a handful of values collapses onto them and would claim false certainty.
    result.rule = "AMBIGUOUS: only " + std::to_string(n) +
                  (paired ? " rounds" : " samples in the smaller arm") +
                  "; a verdict needs at least " + std::to_string(kMinSamplesForVerdict) +
                  (paired ? "" : " per arm") + " (" + result.rule + ")";
    result.verdict = AbVerdict::kAmbiguous;
    result.more_samples_per_arm = kMinSamplesForVerdict - n;
    return;
  }
  if (result.verdict == AbVerdict::kAmbiguous) {
    result.more_samples_per_arm =
        more_samples_to_decide(result.ratio, result.ci, result.threshold, n);
    if (result.more_samples_per_arm) {
      result.rule += "; about " + std::to_string(*result.more_samples_per_arm) +
                     (paired ? " more rounds" : " more samples per arm") + " would likely decide";
    } else {
      result.rule += "; the estimate sits on the threshold, so more samples are unlikely to decide";
    }
  }
}

// A comparison that carries the options it was made with, and no result yet.
Comparison comparison_with(const CompareOptions& options) {
  Comparison result;
  result.threshold = options.threshold;
  result.confidence = options.confidence;
  result.resamples = options.resamples;
  result.seed = options.seed;
  return result;
}

// Nothing to compare: every estimate NaN, AMBIGUOUS for `why`.
void no_estimate(Comparison& result, std::string why) {
  result.ratio = kNaN;
  result.ci = {kNaN, kNaN};
  result.relative_half_width = kNaN;
  result.minimum_detectable_effect = kNaN;
  result.rule = std::move(why);
  result.more_samples_per_arm = kMinSamplesForVerdict;
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
  const std::string ci_text =
      "the " + percent(confidence) + " CI of candidate/baseline " + interval_text(ci);
  if (!finite(ci) || !std::isfinite(ratio)) {
    return {AbVerdict::kAmbiguous,
            "AMBIGUOUS: the CI of candidate/baseline is not finite (too few samples, or a median "
            "of zero)"};
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

double trimmed_t_p(std::span<const double> ratios) {
  std::vector<double> logs;
  logs.reserve(ratios.size());
  for (double ratio : ratios) {
    if (ratio > 0.0 && std::isfinite(ratio)) logs.push_back(std::log(ratio));
  }
  const auto n = static_cast<int64_t>(logs.size());
  if (n < 2) return 1.0;
  std::sort(logs.begin(), logs.end());
  const int64_t trimmed = n / 5;  // ⌊0.2 n⌋ each side
  const int64_t kept = n - 2 * trimmed;
  if (kept < 2) return 1.0;
  double trimmed_sum = 0.0;
  for (int64_t index = trimmed; index < n - trimmed; ++index) trimmed_sum += logs[index];
  const double trimmed_mean = trimmed_sum / static_cast<double>(kept);
  // Winsorized: the trimmed values replaced by the nearest kept one.
  const double low = logs[trimmed], high = logs[n - 1 - trimmed];
  double winsorized_mean = 0.0;
  for (double value : logs) winsorized_mean += std::clamp(value, low, high);
  winsorized_mean /= static_cast<double>(n);
  double squares = 0.0;
  for (double value : logs) {
    const double deviation = std::clamp(value, low, high) - winsorized_mean;
    squares += deviation * deviation;
  }
  // Standard error of the trimmed mean: √(Σ (w − w̄)² / (h (h − 1))).
  const double standard_error =
      std::sqrt(squares / (static_cast<double>(kept) * static_cast<double>(kept - 1)));
  if (trimmed_mean == 0.0) return 1.0;
  if (!(standard_error > 0.0)) return 0.0;
  return student_t_two_sided_p(trimmed_mean / standard_error, static_cast<double>(kept - 1));
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
  Comparison result = comparison_with(options);
  auto sorted_a = sorted_copy(a);
  auto sorted_b = sorted_copy(b);
  result.a = describe_sorted(sorted_a);
  result.b = describe_sorted(sorted_b);
  result.p_value = mann_whitney_p(a, b);
  if (sorted_a.empty() || sorted_b.empty()) {
    no_estimate(result, "AMBIGUOUS: an arm has no samples");
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

  finish_verdict(result, std::min(result.a.n, result.b.n));
  return result;
}

Comparison compare_paired(std::span<const double> a, std::span<const double> b,
                          const CompareOptions& options) {
  Comparison result = comparison_with(options);
  std::vector<double> kept_a, kept_b, ratios;
  for (size_t round = 0; round < std::min(a.size(), b.size()); ++round) {
    const double ratio = b[round] / a[round];
    if (!(a[round] > 0.0) || !(b[round] > 0.0) || !std::isfinite(ratio)) continue;
    kept_a.push_back(a[round]);
    kept_b.push_back(b[round]);
    ratios.push_back(ratio);
  }
  result.pairs = static_cast<int64_t>(ratios.size());
  result.p_value = trimmed_t_p(ratios);
  SummaryOptions summary_options;
  summary_options.confidence = options.confidence;
  summary_options.resamples = options.resamples;
  summary_options.seed = options.seed;
  result.a = summarize(kept_a, summary_options);
  result.b = summarize(kept_b, summary_options);
  if (ratios.empty()) {
    no_estimate(result, "AMBIGUOUS: no round holds positive times of both arms (paired by round)");
    return result;
  }
  const ArmSummary of_ratios = summarize(ratios, summary_options);
  result.ratio = of_ratios.median;
  result.ci = of_ratios.median_ci;
  result.relative_half_width = result.ci.width() / 2.0 / result.ratio;
  // The interval is the ratio's own (not a combination of two arms'), so no √2.
  result.minimum_detectable_effect =
      minimum_detectable_effect(result.relative_half_width, options.confidence);
  finish_verdict(result, result.pairs);
  result.rule = "paired by round: median of " + std::to_string(result.pairs) +
                " per-round ratios candidate/baseline; " + result.rule;
  return result;
}

Comparison compare_rounds(std::span<const double> a, std::span<const int64_t> rounds_a,
                          std::span<const double> b, std::span<const int64_t> rounds_b,
                          const CompareOptions& options) {
  const bool paired = !rounds_a.empty() && !rounds_b.empty() && rounds_a.size() == a.size() &&
                      rounds_b.size() == b.size();
  if (!paired) return compare(a, b, options);
  const RoundPairs pairs = pair_by_round(a, rounds_a, b, rounds_b);
  return compare_paired(pairs.a, pairs.b, options);
}

Comparison reversed(const Comparison& comparison) {
  Comparison out = comparison;
  out.a = comparison.b;
  out.b = comparison.a;
  out.ratio = 1.0 / comparison.ratio;
  out.ci = {1.0 / comparison.ci.high, 1.0 / comparison.ci.low};
  out.relative_half_width = out.ci.width() / 2.0 / out.ratio;
  if (comparison.verdict == AbVerdict::kFaster) {
    out.verdict = AbVerdict::kSlower;
  } else if (comparison.verdict == AbVerdict::kSlower) {
    out.verdict = AbVerdict::kFaster;
  }
  out.rule = std::string(ab_verdict_name(out.verdict)) +
             ": the other way round from the comparison with the arms swapped, which said " +
             comparison.rule;
  return out;
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
                   ", but the " + (point.pairs > 0 ? "trimmed t-test" : "Mann-Whitney") +
                   " p-value adjusted for " + std::to_string(points.size()) +
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
  const std::string ci_text = "the " + percent(options.confidence) + " CI of candidate/baseline " +
                              interval_text(comparison.ci);
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
