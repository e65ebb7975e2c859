// `loupe run OBJECTIVE [--config NAME|k=v,...] [--only LAYER] [--all] [--set k=v] [--home DIR]
// [--ledger FILE] [--memory SIZE] [--json]`: the objective's cascade (src/gate/cascade.hpp),
// recorded in the ledger, reported as a gate table and the top findings (src/report), with the HTML
// page written to <home>/runs/<run>/report.html. Progress goes to stderr: a bar on a terminal (not
// with
// --json), one line per point otherwise.
// Exit: 0 every gate passed, 1 a gate failed, is inconclusive or was not run, 2 bad usage or
// configuration, 3 the subject failed, 130 interrupted (SIGINT/SIGTERM: the subject's process
// group is killed and the run is recorded as interrupted).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "cli/commands.hpp"
#include "core/json.hpp"
#include "core/process.hpp"
#include "gate/recorded_run.hpp"
#include "ledger/ledger.hpp"
#include "report/model.hpp"

namespace loupe::cli {
namespace {

constexpr size_t kJsonFindings = 20;

struct RunOptions {
  std::string objective;
  std::string config;
  std::string only;
  bool all = false;
  std::vector<std::string> sets;
  std::string home;
  std::string ledger;
  std::string memory;
  std::string baseline;
  std::string baseline_subject;
  bool no_baseline_cache = false;
  bool fail_fast = false;
  bool json = false;
  // --executor and its settings, as (key, value) for gate::apply_executor_setting.
  std::vector<std::pair<std::string, std::string>> executor;
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

// Progress on stderr: a bar redrawn in place on a terminal; one line per point otherwise (logs,
// pipes, CI), so a log never holds carriage returns.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool bar) : bar_(bar) {}
  ~ProgressPrinter() { finish(); }

  void operator()(const gate::Progress& progress) {
    const gate::PointResult& point = *progress.point;
    const std::string what =
        std::string(layer_name(point.layer)) + " " + point.entry + " " +
        params_to_string(point.params) +
        (point.repeat > 0 ? " repeat " + std::to_string(point.repeat + 1) : "");
    char line[512];
    if (!bar_) {
      std::snprintf(line, sizeof(line),
                    "[%zu/%zu] %-8s %s %s%s: %s in %.2f s; elapsed %.1f s, ~%.1f s left\n",
                    progress.index, progress.total, std::string(layer_name(point.layer)).c_str(),
                    point.entry.c_str(), params_to_string(point.params).c_str(),
                    point.repeat > 0 ? (" repeat " + std::to_string(point.repeat + 1)).c_str() : "",
                    std::string(verdict_name(point.verdict)).c_str(), point.wall_s,
                    progress.elapsed_s, progress.remaining_s);
      std::cerr << line << std::flush;
      return;
    }
    constexpr int kWidth = 24;
    const int filled =
        progress.total == 0 ? kWidth : static_cast<int>(kWidth * progress.index / progress.total);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(kWidth, '.');
    // The last point's name is cut so the line stays on one row of an 80-column terminal.
    std::snprintf(line, sizeof(line), "\r[%s] %zu/%zu %.1f s, ~%.1f s left  %-.28s\033[K",
                  bar.c_str(), progress.index, progress.total, progress.elapsed_s,
                  progress.remaining_s, what.c_str());
    std::cerr << line << std::flush;
    drawn_ = true;
  }

  // Clears the bar so that the report starts on a clean line.
  void finish() {
    if (drawn_) std::cerr << "\r\033[K" << std::flush;
    drawn_ = false;
  }

