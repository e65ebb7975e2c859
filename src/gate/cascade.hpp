// gate/cascade.hpp — the cascade runner behind `loupe run`: the tasks of a plan, cheapest layer
// first (checks, then benches, then scenarios), each point reduced to a PointResult, each gate
// decided as soon as the last point it reads has run (gate_eval.hpp), and the run stopped after
// the first failing layer unless asked to run all. Where the points run is the executor's business
// (gate/executor.hpp: layer_begin / the runner / layer_end).
//
// The timing stage: against a baseline build run in rounds (BaselineSource::min_rounds > 0, no
// --only), the bench and scenario layers run as one stage after the checks, ordered by cost to a
// decision: the scenarios' repeats up to their first look (bench::sequential_looks: 3), then the
// bench entries taking turns (plain turns in the objective's order until each current point has
// two rounds, then each next round to the point whose paired test is nearest to deciding a
// change, so that a slowed bench reaches its looks after about two rounds of each other bench),
// with the scenarios' repeats up to their next look (5, 8, 12, ...) after each bench point is
// done, and the remaining repeats last; the record lists the points in the stage's order all the
// same. A scenario gate against the baseline fails at a look when its pairs so far
// decide it (gate_eval.hpp, decide_before_last_repeat), "NAME not SLOWER than baseline" at a look
// of a point still in its rounds when one of its variants is SLOWER beyond doubt there. A
// failing bench layer ends the scenario points still to come unless all (their undecided gates
// not-run); each layer keeps its own LayerOutcome, and the executor hears of each layer's points.
//
// The cause before the symptom (gate/causes.hpp): when a gate fails while its layer still runs,
// the points of the layer's entries that cover a strict subset of its components run next (in
// the objective's order), and its announcement waits until every such gate within the build is
// decided or one of them failed; CascadeResult::causes ranks the failing gates most specific first.
// A layer fails when one of its gates fails or one of its points has the verdict fail (a failing
// check without a gate is still a failing check). Gates of layers the cascade did not reach, or
// that --only left out, and gates that read an entry a configuration switch left out of the plan
// (Plan::left_out), are not-run with the reason. A subject failure (crash, timeout, exit 2)
// stops the cascade: the error is kept in the result for the caller to record and rethrow.
// The probe points run through a PointRunner, so the cascade is tested on synthetic results;
// subject_point_runner runs the real subject through src/probe.
// Check points on several workers (CascadeOptions::check_workers): a check point is a
// deterministic correctness run, so the next check points in the cascade's order (the
// candidate's, then a baseline build's on the candidate's seeds) start on worker threads while
// the cascade waits for the one it needs; the cascade takes each result in its own order, so
// the gates, their order, the causes and the record are those of one worker. While a failing gate
// waits for the more specific gates of its components, no point is started ahead (the component
// checks brought forward run without one beside them). A point started
// ahead whose result the cascade never asks for (it stopped at a subject failure or an
// interrupt) is waited for and dropped; its folder stays in the run's directory.
// Thread-safety: run_cascade runs on the calling thread, which calls every callback of
// CascadeOptions; with check_workers > 1 the runner and the baseline's `run` are also called
// from worker threads. `interrupted` may be set from another thread.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gate/causes.hpp"
#include "gate/gate_eval.hpp"
#include "gate/objective.hpp"
#include "gate/plan.hpp"
#include "loupe/error.hpp"

namespace loupe::probe {
struct RunOutcome;
}

