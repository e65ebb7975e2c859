// probe/counters_pass.hpp — a bench point's counters pass (docs/counters.md, "Bench attachment").
//
// After a bench point's verdict is decided, attach_counters runs the subject once more, as a new
// process under Nsight Compute: `ncu <curated sections> --kernel-name regex:R --launch-count N
// --export <point>/counters/report SUBJECT run PROBE --set ... --seed S --counters-pass N
// --counters-variant B --out <point>/counters/pass --json`. The subject runtime calls variant B
// (the last variant: the candidate of an A/B bench) N times with no timer and writes no samples,
// so the profiler's replays never reach a timed sample. The export's findings
// (counters.<kernel>.*) join the point's; each comparison finding of B gains a clause from B's
// binding limit; with measured DRAM bytes the roofline guard judges those instead of the declared
// bytes, and guard.bytes_ratio warns when declared and measured differ by more than 25 %.
// Errors: no ncu → Error(kUsage) (exit 2); ncu or the pass failing → Error(kSubject) (exit 3);
// a regex that matches no profiled kernel → Error(kUsage) naming the kernels there were.
// Thread-safety: one call per point; starts child processes.
#pragma once

#include <cstdint>
#include <string>

#include "bench/compare.hpp"
#include "counters/analyze.hpp"
#include "probe/runner.hpp"

namespace loupe::probe {

// Declared and measured bytes per call may differ by this share before guard.bytes_ratio warns.
inline constexpr double kBytesRatioTolerance = 0.25;

// What a comparison finding of `variant` gains from its kernel's binding limit: after FASTER
// ", and now DRAM-bound at 93.1 % of peak (merged_v_decode, ncu): little left to gain", after any
// other verdict "; VARIANT is DRAM-bound at ...". 85 % of peak or more leaves little to gain.
std::string counters_clause(const counters::BoundSummary& bound, const std::string& kernel,
                            bench::AbVerdict verdict, const std::string& variant);

// The pass's record in <point>/counters/: the variant profiled, the report's file name and the ncu
// command line that ran.
inline constexpr const char* kCountersPassFile = "pass.json";

// REQUIRES: request.counters; outcome is the analysed bench point run with `seed`. Runs the pass,
// keeps both CSV pages and pass.json in <point>/counters/, then apply_counters.
void attach_counters(const RunRequest& request, uint64_t seed, RunOutcome& outcome);

// REQUIRES: request.counters. From what attach_counters kept in outcome.observation_dir/counters/
// (no ncu needed): adds the findings, the clause and data["counters"] to `outcome`, and the
// findings to its observation.json. The cascade calls it again after analysing a point where it
// finally lies (the analysis rebuilds the findings from the observation, without the counters').
// Nothing when the folder holds no pass (the bench skipped the point).
void apply_counters(const RunRequest& request, RunOutcome& outcome);

}  // namespace loupe::probe
