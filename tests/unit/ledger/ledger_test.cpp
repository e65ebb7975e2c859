#include "ledger/ledger.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fstream>
#include <thread>

#include "test_support.hpp"

namespace loupe::ledger {
namespace {

using testing::make_run;
using testing::ScratchDir;

RunStart start_of(const RunRecord& run) {
  return {run.id,  run.started_at,       run.objective_path, run.objective_hash,
          run.git, run.environment_json, run.config_json};
}

// Runs one SQL statement on the raw file, outside the Ledger API (to inspect or damage it).
int64_t query_integer(const std::filesystem::path& file, const char* sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* statement = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &statement, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  int64_t value = -1;
  if (sqlite3_step(statement) == SQLITE_ROW) value = sqlite3_column_int64(statement, 0);
  sqlite3_finalize(statement);
  sqlite3_close(db);
  return value;
}

TEST(RecordedSettings, InRecordedOrderEmptyWithoutAndNamedWhenMalformed) {
  RunRecord run;
  run.id = "r1";
  run.config_json = R"({"name":"fixed","settings":{"tf32":"3x","cache":"bf16","lock":false}})";
  const auto settings = recorded_settings(run);
  ASSERT_EQ(settings.size(), 3u);
  EXPECT_EQ(settings[0].first, "tf32");
  EXPECT_EQ(settings[1].first, "cache");
  EXPECT_EQ(settings[2].second, Json(false));
  run.config_json = R"({"name":null})";
  EXPECT_TRUE(recorded_settings(run).empty());
  run.config_json = R"({"settings":[1]})";
  try {
    recorded_settings(run);
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& error) {
    EXPECT_EQ(std::string(error.what()),
              "run r1: config.settings: expected an object, found array");
  }
  run.config_json = "{";
  EXPECT_THROW(recorded_settings(run), Error);
}

TEST(LedgerTest, OpenCreatesTheFileItsFolderAndTheLatestSchemaInWalMode) {
  ScratchDir dir("open");
  const auto file = dir.path() / "nested" / "ledger.sqlite";
  Ledger ledger = Ledger::open(file);
  EXPECT_TRUE(std::filesystem::exists(file));
  EXPECT_EQ(ledger.schema_version(), kSchemaVersion);
  EXPECT_EQ(ledger.file(), file);
  EXPECT_EQ(ledger.count_runs(), 0);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* statement = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &statement, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(statement), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(statement, 0)), "wal");
  sqlite3_finalize(statement);
  sqlite3_close(db);
}

TEST(LedgerTest, ARunIsInProgressUntilFinishedThenHoldsEverythingInOrder) {
  ScratchDir dir("two-step");
  Ledger ledger = Ledger::open(dir.path() / "ledger.sqlite");
  const RunRecord expected = make_run("r1", "2026-11-30T04:00:00Z");
  ledger.begin_run(start_of(expected));

  RunRecord in_progress = ledger.get_run("r1");
  EXPECT_EQ(in_progress.status, RunStatus::kInProgress);
  EXPECT_FALSE(in_progress.ended_at.has_value());
  EXPECT_TRUE(in_progress.gates.empty());
  EXPECT_TRUE(in_progress.findings.empty());
  const auto listed = ledger.list_runs(10);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].status, RunStatus::kInProgress);

  ledger.finish_run("r1", RunStatus::kCompleted, *expected.ended_at, expected.gates,
                    expected.findings, expected.observations);
  EXPECT_EQ(ledger.get_run("r1"), expected);
}

TEST(LedgerTest, InsertRunRoundTripsAndSummariesCountGatesAndFindings) {
  ScratchDir dir("insert");
  Ledger ledger = Ledger::open(dir.path() / "ledger.sqlite");
  RunRecord older = make_run("r-old", "2026-11-30T03:00:00Z");
  RunRecord newer = make_run("r-new", "2026-11-30T04:00:00Z");
  newer.gates.push_back({"transfer", GateVerdict::kNotRun, "{}", "the cascade stopped at checks"});
  ledger.insert_run(older);
  ledger.insert_run(newer);
  EXPECT_EQ(ledger.get_run("r-old"), older);
  EXPECT_EQ(ledger.get_run("r-new"), newer);
  EXPECT_EQ(ledger.count_runs(), 2);
  const auto runs = ledger.list_runs(10);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].id, "r-new");
  EXPECT_EQ(runs[0].gates_passed, 1);
  EXPECT_EQ(runs[0].gates_failed, 1);
  EXPECT_EQ(runs[0].gates_inconclusive, 0);
  EXPECT_EQ(runs[0].gates_not_run, 1);
  EXPECT_EQ(runs[0].findings, 1);
  EXPECT_EQ(runs[1].id, "r-old");
  const auto page = ledger.list_runs(1, 1);
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(page[0].id, "r-old");
}

