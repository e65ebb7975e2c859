// probe/runner.hpp — loupe's side of a probe: run the subject as a child, read what it wrote,
// decide.
//
// run_probe launches `SUBJECT run PROBE ...` (core/process.hpp: own process group, timeout kills
// the group), keeps its stderr next to the observation, moves the observation directory to
// <home>/runs/<run>/<probe>/<point>/ once the subject has said which point it ran, and hands the
// directory to analyze_observation. Everything that decides — comparisons (src/check), bench
// statistics and verdicts (src/bench), guard findings — happens here, from files, never in the
// subject's process.
// One door (STYLE.md §16, docs/security.md "One door"): every front end — `loupe probe run`, the
// objective cascade (local, and each Slurm task through `loupe executor-task`), MCP `run_probe`
// and `run_objective`, `loupe bisect`, a multi-rank launch — only parses its arguments into one
// RunRequest and hands it to run_point (one point) or run_sweep (a sweep). Their defaults are the
// RunRequest's: the sandbox, a hidden run with a secret seed for every check, the subject
// runtime's sealed evidence, secret repeats and environment guard. A guard that is off or cannot
// apply is said in a warn finding <layer>.<probe>.guard.<guard>_off naming why (guard_findings).
// run_probe is the one subject run underneath; front ends do not call it.
// Errors: Error(kUsage) when the subject exits 2 or a launch's {ranks} has no `ranks` value (its
// message is carried over), SubjectFailure (an Error(kSubject) with a finding) when it crashes,
// times out, passes its memory limit or floods its output, Error(kSubject) when it writes no
// readable observation. Thread-safety: no shared state; one call per thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bench/report.hpp"
#include "check/rules.hpp"
#include "core/finding.hpp"
#include "core/json.hpp"

