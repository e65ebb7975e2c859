// `loupe bench --cmd A [--vs B]`: benchmark whole shell commands (src/bench/command.hpp does
// the work): one command's timing summary, or B against A with a verdict.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <string>

#include "bench/command.hpp"
#include "bench/report.hpp"
#include "cli/commands.hpp"
#include "core/json.hpp"
#include "loupe/error.hpp"

namespace loupe::cli {
namespace {

struct BenchOptions {
  std::string command_a;
  std::string command_b;
  double threshold = 0.02;
  double precision = 0.01;
  double budget_s = 10.0;
  int64_t min_samples = 10;
  int64_t warmup = 1;
  int resamples = 2000;
  std::optional<uint64_t> seed;
  std::string fail_on;  // "", "slower", "ambiguous" or "not-faster"
  bool json = false;
};

// --fail-on is a ladder, so a CI step can ask for as much evidence as it needs: "slower" fails on
// SLOWER; "ambiguous" also on AMBIGUOUS (not shown to be no slower); "not-faster" on anything but
// FASTER.
bool fails(const std::string& fail_on, bench::AbVerdict verdict) {
  if (fail_on.empty()) return false;
  if (verdict == bench::AbVerdict::kSlower) return true;
  if (fail_on == "slower") return false;
  if (verdict == bench::AbVerdict::kAmbiguous) return true;
  if (fail_on == "ambiguous") return false;
  return verdict != bench::AbVerdict::kFaster;
}

std::string format_value(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), pattern, value);
  return buffer;
}

// A duration in the unit that keeps three to four significant digits.
std::string duration_text(double seconds) {
  double magnitude = std::fabs(seconds);
  if (magnitude >= 1.0) return format_value("%.4g s", seconds);
  if (magnitude >= 1e-3) return format_value("%.4g ms", seconds * 1e3);
  if (magnitude >= 1e-6) return format_value("%.4g us", seconds * 1e6);
  return format_value("%.4g ns", seconds * 1e9);
}

std::string percent_text(double fraction) { return format_value("%.2f%%", fraction * 100.0); }

std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char character : text) {
    if (character == '\'') {
      quoted += "'\\''";
    } else {
      quoted += character;
    }
  }
  return quoted + "'";
}

void validate(const BenchOptions& options) {
  auto usage = [](const std::string& message, const std::string& hint) {
    throw Error(ErrorCode::kUsage, message, hint);
  };
  if (options.command_a.empty())
    usage("--cmd is empty", "give the command to time, e.g. --cmd 'sleep 0.01'");
  if (!(options.threshold > 0.0 && options.threshold < 1.0)) {
    usage(
        "--threshold " + format_value("%g", options.threshold) + ": expected a fraction in (0, 1)",
        "the default 0.02 calls changes beyond ±2 %");
  }
  if (!(options.precision > 0.0 && options.precision < 1.0)) {
    usage(
        "--precision " + format_value("%g", options.precision) + ": expected a fraction in (0, 1)",
        "the default 0.01 samples until the CI half-width is within 1 %");
  }
  if (!(options.budget_s > 0.0 && std::isfinite(options.budget_s))) {
    usage("--budget " + format_value("%g", options.budget_s) +
              ": expected a positive number of seconds",
          "the default is 10");
  }
  if (options.min_samples < 1) {
    usage("--min-samples " + std::to_string(options.min_samples) + ": expected at least 1",
          "a verdict needs at least " + std::to_string(bench::kMinSamplesForVerdict) +
              " samples per arm");
  }
  if (options.warmup < 0) {
    usage("--warmup " + std::to_string(options.warmup) + ": expected 0 or more",
          "the default is 1");
  }
  if (!options.fail_on.empty() && options.command_b.empty()) {
    usage("--fail-on " + options.fail_on + " needs --vs: a single command has no verdict",
          "give the command to compare against, e.g. --cmd OLD --vs NEW --fail-on slower");
  }
  if (options.resamples < 100) {
    usage("--resamples " + std::to_string(options.resamples) + ": expected at least 100",
          "the default 2000 keeps the interval's own noise small");
  }
}

