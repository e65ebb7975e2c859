#include "gate/recorded_run.hpp"

#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/home.hpp"
#include "gate/executor.hpp"
#include "ledger/provenance.hpp"
#include "probe/runner.hpp"

namespace loupe::gate {
namespace {

// What a ledger entry needs to say where the numbers came from, on loupe's side.
Json environment_fingerprint(const Objective& objective) {
  Json out = Json::object();
  struct utsname name {};
  if (::uname(&name) == 0) {
    out["host"] = name.nodename;
    out["os"] = std::string(name.sysname) + " " + name.release;
    out["machine"] = name.machine;
  }
  out["cpus"] = std::thread::hardware_concurrency();
  Json command = Json::array();
  for (const auto& arg : subject_command(objective.subject)) command.push_back(arg);
  out["subject_command"] = std::move(command);
  out["loupe"] = "0.1.0";
  return out;
}

// The recorded run a --baseline that is not a path names.
std::string resolve_baseline_run(const ledger::Ledger& ledger, const std::string& spec,
                                 const std::string& objective_path) {
  if (spec != "latest") {
    if (ledger.find_run(spec)) return spec;
  }
  const auto runs = ledger.list_runs(500);
  for (const auto& summary : runs) {
    if (summary.status != ledger::RunStatus::kCompleted) continue;
    if (summary.objective_path != objective_path) continue;
    if (spec == "latest") return summary.id;
    if (spec.size() < 4) continue;
    const ledger::RunRecord record = ledger.get_run(summary.id);
    if (record.git.commit.rfind(spec, 0) == 0) return summary.id;
  }
  throw Error(ErrorCode::kUsage,
              "--baseline " + spec + ": no such path, run id" +
                  (spec == "latest" ? std::string() : ", or completed run at that commit") +
                  (spec == "latest" ? ": no completed run of " + objective_path + " is recorded"
                                    : " of " + objective_path),
              "give an earlier build's folder or program, a run id (loupe ledger list), "
              "'latest', or a git revision a recorded run was made at");
}

std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream stream(text);
  for (std::string word; stream >> word;) out.push_back(word);
  return out;
}

}  // namespace

void interrupt_subjects() {
  const pid_t self = ::getpid();
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text;
    std::getline(stat, text);
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(text.substr(close + 1));
    std::string state;
    long parent = 0, group = 0;
    if (!(fields >> state >> parent >> group)) continue;
    const long pid = std::stol(name);
    // A child that leads its own group is a subject started by core/process (setsid).
    if (parent == self && group == pid) ::kill(-static_cast<pid_t>(pid), SIGTERM);
  }
}

