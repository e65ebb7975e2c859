// bench/command.hpp — benchmarks whole shell commands, alone or A against B (`loupe bench --cmd`).
//
// For subjects that are not C++: each timed sample is one run of `/bin/sh -c COMMAND` in its own
// process group (core/process.hpp), from just before the spawn to the reap, so process start-up
// is part of every sample (about a millisecond; it is the same for both arms, so it dilutes a
// ratio towards 1 but never biases its sign). Arms are interleaved by the sampler (sampler.hpp).
// A run that exits non-zero, dies or times out ends the benchmark with Error(kSubject) naming the
// arm, the command, the run and the tail of its stderr.
// Thread-safety: one call per thread.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "bench/compare.hpp"
#include "bench/sampler.hpp"

namespace loupe::bench {

struct CommandBenchOptions {
  std::string command_a;
  std::optional<std::string> command_b;
  SamplerOptions sampler;
  // Limit on one run of a command; zero means max(60 s, 2 × the sampling budget).
  std::chrono::nanoseconds run_timeout{0};
};

struct CommandBench {
  SamplingResult sampling;
  ArmSummary a;                          // always
  std::optional<Comparison> comparison;  // with command_b: B against A (its .b is B's summary)
};

// One timed run of `command` as a TimedRun; `arm` ("A" or "B") names it in errors.
TimedRun command_timed_run(const std::string& command, const std::string& arm,
                           std::chrono::nanoseconds timeout);

CommandBench bench_commands(const CommandBenchOptions& options);

}  // namespace loupe::bench