std::string reproduce_line(const BenchOptions& options, uint64_t seed) {
  std::string line = "loupe bench --cmd " + shell_quote(options.command_a);
  if (!options.command_b.empty()) line += " --vs " + shell_quote(options.command_b);
  if (!options.fail_on.empty()) line += " --fail-on " + options.fail_on;
  line += " --threshold " + format_value("%g", options.threshold) + " --precision " +
          format_value("%g", options.precision) + " --budget " +
          format_value("%g", options.budget_s) + " --min-samples " +
          std::to_string(options.min_samples) + " --warmup " + std::to_string(options.warmup) +
          " --seed " + std::to_string(seed);
  return line;
}

std::string arm_line(const std::string& label, const std::string& command,
                     const bench::ArmSummary& summary) {
  return label + "  " + command + "\n   n=" + std::to_string(summary.n) + "  median " +
         duration_text(summary.median) + "  95% CI [" + duration_text(summary.median_ci.low) +
         ", " + duration_text(summary.median_ci.high) + "]  ±" +
         percent_text(summary.relative_half_width) + "  CV " + percent_text(summary.cv) + "  min " +
         duration_text(summary.min) + "\n";
}

std::string stop_line(const bench::SamplingResult& sampling, const BenchOptions& options,
                      uint64_t seed) {
  const bench::StopDecision& stop = sampling.stop;
  std::string line = "stopped: ";
  switch (stop.reason) {
    case bench::StopReason::kPrecisionReached:
      line += "precision reached (half-width " + percent_text(stop.relative_half_width) +
              " <= " + percent_text(options.precision) + ")";
      break;
    case bench::StopReason::kBudgetSpent:
      line += "budget of " + format_value("%g", options.budget_s) + " s spent at half-width " +
              percent_text(stop.relative_half_width) + " (precision " +
              percent_text(options.precision) + "); minimum detectable effect " +
              percent_text(stop.minimum_detectable_effect);
      break;
    case bench::StopReason::kSampleCapReached:
      line += "sample cap reached at half-width " + percent_text(stop.relative_half_width);
      break;
    case bench::StopReason::kContinue:
      line += "unknown";
      break;
  }
  line += " after " + format_value("%.2f", sampling.elapsed_s) + " s; " +
          std::to_string(sampling.warmup_runs) + " warm-up run(s) per arm; seed " +
          std::to_string(seed) + "\n";
  return line;
}

Json samples_json(const std::vector<double>& samples) {
  Json array = Json::array();
  for (double sample : samples) array.push_back(number_to_json(sample));
  return array;
}

