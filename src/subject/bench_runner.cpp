// The bench sampler: fresh inputs per timed call, warm-up, interleaved randomised blocks,
// thread counts, verification of a few timed calls. Writes raw samples; decides no verdict.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <thread>

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
  // The counters pass (RunOptions::counters_pass): the selected variants' calls, untimed.
  void run_counters_pass(const ErasedBench& bench);
  Json counters_pass_ = nullptr;

 private:
  // The content-cache probe: per variant, batches on fresh inputs alternated with batches whose
  // every input set repeats the content of one already timed (separate buffers).
  void time_replays(const ErasedBench& bench, uint64_t seen_seed);
  // What this machine can do at the declared work: the best streaming-read rate over a buffer of
  // bytes_per_call bytes, and the rate of a chain-parallel multiply-add loop.
  void measure_roofline();
  Json replays_ = Json::array();
  Json roofline_ = nullptr;

 private:
  struct VariantSamples {
    std::string name;
    std::vector<double> seconds_per_call;
    std::vector<int64_t> threads_before;
    std::vector<int64_t> threads_after;
    int verified = 0;
    size_t forced_verify_at = 0;
    std::map<std::string, std::vector<double>> facts;  // the timer's per-sample facts
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
  std::map<std::string, int64_t> dropped_;  // samples the timer rejected, by reason
  std::string samples_file_;
  std::vector<uint64_t> last_seeds_;  // the seeds of the last timed batch
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
  last_seeds_ = seeds;
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
    variants_.push_back({name, {}, {}, {}, 0, 0, {}});
  }
  if (options_.counters_pass > 0) {
    run_counters_pass(bench);
    return;
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
      // A sample the timer rejects (the GPU clock throttled under it) is counted, not kept —
      // unless rejections outnumber kept samples, where dropping would bias what remains.
      const std::string drop = timer_->drop_reason();
      if (!drop.empty() &&
          dropped_[drop] <
              std::max<int64_t>(10, static_cast<int64_t>(samples.seconds_per_call.size()))) {
        ++dropped_[drop];
        continue;
      }
      for (const auto& [fact, value] : timer_->sample_facts()) {
        samples.facts[fact].push_back(value);
      }
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
  if (!last_seeds_.empty()) time_replays(bench, last_seeds_.front());
  if (bytes_per_call_ > 0 || flops_per_call_ > 0) measure_roofline();

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
    for (const auto& [fact, values] : samples.facts) entry[fact] = values;
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

void BenchRunner::run_counters_pass(const ErasedBench& bench) {
  std::vector<size_t> selected;
  for (size_t variant = 0; variant < bench.variants.size(); ++variant) {
    if (options_.counters_variant.empty() ||
        bench.variants[variant].first == options_.counters_variant) {
      selected.push_back(variant);
    }
  }
  if (selected.empty()) {
    std::string names;
    for (const auto& samples : variants_) names += (names.empty() ? "" : ", ") + samples.name;
    throw Error(ErrorCode::kUsage, "--counters-variant '" + options_.counters_variant +
                                       "': bench '" + probe_.name +
                                       "' has no such variant; the variants are: " + names);
  }
  // No timer runs and no sample is kept: the profiler replays each launch many times, so what it
  // sees is never a timing. Fresh inputs per call, seeded like the timed calls, so the kernel
  // moves the same bytes as it does when timed.
  Json variants = Json::array();
  for (size_t variant : selected) {
    const auto& call = bench.variants[variant].second;
    for (int64_t index = 0; index < options_.counters_pass; ++index) {
      std::shared_ptr<void> work =
          bench.make(subject::derive_seed(options_.seed, 1000 + next_work_++));
      call(work.get());
    }
    variants.push_back(bench.variants[variant].first);
  }
  counters_pass_ = Json::object();
  counters_pass_["calls"] = options_.counters_pass;
  counters_pass_["variants"] = std::move(variants);
  stop_reason_ = "counters_pass";
}

void BenchRunner::time_replays(const ErasedBench& bench, uint64_t seen_seed) {
  // A few pairs: enough for a complete separation of the two sets to mean something (1 in 70 by
  // chance at four pairs), bounded to about a tenth of the budget.
  const double batch_s =
      variants_.empty() || variants_[0].seconds_per_call.empty()
          ? 0
          : variants_[0].seconds_per_call.back() * static_cast<double>(calls_per_sample_);
  const int pairs = static_cast<int>(std::clamp(
      batch_s > 0 ? std::floor(0.1 * options_.budget_s / (2.0 * batch_s * variants_.size())) : 6.0,
      4.0, 6.0));
  for (size_t variant = 0; variant < variants_.size(); ++variant) {
    std::vector<double> fresh, repeated;
    const auto& call = bench.variants[variant].second;
    for (int pair = 0; pair < pairs; ++pair) {
      fresh.push_back(time_calls(bench, variant, calls_per_sample_, nullptr, nullptr) /
                      static_cast<double>(calls_per_sample_));
      // The same content as a set timed before, in buffers of its own.
      std::vector<std::shared_ptr<void>> works;
      for (size_t index = 0; index < calls_per_sample_; ++index) {
        works.push_back(bench.make(seen_seed));
      }
      timer_->start();
      for (auto& work : works) call(work.get());
      repeated.push_back(timer_->stop() / static_cast<double>(calls_per_sample_));
    }
    Json entry = Json::object();
    entry["variant"] = variants_[variant].name;
    entry["seen_seed"] = seen_seed;
    entry["fresh"] = fresh;
    entry["repeated"] = repeated;
    replays_.push_back(std::move(entry));
  }
}

namespace {

// The best of a few streaming reads of `bytes` bytes just written, as make() leaves its inputs.
double best_read_rate(size_t bytes) {
  const size_t words = std::max<size_t>(bytes / sizeof(uint64_t), 64);
  std::vector<uint64_t> buffer(words);
  double best = 0;
  uint64_t sink = 0;
  for (int attempt = 0; attempt < 7; ++attempt) {
    for (size_t index = 0; index < words; ++index) buffer[index] = index * 0x9E3779B97F4A7C15ull;
    const auto start = std::chrono::steady_clock::now();
    uint64_t lanes[8] = {};
    size_t index = 0;
    for (; index + 8 <= words; index += 8) {
      for (int lane = 0; lane < 8; ++lane) lanes[lane] += buffer[index + lane];
    }
    for (; index < words; ++index) lanes[0] += buffer[index];
    for (uint64_t lane : lanes) sink ^= lane;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > 0) best = std::max(best, static_cast<double>(words * sizeof(uint64_t)) / seconds);
  }
  asm volatile("" : : "g"(sink) : "memory");  // the sums are used, so the reads happen
  return best;
}

// Multiply-adds in 8 independent chains (2 flops each), the best of a few runs.
double best_flop_rate() {
  constexpr int kSteps = 1 << 18;
  double best = 0;
  double sink = 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    double chains[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const auto start = std::chrono::steady_clock::now();
    for (int step = 0; step < kSteps; ++step) {
      for (double& chain : chains) chain = chain * 0.999999 + 1e-7;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (double chain : chains) sink += chain;
    if (seconds > 0) best = std::max(best, 2.0 * 8 * kSteps / seconds);
  }
  asm volatile("" : : "g"(sink) : "memory");
  return best;
}

}  // namespace

void BenchRunner::measure_roofline() {
  Json roofline = Json::object();
  if (auto ceiling = timer_->ceiling(bytes_per_call_)) {
    // The body runs on another device: its rate, not this CPU's, bounds the claim; no flop
    // ceiling is measured there.
    roofline["device"] = ceiling->device;
    roofline["method"] = ceiling->method;
    roofline["hardware_threads"] = 1;
    roofline["read_bytes_per_s"] = ceiling->bytes_per_s;
    roofline["read_margin"] = ceiling->margin;
    roofline_ = std::move(roofline);
    return;
  }
  roofline["method"] =
      "one thread: best of 7 streaming reads of a just-written buffer of bytes_per_call bytes "
      "(8 integer lanes); best of 5 runs of 8 multiply-add chains";
  roofline["hardware_threads"] = std::max(1u, std::thread::hardware_concurrency());
  if (bytes_per_call_ > 0) {
    const size_t bytes = static_cast<size_t>(std::min(bytes_per_call_, 1024.0 * 1024 * 1024));
    roofline["read_working_set_bytes"] = bytes;
    roofline["read_bytes_per_s"] = best_read_rate(bytes);
  }
  if (flops_per_call_ > 0) roofline["flops_per_s"] = best_flop_rate();
  roofline_ = std::move(roofline);
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
  Json dropped = Json::object();
  for (const auto& [reason, count] : dropped_) dropped[reason] = count;
  bench["dropped_samples"] = std::move(dropped);
  Json method = Json::object();
  for (const auto& [key, value] : timer_->method()) method[key] = value;
  bench["timer_method"] = std::move(method);
  bench["replays"] = replays_;
  bench["roofline"] = roofline_;
  bench["counters_pass"] = counters_pass_;
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
