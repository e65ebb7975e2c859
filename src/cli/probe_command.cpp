// `loupe probe list|run -- SUBJECT...`: run a subject's probes as a child process and decide
// from what it wrote (src/probe/runner.hpp does the work).
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.hpp"
#include "core/json.hpp"
#include "core/process.hpp"
#include "probe/runner.hpp"

namespace loupe::cli {
namespace {

struct ProbeOptions {
  std::string probe;
  std::vector<std::string> sets;
  std::vector<std::string> zips;
  std::vector<std::string> tolerances;
  std::vector<std::string> subject;
  std::vector<std::string> pass_env;
  std::string launch;
  int64_t seed = -1;
  int64_t hidden_point = -1;
  bool hidden = false;
  int repeat = -1;  // not given: the subject's default
  double threshold = 0.02;
  double timeout_s = 600;
  double precision = 0;
  double budget_s = 0;
  int64_t round = 0;
  std::string variants;  // A,B: the bench's variants to run, in order
  std::string home;
  std::string memory;
  bool no_hidden = false;
  bool no_sandbox = false;
  bool json = false;
  std::string counters;
  int64_t counters_launches = 1;
};

// A subject that crashed, hung or was killed at a limit: exit 3 with the finding that says which.
int report_subject_failure(const probe::SubjectFailure& failure, bool json) {
  if (json) {
    Envelope envelope;
    envelope.kind = "probe.run";
    envelope.verdict = Verdict::kError;
    envelope.findings = {failure.finding()};
    envelope.error = failure;
    std::cout << render_envelope(envelope) << "\n";
  } else {
    std::cerr << "loupe: " << failure.message() << "\n";
    std::cerr << "  " << severity_name(failure.finding().severity) << " " << failure.finding().id
              << ": " << failure.finding().claim << "\n";
    if (!failure.hint().empty()) std::cerr << "hint: " << failure.hint() << "\n";
  }
  return exit_code(failure.code());
}

void print_list(const Json& list) {
  for (const auto& probe : list["probes"]) {
    std::cout << probe.value("name", "") << "  [" << probe.value("kind", "") << "]  "
              << probe.value("description", "") << "\n";
    for (const auto& param : probe.value("params", Json::array())) {
      std::cout << "    " << param.value("name", "") << " (" << param.value("type", "")
                << ", default " << param.value("default", Json(nullptr)).dump();
      if (!param.value("allowed", Json::array()).empty()) {
        std::cout << ", allowed " << param["allowed"].dump();
      }
      std::cout << ")\n";
    }
    if (probe.value("hidden_points", 0) > 0) {
      std::cout << "    + " << probe["hidden_points"].get<int64_t>()
                << " hidden point(s), run with --hidden\n";
    }
  }
}

void add_probe_command(CLI::App& app, CommandResult& result) {
  CLI::App* probe = app.add_subcommand(
      "probe", "List or run the probes a subject declares (checks, benches, scenarios)");
  probe->require_subcommand(1);
  auto options = std::make_shared<ProbeOptions>();

  CLI::App* list = probe->add_subcommand("list", "The subject's probes and their parameters");
  list->add_flag("--json", options->json, "print one JSON envelope");
  list->add_option("--timeout", options->timeout_s, "seconds before the subject is killed")
      ->check(CLI::PositiveNumber);
  list->add_option("--memory", options->memory,
                   "SIZE (512M, 2G): kill the subject when its process group's resident memory "
                   "passes it (exit 3)");
  list->add_option("--env", options->pass_env,
                   "NAME or PREFIX*: also pass this variable of loupe's environment to the "
                   "subject (repeatable; docs/security.md lists those always passed)");
  list->add_option("subject", options->subject, "the subject command, after --")->required();
  list->callback([options, &result] {
    result.kind = "probe.list";
    const uint64_t memory =
        options->memory.empty() ? 0 : parse_byte_size("--memory", options->memory);
    const Json list_json =
        probe::list_probes(options->subject, options->timeout_s, memory, options->pass_env);
    if (options->json) {
      Envelope envelope;
      envelope.kind = "probe.list";
      envelope.verdict = Verdict::kNone;
      envelope.data = list_json;
      std::cout << render_envelope(envelope) << "\n";
    } else {
      print_list(list_json);
    }
    result.exit_code = 0;
  });

  CLI::App* run = probe->add_subcommand(
      "run", "Run one probe at one point; print the comparison (checks) or statistics (benches)");
  run->add_option("probe", options->probe, "the probe's name")->required();
  run->add_option("--set", options->sets,
                  "NAME=VALUE parameter (repeatable); NAME=V1,V2,... sweeps it (lists are crossed)")
      ->allow_extra_args(false)
      ->take_all();
  run->add_option("--zip", options->zips,
                  "NAME=V1,V2,...: lists that move together (same length), crossed with --set")
      ->allow_extra_args(false)
      ->take_all();
  run->add_option("--seed", options->seed, "input seed (default: drawn, and recorded)")
      ->check(CLI::NonNegativeNumber);
  run->add_flag("--hidden", options->hidden,
                "run one of the probe's hidden points, drawn at random");
  run->add_option("--hidden-point", options->hidden_point,
                  "run hidden point I (as named in an earlier hidden run's observation)")
      ->check(CLI::NonNegativeNumber);
  run->add_option("--tol", options->tolerances,
                  "METRIC=VALUE: replaces the probe's bound for that metric (repeatable)")
      ->allow_extra_args(false)
      ->take_all();
  run->add_option("--repeat", options->repeat,
                  "checks: run the candidate N more times on the same inputs (determinism; "
                  "default 2, then secret repeats); 0 turns every repeat off, the secret ones too")
      ->check(CLI::Range(0, 1000));
  run->add_option("--threshold", options->threshold,
                  "benches: A/B verdict threshold t (SAME iff the CI lies in [1-t, 1+t])")
      ->check(CLI::Range(0.0, 1.0));
  run->add_option("--precision", options->precision,
                  "benches: target relative CI half-width of the medians (default 0.01)")
      ->check(CLI::PositiveNumber);
  run->add_option("--budget", options->budget_s,
                  "benches: sampling budget in seconds per point (default 2)")
      ->check(CLI::PositiveNumber);
  run->add_option("--round", options->round,
                  "benches: a later round R of a point measured in rounds of whole runs: the "
                  "subject skips what round 0 measured once per point (docs/objective.md)")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}));
  run->add_option("--variants", options->variants,
                  "benches: A,B,...: run only these variants, in this order (the first is the "
                  "baseline of the comparisons; default: every variant the bench declares)");
  run->add_option("--timeout", options->timeout_s,
                  "seconds before the subject's process group is killed (exit 3)")
      ->check(CLI::PositiveNumber);
  run->add_option("--memory", options->memory,
                  "SIZE (512M, 2G): kill the subject when its process group's resident memory "
                  "passes it (exit 3)");
  run->add_flag("--no-hidden", options->no_hidden,
                "checks: do not add the hidden run (a hidden point, or a secret seed)");
  run->add_flag("--no-sandbox", options->no_sandbox,
                "run the subject outside bubblewrap (docs/security.md)");
  run->add_option("--home", options->home,
                  "where observations go (default .loupe/ at the git root)");
  run->add_flag("--json", options->json, "print one JSON envelope");
  run->add_option("--counters", options->counters,
                  "benches: after the verdict, run the candidate variant once more under ncu, "
                  "untimed, and add the counters of the kernels matching REGEX");
  run->add_option("--counters-launches", options->counters_launches,
                  "calls of the counters pass, and launches ncu profiles (default 1)");
  run->add_option("--env", options->pass_env,
                  "NAME or PREFIX*: also pass this variable of loupe's environment to the "
                  "subject (repeatable; docs/security.md lists those always passed)");
  run->add_option("--launch", options->launch,
                  "checks across ranks: a launcher put before the subject, split at spaces; "
                  "{ranks} takes --set ranks=N (\"mpirun -n {ranks} --oversubscribe\"; "
                  "docs/multi-rank.md)");
  run->add_option("subject", options->subject, "the subject command, after --")->required();
  run->callback([options, &result] {
    result.kind = "probe.run";
    probe::RunRequest request;
    request.probe = options->probe;
    request.sets = options->sets;
    if (options->seed >= 0) request.seed = static_cast<uint64_t>(options->seed);
    request.hidden = options->hidden;
    if (options->hidden_point >= 0) request.hidden_point = options->hidden_point;
    if (options->repeat >= 0) request.repeat = options->repeat;
    if (options->precision > 0) request.precision = options->precision;
    if (options->budget_s > 0) request.budget_s = options->budget_s;
    if (options->round > 0) request.round = options->round;
    if (!options->variants.empty()) {
      // Split at every comma, empty names kept: the door refuses them with their position.
      size_t start = 0;
      for (size_t comma; (comma = options->variants.find(',', start)) != std::string::npos;
           start = comma + 1) {
        request.variants.push_back(options->variants.substr(start, comma - start));
      }
      request.variants.push_back(options->variants.substr(start));
    }
    request.timeout_s = options->timeout_s;
    if (!options->memory.empty()) {
      request.memory_limit_bytes = parse_byte_size("--memory", options->memory);
    }
    request.add_hidden_point = !options->no_hidden;
    request.sandbox = !options->no_sandbox;
    request.no_sandbox_reason = "turned off (--no-sandbox)";
    if (!options->home.empty()) request.home = options->home;
    request.subject_command = options->subject;
    {
      std::istringstream words(options->launch);
      for (std::string word; words >> word;) request.launch.push_back(word);
    }
    request.pass_env = options->pass_env;
    request.analyze.tolerances = options->tolerances;
    request.analyze.threshold = options->threshold;
    if (!options->counters.empty()) {
      request.counters = probe::CountersAttachment{options->counters, options->counters_launches};
    } else if (options->counters_launches != 1) {
      throw Error(ErrorCode::kUsage, "--counters-launches needs --counters REGEX",
                  "loupe probe run BENCH --counters KERNEL_REGEX --counters-launches N -- SUBJECT");
    }
    probe::SweepOutcome sweep;
    try {
      sweep = probe::run_sweep(request, options->zips);
    } catch (const probe::SubjectFailure& failure) {
      result.exit_code = report_subject_failure(failure, options->json);
      return;
    }
    // The hidden point's findings that say something (not plain matches), then the guard's.
    std::vector<Finding> hidden_findings;
    Json hidden_runs = Json::array();
    for (const auto& hidden : sweep.hidden) {
      for (const auto& finding : hidden.findings) {
        if (finding.severity != Severity::kInfo) hidden_findings.push_back(finding);
      }
      hidden_runs.push_back(hidden.data);
    }
    hidden_findings.insert(hidden_findings.end(), sweep.findings.begin(), sweep.findings.end());
    auto print_hidden = [&sweep] {
      for (const auto& hidden : sweep.hidden) std::cout << "hidden point: " << hidden.summary;
      for (const auto& finding : sweep.findings) {
        std::cout << "  " << severity_name(finding.severity) << " " << finding.id << ": "
                  << finding.claim << "\n";
      }
    };
    if (sweep.points.size() == 1) {
      const probe::RunOutcome& outcome = sweep.points.front();
      if (options->json) {
        Envelope envelope;
        envelope.kind = "probe.run";
        envelope.verdict = sweep.verdict;
        envelope.findings = outcome.findings;
        envelope.findings.insert(envelope.findings.end(), hidden_findings.begin(),
                                 hidden_findings.end());
        envelope.data = outcome.data;
        if (!sweep.hidden.empty()) envelope.data["hidden_runs"] = hidden_runs;
        std::cout << render_envelope(envelope) << "\n";
      } else {
        std::cout << outcome.summary;
        print_hidden();
      }
      result.exit_code = sweep.exit_code;
      return;
    }
    if (options->json) {
      Envelope envelope;
      envelope.kind = "probe.run";
      envelope.verdict = sweep.verdict;
      Json points = Json::array();
      for (const auto& point : sweep.points) {
        envelope.findings.insert(envelope.findings.end(), point.findings.begin(),
                                 point.findings.end());
        points.push_back(point.data);
      }
      envelope.findings.insert(envelope.findings.end(), hidden_findings.begin(),
                               hidden_findings.end());
      envelope.data["points"] = std::move(points);
      if (!sweep.hidden.empty()) envelope.data["hidden_runs"] = hidden_runs;
      std::cout << render_envelope(envelope) << "\n";
    } else {
      for (const auto& point : sweep.points) std::cout << point.summary;
      print_hidden();
      bool adjusted = false;
      for (const auto& point : sweep.points) {
        for (const auto& record : point.bench_comparisons) {
          if (!adjusted) std::cout << "after false-discovery control across the sweep:\n";
          adjusted = true;
          std::cout << "  " << point.findings[record.finding_index].id << " "
                    << params_to_string(record.context.params) << ": "
                    << point.findings[record.finding_index].claim << "\n";
        }
      }
      std::cout << "sweep: " << sweep.points.size() << " points, " << verdict_name(sweep.verdict)
                << "\n";
    }
    result.exit_code = sweep.exit_code;
  });
}

}  // namespace

LOUPE_REGISTER_COMMAND(40, add_probe_command);

}  // namespace loupe::cli