TEST(LedgerTest, ARecordedIdCannotBeRecordedAgain) {
  ScratchDir dir("duplicate");
  const auto file = dir.path() / "ledger.sqlite";
  Ledger ledger = Ledger::open(file);
  ledger.insert_run(make_run("r1", "2026-11-30T04:00:00Z"));
  try {
    ledger.insert_run(make_run("r1", "2026-11-30T04:00:00Z"));
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(), "ledger " + file.string() + ": run r1 is already recorded");
  }
  // The failed transaction left nothing behind.
  EXPECT_EQ(ledger.get_run("r1").gates.size(), 2u);
}

TEST(LedgerTest, UnknownRunIsAUsageErrorNamingTheFile) {
  ScratchDir dir("unknown");
  const auto file = dir.path() / "ledger.sqlite";
  Ledger ledger = Ledger::open(file);
  EXPECT_FALSE(ledger.find_run("nope").has_value());
  try {
    ledger.get_run("nope");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(), "ledger " + file.string() + ": no run nope");
    EXPECT_EQ(error.hint(), "`loupe ledger list` shows the recorded runs");
  }
}

TEST(LedgerTest, AFileThatIsNotADatabaseIsAnInputErrorNamingTheFileAndTheStep) {
  ScratchDir dir("garbage");
  const auto file = dir.path() / "ledger.sqlite";
  std::ofstream(file) << std::string(4096, 'x');
  try {
    Ledger::open(file);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_EQ(error.message(),
              "ledger " + file.string() + ": reading the application id: file is not a database");
  }
}

TEST(LedgerTest, ALedgerFromANewerLoupeIsRefused) {
  ScratchDir dir("newer");
  const auto file = dir.path() / "ledger.sqlite";
  { Ledger::open(file); }
  query_integer(file, "PRAGMA user_version = 99");
  try {
    Ledger::open(file);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_EQ(error.message(), "ledger " + file.string() +
                                   ": schema version 99 was written by a newer loupe (this one "
                                   "reads up to 4)");
  }
}

