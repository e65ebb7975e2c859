// The Slurm executor: each cascade layer's points become one job array (`sbatch --array`), each
// array task runs `loupe executor-task DIR INDEX` on a node, which runs the point's subject
// through probe::run_probe and writes its observation into the run directory (a filesystem every
// node sees) and a result file. This process waits for each point in the cascade's order and
// analyses it exactly as the local executor does.
//
// A task that ends without a result file (node failure, preemption, its time limit, scancel of
// that task) is lost for the node's sake: it is resubmitted, up to ExecutorSpec::retries times,
// and every resubmission is recorded. A task whose subject crashes writes a result saying so:
// that is the subject's failure, reported as it is locally, never retried. When the cascade stops
// a layer early (a failing gate with cascade = "stop", a subject failure, Ctrl-C or an MCP
// cancel), what is left of the layer's arrays is cancelled with scancel; later layers are never
// submitted. Without accounting (sacct), a task's fate is read from squeue while the controller
// still lists it and from the result file after.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "core/home.hpp"
#include "core/json.hpp"
#include "core/process.hpp"
#include "gate/executor.hpp"

namespace loupe::gate {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

Json request_to_task_json(const probe::RunRequest& request) {
  Json point = Json::object();
  point["probe"] = request.probe;
  point["sets"] = request.sets;
  if (request.seed) point["seed"] = *request.seed;
  point["timeout_s"] = request.timeout_s;
  point["memory_limit_bytes"] = request.memory_limit_bytes;
  point["home"] = request.home.value_or(std::filesystem::path{}).string();
  point["staging_id"] = request.run_id;
  point["subject"] = request.subject_command;
  point["pass_env"] = request.pass_env;
  if (!request.launch.empty()) point["launch"] = request.launch;
  point["sandbox"] = request.sandbox;
  point["add_hidden_point"] = request.add_hidden_point;
  if (!request.hidden_elsewhere.empty()) point["hidden_elsewhere"] = request.hidden_elsewhere;
  // In the layer's spec folder, under loupe's home by default, which the sandbox hides.
  if (request.hidden_secret) point["hidden_secret"] = *request.hidden_secret;
  if (request.layer) point["layer"] = std::string(layer_name(*request.layer));
  point["tolerances"] = request.analyze.tolerances;
  if (request.analyze.rules) point["rules"] = probe::rules_to_json(*request.analyze.rules);
  point["threshold"] = request.analyze.threshold;
  if (request.budget_s) point["budget_s"] = *request.budget_s;
  if (request.precision) point["precision"] = *request.precision;
  if (request.round) point["round"] = *request.round;
  if (!request.variants.empty()) point["variants"] = request.variants;
  if (request.counters) {
    point["counters"] = {{"kernel", request.counters->kernel_regex},
                         {"launches", request.counters->launches}};
  }
  return point;
}

ErrorCode error_code_from_name(const std::string& name) {
  for (ErrorCode code : {ErrorCode::kUsage, ErrorCode::kConfig, ErrorCode::kInput,
                         ErrorCode::kSubject, ErrorCode::kInternal}) {
    if (error_code_name(code) == name) return code;
  }
  return ErrorCode::kSubject;
}

// A state in which a task still has a chance to write its result.
bool state_is_live(const std::string& state) {
  return state == "PENDING" || state == "RUNNING" || state == "CONFIGURING" ||
         state == "COMPLETING" || state == "REQUEUED" || state == "RESIZING" ||
         state == "SUSPENDED" || state == "STAGE_OUT" || state == "SIGNALING";
}

class SlurmExecutor final : public Executor {
 public:
  SlurmExecutor(ExecutorSpec spec, ExecutorContext context)
      : spec_(std::move(spec)), context_(std::move(context)) {
    base_dir_ = spec_.shared_dir.empty()
                    ? run_dir(context_.home, context_.run_id) / ".slurm"
                    : std::filesystem::absolute(spec_.shared_dir) / context_.run_id;
    std::filesystem::create_directories(base_dir_);
  }

