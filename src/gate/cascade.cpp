// The cascade runner (see cascade.hpp).
#include "gate/cascade.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <utility>

#include "bench/report.hpp"
#include "bench/sequential.hpp"
#include "bench/stopping.hpp"
#include "core/home.hpp"
#include "core/json.hpp"
#include "core/limits.hpp"
#include "core/sha256.hpp"
#include "core/trust.hpp"
#include "gate/baseline_cache.hpp"
#include "gate/executor.hpp"
#include "probe/counters_pass.hpp"
#include "probe/runner.hpp"
#include "trace/import/import.hpp"
#include "trace/model/model.hpp"

namespace loupe::gate {
namespace {

constexpr Layer kLayers[] = {Layer::kCheck, Layer::kBench, Layer::kScenario};
// A bench round's budget: the entry's (or the subject's default, 2 s) over the rounds, at least
// this, so that a round holds a few samples of even a slow call.
constexpr double kDefaultBudgetS = 2.0;
constexpr double kMinRoundBudgetS = 0.1;
// A bench point against a baseline build costs at most this many times its round 0 (the cost of
// the 8 full rounds it took before later rounds skipped what round 0 measures once).
constexpr double kFullRoundsCost = 8.0;
// Bench entries in rounds against a baseline build take plain turns until each current point has
// this many rounds, then the point whose paired test is nearest to deciding goes next. Two ratios
// are the fewest a paired test reads; they only order the turns (no decision is taken on them),
// and a change far beyond the noise already stands apart in them: 1.42 and 1.53 (p 0.05) against
// an unchanged bench's 1.02 and 0.97 (p 0.9). A third plain round before choosing cost every slow
// bench one round of each other entry (about 11 s of kda's objective on the 2-core machine).
constexpr int64_t kWarmRounds = 2;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string gate_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

Value value_from_text(const std::string& text) {
  if (text == "true") return true;
  if (text == "false") return false;
  char* end = nullptr;
  errno = 0;
  const long long integer = std::strtoll(text.c_str(), &end, 10);
  if (!text.empty() && end == text.c_str() + text.size() && errno == 0) {
    return static_cast<int64_t>(integer);
  }
  end = nullptr;
  const double number = std::strtod(text.c_str(), &end);
  if (!text.empty() && end == text.c_str() + text.size()) return number;
  return text;
}

// The worst (largest, NaN first) value of each metric over a check's outputs.
void add_check_metrics(const Json& comparisons, std::vector<MetricValue>& metrics) {
  for (const auto& comparison : comparisons) {
    if (!comparison.contains("metrics")) continue;
    for (const auto& [name, json] : comparison["metrics"].items()) {
      const double value = number_from_json(json, "comparisons.metrics." + name);
      // Named again for the lambda: clang before 16 cannot capture a structured binding.
      const std::string& metric_name = name;
      auto existing = std::find_if(metrics.begin(), metrics.end(), [&](const MetricValue& metric) {
        return metric.name == metric_name;
      });
      if (existing == metrics.end()) {
        metrics.push_back({"", name, value});
      } else if (!std::isnan(existing->value) && (std::isnan(value) || value > existing->value)) {
        existing->value = value;
      }
    }
  }
}

// A scenario's traces give its point lock-hold metrics (lock_hold_metrics). A hold that grew
// shows against the baseline build even when nobody waited during it, so a latent hold is gated
// before it bites. The median is the one to gate on a shared machine: one preemption inside a
// hold moves the longest by milliseconds, the median not at all.
void add_lock_metrics(PointResult& point) {
  if (point.traces.empty()) return;
  for (MetricValue& metric : lock_hold_metrics(point.traces)) {
    point.metrics.push_back(std::move(metric));
  }
}

// `text` with every occurrence of the folder `from` (as a whole path component: followed by
// '/', a quote, a space or the end) replaced by `to`.
std::string replace_folder(const std::string& text, const std::string& from,
                           const std::string& to) {
  std::string out;
  size_t at = 0;
  while (true) {
    const size_t found = text.find(from, at);
    if (found == std::string::npos) break;
    const size_t end = found + from.size();
    const bool whole = end == text.size() || text[end] == '/' || text[end] == '"' ||
                       text[end] == '\'' || text[end] == ' ' || text[end] == '\n';
    out.append(text, at, found - at);
    out += whole ? to : from;
    at = end;
  }
  out.append(text, at, std::string::npos);
  return out;
}

// Whether a path is written in JSON as it is (no character JSON escapes).
bool json_plain(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    return c != '"' && c != '\\' && static_cast<unsigned char>(c) >= 0x20;
  });
}

}  // namespace

bool move_observation_paths(probe::RunOutcome& outcome, const std::string& from,
                            const std::filesystem::path& to) {
  const std::string target = to.string();
  if (from.empty() || !json_plain(from) || !json_plain(target)) return false;
  const std::filesystem::path file = to / "observation.json";
  std::string text;
  {
    std::ifstream in(file, std::ios::binary);
    if (!in) return false;
    std::ostringstream buffer;
    buffer << in.rdbuf();
    text = buffer.str();
  }
  const std::string moved = replace_folder(text, from, target);
  if (moved != text) write_file_atomically(file, moved);
  auto move = [&](std::string& field) { field = replace_folder(field, from, target); };
  for (Finding& finding : outcome.findings) {
    move(finding.claim);
    move(finding.next);
    move(finding.reproduce);
    for (std::string& path : finding.evidence.files) move(path);
  }
  for (probe::BenchComparisonRecord& record : outcome.bench_comparisons) {
    for (std::string& path : record.context.files) move(path);
  }
  move(outcome.summary);
  outcome.observation_dir = to;
  return true;
}

std::vector<MetricValue> lock_hold_metrics(const std::vector<std::string>& traces) {
  std::vector<MetricValue> out;
  trace::Model model;
  try {
    model = trace::load_traces(traces);
  } catch (const Error&) {
    return out;  // an unreadable trace is the trace analysis' finding, not a metric
  }
  auto metric_name = [](std::string name) {
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
    }
    return name;
  };
  StatsRegistry stats;
  // LOCK -> its holds; THREAD_LOCK -> that thread's holds of it, and its contended waits for it.
  std::map<std::string, std::vector<int64_t>> by_lock, by_thread, waits_by_thread;
  for (const trace::LockSpan& span : trace::derive_lock_spans(model, stats)) {
    const std::string lock = metric_name(model.tracks[span.lock].name);
    const std::string thread = metric_name(model.tracks[span.thread].name);
    if (!span.hold) {
      waits_by_thread[thread + "_" + lock].push_back(span.end_ns - span.start_ns);
      continue;
    }
    by_lock[lock].push_back(span.end_ns - span.start_ns);
    by_thread[thread + "_" + lock].push_back(span.end_ns - span.start_ns);
  }
  auto seconds = [](int64_t ns) { return static_cast<double>(ns) * 1e-9; };
  auto total = [](const std::vector<int64_t>& list) {
    return std::accumulate(list.begin(), list.end(), int64_t{0});
  };
  for (const auto& [name, list] : by_lock) {
    out.push_back({"", name + "_max_hold_s", seconds(*std::max_element(list.begin(), list.end()))});
  }
  // The median per thread only: over all threads it mixes unlike holds. The total and the count
  // beside it: a hold that got shorter but more frequent lowers the median and raises both.
  for (auto& [name, list] : by_thread) {
    std::sort(list.begin(), list.end());
    out.push_back({"", name + "_max_hold_s", seconds(list.back())});
    out.push_back({"", name + "_median_hold_s", seconds(list[list.size() / 2])});
    out.push_back({"", name + "_total_hold_s", seconds(total(list))});
    out.push_back({"", name + "_holds", static_cast<double>(list.size())});
  }
  // What holding costs the others: each thread's contended waits for each lock, in time and in
  // number; zero for a thread that held the lock and never had to wait for it (a run without a
  // wait is a sample too, not a missing one).
  // The share of the trace's span spent waiting is gated within one build: a median of waits is
  // zero in most runs of a healthy pipeline, so its ratio to the baseline's is often undefined.
  const double span_s = seconds(model.end_ns - model.start_ns);
  for (const auto& [name, list] : by_thread) waits_by_thread.try_emplace(name);
  for (const auto& [name, list] : waits_by_thread) {
    out.push_back({"", name + "_wait_s", seconds(total(list))});
    out.push_back({"", name + "_waits", static_cast<double>(list.size())});
    if (span_s > 0) out.push_back({"", name + "_wait_share", seconds(total(list)) / span_s});
  }
  return out;
}

namespace {

template <typename T>
std::vector<T>* list_of(std::vector<std::pair<std::string, std::vector<T>>>& lists,
                        const std::string& name) {
  for (auto& [key, list] : lists) {
    if (key == name) return &list;
  }
  return nullptr;
}

double median_of(std::vector<double> values) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

// A bench comparison's own finding ("bench.PROBE.slower" and the like), which merging rounds
// says again over every round; a guard's ("bench.PROBE.guard.NAME") is not one.
bool is_comparison_finding(const Finding& finding) {
  if (finding.layer != Layer::kBench) return false;
  for (bench::AbVerdict verdict : {bench::AbVerdict::kFaster, bench::AbVerdict::kSlower,
                                   bench::AbVerdict::kSame, bench::AbVerdict::kAmbiguous}) {
    if (finding.id ==
        "bench." + finding.where.probe + "." + std::string(bench::ab_verdict_id(verdict))) {
      return true;
    }
  }
  return false;
}

}  // namespace

