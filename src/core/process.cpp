#include "core/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>

#include "loupe/error.hpp"

extern char** environ;

namespace loupe {
namespace {

using Clock = std::chrono::steady_clock;

// After SIGKILL, how long to keep reading pipes that something outside the group still holds.
constexpr auto kDrainAfterKill = std::chrono::seconds(1);
// Poll slice when the kernel has no pidfd_open (before Linux 5.3): bounds exit-detection latency.
constexpr int kFallbackPollMs = 1;

std::string errno_text(int error) { return std::strerror(error); }

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    reset();
    fd_ = std::exchange(other.fd_, -1);
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  Fd read_end;
  Fd write_end;
};

Pipe make_pipe(const std::string& program) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error(ErrorCode::kSubject,
                "cannot start '" + program + "': pipe2 failed: " + errno_text(errno),
                "the process may be out of file descriptors");
  }
  return {Fd(fds[0]), Fd(fds[1])};
}

// The parent's environment (only the variables `allowlist` admits, when given) with `extra`
// added; a name in `extra` replaces the parent's value.
std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& extra,
    const std::optional<std::vector<std::string>>& allowlist) {
  std::set<std::string> overridden;
  for (const auto& [name, value] : extra) overridden.insert(name);
  std::vector<std::string> entries;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    auto equals = text.find('=');
    std::string name(text.substr(0, equals));
    if (allowlist && !environment_allowed(name, *allowlist)) continue;
    if (!overridden.contains(name)) entries.emplace_back(text);
  }
  for (const auto& [name, value] : extra) entries.push_back(name + "=" + value);
  return entries;
}

// Appends what `fd` has to `out` up to `limit`, counting the rest in `dropped`; returns false at
// end of file.
bool read_available(int fd, std::string& out, size_t limit, bool& truncated, uint64_t& dropped) {
  std::array<char, 65536> buffer;
  for (;;) {
    ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got > 0) {
      size_t room = out.size() < limit ? limit - out.size() : 0;
      size_t keep = std::min(room, static_cast<size_t>(got));
      out.append(buffer.data(), keep);
      if (keep < static_cast<size_t>(got)) {
        truncated = true;
        dropped += static_cast<size_t>(got) - keep;
      }
      // One read per poll wake-up keeps both streams draining fairly.
      return true;
    }
    if (got == 0) return false;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    return false;  // EIO and the like: treat as end of stream
  }
}

std::string mebibytes(uint64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

std::string signal_name(int signal_number) {
  const char* abbrev = ::sigabbrev_np(signal_number);
  if (abbrev == nullptr) return "signal " + std::to_string(signal_number);
  return "signal " + std::to_string(signal_number) + " (SIG" + abbrev + ")";
}

}  // namespace

ProcessSpec shell_command(std::string command) {
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", std::move(command)};
  return spec;
}

std::string ProcessResult::describe() const {
  char seconds[64];
  std::snprintf(seconds, sizeof(seconds), "%.3f s", static_cast<double>(wall_ns) * 1e-9);
  if (timed_out) return std::string("timed out after ") + seconds + " (killed)";
  if (memory_limit_exceeded) {
    return "killed at its memory limit after " + std::string(seconds) +
           " (process group resident memory reached " + mebibytes(peak_resident_bytes) + ")";
  }
  if (output_limit_exceeded) {
    return std::string("killed after ") + seconds + " for flooding " +
           (stdout_truncated ? "stdout" : "stderr") + " past its limit (" +
           std::to_string(stdout_truncated ? stdout_dropped : stderr_dropped) + " bytes dropped)";
  }
  if (term_signal) return "killed by " + signal_name(*term_signal) + " after " + seconds;
  if (exit_code) return "exited with status " + std::to_string(*exit_code) + " after " + seconds;
  return "ended in an unknown state";
}

