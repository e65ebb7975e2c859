// The short, read-only tools: tensor diff, trace analysis and diff, and the ledger's runs. Each
// calls the operation its CLI command calls and answers the same envelope.
#include <algorithm>

#include "check/diff.hpp"
#include "core/json.hpp"
#include "ledger/exchange.hpp"
#include "ledger/ledger.hpp"
#include "mcp/tools.hpp"
#include "trace/analyze/analyze.hpp"
#include "trace/import/import.hpp"

namespace loupe::mcp {
namespace {

constexpr size_t kConciseFindings = 5;

Json diff_tensors(const Json& arguments, CallContext& context) {
  check::DiffRequest request;
  request.a = resolve_path(context.settings, *string_argument(arguments, "a"));
  request.b = resolve_path(context.settings, *string_argument(arguments, "b"));
  if (auto oracle = string_argument(arguments, "oracle")) {
    request.oracle = resolve_path(context.settings, *oracle);
  }
  request.name = string_argument(arguments, "name");
  request.axes = names_argument(arguments, "axes");
  request.along = string_argument(arguments, "along");
  for (const auto& text : strings_argument(arguments, "tolerances")) {
    request.bounds.push_back(check::parse_bound(text));
  }
  request.report_only = flag_argument(arguments, "report_only");
  request.dims = strings_argument(arguments, "dims");
  request.parallel = string_argument(arguments, "parallel");
  request.parallel_b = string_argument(arguments, "parallel_b");
  const check::DiffResult result = check::run_diff(request);
  Json envelope = Json::parse(check::render_diff_json(result, request));
  if (!flag_argument(arguments, "detail") && envelope["findings"].size() > kConciseFindings) {
    const size_t total = envelope["findings"].size();
    envelope["findings"].erase(envelope["findings"].begin() + kConciseFindings,
                               envelope["findings"].end());
    envelope["truncated"] = true;
    envelope["data"]["truncation"] = "showing " + std::to_string(kConciseFindings) + " of " +
                                     std::to_string(total) +
                                     " findings; pass detail: true, or name one tensor";
  }
  return envelope;
}

trace::AnalyzeRequest analyze_request(const Json& arguments) {
  trace::AnalyzeRequest request;
  for (const auto& text : strings_argument(arguments, "classes")) {
    request.classes.push_back(trace::parse_class(text));
  }
  if (auto overlap = string_argument(arguments, "overlap")) {
    const size_t comma = overlap->find(',');
    if (comma == std::string::npos || comma == 0 || comma + 1 == overlap->size()) {
      throw Error(ErrorCode::kUsage, "overlap '" + *overlap + "' is not A,B",
                  "name two classes defined in classes, e.g. compute,transfer");
    }
    request.overlap = std::make_pair(overlap->substr(0, comma), overlap->substr(comma + 1));
  }
  request.window_class = string_argument(arguments, "window").value_or("");
  request.gap_threshold_ns = trace::parse_duration_ns(
      "gap_threshold", string_argument(arguments, "gap_threshold").value_or("100us"));
  request.iteration = string_argument(arguments, "iteration").value_or("");
  request.detail = flag_argument(arguments, "detail");
  return request;
}

std::string quote(const std::string& text) {
  if (text.find_first_of(" '\"$&|;<>()*?[]\\") == std::string::npos) return text;
  std::string out = "'";
  for (char character : text) {
    out += character == '\'' ? std::string("'\\''") : std::string(1, character);
  }
  return out + "'";
}

// The CLI command that gives the same answer.
std::string trace_reproduce(const std::string& verb, const std::vector<std::string>& files,
                            const Json& arguments) {
  std::string line = "loupe trace " + verb;
  for (const auto& file : files) line += " " + quote(file);
  for (const auto& text : strings_argument(arguments, "classes")) line += " --class " + quote(text);
  if (auto overlap = string_argument(arguments, "overlap")) line += " --overlap " + quote(*overlap);
  if (auto window = string_argument(arguments, "window")) line += " --window " + quote(*window);
  if (auto gap = string_argument(arguments, "gap_threshold")) {
    line += " --gap-threshold " + quote(*gap);
  }
  if (auto iteration = string_argument(arguments, "iteration")) {
    line += " --iteration " + quote(*iteration);
  }
  return line;
}

Json analyze_trace(const Json& arguments, CallContext& context) {
  const trace::AnalyzeRequest request = analyze_request(arguments);
  std::vector<std::string> files;
  for (const auto& file : strings_argument(arguments, "files")) {
    files.push_back(resolve_path(context.settings, file).string());
  }
  if (files.empty()) {
    throw Error(ErrorCode::kUsage, "analyze_trace: argument 'files' is empty",
                "name one or more trace files (loupe binary, Chrome/Kineto JSON, .gz)");
  }
  Envelope envelope = trace::analyze(trace::load_traces(files), request);
  for (Finding& finding : envelope.findings) {
    finding.reproduce = trace_reproduce("analyze", files, arguments);
  }
  return envelope_to_json(envelope);
}

Json diff_traces(const Json& arguments, CallContext& context) {
  const trace::AnalyzeRequest request = analyze_request(arguments);
  const std::string a = resolve_path(context.settings, *string_argument(arguments, "a")).string();
  const std::string b = resolve_path(context.settings, *string_argument(arguments, "b")).string();
  Envelope envelope = trace::diff(trace::load_traces({a}), trace::load_traces({b}), request);
  for (Finding& finding : envelope.findings) {
    finding.reproduce = trace_reproduce("diff", {a, b}, arguments);
  }
  return envelope_to_json(envelope);
}

// Reading tools never create a ledger, a schema or a journal as a side effect (read-only open).
ledger::Ledger open_existing(const ServerSettings& settings, const Json& arguments) {
  const auto path = ledger_file(settings, arguments);
  if (!std::filesystem::exists(path)) {
    throw Error(ErrorCode::kUsage, "no ledger at " + path.string(),
                "run_objective records runs there; pass home or ledger to read another");
  }
  return ledger::Ledger::open_read_only(path);
}

Json make_envelope(const std::string& kind, Verdict verdict, std::vector<Finding> findings,
                   Json data) {
  Envelope envelope;
  envelope.kind = kind;
  envelope.verdict = verdict;
  envelope.findings = std::move(findings);
  envelope.data = std::move(data);
  return envelope_to_json(envelope);
}

Json list_runs(const Json& arguments, CallContext& context) {
  const auto path = ledger_file(context.settings, arguments);
  const int64_t limit = integer_argument(arguments, "limit").value_or(20);
  const int64_t offset = integer_argument(arguments, "offset").value_or(0);
  std::vector<ledger::RunSummary> runs;
  int64_t total = 0;
  if (std::filesystem::exists(path)) {
    const ledger::Ledger ledger = ledger::Ledger::open_read_only(path);
    runs = ledger.list_runs(limit, offset);
    total = ledger.count_runs();
  }
  Json data = ledger::run_list_to_json(runs, total, offset);
  data["ledger"] = path.string();
  return make_envelope("ledger.list", Verdict::kNone, {}, std::move(data));
}

// Fail findings first, then warn, then info; the ledger's order within each.
std::vector<Finding> by_severity(std::vector<Finding> findings) {
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    return static_cast<int>(a.severity) < static_cast<int>(b.severity);
  });
  return findings;
}

