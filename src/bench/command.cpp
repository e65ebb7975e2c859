#include "bench/command.hpp"

#include <algorithm>
#include <memory>

#include "core/process.hpp"
#include "loupe/error.hpp"

namespace loupe::bench {

TimedRun command_timed_run(const std::string& command, const std::string& arm,
                           std::chrono::nanoseconds timeout) {
  auto spec = std::make_shared<ProcessSpec>(shell_command(command));
  spec->timeout = timeout;
  // Output is not part of the measurement; keep little of it, but keep stderr for errors.
  spec->stdout_limit = 4096;
  spec->stderr_limit = 64 * 1024;
  auto runs = std::make_shared<int64_t>(0);
  return [spec, runs, command, arm]() -> double {
    ++*runs;
    ProcessResult result = run_process(*spec);
    if (!result.succeeded()) {
      std::string tail = result.stderr_tail(10, 2000);
      throw Error(ErrorCode::kSubject,
                  "command " + arm + " ('" + command + "') " + result.describe() + " on run " +
                      std::to_string(*runs) +
                      (tail.empty() ? std::string("; it wrote nothing to stderr")
                                    : "; the end of its stderr:\n" + tail),
                  "run the command by hand to see why it fails; benchmarks need it to exit 0");
    }
    // Division, not multiplication by 1e-9: the nearest double to the exact decimal, printed short.
    return static_cast<double>(result.wall_ns) / 1e9;
  };
}

CommandBench bench_commands(const CommandBenchOptions& options) {
  std::chrono::nanoseconds timeout = options.run_timeout;
  if (timeout.count() <= 0) {
    auto twice_budget = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(2.0 * options.sampler.stopping.budget_s));
    timeout = std::max<std::chrono::nanoseconds>(std::chrono::seconds(60), twice_budget);
  }
  CommandBench bench;
  TimedRun run_a = command_timed_run(options.command_a, "A", timeout);
  if (!options.command_b) {
    bench.sampling = sample_one(run_a, options.sampler);
    bench.a = summarize(bench.sampling.a, {.confidence = options.sampler.stopping.confidence,
                                           .resamples = options.sampler.compare.resamples,
                                           .seed = options.sampler.compare.seed});
    return bench;
  }
  TimedRun run_b = command_timed_run(*options.command_b, "B", timeout);
  bench.sampling = sample_interleaved(run_a, run_b, options.sampler);
  bench.comparison = compare(bench.sampling.a, bench.sampling.b, options.sampler.compare);
  bench.a = bench.comparison->a;
  return bench;
}

}  // namespace loupe::bench
