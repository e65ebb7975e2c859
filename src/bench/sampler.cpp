#include "bench/sampler.hpp"

#include <algorithm>
#include <chrono>

#include "core/statistics.hpp"

namespace loupe::bench {
namespace {

MonotonicClock clock_or_default(const MonotonicClock& clock) {
  if (clock) return clock;
  return [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
}

// Checking costs O(n); checking every max(1, n/20) samples keeps it a small share of sampling.
int64_t next_check_after(int64_t n) { return n + std::max<int64_t>(1, n / 20); }
// A candidate stop the bootstrap did not confirm: wait for n to grow by a quarter.
int64_t next_confirmation_after(int64_t n) { return n + std::max<int64_t>(1, n / 4); }

bool cap_reached(int64_t n, const StoppingRule& rule) {
  return rule.max_samples > 0 && n >= rule.max_samples;
}

}  // namespace

SamplingResult sample_one(const TimedRun& run, const SamplerOptions& options) {
  const MonotonicClock clock = clock_or_default(options.clock);
  const StoppingRule& rule = options.stopping;
  SamplingResult result;
  const double start = clock();
  for (int64_t index = 0; index < options.warmup; ++index) run();
  result.warmup_runs = options.warmup;

  int64_t next_check = std::max<int64_t>(rule.min_samples, 1);
  for (;;) {
    result.a.push_back(run());
    result.order.push_back('A');
    auto n = static_cast<int64_t>(result.a.size());
    double elapsed = clock() - start;
    bool forced = elapsed >= rule.budget_s || cap_reached(n, rule);
    if (!forced && n < next_check) continue;
    StopDecision decision = should_stop(result.a, elapsed, rule);
    if (decision.reason == StopReason::kPrecisionReached) {
      ArmSummary summary = summarize(result.a, {.confidence = rule.confidence,
                                                .resamples = options.compare.resamples,
                                                .seed = options.compare.seed});
      if (summary.relative_half_width <= rule.precision) {
        decision.relative_half_width = summary.relative_half_width;
        decision.minimum_detectable_effect = summary.minimum_detectable_effect;
        result.stop = decision;
        break;
      }
      next_check = next_confirmation_after(n);
      if (forced) {
        // The cheap interval was narrow enough but the bootstrap's was not, and time is up.
        decision.reason =
            elapsed >= rule.budget_s ? StopReason::kBudgetSpent : StopReason::kSampleCapReached;
        decision.relative_half_width = summary.relative_half_width;
        decision.minimum_detectable_effect = summary.minimum_detectable_effect;
        result.stop = decision;
        break;
      }
      continue;
    }
    if (decision.stop) {
      result.stop = decision;
      break;
    }
    next_check = next_check_after(n);
  }
  result.elapsed_s = clock() - start;
  return result;
}

SamplingResult sample_interleaved(const TimedRun& run_a, const TimedRun& run_b,
                                  const SamplerOptions& options) {
  const MonotonicClock clock = clock_or_default(options.clock);
  const StoppingRule& rule = options.stopping;
  SamplingResult result;
  SplitMix64 order_rng(options.seed);
  const double start = clock();
  for (int64_t index = 0; index < options.warmup; ++index) {
    run_a();
    run_b();
  }
  result.warmup_runs = options.warmup;

  int64_t next_check = std::max<int64_t>(rule.min_samples, 1);
  for (;;) {
    if ((order_rng.next() & 1) == 0) {
      result.a.push_back(run_a());
      result.b.push_back(run_b());
      result.order += "AB";
    } else {
      result.b.push_back(run_b());
      result.a.push_back(run_a());
      result.order += "BA";
    }
    auto n = static_cast<int64_t>(result.a.size());
    double elapsed = clock() - start;
    bool forced = elapsed >= rule.budget_s || cap_reached(n, rule);
    if (!forced && n < next_check) continue;
    StopDecision decision = should_stop_ab(result.a, result.b, elapsed, rule);
    if (decision.reason == StopReason::kPrecisionReached) {
      Comparison comparison = compare(result.a, result.b, options.compare);
      decision.relative_half_width = comparison.relative_half_width;
      decision.minimum_detectable_effect = comparison.minimum_detectable_effect;
      if (comparison.relative_half_width <= rule.precision) {
        result.stop = decision;
        break;
      }
      next_check = next_confirmation_after(n);
      if (forced) {
        decision.reason =
            elapsed >= rule.budget_s ? StopReason::kBudgetSpent : StopReason::kSampleCapReached;
        result.stop = decision;
        break;
      }
      continue;
    }
    if (decision.stop) {
      result.stop = decision;
      break;
    }
    next_check = next_check_after(n);
  }
  result.elapsed_s = clock() - start;
  return result;
}

}  // namespace loupe::bench