  void begin_layer(Layer layer, const std::vector<PointRef>& points) override {
    layer_dir_ = base_dir_ / (std::string(layer_name(layer)) + "-" + std::to_string(++layers_));
    std::filesystem::create_directories(layer_dir_);
    tasks_.clear();
    Json specs = Json::array();
    for (size_t index = 0; index < points.size(); ++index) {
      const PointRef& point = points[index];
      Task task;
      task.ref = point;
      task.index = static_cast<int64_t>(index);
      // Each task stages its observation in a run of its own: tasks run at once, on any node.
      task.request = point_run_request(
          *context_.objective, context_.home,
          context_.run_id + "/.staging-" + layer_dir_.filename().string() + "-" +
              std::to_string(index),
          context_.memory_limit_bytes, *point.task, *point.entry, point.repeat, context_.run_id);
      specs.push_back(request_to_task_json(task.request));
      tasks_.push_back(std::move(task));
    }
    write_file_atomically(layer_dir_ / "points.json", specs.dump(2));
    write_file_atomically(layer_dir_ / "task.sh",
                          "#!/bin/sh\n# One point of loupe run " + context_.run_id +
                              " (gate/slurm_executor.cpp).\nexec " +
                              shell_quote(context_.loupe_executable.string()) + " executor-task " +
                              shell_quote(layer_dir_.string()) + " \"$SLURM_ARRAY_TASK_ID\"\n");
    std::filesystem::permissions(layer_dir_ / "task.sh", std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add);
    // One array per distinct resource request: most layers are one array.
    std::vector<std::pair<const PointResources*, std::vector<int64_t>>> groups;
    for (const Task& task : tasks_) {
      const PointResources* wanted = resources_of(task.ref.task->entry);
      auto group = std::find_if(groups.begin(), groups.end(),
                                [wanted](const auto& g) { return g.first == wanted; });
      if (group == groups.end()) {
        groups.push_back({wanted, {}});
        group = groups.end() - 1;
      }
      group->second.push_back(task.index);
    }
    layer_jobs_.clear();
    for (const auto& [wanted, indices] : groups) {
      const std::string job = submit(index_list(indices), layer, wanted);
      layer_jobs_.push_back(job);
      for (int64_t index : indices) tasks_[static_cast<size_t>(index)].job_id = job;
      Json record = {{"layer", std::string(layer_name(layer))},
                     {"job_id", job},
                     {"tasks", indices.size()},
                     {"cancelled", false}};
      if (wanted != nullptr) record["resources"] = wanted->entry;
      jobs_.push_back(std::move(record));
    }
  }

