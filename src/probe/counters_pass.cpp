// A bench point's counters pass: the subject once more under ncu, untimed (counters_pass.hpp).
#include "probe/counters_pass.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "bench/compare.hpp"
#include "core/stats_registry.hpp"
#include "counters/analyze.hpp"
#include "counters/envelope.hpp"
#include "counters/ncu.hpp"
#include "counters/profile.hpp"

namespace loupe::probe {
namespace {

namespace fs = std::filesystem;

std::string pct_text(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f %%", value);
  return buffer;
}

// Whole byte counts in full ("16384", not "1.638e+04"), other numbers to four digits.
std::string number_text(double value) {
  char buffer[48];
  const bool whole = std::abs(value) >= 1e4 && std::abs(value) < 1e15 && value == std::floor(value);
  std::snprintf(buffer, sizeof buffer, whole ? "%.0f" : "%.4g", value);
  return buffer;
}

std::string shell_quote(const std::string& text) {
  if (!text.empty() && text.find_first_of(" '\"$&|;<>()*?[]\\{}`!#~") == std::string::npos) {
    return text;
  }
  std::string out = "'";
  for (char character : text)
    out += character == '\'' ? std::string("'\\''") : std::string(1, character);
  return out + "'";
}

Json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::kSubject, "cannot read " + path.string());
  std::stringstream text;
  text << in.rdbuf();
  try {
    return Json::parse(text.str());
  } catch (const nlohmann::json::exception& error) {
    throw Error(ErrorCode::kInput, path.string() + ": not valid JSON: " + json_error_text(error));
  }
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw Error(ErrorCode::kSubject, "cannot write " + path.string());
}

// The state B is in, said after its comparison: the binding limit and what it leaves to gain.
std::string bound_state(const counters::BoundSummary& bound, const std::string& kernel) {
  if (bound.limit == "latency") {
    return "latency-bound (" + kernel + ", ncu: no unit reaches " +
           pct_text(counters::kBoundThresholdPct) + " of its peak, highest " + bound.top + " " +
           pct_text(bound.pct) + "): more independent work in flight is the lever";
  }
  return bound.limit + "-bound at " + pct_text(bound.pct) + " of peak (" + kernel + ", ncu)" +
         (bound.pct >= 85 ? ": little left to gain" : ": room left before that limit");
}

// The group that stands for the timed call: the most time in the pass (median × launches).
const counters::KernelGroup* dominant_group(const std::vector<counters::KernelGroup>& groups) {
  const counters::KernelGroup* best = nullptr;
  double best_time = -1;
  for (const auto& group : groups) {
    const double time = group.get(counters::Quantity::kDurationNs).value_or(0) *
                        static_cast<double>(group.launches.size());
    if (time > best_time) {
      best = &group;
      best_time = time;
    }
  }
  return best;
}

// `loupe probe run ... --counters R --counters-launches N -- SUBJECT`: the point's reproduce line
// with the counters options before the separator.
std::string counters_reproduce(const RunOutcome& outcome, const CountersAttachment& ask) {
  std::string line;
  for (const auto& finding : outcome.findings) {
    if (!finding.reproduce.empty()) {
      line = finding.reproduce;
      break;
    }
  }
  const std::string options = " --counters " + shell_quote(ask.kernel_regex) +
                              " --counters-launches " + std::to_string(ask.launches);
  const size_t separator = line.find(" -- ");
  if (separator == std::string::npos) return line + options;
  return line.substr(0, separator) + options + line.substr(separator);
}

}  // namespace

std::string counters_clause(const counters::BoundSummary& bound, const std::string& kernel,
                            bench::AbVerdict verdict, const std::string& variant) {
  const std::string state = bound_state(bound, kernel);
  return verdict == bench::AbVerdict::kFaster ? ", and now " + state
                                              : "; " + variant + " is " + state;
}

