// `loupe ledger list|show|compare|export|import|trend`: read the ledger of runs and move runs
// between ledgers (src/ledger does the work); `trend` follows one metric across the runs in commit
// order (src/report/trend.hpp).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/commands.hpp"
#include "core/gzip.hpp"
#include "core/home.hpp"
#include "core/json.hpp"
#include "ledger/exchange.hpp"
#include "ledger/ledger.hpp"
#include "ledger/provenance.hpp"
#include "report/model.hpp"
#include "report/trend.hpp"

namespace loupe::cli {
namespace {

constexpr size_t kMaxFindingsShown = 20;

struct LedgerOptions {
  std::string ledger;
  std::string home;
  bool json = false;
  int64_t limit = 20;
  int64_t offset = 0;
  std::string run_a;
  std::string run_b;
  std::string out;
  std::string file;
};

std::filesystem::path ledger_path(const LedgerOptions& options) {
  if (!options.ledger.empty()) return options.ledger;
  std::optional<std::filesystem::path> home;
  if (!options.home.empty()) home = options.home;
  return resolve_home(home, std::filesystem::current_path()) / "ledger.sqlite";
}

// Reading commands never create a ledger, a schema or a journal as a side effect.
ledger::Ledger open_existing(const LedgerOptions& options) {
  return ledger::Ledger::open_read_only(ledger_path(options));
}

void add_location_options(CLI::App* command, LedgerOptions& options) {
  command->add_option("--ledger", options.ledger, "the ledger file (default .loupe/ledger.sqlite)");
  command->add_option("--home", options.home, "loupe's folder (default .loupe/ at the git root)");
  command->add_flag("--json", options.json, "print one JSON envelope");
}

void print_ledger_envelope(const std::string& kind, Verdict verdict, std::vector<Finding> findings,
                           Json data) {
  Envelope envelope;
  envelope.kind = kind;
  envelope.verdict = verdict;
  envelope.findings = std::move(findings);
  envelope.data = std::move(data);
  std::cout << render_envelope(envelope) << "\n";
}

void add_ledger_list(CLI::App* ledger_app, CommandResult& result) {
  auto options = std::make_shared<LedgerOptions>();
  CLI::App* list =
      ledger_app->add_subcommand("list", "Recorded runs, newest first, a page at a time");
  add_location_options(list, *options);
  list->add_option("--limit", options->limit, "runs per page (default 20)")
      ->check(CLI::PositiveNumber);
  list->add_option("--offset", options->offset, "runs to skip (the next page's start)")
      ->check(CLI::NonNegativeNumber);
  list->callback([options, &result] {
    result.kind = "ledger.list";
    const auto path = ledger_path(*options);
    std::vector<ledger::RunSummary> runs;
    int64_t total = 0;
    if (std::filesystem::exists(path)) {
      const ledger::Ledger ledger = ledger::Ledger::open_read_only(path);
      runs = ledger.list_runs(options->limit, options->offset);
      total = ledger.count_runs();
    }
    if (options->json) {
      print_ledger_envelope("ledger.list", Verdict::kNone, {},
                            ledger::run_list_to_json(runs, total, options->offset));
    } else {
      std::cout << ledger::render_run_list(runs, total, options->offset, path.string());
    }
  });
}

void add_ledger_show(CLI::App* ledger_app, CommandResult& result) {
  auto options = std::make_shared<LedgerOptions>();
  CLI::App* show = ledger_app->add_subcommand("show", "One run: provenance, gates, findings");
  show->add_option("RUN", options->run_a, "the run id (see `loupe ledger list`)")->required();
  add_location_options(show, *options);
  show->callback([options, &result] {
    result.kind = "ledger.show";
    const ledger::RunRecord run = open_existing(*options).get_run(options->run_a);
    if (options->json) {
      Json data = {{"run", ledger::run_to_json(run)}};
      data["run"].erase("findings");  // they are the envelope's findings
      print_ledger_envelope("ledger.show", ledger::run_verdict(run), run.findings, std::move(data));
    } else {
      std::cout << ledger::render_run(run, kMaxFindingsShown);
    }
  });
}

void add_compare(CLI::App* ledger_app, CommandResult& result) {
  auto options = std::make_shared<LedgerOptions>();
  CLI::App* compare = ledger_app->add_subcommand(
      "compare", "Which gates flipped and which findings appeared or disappeared between two runs");
  compare->add_option("RUN_A", options->run_a, "the baseline run")->required();
  compare->add_option("RUN_B", options->run_b, "the run to compare with it")->required();
  add_location_options(compare, *options);
  compare->callback([options, &result] {
    result.kind = "ledger.compare";
    const ledger::Ledger ledger = open_existing(*options);
    const auto comparison =
        ledger::compare_runs(ledger.get_run(options->run_a), ledger.get_run(options->run_b));
    if (options->json) {
      print_ledger_envelope("ledger.compare", Verdict::kNone, {},
                            ledger::comparison_to_json(comparison));
    } else {
      std::cout << ledger::render_comparison(comparison, kMaxFindingsShown);
    }
  });
}

void add_export(CLI::App* ledger_app, CommandResult& result) {
  auto options = std::make_shared<LedgerOptions>();
  CLI::App* export_command =
      ledger_app->add_subcommand("export", "One run as one JSON document (for `ledger import`)");
  export_command->add_option("RUN", options->run_a, "the run id")->required();
  export_command->add_option("--out", options->out, "write the document here (default stdout)");
  export_command->add_option("--ledger", options->ledger,
                             "the ledger file (default .loupe/ledger.sqlite)");
  export_command->add_option("--home", options->home,
                             "loupe's folder (default .loupe/ at the git root)");
  export_command->callback([options, &result] {
    result.kind = "ledger.export";
    const std::string document =
        ledger::export_run(open_existing(*options).get_run(options->run_a));
    if (options->out.empty()) {
      std::cout << document;
      return;
    }
    std::ofstream out(options->out, std::ios::binary);
    out << document;
    out.close();
    if (!out) {
      throw Error(ErrorCode::kInput, options->out + ": cannot write the export",
                  "check that the folder exists and is writable");
    }
    std::cerr << "exported run " << options->run_a << " to " << options->out << "\n";
  });
}

void add_import(CLI::App* ledger_app, CommandResult& result) {
  auto options = std::make_shared<LedgerOptions>();
  CLI::App* import_command = ledger_app->add_subcommand(
      "import", "Record a run exported from another ledger (a CI baseline, a colleague's run)");
  import_command->add_option("FILE", options->file, "a document `loupe ledger export` wrote")
      ->required();
  add_location_options(import_command, *options);
  import_command->callback([options, &result] {
    result.kind = "ledger.import";
    std::ifstream in(options->file, std::ios::binary);
    if (!in) {
      throw Error(ErrorCode::kInput, options->file + ": cannot read the file to import",
                  "pass a file `loupe ledger export RUN --out FILE` wrote");
    }
    // Read whole, so held to the absolute decompression cap (core/gzip.hpp) like any input
    // loupe expands in memory.
    std::error_code size_error;
    const uint64_t size = std::filesystem::file_size(options->file, size_error);
    const DecompressionLimits limits = decompression_limits();
    if (!size_error && size > limits.max_bytes) {
      throw Error(ErrorCode::kInput,
                  options->file + ": " + std::to_string(size) +
                      " bytes, past the absolute cap of " + std::to_string(limits.max_bytes) +
                      " bytes on input read whole",
                  "if the file is trusted, raise the cap with --max-inflated SIZE (or "
                  "LOUPE_MAX_INFLATED=SIZE)");
    }
    std::ostringstream text;
    text << in.rdbuf();
    // The whole export is read and checked before the ledger is opened: nothing is written for
    // a document that does not conform.
    ledger::RunRecord run = ledger::import_run(text.str(), options->file);
    run.imported =
        ledger::ImportOrigin{std::filesystem::absolute(options->file).lexically_normal().string(),
                             ledger::sha256_hex(text.str()), ledger::utc_now()};
    const auto path = ledger_path(*options);
    ledger::Ledger::open(path).insert_run(run);
    if (options->json) {
      print_ledger_envelope("ledger.import", Verdict::kNone, {},
                            {{"run", run.id}, {"ledger", path.string()}});
    } else {
      std::cout << "imported run " << run.id << " into " << path.string() << "\n";
    }
  });
}

void add_trend(CLI::App* ledger_app, CommandResult& result) {
  auto options = std::make_shared<LedgerOptions>();
  auto request = std::make_shared<report::TrendRequest>();
  auto html = std::make_shared<std::string>();
  CLI::App* trend = ledger_app->add_subcommand(
      "trend", "One metric across the recorded runs in commit order, with intervals and decisions");
  trend
      ->add_option("METRIC", request->metric,
                   "a finding metric (ratio, rms_ratio, wall_s, ...) or gate:NAME")
      ->required();
  trend->add_option("--probe", request->probe, "only findings of this probe");
  trend->add_option("--point", request->points, "K=V the finding's point must hold (repeatable)");
  trend->add_option("--since", request->since, "only runs at this revision and after it");
  trend->add_flag("--higher-is-better", request->higher_is_better,
                  "a rise is an improvement (throughput); default: a rise is a regression");
  trend
      ->add_option("--threshold", request->threshold,
                   "relative change that counts as a regression without intervals (default "
                   "0.05)")
      ->check(CLI::Range(0.0, 10.0));
  trend->add_option("--html", *html, "also write a page with the plot (inline SVG)");
  add_location_options(trend, *options);
  trend->callback([options, request, html, &result] {
    result.kind = "ledger.trend";
    const ledger::Ledger ledger = open_existing(*options);
    const report::Trend trend = report::build_trend(ledger, *request);
    if (!html->empty()) report::write_text_file(*html, report::render_trend_html(trend));
    if (options->json) {
      Json points = Json::array();
      size_t regressions = 0;
      for (const auto& point : trend.points) {
        regressions += point.regression ? 1 : 0;
        points.push_back(
            {{"run", point.run_id},
             {"commit", point.commit},
             {"started_at", point.started_at},
             {"value", number_to_json(point.value)},
             {"interval", point.interval ? Json::array({number_to_json(point.interval->low),
                                                        number_to_json(point.interval->high)})
                                         : Json(nullptr)},
             {"where", point.where},
             {"matches", point.matches},
             {"hypotheses", point.annotations},
             {"regression", point.regression},
             {"reproduce", point.reproduce}});
      }
      Json data = {{"metric", request->metric},
                   {"probe", request->probe},
                   {"points_filter", request->points},
                   {"history", trend.history},
                   {"higher_is_better", request->higher_is_better},
                   {"runs", points},
                   {"regressions", regressions},
                   {"runs_off_history", trend.runs_off_history},
                   {"runs_without_value", trend.runs_without_value},
                   {"html", html->empty() ? Json(nullptr) : Json(*html)}};
      print_ledger_envelope("ledger.trend", Verdict::kNone, {}, std::move(data));
    } else {
      std::cout << report::render_trend_text(trend);
      if (!html->empty()) std::cout << "plot: " << *html << "\n";
    }
  });
}

void add_ledger_command(CLI::App& app, CommandResult& result) {
  CLI::App* ledger_app = app.add_subcommand(
      "ledger",
      "The record of runs: list, show, compare, export, import them, and a metric's trend");
  ledger_app->require_subcommand(1);
  add_ledger_list(ledger_app, result);
  add_ledger_show(ledger_app, result);
  add_compare(ledger_app, result);
  add_export(ledger_app, result);
  add_import(ledger_app, result);
  add_trend(ledger_app, result);
}

}  // namespace

LOUPE_REGISTER_COMMAND(60, add_ledger_command);

}  // namespace loupe::cli
