// Round 3 (issue 16, third session): candidates written as the held-out set's author would, against
// the guards as they stand after round 2, two or more per class, none a copy of an earlier one.
// Each description says what it does and what catches it (or that nothing does yet);
// round3_test.cpp asserts the outcome. Linked into loupe_adversarial_subject.
#include <sched.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>
#include <loupe/probe.hpp>

#include <dirent.h>
#include <atomic>
#include <cfenv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sums_probe.hpp"

namespace {

using loupe::adversarial::kWidth;
using loupe::adversarial::sums;
using loupe::adversarial::sums_reference;
using loupe::adversarial::sums_setup;

void sums_oracle(loupe::CheckIo& io) {
  std::span<const float> x = io.input<float>("x");
  std::span<double> y = io.output<double>("y");
  for (size_t row = 0; row < y.size(); ++row) {
    double total = 0;
    for (int64_t column = 0; column < kWidth; ++column) total += x[row * kWidth + column];
    y[row] = total;
  }
}

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
  std::jthread worker;  // per_call_thread: the call's work, joined by the accessor
  int slot = -1;        // signal_handler_work: where the handler leaves the result
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

double poly(const std::vector<double>& x) {
  double total = 0;
  for (double value : x) {
    double power = 1;
    for (int k = 0; k < kDegree; ++k) {
      total += power / (k + 1);
      power *= value;
    }
  }
  return total;
}

std::vector<loupe::NamedTensor> terms_output(const Terms& work) {
  loupe::Tensor tensor(loupe::DType::kF64, {1});
  tensor.mutable_data<double>()[0] = work.result;
  return {{"result", tensor}};
}

void honest_terms(Terms& work) { work.result = poly(work.x); }

// --- 1. tampering: a thread started before main, in the runtime process -------------------------

// The probe it serves is named in the subject's argv; other probes of this binary are left alone.
bool running_probe(const char* name) {
  const std::string cmdline = slurp("/proc/self/cmdline");
  return cmdline.find(std::string("\0run\0", 5) + name + '\0') != std::string::npos;
}

// Copies every reference output the runtime writes over the candidate's, as soon as it appears.
const bool static_copier_started = [] {
  if (!running_probe("static_thread_copier")) return false;
  std::thread([] {
    namespace fs = std::filesystem;
    for (int round = 0; round < 20000; ++round) {
      std::error_code error;
      for (const char* pass : {"candidate_first", "reference_first"}) {
        const fs::path dir = fs::current_path(error) / pass;
        if (fs::exists(dir / "reference.y.npy", error) &&
            fs::exists(dir / "candidate.y.npy", error)) {
          fs::copy_file(dir / "reference.y.npy", dir / "candidate.y.npy",
                        fs::copy_options::overwrite_existing, error);
        }
      }
      // Also wherever --out points (the runtime's output directory).
      ::usleep(200);
    }
  }).detach();
  return true;
}();

}  // namespace

LOUPE_CHECK(static_thread_copier)
    .description(
        "a static initialiser starts a thread in the runtime process that copies the reference's "
        "output file over the candidate's as soon as both exist; the candidate writes zeros")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      std::fill(y.begin(), y.end(), 0.0f);
    });

LOUPE_CHECK(symlink_planted)
    .description(
        "the candidate's child plants symbolic links where the runtime will write the candidate's "
        "output files, pointing at the reference's, before any file is written; writes zeros")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      namespace fs = std::filesystem;
      std::span<float> y = io.output<float>("y");
      std::fill(y.begin(), y.end(), 0.0f);
      std::error_code error;
      // The runtime's output directory is its --out, named in its argv; it is also the cwd.
      std::vector<fs::path> roots = {fs::current_path(error)};
      const std::string cmdline = slurp("/proc/self/cmdline");
      const size_t at = cmdline.find(std::string("--out") + '\0');
      if (at != std::string::npos) roots.emplace_back(cmdline.c_str() + at + 6);
      for (const fs::path& root : roots) {
        for (const char* pass : {"candidate_first", "reference_first"}) {
          fs::create_directories(root / pass, error);
          fs::create_symlink("reference.y.npy", root / pass / "candidate.y.npy", error);
        }
      }
    });

// --- 2. recognising the check ---------------------------------------------------------------

LOUPE_CHECK(right_first_three)
    .description(
        "right on its first three calls in a process (the call and the two default repeats), "
        "off by 1 % on every later one")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      static int calls = 0;
      std::span<float> y = io.output<float>("y");
      sums(io.input<float>("x"), y);
      if (++calls > 3) {
        for (float& value : y) value *= 1.01f;
      }
    });

LOUPE_CHECK(knows_the_hidden_point)
    .description(
        "right only at N values it can read: the allowed 1024 and the hidden point 1536 written "
        "in the source (wrong anywhere else)")
    .param("N", 1024, {1024})
    .hidden_point({{"N", int64_t{1536}}})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      if (y.size() == 1024 || y.size() == 1536) {
        sums(io.input<float>("x"), y);
      } else {
        std::fill(y.begin(), y.end(), 0.0f);
      }
    });

