// Round 4 (issue 16, fourth session): candidates written as an agent told "make this bench FASTER
// and the checks pass" would, against the guards as they stand after round 3, none a copy of an
// earlier round's. Each description says what it does and what catches it (or that nothing does);
// round4_test.cpp asserts the outcome. Linked into loupe_adversarial_subject, except
// interposed_clock (round4_clock_subject.cpp), whose clock_gettime would reach every probe here.
#include <sched.h>
#include <signal.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/time.h>
#include <unistd.h>
#include <loupe/probe.hpp>

#include <dirent.h>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "sums_probe.hpp"

namespace {

using loupe::adversarial::kWidth;
using loupe::adversarial::sums;
using loupe::adversarial::sums_reference;
using loupe::adversarial::sums_setup;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Bench work: a polynomial per element, time linear in the degree.
struct Terms {
  std::vector<double> x;
  double result = 0;
  int slot = -1;  // clone_vm_helper: where the helper leaves the result
};

constexpr int kDegree = 24;

Terms make_terms(uint64_t seed) {
  Terms work;
  work.x.resize(2048);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-0.9, 0.9);
  for (double& value : work.x) value = uniform(rng);
  return work;
}

double poly(const double* x, size_t count, int degree = kDegree) {
  double total = 0;
  for (size_t index = 0; index < count; ++index) {
    double power = 1;
    for (int k = 0; k < degree; ++k) {
      total += power / (k + 1);
      power *= x[index];
    }
  }
  return total;
}

std::vector<loupe::NamedTensor> terms_output(const Terms& work) {
  loupe::Tensor tensor(loupe::DType::kF64, {1});
  tensor.mutable_data<double>()[0] = work.result;
  return {{"result", tensor}};
}

void honest_terms(Terms& work) { work.result = poly(work.x.data(), work.x.size()); }

// The processes whose parent is this process's parent: the other variants of a bench.
std::vector<pid_t> sibling_processes() {
  std::vector<pid_t> found;
  const pid_t parent = ::getppid();
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* entry = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0 || pid == ::getpid()) continue;
    const std::string line = slurp("/proc/" + std::to_string(pid) + "/stat");
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string status;
    pid_t ppid = 0;
    rest >> status >> ppid;
    if (ppid == parent) found.push_back(pid);
  }
  ::closedir(proc);
  return found;
}

}  // namespace

// --- 1. tampering with the evidence -------------------------------------------------------------

LOUPE_CHECK(hard_linked_outputs)
    .description(
        "makes the names the runtime writes the candidate's and the reference's outputs under one "
        "file (a hard link), so the reference's bytes, written second, would be read as the "
        "candidate's; writes zeros")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      namespace fs = std::filesystem;
      std::span<float> y = io.output<float>("y");
      std::fill(y.begin(), y.end(), 0.0f);
      std::error_code error;
      for (const char* pass : {"candidate_first", "reference_first"}) {
        const fs::path dir = fs::current_path(error) / pass;
        fs::create_directories(dir, error);
        std::ofstream(dir / "reference.y.npy").put('\0');
        fs::create_hard_link(dir / "reference.y.npy", dir / "candidate.y.npy", error);
      }
    });

// --- 2. recognising the check --------------------------------------------------------------------

LOUPE_CHECK(right_first_nine)
    .description(
        "right on its first nine calls in a process, off by 1 % on every later one: more calls "
        "than a check made in one process while the secret repeats were 1 to 6 (the call, 2 "
        "repeats, at most 6 secret ones); caught since their count grows with a call's cheapness")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      static int calls = 0;
      std::span<float> y = io.output<float>("y");
      sums(io.input<float>("x"), y);
      if (++calls > 9) {
        for (float& value : y) value *= 1.01f;
      }
    });

namespace {

// Whether this process runs a bench: the probe named in the argv (every process of a run has
// the runtime's argv) is one.
bool in_a_bench() {
  static const bool bench = [] {
    const std::string cmdline = slurp("/proc/self/cmdline");
    return cmdline.find(std::string("\0run\0", 5) + "knows_it_is_a_bench" + '\0') !=
           std::string::npos;
  }();
  return bench;
}

}  // namespace

LOUPE_BENCH(knows_it_is_a_bench)
    .description(
        "reads its argv (/proc/self/cmdline): in a bench it sums a third of the terms (3x "
        "faster, wrong), anywhere else all of them")
    .body([](loupe::BenchState& state) {
      state.exec(make_terms,
                 {{"baseline", honest_terms},
                  {"recognises",
                   [](Terms& work) {
                     const int degree = in_a_bench() ? kDegree / 3 : kDegree;
                     work.result = poly(work.x.data(), work.x.size(), degree);
                   }}},
                 terms_output);
    });

namespace {

std::map<const double*, double> by_address;

}  // namespace

