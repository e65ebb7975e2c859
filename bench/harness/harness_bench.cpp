// harness_bench — measures loupe's bench harness itself: is it honest (A/A), is it sensitive
// (a 3 % slower body), how fast does it decide, and what does a verdict's bootstrap cost.
//
// Bodies run in-process through the same interleaved sampler, stopping rule and verdict code as
// every other bench (src/bench/sampler.hpp, compare.hpp). Each comparison has its own seed
// (base seed + index), so a run is reproducible apart from the machine's noise.
//   build/bin/harness_bench                    200 comparisons per experiment (minutes)
//   build/bin/harness_bench --comparisons 20   a quick look
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/compare.hpp"
#include "bench/sampler.hpp"
#include "core/statistics.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using loupe::bench::AbVerdict;

struct Settings {
  int comparisons = 200;
  double body_us = 100.0;
  double effect = 0.03;
  double threshold = 0.02;
  double precision = 0.01;
  double budget_s = 10.0;
  double jitter = 0.0;  // each call runs (1 + jitter·u)× the iterations, u uniform in [0, 1)
  bool jitter_given = false;
  uint64_t seed = 1;
  bool skip_aa = false;
  bool skip_sensitivity = false;
};

// A dependent chain of integer and floating-point arithmetic: no memory traffic, nothing the
// compiler can hoist, time linear in `iterations`.
__attribute__((noinline)) double arithmetic_body(int64_t iterations) {
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  double accumulator = 0.0;
  for (int64_t step = 0; step < iterations; ++step) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    accumulator += static_cast<double>(state >> 40) * 1e-7;
    accumulator *= 0.999999;
  }
  return accumulator;
}

volatile double body_sink = 0.0;

