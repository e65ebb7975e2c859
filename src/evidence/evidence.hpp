// evidence/evidence.hpp — `loupe evidence BASE CANDIDATE`: what a reviewer reads in a pull
// request, from two recorded runs: the gates before and after, each bench's ratio with its
// interval and the number of runs behind it, the checks' errors before and after, the trace and
// counter findings of the candidate, the hypotheses that link the two runs (and whether review
// is required), and next to every number the command that reproduces it.
//
// build_bundle reads the ledger only (never an observation file), so a bundle can be made from
// an imported run. With more runs of each side (`--runs N`: the CLI runs the recorded objective
// and configuration again and passes the extra run ids), a bench line's ratio is the median of
// the per-run ratios with a bootstrap interval over the runs, and says n runs.
// render_markdown fits `limit` characters (GitHub's comment limit by default): every table is
// capped and what a cap leaves out is counted and pointed to the HTML, which has every row.
// Thread-safety: value types and pure functions (build_bundle reads the ledger it is given).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/finding.hpp"
#include "core/json.hpp"
#include "ledger/ledger.hpp"

namespace loupe::evidence {

inline constexpr size_t kGithubCommentLimit = 65536;

struct Side {
  std::vector<std::string> run_ids;  // the recorded run first, then the --runs repeats
  std::string commit;                // "abc1234 (dirty)"
  std::string configuration;         // "incident precision=tf32_rz"
  std::string command;               // `loupe run ...` that produced the run's numbers
  std::string show;                  // `loupe ledger show RUN`
};

struct GateLine {
  std::string name;
  std::optional<GateVerdict> before;
  std::optional<GateVerdict> after;
  std::string statistic_before;  // report::key_statistic; "-" when absent
  std::string statistic_after;
  std::string rule_after;
  // Issue 25: verified when the gate changed between runs a hypothesis links as its baseline and
  // candidate (the controlled A/B of that change), else measured.
  EvidenceKind kind = EvidenceKind::kMeasured;
};

// One bench comparison at one point, on each side.
struct BenchValue {
  double ratio = 0;
  double ci_low = 0;
  double ci_high = 0;
  std::string verdict;    // faster, slower, same, ambiguous (of the recorded run; the runs' median)
  int64_t samples_a = 0;  // of the recorded run
  int64_t samples_b = 0;
  int64_t runs = 1;
  std::string reproduce;
};

struct BenchLine {
  std::string probe;
  std::string point;
  std::string comparison;  // "merged/tiled", from the finding's claim
  std::optional<BenchValue> before;
  std::optional<BenchValue> after;
};

struct CheckValue {
  std::vector<std::pair<std::string, double>> metrics;  // rms_ratio, max_abs, ... as recorded
  std::string severity;
  std::string reproduce;
};

struct CheckLine {
  std::string probe;
  std::string point;
  std::optional<CheckValue> before;
  std::optional<CheckValue> after;
};

struct HypothesisLine {
  int64_t id = 0;
  std::string text;
  std::string status;
  std::string decision;  // the newest decision: "retain by agent: why"; empty when none
  bool review_required = false;
  std::string review;  // the triggers, or who approved
};

struct Bundle {
  Side base;
  Side candidate;
  std::vector<GateLine> gates;
  std::vector<BenchLine> benches;
  std::vector<CheckLine> checks;
  std::vector<Finding> trace_findings;     // the candidate's, then the base's, fail/warn first
  std::vector<Finding> counter_findings;   // both runs' counters findings
  std::vector<HypothesisLine> hypotheses;  // those linked to both runs
  std::string compare_command;             // `loupe ledger compare BASE CANDIDATE`
  Verdict verdict = Verdict::kNone;        // the candidate's run verdict
};

struct Options {
  // How the commands name the ledger ("--home DIR" or "--ledger FILE"); empty: the default.
  std::string ledger_argument;
  std::vector<std::string> base_repeats;  // extra run ids of the base (--runs)
  std::vector<std::string> candidate_repeats;
};

// Throws Error(kUsage) naming the run when it is not in the ledger.
Bundle build_bundle(const ledger::Ledger& ledger, const std::string& base_run,
                    const std::string& candidate_run, const Options& options);

// `loupe run OBJECTIVE --config ...` for a recorded run (its configuration, sets and --only).
std::string run_command(const ledger::RunRecord& run);

std::string render_markdown(const Bundle& bundle, size_t limit = kGithubCommentLimit);
std::string render_html(const Bundle& bundle);
Json bundle_to_json(const Bundle& bundle);

}  // namespace loupe::evidence
