// `loupe counters FILE...`, `loupe counters [...] -- CMD`, `loupe counters diff A B`: Nsight
// Compute measurements as findings (src/counters does the work; this file parses options, runs
// ncu when asked, prints, and records in the ledger with --record / --attach).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.hpp"
#include "core/home.hpp"
#include "core/json.hpp"
#include "counters/analyze.hpp"
#include "counters/envelope.hpp"
#include "counters/ncu.hpp"
#include "counters/profile.hpp"
#include "ledger/ledger.hpp"
#include "ledger/provenance.hpp"

namespace loupe::cli {
namespace {

namespace fs = std::filesystem;

// ncu replays every profiled launch ~40 times; a decode loop launches thousands of kernels, so an
// unbounded `-- CMD` ran past 8 minutes on kda_gpu. Without --launch-count, profile this many.
constexpr int64_t kDefaultLaunchCount = 64;

struct CountersOptions {
  std::vector<std::string> inputs;
  std::string kernel;
  std::vector<std::string> bytes;
  bool detail = false;
  bool json = false;
  bool record = false;
  std::string attach;
  std::string home;
  std::string ledger;
  std::optional<int64_t> launch_skip;
  std::optional<int64_t> launch_count;
  std::vector<std::string> sets;
  // diff
  std::string kernel_a;
  std::string kernel_b;
};

std::string quote_argument(const std::string& text) {
  if (!text.empty() && text.find_first_of(" '\"$&|;<>()*?[]\\{}") == std::string::npos) return text;
  std::string out = "'";
  for (char character : text)
    out += character == '\'' ? std::string("'\\''") : std::string(1, character);
  return out + "'";
}

std::string format_metric(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), pattern, value);
  return buffer;
}

std::string reproduce_line(const CountersOptions& options, const std::vector<std::string>& inputs) {
  std::string line = "loupe counters";
  for (const std::string& input : inputs) line += " " + quote_argument(input);
  if (!options.kernel.empty()) line += " --kernel " + quote_argument(options.kernel);
  for (const std::string& bytes : options.bytes) line += " --bytes " + quote_argument(bytes);
  return line;
}

void print_stats(const StatsRegistry& stats) {
  for (size_t index = 0; index < static_cast<size_t>(Stat::kCount); ++index) {
    const auto stat = static_cast<Stat>(index);
    if (stats.count(stat) == 0) continue;
    const StatInfo& info = stat_info(stat);
    std::cout << "stats: " << info.name << " = " << stats.count(stat) << " ("
              << stat_severity_name(info.severity) << ": " << info.description << ")\n";
  }
}

void print_findings(const std::vector<Finding>& findings) {
  for (const Finding& finding : findings) {
    std::cout << "[" << severity_name(finding.severity) << "] " << finding.id << ": "
              << finding.claim << "\n    next: " << finding.next << "\n";
  }
}

std::string cell(const std::optional<double>& value, const char* pattern) {
  return value ? format_metric(pattern, *value) : std::string("-");
}

void print_table(const std::vector<counters::KernelGroup>& groups) {
  std::printf("%-28s %-14s %-14s %8s %11s %6s %6s %6s %6s %13s\n", "kernel", "block", "grid",
              "launches", "time/launch", "DRAM%", "L2%", "L1%", "SM%", "occupancy%");
  for (const counters::KernelGroup& group : groups) {
    using counters::Quantity;
    const auto duration = group.get(Quantity::kDurationNs);
    std::string time = duration ? format_metric("%.4g us", *duration / 1e3) : "-";
    std::string occupancy = cell(group.get(Quantity::kAchievedOccupancyPct), "%.1f") + "/" +
                            cell(group.get(Quantity::kTheoreticalOccupancyPct), "%.1f");
    std::printf("%-28s %-14s %-14s %8zu %11s %6s %6s %6s %6s %13s\n",
                group.short_name.substr(0, 28).c_str(), group.block.c_str(), group.grid.c_str(),
                group.launches.size(), time.c_str(),
                cell(group.get(Quantity::kSolDramPct), "%.1f").c_str(),
                cell(group.get(Quantity::kSolL2Pct), "%.1f").c_str(),
                cell(group.get(Quantity::kSolL1Pct), "%.1f").c_str(),
                cell(group.get(Quantity::kSolSmPct), "%.1f").c_str(), occupancy.c_str());
  }
}

