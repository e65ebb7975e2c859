// The bench sampler: fresh inputs per timed call, warm-up, interleaved randomised blocks,
// thread counts, verification of a few timed calls. Writes raw samples; decides no verdict.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <random>

#include "bench/stopping.hpp"
#include "loupe/bench.hpp"
#include "subject/runtime.hpp"

namespace loupe {
namespace detail {

class BenchRunner {
 public:
  BenchRunner(const ProbeDefinition& probe, const subject::RunOptions& options,
              subject::ObservationFiles& files)
      : probe_(probe), options_(options), files_(files) {}

  void skip(std::string reason) {
    skipped_ = true;
    skip_reason_ = std::move(reason);
  }
  bool skipped() const { return skipped_; }
  void set_bytes(double bytes) { bytes_per_call_ = bytes; }
  void set_flops(double flops) { flops_per_call_ = flops; }
  void set_timer(std::unique_ptr<Timer> timer) { timer_ = std::move(timer); }
  void set_verify_tolerance(std::string metric, double bound) {
    verify_metric_ = std::move(metric);
    verify_bound_ = bound;
  }
  void exec(ErasedBench bench);
  Json result() const;

 private:
  struct VariantSamples {
    std::string name;
    std::vector<double> seconds_per_call;
    std::vector<int64_t> threads_before;
    std::vector<int64_t> threads_after;
    int verified = 0;
    size_t forced_verify_at = 0;
  };

  // Times `calls` calls, each on a fresh input set; returns the seconds and, in `chosen_seed` /
  // `chosen_work`, one of the calls picked at random for verification.
  double time_calls(const ErasedBench& bench, size_t variant, size_t calls, uint64_t* chosen_seed,
                    std::shared_ptr<void>* chosen_work);
  void verify(const ErasedBench& bench, size_t variant, uint64_t seed,
              const std::shared_ptr<void>& timed_work);