std::string ProcessResult::stderr_tail(size_t max_lines, size_t max_bytes) const {
  std::string_view text(stderr_text);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  size_t begin = text.size();
  size_t lines = 0;
  while (begin > 0) {
    size_t newline = text.rfind('\n', begin - 1);
    if (newline == std::string_view::npos) {
      begin = 0;
      break;
    }
    if (++lines == max_lines) {
      begin = newline + 1;
      break;
    }
    begin = newline;
  }
  std::string_view tail = text.substr(begin);
  if (tail.size() > max_bytes) tail = tail.substr(tail.size() - max_bytes);
  return std::string(tail);
}

std::optional<uint64_t> group_resident_bytes(int group) {
  static const uint64_t page_size = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  std::error_code error;
  std::filesystem::directory_iterator proc("/proc", error);
  if (error) return std::nullopt;
  bool any = false;
  uint64_t total = 0;
  for (const auto& entry : proc) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat("/proc/" + name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // it exited meanwhile
    // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so parse after the
    // last ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long parent = 0, process_group = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %ld %ld", &state, &parent, &process_group) != 3)
      continue;
    if (process_group != group || state == 'Z') continue;
    std::ifstream statm("/proc/" + name + "/statm");
    uint64_t size_pages = 0, resident_pages = 0;
    if (!(statm >> size_pages >> resident_pages)) continue;
    any = true;
    total += resident_pages * page_size;
  }
  if (!any) return std::nullopt;
  return total;
}

uint64_t parse_byte_size(const std::string& flag, const std::string& text) {
  auto bad = [&]() {
    return Error(ErrorCode::kUsage,
                 flag + " '" + text + "': expected a size in bytes such as 512M, 2G or 1048576",
                 "suffixes k, M, G, T are powers of 1024");
  };
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 15) throw bad();
  uint64_t value = std::stoull(text.substr(0, digits));
  std::string suffix = text.substr(digits);
  if (suffix == "B") suffix.clear();
  if (suffix.size() == 3 && suffix.substr(1) == "iB") suffix = suffix.substr(0, 1);
  if (suffix.size() == 2 && suffix[1] == 'B') suffix = suffix.substr(0, 1);
  int shift = 0;
  if (suffix == "k" || suffix == "K") {
    shift = 10;
  } else if (suffix == "M" || suffix == "m") {
    shift = 20;
  } else if (suffix == "G" || suffix == "g") {
    shift = 30;
  } else if (suffix == "T" || suffix == "t") {
    shift = 40;
  } else if (!suffix.empty()) {
    throw bad();
  }
  if (value == 0 || (shift > 0 && value > (uint64_t{1} << (63 - shift)))) throw bad();
  return value << shift;
}