PointResult merge_rounds(std::vector<PointResult> rounds) {
  PointResult out = std::move(rounds.front());
  // Each variant's median in each round, before the samples are pooled (the first round's
  // names from `out`, which holds them now).
  std::vector<std::string> names;
  for (size_t index = 0; index < rounds.size(); ++index) {
    for (const auto& [name, samples] : index == 0 ? out.samples : rounds[index].samples) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  auto round_median = [](PointResult& round, const std::string& name) {
    const auto* samples = list_of(round.samples, name);
    return samples == nullptr ? NAN : median_of(*samples);
  };
  out.round_medians.clear();
  for (const auto& name : names) {
    std::vector<double> medians = {round_median(out, name)};
    for (size_t index = 1; index < rounds.size(); ++index) {
      medians.push_back(round_median(rounds[index], name));
    }
    out.round_medians.emplace_back(name, std::move(medians));
  }
  if (rounds.size() == 1) return out;

  // Pool the samples; the sampler's round indices of later runs come after the earlier runs'.
  std::set<std::string> unpaired;  // a variant some run wrote without round indices
  auto next_round = [&out]() {
    int64_t next = 0;
    for (const auto& [name, list] : out.sample_rounds) {
      for (int64_t round : list) next = std::max(next, round + 1);
    }
    return next;
  };
  for (const auto& [name, samples] : out.samples) {
    const auto* list = list_of(out.sample_rounds, name);
    if (list == nullptr || list->size() != samples.size()) unpaired.insert(name);
  }
  std::vector<std::string> files = {out.observation_dir + "/observation.json"};
  for (size_t index = 1; index < rounds.size(); ++index) {
    PointResult& round = rounds[index];
    files.push_back(round.observation_dir + "/observation.json");
    const int64_t offset = next_round();
    for (auto& [name, samples] : round.samples) {
      auto* pooled = list_of(out.samples, name);
      if (pooled == nullptr) {
        out.samples.emplace_back(name, std::vector<double>{});
        out.sample_rounds.emplace_back(name, std::vector<int64_t>{});
        pooled = &out.samples.back().second;
        unpaired.insert(name);  // not in every run: its rounds pair with nothing before
      }
      auto* pooled_rounds = list_of(out.sample_rounds, name);
      if (pooled_rounds == nullptr) {
        out.sample_rounds.emplace_back(name, std::vector<int64_t>{});
        pooled_rounds = &out.sample_rounds.back().second;
      }
      const auto* own_rounds = list_of(round.sample_rounds, name);
      if (own_rounds == nullptr || own_rounds->size() != samples.size()) {
        unpaired.insert(name);
      } else {
        for (int64_t value : *own_rounds) pooled_rounds->push_back(value + offset);
      }
      pooled->insert(pooled->end(), samples.begin(), samples.end());
    }
  }
  for (const auto& name : unpaired) {
    if (auto* list = list_of(out.sample_rounds, name)) list->clear();
  }

  // The summaries over the pooled samples (throughput scales with the median).
  for (auto& [name, samples] : out.samples) {
    if (samples.empty()) continue;
    bench::SummaryOptions options;
    options.seed = out.seed;
    const bench::ArmSummary summary = bench::summarize(samples, options);
    double old_median = NAN;
    for (const auto& metric : out.metrics) {
      if (metric.variant == name && metric.name == "median_s") old_median = metric.value;
    }
    for (auto& metric : out.metrics) {
      if (metric.variant != name) continue;
      if (metric.name == "n") metric.value = static_cast<double>(summary.n);
      if (metric.name == "median_s") metric.value = summary.median;
      if (metric.name == "relative_half_width") metric.value = summary.relative_half_width;
      if (metric.name == "minimum_detectable_effect") {
        metric.value = summary.minimum_detectable_effect;
      }
      if (metric.name == "cv") metric.value = summary.cv;
      if (metric.name == "mean_s") metric.value = summary.mean;
      if (metric.name == "min_s") metric.value = summary.min;
      if (metric.name == "max_s") metric.value = summary.max;
      if (metric.name == "bytes_per_s" || metric.name == "flops_per_s") {
        metric.value *= old_median / summary.median;
      }
    }
  }

  // The variants' A/B comparisons over every round, as the analysis makes them: paired by the
  // sampler's rounds where both variants carry them.
  std::vector<bench::Comparison> comparisons;
  for (const auto& item : out.comparisons) {
    const auto* a = list_of(out.samples, item.a);
    const auto* b = list_of(out.samples, item.b);
    if (a == nullptr || b == nullptr || a->empty() || b->empty()) {
      comparisons.push_back(item.comparison);
      continue;
    }
    bench::CompareOptions options;
    options.threshold = item.comparison.threshold;
    options.confidence = item.comparison.confidence;
    options.resamples = item.comparison.resamples;
    options.seed = item.comparison.seed;
    const auto* rounds_a = list_of(out.sample_rounds, item.a);
    const auto* rounds_b = list_of(out.sample_rounds, item.b);
    comparisons.push_back(bench::compare_rounds(
        *a, rounds_a != nullptr ? std::span<const int64_t>(*rounds_a) : std::span<const int64_t>(),
        *b, rounds_b != nullptr ? std::span<const int64_t>(*rounds_b) : std::span<const int64_t>(),
        options));
  }
  if (comparisons.size() > 1) bench::control_false_discovery(comparisons);
  for (size_t index = 0; index < comparisons.size(); ++index) {
    VariantComparison& item = out.comparisons[index];
    item.comparison = comparisons[index];
    // Its finding, said again over all the rounds.
    const std::string path = item.b + " vs " + item.a;
    for (Finding& finding : out.findings) {
      if (!is_comparison_finding(finding) || finding.where.path != path) continue;
      bench::FindingContext context;
      context.subject = finding.where.subject;
      context.probe = finding.where.probe;
      context.params = finding.where.params;
      context.path = path;
      context.reproduce = finding.reproduce;
      context.files = files;
      context.name_a = item.a;
      context.name_b = item.b;
      finding = bench::comparison_finding(item.comparison, context);
    }
  }
  // What a later round found besides its comparisons — a guard that fired in that run — is the
  // point's too (once per guard and path), and a failing round fails the point.
  std::set<std::tuple<std::string, std::string, Severity>> seen;
  for (const Finding& finding : out.findings) {
    seen.emplace(finding.id, finding.where.path, finding.severity);
  }
  for (size_t index = 1; index < rounds.size(); ++index) {
    PointResult& round = rounds[index];
    out.wall_s += round.wall_s;
    if (round.verdict == Verdict::kFail) out.verdict = Verdict::kFail;
    for (Finding& finding : round.findings) {
      if (is_comparison_finding(finding) ||
          !seen.emplace(finding.id, finding.where.path, finding.severity).second) {
        continue;
      }
      out.findings.push_back(std::move(finding));
    }
  }
  return out;
}

namespace {

// The bench and scenario points of a stage against a baseline build, ordered by cost to a
// decision rather than layer by layer: a scenario repeat is one short subject run of each build,
// and the first few repeats already decide a gate whose metric moved far beyond its bound
// (bench/sequential.hpp), while a bench point costs rounds of both builds, its round 0 paying the
// runtime's fixed costs (warm-up, replays, roofline). So the scenarios' repeats up to their first
// look run first, then the bench points (cheapest first as the objective lists them), and between
// two bench points the scenarios' repeats up to their next look; the repeats past the last look
// the bench points reach run last. Bench points in rounds against a baseline build then take
// turns by entry (run_cascade's rotation): a point listed after the k-th bench point here runs
// once k bench points are done. `order`: the stage's points, repeat-major within each layer.
std::vector<PointRef> timing_order(std::vector<PointRef> order) {
  std::vector<PointRef> benches, scenarios;
  int64_t most_repeats = 0;
  for (const PointRef& ref : order) {
    if (ref.task->layer == Layer::kScenario) {
      scenarios.push_back(ref);
      most_repeats = std::max(most_repeats, ref.repeat + 1);
    } else {
      benches.push_back(ref);
    }
  }
  if (benches.empty() || scenarios.empty()) return order;
  const std::vector<int64_t> looks = bench::sequential_looks(most_repeats);
  std::vector<PointRef> out;
  size_t next_scenario = 0;
  auto scenarios_before = [&](int64_t repeat) {
    while (next_scenario < scenarios.size() && scenarios[next_scenario].repeat < repeat) {
      out.push_back(scenarios[next_scenario++]);
    }
  };
  for (size_t index = 0; index < benches.size(); ++index) {
    if (index < looks.size()) scenarios_before(looks[index]);
    out.push_back(benches[index]);
  }
  scenarios_before(most_repeats);
  return out;
}

// Check points run ahead on worker threads (CascadeOptions::check_workers). Each job is one
// runner call, keyed by its side (candidate or baseline build), task and repeat; its result, or
// the Error it threw, is kept until the cascade takes it. Only the cascade's thread starts and
// takes jobs, so which job starts when is decided there, in the cascade's order.
class PointPool {
 public:
  struct Key {
    bool baseline = false;
    const PlanTask* task = nullptr;
    int64_t repeat = 0;
    auto operator<=>(const Key&) const = default;
  };
  using Work = std::function<std::optional<PointResult>()>;

  explicit PointPool(int64_t workers)
      : workers_(static_cast<size_t>(std::max<int64_t>(1, workers))) {}
  PointPool(const PointPool&) = delete;
  PointPool& operator=(const PointPool&) = delete;
  // Waits for every job still running (a run stopped early drops their results).
  ~PointPool() {
    for (auto& [key, job] : jobs_) {
      if (job.thread.joinable()) job.thread.join();
    }
  }

  bool started(const Key& key) const { return jobs_.count(key) > 0 || taken_.count(key) > 0; }
  bool full() const {
    std::lock_guard lock(mutex_);
    return running_ >= workers_;
  }
  // REQUIRES: !started(key) && !full().
  void start(const Key& key, Work work) {
    Job& job = jobs_[key];
    {
      std::lock_guard lock(mutex_);
      ++running_;
    }
    job.thread = std::thread([this, &job, work = std::move(work)] {
      std::optional<PointResult> result;
      std::exception_ptr error;
      try {
        result = work();
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard lock(mutex_);
      job.result = std::move(result);
      job.error = error;
      job.done = true;
      --running_;
      ++ended_;
      job_ended_.notify_all();
    });
  }
  // The result of `key`'s job: started now with `work` if it has not been (once a worker is
  // free), waited for otherwise; rethrows what the job threw. While it waits, `top_up` runs
  // (on this thread) whenever a job has ended, so that a free worker gets the next point; not
  // once the job has ended: what the cascade makes of its result may hold the next points back.
  std::optional<PointResult> take(const Key& key, const Work& work,
                                  const std::function<void()>& top_up) {
    while (true) {
      if (!started(key) && !full()) start(key, work);
      uint64_t seen = 0;
      {
        std::lock_guard lock(mutex_);
        auto found = jobs_.find(key);
        if (found != jobs_.end() && found->second.done) break;
        seen = ended_;
      }
      top_up();
      std::unique_lock lock(mutex_);
      job_ended_.wait(lock, [&] { return ended_ != seen; });
    }
    auto found = jobs_.find(key);
    found->second.thread.join();
    std::optional<PointResult> result = std::move(found->second.result);
    const std::exception_ptr error = found->second.error;
    jobs_.erase(found);
    taken_.insert(key);
    if (error) std::rethrow_exception(error);
    return result;
  }

 private:
  struct Job {
    std::thread thread;
    bool done = false;  // under mutex_
    std::optional<PointResult> result;
    std::exception_ptr error;
  };
  const size_t workers_;
  mutable std::mutex mutex_;
  std::condition_variable job_ended_;
  size_t running_ = 0;  // under mutex_
  uint64_t ended_ = 0;  // under mutex_: jobs ended so far
  // Only the cascade's thread adds or removes entries (std::map keeps a Job's address).
  std::map<Key, Job> jobs_;
  std::set<Key> taken_;
};

PointResult to_point_result(const PlanTask& task, int64_t repeat, const probe::RunOutcome& outcome,
                            const std::vector<std::string>& subject,
                            const std::vector<std::string>& launch = {},
                            const std::vector<std::string>& variants = {}) {
  PointResult point;
  point.layer = task.layer;
  point.entry = task.entry;
  point.probe = task.probe;
  point.repeat = repeat;
  point.verdict = outcome.verdict;
  point.findings = outcome.findings;
  point.observation_dir = outcome.observation_dir.string();
  const Json& data = outcome.data;
  try {
    // The observation's point: the plan's parameters plus the probe's defaults.
    const Json params = data.value("params", Json::object());
    for (const auto& [name, value] : params.items()) {
      point.params.emplace_back(name, value_from_json(value, "params." + name));
    }
    if (data.contains("seed") && data["seed"].is_number_unsigned()) {
      point.seed = data["seed"].get<uint64_t>();
    }
    if (task.layer == Layer::kCheck) {
      add_check_metrics(data.value("comparisons", Json::array()), point.metrics);
    } else if (task.layer == Layer::kBench) {
      point.sampling_s = data.value("sampling_s", 0.0);
      if (data.contains("round") && data["round"].is_number_integer()) {
        point.runtime_round = data["round"].get<int64_t>();
      }
      const Json summaries = data.value("summaries", Json::object());
      for (const auto& [variant, summary] : summaries.items()) {
        for (const auto& [name, value] : summary.items()) {
          if (value.is_number()) point.metrics.push_back({variant, name, value.get<double>()});
        }
      }
      // The raw samples, for comparisons with a baseline build's.
      std::ifstream samples_in(outcome.observation_dir / "samples.json");
      if (samples_in) {
        const Json samples = Json::parse(samples_in, nullptr, false);
        if (!samples.is_discarded() && samples.contains("variants")) {
          for (const auto& variant : samples["variants"]) {
            if (!variant.contains("name") || !variant.contains("samples")) continue;
            point.samples.emplace_back(variant["name"].get<std::string>(),
                                       variant["samples"].get<std::vector<double>>());
            point.sample_rounds.emplace_back(variant["name"].get<std::string>(),
                                             variant.value("rounds", std::vector<int64_t>{}));
          }
        }
      }
      const Json comparisons = data.value("comparisons", Json::array());
      for (const auto& record : outcome.bench_comparisons) {
        if (record.data_index >= comparisons.size()) continue;
        const Json& entry = comparisons[record.data_index];
        point.comparisons.push_back(
            {entry.value("baseline", ""), entry.value("candidate", ""), record.comparison});
      }
    } else {
      const Json metrics = data.value("metrics", Json::object());
      for (const auto& [name, value] : metrics.items()) {
        point.metrics.push_back({"", name, number_from_json(value, "metrics." + name)});
      }
      const Json traces = data.value("traces", Json::array());
      for (const auto& trace : traces) {
        point.traces.push_back((outcome.observation_dir / trace.get<std::string>()).string());
      }
      add_lock_metrics(point);
    }
  } catch (const nlohmann::json::exception& error) {
    throw Error(ErrorCode::kInput,
                outcome.observation_dir.string() +
                    "/observation.json: unexpected analysis data: " + json_error_text(error));
  }
  if (point.params.empty()) point.params = task.params;
  std::error_code error;
  const std::filesystem::path cwd = std::filesystem::current_path(error);
  const std::vector<std::string> shown_subject =
      error ? subject
            : subject_for_reproduce(subject, resolve_home(std::nullopt, cwd).parent_path());
  point.reproduce = probe::reproduce_command(task.probe, point.params, point.seed, std::nullopt,
                                             std::nullopt, shown_subject, launch, variants);
  // The probe's own findings name the subject as it was run; show it as the point does.
  auto subject_tail = [](const std::vector<std::string>& argv) {
    const std::string line = probe::reproduce_command("p", {}, 0, std::nullopt, std::nullopt, argv);
    return line.substr(line.find(" -- "));
  };
  const std::string run_tail = subject_tail(subject);
  const std::string shown_tail = subject_tail(shown_subject);
  for (auto& finding : point.findings) {
    if (finding.reproduce.empty()) {
      finding.reproduce = point.reproduce;
    } else if (finding.reproduce.size() >= run_tail.size() &&
               finding.reproduce.compare(finding.reproduce.size() - run_tail.size(),
                                         run_tail.size(), run_tail) == 0) {
      finding.reproduce.replace(finding.reproduce.size() - run_tail.size(), run_tail.size(),
                                shown_tail);
    }
  }
  return point;
}

}  // namespace

std::string_view layer_status_name(LayerStatus status) {
  switch (status) {
    case LayerStatus::kPassed:
      return "passed";
    case LayerStatus::kFailed:
      return "failed";
    case LayerStatus::kSkipped:
      return "skipped";
    case LayerStatus::kNotReached:
      return "not-reached";
    case LayerStatus::kEmpty:
      return "empty";
  }
  return "empty";
}

CascadeResult run_cascade(const Objective& objective, const Plan& plan,
                          const CascadeOptions& options, const PointRunner& runner) {
  const auto start = std::chrono::steady_clock::now();
  CascadeResult result;
  const bool run_all = options.all || objective.cascade == CascadeMode::kAll;
  const BaselineSource* baseline = options.baseline ? &*options.baseline : nullptr;
  if (baseline != nullptr) result.baseline_label = baseline->label;

  size_t total = 0;
  for (const auto& task : plan.tasks) {
    if (!options.only || task.layer == *options.only) total += static_cast<size_t>(task.repeats);
  }

  std::vector<std::optional<GateResult>> gates(objective.gates.size());
  // The cause before the symptom (gate/causes.hpp): each gate's components, and the failing gates
  // whose announcement waits for the more specific gates of their layer.
  std::vector<std::vector<std::string>> covers(objective.gates.size());
  for (size_t index = 0; index < objective.gates.size(); ++index) {
    covers[index] = gate_covers(objective, objective.gates[index]);
  }
  // The most specific decided failing gate that explains gate `index`, if any.
  auto decided_cause = [&](size_t index) -> std::optional<size_t> {
    std::optional<size_t> best;
    for (size_t other = 0; other < gates.size(); ++other) {
      if (!gates[other] || gates[other]->verdict != GateVerdict::kFail) continue;
      if (!explains(covers[other], covers[index])) continue;
      if (!best || covers[other].size() < covers[*best].size()) best = other;
    }
    return best;
  };
  // A failing gate is held while a more specific gate of its layer within the build is
  // undecided, unless one already failed: the cause is printed before the symptom.
  std::vector<size_t> held;
  auto must_wait = [&](size_t index) {
    if (gates[index]->verdict != GateVerdict::kFail) return false;
    // A decided cause explains it: it goes out once that cause has (a cause held for its own
    // components is printed first).
    if (const auto cause = decided_cause(index)) {
      return std::find(held.begin(), held.end(), *cause) != held.end();
    }
    for (size_t other = 0; other < gates.size(); ++other) {
      if (gates[other] || !explains(covers[other], covers[index])) continue;
      const GateSpec& spec = objective.gates[other];
      if (gate_layer(spec.expression) != gates[index]->layer) continue;
      if (baseline != nullptr && is_baseline_gate(spec.expression)) continue;
      return true;
    }
    return false;
  };
  std::function<void(size_t)> announce = [&](size_t index) {
    if (!options.gate_decided || !gates[index]) return;
    if (must_wait(index)) {
      held.push_back(index);
      return;
    }
    GateResult shown = *gates[index];
    if (shown.verdict == GateVerdict::kFail) {
      if (const auto cause = decided_cause(index)) {
        shown.rule += " (follows from " + objective.gates[*cause].name + ": it covers " +
                      gate_names(covers[*cause]) + ")";
      }
    }
    options.gate_decided(shown);
    // Held gates free to go, the most specific first: two held at once (a composite and the
    // component check it waited for, both waiting on a third) go out cause first.
    for (;;) {
      std::optional<size_t> next;
      for (size_t at = 0; at < held.size(); ++at) {
        if (must_wait(held[at])) continue;
        if (!next || covers[held[at]].size() < covers[held[*next]].size()) next = at;
      }
      if (!next) break;
      const size_t released = held[*next];
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(*next));
      announce(released);
    }
  };
  auto flush_held = [&] {
    const std::vector<size_t> rest = std::exchange(held, {});
    for (size_t index : rest) {
      if (options.gate_decided) options.gate_decided(*gates[index]);
    }
  };
  std::string stop_reason;  // set once the cascade stops
  size_t done = 0;
  // The stages: layers whose points run together. Against a baseline build run back to back
  // (the local executor: rounds of both builds), the bench and scenario layers are one stage once
  // the checks passed, their points interleaved by cost to a decision (timing_order); otherwise
  // each layer is its own stage, cheapest first.
  const bool timing_together = baseline != nullptr && baseline->run && baseline->interleave &&
                               baseline->min_rounds > 0 && !options.only;
  std::vector<std::vector<Layer>> stages;
  if (timing_together) {
    stages = {{Layer::kCheck}, {Layer::kBench, Layer::kScenario}};
  } else {
    for (Layer layer : kLayers) stages.push_back({layer});
  }
  // Entries are named per layer: a bench and a scenario may share a name.
  auto key = [](Layer layer, const std::string& entry) {
    return std::string(layer_name(layer)) + ":" + entry;
  };
  for (const std::vector<Layer>& stage : stages) {
    const Layer layer = stage.front();  // the stage's first (with --only: its only) layer
    auto in_stage = [&stage](Layer other) {
      return std::find(stage.begin(), stage.end(), other) != stage.end();
    };
    std::map<Layer, LayerOutcome> outcomes;
    for (Layer member : stage) outcomes[member] = LayerOutcome{member, LayerStatus::kEmpty, 0};
    std::vector<size_t> layer_gates;
    for (size_t index = 0; index < objective.gates.size(); ++index) {
      if (in_stage(gate_layer(objective.gates[index].expression))) layer_gates.push_back(index);
    }
    // Every undecided gate of the stage (or of one layer of it) not-run for `reason`.
    auto mark_not_run = [&](const std::string& reason, std::optional<Layer> of = std::nullopt) {
      for (size_t index : layer_gates) {
        if (gates[index]) continue;
        if (of && gate_layer(objective.gates[index].expression) != *of) continue;
        gates[index] = not_run_gate(objective.gates[index], reason);
        announce(index);
      }
    };
    if (options.only && layer != *options.only) {
      outcomes[layer].status = LayerStatus::kSkipped;
      mark_not_run("--only " + std::string(layer_name(*options.only)) + " left the " +
                   std::string(layer_name(layer)) + " layer out");
      result.layers.push_back(outcomes[layer]);
      continue;
    }
    if (!stop_reason.empty()) {
      mark_not_run(stop_reason);
      for (Layer member : stage) {
        outcomes[member].status = LayerStatus::kNotReached;
        result.layers.push_back(outcomes[member]);
      }
      continue;
    }

    const size_t first_point = result.points.size();
    const size_t first_baseline_point = result.baseline_points.size();
    // Repeats are interleaved across the layer's tasks (A B A B ...), so that drift of the
    // machine over the layer's run falls on every entry alike instead of biasing their ratio.
    std::vector<const PlanTask*> layer_tasks;
    int64_t max_repeats = 0;
    // layer:entry -> runs still to come in this stage, on the candidate's side and the
    // baseline's; all its runs in the stage; its repeats per point.
    std::map<std::string, int64_t> remaining, baseline_remaining;
    std::map<std::string, int64_t> remaining_total, repeats_of;
    for (const auto& task : plan.tasks) {
      if (!in_stage(task.layer)) continue;
      layer_tasks.push_back(&task);
      max_repeats = std::max(max_repeats, task.repeats);
      const std::string name = key(task.layer, task.entry);
      remaining[name] += task.repeats;
      remaining_total[name] += task.repeats;
      repeats_of[name] = std::max(repeats_of[name], task.repeats);
      if (baseline != nullptr) baseline_remaining[name] += task.repeats;
    }
    std::set<std::string> controlled;  // bench entries whose false-discovery control is done
    std::map<Layer, std::vector<std::string>> failing;
    // Entries of this stage that a failing gate covers more specifically: their points run next
    // (in the objective's order, which lists a layer's entries cheapest first), so that the
    // component a failing composite check runs is judged before the rest of the layer.
    std::set<std::string> promoted;
    auto promote_covered = [&](size_t index, Layer gate_layer_) {
      for (const ProbeEntry& entry : objective.entries(gate_layer_)) {
        std::vector<std::string> entry_covers = entry.covers;
        std::sort(entry_covers.begin(), entry_covers.end());
        if (explains(entry_covers, covers[index])) promoted.insert(key(gate_layer_, entry.name));
      }
    };
    // Gates decided FAIL before their entries' last point (a check gate at the first point that
    // breaks it, a bench gate at a point SLOWER beyond doubt, a scenario gate at a look).
    std::vector<size_t> decided_early;
    // Decides the gate now when every entry it reads has run all its points.
    auto decide = [&](size_t index, bool layer_done) {
      if (gates[index]) return;
      const GateSpec& spec = objective.gates[index];
      const Layer spec_layer = gate_layer(spec.expression);
      if (auto reason = left_out_reason(spec, plan)) {
        gates[index] = not_run_gate(spec, *reason);
        announce(index);
        return;
      }
      const auto entries = gate_entries(spec.expression);
      if (!layer_done) {
        // A gate within the build waits only for the candidate's points; one against the
        // baseline also for the baseline's.
        const bool needs_baseline = baseline != nullptr && is_baseline_gate(spec.expression);
        int64_t still_to_run = 0, baseline_pending = 0;
        for (const auto& [entry_layer, entry] : entries) {
          auto found = remaining.find(key(entry_layer, entry));
          if (!in_stage(entry_layer) || found == remaining.end()) return;
          still_to_run += found->second;
          if (needs_baseline) baseline_pending += baseline_remaining[key(entry_layer, entry)];
        }
        // "NAME not SLOWER than baseline" fails as soon as one point is SLOWER beyond doubt (its
        // p-value survives the false-discovery control with every comparison still to come
        // counted as p = 1): printed then, not after the entry's slowest points.
        const auto* versus = std::get_if<BenchVerdict>(&spec.expression);
        if (needs_baseline && versus != nullptr && versus->versus_baseline && versus->negated &&
            versus->relation == AbRelation::kSlower && (still_to_run > 0 || baseline_pending > 0)) {
          const ProbeEntry* bench_entry =
              objective.find_entry(Layer::kBench, versus->subject.bench);
          const int64_t variants =
              std::max<int64_t>(1, bench_entry != nullptr ? std::ssize(bench_entry->variants) : 1);
          const int64_t pending = std::max(still_to_run, baseline_pending) * variants;
          GateResult early =
              evaluate_gate(spec, objective, plan, result.points, &result.baseline_points, pending);
          if (early.verdict != GateVerdict::kFail) return;
          early.rule += " (decided before the entry's last point; its " + std::to_string(pending) +
                        " comparison(s) still to come counted with p = 1)";
          failing[spec_layer].push_back(early.name);
          decided_early.push_back(index);
          gates[index] = std::move(early);
          promote_covered(index, spec_layer);
          announce(index);
          return;
        }
        // A scenario gate fails at a look when its repeats so far lie beyond the bound beyond
        // doubt (bench/sequential.hpp): against a baseline build, the pair ratios (a lock held
        // ten times as long shows in three repeats, not twenty-five); within the build, a
        // median's values (a consumer left asleep 60 ms a run against a 2 ms bound).
        const auto* bound = std::get_if<MetricBound>(&spec.expression);
        std::optional<GateResult> early_scenario;
        const std::vector<PointResult>* scenario_baseline = nullptr;
        if (bound != nullptr && spec_layer == Layer::kScenario) {
          const int64_t repeats = repeats_of[key(Layer::kScenario, bound->metric.entry)];
          if (needs_baseline && baseline->interleave &&
              (still_to_run > 0 || baseline_pending > 0)) {
            early_scenario =
                decide_before_last_repeat(spec, result.points, result.baseline_points, repeats);
            scenario_baseline = &result.baseline_points;
            if (!early_scenario) return;
          } else if (!needs_baseline && bound->median && still_to_run > 0) {
            early_scenario = decide_median_before_last_repeat(spec, result.points, repeats);
          }
        }
        if (early_scenario) {
          try {
            explain_scenario_gate(*early_scenario, spec, result.points, 6, scenario_baseline);
          } catch (const Error& error) {
            early_scenario->rule += " (the traces could not be analysed: " + error.message() + ")";
          }
          failing[spec_layer].push_back(early_scenario->name);
          decided_early.push_back(index);
          gates[index] = std::move(*early_scenario);
          promote_covered(index, spec_layer);
          announce(index);
          return;
        }
        if (needs_baseline && baseline_pending > 0) return;
        if (still_to_run > 0) {
          // A check gate that every point must satisfy is false once one point breaks it, and
          // no later point can make it true: decide it now, so the failure shows while the
          // entry's remaining points (its slower ones, often) still run.
          if (!fails_at_any_point(spec.expression)) return;
          GateResult early = evaluate_gate(spec, objective, plan, result.points, nullptr);
          if (early.verdict != GateVerdict::kFail) return;
          early.rule += " (decided at the first point that broke it; " +
                        std::to_string(still_to_run) + " more point(s) still to run)";
          failing[spec_layer].push_back(early.name);
          decided_early.push_back(index);
          gates[index] = std::move(early);
          promote_covered(index, spec_layer);
          announce(index);
          return;
        }
      }
      if (spec_layer == Layer::kBench) {
        for (const auto& [entry_layer, entry] : entries) {
          if (entry_layer != Layer::kBench || !controlled.insert(entry).second) continue;
          std::vector<size_t> places;
          std::vector<PointResult> entry_points;
          for (size_t at = first_point; at < result.points.size(); ++at) {
            if (result.points[at].layer != Layer::kBench || result.points[at].entry != entry) {
              continue;
            }
            places.push_back(at);
            entry_points.push_back(result.points[at]);
          }
          control_bench_false_discovery(entry_points);
          for (size_t at = 0; at < places.size(); ++at) {
            result.points[places[at]] = std::move(entry_points[at]);
          }
        }
      }
      const std::vector<PointResult>* baseline_points =
          baseline != nullptr ? &result.baseline_points : nullptr;
      GateResult gate = evaluate_gate(spec, objective, plan, result.points, baseline_points);
      if (spec_layer == Layer::kScenario && gate.verdict != GateVerdict::kPass &&
          gate.verdict != GateVerdict::kNotRun) {
        try {
          explain_scenario_gate(gate, spec, result.points, 6, baseline_points);
        } catch (const Error& error) {
          gate.rule += " (the traces could not be analysed: " + error.message() + ")";
        }
      }
      if (gate.verdict == GateVerdict::kFail) {
        failing[spec_layer].push_back(gate.name);
        promote_covered(index, spec_layer);
      }
      gates[index] = std::move(gate);
      announce(index);
    };
    auto after_point = [&](const PointResult* point) {
      ++done;
      ++outcomes[point->layer].points;
      if (options.progress) {
        Progress progress;
        progress.index = done;
        progress.total = total;
        progress.point = point;
        progress.elapsed_s = seconds_since(start);
        progress.remaining_s =
            progress.elapsed_s / static_cast<double>(done) * static_cast<double>(total - done);
        options.progress(progress);
      }
      for (size_t index : layer_gates) decide(index, false);
    };
    // Gates whose entries have no point in this plan at all are decided at the layer's end.
    // A bench point against a baseline build, in rounds (BaselineSource::min_rounds), one round
    // at a time: the bench entries of a stage take turns, one round each (the rotation below).
    struct PointRounds {
      const PlanTask* task = nullptr;
      const ProbeEntry* entry = nullptr;
      int64_t repeat = 0;
      bool baseline_first = false;  // which side runs round 0 first
      int64_t comparisons = 1;      // every A/B comparison of the entry against the baseline
      int64_t min_rounds = 0, max_rounds = 0;
      ProbeEntry short_entry;  // a round's entry: its share of the budget, the first round's seed
      double threshold = 0.0;
      std::vector<PointResult> mine, theirs;
      // variant -> its median in each round, per side.
      std::map<std::string, std::vector<double>> my_medians, their_medians;
      double first_pair_s = 0, spent_s = 0, last_pair_s = 0;
      int64_t round = 0;         // the next round to run
      bool finished = false;     // no round is left to run
      bool no_baseline = false;  // the baseline build has no result for the point
      size_t rank = 0;           // the point's place in the stage's order (the rotation's record)
    };
    auto begin_rounds = [&](const PlanTask& task, const ProbeEntry& entry, int64_t repeat,
                            bool baseline_first) {
      PointRounds state;
      state.task = &task;
      state.entry = &entry;
      state.repeat = repeat;
      state.baseline_first = baseline_first;
      state.comparisons = remaining_total[key(task.layer, task.entry)] *
                          std::max<int64_t>(1, std::ssize(entry.variants));
      state.min_rounds = baseline->min_rounds;
      state.max_rounds = std::max(state.min_rounds, baseline->max_rounds);
      state.short_entry = entry;
      // A round samples for the entry's budget over (at most) 8 rounds: a point decided early
      // takes less, one that needs more rounds (up to max_rounds) more.
      state.short_entry.budget_s = std::max(
          kMinRoundBudgetS, entry.budget_s.value_or(kDefaultBudgetS) /
                                static_cast<double>(std::min<int64_t>(state.max_rounds, 8)));
      state.threshold = cross_build_threshold(&entry);
      return state;
    };
    auto add_medians = [](std::map<std::string, std::vector<double>>& medians,
                          const PointResult& point) {
      for (const auto& [name, samples] : point.samples) {
        medians[name].push_back(median_of(samples));
      }
    };
    // Runs the point's next round, both builds back to back; true once no round is left to run.
    // Rounds after min_rounds, while undecided, only while the point's wall time (both builds,
    // every round so far and one more like the last) stays within kFullRoundsCost times its
    // round 0: a later round skips what round 0 measured once (the subject's --round), so the
    // number of rounds follows from how much cheaper they are — never more than the
    // kFullRoundsCost full rounds a point cost before later rounds were cheap.
    auto step_rounds = [&](PointRounds& state) -> bool {
      if (state.finished) return true;
      if (state.round > 0 && options.interrupted != nullptr && options.interrupted->load()) {
        return state.finished = true;
      }
      const int64_t round = state.round;
      const bool base_first = (round % 2 == 1) != state.baseline_first;
      for (int side = 0; side < 2; ++side) {
        const bool run_base = (side == 0) == base_first;
        // Every round on the seed of the first, exactly; a later round tells a runtime that
        // takes it which round it is (its inputs are then the round's own, on both sides).
        std::optional<uint64_t> seed = state.short_entry.seed;
        ProbeEntry asked = state.short_entry;
        const std::vector<PointResult>& side_rounds = run_base ? state.theirs : state.mine;
        if (round > 0 && !side_rounds.empty() && side_rounds.front().runtime_round) {
          asked.round = round;
        }
        if (run_base) {
          std::optional<PointResult> base = baseline->run(*state.task, asked, state.repeat, seed);
          if (!base) {
            if (state.mine.empty()) {
              state.mine.push_back(runner(*state.task, *state.entry, state.repeat));
            }
            state.no_baseline = true;
            return state.finished = true;
          }
          if (!state.short_entry.seed) state.short_entry.seed = base->seed;
          add_medians(state.their_medians, *base);
          state.theirs.push_back(std::move(*base));
        } else {
          PointResult point = runner(*state.task, asked, state.repeat);
          if (!state.short_entry.seed) state.short_entry.seed = point.seed;
          add_medians(state.my_medians, point);
          state.mine.push_back(std::move(point));
        }
        state.short_entry.seeds = 1;
      }
      if (std::ssize(state.mine) == round + 1 && std::ssize(state.theirs) == round + 1) {
        state.last_pair_s = state.mine.back().wall_s + state.theirs.back().wall_s;
        state.spent_s += state.last_pair_s;
        if (round == 0) state.first_pair_s = state.last_pair_s;
      }
      state.round = round + 1;
      if (state.round >= state.max_rounds) return state.finished = true;
      if (state.round < state.min_rounds) return false;
      // Decided when every variant is SAME, or, at a look (is_round_look), SLOWER or FASTER
      // with a p-value that survives the gate's false-discovery control whatever its other
      // comparisons turn out to be (p <= alpha / m, m being every comparison of the entry:
      // Benjamini-Hochberg adjusts the smallest p-value by at most m), alpha being the look's
      // share (round_look_alpha: 0.05 spent over the looks and shared among the objective's
      // bench gates against the baseline). A change is never decided off a look: each round
      // looked at would spend more of it.
      const double alpha = round_look_alpha(objective) /
                           static_cast<double>(std::max<int64_t>(1, state.comparisons));
      const bool look = is_round_look(state.round);
      bool decided = true;
      for (const auto& [name, medians] : state.my_medians) {
        const auto found = state.their_medians.find(name);
        if (found == state.their_medians.end() || found->second.size() != medians.size()) continue;
        const bench::Comparison comparison =
            compare_builds(found->second, medians, state.threshold, 0.95);
        decided = decided && (comparison.verdict == bench::AbVerdict::kSame ||
                              (look && comparison.verdict != bench::AbVerdict::kAmbiguous &&
                               comparison.p_value <= alpha));
      }
      if (decided) return state.finished = true;
      return state.finished = state.first_pair_s > 0 && state.spent_s + state.last_pair_s >
                                                            kFullRoundsCost * state.first_pair_s;
    };
    // The candidate's and the baseline's merged points of a point's rounds.
    auto merge_point_rounds = [](PointRounds& state) {
      if (state.no_baseline) {
        return std::pair{merge_rounds(std::move(state.mine)), std::optional<PointResult>{}};
      }
      PointResult point = merge_rounds(std::move(state.mine));
      PointResult base = merge_rounds(std::move(state.theirs));
      point.paired = base.paired = true;
      return std::pair{std::move(point), std::optional<PointResult>(std::move(base))};
    };
    struct DeferredCheck {
      const PlanTask* task;
      const ProbeEntry* entry;
      int64_t repeat;
      uint64_t seed;  // the candidate's
    };
    std::vector<DeferredCheck> deferred_checks;
    // Check points on several workers (CascadeOptions::check_workers): the pool, the index of the
    // next point of `order` the cascade will take (the points before it are taken), and the
    // baseline build's check points taken so far.
    std::deque<ProbeEntry> seeded_entries;  // stable addresses for the PointRefs of `order`
    std::optional<PointPool> pool;  // after what its jobs point into: destroyed (joined) first
    size_t next = 0;
    size_t deferred_taken = 0;
    std::vector<PointRef> order;
    auto candidate_work = [&runner](const PointRef& ref) -> PointPool::Work {
      return [&runner, ref]() -> std::optional<PointResult> {
        return runner(*ref.task, *ref.entry, ref.repeat);
      };
    };
    auto baseline_work = [baseline](const DeferredCheck& check) -> PointPool::Work {
      return [baseline, check] {
        return baseline->run(*check.task, *check.entry, check.repeat, check.seed);
      };
    };
    // Starts the points the cascade will ask for next, in its order (the candidate's check
    // points, then the baseline build's of those already taken), while a worker is free. Not
    // after an interrupt, and not while a failing gate waits for the more specific gates of its
    // components (`held`): the component checks brought forward run without a point started
    // beside them (kda's chunk check runs two threads: beside another point it took 12 s instead
    // of 3.4, and the failing w8a8 gate waited for it). The point the cascade waits for is still
    // started by PointPool::take.
    auto top_up = [&] {
      if (options.interrupted != nullptr && options.interrupted->load()) return;
      if (!held.empty()) return;
      for (size_t at = next; at < order.size() && !pool->full(); ++at) {
        const PointPool::Key key{false, order[at].task, order[at].repeat};
        if (!pool->started(key)) pool->start(key, candidate_work(order[at]));
      }
      for (size_t at = deferred_taken; at < deferred_checks.size() && !pool->full(); ++at) {
        const PointPool::Key key{true, deferred_checks[at].task, deferred_checks[at].repeat};
        if (!pool->started(key)) pool->start(key, baseline_work(deferred_checks[at]));
      }
    };
    // Whether a point runs in rounds against the baseline build (PointRounds): a bench point a
    // gate reads the baseline's value of, the builds run back to back.
    auto in_rounds = [&](const PlanTask& task) {
      return baseline != nullptr && baseline->run && baseline->interleave &&
             baseline->min_rounds > 0 && task.layer == Layer::kBench &&
             baseline_reads_point(objective, task.layer, task.entry, task.params);
    };
    // A point's rounds done: both builds' merged points recorded, the gates they complete decided.
    auto record_rounds = [&](PointRounds& state) {
      const PlanTask& task = *state.task;
      auto [point, base] = merge_point_rounds(state);
      result.points.push_back(std::move(point));
      --remaining[key(task.layer, task.entry)];
      after_point(&result.points.back());
      if (base) {
        base->layer = task.layer;
        base->entry = task.entry;
        base->repeat = state.repeat;
        result.baseline_points.push_back(std::move(*base));
      }
      --baseline_remaining[key(task.layer, task.entry)];
      for (size_t index : layer_gates) decide(index, false);
    };
    // "NAME not SLOWER than baseline" fails at a look of a point still in its rounds (rounds 5, 8,
    // 12: is_round_look) when the rounds so far make one of its comparisons SLOWER beyond doubt
    // (the gate's rule on the rounds so far, the entry's comparisons still to come counted with
    // p = 1: the same test as the point's own stop at a look, step_rounds, for that variant).
    // Printed then, while the point runs the rounds its other variants still need; the record
    // keeps the gate evaluated on every round (decided_early, at the stage's end).
    auto decide_at_look = [&](const PointRounds& state) {
      if (state.finished || state.no_baseline || state.round < state.min_rounds ||
          !is_round_look(state.round) || state.mine.size() != state.theirs.size()) {
        return;
      }
      const PlanTask& task = *state.task;
      const std::string name = key(task.layer, task.entry);
      std::vector<size_t> asked;
      for (size_t index : layer_gates) {
        if (gates[index]) continue;
        const auto* versus = std::get_if<BenchVerdict>(&objective.gates[index].expression);
        if (versus != nullptr && versus->versus_baseline && versus->negated &&
            versus->relation == AbRelation::kSlower && versus->subject.bench == task.entry) {
          asked.push_back(index);
        }
      }
      if (asked.empty()) return;
      // The rounds so far as the point they would make, beside the points already recorded.
      PointResult point = merge_rounds(state.mine);
      PointResult base = merge_rounds(state.theirs);
      point.paired = base.paired = true;
      base.layer = task.layer;
      base.entry = task.entry;
      base.repeat = state.repeat;
      result.points.push_back(std::move(point));
      result.baseline_points.push_back(std::move(base));
      const int64_t variants = std::max<int64_t>(1, std::ssize(state.entry->variants));
      const int64_t pending = (std::max(remaining[name], baseline_remaining[name]) - 1) * variants;
      std::vector<std::pair<size_t, GateResult>> failed;
      for (size_t index : asked) {
        GateResult early = evaluate_gate(objective.gates[index], objective, plan, result.points,
                                         &result.baseline_points, pending);
        if (early.verdict != GateVerdict::kFail) continue;
        early.rule += " (decided at the look after round " + std::to_string(state.round) +
                      " of a point still in its rounds; the entry's " + std::to_string(pending) +
                      " comparison(s) still to come counted with p = 1)";
        failed.emplace_back(index, std::move(early));
      }
      result.points.pop_back();
      result.baseline_points.pop_back();
      for (auto& [index, early] : failed) {
        failing[Layer::kBench].push_back(early.name);
        decided_early.push_back(index);
        gates[index] = std::move(early);
        promote_covered(index, Layer::kBench);
        announce(index);
      }
    };
    auto run_one = [&](const PlanTask& task, const ProbeEntry& entry, int64_t repeat,
                       bool baseline_first) {
      // The baseline side runs a point only when a gate reads the baseline's value of it: a
      // check no gate compares with the baseline costs the baseline build nothing (kda's
      // transfer_verifier and decode_recurrence_seeds: 9 of its 22 check runs).
      const bool with_baseline =
          baseline != nullptr && baseline->run &&
          baseline_reads_point(objective, task.layer, task.entry, task.params);
      if (baseline != nullptr && baseline->run && !with_baseline) {
        result.baseline_skipped.push_back({task.layer, task.entry, task.params, repeat});
        --baseline_remaining[key(task.layer, task.entry)];
      }
      std::optional<uint64_t> seed;
      if (with_baseline && baseline->seed_of) seed = baseline->seed_of(task, repeat);
      std::optional<PointResult> base;
      if (with_baseline && baseline_first) {
        base = baseline->run(task, entry, repeat, seed);
        if (base && !seed && !entry.seed) seed = base->seed;
      }
      // The exact seed of the other side: no offset for `seeds` on top of it. An entry that
      // already carries it (a recorded baseline's, set before the layer began) goes as it is, so
      // the runner sees the very entries the executor was told of.
      const ProbeEntry* asked = &entry;
      ProbeEntry seeded;
      if (seed && (entry.seed != seed || entry.seeds != 1)) {
        seeded = entry;
        seeded.seed = *seed;
        seeded.seeds = 1;
        asked = &seeded;
      }
      // A check point through the pool runs as asked (its entry is the one of `order`: a
      // recorded baseline's seed is already in it).
      PointResult point =
          pool && asked == &entry
              ? *pool->take({false, &task, repeat}, candidate_work({&task, &entry, repeat}), top_up)
              : runner(task, *asked, repeat);
      const uint64_t candidate_seed = point.seed;
      result.points.push_back(std::move(point));
      const PointResult& done_point = result.points.back();
      --remaining[key(task.layer, task.entry)];
      // Gates within the build that this point completes are decided before the baseline's
      // side runs: a failing check shows as soon as the candidate has run it.
      after_point(&done_point);
      if (with_baseline && baseline->interleave && task.layer == Layer::kCheck) {
        // A baseline build's check points run after every candidate check point: a gate within
        // the build (most numeric faults fail one) is printed after the candidate's checks up to
        // its own, not after both builds' (deferred_checks below).
        deferred_checks.push_back({&task, &entry, repeat, candidate_seed});
        return;
      }
      if (with_baseline && !baseline_first) {
        base = baseline->run(task, entry, repeat, candidate_seed);
      }
      if (with_baseline) {
        if (base) {
          // A scenario's repeat and its baseline's ran back to back: gates pair them.
          if (baseline->interleave && task.layer == Layer::kScenario) {
            base->paired = result.points.back().paired = true;
          }
          base->layer = task.layer;
          base->entry = task.entry;
          base->repeat = repeat;
          result.baseline_points.push_back(std::move(*base));
        }
        --baseline_remaining[key(task.layer, task.entry)];
        for (size_t index : layer_gates) decide(index, false);
      }
    };
    // The stage's points in the order they run, told to the executor (per layer) before the first
    // one runs. A recorded baseline knows its seeds up front: the candidate's points carry them
    // already, so an executor that submits the whole layer at once runs them on the baseline's
    // inputs.
    for (int64_t repeat = 0; repeat < max_repeats; ++repeat) {
      for (const PlanTask* task : layer_tasks) {
        if (repeat >= task->repeats) continue;
        const ProbeEntry* entry = objective.find_entry(task->layer, task->entry);
        if (entry == nullptr) {
          throw Error(ErrorCode::kInternal, "plan task names entry '" + task->entry +
                                                "', which the objective does not declare");
        }
        if (baseline != nullptr && baseline->run && baseline->seed_of) {
          if (const auto seed = baseline->seed_of(*task, repeat)) {
            ProbeEntry& seeded = seeded_entries.emplace_back(*entry);
            seeded.seed = *seed;
            seeded.seeds = 1;
            entry = &seeded;
          }
        }
        order.push_back({task, entry, repeat});
      }
    }
    if (stage.size() > 1) order = timing_order(std::move(order));
    std::map<Layer, size_t> points_of_layer;
    for (Layer member : stage) {
      std::vector<PointRef> of_layer;
      for (const PointRef& ref : order) {
        if (ref.task->layer == member) of_layer.push_back(ref);
      }
      points_of_layer[member] = of_layer.size();
      if (options.layer_begin && !of_layer.empty()) options.layer_begin(member, of_layer);
    }
    // Why a failing layer of the stage stops the cascade (empty while it has not failed).
    auto layer_stop_reason = [&](Layer member) -> std::string {
      if (run_all) return "";
      std::string failed_point;
      for (size_t index = first_point; index < result.points.size(); ++index) {
        if (result.points[index].layer == member &&
            result.points[index].verdict == Verdict::kFail) {
          failed_point = result.points[index].entry;
          break;
        }
      }
      if (failing[member].empty() && failed_point.empty()) return "";
      return "the cascade stopped after the " + std::string(layer_name(member)) +
             " layer failed (" +
             (failing[member].empty() ? "probe " + failed_point + " failed"
                                      : "gate " + gate_names(failing[member])) +
             "); --all runs every layer";
    };
    // In a stage of several layers, a failing layer ends the later layers' points (theirs would
    // not have run after it): `cut` is the first such layer and `cut_reason` why.
    std::optional<Layer> cut;
    std::string cut_reason;
    size_t bench_ordinal = 0;  // which side runs a bench point's first round first
    if (options.check_workers > 1 && stage.size() == 1 && layer == Layer::kCheck) {
      pool.emplace(options.check_workers);
    }
    // Timing sides alternate which runs first (a bench point's first round with each point, a
    // scenario's pair with each repeat); checks need no such care.
    auto first_side_of = [&](const PointRef& ref) {
      const size_t ordinal =
          ref.task->layer == Layer::kScenario ? static_cast<size_t>(ref.repeat) : bench_ordinal++;
      return baseline != nullptr && baseline->interleave && ref.task->layer != Layer::kCheck &&
             ordinal % 2 == 1;
    };
    auto stop_if_interrupted = [&] {
      if (options.interrupted == nullptr || !options.interrupted->load()) return false;
      result.interrupted = true;
      stop_reason = "the run was interrupted";
      return true;
    };
    auto stop_on_error = [&](const PlanTask& task, const Error& error) {
      if (stop_if_interrupted()) return;
      result.error = error;
      stop_reason = "the subject failed at " + task.entry + " " + params_to_string(task.params) +
                    ": " + error.message();
    };
    auto update_cut = [&] {
      if (cut || stage.size() < 2) return;
      for (Layer member : stage) {
        if (member == stage.back()) break;
        const std::string reason = layer_stop_reason(member);
        if (reason.empty()) continue;
        cut = stage[static_cast<size_t>(std::find(stage.begin(), stage.end(), member) -
                                        stage.begin()) +
                    1];
        cut_reason = reason;
        break;
      }
    };
    // One point, not in rounds; false once the stage stops.
    auto run_point = [&](const PointRef& ref, bool baseline_first) {
      if (cut && ref.task->layer >= *cut) return true;
      if (stop_if_interrupted()) return false;
      try {
        run_one(*ref.task, *ref.entry, ref.repeat, baseline_first);
      } catch (const Error& error) {
        stop_on_error(*ref.task, error);
        return false;
      }
      update_cut();
      return true;
    };
    const bool rotation = std::any_of(order.begin(), order.end(),
                                      [&](const PointRef& ref) { return in_rounds(*ref.task); });
    if (!rotation) {
      for (next = 0; next < order.size(); ++next) {
        if (!stop_reason.empty()) break;
        if (!promoted.empty()) {
          std::stable_partition(order.begin() + static_cast<std::ptrdiff_t>(next), order.end(),
                                [&](const PointRef& ref) {
                                  return promoted.count(key(ref.task->layer, ref.task->entry));
                                });
        }
        const PointRef& ref = order[next];
        if (cut && ref.task->layer >= *cut) continue;
        if (!run_point(ref, first_side_of(ref))) break;
      }
    } else {
      // Bench points in rounds take turns by entry, each entry's points in `order`'s order: plain
      // turns (one round of each entry's current point, in the objective's order, cheapest first)
      // until every current point has kWarmRounds rounds, then the next round goes to the point
      // whose paired test is nearest to deciding a change (change_p_of), so that a bench a change
      // slowed reaches its looks (rounds 5, 8, 12) after about two rounds of each other bench,
      // not after the benches listed before it ran all their rounds. Only the order changes:
      // each point keeps its own rounds, looks, stop rule and alpha, each read from the point's
      // own rounds alone, whenever they ran. A point done hands its entry's turn to the entry's
      // next point (which starts its own plain turns); an entry with none left leaves. Every other
      // point of the stage (the scenarios' repeats, a point without rounds) runs where `order`
      // puts it relative to the points in rounds: once as many of those as `order` lists before
      // it are done (the scenarios' repeats up to their next look after each bench point, as
      // timing_order plans them), or at once when a failing gate promoted its entry.
      struct Pending {
        PointRef ref;
        bool baseline_first = false;
        size_t after = 0;  // points in rounds that run before it
        size_t rank = 0;   // its place in `order`
      };
      struct Turn {
        std::string entry;
        std::deque<Pending> points;
        std::optional<PointRounds> current;
      };
      std::vector<Turn> turns;
      std::vector<Pending> others;
      size_t listed_in_rounds = 0;
      for (const PointRef& ref : order) {
        Pending pending{ref, first_side_of(ref), listed_in_rounds,
                        static_cast<size_t>(&ref - order.data())};
        if (!in_rounds(*ref.task)) {
          others.push_back(pending);
          continue;
        }
        const std::string name = key(ref.task->layer, ref.task->entry);
        auto turn = std::find_if(turns.begin(), turns.end(),
                                 [&](const Turn& candidate) { return candidate.entry == name; });
        if (turn == turns.end()) turn = turns.insert(turns.end(), Turn{name, {}, std::nullopt});
        turn->points.push_back(pending);
        ++listed_in_rounds;
      }
      size_t next_other = 0, rounds_done = 0;
      // Each point's place in `order`, per point the stage recorded (candidate's, baseline's).
      std::vector<size_t> point_rank, baseline_rank;
      auto rank_new = [&](size_t rank) {
        point_rank.resize(result.points.size() - first_point, rank);
        baseline_rank.resize(result.baseline_points.size() - first_baseline_point, rank);
      };
      // The other points whose time has come, in order; false once the stage stops.
      auto run_others = [&] {
        while (next_other < others.size()) {
          if (!stop_reason.empty()) return false;
          if (!promoted.empty()) {
            std::stable_partition(
                others.begin() + static_cast<std::ptrdiff_t>(next_other), others.end(),
                [&](const Pending& pending) {
                  return promoted.count(key(pending.ref.task->layer, pending.ref.task->entry));
                });
          }
          const Pending& pending = others[next_other];
          if (pending.after > rounds_done &&
              !promoted.count(key(pending.ref.task->layer, pending.ref.task->entry))) {
            return true;
          }
          ++next_other;
          const bool more = run_point(pending.ref, pending.baseline_first);
          rank_new(pending.rank);
          if (!more) return false;
        }
        return true;
      };
      // How near a point's rounds so far are to deciding a change: the smallest over its
      // variants of the paired test's p-value on the per-round ratios (compare_builds, the test
      // its looks apply).
      auto change_p_of = [](const PointRounds& state) {
        double out = 1.0;
        for (const auto& [name, mine] : state.my_medians) {
          const auto found = state.their_medians.find(name);
          if (found == state.their_medians.end() || found->second.size() != mine.size()) continue;
          out = std::min(out, compare_builds(found->second, mine, state.threshold, 0.95).p_value);
        }
        return out;
      };
      bool going = run_others();
      while (going) {
        // Each entry's current point; the one to run a round now: while a point has fewer than
        // kWarmRounds rounds, the one with the fewest (the earlier entry on a tie: plain turns),
        // then the one whose paired test is nearest to deciding a change (change_p_of; the
        // earlier entry on a tie).
        Turn* chosen = nullptr;
        std::pair<int64_t, double> chosen_key;
        for (Turn& turn : turns) {
          if (!turn.current) {
            while (!turn.points.empty() && cut && turn.points.front().ref.task->layer >= *cut) {
              turn.points.pop_front();
            }
            if (turn.points.empty()) continue;
            const Pending pending = turn.points.front();
            turn.points.pop_front();
            turn.current = begin_rounds(*pending.ref.task, *pending.ref.entry, pending.ref.repeat,
                                        pending.baseline_first);
            turn.current->rank = pending.rank;
          }
          const int64_t rounds = turn.current->round;
          const std::pair<int64_t, double> turn_key =
              rounds < kWarmRounds ? std::pair{rounds, 0.0}
                                   : std::pair{kWarmRounds, change_p_of(*turn.current)};
          if (chosen == nullptr || turn_key < chosen_key) {
            chosen = &turn;
            chosen_key = turn_key;
          }
        }
        if (chosen == nullptr) break;
        if (stop_if_interrupted()) {
          // The points in progress keep the rounds they ran, as a point cut short would.
          for (Turn& turn : turns) {
            if (turn.current && !turn.current->mine.empty()) {
              record_rounds(*turn.current);
              rank_new(turn.current->rank);
            }
            turn.current.reset();
          }
          going = false;
          break;
        }
        try {
          if (!step_rounds(*chosen->current)) {
            decide_at_look(*chosen->current);
            update_cut();
            continue;
          }
          record_rounds(*chosen->current);
          rank_new(chosen->current->rank);
        } catch (const Error& error) {
          stop_on_error(*chosen->current->task, error);
          going = false;
          break;
        }
        chosen->current.reset();
        ++rounds_done;
        update_cut();
        going = run_others();
      }
      if (going) run_others();
      // The record lists the stage's points in `order`, as when each ran all its rounds before
      // the next began: the turns change when a point is done, not where the run shows it.
      auto in_order = [](std::vector<PointResult>& points, size_t first,
                         const std::vector<size_t>& ranks) {
        std::vector<size_t> places(ranks.size());
        std::iota(places.begin(), places.end(), size_t{0});
        std::stable_sort(places.begin(), places.end(),
                         [&](size_t a, size_t b) { return ranks[a] < ranks[b]; });
        std::vector<PointResult> sorted;
        sorted.reserve(places.size());
        for (size_t place : places) sorted.push_back(std::move(points[first + place]));
        std::move(sorted.begin(), sorted.end(),
                  points.begin() + static_cast<std::ptrdiff_t>(first));
      };
      rank_new(order.size());
      in_order(result.points, first_point, point_rank);
      in_order(result.baseline_points, first_baseline_point, baseline_rank);
    }
    // The baseline build's check points, on the candidate's seeds, in the candidate's order.
    for (const DeferredCheck& check : deferred_checks) {
      if (!stop_reason.empty()) break;
      if (options.interrupted != nullptr && options.interrupted->load()) {
        result.interrupted = true;
        stop_reason = "the run was interrupted";
        break;
      }
      try {
        std::optional<PointResult> base =
            pool ? pool->take({true, check.task, check.repeat}, baseline_work(check), top_up)
                 : baseline->run(*check.task, *check.entry, check.repeat, check.seed);
        ++deferred_taken;
        if (base) {
          base->layer = check.task->layer;
          base->entry = check.task->entry;
          base->repeat = check.repeat;
          result.baseline_points.push_back(std::move(*base));
        }
        --baseline_remaining[key(check.task->layer, check.task->entry)];
        for (size_t index : layer_gates) decide(index, false);
      } catch (const Error& error) {
        if (options.interrupted != nullptr && options.interrupted->load()) {
          result.interrupted = true;
          stop_reason = "the run was interrupted";
        } else {
          result.error = error;
          stop_reason = "the subject failed at " + check.task->entry + " " +
                        params_to_string(check.task->params) + ": " + error.message();
        }
        break;
      }
    }
    pool.reset();  // a point started ahead that the cascade did not take: waited for, dropped
    if (options.layer_end) {
      for (Layer member : stage) {
        if (points_of_layer[member] == 0) continue;
        options.layer_end(member, outcomes[member].points < points_of_layer[member]);
      }
    }
    if (!stop_reason.empty()) {
      // A stage cut short decides nothing more: its undecided gates are not-run too.
      mark_not_run(stop_reason);
      for (Layer member : stage) {
        outcomes[member].status = LayerStatus::kNotReached;
        result.layers.push_back(outcomes[member]);
      }
      continue;
    }
    // The layers after a failing one in the stage: their undecided gates are not-run (a gate
    // one of their looks already failed stays failed).
    if (cut) {
      for (Layer member : stage) {
        if (member >= *cut) mark_not_run(cut_reason, member);
      }
    }

    if (in_stage(Layer::kBench)) {
      // Entries no gate reads still get their false-discovery control.
      std::vector<PointResult> rest;
      std::vector<size_t> places;
      for (size_t at = first_point; at < result.points.size(); ++at) {
        if (result.points[at].layer != Layer::kBench || controlled.count(result.points[at].entry)) {
          continue;
        }
        places.push_back(at);
        rest.push_back(result.points[at]);
      }
      control_bench_false_discovery(rest);
      for (size_t at = 0; at < places.size(); ++at) result.points[places[at]] = std::move(rest[at]);
    }
    // Printed at the first point that broke them (or at a look); the record holds every point's
    // evidence (a FAIL stays a FAIL: no later point can make such a gate pass, and a look's FAIL
    // was printed).
    for (size_t index : decided_early) {
      GateResult full = evaluate_gate(objective.gates[index], objective, plan, result.points,
                                      baseline != nullptr ? &result.baseline_points : nullptr);
      if (full.verdict != GateVerdict::kFail) continue;
      if (gates[index]->layer == Layer::kScenario) {
        full.rule += " (printed when a look at " + std::to_string(gates[index]->statistics.n) +
                     " repeats decided it)";
        full.findings = gates[index]->findings;
      }
      gates[index] = std::move(full);
    }
    for (size_t index : layer_gates) decide(index, true);
    flush_held();
    for (Layer member : stage) {
      LayerOutcome& outcome = outcomes[member];
      if (cut && member >= *cut) {
        outcome.status = LayerStatus::kNotReached;
        result.layers.push_back(outcome);
        continue;
      }
      const bool has_gates = std::any_of(layer_gates.begin(), layer_gates.end(), [&](size_t index) {
        return gate_layer(objective.gates[index].expression) == member;
      });
      if (outcome.points == 0 && !has_gates) {
        result.layers.push_back(outcome);
        continue;
      }
      bool failed_point = false;
      for (size_t index = first_point; index < result.points.size(); ++index) {
        failed_point = failed_point || (result.points[index].layer == member &&
                                        result.points[index].verdict == Verdict::kFail);
      }
      outcome.status =
          failing[member].empty() && !failed_point ? LayerStatus::kPassed : LayerStatus::kFailed;
      if (outcome.status == LayerStatus::kFailed && stop_reason.empty()) {
        stop_reason = layer_stop_reason(member);
      }
      result.layers.push_back(outcome);
    }
  }
  flush_held();
  for (size_t index = 0; index < gates.size(); ++index) {
    result.gates.push_back(gates[index] ? std::move(*gates[index])
                                        : not_run_gate(objective.gates[index], "no layer ran it"));
  }
  result.causes = explain_failures(objective, result.gates);
  for (const FollowingGate& link : result.causes.follows) {
    for (auto& gate : result.gates) {
      if (gate.name == link.gate) gate.rule += " (" + link.sentence + ")";
    }
  }
  if (baseline != nullptr && baseline->cache_log) result.baseline_cache = *baseline->cache_log;
  result.wall_s = seconds_since(start);
  return result;
}

std::vector<const Finding*> failed_guards(const CascadeResult& result) {
  std::vector<const Finding*> out;
  for (const auto& point : result.points) {
    for (const auto& finding : point.findings) {
      if (undermines_results(finding)) out.push_back(&finding);
    }
  }
  return out;
}

Verdict cascade_verdict(const CascadeResult& result) {
  if (!failed_guards(result).empty()) return Verdict::kFail;
  bool fail = false, unsure = false, decided = false;
  for (const auto& gate : result.gates) {
    fail = fail || gate.verdict == GateVerdict::kFail;
    unsure = unsure || gate.verdict == GateVerdict::kInconclusive;
    decided = decided || gate.verdict != GateVerdict::kNotRun;
  }
  if (fail) return Verdict::kFail;
  if (unsure) return Verdict::kInconclusive;
  return decided ? Verdict::kPass : Verdict::kNone;
}

int cascade_exit_code(const CascadeResult& result) {
  const Verdict verdict = cascade_verdict(result);
  return verdict == Verdict::kPass || verdict == Verdict::kNone ? 0 : 1;
}

std::vector<Finding> top_findings(const CascadeResult& result, size_t limit, bool* truncated) {
  std::vector<Finding> all;
  auto add = [&all](const Finding& finding) {
    if (std::find(all.begin(), all.end(), finding) == all.end()) all.push_back(finding);
  };
  // In turn across the gates that did not pass (the first finding of each, then the second, ...),
  // so that a gate with many findings does not hide the lead finding of the next one.
  // A failing guard leads: it says the results the gates judged cannot be believed.
  for (const Finding* guard : failed_guards(result)) add(*guard);
  // The failing causes lead, most specific first (gate/causes.hpp); then the objective's order.
  std::vector<const GateResult*> ordered;
  for (const auto& cause : result.causes.causes) {
    for (const auto& gate : result.gates) {
      if (gate.name == cause) ordered.push_back(&gate);
    }
  }
  for (const auto& gate : result.gates) {
    if (std::find(ordered.begin(), ordered.end(), &gate) == ordered.end()) ordered.push_back(&gate);
  }
  size_t depth = 0;
  for (bool more = true; more; ++depth) {
    more = false;
    for (const GateResult* gate : ordered) {
      if (gate->verdict == GateVerdict::kPass || depth >= gate->findings.size()) continue;
      add(gate->findings[depth]);
      more = true;
    }
  }
  for (Severity severity : {Severity::kFail, Severity::kWarn}) {
    for (const auto& point : result.points) {
      for (const auto& finding : point.findings) {
        if (finding.severity == severity) add(finding);
      }
    }
  }
  if (truncated != nullptr) *truncated = all.size() > limit;
  if (all.size() > limit) all.resize(limit);
  return all;
}

std::vector<std::string> subject_command(const SubjectSpec& subject) {
  if (!subject.working_dir && subject.environment.empty()) return subject.command;
  std::vector<std::string> argv = {"env"};
  if (subject.working_dir) {
    argv.push_back("-C");
    argv.push_back(std::filesystem::absolute(*subject.working_dir).lexically_normal().string());
  }
  for (const auto& [name, value] : subject.environment) argv.push_back(name + "=" + value);
  argv.insert(argv.end(), subject.command.begin(), subject.command.end());
  return argv;
}

std::vector<std::string> subject_for_reproduce(std::vector<std::string> argv,
                                               const std::filesystem::path& project_root) {
  if (argv.size() < 3 || argv[0] != "env" || argv[1] != "-C") return argv;
  const std::filesystem::path relative =
      std::filesystem::path(argv[2]).lexically_relative(project_root);
  if (relative.empty() || *relative.begin() == "..") return argv;
  if (relative == ".") {
    argv.erase(argv.begin() + 1, argv.begin() + 3);
  } else {
    argv[2] = relative.string();
  }
  if (argv.size() > 1 && argv[1] != "-C" && argv[1].find('=') == std::string::npos) {
    argv.erase(argv.begin());  // `env` with neither a folder nor a variable: the bare command
  }
  return argv;
}

namespace {

// Drawn once per process: what every hidden run's secret of this process is derived from.
uint64_t process_secret() {
  static const uint64_t secret = [] {
    std::random_device entropy;
    return (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
  }();
  return secret;
}

}  // namespace

uint64_t hidden_secret(const std::string& scope, const PlanTask& task, int64_t repeat) {
  const std::string text = std::to_string(process_secret()) + "\n" + scope + "\n" + task.entry +
                           "\n" + task.probe + "\n" + params_to_string(task.params) + "\n" +
                           std::to_string(repeat);
  return std::stoull(sha256_hex(text).substr(0, 16), nullptr, 16);
}

probe::RunRequest point_run_request(const Objective& objective, const std::filesystem::path& home,
                                    const std::string& staging_id, uint64_t memory_limit_bytes,
                                    const PlanTask& task, const ProbeEntry& entry, int64_t repeat,
                                    const std::string& secret_scope) {
  // The defaults are probe::RunRequest's (the one door): sandbox, hidden run, the runtime's
  // guards. Only what the objective says is set here.
  probe::RunRequest request;
  request.probe = task.probe;
  request.layer = task.layer;
  // The same hidden run for the candidate's and the baseline's build of this point and repeat.
  request.hidden_secret = hidden_secret(secret_scope, task, repeat);
  // One hidden run per point: at its first repeat. The later repeats differ from the first by
  // their seed alone, and the hidden run's seed and shape are drawn in secret already, so a
  // hidden run per repeat bought nothing but time (a fifth of a check layer with `seeds`).
  if (repeat > 0) {
    request.add_hidden_point = false;
    request.hidden_elsewhere = "the hidden run of this point ran at its first repeat";
  }
  for (const auto& [name, value] : task.params) {
    request.sets.push_back(name + "=" + value_to_string(value));
  }
  request.seed = entry.seed;
  // `seeds` per point: repeat r runs seed + r / repeats, so every seed gets its repeats.
  if (entry.seed && entry.seeds > 1) {
    request.seed =
        *entry.seed + static_cast<uint64_t>(repeat / std::max<int64_t>(1, entry.repeats));
  }
  request.timeout_s = objective.subject.timeout_s;
  request.memory_limit_bytes = memory_limit_bytes;
  request.home = std::filesystem::absolute(home);
  request.run_id = staging_id;
  request.subject_command = subject_command(objective.subject);
  request.launch = objective.subject.launch;
  request.pass_env = objective.subject.pass_env;
  for (const auto& [metric, limit] : entry.tolerances) {
    std::ostringstream text;
    text << metric << "=" << std::setprecision(17) << limit;
    request.analyze.tolerances.push_back(text.str());
  }
  request.analyze.rules = entry.rules;
  request.analyze.threshold = entry.threshold.value_or(0.02);
  // The bench's sampling budget and precision reach the subject as --budget/--precision.
  request.budget_s = entry.budget_s;
  request.precision = entry.precision;
  if (entry.round > 0) request.round = entry.round;
  // The bench's `variants`: the subject runs those alone, in that order (the first the baseline),
  // not every variant its body declares (each holds its own inputs in a process of its own).
  request.variants = entry.variants;
  if (entry.counters) {
    request.counters = probe::CountersAttachment{entry.counters->kernel, entry.counters->launches};
  }
  return request;
}

PointResult finish_point(const probe::RunRequest& request, const std::string& run_id,
                         const PlanTask& task, int64_t repeat, probe::RunOutcome outcome) {
  const std::filesystem::path home = request.home.value_or(std::filesystem::path{});
  // Place it under <home>/runs/<run>/<probe>/<point>[,repeat=N | ,entry=NAME].
  const std::filesystem::path probe_dir = run_dir(home, run_id) / task.probe;
  const std::string from = outcome.observation_dir.string();
  std::filesystem::path final_dir;
  {
    // Points finishing at once (check workers) must not pick the same free name.
    static std::mutex placing;
    std::lock_guard lock(placing);
    std::filesystem::create_directories(probe_dir);
    std::string name = outcome.observation_dir.filename().string();
    if (repeat > 0) name += ",repeat=" + std::to_string(repeat + 1);
    if (std::filesystem::exists(probe_dir / name)) name += ",entry=" + task.entry;
    for (int suffix = 2; std::filesystem::exists(probe_dir / name); ++suffix) {
      name = outcome.observation_dir.filename().string() + ",entry=" + task.entry + "." +
             std::to_string(suffix);
    }
    final_dir = probe_dir / name;
    check_under_home(final_dir, home, "the point's folder");
    std::filesystem::rename(outcome.observation_dir, final_dir);
  }
  // The hidden run's observation goes inside the point's folder, as hidden/.
  const std::string hidden_from = outcome.data.value("hidden_observation_dir", std::string());
  if (!hidden_from.empty()) {
    const std::filesystem::path hidden_to = final_dir / "hidden";
    std::filesystem::rename(hidden_from, hidden_to);
    if (move_observation_paths(outcome, hidden_from, hidden_to)) {
      for (auto& hidden : outcome.data["hidden_runs"]) {
        const std::string file = hidden.value("observation", std::string());
        if (file.rfind(hidden_from, 0) == 0) {
          hidden["observation"] = hidden_to.string() + file.substr(hidden_from.size());
        }
      }
      outcome.data["hidden_observation_dir"] = hidden_to.string();
    }
    outcome.observation_dir = final_dir;
  }
  std::error_code ignored;
  std::filesystem::remove_all(run_dir(home, request.run_id), ignored);

  // The analysis the subject's run ended with stays: its paths are moved to where the point now
  // lies, in the findings and in the observation.json it wrote. (Analysing the point again here
  // cost every point a second analysis: a second read of all its outputs.)
  if (move_observation_paths(outcome, from, final_dir)) {
    return to_point_result(task, repeat, outcome, request.subject_command, request.launch,
                           request.variants);
  }
  // A path that JSON would escape: analysed again where it now lies.
  PointResult seeded = to_point_result(task, repeat, outcome, request.subject_command,
                                       request.launch, request.variants);
  probe::AnalyzeOptions analyze = request.analyze;
  analyze.reproduce = seeded.reproduce;
  analyze.bootstrap_seed = seeded.seed;
  probe::RunOutcome analysed = probe::analyze_observation(final_dir, analyze);
  // What loupe added outside the analysis (the seal, the hidden run, the guards) stays, and so
  // does the verdict they decided.
  analysed.analysed_findings = analysed.findings.size();
  analysed.findings.insert(
      analysed.findings.end(),
      outcome.findings.begin() +
          static_cast<std::ptrdiff_t>(std::min(outcome.analysed_findings, outcome.findings.size())),
      outcome.findings.end());
  analysed.verdict = outcome.verdict;
  analysed.exit_code = outcome.exit_code;
  for (const char* key : {"hidden_runs", "hidden_observation_dir", "sandbox", "sealed"}) {
    if (outcome.data.contains(key)) analysed.data[key] = outcome.data[key];
  }
  outcome = std::move(analysed);
  // The analysis rebuilds the findings from the observation; the counters pass's come back from
  // what it kept in the point's counters/ folder.
  if (request.counters) probe::apply_counters(request, outcome);
  return to_point_result(task, repeat, outcome, request.subject_command, request.launch,
                         request.variants);
}

// A baseline build's point runs no hidden run: the hidden run is the candidate's guard against a
// build tuned to the points it was shown; gates read a baseline's shown points only, and a
// baseline's hidden run at a fresh secret seed cost a cold baseline side about 15 s of kda's
// 36 (2026-12-07) and could fail the point of an unchanged build on a seed its bounds miss.
namespace {
void without_hidden_run(probe::RunRequest& request) {
  request.add_hidden_point = false;
  request.hidden_elsewhere = "none: a baseline build's points run no hidden run";
}
}  // namespace

PointRunner subject_point_runner(const Objective& objective, const std::filesystem::path& home,
                                 const std::string& run_id, uint64_t memory_limit_bytes,
                                 const std::string& secret_scope, bool hidden_runs) {
  const std::filesystem::path absolute_home = std::filesystem::absolute(home);
  const std::string scope = secret_scope.empty() ? run_id : secret_scope;
  // The subject's list, asked once per runner (run_point reads the probe's layer and hidden
  // points from it); a failed listing is left to run_point, which names the probe in its error.
  // The runner may be called from several threads at once (check workers): the list is asked
  // under a lock, and each call stages in a folder of its own.
  struct Shared {
    std::mutex mutex;
    std::optional<Json> list;
    uint64_t calls = 0;
  };
  auto shared = std::make_shared<Shared>();
  return [objective, absolute_home, run_id, memory_limit_bytes, scope, shared, hidden_runs](
             const PlanTask& task, const ProbeEntry& entry, int64_t repeat) {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock lock(shared->mutex);
    const uint64_t call = shared->calls++;
    // Each point lands in a staging run first: the subject decides the point's full name
    // (defaults included), and repeats of one point must not overwrite each other; finish_point
    // removes the staging run, so points running at once each have their own.
    probe::RunRequest request =
        point_run_request(objective, absolute_home, run_id + "/.staging-" + std::to_string(call),
                          memory_limit_bytes, task, entry, repeat, scope);
    if (!hidden_runs) without_hidden_run(request);
    if (!shared->list) {
      try {
        shared->list = probe::list_probes(request.subject_command, request.timeout_s,
                                          request.memory_limit_bytes, request.pass_env);
      } catch (const Error&) {
      }
    }
    request.probe_list = shared->list;
    lock.unlock();
    PointResult point =
        finish_point(request, run_id, task, repeat, probe::fold_point(probe::run_point(request)));
    point.wall_s = seconds_since(start);
    return point;
  };
}

namespace {

// The baseline cache of one run's baseline build: the build is identified (hashed) at its first
// check point, not before, so a run whose baseline runs no check pays nothing for it. Check
// points of the build may run at once (check workers): `mutex` guards everything here; a point
// runs without it.
struct BaselineCacheState {
  std::mutex mutex;
  std::shared_ptr<BaselineCacheLog> log = std::make_shared<BaselineCacheLog>();
  bool identified = false;
  std::optional<BaselineCache> cache;

  void sync() {
    if (!cache) return;
    log->stored = cache->stored();
    log->warnings = cache->warnings();
  }
};

}  // namespace

BaselineSource build_baseline(const Objective& objective, const std::filesystem::path& home,
                              const std::string& run_id, const std::vector<std::string>& command,
                              const std::string& label, uint64_t memory_limit_bytes,
                              bool cache_checks) {
  Objective other = objective;
  other.subject.command = command;
  // No hidden runs: they are the candidate's guard (without_hidden_run).
  PointRunner runner = subject_point_runner(other, home, run_id + "/baseline", memory_limit_bytes,
                                            run_id, /*hidden_runs=*/false);
  BaselineSource source;
  source.label = label;
  source.interleave = true;
  source.min_rounds = 5;
  source.max_rounds = 16;
  auto state = std::make_shared<BaselineCacheState>();
  const std::filesystem::path absolute_home = std::filesystem::absolute(home);
  state->log->enabled = cache_checks;
  state->log->dir = (absolute_home / "baseline-cache").string();
  if (!cache_checks) state->log->off_reason = "--no-baseline-cache";
  source.cache_log = state->log;
  source.run = [runner, other, absolute_home, run_id, memory_limit_bytes, state](
                   const PlanTask& task, const ProbeEntry& entry, int64_t repeat,
                   std::optional<uint64_t> seed) -> std::optional<PointResult> {
    ProbeEntry seeded = entry;
    if (seed) {
      seeded.seed = *seed;
      seeded.seeds = 1;
    }
    std::unique_lock lock(state->mutex);
    if (task.layer != Layer::kCheck || !state->log->enabled) {
      lock.unlock();
      return runner(task, seeded, repeat);
    }
    if (!state->identified) {
      state->identified = true;
      try {
        const BuildIdentity identity =
            identify_build(other.subject, std::filesystem::read_symlink("/proc/self/exe"));
        state->cache.emplace(state->log->dir, identity.hash, run_id);
      } catch (const Error& error) {
        state->log->enabled = false;
        state->log->off_reason = error.message();
        lock.unlock();
        return runner(task, seeded, repeat);
      } catch (const std::filesystem::filesystem_error& error) {
        state->log->enabled = false;
        state->log->off_reason = std::string("loupe's executable cannot be read: ") + error.what();
        lock.unlock();
        return runner(task, seeded, repeat);
      }
    }
    // The request the runner is about to make (the one door's), described without what differs
    // from run to run (its folders, its hidden-run secret).
    probe::RunRequest request =
        point_run_request(other, absolute_home, run_id + "/baseline/.staging", memory_limit_bytes,
                          task, seeded, repeat, run_id);
    without_hidden_run(request);  // as the runner makes it
    const std::string key = state->cache->key(describe_request(request, repeat));
    if (std::optional<CachedPoint> cached = state->cache->find(key)) {
      state->sync();
      cached->point.cached_from_run = cached->run;
      return std::move(cached->point);
    }
    lock.unlock();
    PointResult point = runner(task, seeded, repeat);
    lock.lock();
    state->cache->store(key, point);
    state->sync();
    return point;
  };
  return source;
}

namespace {

// One observation of a recorded run: where it lies and what it ran.
struct RecordedObservation {
  std::filesystem::path dir;
  std::string probe;
  std::string entry_suffix;  // NAME of ",entry=NAME", if any
  int64_t repeat = 0;
  Json params;
  std::optional<uint64_t> seed;
};

std::vector<RecordedObservation> index_recorded_run(const std::filesystem::path& run_dir) {
  std::vector<RecordedObservation> out;
  std::error_code error;
  for (const auto& probe_dir : std::filesystem::directory_iterator(run_dir, error)) {
    if (!probe_dir.is_directory() || probe_dir.path().filename().string().front() == '.') continue;
    if (probe_dir.path().filename() == "baseline") continue;
    for (const auto& point_dir : std::filesystem::directory_iterator(probe_dir.path(), error)) {
      std::ifstream in(point_dir.path() / "observation.json");
      if (!in) continue;
      const Json observation = Json::parse(in, nullptr, false);
      if (observation.is_discarded()) continue;
      RecordedObservation item;
      item.dir = point_dir.path();
      item.probe = probe_dir.path().filename().string();
      item.params = observation.value("params", Json::object());
      if (observation.contains("seed") && observation["seed"].is_number_unsigned()) {
        item.seed = observation["seed"].get<uint64_t>();
      }
      const std::string name = point_dir.path().filename().string();
      const size_t repeat_at = name.find(",repeat=");
      if (repeat_at != std::string::npos) {
        item.repeat = std::strtoll(name.c_str() + repeat_at + 8, nullptr, 10) - 1;
      }
      const size_t entry_at = name.find(",entry=");
      if (entry_at != std::string::npos) {
        item.entry_suffix = name.substr(entry_at + 7);
        const size_t dot = item.entry_suffix.find('.');
        if (dot != std::string::npos) item.entry_suffix.resize(dot);
      }
      out.push_back(std::move(item));
    }
  }
  return out;
}

const RecordedObservation* match_recorded(const std::vector<RecordedObservation>& index,
                                          const PlanTask& task, int64_t repeat) {
  const RecordedObservation* best = nullptr;
  for (const auto& item : index) {
    if (item.probe != task.probe || item.repeat != repeat) continue;
    bool matches = true;
    for (const auto& [name, value] : task.params) {
      if (!item.params.contains(name) ||
          value_to_string(value_from_json(item.params[name], name)) != value_to_string(value)) {
        matches = false;
        break;
      }
    }
    if (!matches) continue;
    if (item.entry_suffix == task.entry) return &item;
    if (best == nullptr || (item.entry_suffix.empty() && !best->entry_suffix.empty())) best = &item;
  }
  return best;
}

}  // namespace

BaselineSource recorded_baseline(const std::filesystem::path& home,
                                 const std::string& baseline_run) {
  const std::filesystem::path dir = run_dir(std::filesystem::absolute(home), baseline_run);
  if (!std::filesystem::is_directory(dir)) {
    throw Error(ErrorCode::kUsage,
                "--baseline " + baseline_run + ": its observations are not at " + dir.string(),
                "a recorded run can be a baseline only where its observations were kept "
                "(the same --home)");
  }
  auto index = std::make_shared<std::vector<RecordedObservation>>(index_recorded_run(dir));
  BaselineSource source;
  source.label = "run " + baseline_run;
  source.seed_of = [index](const PlanTask& task, int64_t repeat) -> std::optional<uint64_t> {
    const RecordedObservation* found = match_recorded(*index, task, repeat);
    return found ? found->seed : std::nullopt;
  };
  source.run = [index](const PlanTask& task, const ProbeEntry& entry, int64_t repeat,
                       std::optional<uint64_t>) -> std::optional<PointResult> {
    const RecordedObservation* found = match_recorded(*index, task, repeat);
    if (found == nullptr) return std::nullopt;
    probe::AnalyzeOptions analyze;
    for (const auto& [metric, limit] : entry.tolerances) {
      std::ostringstream text;
      text << metric << "=" << std::setprecision(17) << limit;
      analyze.tolerances.push_back(text.str());
    }
    analyze.rules = entry.rules;
    analyze.threshold = entry.threshold.value_or(0.02);
    if (found->seed) analyze.bootstrap_seed = *found->seed;
    const probe::RunOutcome outcome = probe::analyze_observation(found->dir, analyze);
    return to_point_result(task, repeat, outcome, {});
  };
  return source;
}

std::filesystem::path baseline_program(const Objective& objective,
                                       const std::filesystem::path& given) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(given)) return fs::absolute(given);
  // The subject's own program, as the objective names it.
  const fs::path program =
      objective.subject.command.empty() ? fs::path() : fs::path(objective.subject.command[0]);
  std::vector<fs::path> tried;
  if (fs::is_directory(given) && !program.empty()) {
    for (const fs::path& candidate :
         {given / program, given / "bin" / program.filename(), given / program.filename(),
          given / "build" / "bin" / program.filename()}) {
      tried.push_back(candidate);
      if (fs::is_regular_file(candidate) && ::access(candidate.c_str(), X_OK) == 0) {
        return fs::absolute(candidate).lexically_normal();
      }
    }
  }
  std::string paths;
  for (const auto& path : tried) paths += (paths.empty() ? "" : ", ") + path.string();
  throw Error(ErrorCode::kUsage,
              "--baseline " + given.string() + ": " +
                  (tried.empty() ? std::string("not an executable, a folder, a run id, 'latest' "
                                               "or a recorded commit")
                                 : "no executable " + program.filename().string() + " at " + paths),
              "give the earlier build's folder (holding bin/" + program.filename().string() +
                  "), the program itself, a run id, 'latest' or a git revision of a recorded run");
}

