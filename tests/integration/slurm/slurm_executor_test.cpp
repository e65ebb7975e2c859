// `loupe run --executor slurm` end to end, on a real one-node Slurm cluster that each test process
// starts with scripts/slurm-local (its own state directory, ports and munge socket) and stops at
// exit. The objective is slurm.toml: kda's checks and decode bench, whose verdicts do not depend on
// the machine's load. Skips, saying why, where Slurm is not installed.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/json.hpp"
#include "core/process.hpp"
#include "support/cli_run.hpp"

extern char** environ;

namespace loupe {
namespace {

namespace fs = std::filesystem;
using test_support::CliRun;
using test_support::run_cli;
using test_support::run_loupe;

// The cluster of this test process: up before the first test, down after the last.
class SlurmCluster : public ::testing::Environment {
 public:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loupe-slurm-test-" + std::to_string(::getpid()));
    ::setenv("LOUPE_SLURM_DIR", dir_.c_str(), 1);
    // Ports of its own, so a cluster of another test process (or a user's) does not answer.
    ::setenv("LOUPE_SLURM_PORT", std::to_string(20000 + 2 * (::getpid() % 4000)).c_str(), 1);
    const CliRun up = run_cli({std::string(LOUPE_SOURCE_DIR) + "/scripts/slurm-local", "up"},
                              std::chrono::seconds(60));
    if (up.exit_code == 2) {
      skip_reason_ = "Slurm is not installed here (scripts/slurm-local up: " + up.err + ")";
      return;
    }
    ASSERT_EQ(up.exit_code, 0) << up.out << up.err;
    ::setenv("SLURM_CONF", (dir_ / "slurm.conf").c_str(), 1);
    up_ = true;
  }
  void TearDown() override {
    if (up_) run_cli({std::string(LOUPE_SOURCE_DIR) + "/scripts/slurm-local", "down"});
  }
  static const std::string& skip_reason() { return skip_reason_; }

 private:
  fs::path dir_;
  bool up_ = false;
  static inline std::string skip_reason_;
};

const auto* const kCluster = ::testing::AddGlobalTestEnvironment(new SlurmCluster);

std::map<std::string, std::string> gate_verdicts(const Json& gates) {
  std::map<std::string, std::string> out;
  for (const auto& gate : gates) out[gate.at("name")] = gate.at("verdict");
  return out;
}

class SlurmExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!SlurmCluster::skip_reason().empty()) GTEST_SKIP() << SlurmCluster::skip_reason();
    dir_ = fs::temp_directory_path() /
           ("loupe_slurm_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    objective_ = dir_ / "slurm.toml";
    ASSERT_TRUE(test_support::copy_objective(
        fs::path(LOUPE_SOURCE_DIR) / "tests/integration/slurm/slurm.toml", objective_,
        KDA_EXECUTABLE));
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::vector<std::string> run_args(const std::string& config, const std::string& home,
                                    bool slurm) const {
    std::vector<std::string> args = {"run",    objective_.string(),    "--config", config,
                                     "--home", (dir_ / home).string(), "--json"};
    if (slurm) args.insert(args.end(), {"--executor", "slurm"});
    return args;
  }

  fs::path dir_;
  fs::path objective_;
};

