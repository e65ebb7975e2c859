#include "bench/stopping.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "core/statistics.hpp"

namespace loupe::bench {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

StopDecision decide_stop(double relative_half_width, double effect, int64_t n, double elapsed_s,
                         const StoppingRule& rule) {
  StopDecision decision;
  decision.relative_half_width = relative_half_width;
  decision.minimum_detectable_effect = effect;
  if (n >= rule.min_samples && relative_half_width <= rule.precision) {
    decision.stop = true;
    decision.reason = StopReason::kPrecisionReached;
  } else if (elapsed_s >= rule.budget_s) {
    decision.stop = true;
    decision.reason = StopReason::kBudgetSpent;
  } else if (rule.max_samples > 0 && n >= rule.max_samples) {
    decision.stop = true;
    decision.reason = StopReason::kSampleCapReached;
  }
  return decision;
}

}  // namespace

std::string_view stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kContinue:
      return "continue";
    case StopReason::kPrecisionReached:
      return "precision_reached";
    case StopReason::kBudgetSpent:
      return "budget_spent";
    case StopReason::kSampleCapReached:
      return "sample_cap_reached";
  }
  return "continue";
}

double median_relative_half_width(std::span<const double> samples, double confidence) {
  if (samples.size() < 2) return kInfinity;
  std::vector<double> scratch(samples.begin(), samples.end());
  double center = median_in_place(scratch);
  Interval interval = order_statistic_median_ci_in_place(scratch, confidence);
  if (!(center > 0.0)) return kInfinity;
  return interval.width() / 2.0 / center;
}

double minimum_detectable_effect(double relative_half_width, double confidence, double power) {
  double z_alpha = normal_two_sided_critical(confidence);
  double z_power = normal_quantile(power);
  return relative_half_width * (z_alpha + z_power) / z_alpha;
}

StopDecision should_stop(std::span<const double> samples, double elapsed_s,
                         const StoppingRule& rule) {
  double half_width = median_relative_half_width(samples, rule.confidence);
  double effect =
      minimum_detectable_effect(std::sqrt(2.0) * half_width, rule.confidence, /*power=*/0.8);
  return decide_stop(half_width, effect, static_cast<int64_t>(samples.size()), elapsed_s, rule);
}

StopDecision should_stop_ab(std::span<const double> a, std::span<const double> b, double elapsed_s,
                            const StoppingRule& rule) {
  double half_a = median_relative_half_width(a, rule.confidence);
  double half_b = median_relative_half_width(b, rule.confidence);
  double half_width = std::sqrt(half_a * half_a + half_b * half_b);
  double effect = minimum_detectable_effect(half_width, rule.confidence, /*power=*/0.8);
  auto n = static_cast<int64_t>(std::min(a.size(), b.size()));
  return decide_stop(half_width, effect, n, elapsed_s, rule);
}

StopDecision should_stop_paired(std::span<const double> round_ratios, double elapsed_s,
                                const StoppingRule& rule) {
  double half_width = median_relative_half_width(round_ratios, rule.confidence);
  double effect = minimum_detectable_effect(half_width, rule.confidence, /*power=*/0.8);
  return decide_stop(half_width, effect, static_cast<int64_t>(round_ratios.size()), elapsed_s,
                     rule);
}

RoundPairs pair_by_round(std::span<const double> a, std::span<const int64_t> rounds_a,
                         std::span<const double> b, std::span<const int64_t> rounds_b) {
  RoundPairs pairs;
  size_t index_a = 0, index_b = 0;
  while (index_a < a.size() && index_a < rounds_a.size() && index_b < b.size() &&
         index_b < rounds_b.size()) {
    if (rounds_a[index_a] < rounds_b[index_b]) {
      ++index_a;
    } else if (rounds_b[index_b] < rounds_a[index_a]) {
      ++index_b;
    } else {
      pairs.a.push_back(a[index_a++]);
      pairs.b.push_back(b[index_b++]);
    }
  }
  return pairs;
}

std::vector<double> round_ratios(std::span<const double> a, std::span<const int64_t> rounds_a,
                                 std::span<const double> b, std::span<const int64_t> rounds_b) {
  const RoundPairs pairs = pair_by_round(a, rounds_a, b, rounds_b);
  std::vector<double> ratios(pairs.a.size());
  for (size_t round = 0; round < ratios.size(); ++round)
    ratios[round] = pairs.b[round] / pairs.a[round];
  return ratios;
}

}  // namespace loupe::bench