// Records the findings as a new run (--record) or adds them to a recorded run (--attach RUN).
std::string record(const CountersOptions& options, const std::vector<Finding>& findings,
                   const std::vector<std::string>& files, const std::string& run_id_hint) {
  const fs::path home =
      resolve_home(options.home.empty() ? std::nullopt : std::optional<fs::path>(options.home),
                   fs::current_path());
  const fs::path ledger_file =
      options.ledger.empty() ? home / "ledger.sqlite" : fs::path(options.ledger);
  ledger::Ledger ledger = ledger::Ledger::open(ledger_file);
  if (!options.attach.empty()) {
    const ledger::RunRecord run = ledger.get_run(options.attach);
    if (run.status == ledger::RunStatus::kInProgress) {
      throw Error(ErrorCode::kUsage, "run " + options.attach + " is still in progress",
                  "attach counters to a finished run");
    }
    // finish_run appends; the status and end time stay what they were.
    ledger.finish_run(run.id, run.status, run.ended_at.value_or(ledger::utc_now()), {}, findings,
                      files);
    return run.id;
  }
  ledger::RunStart start;
  start.id = run_id_hint.empty() ? new_run_id() : run_id_hint;
  start.started_at = ledger::utc_now();
  start.objective_path = files.empty() ? "counters" : files.front();
  if (!files.empty() && fs::is_regular_file(files.front()))
    start.objective_hash = ledger::file_sha256(files.front());
  start.git = ledger::read_git_state(fs::current_path());
  Json config = {{"name", "counters"},
                 {"counters", {{"files", files}, {"kernel", options.kernel}}}};
  start.config_json = config.dump();
  ledger.begin_run(start);
  ledger.finish_run(start.id, ledger::RunStatus::kCompleted, ledger::utc_now(), {}, findings,
                    files);
  return start.id;
}