  PointResult run(const PointRef& point) override {
    Task* task = find(point);
    if (task == nullptr) {
      throw Error(ErrorCode::kInternal,
                  "the Slurm executor was asked for a point it never submitted");
    }
    const auto wait_start = Clock::now();
    const std::filesystem::path result_file =
        layer_dir_ / ("result-" + std::to_string(task->index) + ".json");
    int missing_polls = 0;
    while (!std::filesystem::exists(result_file)) {
      if (context_.interrupted != nullptr && context_.interrupted->load()) {
        throw Error(ErrorCode::kSubject, "the run was interrupted while Slurm ran its points");
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(spec_.poll_s));
      if (std::filesystem::exists(result_file)) break;
      const std::string state = task_state(*task);
      if (state_is_live(state)) {
        missing_polls = 0;
        continue;
      }
      // The task is over, or the controller no longer lists it, and no result: give a shared
      // filesystem a few polls to show the file before calling the task lost.
      if (++missing_polls < 4) continue;
      missing_polls = 0;
      const std::string what = state.empty() ? "gone from the queue" : state;
      if (task->attempts >= spec_.retries) {
        throw Error(ErrorCode::kSubject,
                    "Slurm task " + task->job_id + "_" + std::to_string(task->index) + " (" +
                        task->ref.task->entry + " " + params_to_string(task->ref.task->params) +
                        ") ended " + what + " without a result, " +
                        std::to_string(task->attempts + 1) + " time(s)",
                    "see " +
                        (layer_dir_ / ("task-" + std::to_string(task->index) + ".log")).string() +
                        " and the node's slurmd log; raise [executor] retries if nodes are flaky");
      }
      ++task->attempts;
      const std::string previous = task->job_id;
      task->job_id = submit(std::to_string(task->index), task->ref.task->layer,
                            resources_of(task->ref.task->entry));
      layer_jobs_.push_back(task->job_id);
      retries_.push_back(
          {{"point", task->ref.task->entry + " " + params_to_string(task->ref.task->params)},
           {"index", task->index},
           {"job_id", previous},
           {"state", what},
           {"resubmitted_as", task->job_id}});
    }
    wait_s_ += seconds_between(wait_start, Clock::now());
    Json result;
    {
      std::ifstream in(result_file, std::ios::binary);
      try {
        result = Json::parse(in);
      } catch (const Json::exception& error) {
        throw Error(ErrorCode::kInput, result_file.string() + ": unreadable task result (" +
                                           std::string(error.what()) + ")");
      }
    }
    if (!result.value("ok", false)) {
      const Json error = result.value("error", Json::object());
      Error failure(error_code_from_name(error.value("code", std::string("subject"))),
                    error.value("message", std::string("the Slurm task failed")),
                    error.value("hint", std::string()));
      if (result.contains("finding")) {
        throw probe::SubjectFailure(failure, finding_from_json(result["finding"]));
      }
      throw failure;
    }
    probe::RunOutcome outcome = probe::analyze_observation(
        result.at("observation_dir").get<std::string>(), task->request.analyze);
    // What the task's loupe decided outside the analysis (the seal, the hidden run, the guards
    // that were off) comes with its result, and so does the verdict they made.
    outcome.analysed_findings = outcome.findings.size();
    for (const auto& finding : result.value("added_findings", Json::array())) {
      outcome.findings.push_back(finding_from_json(finding));
    }
    if (result.contains("verdict")) {
      outcome.verdict = parse_verdict(result["verdict"].get<std::string>());
      outcome.exit_code = result.value("exit_code", outcome.exit_code);
    }
    for (const char* key : {"hidden_runs", "hidden_observation_dir", "sandbox", "sealed"}) {
      if (result.contains(key)) outcome.data[key] = result[key];
    }
    PointResult done =
        finish_point(task->request, context_.run_id, *task->ref.task, task->ref.repeat, outcome);
    done.wall_s = result.value("wall_s", 0.0);
    return done;
  }

  void end_layer(Layer, bool stopped) override {
    if (!stopped) return;
    // Cancel what is left: a point the cascade will not ask for must not keep a node busy.
    for (const std::string& job : layer_jobs_) {
      ProcessSpec cancel{{"scancel", job}};
      cancel.timeout = std::chrono::seconds(30);
      run_process(cancel);
    }
    for (auto& job : jobs_) {
      if (std::find(layer_jobs_.begin(), layer_jobs_.end(), job["job_id"].get<std::string>()) !=
          layer_jobs_.end()) {
        job["cancelled"] = true;
      }
    }
  }

  Json record() const override {
    Json out = Json::object();
    out["kind"] = "slurm";
    out["dir"] = base_dir_.string();
    out["jobs"] = jobs_;
    out["retries"] = retries_;
    out["submit_s"] = submit_s_;
    out["wait_s"] = wait_s_;
    if (!spec_.partition.empty()) out["partition"] = spec_.partition;
    if (!spec_.gres.empty()) out["gres"] = spec_.gres;
    return out;
  }

 private:
  struct Task {
    PointRef ref;
    int64_t index = 0;
    probe::RunRequest request;
    std::string job_id;  // the array (or resubmitted single task) that runs it now
    int64_t attempts = 0;
  };

  const PointResources* resources_of(const std::string& entry) const {
    for (const PointResources& wanted : spec_.resources) {
      if (wanted.entry == entry) return &wanted;
    }
    return nullptr;
  }

