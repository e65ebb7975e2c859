// `loupe bisect` on a scripted history (issue 25): eight commits of a small C++ subject, one a
// ~5 % slowdown of its bench, one a numeric fault of its check. Each is found within
// ceil(log2 8) + 2 = 5 builds' worth of points, an A/A range blames nothing, a second bisect
// reuses every build, and --over-values finds the bad value of a build setting.
// The tests share one repository and one build cache (SetUpTestSuite) and run in file order.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/process.hpp"
#include "scripted_history.hpp"
#include "support/cli_run.hpp"
#include "support/scratch_dir.hpp"

namespace loupe {
namespace {

using test_support::CliRun;
using test_support::ScratchDir;

using test_support::git;
using test_support::knobs;
using test_support::read_file;
using test_support::write_file;

constexpr const char* kObjective = R"(name = "bisect-subject"
[subject]
command = ["./subject"]
working_dir = "."
timeout_s = 60

[[check]]
probe = "sums"
seed = 7

[[bench]]
probe = "chain"
variants = ["reference", "chain"]
threshold = 0.02
budget_s = 0.25

[[gate]]
name = "sums_match"
expr = "check.sums passes"

[[gate]]
name = "chain_time"
expr = "bench.chain[chain].median_s <= 0.01"
)";

class BisectCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new ScratchDir("bisect-cli");
    repo_ = scratch_->path() / "repo";
    // c0 good; c3 lengthens the chain by 5 %; c5 drops the last column of the float sums.
    commits_ =
        test_support::commit_scripted_history(repo_, BISECT_SUBJECT_SOURCE, kObjective,
                                              {{"initial: sums and chain", knobs(0, 0)},
                                               {"notes: how to build", ""},
                                               {"notes: the probes", ""},
                                               {"chain: five per cent more steps", knobs(5, 0)},
                                               {"notes: the bench", ""},
                                               {"sums: stop one column early", knobs(5, 1)},
                                               {"notes: the check", ""},
                                               {"notes: done", ""}});
  }
  static void TearDownTestSuite() {
    delete scratch_;
    scratch_ = nullptr;
  }

  static std::string build_command(const std::string& defines = "") {
    return test_support::subject_build_command(defines);
  }

  static CliRun bisect(std::vector<std::string> arguments,
                       const std::string& objective = "loupe.toml") {
    ProcessSpec spec;
    spec.argv = {LOUPE_EXECUTABLE, "bisect", "--objective", objective, "--json"};
    spec.argv.insert(spec.argv.end(), arguments.begin(), arguments.end());
    spec.working_dir = repo_;
    spec.timeout = std::chrono::seconds(400);
    return test_support::run_cli(spec);
  }

  static inline ScratchDir* scratch_ = nullptr;
  static inline std::filesystem::path repo_;
  static inline std::vector<std::string> commits_;
};

TEST_F(BisectCli, NumericFaultIsFoundWithinFiveBuilds) {
  const CliRun run = bisect({"--good", commits_[0], "--bad", commits_[7], "--gate", "sums_match",
                             "--build", build_command()});
  ASSERT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& data = run.envelope["data"];
  EXPECT_EQ(run.envelope["verdict"], "fail");
  EXPECT_EQ(data["first_bad"]["commit"], commits_[5]) << run.err;
  EXPECT_EQ(data["parent"]["commit"], commits_[4]);
  EXPECT_EQ(data["first_bad"]["evidence"]["verdict"], "bad");
  EXPECT_EQ(data["first_bad"]["evidence"]["gate"]["verdict"], "fail");
  EXPECT_EQ(data["parent"]["evidence"]["gate"]["verdict"], "pass");
  EXPECT_LE(data["builds"].get<int>(), 5) << run.err;
  EXPECT_EQ(data["builds"].get<int>(), data["points_evaluated"].get<int>());
  EXPECT_EQ(run.envelope["findings"][0]["id"], "bisect.sums_match.first_bad");
  // The user's checkout is untouched: still at the last commit, nothing modified.
  EXPECT_EQ(git(repo_, {"rev-parse", "HEAD"}), commits_[7]);
  EXPECT_EQ(git(repo_, {"status", "--porcelain", "--untracked-files=no"}), "");
  // Recorded in the ledger with the gate's verdict.
  const CliRun show =
      test_support::run_cli({LOUPE_EXECUTABLE, "ledger", "show", data["run"].get<std::string>(),
                             "--ledger", (repo_ / ".loupe" / "ledger.sqlite").string(), "--json"});
  EXPECT_EQ(show.exit_code, 0) << show.out << show.err;
  EXPECT_NE(show.out.find("bisect.sums_match.first_bad"), std::string::npos);
}

