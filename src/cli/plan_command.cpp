// `loupe plan OBJECTIVE [--config NAME|k=v,...]`: the exact (probe, parameter point) tasks a
// configuration implies (src/gate/plan.hpp does the work).
#include <algorithm>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "core/json.hpp"
#include "gate/cascade.hpp"
#include "gate/coverage.hpp"
#include "gate/plan.hpp"
#include "probe/runner.hpp"

namespace loupe::cli {
namespace {

struct PlanOptions {
  std::string objective;
  std::string config;
  size_t limit = 50;
  bool json = false;
  bool no_coverage = false;
};

void add_plan_command(CLI::App& app, CommandResult& result) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* plan = app.add_subcommand(
      "plan", "The probes and parameter points an objective runs under a deployment configuration");
  plan->add_option("OBJECTIVE", options->objective, "the objective file (TOML)")->required();
  plan->add_option(
      "--config", options->config,
      "a [[deployment]] name, KEY=VALUE settings (comma-separated), or NAME,KEY=VALUE");
  plan->add_option("--limit", options->limit, "tasks shown in the text output (default 50)")
      ->check(CLI::PositiveNumber);
  plan->add_flag("--json", options->json, "print one JSON envelope with every task");
  plan->add_flag("--no-coverage", options->no_coverage,
                 "do not list the subject's probes to say which no gate covers");
  plan->callback([options, &result] {
    result.kind = "plan";
    const gate::Objective objective = gate::parse_objective_file(options->objective);
    const gate::Plan plan =
        gate::make_plan(objective, gate::resolve_configuration(objective, options->config));
    // Coverage: the subject's probes that no gate covers are findings (one `list --json`).
    std::vector<gate::ProbeCoverage> coverage;
    std::vector<Finding> findings;
    std::string problem;
    if (!options->no_coverage) {
      try {
        const Json list = probe::list_probes(gate::subject_command(objective.subject),
                                             std::min(objective.subject.timeout_s, 60.0));
        coverage = gate::probe_coverage(objective, list);
        findings = gate::coverage_findings(objective, coverage);
      } catch (const Error& error) {
        problem = error.message();
      }
    }
    if (options->json) {
      Envelope envelope;
      envelope.kind = "plan";
      envelope.data = gate::plan_to_json(plan, objective);
      envelope.findings = findings;
      if (!options->no_coverage) {
        Json rows = Json::array();
        for (const auto& row : coverage) {
          rows.push_back({{"probe", row.probe},
                          {"kind", row.kind},
                          {"entries", row.entries},
                          {"gates", row.gates},
                          {"ungated_reason", row.ungated_reason}});
        }
        envelope.data["coverage"] = std::move(rows);
        if (!problem.empty()) envelope.data["coverage_problem"] = problem;
      }
      std::cout << render_envelope(envelope) << "\n";
    } else {
      std::cout << gate::render_plan(plan, objective, options->limit);
      if (!coverage.empty()) std::cout << gate::render_coverage(coverage);
      if (!problem.empty()) std::cout << "coverage: not checked (" << problem << ")\n";
    }
    result.exit_code = 0;
  });
}

}  // namespace

LOUPE_REGISTER_COMMAND(50, add_plan_command);

}  // namespace loupe::cli
