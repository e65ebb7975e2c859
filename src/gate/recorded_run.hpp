// gate/recorded_run.hpp — one recorded execution of an objective: what `loupe run` and the MCP
// server's run tool both do. Parse the objective, resolve the configuration, plan, record the run
// as in-progress in the ledger, run the cascade, record its gate verdicts, findings and
// observations, and say how it ended — so every front end reports the same run the same way.
//
// Errors: a bad objective, configuration or --set throws Error before anything is recorded; a
// subject failure during the cascade is recorded (status failed) and kept in outcome.error; an
// Error thrown by the cascade itself is recorded as failed and rethrown.
// Thread-safety: run_and_record runs on the calling thread; options.interrupted may be set from
// another thread, which should also call interrupt_subjects() so that the running subject stops.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "gate/cascade.hpp"
#include "gate/coverage.hpp"
#include "gate/objective.hpp"
#include "gate/plan.hpp"
#include "ledger/ledger.hpp"

namespace loupe::gate {

struct RunRequest {
  std::filesystem::path objective;
  std::string config;  // a [[deployment]] name, KEY=VALUE settings, or NAME,KEY=VALUE; "" = none
  std::optional<Layer> only;
  bool all = false;
  std::vector<std::string> sets;                // NAME=VALUE probe parameter overrides
  std::optional<std::filesystem::path> home;    // default: core/home.hpp resolve_home
  std::optional<std::filesystem::path> ledger;  // default: HOME/ledger.sqlite
  std::filesystem::path cwd;  // where .loupe/ and the git state are found; empty = current path
  uint64_t memory_limit_bytes = 0;  // per subject process group; 0 = no limit
  // The baseline: a run id, "latest" (the newest completed run of the same objective), a git
  // revision (the newest completed run of the objective at that commit), or a path to an earlier
  // build (its folder or its program), whose subject then runs the same tasks interleaved.
  std::string baseline;
  // The baseline build's subject command line (split at whitespace), instead of a path.
  std::string baseline_subject;
  // A baseline build's check points through the baseline cache under the home
  // (gate/baseline_cache.hpp); false: they all run (--no-baseline-cache).
  bool baseline_cache = true;
  bool fail_fast = false;  // stop after the first failing layer even when the file says "all"
  // Overrides of the objective's [executor] (KEY, VALUE), e.g. {"kind", "slurm"},
  // {"partition", "gpu"}; checked by apply_executor_setting (gate/executor.hpp).
  std::vector<std::pair<std::string, std::string>> executor_settings;
  // The `loupe` a batch executor's tasks run; empty: this process's executable.
  std::filesystem::path loupe_executable;
};

struct RecordedRun {
  std::string run_id;
  Objective objective;
  Plan plan;
  CascadeResult outcome;
  std::filesystem::path home;
  std::filesystem::path ledger_file;
  std::string objective_path;  // absolute, as recorded
  ledger::RunStatus status = ledger::RunStatus::kCompleted;
  Json config = Json::object();    // the configuration used (gate::configuration_to_json)
  Json executor = Json::object();  // Executor::record(): {"kind", "jobs", "retries", ...}
  int exit_code = 0;               // DESIGN.md's exit codes; 130 when interrupted
  Verdict verdict = Verdict::kNone;
  std::vector<ProbeCoverage> coverage;  // empty when the subject could not be listed
  std::vector<Finding> coverage_findings;
  std::string coverage_problem;  // why coverage was not checked, if it was not
};

inline constexpr int kInterruptedExitCode = 130;

// Runs and records. `options.all` is or-ed with request.all; `options.only` is taken from
// request.only; progress and interrupted are used as given.
RecordedRun run_and_record(const RunRequest& request, CascadeOptions options);

// The `--json` envelope of a recorded run (kind "run"): verdict, the top `findings_limit`
// findings, and data {run, objective, status, config, executor, home, ledger, wall_s, layers,
// gates, tasks, baseline_skipped, baseline_cache}.
Envelope run_envelope(const RecordedRun& run, size_t findings_limit);

// The ids of the guards that failed the run (failed_guards, cascade.hpp), each once, in point
// order: what `loupe run` prints as "guard failed: ID" and --json holds in data.failed_guards.
std::vector<std::string> failed_guard_ids(const CascadeResult& result);

// Sends SIGTERM to the process group of every child of this process that leads its own group
// (subjects started by core/process run in their own session), so a running subject stops and
// run_process returns. Safe to call from any thread.
void interrupt_subjects();

}  // namespace loupe::gate
