// Child processes, shared mappings and the execution environment (see isolation.hpp).
#include "subject/isolation.hpp"
#include <dlfcn.h>

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cfenv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "loupe/error.hpp"

namespace loupe::subject {

SharedRegion::SharedRegion(size_t bytes, bool reserve) : size_(std::max<size_t>(bytes, 1)) {
  void* mapping = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS | (reserve ? 0 : MAP_NORESERVE), -1, 0);
  if (mapping == MAP_FAILED) {
    throw Error(ErrorCode::kSubject,
                "cannot map " + std::to_string(size_) +
                    " bytes of shared memory for a child path: " + std::strerror(errno));
  }
  data_ = static_cast<std::byte*>(mapping);
}

void SharedRegion::keep_from_later_children() {
  if (::madvise(data_, size_, MADV_DONTFORK) != 0) {
    throw Error(ErrorCode::kSubject, std::string("cannot keep a child's shared region from the "
                                                 "children forked after it (madvise): ") +
                                         std::strerror(errno));
  }
}

SharedRegion::~SharedRegion() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

int64_t harden_runtime_process() {
  const int64_t threads = thread_count(0);
  // Not dumpable: /proc/PID/mem, fd/ and environ of this process are closed to processes of the
  // same uid (the children), and ptrace is refused.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // Everything a child starts and orphans comes back to this process, to be found and killed.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  return threads;
}

// The hooks of at_path_process_exit (probe.hpp), run in fork_child's child before its _exit.
static std::vector<std::function<void()>>& path_process_exit_hooks() {
  static std::vector<std::function<void()>> hooks;
  return hooks;
}

static void run_path_process_exit_hooks() {
  auto& hooks = path_process_exit_hooks();
  while (!hooks.empty()) {
    std::function<void()> hook = std::move(hooks.back());
    hooks.pop_back();
    try {
      hook();
    } catch (...) {
    }
  }
}

pid_t fork_child(const std::function<int()>& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    throw Error(ErrorCode::kSubject,
                std::string("cannot fork a child for a path: ") + std::strerror(errno));
  }
  if (pid > 0) {
    ::setpgid(pid, pid);  // also in the child: whichever runs first
    return pid;
  }
  ::setpgid(0, 0);
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  // The child may be dumpable again (a debugger can attach to it); the runtime stays closed.
  ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  // Ends with the runtime: a child orphaned by a crash of the runtime does not run on.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  int code = 3;
  try {
    code = body();
  } catch (...) {
    code = 3;
  }
  run_path_process_exit_hooks();
  std::fflush(stderr);
  ::_exit(code);
}

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string process_name(pid_t pid) {
  std::string name = read_text("/proc/" + std::to_string(pid) + "/comm");
  while (!name.empty() && name.back() == '\n') name.pop_back();
  return name.empty() ? "?" : name;
}

// The fields of /proc/PID/stat after the command name; empty when the process is gone.
std::vector<std::string> stat_fields(pid_t pid) {
  const std::string text = read_text("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = text.rfind(')');
  std::vector<std::string> fields;
  if (close == std::string::npos) return fields;
  std::istringstream rest(text.substr(close + 1));
  std::string field;
  while (rest >> field) fields.push_back(field);
  return fields;  // fields[0] is the state (field 3 of the man page)
}

void kill_and_collect(std::vector<std::string>& strays, pid_t pid) {
  strays.push_back("pid " + std::to_string(pid) + " (" + process_name(pid) + ")");
  ::kill(pid, SIGKILL);
}

}  // namespace

std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> children;
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = ::opendir(task_dir.c_str());
  if (dir == nullptr) return children;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    std::istringstream list(read_text(task_dir + "/" + entry->d_name + "/children"));
    pid_t child = 0;
    while (list >> child) children.push_back(child);
  }
  ::closedir(dir);
  return children;
}

