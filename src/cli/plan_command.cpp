// `loupe plan OBJECTIVE [--config NAME|k=v,...]`: the exact (probe, parameter point) tasks a
// configuration implies (src/gate/plan.hpp does the work).
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "core/json.hpp"
#include "gate/plan.hpp"

namespace loupe::cli {
namespace {

struct PlanOptions {
  std::string objective;
  std::string config;
  size_t limit = 50;
  bool json = false;
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
  plan->callback([options, &result] {
    result.kind = "plan";
    const gate::Objective objective = gate::parse_objective_file(options->objective);
    const gate::Plan plan =
        gate::make_plan(objective, gate::resolve_configuration(objective, options->config));
    if (options->json) {
      Envelope envelope;
      envelope.kind = "plan";
      envelope.data = gate::plan_to_json(plan, objective);
      std::cout << render_envelope(envelope) << "\n";
    } else {
      std::cout << gate::render_plan(plan, objective, options->limit);
    }
    result.exit_code = 0;
  });
}

}  // namespace

LOUPE_REGISTER_COMMAND(50, add_plan_command);

}  // namespace loupe::cli