Json point_result_to_json(const PointResult& point) {
  Json out = Json::object();
  out["layer"] = std::string(layer_name(point.layer));
  out["entry"] = point.entry;
  out["probe"] = point.probe;
  Json params = Json::object();
  for (const auto& [name, value] : point.params) params[name] = value_to_json(value);
  out["params"] = std::move(params);
  out["repeat"] = point.repeat;
  out["seed"] = point.seed;
  out["verdict"] = std::string(verdict_name(point.verdict));
  out["wall_s"] = number_to_json(point.wall_s);
  out["observation"] = point.observation_dir;
  out["reproduce"] = point.reproduce;
  return out;
}

namespace {

// The skipped runs per (layer, entry), in the order first met.
std::vector<std::pair<std::pair<Layer, std::string>, size_t>> skips_by_entry(
    const CascadeResult& result) {
  std::vector<std::pair<std::pair<Layer, std::string>, size_t>> entries;
  for (const BaselineSkip& skip : result.baseline_skipped) {
    auto found = std::find_if(entries.begin(), entries.end(), [&](const auto& item) {
      return item.first.first == skip.layer && item.first.second == skip.entry;
    });
    if (found == entries.end()) {
      entries.push_back({{skip.layer, skip.entry}, 1});
    } else {
      ++found->second;
    }
  }
  return entries;
}

constexpr const char* kSkipReason = "no gate reads their baseline values";

}  // namespace