TEST_F(SlurmExecutorTest, SameVerdictsAsLocalAndTheLedgerKeepsTheJobIds) {
  const CliRun local = run_loupe(run_args("fixed", "local", false), std::chrono::seconds(200));
  ASSERT_EQ(local.exit_code, 0) << local.out << local.err;
  const CliRun slurm = run_loupe(run_args("fixed", "slurm", true), std::chrono::seconds(200));
  ASSERT_EQ(slurm.exit_code, 0) << slurm.out << slurm.err;
  EXPECT_EQ(gate_verdicts(slurm.envelope.at("data").at("gates")),
            gate_verdicts(local.envelope.at("data").at("gates")));
  EXPECT_EQ(gate_verdicts(slurm.envelope.at("data").at("gates")),
            (std::map<std::string, std::string>{{"cp_matches_single_device", "pass"},
                                                {"cp_control_holds", "pass"},
                                                {"decode_kernels_agree", "pass"},
                                                {"decode_kernel_not_slower", "pass"}}));
  // Same points, same seeds, so the same check metrics.
  EXPECT_EQ(slurm.envelope.at("data").at("tasks").size(),
            local.envelope.at("data").at("tasks").size());

  const Json& executor = slurm.envelope.at("data").at("executor");
  EXPECT_EQ(executor.at("kind"), "slurm");
  ASSERT_EQ(executor.at("jobs").size(), 2u) << executor.dump();  // one array per layer
  EXPECT_EQ(executor.at("jobs")[0].at("layer"), "check");
  EXPECT_EQ(executor.at("jobs")[0].at("tasks"), 3);
  EXPECT_EQ(executor.at("jobs")[1].at("layer"), "bench");
  EXPECT_EQ(executor.at("jobs")[1].at("tasks"), 1);
  EXPECT_TRUE(executor.at("retries").empty());

  // The ledger holds the job ids with the run.
  const std::string run_id = slurm.envelope.at("data").at("run");
  const CliRun shown =
      run_loupe({"ledger", "show", run_id, "--home", (dir_ / "slurm").string(), "--json"});
  ASSERT_EQ(shown.exit_code, 0) << shown.out << shown.err;
  EXPECT_NE(shown.out.find("\"job_id\":\"" +
                           executor.at("jobs")[0].at("job_id").get<std::string>() + "\""),
            std::string::npos)
      << shown.out;
}

// Also: an entry that asks for its own resources gets an array of its own.
TEST_F(SlurmExecutorTest, AFailingLayerKeepsTheNextFromBeingSubmitted) {
  std::ofstream(objective_, std::ios::app)
      << "\n[executor.resources.decode_kernels_agree]\ncpus_per_task = 2\n";
  const CliRun slurm = run_loupe(run_args("incident", "slurm", true), std::chrono::seconds(200));
  ASSERT_EQ(slurm.exit_code, 1) << slurm.out << slurm.err;
  const auto verdicts = gate_verdicts(slurm.envelope.at("data").at("gates"));
  EXPECT_EQ(verdicts.at("cp_matches_single_device"), "fail");
  EXPECT_EQ(verdicts.at("decode_kernels_agree"), "pass");
  EXPECT_EQ(verdicts.at("decode_kernel_not_slower"), "not-run");
  const Json& jobs = slurm.envelope.at("data").at("executor").at("jobs");
  ASSERT_EQ(jobs.size(), 2u) << jobs.dump();  // the check layer's two arrays; no bench array
  EXPECT_EQ(jobs[0].at("layer"), "check");
  EXPECT_EQ(jobs[0].at("tasks"), 2);
  EXPECT_FALSE(jobs[0].contains("resources"));
  EXPECT_EQ(jobs[1].at("layer"), "check");
  EXPECT_EQ(jobs[1].at("tasks"), 1);
  EXPECT_EQ(jobs[1].at("resources"), "decode_kernels_agree");
}

TEST_F(SlurmExecutorTest, AnUnknownExecutorIsAUsageError) {
  const CliRun run = run_loupe({"run", objective_.string(), "--config", "fixed", "--home",
                                (dir_ / "home").string(), "--executor", "kubernetes"});
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.err.find("--executor 'kubernetes': expected local or slurm"), std::string::npos)
      << run.err;
}