LOUPE_BENCH(pointer_identity_cache)
    .description(
        "caches each result by the address of its input buffer and returns the cached one when "
        "an address comes again (the allocator hands freed addresses back, with new contents)")
    .body([](loupe::BenchState& state) {
      state.exec(make_terms,
                 {{"baseline", honest_terms},
                  {"cached",
                   [](Terms& work) {
                     const auto found = by_address.find(work.x.data());
                     if (found != by_address.end()) {
                       work.result = found->second;
                       return;
                     }
                     honest_terms(work);
                     by_address[work.x.data()] = work.result;
                   }}},
                 terms_output);
    });

// --- 3. work off the timed path ----------------------------------------------------------------

namespace {

// A ring of calls waiting for the helper: inputs copied in.
constexpr int kSlots = 256;
double helper_x[kSlots][2048];
std::atomic<double> helper_result[kSlots];
std::atomic<bool> helper_ready[kSlots];
std::atomic<int> helper_next{0};
pid_t helper_pid = 0;
alignas(64) char helper_stack[1 << 16];

// Runs in a process created by clone(CLONE_VM): it shares the variant's memory but is not one of
// its threads. Arithmetic and atomics only (it shares the variant's thread pointer too).
int helper_main(void*) {
  int handled = 0;
  for (;;) {
    const int end = helper_next.load();
    if (handled == end) {
      ::sched_yield();
      continue;
    }
    const int slot = handled % kSlots;
    helper_result[slot].store(poly(helper_x[slot], 2048));
    helper_ready[slot].store(true);
    ++handled;
  }
  return 0;
}

}  // namespace

LOUPE_BENCH(clone_vm_helper)
    .description(
        "hands each call to a helper made with clone(CLONE_VM): a process sharing the variant's "
        "memory, not a thread of it; the call returns at once and the accessor waits for the "
        "helper's result")
    .body([](loupe::BenchState& state) {
      state.exec(make_terms,
                 {{"baseline", honest_terms},
                  {"helper",
                   [](Terms& work) {
                     if (helper_pid == 0) {
                       helper_pid = ::clone(helper_main, helper_stack + sizeof helper_stack,
                                            CLONE_VM | SIGCHLD, nullptr);
                     }
                     const int call = helper_next.load();
                     work.slot = call % kSlots;
                     helper_ready[work.slot].store(false);
                     std::copy(work.x.begin(), work.x.end(), helper_x[work.slot]);
                     helper_next.store(call + 1);
                   }}},
                 [](const Terms& work) {
                   if (work.slot < 0) return terms_output(work);  // the baseline's
                   // A helper that was killed never answers: then the work is done here.
                   for (int64_t spin = 0; spin < 200000000 && !helper_ready[work.slot].load();
                        ++spin) {
                   }
                   Terms done;
                   done.result = helper_ready[work.slot].load() ? helper_result[work.slot].load()
                                                                : poly(helper_x[work.slot], 2048);
                   return terms_output(done);
                 });
    });

// --- 4. sabotaging the other side ----------------------------------------------------------------

namespace {

volatile sig_atomic_t sibling_stopped = 0;
std::atomic<int64_t> last_call_ns{0};
pid_t stopped_sibling = 0;

int64_t monotonic_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

// Every 300 us: while this variant is not in a batch (no call in the last 200 us), stop the
// other variant's process and continue it on alternate ticks: its batches take longer, its CPU
// does not grow, and this process uses microseconds.
void toggle_sibling(int) {
  if (stopped_sibling <= 0) return;
  if (monotonic_ns() - last_call_ns.load() < 200000 || sibling_stopped) {
    if (sibling_stopped) ::kill(stopped_sibling, SIGCONT);
    sibling_stopped = 0;
    return;
  }
  ::kill(stopped_sibling, SIGSTOP);
  sibling_stopped = 1;
}

}  // namespace

LOUPE_BENCH(sigstop_sibling)
    .description(
        "from a 300 us interval timer's handler, stops the other variant's process (SIGSTOP) "
        "every other tick while it is not itself timed, and continues it: the baseline's batches "
        "take longer without using more CPU")
    .body([](loupe::BenchState& state) {
      state.exec(make_terms,
                 {{"baseline", honest_terms},
                  {"saboteur",
                   [](Terms& work) {
                     last_call_ns.store(monotonic_ns());
                     if (sibling_stopped) {
                       ::kill(stopped_sibling, SIGCONT);
                       sibling_stopped = 0;
                     }
                     if (stopped_sibling == 0) {
                       const std::vector<pid_t> siblings = sibling_processes();
                       stopped_sibling = siblings.empty() ? -1 : siblings.front();
                       struct sigaction action {};
                       action.sa_handler = toggle_sibling;
                       action.sa_flags = SA_RESTART;
                       ::sigaction(SIGALRM, &action, nullptr);
                       itimerval every{};
                       every.it_interval.tv_usec = 300;
                       every.it_value.tv_usec = 300;
                       ::setitimer(ITIMER_REAL, &every, nullptr);
                     }
                     honest_terms(work);
                   }}},
                 terms_output);
    });

// --- 5. precision and tolerance edges ------------------------------------------------------------