  const ProbeDefinition& probe_;
  const subject::RunOptions& options_;
  subject::ObservationFiles& files_;
  bool skipped_ = false;
  std::string skip_reason_;
  double bytes_per_call_ = 0;
  double flops_per_call_ = 0;
  std::unique_ptr<Timer> timer_ = std::make_unique<SteadyClockTimer>();
  std::string verify_metric_ = "rms_ratio";
  double verify_bound_ = 1e-6;
  bool executed_ = false;
  uint64_t next_work_ = 0;
  size_t calls_per_sample_ = 1;
  double warmup_s_ = 0;
  double sampling_s_ = 0;
  std::string stop_reason_;
  std::vector<double> stop_half_widths_;  // per decided quantity: the one median, or each ratio
  std::vector<double> stop_effects_;
  std::vector<VariantSamples> variants_;
  std::vector<std::vector<int>> block_orders_;
  Json verified_ = Json::array();
  std::string samples_file_;
};

}  // namespace detail

namespace {

int64_t thread_count() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoll(line.substr(8));
  }
  return -1;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

namespace detail {

double BenchRunner::time_calls(const ErasedBench& bench, size_t variant, size_t calls,
                               uint64_t* chosen_seed, std::shared_ptr<void>* chosen_work) {
  // A fresh input set per timed call, built before the clock starts.
  std::vector<std::shared_ptr<void>> works;
  std::vector<uint64_t> seeds;
  works.reserve(calls);
  seeds.reserve(calls);
  for (size_t index = 0; index < calls; ++index) {
    seeds.push_back(subject::derive_seed(options_.seed, 1000 + next_work_++));
    works.push_back(bench.make(seeds.back()));
  }
  const auto& call = bench.variants[variant].second;
  timer_->start();
  for (auto& work : works) call(work.get());
  const double elapsed = timer_->stop();
  // Any call of the batch may be the one verified, so a body cannot be honest only on the last.
  const size_t chosen = static_cast<size_t>(subject::derive_seed(seeds.back(), 3) % calls);
  if (chosen_seed != nullptr) *chosen_seed = seeds[chosen];
  if (chosen_work != nullptr) *chosen_work = works[chosen];
  return elapsed;
}

void BenchRunner::verify(const ErasedBench& bench, size_t variant, uint64_t seed,
                         const std::shared_ptr<void>& timed_work) {
  VariantSamples& samples = variants_[variant];
  const std::vector<NamedTensor> timed = bench.outputs(timed_work.get());
  std::shared_ptr<void> fresh = bench.make(seed);
  bench.variants[variant].second(fresh.get());
  const std::vector<NamedTensor> untimed = bench.outputs(fresh.get());
  Json entry = Json::object();
  entry["variant"] = samples.name;
  entry["sample"] = samples.seconds_per_call.size() - 1;
  entry["seed"] = seed;
  Json timed_files = Json::object();
  Json untimed_files = Json::object();
  const std::string stem =
      "verify/" + samples.name + "." + std::to_string(samples.seconds_per_call.size() - 1);
  for (const auto& output : timed) {
    timed_files[output.name] = files_.write_tensor(stem + ".timed." + output.name, output.tensor);
  }
  for (const auto& output : untimed) {
    untimed_files[output.name] =
        files_.write_tensor(stem + ".untimed." + output.name, output.tensor);
  }
  entry["timed"] = std::move(timed_files);
  entry["untimed"] = std::move(untimed_files);
  verified_.push_back(std::move(entry));
  ++samples.verified;
}

void BenchRunner::exec(ErasedBench bench) {
  if (skipped_) return;
  if (executed_) {
    throw Error(ErrorCode::kInternal, "bench '" + probe_.name + "' calls exec twice",
                "one exec per point; declare alternatives as variants");
  }
  executed_ = true;
  if (bench.variants.empty()) {
    throw Error(ErrorCode::kInternal, "bench '" + probe_.name + "': exec with no variants");
  }
  for (const auto& [name, call] : bench.variants) {
    if (std::count_if(bench.variants.begin(), bench.variants.end(),
                      [&](const auto& other) { return other.first == name; }) > 1) {
      throw Error(ErrorCode::kInternal,
                  "bench '" + probe_.name + "': variant '" + name + "' is declared twice");
    }
    variants_.push_back({name, {}, {}, {}, 0, 0});
  }
  std::mt19937_64 rng(subject::derive_seed(options_.seed, 2));

  // Warm-up: every variant at least twice and for a tenth of the budget (at most 0.5 s), which
  // also sizes the batch of calls one sample times to about a millisecond.
  const double warmup_start = now_s();
  const double warmup_budget = std::min(0.5, 0.1 * options_.budget_s);
  std::vector<double> call_times;
  double make_seconds = 0;
  int64_t makes = 0;
  for (size_t variant = 0; variant < bench.variants.size(); ++variant) {
    const double variant_start = now_s();
    for (int call = 0; call < 2 || now_s() - variant_start < warmup_budget / bench.variants.size();
         ++call) {
      const double before_make = now_s();
      const double seconds = time_calls(bench, variant, 1, nullptr, nullptr);
      make_seconds += now_s() - before_make - seconds;
      ++makes;
      call_times.push_back(seconds);
      if (call > 1000) break;
    }
  }
  std::sort(call_times.begin(), call_times.end());
  const double typical_call = call_times[call_times.size() / 2];
  const double typical_make = make_seconds / static_cast<double>(std::max<int64_t>(makes, 1));
  // About a millisecond of calls per sample, but never so many that building their fresh inputs
  // takes more than a twentieth of the budget.
  constexpr double kTargetSampleSeconds = 1e-3;
  const double by_time = typical_call > 0 ? std::ceil(kTargetSampleSeconds / typical_call) : 1e4;
  const double by_inputs =
      typical_make > 0 ? std::floor(0.05 * options_.budget_s / typical_make) : 1e4;
  calls_per_sample_ = static_cast<size_t>(std::clamp(std::min(by_time, by_inputs), 1.0, 10000.0));
  warmup_s_ = now_s() - warmup_start;

  constexpr size_t kMinSamples = 10;  // the stopping rule's default minimum
  constexpr int64_t kMaxSamples = 100000;
  constexpr int kMaxVerified = 3;
  for (auto& samples : variants_) samples.forced_verify_at = rng() % kMinSamples;
  const double start = now_s();
  std::vector<int> order(bench.variants.size());
  for (size_t index = 0; index < order.size(); ++index) order[index] = static_cast<int>(index);
  while (true) {
    std::shuffle(order.begin(), order.end(), rng);
    block_orders_.push_back(order);
    for (int variant : order) {
      VariantSamples& samples = variants_[variant];
      uint64_t last_seed = 0;
      std::shared_ptr<void> last_work;
      const int64_t before = thread_count();
      const double elapsed = time_calls(bench, variant, calls_per_sample_, &last_seed, &last_work);
      const int64_t after = thread_count();
      samples.seconds_per_call.push_back(elapsed / static_cast<double>(calls_per_sample_));
      samples.threads_before.push_back(before);
      samples.threads_after.push_back(after);
      const size_t index = samples.seconds_per_call.size() - 1;
      const bool chosen = index == samples.forced_verify_at || rng() % 16 == 0;
      if (bench.outputs && chosen && samples.verified < kMaxVerified) {
        verify(bench, variant, last_seed, last_work);
      }
    }
    // The bench layer's stopping rule (src/bench/stopping.hpp, compiled into libloupe): every
    // variant's ratio to the first (or the one variant's median) within precision, or the
    // budget spent.
    const double elapsed = now_s() - warmup_start;  // the budget includes the warm-up
    bench::StoppingRule rule;
    rule.precision = options_.precision;
    rule.budget_s = options_.budget_s;
    rule.max_samples = kMaxSamples;
    std::vector<bench::StopDecision> decisions;
    if (variants_.size() == 1) {
      decisions.push_back(bench::should_stop(variants_[0].seconds_per_call, elapsed, rule));
    }
    for (size_t variant = 1; variant < variants_.size(); ++variant) {
      decisions.push_back(bench::should_stop_ab(
          variants_[0].seconds_per_call, variants_[variant].seconds_per_call, elapsed, rule));
    }
    bool all_precise = true;
    std::optional<bench::StopDecision> forced;
    for (const auto& decision : decisions) {
      all_precise = all_precise && decision.reason == bench::StopReason::kPrecisionReached;
      if (decision.reason == bench::StopReason::kBudgetSpent ||
          decision.reason == bench::StopReason::kSampleCapReached) {
        forced = decision;
      }
    }
    if (all_precise || forced) {
      stop_reason_ = std::string(bench::stop_reason_name(
          all_precise ? bench::StopReason::kPrecisionReached : forced->reason));
      for (const auto& decision : decisions) {
        stop_half_widths_.push_back(decision.relative_half_width);
        stop_effects_.push_back(decision.minimum_detectable_effect);
      }
      break;
    }
  }
  sampling_s_ = now_s() - start;

  // A variant that ran out of budget before any sample was verified still gets one timed call
  // checked, so the guard never silently does nothing.
  if (bench.outputs) {
    for (size_t variant = 0; variant < variants_.size(); ++variant) {
      if (variants_[variant].verified > 0) continue;
      uint64_t chosen_seed = 0;
      std::shared_ptr<void> chosen_work;
      time_calls(bench, variant, calls_per_sample_, &chosen_seed, &chosen_work);
      verify(bench, variant, chosen_seed, chosen_work);
    }
  }

  Json samples_json = Json::object();
  samples_json["unit"] = "seconds_per_call";
  samples_json["calls_per_sample"] = calls_per_sample_;
  Json variants = Json::array();
  for (const auto& samples : variants_) {
    Json entry = Json::object();
    entry["name"] = samples.name;
    entry["samples"] = samples.seconds_per_call;
    entry["threads_before"] = samples.threads_before;
    entry["threads_after"] = samples.threads_after;
    variants.push_back(std::move(entry));
  }
  samples_json["variants"] = std::move(variants);
  samples_json["block_orders"] = block_orders_;
  samples_file_ = "samples.json";
  std::ofstream out(files_.dir() / samples_file_);
  out << samples_json.dump() << "\n";
  if (!out) {
    throw Error(ErrorCode::kSubject, "cannot write " + (files_.dir() / samples_file_).string());
  }
  files_.add(samples_file_, "samples");
}

Json BenchRunner::result() const {
  Json bench = Json::object();
  bench["skipped"] = skipped_ ? Json(skip_reason_) : Json(nullptr);
  bench["executed"] = executed_;
  bench["timer"] = std::string(timer_->name());
  bench["bytes_per_call"] = bytes_per_call_;
  bench["flops_per_call"] = flops_per_call_;
  bench["precision"] = options_.precision;
  bench["budget_s"] = options_.budget_s;
  bench["calls_per_sample"] = calls_per_sample_;
  bench["warmup_s"] = warmup_s_;
  bench["sampling_s"] = sampling_s_;
  bench["stop_reason"] = stop_reason_;
  bench["stop_relative_half_width"] = stop_half_widths_;
  bench["stop_minimum_detectable_effect"] = stop_effects_;
  Json names = Json::array();
  for (const auto& samples : variants_) names.push_back(samples.name);
  bench["variants"] = std::move(names);
  bench["samples_file"] = samples_file_;
  Json tolerance = Json::object();
  tolerance["metric"] = verify_metric_;
  tolerance["bound"] = verify_bound_;
  bench["verify_tolerance"] = std::move(tolerance);
  bench["verified"] = verified_;
  return bench;
}

}  // namespace detail

void BenchState::skip(std::string reason) { runner_->skip(std::move(reason)); }
bool BenchState::skipped() const { return runner_->skipped(); }
void BenchState::set_bytes_per_call(double bytes) { runner_->set_bytes(bytes); }
void BenchState::set_flops_per_call(double flops) { runner_->set_flops(flops); }
void BenchState::set_timer(std::unique_ptr<Timer> timer) { runner_->set_timer(std::move(timer)); }
void BenchState::set_verify_tolerance(std::string metric, double bound) {
  runner_->set_verify_tolerance(std::move(metric), bound);
}
void BenchState::exec_erased(detail::ErasedBench bench) { runner_->exec(std::move(bench)); }

namespace subject {

Json run_bench(const detail::ProbeDefinition& probe, const Point& point, const RunOptions& options,
               ObservationFiles& files) {
  if (!probe.bench_body) {
    throw Error(ErrorCode::kInternal, "bench '" + probe.name + "' has no body",
                "add .body([](loupe::BenchState& state) { ... state.exec(...); })");
  }
  detail::BenchRunner runner(probe, options, files);
  BenchState state(point, runner);
  probe.bench_body(state);
  if (!state.skipped()) {
    Json result = runner.result();
    if (!result["executed"].get<bool>()) {
      throw Error(ErrorCode::kInternal,
                  "bench '" + probe.name + "': the body neither called exec nor skip",
                  "call state.exec(make, variants) or state.skip(\"reason\")");
    }
    return result;
  }
  return runner.result();
}

Json run_scenario(const detail::ProbeDefinition& probe, const Point& point,
                  const RunOptions& options, ObservationFiles& files) {
  if (!probe.scenario_body) {
    throw Error(ErrorCode::kInternal, "scenario '" + probe.name + "' has no body",
                "add .body([](loupe::ScenarioState& state) { ... })");
  }
  ScenarioState state(point, options.seed, options.out_dir);
  const double start = now_s();
  probe.scenario_body(state);
  const double wall = now_s() - start;
  bool has_wall = false;
  for (const auto& [name, value] : state.metrics()) has_wall = has_wall || name == "wall_s";
  if (!has_wall) state.record_metric("wall_s", wall);
  Json scenario = Json::object();
  Json metrics = Json::object();
  for (const auto& [name, value] : state.metrics()) metrics[name] = number_to_json(value);
  scenario["metrics"] = std::move(metrics);
  Json traces = Json::array();
  for (const auto& [path, kind] : state.files()) {
    if (!std::filesystem::exists(options.out_dir / path)) {
      throw Error(ErrorCode::kSubject, "scenario '" + probe.name + "' declares file '" + path +
                                           "' but did not write it under " +
                                           options.out_dir.string());
    }
    files.add(path, kind);
    if (kind == "trace") traces.push_back(path);
  }
  scenario["traces"] = std::move(traces);
  return scenario;
}

}  // namespace subject
}  // namespace loupe
