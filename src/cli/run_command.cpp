// `loupe run OBJECTIVE [--config NAME|k=v,...] [--only LAYER] [--all] [--set k=v] [--home DIR]
// [--ledger FILE] [--json]`: the objective's cascade (src/gate/cascade.hpp), recorded in the
// ledger, reported as a gate table and the top findings.
// Exit: 0 every gate passed, 1 a gate failed, is inconclusive or was not run, 2 bad usage or
// configuration, 3 the subject failed, 130 interrupted (SIGINT/SIGTERM: the subject's process
// group is killed and the run is recorded as interrupted).
#include <pthread.h>
#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include "check/compare.hpp"
#include "cli/commands.hpp"
#include "core/home.hpp"
#include "core/json.hpp"
#include "gate/cascade.hpp"
#include "ledger/ledger.hpp"
#include "ledger/provenance.hpp"

namespace loupe::cli {
namespace {

constexpr int kInterruptedExit = 130;
constexpr size_t kTopFindings = 8;
constexpr size_t kJsonFindings = 20;

struct RunOptions {
  std::string objective;
  std::string config;
  std::string only;
  bool all = false;
  std::vector<std::string> sets;
  std::string home;
  std::string ledger;
  bool json = false;
};

// Ctrl-C while a subject runs: the subject lives in its own session (core/process), so the
// terminal's SIGINT reaches loupe alone. A thread waits for SIGINT/SIGTERM, marks the run
// interrupted and sends SIGTERM to the process group of each child of loupe; run_process then
// sees its child die and the cascade stops.
class InterruptWatcher {
 public:
  InterruptWatcher() {
    sigset_t signals;
    sigemptyset(&signals);
    for (int signal_number : {SIGINT, SIGTERM, SIGUSR2}) sigaddset(&signals, signal_number);
    pthread_sigmask(SIG_BLOCK, &signals, &previous_);
    thread_ = std::thread([this, signals] {
      while (true) {
        int signal_number = 0;
        if (sigwait(&signals, &signal_number) != 0) continue;
        if (signal_number == SIGUSR2 && stopping_.load()) return;
        if (signal_number == SIGUSR2) continue;
        interrupted_.store(true);
        kill_child_groups();
      }
    });
  }
  ~InterruptWatcher() {
    stopping_.store(true);
    pthread_kill(thread_.native_handle(), SIGUSR2);
    thread_.join();
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  const std::atomic<bool>& interrupted() const { return interrupted_; }

 private:
  static void kill_child_groups() {
    const pid_t self = ::getpid();
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
      const std::string name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
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

  sigset_t previous_{};
  std::thread thread_;
  std::atomic<bool> interrupted_{false};
  std::atomic<bool> stopping_{false};
};

// What a ledger entry needs to say where the numbers came from, on loupe's side.
Json environment_fingerprint(const gate::Objective& objective) {
  Json out = Json::object();
  struct utsname name {};
  if (::uname(&name) == 0) {
    out["host"] = name.nodename;
    out["os"] = std::string(name.sysname) + " " + name.release;
    out["machine"] = name.machine;
  }
  out["cpus"] = std::thread::hardware_concurrency();
  Json command = Json::array();
  for (const auto& arg : gate::subject_command(objective.subject)) command.push_back(arg);
  out["subject_command"] = std::move(command);
  out["loupe"] = "0.1.0";
  return out;
}

std::string fixed_width(std::string text, size_t width) {
  if (text.size() > width) return text.substr(0, width - 1) + "~";
  text.resize(width, ' ');
  return text;
}

std::string verdict_word(GateVerdict verdict) {
  std::string word(gate_verdict_name(verdict));
  for (auto& c : word) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return word;
}

void print_report(const gate::Objective& objective, const gate::Plan& plan,
                  const gate::CascadeResult& result, const std::string& run_id,
                  const std::filesystem::path& ledger_file, ledger::RunStatus status) {
  std::ostream& out = std::cout;
  out << "loupe run " << (objective.name.empty() ? objective.file.string() : objective.name) << " ("
      << objective.file.string() << "), configuration "
      << (plan.configuration.name.empty() ? std::string("(ad hoc)") : plan.configuration.name);
  for (const auto& setting : plan.configuration.settings) {
    out << " " << setting.key << "=" << value_to_string(setting.value);
  }
  out << "\nrun " << run_id << ": " << result.points.size() << " point(s) in "
      << check::format_number(result.wall_s) << " s, " << ledger::run_status_name(status) << "\n\n";
  out << fixed_width("gate", 32) << fixed_width("layer", 10) << fixed_width("verdict", 14)
      << "key statistic\n";
  for (const auto& gate : result.gates) {
    out << fixed_width(gate.name, 32) << fixed_width(std::string(layer_name(gate.layer)), 10)
        << fixed_width(verdict_word(gate.verdict), 14) << gate::key_statistic(gate) << "\n"
        << "    " << gate.rule << "\n";
  }
  bool truncated = false;
  const auto findings = gate::top_findings(result, kTopFindings, &truncated);
  if (!findings.empty()) out << "\ntop findings\n";
  std::string previous_reproduce;
  for (const auto& finding : findings) {
    out << "  " << severity_name(finding.severity) << " " << finding.id << ": " << finding.claim
        << "\n";
    if (finding.reproduce.empty()) continue;
    // Findings of one point or one trace diff share their command: say it once.
    out << "    reproduce: "
        << (finding.reproduce == previous_reproduce ? "(as above)" : finding.reproduce) << "\n";
    previous_reproduce = finding.reproduce;
  }
  if (truncated) {
    out << "  (more findings: `loupe run ... --json` lists " << kJsonFindings
        << ", `loupe ledger show " << run_id << "` all)\n";
  }
  if (result.error) out << "\nsubject failure: " << result.error->message() << "\n";
  out << "\nrecorded in " << ledger_file.string() << " (loupe ledger show " << run_id << ")\n";
}

void add_run_command(CLI::App& app, CommandResult& result) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand(
      "run",
      "Run an objective's cascade (checks, benches, scenarios), decide its gates, record it");
  run->add_option("OBJECTIVE", options->objective, "the objective file (TOML)")->required();
  run->add_option("--config", options->config,
                  "a [[deployment]] name, KEY=VALUE settings (comma-separated), or NAME,KEY=VALUE");
  run->add_option("--only", options->only,
                  "run one layer only; the other layers' gates are not-run")
      ->check(CLI::IsMember({"check", "bench", "scenario"}));
  run->add_flag("--all", options->all, "run every layer even after one fails");
  run->add_option("--set", options->sets,
                  "NAME=VALUE: override a probe parameter in every task that has it (repeatable)");
  run->add_option("--home", options->home, "where runs and the ledger live (default .loupe/)");
  run->add_option("--ledger", options->ledger, "the ledger file (default HOME/ledger.sqlite)");
  run->add_flag("--json", options->json, "print one JSON envelope");
  run->callback([options, &result] {
    result.kind = "run";
    const gate::Objective objective = gate::parse_objective_file(options->objective);
    gate::Plan plan =
        gate::make_plan(objective, gate::resolve_configuration(objective, options->config));
    gate::apply_overrides(plan, options->sets);

    const std::filesystem::path cwd = std::filesystem::current_path();
    const std::filesystem::path home = std::filesystem::absolute(resolve_home(
        options->home.empty() ? std::nullopt : std::optional<std::filesystem::path>(options->home),
        cwd));
    const std::filesystem::path ledger_file =
        options->ledger.empty() ? home / "ledger.sqlite" : std::filesystem::path(options->ledger);
    const std::string run_id = new_run_id();

    const Json config = gate::configuration_to_json(plan.configuration);
    Json config_record = config;
    if (!options->sets.empty()) config_record["sets"] = options->sets;
    if (!options->only.empty()) config_record["only"] = options->only;
    config_record["all"] = options->all || objective.cascade == gate::CascadeMode::kAll;

    ledger::Ledger ledger = ledger::Ledger::open(ledger_file);
    ledger::RunStart start;
    start.id = run_id;
    start.started_at = ledger::utc_now();
    start.objective_path = std::filesystem::absolute(objective.file).lexically_normal().string();
    start.objective_hash = ledger::file_sha256(objective.file);
    start.git = ledger::read_git_state(cwd);
    start.environment_json = environment_fingerprint(objective).dump();
    start.config_json = config_record.dump();
    ledger.begin_run(start);

    gate::CascadeOptions cascade_options;
    cascade_options.all = options->all;
    if (!options->only.empty()) cascade_options.only = parse_layer(options->only);
    cascade_options.progress = [](const gate::Progress& progress) {
      const gate::PointResult& point = *progress.point;
      char line[512];
      std::snprintf(line, sizeof(line),
                    "[%zu/%zu] %-8s %s %s%s: %s in %.2f s; elapsed %.1f s, ~%.1f s left\n",
                    progress.index, progress.total, std::string(layer_name(point.layer)).c_str(),
                    point.entry.c_str(), params_to_string(point.params).c_str(),
                    point.repeat > 0 ? (" repeat " + std::to_string(point.repeat + 1)).c_str() : "",
                    std::string(verdict_name(point.verdict)).c_str(), point.wall_s,
                    progress.elapsed_s, progress.remaining_s);
      std::cerr << line << std::flush;
    };

    gate::CascadeResult outcome;
    {
      InterruptWatcher watcher;
      cascade_options.interrupted = &watcher.interrupted();
      try {
        outcome = gate::run_cascade(objective, plan, cascade_options,
                                    gate::subject_point_runner(objective, home, run_id));
      } catch (const Error& error) {
        ledger.finish_run(run_id, ledger::RunStatus::kFailed, ledger::utc_now(), {}, {}, {});
        throw;
      }
      if (watcher.interrupted().load()) outcome.interrupted = true;
    }

    ledger::RunStatus status = ledger::RunStatus::kCompleted;
    if (outcome.interrupted) {
      status = ledger::RunStatus::kInterrupted;
    } else if (outcome.error) {
      status = ledger::RunStatus::kFailed;
    }
    std::vector<ledger::GateRecord> records;
    std::vector<Finding> findings;
    auto add_finding = [&findings](const Finding& finding) {
      if (std::find(findings.begin(), findings.end(), finding) == findings.end()) {
        findings.push_back(finding);
      }
    };
    for (const auto& gate : outcome.gates) {
      records.push_back({gate.name, gate.verdict,
                         gate::gate_statistics_to_json(gate.statistics).dump(), gate.rule});
      for (const auto& finding : gate.findings) add_finding(finding);
    }
    std::vector<std::string> observations;
    for (const auto& point : outcome.points) {
      for (const auto& finding : point.findings) add_finding(finding);
      observations.push_back(point.observation_dir);
    }
    ledger.finish_run(run_id, status, ledger::utc_now(), records, findings, observations);

    int exit = gate::cascade_exit_code(outcome);
    Verdict verdict = gate::cascade_verdict(outcome);
    if (outcome.error) {
      exit = loupe::exit_code(outcome.error->code());
      verdict = Verdict::kError;
    }
    if (outcome.interrupted) exit = kInterruptedExit;

    if (options->json) {
      Envelope envelope;
      envelope.kind = "run";
      envelope.verdict = verdict;
      envelope.findings = gate::top_findings(outcome, kJsonFindings, &envelope.truncated);
      envelope.error = outcome.error;
      if (outcome.interrupted && !outcome.error) {
        envelope.error = Error(ErrorCode::kSubject, "the run was interrupted",
                               "run it again; the interrupted run stays in the ledger");
      }
      Json data = Json::object();
      data["run"] = run_id;
      data["objective"] = start.objective_path;
      data["status"] = std::string(ledger::run_status_name(status));
      data["config"] = config;
      data["home"] = home.string();
      data["ledger"] = ledger_file.string();
      data["wall_s"] = number_to_json(outcome.wall_s);
      Json layers = Json::array();
      for (const auto& layer : outcome.layers) {
        layers.push_back({{"layer", std::string(layer_name(layer.layer))},
                          {"status", std::string(gate::layer_status_name(layer.status))},
                          {"points", layer.points}});
      }
      data["layers"] = std::move(layers);
      Json gates = Json::array();
      for (const auto& gate : outcome.gates) gates.push_back(gate::gate_result_to_json(gate));
      data["gates"] = std::move(gates);
      Json tasks = Json::array();
      for (const auto& point : outcome.points) tasks.push_back(gate::point_result_to_json(point));
      data["tasks"] = std::move(tasks);
      envelope.data = std::move(data);
      std::cout << render_envelope(envelope) << "\n";
    } else {
      print_report(objective, plan, outcome, run_id, ledger_file, status);
    }
    result.exit_code = exit;
  });
}

}  // namespace

LOUPE_REGISTER_COMMAND(55, add_run_command);

}  // namespace loupe::cli
