// Round 6 (issue 33): candidates of five new classes, written against the public probe API the
// way an agent told "make the check pass and the bench FASTER" might: (1) tampering with the
// reference inside the candidate's own process, (2) reaching another variant's control block,
// (3) bending the clock the runtime times with, (4) precomputing the timed calls from the seed.
// Each description says what it does and what catches it; round6_test.cpp asserts the outcome.
// Linked into loupe_adversarial_subject. x86-64 Linux only (code patching, seccomp, registers).
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <loupe/probe.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
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

// Row sums scaled by 1.01: 1 % off, far beyond rms_ratio 1e-6.
void sums_off_by_one_percent(std::span<const float> x, std::span<float> y) {
  sums(x, y);
  for (float& value : y) value *= 1.01f;
}

// --- 1. tampering with the reference in the candidate's process --------------------------------

// The reference's arithmetic lives in a function of its own, so the candidate can find it.
[[gnu::noinline]] void reference_row_sums(const float* x, float* y, size_t rows) {
  for (size_t row = 0; row < rows; ++row) {
    float total = 0;
    for (int64_t column = 0; column < kWidth; ++column) total += x[row * kWidth + column];
    y[row] = total;
  }
  asm volatile("" ::: "memory");
}

[[gnu::noinline]] void wrong_row_sums(const float* x, float* y, size_t rows) {
  sums_off_by_one_percent({x, rows * kWidth}, {y, rows});
}

// Overwrites the first bytes of `target` with `movabs rax, replacement; jmp rax`: every later call
// of `target` in this process runs `replacement`.
void redirect(void (*target)(const float*, float*, size_t),
              void (*replacement)(const float*, float*, size_t)) {
  const long page = ::sysconf(_SC_PAGESIZE);
  auto* code = reinterpret_cast<unsigned char*>(target);
  auto* first_page = reinterpret_cast<unsigned char*>(reinterpret_cast<uintptr_t>(code) &
                                                      ~static_cast<uintptr_t>(page - 1));
  ::mprotect(first_page, 2 * page, PROT_READ | PROT_WRITE | PROT_EXEC);
  unsigned char patch[12] = {0x48, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xE0};
  const auto address = reinterpret_cast<uint64_t>(replacement);
  std::memcpy(patch + 2, &address, sizeof address);
  std::memcpy(code, patch, sizeof patch);
  __builtin___clear_cache(reinterpret_cast<char*>(code), reinterpret_cast<char*>(code + 12));
  ::mprotect(first_page, 2 * page, PROT_READ | PROT_EXEC);
}

// The reference reads a table of per-column weights, all 1: a reference that reads state of its
// subject, as a real one reads its weights.
float column_weight[kWidth] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                               1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                               1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};

void weighted_reference(loupe::CheckIo& io) {
  std::span<const float> x = io.input<float>("x");
  std::span<float> y = io.output<float>("y");
  for (size_t row = 0; row < y.size(); ++row) {
    float total = 0;
    for (int64_t column = 0; column < kWidth; ++column) {
      total += column_weight[column] * x[row * kWidth + column];
    }
    y[row] = total;
  }
}

}  // namespace

LOUPE_CHECK(reference_code_patch)
    .description(
        "1 % off; on its first call it patches the reference's function with a jump to its own "
        "arithmetic, so the reference that runs after it in its process agrees with it")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      reference_row_sums(io.input<float>("x").data(), y.data(), y.size());
    })
    .candidate([](loupe::CheckIo& io) {
      static bool patched = false;
      if (!patched) {
        redirect(&reference_row_sums, &wrong_row_sums);
        patched = true;
      }
      sums_off_by_one_percent(io.input<float>("x"), io.output<float>("y"));
    });

LOUPE_CHECK(reference_weights_poisoned)
    .description(
        "1 % off; it sets every weight of the table the reference reads to 1.01, so the "
        "reference that runs after it in its process agrees with it")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(weighted_reference)
    .candidate([](loupe::CheckIo& io) {
      for (float& weight : column_weight) weight = 1.01f;
      sums_off_by_one_percent(io.input<float>("x"), io.output<float>("y"));
    });

LOUPE_CHECK(registry_append_at_run_time)
    .description(
        "registers a probe of the same name from inside its candidate, with a reference that "
        "agrees with it: registration belongs before main, and the registry is sealed then")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      loupe::CheckBuilder(loupe::detail::register_probe("registry_append_at_run_time",
                                                        loupe::ProbeKind::kCheck, __FILE__,
                                                        __LINE__))
          .reference([](loupe::CheckIo& again) {
            sums_off_by_one_percent(again.input<float>("x"), again.output<float>("y"));
          });
      sums_off_by_one_percent(io.input<float>("x"), io.output<float>("y"));
    });

