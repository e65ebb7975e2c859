// gate/plan.hpp — `loupe plan`'s core: from an objective and a deployment configuration to the
// exact list of (probe, parameter point) tasks the cascade runs.
//
// A configuration is a named [[deployment]], ad-hoc settings "shards=8,cache=int8", or both
// ("incident,shards=4": later items override earlier ones). Each setting goes through its
// [[deployment_key]]'s implications: a probe parameter is set to the setting's value (or its
// `map`ped value) in every point of every entry running that probe, replacing the file's sweep of
// that parameter; a variant selector decides what NAME[configured] means in bench gates; a
// switch (`run = { on = true, off = false }`) keeps or leaves out every entry running its probe.
// A key the configuration does not set takes its `default`, when the file gives one.
// Points that become identical are run once. Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gate/objective.hpp"

namespace loupe::gate {

struct Setting {
  std::string key;
  Value value;
  bool operator==(const Setting&) const = default;
};

struct Configuration {
  std::string name;               // the [[deployment]] used, empty for ad-hoc settings only
  std::vector<Setting> settings;  // one per key, in the order given
  bool operator==(const Configuration&) const = default;
};

// Parses NAME, k=v,... or NAME,k=v,... against the objective's deployment keys. An empty spec is
// the empty configuration. Throws Error(kUsage) naming the unknown configuration, key or value
// and listing the accepted ones.
Configuration resolve_configuration(const Objective& objective, std::string_view spec);

struct PlanTask {
  Layer layer = Layer::kCheck;
  std::string entry;  // the [[check]]/[[bench]]/[[scenario]] name
  std::string probe;
  Params params;
  std::vector<std::string> configured;  // the parameters the configuration set
  int64_t repeats = 1;                  // runs of the point: the entry's repeats x its seeds
  bool operator==(const PlanTask&) const = default;
};

// An entry a switch turned off: none of its points is in the plan, and a gate that reads it is
// not-run (gate_eval.hpp's left_out_reason).
struct LeftOutEntry {
  Layer layer = Layer::kCheck;
  std::string entry;
  std::string probe;
  std::string reason;  // the setting that switched it off, "w8a8=off"
  bool operator==(const LeftOutEntry&) const = default;
};

struct Plan {
  Configuration configuration;
  std::vector<PlanTask> tasks;  // checks, then benches, then scenarios; file order within each
  // Bench entry name -> the variant NAME[configured] refers to.
  std::vector<std::pair<std::string, std::string>> configured_variants;
  // Keys the configuration did not set that took their `default`, in the file's order.
  std::vector<Setting> defaults;
  std::vector<LeftOutEntry> left_out;
};

// The entry's record when a switch left it out of the plan, else nullptr.
const LeftOutEntry* find_left_out(const Plan& plan, Layer layer, std::string_view entry);

// The most subject runs (points × repeats, summed over the entries the configuration keeps) one
// run of an objective may plan; docs/objective.md states it. A 3,000 × 1,000 sweep once kept
// `loupe plan` busy for minutes before anything said it was too large.
inline constexpr int64_t kMaxSubjectRunsPerRun = 10000;

// Throws Error(kConfig) naming the file, the entry's line, its points and repeats when an entry,
// or the whole plan, would run the subject more than kMaxSubjectRunsPerRun times. Counts before
// expanding anything, so it answers at once however large the sweep.
void check_run_size(const Objective& objective, const Plan& plan);

// REQUIRES nothing of the sweep's size: it is checked first (check_run_size).
Plan make_plan(const Objective& objective, const Configuration& configuration);

// The variant NAME[configured] means under this plan; nullopt when no setting selects one.
std::optional<std::string> configured_variant(const Plan& plan, std::string_view bench);

// What `loupe plan` says of a planned check's input structures (include/loupe/structure.hpp):
// those its `structures` declares and those of the family it never sees (all of them for a check
// that declares none). Empty when no check of the objective declares any.
struct StructureRow {
  std::string entry;
  bool declared = false;                // its `structures` names at least one
  std::vector<std::string> sees;        // in the family's order
  std::vector<std::string> never_sees;  // in the family's order
};
std::vector<StructureRow> structures_seen(const Objective& objective, const Plan& plan);

// Text: one line per task, at most `max_tasks` (the rest announced with a hint).
std::string render_plan(const Plan& plan, const Objective& objective, size_t max_tasks);
// {"name": NAME|null, "settings": {KEY: VALUE, ...}}: what the ledger records as a run's config.
nlohmann::ordered_json configuration_to_json(const Configuration& configuration);
// {"objective", "configuration": {"name", "settings"}, "tasks": [...], "configured_variants",
//  "defaults": {KEY: VALUE}, "left_out": [{"layer", "entry", "probe", "reason"}]}.
nlohmann::ordered_json plan_to_json(const Plan& plan, const Objective& objective);

}  // namespace loupe::gate
