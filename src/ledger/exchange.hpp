// ledger/exchange.hpp — a run as one JSON document (export/import), the comparison of two runs,
// and the text and JSON renderings `loupe ledger ...` prints.
//
// Export document (docs/formats.md's finding schema inside):
//   {"loupe_ledger_export": 1, "run": {"id", "status", "started_at", "ended_at",
//    "objective": {"path", "hash"}, "git": {"commit", "dirty", "diff_hash", "dirty_paths"?},
//    "environment": {...}, "config": {...},
//    "gates": [{"name", "verdict", "statistics": {...}, "rule"}], "findings": [...],
//    "observations": ["..."]}}
// import_run reads exactly that and throws Error(kInput) naming the source and the field
// ("run.gates[1].verdict") for anything else, so export → import → export is the identity.
// Includes nlohmann-json (core/json.hpp): include this only from .cpp files.
// Thread-safety: free functions over values.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.hpp"
#include "ledger/ledger.hpp"

namespace loupe::ledger {

inline constexpr int kExportVersion = 1;

Json run_to_json(const RunRecord& run);
// The export document, pretty-printed with a trailing newline.
std::string export_run(const RunRecord& run);
// `source` names the input in error messages (a file path).
RunRecord import_run(std::string_view text, const std::string& source);

// pass when every gate passed, fail when one failed, inconclusive when none failed but one was
// inconclusive or not run, none when the run has no gates.
Verdict run_verdict(const RunRecord& run);

struct GateChange {
  std::string name;
  std::optional<GateVerdict> before;  // absent: the gate is only in run B
  std::optional<GateVerdict> after;   // absent: the gate is only in run A
  bool changed() const { return before != after; }
};

struct RunComparison {
  std::string run_a;
  std::string run_b;
  std::vector<GateChange> gates;                     // A's gates in order, then those only in B
  std::vector<Finding> appeared;                     // in B, not in A (keyed by finding_key)
  std::vector<Finding> disappeared;                  // in A, not in B
  std::vector<std::string> environment_differences;  // dotted keys whose values differ
  bool objective_differs = false;                    // the objectives' content hashes differ
  std::vector<std::string> imported;                 // "RUN (from SOURCE)" for each imported run
};

// "check.cp_vs_nocp.drift@T=4096,shards=8": a finding's id and parameter point.
std::string finding_key(const Finding& finding);

RunComparison compare_runs(const RunRecord& a, const RunRecord& b);

// Renderings. Lists are bounded; each says how to see what it left out.
std::string render_run_list(const std::vector<RunSummary>& runs, int64_t total, int64_t offset,
                            const std::string& ledger_file);
Json run_list_to_json(const std::vector<RunSummary>& runs, int64_t total, int64_t offset);
std::string render_run(const RunRecord& run, size_t max_findings);
std::string render_comparison(const RunComparison& comparison, size_t max_findings);
Json comparison_to_json(const RunComparison& comparison);

}  // namespace loupe::ledger
