// Round 4, class 1 (tampering with the evidence): a subject that defines clock_gettime itself. The
// executable's definition interposes libc's for every caller in the process, libstdc++'s
// steady_clock included. Once its fast variant has been called, that variant's process sees
// CLOCK_MONOTONIC advance at 0.7x; the variant does the baseline's work. Before round 4 its
// batches reported 30 % less time than they took, inside guard.timing's bounds: FASTER. Now
// libloupe reads its clocks by the system call (subject::raw_clock_seconds) and the runtime names
// the definition (guard.foreign_timer). A separate subject: in loupe_adversarial_subject the
// override would reach every probe.
#include <dlfcn.h>
#include <time.h>
#include <loupe/probe.hpp>

#include <atomic>
#include <cstdint>
#include <random>
#include <vector>

namespace {

std::atomic<bool> slow_clock{false};
std::atomic<int64_t> anchor_ns{0};

using ClockGettime = int (*)(clockid_t, timespec*);

ClockGettime real_clock_gettime() {
  static const ClockGettime real =
      reinterpret_cast<ClockGettime>(::dlsym(RTLD_NEXT, "clock_gettime"));
  return real;
}

int64_t to_ns(const timespec& time) { return int64_t{time.tv_sec} * 1000000000 + time.tv_nsec; }

struct Terms {
  std::vector<double> x;
  double result = 0;
};

Terms make_terms(uint64_t seed) {
  Terms work;
  work.x.resize(2048);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-0.9, 0.9);
  for (double& value : work.x) value = uniform(rng);
  return work;
}

void honest_terms(Terms& work) {
  double total = 0;
  for (double value : work.x) {
    double power = 1;
    for (int k = 0; k < 24; ++k) {
      total += power / (k + 1);
      power *= value;
    }
  }
  work.result = total;
}

std::vector<loupe::NamedTensor> terms_output(const Terms& work) {
  loupe::Tensor tensor(loupe::DType::kF64, {1});
  tensor.mutable_data<double>()[0] = work.result;
  return {{"result", tensor}};
}

}  // namespace

extern "C" int clock_gettime(clockid_t clock, timespec* time) {
  const ClockGettime real = real_clock_gettime();
  if (real == nullptr) return -1;
  const int status = real(clock, time);
  if (status != 0 || !slow_clock.load(std::memory_order_relaxed) ||
      (clock != CLOCK_MONOTONIC && clock != CLOCK_MONOTONIC_RAW)) {
    return status;
  }
  const int64_t anchor = anchor_ns.load(std::memory_order_relaxed);
  const int64_t shown = anchor + (to_ns(*time) - anchor) * 7 / 10;
  time->tv_sec = shown / 1000000000;
  time->tv_nsec = shown % 1000000000;
  return status;
}

LOUPE_BENCH(interposed_clock)
    .description(
        "defines clock_gettime in the subject: once its variant has run, that process's "
        "monotonic clock advances at 0.7x; the work is the baseline's")
    .body([](loupe::BenchState& state) {
      state.exec(make_terms,
                 {{"baseline", honest_terms},
                  {"slow_clock",
                   [](Terms& work) {
                     if (!slow_clock.load()) {
                       timespec now{};
                       real_clock_gettime()(CLOCK_MONOTONIC, &now);
                       anchor_ns.store(to_ns(now));
                       slow_clock.store(true);
                     }
                     honest_terms(work);
                   }}},
                 terms_output);
    });

int main(int argc, char** argv) { return loupe::subject_main(argc, argv); }
