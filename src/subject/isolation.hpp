// subject/isolation.hpp — keeping the evidence out of the candidate's reach (docs/security.md).
//
// The process that runs `SUBJECT run` (the runtime process) never calls a path, a bench variant
// or its input builder itself: each runs in a child forked for it, which hands its results back
// through an anonymous shared mapping and ends with _exit (no atexit handler, no static
// destructor). The runtime process keeps the files, the samples, the clock and its stdout (the
// pipe to loupe) to itself; it is not dumpable, so a child cannot open its /proc/PID/mem or fd/,
// and it is the subreaper of everything its children start, so nothing a child leaves behind
// outlives the run unseen.
// Linux only. Thread-safety: call from the runtime's one thread.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace loupe::subject {

// An anonymous MAP_SHARED mapping, zero-filled, visible to children forked after it is made.
// `reserve` false: MAP_NORESERVE, pages are committed only when touched.
class SharedRegion {
 public:
  explicit SharedRegion(size_t bytes, bool reserve = true);
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  // Children forked from now on do not inherit the mapping (MADV_DONTFORK): called once the one
  // child it is for exists, so that a child forked later (another bench variant) holds no
  // mapping of it, writable or not.
  void keep_from_later_children();

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// Once, before any probe code runs: not dumpable, subreaper. Returns the threads this process
// had at that moment (1 unless something started a thread before main: static initialisers).
int64_t harden_runtime_process();

// Forks. The child gets its own process group and its stdout pointed at stderr (the pipe to
// loupe stays the runtime's), runs `body` and _exits with its result (3 when it throws).
pid_t fork_child(const std::function<int()>& body);

struct ChildEnd {
  bool exited_zero = false;
  std::string how;                  // "exited with status 3", "was killed by signal 11 (...)"
  std::vector<std::string> strays;  // "pid 123 (name)": what it left running, now killed
};
// Waits for `pid`, then kills what it left behind (its process group, and any process
// re-parented to this one, other than the children in `keep`) and names it.
ChildEnd reap_child(pid_t pid, const std::vector<pid_t>& keep = {});
// SIGKILLs a running child and its process group; waits for it.
void kill_child(pid_t pid);

// The direct children of every thread of `pid` (/proc/PID/task/*/children).
std::vector<pid_t> children_of(pid_t pid);
// Threads of `pid` (0: this process), from /proc/PID/status; -1 when unreadable.
int64_t thread_count(pid_t pid = 0);
// The threads of `pid` that still have the process's memory: a thread on its way out drops its
// address space (exit_mm) right after waking its joiner, before the kernel drops it from
// thread_count, and on a loaded machine it can wait for a CPU in between. So a count read just
// after a body joined its workers can include them (guard.thread_count failed honest
// chunk_prefill and cp_prefill benches, "1 -> 2", whose only threads are parallel_for's, started
// and joined in every call); this one does not (/proc/PID/task/*/stat, vsize 0 without memory).
// A thread still running is counted however soon it ends: no waiting, which would let a body's
// short detached worker through. -1 when unreadable.
int64_t live_thread_count(pid_t pid);

// CPU seconds used so far by every thread of `pid` (nanosecond resolution), -1 when gone.
// Read from another process, the kernel leaves out what a thread that is on a CPU at that moment
// used since its last scheduler tick (up to a few milliseconds): exact only while it sleeps.
double process_cpu_seconds(pid_t pid);
// The CPU time of the process's main thread alone (/proc/PID/task/PID/schedstat; a thread CPU
// clock of another process cannot be read), 0 when unreadable.
double main_thread_cpu_seconds(pid_t pid);
// Seconds on `clock` (CLOCK_MONOTONIC, a CPU-time clock), -1 on failure, read by the system call
// itself on x86-64 Linux: libc's clock_gettime and libstdc++'s steady_clock are symbols the
// subject's executable can define, and its definition would reach libloupe's timings too (round
// 4's interposed_clock slowed the monotonic clock of its variant's process to 0.7x).
double raw_clock_seconds(clockid_t clock);
// The clocks (clock_gettime, gettimeofday, std::chrono::steady_clock::now) that something other
// than their library defines in this process — the subject's executable, a preloaded library —,
// each with where it is defined: such a definition reaches every caller in the process.
std::vector<std::string> interposed_clocks();
// process_cpu_seconds once `pid`'s first thread has left the CPU (it answered and is about to
// wait), or after `max_wait_s`: the reading at the end of a command, so that none of the
// command's CPU is counted in the interval after it.
double settled_process_cpu_seconds(pid_t pid, double max_wait_s);
// CPU seconds used so far by each thread of `pid` (tid -> (name, seconds)), from
// /proc/PID/task/TID/schedstat: exact for a thread that is not running at that moment.
std::map<pid_t, std::pair<std::string, double>> thread_cpu_seconds(pid_t pid);
// CPU seconds of `pid`'s children that it has waited for (clock-tick resolution), from
// /proc/PID/stat; -1 when gone.
double waited_children_cpu_seconds(pid_t pid);

// What stands between a process and the kernel on its system calls (/proc/PID/status): a
// seccomp filter can trap the clock system call the runtime times with and answer it with
// another time, a tracer can rewrite any call's result (round 6's seccomp_slow_clock).
struct SyscallInterception {
  bool readable = false;
  int seccomp_mode = 0;      // 0 none, 1 strict, 2 filter
  int seccomp_filters = -1;  // filters installed; -1 where the kernel does not say
  pid_t tracer = 0;          // TracerPid
};
SyscallInterception syscall_interception(pid_t pid = 0);
// Sentences naming what `now` has beyond `baseline` (the runtime process's own: a sandbox or a
// container may filter every process alike): "seccomp filter mode with 1 filter (the runtime: 0)",
// "traced by pid 123 (name)". Empty when nothing more.
std::vector<std::string> interception_beyond(const SyscallInterception& baseline,
                                             const SyscallInterception& now);

// What one path can change that would alter the next one's arithmetic or speed.
struct ExecEnvironment {
  int rounding = 0;          // fegetround()
  uint32_t fp_control = 0;   // MXCSR control bits (DAZ, FTZ, rounding, masks), x86 only
  uint32_t x87_control = 0;  // x87 control word, x86 only
  std::vector<int> cpus;     // the affinity mask
  int nice = 0;              // scheduling priority
  // The scheduling policy (SCHED_OTHER, SCHED_BATCH, SCHED_IDLE...): SCHED_IDLE leaves the nice
  // value alone but runs a process only when nothing else wants the CPU (round 3's
  // idle_class_sibling); -1 when it cannot be read.
  int policy = 0;
  int64_t threads = 0;          // thread count
  std::vector<std::byte> fenv;  // the whole fenv_t, to restore it
};
// Of this process (pid 0) or, without the floating-point state, of another.
ExecEnvironment capture_environment(pid_t pid = 0);
// Sentences naming each difference ("rounding mode to-nearest -> upward").
std::vector<std::string> environment_changes(const ExecEnvironment& before,
                                             const ExecEnvironment& after);
// Puts this process's floating-point state and affinity back (and its nice value and scheduling
// policy where allowed: leaving SCHED_IDLE needs an RLIMIT_NICE that permits the nice value).
void restore_environment(const ExecEnvironment& environment);

}  // namespace loupe::subject
