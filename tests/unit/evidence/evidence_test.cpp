// The evidence bundle from two runs written straight into a ledger: what each section holds,
// that every number in the Markdown sits next to a command, that a very large run still fits
// GitHub's comment limit (the HTML keeping every row), and the hypothesis that links the runs.
#include "evidence/evidence.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "ledger/ledger.hpp"
#include "support/scratch_dir.hpp"

namespace loupe::evidence {
namespace {

Finding bench_finding(const std::string& verdict, int64_t batch, double ratio, double low,
                      double high) {
  Finding finding;
  finding.id = "bench.decode." + verdict;
  finding.layer = Layer::kBench;
  finding.severity = verdict == "slower" ? Severity::kFail : Severity::kInfo;
  finding.claim = "merged vs tiled (ratio of medians merged/tiled " + std::to_string(ratio) + ")";
  finding.where.probe = "decode";
  finding.where.params = {{"batch", Value(batch)}};
  finding.evidence.metrics = {{"ratio", ratio},    {"ci_low", low}, {"ci_high", high},
                              {"threshold", 0.05}, {"n_a", 40},     {"n_b", 41}};
  finding.reproduce = "loupe probe run decode --set batch=" + std::to_string(batch) +
                      " --seed 7 -- build/bin/kda probe";
  return finding;
}

Finding check_finding(const std::string& kind, Severity severity, int64_t shards, double rms) {
  Finding finding;
  finding.id = "check.cp_vs_nocp." + kind;
  finding.layer = Layer::kCheck;
  finding.severity = severity;
  finding.claim = "S differs: rms_ratio " + std::to_string(rms);
  finding.where.probe = "cp_vs_nocp";
  finding.where.params = {{"shards", Value(shards)}};
  finding.evidence.metrics = {{"rms_ratio", rms}, {"max_abs", rms * 3}};
  finding.reproduce = "loupe probe run cp_vs_nocp --set shards=" + std::to_string(shards) +
                      " --seed 3 -- build/bin/kda probe";
  return finding;
}

ledger::RunRecord run_record(const std::string& id, const std::string& config,
                             ledger::GateRecord gate, std::vector<Finding> findings) {
  ledger::RunRecord run;
  run.id = id;
  run.started_at = "2026-12-01T10:00:00Z";
  run.ended_at = "2026-12-01T10:01:00Z";
  run.status = ledger::RunStatus::kCompleted;
  run.objective_path = "/repo/examples/kda/loupe.toml";
  run.objective_hash = "abc";
  run.git.commit = "0123456789abcdef0123";
  run.config_json = R"({"name": ")" + config + R"(", "settings": {"precision": "tf32x3"}})";
  run.gates = {std::move(gate)};
  run.findings = std::move(findings);
  return run;
}

class EvidenceTest : public ::testing::Test {
 protected:
  EvidenceTest()
      : scratch_("evidence-unit"),
        ledger_(ledger::Ledger::open(scratch_.path() / "ledger.sqlite")) {}

  void record_pair() {
    Finding trace;
    trace.id = "trace.diff.locks";
    trace.layer = Layer::kTrace;
    trace.severity = Severity::kWarn;
    trace.claim = "kv_transfer's wait on interpreter_lock went from 120 ms to 0 ns";
    trace.reproduce = "loupe trace diff a.ltrace b.ltrace";
    ledger_.insert_run(
        run_record("r-base", "incident",
                   {"cp_matches", GateVerdict::kFail, R"({"n": 2, "estimate": 0.026, "bound": 2e-06,
          "comparison": "<="})",
                    "the largest rms_ratio is 0.026"},
                   {bench_finding("slower", 32, 1.99, 1.97, 2.03),
                    check_finding("mismatch", Severity::kFail, 8, 0.026)}));
    ledger_.insert_run(run_record(
        "r-cand", "fixed",
        {"cp_matches", GateVerdict::kPass, R"({"n": 2, "estimate": 1.1e-07, "bound": 2e-06,
          "comparison": "<="})",
         "every value is within the bound"},
        {bench_finding("same", 32, 1.0, 0.98, 1.01),
         check_finding("pass", Severity::kInfo, 8, 1.1e-7), trace}));
  }

  test_support::ScratchDir scratch_;
  ledger::Ledger ledger_;
};