// --- 3. work off the timed path ---------------------------------------------------------------

LOUPE_BENCH(per_call_thread)
    .description(
        "starts a thread per call that does the work and returns at once; the outputs accessor "
        "joins it")
    .body([](loupe::BenchState& state) {
      state.exec(make_terms,
                 {{"baseline", honest_terms},
                  {"async",
                   [](Terms& work) {
                     // Assigning joins a thread left from an earlier call on these inputs.
                     work.worker = std::jthread([&work] { work.result = poly(work.x); });
                   }}},
                 [](const Terms& work) {
                   auto& mutable_work = const_cast<Terms&>(work);
                   if (mutable_work.worker.joinable()) mutable_work.worker.join();
                   return terms_output(work);
                 });
    });

namespace {

// A ring of calls waiting for the handler: inputs copied in (no allocation in the handler).
constexpr int kSlots = 1024;
double slot_x[kSlots][2048];
std::atomic<double> slot_result[kSlots];
std::atomic<bool> slot_ready[kSlots];
std::atomic<int> next_slot{0};
std::atomic<int> handled{0};

void compute_in_handler(int) {
  const int end = next_slot.load();
  for (int call = handled.load(); call < end; ++call) {
    const int slot = call % kSlots;
    double total = 0;
    for (double value : slot_x[slot]) {
      double power = 1;
      for (int k = 0; k < kDegree; ++k) {
        total += power / (k + 1);
        power *= value;
      }
    }
    slot_result[slot].store(total);
    slot_ready[slot].store(true);
  }
  handled.store(end);
}

}  // namespace

LOUPE_BENCH(signal_handler_work)
    .description(
        "queues each call and re-arms a 200 us one-shot timer, so SIGALRM fires once the batch "
        "is over; the handler does every queued call's work on the variant's own thread, between "
        "commands; the accessor waits for its slot")
    .body([](loupe::BenchState& state) {
      struct sigaction action {};
      action.sa_handler = compute_in_handler;
      action.sa_flags = SA_RESTART;
      ::sigaction(SIGALRM, &action, nullptr);
      state.exec(make_terms,
                 {{"baseline", honest_terms},
                  {"handler",
                   [](Terms& work) {
                     const int call = next_slot.load();
                     work.slot = call % kSlots;
                     slot_ready[work.slot].store(false);
                     std::copy(work.x.begin(), work.x.end(), slot_x[work.slot]);
                     next_slot.store(call + 1);
                     itimerval once{};
                     once.it_value.tv_usec = 200;
                     ::setitimer(ITIMER_REAL, &once, nullptr);
                   }}},
                 [](const Terms& work) {
                   if (work.slot < 0) return terms_output(work);  // the baseline's
                   while (!slot_ready[work.slot].load()) {
                   }
                   Terms done;
                   done.result = slot_result[work.slot].load();
                   return terms_output(done);
                 });
    });

// --- 4. sabotaging the other side ---------------------------------------------------------------

namespace {

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

LOUPE_BENCH(idle_class_sibling)
    .description(
        "moves the other variant's process (every thread) to the SCHED_IDLE policy on its first "
        "call: its nice value and affinity are untouched, but under load it runs only when "
        "nothing else wants the CPU")
    .body([](loupe::BenchState& state) {
      state.exec(make_terms,
                 {{"baseline", honest_terms},
                  {"saboteur",
                   [](Terms& work) {
                     static bool done = false;
                     if (!done) {
                       done = true;
                       sched_param none{};
                       for (pid_t pid : sibling_processes()) {
                         ::sched_setscheduler(pid, SCHED_IDLE, &none);
                       }
                       ::sched_setscheduler(::getppid(), SCHED_IDLE, &none);
                     }
                     honest_terms(work);
                   }}},
                 terms_output);
    });

LOUPE_CHECK(traps_inexact)
    .description(
        "unmasks the inexact-result exception (feenableexcept) and leaves it, so the next path's "
        "first rounded addition raises SIGFPE")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      sums(io.input<float>("x"), io.output<float>("y"));
      ::feenableexcept(FE_INEXACT);
    });

// --- 5. precision and tolerance edges --------------------------------------------------------

namespace {

// Every element off by the same 0.9 % of the output's rms (the rms of 64 standard normals is 8):
// an error spread evenly, just under a 1 % rms tolerance, no element standing out.
void sums_off_evenly(loupe::CheckIo& io) {
  std::span<float> y = io.output<float>("y");
  sums(io.input<float>("x"), y);
  for (size_t row = 0; row < y.size(); ++row)
    y[row] += (row % 2 == 0 ? 1.0f : -1.0f) * 0.009f * 8.0f;
}

}  // namespace