TEST_F(BisectCli, SecondBisectReusesEveryBuild) {
  const CliRun run = bisect({"--good", commits_[0], "--bad", commits_[7], "--gate", "sums_match",
                             "--build", build_command()});
  ASSERT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(run.envelope["data"]["first_bad"]["commit"], commits_[5]);
  EXPECT_EQ(run.envelope["data"]["builds"], 0);
  EXPECT_GE(run.envelope["data"]["builds_reused"].get<int>(), 3);
}

TEST_F(BisectCli, FivePercentSlowdownIsFoundWithinFiveBuildsWorthOfPoints) {
  const CliRun run = bisect({"--good", commits_[0], "--bad", commits_[7], "--gate", "chain_time",
                             "--build", build_command()});
  ASSERT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& data = run.envelope["data"];
  EXPECT_EQ(data["first_bad"]["commit"], commits_[3]) << run.err;
  EXPECT_EQ(data["parent"]["commit"], commits_[2]);
  const Json& ab = data["first_bad"]["evidence"]["ab"];
  EXPECT_EQ(ab["verdict"], "SLOWER");
  EXPECT_EQ(ab["ratio_of"], "candidate/baseline");  // the step over the good build
  EXPECT_GT(ab["ratio"].get<double>(), 1.0);
  EXPECT_GT(ab["ci"][0].get<double>(), 1.0);
  // The good end (the A side) plus the points evaluated: at most ceil(log2 8) + 2 builds' worth
  // (an AMBIGUOUS point retried with more rounds reuses its build).
  EXPECT_LE(data["points_evaluated"].get<int>() + 1, 5) << run.err;
}

TEST_F(BisectCli, AnAaRangeBlamesNothing) {
  // c0..c2 change only notes: the bad end is not slower than the good one.
  const CliRun run = bisect({"--good", commits_[0], "--bad", commits_[2], "--gate", "chain_time",
                             "--build", build_command()});
  ASSERT_LE(run.exit_code, 1) << run.out << run.err;
  EXPECT_TRUE(run.envelope["data"]["first_bad"].is_null()) << run.out << run.err;
  EXPECT_NE(run.envelope["verdict"], "fail");
  EXPECT_EQ(run.envelope["data"]["points_evaluated"], 1);  // the bad end only
}

TEST_F(BisectCli, OverValuesFindsTheFirstBadValue) {
  const CliRun run = bisect({"--over-values", "fault=0,0,0,1,1", "--gate", "sums_match", "--build",
                             build_command("-DSUM_FAULT={fault}")});
  ASSERT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& data = run.envelope["data"];
  EXPECT_EQ(data["first_bad"]["value"], "1");
  EXPECT_EQ(data["first_bad"]["evidence"]["index"], 3);
  EXPECT_EQ(data["parent"]["evidence"]["index"], 2);
}

// The objective's [build] table replaces --build: the same command, so the trees a bisect with
// --build built are reused (their stamps hold that command) and nothing is built.
TEST_F(BisectCli, ObjectiveBuildTableReplacesTheBuildOption) {
  const CliRun with_option = bisect({"--good", commits_[0], "--bad", commits_[7], "--gate",
                                     "sums_match", "--build", build_command()});
  ASSERT_EQ(with_option.exit_code, 1) << with_option.out << with_option.err;
  write_file(repo_ / "built.toml",
             std::string(kObjective) + "\n[build]\ncommand = \"" + build_command() + "\"\n");
  const CliRun run =
      bisect({"--good", commits_[0], "--bad", commits_[7], "--gate", "sums_match"}, "built.toml");
  ASSERT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(run.envelope["data"]["first_bad"]["commit"], commits_[5]);
  EXPECT_EQ(run.envelope["data"]["builds"], 0) << run.err;
  // The reproduce line needs no --build: the objective carries it.
  EXPECT_EQ(run.envelope["findings"][0]["reproduce"].get<std::string>().find("--build"),
            std::string::npos);
}

