#include "gate/executor.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <toml++/toml.h>

#include "config/toml_reader.hpp"
#include "core/home.hpp"
#include "core/json.hpp"

namespace loupe::gate {

std::unique_ptr<Executor> make_slurm_executor(
    const ExecutorSpec& spec,
    const ExecutorContext& context);  // slurm_executor.cpp

namespace {

// Runs each point here, when the cascade asks for it: the behaviour of loupe before executors.
class LocalExecutor final : public Executor {
 public:
  explicit LocalExecutor(const ExecutorContext& context)
      : runner_(subject_point_runner(*context.objective, context.home, context.run_id,
                                     context.memory_limit_bytes)) {}
  void begin_layer(Layer, const std::vector<PointRef>&) override {}
  PointResult run(const PointRef& point) override {
    return runner_(*point.task, *point.entry, point.repeat);
  }
  void end_layer(Layer, bool) override {}
  Json record() const override { return Json{{"kind", "local"}}; }

 private:
  PointRunner runner_;
};

}  // namespace

void write_file_atomically(const std::filesystem::path& file, const std::string& text) {
  const std::filesystem::path partial = file.string() + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) {
      throw Error(ErrorCode::kInput, "cannot write " + partial.string(),
                  "the executor's directory must be writable (and shared with the nodes)");
    }
  }
  std::filesystem::rename(partial, file);
}

ExecutorSpec read_executor_spec(const config::TomlReader& reader, const toml::table& table) {
  const std::string path = "executor";
  reader.allow_keys(table, path,
                    {"kind", "partition", "account", "time", "gres", "max_parallel", "retries",
                     "poll_s", "shared_dir", "resources", "exclusive_timing", "check_workers"});
  ExecutorSpec spec;
  if (auto kind = reader.optional_string(table, "kind", path)) {
    if (*kind != "local" && *kind != "slurm") {
      reader.fail(*table.get("kind"), "executor.kind",
                  "expected \"local\" or \"slurm\", found \"" + *kind + "\"");
    }
    spec.kind = *kind;
  }
  spec.partition = reader.optional_string(table, "partition", path).value_or("");
  spec.account = reader.optional_string(table, "account", path).value_or("");
  spec.time_limit = reader.optional_string(table, "time", path).value_or("");
  spec.gres = reader.optional_string(table, "gres", path).value_or("");
  if (const toml::node* node = table.get("max_parallel")) {
    spec.max_parallel = reader.integer_of(*node, "executor.max_parallel");
    if (spec.max_parallel < 0 || spec.max_parallel > 100000) {
      reader.fail(*node, "executor.max_parallel",
                  "expected 0 (no throttle) to 100000, found " + std::to_string(spec.max_parallel));
    }
  }
  if (const toml::node* node = table.get("retries")) {
    spec.retries = reader.integer_of(*node, "executor.retries");
    if (spec.retries < 0 || spec.retries > 20) {
      reader.fail(*node, "executor.retries",
                  "expected 0 to 20 resubmissions, found " + std::to_string(spec.retries));
    }
  }
  if (const toml::node* node = table.get("poll_s")) {
    spec.poll_s = reader.number_of(*node, "executor.poll_s");
    if (!(spec.poll_s >= 0.05 && spec.poll_s <= 60)) {
      reader.fail(*node, "executor.poll_s", "expected 0.05 to 60 seconds");
    }
  }
  if (auto dir = reader.optional_string(table, "shared_dir", path)) spec.shared_dir = *dir;
  if (const toml::node* node = table.get("check_workers")) {
    spec.check_workers = reader.integer_of(*node, "executor.check_workers");
    if (spec.check_workers < 1 || spec.check_workers > kMaxCheckWorkers) {
      reader.fail(*node, "executor.check_workers",
                  "expected 1 (one check point after another) to " +
                      std::to_string(kMaxCheckWorkers) + ", found " +
                      std::to_string(spec.check_workers));
    }
  }
  if (const toml::node* node = table.get("exclusive_timing")) {
    const auto value = node->value<bool>();
    if (!value) reader.expected(*node, "executor.exclusive_timing", "true or false");
    spec.exclusive_timing = *value;
  }
  if (const toml::node* resources = table.get("resources")) {
    for (const auto& [entry, node] :
         config::TomlReader::ordered(reader.table_of(*resources, "executor.resources"))) {
      const std::string key = "executor.resources." + entry;
      const toml::table& rule = reader.table_of(*node, key);
      reader.allow_keys(rule, key, {"gres", "cpus_per_task", "ntasks"});
      PointResources wanted;
      wanted.entry = entry;
      wanted.line = config::TomlReader::line_of(*node);
      wanted.gres = reader.optional_string(rule, "gres", key).value_or("");
      for (auto [name, field] : {std::pair{"cpus_per_task", &wanted.cpus_per_task},
                                 std::pair{"ntasks", &wanted.ntasks}}) {
        if (const toml::node* value = rule.get(name)) {
          *field = reader.integer_of(*value, key + "." + name);
          if (*field < 1 || *field > 4096) {
            reader.fail(*value, key + "." + name,
                        "expected 1 to 4096, found " + std::to_string(*field));
          }
        }
      }
      spec.resources.push_back(std::move(wanted));
    }
  }
  return spec;
}