std::string baseline_skip_line(const CascadeResult& result, size_t max_entries) {
  if (result.baseline_skipped.empty()) return "";
  const auto entries = skips_by_entry(result);
  std::string line = "baseline build: " + std::to_string(result.baseline_skipped.size()) +
                     " run(s) not run, " + kSkipReason + ": ";
  for (size_t index = 0; index < entries.size() && index < max_entries; ++index) {
    const auto& [where, runs] = entries[index];
    line += (index == 0 ? "" : ", ") + std::string(layer_name(where.first)) + " " + where.second +
            " (" + std::to_string(runs) + ")";
  }
  if (entries.size() > max_entries) {
    line += ", and " + std::to_string(entries.size() - max_entries) +
            " more entries (--json lists them in data.baseline_skipped)";
  }
  return line;
}

Json baseline_skips_to_json(const CascadeResult& result, size_t max_entries) {
  const auto entries = skips_by_entry(result);
  Json out = Json::object();
  out["runs"] = result.baseline_skipped.size();
  out["reason"] = kSkipReason;
  Json listed = Json::array();
  for (size_t index = 0; index < entries.size() && index < max_entries; ++index) {
    listed.push_back({{"layer", std::string(layer_name(entries[index].first.first))},
                      {"entry", entries[index].first.second},
                      {"runs", entries[index].second}});
  }
  out["entries"] = std::move(listed);
  out["truncated"] = entries.size() > max_entries;
  return out;
}