  // "0-7" for a whole layer, "0,2,5" for a group of it.
  static std::string index_list(const std::vector<int64_t>& indices) {
    bool contiguous = true;
    for (size_t i = 1; i < indices.size(); ++i)
      contiguous = contiguous && indices[i] == indices[i - 1] + 1;
    if (contiguous && indices.size() > 1) {
      return std::to_string(indices.front()) + "-" + std::to_string(indices.back());
    }
    std::string out;
    for (int64_t index : indices) out += (out.empty() ? "" : ",") + std::to_string(index);
    return out;
  }

  // A plan task and a repeat name one point. The entry is not compared: the cascade may hand
  // the point a copy of its entry carrying a baseline build's seed, decided only after the
  // layer was submitted (the submitted point then keeps its own seed).
  Task* find(const PointRef& point) {
    for (auto& task : tasks_) {
      if (task.ref.task == point.task && task.ref.repeat == point.repeat) {
        return &task;
      }
    }
    return nullptr;
  }

  // sbatch --array=RANGE; returns the job id. Throws Error(kSubject) with sbatch's message.
  std::string submit(const std::string& range, Layer layer, const PointResources* wanted) {
    std::vector<std::string> argv = {"sbatch",
                                     "--parsable",
                                     "--array=" + range,
                                     "--job-name=loupe-" + std::string(layer_name(layer)),
                                     "--output=" + (layer_dir_ / "task-%a.log").string(),
                                     "--chdir=" + std::filesystem::current_path().string()};
    if (spec_.max_parallel > 0 && range.find_first_of("-,") != std::string::npos) {
      argv[2] += "%" + std::to_string(spec_.max_parallel);
    }
    if (!spec_.partition.empty()) argv.push_back("--partition=" + spec_.partition);
    if (!spec_.account.empty()) argv.push_back("--account=" + spec_.account);
    if (!spec_.time_limit.empty()) argv.push_back("--time=" + spec_.time_limit);
    const std::string gres = wanted != nullptr && !wanted->gres.empty() ? wanted->gres : spec_.gres;
    if (!gres.empty()) argv.push_back("--gres=" + gres);
    if (wanted != nullptr && wanted->cpus_per_task > 0) {
      argv.push_back("--cpus-per-task=" + std::to_string(wanted->cpus_per_task));
    }
    if (spec_.exclusive_timing && layer != Layer::kCheck) argv.push_back("--exclusive");
    if (wanted != nullptr && wanted->ntasks > 0) {
      argv.push_back("--ntasks=" + std::to_string(wanted->ntasks));
    }
    argv.push_back((layer_dir_ / "task.sh").string());
    ProcessSpec process{argv};
    process.timeout = std::chrono::seconds(60);
    const auto start = Clock::now();
    const ProcessResult result = run_process(process);
    submit_s_ += seconds_between(start, Clock::now());
    std::string job = result.stdout_text;
    job.erase(std::remove_if(job.begin(), job.end(), [](char c) { return c == '\n' || c == '\r'; }),
              job.end());
    if (const auto semicolon = job.find(';'); semicolon != std::string::npos) job.resize(semicolon);
    if (!result.succeeded() || job.empty() ||
        !std::all_of(job.begin(), job.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      // What the preflight (check_slurm_ready) checks, gone wrong since: the same messages.
      const std::string said = result.stderr_text + result.stdout_text;
      if (said.find("Invalid partition") != std::string::npos) {
        throw Error(ErrorCode::kUsage,
                    "--executor slurm: sbatch refused the partition '" + spec_.partition +
                        "': " + result.stderr_tail(1, 300),
                    "`sinfo` lists the partitions; give one of them with --partition, or leave "
                    "it out for the cluster's default");
      }
      if (said.find("Unable to contact slurm controller") != std::string::npos) {
        throw Error(ErrorCode::kConfig,
                    "--executor slurm: the Slurm controller does not answer (sbatch: " +
                        result.stderr_tail(1, 300) + ")",
                    "start slurmctld (systemd: systemctl start slurmctld) and check that this "
                    "machine reaches it; `scontrol ping` says when it answers");
      }
      if (said.find("configuration source") != std::string::npos) {
        throw Error(
            ErrorCode::kConfig,
            "--executor slurm: sbatch found no Slurm configuration: " + result.stderr_tail(1, 300),
            "export SLURM_CONF=the path of your cluster's slurm.conf");
      }
      throw Error(ErrorCode::kSubject,
                  "sbatch could not submit the " + std::string(layer_name(layer)) +
                      " layer: " + result.describe() + ": " + result.stderr_tail(5, 600),
                  "is a cluster reachable? SLURM_CONF and `sinfo` tell; on one machine: "
                  "scripts/slurm-local up");
    }
    return job;
  }

  // The task's state as squeue reports it, or "" when the controller no longer lists it.
  std::string task_state(const Task& task) {
    ProcessSpec query{{"squeue", "--noheader", "--array", "--states=all", "--jobs=" + task.job_id,
                       "--format=%i %T"}};
    query.timeout = std::chrono::seconds(30);
    const ProcessResult result = run_process(query);
    if (!result.succeeded()) return "";
    std::istringstream lines(result.stdout_text);
    std::string id, state;
    const std::string single = task.job_id;
    const std::string element = task.job_id + "_" + std::to_string(task.index);
    while (lines >> id >> state) {
      if (id == element || id == single) return state;
      // A pending array not yet split: "123_[0-7%2]" covers every index still queued.
      if (id.rfind(task.job_id + "_[", 0) == 0) return state;
    }
    return "";
  }

  ExecutorSpec spec_;
  ExecutorContext context_;
  std::filesystem::path base_dir_;
  std::filesystem::path layer_dir_;
  int layers_ = 0;
  std::vector<Task> tasks_;
  std::vector<std::string> layer_jobs_;
  Json jobs_ = Json::array();
  Json retries_ = Json::array();
  double submit_s_ = 0;
  double wait_s_ = 0;
};

}  // namespace

namespace {

constexpr const char* kDefaultSlurmConf = "/etc/slurm/slurm.conf";
constexpr const char* kOneMachine =
    "; on one machine, scripts/slurm-local up starts a cluster and prints the export line";

// The first executable `name` in a directory of PATH, or "" when there is none.
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path == nullptr ? "" : path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::filesystem::path candidate = std::filesystem::path(dir.empty() ? "." : dir) / name;
    std::error_code error;
    if (std::filesystem::is_regular_file(candidate, error) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate.string();
    }
  }
  return "";
}

