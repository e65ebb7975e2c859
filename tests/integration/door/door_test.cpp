// One door (issue 33): whichever front end runs a candidate, the same guards apply by default. The
// candidate of tests/subjects/replay_subject.cpp computes nothing and replays the outputs an
// earlier process (the recorder, run once at seed 7 before the tests) left in a fixed folder: it
// passes at seed 7 and must fail on the secret seed of the hidden run through `loupe run` and MCP
// run_objective as through `loupe probe run` (the Slurm executor's test is in
// tests/integration/slurm). Guards that are off say so in a warn finding; `--repeat 0` turns the
// secret repeats off.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "support/cli_run.hpp"
#include "support/scratch_dir.hpp"

namespace loupe {
namespace {

namespace fs = std::filesystem;
using test_support::CliRun;
using test_support::run_cli;
using test_support::run_loupe;

// The envelope's finding with this id, or null.
Json finding(const Json& envelope, const std::string& id) {
  for (const auto& found : envelope.value("findings", Json::array())) {
    if (found.value("id", "") == id) return found;
  }
  return nullptr;
}

// The observation.json of a `loupe probe run --json` point.
Json observation_of(const CliRun& run) {
  fs::path file = run.envelope.at("data").at("observation").get<std::string>();
  if (file.filename() != "observation.json") file /= "observation.json";
  std::ifstream in(file);
  return Json::parse(in);
}

class DoorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The earlier process: the recorder, at the seed the objective shows, leaves its outputs in
    // the subject's replay store (a folder of the build, readable inside the sandbox).
    const test_support::ScratchDir out("door-record");
    const CliRun record = run_cli({REPLAY_SUBJECT, "run", "replay_recorder", "--seed", "7", "--out",
                                   out.path().string(), "--json"});
    ASSERT_EQ(record.exit_code, 0) << record.out << record.err;
  }

  // An objective of the replay check at seed 7 and one gate over it.
  fs::path write_objective(const std::string& name, const std::string& gate,
                           const std::string& expr) const {
    const fs::path file = dir_.path() / (name + ".toml");
    std::ofstream(file) << "name = \"" << name
                        << "\"\n"
                           "[subject]\n"
                           "command = [\"" REPLAY_SUBJECT
                           "\"]\n"
                           "timeout_s = 60\n"
                           "[[check]]\n"
                           "name = \"replay\"\n"
                           "probe = \"replay_candidate\"\n"
                           "seed = 7\n"
                           "[[gate]]\n"
                           "name = \""
                        << gate << "\"\nexpr = \"" << expr << "\"\n";
    return file;
  }

  void SetUp() override {
    objective_ = write_objective("replay", "replay_passes", "check.replay passes");
    // The same check gated on a metric alone: at the shown seed the replay's rms_ratio is tiny,
    // so only the guard can fail it.
    metric_objective_ =
        write_objective("replay_metric", "replay_close", "check.replay.rms_ratio <= 1e-3");
  }

