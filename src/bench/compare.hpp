// bench/compare.hpp — from raw timing samples to summaries, A/B verdicts and gate helpers.
//
// Everything here runs in the `loupe` process on the samples a subject wrote (DESIGN.md's trust
// boundary), and every result carries its evidence: n, the interval, the threshold, the seed and
// a sentence naming the rule that decided it (STYLE.md item 6).
//   summarize     one arm: median, bootstrap CI of the median, CV, min, relative half-width
//   compare       two arms: ratio of medians B/A, seeded bootstrap CI, Mann-Whitney p-value,
//                 the verdict (FASTER, SLOWER, SAME, AMBIGUOUS) and, when AMBIGUOUS, how many
//                 more samples per arm would likely decide
//   compare_paired  two arms sampled in rounds: median of the per-round ratios B/A, its
//                 bootstrap CI, the p-value of a trimmed-mean t-test on the log ratios, the
//                 same verdict rule
//   compare_rounds  compare_paired on the samples that share a round when both arms carry
//                 round indices, else compare
//   control_false_discovery   Benjamini–Hochberg across the points of a sweep
//   non_inferiority           "B within 5 % of A" gates: pass, fail or inconclusive
// Samples are seconds (any positive unit works; ratios do not care). Intervals are percentile
// bootstrap intervals; a fixed seed gives bit-identical results everywhere.
// Thread-safety: pure functions over value types.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/finding.hpp"
#include "core/statistics.hpp"