double time_body(int64_t iterations) {
  auto start = Clock::now();
  body_sink = arithmetic_body(iterations);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Iterations for a body of about `target_us`, from the median of a few timed runs.
int64_t calibrate(double target_us) {
  int64_t iterations = 1000;
  for (;;) {
    std::vector<double> times;
    for (int run = 0; run < 9; ++run) times.push_back(time_body(iterations));
    double median_s = loupe::median(times);
    if (median_s > 20e-6) {
      return std::max<int64_t>(1, static_cast<int64_t>(iterations * (target_us * 1e-6) / median_s));
    }
    iterations *= 4;
  }
}

struct Tally {
  int faster = 0;
  int slower = 0;
  int same = 0;
  int ambiguous = 0;
  std::vector<double> seconds_to_verdict;
  std::vector<double> samples_per_arm;
  std::vector<double> ratios;
  void add(const loupe::bench::Comparison& comparison, double seconds) {
    switch (comparison.verdict) {
      case AbVerdict::kFaster:
        ++faster;
        break;
      case AbVerdict::kSlower:
        ++slower;
        break;
      case AbVerdict::kSame:
        ++same;
        break;
      case AbVerdict::kAmbiguous:
        ++ambiguous;
        break;
    }
    seconds_to_verdict.push_back(seconds);
    samples_per_arm.push_back(static_cast<double>(comparison.a.n));
    ratios.push_back(comparison.ratio);
  }
  int total() const { return faster + slower + same + ambiguous; }
};

Tally run_experiment(const char* name, int64_t iterations_a, int64_t iterations_b,
                     const Settings& settings, uint64_t seed_base) {
  Tally tally;
  // Synthetic noise of a known size, drawn outside the timed region from a seeded stream per arm.
  auto jittered = [&settings](int64_t iterations, uint64_t seed) -> loupe::bench::TimedRun {
    auto rng = std::make_shared<loupe::SplitMix64>(seed);
    double jitter = settings.jitter;
    return [iterations, jitter, rng] {
      auto scaled =
          static_cast<int64_t>(static_cast<double>(iterations) * (1.0 + jitter * rng->uniform()));
      return time_body(scaled);
    };
  };
  loupe::bench::TimedRun run_a = jittered(iterations_a, seed_base ^ 0xa11ce);
  loupe::bench::TimedRun run_b = jittered(iterations_b, seed_base ^ 0xb0b);
  for (int index = 0; index < settings.comparisons; ++index) {
    loupe::bench::SamplerOptions options;
    options.stopping.precision = settings.precision;
    options.stopping.budget_s = settings.budget_s;
    options.warmup = 1;
    options.seed = seed_base + static_cast<uint64_t>(index);
    options.compare = {.threshold = settings.threshold,
                       .confidence = options.stopping.confidence,
                       .resamples = 2000,
                       .seed = options.seed};
    auto start = Clock::now();
    loupe::bench::SamplingResult sampling = loupe::bench::sample_interleaved(run_a, run_b, options);
    loupe::bench::Comparison comparison =
        loupe::bench::compare(sampling.a, sampling.b, options.compare);
    double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    tally.add(comparison, seconds);
    std::fprintf(stderr, "\r%s: %d/%d", name, index + 1, settings.comparisons);
  }
  std::fprintf(stderr, "\n");
  return tally;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  return loupe::quantile(values, p);
}

void print_row(const char* name, const Tally& tally, const char* figure, double value,
               const char* target) {
  std::printf("| %-27s | %5d | %6d | %6d | %4d | %9d | %-28s %6.2f%% | %-8s |\n", name,
              tally.total(), tally.faster, tally.slower, tally.same, tally.ambiguous, figure,
              value * 100.0, target);
}

void print_timing(const char* name, const Tally& tally) {
  std::printf(
      "| %-27s | time to verdict median %.3f s, p90 %.3f s, max %.3f s | samples per arm "
      "median %.0f | ratio median %.4f |\n",
      name, percentile(tally.seconds_to_verdict, 0.5), percentile(tally.seconds_to_verdict, 0.9),
      percentile(tally.seconds_to_verdict, 1.0), percentile(tally.samples_per_arm, 0.5),
      percentile(tally.ratios, 0.5));
}

// The cost of one verdict (2000 bootstrap resamples of each arm) at a few sample counts.
void print_compare_cost() {
  std::printf("\n| samples per arm | compare() with 2000 resamples |\n|---|---|\n");
  for (int n : {100, 1000, 10000, 100000, 1000000}) {
    std::vector<double> a;
    std::vector<double> b;
    loupe::SplitMix64 rng(17);
    for (int index = 0; index < n; ++index) {
      a.push_back(1.0 + 0.05 * rng.uniform());
      b.push_back(1.02 + 0.05 * rng.uniform());
    }
    std::vector<double> times;
    for (int repeat = 0; repeat < 5; ++repeat) {
      auto start = Clock::now();
      auto comparison = loupe::bench::compare(a, b, {.seed = static_cast<uint64_t>(repeat)});
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      body_sink = comparison.ratio;
    }
    std::printf("| %d | %.2f ms (median of 5) |\n", n, loupe::median(times) * 1e3);
  }
}

[[noreturn]] void usage(const char* problem) {
  std::fprintf(stderr,
               "harness_bench: %s\n"
               "usage: harness_bench [--comparisons N] [--body-us US] [--effect F] "
               "[--threshold T] [--precision P] [--budget S] [--jitter F] [--seed N] [--skip-aa] "
               "[--skip-sensitivity]\n",
               problem);
  std::exit(2);
}

Settings parse(int argc, char** argv) {
  Settings settings;
  for (int index = 1; index < argc; ++index) {
    std::string flag = argv[index];
    auto value = [&]() -> const char* {
      if (index + 1 >= argc) usage(("missing value after " + flag).c_str());
      return argv[++index];
    };
    if (flag == "--comparisons") {
      settings.comparisons = std::atoi(value());
    } else if (flag == "--body-us") {
      settings.body_us = std::atof(value());
    } else if (flag == "--effect") {
      settings.effect = std::atof(value());
    } else if (flag == "--threshold") {
      settings.threshold = std::atof(value());
    } else if (flag == "--precision") {
      settings.precision = std::atof(value());
    } else if (flag == "--budget") {
      settings.budget_s = std::atof(value());
    } else if (flag == "--jitter") {
      settings.jitter = std::atof(value());
      settings.jitter_given = true;
    } else if (flag == "--seed") {
      settings.seed = std::strtoull(value(), nullptr, 10);
    } else if (flag == "--skip-aa") {
      settings.skip_aa = true;
    } else if (flag == "--skip-sensitivity") {
      settings.skip_sensitivity = true;
    } else {
      usage(("unknown flag " + flag).c_str());
    }
  }
  if (settings.comparisons < 1) usage("--comparisons must be at least 1");
  if (!(settings.body_us > 0.0)) usage("--body-us must be positive");
  if (!(settings.budget_s > 0.0)) usage("--budget must be positive");
  if (settings.jitter < 0.0) usage("--jitter must be 0 or more");
  return settings;
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings = parse(argc, argv);
  int64_t iterations = calibrate(settings.body_us);
  int64_t slower_iterations =
      static_cast<int64_t>(static_cast<double>(iterations) * (1.0 + settings.effect));
  std::vector<double> check;
  for (int run = 0; run < 51; ++run) check.push_back(time_body(iterations));
  std::printf(
      "harness_bench: body %lld iterations, median %.1f us (interquartile range %.3f%% of the "
      "median); %d comparisons per experiment; threshold %g, precision %g, budget %g s, seeds "
      "from %llu\n\n",
      static_cast<long long>(iterations), loupe::median(check) * 1e6,
      (loupe::quantile(check, 0.75) - loupe::quantile(check, 0.25)) / loupe::median(check) * 100.0,
      settings.comparisons, settings.threshold, settings.precision, settings.budget_s,
      static_cast<unsigned long long>(settings.seed));

  // Without --jitter: the body as it is (nearly noise-free) and with 20 % uniform jitter (a CV of
  // about 5 %, like a body that touches memory on a busy machine).
  std::vector<double> jitters =
      settings.jitter_given ? std::vector<double>{settings.jitter} : std::vector<double>{0.0, 0.2};
  struct Row {
    std::string name;
    Tally tally;
  };
  std::vector<Row> rows;
  std::printf(
      "| experiment                  |     n | FASTER | SLOWER | SAME | AMBIGUOUS | figure "
      "                              | target   |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (double jitter : jitters) {
    Settings run_settings = settings;
    run_settings.jitter = jitter;
    char suffix[48];
    std::snprintf(suffix, sizeof(suffix), ", jitter %g", jitter);
    if (!settings.skip_aa) {
      Tally aa = run_experiment("A/A", iterations, iterations, run_settings, settings.seed);
      double false_rate = static_cast<double>(aa.faster + aa.slower) / aa.total();
      std::string name = std::string("A/A") + suffix;
      print_row(name.c_str(), aa, "false FASTER/SLOWER rate", false_rate, "<= 1%");
      rows.push_back({name, aa});
    }
    if (!settings.skip_sensitivity) {
      Tally sensitive = run_experiment("sensitivity", iterations, slower_iterations, run_settings,
                                       settings.seed + 1'000'000);
      double hit_rate = static_cast<double>(sensitive.slower) / sensitive.total();
      char name[64];
      std::snprintf(name, sizeof(name), "B %.0f%% slower%s", settings.effect * 100.0, suffix);
      print_row(name, sensitive, "called SLOWER", hit_rate, ">= 95%");
      rows.push_back({name, sensitive});
    }
  }
  std::printf("\n");
  for (const auto& row : rows) print_timing(row.name.c_str(), row.tally);
  std::printf("(time to verdict target: median <= 2 s for a ~100 us body)\n");
  print_compare_cost();
  return 0;
}
