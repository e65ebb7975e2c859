// `loupe bisect --good REV --bad REV --objective FILE --gate NAME [--build CMD]
// [--subject-from DIR] [--over-values NAME=V1,V2,...] [--max-builds N] [--json]`: the first
// commit (or dependency value) at which the gate goes bad (src/bisect); without --build, the
// objective's [build] command builds each commit. Progress lines on stderr;
// the result on stdout (a report, or one envelope with --json), recorded in the ledger.
// Exit: 0 nothing regressed in the range, 1 a first bad commit named or the search inconclusive,
// 2 bad usage (revisions, gate, options), 3 a subject failed outside the search's steps.
#include <iostream>
#include <memory>

#include "bisect/bisect.hpp"
#include "cli/commands.hpp"
#include "core/json.hpp"

namespace loupe::cli {
namespace {

struct BisectOptions {
  bisect::Request request;
  std::string objective;
  std::string home;
  std::string ledger;
  double threshold = 0;
  bool json = false;
};

void add_bisect_command(CLI::App& app, CommandResult& result) {
  auto options = std::make_shared<BisectOptions>();
  CLI::App* command = app.add_subcommand(
      "bisect", "Find the first commit (or dependency version) at which a gate goes bad");
  command->add_option("--good", options->request.good, "a revision at which the gate is good");
  command->add_option("--bad", options->request.bad, "a later revision at which it is bad");
  command->add_option("--objective", options->objective, "the objective file (TOML)")->required();
  command->add_option("--gate", options->request.gate, "the gate that went bad")->required();
  command->add_option("--config", options->request.config,
                      "a [[deployment]] name or KEY=VALUE settings, as loupe run --config");
  command->add_option("--build", options->request.build,
                      "shell command that builds a checkout (run in its tree; cached per commit; "
                      "default: the objective's [build] command)");
  command->add_option("--subject-from", options->request.subject_from,
                      "the subject's folder relative to the repository root (default: the "
                      "objective's)");
  command->add_option(
      "--over-values", options->request.over_values,
      "NAME=V1,V2,...: search these values of {NAME} in --build instead of commits");
  command
      ->add_option("--max-builds", options->request.max_builds,
                   "stop after this many builds (default: no limit)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--min-rounds", options->request.min_rounds,
                      "A/B rounds before a bench or scenario step may be decided (default 5)");
  command->add_option("--max-rounds", options->request.max_rounds,
                      "A/B rounds before a step is left AMBIGUOUS (default 12)");
  command
      ->add_option("--threshold", options->threshold,
                   "A/B threshold t (default: the entry's, else 0.02)")
      ->check(CLI::Range(1e-6, 1.0));
  command->add_option("--home", options->home, "where runs and the ledger live (default .loupe/)");
  command->add_option("--ledger", options->ledger, "the ledger file (default HOME/ledger.sqlite)");
  command->add_flag("--json", options->json, "print one JSON envelope");
  command->callback([options, command, &result] {
    result.kind = "bisect";
    bisect::Request request = options->request;
    request.objective = options->objective;
    if (!options->home.empty()) request.home = options->home;
    if (!options->ledger.empty()) request.ledger = options->ledger;
    if (command->count("--threshold") > 0) request.threshold = options->threshold;
    request.progress = [](const std::string& line) {
      std::cerr << "bisect: " << line << "\n" << std::flush;
    };
    const bisect::Outcome outcome = bisect::run_bisect(request);
    if (options->json) {
      Envelope envelope;
      envelope.kind = "bisect";
      envelope.verdict = outcome.verdict;
      envelope.findings = outcome.findings;
      envelope.data = outcome.data;
      std::cout << render_envelope(envelope) << "\n";
    } else {
      std::cout << outcome.text;
    }
    result.exit_code = outcome.exit_code;
  });
}

}  // namespace

LOUPE_REGISTER_COMMAND(58, add_bisect_command);

}  // namespace loupe::cli
