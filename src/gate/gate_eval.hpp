// gate/gate_eval.hpp — deciding the gates of an objective from what its probe points produced.
//
// The cascade (gate/cascade.hpp) reduces every probe point it ran to a PointResult; evaluate_gate
// turns a GateSpec and those results into a GateResult: pass, fail or inconclusive, with the
// statistics behind it (n, the interval, the bound) and the sentence of the rule that decided it
// (STYLE.md item 6). Rules, one per expression kind (docs/objective.md, "Gate expressions"):
//   absolute bound   every selected point (and repeat) satisfies `metric CMP limit`; the worst
//                    value is reported (the largest for < and <=, the smallest for > and >=). A
//                    NaN never satisfies a bound. No selected value: inconclusive.
//   relative bound   the selected points' values of each side are pooled into samples (one per
//                    repeat) and bench::non_inferiority gives the bootstrap CI of the ratio of
//                    medians at the gate's confidence: pass when the whole interval satisfies the
//                    comparison, fail when none of it does, inconclusive otherwise. Between two
//                    variants of one bench the bench's own A/B interval is used.
//   bench verdict    the A/B verdict of each selected point between the subject variant and each
//                    other variant (after the false-discovery control the cascade applied): the
//                    gate fails when one contradicts it, is inconclusive when one is AMBIGUOUS
//                    (or absent) and none contradicts, and passes otherwise.
//   check passes     every selected point's verdict is pass; a fail fails it, an inconclusive
//                    check (one that cannot discriminate) makes it inconclusive.
// A failing gate carries the findings that explain it: the failing points' findings (a check's
// localisation), and for scenario gates the trace analyses (explain_scenario_gate).
// Thread-safety: pure functions over value types.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "bench/compare.hpp"
#include "core/finding.hpp"
#include "core/statistics.hpp"
#include "gate/objective.hpp"
#include "gate/plan.hpp"