ChildEnd reap_child(pid_t pid, const std::vector<pid_t>& keep) {
  ChildEnd end;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    end.exited_zero = WEXITSTATUS(status) == 0;
    end.how = "exited with status " + std::to_string(WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    end.how = "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
              strsignal(WTERMSIG(status)) + ")";
  }
  // What it left: members of its process group, and orphans re-parented to this process.
  if (::kill(-pid, 0) == 0) {
    end.strays.push_back("process group " + std::to_string(pid));
    ::kill(-pid, SIGKILL);
  }
  for (int round = 0; round < 4; ++round) {
    std::vector<pid_t> orphans;
    for (pid_t orphan : children_of(::getpid())) {
      if (std::find(keep.begin(), keep.end(), orphan) == keep.end()) orphans.push_back(orphan);
    }
    if (orphans.empty()) break;
    for (pid_t orphan : orphans) {
      // Descendants first would be tidier; SIGKILL of the orphan re-parents its own children
      // to this process, which the next round finds.
      kill_and_collect(end.strays, orphan);
    }
    for (pid_t orphan : orphans) ::waitpid(orphan, nullptr, 0);
  }
  return end;
}

void kill_child(pid_t pid) {
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  (void)reap_child(pid);
}

int64_t thread_count(pid_t pid) {
  const std::string path =
      pid == 0 ? std::string("/proc/self/status") : "/proc/" + std::to_string(pid) + "/status";
  std::ifstream status(path);
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoll(line.substr(8));
  }
  return -1;
}

int64_t live_thread_count(pid_t pid) {
  const std::string task_dir =
      pid == 0 ? std::string("/proc/self/task") : "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = ::opendir(task_dir.c_str());
  if (dir == nullptr) return -1;
  int64_t live = 0;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    // Field 23 (vsize) of stat, counted from the one after the command's closing parenthesis.
    const std::string stat = read_text(task_dir + "/" + entry->d_name + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;  // the thread left between readdir and the read
    std::istringstream fields(stat.substr(close + 1));
    std::string field;
    for (int index = 3; index <= 23 && fields >> field; ++index) {
    }
    if (!field.empty() && field != "0") ++live;
  }
  ::closedir(dir);
  return live;
}

SyscallInterception syscall_interception(pid_t pid) {
  SyscallInterception found;
  const std::string path =
      pid == 0 ? std::string("/proc/self/status") : "/proc/" + std::to_string(pid) + "/status";
  std::ifstream status(path);
  std::string line;
  while (std::getline(status, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon);
    const char* value = line.c_str() + colon + 1;
    if (key == "Seccomp") {
      found.seccomp_mode = std::atoi(value);
      found.readable = true;
    } else if (key == "Seccomp_filters") {
      found.seccomp_filters = std::atoi(value);
    } else if (key == "TracerPid") {
      found.tracer = static_cast<pid_t>(std::atol(value));
    }
  }
  return found;
}

std::vector<std::string> interception_beyond(const SyscallInterception& baseline,
                                             const SyscallInterception& now) {
  std::vector<std::string> found;
  if (!now.readable) return found;
  const bool more_filters = now.seccomp_filters >= 0 && baseline.seccomp_filters >= 0
                                ? now.seccomp_filters > baseline.seccomp_filters
                                : now.seccomp_mode != baseline.seccomp_mode;
  if (now.seccomp_mode != 0 && (now.seccomp_mode != baseline.seccomp_mode || more_filters)) {
    static const char* modes[] = {"none", "strict", "filter"};
    const int mode = std::clamp(now.seccomp_mode, 0, 2);
    found.push_back("seccomp " + std::string(modes[mode]) + " mode" +
                    (now.seccomp_filters >= 0
                         ? " with " + std::to_string(now.seccomp_filters) + " filter(s)"
                         : std::string()) +
                    " (the runtime process: " + modes[std::clamp(baseline.seccomp_mode, 0, 2)] +
                    (baseline.seccomp_filters >= 0
                         ? ", " + std::to_string(baseline.seccomp_filters) + " filter(s)"
                         : std::string()) +
                    ")");
  }
  if (now.tracer != 0 && now.tracer != baseline.tracer) {
    found.push_back("traced by pid " + std::to_string(now.tracer) + " (" +
                    process_name(now.tracer) + ")");
  }
  return found;
}

