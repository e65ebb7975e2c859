// run_objective, run_probe and bisect: the long tools. Each calls the operation its CLI command
// calls (gate::run_and_record, probe::run_point, bisect::run_bisect) and stops when cancelled.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string_view>

#include "bisect/bisect.hpp"
#include "core/limits.hpp"
#include "gate/objective.hpp"
#include "gate/recorded_run.hpp"
#include "mcp/access.hpp"
#include "mcp/tools.hpp"
#include "probe/runner.hpp"

namespace loupe::mcp {
namespace {

constexpr size_t kRunConciseFindings = 3;
constexpr size_t kDetailFindings = 20;

std::string progress_line(const gate::Progress& progress) {
  const gate::PointResult& point = *progress.point;
  char line[512];
  std::snprintf(line, sizeof(line), "[%zu/%zu] %s %s %s: %s in %.2f s; ~%.1f s left",
                progress.index, progress.total, std::string(layer_name(point.layer)).c_str(),
                point.entry.c_str(), params_to_string(point.params).c_str(),
                std::string(verdict_name(point.verdict)).c_str(), point.wall_s,
                progress.remaining_s);
  return line;
}

// The findings an agent needs first: the first finding of each failing, then inconclusive, gate,
// then the cascade's own order (gate findings, then the points' fail and warn findings).
std::vector<Finding> lead_findings(const gate::CascadeResult& outcome, size_t limit,
                                   bool* truncated) {
  std::vector<Finding> out;
  auto add = [&out, limit](const Finding& finding) {
    if (out.size() < limit && std::find(out.begin(), out.end(), finding) == out.end()) {
      out.push_back(finding);
    }
  };
  // A failing guard first: the results the gates judged cannot be believed.
  for (const Finding* guard : gate::failed_guards(outcome)) add(*guard);
  // The most specific failing gate first (gate/causes.hpp: the cause before the symptom).
  for (const auto& cause : outcome.causes.causes) {
    for (const auto& gate : outcome.gates) {
      if (gate.name == cause && !gate.findings.empty()) add(gate.findings.front());
    }
  }
  for (GateVerdict wanted : {GateVerdict::kFail, GateVerdict::kInconclusive}) {
    for (const auto& gate : outcome.gates) {
      if (gate.verdict == wanted && !gate.findings.empty()) add(gate.findings.front());
    }
  }
  bool more = false;
  for (const auto& finding : gate::top_findings(outcome, limit + out.size() + 1, &more)) {
    add(finding);
  }
  // Every distinct finding the cascade produced, to say whether some were left out.
  size_t total = 0;
  std::vector<Finding> seen;
  auto count = [&](const Finding& finding) {
    if (std::find(seen.begin(), seen.end(), finding) == seen.end()) {
      seen.push_back(finding);
      ++total;
    }
  };
  for (const auto& gate : outcome.gates) {
    for (const auto& finding : gate.findings) count(finding);
  }
  for (const auto& point : outcome.points) {
    for (const auto& finding : point.findings) {
      if (finding.severity != Severity::kInfo) count(finding);
    }
  }
  *truncated = more || total > out.size();
  return out;
}

Json run_objective(const Json& arguments, CallContext& context) {
  const bool detail = flag_argument(arguments, "detail");
  gate::RunRequest request;
  request.objective = resolve_path(context.settings, *string_argument(arguments, "objective"));
  request.config = string_argument(arguments, "config").value_or("");
  if (auto only = string_argument(arguments, "only")) request.only = parse_layer(*only);
  request.all = flag_argument(arguments, "all");
  request.sets = strings_argument(arguments, "sets");
  request.home = home_dir(context.settings, arguments);
  if (auto ledger = string_argument(arguments, "ledger")) {
    request.ledger = resolve_path(context.settings, *ledger);
  }
  request.cwd = context.settings.cwd;

  gate::CascadeOptions options;
  options.interrupted = context.cancelled;
  options.progress = [&context](const gate::Progress& progress) {
    context.progress(static_cast<double>(progress.index), static_cast<double>(progress.total),
                     progress_line(progress));
  };
  context.progress(0, std::nullopt, "planning " + request.objective.string());
  const gate::RecordedRun run = gate::run_and_record(request, options);

  Envelope envelope = gate::run_envelope(run, kDetailFindings);
  if (!detail) {
    envelope.findings = lead_findings(run.outcome, kRunConciseFindings, &envelope.truncated);
    Json gates = Json::array();
    for (const auto& gate : run.outcome.gates) {
      Json row = {{"name", gate.name},
                  {"layer", std::string(layer_name(gate.layer))},
                  {"verdict", std::string(gate_verdict_name(gate.verdict))},
                  {"statistic", gate::key_statistic(gate)}};
      if (!gate.statistics.candidate.empty() && gate.statistics.estimate) {
        // The statistic is candidate / baseline.
        row["ratio_of"] = "candidate/baseline";
        row["candidate"] = gate.statistics.candidate;
        row["baseline"] = gate.statistics.baseline;
      }
      if (gate.verdict != GateVerdict::kPass) row["rule"] = gate.rule;
      for (const auto& link : run.outcome.causes.follows) {
        if (link.gate == gate.name) row["follows_from"] = link.cause;
      }
      Json ids = Json::array();
      for (const auto& finding : gate.findings) {
        if (std::find(ids.begin(), ids.end(), finding.id) == ids.end()) ids.push_back(finding.id);
      }
      row["finding_ids"] = std::move(ids);
      gates.push_back(std::move(row));
    }
    envelope.data["gates"] = std::move(gates);
    envelope.data.erase("tasks");
    envelope.data["points"] = run.outcome.points.size();
  }
  Json out = envelope_to_json(envelope);
  if (out["truncated"].get<bool>()) {
    out["data"]["truncation"] = "showing " + std::to_string(envelope.findings.size()) +
                                " findings; show_run {run: \"" + run.run_id +
                                "\", detail: true} lists every finding" +
                                (detail ? "" : ", and run_objective with detail: true every task");
  }
  out["data"]["next"] = "match_skeletons {run: \"" + run.run_id +
                        "\"} ranks the optimisation skeletons whose conditions these findings meet";
  return out;
}

Json run_probe(const Json& arguments, CallContext& context) {
  const bool detail = flag_argument(arguments, "detail");
  probe::RunRequest request;
  request.probe = *string_argument(arguments, "probe");
  request.sets = strings_argument(arguments, "sets");
  request.variants = names_argument(arguments, "variants");
  if (auto seed = integer_argument(arguments, "seed")) request.seed = static_cast<uint64_t>(*seed);
  request.hidden = flag_argument(arguments, "hidden");
  if (auto repeat = integer_argument(arguments, "repeat"))
    request.repeat = static_cast<int>(*repeat);
  if (auto timeout = number_argument(arguments, "timeout_s")) request.timeout_s = *timeout;
  request.home = home_dir(context.settings, arguments);
  request.subject_command = strings_argument(arguments, "subject");
  if (request.subject_command.empty()) {
    throw Error(ErrorCode::kUsage, "run_probe: argument 'subject' is an empty command",
                "give the subject's command line, e.g. [\"build/bin/kda\", \"probe\"]");
  }
  check_probe_name(request.probe, "run_probe: argument 'probe'");
  // A client names subjects; only those the project declares may run (access.hpp).
  check_subject_access(
      policy_of(context.settings), request.subject_command,
      context.settings.cwd.empty() ? std::filesystem::current_path() : context.settings.cwd);
  request.analyze.tolerances = strings_argument(arguments, "tolerances");
  context.progress(0, std::nullopt, "running probe " + request.probe);
  // The one door: the same hidden run and guards as `loupe probe run` (probe/runner.hpp).
  const probe::RunOutcome outcome = probe::fold_point(probe::run_point(request));
  if (context.cancelled != nullptr && context.cancelled->load()) {
    throw Error(ErrorCode::kSubject, "run_probe: cancelled", "");
  }
  Envelope envelope;
  envelope.kind = "probe.run";
  envelope.verdict = outcome.verdict;
  envelope.findings = outcome.findings;
  const size_t limit = detail ? kDetailFindings : kRunConciseFindings;
  if (envelope.findings.size() > limit) {
    envelope.findings.resize(limit);
    envelope.truncated = true;
  }
  envelope.data = outcome.data;
  envelope.data["observation"] = outcome.observation_dir.string();
  Json out = envelope_to_json(envelope);
  if (envelope.truncated) {
    out["data"]["truncation"] =
        "showing " + std::to_string(limit) + " of " + std::to_string(outcome.findings.size()) +
        " findings; pass detail: true for up to " + std::to_string(kDetailFindings);
  }
  return out;
}

// A revision as git names one (a hash, a branch, HEAD~3, v1.2^{commit}); never an option: bisect
// passes it to git as an argument, and "--output=FILE" would be one.
std::string revision_argument(const Json& arguments, const std::string& name) {
  const std::string revision = *string_argument(arguments, name);
  const bool valid = !revision.empty() && revision.size() <= 200 && revision.front() != '-' &&
                     std::all_of(revision.begin(), revision.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) ||
                              std::string_view("._/~^@{}-").find(c) != std::string_view::npos;
                     });
  if (!valid) {
    throw Error(ErrorCode::kUsage,
                "bisect: argument '" + name + "' is \"" + revision.substr(0, 200) +
                    "\", not a git revision",
                "give a commit hash, branch, tag or HEAD~N: letters, digits and ._/~^@{}- , not "
                "starting with '-'");
  }
  return revision;
}

