// bench/report.hpp — JSON forms of bench results and the finding a comparison yields.
//
// Shapes (numbers that are not finite are written as "nan"/"inf", core/json.hpp):
//   interval      [low, high]
//   summary       {n, median_s, median_ci_s, relative_half_width, minimum_detectable_effect, cv,
//                  mean_s, min_s, max_s}
//   comparison    {baseline, candidate, ratio_of: "candidate/baseline", ratio, ci,
//                  relative_half_width, minimum_detectable_effect, verdict, rule, threshold,
//                  confidence, n: {baseline, candidate}, p_value, adjusted_p_value,
//                  more_samples_per_arm, seed, resamples}
// One direction everywhere (docs/formats.md, "Direction"): arm A is the baseline, arm B the
// candidate, `ratio` is candidate / baseline (> 1: the candidate is slower) and the verdict is
// the candidate's.
//   stop          {reason, relative_half_width, minimum_detectable_effect}
// A comparison's finding has id "bench.<probe>.<verdict>" (verdict in lower case) and evidence
// metrics ratio (candidate/baseline), ci_low, ci_high, threshold, n_a, n_b, median_a_s,
// median_b_s (a: the baseline, b: the candidate), p_value; where.path is "CANDIDATE vs BASELINE".
// Include from .cpp files only (nlohmann-json).
#pragma once

#include <string>
#include <vector>

#include "bench/compare.hpp"
#include "bench/stopping.hpp"
#include "core/finding.hpp"
#include "core/json.hpp"

namespace loupe::bench {

Json interval_to_json(Interval interval);
Json summary_to_json(const ArmSummary& summary);
// `baseline` and `candidate` name the arms (a bench's variants, or A and B of `loupe bench`).
Json comparison_to_json(const Comparison& comparison, const std::string& baseline,
                        const std::string& candidate);
Json stop_to_json(const StopDecision& stop);
Json non_inferiority_to_json(const NonInferiority& gate);

// Where a comparison was made and how to make it again.
struct FindingContext {
  std::string subject;             // "kda", or "shell" for `loupe bench --cmd`
  std::string probe;               // the bench probe, or "cmd"
  Params params;                   // the parameter point
  std::string path;                // the code path, when known
  std::string reproduce;           // the exact command, seed included
  std::vector<std::string> files;  // observation files holding the raw samples
  // What the claim calls the two arms, A the baseline and B the candidate: a bench's variant
  // names ("merged is 54.9% faster than tiled"), else A and B (`loupe bench --cmd A --vs B`).
  std::string name_a = "A";
  std::string name_b = "B";
};

// SLOWER is a warning (a regression until shown otherwise); FASTER, SAME and AMBIGUOUS are info.
Finding comparison_finding(const Comparison& comparison, const FindingContext& context);

}  // namespace loupe::bench