void run_counters(CountersOptions& options, CommandResult& result) {
  // CLI11 appended what follows "--" to the inputs: that is the command to profile.
  std::vector<std::string> inputs = options.inputs;
  const std::vector<std::string>& command = result.after_separator;
  if (!command.empty() && inputs.size() >= command.size())
    inputs.resize(inputs.size() - command.size());
  if (options.record && !options.attach.empty()) {
    throw Error(ErrorCode::kUsage, "--record and --attach exclude each other",
                "--record makes a new run; --attach RUN adds to a recorded one");
  }
  counters::AnalyzeOptions analyze_options;
  if (!options.kernel.empty()) {
    analyze_options.kernel_filter = Pattern::compile(options.kernel, "--kernel");
    analyze_options.kernel_pattern = options.kernel;
  }
  for (const std::string& text : options.bytes)
    analyze_options.declared.push_back(counters::parse_declared_bytes(text));
  analyze_options.detail = options.detail;

  StatsRegistry stats;
  counters::Profile profile;
  std::string run_id;
  std::optional<int64_t> launch_cap;  // with -- CMD: what ncu was told to profile at most
  bool launch_cap_is_default = false;
  if (!command.empty()) {
    if (!inputs.empty()) {
      throw Error(ErrorCode::kUsage, "give input files or a command after --, not both",
                  "loupe counters FILE... | loupe counters [--kernel R] -- CMD ARGS...");
    }
    for (const auto& [value, name] : {std::pair{options.launch_skip, "--launch-skip"},
                                      {options.launch_count, "--launch-count"}}) {
      if (value && *value < (std::string_view(name) == "--launch-count" ? 1 : 0)) {
        throw Error(ErrorCode::kUsage,
                    std::string(name) + " " + std::to_string(*value) + ": expected a " +
                        (std::string_view(name) == "--launch-count" ? "positive" : "non-negative") +
                        " count");
      }
    }
    const fs::path ncu = counters::find_ncu();
    const fs::path home =
        resolve_home(options.home.empty() ? std::nullopt : std::optional<fs::path>(options.home),
                     fs::current_path());
    run_id = new_run_id();
    counters::ProfileRequest request;
    request.command = command;
    request.kernel_regex = options.kernel;
    request.launch_skip = options.launch_skip;
    request.launch_count = options.launch_count.value_or(kDefaultLaunchCount);
    launch_cap = *request.launch_count;
    launch_cap_is_default = !options.launch_count;
    request.sets = options.sets;
    request.report = home / "counters" / run_id;
    const fs::path report = counters::profile_command(ncu, request);
    const counters::Pages pages = counters::import_report(ncu, report);
    counters::parse_ncu_csv(pages.details, report.string() + " (details page)", profile, stats);
    counters::parse_ncu_csv(pages.raw, report.string() + " (raw page)", profile, stats);
    inputs = {report.string()};
  } else {
    if (options.launch_skip || options.launch_count || !options.sets.empty()) {
      throw Error(ErrorCode::kUsage,
                  "--launch-skip, --launch-count and --set choose what ncu profiles: they need a "
                  "command after --",
                  "filter an export by kernel with --kernel REGEX");
    }
    if (inputs.empty()) {
      throw Error(ErrorCode::kUsage, "nothing to read: give ncu CSV files or -- CMD",
                  "loupe counters FILE.csv [--json]  |  loupe counters -- CMD ARGS...");
    }
    profile = counters::load_profile(inputs, stats);
  }
  analyze_options.reproduce = reproduce_line(options, inputs);
  const counters::Analysis analysis = counters::analyze(profile, analyze_options);

  std::string recorded;
  if (options.record || !options.attach.empty())
    recorded = record(options, analysis.findings, inputs, run_id);

  Envelope envelope = counters::analysis_envelope(profile, analysis, stats);
  Json& data = envelope.data;
  if (!recorded.empty()) data["run"] = recorded;
  // Said whenever the cap may have cut the profile short, so nobody reads 64 launches as the
  // program's whole story.
  const bool capped = launch_cap && static_cast<int64_t>(profile.launches.size()) >= *launch_cap;
  if (launch_cap) {
    data["launch_cap"] = {
        {"count", *launch_cap}, {"default", launch_cap_is_default}, {"reached", capped}};
  }

  if (options.json) {
    std::cout << render_envelope(envelope) << "\n";
  } else {
    std::cout << "ncu: " << profile.launches.size() << " launch(es) of " << analysis.groups.size()
              << " kernel configuration(s) from " << profile.files.size() << " file(s) ("
              << (profile.has_details ? "details" : "")
              << (profile.has_details && profile.has_raw ? " + " : "")
              << (profile.has_raw ? "raw" : "") << " page)\n";
    if (capped) {
      std::cout << "(ncu profiled the first " << *launch_cap << " matching launches"
                << (launch_cap_is_default ? ", the default cap" : "")
                << "; --launch-skip N --launch-count N choose others)\n";
    }
    print_table(analysis.groups);
    print_findings(analysis.findings);
    if (analysis.findings_omitted > 0)
      std::cout << "(truncated: " << data["truncation"].get<std::string>() << ")\n";
    print_stats(stats);
    if (!recorded.empty())
      std::cout << "recorded in run " << recorded << " (loupe report " << recorded << ")\n";
  }
  result.exit_code = 0;
}