// The per-round values of every A/B step: the answer is the verdicts, ratios and intervals
// (`loupe bisect --json` keeps the samples).
void drop_round_values(Json& node) {
  if (node.is_object()) {
    node.erase("good_values");
    node.erase("step_values");
    for (auto& [key, value] : node.items()) drop_round_values(value);
  } else if (node.is_array()) {
    for (auto& value : node) drop_round_values(value);
  }
}

Json bisect_commits(const Json& arguments, CallContext& context) {
  bisect::Request request;
  request.objective = resolve_path(context.settings, *string_argument(arguments, "objective"));
  request.gate = *string_argument(arguments, "gate");
  request.good = revision_argument(arguments, "good");
  request.bad = revision_argument(arguments, "bad");
  if (auto max_builds = integer_argument(arguments, "max_builds")) request.max_builds = *max_builds;
  // A client may not send a shell command (access.hpp): the builds are the objective's [build]
  // command, which the project wrote, as run_objective runs only the subject it declares.
  if (!gate::parse_objective_file(request.objective).build) {
    throw Error(ErrorCode::kUsage,
                "bisect: " + request.objective.string() +
                    " has no [build] table, and a client may not send a build command",
                "add [build] command = \"...\" (how a checkout is built; docs/objective.md) to the "
                "objective, or run loupe bisect --build CMD on the command line");
  }
  request.home = home_dir(context.settings, arguments);
  request.cwd = context.settings.cwd;
  request.interrupted = context.cancelled;
  request.command_line = "mcp bisect";
  // Progress has no total: the steps a search takes depend on its verdicts.
  double events = 0;
  request.progress = [&context, &events](const std::string& line) {
    context.progress(++events, std::nullopt, line);
  };
  context.progress(0, std::nullopt, "bisect " + request.good + ".." + request.bad);
  const bisect::Outcome outcome = bisect::run_bisect(request);
  Envelope envelope;
  envelope.kind = "bisect";
  envelope.verdict = outcome.verdict;
  envelope.findings = outcome.findings;
  envelope.data = outcome.data;
  drop_round_values(envelope.data);
  return envelope_to_json(envelope);
}

}  // namespace

