// gate/executor.hpp — where the cascade's probe points run: here, one after another (the local
// executor, the default), or fanned out to a cluster (the Slurm executor, slurm_executor.cpp).
//
// The cascade stays the same whatever runs the points: it tells the executor a layer's points
// before the first one runs (a batch system submits them all then), asks for each point's result
// in its usual order (the executor runs it, or waits for it), and says when it is done with the
// layer and whether it stopped early (an executor cancels what it submitted and will not be
// asked for). Every point is analysed in this process from the files its subject wrote, so the
// findings and verdicts of a point are the same whichever executor ran it.
//
// Adding an engine (Kubernetes Jobs, Ray): one file implementing Executor, one branch in
// make_executor, and its keys in ExecutorSpec. The cascade is not touched.
// Thread-safety: an executor is used by the thread that runs the cascade; `interrupted` may be
// set from another thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "gate/cascade.hpp"
#include "probe/runner.hpp"

namespace toml {
inline namespace v3 {
class table;
}
}  // namespace toml

namespace loupe::config {
class TomlReader;
}

namespace loupe::gate {

// One command-line override of the objective's [executor]: KEY is kind, partition, account, time,
// gres, max_parallel, retries, shared_dir or check_workers. Throws Error(kUsage) naming the flag.
void apply_executor_setting(ExecutorSpec& spec, const std::string& key, const std::string& value);

// The most check workers a spec may ask for.
inline constexpr int64_t kMaxCheckWorkers = 64;

// How many check points the local executor runs at once unless told: min(2, the hardware
// threads this process may run on, sched_getaffinity). Two, not more: more subjects at once than
// cores only share them, and loupe's own measurements are made on two cores.
int64_t default_check_workers();

// The check workers a run uses: the spec's (default_check_workers() when 0) for the local
// executor; 1 for a batch executor, which runs a layer's points where it likes already.
int64_t check_workers_of(const ExecutorSpec& spec);

// Reads the objective's [executor] table (file, line and key in each error).
ExecutorSpec read_executor_spec(const config::TomlReader& reader, const toml::table& table);

// The run's fan-out, recorded with the run in the ledger: {"kind", "jobs": [{"layer", "job_id",
// "tasks", "cancelled"}], "retries": [{"point", "job_id", "state", "resubmitted_as"}],
// "submit_s", "wait_s"}.
class Executor {
 public:
  virtual ~Executor() = default;
  // Called once per layer with its points in the order run() will be asked for them.
  virtual void begin_layer(Layer layer, const std::vector<PointRef>& points) = 0;
  // Runs, or waits for, one point; throws loupe::Error as a PointRunner does.
  virtual PointResult run(const PointRef& point) = 0;
  // `stopped`: the cascade will not ask for the layer's remaining points; cancel them.
  virtual void end_layer(Layer layer, bool stopped) = 0;
  virtual Json record() const = 0;
};

struct ExecutorContext {
  const Objective* objective = nullptr;
  std::filesystem::path home;  // absolute
  std::string run_id;
  uint64_t memory_limit_bytes = 0;
  const std::atomic<bool>* interrupted = nullptr;
  // The `loupe` executable the tasks run (the one running now, by default).
  std::filesystem::path loupe_executable;
};

// Throws Error(kConfig) for an unknown kind and Error(kUsage) when the engine's commands are
// missing (sbatch not on PATH, with what to install); for Slurm, whatever check_slurm_ready finds.
std::unique_ptr<Executor> make_executor(const ExecutorSpec& spec, const ExecutorContext& context);

// Before a Slurm run submits anything, the missing piece named with its fix (docs/executors.md,
// "When Slurm is not ready"), each an Error that exits 2, checked in this order:
//   sbatch is not on PATH                    Error(kUsage)
//   no configuration: SLURM_CONF names no file or an unreadable one; or SLURM_CONF is unset, there
//     is no /etc/slurm/slurm.conf and `sbatch --version` fails (no configless cluster either);
//     or sbatch cannot use the file it has   Error(kConfig), sbatch's own last line quoted
//   the controller does not answer          Error(kConfig), `scontrol ping`'s line quoted
//   spec.partition is not one `sinfo` lists  Error(kUsage), the partitions it has listed
// scontrol and sinfo are asked only when they are on PATH (sbatch's own error then tells).
void check_slurm_ready(const ExecutorSpec& spec);

// The two halves of running one point, shared by every executor (defined in cascade.cpp next to
// subject_point_runner): the probe request of a task (its observation goes to the staging run
// `staging_id`; repeat r of an entry with `seeds` > 1 runs seed + r / repeats), and, once the
// subject has written it, moving the observation to
// <home>/runs/<run_id>/<probe>/<point>/ and analysing it there.
// `secret_scope` names the run whose hidden runs this point's shares (hidden_secret).
probe::RunRequest point_run_request(const Objective& objective, const std::filesystem::path& home,
                                    const std::string& staging_id, uint64_t memory_limit_bytes,
                                    const PlanTask& task, const ProbeEntry& entry, int64_t repeat,
                                    const std::string& secret_scope);
PointResult finish_point(const probe::RunRequest& request, const std::string& run_id,
                         const PlanTask& task, int64_t repeat, probe::RunOutcome outcome);

// Writes `text` to `file` through a sibling ".partial" file and a rename, so that a reader on
// another node sees the whole file or none of it (executor specs, task scripts, task results).
// Throws Error(kInput) naming the file.
void write_file_atomically(const std::filesystem::path& file, const std::string& text);

// Hooks that connect an executor to CascadeOptions (begin/end of each layer) and the runner.
void attach_executor(Executor& executor, CascadeOptions& options);
PointRunner executor_runner(Executor& executor);

// The task side of a batch executor: `loupe executor-task DIR INDEX` runs point INDEX of the
// spec DIR/points.json through probe::run_probe and writes DIR/result-INDEX.json atomically
// ({"ok", "observation_dir"} or {"ok": false, "error": {...}, "finding": {...}}). Returns the
// process exit code (0 even when the subject failed: the failure is in the result file).
int run_executor_task(const std::filesystem::path& dir, int64_t index);

}  // namespace loupe::gate