void attach_counters(const RunRequest& request, uint64_t seed, RunOutcome& outcome) {
  const CountersAttachment& ask = *request.counters;
  if (outcome.data.value("kind", std::string()) != "bench") {
    throw Error(ErrorCode::kUsage,
                "--counters: probe '" + request.probe + "' is a " +
                    outcome.data.value("kind", std::string("probe")) + "; expected a bench",
                "counters attach to a bench's timed call");
  }
  if (outcome.data.contains("skipped")) {
    outcome.summary += "  counters: not measured: the bench skipped this point\n";
    return;
  }
  const fs::path observation_file = outcome.observation_dir / "observation.json";
  const Json observation = read_json(observation_file);
  const Json bench = observation.value("bench", Json::object());
  const Json variant_names = bench.value("variants", Json::array());
  if (variant_names.empty() || !variant_names.back().is_string()) {
    throw Error(ErrorCode::kInput, observation_file.string() + ": bench.variants is empty");
  }
  // The candidate: the last variant (B of an A/B bench), each compared with the first.
  const std::string variant = variant_names.back().get<std::string>();

  const fs::path dir = outcome.observation_dir / "counters";
  fs::create_directories(dir);
  // The exact point, every parameter given, so the pass runs what was timed; a hidden point's
  // values are in the observation too.
  std::vector<std::string> command = request.subject_command;
  command.insert(command.end(), {"run", request.probe});
  const Json params = observation.value("params", Json::object());
  for (const auto& [name, value] : params.items()) {
    command.insert(
        command.end(),
        {"--set", name + "=" + value_to_string(value_from_json(value, "params." + name))});
  }
  command.insert(command.end(),
                 {"--seed", std::to_string(seed), "--counters-pass", std::to_string(ask.launches),
                  "--counters-variant", variant, "--out", (dir / "pass").string(), "--json"});
  counters::ProfileRequest profile_request;
  profile_request.command = std::move(command);
  profile_request.kernel_regex = ask.kernel_regex;
  profile_request.launch_count = ask.launches;
  profile_request.report = dir / "report";
  const fs::path ncu = counters::find_ncu();
  const fs::path report = counters::profile_command(ncu, profile_request);
  const counters::Pages pages = counters::import_report(ncu, report);
  // Kept as CSV next to the report: `loupe counters` reads them again without ncu, and so does
  // apply_counters when the point is analysed again where it finally lies.
  write_text(dir / "details.csv", pages.details);
  write_text(dir / "raw.csv", pages.raw);
  Json pass = Json::object();
  pass["variant"] = variant;
  pass["report"] = report.filename().string();
  pass["ncu_argv"] = counters::profile_argv(ncu, profile_request);
  write_text(dir / kCountersPassFile, pass.dump(1) + "\n");
  apply_counters(request, outcome);
}