// The last non-empty line of a command's stderr (else stdout): what Slurm's tools say last is the
// reason ("sbatch: fatal: Could not establish a configuration source").
std::string last_line(const ProcessResult& result) {
  for (const std::string* text : {&result.stderr_text, &result.stdout_text}) {
    std::istringstream lines(*text);
    std::string line, last;
    while (std::getline(lines, line)) {
      if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
    }
    if (!last.empty()) return last;
  }
  return result.describe();
}

ProcessResult run_slurm_command(std::vector<std::string> argv) {
  ProcessSpec spec;
  spec.argv = std::move(argv);
  spec.timeout = std::chrono::seconds(20);
  return run_process(spec);
}

// Which configuration Slurm's commands read: SLURM_CONF when set, else the default file; ""
// when neither names a file (a configless cluster's DNS SRV record may still supply one).
// Throws Error(kConfig) when SLURM_CONF names a file that does not exist or cannot be read.
std::string slurm_configuration() {
  const char* from_environment = std::getenv("SLURM_CONF");
  const bool set = from_environment != nullptr && *from_environment != '\0';
  const std::string file = set ? from_environment : kDefaultSlurmConf;
  const std::string named = set ? "SLURM_CONF=" + file : file;
  std::error_code error;
  if (!std::filesystem::exists(file, error)) {
    if (!set) return "";
    throw Error(
        ErrorCode::kConfig,
        "--executor slurm: no Slurm configuration: " + named + " does not exist",
        "export SLURM_CONF=the path of your cluster's slurm.conf" + std::string(kOneMachine));
  }
  std::ifstream readable(file);
  if (!std::filesystem::is_regular_file(file, error) || !readable) {
    throw Error(
        ErrorCode::kConfig,
        "--executor slurm: the Slurm configuration " + named + " cannot be read (" +
            (std::filesystem::is_directory(file, error) ? "a directory" : "permission denied") +
            ")",
        "make it readable by this user (Slurm's commands read it too), or export "
        "SLURM_CONF=a readable copy of the cluster's slurm.conf");
  }
  return file;
}

}  // namespace

