// gate/coverage.hpp — which probes of a subject no gate covers. An objective that runs a probe
// without a gate reading it, or never runs it at all, lets a fault in that path pass: loupe plan
// and loupe run say so, as findings, so the gap is visible before a fault slips through it.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <string>
#include <vector>

#include "core/finding.hpp"
#include "core/json.hpp"
#include "gate/objective.hpp"
#include "gate/plan.hpp"

namespace loupe::gate {

struct ProbeCoverage {
  std::string probe;
  std::string kind;                  // check, bench, scenario (from the subject's list)
  std::vector<std::string> entries;  // the objective's entries running it ("check cp_control")
  std::vector<std::string> gates;    // the gates reading one of those entries
  std::string ungated_reason;        // [coverage] ungated: why no gate is meant to cover it
};

// One row per probe of `probe_list` (the subject's `list --json` answer: {"probes": [{"name",
// "kind"}, ...]}), in its order. Throws Error(kSubject) when the list has no probes array.
std::vector<ProbeCoverage> probe_coverage(const Objective& objective, const Json& probe_list);

// coverage.ungated (warn) for a probe no gate covers — the objective runs it without a gate, or
// does not run it — unless [coverage] ungated names it (then coverage.declared_ungated, info).
// coverage.unknown_probe (warn) for a [coverage] ungated name the subject does not declare.
std::vector<Finding> coverage_findings(const Objective& objective,
                                       const std::vector<ProbeCoverage>& coverage);

// "coverage: 10 of 11 probes gated; not gated: chunk_prefill (bench, run by bench chunk_prefill
// without a gate)"; one line per problem after the first.
std::string render_coverage(const std::vector<ProbeCoverage>& coverage);

}  // namespace loupe::gate