// Issue 25: the MCP tool `bisect` through `loupe mcp` over stdio, as a client calls it: progress
// notifications while it runs, then the bounded envelope naming the first bad commit. The builds
// are the objective's [build] command (a client sends none).
TEST_F(BisectCli, McpToolNamesTheFirstBadCommitWithProgress) {
  write_file(repo_ / "built.toml",
             std::string(kObjective) + "\n[build]\ncommand = \"" + build_command() + "\"\n");
  const Json call = {{"jsonrpc", "2.0"},
                     {"id", 2},
                     {"method", "tools/call"},
                     {"params",
                      {{"name", "bisect"},
                       {"arguments",
                        {{"objective", "built.toml"},
                         {"gate", "sums_match"},
                         {"good", commits_[0]},
                         {"bad", commits_[7]}}},
                       {"_meta", {{"progressToken", "b1"}}}}}};
  write_file(scratch_->path() / "requests.jsonl",
             std::string(R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{)"
                         R"("protocolVersion":"2025-06-18","capabilities":{},)"
                         R"("clientInfo":{"name":"bisect-test","version":"1"}}})") +
                 "\n" + R"({"jsonrpc":"2.0","method":"notifications/initialized"})" + "\n" +
                 call.dump() + "\n");
  // stdin stays open until the answer arrives: EOF would cancel the running call.
  const std::filesystem::path fifo = scratch_->path() / "mcp.in";
  const std::filesystem::path out = scratch_->path() / "mcp.out";
  const std::string script =
      "rm -f '" + fifo.string() + "' && mkfifo '" + fifo.string() + "' || exit 2; '" +
      LOUPE_EXECUTABLE + "' mcp < '" + fifo.string() + "' > '" + out.string() +
      "' & pid=$!; exec 3> '" + fifo.string() + "'; cat '" +
      (scratch_->path() / "requests.jsonl").string() +
      "' >&3; while kill -0 $pid 2>/dev/null && ! grep -q '\"id\":2,\"result\"' '" + out.string() +
      "'; do sleep 0.2; done; exec 3>&-; wait $pid";
  ProcessSpec spec = shell_command(script);
  spec.working_dir = repo_;
  spec.timeout = std::chrono::seconds(300);
  const ProcessResult result = run_process(spec);
  ASSERT_TRUE(result.succeeded()) << result.describe() << result.stderr_text;
  std::istringstream lines(read_file(out));
  Json answer;
  std::vector<double> progress;
  for (std::string line; std::getline(lines, line);) {
    const Json message = Json::parse(line);
    if (message.value("method", "") == "notifications/progress") {
      EXPECT_EQ(message["params"]["progressToken"], "b1");
      progress.push_back(message["params"]["progress"].get<double>());
    } else if (message.contains("id") && message["id"] == 2) {
      answer = message["result"];
    }
  }
  ASSERT_TRUE(answer.is_object()) << read_file(out);
  EXPECT_FALSE(answer["isError"].get<bool>()) << answer.dump();
  const Json& envelope = answer["structuredContent"];
  EXPECT_EQ(envelope["kind"], "bisect");
  EXPECT_EQ(envelope["verdict"], "fail");
  EXPECT_EQ(envelope["data"]["first_bad"]["commit"], commits_[5]) << envelope.dump();
  EXPECT_EQ(envelope["findings"][0]["id"], "bisect.sums_match.first_bad");
  EXPECT_LE(answer["content"][0]["text"].get<std::string>().size(), 32000u);
  // One notification at the start and one per build, step and round line: increasing.
  ASSERT_GE(progress.size(), 3u);
  for (size_t index = 1; index < progress.size(); ++index) {
    EXPECT_GT(progress[index], progress[index - 1]);
  }
  EXPECT_EQ(git(repo_, {"rev-parse", "HEAD"}), commits_[7]);
}

TEST_F(BisectCli, BadRequestsExitTwoNamingTheInput) {
  CliRun run = bisect({"--good", commits_[7], "--bad", commits_[0], "--gate", "sums_match"});
  EXPECT_EQ(run.exit_code, 2) << run.out;
  EXPECT_NE(run.out.find("is not an ancestor"), std::string::npos) << run.out;
  run = bisect({"--good", commits_[0], "--bad", commits_[7], "--gate", "no_such_gate"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.out.find("sums_match, chain_time"), std::string::npos) << run.out;
  run = bisect({"--good", "nonsense-rev", "--bad", commits_[7], "--gate", "sums_match"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.out.find("--good nonsense-rev"), std::string::npos) << run.out;
  run = bisect({"--over-values", "fault=0,1", "--gate", "sums_match", "--build", "true"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.out.find("does not mention {fault}"), std::string::npos) << run.out;
  // A good end at which the check gate already fails.
  run = bisect({"--good", commits_[5], "--bad", commits_[7], "--gate", "sums_match", "--build",
                build_command()});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.out.find("does not pass there"), std::string::npos) << run.out;
}

}  // namespace
}  // namespace loupe