void apply_executor_setting(ExecutorSpec& spec, const std::string& key, const std::string& value) {
  auto integer = [&](int64_t low, int64_t high) {
    size_t used = 0;
    int64_t number = 0;
    try {
      number = std::stoll(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != value.size() || value.empty() || number < low || number > high) {
      std::string flag = key;  // the command line's spelling: --max-parallel, --check-workers
      std::replace(flag.begin(), flag.end(), '_', '-');
      throw Error(ErrorCode::kUsage, "--" + flag + " '" + value + "': expected an integer from " +
                                         std::to_string(low) + " to " + std::to_string(high));
    }
    return number;
  };
  if (key == "kind") {
    if (value != "local" && value != "slurm") {
      throw Error(ErrorCode::kUsage, "--executor '" + value + "': expected local or slurm");
    }
    spec.kind = value;
  } else if (key == "partition") {
    spec.partition = value;
  } else if (key == "account") {
    spec.account = value;
  } else if (key == "time") {
    spec.time_limit = value;
  } else if (key == "gres") {
    spec.gres = value;
  } else if (key == "max_parallel") {
    spec.max_parallel = integer(0, 100000);
  } else if (key == "retries") {
    spec.retries = integer(0, 20);
  } else if (key == "shared_dir") {
    spec.shared_dir = value;
  } else if (key == "check_workers") {
    spec.check_workers = integer(1, kMaxCheckWorkers);
  } else {
    throw Error(ErrorCode::kInternal, "unknown executor setting '" + key + "'");
  }
}

int64_t default_check_workers() {
  int64_t threads = 0;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) == 0) threads = CPU_COUNT(&allowed);
  if (threads <= 0) threads = static_cast<int64_t>(std::thread::hardware_concurrency());
  return std::clamp<int64_t>(threads, 1, 2);
}

int64_t check_workers_of(const ExecutorSpec& spec) {
  if (spec.kind != "local") return 1;
  return spec.check_workers > 0 ? spec.check_workers : default_check_workers();
}

std::unique_ptr<Executor> make_executor(const ExecutorSpec& spec, const ExecutorContext& context) {
  if (spec.kind == "local") return std::make_unique<LocalExecutor>(context);
  if (spec.kind == "slurm") return make_slurm_executor(spec, context);
  throw Error(ErrorCode::kUsage, "unknown executor '" + spec.kind + "'",
              "use --executor local (the default) or --executor slurm");
}

void attach_executor(Executor& executor, CascadeOptions& options) {
  options.layer_begin = [&executor](Layer layer, const std::vector<PointRef>& points) {
    executor.begin_layer(layer, points);
  };
  options.layer_end = [&executor](Layer layer, bool stopped) {
    executor.end_layer(layer, stopped);
  };
}

PointRunner executor_runner(Executor& executor) {
  return [&executor](const PlanTask& task, const ProbeEntry& entry, int64_t repeat) {
    return executor.run(PointRef{&task, &entry, repeat});
  };
}

