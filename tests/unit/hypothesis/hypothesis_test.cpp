#include "hypothesis/hypothesis.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>

#include "core/json.hpp"
#include "loupe/error.hpp"

namespace loupe::hypothesis {
namespace {

using gate::ReviewTrigger;
using ledger::DecisionKind;
using ledger::LinkRole;

// The review boundary of the tests: every kind of trigger has a category.
const char* const kObjective = R"(name = "review-test"
[subject]
command = ["kda", "probe"]
[[check]]
probe = "cp_vs_nocp"
params = { precision = "ieee" }
[[bench]]
probe = "decode"
variants = ["tiled", "merged"]
[[scenario]]
probe = "serve"
params = { dispatch_holds_lock = false }
[[deployment_key]]
key = "precision"
implies = [{ probe = "cp_vs_nocp", param = "precision" }]
[[deployment_key]]
key = "dispatch_lock"
values = ["held", "released"]
implies = [{ probe = "serve", param = "dispatch_holds_lock", map = { held = true, released = false } }]
[[deployment_key]]
key = "decode_kernel"
values = ["tiled", "merged"]
implies = [{ probe = "decode" }]
[review.numerics]
paths = ["kda/math/**", "kda/kernels/**"]
params = ["precision"]
[review.concurrency]
paths = ["kda/serve/**"]
params = ["dispatch_lock"]
[review.production-risk]
params = ["decode_kernel"]
)";

// A scratch git repository with the objective committed, a ledger beside it, and helpers that
// commit changes and record runs at the current commit.
class HypothesisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("loupe-hypothesis-" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
             std::to_string(::getpid()));
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(repo());
    write("loupe.toml", kObjective);
    write("README.md", "scratch\n");
    ASSERT_EQ(git("init -q"), 0);
    commit("first");
    ledger_ = std::make_unique<ledger::Ledger>(ledger::Ledger::open(root_ / "ledger.sqlite"));
  }
  void TearDown() override {
    ledger_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }

  std::filesystem::path repo() const { return root_ / "repo"; }
  int git(const std::string& args) const {
    return std::system(("git -C '" + repo().string() +
                        "' -c user.name=t -c user.email=t@example.com " + args + " >/dev/null")
                           .c_str());
  }
  void write(const std::string& path, const std::string& text) const {
    std::filesystem::create_directories((repo() / path).parent_path());
    std::ofstream(repo() / path) << text;
  }
  std::string commit(const std::string& message) {
    EXPECT_EQ(git("add -A"), 0);
    EXPECT_EQ(git("commit -q -m " + message), 0);
    return head();
  }
  std::string head() {
    FILE* pipe = ::popen(("git -C '" + repo().string() + "' rev-parse HEAD").c_str(), "r");
    char buffer[64] = {};
    EXPECT_NE(std::fgets(buffer, sizeof buffer, pipe), nullptr);
    ::pclose(pipe);
    std::string text = buffer;
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  }

  // Records a completed run at HEAD with the given gate verdicts and deployment settings.
  ledger::RunRecord record(const std::string& id, std::vector<GateVerdict> verdicts,
                           const std::string& settings = R"({"precision":"tf32x3"})",
                           std::vector<std::string> dirty_paths = {},
                           std::optional<ledger::ImportOrigin> imported = std::nullopt) {
    ledger::RunRecord run;
    run.id = id;
    run.started_at = "2026-11-30T06:00:00Z";
    run.ended_at = "2026-11-30T06:01:00Z";
    run.status = ledger::RunStatus::kCompleted;
    run.objective_path = "loupe.toml";  // relative: resolved against the repository
    run.objective_hash = "h";
    run.git.commit = head();
    run.git.dirty = !dirty_paths.empty();
    run.git.diff_hash = dirty_paths.empty() ? "" : "d-" + id;
    run.git.dirty_paths = std::move(dirty_paths);
    run.config_json = R"({"name":"","settings":)" + settings + "}";
    const char* names[] = {"cp_matches_single_device", "decode_kernel_not_slower",
                           "transfer_overhead_within_5pct"};
    for (size_t index = 0; index < verdicts.size(); ++index) {
      run.gates.push_back({names[index], verdicts[index], "{}", "rule"});
    }
    run.imported = std::move(imported);
    ledger_->insert_run(run);
    return run;
  }

  int64_t hypothesis_with(const std::string& baseline, const std::string& candidate) {
    const int64_t id =
        add(*ledger_, "3xTF32 removes the drift", std::string("tf32x3-affine-merge"));
    if (!baseline.empty()) link(*ledger_, id, baseline, LinkRole::kBaseline);
    if (!candidate.empty()) link(*ledger_, id, candidate, LinkRole::kCandidate);
    return id;
  }

  std::string decide_error(int64_t id, DecisionKind wanted = DecisionKind::kRetain) {
    try {
      decide(*ledger_, id, wanted, "the drift is gone", "agent", repo());
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUsage);
      return error.message();
    }
    return "no error";
  }

  std::filesystem::path root_;
  std::unique_ptr<ledger::Ledger> ledger_;
};