 private:
  bool bar_;
  bool drawn_ = false;
};

// The run's report model, from what the ledger now holds (the same as `loupe report RUN` reads),
// with what only this process knows: the gates' layers, the objective's name, the exact wall time.
report::Model report_model(const gate::RecordedRun& run) {
  const ledger::RunRecord record = ledger::Ledger::open(run.ledger_file).get_run(run.run_id);
  report::BuildOptions options;
  for (const auto& gate : run.outcome.gates)
    options.gate_layers.emplace_back(gate.name, gate.layer);
  options.title = run.objective.name.empty() ? run.objective.file.string() : run.objective.name;
  options.ledger_file = run.ledger_file.string();
  options.wall_s = run.outcome.wall_s;
  if (run.outcome.error) options.subject_failure = run.outcome.error->message();
  return report::build_model(record, options);
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
  run->add_option("--memory", options->memory,
                  "SIZE (e.g. 512M, 4G): stop a subject whose resident memory passes it (exit 3)");
  run->add_option("--baseline", options->baseline,
                  "compare with an earlier build: its folder or program (run on the same tasks, "
                  "benches interleaved), a run id, 'latest', or a git revision of a recorded run");
  run->add_option("--baseline-subject", options->baseline_subject,
                  "CMD: the earlier build's subject command line (instead of --baseline PATH)");
  run->add_flag("--no-baseline-cache", options->no_baseline_cache,
                "run every check point of the baseline build, none taken from the cache of "
                "earlier runs against the same build (HOME/baseline-cache)");
  run->add_flag("--fail-fast", options->fail_fast,
                "stop after the first layer with a failing gate, even where the file says "
                "cascade = \"all\"");
  run->add_flag("--json", options->json, "print one JSON envelope");
  // Where the points run (docs/executors.md); each flag overrides the objective's [executor].
  for (const auto& [flag, key, help] : std::vector<std::array<std::string, 3>>{
           {"--executor", "kind", "local (default: here) or slurm (job arrays)"},
           {"--check-workers", "check_workers",
            "local: how many check points run at once (default min(2, CPUs); 1: one after "
            "another); benches and scenarios always run alone"},
           {"--partition", "partition", "slurm: sbatch --partition"},
           {"--gres", "gres", "slurm: sbatch --gres per task, e.g. gpu:1"},
           {"--account", "account", "slurm: sbatch --account"},
           {"--time", "time", "slurm: sbatch --time per task, e.g. 00:10:00"},
           {"--max-parallel", "max_parallel", "slurm: at most N tasks of an array at once"},
           {"--retries", "retries", "slurm: resubmissions of a task lost to its node (default 2)"},
           {"--shared-dir", "shared_dir",
            "slurm: a directory every node sees (default: the run's)"}}) {
    run->add_option_function<std::string>(
        flag,
        [options, key = key](const std::string& value) {
          options->executor.emplace_back(key, value);
        },
        help);
  }
  run->callback([options, &result] {
    result.kind = "run";
    gate::RunRequest request;
    request.objective = options->objective;
    request.config = options->config;
    if (!options->only.empty()) request.only = parse_layer(options->only);
    request.all = options->all;
    request.sets = options->sets;
    request.baseline = options->baseline;
    request.baseline_subject = options->baseline_subject;
    request.baseline_cache = !options->no_baseline_cache;
    request.fail_fast = options->fail_fast;
    if (options->all && options->fail_fast) {
      throw Error(ErrorCode::kUsage, "--all and --fail-fast contradict each other",
                  "give one of them");
    }
    if (!options->home.empty()) request.home = options->home;
    if (!options->ledger.empty()) request.ledger = options->ledger;
    request.executor_settings = options->executor;
    if (!options->memory.empty()) {
      request.memory_limit_bytes = parse_byte_size("--memory", options->memory);
    }

    gate::CascadeOptions cascade_options;
    auto progress = std::make_shared<ProgressPrinter>(!options->json && ::isatty(STDERR_FILENO));
    cascade_options.progress = [progress](const gate::Progress& point) { (*progress)(point); };
    // Every gate's verdict on stderr the moment it is decided, with the time since the start:
    // a failing gate shows while the rest of the cascade still runs.
    if (!options->json) {
      const auto started = std::chrono::steady_clock::now();
      cascade_options.gate_decided = [progress, started](const gate::GateResult& gate) {
        if (gate.verdict == GateVerdict::kNotRun) return;
        progress->finish();
        const double elapsed =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        std::string verdict(gate_verdict_name(gate.verdict));
        for (char& c : verdict) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        std::string rule = gate.rule;
        if (rule.size() > 220) rule = rule.substr(0, 217) + "...";
        char prefix[96];
        std::snprintf(prefix, sizeof prefix, "[%6.1f s] gate ", elapsed);
        std::cerr << prefix << gate.name << ": " << verdict << " — " << rule << "\n" << std::flush;
      };
    }

    gate::RecordedRun run;
    {
      InterruptWatcher watcher;
      cascade_options.interrupted = &watcher.interrupted();
      run = gate::run_and_record(request, cascade_options);
    }
    progress->finish();

    // The page is written after every run; a report that cannot be made does not change the
    // run's verdict, but it is said.
    std::optional<report::Model> model;
    std::string html_file;
    std::string report_problem;
    try {
      model = report_model(run);
      const auto file = report::report_file(run.home, run.run_id);
      report::write_text_file(file, report::render_html(*model));
      html_file = file.string();
    } catch (const Error& error) {
      report_problem = error.message();
    }
    if (!model && !options->json) {
      std::cout << "run " << run.run_id << ": " << ledger::run_status_name(run.status)
                << "; recorded in " << run.ledger_file.string() << " (loupe ledger show "
                << run.run_id << ")\n";
    }
    if (options->json) {
      Envelope envelope = gate::run_envelope(run, kJsonFindings);
      envelope.data["report"] = html_file.empty() ? Json(nullptr) : Json(html_file);
      if (!report_problem.empty()) envelope.data["report_error"] = report_problem;
      std::cout << render_envelope(envelope) << "\n";
    } else {
      if (model) std::cout << report::render_terminal(*model);
      // The cause before the symptom: the most specific failing gate, and how the others follow.
      // Not recorded in the ledger: `loupe report RUN` renders the text above without these lines.
      for (const auto& line : gate::cause_lines(run.outcome.causes, run.objective)) {
        std::cout << "cause " << line << "\n";
      }
      // A failing guard fails the run whatever its gates say (gate::cascade_verdict).
      const std::vector<std::string> guards = gate::failed_guard_ids(run.outcome);
      constexpr size_t kGuardsListed = 5;
      for (size_t index = 0; index < guards.size() && index < kGuardsListed; ++index) {
        std::cout << "guard failed: " << guards[index]
                  << " (the run fails whatever its gates say: the results they judged cannot be "
                     "believed; its finding is above)\n";
      }
      if (guards.size() > kGuardsListed) {
        std::cout << "guard failed: " << guards.size() - kGuardsListed << " more (--json lists "
                  << "every one in data.failed_guards)\n";
      }
      // Coverage on stderr, with the progress: stdout stays the run's report, the text `loupe
      // report RUN` renders again (the coverage findings are in the ledger).
      if (!run.coverage.empty()) std::cerr << gate::render_coverage(run.coverage);
      // The baseline build's runs left out because no gate reads them, on stderr beside it.
      if (const std::string skipped = gate::baseline_skip_line(run.outcome); !skipped.empty()) {
        std::cerr << skipped << "\n";
      }
      // The baseline build's check runs taken from the cache, by the run that stored them.
      for (const std::string& line : gate::baseline_cache_lines(run.outcome)) {
        std::cerr << line << "\n";
      }
      if (!run.coverage_problem.empty()) {
        std::cerr << "coverage: not checked (" << run.coverage_problem << ")\n";
      }
      if (!html_file.empty()) std::cout << "report: " << html_file << "\n";
    }
    if (!report_problem.empty())
      std::cerr << "loupe: report not written: " << report_problem << "\n";
    result.exit_code = run.exit_code;
  });
}

}  // namespace

LOUPE_REGISTER_COMMAND(55, add_run_command);

}  // namespace loupe::cli