Json show_run(const Json& arguments, CallContext& context) {
  const bool detail = flag_argument(arguments, "detail");
  const std::string run_id = *string_argument(arguments, "run");
  const ledger::RunRecord run = open_existing(context.settings, arguments).get_run(run_id);
  Json data = {{"run", ledger::run_to_json(run)}};
  data["run"].erase("findings");  // they are the envelope's findings
  std::vector<Finding> findings = by_severity(run.findings);
  bool truncated = false;
  if (!detail) {
    Json& record = data["run"];
    const size_t dirty = record["git"]["dirty_paths"].size();
    record["git"]["dirty_paths"] = dirty;
    record.erase("environment");
    record["observations"] = record["observations"].size();
    for (auto& gate : record["gates"]) gate.erase("statistics");
    if (findings.size() > kConciseFindings) {
      findings.resize(kConciseFindings);
      truncated = true;
    }
  }
  Json out =
      make_envelope("ledger.show", ledger::run_verdict(run), std::move(findings), std::move(data));
  if (truncated) {
    out["truncated"] = true;
    out["data"]["truncation"] = "showing " + std::to_string(kConciseFindings) + " of " +
                                std::to_string(run.findings.size()) +
                                " findings (fail first); pass detail: true for all, with the "
                                "environment, gate statistics and observation paths";
  }
  return out;
}

Json compare_runs(const Json& arguments, CallContext& context) {
  const ledger::Ledger ledger = open_existing(context.settings, arguments);
  const auto comparison =
      ledger::compare_runs(ledger.get_run(*string_argument(arguments, "run_a")),
                           ledger.get_run(*string_argument(arguments, "run_b")));
  Json data = ledger::comparison_to_json(comparison);
  if (!flag_argument(arguments, "detail")) {
    // Concise: the ids and claims of what appeared or disappeared; detail gives whole findings.
    for (const char* side : {"appeared", "disappeared"}) {
      Json compact = Json::array();
      for (const auto& finding : data["findings"][side]) {
        compact.push_back({{"id", finding["id"]},
                           {"severity", finding["severity"]},
                           {"claim", finding["claim"]}});
      }
      data["findings"][side] = std::move(compact);
    }
  }
  return make_envelope("ledger.compare", Verdict::kNone, {}, std::move(data));
}

Tool read_only_tool(std::string name, std::string kind) {
  Tool tool;
  tool.name = std::move(name);
  tool.envelope_kind = std::move(kind);
  tool.annotations = {true, false, true, false};
  return tool;
}