const std::vector<GateVerdict> kAllPass = {GateVerdict::kPass, GateVerdict::kPass};

TEST_F(HypothesisTest, RetainIsRefusedWithoutACandidateRun) {
  record("base", kAllPass);
  const int64_t id = hypothesis_with("base", "");
  EXPECT_EQ(decide_error(id), "hypothesis 1: retain refused: no candidate run is linked");
  EXPECT_EQ(ledger_->find_hypothesis(id)->decisions.size(), 0u);
}

TEST_F(HypothesisTest, RetainIsRefusedUnlessACandidatePassedEveryGate) {
  record("base", kAllPass);
  record("cand1", {GateVerdict::kPass, GateVerdict::kFail});
  record("cand2", {GateVerdict::kInconclusive, GateVerdict::kNotRun});
  record("cand3", {});
  const int64_t id = hypothesis_with("base", "cand1");
  link(*ledger_, id, "cand2", LinkRole::kCandidate);
  link(*ledger_, id, "cand3", LinkRole::kCandidate);
  EXPECT_EQ(decide_error(id),
            "hypothesis 1: retain refused: no linked candidate run completed with every gate "
            "passing: run cand1: gate decode_kernel_not_slower fail; run cand2: gate "
            "cp_matches_single_device inconclusive, gate decode_kernel_not_slower not-run; run "
            "cand3: no gates");
  // Revise and reject need no passing run.
  const DecideOutcome outcome =
      decide(*ledger_, id, DecisionKind::kReject, "slower", "agent", repo());
  EXPECT_EQ(outcome.recorded, DecisionKind::kReject);
  EXPECT_EQ(ledger_->find_hypothesis(id)->status, ledger::HypothesisStatus::kRejected);
}

TEST_F(HypothesisTest, AnInterruptedCandidateDoesNotCount) {
  record("base", kAllPass);
  ledger::RunStart start;
  start.id = "cand";
  start.started_at = "t";
  start.objective_path = "loupe.toml";
  ledger_->begin_run(start);
  ledger_->finish_run("cand", ledger::RunStatus::kInterrupted, "t2",
                      {{"g", GateVerdict::kPass, "{}", "r"}}, {}, {});
  const int64_t id = hypothesis_with("base", "cand");
  EXPECT_EQ(decide_error(id),
            "hypothesis 1: retain refused: no linked candidate run completed with every gate "
            "passing: run cand: status interrupted");
}

TEST_F(HypothesisTest, RetainIsRefusedWithoutABaselineRun) {
  record("cand", kAllPass);
  const int64_t id = hypothesis_with("", "cand");
  EXPECT_EQ(decide_error(id),
            "hypothesis 1: retain refused: no baseline run is linked, so what changed cannot be "
            "checked against the review boundary");
}

// Issue 25: a correlation in a trace is not a cause. Both runs pass every gate and only a trace
// finding went away: retain rests on inferred evidence alone.
TEST_F(HypothesisTest, RetainIsRefusedOnInferredEvidenceAlone) {
  Finding lock;
  lock.id = "trace.diff.locks";
  lock.layer = Layer::kTrace;
  lock.severity = Severity::kWarn;
  lock.claim = "kv_transfer's wait on interpreter_lock went from 0 ns to 120 ms";
  lock.next = "run the scenario with the lock released around the wait, against this run";
  ledger::RunRecord base = record("base-unused", kAllPass);
  base.id = "base";
  base.findings = {lock};
  ledger_->insert_run(base);
  record("cand", kAllPass);
  const int64_t id = hypothesis_with("base", "cand");
  try {
    decide(*ledger_, id, DecisionKind::kRetain, "the lock is the cause", "agent", repo());
    FAIL() << "retain was recorded";
  } catch (const Error& error) {
    EXPECT_EQ(error.message(),
              "hypothesis 1: retain refused: between baseline base and candidate cand no gate and "
              "no measured finding changed; what changed is 1 inferred finding(s) (first: "
              "trace.diff.locks), and correlations in traces or counters cannot establish a "
              "cause");
    EXPECT_EQ(error.hint(),
              "verify it first: run the scenario with the lock released around the wait, against "
              "this run; a gate that measures it makes the evidence measured");
  }
  EXPECT_EQ(ledger_->find_hypothesis(id)->decisions.size(), 0u);
  // Revise and reject claim nothing: they stay open.
  EXPECT_EQ(decide_error(id, DecisionKind::kRevise), "no error");
}