RecordedRun run_and_record(const RunRequest& request, CascadeOptions options) {
  RecordedRun run;
  run.objective = parse_objective_file(request.objective);
  run.plan = make_plan(run.objective, resolve_configuration(run.objective, request.config));
  apply_overrides(run.plan, request.sets);

  const std::filesystem::path cwd =
      request.cwd.empty() ? std::filesystem::current_path() : request.cwd;
  run.home = std::filesystem::absolute(resolve_home(request.home, cwd));
  run.ledger_file = request.ledger ? *request.ledger : run.home / "ledger.sqlite";
  run.run_id = new_run_id();

  run.config = configuration_to_json(run.plan.configuration);
  Json config_record = run.config;
  if (!request.sets.empty()) config_record["sets"] = request.sets;
  if (request.only) config_record["only"] = std::string(layer_name(*request.only));
  config_record["all"] =
      (request.all || run.objective.cascade == CascadeMode::kAll) && !request.fail_fast;
  ExecutorSpec executor_spec = run.objective.executor;
  for (const auto& [key, value] : request.executor_settings) {
    apply_executor_setting(executor_spec, key, value);
  }
  if (executor_spec.kind != "local") config_record["executor"] = Json{{"kind", executor_spec.kind}};

  ledger::Ledger ledger = ledger::Ledger::open(run.ledger_file);
  const std::string objective_path =
      std::filesystem::absolute(run.objective.file).lexically_normal().string();
  if (!request.baseline_subject.empty()) {
    const auto command = split_words(request.baseline_subject);
    options.baseline = build_baseline(run.objective, run.home, run.run_id, command,
                                      "subject " + request.baseline_subject,
                                      request.memory_limit_bytes, request.baseline_cache);
  } else if (!request.baseline.empty()) {
    const std::filesystem::path path(request.baseline);
    if (std::filesystem::exists(path)) {
      std::vector<std::string> command = run.objective.subject.command;
      command.at(0) = baseline_program(run.objective, path).string();
      options.baseline =
          build_baseline(run.objective, run.home, run.run_id, command, "build " + command[0],
                         request.memory_limit_bytes, request.baseline_cache);
    } else {
      const std::string baseline_run =
          resolve_baseline_run(ledger, request.baseline, objective_path);
      options.baseline = recorded_baseline(run.home, baseline_run);
    }
  }
  if (options.baseline && executor_spec.kind != "local") {
    // A batch executor runs each point once, where it likes: no back-to-back rounds.
    options.baseline->min_rounds = options.baseline->max_rounds = 0;
  }
  if (options.baseline) config_record["baseline"] = options.baseline->label;
  ledger::RunStart start;
  start.id = run.run_id;
  start.started_at = ledger::utc_now();
  start.objective_path = objective_path;
  start.objective_hash = ledger::file_sha256(run.objective.file);
  start.git = ledger::read_git_state(cwd);
  start.environment_json = environment_fingerprint(run.objective).dump();
  start.config_json = config_record.dump();
  ledger.begin_run(start);
  run.objective_path = start.objective_path;

  options.all = (options.all || request.all) && !request.fail_fast;
  options.only = request.only;
  if (request.fail_fast) run.objective.cascade = CascadeMode::kStopAtFirstFailure;

  // Coverage: which probes of the subject no gate covers (one `list --json` of the subject).
  try {
    const Json list =
        probe::list_probes(subject_command(run.objective.subject), run.objective.subject.timeout_s,
                           request.memory_limit_bytes);
    run.coverage = probe_coverage(run.objective, list);
    run.coverage_findings = coverage_findings(run.objective, run.coverage);
  } catch (const Error& error) {
    run.coverage_problem = error.message();
  }

  ExecutorContext context;
  context.objective = &run.objective;
  context.home = run.home;
  context.run_id = run.run_id;
  context.memory_limit_bytes = request.memory_limit_bytes;
  context.interrupted = options.interrupted;
  // A batch executor's tasks run this very `loupe` unless told otherwise.
  context.loupe_executable = request.loupe_executable.empty()
                                 ? std::filesystem::read_symlink("/proc/self/exe")
                                 : request.loupe_executable;
  std::unique_ptr<Executor> executor;
  try {
    executor = make_executor(executor_spec, context);
    attach_executor(*executor, options);
    options.check_workers = check_workers_of(executor_spec);
    run.outcome = run_cascade(run.objective, run.plan, options, executor_runner(*executor));
    // Each bench comparison a gate reads, stated the gate's way round before anything records it.
    orient_to_gates(run.objective, run.plan, run.outcome.points, run.outcome.gates);
    orient_to_gates(run.objective, run.plan, run.outcome.baseline_points, run.outcome.gates);
  } catch (const Error&) {
    ledger.finish_run(run.run_id, ledger::RunStatus::kFailed, ledger::utc_now(), {}, {}, {});
    throw;
  }
  run.executor = executor->record();
  std::optional<std::string> final_config;
  if (executor_spec.kind != "local") {
    config_record["executor"] = run.executor;
    final_config = config_record.dump();
  }
  if (options.interrupted != nullptr && options.interrupted->load()) {
    run.outcome.interrupted = true;
  }

  run.status = ledger::RunStatus::kCompleted;
  if (run.outcome.interrupted) {
    run.status = ledger::RunStatus::kInterrupted;
  } else if (run.outcome.error) {
    run.status = ledger::RunStatus::kFailed;
  }
  std::vector<ledger::GateRecord> records;
  std::vector<Finding> findings;
  auto add_finding = [&findings](const Finding& finding) {
    if (std::find(findings.begin(), findings.end(), finding) == findings.end()) {
      findings.push_back(finding);
    }
  };
  for (const auto& gate : run.outcome.gates) {
    records.push_back(
        {gate.name, gate.verdict, gate_statistics_to_json(gate.statistics).dump(), gate.rule});
  }
  // The gates' explanations first, taken in turn (the first of each gate, then the second, ...),
  // as top_findings takes them: a report that shows the first few shows every gate's lead finding.
  for (size_t rank = 0;; ++rank) {
    bool more = false;
    for (const auto& gate : run.outcome.gates) {
      if (rank >= gate.findings.size()) continue;
      more = true;
      add_finding(gate.findings[rank]);
    }
    if (!more) break;
  }
  std::vector<std::string> observations;
  for (const auto& point : run.outcome.points) {
    for (const auto& finding : point.findings) add_finding(finding);
    observations.push_back(point.observation_dir);
  }
  for (const auto& point : run.outcome.baseline_points) {
    if (!point.observation_dir.empty()) observations.push_back(point.observation_dir);
  }
  for (const auto& finding : run.coverage_findings) add_finding(finding);
  ledger.finish_run(run.run_id, run.status, ledger::utc_now(), records, findings, observations,
                    final_config);

  run.exit_code = cascade_exit_code(run.outcome);
  run.verdict = cascade_verdict(run.outcome);
  if (run.outcome.error) {
    run.exit_code = loupe::exit_code(run.outcome.error->code());
    run.verdict = Verdict::kError;
  }
  if (run.outcome.interrupted) run.exit_code = kInterruptedExitCode;
  return run;
}