void run_diff(const CountersOptions& options, CommandResult& result) {
  if (options.inputs.empty() || options.inputs.size() > 2) {
    throw Error(ErrorCode::kUsage, "diff takes A and B (or one file with --kernel-a/--kernel-b)",
                "loupe counters diff tiled.csv merged.csv, or loupe counters diff both.csv "
                "--kernel-a tiled --kernel-b merged");
  }
  StatsRegistry stats;
  const std::string input_a = options.inputs[0];
  const std::string input_b = options.inputs.size() == 2 ? options.inputs[1] : options.inputs[0];
  const counters::Profile profile_a = counters::load_profile({input_a}, stats);
  StatsRegistry stats_b;
  const counters::Profile profile_b =
      input_b == input_a ? profile_a : counters::load_profile({input_b}, stats_b);
  stats.merge(stats_b);
  counters::DiffSide a{"A", counters::pick_group(profile_a, options.kernel_a, "--kernel-a", "A")};
  counters::DiffSide b{"B", counters::pick_group(profile_b, options.kernel_b, "--kernel-b", "B")};
  std::string reproduce = "loupe counters diff " + quote_argument(input_a);
  if (options.inputs.size() == 2) reproduce += " " + quote_argument(input_b);
  if (!options.kernel_a.empty()) reproduce += " --kernel-a " + quote_argument(options.kernel_a);
  if (!options.kernel_b.empty()) reproduce += " --kernel-b " + quote_argument(options.kernel_b);
  const counters::Comparison comparison = counters::compare(a, b, reproduce);

  const Envelope envelope = counters::comparison_envelope(a, b, comparison, stats);
  if (options.json) {
    std::cout << render_envelope(envelope) << "\n";
  } else {
    std::cout << "A: " << a.group.label() << " (" << a.group.launches.size() << " launch(es))\n"
              << "B: " << b.group.label() << " (" << b.group.launches.size() << " launch(es))\n";
    print_findings(comparison.findings);
    std::printf("%-34s %14s %14s %9s\n", "per launch (medians)", "A", "B", "B/A");
    for (const counters::DiffRow& row : comparison.rows) {
      const std::string ratio =
          row.a && row.b && *row.a != 0 ? format_metric("%.3f", *row.b / *row.a) : std::string("-");
      std::printf("%-34s %14s %14s %9s\n", row.metric.c_str(), cell(row.a, "%.6g").c_str(),
                  cell(row.b, "%.6g").c_str(), ratio.c_str());
    }
    print_stats(stats);
  }
  result.exit_code = 0;
}

void add_counters_command(CLI::App& app, CommandResult& result) {
  auto options = std::make_shared<CountersOptions>();
  CLI::App* counters = app.add_subcommand(
      "counters",
      "Nsight Compute counters as findings: the binding limit, occupancy, stalls, bytes and ncu's "
      "advice per kernel, from an export (FILE) or by profiling a command (-- CMD)");
  counters->add_option("inputs", options->inputs,
                       "ncu CSV exports (details and/or raw page) or .ncu-rep reports");
  counters->add_option(
      "--kernel", options->kernel,
      "ECMAScript regex searched in 'KERNEL block (x, y, z) grid (x, y, z)' (with -- CMD: "
      "ncu's --kernel-name regex:, on the name)");
  counters->add_option("--bytes", options->bytes,
                       "REGEX=BYTES: what a kernel must move per launch (e.g. decode=3.2G)");
  counters->add_option("--launch-skip", options->launch_skip,
                       "with -- CMD: launches ncu skips before profiling");
  counters->add_option("--launch-count", options->launch_count,
                       "with -- CMD: launches ncu profiles (default 64)");
  counters->add_option("--set", options->sets,
                       "with -- CMD: an ncu section set added to the curated sections");
  counters->add_flag("--detail", options->detail, "every finding and every rule's advice");
  counters->add_flag("--record", options->record, "record the findings as a new ledger run");
  counters->add_option("--attach", options->attach, "add the findings to recorded run RUN");
  counters->add_option("--home", options->home, "where runs and the ledger live (default .loupe/)");
  counters->add_option("--ledger", options->ledger, "the ledger file (default HOME/ledger.sqlite)");
  counters->add_flag("--json", options->json, "print one JSON envelope");
  counters->callback([options, counters, &result] {
    if (counters->get_subcommands().empty()) {
      result.kind = "counters";
      run_counters(*options, result);
    }
  });

  CLI::App* diff = counters->add_subcommand(
      "diff", "two kernels or two runs side by side, the difference that explains the time first");
  diff->add_option("inputs", options->inputs,
                   "A and B: CSV exports or reports ('details.csv,raw.csv' joins the pages of "
                   "one run); one input with --kernel-a and --kernel-b")
      ->required();
  diff->add_option("--kernel-a", options->kernel_a, "regex choosing A's kernel");
  diff->add_option("--kernel-b", options->kernel_b, "regex choosing B's kernel");
  diff->add_flag("--json", options->json, "print one JSON envelope");
  diff->callback([options, &result] {
    result.kind = "counters.diff";
    run_diff(*options, result);
  });
}

}  // namespace

LOUPE_REGISTER_COMMAND(45, add_counters_command);

}  // namespace loupe::cli