double raw_clock_seconds(clockid_t clock) {
  timespec now{};
#if defined(__x86_64__) && defined(__linux__)
  // The system call itself (number 228 on x86-64): no symbol in between that the subject's
  // executable could define.
  long result = 0;
  asm volatile("syscall"
               : "=a"(result)
               : "0"(228L), "D"(static_cast<long>(clock)), "S"(&now)
               : "rcx", "r11", "memory");
  if (result != 0) return -1;
#else
  if (::clock_gettime(clock, &now) != 0) return -1;
#endif
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

std::vector<std::string> interposed_clocks() {
  // The object that holds an address: the executable for libloupe's own code (a static library).
  auto object_at = [](const void* address) -> std::string {
    Dl_info info{};
    if (address == nullptr || ::dladdr(address, &info) == 0 || info.dli_fname == nullptr) {
      return "";
    }
    return info.dli_fname;
  };
  const std::string executable = object_at(reinterpret_cast<const void*>(&interposed_clocks));
  // The first definition in the process's global scope (the executable comes first; libc's own
  // clock may resolve to the vDSO, which is not the subject's).
  std::vector<std::string> found;
  for (const char* clock :
       {"clock_gettime", "gettimeofday", "_ZNSt6chrono3_V212steady_clock3nowEv"}) {
    const std::string defined_in = object_at(::dlsym(RTLD_DEFAULT, clock));
    if (!executable.empty() && defined_in == executable) {
      found.push_back(std::string(clock) + " (defined in " + defined_in + ")");
    }
  }
  return found;
}

double process_cpu_seconds(pid_t pid) {
  // The kernel's clock id of a process's CPU time (MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)),
  // as clock_getcpuclockid computes it, without calling it.
  const clockid_t clock = static_cast<clockid_t>((~static_cast<uint32_t>(pid) << 3) | 2u);
  return raw_clock_seconds(clock);
}

double main_thread_cpu_seconds(pid_t pid) {
  const std::string id = std::to_string(pid);
  std::istringstream schedstat(read_text("/proc/" + id + "/task/" + id + "/schedstat"));
  double nanoseconds = 0;
  if (!(schedstat >> nanoseconds)) return 0.0;
  return nanoseconds * 1e-9;
}

double settled_process_cpu_seconds(pid_t pid, double max_wait_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(max_wait_s);
  while (std::chrono::steady_clock::now() < until) {
    const std::vector<std::string> fields = stat_fields(pid);
    if (fields.empty() || fields[0] != "R") break;
    ::sched_yield();
  }
  return process_cpu_seconds(pid);
}

std::map<pid_t, std::pair<std::string, double>> thread_cpu_seconds(pid_t pid) {
  std::map<pid_t, std::pair<std::string, double>> threads;
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = ::opendir(task_dir.c_str());
  if (dir == nullptr) return threads;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    const std::string base = task_dir + "/" + entry->d_name;
    std::istringstream schedstat(read_text(base + "/schedstat"));
    double nanoseconds = 0;
    if (!(schedstat >> nanoseconds)) continue;
    std::string name = read_text(base + "/comm");
    while (!name.empty() && name.back() == '\n') name.pop_back();
    threads[static_cast<pid_t>(std::stol(entry->d_name))] = {name, nanoseconds * 1e-9};
  }
  ::closedir(dir);
  return threads;
}

double waited_children_cpu_seconds(pid_t pid) {
  const std::vector<std::string> fields = stat_fields(pid);
  // cutime and cstime are fields 16 and 17 of the man page: [13] and [14] here.
  if (fields.size() < 15) return -1;
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  return (std::stod(fields[13]) + std::stod(fields[14])) / ticks;
}

ExecEnvironment capture_environment(pid_t pid) {
  ExecEnvironment environment;
  if (pid == 0) {
    environment.rounding = std::fegetround();
#if defined(__x86_64__) || defined(__i386__)
    // The control bits only: the exception flags (bits 0-5) change with ordinary arithmetic.
    environment.fp_control = _mm_getcsr() & ~uint32_t{0x3F};
    uint16_t x87 = 0;
    asm volatile("fnstcw %0" : "=m"(x87));
    environment.x87_control = x87;
#endif
    fenv_t whole;
    std::fegetenv(&whole);
    environment.fenv.resize(sizeof whole);
    std::memcpy(environment.fenv.data(), &whole, sizeof whole);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(pid, sizeof set, &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) environment.cpus.push_back(cpu);
    }
  }
  errno = 0;
  environment.nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(pid));
  const int policy = ::sched_getscheduler(pid);
  // SCHED_RESET_ON_FORK is a flag on the policy, not a policy.
  environment.policy = policy < 0 ? -1 : (policy & ~SCHED_RESET_ON_FORK);
  environment.threads = thread_count(pid);
  return environment;
}