void check_slurm_ready(const ExecutorSpec& spec) {
  if (find_on_path("sbatch").empty()) {
    throw Error(ErrorCode::kUsage, "--executor slurm: sbatch is not on PATH",
                "install Slurm's client commands (Debian: slurm-client), or run with "
                "--executor local; scripts/slurm-local up starts a one-machine cluster");
  }
  const std::string configuration = slurm_configuration();
  // sbatch reads the configuration before anything else: this says whether it can (a file that
  // does not parse, or no file and no configless cluster), in sbatch's own words.
  const ProcessResult version = run_slurm_command({"sbatch", "--version"});
  if (!version.succeeded()) {
    if (configuration.empty()) {
      throw Error(
          ErrorCode::kConfig,
          "--executor slurm: no Slurm configuration: SLURM_CONF is not set and " +
              std::string(kDefaultSlurmConf) +
              " does not exist (`sbatch --version`: " + last_line(version) + ")",
          "export SLURM_CONF=the path of your cluster's slurm.conf" + std::string(kOneMachine));
    }
    throw Error(ErrorCode::kConfig,
                "--executor slurm: sbatch cannot use the Slurm configuration " + configuration +
                    ": " + last_line(version),
                "fix the file (or export SLURM_CONF=the cluster's slurm.conf); `sbatch --version` "
                "succeeds once Slurm can read it");
  }
  const std::string where = configuration.empty() ? "the configless cluster's" : configuration;
  // The controller: every submission, squeue and scancel goes through it.
  if (!find_on_path("scontrol").empty()) {
    const ProcessResult ping = run_slurm_command({"scontrol", "ping"});
    const bool down = ping.stdout_text.find("DOWN") != std::string::npos ||
                      ping.stdout_text.find("UP") == std::string::npos;
    if (!ping.succeeded() || down) {
      throw Error(ErrorCode::kConfig,
                  "--executor slurm: the Slurm controller does not answer (scontrol ping: " +
                      last_line(ping) + ")",
                  "start slurmctld on the host SlurmctldHost names in " + where +
                      " configuration (systemd: systemctl start slurmctld) and check that this "
                      "machine reaches it" +
                      std::string(kOneMachine));
    }
  }
  // The partition asked for, against the ones the controller knows.
  if (!spec.partition.empty() && !find_on_path("sinfo").empty()) {
    const ProcessResult listed = run_slurm_command({"sinfo", "--noheader", "--format=%R"});
    if (listed.succeeded()) {
      std::istringstream lines(listed.stdout_text);
      std::vector<std::string> partitions;
      std::string name;
      while (lines >> name) {
        if (std::find(partitions.begin(), partitions.end(), name) == partitions.end()) {
          partitions.push_back(name);
        }
      }
      if (std::find(partitions.begin(), partitions.end(), spec.partition) == partitions.end()) {
        std::string known;
        for (const auto& partition : partitions) known += (known.empty() ? "" : ", ") + partition;
        throw Error(ErrorCode::kUsage,
                    "--executor slurm: no partition '" + spec.partition + "' on this cluster (" +
                        (known.empty() ? "sinfo lists none" : "it has: " + known) + ")",
                    "give one of them with --partition (or the objective's [executor] "
                    "partition), or leave it out for the cluster's default partition");
      }
    }
  }
}

std::unique_ptr<Executor> make_slurm_executor(const ExecutorSpec& spec,
                                              const ExecutorContext& context) {
  check_slurm_ready(spec);
  return std::make_unique<SlurmExecutor>(spec, context);
}

}  // namespace loupe::gate