  CliRun probe_run(std::vector<std::string> flags) const {
    std::vector<std::string> args = {"probe",
                                     "run",
                                     "replay_candidate",
                                     "--seed",
                                     "7",
                                     "--home",
                                     (dir_.path() / "home").string(),
                                     "--json"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--", REPLAY_SUBJECT});
    return run_loupe(args);
  }

  test_support::ScratchDir dir_{"door"};
  fs::path objective_;
  fs::path metric_objective_;
};

// The replay is right at the seed it was recorded on: without the hidden run nothing catches it,
// and the run says that guard was off.
TEST_F(DoorTest, ReplayPassesTheShownSeedWhenTheHiddenRunIsOff) {
  const CliRun run = probe_run({"--no-hidden"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json off = finding(run.envelope, "check.replay_candidate.guard.hidden_off");
  ASSERT_TRUE(off.is_object()) << run.out;
  EXPECT_EQ(off.at("severity"), "warn");
  EXPECT_EQ(
      off.at("claim").get<std::string>().rfind("no hidden run (turned off by --no-hidden)", 0), 0u)
      << off.dump();
}

TEST_F(DoorTest, ProbeRunFailsTheReplayOnTheSecretSeed) {
  const CliRun run = probe_run({});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json hidden = finding(run.envelope, "check.replay_candidate.guard.hidden_point");
  ASSERT_TRUE(hidden.is_object()) << run.out;
  EXPECT_EQ(hidden.at("severity"), "fail");
  EXPECT_EQ(hidden.at("claim").get<std::string>().rfind(
                "the candidate passes at the point(s) it was shown", 0),
            0u)
      << hidden.dump();
}

TEST_F(DoorTest, LoupeRunFailsTheReplayOnTheSecretSeed) {
  const CliRun run =
      run_loupe({"run", objective_.string(), "--home", (dir_.path() / "home").string(), "--json"});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json hidden = finding(run.envelope, "check.replay_candidate.guard.hidden_point");
  ASSERT_TRUE(hidden.is_object()) << run.out;
  EXPECT_EQ(hidden.at("severity"), "fail");
  EXPECT_EQ(hidden.at("claim").get<std::string>().rfind(
                "the candidate passes at the point(s) it was shown", 0),
            0u)
      << hidden.dump();
  const Json& gates = run.envelope.at("data").at("gates");
  ASSERT_EQ(gates.size(), 1u);
  EXPECT_EQ(gates[0].at("verdict"), "fail");
  // The hidden run's observation lies inside the point's folder, its seed revealed there.
  const Json& task = run.envelope.at("data").at("tasks").at(0);
  const fs::path point = task.at("observation").get<std::string>();
  std::ifstream in(point / "hidden" / "observation.json");
  ASSERT_TRUE(in) << point;
  const Json observation = Json::parse(in);
  EXPECT_EQ(observation.at("hidden").at("secret_seed_only"), true);
  EXPECT_EQ(observation.at("hidden").at("seed"), observation.at("seed"));
  EXPECT_NE(observation.at("seed"), 7);
}

// A gate over a metric passes the replay (its rms_ratio at the shown seed is tiny); the failing
// guard fails the run all the same, leads the findings and is named.
TEST_F(DoorTest, LoupeRunFailsOnAFailingGuardWhateverItsGatesSay) {
  const std::string home = (dir_.path() / "home").string();
  const CliRun json = run_loupe({"run", metric_objective_.string(), "--home", home, "--json"});
  EXPECT_EQ(json.exit_code, 1) << json.out << json.err;
  EXPECT_EQ(json.envelope.at("verdict"), "fail");
  const Json& gates = json.envelope.at("data").at("gates");
  ASSERT_EQ(gates.size(), 1u);
  EXPECT_EQ(gates[0].at("verdict"), "pass");
  EXPECT_EQ(json.envelope.at("data").at("failed_guards"),
            Json::array({"check.replay_candidate.guard.hidden_point"}));
  EXPECT_EQ(json.envelope.at("findings").at(0).at("id"),
            "check.replay_candidate.guard.hidden_point");
  // Rendered again from the ledger, the run keeps its verdict.
  const CliRun report =
      run_loupe({"report", json.envelope.at("data").at("run").get<std::string>(), "--home", home});
  EXPECT_EQ(report.exit_code, 1) << report.out << report.err;
  const CliRun text = run_loupe({"run", metric_objective_.string(), "--home", home});
  EXPECT_EQ(text.exit_code, 1) << text.out << text.err;
  EXPECT_NE(text.out.find("guard failed: check.replay_candidate.guard.hidden_point (the run fails "
                          "whatever its gates say"),
            std::string::npos)
      << text.out;
}

// One hidden run per point: at its first repeat. The later repeats run the shown point alone and
// say where the hidden run was made; no guard.hidden_off for them (the guard is not off).
TEST_F(DoorTest, LoupeRunMakesOneHiddenRunPerPointAtItsFirstRepeat) {
  {
    std::ifstream in(objective_);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string seed_line = "seed = 7\n";
    text.replace(text.find(seed_line), seed_line.size(), seed_line + "repeats = 3\n");
    std::ofstream(objective_) << text;
  }
  const CliRun run =
      run_loupe({"run", objective_.string(), "--home", (dir_.path() / "home").string(), "--json"});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& tasks = run.envelope.at("data").at("tasks");
  ASSERT_EQ(tasks.size(), 3u) << tasks.dump();
  for (const auto& task : tasks) {
    const fs::path point = task.at("observation").get<std::string>();
    EXPECT_EQ(fs::exists(point / "hidden" / "observation.json"), task.at("repeat") == 0)
        << task.dump();
    // The shown point replays what the recorder left for seed 7: it passes at every repeat.
    EXPECT_EQ(task.at("verdict"), task.at("repeat") == 0 ? "fail" : "pass") << task.dump();
  }
  EXPECT_TRUE(finding(run.envelope, "check.replay_candidate.guard.hidden_off").is_null())
      << run.out;
  EXPECT_TRUE(finding(run.envelope, "check.replay_candidate.guard.hidden_point").is_object())
      << run.out;
}

// MCP run_objective: a client's request, answered by `loupe mcp` over stdio. The shell keeps the
// server's stdin open until the answer to the call (id 2) is out: at EOF the server cancels.
TEST_F(DoorTest, McpRunObjectiveFailsTheReplayOnTheSecretSeed) {
  const fs::path requests = dir_.path() / "requests.jsonl";
  const fs::path answers = dir_.path() / "answers.jsonl";
  std::ofstream(requests)
      << R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"door_test","version":"1"}}})"
      << "\n"
      << R"({"jsonrpc":"2.0","method":"notifications/initialized"})"
      << "\n"
      << R"({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_objective","arguments":{"objective":")"
      << metric_objective_.string() << R"("}}})"
      << "\n";
  const std::string script = "cd '" + dir_.path().string() + "' && { cat '" + requests.string() +
                             "'; while ! grep -q '\"id\":2,\"result\"' '" + answers.string() +
                             "' 2>/dev/null; do sleep 0.2; done; } | '" LOUPE_EXECUTABLE
                             "' mcp --home '" +
                             (dir_.path() / "home").string() + "' > '" + answers.string() + "'";
  const CliRun server = run_cli({"sh", "-c", script}, std::chrono::seconds(200));
  ASSERT_EQ(server.exit_code, 0) << server.err;
  std::ifstream in(answers);
  Json result;
  for (std::string line; std::getline(in, line);) {
    const Json message = Json::parse(line);
    if (message.value("id", Json()) == 2) result = message.at("result");
  }
  ASSERT_TRUE(result.is_object()) << server.err;
  const Json& envelope = result.at("structuredContent");
  // Gated on a metric alone: the guard fails the run, and leads the concise findings.
  EXPECT_EQ(envelope.at("verdict"), "fail") << envelope.dump();
  EXPECT_EQ(envelope.at("data").at("failed_guards"),
            Json::array({"check.replay_candidate.guard.hidden_point"}));
  const Json hidden = finding(envelope, "check.replay_candidate.guard.hidden_point");
  ASSERT_TRUE(hidden.is_object()) << envelope.dump();
  EXPECT_EQ(hidden.at("severity"), "fail");
  EXPECT_EQ(envelope.at("findings").at(0).at("id"), "check.replay_candidate.guard.hidden_point");
}

