// gate/objective.hpp — an objective file (TOML) as typed values: the subject, the probes of each
// cascade layer with their parameter sweeps, the gates, the deployment configurations and the
// review boundary. docs/objective.md documents every key.
//
// parse_objective reads the whole file and validates it: unknown keys, wrong types, references
// to probes, variants or parameters the file does not declare, and malformed gate expressions are
// Error(kConfig) "FILE:LINE: KEY: expected ..., found ..." (KEY is a path such as
// check[1].params.T, 0-based like toml++'s paths). toml++ never appears in this header.
// Thread-safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "check/rules.hpp"
#include "core/finding.hpp"
#include "gate/expression.hpp"
#include "loupe/error.hpp"
#include "loupe/value.hpp"

namespace loupe::gate {

enum class CascadeMode { kStopAtFirstFailure, kAll };

// "stop-at-first-failure", "all".
std::string_view cascade_mode_name(CascadeMode mode);

struct SubjectSpec {
  // The subject's command line; loupe appends `list` or `run PROBE ...`. A string in the file is
  // split at whitespace.
  std::vector<std::string> command;
  // Where the subject runs, resolved against the objective file's folder; absent: the folder
  // loupe was started in.
  std::optional<std::filesystem::path> working_dir;
  std::vector<std::pair<std::string, std::string>> environment;  // set for the subject
  // Variables of loupe's environment passed on beyond the documented allowlist (core/process.hpp
  // subject_environment_allowlist): names, or prefixes ending in '*' ("HF_*").
  std::vector<std::string> pass_env;
  double timeout_s = 600;  // per probe point
  // A launcher put before the command for checks across ranks, split at whitespace; "{ranks}"
  // takes the point's `ranks` parameter ("mpirun -n {ranks} --oversubscribe"; docs/multi-rank.md).
  std::vector<std::string> launch;
  bool operator==(const SubjectSpec&) const = default;
};

// What `[executor]` in the objective and `loupe run --executor ...` say; the command line wins
// (gate/executor.hpp runs it).
// What one entry's points ask of a batch executor's node ([executor.resources.ENTRY]).
struct PointResources {
  std::string entry;          // the [[check]]/[[bench]]/[[scenario]] entry's name
  std::string gres;           // sbatch --gres, e.g. "gpu:1" (overrides the executor's)
  int64_t cpus_per_task = 0;  // sbatch --cpus-per-task (0: the cluster's default)
  // sbatch --ntasks: the allocation a multi-rank subject launches its ranks in (with srun or
  // mpirun); the point itself is still run once.
  int64_t ntasks = 0;
  int line = 0;  // where the file names it, for errors found after parsing
  bool operator==(const PointResources&) const = default;
};

struct ExecutorSpec {
  std::string kind = "local";  // "local" or "slurm"
  std::string partition;       // sbatch --partition (empty: the cluster's default)
  std::string account;         // sbatch --account
  std::string time_limit;      // sbatch --time per task, e.g. "00:10:00"
  std::string gres;            // sbatch --gres, e.g. "gpu:1"
  int64_t max_parallel = 0;    // the array's %M throttle (0: no throttle)
  int64_t retries = 2;         // resubmissions of a task lost for the node's sake
  double poll_s = 0.5;         // how often the queue and the result files are looked at
  // Where the tasks write their observations; it must be a filesystem every node sees. Empty:
  // the run's own directory under the home.
  std::filesystem::path shared_dir;
  std::vector<PointResources> resources;  // per entry; entries not named use the defaults above
  // Bench and scenario tasks get a node to themselves (sbatch --exclusive), so no timed point
  // shares its node with another task: their verdicts compare times. false lets them share.
  bool exclusive_timing = true;
  // The local executor: how many check points run at once (CascadeOptions::check_workers);
  // 0: default_check_workers(). Bench and scenario points always run alone.
  int64_t check_workers = 0;
  bool operator==(const ExecutorSpec&) const = default;
};

// One parameter and the values it takes; one value is a fixed parameter.
struct ParamAxis {
  std::string name;
  std::vector<Value> values;
  bool operator==(const ParamAxis&) const = default;
};

// A bench entry's `counters = { kernel = "REGEX", launches = N }`: after each point's verdict, the
// subject runs once more under ncu, untimed (docs/counters.md, "Bench attachment").
struct EntryCounters {
  std::string kernel;    // a pattern (RE2 syntax) on the kernel name (ncu's --kernel-name regex:)
  int64_t launches = 1;  // untimed calls of the last variant, and ncu's --launch-count
  bool operator==(const EntryCounters&) const = default;
};

// A [[check]], [[bench]] or [[scenario]] entry.
struct ProbeEntry {
  Layer layer = Layer::kCheck;
  std::string name;   // unique within its layer; gates refer to it (defaults to the probe)
  std::string probe;  // the subject's probe name
  std::string description;
  std::vector<ParamAxis> params;  // swept as a cartesian product, in declaration order
  std::vector<ParamAxis> zip;     // lists of one length, stepped together
  std::vector<std::pair<std::string, double>> tolerances;  // checks: METRIC -> absolute bound
  // Checks: threshold rules (a rules file, or rules written inline) that decide each output by
  // the first rule matching its name, in place of the tolerances (docs/objective.md).
  std::optional<check::RuleSet> rules;
  std::vector<std::string> variants;  // benches: the variants it times
  int64_t repeats = 1;                // runs of each point
  std::optional<double> threshold;    // benches, scenarios: A/B threshold t
  std::optional<uint64_t> seed;       // absent: loupe draws and records one
  int line = 0;
  // Benches: the sampling budget of each point (the subject's --budget; absent: its own, 2 s)
  // and the target relative half-width of the interval that stops sampling early (--precision;
  // absent: 0.01). More budget is what turns an AMBIGUOUS verdict at a slow point into a decision.
  std::optional<double> budget_s;
  std::optional<double> precision;
  // Checks: seeds per point (seed, seed+1, ... when `seed` is set; drawn otherwise). The gates
  // see every seed's values, so a fault that shows on one seed in ten is not left to luck.
  int64_t seeds = 1;
  std::optional<EntryCounters> counters;  // benches
  // The components of the subject this entry's probe runs (names declared in [components]),
  // so that a failing gate can be traced to the most specific one (gate/causes.hpp). Empty: not
  // declared.
  std::vector<std::string> covers;
  // The named input structures (include/loupe/structure.hpp, docs/structures.md) this entry's
  // inputs carry; `loupe plan` names the ones of the family a check never sees. Empty: not
  // declared.
  std::vector<std::string> structures;
  // Never read from a file: the cascade sets it on the copy of a bench entry it hands the runner
  // for a later round (>= 1) against a baseline build (the subject's --round).
  int64_t round = 0;
  bool operator==(const ProbeEntry&) const = default;
};

// Every parameter point of an entry: the cartesian product of `params` (the last one varies
// fastest) times the rows of `zip`; each point lists params' names, then zip's.
std::vector<Params> expand_points(const ProbeEntry& entry);

// A [components] entry: a part of the subject that checks, benches and scenarios `cover`.
struct Component {
  std::string name;
  std::string description;
  int line = 0;
  bool operator==(const Component&) const = default;
};

struct GateSpec {
  std::string name;
  std::string description;
  std::string text;  // as written
  GateExpression expression;
  double confidence = 0.95;  // relative bounds and verdicts: the interval's confidence level
  int line = 0;
  bool operator==(const GateSpec&) const = default;
};

// What one deployment setting changes: a probe parameter (its value passed through, or
// translated by `map`), whether the entries running the probe run at all (`run`), or the bench
// variant that `NAME[configured]` refers to (neither `param` nor `run`).
struct Implication {
  std::string probe;
  std::optional<std::string> param;  // absent: selects the variant of the bench entries
  std::vector<std::pair<std::string, Value>> map;  // setting value (text form) -> probe value
  // setting value (text form) -> whether the entries running `probe` run; non-empty makes this
  // implication a switch (no param, no map).
  std::vector<std::pair<std::string, bool>> run;
  bool operator==(const Implication&) const = default;
};

// A [[deployment_key]]: a configuration key, its allowed values and what it implies.
struct DeploymentKey {
  std::string key;
  std::string description;
  std::vector<Value> values;  // empty: any value
  std::vector<Implication> implies;
  int line = 0;
  // The value the key takes when a configuration does not set it; absent: the file's own
  // points stand.
  std::optional<Value> default_value;
  bool operator==(const DeploymentKey&) const = default;
};

// A [[deployment]]: a named configuration.
struct Deployment {
  std::string name;
  std::string description;
  std::vector<std::pair<std::string, Value>> settings;  // key -> value, in declaration order
  int line = 0;
  bool operator==(const Deployment&) const = default;
};

// A [review.CATEGORY] table: changes that touch these need a person's sign-off.
struct ReviewCategory {
  std::string name;                 // numerics, concurrency, production-risk
  std::vector<std::string> paths;   // globs over repository paths
  std::vector<std::string> params;  // probe parameters or deployment keys
  bool operator==(const ReviewCategory&) const = default;
};

// [build]: how a checkout of the repository is built, so that `loupe bisect` (and its MCP tool,
// which may not take a shell command from a client) can build each commit it tests.
struct BuildSpec {
  std::string command;  // run with `sh -c` in the root of each checkout
  // The subject's folder in a checkout, relative to the repository root; empty: the subject's
  // working_dir mapped into the checkout.
  std::string subject_from;
  double timeout_s = 3600;
  bool operator==(const BuildSpec&) const = default;
};

struct Objective {
  std::filesystem::path file;
  std::string name;
  std::string description;
  SubjectSpec subject;
  CascadeMode cascade = CascadeMode::kStopAtFirstFailure;
  std::vector<ProbeEntry> checks;
  std::vector<ProbeEntry> benches;
  std::vector<ProbeEntry> scenarios;
  std::vector<Component> components;  // [components], in the file's order
  std::vector<GateSpec> gates;
  std::vector<DeploymentKey> deployment_keys;
  std::vector<Deployment> deployments;
  std::vector<ReviewCategory> review;
  // [coverage] ungated: probes of the subject no gate is meant to cover, each with the reason
  // (a GPU probe on a machine without one); every other ungated probe is a coverage finding.
  std::vector<std::pair<std::string, std::string>> coverage_ungated;
  ExecutorSpec executor;           // [executor]; `loupe run --executor ...` overrides it
  std::optional<BuildSpec> build;  // [build]; `loupe bisect --build CMD` overrides it

  // The entries of one layer (kTrace has none).
  const std::vector<ProbeEntry>& entries(Layer layer) const;
  const ProbeEntry* find_entry(Layer layer, std::string_view name) const;
  const Component* find_component(std::string_view name) const;
  const DeploymentKey* find_deployment_key(std::string_view key) const;
  const Deployment* find_deployment(std::string_view name) const;
};

// Reads and validates an objective file. Throws Error(kInput) when it cannot be read and
// Error(kConfig) for anything it says wrongly.
Objective parse_objective_file(const std::filesystem::path& file);
// The same from text; `file` names it in errors and anchors relative paths.
Objective parse_objective(std::string_view text, const std::filesystem::path& file);

}  // namespace loupe::gate
