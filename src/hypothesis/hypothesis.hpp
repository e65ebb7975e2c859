// hypothesis/hypothesis.hpp — hypotheses and decisions over recorded runs, with the objective's
// review boundary enforced: the operations behind `loupe hypothesis ...` and the MCP tools.
//
// A hypothesis links baseline and candidate runs and ends in a decision. Retain is refused
// (Error(kUsage), naming each candidate run and the gate that did not pass) unless a linked
// candidate run completed with every gate passing, and a baseline run is linked; and it is
// refused when no gate and no measured finding changed between the baseline and the candidate
// while inferred findings did (trace, counters: correlations), naming the experiment that would
// verify them. What changed
// between the baseline and that candidate — the paths in the diff between their recorded commits,
// the dirty paths either run recorded, and the deployment settings whose values differ in their
// recorded configurations — is matched against the candidate objective's [review] categories
// (gate/review.hpp); any hit records the decision as needs-review, naming every trigger, until a
// person approves it with `loupe hypothesis review H --approve --by NAME`. Approval is a CLI act:
// the MCP server must never call approve(). Revise and reject change nothing and are recorded as
// asked.
// Errors: unknown hypotheses or runs and refused decisions are Error(kUsage); an objective file
// that cannot be read is Error(kInput) or Error(kConfig) from the objective parser.
// Thread-safety: as the Ledger passed in (one per thread).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gate/review.hpp"
#include "ledger/ledger.hpp"

namespace loupe::hypothesis {

// Returns the new hypothesis's id. `skeleton_id` is recorded as given (the CLI checks it against
// the library).
int64_t add(ledger::Ledger& ledger, const std::string& text,
            const std::optional<std::string>& skeleton_id);

// Throws Error(kUsage) when the hypothesis or the run is unknown; linking twice is a no-op.
void link(ledger::Ledger& ledger, int64_t hypothesis_id, const std::string& run_id,
          ledger::LinkRole role);

// What changed between two runs, as review_triggers takes it.
struct ChangeSet {
  std::vector<std::string> paths;   // repository paths, sorted, unique
  std::vector<std::string> params;  // deployment settings whose values differ, sorted
  // Set when the paths could not be listed (a commit unknown or not in `repo`); every category
  // with paths then triggers, naming this.
  std::optional<std::string> paths_unknown;
};

// Paths from `git diff --name-only BASE CANDIDATE` in `repo` plus both runs' dirty paths (none
// when both runs share the commit and the diff hash); settings from the runs' config JSON.
ChangeSet changes_between(const ledger::RunRecord& baseline, const ledger::RunRecord& candidate,
                          const std::filesystem::path& repo);

// The review triggers of a change set against an objective (adds the paths_unknown rule to
// gate::review_triggers).
std::vector<gate::ReviewTrigger> triggers_for(const gate::Objective& objective,
                                              const ChangeSet& changes);

struct DecideOutcome {
  ledger::DecisionKind recorded = ledger::DecisionKind::kRetain;
  std::vector<gate::ReviewTrigger> triggers;  // why it was recorded as needs-review
  int64_t decision_id = 0;
};

// Records a decision. `wanted` is retain, revise or reject (needs-review is Error(kUsage)).
// Retain is refused unless a linked candidate run completed with every gate passing and a
// baseline run is linked; the newest such candidate and the newest baseline are compared, and
// the candidate's objective (objective_path, resolved against `repo` when relative) gives the
// review boundary. `repo` is the repository the runs' commits belong to.
DecideOutcome decide(ledger::Ledger& ledger, int64_t hypothesis_id, ledger::DecisionKind wanted,
                     const std::string& why, const std::string& who,
                     const std::filesystem::path& repo);

// A person's sign-off on a needs-review decision: records the approval and the retain decision
// it stands for. Throws Error(kUsage) when the hypothesis is not awaiting review or `by` is empty.
// CLI only, never MCP.
void approve(ledger::Ledger& ledger, int64_t hypothesis_id, const std::string& by);

// {"id", "text", "skeleton", "status", "created_at", "links": [{"run", "role", "linked_at"}],
//  "decisions": [{"id", "decision", "why", "who", "decided_at", "triggers": [{"category",
//  "reason"}], "approved_by"?, "approved_at"?}]}.
nlohmann::ordered_json hypothesis_to_json(const ledger::Hypothesis& hypothesis);

}  // namespace loupe::hypothesis
