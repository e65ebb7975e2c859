#include "evidence/evidence.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "bench/compare.hpp"
#include "ledger/exchange.hpp"
#include "report/model.hpp"

namespace loupe::evidence {
namespace {

std::string number(double value) {
  if (!std::isfinite(value)) return std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf");
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", value);
  return text;
}

std::string shell_quote(const std::string& text) {
  if (!text.empty() && text.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_-./=,:@+") == std::string::npos) {
    return text;
  }
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The objective's path as a command typed in the current folder would name it.
std::string shown_path(const std::string& path) {
  std::error_code error;
  const std::filesystem::path cwd = std::filesystem::current_path(error);
  if (error) return path;
  const std::filesystem::path relative = std::filesystem::path(path).lexically_relative(cwd);
  if (relative.empty() || *relative.begin() == "..") return path;
  return relative.string();
}

Json stored_json(const std::string& text) {
  try {
    Json out = Json::parse(text);
    return out.is_object() ? out : Json::object();
  } catch (const nlohmann::json::exception&) {
    return Json::object();
  }
}

std::string configuration_text(const Json& config) {
  std::string out;
  if (config.contains("name") && config["name"].is_string()) out = config["name"];
  if (config.contains("settings") && config["settings"].is_object()) {
    for (const auto& [key, value] : config["settings"].items()) {
      out += (out.empty() ? "" : " ") + key + "=" +
             (value.is_string() ? value.get<std::string>() : value.dump());
    }
  }
  return out.empty() ? "(no configuration)" : out;
}

std::string commit_text(const ledger::GitState& git) {
  if (git.commit.empty()) return "(no git)";
  return git.commit.substr(0, 12) + (git.dirty ? " (dirty)" : "");
}

bool is_bench_comparison(const Finding& finding) {
  if (finding.layer != Layer::kBench) return false;
  int found = 0;
  for (const auto& [name, value] : finding.evidence.metrics) {
    if (name == "ratio" || name == "ci_low" || name == "ci_high") ++found;
  }
  return found == 3;
}

std::optional<double> metric(const Finding& finding, const std::string& name) {
  for (const auto& [key, value] : finding.evidence.metrics) {
    if (key == name) return value;
  }
  return std::nullopt;
}

// "ratio of medians merged/tiled 0.5027" (or, paired by round, "median of the per-round ratios
// merged/tiled 0.5027"): the variant pair of a bench finding's claim.
std::string comparison_of(const Finding& finding) {
  for (const std::string marker : {"median of the per-round ratios ", "ratio of medians "}) {
    const size_t at = finding.claim.find(marker);
    if (at == std::string::npos) continue;
    const size_t start = at + marker.size();
    const size_t end = finding.claim.find(' ', start);
    return finding.claim.substr(start, end == std::string::npos ? std::string::npos : end - start);
  }
  return "candidate/baseline";
}

// The bench id's last part: bench.<probe>.<verdict>.
std::string verdict_of(const Finding& finding) {
  const size_t dot = finding.id.rfind('.');
  return dot == std::string::npos ? finding.id : finding.id.substr(dot + 1);
}

std::string probe_of(const Finding& finding) {
  if (!finding.where.probe.empty()) return finding.where.probe;
  const size_t first = finding.id.find('.');
  const size_t last = finding.id.rfind('.');
  if (first == std::string::npos || last <= first) return finding.id;
  return finding.id.substr(first + 1, last - first - 1);
}

std::string key_of(const Finding& finding) {
  return probe_of(finding) + "@" + params_to_string(finding.where.params);
}

// Where a finding was made: the same id at the same place is the same statement in two runs.
std::string place_of(const Finding& finding) {
  return finding.id + "|" + finding.where.path + "|" + params_to_string(finding.where.params) +
         "|" + finding.where.thread.value_or("");
}

// An inferred finding of the hypothesis's baseline that its candidate no longer makes: the
// controlled A/B of the hypothesized change removed it, which a correlation alone could not show
// (DESIGN.md's evidence kinds). It becomes verified, saying by which hypothesis and runs.
void verify_removed_inferences(Bundle& bundle, const ledger::RunRecord& baseline,
                               const ledger::RunRecord& candidate, int64_t hypothesis) {
  std::set<std::string> after;
  for (const auto& finding : candidate.findings) after.insert(place_of(finding));
  std::set<std::string> before;
  for (const auto& finding : baseline.findings) before.insert(place_of(finding));
  for (auto* list : {&bundle.trace_findings, &bundle.counter_findings}) {
    for (auto& finding : *list) {
      if (evidence_kind(finding) != EvidenceKind::kInferred) continue;
      const std::string place = place_of(finding);
      if (!before.count(place) || after.count(place)) continue;
      finding.evidence.kind = EvidenceKind::kVerified;
      finding.claim += " [verified: absent from candidate " + candidate.id +
                       ", the A/B of hypothesis H" + std::to_string(hypothesis) +
                       " against baseline " + baseline.id + "]";
      finding.next.clear();
    }
  }
}

Side side_of(const ledger::RunRecord& run, const std::vector<std::string>& repeats,
             const std::string& ledger_argument) {
  Side side;
  side.run_ids.push_back(run.id);
  side.run_ids.insert(side.run_ids.end(), repeats.begin(), repeats.end());
  side.commit = commit_text(run.git);
  side.configuration = configuration_text(stored_json(run.config_json));
  side.command = run_command(run);
  side.show =
      "loupe ledger show " + run.id + (ledger_argument.empty() ? "" : " " + ledger_argument);
  return side;
}

// Per key, the bench values of one side across its runs.
std::map<std::string, BenchValue> bench_values(const std::vector<ledger::RunRecord>& runs,
                                               std::map<std::string, BenchLine>& lines,
                                               std::vector<std::string>& order) {
  std::map<std::string, std::vector<double>> ratios;
  std::map<std::string, BenchValue> out;
  double threshold = 0.02;
  std::map<std::string, double> thresholds;
  for (size_t index = 0; index < runs.size(); ++index) {
    for (const auto& finding : runs[index].findings) {
      if (!is_bench_comparison(finding)) continue;
      std::string comparison = comparison_of(finding);
      std::string key = key_of(finding) + "|" + comparison;
      double ratio = *metric(finding, "ratio");
      double ci_low = *metric(finding, "ci_low");
      double ci_high = *metric(finding, "ci_high");
      std::string verdict = verdict_of(finding);
      int64_t samples_a = static_cast<int64_t>(metric(finding, "n_a").value_or(0));
      int64_t samples_b = static_cast<int64_t>(metric(finding, "n_b").value_or(0));
      // Each run states a comparison the way its gate reads it (docs/formats.md, "Direction"):
      // with another configured variant, the other way round. One line per pair of variants,
      // in the direction the line was first stated.
      if (const size_t slash = comparison.find('/'); slash != std::string::npos) {
        const std::string other_way =
            comparison.substr(slash + 1) + "/" + comparison.substr(0, slash);
        const std::string other_key = key_of(finding) + "|" + other_way;
        if (!lines.count(key) && lines.count(other_key)) {
          key = other_key;
          comparison = other_way;
          ratio = 1 / ratio;
          ci_low = 1 / std::exchange(ci_high, 1 / ci_low);
          verdict = verdict == "faster" ? "slower" : verdict == "slower" ? "faster" : verdict;
          std::swap(samples_a, samples_b);
        }
      }
      if (!lines.count(key)) {
        lines[key] = {probe_of(finding), params_to_string(finding.where.params), comparison,
                      std::nullopt, std::nullopt};
        order.push_back(key);
      }
      ratios[key].push_back(ratio);
      thresholds[key] = metric(finding, "threshold").value_or(threshold);
      if (index == 0 && !out.count(key)) {
        BenchValue value;
        value.ratio = ratio;
        value.ci_low = ci_low;
        value.ci_high = ci_high;
        value.verdict = verdict;
        value.samples_a = samples_a;
        value.samples_b = samples_b;
        value.reproduce = finding.reproduce;
        out[key] = value;
      }
    }
  }
  // More than one run: the median of the runs' ratios and its interval over the runs.
  for (auto& [key, value] : out) {
    const std::vector<double>& values = ratios[key];
    value.runs = static_cast<int64_t>(values.size());
    if (values.size() < 2) continue;
    bench::SummaryOptions options;
    options.seed = 0x65766964;  // fixed: the same runs give the same interval
    const bench::ArmSummary summary = bench::summarize(values, options);
    value.ratio = summary.median;
    value.ci_low = summary.median_ci.low;
    value.ci_high = summary.median_ci.high;
    const bench::Decision decision =
        bench::decide(value.ratio, summary.median_ci, thresholds[key], 0.95);
    value.verdict = std::string(bench::ab_verdict_id(decision.verdict));
    if (static_cast<int64_t>(values.size()) < bench::kMinSamplesForVerdict) {
      value.verdict = "ambiguous";  // too few runs for an interval to decide
    }
  }
  return out;
}

std::map<std::string, CheckValue> check_values(const ledger::RunRecord& run,
                                               std::map<std::string, CheckLine>& lines,
                                               std::vector<std::string>& order) {
  std::map<std::string, CheckValue> out;
  for (const auto& finding : run.findings) {
    if (finding.layer != Layer::kCheck || finding.evidence.metrics.empty()) continue;
    if (!metric(finding, "rms_ratio") && !metric(finding, "max_abs")) continue;
    const std::string key = key_of(finding);
    if (out.count(key)) continue;  // the first (the lead finding) of each point
    if (!lines.count(key)) {
      lines[key] = {probe_of(finding), params_to_string(finding.where.params), std::nullopt,
                    std::nullopt};
      order.push_back(key);
    }
    CheckValue value;
    for (const char* name : {"rms_ratio", "max_abs", "ulp_p99", "nan_count"}) {
      if (auto found = metric(finding, name)) value.metrics.emplace_back(name, *found);
    }
    value.severity = std::string(severity_name(finding.severity));
    value.reproduce = finding.reproduce;
    out[key] = value;
  }
  return out;
}

int severity_rank(Severity severity) {
  return severity == Severity::kFail ? 0 : (severity == Severity::kWarn ? 1 : 2);
}

std::string cell(std::string text, size_t limit = 200) {
  for (char& c : text) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  if (text.size() > limit) text = text.substr(0, limit) + "...";
  std::string out;
  for (char c : text) {
    if (c == '|')
      out += "\\|";
    else
      out += c;
  }
  return out;
}

// Inline code for Markdown: backticks inside become single quotes (a command never needs them).
std::string code(const std::string& text) {
  if (text.empty()) return "-";
  std::string out = text;
  std::replace(out.begin(), out.end(), '`', '\'');
  return "`" + cell(out, 600) + "`";
}

std::string verdict_text(const std::optional<GateVerdict>& verdict) {
  return verdict ? std::string(gate_verdict_name(*verdict)) : std::string("-");
}

std::string bench_text(const std::optional<BenchValue>& value) {
  if (!value) return "-";
  return number(value->ratio) + " [" + number(value->ci_low) + ", " + number(value->ci_high) +
         "] " + value->verdict +
         (value->runs > 1 ? ", " + std::to_string(value->runs) + " runs"
                          : ", 1 run (n " + std::to_string(value->samples_a) + "/" +
                                std::to_string(value->samples_b) + " samples)");
}

std::string check_text(const std::optional<CheckValue>& value) {
  if (!value) return "-";
  std::string out;
  for (const auto& [name, number_value] : value->metrics) {
    out += (out.empty() ? "" : ", ") + name + " " + number(number_value);
  }
  return out + " (" + value->severity + ")";
}

struct Caps {
  size_t gates = 64;
  size_t benches = 40;
  size_t checks = 40;
  size_t findings = 8;
};

std::string markdown_with(const Bundle& bundle, const Caps& caps) {
  std::ostringstream out;
  out << "## loupe evidence: " << bundle.base.run_ids.front() << " → "
      << bundle.candidate.run_ids.front() << " (candidate " << verdict_name(bundle.verdict)
      << ")\n\n";
  out << "| side | run | commit | configuration | produced by | read back |\n"
      << "|---|---|---|---|---|---|\n";
  for (const auto* side : {&bundle.base, &bundle.candidate}) {
    std::string runs = side->run_ids.front();
    if (side->run_ids.size() > 1)
      runs += " + " + std::to_string(side->run_ids.size() - 1) + " runs";
    out << "| " << (side == &bundle.base ? "base" : "candidate") << " | " << runs << " | "
        << side->commit << " | " << cell(side->configuration) << " | " << code(side->command)
        << " | " << code(side->show) << " |\n";
  }
  out << "\nEvery gate's numbers: " << code(bundle.compare_command)
      << "; each row's own command is in its last column.\n";

  auto more = [&](size_t total, size_t shown, const char* what) {
    if (total > shown) {
      out << "\n"
          << (total - shown) << " more " << what
          << " in the HTML bundle (`loupe evidence ... --html FILE`).\n";
    }
  };

  out << "\n### Gates\n| gate | before | after | evidence | key statistic before → after | "
         "reproduce |\n"
      << "|---|---|---|---|---|---|\n";
  size_t shown = 0;
  for (const auto& gate : bundle.gates) {
    if (shown++ >= caps.gates) break;
    const bool changed = gate.before != gate.after;
    out << "| " << (changed ? "**" + cell(gate.name) + "**" : cell(gate.name)) << " | "
        << verdict_text(gate.before) << " | " << verdict_text(gate.after) << " | "
        << evidence_kind_name(gate.kind) << " | " << cell(gate.statistic_before, 80) << " → "
        << cell(gate.statistic_after, 80) << " | " << code(bundle.compare_command) << " |\n";
  }
  more(bundle.gates.size(), std::min(bundle.gates.size(), caps.gates), "gates");

  if (!bundle.benches.empty()) {
    out << "\n### Benches (ratio [95% CI] verdict, runs)\n"
        << "| bench | point | ratio | base | candidate | reproduce (the candidate's, else the "
           "base's) |\n"
        << "|---|---|---|---|---|---|\n";
    shown = 0;
    for (const auto& line : bundle.benches) {
      if (shown++ >= caps.benches) break;
      const std::string reproduce =
          line.after ? line.after->reproduce : (line.before ? line.before->reproduce : "");
      out << "| " << cell(line.probe) << " | " << cell(line.point, 120) << " | "
          << cell(line.comparison) << " | " << bench_text(line.before) << " | "
          << bench_text(line.after) << " | " << code(reproduce) << " |\n";
    }
    more(bundle.benches.size(), std::min(bundle.benches.size(), caps.benches), "bench points");
  }

  if (!bundle.checks.empty()) {
    out << "\n### Checks (errors before and after)\n"
        << "| check | point | base | candidate | reproduce (the candidate's, else the base's) |\n"
        << "|---|---|---|---|---|\n";
    shown = 0;
    for (const auto& line : bundle.checks) {
      if (shown++ >= caps.checks) break;
      const std::string reproduce =
          line.after ? line.after->reproduce : (line.before ? line.before->reproduce : "");
      out << "| " << cell(line.probe) << " | " << cell(line.point, 120) << " | "
          << check_text(line.before) << " | " << check_text(line.after) << " | " << code(reproduce)
          << " |\n";
    }
    more(bundle.checks.size(), std::min(bundle.checks.size(), caps.checks), "check points");
  }

  auto findings = [&](const std::vector<Finding>& list, const char* title) {
    if (list.empty()) return;
    out << "\n### " << title << "\n";
    size_t count = 0;
    for (const auto& finding : list) {
      if (count++ >= caps.findings) break;
      const std::string verify = verification_experiment(finding);
      out << "- " << severity_name(finding.severity) << " "
          << evidence_kind_name(evidence_kind(finding)) << " `" << cell(finding.id, 120)
          << "`: " << cell(finding.claim, 300)
          << (verify.empty() ? "" : " — verify with: " + cell(verify, 200))
          << " — reproduce: " << code(finding.reproduce) << "\n";
    }
    more(list.size(), std::min(list.size(), caps.findings), "findings");
  };
  findings(bundle.trace_findings, "Trace findings");
  findings(bundle.counter_findings, "Counter findings");

  out << "\n### Hypotheses linking the two runs\n";
  if (bundle.hypotheses.empty()) {
    out << "none (`loupe hypothesis add TEXT`, then `link` both runs and `decide`).\n";
  }
  for (const auto& hypothesis : bundle.hypotheses) {
    out << "- H" << hypothesis.id << " (" << hypothesis.status
        << "): " << cell(hypothesis.text, 300)
        << (hypothesis.decision.empty() ? "" : "; decided: " + cell(hypothesis.decision, 300))
        << "; review " << (hypothesis.review_required ? "**required**" : "not required")
        << (hypothesis.review.empty() ? "" : " (" + cell(hypothesis.review, 300) + ")") << " — "
        << code("loupe hypothesis show " + std::to_string(hypothesis.id)) << "\n";
  }
  return out.str();
}

std::string html_cell(const std::string& text) { return report::html_escape(text); }

}  // namespace

std::string run_command(const ledger::RunRecord& run) {
  const Json config = stored_json(run.config_json);
  std::string out = "loupe run " + shell_quote(shown_path(run.objective_path));
  std::string settings;
  if (config.contains("name") && config["name"].is_string()) {
    settings = config["name"].get<std::string>();
  }
  if (config.contains("settings") && config["settings"].is_object() && settings.empty()) {
    for (const auto& [key, value] : config["settings"].items()) {
      settings += (settings.empty() ? "" : ",") + key + "=" +
                  (value.is_string() ? value.get<std::string>() : value.dump());
    }
  }
  if (!settings.empty()) out += " --config " + shell_quote(settings);
  if (config.contains("sets") && config["sets"].is_array()) {
    for (const auto& set : config["sets"]) {
      if (set.is_string()) out += " --set " + shell_quote(set.get<std::string>());
    }
  }
  if (config.contains("only") && config["only"].is_string()) {
    out += " --only " + config["only"].get<std::string>();
  }
  return out;
}

Bundle build_bundle(const ledger::Ledger& ledger, const std::string& base_run,
                    const std::string& candidate_run, const Options& options) {
  auto load = [&](const std::string& id, const std::vector<std::string>& repeats) {
    std::vector<ledger::RunRecord> runs = {ledger.get_run(id)};
    for (const auto& repeat : repeats) runs.push_back(ledger.get_run(repeat));
    return runs;
  };
  const std::vector<ledger::RunRecord> base = load(base_run, options.base_repeats);
  const std::vector<ledger::RunRecord> candidate = load(candidate_run, options.candidate_repeats);

  Bundle bundle;
  bundle.base = side_of(base.front(), options.base_repeats, options.ledger_argument);
  bundle.candidate = side_of(candidate.front(), options.candidate_repeats, options.ledger_argument);
  bundle.compare_command = "loupe ledger compare " + base_run + " " + candidate_run +
                           (options.ledger_argument.empty() ? "" : " " + options.ledger_argument);
  // As `loupe run` decides: gates the configuration left out (not-run) do not count.
  bundle.verdict = Verdict::kNone;
  for (const auto& gate : candidate.front().gates) {
    if (gate.verdict == GateVerdict::kFail) {
      bundle.verdict = Verdict::kFail;
    } else if (gate.verdict == GateVerdict::kInconclusive && bundle.verdict != Verdict::kFail) {
      bundle.verdict = Verdict::kInconclusive;
    } else if (gate.verdict == GateVerdict::kPass && bundle.verdict == Verdict::kNone) {
      bundle.verdict = Verdict::kPass;
    }
  }

  // Gates: the base's in order, then those only the candidate has.
  for (const auto& gate : base.front().gates) {
    GateLine line;
    line.name = gate.name;
    line.before = gate.verdict;
    line.statistic_before = report::key_statistic(gate.name, gate.verdict, gate.statistics_json);
    line.statistic_after = "-";
    bundle.gates.push_back(line);
  }
  for (const auto& gate : candidate.front().gates) {
    auto found = std::find_if(bundle.gates.begin(), bundle.gates.end(),
                              [&](const GateLine& line) { return line.name == gate.name; });
    if (found == bundle.gates.end()) {
      bundle.gates.push_back({gate.name, std::nullopt, std::nullopt, "-", "-", ""});
      found = bundle.gates.end() - 1;
    }
    found->after = gate.verdict;
    found->statistic_after = report::key_statistic(gate.name, gate.verdict, gate.statistics_json);
    found->rule_after = gate.rule;
  }

  std::map<std::string, BenchLine> bench_lines;
  std::vector<std::string> bench_order;
  const auto bench_before = bench_values(base, bench_lines, bench_order);
  const auto bench_after = bench_values(candidate, bench_lines, bench_order);
  for (const auto& key : bench_order) {
    BenchLine line = bench_lines[key];
    if (auto found = bench_before.find(key); found != bench_before.end())
      line.before = found->second;
    if (auto found = bench_after.find(key); found != bench_after.end()) line.after = found->second;
    bundle.benches.push_back(line);
  }

  std::map<std::string, CheckLine> check_lines;
  std::vector<std::string> check_order;
  const auto check_before = check_values(base.front(), check_lines, check_order);
  const auto check_after = check_values(candidate.front(), check_lines, check_order);
  for (const auto& key : check_order) {
    CheckLine line = check_lines[key];
    if (auto found = check_before.find(key); found != check_before.end())
      line.before = found->second;
    if (auto found = check_after.find(key); found != check_after.end()) line.after = found->second;
    bundle.checks.push_back(line);
  }
  // Points whose error changed most first: failing ones before passing ones.
  std::stable_sort(bundle.checks.begin(), bundle.checks.end(),
                   [](const CheckLine& a, const CheckLine& b) {
                     auto failing = [](const CheckLine& line) {
                       return (line.before && line.before->severity == "fail") ||
                              (line.after && line.after->severity == "fail");
                     };
                     return failing(a) && !failing(b);
                   });

  // Trace and counter findings: the candidate's first, then the base's; fail, warn, info.
  for (const auto* runs : {&candidate, &base}) {
    for (const auto& finding : runs->front().findings) {
      if (finding.layer == Layer::kTrace) bundle.trace_findings.push_back(finding);
      if (finding.layer == Layer::kCounters) bundle.counter_findings.push_back(finding);
    }
  }
  for (auto* list : {&bundle.trace_findings, &bundle.counter_findings}) {
    std::stable_sort(list->begin(), list->end(), [](const Finding& a, const Finding& b) {
      return severity_rank(a.severity) < severity_rank(b.severity);
    });
  }

  // Hypotheses that link both runs.
  for (const auto& hypothesis : ledger.list_hypotheses()) {
    bool has_base = false;
    bool has_candidate = false;
    for (const auto& link : hypothesis.links) {
      has_base = has_base || link.run_id == base_run;
      has_candidate = has_candidate || link.run_id == candidate_run;
    }
    if (!has_base || !has_candidate) continue;
    HypothesisLine line;
    line.id = hypothesis.id;
    line.text = hypothesis.text;
    line.status = std::string(ledger::hypothesis_status_name(hypothesis.status));
    if (!hypothesis.decisions.empty()) {
      const ledger::Decision& decision = hypothesis.decisions.back();
      line.decision = std::string(ledger::decision_name(decision.decision)) + " by " +
                      decision.who + ": " + decision.why;
      if (decision.decision == ledger::DecisionKind::kNeedsReview) {
        line.review_required = !decision.approval.has_value();
        for (const auto& trigger : decision.triggers) {
          line.review +=
              (line.review.empty() ? "" : "; ") + trigger.category + ": " + trigger.reason;
        }
        if (decision.approval) line.review += "; approved by " + decision.approval->by;
      }
    }
    bundle.hypotheses.push_back(line);
    // The two runs are this hypothesis's A/B: what changed between them is verified evidence.
    bool base_is_baseline = false;
    bool candidate_is_candidate = false;
    for (const auto& link : hypothesis.links) {
      base_is_baseline =
          base_is_baseline || (link.run_id == base_run && link.role == ledger::LinkRole::kBaseline);
      candidate_is_candidate =
          candidate_is_candidate ||
          (link.run_id == candidate_run && link.role == ledger::LinkRole::kCandidate);
    }
    if (base_is_baseline && candidate_is_candidate) {
      for (auto& gate : bundle.gates) {
        if (gate.before != gate.after) gate.kind = EvidenceKind::kVerified;
      }
      verify_removed_inferences(bundle, base.front(), candidate.front(), hypothesis.id);
    }
  }
  return bundle;
}

std::string render_markdown(const Bundle& bundle, size_t limit) {
  Caps caps;
  std::string out = markdown_with(bundle, caps);
  // Halve every cap until the bundle fits; the HTML keeps every row.
  while (out.size() > limit &&
         (caps.gates > 4 || caps.benches > 4 || caps.checks > 4 || caps.findings > 2)) {
    caps.gates = std::max<size_t>(4, caps.gates / 2);
    caps.benches = std::max<size_t>(4, caps.benches / 2);
    caps.checks = std::max<size_t>(4, caps.checks / 2);
    caps.findings = std::max<size_t>(2, caps.findings / 2);
    out = markdown_with(bundle, caps);
  }
  if (out.size() > limit) {
    const std::string note =
        "\n\n(cut at " + std::to_string(limit) + " characters: the HTML bundle has everything)\n";
    out = out.substr(0, limit - note.size()) + note;
  }
  return out;
}

std::string render_html(const Bundle& bundle) {
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
         "'unsafe-inline'\">\n"
      << "<title>loupe evidence " << html_cell(bundle.base.run_ids.front()) << " → "
      << html_cell(bundle.candidate.run_ids.front()) << "</title>\n"
      << "<style>body{font:14px system-ui,sans-serif;margin:2em;color:#1f2328}"
         "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #d0d7de;"
         "padding:3px 6px;text-align:left;vertical-align:top}code{font-size:12px}"
         ".fail{color:#cf222e}.pass{color:#1a7f37}</style></head><body>\n";
  out << "<h1>loupe evidence: " << html_cell(bundle.base.run_ids.front()) << " → "
      << html_cell(bundle.candidate.run_ids.front()) << " (candidate "
      << verdict_name(bundle.verdict) << ")</h1>\n";
  auto code_cell = [](const std::string& text) {
    return "<td><code>" + html_cell(text.empty() ? "-" : text) + "</code></td>";
  };
  out << "<table><tr><th>side</th><th>runs</th><th>commit</th><th>configuration</th>"
         "<th>produced by</th><th>read back</th></tr>\n";
  for (const auto* side : {&bundle.base, &bundle.candidate}) {
    std::string runs;
    for (const auto& id : side->run_ids) runs += (runs.empty() ? "" : ", ") + id;
    out << "<tr><td>" << (side == &bundle.base ? "base" : "candidate") << "</td><td>"
        << html_cell(runs) << "</td><td>" << html_cell(side->commit) << "</td><td>"
        << html_cell(side->configuration) << "</td>" << code_cell(side->command)
        << code_cell(side->show) << "</tr>\n";
  }
  out << "</table>\n<h2>Gates</h2>\n<table><tr><th>gate</th><th>before</th><th>after</th>"
         "<th>key statistic before</th><th>after</th><th>rule "
         "(after)</th><th>reproduce</th></tr>\n";
  for (const auto& gate : bundle.gates) {
    out << "<tr><td>" << html_cell(gate.name) << "</td><td class=\"" << verdict_text(gate.before)
        << "\">" << verdict_text(gate.before) << "</td><td class=\"" << verdict_text(gate.after)
        << "\">" << verdict_text(gate.after) << "</td><td>" << html_cell(gate.statistic_before)
        << "</td><td>" << html_cell(gate.statistic_after) << "</td><td>"
        << html_cell(gate.rule_after) << "</td>" << code_cell(bundle.compare_command) << "</tr>\n";
  }
  out << "</table>\n";
  if (!bundle.benches.empty()) {
    out << "<h2>Benches</h2>\n<table><tr><th>bench</th><th>point</th><th>ratio</th>"
           "<th>base</th><th>candidate</th><th>reproduce (base)</th><th>reproduce (candidate)"
           "</th></tr>\n";
    for (const auto& line : bundle.benches) {
      out << "<tr><td>" << html_cell(line.probe) << "</td><td>" << html_cell(line.point)
          << "</td><td>" << html_cell(line.comparison) << "</td><td>"
          << html_cell(bench_text(line.before)) << "</td><td>" << html_cell(bench_text(line.after))
          << "</td>" << code_cell(line.before ? line.before->reproduce : "")
          << code_cell(line.after ? line.after->reproduce : "") << "</tr>\n";
    }
    out << "</table>\n";
  }
  if (!bundle.checks.empty()) {
    out << "<h2>Checks</h2>\n<table><tr><th>check</th><th>point</th><th>base</th>"
           "<th>candidate</th><th>reproduce (base)</th><th>reproduce (candidate)</th></tr>\n";
    for (const auto& line : bundle.checks) {
      out << "<tr><td>" << html_cell(line.probe) << "</td><td>" << html_cell(line.point)
          << "</td><td>" << html_cell(check_text(line.before)) << "</td><td>"
          << html_cell(check_text(line.after)) << "</td>"
          << code_cell(line.before ? line.before->reproduce : "")
          << code_cell(line.after ? line.after->reproduce : "") << "</tr>\n";
    }
    out << "</table>\n";
  }
  auto findings = [&](const std::vector<Finding>& list, const char* title) {
    if (list.empty()) return;
    out << "<h2>" << title
        << "</h2>\n<table><tr><th>severity</th><th>evidence</th><th>id</th><th>claim</th>"
           "<th>next</th><th>reproduce</th></tr>\n";
    for (const auto& finding : list) {
      out << "<tr><td>" << severity_name(finding.severity) << "</td><td>"
          << evidence_kind_name(evidence_kind(finding)) << "</td><td>" << html_cell(finding.id)
          << "</td><td>" << html_cell(finding.claim) << "</td><td>" << html_cell(finding.next)
          << "</td>" << code_cell(finding.reproduce) << "</tr>\n";
    }
    out << "</table>\n";
  };
  findings(bundle.trace_findings, "Trace findings");
  findings(bundle.counter_findings, "Counter findings");
  out << "<h2>Hypotheses linking the two runs</h2>\n";
  if (bundle.hypotheses.empty()) out << "<p>none</p>\n";
  for (const auto& hypothesis : bundle.hypotheses) {
    out << "<p>H" << hypothesis.id << " (" << html_cell(hypothesis.status)
        << "): " << html_cell(hypothesis.text)
        << "<br>decision: " << html_cell(hypothesis.decision.empty() ? "none" : hypothesis.decision)
        << "<br>review " << (hypothesis.review_required ? "<b>required</b>" : "not required") << " "
        << html_cell(hypothesis.review) << "<br><code>loupe hypothesis show " << hypothesis.id
        << "</code></p>\n";
  }
  out << "</body></html>\n";
  return out.str();
}

Json bundle_to_json(const Bundle& bundle) {
  auto side_json = [](const Side& side) {
    return Json{{"runs", side.run_ids},
                {"commit", side.commit},
                {"configuration", side.configuration},
                {"command", side.command},
                {"show", side.show}};
  };
  auto optional_verdict = [](const std::optional<GateVerdict>& verdict) {
    return verdict ? Json(std::string(gate_verdict_name(*verdict))) : Json(nullptr);
  };
  auto bench_json = [](const std::optional<BenchValue>& value) -> Json {
    if (!value) return nullptr;
    return Json{
        {"ratio", number_to_json(value->ratio)},
        {"ci", Json::array({number_to_json(value->ci_low), number_to_json(value->ci_high)})},
        {"verdict", value->verdict},
        {"runs", value->runs},
        {"n_a", value->samples_a},
        {"n_b", value->samples_b},
        {"reproduce", value->reproduce}};
  };
  auto check_json = [](const std::optional<CheckValue>& value) -> Json {
    if (!value) return nullptr;
    Json metrics = Json::object();
    for (const auto& [name, number_value] : value->metrics) {
      metrics[name] = number_to_json(number_value);
    }
    return Json{
        {"metrics", metrics}, {"severity", value->severity}, {"reproduce", value->reproduce}};
  };
  Json out = Json::object();
  out["base"] = side_json(bundle.base);
  out["candidate"] = side_json(bundle.candidate);
  out["compare"] = bundle.compare_command;
  Json gates = Json::array();
  for (const auto& gate : bundle.gates) {
    gates.push_back({{"name", gate.name},
                     {"before", optional_verdict(gate.before)},
                     {"after", optional_verdict(gate.after)},
                     {"evidence", std::string(evidence_kind_name(gate.kind))},
                     {"statistic_before", gate.statistic_before},
                     {"statistic_after", gate.statistic_after}});
  }
  out["gates"] = gates;
  Json benches = Json::array();
  for (const auto& line : bundle.benches) {
    benches.push_back({{"probe", line.probe},
                       {"point", line.point},
                       {"comparison", line.comparison},
                       {"before", bench_json(line.before)},
                       {"after", bench_json(line.after)}});
  }
  out["benches"] = benches;
  Json checks = Json::array();
  for (const auto& line : bundle.checks) {
    checks.push_back({{"probe", line.probe},
                      {"point", line.point},
                      {"before", check_json(line.before)},
                      {"after", check_json(line.after)}});
  }
  out["checks"] = checks;
  Json hypotheses = Json::array();
  for (const auto& hypothesis : bundle.hypotheses) {
    hypotheses.push_back({{"id", hypothesis.id},
                          {"text", hypothesis.text},
                          {"status", hypothesis.status},
                          {"decision", hypothesis.decision},
                          {"review_required", hypothesis.review_required},
                          {"review", hypothesis.review}});
  }
  out["hypotheses"] = hypotheses;
  out["trace_findings"] = bundle.trace_findings.size();
  out["counter_findings"] = bundle.counter_findings.size();
  return out;
}

}  // namespace loupe::evidence