int run_executor_task(const std::filesystem::path& dir, int64_t index) {
  const std::filesystem::path spec_file = dir / "points.json";
  Json points;
  try {
    std::ifstream in(spec_file, std::ios::binary);
    if (!in) throw Error(ErrorCode::kInput, "cannot read " + spec_file.string());
    points = Json::parse(in);
  } catch (const Json::exception& error) {
    throw Error(ErrorCode::kInput,
                spec_file.string() + ": not an executor spec (" + std::string(error.what()) + ")");
  }
  if (!points.is_array() || index < 0 || index >= static_cast<int64_t>(points.size())) {
    throw Error(ErrorCode::kUsage, spec_file.string() + " has no point " + std::to_string(index),
                "the index is the array task id (0 to the number of points - 1)");
  }
  const Json& point = points[static_cast<size_t>(index)];
  probe::RunRequest request;
  request.probe = point.at("probe").get<std::string>();
  request.sets = point.at("sets").get<std::vector<std::string>>();
  if (point.contains("seed")) request.seed = point["seed"].get<uint64_t>();
  request.timeout_s = point.at("timeout_s").get<double>();
  request.memory_limit_bytes = point.at("memory_limit_bytes").get<uint64_t>();
  request.home = point.at("home").get<std::string>();
  request.run_id = point.at("staging_id").get<std::string>();
  request.subject_command = point.at("subject").get<std::vector<std::string>>();
  request.pass_env = point.value("pass_env", std::vector<std::string>{});
  request.launch = point.value("launch", std::vector<std::string>{});
  // As the cascade decided for the point (point_run_request); a spec without it gets the door's
  // defaults (sandboxed, with a hidden run).
  request.sandbox = point.value("sandbox", true);
  request.add_hidden_point = point.value("add_hidden_point", true);
  request.hidden_elsewhere = point.value("hidden_elsewhere", std::string());
  if (point.contains("hidden_secret"))
    request.hidden_secret = point["hidden_secret"].get<uint64_t>();
  if (point.contains("layer")) request.layer = parse_layer(point["layer"].get<std::string>());
  request.analyze.tolerances = point.at("tolerances").get<std::vector<std::string>>();
  if (point.contains("rules")) request.analyze.rules = probe::rules_from_json(point["rules"]);
  request.analyze.threshold = point.at("threshold").get<double>();
  if (point.contains("budget_s")) request.budget_s = point["budget_s"].get<double>();
  if (point.contains("precision")) request.precision = point["precision"].get<double>();
  if (point.contains("round")) request.round = point["round"].get<int64_t>();
  request.variants = point.value("variants", std::vector<std::string>{});
  if (point.contains("counters")) {
    request.counters = probe::CountersAttachment{point["counters"].at("kernel").get<std::string>(),
                                                 point["counters"].at("launches").get<int64_t>()};
  }

  const auto start = std::chrono::steady_clock::now();
  Json result = Json::object();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  result["host"] = std::string(host);
  try {
    // The one door, as a local point runs (probe/runner.hpp).
    probe::RunOutcome outcome = probe::fold_point(probe::run_point(request));
    result["ok"] = true;
    result["observation_dir"] = outcome.observation_dir.string();
    Json added = Json::array();
    for (size_t index = outcome.analysed_findings; index < outcome.findings.size(); ++index) {
      added.push_back(finding_to_json(outcome.findings[index]));
    }
    result["added_findings"] = std::move(added);
    result["verdict"] = std::string(verdict_name(outcome.verdict));
    result["exit_code"] = outcome.exit_code;
    for (const char* key : {"hidden_runs", "hidden_observation_dir", "sandbox", "sealed"}) {
      if (outcome.data.contains(key)) result[key] = outcome.data[key];
    }
  } catch (const probe::SubjectFailure& failure) {
    result["ok"] = false;
    result["error"] = {{"code", std::string(error_code_name(failure.code()))},
                       {"message", failure.message()},
                       {"hint", failure.hint()}};
    result["finding"] = finding_to_json(failure.finding());
  } catch (const Error& error) {
    result["ok"] = false;
    result["error"] = {{"code", std::string(error_code_name(error.code()))},
                       {"message", error.message()},
                       {"hint", error.hint()}};
  }
  result["wall_s"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  write_file_atomically(dir / ("result-" + std::to_string(index) + ".json"), result.dump());
  return 0;
}

}  // namespace loupe::gate
