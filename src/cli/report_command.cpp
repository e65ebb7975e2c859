// `loupe report RUN [--html FILE] [--markdown] [--home DIR] [--ledger FILE] [--json]`: renders a
// recorded run again from the ledger and its observation files (src/report): the terminal text
// by default, Markdown (a CI job summary) with --markdown, and the self-contained HTML page to
// FILE with --html. Exits with the run's verdict, so a CI step that reports also gates: 0 when
// every gate passed (or a completed run had none), 1 when one failed or is inconclusive, or the
// run was interrupted before deciding; 3 when the run failed (its subject crashed or it could not
// start); 2 for an unknown run, a missing ledger or an unwritable FILE.
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <variant>

#include "cli/commands.hpp"
#include "core/home.hpp"
#include "core/json.hpp"
#include "gate/expression.hpp"
#include "gate/objective.hpp"
#include "ledger/ledger.hpp"
#include "ledger/provenance.hpp"
#include "report/model.hpp"

namespace loupe::cli {
namespace {

struct ReportOptions {
  std::string run;
  std::string html;
  bool markdown = false;
  std::string home;
  std::string ledger;
  bool json = false;
};

// The ledger keeps no gate layers; the objective does. They are taken from it only when it is
// the file the run used (same content hash), so a later edit cannot relabel an old run.
void add_objective_context(const ledger::RunRecord& run, report::BuildOptions& options,
                           std::vector<std::string>& notes,
                           std::vector<std::pair<std::string, bool>>& higher_is_better) {
  // A run without gates (`loupe counters --record`) needs no layers, and its "objective" is the
  // export it read.
  if (run.gates.empty()) return;
  const std::filesystem::path file = run.objective_path;
  std::error_code error;
  if (!std::filesystem::exists(file, error)) {
    notes.push_back("gate layers are unknown: the objective " + run.objective_path + " is gone");
    return;
  }
  if (ledger::file_sha256(file) != run.objective_hash) {
    notes.push_back("gate layers are unknown: the objective " + run.objective_path +
                    " changed since the run");
    return;
  }
  try {
    const gate::Objective objective = gate::parse_objective_file(file);
    options.title = objective.name;
    for (const auto& gate : objective.gates) {
      options.gate_layers.emplace_back(gate.name, gate::gate_layer(gate.expression));
      const auto* bound = std::get_if<gate::MetricBound>(&gate.expression);
      higher_is_better.emplace_back(
          gate.name, bound != nullptr && (bound->comparison == gate::Comparison::kGreater ||
                                          bound->comparison == gate::Comparison::kGreaterEqual));
    }
  } catch (const Error& parse_error) {
    notes.push_back("gate layers are unknown: the objective does not parse: " +
                    parse_error.message());
  }
}

int report_exit_code(Verdict verdict, ledger::RunStatus status) {
  switch (verdict) {
    case Verdict::kPass:
      return 0;
    case Verdict::kNone:
      return status == ledger::RunStatus::kCompleted ? 0 : 1;
    case Verdict::kError:
      return 3;
    case Verdict::kFail:
    case Verdict::kInconclusive:
      return 1;
  }
  return 1;
}

void add_report_command(CLI::App& app, CommandResult& result) {
  auto options = std::make_shared<ReportOptions>();
  CLI::App* command = app.add_subcommand(
      "report",
      "Render a recorded run again: terminal text, Markdown (--markdown) or HTML (--html)");
  command->add_option("RUN", options->run, "the run id (loupe ledger list)")->required();
  command->add_option("--html", options->html, "write the self-contained HTML page to FILE");
  command->add_flag("--markdown", options->markdown,
                    "print Markdown (fits a CI job summary) instead of the terminal text");
  command->add_option("--home", options->home, "loupe's folder (default .loupe/ at the git root)");
  command->add_option("--ledger", options->ledger, "the ledger file (default HOME/ledger.sqlite)");
  command->add_flag("--json", options->json, "print one JSON envelope");
  command->callback([options, &result] {
    result.kind = "report";
    std::optional<std::filesystem::path> home_override;
    if (!options->home.empty()) home_override = options->home;
    const std::filesystem::path home = resolve_home(home_override, std::filesystem::current_path());
    const std::filesystem::path ledger_file =
        options->ledger.empty() ? home / "ledger.sqlite" : std::filesystem::path(options->ledger);
    if (!std::filesystem::exists(ledger_file)) {
      throw Error(ErrorCode::kUsage, "no ledger at " + ledger_file.string(),
                  "`loupe run OBJECTIVE` records runs there; pass --ledger FILE or --home DIR to "
                  "read another");
    }
    const ledger::Ledger ledger = ledger::Ledger::open_read_only(ledger_file);
    const ledger::RunRecord run = ledger.get_run(options->run);

    report::BuildOptions build;
    build.ledger_file = ledger_file.string();
    std::vector<std::string> notes;
    std::vector<std::pair<std::string, bool>> directions;
    add_objective_context(run, build, notes, directions);
    report::Model model = report::build_model(run, build);
    model.notes.insert(model.notes.begin(), notes.begin(), notes.end());
    // Each gate's trajectory across the objective's runs (lower is better unless the objective
    // bounds the gate from below).
    report::TrendSectionRequest trends;
    trends.objective_path = run.objective_path;
    trends.config_json = run.config_json;
    trends.repo = std::filesystem::current_path();
    for (const auto& gate : run.gates) {
      bool higher = false;
      for (const auto& [name, direction] : directions)
        higher = higher || (name == gate.name && direction);
      trends.gates.emplace_back(gate.name, higher);
    }
    // A run recorded outside a repository has no place in a commit order: no section to give.
    if (!run.git.commit.empty()) {
      model.trends = report::build_trend_section(ledger, trends);
      if (!model.trends.note.empty()) model.notes.push_back(model.trends.note);
    }

    std::string html_file;
    if (!options->html.empty()) {
      report::write_text_file(options->html, report::render_html(model));
      html_file = std::filesystem::absolute(options->html).string();
    }
    if (options->json) {
      Envelope envelope;
      envelope.kind = "report";
      envelope.verdict = model.header.verdict;
      envelope.findings = model.findings;
      envelope.truncated = model.findings_total > model.findings.size();
      envelope.stats = model.stats;
      Json data = Json::object();
      data["run"] = run.id;
      data["status"] = model.header.status;
      Json gates = Json::array();
      for (const auto& gate : model.gates) {
        gates.push_back(
            {{"name", gate.name},
             {"layer", gate.layer ? Json(std::string(layer_name(*gate.layer))) : Json(nullptr)},
             {"verdict", std::string(gate_verdict_name(gate.verdict))},
             {"key_statistic", gate.key_statistic},
             {"rule", gate.rule}});
      }
      data["gates"] = std::move(gates);
      data["findings_total"] = model.findings_total;
      data["plots"] = {{"profiles", model.profiles.size()},
                       {"sweeps", model.sweeps.size()},
                       {"timelines", model.timelines.size()}};
      Json trend_rows = Json::array();
      for (const auto& entry : model.trends.gates) {
        Json points = Json::array();
        for (const auto& point : entry.trend.points) {
          points.push_back(
              {{"run", point.run_id},
               {"commit", point.commit},
               {"estimate", number_to_json(point.value)},
               {"interval", point.interval ? Json::array({number_to_json(point.interval->low),
                                                          number_to_json(point.interval->high)})
                                           : Json(nullptr)},
               {"regression", point.regression}});
        }
        trend_rows.push_back({{"gate", entry.gate},
                              {"higher_is_better", entry.trend.request.higher_is_better},
                              {"older_runs_omitted", entry.points_omitted},
                              {"regressions", entry.regressions},
                              {"points", std::move(points)}});
      }
      data["trends"] = std::move(trend_rows);
      data["notes"] = model.notes;
      data["html"] = html_file.empty() ? Json(nullptr) : Json(html_file);
      if (options->markdown) data["markdown"] = report::render_markdown(model);
      envelope.data = std::move(data);
      std::cout << render_envelope(envelope) << "\n";
    } else {
      std::cout << (options->markdown ? report::render_markdown(model)
                                      : report::render_terminal(model));
      if (!html_file.empty()) std::cerr << "report: " << html_file << "\n";
    }
    result.exit_code = report_exit_code(model.header.verdict, run.status);
  });
}

}  // namespace

LOUPE_REGISTER_COMMAND(57, add_report_command);

}  // namespace loupe::cli
