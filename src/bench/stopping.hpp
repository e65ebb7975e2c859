// bench/stopping.hpp — when a sampler has enough samples: the stopping rule of the bench layer.
//
// A sampler (the subject runtime's, `loupe bench --cmd`'s, the harness benchmark's) calls these
// pure functions with its samples so far and the time it has spent. Sampling stops when the 95 %
// confidence interval of the quantity being decided (one arm's median, or the ratio of two
// medians) has a half-width, relative to the estimate, at or below `precision`; or when the time
// budget or the sample cap is spent, in which case the decision reports the half-width reached
// and the minimum detectable effect, so a reader knows what the run could and could not see.
// The interval used here is the distribution-free sign-test interval of the median: no seed, no
// resampling, O(n), so it can be evaluated every few samples. The verdict itself is computed
// later, by compare.hpp's bootstrap, from the raw samples.
// Thread-safety: pure functions over value types.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace loupe::bench {

struct StoppingRule {
  double precision = 0.01;          // target relative half-width of the confidence interval
  double budget_s = 2.0;            // wall-clock budget, warm-up included
  int64_t min_samples = 10;         // per arm, before precision may stop sampling
  int64_t max_samples = 1'000'000;  // per arm; 0 means no cap
  double confidence = 0.95;
};

enum class StopReason { kContinue, kPrecisionReached, kBudgetSpent, kSampleCapReached };
// "continue", "precision_reached", "budget_spent", "sample_cap_reached".
std::string_view stop_reason_name(StopReason reason);

struct StopDecision {
  bool stop = false;
  StopReason reason = StopReason::kContinue;
  // Half-width of the interval relative to the estimate; +inf with fewer than two samples.
  double relative_half_width = 0.0;
  // The smallest relative change a comparison at this half-width detects with 80 % power at
  // the rule's confidence (see minimum_detectable_effect).
  double minimum_detectable_effect = 0.0;
};

// Half-width of the sign-test interval of the median, relative to the median:
// (high − low) / 2 / median. +inf for fewer than two samples or a zero median.
double median_relative_half_width(std::span<const double> samples, double confidence);

// The smallest true relative effect that a two-sided test at `confidence` detects with
// probability `power`, given the relative half-width h of the estimate's interval:
// h · (z_{(1+confidence)/2} + z_{power}) / z_{(1+confidence)/2} — 1.43·h at 95 % and 80 %.
double minimum_detectable_effect(double relative_half_width, double confidence = 0.95,
                                 double power = 0.8);

// One arm. Precision stops sampling only after rule.min_samples; budget and cap stop it always.
// The effect reported is for comparing against an arm as noisy as this one (√2 · h wide).
StopDecision should_stop(std::span<const double> samples, double elapsed_s,
                         const StoppingRule& rule);

// Two interleaved arms, deciding the ratio of medians B/A. Its relative half-width is estimated
// from the arms' own: √(h_A² + h_B²) (the delta method for a ratio of independent estimates).
StopDecision should_stop_ab(std::span<const double> a, std::span<const double> b, double elapsed_s,
                            const StoppingRule& rule);

// Two arms sampled in rounds (each round one sample of A and one of B, back to back), deciding
// the median of the per-round ratios B/A: the half-width is that median's own, since load that
// falls on a whole round cancels in its ratio instead of widening both arms.
// rule.min_samples counts rounds.
StopDecision should_stop_paired(std::span<const double> round_ratios, double elapsed_s,
                                const StoppingRule& rule);

// The samples of two arms that share a round, in round order: a[i] and b[i] come from the same
// round. `rounds_a`/`rounds_b` hold each sample's round index, ascending (a round missing from
// one arm — a dropped sample — pairs with nothing). REQUIRES: rounds_x.size() == x.size().
struct RoundPairs {
  std::vector<double> a, b;
};
RoundPairs pair_by_round(std::span<const double> a, std::span<const int64_t> rounds_a,
                         std::span<const double> b, std::span<const int64_t> rounds_b);

// The per-round ratios B/A of the samples that share a round (pair_by_round), in round order:
// what should_stop_paired and compare_paired decide on.
std::vector<double> round_ratios(std::span<const double> a, std::span<const int64_t> rounds_a,
                                 std::span<const double> b, std::span<const int64_t> rounds_b);

}  // namespace loupe::bench