// The same trace finding gone, but a gate flipped too: measured evidence, retain is recorded.
TEST_F(HypothesisTest, RetainWithAMeasuredChangeBesideTheInferredOneIsRecorded) {
  Finding lock;
  lock.id = "trace.diff.locks";
  lock.layer = Layer::kTrace;
  lock.severity = Severity::kWarn;
  ledger::RunRecord base = record("base-unused", {GateVerdict::kFail, GateVerdict::kPass});
  base.id = "base";
  base.findings = {lock};
  ledger_->insert_run(base);
  record("cand", kAllPass);
  const int64_t id = hypothesis_with("base", "cand");
  EXPECT_EQ(decide(*ledger_, id, DecisionKind::kRetain, "gate passes", "agent", repo()).recorded,
            DecisionKind::kRetain);
}

TEST_F(HypothesisTest, RetainIsRecordedWhenNothingCrossesTheBoundary) {
  record("base", kAllPass);
  write("README.md", "changed docs only\n");
  commit("docs");
  record("cand", kAllPass);
  const int64_t id = hypothesis_with("base", "cand");
  const DecideOutcome outcome =
      decide(*ledger_, id, DecisionKind::kRetain, "the drift is gone", "agent", repo());
  EXPECT_EQ(outcome.recorded, DecisionKind::kRetain);
  EXPECT_EQ(outcome.triggers, std::vector<ReviewTrigger>{});
  const auto hypothesis = *ledger_->find_hypothesis(id);
  EXPECT_EQ(hypothesis.status, ledger::HypothesisStatus::kRetained);
  EXPECT_EQ(hypothesis.decisions.back().who, "agent");
}

TEST_F(HypothesisTest, Issue17ARetainThatRestsOnAnImportedCandidateNeedsReview) {
  // An edited export, imported, became the passing candidate of a retain decision.
  record("base", kAllPass);
  record("cand", kAllPass, R"({"precision":"tf32x3"})", {},
         ledger::ImportOrigin{"/tmp/edited.json", std::string(64, 'e'), "2026-12-01T00:00:00Z"});
  const int64_t id = hypothesis_with("base", "cand");
  const DecideOutcome outcome =
      decide(*ledger_, id, DecisionKind::kRetain, "the drift is gone", "agent", repo());
  EXPECT_EQ(outcome.recorded, DecisionKind::kNeedsReview);
  EXPECT_EQ(
      outcome.triggers,
      (std::vector<ReviewTrigger>{{"imported",
                                   "candidate run cand was imported from /tmp/edited.json (export "
                                   "sha256 eeeeeeeeeeee): its evidence was not produced by this "
                                   "ledger's loupe"}}));
  EXPECT_EQ(ledger_->find_hypothesis(id)->status, ledger::HypothesisStatus::kNeedsReview);
}

TEST_F(HypothesisTest, Issue17AnImportedCandidateWhoseObjectiveIsNotHereStillNeedsReview) {
  record("base", kAllPass);
  ledger::RunRecord run = record("cand-local", kAllPass);
  run.id = "cand";
  run.objective_path = "/nonexistent/objective.toml";
  run.imported =
      ledger::ImportOrigin{"/tmp/other.json", std::string(64, 'f'), "2026-12-01T00:00:00Z"};
  ledger_->insert_run(run);
  const int64_t id = hypothesis_with("base", "cand");
  const DecideOutcome outcome =
      decide(*ledger_, id, DecisionKind::kRetain, "the drift is gone", "agent", repo());
  EXPECT_EQ(outcome.recorded, DecisionKind::kNeedsReview);
  ASSERT_EQ(outcome.triggers.size(), 2u);
  EXPECT_EQ(outcome.triggers[1].category, "imported");
  EXPECT_NE(outcome.triggers[1].reason.find("/nonexistent/objective.toml"), std::string::npos)
      << outcome.triggers[1].reason;
}