void run_bench(const BenchOptions& options, CommandResult& result) {
  validate(options);
  const uint64_t seed = options.seed ? *options.seed : std::random_device{}();

  bench::CommandBenchOptions request;
  request.command_a = options.command_a;
  if (!options.command_b.empty()) request.command_b = options.command_b;
  request.sampler.stopping = {.precision = options.precision,
                              .budget_s = options.budget_s,
                              .min_samples = options.min_samples};
  request.sampler.warmup = options.warmup;
  request.sampler.seed = seed;
  request.sampler.compare = {.threshold = options.threshold,
                             .confidence = request.sampler.stopping.confidence,
                             .resamples = options.resamples,
                             .seed = seed};
  const bench::CommandBench bench = bench::bench_commands(request);
  const std::string reproduce = reproduce_line(options, seed);
  Verdict verdict = Verdict::kNone;
  if (bench.comparison && !options.fail_on.empty()) {
    verdict = fails(options.fail_on, bench.comparison->verdict) ? Verdict::kFail : Verdict::kPass;
  }

  if (options.json) {
    Envelope envelope;
    envelope.kind = "bench";
    envelope.verdict = verdict;
    Json& data = envelope.data;
    Json a = bench::summary_to_json(bench.a);
    a["command"] = options.command_a;
    data["a"] = a;
    if (bench.comparison) {
      const bench::Comparison& comparison = *bench.comparison;
      Json b = bench::summary_to_json(comparison.b);
      b["command"] = options.command_b;
      data["b"] = b;
      // --cmd is the baseline (A), --vs the candidate (B): ratio and verdict are the candidate's.
      data["ratio_of"] = "candidate/baseline";
      data["ratio"] = number_to_json(comparison.ratio);
      data["ci"] = bench::interval_to_json(comparison.ci);
      data["verdict"] = std::string(bench::ab_verdict_name(comparison.verdict));
      data["rule"] = comparison.rule;
      data["comparison"] = bench::comparison_to_json(comparison, "A", "B");
      bench::FindingContext context;
      context.subject = "shell";
      context.probe = "cmd";
      context.reproduce = reproduce;
      envelope.findings.push_back(bench::comparison_finding(comparison, context));
    }
    data["stop"] = bench::stop_to_json(bench.sampling.stop);
    data["elapsed_s"] = number_to_json(bench.sampling.elapsed_s);
    data["settings"] = Json{{"threshold", options.threshold},
                            {"precision", options.precision},
                            {"budget_s", options.budget_s},
                            {"min_samples", options.min_samples},
                            {"warmup", options.warmup},
                            {"resamples", options.resamples},
                            {"seed", seed}};
    data["reproduce"] = reproduce;
    Json samples = Json::object();
    samples["a"] = samples_json(bench.sampling.a);
    if (bench.comparison) samples["b"] = samples_json(bench.sampling.b);
    data["samples"] = samples;
    data["order"] = bench.sampling.order;
    std::cout << render_envelope(envelope) << "\n";
  } else {
    std::string text = arm_line("A", options.command_a, bench.a);
    if (bench.comparison) {
      const bench::Comparison& comparison = *bench.comparison;
      text += arm_line("B", options.command_b, comparison.b);
      text += "candidate/baseline (B/A) " + format_value("%.4f", comparison.ratio) + "  95% CI [" +
              format_value("%.4f", comparison.ci.low) + ", " +
              format_value("%.4f", comparison.ci.high) +
              "]  Mann-Whitney p=" + format_value("%.3g", comparison.p_value) + "\n";
      text += comparison.rule + "\n";
      if (!options.fail_on.empty()) {
        text += "verdict: " + std::string(verdict_name(verdict)) + " (--fail-on " +
                options.fail_on + ", the candidate (B) is " +
                std::string(bench::ab_verdict_name(comparison.verdict)) + ")\n";
      }
    }
    text += stop_line(bench.sampling, options, seed);
    text += "reproduce: " + reproduce + "\n";
    std::cout << text;
  }
  result.exit_code = verdict == Verdict::kFail ? 1 : 0;
}

void add_bench_command(CLI::App& app, CommandResult& result) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* bench = app.add_subcommand(
      "bench",
      "Benchmark whole shell commands: one command's timing, or B against A interleaved with a "
      "FASTER/SLOWER/SAME/AMBIGUOUS verdict");
  bench->add_option("--cmd", options->command_a, "the command to time (run with /bin/sh -c)")
      ->required();
  bench->add_option("--vs", options->command_b,
                    "the candidate command (B), compared against the baseline --cmd (A) as B/A");
  bench->add_option("--threshold", options->threshold,
                    "relative change that counts (default 0.02: SAME within ±2 %)");
  bench->add_option("--precision", options->precision,
                    "stop when the 95 % CI half-width is within this fraction (default 0.01)");
  bench->add_option("--budget", options->budget_s,
                    "seconds of sampling at most, warm-up included (default 10)");
  bench->add_option("--min-samples", options->min_samples,
                    "samples per arm before precision may stop sampling (default 10)");
  bench->add_option("--warmup", options->warmup, "untimed runs of each command first (default 1)");
  bench->add_option("--resamples", options->resamples, "bootstrap resamples (default 2000)");
  bench->add_option("--seed", options->seed,
                    "seed of the block order and the bootstrap (default: random, printed)");
  bench
      ->add_option("--fail-on", options->fail_on,
                   "exit 1 when B is SLOWER (slower), also AMBIGUOUS (ambiguous), or anything "
                   "but FASTER (not-faster); needs --vs")
      ->check(CLI::IsMember({"slower", "ambiguous", "not-faster"}));
  bench->add_flag("--json", options->json, "print one JSON envelope with every raw sample");
  bench->callback([options, &result] {
    result.kind = "bench";
    run_bench(*options, result);
  });
}

}  // namespace

LOUPE_REGISTER_COMMAND(30, add_bench_command);

}  // namespace loupe::cli