namespace loupe::probe {

struct AnalyzeOptions {
  // METRIC=VALUE overrides of the probe's absolute tolerances (every output).
  std::vector<std::string> tolerances;
  // Checks: threshold rules deciding each output by the first rule matching its name, in place of
  // every tolerance (an objective's `rules`); an output no rule matches is Error(kConfig).
  std::optional<check::RuleSet> rules;
  double threshold = 0.02;  // benches: the A/B verdict threshold t
  uint64_t bootstrap_seed = 0;
  // The command that reproduces the run, seed included; used in every finding.
  std::string reproduce;
};

// A bench's counters pass (docs/counters.md, "Bench attachment"): after the verdict, the subject
// runs once more under ncu with --counters-pass, untimed, and the kernel's counter findings join
// the point's.
struct CountersAttachment {
  std::string kernel_regex;  // ncu --kernel-name regex:R, and the filter of the findings
  int64_t launches = 1;      // calls of the pass, and ncu --launch-count
};

struct RunRequest {
  std::string probe;
  std::vector<std::string> sets;  // NAME=VALUE, validated by the subject
  std::optional<uint64_t> seed;   // drawn by loupe when absent, and recorded
  bool hidden = false;
  std::optional<int64_t> hidden_point;
  // checks: --repeat N, the asked repeats of the candidate on the same inputs; 0 turns every
  // repeat off, the secret ones too. Absent: the subject runtime's default (2, then the secret
  // repeats).
  std::optional<int> repeat;
  std::optional<double> precision;
  std::optional<double> budget_s;
  // benches: a later round (>= 1) of a point measured in rounds of whole runs (the subject's
  // --round R: what round 0 measured once per point is not measured again; docs/objective.md,
  // "Against a baseline"). Only for a subject whose round 0 said it takes it (bench.round).
  std::optional<int64_t> round;
  // benches: the variants to run, in this order (the subject's --variants A,B): one child process
  // each, the first the baseline the others are compared with. Empty: every variant the bench
  // declares. A name the bench does not declare makes the subject exit 2 (Error(kUsage)).
  std::vector<std::string> variants;
  double timeout_s = 600;
  // The subject's process group is killed when its summed resident memory passes this (0: no
  // limit), or when it writes more than `output_limit_bytes` to stdout or stderr.
  uint64_t memory_limit_bytes = 0;
  size_t output_limit_bytes = size_t{1} << 20;
  // checks, unless a hidden point was asked for: also run a hidden run, a point the candidate's
  // author never saw (one of the probe's hidden points or hidden ranges, else the first point
  // again) on a seed drawn in secret, revealed in its observation afterwards (DESIGN.md,
  // "Seeds"). Off: a guard.hidden_off warn finding.
  bool add_hidden_point = true;
  // Set with add_hidden_point off: another request of the same run makes this point's hidden
  // run, and this says which (the cascade runs it at a point's first repeat only: the later
  // repeats differ from it by their seed alone, and its seed and shape are drawn in secret
  // already). No guard.hidden_off finding then; data.hidden_run_at says where it ran.
  std::string hidden_elsewhere;
  // What the hidden run's draws (its seed, its point) come from; drawn at random when absent.
  // The cascade draws one per point and run and hands it to the candidate's and the baseline's
  // build alike, so that both see the same hidden inputs. Never on a subject's command line.
  std::optional<uint64_t> hidden_secret;
  // Run the subject inside bubblewrap where it works (docs/security.md): read-only system,
  // loupe's home hidden, private /tmp, only its run directory writable, no network. Off, or
  // where bwrap cannot run: a guard.sandbox_off warn finding with the reason.
  bool sandbox = true;
  // Why `sandbox` is off, as the finding and data.sandbox say it.
  std::string no_sandbox_reason = "turned off (--no-sandbox)";
  // The subject's `list --json` when the caller already has it (the cascade lists once per
  // runner); listed by run_point/run_sweep otherwise.
  std::optional<Json> probe_list;
  // The probe's layer when known (the findings of a failed subject carry it); check otherwise.
  std::optional<Layer> layer;
  std::optional<std::filesystem::path> home;  // --home; else .loupe/ at the git root
  std::string run_id;                         // empty: a new one
  std::vector<std::string> subject_command;
  // A launcher put in front of the subject command for a multi-rank check (docs/multi-rank.md):
  // e.g. {"mpirun", "-n", "{ranks}", "--oversubscribe"}; "{ranks}" takes the point's `ranks`
  // value from `sets`. Every rank runs the subject; rank 0's observation is the point's, the
  // others' (DIR/rank-<r>/) are gathered and checked against it.
  std::vector<std::string> launch;
  // Variables of loupe's environment the subject also gets, beyond
  // core/process.hpp's subject_environment_allowlist() (names, or prefixes ending in '*').
  std::vector<std::string> pass_env;
  AnalyzeOptions analyze;
  std::optional<CountersAttachment> counters;  // benches only
};

// A bench A/B comparison with what is needed to restate its finding after the false-discovery
// correction across the points of a sweep.
struct BenchComparisonRecord {
  bench::Comparison comparison;
  bench::FindingContext context;
  size_t finding_index = 0;  // in RunOutcome::findings
  size_t data_index = 0;     // in RunOutcome::data["comparisons"]
  // What the counters pass adds to the finding's claim (", and now DRAM-bound at 93.1 % of
  // peak: ..."); kept so that a restated finding keeps it.
  std::string counters_clause;
};

struct RunOutcome {
  Verdict verdict = Verdict::kNone;
  int exit_code = 0;  // 0 pass (or no gate), 1 failed or inconclusive
  std::vector<Finding> findings;
  // How many of `findings`, from the first, analyze_observation made from the files; those after
  // them loupe added outside the analysis (the seal, the counters pass, the hidden run, the
  // guards that were off), and a caller that analyses the files again keeps them.
  size_t analysed_findings = 0;
  Json data = Json::object();
  std::filesystem::path observation_dir;
  std::string summary;  // the human report
  std::vector<BenchComparisonRecord> bench_comparisons;
};

// Sweeps: `--set NAME=V1,V2,...` lists are crossed (the first varies slowest); `--zip NAME=V1,V2`
// lists move together (all of one length) and are crossed with the sets. Returns one list of
// NAME=VALUE texts per point. Throws Error(kUsage) for a malformed text, a name given twice or
// zipped lists of different lengths.
std::vector<std::vector<std::string>> expand_sweep(const std::vector<std::string>& sets,
                                                   const std::vector<std::string>& zips);

// The NAME=VALUE texts of a hidden run: the asked point's, with the hidden point's values in
// place of theirs and the hidden names the point does not set added at the end. The parameters
// the hidden point leaves out keep their asked values (a precision, the ranks a launcher starts),
// so the hidden run checks the asked configuration at another shape.
std::vector<std::string> hidden_run_sets(const std::vector<std::string>& asked,
                                         const std::vector<std::string>& hidden);

struct SweepOutcome {
  Verdict verdict = Verdict::kNone;  // fail > inconclusive > pass > none over the points
  int exit_code = 0;
  std::vector<RunOutcome> points;
  // The hidden point loupe added (RunRequest::add_hidden_point), if any, and the
  // guard.hidden_point finding that says how the candidate fared there.
  std::vector<RunOutcome> hidden;
  std::vector<Finding> findings;
};

// A subject that could not complete a run: crashed, timed out, or was killed at its memory or
// output limit. An Error(kSubject) (exit 3) that also carries the finding naming what happened:
// <layer>.<probe>.subject.{crashed,timeout,memory_limit,output_capped}.
class SubjectFailure : public Error {
 public:
  SubjectFailure(const Error& error, Finding finding)
      : Error(error), finding_(std::move(finding)) {}
  const Finding& finding() const { return finding_; }

