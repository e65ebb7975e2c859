// bench/sampler.hpp — collects timing samples of one arm, or of two arms interleaved, until the
// stopping rule (stopping.hpp) says enough.
//
// The caller supplies how to take one timed sample (a body run in-process, a whole command run
// as a child process); the sampler owns the method: warm-up runs first, then for two arms
// blocks of one sample each in a seeded random order (AB or BA), so drift of the machine falls
// on both arms alike; every raw sample is kept in the order taken. Precision is checked cheaply
// (sign-test intervals) on a schedule that grows with n, and a candidate stop is confirmed on
// the bootstrap interval the verdict will use, so the verdict's interval meets the precision
// whenever the reason is kPrecisionReached.
// Thread-safety: one sampler call per thread; the callbacks run on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/compare.hpp"
#include "bench/stopping.hpp"

namespace loupe::bench {

// Takes one timed sample and returns it in seconds. May throw loupe::Error to abort sampling.
using TimedRun = std::function<double()>;
// Seconds on a monotonic clock; injectable so tests can run on synthetic time.
using MonotonicClock = std::function<double()>;

struct SamplerOptions {
  StoppingRule stopping;
  int64_t warmup = 1;  // untimed runs of each arm before sampling
  uint64_t seed = 0;   // block order; `compare.seed` is the bootstrap's
  CompareOptions compare;
  MonotonicClock clock;  // steady_clock when empty
};

struct SamplingResult {
  std::vector<double> a;
  std::vector<double> b;  // empty when one arm was sampled
  std::string order;      // the arm of each timed sample, in order: "ABBAAB..."
  StopDecision stop;
  double elapsed_s = 0.0;   // warm-up included
  int64_t warmup_runs = 0;  // per arm
};

SamplingResult sample_one(const TimedRun& run, const SamplerOptions& options);
SamplingResult sample_interleaved(const TimedRun& run_a, const TimedRun& run_b,
                                  const SamplerOptions& options);

}  // namespace loupe::bench