TEST_F(HypothesisTest, APathInTheCommitsDiffRecordsNeedsReviewNamingTheTrigger) {
  record("base", kAllPass);
  write("kda/kernels/cuda/tf32x3_affine_merge.cu", "// split operands\n");
  write("docs/notes.md", "why\n");
  commit("kernel");
  record("cand", kAllPass);
  const int64_t id = hypothesis_with("base", "cand");
  const DecideOutcome outcome =
      decide(*ledger_, id, DecisionKind::kRetain, "the drift is gone", "agent", repo());
  EXPECT_EQ(outcome.recorded, DecisionKind::kNeedsReview);
  EXPECT_EQ(
      outcome.triggers,
      (std::vector<ReviewTrigger>{
          {"numerics", "path kda/kernels/cuda/tf32x3_affine_merge.cu matches kda/kernels/**"}}));
  const auto hypothesis = *ledger_->find_hypothesis(id);
  EXPECT_EQ(hypothesis.status, ledger::HypothesisStatus::kNeedsReview);
  EXPECT_EQ(
      hypothesis.decisions.back().triggers,
      (std::vector<ledger::ReviewNote>{
          {"numerics", "path kda/kernels/cuda/tf32x3_affine_merge.cu matches kda/kernels/**"}}));
}

TEST_F(HypothesisTest, DirtyPathsOfEitherRunCountAsChanges) {
  record("base", kAllPass, R"({"precision":"tf32x3"})", {"kda/serve/server.cpp"});
  record("cand", kAllPass, R"({"precision":"tf32x3"})", {"README.md"});
  const int64_t id = hypothesis_with("base", "cand");
  const DecideOutcome outcome =
      decide(*ledger_, id, DecisionKind::kRetain, "lock released", "agent", repo());
  EXPECT_EQ(outcome.recorded, DecisionKind::kNeedsReview);
  EXPECT_EQ(outcome.triggers,
            (std::vector<ReviewTrigger>{
                {"concurrency", "path kda/serve/server.cpp matches kda/serve/**"}}));
}

TEST_F(HypothesisTest, TwoRunsOfTheSameDirtyTreeChangeNoPath) {
  ledger::RunRecord base =
      record("base", kAllPass, R"({"precision":"tf32x3"})", {"kda/serve/server.cpp"});
  ledger::RunRecord cand = base;
  cand.id = "cand";
  ledger_->insert_run(cand);
  const ChangeSet changes = changes_between(base, cand, repo());
  EXPECT_EQ(changes.paths, std::vector<std::string>{});
  EXPECT_FALSE(changes.paths_unknown.has_value());
  // A different diff of the same paths is a change.
  cand.git.diff_hash = "other";
  EXPECT_EQ(changes_between(base, cand, repo()).paths,
            std::vector<std::string>{"kda/serve/server.cpp"});
}

TEST_F(HypothesisTest, DeploymentSettingsThatDifferTriggerTheirCategories) {
  record("base", kAllPass,
         R"({"precision":"tf32_rz","dispatch_lock":"held","decode_kernel":"tiled","shards":8})");
  record(
      "cand", kAllPass,
      R"({"precision":"tf32x3","dispatch_lock":"released","decode_kernel":"merged","shards":8})");
  const int64_t id = hypothesis_with("base", "cand");
  const DecideOutcome outcome =
      decide(*ledger_, id, DecisionKind::kRetain, "all three fixed", "agent", repo());
  EXPECT_EQ(outcome.recorded, DecisionKind::kNeedsReview);
  EXPECT_EQ(outcome.triggers,
            (std::vector<ReviewTrigger>{{"numerics", "parameter precision changed"},
                                        {"concurrency", "parameter dispatch_lock changed"},
                                        {"production-risk", "parameter decode_kernel changed"}}));
}

TEST_F(HypothesisTest, ASettingPresentInOnlyOneRunIsAChange) {
  const auto base = record("base", kAllPass, R"({})");
  const auto cand = record("cand", kAllPass, R"({"precision":"tf32x3","shards":8})");
  EXPECT_EQ(changes_between(base, cand, repo()).params,
            (std::vector<std::string>{"precision", "shards"}));
}