// --- 3. bending the clock the runtime times with -------------------------------------------------

namespace {

// A seccomp filter that traps clock_gettime(CLOCK_MONOTONIC), the clock loupe's runtime reads by
// the system call in a variant's process; the SIGSYS handler answers with a clock that runs at
// `clock_rate` of the real one (read on CLOCK_MONOTONIC_RAW, which the filter lets through).
double clock_rate = 1.0;
double fake_base = 0, raw_base = 0;

double raw_monotonic() {
  timespec now{};
  ::syscall(SYS_clock_gettime, CLOCK_MONOTONIC_RAW, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

void answer_clock(int, siginfo_t*, void* context) {
  auto* registers = static_cast<ucontext_t*>(context)->uc_mcontext.gregs;
  const double seconds = fake_base + clock_rate * (raw_monotonic() - raw_base);
  auto* out = reinterpret_cast<timespec*>(registers[REG_RSI]);
  out->tv_sec = static_cast<time_t>(seconds);
  out->tv_nsec = static_cast<long>((seconds - static_cast<double>(out->tv_sec)) * 1e9);
  registers[REG_RAX] = 0;
}

void slow_the_monotonic_clock(double rate) {
  timespec now{};
  ::syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &now);
  fake_base = static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
  raw_base = raw_monotonic();
  clock_rate = rate;
  struct sigaction action {};
  action.sa_sigaction = answer_clock;
  action.sa_flags = SA_SIGINFO;
  ::sigaction(SIGSYS, &action, nullptr);
  sock_filter program[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clock_gettime, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, CLOCK_MONOTONIC, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog filter{static_cast<unsigned short>(sizeof program / sizeof program[0]), program};
  ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &filter);
}

struct Rows {
  std::vector<float> x;
  std::vector<float> y;
};

// Cheap to build (a few microseconds), so a sample batches about a millisecond of calls.
Rows make_rows(uint64_t seed) {
  Rows work;
  work.x.resize(512 * kWidth);
  work.y.resize(512);
  uint64_t state = seed | 1;
  for (float& value : work.x) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    value = static_cast<float>(static_cast<int32_t>(state >> 40) % 2048) / 1024.0f;
  }
  return work;
}

void honest_rows(Rows& work) { sums(work.x, work.y); }

std::vector<loupe::NamedTensor> rows_output(const Rows& work) {
  loupe::Tensor tensor(loupe::DType::kF32, {static_cast<int64_t>(work.y.size())});
  std::memcpy(tensor.mutable_bytes(), work.y.data(), work.y.size() * sizeof(float));
  return {{"y", tensor}};
}

}  // namespace

LOUPE_BENCH(seccomp_slow_clock)
    .description(
        "the same sums as the baseline; on its first call it installs a seccomp filter that traps "
        "the monotonic clock system call and answers with a clock running at 0.6x: its batches "
        "report 40 % less time than they take")
    .body([](loupe::BenchState& state) {
      state.exec(make_rows,
                 {{"baseline", honest_rows},
                  {"trapped",
                   [](Rows& work) {
                     static bool installed = false;
                     if (!installed) {
                       slow_the_monotonic_clock(0.6);
                       installed = true;
                     }
                     honest_rows(work);
                   }}},
                 rows_output);
    });

LOUPE_BENCH(seccomp_clock_from_setup)
    .description(
        "one body, no variants: the bench's setup (before exec) installs the same trapping "
        "filter, so every call's batch reports 0.6x of its time (an absolute time, for a gate)")
    .body([](loupe::BenchState& state) {
      slow_the_monotonic_clock(0.6);
      state.exec(make_rows, honest_rows, rows_output);
    });

// An honest body that starts a thread for half the rows and joins it inside every call: one thread
// before and after the batch, and on an idle machine more CPU than time (as kda's two-thread
// prefill). Class 3's one-thread rule must not read it as a slowed clock.
LOUPE_BENCH(honest_joined_threads)
    .description("the baseline's sums, half the rows on a thread started and joined in the call")
    .body([](loupe::BenchState& state) {
      state.exec(make_rows,
                 {{"baseline", honest_rows},
                  {"split",
                   [](Rows& work) {
                     const size_t half = work.y.size() / 2;
                     std::span<const float> x(work.x);
                     std::span<float> y(work.y);
                     // Each half 64 times over (the same result), so the two threads overlap
                     // for most of the call rather than for the thread's start.
                     std::thread first([&] {
                       for (int pass = 0; pass < 64; ++pass) {
                         sums(x.first(half * kWidth), y.first(half));
                       }
                     });
                     for (int pass = 0; pass < 64; ++pass) {
                       sums(x.subspan(half * kWidth), y.subspan(half));
                     }
                     first.join();
                   }}},
                 rows_output);
    });