TEST_F(EvidenceTest, PairsGatesBenchesAndChecksOfTheTwoRuns) {
  record_pair();
  const Bundle bundle = build_bundle(ledger_, "r-base", "r-cand", {});
  ASSERT_EQ(bundle.gates.size(), 1u);
  EXPECT_EQ(bundle.gates[0].before, GateVerdict::kFail);
  EXPECT_EQ(bundle.gates[0].after, GateVerdict::kPass);
  ASSERT_EQ(bundle.benches.size(), 1u);
  EXPECT_EQ(bundle.benches[0].comparison, "merged/tiled");
  EXPECT_EQ(bundle.benches[0].point, "batch=32");
  ASSERT_TRUE(bundle.benches[0].before && bundle.benches[0].after);
  EXPECT_DOUBLE_EQ(bundle.benches[0].before->ratio, 1.99);
  EXPECT_EQ(bundle.benches[0].before->verdict, "slower");
  EXPECT_EQ(bundle.benches[0].after->verdict, "same");
  EXPECT_EQ(bundle.benches[0].after->runs, 1);
  ASSERT_EQ(bundle.checks.size(), 1u);
  EXPECT_EQ(bundle.checks[0].before->metrics[0].first, "rms_ratio");
  EXPECT_DOUBLE_EQ(bundle.checks[0].before->metrics[0].second, 0.026);
  EXPECT_DOUBLE_EQ(bundle.checks[0].after->metrics[0].second, 1.1e-7);
  ASSERT_EQ(bundle.trace_findings.size(), 1u);
  EXPECT_EQ(bundle.gates[0].kind, EvidenceKind::kMeasured);  // no hypothesis links the runs
  const std::string markdown = render_markdown(bundle);
  EXPECT_NE(markdown.find("- warn inferred `trace.diff.locks`"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("verify with: a controlled A/B"), std::string::npos) << markdown;
  EXPECT_EQ(bundle.base.command, "loupe run /repo/examples/kda/loupe.toml --config incident");
  EXPECT_EQ(bundle.compare_command, "loupe ledger compare r-base r-cand");
  EXPECT_TRUE(bundle.hypotheses.empty());
}

// Issue 25: every number in the bundle is traceable to a command in it.
TEST_F(EvidenceTest, EveryRowWithANumberCarriesACommand) {
  record_pair();
  const std::string markdown = render_markdown(build_bundle(ledger_, "r-base", "r-cand", {}));
  std::istringstream lines(markdown);
  const std::regex digit("[0-9]");
  const std::regex command("`(loupe|env) [^`]+`");
  int rows_with_numbers = 0;
  for (std::string line; std::getline(lines, line);) {
    const bool table_row = line.rfind("| ", 0) == 0 && line.find("|---") == std::string::npos;
    const bool list_item = line.rfind("- ", 0) == 0;
    if (!table_row && !list_item) continue;
    // The header rows of tables hold no numbers.
    if (!std::regex_search(line, digit)) continue;
    ++rows_with_numbers;
    EXPECT_TRUE(std::regex_search(line, command)) << line;
  }
  EXPECT_GE(rows_with_numbers, 5);  // two sides, a gate, a bench point, a check point, a finding
}

TEST_F(EvidenceTest, ALargeRunFitsGithubsCommentLimitAndTheHtmlKeepsEveryRow) {
  std::vector<Finding> base_findings;
  std::vector<Finding> candidate_findings;
  for (int64_t batch = 1; batch <= 3000; ++batch) {
    base_findings.push_back(bench_finding("slower", batch, 1.5, 1.4, 1.6));
    candidate_findings.push_back(bench_finding("same", batch, 1.0, 0.99, 1.01));
    candidate_findings.push_back(check_finding("mismatch", Severity::kFail, batch, 0.5));
  }
  ledger::RunRecord base =
      run_record("r-big-base", "incident", {"g", GateVerdict::kFail, "{}", "r"}, base_findings);
  for (int index = 0; index < 400; ++index) {
    base.gates.push_back({"gate_" + std::to_string(index), GateVerdict::kPass, "{}", "rule"});
  }
  ledger_.insert_run(base);
  ledger_.insert_run(
      run_record("r-big-cand", "fixed", {"g", GateVerdict::kPass, "{}", "r"}, candidate_findings));
  const Bundle bundle = build_bundle(ledger_, "r-big-base", "r-big-cand", {});
  EXPECT_EQ(bundle.benches.size(), 3000u);
  const std::string markdown = render_markdown(bundle);
  EXPECT_LE(markdown.size(), kGithubCommentLimit);
  EXPECT_NE(markdown.find("more bench points in the HTML bundle"), std::string::npos);
  EXPECT_NE(markdown.find("more gates in the HTML bundle"), std::string::npos);
  const std::string html = render_html(bundle);
  EXPECT_NE(html.find("batch=2999"), std::string::npos);
  EXPECT_GT(html.size(), kGithubCommentLimit);
}

TEST_F(EvidenceTest, SaysWhetherTheLinkingHypothesisNeedsReview) {
  record_pair();
  const int64_t id = ledger_.add_hypothesis("3xTF32 merge removes the CP drift", std::nullopt, "t");
  ledger_.link_run(id, "r-base", ledger::LinkRole::kBaseline, "t");
  ledger_.link_run(id, "r-cand", ledger::LinkRole::kCandidate, "t");
  ledger_.add_decision(id, ledger::DecisionKind::kNeedsReview, "gates pass", "agent", "t",
                       {{"numerics", "precision changed"}});
  Bundle bundle = build_bundle(ledger_, "r-base", "r-cand", {});
  ASSERT_EQ(bundle.hypotheses.size(), 1u);
  EXPECT_TRUE(bundle.hypotheses[0].review_required);
  // Issue 25: the gate that flipped between the hypothesis's baseline and candidate is verified.
  EXPECT_EQ(bundle.gates[0].kind, EvidenceKind::kVerified);
  EXPECT_NE(render_markdown(bundle).find("| fail | pass | verified |"), std::string::npos);
  EXPECT_EQ(bundle.hypotheses[0].review, "numerics: precision changed");
  EXPECT_NE(render_markdown(bundle).find("review **required**"), std::string::npos);
  ledger_.approve_review(id, "alice", "t");
  bundle = build_bundle(ledger_, "r-base", "r-cand", {});
  EXPECT_FALSE(bundle.hypotheses[0].review_required);
}

// Issue 25: an inferred finding (a correlation in a trace) becomes verified when the controlled
// A/B of a hypothesis — its baseline and candidate runs — removes it; one the candidate still
// makes, or one only the candidate makes, stays inferred; without the hypothesis, nothing is
// verified.
TEST_F(EvidenceTest, AnInferenceTheHypothesisABRemovedIsVerified) {
  Finding contention;
  contention.id = "trace.locks.contention";
  contention.layer = Layer::kTrace;
  contention.severity = Severity::kWarn;
  contention.claim = "kv_transfer waits 120 ms on interpreter_lock held by dispatch";
  contention.where.thread = "kv_transfer";
  contention.next = "A/B: release interpreter_lock around the dispatch copy";
  Finding gap = contention;
  gap.id = "trace.gaps.idle";
  gap.claim = "the GPU stream idles 40 ms between decode steps";
  Finding fresh = contention;
  fresh.id = "trace.diff.span";
  fresh.claim = "prefill spans 3 % longer";
  const ledger::GateRecord gate = {"transfer_overlaps", GateVerdict::kPass, R"({"n": 1})", "r"};
  ledger_.insert_run(run_record("r-base", "incident", gate, {contention, gap}));
  ledger_.insert_run(run_record("r-cand", "fixed", gate, {gap, fresh}));
  auto kinds = [&] {
    std::vector<std::string> out;
    for (const auto& finding : build_bundle(ledger_, "r-base", "r-cand", {}).trace_findings) {
      out.push_back(finding.id + " " + std::string(evidence_kind_name(evidence_kind(finding))));
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  using Kinds = std::vector<std::string>;
  EXPECT_EQ(kinds(), (Kinds{"trace.diff.span inferred", "trace.gaps.idle inferred",
                            "trace.gaps.idle inferred", "trace.locks.contention inferred"}));
  const int64_t id =
      ledger_.add_hypothesis("the dispatch lock delays kv_transfer", std::nullopt, "t");
  ledger_.link_run(id, "r-base", ledger::LinkRole::kBaseline, "t");
  ledger_.link_run(id, "r-cand", ledger::LinkRole::kCandidate, "t");
  EXPECT_EQ(kinds(), (Kinds{"trace.diff.span inferred", "trace.gaps.idle inferred",
                            "trace.gaps.idle inferred", "trace.locks.contention verified"}));
  const Bundle bundle = build_bundle(ledger_, "r-base", "r-cand", {});
  for (const auto& finding : bundle.trace_findings) {
    if (finding.id != "trace.locks.contention") continue;
    EXPECT_EQ(finding.claim, contention.claim +
                                 " [verified: absent from candidate r-cand, the A/B "
                                 "of hypothesis H" +
                                 std::to_string(id) + " against baseline r-base]");
    EXPECT_EQ(verification_experiment(finding), "");
  }
  EXPECT_NE(render_markdown(bundle).find("verified `trace.locks.contention`"), std::string::npos)
      << render_markdown(bundle);
}

TEST_F(EvidenceTest, RepeatedRunsGiveTheMedianRatioOverRuns) {
  record_pair();
  std::vector<std::string> repeats;
  for (int index = 0; index < 4; ++index) {
    const std::string id = "r-cand-" + std::to_string(index);
    ledger_.insert_run(run_record(id, "fixed", {"cp_matches", GateVerdict::kPass, "{}", "r"},
                                  {bench_finding("same", 32, 1.0 + 0.01 * index, 0.9, 1.1)}));
    repeats.push_back(id);
  }
  Options options;
  options.candidate_repeats = repeats;
  const Bundle bundle = build_bundle(ledger_, "r-base", "r-cand", options);
  ASSERT_TRUE(bundle.benches[0].after);
  EXPECT_EQ(bundle.benches[0].after->runs, 5);
  // Ratios 1.0 (the recorded run), 1.0, 1.01, 1.02, 1.03: the median is 1.01.
  EXPECT_DOUBLE_EQ(bundle.benches[0].after->ratio, 1.01);
  EXPECT_EQ(bundle.candidate.run_ids.size(), 5u);
}

TEST_F(EvidenceTest, AnUnknownRunIsAUsageError) {
  record_pair();
  try {
    build_bundle(ledger_, "r-base", "r-nope", {});
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_NE(error.message().find("r-nope"), std::string::npos);
  }
}

}  // namespace
}  // namespace loupe::evidence