TEST(LedgerTest, MigrationFromVersionOneKeepsRunsAndAddsHypotheses) {
  ScratchDir dir("migrate");
  const auto file = dir.path() / "ledger.sqlite";
  const RunRecord run = make_run("r1", "2026-11-30T04:00:00Z");
  {
    Ledger v1 = Ledger::open_at_version(file, 1);
    EXPECT_EQ(v1.schema_version(), 1);
    v1.insert_run(run);
  }
  EXPECT_EQ(query_integer(file, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'hypotheses'"), 0);
  Ledger ledger = Ledger::open(file);
  EXPECT_EQ(ledger.schema_version(), kSchemaVersion);
  RunRecord expected = run;
  expected.git.dirty_paths.clear();  // schema 1 had nowhere to keep them
  EXPECT_EQ(ledger.get_run("r1"), expected);
  const int64_t hypothesis = ledger.add_hypothesis("3xTF32 removes the drift", "tf32x3", "t0");
  ledger.link_run(hypothesis, "r1", LinkRole::kBaseline, "t1");
  EXPECT_EQ(ledger.find_hypothesis(hypothesis)->links.size(), 1u);
  // Opening again does not re-run a step.
  Ledger again = Ledger::open(file);
  EXPECT_EQ(again.schema_version(), kSchemaVersion);
  EXPECT_EQ(again.list_hypotheses().size(), 1u);
}

TEST(LedgerTest, HypothesesLinksAndDecisionsRoundTrip) {
  ScratchDir dir("hypotheses");
  const auto file = dir.path() / "ledger.sqlite";
  Ledger ledger = Ledger::open(file);
  ledger.insert_run(make_run("base", "2026-11-30T04:00:00Z"));
  ledger.insert_run(make_run("cand", "2026-11-30T04:10:00Z"));
  const int64_t first = ledger.add_hypothesis("merged decode is faster", std::nullopt, "t0");
  const int64_t second = ledger.add_hypothesis("release the lock", "release_lock_on_wait", "t1");
  EXPECT_EQ(second, first + 1);
  ledger.link_run(first, "base", LinkRole::kBaseline, "t2");
  ledger.link_run(first, "cand", LinkRole::kCandidate, "t3");
  ledger.link_run(first, "cand", LinkRole::kCandidate, "t4");  // again: no-op
  ledger.add_decision(first, DecisionKind::kNeedsReview, "touches kda/kernels (numerics)", "agent",
                      "t5");
  ledger.add_decision(first, DecisionKind::kRetain, "approved", "alice", "t6");

  Hypothesis expected;
  expected.id = first;
  expected.text = "merged decode is faster";
  expected.status = HypothesisStatus::kRetained;
  expected.created_at = "t0";
  expected.links = {{"base", LinkRole::kBaseline, "t2"}, {"cand", LinkRole::kCandidate, "t3"}};
  const auto found = ledger.find_hypothesis(first);
  ASSERT_TRUE(found.has_value());
  ASSERT_EQ(found->decisions.size(), 2u);
  expected.decisions = {
      {found->decisions[0].id,
       DecisionKind::kNeedsReview,
       "touches kda/kernels (numerics)",
       "agent",
       "t5",
       {},
       std::nullopt},
      {found->decisions[1].id, DecisionKind::kRetain, "approved", "alice", "t6", {}, std::nullopt}};
  EXPECT_EQ(*found, expected);
  EXPECT_LT(found->decisions[0].id, found->decisions[1].id);

  const auto all = ledger.list_hypotheses();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[1].skeleton_id, "release_lock_on_wait");
  EXPECT_EQ(all[1].status, HypothesisStatus::kOpen);
  EXPECT_FALSE(ledger.find_hypothesis(99).has_value());
}

TEST(LedgerTest, LinksAndDecisionsNameWhatIsMissing) {
  ScratchDir dir("hypothesis-errors");
  const auto file = dir.path() / "ledger.sqlite";
  Ledger ledger = Ledger::open(file);
  const int64_t hypothesis = ledger.add_hypothesis("h", std::nullopt, "t0");
  try {
    ledger.link_run(hypothesis, "ghost", LinkRole::kCandidate, "t1");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(), "ledger " + file.string() + ": no run ghost");
  }
  try {
    ledger.add_decision(42, DecisionKind::kReject, "why", "who", "t2");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(), "ledger " + file.string() + ": no hypothesis 42");
  }
}

TEST(LedgerTest, TwoWritersOnOneFileBothLand) {
  ScratchDir dir("writers");
  const auto file = dir.path() / "ledger.sqlite";
  { Ledger::open(file); }
  constexpr int kRunsPerWriter = 25;
  auto writer = [&](const std::string& prefix) {
    Ledger ledger = Ledger::open(file);
    for (int index = 0; index < kRunsPerWriter; ++index) {
      RunRecord run = make_run(prefix + std::to_string(index), "2026-11-30T04:00:00Z");
      ledger.begin_run({run.id, run.started_at, run.objective_path, run.objective_hash, run.git,
                        run.environment_json, run.config_json});
      ledger.finish_run(run.id, RunStatus::kCompleted, "2026-11-30T04:01:00Z", run.gates,
                        run.findings, run.observations);
    }
  };
  std::thread first(writer, "a");
  std::thread second(writer, "b");
  first.join();
  second.join();
  Ledger ledger = Ledger::open(file);
  EXPECT_EQ(ledger.count_runs(), 2 * kRunsPerWriter);
  EXPECT_EQ(query_integer(file, "SELECT COUNT(*) FROM gate_verdicts"), 4 * kRunsPerWriter);
  EXPECT_EQ(query_integer(file, "SELECT COUNT(*) FROM runs WHERE status = 'completed'"),
            2 * kRunsPerWriter);
}

TEST(LedgerTest, FindingsAreIndexedByIdLayerAndSeverity) {
  ScratchDir dir("indexed");
  const auto file = dir.path() / "ledger.sqlite";
  {
    Ledger ledger = Ledger::open(file);
    ledger.insert_run(make_run("r1", "2026-11-30T04:00:00Z"));
  }
  EXPECT_EQ(query_integer(file,
                          "SELECT COUNT(*) FROM findings WHERE finding_id = "
                          "'check.cp_vs_nocp.drift' AND layer = 'check' AND severity = 'fail'"),
            1);
}