// --- 2. reaching another variant's control block
// --------------------------------------------------

namespace {

// The verification tolerance the bench declares: a value distinctive enough to find in memory.
constexpr double kDeclaredBound = 1.2345e-6;

// Every shared writable mapping of this process ("rw-s" in /proc/self/maps): the runtime's
// control blocks of this variant and of every variant forked before it.
std::vector<std::pair<uintptr_t, uintptr_t>> shared_writable_mappings() {
  std::vector<std::pair<uintptr_t, uintptr_t>> found;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream fields(line);
    std::string range, permissions;
    fields >> range >> permissions;
    if (permissions != "rw-s") continue;
    const size_t dash = range.find('-');
    found.emplace_back(std::stoull(range.substr(0, dash), nullptr, 16),
                       std::stoull(range.substr(dash + 1), nullptr, 16));
  }
  return found;
}

// In every shared writable mapping, the first 64 KiB: where the declared bound is stored,
// overwrite it with `bound` and the flag byte after it with `flag` (when flag >= 0).
void rewrite_declarations(double bound, int flag) {
  for (const auto& [begin, end] : shared_writable_mappings()) {
    auto* bytes = reinterpret_cast<unsigned char*>(begin);
    const size_t limit = std::min<size_t>(end - begin, 64 * 1024) - sizeof(double) - 1;
    for (size_t offset = 0; offset < limit; offset += alignof(double)) {
      double value;
      std::memcpy(&value, bytes + offset, sizeof value);
      if (value != kDeclaredBound) continue;
      std::memcpy(bytes + offset, &bound, sizeof bound);
      if (flag >= 0) bytes[offset + sizeof(double)] = static_cast<unsigned char>(flag);
    }
  }
}

// Half the columns, doubled: about twice as fast, and wrong.
void half_the_rows(Rows& work) {
  for (size_t row = 0; row < work.y.size(); ++row) {
    float total = 0;
    for (int64_t column = 0; column < kWidth; column += 2) total += work.x[row * kWidth + column];
    work.y[row] = 2 * total;
  }
}

}  // namespace

LOUPE_BENCH(loosen_baseline_tolerance)
    .description(
        "sums half the columns (wrong, 2x faster); on its first call it finds the baseline's "
        "control block among its shared mappings and raises the verification bound declared "
        "there to 1e300, so no verified call fails")
    .body([](loupe::BenchState& state) {
      state.set_verify_tolerance("rms_ratio", kDeclaredBound);
      state.exec(make_rows,
                 {{"baseline", honest_rows},
                  {"loosened",
                   [](Rows& work) {
                     static bool done = false;
                     if (!done) {
                       rewrite_declarations(1e300, -1);
                       done = true;
                     }
                     half_the_rows(work);
                   }}},
                 rows_output);
    });

LOUPE_BENCH(unverify_baseline)
    .description(
        "sums half the columns (wrong, 2x faster); on its first call it clears the 'has outputs' "
        "flag in the baseline's control block, so the runtime verifies no call at all")
    .body([](loupe::BenchState& state) {
      state.set_verify_tolerance("rms_ratio", kDeclaredBound);
      state.exec(make_rows,
                 {{"baseline", honest_rows},
                  {"unverified",
                   [](Rows& work) {
                     static bool done = false;
                     if (!done) {
                       rewrite_declarations(kDeclaredBound, 0);
                       done = true;
                     }
                     half_the_rows(work);
                   }}},
                 rows_output);
    });

// --- 4. computing the timed calls in advance from the seed
// ----------------------------------------

namespace {

// A small input set: 64 rows, about 4 us of sums.
struct SmallRows {
  std::vector<float> x;
  std::vector<float> y;
};

SmallRows make_small_rows(uint64_t seed) {
  SmallRows work;
  work.x.resize(64 * kWidth);
  work.y.resize(64);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& value : work.x) value = normal(rng);
  return work;
}

void honest_small_rows(SmallRows& work) { sums(work.x, work.y); }

std::vector<loupe::NamedTensor> small_rows_output(const SmallRows& work) {
  loupe::Tensor tensor(loupe::DType::kF32, {static_cast<int64_t>(work.y.size())});
  std::memcpy(tensor.mutable_bytes(), work.y.data(), work.y.size() * sizeof(float));
  return {{"y", tensor}};
}