// `--repeat 0` turns every repeat off, the secret ones too, and says so; by default the candidate
// runs the 2 asked repeats and then secret ones.
TEST_F(DoorTest, RepeatZeroTurnsTheSecretRepeatsOff) {
  const CliRun none = probe_run({"--repeat", "0", "--no-hidden"});
  EXPECT_EQ(none.exit_code, 0) << none.out << none.err;
  EXPECT_FALSE(observation_of(none).at("check").contains("repeat")) << none.out;
  const Json off = finding(none.envelope, "check.replay_candidate.guard.secret_repeats_off");
  ASSERT_TRUE(off.is_object()) << none.out;
  EXPECT_EQ(off.at("severity"), "warn");

  const CliRun asked = probe_run({"--no-hidden"});
  EXPECT_EQ(asked.exit_code, 0) << asked.out << asked.err;
  const Json repeat = observation_of(asked).at("check").at("repeat");
  EXPECT_EQ(repeat.at("asked"), 2);
  EXPECT_GT(repeat.at("count").get<int>(), 2) << repeat.dump();
  EXPECT_TRUE(finding(asked.envelope, "check.replay_candidate.guard.secret_repeats_off").is_null());
}

TEST_F(DoorTest, NoSandboxIsAWarnFindingNamingWhy) {
  const CliRun run = probe_run({"--no-sandbox", "--no-hidden"});
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json off = finding(run.envelope, "check.replay_candidate.guard.sandbox_off");
  ASSERT_TRUE(off.is_object()) << run.out;
  EXPECT_EQ(off.at("severity"), "warn");
  EXPECT_EQ(off.at("claim").get<std::string>().rfind(
                "the subject ran outside the sandbox, turned off (--no-sandbox)", 0),
            0u)
      << off.dump();
  EXPECT_EQ(run.envelope.at("data").at("sandbox"), "turned off (--no-sandbox)");
}

}  // namespace
}  // namespace loupe