std::vector<Param> analysis_params() {
  return {{"classes", ParamType::kStringArray,
           "NAME=SELECTOR; & joins name:REGEX, cat:C, thread:X, stream:X, track:X, "
           "kind:thread|gpu_stream"},
          {"overlap", ParamType::kString, "A,B: time of class A under class B"},
          {"window", ParamType::kString, "CLASS: also per instance of it"},
          {"gap_threshold", ParamType::kString, "shortest gap shown (default 100us)"},
          {"iteration", ParamType::kString, "ranges for the critical path (ProfilerStep)"},
          detail_param("every finding and row")};
}

}  // namespace

void add_inspect_tools(std::vector<Tool>& tools) {
  Tool diff = read_only_tool("diff_tensors", "diff");
  diff.description =
      "Compares tensors (.npy, .safetensors, folders; rank-<r>/ joined by dims, "
      "step-<s>/ aligned): first divergence, worst coordinate, error profile. Fails "
      "past tolerances or when nothing matches.";
  diff.params = {
      {"a", ParamType::kString, "candidate file or directory", true},
      {"b", ParamType::kString, "reference, like a", true},
      {"oracle", ParamType::kString, "oracle (e.g. fp64), like b"},
      {"name", ParamType::kString, "compare only this tensor"},
      {"axes", ParamType::kNameList, "axis names, e.g. [\"B\", \"T\", \"H\", \"V\"]"},
      {"along", ParamType::kString, "profile the error along this axis"},
      {"tolerances", ParamType::kNameValues, "metric bounds, e.g. {\"rms_ratio\": 1e-5}"},
      {"report_only", ParamType::kBoolean, "report, never fail (verdict none)"},
      {"dims", ParamType::kStringArray, "e.g. 'b t(cp,zigzag) h(tp) d' or NAME=SPEC"},
      {"parallel", ParamType::kString, "groups over rank-<r>/, first fastest, e.g. tp=2,cp=4"},
      {"parallel_b", ParamType::kString, "b's groups if not a's"},
      detail_param("every finding")};
  diff.narrow_hint = "compare one tensor with name";
  diff.call = diff_tensors;
  tools.push_back(std::move(diff));

  Tool analyze = read_only_tool("analyze_trace", "trace.analyze");
  analyze.description =
      "Breakdown, overlap, lock holders and waiters, gaps of one workload's traces (loupe, "
      "Chrome/Kineto JSON, .gz).";
  analyze.params = {{"files", ParamType::kStringArray, "trace files of one workload", true}};
  for (auto& param : analysis_params()) analyze.params.push_back(std::move(param));
  analyze.narrow_hint = "select fewer slices with classes, or raise gap_threshold";
  analyze.call = analyze_trace;
  tools.push_back(std::move(analyze));

  Tool trace_diff = read_only_tool("diff_traces", "trace.diff");
  trace_diff.description = "Compares trace B with baseline A: breakdown, overlap, locks, gaps.";
  trace_diff.params = {{"a", ParamType::kString, "baseline trace", true},
                       {"b", ParamType::kString, "trace B", true}};
  for (auto& param : analysis_params()) {
    // The same arguments as analyze_trace's: described once, there.
    if (param.name != "detail") param.description = "as in analyze_trace";
    trace_diff.params.push_back(std::move(param));
  }
  trace_diff.narrow_hint = "select fewer slices with classes";
  trace_diff.call = diff_traces;
  tools.push_back(std::move(trace_diff));

  Tool list = read_only_tool("list_runs", "ledger.list");
  list.description = "Recorded runs, newest first, with gate counts.";
  list.params = {
      home_param(),
      ledger_param(),
      {"limit", ParamType::kInteger, "runs per page (default 20)", false, {}, 1.0, 100.0},
      {"offset", ParamType::kInteger, "runs to skip", false, {}, 0.0}};
  list.narrow_hint = "page with limit and offset";
  list.call = list_runs;
  tools.push_back(std::move(list));

  Tool show = read_only_tool("show_run", "ledger.show");
  show.description =
      "One recorded run: status, configuration, gate verdicts and rules, findings (fail first).";
  show.params = {{"run", ParamType::kString, "", true},
                 home_param(),
                 ledger_param(),
                 detail_param("every finding, environment, gate statistics")};
  show.narrow_hint =
      "findings are ordered fail first; compare_runs shows only what changed between two runs, "
      "and `loupe ledger show RUN --json` on the command line lists every finding";
  show.call = show_run;
  tools.push_back(std::move(show));

  Tool compare = read_only_tool("compare_runs", "ledger.compare");
  compare.description =
      "Gates that flipped, findings that appeared or went, from baseline run A to B.";
  compare.params = {{"run_a", ParamType::kString, "baseline run", true},
                    {"run_b", ParamType::kString, "run compared with it", true},
                    home_param(),
                    ledger_param(),
                    detail_param("whole findings")};
  compare.narrow_hint = "read one run's findings with show_run";
  compare.call = compare_runs;
  tools.push_back(std::move(compare));
}

}  // namespace loupe::mcp