ProcessResult run_process(const ProcessSpec& spec) {
  if (spec.argv.empty()) {
    throw Error(ErrorCode::kUsage, "cannot start a process: the command line is empty",
                "give the program to run and its arguments");
  }
  const std::string& program = spec.argv.front();
  if (spec.working_dir && !std::filesystem::is_directory(*spec.working_dir)) {
    throw Error(ErrorCode::kSubject,
                "cannot start '" + program + "': working directory '" + spec.working_dir->string() +
                    "' is not a directory",
                "create the directory or pass an existing one");
  }

  Pipe out_pipe = make_pipe(program);
  Pipe err_pipe = make_pipe(program);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attributes);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe.write_end.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe.write_end.get(), STDERR_FILENO);
  if (spec.working_dir) {
    posix_spawn_file_actions_addchdir_np(&actions, spec.working_dir->c_str());
  }
  // A new session makes the child leader of its own process group, so killing -pid reaches
  // everything it starts; default signal dispositions and an empty mask undo whatever the parent
  // (a test runner, a shell that ignores SIGPIPE) set up.
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int signal_number : {SIGPIPE, SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2}) {
    sigaddset(&defaults, signal_number);
  }
  sigset_t empty_mask;
  sigemptyset(&empty_mask);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setsigmask(&attributes, &empty_mask);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  std::vector<char*> argv_pointers;
  for (const auto& argument : spec.argv)
    argv_pointers.push_back(const_cast<char*>(argument.c_str()));
  argv_pointers.push_back(nullptr);
  std::vector<std::string> environment = child_environment(spec.extra_env, spec.env_allowlist);
  std::vector<char*> env_pointers;
  for (auto& entry : environment) env_pointers.push_back(entry.data());
  env_pointers.push_back(nullptr);

  ProcessResult result;
  const auto start = Clock::now();
  pid_t pid = -1;
  int spawn_error = ::posix_spawnp(&pid, program.c_str(), &actions, &attributes,
                                   argv_pointers.data(), env_pointers.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (spawn_error != 0) {
    throw Error(ErrorCode::kSubject, "cannot start '" + program + "': " + errno_text(spawn_error),
                "check that the program exists, is executable and is on PATH");
  }
  out_pipe.write_end.reset();
  err_pipe.write_end.reset();
  ::fcntl(out_pipe.read_end.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(err_pipe.read_end.get(), F_SETFL, O_NONBLOCK);

  Fd pid_fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));

  bool out_open = true;
  bool err_open = true;
  bool child_exited = false;  // a zombie until reaped at the end, which keeps the group id taken
  int wait_status = 0;
  bool reaped = false;
  std::optional<Clock::time_point> deadline;
  if (spec.timeout.count() > 0) deadline = start + spec.timeout;
  std::optional<Clock::time_point> kill_at;  // SIGKILL the group then
  std::optional<Clock::time_point> give_up;  // stop reading pipes then
  bool terminated = false;
  bool killed = false;
  const bool watch_memory = spec.memory_limit_bytes > 0;
  std::optional<Clock::time_point> next_memory_poll;
  if (watch_memory) next_memory_poll = start;

  auto terminate_group = [&](Clock::time_point now) {
    if (terminated) return;
    terminated = true;
    ::kill(-pid, SIGTERM);
    kill_at = now + spec.kill_grace;
  };
  auto kill_group = [&](Clock::time_point now) {
    if (killed) return;
    killed = true;
    ::kill(-pid, SIGKILL);
    give_up = now + kDrainAfterKill;
  };
  auto note_exit = [&](Clock::time_point now) {
    child_exited = true;
    result.wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - start).count();
    // Whatever the child left running in its group goes too. Only while the child is an unreaped
    // zombie does the group id stay ours; once reaped it could be reused.
    if (!reaped) {
      terminate_group(now);
    } else {
      // Without a pidfd the group cannot be signalled safely any more; stop waiting for pipes
      // that something it left behind still holds after the grace period.
      give_up = now + spec.kill_grace;
    }
  };

  while (!child_exited || out_open || err_open) {
    auto now = Clock::now();
    if (!child_exited && deadline && now >= *deadline) {
      result.timed_out = true;
      deadline.reset();
      terminate_group(now);
    }
    if (kill_at && now >= *kill_at) {
      kill_at.reset();
      kill_group(now);
    }
    if (give_up && now >= *give_up && child_exited) break;
    if (next_memory_poll && now >= *next_memory_poll) {
      next_memory_poll.reset();
      if (!child_exited && !killed) {
        const std::optional<uint64_t> resident = group_resident_bytes(pid);
        if (resident) {
          result.peak_resident_bytes = std::max(result.peak_resident_bytes, *resident);
          if (*resident > spec.memory_limit_bytes) {
            // SIGKILL at once: a grace period is time to allocate more.
            result.memory_limit_exceeded = true;
            terminated = true;
            kill_group(now);
          }
        }
        if (!killed) next_memory_poll = now + spec.memory_poll;
      }
    }

    std::optional<Clock::time_point> wake;
    for (const auto& candidate : {deadline, kill_at, give_up, next_memory_poll}) {
      if (candidate && (!wake || *candidate < *wake)) wake = candidate;
    }
    int timeout_ms = -1;
    if (wake) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*wake - now).count();
      timeout_ms = static_cast<int>(std::max<int64_t>(left, 0));
    }
    const bool watch_pid_fd = pid_fd.get() >= 0 && !child_exited;
    if (pid_fd.get() < 0 && !child_exited) {
      timeout_ms = timeout_ms < 0 ? kFallbackPollMs : std::min(timeout_ms, kFallbackPollMs);
    }

    std::array<pollfd, 3> fds{};
    fds[0] = {out_open ? out_pipe.read_end.get() : -1, POLLIN, 0};
    fds[1] = {err_open ? err_pipe.read_end.get() : -1, POLLIN, 0};
    fds[2] = {watch_pid_fd ? pid_fd.get() : -1, POLLIN, 0};
    int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      int error = errno;
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      throw Error(ErrorCode::kInternal,
                  "poll failed while running '" + program + "': " + errno_text(error));
    }
    if (ready > 0) {
      if (fds[0].revents != 0) {
        out_open = read_available(fds[0].fd, result.stdout_text, spec.stdout_limit,
                                  result.stdout_truncated, result.stdout_dropped);
      }
      if (fds[1].revents != 0) {
        err_open = read_available(fds[1].fd, result.stderr_text, spec.stderr_limit,
                                  result.stderr_truncated, result.stderr_dropped);
      }
      if (spec.kill_at_output_limit && (result.stdout_truncated || result.stderr_truncated) &&
          !child_exited && !killed && !result.timed_out && !result.memory_limit_exceeded) {
        result.output_limit_exceeded = true;
        terminated = true;
        kill_group(Clock::now());
      }
      if (fds[2].revents != 0) note_exit(Clock::now());
    }
    if (pid_fd.get() < 0 && !child_exited) {
      pid_t got = ::waitpid(pid, &wait_status, WNOHANG);
      if (got == pid) {
        // Without a pidfd the child is reaped here; its group id may then be reused, so the
        // group is signalled only while it may still hold members we started.
        reaped = true;
        note_exit(Clock::now());
      }
    }
  }
  if (!reaped) {
    // Anything still in the group (it got SIGTERM when the child ended) goes now, before the
    // reap gives the group id back.
    if (!killed) ::kill(-pid, SIGKILL);
    while (::waitpid(pid, &wait_status, 0) < 0 && errno == EINTR) {
    }
  }

  if (WIFEXITED(wait_status)) {
    result.exit_code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    result.term_signal = WTERMSIG(wait_status);
  }
  return result;
}