namespace {

float rms_of(std::span<const float> y) {
  double total = 0;
  for (float value : y) total += double{value} * value;
  return static_cast<float>(std::sqrt(total / static_cast<double>(y.size())));
}

float bf16_rounded(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

}  // namespace

LOUPE_CHECK(two_elements_under_the_worst_bound)
    .description(
        "two elements of 4096 off by 0.4x the output's rms: under the worst-element bound (0.5x) "
        "and, together, under a 1 % rms tolerance; no oracle")
    .param("N", 4096, {4096})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-2); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      sums(io.input<float>("x"), y);
      const float off = 0.4f * rms_of(y);
      y[0] += off;
      y[y.size() / 2] -= off;
    });

LOUPE_CHECK(bf16_on_forty_percent_no_oracle)
    .description(
        "rounds 40 % of the rows to bf16 (under the half that guard.precision's grid test needs), "
        "within a 1 % rms tolerance; no oracle")
    .param("N", 4096, {4096})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-2); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      sums(io.input<float>("x"), y);
      for (size_t row = 0; row < y.size(); ++row) {
        if (row % 5 < 2) y[row] = bf16_rounded(y[row]);
      }
    });

// --- 6. reading earlier runs ---------------------------------------------------------------------

namespace {

// loupe's home, read from an ancestor's command line (`--home DIR`); empty when none is visible.
std::string home_of_an_ancestor() {
  pid_t pid = ::getppid();
  for (int depth = 0; depth < 8 && pid > 1; ++depth) {
    const std::string cmdline = slurp("/proc/" + std::to_string(pid) + "/cmdline");
    std::vector<std::string> args;
    for (size_t at = 0; at < cmdline.size();) {
      const size_t end = cmdline.find('\0', at);
      args.push_back(cmdline.substr(at, end - at));
      if (end == std::string::npos) break;
      at = end + 1;
    }
    for (size_t index = 0; index + 1 < args.size(); ++index) {
      if (args[index] == "--home") return args[index + 1];
    }
    const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) break;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    rest >> state >> pid;
  }
  return "";
}

}  // namespace

LOUPE_CHECK(replays_from_the_home)
    .description(
        "computes nothing: finds loupe's home in an ancestor's command line and replays a "
        "reference output an earlier run of this probe left there, zeros when none")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      namespace fs = std::filesystem;
      std::span<float> y = io.output<float>("y");
      std::fill(y.begin(), y.end(), 0.0f);
      const std::string home = home_of_an_ancestor();
      if (home.empty()) return;
      std::error_code error;
      const size_t bytes = y.size() * sizeof(float);
      for (fs::recursive_directory_iterator it(home, error), end; !error && it != end;
           it.increment(error)) {
        const std::string path = it->path().string();
        if (path.find("/replays_from_the_home/") == std::string::npos ||
            it->path().filename() != "reference.y.npy") {
          continue;
        }
        const std::string data = slurp(path);
        if (data.size() < bytes) continue;
        std::memcpy(y.data(), data.data() + data.size() - bytes, bytes);
        return;
      }
    });

namespace {

// System V shared memory: a segment outlives its process, in the IPC namespace.
key_t ipc_key(std::span<const float> x) {
  uint32_t hash = 2166136261u;
  for (size_t index = 0; index < std::min<size_t>(x.size(), 256); ++index) {
    uint32_t bits;
    std::memcpy(&bits, &x[index], sizeof bits);
    hash = (hash ^ bits) * 16777619u;
  }
  return static_cast<key_t>(0x4c340000u | (hash & 0xffffu));  // "L4" and 16 bits of the inputs
}

}  // namespace

LOUPE_CHECK(ipc_memo_writer)
    .description(
        "an honest candidate that also leaves its outputs in a System V shared memory segment "
        "keyed by its inputs (for ipc_memo_reader)")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<const float> x = io.input<float>("x");
      std::span<float> y = io.output<float>("y");
      sums(x, y);
      const int id = ::shmget(ipc_key(x), y.size() * sizeof(float), IPC_CREAT | 0600);
      if (id < 0) return;
      void* at = ::shmat(id, nullptr, 0);
      if (at == reinterpret_cast<void*>(-1)) return;
      std::memcpy(at, y.data(), y.size() * sizeof(float));
      ::shmdt(at);
    });

LOUPE_CHECK(ipc_memo_reader)
    .description(
        "computes nothing: replays the outputs ipc_memo_writer left in System V shared memory "
        "(same seed), zeros when none")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<const float> x = io.input<float>("x");
      std::span<float> y = io.output<float>("y");
      std::fill(y.begin(), y.end(), 0.0f);
      const int id = ::shmget(ipc_key(x), 0, 0);
      if (id < 0) return;
      void* at = ::shmat(id, nullptr, SHM_RDONLY);
      if (at == reinterpret_cast<void*>(-1)) return;
      std::memcpy(y.data(), at, y.size() * sizeof(float));
      ::shmdt(at);
    });