std::vector<std::string> baseline_cache_lines(const CascadeResult& result, size_t max_entries) {
  std::vector<std::string> lines;
  if (!result.baseline_cache) return lines;
  const BaselineCacheLog& log = *result.baseline_cache;
  if (!log.enabled) {
    if (!log.off_reason.empty()) {
      lines.push_back("baseline cache: off (" + log.off_reason +
                      "); the baseline build's check points ran");
    }
    return lines;
  }
  // Per run that stored them, the entries in the order first met with their counts.
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, size_t>>>> runs;
  size_t hits = 0;
  for (const PointResult& point : result.baseline_points) {
    if (point.cached_from_run.empty()) continue;
    ++hits;
    auto run = std::find_if(runs.begin(), runs.end(),
                            [&](const auto& item) { return item.first == point.cached_from_run; });
    if (run == runs.end()) {
      runs.push_back({point.cached_from_run, {}});
      run = std::prev(runs.end());
    }
    const std::string entry = std::string(layer_name(point.layer)) + " " + point.entry;
    auto found = std::find_if(run->second.begin(), run->second.end(),
                              [&](const auto& item) { return item.first == entry; });
    if (found == run->second.end()) {
      run->second.push_back({entry, 1});
    } else {
      ++found->second;
    }
  }
  for (const auto& [run, entries] : runs) {
    size_t count = 0;
    for (const auto& item : entries) count += item.second;
    std::string line = "baseline cache: " + std::to_string(count) +
                       " check run(s) of the baseline build taken from the cache, stored by run " +
                       run + ": ";
    for (size_t index = 0; index < entries.size() && index < max_entries; ++index) {
      line += (index == 0 ? "" : ", ") + entries[index].first + " (" +
              std::to_string(entries[index].second) + ")";
    }
    if (entries.size() > max_entries) {
      line += ", and " + std::to_string(entries.size() - max_entries) +
              " more entries (--json lists them in data.baseline_cache)";
    }
    lines.push_back(line);
  }
  if (hits > 0 || log.stored > 0) {
    lines.push_back("baseline cache: " + std::to_string(hits) + " hit(s), " +
                    std::to_string(log.stored) + " check run(s) of the baseline build run and " +
                    "stored in " + log.dir + " (--no-baseline-cache runs them all)");
  }
  lines.insert(lines.end(), log.warnings.begin(), log.warnings.end());
  return lines;
}