TEST(LedgerWordsTest, NamesAndParsersAreInverse) {
  for (auto status : {RunStatus::kInProgress, RunStatus::kCompleted, RunStatus::kInterrupted,
                      RunStatus::kFailed}) {
    EXPECT_EQ(parse_run_status(run_status_name(status)), status);
  }
  for (auto verdict :
       {GateVerdict::kPass, GateVerdict::kFail, GateVerdict::kInconclusive, GateVerdict::kNotRun}) {
    EXPECT_EQ(parse_gate_verdict(gate_verdict_name(verdict)), verdict);
  }
  EXPECT_EQ(parse_decision("needs-review"), DecisionKind::kNeedsReview);
  EXPECT_EQ(parse_link_role("candidate"), LinkRole::kCandidate);
  EXPECT_EQ(parse_hypothesis_status("rejected"), HypothesisStatus::kRejected);
  try {
    parse_decision("keep");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.message(),
              "unknown decision 'keep'; expected one of retain, revise, reject, needs-review");
  }
}

// A run whose results cannot all be written stays in progress with none of them visible.
TEST(LedgerTest, AFailedFinishLeavesTheRunInProgressWithNothingHalfWritten) {
  ScratchDir dir("atomic");
  const auto file = dir.path() / "ledger.sqlite";
  Ledger ledger = Ledger::open(file);
  RunRecord run = make_run("r1", "2026-11-30T04:00:00Z");
  ledger.begin_run(start_of(run));
  run.findings[0].claim = "not UTF-8: \xff";
  try {
    ledger.finish_run("r1", RunStatus::kCompleted, "t", run.gates, run.findings, run.observations);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_EQ(error.message().rfind("ledger " + file.string() +
                                        ": recording the results of run r1: finding "
                                        "check.cp_vs_nocp.drift cannot be written as JSON: ",
                                    0),
              0u)
        << error.message();
  }
  const RunRecord stored = ledger.get_run("r1");
  EXPECT_EQ(stored.status, RunStatus::kInProgress);
  EXPECT_TRUE(stored.gates.empty());
  EXPECT_TRUE(stored.findings.empty());
  EXPECT_TRUE(stored.observations.empty());
}

TEST(LedgerTest, FinishingAnUnknownRunIsRefused) {
  ScratchDir dir("finish-unknown");
  const auto file = dir.path() / "ledger.sqlite";
  Ledger ledger = Ledger::open(file);
  try {
    ledger.finish_run("ghost", RunStatus::kInterrupted, "t", {}, {}, {});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.message(), "ledger " + file.string() + ": no run ghost to finish");
  }
}

