// core/process.hpp — run a child process with a timeout, capturing its output.
//
// loupe runs subjects (`loupe probe run ... -- SUBJECT_CMD`) and whole commands (`loupe bench
// --cmd`) as children. Each child gets its own session and process group (setsid), so a timeout
// or the end of the child kills everything it started: SIGTERM to the group, then SIGKILL after
// a grace period. stdout and stderr are drained together with poll(2), so a child writing a lot
// to either never deadlocks, and each is kept up to a byte limit (the rest is read and dropped,
// counted, and the result says so; optionally the group is killed at the limit). A memory limit
// is enforced by polling the resident memory of every process in the group (/proc/PID/statm),
// never with RLIMIT_AS, which breaks CUDA and sanitizer builds that reserve huge address ranges.
// A process that leaves the group (setsid) escapes both the memory limit and the group kill.
// stdin is /dev/null.
// Thread-safety: run_process may be called from several threads at once; it starts the child
// with posix_spawn, which is safe in a multithreaded parent.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loupe {

struct ProcessSpec {
  // argv[0] is looked up in PATH when it has no '/'. REQUIRES: argv is not empty.
  std::vector<std::string> argv;
  // The child's working directory; the parent's when empty.
  std::optional<std::filesystem::path> working_dir;
  // Added to (or replacing in) the parent's environment: {"OMP_NUM_THREADS", "1"}.
  std::vector<std::pair<std::string, std::string>> extra_env;
  // When set, only the parent's variables it admits are passed on (names, or prefixes ending in
  // '*': "LC_*"); extra_env is added either way. Subjects get subject_environment_allowlist()
  // plus what their objective names, so loupe's secrets (tokens, keys) do not reach them.
  std::optional<std::vector<std::string>> env_allowlist;
  // Wall-clock limit; zero means none. When it expires the whole process group gets SIGTERM,
  // then SIGKILL after `kill_grace`.
  std::chrono::nanoseconds timeout{0};
  std::chrono::nanoseconds kill_grace = std::chrono::seconds(2);
  // Bytes of each stream kept; the rest is drained and dropped (ProcessResult::*_truncated).
  size_t stdout_limit = size_t{64} << 20;
  size_t stderr_limit = size_t{1} << 20;
  // When a stream goes past its limit, SIGKILL the group at once instead of draining the rest:
  // a subject that floods its output is misbehaving (ProcessResult::output_limit_exceeded).
  bool kill_at_output_limit = false;
  // Resident bytes of the whole process group, summed; zero means none. Polled every
  // `memory_poll`; above it the group gets SIGKILL (ProcessResult::memory_limit_exceeded).
  uint64_t memory_limit_bytes = 0;
  std::chrono::nanoseconds memory_poll = std::chrono::milliseconds(20);
};

// {"/bin/sh", "-c", command}: the command line as a shell would run it.
ProcessSpec shell_command(std::string command);

// The variables every subject gets from loupe's environment (docs/security.md): PATH, HOME,
// USER, LOGNAME, SHELL, TERM, TZ, LANG, LANGUAGE, LC_*, TMPDIR, TMP, TEMP, LD_LIBRARY_PATH,
// CUDA_*, NVIDIA_*, NCCL_*, CUBLAS_*, CUDNN_*, HIP_*, ROCR_*, OMP_*, OPENBLAS_*, MKL_*, GOMP_*,
// KMP_*, PYTHONPATH, PYTHONHOME, PYTHONDONTWRITEBYTECODE, VIRTUAL_ENV, CONDA_PREFIX, the
// sanitizers' *SAN_OPTIONS and LOUPE_*.
const std::vector<std::string>& subject_environment_allowlist();
// Whether `name` matches an entry of `allowlist` (a name, or a prefix ending in '*').
bool environment_allowed(std::string_view name, const std::vector<std::string>& allowlist);

struct ProcessResult {
  // Exactly one of exit_code and term_signal is set.
  std::optional<int> exit_code;    // the child's exit status, when it exited
  std::optional<int> term_signal;  // the signal that ended it, when one did
  bool timed_out = false;          // the timeout expired and loupe killed the group
  int64_t wall_ns = 0;             // from just before the spawn to the child being reaped
  std::string stdout_text;
  std::string stderr_text;
  bool stdout_truncated = false;
  bool stderr_truncated = false;
  uint64_t stdout_dropped = 0;  // bytes read past stdout_limit and dropped
  uint64_t stderr_dropped = 0;
  // kill_at_output_limit fired: the group was killed because a stream passed its limit.
  bool output_limit_exceeded = false;
  // memory_limit_bytes fired: the group was killed at `peak_resident_bytes`.
  bool memory_limit_exceeded = false;
  // The largest group resident memory seen by the polls (zero when no memory limit was set).
  uint64_t peak_resident_bytes = 0;

  // Exited with status 0 and did not time out.
  bool succeeded() const { return !timed_out && exit_code == 0; }
  // "exited with status 3", "killed by signal 11 (SIGSEGV)", "timed out after 5.000 s (killed)",
  // "killed at its memory limit ...", "killed for writing more than ... to stdout".
  std::string describe() const;
  // The last `max_lines` lines of stderr (at most `max_bytes`), for error messages.
  std::string stderr_tail(size_t max_lines = 10, size_t max_bytes = 2000) const;
};

// Runs the child to completion (or to its timeout) and returns what happened. A child that exits
// non-zero, dies by a signal or times out is a result, not an error. When the direct child ends,
// what it left running in its process group is killed the same way (SIGTERM, grace, SIGKILL), so
// nothing outlives the call.
// Throws Error(kSubject) when the child cannot be started (no such program, not executable, no
// such working directory), naming argv[0] and the reason.
ProcessResult run_process(const ProcessSpec& spec);

// The resident bytes of every live process whose process group is `group` (/proc/PID/statm,
// summed), or nullopt when no process is in the group any more.
std::optional<uint64_t> group_resident_bytes(int group);

// "512M", "2G", "100k", "1048576" (bytes; suffixes k, M, G, T are powers of 1024, an optional
// trailing "B" or "iB" is accepted). Throws Error(kUsage) naming `flag` and the text.
uint64_t parse_byte_size(const std::string& flag, const std::string& text);

}  // namespace loupe
