// `loupe ledger trend`'s model on a scratch git history and runs written into a ledger: commit
// order (not recording order), intervals, the regression mark, hypothesis annotations, runs off
// the history, gate:NAME, and the SVG.
#include "report/trend.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/process.hpp"
#include "ledger/ledger.hpp"
#include "report/model.hpp"
#include "support/scratch_dir.hpp"

namespace loupe::report {
namespace {

std::string git(const std::filesystem::path& repo, const std::vector<std::string>& args) {
  ProcessSpec spec;
  spec.argv = {"git", "-C", repo.string()};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  // Fixed dates: the same empty commits get the same hashes on every run (the golden files
  // below name them).
  spec.extra_env = {{"GIT_AUTHOR_NAME", "t"},
                    {"GIT_AUTHOR_EMAIL", "t@t"},
                    {"GIT_COMMITTER_NAME", "t"},
                    {"GIT_COMMITTER_EMAIL", "t@t"},
                    {"GIT_AUTHOR_DATE", "2026-12-01T10:00:00Z"},
                    {"GIT_COMMITTER_DATE", "2026-12-01T10:00:00Z"}};
  const ProcessResult result = run_process(spec);
  EXPECT_TRUE(result.succeeded()) << result.stderr_text;
  std::string out = result.stdout_text;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

ledger::RunRecord run_at(const std::string& id, const std::string& commit,
                         const std::string& started_at, double ratio, double low, double high) {
  ledger::RunRecord run;
  run.id = id;
  run.started_at = started_at;
  run.ended_at = started_at;
  run.status = ledger::RunStatus::kCompleted;
  run.objective_path = "/o.toml";
  run.config_json = R"({"name": "incident"})";
  run.git.commit = commit;
  Finding finding;
  finding.id = "bench.decode.same";
  finding.layer = Layer::kBench;
  finding.where.probe = "decode";
  finding.where.params = {{"batch", Value(int64_t{32})}};
  finding.evidence.metrics = {{"ratio", ratio}, {"ci_low", low}, {"ci_high", high}};
  Finding other = finding;  // another point: --point leaves it out
  other.where.params = {{"batch", Value(int64_t{1})}};
  other.evidence.metrics = {{"ratio", 100.0}, {"ci_low", 99.0}, {"ci_high", 101.0}};
  run.findings = {other, finding};
  run.gates = {{"decode_fast", GateVerdict::kPass,
                R"({"estimate": )" + std::to_string(ratio) + R"(, "interval": null})", "r"}};
  return run;
}

class TrendTest : public ::testing::Test {
 protected:
  TrendTest()
      : scratch_("trend-unit"), ledger_(ledger::Ledger::open(scratch_.path() / "l.sqlite")) {
    repo_ = scratch_.path() / "repo";
    std::filesystem::create_directories(repo_);
    git(repo_, {"init", "-q", "-b", "main"});
    for (int index = 0; index < 4; ++index) {
      git(repo_, {"commit", "-q", "--allow-empty", "-m", "c" + std::to_string(index)});
      commits_.push_back(git(repo_, {"rev-parse", "HEAD"}));
    }
  }
  TrendRequest request(const std::string& metric) const {
    TrendRequest out;
    out.metric = metric;
    out.probe = "decode";
    out.points = {"batch=32"};
    out.repo = repo_;
    return out;
  }

  test_support::ScratchDir scratch_;
  ledger::Ledger ledger_;
  std::filesystem::path repo_;
  std::vector<std::string> commits_;
};

TEST_F(TrendTest, OrdersRunsByCommitAndMarksTheRegression) {
  // Recorded out of commit order: the run of c2 first.
  ledger_.insert_run(run_at("r-c2", commits_[2], "2026-12-01T10:00:00Z", 1.30, 1.25, 1.35));
  ledger_.insert_run(run_at("r-c0", commits_[0], "2026-12-01T11:00:00Z", 1.00, 0.98, 1.02));
  ledger_.insert_run(run_at("r-c1", commits_[1], "2026-12-01T12:00:00Z", 0.90, 0.88, 0.92));
  ledger_.insert_run(run_at("r-c3", commits_[3], "2026-12-01T13:00:00Z", 1.28, 1.20, 1.31));
  ledger_.insert_run(run_at("r-elsewhere", "ffffffffffffffffffffffffffffffffffffffff",
                            "2026-12-01T14:00:00Z", 5.0, 4.0, 6.0));
  const int64_t hypothesis = ledger_.add_hypothesis("merged decode kernel", std::nullopt, "t");
  ledger_.link_run(hypothesis, "r-c1", ledger::LinkRole::kCandidate, "t");
  ledger_.add_decision(hypothesis, ledger::DecisionKind::kRetain, "faster", "me", "t");

  const Trend trend = build_trend(ledger_, request("ratio"));
  ASSERT_EQ(trend.points.size(), 4u);
  EXPECT_EQ(trend.points[0].run_id, "r-c0");
  EXPECT_EQ(trend.points[1].run_id, "r-c1");
  EXPECT_EQ(trend.points[2].run_id, "r-c2");
  EXPECT_EQ(trend.points[3].run_id, "r-c3");
  EXPECT_DOUBLE_EQ(trend.points[2].value, 1.30);
  ASSERT_TRUE(trend.points[2].interval);
  EXPECT_DOUBLE_EQ(trend.points[2].interval->low, 1.25);
  EXPECT_EQ(trend.points[2].matches, 1u);
  // c1 improved on c0, c2 regressed (intervals apart), c3 overlaps c2: no regression.
  EXPECT_FALSE(trend.points[0].regression);
  EXPECT_FALSE(trend.points[1].regression);
  EXPECT_TRUE(trend.points[2].regression);
  EXPECT_FALSE(trend.points[3].regression);
  ASSERT_EQ(trend.points[1].annotations.size(), 1u);
  EXPECT_EQ(trend.points[1].annotations[0],
            "H" + std::to_string(hypothesis) + " retained: merged decode kernel");
  EXPECT_EQ(trend.runs_off_history, 1u);
  const std::string text = render_trend_text(trend);
  EXPECT_NE(text.find("REGRESSION"), std::string::npos);
  const std::string svg = render_trend_svg(trend);
  EXPECT_NE(svg.find("fill=\"#cf222e\""), std::string::npos);  // the regression in red
  EXPECT_EQ(svg.find("<script"), std::string::npos);
}

TEST_F(TrendTest, SinceAndHigherIsBetterAndGates) {
  ledger_.insert_run(run_at("r-c0", commits_[0], "2026-12-01T11:00:00Z", 1.00, 0.98, 1.02));
  ledger_.insert_run(run_at("r-c2", commits_[2], "2026-12-01T12:00:00Z", 0.80, 0.78, 0.82));
  ledger_.insert_run(run_at("r-c3", commits_[3], "2026-12-01T13:00:00Z", 0.70, 0.69, 0.71));
  TrendRequest since = request("ratio");
  since.since = commits_[1];
  since.higher_is_better = true;
  Trend trend = build_trend(ledger_, since);
  ASSERT_EQ(trend.points.size(), 2u);  // c0 is before --since
  EXPECT_EQ(trend.runs_off_history, 1u);
  EXPECT_TRUE(trend.points[1].regression);  // lower, and higher is better

  trend = build_trend(ledger_, request("gate:decode_fast"));
  ASSERT_EQ(trend.points.size(), 3u);
  EXPECT_FALSE(trend.points[1].interval);
  EXPECT_FALSE(trend.points[1].regression);  // 0.8 after 1.0: lower is better
  EXPECT_EQ(trend.points[1].where, "gate decode_fast");
}

// The rendering of a golden file under tests/golden/report; LOUPE_UPDATE_GOLDEN=1 rewrites it.
void expect_golden(const std::string& name, const std::string& actual) {
  const std::filesystem::path file =
      std::filesystem::path(LOUPE_SOURCE_DIR) / "tests" / "golden" / "report" / name;
  if (std::getenv("LOUPE_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << actual;
  }
  std::ifstream in(file, std::ios::binary);
  ASSERT_TRUE(in) << file << " is missing: run with LOUPE_UPDATE_GOLDEN=1";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(actual, expected.str()) << name;
}

// Issue 25: `loupe report RUN` shows each gate's trajectory across the objective's runs — in
// commit order, the newest max_points, regressions marked, the reported run pointed out, the
// hypothesis that produced a step with its decision, a gate
// with one run and a gate past max_gates left out and said, runs of another objective or another
// configuration ignored.
TEST_F(TrendTest, ReportSectionGolden) {
  ledger_.insert_run(run_at("r-c0", commits_[0], "2026-12-01T11:00:00Z", 1.00, 0.98, 1.02));
  ledger_.insert_run(run_at("r-c1", commits_[1], "2026-12-01T12:00:00Z", 0.90, 0.88, 0.92));
  ledger_.insert_run(run_at("r-c2", commits_[2], "2026-12-01T13:00:00Z", 1.30, 1.25, 1.35));
  ledger::RunRecord current = run_at("r-c3", commits_[3], "2026-12-01T14:00:00Z", 1.28, 1.2, 1.31);
  // A gate only this run recorded: one run is no trajectory.
  current.gates.push_back(
      {"decode_wall", GateVerdict::kFail, R"({"estimate": 0.5, "interval": [0.45, 0.55]})", "r"});
  ledger_.insert_run(current);
  ledger::RunRecord other = run_at("r-other", commits_[3], "2026-12-01T15:00:00Z", 9.0, 8.0, 10.0);
  other.objective_path = "/another.toml";
  ledger_.insert_run(other);
  ledger::RunRecord fixed = run_at("r-fixed", commits_[3], "2026-12-01T16:00:00Z", 7.0, 6.0, 8.0);
  fixed.config_json = R"({"name": "fixed"})";
  ledger_.insert_run(fixed);

  // The step a hypothesis produced is annotated with it and its decision.
  const int64_t hypothesis = ledger_.add_hypothesis("tiled decode", std::nullopt, "t");
  ledger_.link_run(hypothesis, "r-c2", ledger::LinkRole::kCandidate, "t");
  ledger_.add_decision(hypothesis, ledger::DecisionKind::kReject, "slower", "me", "t");

  TrendSectionRequest request;
  request.gates = {{"decode_fast", false}, {"decode_wall", false}, {"third", false}};
  request.objective_path = "/o.toml";
  request.config_json = current.config_json;
  request.repo = repo_;
  request.max_points = 3;
  request.max_gates = 1;
  Model model;
  model.header.run_id = "r-c3";
  model.header.title = "decode";
  model.header.objective_path = "/o.toml";
  model.header.configuration = "(ad hoc)";
  model.header.status = "completed";
  model.header.verdict = Verdict::kFail;
  model.gates = {{"decode_fast", Layer::kBench, GateVerdict::kPass, "1.28", "r"}};
  model.trends = build_trend_section(ledger_, request);
  ASSERT_EQ(model.trends.gates.size(), 1u);  // decode_wall and third: past max_gates
  EXPECT_EQ(model.trends.gates_omitted, 2u);
  EXPECT_EQ(model.trends.gates[0].points_omitted, 1u);
  // c2: 1.3 after 0.9 (no interval recorded: worse by more than 5 %); c3 improves on c2.
  EXPECT_EQ(model.trends.gates[0].regressions, 1u);
  expect_golden("trend_section.txt", render_terminal(model));
  expect_golden("trend_section.md", render_markdown(model));
  const std::string html = render_html(model);
  EXPECT_NE(html.find("<h2>Trends</h2>"), std::string::npos);
  EXPECT_NE(html.find("2 more gate(s) not drawn"), std::string::npos);
  // A gate only one run recorded has no trajectory: left out, not counted as cut.
  request.max_gates = 6;
  const TrendSection all = build_trend_section(ledger_, request);
  ASSERT_EQ(all.gates.size(), 1u);
  EXPECT_EQ(all.gates_omitted, 0u);

  // Outside a repository there is no commit order: a note, no section.
  request.repo = scratch_.path();
  const TrendSection none = build_trend_section(ledger_, request);
  EXPECT_TRUE(none.gates.empty());
  EXPECT_EQ(none.note.rfind("no trends: listing the history of HEAD: git", 0), 0u) << none.note;
}

TEST_F(TrendTest, BadRequestsAreUsageErrors) {
  TrendRequest bad = request("ratio");
  bad.points = {"batch"};
  EXPECT_THROW(build_trend(ledger_, bad), Error);
  bad = request("ratio");
  bad.since = "no-such-revision";
  EXPECT_THROW(build_trend(ledger_, bad), Error);
  EXPECT_THROW(build_trend(ledger_, request("")), Error);
}

}  // namespace
}  // namespace loupe::report