Param home_param() { return {"home", ParamType::kString, ""}; }

Param ledger_param() { return {"ledger", ParamType::kString, ""}; }

Param detail_param(const std::string& what) {
  return {"detail", ParamType::kBoolean, "true: " + what};
}

void add_run_tools(std::vector<Tool>& tools) {
  Tool run;
  run.name = "run_objective";
  run.description =
      "Runs an objective's cascade and records it: gate verdicts and the findings behind "
      "failures. Long, cancellable.";
  run.params = {
      {"objective", ParamType::kString, "e.g. examples/kda/smoke.toml", true},
      {"config", ParamType::kString, "[[deployment]] name, K=V,... or NAME,K=V"},
      {"only", ParamType::kString, "run this layer only", false, {"check", "bench", "scenario"}},
      {"all", ParamType::kBoolean, "go on past a failing layer"},
      {"sets", ParamType::kNameValues, "probe parameter overrides, e.g. {\"T\": 2048}"},
      home_param(),
      ledger_param(),
      detail_param("20 findings, gate statistics, tasks")};
  // Runs the subject an objective declares: a program that may change anything its user can.
  run.annotations = {false, true, false, false};
  run.long_running = true;
  run.envelope_kind = "run";
  run.narrow_hint =
      "run one layer with only, or read the run's findings with show_run and compare_runs";
  run.call = run_objective;
  tools.push_back(std::move(run));

  Tool probe;
  probe.name = "run_probe";
  probe.description =
      "One probe at one point in a child process: a check's comparison or a bench's A/B "
      "verdict. Not recorded.";
  probe.params = {
      {"probe", ParamType::kString, "e.g. cp_vs_nocp", true},
      {"subject", ParamType::kStringArray, "command line, e.g. [\"build/bin/kda\", \"probe\"]",
       true},
      {"sets", ParamType::kNameValues, "e.g. {\"T\": 2048, \"shards\": 4}"},
      {"variants", ParamType::kNameList, "benches: these, in order (first: baseline)"},
      {"seed", ParamType::kInteger, "default: drawn, recorded", false, {}, 0.0},
      {"hidden", ParamType::kBoolean, "run a hidden point drawn at random"},
      {"repeat",
       ParamType::kInteger,
       "checks: rerun the candidate N times",
       false,
       {},
       0.0,
       1000.0},
      {"tolerances", ParamType::kNameValues, "replace the probe's, e.g. {\"rms_ratio\": 1e-5}"},
      {"timeout_s", ParamType::kNumber, "default 600", false, {}, 0.001},
      home_param(),
      detail_param("20 findings")};
  probe.annotations = {false, true, false, false};
  probe.long_running = true;
  probe.envelope_kind = "probe.run";
  probe.narrow_hint = "set the point's parameters with sets, or read one output with diff_tensors";
  probe.call = run_probe;
  tools.push_back(std::move(probe));

  Tool bisect;
  bisect.name = "bisect";
  bisect.description =
      "First commit in good..bad where a gate goes bad (A/B per step), built by the objective's "
      "[build]. Long.";
  bisect.params = {{"objective", ParamType::kString, "", true},
                   {"gate", ParamType::kString, "", true},
                   {"good", ParamType::kString, "", true},
                   {"bad", ParamType::kString, "", true},
                   {"max_builds", ParamType::kInteger, "", false, {}, 1.0},
                   home_param()};
  // Builds and runs what the objective declares, and adds git worktrees under the home.
  bisect.annotations = {false, true, false, false};
  bisect.long_running = true;
  bisect.envelope_kind = "bisect";
  bisect.narrow_hint = "show_run {run} reads the recorded result";
  bisect.call = bisect_commits;
  tools.push_back(std::move(bisect));
}

}  // namespace loupe::mcp