TEST(LedgerTest, MigrationFromVersionTwoKeepsHypothesesAndAddsTheReviewTables) {
  ScratchDir dir("migrate-v2");
  const auto file = dir.path() / "ledger.sqlite";
  int64_t hypothesis = 0;
  {
    Ledger v2 = Ledger::open_at_version(file, 2);
    EXPECT_EQ(v2.schema_version(), 2);
    v2.insert_run(make_run("r1", "2026-11-30T04:00:00Z"));
    hypothesis = v2.add_hypothesis("3xTF32 removes the drift", "tf32x3-affine-merge", "t0");
    v2.link_run(hypothesis, "r1", LinkRole::kCandidate, "t1");
    v2.add_decision(hypothesis, DecisionKind::kNeedsReview, "touches numerics", "agent", "t2");
  }
  EXPECT_EQ(
      query_integer(file, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'decision_triggers'"),
      0);
  Ledger ledger = Ledger::open(file);
  EXPECT_EQ(ledger.schema_version(), kSchemaVersion);
  EXPECT_EQ(ledger.get_run("r1").git.dirty_paths, std::vector<std::string>{});
  const auto before = ledger.find_hypothesis(hypothesis);
  ASSERT_TRUE(before.has_value());
  ASSERT_EQ(before->decisions.size(), 1u);
  EXPECT_EQ(before->decisions[0].why, "touches numerics");
  EXPECT_EQ(before->decisions[0].triggers, std::vector<ReviewNote>{});
  EXPECT_FALSE(before->decisions[0].approval.has_value());
  // The decision made under schema 2 can be approved under schema 3.
  ledger.approve_review(hypothesis, "alice", "t3");
  EXPECT_EQ(ledger.find_hypothesis(hypothesis)->status, HypothesisStatus::kRetained);
  RunRecord dirty = make_run("r2", "2026-11-30T04:10:00Z");
  ledger.insert_run(dirty);
  EXPECT_EQ(ledger.get_run("r2"), dirty);
}

TEST(LedgerTest, DirtyPathsAreRecordedWithTheRunInOrder) {
  ScratchDir dir("dirty-paths");
  Ledger ledger = Ledger::open(dir.path() / "ledger.sqlite");
  RunStart start;
  start.id = "r1";
  start.started_at = "t0";
  start.objective_path = "o.toml";
  start.git = {"abc", true, "d1ff", {"kda/serve/server.cpp", "z/new.txt"}};
  ledger.begin_run(start);
  EXPECT_EQ(ledger.get_run("r1").git.dirty_paths,
            (std::vector<std::string>{"kda/serve/server.cpp", "z/new.txt"}));
  EXPECT_EQ(query_integer(dir.path() / "ledger.sqlite", "SELECT COUNT(*) FROM run_dirty_paths"), 2);
}

TEST(LedgerTest, NeedsReviewKeepsItsTriggersAndApprovalAddsTheRetain) {
  ScratchDir dir("approve");
  Ledger ledger = Ledger::open(dir.path() / "ledger.sqlite");
  const int64_t hypothesis = ledger.add_hypothesis("release the lock", std::nullopt, "t0");
  const std::vector<ReviewNote> triggers = {
      {"concurrency", "path kda/serve/server.cpp matches kda/serve/**"},
      {"concurrency", "parameter dispatch_lock changed"}};
  const int64_t pending = ledger.add_decision(hypothesis, DecisionKind::kNeedsReview,
                                              "gap below 1 %", "agent", "t1", triggers);
  EXPECT_EQ(ledger.find_hypothesis(hypothesis)->status, HypothesisStatus::kNeedsReview);
  const int64_t retain = ledger.approve_review(hypothesis, "alice", "t2");
  EXPECT_GT(retain, pending);
  const Hypothesis found = *ledger.find_hypothesis(hypothesis);
  EXPECT_EQ(found.status, HypothesisStatus::kRetained);
  ASSERT_EQ(found.decisions.size(), 2u);
  EXPECT_EQ(found.decisions[0].triggers, triggers);
  EXPECT_EQ(found.decisions[0].approval, (Approval{"alice", "t2"}));
  EXPECT_EQ(found.decisions[1].decision, DecisionKind::kRetain);
  EXPECT_EQ(found.decisions[1].who, "alice");
  EXPECT_EQ(found.decisions[1].why,
            "approved by alice (decision " + std::to_string(pending) + "): gap below 1 %");
  EXPECT_FALSE(found.decisions[1].approval.has_value());
}

TEST(LedgerTest, ApprovalNeedsAnUnapprovedNeedsReviewDecision) {
  ScratchDir dir("approve-refused");
  const auto file = dir.path() / "ledger.sqlite";
  Ledger ledger = Ledger::open(file);
  const int64_t hypothesis = ledger.add_hypothesis("h", std::nullopt, "t0");
  auto approve_error = [&] {
    try {
      ledger.approve_review(hypothesis, "alice", "t9");
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUsage);
      return error.message();
    }
    return std::string("no error");
  };
  const std::string prefix = "ledger " + file.string() + ": hypothesis " +
                             std::to_string(hypothesis) + " is not awaiting review (its newest ";
  EXPECT_EQ(approve_error(), prefix + "decision is absent)");
  ledger.add_decision(hypothesis, DecisionKind::kReject, "no gain", "agent", "t1");
  EXPECT_EQ(approve_error(), prefix + "decision is 'reject')");
  ledger.add_decision(hypothesis, DecisionKind::kNeedsReview, "numerics", "agent", "t2");
  ledger.approve_review(hypothesis, "alice", "t3");
  EXPECT_EQ(approve_error(), prefix + "decision is 'retain')");
  EXPECT_EQ(query_integer(file, "SELECT COUNT(*) FROM approvals"), 1);
}

}  // namespace
}  // namespace loupe::ledger