Json baseline_cache_to_json(const CascadeResult& result, size_t max_points) {
  if (!result.baseline_cache) return nullptr;
  const BaselineCacheLog& log = *result.baseline_cache;
  Json out = Json::object();
  out["enabled"] = log.enabled;
  out["off_reason"] = log.off_reason.empty() ? Json(nullptr) : Json(log.off_reason);
  out["dir"] = log.dir;
  Json points = Json::array();
  size_t hits = 0;
  for (const PointResult& point : result.baseline_points) {
    if (point.cached_from_run.empty()) continue;
    ++hits;
    if (points.size() >= max_points) continue;
    Json params = Json::object();
    for (const auto& [name, value] : point.params) params[name] = value_to_json(value);
    points.push_back({{"layer", std::string(layer_name(point.layer))},
                      {"entry", point.entry},
                      {"params", std::move(params)},
                      {"repeat", point.repeat},
                      {"run", point.cached_from_run}});
  }
  out["hits"] = hits;
  out["stored"] = log.stored;
  out["points"] = std::move(points);
  out["truncated"] = hits > max_points;
  out["warnings"] = log.warnings;
  return out;
}

void apply_overrides(Plan& plan, const std::vector<std::string>& sets) {
  for (const auto& text : sets) {
    const size_t equals = text.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == text.size()) {
      throw Error(ErrorCode::kUsage, "--set '" + text + "': expected NAME=VALUE",
                  "for example --set T=4096");
    }
    const std::string name = text.substr(0, equals);
    const Value value = value_from_text(text.substr(equals + 1));
    bool used = false;
    for (auto& task : plan.tasks) {
      for (auto& [param, current] : task.params) {
        if (param == name) {
          current = value;
          used = true;
        }
      }
    }
    if (!used) {
      std::set<std::string> names;
      for (const auto& task : plan.tasks) {
        for (const auto& [param, current] : task.params) names.insert(param);
      }
      std::string known;
      for (const auto& param : names) known += (known.empty() ? "" : ", ") + param;
      throw Error(ErrorCode::kUsage,
                  "--set " + text + ": no task of the plan has parameter '" + name + "'",
                  "the parameters of the plan's tasks: " + known);
    }
  }
  // Points the overrides made identical run once.
  std::vector<PlanTask> unique;
  for (auto& task : plan.tasks) {
    if (std::find(unique.begin(), unique.end(), task) == unique.end()) unique.push_back(task);
  }
  plan.tasks = std::move(unique);
}

}  // namespace loupe::gate
