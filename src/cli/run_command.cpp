// `loupe run OBJECTIVE [--config NAME|k=v,...] [--only LAYER] [--all] [--set k=v] [--home DIR]
// [--ledger FILE] [--json]`: the objective's cascade (src/gate/cascade.hpp), recorded in the
// ledger, reported as a gate table and the top findings.
// Exit: 0 every gate passed, 1 a gate failed, is inconclusive or was not run, 2 bad usage or
// configuration, 3 the subject failed, 130 interrupted (SIGINT/SIGTERM: the subject's process
// group is killed and the run is recorded as interrupted).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>

#include "check/compare.hpp"
#include "cli/commands.hpp"
#include "core/json.hpp"
#include "gate/recorded_run.hpp"

namespace loupe::cli {
namespace {

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
        gate::interrupt_subjects();
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
  sigset_t previous_{};
  std::thread thread_;
  std::atomic<bool> interrupted_{false};
  std::atomic<bool> stopping_{false};
};

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
    gate::RunRequest request;
    request.objective = options->objective;
    request.config = options->config;
    if (!options->only.empty()) request.only = parse_layer(options->only);
    request.all = options->all;
    request.sets = options->sets;
    if (!options->home.empty()) request.home = options->home;
    if (!options->ledger.empty()) request.ledger = options->ledger;

    gate::CascadeOptions cascade_options;
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

    gate::RecordedRun run;
    {
      InterruptWatcher watcher;
      cascade_options.interrupted = &watcher.interrupted();
      run = gate::run_and_record(request, cascade_options);
    }
    if (options->json) {
      std::cout << render_envelope(gate::run_envelope(run, kJsonFindings)) << "\n";
    } else {
      print_report(run.objective, run.plan, run.outcome, run.run_id, run.ledger_file, run.status);
    }
    result.exit_code = run.exit_code;
  });
}

}  // namespace

LOUPE_REGISTER_COMMAND(55, add_run_command);

}  // namespace loupe::cli
