// run_objective and run_probe: the long tools. Both call the operations the CLI calls
// (gate::run_and_record, probe::run_probe) and stop when the call is cancelled.
#include <algorithm>
#include <cstdio>

#include "core/limits.hpp"
#include "gate/recorded_run.hpp"
#include "mcp/access.hpp"
#include "mcp/tools.hpp"
#include "probe/runner.hpp"

namespace loupe::mcp {
namespace {

constexpr size_t kConciseFindings = 3;
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
    envelope.findings = lead_findings(run.outcome, kConciseFindings, &envelope.truncated);
    Json gates = Json::array();
    for (const auto& gate : run.outcome.gates) {
      Json row = {{"name", gate.name},
                  {"layer", std::string(layer_name(gate.layer))},
                  {"verdict", std::string(gate_verdict_name(gate.verdict))},
                  {"statistic", gate::key_statistic(gate)}};
      if (gate.verdict != GateVerdict::kPass) row["rule"] = gate.rule;
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
  const probe::RunOutcome outcome = probe::run_probe(request);
  if (context.cancelled != nullptr && context.cancelled->load()) {
    throw Error(ErrorCode::kSubject, "run_probe: cancelled", "");
  }
  Envelope envelope;
  envelope.kind = "probe.run";
  envelope.verdict = outcome.verdict;
  envelope.findings = outcome.findings;
  const size_t limit = detail ? kDetailFindings : kConciseFindings;
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
      "Runs an objective's cascade (checks, benches, scenarios), records the run, answers the "
      "gate verdicts and the findings behind failures. Long: progress, cancellable.";
  run.params = {
      {"objective", ParamType::kString, "objective TOML, e.g. examples/kda/smoke.toml", true},
      {"config", ParamType::kString, "[[deployment]] name, K=V,... or NAME,K=V"},
      {"only", ParamType::kString, "run this layer only", false, {"check", "bench", "scenario"}},
      {"all", ParamType::kBoolean, "run every layer even after one fails"},
      {"sets", ParamType::kNameValues, "probe parameter overrides, e.g. {\"T\": 2048}"},
      home_param(),
      ledger_param(),
      detail_param("20 findings, every gate's statistics, every task")};
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
      "Runs one probe of a subject at one point in a child process: a check's comparison or a "
      "bench's A/B verdict. Not recorded.";
  probe.params = {
      {"probe", ParamType::kString, "probe name, e.g. cp_vs_nocp", true},
      {"subject", ParamType::kStringArray, "command line, e.g. [\"build/bin/kda\", \"probe\"]",
       true},
      {"sets", ParamType::kNameValues, "parameters, e.g. {\"T\": 2048, \"shards\": 4}"},
      {"seed", ParamType::kInteger, "input seed (default: drawn, recorded)", false, {}, 0.0},
      {"hidden", ParamType::kBoolean, "run a hidden point drawn at random"},
      {"repeat",
       ParamType::kInteger,
       "checks: rerun the candidate N times (determinism)",
       false,
       {},
       0.0,
       1000.0},
      {"tolerances", ParamType::kNameValues,
       "metric bounds replacing the probe's, e.g. {\"rms_ratio\": 1e-5}"},
      {"timeout_s", ParamType::kNumber, "kill the subject after (default 600)", false, {}, 0.001},
      home_param(),
      detail_param("20 findings")};
  probe.annotations = {false, true, false, false};
  probe.long_running = true;
  probe.envelope_kind = "probe.run";
  probe.narrow_hint = "set the point's parameters with sets, or read one output with diff_tensors";
  probe.call = run_probe;
  tools.push_back(std::move(probe));
}

}  // namespace loupe::mcp
