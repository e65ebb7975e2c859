#include "core/process.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "loupe/error.hpp"

namespace loupe {
namespace {

using namespace std::chrono_literals;

ProcessSpec shell(std::string command) { return shell_command(std::move(command)); }

// Alive means present in /proc and not a zombie.
bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  auto close_paren = line.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < line.size() &&
         line[close_paren + 2] != 'Z';
}

TEST(ProcessTest, CapturesStdoutAndStderrSeparately) {
  auto result = run_process(shell("printf out; printf err >&2"));
  EXPECT_TRUE(result.succeeded());
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_FALSE(result.term_signal.has_value());
  EXPECT_EQ(result.stdout_text, "out");
  EXPECT_EQ(result.stderr_text, "err");
  EXPECT_FALSE(result.stdout_truncated);
  EXPECT_FALSE(result.stderr_truncated);
  EXPECT_GT(result.wall_ns, 0);
}

TEST(ProcessTest, ReportsExitCode) {
  auto result = run_process(shell("exit 7"));
  EXPECT_FALSE(result.succeeded());
  EXPECT_EQ(result.exit_code, 7);
  EXPECT_FALSE(result.timed_out);
  EXPECT_NE(result.describe().find("exited with status 7"), std::string::npos);
}

TEST(ProcessTest, RunsArgvWithoutShell) {
  ProcessSpec spec;
  spec.argv = {"printf", "%s|%s", "a b", "c"};
  auto result = run_process(spec);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.stdout_text, "a b|c");
}

TEST(ProcessTest, ReportsSignalDeath) {
  auto result = run_process(shell("kill -SEGV $$"));
  EXPECT_FALSE(result.exit_code.has_value());
  EXPECT_EQ(result.term_signal, SIGSEGV);
  EXPECT_FALSE(result.succeeded());
  EXPECT_NE(result.describe().find("SIGSEGV"), std::string::npos);
}

TEST(ProcessTest, TimeoutKillsTheWholeGroup) {
  auto spec = shell("sleep 100 & echo $! ; sleep 100");
  spec.timeout = 300ms;
  spec.kill_grace = 2s;
  auto start = std::chrono::steady_clock::now();
  auto result = run_process(spec);
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(result.timed_out);
  EXPECT_FALSE(result.succeeded());
  EXPECT_EQ(result.term_signal, SIGTERM);
  // SIGTERM ends both sleeps at once, so the call returns long before timeout + grace.
  EXPECT_LT(elapsed, 2s);
  // The background sleep is dead too: gone, or a zombie waiting for init to reap it.
  pid_t background = std::stoi(result.stdout_text);
  bool gone = false;
  for (int attempt = 0; attempt < 200 && !gone; ++attempt) {
    gone = !process_alive(background);
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone) << "background child " << background << " survived the timeout";
}

TEST(ProcessTest, SigkillAfterGraceWhenSigtermIsIgnored) {
  auto spec = shell("trap '' TERM; echo ready; while :; do sleep 0.05; done");
  spec.timeout = 200ms;
  spec.kill_grace = 200ms;
  auto result = run_process(spec);
  EXPECT_TRUE(result.timed_out);
  EXPECT_EQ(result.term_signal, SIGKILL);
  EXPECT_EQ(result.stdout_text, "ready\n");
  EXPECT_NE(result.describe().find("timed out"), std::string::npos);
}

TEST(ProcessTest, LeftoverChildrenAreKilledWhenTheChildExits) {
  // The background sleep keeps stdout open; the call must not wait for it.
  auto spec = shell("sleep 100 & echo $!");
  spec.kill_grace = 2s;
  auto start = std::chrono::steady_clock::now();
  auto result = run_process(spec);
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_FALSE(result.timed_out);
  EXPECT_LT(elapsed, 2s);
  pid_t background = std::stoi(result.stdout_text);
  bool gone = false;
  for (int attempt = 0; attempt < 200 && !gone; ++attempt) {
    gone = !process_alive(background);
    if (!gone) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(gone) << "background child " << background << " outlived its parent";
}

TEST(ProcessTest, CapsOutputAndSaysSo) {
  auto spec = shell("head -c 100000 /dev/zero; head -c 5000 /dev/zero >&2");
  spec.stdout_limit = 1000;
  spec.stderr_limit = 10;
  auto result = run_process(spec);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.stdout_text.size(), 1000u);
  EXPECT_EQ(result.stderr_text.size(), 10u);
  EXPECT_TRUE(result.stdout_truncated);
  EXPECT_TRUE(result.stderr_truncated);
}

TEST(ProcessTest, LargeOutputOnBothStreamsDoesNotDeadlock) {
  // 8 MiB on each stream, interleaved: far beyond a pipe buffer, so reading only one stream at a
  // time would block the child forever.
  auto spec = shell(
      "i=0; while [ $i -lt 8 ]; do head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2; "
      "i=$((i+1)); done");
  spec.timeout = 60s;
  spec.stderr_limit = 16u << 20;
  auto result = run_process(spec);
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.stdout_text.size(), 8u << 20);
  EXPECT_EQ(result.stderr_text.size(), 8u << 20);
}

TEST(ProcessTest, WorkingDirectoryAndEnvironment) {
  auto dir = std::filesystem::temp_directory_path() / "loupe_process_test_dir";
  std::filesystem::create_directories(dir);
  auto spec = shell("pwd; printf '%s' \"$LOUPE_TEST_VALUE\"");
  spec.working_dir = dir;
  spec.extra_env = {{"LOUPE_TEST_VALUE", "forty two"}};
  auto result = run_process(spec);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.stdout_text, std::filesystem::canonical(dir).string() + "\nforty two");
  std::filesystem::remove_all(dir);
}

TEST(ProcessTest, ExtraEnvironmentReplacesTheParentsValue) {
  ::setenv("LOUPE_TEST_REPLACED", "parent", 1);
  auto spec = shell("printf '%s' \"$LOUPE_TEST_REPLACED\"");
  spec.extra_env = {{"LOUPE_TEST_REPLACED", "child"}};
  EXPECT_EQ(run_process(spec).stdout_text, "child");
  ::unsetenv("LOUPE_TEST_REPLACED");
}

TEST(ProcessTest, MissingProgramThrowsSubjectError) {
  ProcessSpec spec;
  spec.argv = {"/nonexistent/loupe-no-such-program"};
  try {
    run_process(spec);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kSubject);
    EXPECT_NE(error.message().find("/nonexistent/loupe-no-such-program"), std::string::npos);
  }
}

TEST(ProcessTest, MissingWorkingDirectoryThrows) {
  auto spec = shell("true");
  spec.working_dir = "/nonexistent/loupe-dir";
  EXPECT_THROW(run_process(spec), Error);
}

TEST(ProcessTest, EmptyArgvIsAUsageError) {
  try {
    run_process(ProcessSpec{});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
  }
}

TEST(ProcessTest, StdinIsEmpty) {
  auto result = run_process(shell("wc -c"));
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(std::stoi(result.stdout_text), 0);
}

TEST(ProcessTest, StderrTailKeepsTheLastLines) {
  ProcessResult result;
  result.stderr_text = "one\ntwo\nthree\nfour\n";
  EXPECT_EQ(result.stderr_tail(2), "three\nfour");
  EXPECT_EQ(result.stderr_tail(10), "one\ntwo\nthree\nfour");
  EXPECT_EQ(result.stderr_tail(1), "four");
  EXPECT_EQ(result.stderr_tail(10, 6), "e\nfour");
  result.stderr_text = "";
  EXPECT_EQ(result.stderr_tail(3), "");
}

}  // namespace
}  // namespace loupe