void apply_counters(const RunRequest& request, RunOutcome& outcome) {
  const CountersAttachment& ask = *request.counters;
  const fs::path dir = outcome.observation_dir / "counters";
  const fs::path observation_file = outcome.observation_dir / "observation.json";
  // A point the bench skipped has no pass to apply.
  if (!fs::exists(dir / kCountersPassFile)) return;
  const Json pass = read_json(dir / kCountersPassFile);
  Json observation = read_json(observation_file);
  const Json bench = observation.value("bench", Json::object());
  const Json params = observation.value("params", Json::object());
  const std::string variant = pass.value("variant", std::string());
  const auto read_page = [&](const char* name) {
    std::ifstream in(dir / name);
    if (!in) throw Error(ErrorCode::kInput, "cannot read " + (dir / name).string());
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  counters::Pages pages;
  pages.details = read_page("details.csv");
  pages.raw = read_page("raw.csv");

  StatsRegistry stats;
  counters::Profile profile;
  counters::parse_ncu_csv(pages.details, (dir / "details.csv").string(), profile, stats);
  counters::parse_ncu_csv(pages.raw, (dir / "raw.csv").string(), profile, stats);
  counters::AnalyzeOptions options;
  options.kernel_filter = Pattern::compile(ask.kernel_regex, "--counters");
  options.kernel_pattern = ask.kernel_regex;
  const double declared = bench.value("bytes_per_call", 0.0);
  if (declared > 0) {
    options.declared.push_back({*options.kernel_filter, ask.kernel_regex, declared});
  }
  options.reproduce = counters_reproduce(outcome, ask);
  const counters::Analysis analysis = counters::analyze(profile, options);

  Json data = Json::object();
  data["kernel"] = ask.kernel_regex;
  data["launches"] = ask.launches;
  data["variant"] = variant;
  data["report"] = (dir / pass.value("report", std::string("report.ncu-rep"))).string();
  data["files"] = {(dir / "details.csv").string(), (dir / "raw.csv").string()};
  data["ncu_argv"] = pass.value("ncu_argv", Json::array());
  Json kernels = Json::array();
  for (const auto& group : analysis.groups) kernels.push_back(counters::group_to_json(group));
  data["kernels"] = std::move(kernels);

  std::vector<Finding> added = analysis.findings;
  std::vector<std::string> lines;
  lines.push_back("  counters (ncu, variant " + variant + ", " + std::to_string(ask.launches) +
                  " untimed call(s), kernels matching '" + ask.kernel_regex + "'):");

  // The clause each comparison of B gains.
  const counters::KernelGroup* group = dominant_group(analysis.groups);
  const auto bound = group ? counters::bound_of(*group) : std::nullopt;
  if (bound) {
    data["bound"] = {{"kernel", group->short_name}, {"limit", bound->limit}, {"pct", bound->pct}};
    for (auto& record : outcome.bench_comparisons) {
      if (record.context.name_b != variant) continue;
      record.counters_clause =
          counters_clause(*bound, group->short_name, record.comparison.verdict, variant);
      if (record.finding_index < outcome.findings.size()) {
        outcome.findings[record.finding_index].claim += record.counters_clause;
      }
    }
  }

  // The roofline guard on measured bytes: DRAM bytes read and written per launch, summed over
  // the matched kernels (each taken as launched once per call, which the regex should ensure).
  double measured = 0;
  bool have_measured = false;
  for (const auto& matched : analysis.groups) {
    const auto read = matched.get(counters::Quantity::kDramBytesRead);
    const auto write = matched.get(counters::Quantity::kDramBytesWrite);
    if (!read && !write) continue;
    measured += read.value_or(0) + write.value_or(0);
    have_measured = true;
  }
  Finding base;
  base.layer = Layer::kBench;
  base.where.subject = request.subject_command.empty()
                           ? ""
                           : fs::path(request.subject_command.front()).filename().string();
  base.where.probe = request.probe;
  base.where.path = variant;
  for (const auto& [name, value] : params.items()) {
    base.where.params.emplace_back(name, value_from_json(value, "params." + name));
  }
  base.evidence.files = {observation_file.string(), (dir / "raw.csv").string()};
  base.reproduce = options.reproduce;
  if (have_measured) {
    data["measured_dram_bytes_per_call"] = measured;
    if (declared > 0) {
      const double ratio = measured / declared;
      data["bytes_ratio"] = ratio;
      if (std::abs(ratio - 1.0) > kBytesRatioTolerance) {
        Finding finding = base;
        finding.id = "bench." + request.probe + ".guard.bytes_ratio";
        finding.severity = Severity::kWarn;
        finding.claim = "variant " + variant + " declares " + number_text(declared) +
                        " bytes per call but its kernels moved " + number_text(measured) +
                        " DRAM bytes per call (ncu): " + number_text(ratio) +
                        "x the declared, beyond the ±" + number_text(kBytesRatioTolerance * 100) +
                        " % tolerance";
        finding.next = ratio < 1 ? "the body declares traffic it does not move (or the data stays "
                                   "in L2): correct set_bytes_per_call, or check the timed call "
                                   "does the work"
                                 : "the body moves more than it declares: count every buffer "
                                   "read and written in set_bytes_per_call";
        finding.evidence.metrics = {{"declared_bytes_per_call", declared},
                                    {"measured_bytes_per_call", measured},
                                    {"bytes_ratio", ratio}};
        added.push_back(std::move(finding));
      }
    }
    const Json roofline = bench.value("roofline", Json(nullptr));
    const Json summaries = outcome.data.value("summaries", Json::object());
    const Json summary = summaries.value(variant, Json::object());
    const double median = summary.value("median_s", 0.0);
    // Only a device timer measured the device's own rate; a CPU ceiling says nothing of DRAM
    // bytes a GPU moved.
    if (roofline.is_object() && roofline.contains("device") && median > 0 &&
        roofline.value("read_bytes_per_s", 0.0) > 0) {
      const double rate = roofline.value("read_bytes_per_s", 0.0);
      const double margin = roofline.value("read_margin", 1.0);
      const double implied = measured / median;
      // The declared bytes' judgement of this variant gives way to the measured one.
      const std::string roofline_id = "bench." + request.probe + ".guard.roofline";
      for (auto& finding : outcome.findings) {
        if (finding.id != roofline_id || finding.where.path != variant ||
            finding.claim.find(" bytes per call") == std::string::npos) {
          continue;
        }
        finding.severity = Severity::kInfo;
        finding.claim = "superseded by the measured DRAM bytes (" + number_text(measured) +
                        " per call, ncu): " + finding.claim;
      }
      data["roofline"] = {
          {"implied_bytes_per_s", implied}, {"device_bytes_per_s", rate}, {"margin", margin}};
      if (implied > rate * margin) {
        Finding finding = base;
        finding.id = roofline_id;
        finding.severity = Severity::kFail;
        finding.claim = "variant " + variant + " moved " + number_text(measured) +
                        " DRAM bytes per call (measured by ncu) in " + number_text(median * 1e9) +
                        " ns: " + number_text(implied) + " B/s, " + number_text(implied / rate) +
                        "x what the device (" + roofline.value("device", std::string()) +
                        ") reaches (" + number_text(rate) +
                        " B/s): the timed call cannot be doing that work";
        finding.next =
            "check that the timed call is the one profiled and that it completes "
            "inside the timer";
        finding.evidence.metrics = {{"implied_per_s", implied},
                                    {"measured_per_s", rate},
                                    {"margin", margin},
                                    {"measured_bytes_per_call", measured}};
        added.push_back(std::move(finding));
      }
    }
  }

  for (const auto& finding : added) {
    lines.push_back("    " + std::string(severity_name(finding.severity)) + " " + finding.id +
                    ": " + finding.claim);
  }
  outcome.findings.insert(outcome.findings.end(), added.begin(), added.end());
  bool failed = false;
  for (const auto& finding : outcome.findings)
    failed = failed || finding.severity == Severity::kFail;
  if (failed) {
    outcome.verdict = Verdict::kFail;
    outcome.exit_code = 1;
  } else if (outcome.verdict == Verdict::kFail) {
    // The only failure was the declared-bytes roofline, now judged on measured bytes.
    outcome.verdict = Verdict::kPass;
    outcome.exit_code = 0;
  }
  // The clause is in the comparison findings the summary printed above; restate them.
  for (const auto& record : outcome.bench_comparisons) {
    if (record.counters_clause.empty() || record.finding_index >= outcome.findings.size()) continue;
    lines.push_back("    " + outcome.findings[record.finding_index].id + ": " +
                    outcome.findings[record.finding_index].claim);
  }
  for (const auto& line : lines) outcome.summary += line + "\n";
  outcome.data["counters"] = data;

  Json findings = Json::array();
  for (const auto& finding : outcome.findings) findings.push_back(finding_to_json(finding));
  observation["findings"] = std::move(findings);
  observation["counters"] = std::move(data);
  write_text(observation_file, observation.dump(1) + "\n");
}

}  // namespace loupe::probe