namespace loupe::gate {

// One metric of a point; `variant` is set for a bench variant's metric (bench.decode[merged].X).
struct MetricValue {
  std::string variant;
  std::string name;
  double value = 0.0;
  bool operator==(const MetricValue&) const = default;
};

// A bench A/B comparison of one point: B / A.
struct VariantComparison {
  std::string a;
  std::string b;
  bench::Comparison comparison;
};

// What one run of one probe point (one repeat) produced, reduced to what gates read.
struct PointResult {
  Layer layer = Layer::kCheck;
  std::string entry;  // the [[check]]/[[bench]]/[[scenario]] name
  std::string probe;
  Params params;
  int64_t repeat = 0;  // 0-based
  uint64_t seed = 0;
  Verdict verdict = Verdict::kNone;  // the probe's own verdict (analyze_observation)
  std::vector<MetricValue> metrics;  // a check's metrics are the worst over its outputs
  std::vector<VariantComparison> comparisons;
  std::vector<Finding> findings;
  std::string observation_dir;
  std::vector<std::string> traces;  // absolute paths of the traces a scenario wrote
  // Benches: every variant's raw timing samples (seconds), for comparisons across builds.
  std::vector<std::pair<std::string, std::vector<double>>> samples;
  // Benches: the sampler's round of each sample, per variant in the order of `samples` (empty
  // when the runtime did not record rounds); what pairs the variants of one run.
  std::vector<std::pair<std::string, std::vector<int64_t>>> sample_rounds;
  // Benches run in rounds against a baseline build (cascade.hpp, BaselineSource::min_rounds):
  // each variant's median in each round, round r of the candidate and of the baseline having
  // run back to back. Empty otherwise.
  std::vector<std::pair<std::string, std::vector<double>>> round_medians;
  // Ran back to back with its baseline counterpart (a scenario repeat against a baseline build),
  // so that gates against the baseline pair the two by repeat.
  bool paired = false;
  std::string reproduce;  // the exact command, seed included
  double wall_s = 0.0;    // how long the point took, subject start to verdict
  // Benches: the subject's timed sampling phase (bench.sampling_s); wall_s less this is what a
  // run costs besides its samples (start, warm-up, replays, verification, analysis).
  double sampling_s = 0.0;
  // Benches: the round of whole runs the subject's runtime says it ran (bench.round); set only by
  // a runtime that takes --round, so a later round asks for it only then.
  std::optional<int64_t> runtime_round;
  // A baseline build's check point taken from the baseline cache (gate/baseline_cache.hpp): the
  // run that ran and stored it. Empty for a point that ran in this run.
  std::string cached_from_run;
};

struct GateStatistics {
  int64_t n = 0;                      // values, comparisons or samples per side that decided
  std::optional<int64_t> n_baseline;  // relative bounds: samples of the baseline side
  std::optional<double> estimate;     // the worst value, or the ratio
  std::optional<Interval> interval;   // the confidence interval of the ratio
  std::optional<double> bound;        // the limit, or the A/B threshold t
  std::string comparison;             // "<=", or the verdict asked for ("not SLOWER")
  std::optional<double> confidence;
  std::optional<uint64_t> seed;  // of the bootstrap
  Params point;                  // the point that decided (the worst, or the contradicting one)
  // When the estimate is a ratio: what its numerator and denominator are. The estimate is always
  // candidate / baseline and an A/B verdict is the candidate's (docs/formats.md, "Direction"):
  // a bench verdict's subject variant over the other, a relative bound's metric over the one it
  // divides by, this build over the baseline build. Empty when the estimate is no ratio.
  std::string candidate;
  std::string baseline;
};

struct GateResult {
  std::string name;
  std::string expression;  // canonical text
  Layer layer = Layer::kCheck;
  GateVerdict verdict = GateVerdict::kNotRun;
  GateStatistics statistics;
  std::string rule;               // the sentence that decided
  std::vector<Finding> findings;  // what explains a failure
};

// The gate's verdict from the results of its layer. REQUIRES: the gate's layer ran (else use
// not_run_gate). `plan` says what NAME[configured] means. `baseline` holds the baseline build's
// (or recorded run's) points of the same tasks, matched by layer, entry, params and repeat;
// nullptr when the run has no baseline, which makes a gate against the baseline not-run.
// Rules of the gates against the baseline (docs/objective.md, "Against a baseline"):
//   check metric / baseline   per point, over its seeds: the candidate's worst value over the
//                             baseline's worst, and median over median (0/0 is 1); the largest
//                             of those ratios must satisfy the comparison. NaN fails.
//   bench/scenario metric / baseline   non-inferiority on the bootstrap CI of the ratio of
//                             medians, candidate samples over baseline samples (bench: the
//                             variant's timing samples; scenario: the repeats' metric values);
//                             when the two builds ran back to back (round_medians, `paired`),
//                             on the CI of the median of the per-round ratios (compare_builds).
//   NAME[v] not SLOWER than baseline   the A/B verdict of the variant's samples, baseline as A,
//                             candidate as B, with twice the bench's threshold
//                             (cross_build_threshold) and Benjamini–Hochberg across the gate's
//                             comparisons; AMBIGUOUS is inconclusive. Paired by round
//                             (compare_builds on round_medians) when both sides have them.
// A selected point without its baseline counterpart makes the gate inconclusive unless another
// fails it.
// `pending_comparisons` (NAME not SLOWER than baseline, decided before every point has run):
// the A/B comparisons still to come, counted with p = 1 in the false-discovery control, so that a
// FAIL decided now stands whatever they turn out to be (a PASS decided so proves nothing).
GateResult evaluate_gate(const GateSpec& gate, const Objective& objective, const Plan& plan,
                         std::span<const PointResult> results,
                         const std::vector<PointResult>* baseline = nullptr,
                         int64_t pending_comparisons = 0);

// A scenario gate against a baseline build (`scenario.E.METRIC / baseline CMP x`, CMP one of
// < <= > >=) before the entry's last repeat: the ratios of the repeats both builds ran back to
// back so far, per parameter point, at the looks of bench::sequential_looks(total_repeats)
// (asked at other numbers of pairs it answers nothing, so each look is taken once). FAIL when a
// point's ratios lie beyond the bound beyond doubt (bench::sequential_look: alpha 0.01 spent over
// the looks); nullopt otherwise, and the gate is decided at the last repeat by evaluate_gate as
// before. No PASS is decided early: the within-build gates still need every repeat.
std::optional<GateResult> decide_before_last_repeat(const GateSpec& gate,
                                                    std::span<const PointResult> results,
                                                    const std::vector<PointResult>& baseline,
                                                    int64_t total_repeats);

// A scenario gate on a median within the build (`median(scenario.E.METRIC) CMP x`, CMP one of
// < <= > >=) before the entry's last repeat: each parameter point's values so far, in repeat
// order, at the looks of bench::sequential_looks(total_repeats). FAIL when they lie beyond the
// bound beyond doubt (bench::sequential_look on value / bound: at most a fifth of them on the
// bound's side, and the trimmed t-test's p within the look's share of alpha 0.01), so that the
// median of every repeat cannot come out on the bound's side unless the later repeats turn
// against the earlier ones. A value of 0 or less is taken as far on the low side. nullopt
// otherwise; no PASS is decided early.
std::optional<GateResult> decide_median_before_last_repeat(const GateSpec& gate,
                                                           std::span<const PointResult> results,
                                                           int64_t total_repeats);

// Two builds measured in rounds (round r of each ran back to back, alternating which went
// first): bench::compare_paired of the candidate's per-round values over the baseline's, with a
// fixed bootstrap seed. One slow process, or load that lasts a round, falls on one round's ratio
// and not on the median of the ratios. Shared by `loupe run --baseline BUILD` and `loupe bisect`.
bench::Comparison compare_builds(std::span<const double> baseline,
                                 std::span<const double> candidate, double threshold,
                                 double confidence, uint64_t seed = 0x6c6f757065);

// The looks at a bench point's rounds against a baseline build: after rounds 5, 8 and 12, and
// the last round run (16 at most, or fewer when the rounds' cost ends them): kRoundLooks in all.
// A change (SLOWER, FASTER) between the builds is decided at a look only with a paired p-value
// (bench::trimmed_t_p, after Benjamini-Hochberg across the gate's comparisons) of at most
// round_look_alpha() = 0.05 / kRoundLooks, so that the looks together spend at most 0.05
// (Bonferroni); a point stops early at a look so decided, or at any round from the fifth once
// every variant is SAME. Each round looked at with the whole 0.05 — the rule before — let noise
// under load fail cp_prefill_not_slower_than_baseline on a build whose CP prefill had not
// changed (1.17 [1.04, 1.48] over 11 rounds whose ratios spread 0.77-1.61; p 0.049 at the 11th).
// Every such gate of an objective is a decision that can fail the run of an unchanged build, so
// the 0.05 is also shared among them (Bonferroni): round_look_alpha(objective) is 0.05 /
// kRoundLooks / baseline_bench_gates(objective) (its "E ... baseline" bench verdict gates, at
// least 1). With the whole 0.05 per gate, a run's false FAIL grew with its gates: in the seeded
// simulation of 3 such gates at the loaded 2-core machine's per-round spread (30 %, ratios 0.5-2;
// tests/unit/cascade/baseline_build_test.cpp) 16 runs of 300 had a gate fail; shared, 6.
inline constexpr int64_t kRoundLooks = 4;
bool is_round_look(int64_t rounds);
double round_look_alpha();
int64_t baseline_bench_gates(const Objective& objective);
double round_look_alpha(const Objective& objective);

// The A/B threshold of a bench against a baseline build: twice the entry's (default 0.02). Two
// binaries of the same code differ by a few percent in layout alone (5 % measured at decode
// batch 128 between kda and kda_faulty with no fault on), which a within-build A/B never sees.
double cross_build_threshold(const ProbeEntry* entry);

// Whether the gate compares against a baseline (`/ baseline`, `than baseline`).
bool is_baseline_gate(const GateExpression& expression);

// Whether some gate of the objective reads the baseline's value of a point of `layer`'s `entry`
// with these parameters: a gate against the baseline on that entry whose `where` holds for them.
// The cascade runs a point on the baseline side only then (nothing else reads it: reports show
// the gates' statistics, not the baseline's points).
bool baseline_reads_point(const Objective& objective, Layer layer, const std::string& entry,
                          const Params& params);

// Whether one point can decide the gate FAIL before the entry's other points have run: a check
// gate every point must satisfy on its own (`check.X passes`, `check.X.METRIC <= bound`). Not the
// gates against the baseline (a point's several seeds are pooled) nor relative bounds.
bool fails_at_any_point(const GateExpression& expression);

// The (layer, entry) pairs a gate reads.
std::vector<std::pair<Layer, std::string>> gate_entries(const GateExpression& expression);

// A gate whose layer did not run; `reason` completes "not run: ...".
GateResult not_run_gate(const GateSpec& gate, const std::string& reason);

// When the gate reads an entry that the plan's configuration left out (a `run` switch set to
// false), the reason that makes it not-run: "the configuration left out check w8a8 (w8a8=off)".
std::optional<std::string> left_out_reason(const GateSpec& gate, const Plan& plan);

// For a failed or inconclusive scenario gate: the trace of the gate's scenario against its
// baseline scenario's (trace diff: locks, overlap, gaps, breakdown), or the scenario's own trace
// analysed alone when the gate has no baseline. Appends the findings to gate.findings, each
// carrying the commands that reproduce it. Throws Error(kInput) when a trace cannot be read.
// A gate against the baseline diffs against the baseline build's trace of the same scenario.
void explain_scenario_gate(GateResult& gate, const GateSpec& spec,
                           std::span<const PointResult> results, size_t max_findings = 6,
                           const std::vector<PointResult>* baseline_points = nullptr);

// One direction everywhere (docs/formats.md, "Direction"). A bench's own analysis states each
// comparison as a later variant (the candidate) over the first (the baseline); a gate
// `X[s] REL than X[o]` reads s as the candidate. For each bench entry that such a gate reads (the
// first gate that reads it decides), restates every comparison of the points in `points` that
// has s as its baseline and one of the gate's other variants as its candidate the gate's way
// round (bench::reversed), and says its finding again (bench::comparison_finding); the same
// finding in a gate's findings is replaced too. Then the JSON, the ledger, MCP and every report
// say what the gate decided: "tiled is 99% slower than merged" beside "tiled/merged = 1.99 is
// SLOWER", never "merged is 49.7% faster than tiled".
void orient_to_gates(const Objective& objective, const Plan& plan, std::vector<PointResult>& points,
                     std::vector<GateResult>& gates);

// Across the points of each bench entry: Benjamini–Hochberg over every A/B comparison
// (bench::control_false_discovery), as `loupe probe run` does for a sweep.
void control_bench_false_discovery(std::vector<PointResult>& results);

// {"name", "expression", "layer", "verdict", "statistics": {...}, "rule", "findings": [...]}
nlohmann::ordered_json gate_result_to_json(const GateResult& gate);
// The statistics alone, as the ledger's GateRecord holds them.
nlohmann::ordered_json gate_statistics_to_json(const GateStatistics& statistics);
// A short text of the key statistic for tables: "2.1e-05 <= 2e-06", "1.94 [1.90, 1.99] <= 1.05".
std::string key_statistic(const GateResult& gate);

}  // namespace loupe::gate
