// The cascade runner (see cascade.hpp).
#include "gate/cascade.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <set>
#include <sstream>

#include "core/home.hpp"
#include "core/json.hpp"
#include "core/limits.hpp"
#include "gate/executor.hpp"
#include "probe/runner.hpp"

namespace loupe::gate {
namespace {

constexpr Layer kLayers[] = {Layer::kCheck, Layer::kBench, Layer::kScenario};

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

PointResult to_point_result(const PlanTask& task, int64_t repeat, const probe::RunOutcome& outcome,
                            const std::vector<std::string>& subject,
                            const std::vector<std::string>& launch = {}) {
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
      const Json summaries = data.value("summaries", Json::object());
      for (const auto& [variant, summary] : summaries.items()) {
        for (const auto& [name, value] : summary.items()) {
          if (value.is_number()) point.metrics.push_back({variant, name, value.get<double>()});
        }
      }
      const Json comparisons = data.value("comparisons", Json::array());
      for (const auto& record : outcome.bench_comparisons) {
        if (record.data_index >= comparisons.size()) continue;
        const Json& entry = comparisons[record.data_index];
        point.comparisons.push_back(
            {entry.value("a", ""), entry.value("b", ""), record.comparison});
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
  point.reproduce = probe::reproduce_command(task.probe, point.params, point.seed, std::nullopt, 0,
                                             shown_subject, launch);
  // The probe's own findings name the subject as it was run; show it as the point does.
  auto subject_tail = [](const std::vector<std::string>& argv) {
    const std::string line = probe::reproduce_command("p", {}, 0, std::nullopt, 0, argv);
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

  size_t total = 0;
  for (const auto& task : plan.tasks) {
    if (!options.only || task.layer == *options.only) total += static_cast<size_t>(task.repeats);
  }

  std::vector<std::optional<GateResult>> gates(objective.gates.size());
  std::string stop_reason;  // set once the cascade stops
  size_t done = 0;
  for (Layer layer : kLayers) {
    LayerOutcome outcome{layer, LayerStatus::kEmpty, 0};
    std::vector<size_t> layer_gates;
    for (size_t index = 0; index < objective.gates.size(); ++index) {
      if (gate_layer(objective.gates[index].expression) == layer) layer_gates.push_back(index);
    }
    auto mark_not_run = [&](const std::string& reason) {
      for (size_t index : layer_gates) gates[index] = not_run_gate(objective.gates[index], reason);
    };
    if (options.only && layer != *options.only) {
      outcome.status = LayerStatus::kSkipped;
      mark_not_run("--only " + std::string(layer_name(*options.only)) + " left the " +
                   std::string(layer_name(layer)) + " layer out");
      result.layers.push_back(outcome);
      continue;
    }
    if (!stop_reason.empty()) {
      outcome.status = LayerStatus::kNotReached;
      mark_not_run(stop_reason);
      result.layers.push_back(outcome);
      continue;
    }

    const size_t first_point = result.points.size();
    // Repeats are interleaved across the layer's tasks (A B A B ...), so that drift of the
    // machine over the layer's run falls on every entry alike instead of biasing their ratio.
    std::vector<const PlanTask*> layer_tasks;
    int64_t max_repeats = 0;
    for (const auto& task : plan.tasks) {
      if (task.layer != layer) continue;
      layer_tasks.push_back(&task);
      max_repeats = std::max(max_repeats, task.repeats);
    }
    std::vector<PointRef> order;
    for (int64_t repeat = 0; repeat < max_repeats; ++repeat) {
      for (const PlanTask* task : layer_tasks) {
        if (repeat >= task->repeats) continue;
        const ProbeEntry* entry = objective.find_entry(layer, task->entry);
        if (entry == nullptr) {
          throw Error(ErrorCode::kInternal, "plan task names entry '" + task->entry +
                                                "', which the objective does not declare");
        }
        order.push_back({task, entry, repeat});
      }
    }
    if (options.layer_begin && !order.empty()) options.layer_begin(layer, order);
    for (const PointRef& ref : order) {
      if (!stop_reason.empty()) break;
      const PlanTask* task = ref.task;
      const ProbeEntry* entry = ref.entry;
      const int64_t repeat = ref.repeat;
      if (options.interrupted != nullptr && options.interrupted->load()) {
        result.interrupted = true;
        stop_reason = "the run was interrupted";
        break;
      }
      try {
        result.points.push_back(runner(*task, *entry, repeat));
      } catch (const Error& error) {
        if (options.interrupted != nullptr && options.interrupted->load()) {
          result.interrupted = true;
          stop_reason = "the run was interrupted";
        } else {
          result.error = error;
          stop_reason = "the subject failed at " + task->entry + " " +
                        params_to_string(task->params) + ": " + error.message();
        }
        break;
      }
      ++done;
      ++outcome.points;
      if (options.progress) {
        Progress progress;
        progress.index = done;
        progress.total = total;
        progress.point = &result.points.back();
        progress.elapsed_s = seconds_since(start);
        progress.remaining_s =
            progress.elapsed_s / static_cast<double>(done) * static_cast<double>(total - done);
        options.progress(progress);
      }
    }
    if (options.layer_end && !order.empty()) {
      options.layer_end(layer, outcome.points < order.size());
    }
    if (!stop_reason.empty()) {
      // A layer cut short decides nothing: its gates are not-run too.
      outcome.status = LayerStatus::kNotReached;
      mark_not_run(stop_reason);
      result.layers.push_back(outcome);
      continue;
    }
    if (outcome.points == 0 && layer_gates.empty()) {
      result.layers.push_back(outcome);
      continue;
    }

    if (layer == Layer::kBench) {
      std::vector<PointResult> bench_points(result.points.begin() + first_point,
                                            result.points.end());
      control_bench_false_discovery(bench_points);
      std::copy(bench_points.begin(), bench_points.end(), result.points.begin() + first_point);
    }
    std::vector<std::string> failing;
    for (size_t index : layer_gates) {
      if (auto reason = left_out_reason(objective.gates[index], plan)) {
        gates[index] = not_run_gate(objective.gates[index], *reason);
        continue;
      }
      GateResult gate = evaluate_gate(objective.gates[index], objective, plan, result.points);
      if (layer == Layer::kScenario && gate.verdict != GateVerdict::kPass) {
        try {
          explain_scenario_gate(gate, objective.gates[index], result.points);
        } catch (const Error& error) {
          gate.rule += " (the traces could not be analysed: " + error.message() + ")";
        }
      }
      if (gate.verdict == GateVerdict::kFail) failing.push_back(gate.name);
      gates[index] = std::move(gate);
    }
    std::vector<std::string> failed_points;
    for (size_t index = first_point; index < result.points.size(); ++index) {
      if (result.points[index].verdict == Verdict::kFail) {
        failed_points.push_back(result.points[index].entry);
      }
    }
    outcome.status =
        failing.empty() && failed_points.empty() ? LayerStatus::kPassed : LayerStatus::kFailed;
    if (outcome.status == LayerStatus::kFailed && !run_all) {
      stop_reason = "the cascade stopped after the " + std::string(layer_name(layer)) +
                    " layer failed (" +
                    (failing.empty() ? "probe " + failed_points.front() + " failed"
                                     : "gate " + gate_names(failing)) +
                    "); --all runs every layer";
    }
    result.layers.push_back(outcome);
  }
  for (size_t index = 0; index < gates.size(); ++index) {
    result.gates.push_back(gates[index] ? std::move(*gates[index])
                                        : not_run_gate(objective.gates[index], "no layer ran it"));
  }
  result.wall_s = seconds_since(start);
  return result;
}

Verdict cascade_verdict(const CascadeResult& result) {
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
  size_t depth = 0;
  for (bool more = true; more; ++depth) {
    more = false;
    for (const auto& gate : result.gates) {
      if (gate.verdict == GateVerdict::kPass || depth >= gate.findings.size()) continue;
      add(gate.findings[depth]);
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

probe::RunRequest point_run_request(const Objective& objective, const std::filesystem::path& home,
                                    const std::string& staging_id, uint64_t memory_limit_bytes,
                                    const PlanTask& task, const ProbeEntry& entry) {
  probe::RunRequest request;
  request.probe = task.probe;
  for (const auto& [name, value] : task.params) {
    request.sets.push_back(name + "=" + value_to_string(value));
  }
  request.seed = entry.seed;
  request.timeout_s = objective.subject.timeout_s;
  request.memory_limit_bytes = memory_limit_bytes;
  request.home = std::filesystem::absolute(home);
  request.run_id = staging_id;
  request.subject_command = subject_command(objective.subject);
  request.launch = objective.subject.launch;
  request.pass_env = objective.subject.pass_env;
  // Not sandboxed yet: inside bubblewrap the smoke objective's lock-contention scenario
  // measured no transfer overhead (interval from 0.96 instead of above 1.3), which
  // tests/integration/run catches; until that is understood the cascade runs subjects as
  // before, locally and through the Slurm executor alike (docs/security.md, "The sandbox").
  request.sandbox = false;
  for (const auto& [metric, limit] : entry.tolerances) {
    std::ostringstream text;
    text << metric << "=" << std::setprecision(17) << limit;
    request.analyze.tolerances.push_back(text.str());
  }
  request.analyze.threshold = entry.threshold.value_or(0.02);
  // The bench's sampling budget and precision reach the subject as --budget/--precision.
  request.budget_s = entry.budget_s;
  request.precision = entry.precision;
  return request;
}

PointResult finish_point(const probe::RunRequest& request, const std::string& run_id,
                         const PlanTask& task, int64_t repeat, probe::RunOutcome outcome) {
  const std::filesystem::path home = request.home.value_or(std::filesystem::path{});
  // Place it under <home>/runs/<run>/<probe>/<point>[,repeat=N | ,entry=NAME].
  const std::filesystem::path probe_dir = run_dir(home, run_id) / task.probe;
  std::filesystem::create_directories(probe_dir);
  std::string name = outcome.observation_dir.filename().string();
  if (repeat > 0) name += ",repeat=" + std::to_string(repeat + 1);
  if (std::filesystem::exists(probe_dir / name)) name += ",entry=" + task.entry;
  for (int suffix = 2; std::filesystem::exists(probe_dir / name); ++suffix) {
    name = outcome.observation_dir.filename().string() + ",entry=" + task.entry + "." +
           std::to_string(suffix);
  }
  const std::filesystem::path final_dir = probe_dir / name;
  check_under_home(final_dir, home, "the point's folder");
  std::filesystem::rename(outcome.observation_dir, final_dir);
  std::error_code ignored;
  std::filesystem::remove_all(run_dir(home, request.run_id), ignored);

  // Analysed again where it now lies, so that every path in its findings is true.
  PointResult seeded =
      to_point_result(task, repeat, outcome, request.subject_command, request.launch);
  probe::AnalyzeOptions analyze = request.analyze;
  analyze.reproduce = seeded.reproduce;
  analyze.bootstrap_seed = seeded.seed;
  outcome = probe::analyze_observation(final_dir, analyze);
  return to_point_result(task, repeat, outcome, request.subject_command, request.launch);
}

PointRunner subject_point_runner(const Objective& objective, const std::filesystem::path& home,
                                 const std::string& run_id, uint64_t memory_limit_bytes) {
  const std::filesystem::path absolute_home = std::filesystem::absolute(home);
  return [objective, absolute_home, run_id, memory_limit_bytes](
             const PlanTask& task, const ProbeEntry& entry, int64_t repeat) {
    const auto start = std::chrono::steady_clock::now();
    // Each point lands in a staging run first: the subject decides the point's full name
    // (defaults included), and repeats of one point must not overwrite each other.
    const probe::RunRequest request = point_run_request(
        objective, absolute_home, run_id + "/.staging", memory_limit_bytes, task, entry);
    PointResult point = finish_point(request, run_id, task, repeat, probe::run_probe(request));
    point.wall_s = seconds_since(start);
    return point;
  };
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