const std::vector<std::string>& subject_environment_allowlist() {
  static const std::vector<std::string> names = {
      // Finding programs and libraries, the user and the locale.
      "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TZ", "LANG", "LANGUAGE", "LC_*",
      "TMPDIR", "TMP", "TEMP", "LD_LIBRARY_PATH",
      // Accelerators and numeric libraries: which device, how many threads.
      "CUDA_*", "NVIDIA_*", "NCCL_*", "CUBLAS_*", "CUDNN_*", "HIP_*", "ROCR_*", "OMP_*",
      "OPENBLAS_*", "MKL_*", "GOMP_*", "KMP_*",
      // NVIDIA's profilers around loupe (ncu ... loupe probe run): their injection reaches the
      // subject through the driver, and without these (NV_TPS_LAUNCH_TOKEN, NV_NSIGHT_INJECTION_*,
      // NVIDIA-PROCESS-TRACKING-*) it cannot connect: the subject crashed (SIGSEGV, H200).
      "NV_*", "NVIDIA-*",
      // Python subjects, and sanitizer builds (their reports must reach the test).
      "PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV", "CONDA_PREFIX",
      "ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS", "MSAN_OPTIONS", "LOUPE_*"};
  return names;
}

bool environment_allowed(std::string_view name, const std::vector<std::string>& allowlist) {
  for (const auto& pattern : allowlist) {
    if (!pattern.empty() && pattern.back() == '*') {
      const std::string_view prefix(pattern.data(), pattern.size() - 1);
      if (name.substr(0, prefix.size()) == prefix) return true;
    } else if (name == pattern) {
      return true;
    }
  }
  return false;
}

}  // namespace loupe