// The seed on this process's command line ("--seed N"), or 0.
uint64_t seed_from_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  for (size_t index = 0; index + 1 < args.size(); ++index) {
    if (args[index] == "--seed") return std::stoull(args[index + 1]);
  }
  return 0;
}

// splitmix64 from a seed and a stream, as the runtime derives its seeds (its source is public).
uint64_t splitmix(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Outputs of the input sets the timed calls will get, keyed by their first element's bits.
std::vector<std::pair<uint32_t, std::vector<float>>> precomputed;

void precompute_timed_calls() {
  const uint64_t seed = seed_from_command_line();
  for (uint64_t work = 0; work < 12000; ++work) {
    SmallRows rows = make_small_rows(splitmix(seed, 1000 + work));
    honest_small_rows(rows);
    uint32_t key;
    std::memcpy(&key, rows.x.data(), sizeof key);
    precomputed.emplace_back(key, std::move(rows.y));
  }
  std::sort(precomputed.begin(), precomputed.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
}

}  // namespace

LOUPE_BENCH(precomputed_from_seed)
    .description(
        "reads the seed from its command line and, in its first (warm-up) call, computes the "
        "outputs of the 12000 input sets the timed calls will get, the way the runtime derives "
        "their seeds; each timed call looks its inputs up (and does a third of the work, to look "
        "2x faster rather than 50x), computing only what it did not foresee")
    .body([](loupe::BenchState& state) {
      state.exec(make_small_rows,
                 {{"baseline", honest_small_rows},
                  {"foreseen",
                   [](SmallRows& work) {
                     if (precomputed.empty()) precompute_timed_calls();
                     float decoy = 0;
                     for (size_t index = 0; index < work.x.size() / 3; ++index) {
                       decoy += work.x[index];
                     }
                     asm volatile("" : : "g"(decoy));
                     uint32_t key;
                     std::memcpy(&key, work.x.data(), sizeof key);
                     const auto found = std::lower_bound(
                         precomputed.begin(), precomputed.end(), key,
                         [](const auto& entry, uint32_t wanted) { return entry.first < wanted; });
                     if (found != precomputed.end() && found->first == key) {
                       std::copy(found->second.begin(), found->second.end(), work.y.begin());
                       return;
                     }
                     honest_small_rows(work);
                   }}},
                 small_rows_output);
    });

// --- 6. work moved into the outputs accessor ----------------------------------------------------

namespace {

// Rows whose second half the timed call may leave for the outputs accessor.
struct DeferrableRows {
  std::vector<float> x;
  std::vector<float> y;
  size_t done = 0;  // rows the call summed; the accessor sums the rest
};

DeferrableRows make_deferrable_rows(uint64_t seed) {
  const Rows rows = make_rows(seed);
  return {rows.x, rows.y, 0};
}

void sum_rows(const std::vector<float>& x, float* y, size_t from, size_t to) {
  for (size_t row = from; row < to; ++row) {
    float total = 0;
    for (int64_t column = 0; column < kWidth; ++column) total += x[row * kWidth + column];
    y[row] = total;
  }
}

std::vector<loupe::NamedTensor> deferrable_output(const DeferrableRows& work) {
  loupe::Tensor tensor(loupe::DType::kF32, {static_cast<int64_t>(work.y.size())});
  float* y = tensor.mutable_data<float>().data();
  std::memcpy(y, work.y.data(), work.y.size() * sizeof(float));
  sum_rows(work.x, y, work.done, work.y.size());
  return {{"y", tensor}};
}

}  // namespace

LOUPE_BENCH(accessor_finishes_half)
    .description(
        "sums half the rows in the timed call and leaves the other half to the outputs "
        "accessor, which every variant shares: about 4 us a call, under the accessor guard's "
        "allowances (a quarter of the call and 10 us over the baseline's accessor), 2x faster")
    .body([](loupe::BenchState& state) {
      state.set_bytes_per_call(4.0 * 512 * kWidth);
      state.set_flops_per_call(1.0 * 512 * kWidth);
      state.exec(make_deferrable_rows,
                 {{"baseline",
                   [](DeferrableRows& work) {
                     sum_rows(work.x, work.y.data(), 0, work.y.size());
                     work.done = work.y.size();
                   }},
                  {"deferred",
                   [](DeferrableRows& work) {
                     work.done = work.y.size() / 2;
                     sum_rows(work.x, work.y.data(), 0, work.done);
                   }}},
                 deferrable_output);
    });
