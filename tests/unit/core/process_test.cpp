#include "core/process.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
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

// Whether `pid` is gone within 30 s: a killed process leaves as soon as the kernel schedules it,
// which on a loaded machine can take longer than any short bound; at rest this returns at once.
bool gone_within_30s(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (process_alive(pid)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// Runs `spec`, whose child must print `lines` lines before its timeout fires for the test to mean
// anything (the pids it then checks, or the line saying its trap is set). On a loaded machine the
// shell may not get that far within a short timeout; then the run is repeated with the timeout
// doubled, at most 6 times (0.2-0.3 s at rest, up to 32 times that under load). The caller
// asserts on the last result as it would on one run.
ProcessResult run_until_printed(ProcessSpec spec, size_t lines) {
  ProcessResult result;
  for (int attempt = 0; attempt < 6; ++attempt) {
    result = run_process(spec);
    if (static_cast<size_t>(
            std::count(result.stdout_text.begin(), result.stdout_text.end(), '\n')) >= lines) {
      break;
    }
    spec.timeout *= 2;
  }
  return result;
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
  // A grace no loaded machine reaches: returning before it proves SIGTERM sufficed.
  spec.kill_grace = 60s;
  auto start = std::chrono::steady_clock::now();
  auto result = run_until_printed(spec, 1);
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(result.timed_out);
  EXPECT_FALSE(result.succeeded());
  EXPECT_EQ(result.term_signal, SIGTERM);
  // SIGTERM ends both sleeps at once, so the call returns long before timeout + grace.
  EXPECT_LT(elapsed, 60s);
  // The background sleep is dead too: gone, or a zombie waiting for init to reap it.
  ASSERT_FALSE(result.stdout_text.empty()) << "the shell never printed its background pid";
  pid_t background = std::stoi(result.stdout_text);
  EXPECT_TRUE(gone_within_30s(background))
      << "background child " << background << " survived the timeout";
}

TEST(ProcessTest, SigkillAfterGraceWhenSigtermIsIgnored) {
  auto spec = shell("trap '' TERM; echo ready; while :; do sleep 0.05; done");
  spec.timeout = 200ms;
  spec.kill_grace = 200ms;
  // "ready" comes after the trap is set: a run that timed out before it proves nothing.
  auto result = run_until_printed(spec, 1);
  EXPECT_TRUE(result.timed_out);
  EXPECT_EQ(result.term_signal, SIGKILL);
  EXPECT_EQ(result.stdout_text, "ready\n");
  EXPECT_NE(result.describe().find("timed out"), std::string::npos);
}

TEST(ProcessTest, LeftoverChildrenAreKilledWhenTheChildExits) {
  // The background sleep keeps stdout open; the call must not wait for it.
  auto spec = shell("sleep 100 & echo $!");
  // A grace no loaded machine reaches: returning before it proves SIGTERM sufficed.
  spec.kill_grace = 60s;
  auto start = std::chrono::steady_clock::now();
  auto result = run_process(spec);
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_FALSE(result.timed_out);
  EXPECT_LT(elapsed, 60s);
  pid_t background = std::stoi(result.stdout_text);
  EXPECT_TRUE(gone_within_30s(background))
      << "background child " << background << " outlived its parent";
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

TEST(ProcessTest, TimeoutKillsAGrandchildThatAlsoHangs) {
  // The child starts a shell that starts a sleep and prints both ids: a grandchild and a
  // great-grandchild, all in the child's process group.
  auto spec = shell("sh -c 'sleep 100 & echo $! $$; sleep 100' & sleep 100");
  spec.timeout = 300ms;
  auto result = run_until_printed(spec, 1);
  EXPECT_TRUE(result.timed_out);
  std::istringstream ids(result.stdout_text);
  pid_t sleeper = 0, grandchild = 0;
  ASSERT_TRUE(ids >> sleeper >> grandchild) << result.stdout_text;
  for (pid_t pid : {sleeper, grandchild}) {
    EXPECT_TRUE(gone_within_30s(pid)) << "descendant " << pid << " survived the timeout";
  }
}

TEST(ProcessTest, CountsDroppedBytes) {
  auto spec = shell("head -c 100000 /dev/zero; head -c 5000 /dev/zero >&2");
  spec.stdout_limit = 1000;
  spec.stderr_limit = 10;
  auto result = run_process(spec);
  EXPECT_EQ(result.stdout_dropped, 99000u);
  EXPECT_EQ(result.stderr_dropped, 4990u);
  EXPECT_FALSE(result.output_limit_exceeded);
}

TEST(ProcessTest, KillsAFloodingChildAtTheOutputLimit) {
  // `yes` never stops on its own; the limit ends it long before the timeout.
  auto spec = shell("yes flood");
  spec.stdout_limit = 64 << 10;
  spec.kill_at_output_limit = true;
  spec.timeout = 20s;
  auto start = std::chrono::steady_clock::now();
  auto result = run_process(spec);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_FALSE(result.timed_out);
  EXPECT_TRUE(result.output_limit_exceeded);
  EXPECT_EQ(result.term_signal, SIGKILL);
  EXPECT_EQ(result.stdout_text.size(), 64u << 10);
  EXPECT_EQ(result.stdout_text.substr(0, 12), "flood\nflood\n");
  EXPECT_GT(result.stdout_dropped, 0u);
  EXPECT_NE(result.describe().find("flooding stdout"), std::string::npos) << result.describe();
}

TEST(ProcessTest, MemoryLimitStopsAGroupThatAllocatesWithoutBound) {
  // tail keeps the last N bytes of its input in memory: it grows to about 1 GiB unless stopped.
  // The allocation happens in a grandchild, so only a group-wide sum sees it.
  auto spec = shell("head -c 1000000000 /dev/zero | tail -c 999999999 > /dev/null");
  spec.memory_limit_bytes = 64u << 20;
  spec.memory_poll = 10ms;
  spec.timeout = 60s;
  auto result = run_process(spec);
  EXPECT_FALSE(result.timed_out);
  EXPECT_TRUE(result.memory_limit_exceeded);
  EXPECT_EQ(result.term_signal, SIGKILL);
  EXPECT_GT(result.peak_resident_bytes, 64u << 20);
  EXPECT_NE(result.describe().find("memory limit"), std::string::npos) << result.describe();
}

TEST(ProcessTest, MemoryLimitLeavesASmallChildAlone) {
  auto spec = shell("echo small");
  spec.memory_limit_bytes = 512u << 20;
  auto result = run_process(spec);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_FALSE(result.memory_limit_exceeded);
  EXPECT_EQ(result.stdout_text, "small\n");
}

TEST(ProcessTest, GroupResidentBytesSumsTheGroup) {
  // This test process leads no group of its own under ctest, so ask about our own group.
  const auto resident = group_resident_bytes(static_cast<int>(::getpgrp()));
  ASSERT_TRUE(resident.has_value());
  EXPECT_GT(*resident, 0u);
  EXPECT_FALSE(group_resident_bytes(0x3fffffff).has_value());
}

TEST(ProcessTest, ParsesByteSizes) {
  EXPECT_EQ(parse_byte_size("--memory", "512M"), 512ull << 20);
  EXPECT_EQ(parse_byte_size("--memory", "2G"), 2ull << 30);
  EXPECT_EQ(parse_byte_size("--memory", "2GiB"), 2ull << 30);
  EXPECT_EQ(parse_byte_size("--memory", "100k"), 100ull << 10);
  EXPECT_EQ(parse_byte_size("--memory", "4096"), 4096u);
  for (const char* bad : {"", "M", "12X", "-5M", "0", "1.5G", "99999999999999999999"}) {
    try {
      parse_byte_size("--memory", bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kUsage);
      EXPECT_NE(error.message().find("--memory '" + std::string(bad) + "'"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace loupe

namespace loupe {
namespace {

// Issue 17: subjects inherited loupe's whole environment (an agent's tokens and keys included).
TEST(ProcessEnvironment, AnAllowlistPassesOnlyTheVariablesItAdmitsPlusTheExtraOnes) {
  ::setenv("LOUPE17_SECRET_TOKEN", "hunter2", 1);
  ::setenv("LC_LOUPE17", "kept", 1);
  ProcessSpec spec = shell_command("env");
  spec.env_allowlist = std::vector<std::string>{"PATH", "LC_*"};
  spec.extra_env = {{"OMP_NUM_THREADS", "1"}};
  const ProcessResult result = run_process(spec);
  ASSERT_TRUE(result.succeeded()) << result.describe();
  EXPECT_EQ(result.stdout_text.find("LOUPE17_SECRET_TOKEN"), std::string::npos);
  EXPECT_NE(result.stdout_text.find("LC_LOUPE17=kept\n"), std::string::npos);
  EXPECT_NE(result.stdout_text.find("OMP_NUM_THREADS=1\n"), std::string::npos);
  EXPECT_NE(result.stdout_text.find("PATH="), std::string::npos);
  // Without an allowlist, the whole environment passes (loupe bench --cmd).
  const ProcessResult whole = run_process(shell_command("env"));
  EXPECT_NE(whole.stdout_text.find("LOUPE17_SECRET_TOKEN=hunter2"), std::string::npos);
  ::unsetenv("LOUPE17_SECRET_TOKEN");
  ::unsetenv("LC_LOUPE17");
}

TEST(ProcessEnvironment, TheSubjectAllowlistKeepsDevicesLocaleAndThreadsNotSecrets) {
  const auto& allowed = subject_environment_allowlist();
  for (const char* name : {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "CUDA_VISIBLE_DEVICES",
                           "OMP_NUM_THREADS", "LD_LIBRARY_PATH", "ASAN_OPTIONS"}) {
    EXPECT_TRUE(environment_allowed(name, allowed)) << name;
  }
  for (const char* name : {"AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "ANTHROPIC_API_KEY",
                           "SSH_AUTH_SOCK", "LD_PRELOAD", "PATHOLOGICAL"}) {
    EXPECT_FALSE(environment_allowed(name, allowed)) << name;
  }
}

// Regression (issue 24, H200): `ncu ... loupe probe run BENCH -- kda probe` crashed the subject
// with SIGSEGV: ncu's injection reached it, the variables it connects with did not. These are what
// ncu 2025.3.1 adds to a program's environment.
TEST(ProcessEnvironment, NcuAroundLoupeReachesTheSubjectWithItsInjectionVariables) {
  const auto& allowed = subject_environment_allowlist();
  for (const char* name :
       {"NV_TPS_LAUNCH_TOKEN", "NV_NSIGHT_INJECTION_PORT_BASE",
        "NV_NSIGHT_INJECTION_TRANSPORT_TYPE", "NV_COMPUTE_PROFILER_PERFWORKS_DIR",
        "NV_CUDA_START_SUSPENDED", "NVIDIA_PROCESS_INJECTION_CRASH_REPORTING",
        "NVIDIA-PROCESS-TRACKING-CONFIGURATION", "NVIDIA-PROCESS-TRACKING-FILTER",
        "CUDA_INJECTION64_PATH"}) {
    EXPECT_TRUE(environment_allowed(name, allowed)) << name;
  }
  EXPECT_FALSE(environment_allowed("NVTOKEN", allowed));
}

}  // namespace
}  // namespace loupe