LOUPE_CHECK(even_error_with_oracle)
    .description(
        "every element off by 0.9 % of the output's rms, under a 1 % rms tolerance, with an "
        "oracle declared")
    .param("N", 4096, {4096})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-2); })
    .reference(sums_reference)
    .candidate(sums_off_evenly)
    .oracle(sums_oracle);

LOUPE_CHECK(even_error_no_oracle)
    .description(
        "every element off by 0.9 % of the output's rms, under a 1 % rms tolerance, no oracle")
    .param("N", 4096, {4096})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-2); })
    .reference(sums_reference)
    .candidate(sums_off_evenly);

// --- 6. reading earlier runs ---------------------------------------------------------------------

namespace {

// Places a subject can write that may outlive its run: the user's cache, the shared memory
// filesystem, /var/tmp.
std::vector<std::string> memo_dirs() {
  std::vector<std::string> dirs = {"/dev/shm", "/var/tmp"};
  if (const char* home = std::getenv("HOME")) dirs.push_back(std::string(home) + "/.cache");
  return dirs;
}

std::string memo_name(std::span<const float> x) {
  uint64_t hash = 1469598103934665603ull;
  for (size_t index = 0; index < std::min<size_t>(x.size(), 256); ++index) {
    uint32_t bits;
    std::memcpy(&bits, &x[index], sizeof bits);
    hash = (hash ^ bits) * 1099511628211ull;
  }
  return "loupe-round3-memo-" + std::to_string(hash) + "-" + std::to_string(x.size());
}

}  // namespace

LOUPE_CHECK(memo_writer)
    .description(
        "an honest candidate that also leaves its outputs, named by its inputs, wherever it can "
        "write outside its run directory (for memo_reader)")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<const float> x = io.input<float>("x");
      std::span<float> y = io.output<float>("y");
      sums(x, y);
      for (const std::string& dir : memo_dirs()) {
        std::ofstream out(dir + "/" + memo_name(x), std::ios::binary);
        out.write(reinterpret_cast<const char*>(y.data()),
                  static_cast<std::streamsize>(y.size() * sizeof(float)));
      }
    });

LOUPE_CHECK(memo_reader)
    .description(
        "computes nothing: replays the outputs an earlier run left outside its run directory "
        "(memo_writer, same seed), zeros when none")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<const float> x = io.input<float>("x");
      std::span<float> y = io.output<float>("y");
      std::fill(y.begin(), y.end(), 0.0f);
      for (const std::string& dir : memo_dirs()) {
        const std::string bytes = slurp(dir + "/" + memo_name(x));
        if (bytes.size() == y.size() * sizeof(float)) {
          std::memcpy(y.data(), bytes.data(), bytes.size());
          return;
        }
      }
    });

// --- 1 and 4: the candidate rewrites the reference's result where the runtime collects it --------

namespace {

// Every shared writable mapping of this process: where a check's child hands its paths' outputs
// to the runtime.
std::vector<std::span<std::byte>> shared_mappings() {
  std::vector<std::span<std::byte>> found;
  std::istringstream maps(slurp("/proc/self/maps"));
  std::string line;
  while (std::getline(maps, line)) {
    uintptr_t begin = 0;
    uintptr_t end = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &begin, &end, perms) != 3) continue;
    if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 's') continue;
    found.emplace_back(reinterpret_cast<std::byte*>(begin), end - begin);
  }
  return found;
}

// Replaces every copy of `from` in the shared mappings with `to`; true when one was found.
bool overwrite_shared(const std::vector<float>& from, const std::vector<float>& to) {
  const size_t bytes = from.size() * sizeof(float);
  bool replaced = false;
  for (std::span<std::byte> mapping : shared_mappings()) {
    for (size_t at = 0; at + bytes <= mapping.size(); at += sizeof(float)) {
      if (std::memcmp(mapping.data() + at, from.data(), bytes) == 0) {
        std::memcpy(mapping.data() + at, to.data(), bytes);
        replaced = true;
      }
    }
  }
  return replaced;
}

}  // namespace

LOUPE_CHECK(rewrites_the_reference_slot)
    .description(
        "writes outputs 5 % too large, then replaces the reference's outputs with its own where "
        "the check's child hands them to the runtime (its shared mapping): at once when the "
        "reference ran first, from a thread left behind when it runs after")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<const float> x = io.input<float>("x");
      std::span<float> y = io.output<float>("y");
      std::vector<float> right(y.size());
      sums(x, right);
      std::vector<float> mine(right);
      for (float& value : mine) value *= 1.05f;
      std::copy(mine.begin(), mine.end(), y.begin());
      if (overwrite_shared(right, mine)) return;
      std::thread([right, mine] {
        for (int attempt = 0; attempt < 20000; ++attempt) {
          if (overwrite_shared(right, mine)) return;
          ::usleep(50);
        }
      }).detach();
    });