namespace loupe::gate {

// Runs one repeat of one task; throws loupe::Error when the subject fails.
using PointRunner =
    std::function<PointResult(const PlanTask& task, const ProbeEntry& entry, int64_t repeat)>;

// One repeat of one plan task, as the cascade will ask a runner for it.
struct PointRef {
  const PlanTask* task = nullptr;
  const ProbeEntry* entry = nullptr;
  int64_t repeat = 0;
};

struct Progress {
  size_t index = 0;  // 1-based
  size_t total = 0;
  const PointResult* point = nullptr;
  double elapsed_s = 0;
  double remaining_s = 0;  // estimated from the mean time of the points run so far
};

// What the baseline cache did in a run (gate/baseline_cache.hpp); its hits are the baseline
// points with PointResult::cached_from_run set.
struct BaselineCacheLog {
  bool enabled = false;
  std::string off_reason;  // why it is off: --no-baseline-cache, a program it cannot identify
  std::string dir;         // <home>/baseline-cache
  size_t stored = 0;       // baseline check points run in this run and stored
  std::vector<std::string> warnings;  // entries that could not be read or written (each a miss)
};

// The baseline side of a run: an earlier build run on the same tasks, or a recorded run read back.
struct BaselineSource {
  std::string label;  // "build /path/to/kda", "run r2026..."
  // Before the candidate runs a task's repeat: the seed the baseline used for it, when already
  // known (a recorded run), so that both sides see the same inputs. May be empty.
  std::function<std::optional<uint64_t>(const PlanTask& task, int64_t repeat)> seed_of;
  // The baseline's result of the task's repeat, `seed` being the candidate's (nullopt when the
  // baseline runs first); nullopt when the baseline has none. Throws Error when its subject fails.
  std::function<std::optional<PointResult>(const PlanTask& task, const ProbeEntry& entry,
                                           int64_t repeat, std::optional<uint64_t> seed)>
      run;
  // A build: benches and scenarios alternate which side runs first (A B, B A, ...), so that
  // drift of the machine falls on both alike, and a scenario's repeats are paired with the
  // baseline's (PointResult::paired).
  bool interleave = false;
  // With `interleave`, a bench point runs in rounds: round r is a short run of each build back to
  // back (the order alternating), with the entry's budget (default 2 s) split over max_rounds
  // (at least 0.1 s); round r >= 1 is asked as ProbeEntry::round = r of a side whose round 0 said
  // its runtime takes --round. From round min_rounds on, the rounds stop once every variant's
  // verdict against the baseline (compare_builds on the per-round medians, cross_build_threshold)
  // is SAME, or, at a look (gate_eval.hpp, is_round_look: rounds 5, 8, 12), SLOWER or FASTER with
  // a paired p-value (bench::trimmed_t_p) <= round_look_alpha() / m (m: the entry's comparisons,
  // points times variants, so that the gate's false-discovery control cannot undo it), at
  // max_rounds, or when one more round would take the point's wall time past 8 times its
  // round 0's.
  // Each side's rounds become one point (merge: every round's samples; the per-round medians in
  // round_medians). 0: one run of each build with the whole budget (for an executor that runs each
  // point once).
  int64_t min_rounds = 0;
  int64_t max_rounds = 0;
  // A build's check points kept in the baseline cache (build_baseline); null for a source
  // without one. run_cascade copies it into CascadeResult::baseline_cache at the end.
  std::shared_ptr<BaselineCacheLog> cache_log;
};

struct CascadeOptions {
  bool all = false;                                // run every layer whatever fails
  std::optional<Layer> only;                       // run this layer alone
  const std::atomic<bool>* interrupted = nullptr;  // set (e.g. by SIGINT) to stop after the point
  std::function<void(const Progress&)> progress;   // after every point
  // Each gate the moment it is decided: as soon as every point of the entries it reads has run
  // (not at the end of its layer), so a failing gate shows while the rest still runs.
  std::function<void(const GateResult&)> gate_decided;
  std::optional<BaselineSource> baseline;  // gates against the baseline are not-run without one
  // Executor hooks (gate/executor.hpp): a layer's points before the first runs, and the end of
  // the layer (`stopped`: points of it will not be asked for).
  std::function<void(Layer, const std::vector<PointRef>&)> layer_begin;
  std::function<void(Layer, bool stopped)> layer_end;
  // How many check points run at once: the check layer's runner calls (the candidate's points,
  // then a baseline build's) start on up to this many worker threads, each in the order the
  // cascade will ask for it, and the cascade still takes every result in its own order on the
  // calling thread, so what it decides, prints and records does not depend on it. 1: one after
  // another on the calling thread. Bench and scenario points always run alone (they are timed).
  // REQUIRES (above 1): `runner` and the baseline's `run` may be called from several threads at
  // once (subject_point_runner and build_baseline can; a batch executor's runner cannot).
  int64_t check_workers = 1;
};

enum class LayerStatus { kPassed, kFailed, kSkipped, kNotReached, kEmpty };
// "passed", "failed", "skipped", "not-reached", "empty".
std::string_view layer_status_name(LayerStatus status);

struct LayerOutcome {
  Layer layer = Layer::kCheck;
  LayerStatus status = LayerStatus::kEmpty;
  size_t points = 0;
};

// A run of a task that the baseline side left out: no gate reads the baseline's value of it
// (gate_eval.hpp, baseline_reads_point).
struct BaselineSkip {
  Layer layer = Layer::kCheck;
  std::string entry;
  Params params;
  int64_t repeat = 0;
};

struct CascadeResult {
  std::vector<PointResult> points;           // in the order they ran
  std::vector<PointResult> baseline_points;  // the baseline's results of the same tasks
  std::string baseline_label;                // empty without a baseline
  // With a baseline, the candidate's runs whose baseline counterpart was not run because no gate
  // reads it, in the order the candidate ran them.
  std::vector<BaselineSkip> baseline_skipped;
  // With a baseline build: what its check-result cache did (hits: baseline_points whose
  // cached_from_run is set). Empty for a source without a cache.
  std::optional<BaselineCacheLog> baseline_cache;
  std::vector<GateResult> gates;     // in the objective's order
  std::vector<LayerOutcome> layers;  // check, bench, scenario
  bool interrupted = false;
  std::optional<Error> error;  // the subject failure that stopped the cascade
  double wall_s = 0;
  // The failing gates, most specific first, and how the others follow (gate/causes.hpp).
  CauseReport causes;
};

// What the baseline side left out, per entry in the order first met: one line, at most
// `max_entries` entries named ("baseline build: 9 run(s) not run, no gate reads their baseline
// values: check transfer_verifier (1), check decode_recurrence_seeds (8)"); empty when nothing
// was left out. baseline_skips_to_json: {"runs": N, "reason", "entries": [{"layer", "entry",
// "runs"}], "truncated": bool}, the same bound.
std::string baseline_skip_line(const CascadeResult& result, size_t max_entries = 8);
nlohmann::ordered_json baseline_skips_to_json(const CascadeResult& result, size_t max_entries = 8);

// What the baseline cache did, in lines: the baseline check runs taken from it per run that
// stored them, with the entries (at most `max_entries` named), the runs stored, why it was off,
// and each warning ("baseline cache: 13 check run(s) from the cache, stored by run r2026...:
// check chunk (1), ..."). Empty without a cache log or when it did nothing to say.
// baseline_cache_to_json: {"enabled", "off_reason", "dir", "hits", "stored", "points": [{"layer",
// "entry", "params", "repeat", "run"}], "truncated", "warnings"}, at most `max_points` points.
std::vector<std::string> baseline_cache_lines(const CascadeResult& result, size_t max_entries = 8);
nlohmann::ordered_json baseline_cache_to_json(const CascadeResult& result, size_t max_points = 64);

// Tasks of each layer in plan order, each task `repeats` times, the repeats interleaved across
// the layer's tasks (A B A B ...: machine drift falls on all alike). With a baseline, each task's
// repeat also runs on the baseline side (same seed) when a gate reads the baseline's value of it
// (baseline_reads_point; otherwise it runs as without a baseline and is listed in
// CascadeResult::baseline_skipped). A gate is decided as soon as the last point
// of the entries it reads has run. REQUIRES: `plan` was made from `objective`.
CascadeResult run_cascade(const Objective& objective, const Plan& plan,
                          const CascadeOptions& options, const PointRunner& runner);

// The candidate's points' findings that undermine their results (core/finding.hpp,
// undermines_results: failing guards such as the hidden run, tampering, timing and environment;
// not guard.precision and the other descriptions of a mismatch), in point order. Such a guard
// says whether a point's results can be believed, not what they are; gates judge the results.
std::vector<const Finding*> failed_guards(const CascadeResult& result);

// A failing guard fails the run whatever its gates say (a gate over a metric would otherwise pass
// a candidate that replays outputs at the shown seed). Else, over the gates that ran: any fail →
// fail; else any inconclusive → inconclusive; else pass; none ran → none. Not-run gates do not
// count: the cascade stops only after a failure (which already fails the run), and --only leaves
// layers out on purpose. 0 for pass and none, 1 otherwise.
Verdict cascade_verdict(const CascadeResult& result);
int cascade_exit_code(const CascadeResult& result);

// The findings worth showing first: the failing guards' (failed_guards), then the findings of
// gates that did not pass, taken in turn (the
// first of each gate, then the second, ...) so that every such gate's lead finding shows, then the
// points' fail and warn findings; without duplicates, at most `limit`. `truncated` says whether
// more existed.
std::vector<Finding> top_findings(const CascadeResult& result, size_t limit, bool* truncated);

// The subject's command line with the objective's working directory and environment applied
// (`env -C DIR K=V ... COMMAND`), so that the reproduce command of every finding is exact.
std::vector<std::string> subject_command(const SubjectSpec& subject);

// The lock-hold metrics of a scenario point's traces: LOCK_max_hold_s for each lock, and
// THREAD_LOCK_max_hold_s and THREAD_LOCK_median_hold_s for each thread that held it (names with
// every character outside [A-Za-z0-9_] as '_'), in seconds. Empty when the traces cannot be read
// (the trace analysis reports that). Scenario points carry them, so gates can read them.
std::vector<MetricValue> lock_hold_metrics(const std::vector<std::string>& traces);

// subject_command as a reproduce line shows it, to be pasted at `project_root` (the git root of
// the working directory, where .loupe/ lives): `env -C <root> X` reads `env X` (or `X` when env
// is left with nothing to do), `env -C <root>/sub X` reads `env -C sub X`; a folder outside the
// root stays absolute. Issue 19: absolute paths made reproduce lines hundreds of characters long.
std::vector<std::string> subject_for_reproduce(std::vector<std::string> argv,
                                               const std::filesystem::path& project_root);

// After an observation folder moved from `from` to `to`: its paths in the outcome's findings,
// summary and comparison records, and in `to`/observation.json (which the analysis wrote), name
// the new place. False, with nothing changed, when a path has a character JSON escapes (the
// caller then analyses the observation again where it lies) or observation.json is unreadable.
bool move_observation_paths(probe::RunOutcome& outcome, const std::string& from,
                            const std::filesystem::path& to);

// Runs points with probe::run_probe into <home>/runs/<run_id>/<probe>/<point>/; a point that
// would reuse a directory of this run (a repeat, or a second entry with the same point) gets
// the suffix ",repeat=N" or ",entry=NAME". `--set` overrides are already in the task's params.
// `memory_limit_bytes` (0: none) stops a subject whose process group's resident memory passes it
// (core/process.hpp), which ends the cascade with a subject failure.
// Every point goes through the one door (probe::run_point): sandboxed, with a hidden run for a
// check. The hidden run's secret is hidden_secret(secret_scope, task, repeat) (secret_scope
// empty: run_id), so runners of one scope (a run's candidate and baseline builds, a bisect's
// steps) see the same hidden inputs at the same point; its observation ends inside the point's
// folder, as hidden/. `hidden_runs` false: no hidden run at all (a baseline build's runner: the
// hidden run guards against a candidate tuned to the points it was shown, and no gate reads a
// baseline's hidden run), each point saying so in data.hidden_run_at.
PointRunner subject_point_runner(const Objective& objective, const std::filesystem::path& home,
                                 const std::string& run_id, uint64_t memory_limit_bytes = 0,
                                 const std::string& secret_scope = "", bool hidden_runs = true);

// The secret a point's hidden run draws from: derived from a secret drawn once per process,
// `scope` (a run), the task and the repeat. Never written where a subject could read it before
// its run (a Slurm task's spec lies in loupe's home, which the sandbox hides).
uint64_t hidden_secret(const std::string& scope, const PlanTask& task, int64_t repeat);

// The rounds of one bench point on one side as one point: round 0's observation and findings;
// every round's samples, the sampler's round indices shifted so that they stay ascending; each
// variant's summary metrics and the variants' A/B comparisons (and their findings) over all of
// them; each variant's median in each round (round_medians, NaN for a round without samples).
// REQUIRES: rounds not empty, all of one bench point.
PointResult merge_rounds(std::vector<PointResult> rounds);

// A baseline build: the objective's subject with its program replaced by `program` (an
// executable, or the command line of --baseline-subject when `command` is set), its points
// written under <home>/runs/<run_id>/baseline/. Benches run in rounds (min_rounds 5: five can
// decide SAME or, when they agree, a change; max_rounds 16, while the point costs no more than 8
// full rounds: the median's interval of a few rounds, one of them lost to load, needs more).
// Every round is a subject run of each build; round 0 pays the runtime's fixed cost (warm-up,
// replays, roofline: about 4 s at decode batch 32 on a quiet 2-core machine, 13 s at load 9),
// later rounds (--round) much less.
// `cache_checks`: its check points go through the baseline cache (gate/baseline_cache.hpp,
// <home>/baseline-cache/): a point whose key an earlier run stored is taken from there (its
// PointResult::cached_from_run names that run), the others run and are stored. Benches and
// scenarios always run.
BaselineSource build_baseline(const Objective& objective, const std::filesystem::path& home,
                              const std::string& run_id, const std::vector<std::string>& command,
                              const std::string& label, uint64_t memory_limit_bytes = 0,
                              bool cache_checks = true);

// A recorded run: its observations under <home>/runs/<baseline_run>/ matched to the tasks by
// probe, parameters and repeat, and analysed again.
BaselineSource recorded_baseline(const std::filesystem::path& home,
                                 const std::string& baseline_run);

// The program a --baseline that names a path stands for: an executable file, or a folder holding
// the subject's program at its own relative path (a worktree), under bin/ or at its top (a build
// folder). Throws Error(kUsage) naming the paths tried.
std::filesystem::path baseline_program(const Objective& objective,
                                       const std::filesystem::path& given);

// {"layer", "entry", "probe", "params", "repeat", "seed", "verdict", "wall_s", "observation",
//  "reproduce"}
nlohmann::ordered_json point_result_to_json(const PointResult& point);

// Applies `--set NAME=VALUE` overrides to every task whose probe takes NAME (its params hold
// NAME); the value's type follows the text (true/false, integer, float, else string). Throws
// Error(kUsage) for a malformed text or a NAME no task has.
void apply_overrides(Plan& plan, const std::vector<std::string>& sets);

}  // namespace loupe::gate