 private:
  Finding finding_;
};

// The door. Runs every point of request.sets × zips into one run; bench verdicts across the
// points get Benjamini–Hochberg control of the false-discovery rate
// (bench::control_false_discovery). A check also gets one hidden run (RunRequest::
// add_hidden_point), at the first point; its observation goes under <run>/hidden/ so that it
// never takes a shown point's folder. SweepOutcome::findings holds the guard.hidden_point
// finding and guard_findings'.
SweepOutcome run_sweep(const RunRequest& request, const std::vector<std::string>& zips);

// The door for one point: request.sets as given (a value with a comma is not a list), with the
// hidden run and the guard findings of run_sweep.
SweepOutcome run_point(const RunRequest& request);

// A one-point sweep as one outcome, for front ends that report a point (the cascade, MCP, a
// Slurm task): the point's findings, then the hidden run's fail and warn findings (unless the
// shown point failed already) and the sweep's; the sweep's verdict and exit code; the hidden run's
// data in data["hidden_runs"] and its folder in data["hidden_observation_dir"]. REQUIRES:
// sweep.points.size() == 1.
RunOutcome fold_point(SweepOutcome sweep);

// The guards a run has off, each as a warn finding <layer>.<probe>.guard.<name>_off naming the
// reason: sandbox_off (`sandbox_off_reason`, when set), and for checks hidden_off
// (add_hidden_point turned off without a hidden point asked) and secret_repeats_off (--repeat 0,
// or a launcher: every rank must make the same calls, so only the asked repeats run).
std::vector<Finding> guard_findings(const RunRequest& request, Layer layer,
                                    const std::optional<std::string>& sandbox_off_reason);

// Why the subject of `request` runs outside the sandbox, or nullopt when it runs inside:
// LOUPE_NO_SANDBOX set, request.sandbox off (no_sandbox_reason), or bwrap unable to run here.
std::optional<std::string> sandbox_off_reason(const RunRequest& request);

// `SUBJECT list --json`, parsed. Throws as described above.
Json list_probes(const std::vector<std::string>& subject_command, double timeout_s,
                 uint64_t memory_limit_bytes = 0, const std::vector<std::string>& pass_env = {});

// One subject run of one point, without the hidden run or the guard findings: the door's step.
RunOutcome run_probe(const RunRequest& request);

// The decision half: reads DIR/observation.json and its files and returns findings and verdict.
// Writes the findings back into DIR/observation.json. Throws Error(kInput) naming the file and
// field when the observation is unreadable.
RunOutcome analyze_observation(const std::filesystem::path& dir, const AnalyzeOptions& options);

// The threads other than the timed one that lived through a variant's sampling, judged from its
// accounting record (samples.json's "accounting": threads, run_cpu_s, helper_cpu_per_sample_s).
// Work handed to such a thread (a worker started before sampling, a thread streaming through
// memory while the other variant is timed) recurs through the sampling; an idle library thread
// that woke a few times under load does not (OpenBLAS's server thread beside kda's merged decode
// at batch 1 under two busy loops: in 1 or 2 of 9-54 batches). The batches are cut into up to
// kStretches consecutive stretches; a stretch is busy when the threads used more than 5 % of its
// share of the timed CPU, plus 20 us. guard.off_path_work fails the variant when they used more
// than 5 % of its timed CPU plus 1 ms in all and were busy in more than half the stretches: work
// handed off in fewer leaves more than half the samples honest, so the medians the verdicts read
// stay within the honest spread. A record without the per-batch CPU (or with a value that is not
// a number) is judged on the total alone.
struct HelperThreads {
  static constexpr size_t kStretches = 8;
  double cpu_s = 0;           // their CPU over the sampling phase
  double run_cpu_s = 0;       // the process's CPU inside its timed batches
  size_t batches = 0;         // batches with a per-batch record (0: none)
  size_t stretches = 0;       // min(batches, kStretches)
  size_t busy_stretches = 0;  // stretches in which they were busy
  std::string busiest;        // "NAME (tid N)"
  bool over() const { return cpu_s > 0.05 * run_cpu_s + 1e-3; }
  bool recurring() const { return stretches == 0 || 2 * busy_stretches > stretches; }
  bool off_path() const { return over() && recurring(); }
};
HelperThreads judge_helper_threads(const Json& account);

// Threshold rules as JSON ({"origin", "rules": [{"name", "match", "when", "line"}]}) and back, for
// a point handed to another process (a Slurm task); rules_from_json validates each rule again.
Json rules_to_json(const check::RuleSet& rules);
check::RuleSet rules_from_json(const Json& json);

// "loupe probe run PROBE --set T=16384 --seed 7 -- build/bin/kda probe": every parameter of the
// point, so the command stays true if defaults change; `launch` adds --launch "WORDS", `repeat`
// --repeat N (0 included), `variants` --variants A,B.
std::string reproduce_command(const std::string& probe, const Params& params, uint64_t seed,
                              const std::optional<int64_t>& hidden_point,
                              const std::optional<int>& repeat,
                              const std::vector<std::string>& subject_command,
                              const std::vector<std::string>& launch = {},
                              const std::vector<std::string>& variants = {});

}  // namespace loupe::probe
