// gate/causes.hpp — the cause before the symptom: which failing gate is the most specific, and
// how the others follow from it, from the components each entry `covers` (docs/objective.md,
// "Components and causes").
//
// A gate covers the union of what the entries it reads cover; a gate reading an entry that
// declares no `covers` covers nothing known. Gate S explains gate G when both cover something
// and S's components are a strict subset of G's: whatever breaks S runs inside G too. Among the
// failing gates, the causes are those no other failing gate explains, most specific first (fewest
// components, then the objective's order); every other failing gate follows from the most
// specific cause that explains it. Gates without known components are causes of their own,
// after every gate with components.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gate/gate_eval.hpp"
#include "gate/objective.hpp"

namespace loupe::gate {

// The components the gate's entries cover, sorted; empty when one of its entries declares none.
std::vector<std::string> gate_covers(const Objective& objective, const GateSpec& gate);

// Whether every component of `specific` is in `composite` and `composite` has more: a fault that
// fails `specific` runs inside `composite`. False when either is empty.
bool explains(const std::vector<std::string>& specific, const std::vector<std::string>& composite);

// A failing gate that follows from a more specific one.
struct FollowingGate {
  std::string gate;
  std::string cause;  // the more specific failing gate
  std::string entry;  // the gate's entry that runs the cause's components
  Layer entry_layer = Layer::kCheck;
  std::vector<std::string> via;  // the cause's components
  // "w8a8_within_tolerance fails because check w8a8 runs chunk_kernel, which fails
  // chunk_matches_recurrence".
  std::string sentence;
  bool operator==(const FollowingGate&) const = default;
};

struct CauseReport {
  std::vector<std::string> causes;     // most specific first; causes.front() leads the verdict
  std::vector<FollowingGate> follows;  // in the objective's order of the gates
  bool empty() const { return causes.empty(); }
};

// Over `gates` (GateResults, any order) with the verdict fail.
CauseReport explain_failures(const Objective& objective, const std::vector<GateResult>& gates);

// The verdict's lead sentence: "lead: GATE (its components: ...)" then each following gate's
// sentence; empty when no gate failed.
std::vector<std::string> cause_lines(const CauseReport& report, const Objective& objective);

// {"lead": GATE|null, "causes": [{"gate", "covers"}], "follows": [{"gate", "cause", "entry",
//  "via", "sentence"}]}: the run envelope's data.causes (docs/formats.md).
nlohmann::ordered_json cause_report_to_json(const CauseReport& report, const Objective& objective);

// What `loupe plan` says of the components: for each declared component, the planned entries
// that run it with the fewest components (the check that names it when it breaks) and the other
// planned entries that run it, and the planned benches and scenarios among them (what would see
// it get slower: a component none times can lose any amount of speed and pass every gate); then
// the planned entries that declare no `covers`.
struct ComponentCoverage {
  std::string component;
  std::vector<std::string> most_specific;  // "check chunk", fewest components first
  size_t most_specific_size = 0;           // how many components those entries cover
  std::vector<std::string> also;           // "check w8a8", every other planned entry running it
  std::vector<std::string> timed_by;       // "bench decode", "scenario prefill": planned order
};
std::vector<ComponentCoverage> component_coverage(
    const Objective& objective, const std::vector<std::pair<Layer, std::string>>& planned);
// The components no planned bench or scenario covers (ComponentCoverage::timed_by empty), in the
// objective's order.
std::vector<std::string> untimed_components(const std::vector<ComponentCoverage>& coverage);
// Planned entries without `covers`, as "check NAME".
std::vector<std::string> entries_without_covers(
    const Objective& objective, const std::vector<std::pair<Layer, std::string>>& planned);

}  // namespace loupe::gate
