// Subject isolation: a subject that hangs (with a grandchild), floods stdout or stderr, or
// allocates without bound is stopped, named in a finding, and makes `loupe probe run` exit 3.
// Each case takes under a few seconds.
#include <signal.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "loupe_cli.hpp"

namespace loupe::adversarial {
namespace {

using namespace std::chrono_literals;

bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close_paren = line.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < line.size() &&
         line[close_paren + 2] != 'Z';
}

// Whether `pid` is gone within 30 s: a killed process leaves as soon as the kernel schedules it,
// which on a loaded machine can take longer than any short bound; at rest this returns at once.
bool gone_soon(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (process_alive(pid)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

using IsolationTest = LoupeCliTest;

TEST_F(IsolationTest, HungSubjectAndItsGrandchildAreKilledAtTheTimeout) {
  // Outside the sandbox: the pids the subject prints must be this namespace's to be checked.
  // The subject must print them before the timeout fires for the run to show anything; on a
  // loaded machine it may not start that fast, so a run without them is repeated with the
  // timeout quadrupled, at most twice (1 s at rest, 16 s at most). The last run is asserted.
  CliRun run;
  for (const char* timeout_s : {"1", "4", "16"}) {
    run = probe_run(UNRULY_SUBJECT, {"hang", "--timeout", timeout_s, "--no-sandbox"});
    if (run.exit_code == 3 && run.out.find("pids ") != std::string::npos) break;
  }
  EXPECT_EQ(run.exit_code, 3) << run.out << run.err;
  EXPECT_EQ(run.envelope.at("verdict"), "error");
  EXPECT_EQ(run.envelope.at("error").at("code"), "subject");
  const Json& timeout = run.envelope.at("findings").at(0);
  EXPECT_EQ(timeout.at("id"), "scenario.hang.subject.timeout");
  EXPECT_EQ(timeout.at("severity"), "fail");
  // The subject printed its pid and its child's before hanging: both must be gone.
  const std::string message = run.envelope.at("error").at("message");
  const size_t at = message.find("pids ");
  ASSERT_NE(at, std::string::npos) << message;
  std::istringstream pids(message.substr(at + 5));
  pid_t subject = 0, grandchild = 0;
  ASSERT_TRUE(pids >> subject >> grandchild) << message;
  EXPECT_TRUE(gone_soon(subject)) << "subject " << subject << " survived";
  EXPECT_TRUE(gone_soon(grandchild)) << "grandchild " << grandchild << " survived";
}

TEST_F(IsolationTest, FloodingStdoutIsCappedAndKilled) {
  const CliRun run = probe_run(UNRULY_SUBJECT, {"flood_stdout", "--timeout", "30"});
  EXPECT_EQ(run.exit_code, 3) << run.out.substr(0, 2000) << run.err;
  const Json& capped = run.envelope.at("findings").at(0);
  EXPECT_EQ(capped.at("id"), "scenario.flood_stdout.subject.output_capped");
  EXPECT_NE(capped.at("claim").get<std::string>().find("flooded stdout past the 1048576-byte"),
            std::string::npos)
      << capped.dump();
  // loupe's own output stays small: the flood is not echoed.
  EXPECT_LT(run.out.size(), 20000u);
}

TEST_F(IsolationTest, FloodingStderrIsCappedWithANoteOfTheBytesDropped) {
  const CliRun run = probe_run(UNRULY_SUBJECT, {"flood_stderr", "--timeout", "30"});
  EXPECT_EQ(run.exit_code, 3) << run.out.substr(0, 2000);
  const Json& capped = run.envelope.at("findings").at(0);
  EXPECT_EQ(capped.at("id"), "scenario.flood_stderr.subject.output_capped");
  // The kept stderr lies next to the observation, with the note at its end.
  std::string stderr_file;
  for (const auto& file : capped.at("evidence").at("files")) {
    if (file.get<std::string>().ends_with("stderr.txt")) stderr_file = file;
  }
  ASSERT_FALSE(stderr_file.empty()) << capped.dump();
  std::ifstream in(stderr_file);
  std::stringstream text;
  text << in.rdbuf();
  const std::string kept = text.str();
  EXPECT_GE(kept.size(), 1048576u);
  EXPECT_LT(kept.size(), 1048576u + 200u);
  EXPECT_NE(kept.find("[loupe: stderr capped at 1048576 bytes; "), std::string::npos);
}

TEST_F(IsolationTest, UnboundedAllocationIsStoppedByTheMemoryLimit) {
  const CliRun run = probe_run(UNRULY_SUBJECT, {"grow", "--memory", "128M", "--timeout", "60"});
  EXPECT_EQ(run.exit_code, 3) << run.out << run.err;
  const Json& memory = run.envelope.at("findings").at(0);
  EXPECT_EQ(memory.at("id"), "scenario.grow.subject.memory_limit");
  EXPECT_NE(memory.at("claim").get<std::string>().find("above the 134217728-byte --memory limit"),
            std::string::npos)
      << memory.dump();
  double peak = 0;
  for (const auto& metric : memory.at("evidence").at("metrics").items()) {
    if (metric.key() == "peak_resident_bytes") peak = metric.value();
  }
  EXPECT_GT(peak, 134217728.0) << memory.dump();
}

TEST_F(IsolationTest, BadMemorySizeIsAUsageError) {
  const CliRun run = probe_run(UNRULY_SUBJECT, {"grow", "--memory", "lots"});
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.envelope.at("error").at("message").get<std::string>().find(
                "--memory 'lots': expected a size in bytes"),
            std::string::npos)
      << run.out;
}

}  // namespace
}  // namespace loupe::adversarial
