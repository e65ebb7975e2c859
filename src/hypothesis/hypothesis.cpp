#include "hypothesis/hypothesis.hpp"

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>
#include <variant>

#include "core/json.hpp"
#include "core/process.hpp"
#include "gate/objective.hpp"
#include "ledger/exchange.hpp"
#include "loupe/error.hpp"

namespace loupe::hypothesis {
namespace {

std::string short_commit(const std::string& commit) {
  return commit.size() > 12 ? commit.substr(0, 12) : commit;
}

// The deployment settings recorded in a run's config JSON ({"settings": {...}}), as JSON text per
// key so that values of any type compare exactly.
std::vector<std::pair<std::string, std::string>> settings_of(const ledger::RunRecord& run) {
  std::vector<std::pair<std::string, std::string>> settings;
  for (const auto& [key, value] : ledger::recorded_settings(run)) {
    settings.emplace_back(key, value.dump());
  }
  return settings;
}

// `git diff --name-only -z A B` in `repo`, or the reason it could not be listed.
std::variant<std::vector<std::string>, std::string> commit_diff(const std::string& base,
                                                                const std::string& candidate,
                                                                const std::filesystem::path& repo) {
  ProcessSpec spec;
  spec.argv = {"git", "-C",           repo.string(), "diff",    "--name-only",
               "-z",  "--no-renames", base,          candidate, "--"};
  spec.timeout = std::chrono::seconds(60);
  ProcessResult result;
  try {
    result = run_process(spec);
  } catch (const Error& error) {
    return "git could not run: " + error.message();
  }
  if (!result.succeeded()) {
    std::string tail = result.stderr_tail(2, 300);
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
    return "`git diff " + short_commit(base) + " " + short_commit(candidate) + "` in " +
           repo.string() + " failed: " + (tail.empty() ? result.describe() : tail);
  }
  std::vector<std::string> paths;
  size_t start = 0;
  const std::string& text = result.stdout_text;
  while (start < text.size()) {
    size_t end = text.find('\0', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) paths.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return paths;
}

std::string no_candidate_detail(const ledger::Ledger& ledger,
                                const std::vector<std::string>& candidates) {
  if (candidates.empty()) return "no candidate run is linked";
  std::string detail = "no linked candidate run completed with every gate passing:";
  for (const auto& run_id : candidates) {
    const ledger::RunRecord run = ledger.get_run(run_id);
    detail += " run " + run_id + ":";
    std::vector<std::string> problems;
    if (run.status != ledger::RunStatus::kCompleted) {
      problems.push_back("status " + std::string(ledger::run_status_name(run.status)));
    }
    if (run.gates.empty()) problems.push_back("no gates");
    for (const auto& gate : run.gates) {
      if (gate.verdict != GateVerdict::kPass) {
        problems.push_back("gate " + gate.name + " " +
                           std::string(gate_verdict_name(gate.verdict)));
      }
    }
    for (size_t index = 0; index < problems.size(); ++index) {
      detail += (index == 0 ? " " : ", ") + problems[index];
    }
    detail += ";";
  }
  detail.pop_back();
  return detail;
}

bool passed_every_gate(const ledger::RunRecord& run) {
  return run.status == ledger::RunStatus::kCompleted && !run.gates.empty() &&
         std::all_of(run.gates.begin(), run.gates.end(), [](const ledger::GateRecord& gate) {
           return gate.verdict == GateVerdict::kPass;
         });
}

ledger::Hypothesis require_hypothesis(const ledger::Ledger& ledger, int64_t hypothesis_id) {
  auto hypothesis = ledger.find_hypothesis(hypothesis_id);
  if (!hypothesis) {
    throw Error(
        ErrorCode::kUsage,
        "ledger " + ledger.file().string() + ": no hypothesis " + std::to_string(hypothesis_id),
        "`loupe hypothesis list` shows the recorded hypotheses");
  }
  return *std::move(hypothesis);
}

}  // namespace

int64_t add(ledger::Ledger& ledger, const std::string& text,
            const std::optional<std::string>& skeleton_id) {
  if (text.empty()) {
    throw Error(ErrorCode::kUsage, "hypothesis text: expected a claim, found an empty string",
                "state what you expect to change and why, e.g. \"3xTF32 removes the CP drift\"");
  }
  return ledger.add_hypothesis(text, skeleton_id, ledger::utc_now());
}

void link(ledger::Ledger& ledger, int64_t hypothesis_id, const std::string& run_id,
          ledger::LinkRole role) {
  ledger.link_run(hypothesis_id, run_id, role, ledger::utc_now());
}

ChangeSet changes_between(const ledger::RunRecord& baseline, const ledger::RunRecord& candidate,
                          const std::filesystem::path& repo) {
  ChangeSet changes;
  std::set<std::string> paths;
  std::vector<std::string> unknown;
  if (baseline.git.commit.empty() || candidate.git.commit.empty()) {
    const auto& missing = baseline.git.commit.empty() ? baseline : candidate;
    unknown.push_back("run " + missing.id + " recorded no git commit");
  } else if (baseline.git.commit != candidate.git.commit) {
    auto diff = commit_diff(baseline.git.commit, candidate.git.commit, repo);
    if (auto* listed = std::get_if<std::vector<std::string>>(&diff)) {
      paths.insert(listed->begin(), listed->end());
    } else {
      unknown.push_back(std::get<std::string>(diff));
    }
  }
  // Two runs of one commit with the same diff and the same changed paths ran the same tree: their
  // dirty paths are not a change between them.
  const bool same_tree = baseline.git.commit == candidate.git.commit &&
                         baseline.git.dirty == candidate.git.dirty &&
                         baseline.git.diff_hash == candidate.git.diff_hash &&
                         baseline.git.dirty_paths == candidate.git.dirty_paths;
  if (!same_tree) {
    for (const auto* run : {&baseline, &candidate}) {
      if (run->git.dirty && run->git.dirty_paths.empty()) {
        unknown.push_back("run " + run->id +
                          " had uncommitted changes but recorded no paths (recorded before "
                          "ledger schema 3)");
      }
      paths.insert(run->git.dirty_paths.begin(), run->git.dirty_paths.end());
    }
  }
  changes.paths.assign(paths.begin(), paths.end());
  if (!unknown.empty()) {
    std::string joined;
    for (const auto& reason : unknown) joined += (joined.empty() ? "" : "; ") + reason;
    changes.paths_unknown = joined;
  }

  const auto before = settings_of(baseline);
  const auto after = settings_of(candidate);
  std::set<std::string> params;
  auto value_in = [](const auto& settings, const std::string& key) -> std::optional<std::string> {
    for (const auto& [name, value] : settings) {
      if (name == key) return value;
    }
    return std::nullopt;
  };
  for (const auto& [key, value] : before) {
    if (value_in(after, key) != value) params.insert(key);
  }
  for (const auto& [key, value] : after) {
    if (value_in(before, key) != value) params.insert(key);
  }
  changes.params.assign(params.begin(), params.end());
  return changes;
}

std::vector<gate::ReviewTrigger> triggers_for(const gate::Objective& objective,
                                              const ChangeSet& changes) {
  std::vector<gate::ReviewTrigger> triggers =
      gate::review_triggers(objective, changes.paths, changes.params);
  if (changes.paths_unknown) {
    // What cannot be listed might touch any guarded path: every category with paths triggers.
    std::vector<gate::ReviewTrigger> all;
    for (const auto& category : objective.review) {
      if (!category.paths.empty()) {
        all.push_back({category.name, "changed paths unknown: " + *changes.paths_unknown});
      }
      for (const auto& trigger : triggers) {
        if (trigger.category == category.name) all.push_back(trigger);
      }
    }
    return all;
  }
  return triggers;
}

DecideOutcome decide(ledger::Ledger& ledger, int64_t hypothesis_id, ledger::DecisionKind wanted,
                     const std::string& why, const std::string& who,
                     const std::filesystem::path& repo) {
  const std::string name = "hypothesis " + std::to_string(hypothesis_id);
  if (wanted == ledger::DecisionKind::kNeedsReview) {
    throw Error(ErrorCode::kUsage,
                name + ": decision 'needs-review' is recorded by loupe, not asked for",
                "decide retain, revise or reject; a retain that crosses the review boundary is "
                "recorded as needs-review");
  }
  if (why.empty()) {
    throw Error(ErrorCode::kUsage, name + ": --why: expected the reason for the decision",
                "say what the linked runs showed, e.g. --why \"drift gone: rms_ratio 6e-7\"");
  }
  const ledger::Hypothesis hypothesis = require_hypothesis(ledger, hypothesis_id);
  DecideOutcome outcome;
  if (wanted != ledger::DecisionKind::kRetain) {
    outcome.recorded = wanted;
    outcome.decision_id = ledger.add_decision(hypothesis_id, wanted, why, who, ledger::utc_now());
    return outcome;
  }

  std::vector<std::string> candidates;
  std::optional<std::string> baseline_id;
  for (const auto& link : hypothesis.links) {
    if (link.role == ledger::LinkRole::kCandidate) {
      candidates.push_back(link.run_id);
    } else {
      baseline_id = link.run_id;  // the newest baseline wins
    }
  }
  std::optional<ledger::RunRecord> candidate;
  for (auto it = candidates.rbegin(); it != candidates.rend() && !candidate; ++it) {
    ledger::RunRecord run = ledger.get_run(*it);
    if (passed_every_gate(run)) candidate = std::move(run);
  }
  if (!candidate) {
    throw Error(
        ErrorCode::kUsage, name + ": retain refused: " + no_candidate_detail(ledger, candidates),
        "link a run whose gates all pass with `loupe hypothesis link " +
            std::to_string(hypothesis_id) + " RUN --as candidate`, or decide revise or reject");
  }
  if (!baseline_id) {
    throw Error(ErrorCode::kUsage,
                name +
                    ": retain refused: no baseline run is linked, so what changed cannot be "
                    "checked against the review boundary",
                "link the run before the change with `loupe hypothesis link " +
                    std::to_string(hypothesis_id) + " RUN --as baseline`");
  }
  const ledger::RunRecord baseline = ledger.get_run(*baseline_id);

  // Issue 25: a correlation is not a cause. When no gate changed between the baseline and the
  // candidate and no measured finding did, what changed is inferred evidence only (a lock wait
  // gone from a trace, a counter pattern): nothing has been shown under control yet.
  bool measured_change = false;
  for (const auto& gate : candidate->gates) {
    const auto before =
        std::find_if(baseline.gates.begin(), baseline.gates.end(),
                     [&](const ledger::GateRecord& record) { return record.name == gate.name; });
    if (before == baseline.gates.end() || before->verdict != gate.verdict) measured_change = true;
  }
  std::vector<const Finding*> inferred_changes;
  auto notable = [](const Finding& finding) { return finding.severity != Severity::kInfo; };
  auto keys_of = [&](const ledger::RunRecord& run) {
    std::set<std::string> keys;
    for (const auto& finding : run.findings) {
      if (notable(finding)) keys.insert(ledger::finding_key(finding));
    }
    return keys;
  };
  const std::set<std::string> before_keys = keys_of(baseline);
  const std::set<std::string> after_keys = keys_of(*candidate);
  for (const ledger::RunRecord* run : {&baseline, &std::as_const(*candidate)}) {
    const std::set<std::string>& other = run == &baseline ? after_keys : before_keys;
    for (const auto& finding : run->findings) {
      if (!notable(finding) || other.count(ledger::finding_key(finding))) continue;
      if (evidence_kind(finding) == EvidenceKind::kInferred) {
        inferred_changes.push_back(&finding);
      } else {
        measured_change = true;
      }
    }
  }
  if (!measured_change && !inferred_changes.empty()) {
    throw Error(ErrorCode::kUsage,
                name + ": retain refused: between baseline " + baseline.id + " and candidate " +
                    candidate->id + " no gate and no measured finding changed; what changed is " +
                    std::to_string(inferred_changes.size()) +
                    " inferred finding(s) (first: " + inferred_changes.front()->id +
                    "), and correlations in traces or counters cannot establish a cause",
                "verify it first: " + verification_experiment(*inferred_changes.front()) +
                    "; a gate that measures it makes the evidence measured");
  }

  // Evidence loupe did not produce here (an edited export can claim anything) is for a person to
  // weigh: a decision resting on an imported run needs review.
  const std::vector<const ledger::RunRecord*> linked = {&baseline, &*candidate};
  for (const ledger::RunRecord* run : linked) {
    if (!run->imported) continue;
    const std::string role = run == &baseline ? "baseline" : "candidate";
    outcome.triggers.push_back(
        {"imported", role + " run " + run->id + " was imported from " + run->imported->source +
                         " (export sha256 " + run->imported->digest.substr(0, 12) +
                         "): its evidence was not produced by this ledger's loupe"});
  }
  std::filesystem::path objective_path = candidate->objective_path;
  if (objective_path.is_relative()) objective_path = repo / objective_path;
  try {
    const gate::Objective objective = gate::parse_objective_file(objective_path);
    for (auto& trigger : triggers_for(objective, changes_between(baseline, *candidate, repo))) {
      outcome.triggers.push_back(std::move(trigger));
    }
  } catch (const Error& error) {
    // An imported candidate's objective may not exist here; the decision already needs review.
    if (outcome.triggers.empty()) throw;
    outcome.triggers.push_back(
        {"imported", "the candidate's objective could not be read to check the review boundary: " +
                         error.message()});
  }

  std::vector<ledger::ReviewNote> notes;
  for (const auto& trigger : outcome.triggers) notes.push_back({trigger.category, trigger.reason});
  outcome.recorded =
      notes.empty() ? ledger::DecisionKind::kRetain : ledger::DecisionKind::kNeedsReview;
  outcome.decision_id =
      ledger.add_decision(hypothesis_id, outcome.recorded, why, who, ledger::utc_now(), notes);
  return outcome;
}

void approve(ledger::Ledger& ledger, int64_t hypothesis_id, const std::string& by) {
  if (by.empty()) {
    throw Error(ErrorCode::kUsage, "--by: expected the name of the person approving, found nothing",
                "loupe hypothesis review H --approve --by NAME");
  }
  ledger.approve_review(hypothesis_id, by, ledger::utc_now());
}

Json hypothesis_to_json(const ledger::Hypothesis& hypothesis) {
  Json links = Json::array();
  for (const auto& link : hypothesis.links) {
    links.push_back({{"run", link.run_id},
                     {"role", ledger::link_role_name(link.role)},
                     {"linked_at", link.linked_at}});
  }
  Json decisions = Json::array();
  for (const auto& decision : hypothesis.decisions) {
    Json triggers = Json::array();
    for (const auto& trigger : decision.triggers) {
      triggers.push_back({{"category", trigger.category}, {"reason", trigger.reason}});
    }
    Json json = {{"id", decision.id},
                 {"decision", ledger::decision_name(decision.decision)},
                 {"why", decision.why},
                 {"who", decision.who},
                 {"decided_at", decision.decided_at},
                 {"triggers", triggers}};
    if (decision.approval) {
      json["approved_by"] = decision.approval->by;
      json["approved_at"] = decision.approval->approved_at;
    }
    decisions.push_back(std::move(json));
  }
  return {{"id", hypothesis.id},
          {"text", hypothesis.text},
          {"skeleton", hypothesis.skeleton_id ? Json(*hypothesis.skeleton_id) : Json(nullptr)},
          {"status", ledger::hypothesis_status_name(hypothesis.status)},
          {"created_at", hypothesis.created_at},
          {"links", links},
          {"decisions", decisions}};
}

}  // namespace loupe::hypothesis