// The subject sleeps before each run, so a task can be caught running and cancelled; the executor
// must resubmit it, record the loss, and reach the same verdicts.
TEST_F(SlurmExecutorTest, ATaskCancelledMidRunIsResubmittedAndRecorded) {
  const fs::path wrapper = dir_ / "slow-kda";
  // kda's path is an argument of the subject command, not named in the script alone: the sandbox
  // binds a /tmp folder only where the command names it (a build in a clone under /tmp).
  std::ofstream(wrapper) << "#!/bin/sh\nkda=\"$1\"\nshift\nif [ \"$1\" = run ]; then sleep 6; "
                            "fi\nexec \"$kda\" probe \"$@\"\n";
  fs::permissions(wrapper, fs::perms::owner_all, fs::perm_options::add);
  {
    std::ifstream in(objective_);
    std::ostringstream text;
    for (std::string line; std::getline(in, line);) {
      text << (line.rfind("command = ", 0) == 0
                   ? "command = [\"" + wrapper.string() + "\", \"" KDA_EXECUTABLE "\"]"
                   : line)
           << "\n";
    }
    std::ofstream(objective_) << text.str();
  }
  // A job of the previous test can still be in the queue (a cancelled layer's array is torn down
  // after that run exits): wait for the queue to drain, so the victim is a task of this run.
  const auto drain_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < drain_deadline &&
         !run_cli({"squeue", "--noheader", "--format=%i"}).out.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_TRUE(run_cli({"squeue", "--noheader", "--format=%i"}).out.empty())
      << "the queue still holds jobs of an earlier test";
  const fs::path out_file = dir_ / "run.json";
  std::vector<std::string> args = {LOUPE_EXECUTABLE};
  for (const auto& arg : run_args("fixed", "slurm", true)) args.push_back(arg);
  for (const auto& arg : {"--only", "check"}) args.push_back(arg);
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);

  // Wait for a task to be running, then cancel exactly that task.
  std::string victim;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (victim.empty() && std::chrono::steady_clock::now() < deadline) {
    const CliRun queue =
        run_cli({"squeue", "--noheader", "--array", "--states=RUNNING", "--format=%i"});
    std::istringstream lines(queue.out);
    std::getline(lines, victim);
    if (victim.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_FALSE(victim.empty()) << "no task of the run was seen running";
  const CliRun cancel = run_cli({"scancel", victim});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;

  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  std::ifstream in(out_file);
  const Json envelope = Json::parse(in);
  EXPECT_EQ(WEXITSTATUS(status), 0) << envelope.dump();
  const auto verdicts = gate_verdicts(envelope.at("data").at("gates"));
  EXPECT_EQ(verdicts.at("cp_matches_single_device"), "pass");
  EXPECT_EQ(verdicts.at("decode_kernels_agree"), "pass");
  const Json& retries = envelope.at("data").at("executor").at("retries");
  ASSERT_EQ(retries.size(), 1u) << "cancelled " << victim << "; "
                                << envelope.at("data").at("executor").dump();
  EXPECT_EQ(retries[0].at("job_id").get<std::string>() + "_" +
                std::to_string(retries[0].at("index").get<int64_t>()),
            victim);
  EXPECT_EQ(retries[0].at("state"), "CANCELLED");
  EXPECT_NE(retries[0].at("resubmitted_as"), retries[0].at("job_id"));
}

// One door (issue 33): a Slurm task runs its point as `loupe run` does here, with the hidden run.
// The candidate replays what the recorder left for seed 7; the task's secret seed fails it.
TEST_F(SlurmExecutorTest, AReplayingCandidateFailsOnTheSecretSeed) {
  const CliRun record = run_cli({REPLAY_SUBJECT, "run", "replay_recorder", "--seed", "7", "--out",
                                 (dir_ / "record").string(), "--json"});
  ASSERT_EQ(record.exit_code, 0) << record.out << record.err;
  const fs::path objective = dir_ / "replay.toml";
  std::ofstream(objective) << "name = \"replay\"\n[subject]\ncommand = [\"" REPLAY_SUBJECT
                              "\"]\ntimeout_s = 60\n[[check]]\nname = \"replay\"\n"
                              "probe = \"replay_candidate\"\nseed = 7\n[[gate]]\n"
                              "name = \"replay_passes\"\nexpr = \"check.replay passes\"\n";
  const CliRun run = run_loupe({"run", objective.string(), "--home", (dir_ / "home").string(),
                                "--json", "--executor", "slurm"},
                               std::chrono::seconds(200));
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  bool found = false;
  for (const auto& finding : run.envelope.at("findings")) {
    if (finding.at("id") != "check.replay_candidate.guard.hidden_point") continue;
    found = true;
    EXPECT_EQ(finding.at("severity"), "fail");
    EXPECT_EQ(finding.at("claim").get<std::string>().rfind(
                  "the candidate passes at the point(s) it was shown", 0),
              0u)
        << finding.dump();
  }
  EXPECT_TRUE(found) << run.out;
  EXPECT_EQ(run.envelope.at("data").at("executor").at("kind"), "slurm");
}

}  // namespace
}  // namespace loupe
