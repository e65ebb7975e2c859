// `loupe run` end to end on tiny.toml (examples/kda/smoke.toml, more repeats) against the kda
// subject of the same build: the incident configuration fails its three gates, the fixed one passes
// all, the ledger holds the runs, usage errors exit 2 and Ctrl-C records the run as interrupted.
// About 20 s.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "core/process.hpp"
#include "support/cli_run.hpp"

extern char** environ;

namespace loupe {
namespace {

namespace fs = std::filesystem;

using test_support::CliRun;
using test_support::run_loupe;

std::map<std::string, std::string> gate_verdicts(const Json& gates) {
  std::map<std::string, std::string> out;
  for (const auto& gate : gates) out[gate.at("name")] = gate.at("verdict");
  return out;
}

// Issue 38, one direction everywhere: in the incident configuration the gate
// decode_kernel_not_slower reads tiled (the configured kernel, the bench's first variant) as the
// candidate against merged and calls it SLOWER. Every field that states a direction says the same:
// the gate's statistics (ratio_of candidate/baseline, tiled over merged, above 1) and each
// bench.decode finding (id, path, claim, ratio and interval), wherever they are read from.
void expect_tiled_slower_everywhere(const Json& findings, const Json& gates,
                                    const std::string& where) {
  int64_t decode_findings = 0;
  // The A/B findings of the decode bench; its other findings (bench.decode.accessor_charged, an
  // info finding the runtime adds when the outputs accessor took measurable CPU) state no
  // direction.
  auto expect_slower = [&](const Json& finding) {
    static const std::set<std::string> kVerdictIds = {"bench.decode.slower", "bench.decode.faster",
                                                      "bench.decode.same",
                                                      "bench.decode.ambiguous"};
    if (kVerdictIds.count(finding.at("id").get<std::string>()) == 0) return;
    ++decode_findings;
    EXPECT_EQ(finding.at("id"), "bench.decode.slower") << where << ": " << finding.dump();
    EXPECT_EQ(finding.at("severity"), "warn") << where;
    EXPECT_EQ(finding.at("where").at("path"), "tiled vs merged") << where;
    const std::string claim = finding.at("claim");
    EXPECT_EQ(claim.rfind("tiled is ", 0), 0u) << where << ": " << claim;
    EXPECT_NE(claim.find(" slower than merged ("), std::string::npos) << where << ": " << claim;
    EXPECT_NE(claim.find("tiled/merged "), std::string::npos) << where << ": " << claim;
    const Json& metrics = finding.at("evidence").at("metrics");
    EXPECT_GT(metrics.at("ratio").get<double>(), 1.0) << where;
    EXPECT_GT(metrics.at("ci_low").get<double>(), 1.0) << where;
    EXPECT_GT(metrics.at("median_b_s").get<double>(), metrics.at("median_a_s").get<double>())
        << where;
  };
  for (const auto& finding : findings) expect_slower(finding);
  bool found_gate = false;
  for (const auto& gate : gates) {
    if (gate.at("name") != "decode_kernel_not_slower") continue;
    found_gate = true;
    EXPECT_EQ(gate.at("verdict"), "fail") << where;
    const Json& statistics = gate.at("statistics");
    EXPECT_EQ(statistics.at("ratio_of"), "candidate/baseline") << where << ": " << gate.dump();
    EXPECT_EQ(statistics.at("candidate"), "tiled") << where;
    EXPECT_EQ(statistics.at("baseline"), "merged") << where;
    EXPECT_GT(statistics.at("estimate").get<double>(), 1.0) << where;
    EXPECT_GT(statistics.at("interval").at(0).get<double>(), 1.0) << where;
    const std::string rule = gate.at("rule");
    EXPECT_NE(rule.find(" tiled/merged = "), std::string::npos) << where << ": " << rule;
    EXPECT_NE(rule.find(" is SLOWER"), std::string::npos) << where << ": " << rule;
    if (gate.contains("findings")) {
      for (const auto& finding : gate.at("findings")) expect_slower(finding);
    }
  }
  EXPECT_TRUE(found_gate) << where;
  EXPECT_GT(decode_findings, 0) << where << ": no bench.decode finding";
}

class RunCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("loupe_run_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // tiny.toml (smoke.toml with 15 scenario repeats), with the subject of this build (its path in
    // the file is that of the default preset) and no working directory (the path is absolute).
    objective_ = dir_ / "smoke.toml";
    ASSERT_TRUE(test_support::copy_objective(
        fs::path(LOUPE_SOURCE_DIR) / "tests/integration/run/tiny.toml", objective_, KDA_EXECUTABLE))
        << "tests/integration/run/tiny.toml has no [subject] command line";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> run_args(const std::string& config) const {
    return {"run",    objective_.string(),      "--config", config,
            "--home", (dir_ / "home").string(), "--json"};
  }

  fs::path dir_;
  fs::path objective_;
};

TEST_F(RunCliTest, IncidentFailsItsThreeGatesAndFixedPassesAll) {
  const CliRun incident = run_loupe(run_args("incident"));
  ASSERT_EQ(incident.exit_code, 1) << incident.out << incident.err;
  const Json& data = incident.envelope.at("data");
  EXPECT_EQ(incident.envelope.at("kind"), "run");
  EXPECT_EQ(incident.envelope.at("verdict"), "fail");
  EXPECT_EQ(data.at("status"), "completed");
  EXPECT_EQ(gate_verdicts(data.at("gates")),
            (std::map<std::string, std::string>{{"cp_matches_single_device", "fail"},
                                                {"cp_control_holds", "pass"},
                                                {"decode_kernels_agree", "pass"},
                                                {"decode_kernel_not_slower", "fail"},
                                                {"transfer_overhead_within_30pct", "fail"}}))
      << incident.out;
  // 3 checks, 1 bench, 2 scenarios x 15 repeats; one progress line each on stderr.
  EXPECT_EQ(data.at("tasks").size(), 34u);
  EXPECT_NE(incident.err.find("[34/34] scenario"), std::string::npos) << incident.err;
  for (const auto& gate : data.at("gates")) {
    EXPECT_FALSE(gate.at("rule").get<std::string>().empty());
    if (gate.at("verdict") == "fail") {
      EXPECT_FALSE(gate.at("findings").empty()) << gate.dump();
    }
  }
  // The failing scenario gate says who blocked whom: the trace diff's lock finding.
  for (const auto& gate : data.at("gates")) {
    if (gate.at("name") != "transfer_overhead_within_30pct") continue;
    bool locks = false;
    for (const auto& finding : gate.at("findings")) {
      locks = locks || finding.at("id") == "trace.diff.locks";
    }
    EXPECT_TRUE(locks) << gate.dump();
    EXPECT_GT(gate.at("statistics").at("interval").at(0).get<double>(), 1.3);
  }
  bool coverage = false;
  for (const auto& finding : incident.envelope.at("findings")) {
    const std::string reproduce = finding.at("reproduce");
    // Coverage findings are about the objective, not a seeded point: `loupe plan` shows them.
    if (finding.at("id").get<std::string>().rfind("coverage.", 0) == 0) {
      coverage = true;
      EXPECT_EQ(reproduce.rfind("loupe plan ", 0), 0u) << finding.dump();
      continue;
    }
    EXPECT_NE(reproduce.find("--seed "), std::string::npos) << finding.dump();
  }
  // tiny.toml gates a few of kda's probes: the rest are coverage findings.
  EXPECT_TRUE(coverage) << incident.out;
  expect_tiled_slower_everywhere(incident.envelope.at("findings"), data.at("gates"),
                                 "loupe run --json");

  const CliRun fixed = run_loupe(run_args("fixed"));
  ASSERT_EQ(fixed.exit_code, 0) << fixed.out << fixed.err;
  EXPECT_EQ(fixed.envelope.at("verdict"), "pass");
  for (const auto& [name, verdict] : gate_verdicts(fixed.envelope.at("data").at("gates"))) {
    EXPECT_EQ(verdict, "pass") << name;
  }

  // Both runs are in the ledger, with their gate verdicts.
  const CliRun shown =
      run_loupe({"ledger", "show", data.at("run"), "--home", (dir_ / "home").string(), "--json"});
  ASSERT_EQ(shown.exit_code, 0) << shown.out << shown.err;
  const Json& run = shown.envelope.at("data").at("run");
  EXPECT_EQ(run.at("status"), "completed");
  EXPECT_EQ(gate_verdicts(run.at("gates")).at("transfer_overhead_within_30pct"), "fail");
  EXPECT_EQ(run.at("observations").size(), 34u);
  expect_tiled_slower_everywhere(shown.envelope.at("findings"), run.at("gates"),
                                 "loupe ledger show --json");
}

TEST_F(RunCliTest, OnlyChecksLeavesTheOtherGatesNotRun) {
  const CliRun run = run_loupe({"run", objective_.string(), "--config", "fixed", "--only", "check",
                                "--home", (dir_ / "home").string(), "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;  // over the gates that ran
  EXPECT_EQ(gate_verdicts(run.envelope.at("data").at("gates")),
            (std::map<std::string, std::string>{{"cp_matches_single_device", "pass"},
                                                {"cp_control_holds", "pass"},
                                                {"decode_kernels_agree", "pass"},
                                                {"decode_kernel_not_slower", "not-run"},
                                                {"transfer_overhead_within_30pct", "not-run"}}));
}

TEST_F(RunCliTest, MemoryLimitStopsTheSubjectAndRecordsTheRunAsFailed) {
  // Any kda probe process holds more than 1 MiB resident: the first point is stopped.
  const CliRun run =
      run_loupe({"run", objective_.string(), "--config", "incident", "--only", "check", "--memory",
                 "1M", "--home", (dir_ / "home").string(), "--json"});
  EXPECT_EQ(run.exit_code, 3) << run.out << run.err;
  EXPECT_EQ(run.envelope.at("verdict"), "error");
  EXPECT_EQ(run.envelope.at("error").at("code"), "subject");
  EXPECT_NE(run.envelope.at("error").at("message").get<std::string>().find("memory limit"),
            std::string::npos)
      << run.out;
  EXPECT_EQ(run.envelope.at("data").at("status"), "failed");
}

TEST_F(RunCliTest, MemoryLimitThatIsNotASizeIsAUsageError) {
  const CliRun run = run_loupe({"run", objective_.string(), "--config", "incident", "--memory",
                                "lots", "--home", (dir_ / "home").string(), "--json"});
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.envelope.at("error").at("message").get<std::string>().find("--memory"),
            std::string::npos)
      << run.out;
}

TEST_F(RunCliTest, UnknownConfigurationIsAUsageError) {
  const CliRun run = run_loupe(run_args("nonesuch"));
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_EQ(run.envelope.at("verdict"), "error");
  EXPECT_EQ(run.envelope.at("error").at("code"), "usage");
}

TEST_F(RunCliTest, InterruptKillsTheSubjectAndRecordsTheRun) {
  // Spawned by hand: the test must signal loupe while it runs.
  int err_pipe[2];
  ASSERT_EQ(::pipe(err_pipe), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclose(&actions, err_pipe[0]);
  std::vector<std::string> args = {LOUPE_EXECUTABLE, "run",    objective_.string(),     "--config",
                                   "incident",       "--home", (dir_ / "home").string()};
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  ASSERT_EQ(::posix_spawn(&pid, LOUPE_EXECUTABLE, &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(err_pipe[1]);
  // After the first point's progress line, the rest of the run takes seconds: interrupt it.
  std::string err;
  char buffer[256];
  while (err.find("[1/") == std::string::npos) {
    const ssize_t got = ::read(err_pipe[0], buffer, sizeof buffer);
    if (got <= 0) break;
    err.append(buffer, static_cast<size_t>(got));
  }
  ASSERT_NE(err.find("[1/"), std::string::npos) << err;
  ::kill(pid, SIGINT);
  ssize_t got = 0;
  while ((got = ::read(err_pipe[0], buffer, sizeof buffer)) > 0) {
    err.append(buffer, static_cast<size_t>(got));
  }
  ::close(err_pipe[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_EQ(WEXITSTATUS(status), 130) << err;

  const CliRun listed = run_loupe({"ledger", "list", "--home", (dir_ / "home").string(), "--json"});
  ASSERT_EQ(listed.exit_code, 0) << listed.out << listed.err;
  EXPECT_NE(listed.out.find("\"interrupted\""), std::string::npos) << listed.out;
}

}  // namespace
}  // namespace loupe
