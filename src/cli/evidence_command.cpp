// `loupe evidence BASE_RUN CANDIDATE_RUN [--markdown] [--html FILE] [--runs N] [--home DIR]
// [--ledger FILE] [--json]`: two recorded runs as one bundle for a reviewer (src/evidence):
// Markdown on stdout (within GitHub's 65,536-character comment limit), every row in the HTML
// file. `--runs N` first runs each side's recorded objective and configuration N-1 more times
// (interleaved, recorded like `loupe run`), so that each bench ratio rests on N runs.
// Exit: 0 the bundle was made (whatever the verdicts), 2 unknown runs or bad usage, 3 a subject
// failed during --runs.
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "core/home.hpp"
#include "core/json.hpp"
#include "evidence/evidence.hpp"
#include "gate/recorded_run.hpp"
#include "ledger/ledger.hpp"
#include "report/model.hpp"

namespace loupe::cli {
namespace {

struct EvidenceOptions {
  std::string base;
  std::string candidate;
  bool markdown = false;
  std::string html;
  int64_t runs = 1;
  std::string home;
  std::string ledger;
  bool json = false;
};

// The recorded configuration as `--config` takes it: the deployment's name, else KEY=VALUE,...
std::string config_argument(const ledger::RunRecord& run) {
  const std::string command = evidence::run_command(run);
  const size_t at = command.find(" --config ");
  if (at == std::string::npos) return "";
  std::string rest = command.substr(at + 10);
  const size_t end = rest.find(" --");
  rest = rest.substr(0, end);
  if (rest.size() >= 2 && rest.front() == '\'' && rest.back() == '\'') {
    rest = rest.substr(1, rest.size() - 2);
  }
  return rest;
}

// One more run of a recorded run's objective and configuration; returns its id.
std::string repeat_run(const ledger::RunRecord& run, const EvidenceOptions& options,
                       const std::filesystem::path& ledger_file) {
  gate::RunRequest request;
  request.objective = run.objective_path;
  request.config = config_argument(run);
  if (!options.home.empty()) request.home = options.home;
  request.ledger = ledger_file;
  const Json config = [&] {
    try {
      return Json::parse(run.config_json);
    } catch (const nlohmann::json::exception&) {
      return Json(Json::object());
    }
  }();
  if (config.contains("sets") && config["sets"].is_array()) {
    for (const auto& set : config["sets"]) {
      if (set.is_string()) request.sets.push_back(set.get<std::string>());
    }
  }
  if (config.contains("only") && config["only"].is_string()) {
    request.only = parse_layer(config["only"].get<std::string>());
  }
  gate::CascadeOptions cascade;
  const gate::RecordedRun repeat = gate::run_and_record(request, cascade);
  if (repeat.outcome.error) throw *repeat.outcome.error;
  std::cerr << "evidence: repeat of " << run.id << " (" << request.config << "): " << repeat.run_id
            << " " << verdict_name(repeat.verdict) << "\n";
  return repeat.run_id;
}

void add_evidence_command(CLI::App& app, CommandResult& result) {
  auto options = std::make_shared<EvidenceOptions>();
  CLI::App* command = app.add_subcommand(
      "evidence", "Two recorded runs as one review bundle, each number with its command");
  command->add_option("BASE_RUN", options->base, "the run before the change")->required();
  command->add_option("CANDIDATE_RUN", options->candidate, "the run after it")->required();
  command->add_flag("--markdown", options->markdown,
                    "print Markdown (the default), within GitHub's comment limit");
  command->add_option("--html", options->html, "also write the full bundle as one HTML page");
  command
      ->add_option("--runs", options->runs,
                   "run each side's objective and configuration until it has N runs")
      ->check(CLI::Range(int64_t{1}, int64_t{50}));
  command->add_option("--home", options->home, "where runs and the ledger live (default .loupe/)");
  command->add_option("--ledger", options->ledger, "the ledger file (default HOME/ledger.sqlite)");
  command->add_flag("--json", options->json, "print one JSON envelope");
  command->callback([options, &result] {
    result.kind = "evidence";
    const std::filesystem::path home = resolve_home(
        options->home.empty() ? std::nullopt : std::optional<std::filesystem::path>(options->home),
        std::filesystem::current_path());
    const std::filesystem::path ledger_file =
        options->ledger.empty() ? home / "ledger.sqlite" : std::filesystem::path(options->ledger);
    if (!std::filesystem::exists(ledger_file)) {
      throw Error(ErrorCode::kUsage, ledger_file.string() + ": no ledger there",
                  "record runs with loupe run, or give --home DIR or --ledger FILE");
    }
    evidence::Options bundle_options;
    if (!options->ledger.empty()) {
      bundle_options.ledger_argument = "--ledger " + options->ledger;
    } else if (!options->home.empty()) {
      bundle_options.ledger_argument = "--home " + options->home;
    }
    if (options->runs > 1) {
      ledger::RunRecord base;
      ledger::RunRecord candidate;
      {
        const ledger::Ledger ledger = ledger::Ledger::open_read_only(ledger_file);
        base = ledger.get_run(options->base);
        candidate = ledger.get_run(options->candidate);
      }
      // Interleaved, so drift of the machine falls on both sides alike.
      for (int64_t repeat = 1; repeat < options->runs; ++repeat) {
        bundle_options.base_repeats.push_back(repeat_run(base, *options, ledger_file));
        bundle_options.candidate_repeats.push_back(repeat_run(candidate, *options, ledger_file));
      }
    }
    const ledger::Ledger ledger = ledger::Ledger::open_read_only(ledger_file);
    const evidence::Bundle bundle =
        evidence::build_bundle(ledger, options->base, options->candidate, bundle_options);
    const std::string markdown = evidence::render_markdown(bundle);
    if (!options->html.empty())
      report::write_text_file(options->html, evidence::render_html(bundle));
    if (options->json) {
      Envelope envelope;
      envelope.kind = "evidence";
      envelope.verdict = bundle.verdict;
      envelope.data = evidence::bundle_to_json(bundle);
      envelope.data["markdown"] = markdown;
      envelope.data["markdown_chars"] = markdown.size();
      envelope.data["html"] = options->html.empty() ? Json(nullptr) : Json(options->html);
      std::cout << render_envelope(envelope) << "\n";
    } else {
      std::cout << markdown;
    }
    result.exit_code = 0;
  });
}

}  // namespace

LOUPE_REGISTER_COMMAND(62, add_evidence_command);

}  // namespace loupe::cli