namespace {

std::string rounding_name(int mode) {
  switch (mode) {
    case FE_TONEAREST:
      return "to-nearest";
    case FE_UPWARD:
      return "upward";
    case FE_DOWNWARD:
      return "downward";
    case FE_TOWARDZERO:
      return "toward-zero";
    default:
      return std::to_string(mode);
  }
}

std::string hex(uint32_t value) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "0x%04x", value);
  return buffer;
}

std::string policy_name(int policy) {
  switch (policy) {
    case SCHED_OTHER:
      return "SCHED_OTHER";
    case SCHED_BATCH:
      return "SCHED_BATCH";
    case SCHED_IDLE:
      return "SCHED_IDLE";
    case SCHED_FIFO:
      return "SCHED_FIFO";
    case SCHED_RR:
      return "SCHED_RR";
    default:
      return std::to_string(policy);
  }
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string text;
  for (int cpu : cpus) text += (text.empty() ? "" : ",") + std::to_string(cpu);
  return "{" + text + "}";
}

}  // namespace

std::vector<std::string> environment_changes(const ExecEnvironment& before,
                                             const ExecEnvironment& after) {
  std::vector<std::string> changes;
  if (before.rounding != after.rounding) {
    changes.push_back("rounding mode " + rounding_name(before.rounding) + " -> " +
                      rounding_name(after.rounding));
  }
  if (before.fp_control != after.fp_control) {
    std::string what = "MXCSR " + hex(before.fp_control) + " -> " + hex(after.fp_control);
    const uint32_t changed = before.fp_control ^ after.fp_control;
    if (changed & 0x8000u)
      what += " (flush-to-zero " + std::string(after.fp_control & 0x8000u ? "on" : "off") + ")";
    if (changed & 0x40u)
      what += " (denormals-are-zero " + std::string(after.fp_control & 0x40u ? "on" : "off") + ")";
    changes.push_back(what);
  }
  if (before.x87_control != after.x87_control) {
    changes.push_back("x87 control word " + hex(before.x87_control) + " -> " +
                      hex(after.x87_control));
  }
  if (before.cpus != after.cpus) {
    changes.push_back("CPU affinity " + cpu_list(before.cpus) + " -> " + cpu_list(after.cpus));
  }
  if (before.nice != after.nice) {
    changes.push_back("scheduling priority (nice) " + std::to_string(before.nice) + " -> " +
                      std::to_string(after.nice));
  }
  // A process that ended between the two readings reads -1: that is not a change of policy.
  if (before.policy != after.policy && before.policy >= 0 && after.policy >= 0) {
    changes.push_back("scheduling policy " + policy_name(before.policy) + " -> " +
                      policy_name(after.policy));
  }
  if (before.threads != after.threads) {
    changes.push_back("thread count " + std::to_string(before.threads) + " -> " +
                      std::to_string(after.threads));
  }
  return changes;
}

void restore_environment(const ExecEnvironment& environment) {
  if (environment.fenv.size() == sizeof(fenv_t)) {
    fenv_t whole;
    std::memcpy(&whole, environment.fenv.data(), sizeof whole);
    std::fesetenv(&whole);
  }
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr((_mm_getcsr() & 0x3Fu) | environment.fp_control);
#endif
  if (!environment.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : environment.cpus) CPU_SET(cpu, &set);
    ::sched_setaffinity(0, sizeof set, &set);
  }
  if (environment.policy >= 0 && ::sched_getscheduler(0) != environment.policy) {
    const sched_param none{};
    ::sched_setscheduler(0, environment.policy, &none);  // refused without RLIMIT_NICE headroom
  }
  ::setpriority(PRIO_PROCESS, 0, environment.nice);  // refused when lowering without privilege
}

}  // namespace loupe::subject

namespace loupe {

void at_path_process_exit(std::function<void()> hook) {
  subject::path_process_exit_hooks().push_back(std::move(hook));
}

}  // namespace loupe