std::vector<std::string> failed_guard_ids(const CascadeResult& result) {
  std::vector<std::string> ids;
  for (const Finding* guard : failed_guards(result)) {
    if (std::find(ids.begin(), ids.end(), guard->id) == ids.end()) ids.push_back(guard->id);
  }
  return ids;
}

// Entries named in data.baseline_skipped: an objective has few; the bound keeps the envelope small.
constexpr size_t kSkippedEntriesListed = 64;

Envelope run_envelope(const RecordedRun& run, size_t findings_limit) {
  Envelope envelope;
  envelope.kind = "run";
  envelope.verdict = run.verdict;
  envelope.findings = top_findings(run.outcome, findings_limit, &envelope.truncated);
  envelope.error = run.outcome.error;
  if (run.outcome.interrupted && !run.outcome.error) {
    envelope.error = Error(ErrorCode::kSubject, "the run was interrupted",
                           "run it again; the interrupted run stays in the ledger");
  }
  Json data = Json::object();
  data["run"] = run.run_id;
  data["objective"] = run.objective_path;
  data["status"] = std::string(ledger::run_status_name(run.status));
  data["config"] = run.config;
  data["executor"] = run.executor;
  data["home"] = run.home.string();
  data["ledger"] = run.ledger_file.string();
  data["wall_s"] = number_to_json(run.outcome.wall_s);
  data["baseline"] =
      run.outcome.baseline_label.empty() ? Json(nullptr) : Json(run.outcome.baseline_label);
  // The runs the baseline side left out because no gate reads them (null without a baseline).
  data["baseline_skipped"] = run.outcome.baseline_label.empty()
                                 ? Json(nullptr)
                                 : baseline_skips_to_json(run.outcome, kSkippedEntriesListed);
  // The baseline build's check runs taken from the baseline cache, and from which runs (null
  // without a baseline build).
  data["baseline_cache"] = baseline_cache_to_json(run.outcome, kSkippedEntriesListed);
  Json coverage = Json::array();
  for (const auto& row : run.coverage) {
    coverage.push_back({{"probe", row.probe},
                        {"kind", row.kind},
                        {"gates", row.gates},
                        {"ungated_reason", row.ungated_reason}});
  }
  data["coverage"] = std::move(coverage);
  for (const auto& finding : run.coverage_findings) {
    if (finding.severity == Severity::kInfo) continue;
    if (envelope.findings.size() >= findings_limit) {
      envelope.truncated = true;
      break;
    }
    envelope.findings.push_back(finding);
  }
  Json layers = Json::array();
  for (const auto& layer : run.outcome.layers) {
    layers.push_back({{"layer", std::string(layer_name(layer.layer))},
                      {"status", std::string(layer_status_name(layer.status))},
                      {"points", layer.points}});
  }
  data["layers"] = std::move(layers);
  // The failing gates most specific first, and how the others follow (gate/causes.hpp).
  data["causes"] = cause_report_to_json(run.outcome.causes, run.objective);
  // The guards that failed the run whatever its gates say (cascade_verdict), each id once.
  data["failed_guards"] = failed_guard_ids(run.outcome);
  Json gates = Json::array();
  for (const auto& gate : run.outcome.gates) gates.push_back(gate_result_to_json(gate));
  data["gates"] = std::move(gates);
  Json tasks = Json::array();
  for (const auto& point : run.outcome.points) tasks.push_back(point_result_to_json(point));
  data["tasks"] = std::move(tasks);
  envelope.data = std::move(data);
  return envelope;
}

}  // namespace loupe::gate