namespace loupe::bench {

enum class AbVerdict { kFaster, kSlower, kSame, kAmbiguous };
// "FASTER", "SLOWER", "SAME", "AMBIGUOUS".
std::string_view ab_verdict_name(AbVerdict verdict);
// "faster", "slower", "same", "ambiguous": the last part of a finding id.
std::string_view ab_verdict_id(AbVerdict verdict);

struct ArmSummary {
  int64_t n = 0;
  double median = 0.0;
  Interval median_ci;                      // bootstrap, percentile method
  double relative_half_width = 0.0;        // median_ci.width() / 2 / median
  double minimum_detectable_effect = 0.0;  // against an arm as noisy as this one (stopping.hpp)
  double cv = 0.0;                         // sample standard deviation / mean
  double mean = 0.0;
  double min = 0.0;
  double max = 0.0;
};

struct SummaryOptions {
  double confidence = 0.95;
  int resamples = 2000;
  uint64_t seed = 0;
};

// REQUIRES: samples not empty.
ArmSummary summarize(std::span<const double> samples, const SummaryOptions& options);

// The verdict rule of DESIGN.md, with t the threshold and `ci` the interval of the ratio B/A:
//   SAME      iff the whole CI lies in [1 − t, 1 + t];
//   SLOWER    iff the CI lies entirely above 1 and the estimate is above 1 + t;
//   FASTER    iff the CI lies entirely below 1 and the estimate is below 1 − t;
//   AMBIGUOUS otherwise (also for a non-finite interval).
// `rule` is one sentence naming the interval and the condition that decided.
struct Decision {
  AbVerdict verdict = AbVerdict::kAmbiguous;
  std::string rule;
};
Decision decide(double ratio, Interval ci, double threshold, double confidence = 0.95);

// For an AMBIGUOUS result: about how many more samples per arm would likely decide, assuming the
// estimate stays put and the interval narrows like 1/√n. The half-width that would decide is
// the distance from the estimate to the nearest boundary it could settle on (1 ± t for SAME
// when the estimate lies inside the band; 1 when it lies outside). nullopt when no amount of
// samples decides: the estimate sits exactly on 1 ± t.
std::optional<int64_t> more_samples_to_decide(double ratio, Interval ci, double threshold,
                                              int64_t n_per_arm);

// Two-sided p-value of the Mann-Whitney U test that A and B come from the same distribution:
// normal approximation with the tie correction and a continuity correction of 1/2. 1 when either
// arm is empty or every value is tied. (With fewer than 4 samples per arm it cannot reach 0.05.)
double mann_whitney_p(std::span<const double> a, std::span<const double> b);

// Two-sided p-value that per-round ratios are centred on 1: Yuen's one-sample trimmed-mean t-test
// on their logarithms, 20 % trimmed from each end (g = ⌊0.2 n⌋ values each side; the variance
// of the winsorized logs; h − 1 degrees of freedom, h = n − 2g). Why not the sign test: it
// counts only which side of 1 a round fell on, so it cannot go below 2 / 2ⁿ — 8 rounds all slower
// to reach 0.05 / 6, and a merged kernel 1.21× slower in 7 rounds of 8 (one round lost to load)
// stayed undecided; a t-test on logs uses how far each round fell, and the trimming keeps one
// round lost to load (either way) from widening it. Calibrated with log ratios symmetric about 0
// under "no change", which alternating the order within rounds (AB, BA, ...) provides.
// Ratios not positive and finite are left out; 1 with fewer than 2 left, or when every log is 0;
// 0 when all the kept logs are equal and not 0.
double trimmed_t_p(std::span<const double> ratios);

// Benjamini–Hochberg adjusted p-values, in the input order: p_(i) · m / i, made monotone from the
// largest down and capped at 1. Rejecting where adjusted ≤ α controls the false-discovery rate
// at α.
std::vector<double> benjamini_hochberg(std::span<const double> p_values);

// Fewer samples than this in either arm make compare() answer AMBIGUOUS whatever the interval
// says: a bootstrap of a handful of values collapses onto them.
inline constexpr int64_t kMinSamplesForVerdict = 5;

struct CompareOptions {
  double threshold = 0.02;
  double confidence = 0.95;
  int resamples = 2000;
  uint64_t seed = 0;
};

struct Comparison {
  ArmSummary a;
  ArmSummary b;
  double ratio = 0.0;                // median(B) / median(A); > 1 means B is slower
  Interval ci;                       // bootstrap interval of the ratio
  double relative_half_width = 0.0;  // ci.width() / 2 / ratio
  double minimum_detectable_effect = 0.0;
  double threshold = 0.02;
  double confidence = 0.95;
  int resamples = 2000;
  uint64_t seed = 0;
  AbVerdict verdict = AbVerdict::kAmbiguous;
  std::string rule;
  double p_value = 1.0;                         // Mann-Whitney, two-sided
  std::optional<double> adjusted_p_value;       // set by control_false_discovery
  std::optional<int64_t> more_samples_per_arm;  // set when AMBIGUOUS and some n would decide
  // compare_paired: the number of rounds compared (ratio, ci and p_value are then those of the
  // per-round ratios, and more_samples_per_arm counts rounds); 0 for compare.
  int64_t pairs = 0;
};

// Resamples each arm independently (`resamples` replicates of each median, from one SplitMix64
// stream seeded with `seed`: A's replicates first, then B's), takes the ratio of each pair and
// returns the percentile interval; the arm summaries use the same replicates.
// REQUIRES: a and b not empty.
Comparison compare(std::span<const double> a, std::span<const double> b,
                   const CompareOptions& options);

// Two arms measured in rounds: a[i] and b[i] ran back to back in round i, so load that lasts
// longer than a round slows both and cancels in their ratio, where it would widen (and, when it
// falls unevenly on the arms, shift) the interval of the ratio of two medians computed as if
// every sample were independent. The estimate is the median of the per-round ratios B/A, its
// interval the percentile bootstrap of that median, the p-value trimmed_t_p's; the verdict
// rule is decide()'s, and fewer than kMinSamplesForVerdict ratios are AMBIGUOUS. A round whose
// ratio is not positive and finite is left out. `a` and `b` keep their own summaries; `pairs`
// counts the ratios. Alternate the order of a round's samples (AB, BA, ...) so that neither arm
// is always second. REQUIRES: a.size() == b.size().
Comparison compare_paired(std::span<const double> a, std::span<const double> b,
                          const CompareOptions& options);

// Two variants' samples, each with the round index of every sample as its sampler wrote them
// (stopping.hpp's pair_by_round): compare_paired over the samples that share a round when both
// variants carry one round index per sample, else compare, unpaired (a runtime that samples
// without rounds, or a variant pooled from runs some of which had none). The one rule by which
// a probe's analysis, the cascade's merged rounds and a gate decide "paired where the rounds say
// so".
Comparison compare_rounds(std::span<const double> a, std::span<const int64_t> rounds_a,
                          std::span<const double> b, std::span<const int64_t> rounds_b,
                          const CompareOptions& options);

// The same comparison stated the other way round: the arms swapped (B becomes the baseline and A
// the candidate), the ratio and its interval inverted, FASTER and SLOWER exchanged, and `rule`
// saying so. The p-values are unchanged (both tests are symmetric in the arms). This is how a
// gate that names the first variant as its candidate reads a bench (docs/formats.md,
// "Direction"); the verdict is the original's mirrored, not decided again, so the two never
// disagree.
Comparison reversed(const Comparison& comparison);

// Across the points of a sweep: fills adjusted_p_value (Benjamini–Hochberg over the points'
// p-values: Mann-Whitney's, or trimmed_t_p's for paired comparisons) and turns a FASTER or SLOWER
// whose adjusted p-value exceeds `alpha` into AMBIGUOUS, saying why in `rule`.
void control_false_discovery(std::span<Comparison> points, double alpha = 0.05);

// Non-inferiority gate on the ratio B/A ("B within 5 % of A" is bound 1.05): pass iff the upper
// bound of the CI ≤ bound; fail iff the lower bound > bound; inconclusive otherwise.
struct NonInferiority {
  GateVerdict verdict = GateVerdict::kInconclusive;
  double ratio = 0.0;
  Interval ci;
  double bound = 0.0;
  int64_t n_a = 0;
  int64_t n_b = 0;
  std::string rule;
};
GateVerdict non_inferiority_verdict(Interval ci, double bound);
NonInferiority non_inferiority(std::span<const double> a, std::span<const double> b, double bound,
                               const CompareOptions& options);

}  // namespace loupe::bench