TEST_F(HypothesisTest, UnknownChangedPathsTriggerEveryCategoryWithPaths) {
  auto base = record("base", kAllPass);
  base.git.commit = "0000000000000000000000000000000000000000";
  auto cand = record("cand", kAllPass);
  const ChangeSet changes = changes_between(base, cand, repo());
  ASSERT_TRUE(changes.paths_unknown.has_value());
  EXPECT_EQ(changes.paths_unknown->rfind("`git diff 000000000000 ", 0), 0u)
      << *changes.paths_unknown;
  const gate::Objective objective = gate::parse_objective_file(repo() / "loupe.toml");
  const auto triggers = triggers_for(objective, changes);
  ASSERT_EQ(triggers.size(), 2u);
  EXPECT_EQ(triggers[0].category, "numerics");
  EXPECT_EQ(triggers[1].category, "concurrency");
  EXPECT_EQ(triggers[0].reason, "changed paths unknown: " + *changes.paths_unknown);

  base.git.commit = "";
  EXPECT_EQ(changes_between(base, cand, repo()).paths_unknown, "run base recorded no git commit");
  // A dirty run recorded before schema 3 has no paths.
  auto old = cand;
  old.id = "old";
  old.git.dirty = true;
  old.git.diff_hash = "x";
  EXPECT_EQ(changes_between(old, cand, repo()).paths_unknown,
            "run old had uncommitted changes but recorded no paths (recorded before ledger "
            "schema 3)");
}

TEST_F(HypothesisTest, ApprovalTurnsNeedsReviewIntoRetainOnce) {
  record("base", kAllPass, R"({"precision":"tf32_rz"})");
  record("cand", kAllPass, R"({"precision":"tf32x3"})");
  const int64_t id = hypothesis_with("base", "cand");
  EXPECT_EQ(decide(*ledger_, id, DecisionKind::kRetain, "drift gone", "agent", repo()).recorded,
            DecisionKind::kNeedsReview);
  approve(*ledger_, id, "alice");
  const auto hypothesis = *ledger_->find_hypothesis(id);
  EXPECT_EQ(hypothesis.status, ledger::HypothesisStatus::kRetained);
  ASSERT_EQ(hypothesis.decisions.size(), 2u);
  EXPECT_EQ(hypothesis.decisions[0].approval->by, "alice");
  EXPECT_EQ(hypothesis.decisions[1].decision, DecisionKind::kRetain);
  try {
    approve(*ledger_, id, "alice");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
  }
  try {
    approve(*ledger_, id, "");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.message(), "--by: expected the name of the person approving, found nothing");
  }
}

TEST_F(HypothesisTest, NeedsReviewCannotBeAskedForAndUnknownHypothesesAreUsageErrors) {
  record("base", kAllPass);
  const int64_t id = hypothesis_with("base", "");
  EXPECT_EQ(decide_error(id, DecisionKind::kNeedsReview),
            "hypothesis 1: decision 'needs-review' is recorded by loupe, not asked for");
  EXPECT_EQ(decide_error(42, DecisionKind::kRevise),
            "ledger " + (root_ / "ledger.sqlite").string() + ": no hypothesis 42");
  try {
    link(*ledger_, id, "no-such-run", LinkRole::kCandidate);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
  }
}

TEST_F(HypothesisTest, JsonFormNamesLinksDecisionsTriggersAndApproval) {
  ledger::Hypothesis hypothesis;
  hypothesis.id = 3;
  hypothesis.text = "t";
  hypothesis.status = ledger::HypothesisStatus::kRetained;
  hypothesis.created_at = "c";
  hypothesis.links = {{"r1", LinkRole::kCandidate, "l"}};
  ledger::Decision pending;
  pending.id = 7;
  pending.decision = DecisionKind::kNeedsReview;
  pending.why = "w";
  pending.who = "agent";
  pending.decided_at = "d";
  pending.triggers = {{"numerics", "parameter precision changed"}};
  pending.approval = ledger::Approval{"alice", "a"};
  hypothesis.decisions = {pending};
  EXPECT_EQ(hypothesis_to_json(hypothesis).dump(),
            R"({"id":3,"text":"t","skeleton":null,"status":"retained","created_at":"c",)"
            R"("links":[{"run":"r1","role":"candidate","linked_at":"l"}],)"
            R"("decisions":[{"id":7,"decision":"needs-review","why":"w","who":"agent",)"
            R"("decided_at":"d","triggers":[{"category":"numerics","reason":)"
            R"("parameter precision changed"}],"approved_by":"alice","approved_at":"a"}]})");
}

}  // namespace
}  // namespace loupe::hypothesis
