// The terminal and Markdown renderings of the report model.
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "check/compare.hpp"
#include "report/model.hpp"

namespace loupe::report {
namespace {

// A column of `width` characters; a longer text is cut and marked with '~', keeping one space
// before the next column.
std::string fixed_width(std::string text, size_t width) {
  if (text.size() >= width) return text.substr(0, width - 2) + "~ ";
  text.resize(width, ' ');
  return text;
}

std::string layer_text(const std::optional<Layer>& layer) {
  return layer ? std::string(layer_name(*layer)) : "?";
}

std::string header_line(const Header& header) {
  std::string out = "run " + header.run_id + ": " + std::to_string(header.points) + " point(s)";
  if (header.wall_s) out += " in " + check::format_number(*header.wall_s) + " s";
  return out + ", " + header.status;
}

// What the caps left out of the plots, one sentence each.
std::vector<std::string> omissions(const Model& model) {
  std::vector<std::string> out;
  if (model.profiles_omitted > 0) {
    out.push_back(std::to_string(model.profiles_omitted) + " more error profile(s) not drawn");
  }
  if (model.sweeps_omitted > 0) {
    out.push_back(std::to_string(model.sweeps_omitted) + " more bench comparison(s) not drawn");
  }
  if (model.timelines_omitted > 0) {
    out.push_back(std::to_string(model.timelines_omitted) + " more timeline(s) not drawn");
  }
  return out;
}

std::vector<std::pair<std::string, int64_t>> nonzero_stats(const StatsRegistry& stats) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (size_t index = 0; index < static_cast<size_t>(Stat::kCount); ++index) {
    const Stat stat = static_cast<Stat>(index);
    if (stats.count(stat) != 0)
      out.emplace_back(std::string(stat_info(stat).name), stats.count(stat));
  }
  return out;
}

// Markdown: text that must not be read as markup ('<' could open an HTML tag, '|' end a cell).
std::string md_text(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '\\':
      case '`':
      case '*':
      case '_':
      case '[':
      case ']':
      case '<':
      case '|':
        out += '\\';
        out += c;
        break;
      case '\n':
      case '\r':
        out += ' ';
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A code span holding `text` whatever backticks it contains (CommonMark: a longer fence).
std::string md_code(const std::string& text) {
  size_t longest = 0, run = 0;
  for (char c : text) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  std::string flat = text;
  for (auto& c : flat) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  // Inside a table a '|' ends the cell even in a code span (GitHub's rule): escape it.
  std::string escaped;
  for (char c : flat) {
    if (c == '|') escaped += '\\';
    escaped += c;
  }
  const std::string fence(longest + 1, '`');
  const bool pad = !escaped.empty() && (escaped.front() == '`' || escaped.back() == '`');
  return fence + (pad ? " " : "") + escaped + (pad ? " " : "") + fence;
}

}  // namespace

std::string_view gate_legend() {
  return "key statistic: estimate [95% CI], a ratio candidate/baseline (> 1: the candidate is "
         "slower); (t 0.05): the A/B threshold, SAME within 1 ± 0.05 and SLOWER or FASTER beyond "
         "it; n=: the points (or paired runs) the gate decided from";
}

std::string trend_value(const TrendPoint& point) {
  std::string text = check::format_number(point.value);
  if (point.interval) {
    text += " [" + check::format_number(point.interval->low) + ", " +
            check::format_number(point.interval->high) + "]";
  }
  return text;
}

std::string trend_heading(const GateTrend& entry) {
  return entry.gate + " (" + (entry.trend.request.higher_is_better ? "higher" : "lower") +
         " is better; " + std::to_string(entry.trend.points.size()) + " runs" +
         (entry.points_omitted > 0 ? ", " + std::to_string(entry.points_omitted) + " older" : "") +
         ", " + std::to_string(entry.regressions) + " regression" +
         (entry.regressions == 1 ? "" : "s") + ")";
}

std::string trend_left_out(const TrendSection& section) {
  return section.gates_omitted > 0
             ? std::to_string(section.gates_omitted) +
                   " more gate(s) not shown: loupe ledger trend gate:NAME draws any"
             : "";
}

constexpr std::string_view kTrendCaption =
    "each gate's estimate across this objective's recorded runs, in commit order; a regression "
    "is worse than the run before, the intervals apart (without intervals: by more than 5 %)";

std::string render_terminal(const Model& model) {
  std::ostringstream out;
  const Header& header = model.header;
  out << "loupe run " << header.title << " (" << header.objective_path << "), configuration "
      << header.configuration << "\n"
      << header_line(header) << "\n\n";
  out << fixed_width("gate", 32) << fixed_width("layer", 10) << fixed_width("verdict", 14)
      << "key statistic\n";
  for (const auto& gate : model.gates) {
    out << fixed_width(gate.name, 32) << fixed_width(layer_text(gate.layer), 10)
        << fixed_width(verdict_word(gate.verdict), 14) << gate.key_statistic << "\n"
        << "    " << gate.rule << "\n";
  }
  if (model.gates.empty()) {
    out << "(no gates)\n";
  } else {
    out << gate_legend() << "\n";
  }
  if (!model.findings.empty()) out << "\ntop findings\n";
  std::string previous_reproduce;
  for (const auto& finding : model.findings) {
    out << "  " << severity_name(finding.severity) << " " << finding.id << ": " << finding.claim
        << "\n";
    if (finding.reproduce.empty()) continue;
    // Findings of one point or one trace diff share their command: say it once.
    out << "    reproduce: "
        << (finding.reproduce == previous_reproduce ? "(as above)" : finding.reproduce) << "\n";
    previous_reproduce = finding.reproduce;
  }
  if (model.findings_total > model.findings.size()) {
    out << "  (" << model.findings_total - model.findings.size()
        << " more findings: `loupe ledger show " << header.run_id << "` lists all)\n";
  }
  if (!model.trends.gates.empty()) {
    out << "\ntrends: " << kTrendCaption << "\n";
    for (const auto& entry : model.trends.gates) {
      out << "  " << trend_heading(entry) << "\n";
      for (const auto& point : entry.trend.points) {
        out << (point.regression ? "  ! " : "    ") << point.commit.substr(0, 12) << "  "
            << point.run_id << "  " << trend_value(point)
            << (point.regression ? "  REGRESSION" : "")
            << (point.run_id == header.run_id ? "  (this run)" : "");
        for (const auto& annotation : point.annotations) out << "  " << annotation;
        out << "\n";
      }
    }
    if (!trend_left_out(model.trends).empty()) out << "  " << trend_left_out(model.trends) << "\n";
  }
  const auto omitted = omissions(model);
  const auto stats = nonzero_stats(model.stats);
  if (!model.notes.empty() || !omitted.empty() || !stats.empty()) out << "\nnotes\n";
  for (const auto& note : model.notes) out << "  " << note << "\n";
  for (const auto& note : omitted) out << "  " << note << " (see the HTML report)\n";
  for (const auto& [name, count] : stats) {
    out << "  trace input repaired or dropped: " << name << " " << count << "\n";
  }
  if (!header.subject_failure.empty())
    out << "\nsubject failure: " << header.subject_failure << "\n";
  if (!header.ledger_file.empty()) {
    out << "\nrecorded in " << header.ledger_file << " (loupe ledger show " << header.run_id
        << ")\n";
  }
  return out.str();
}

std::string render_markdown(const Model& model) {
  std::ostringstream out;
  const Header& header = model.header;
  std::string verdict(verdict_name(header.verdict));
  for (auto& c : verdict) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  out << "### loupe run " << md_text(header.title) << ": " << verdict << "\n\n";
  out << "Run " << md_code(header.run_id) << " of " << md_code(header.objective_path)
      << ", configuration " << md_code(header.configuration) << ": " << header.points
      << " point(s)";
  if (header.wall_s) out << " in " << check::format_number(*header.wall_s) << " s";
  out << ", " << md_text(header.status);
  if (!header.git.empty()) out << ", commit " << md_code(header.git);
  out << ".\n\n";

  if (model.gates.empty()) {
    out << "No gates.\n";
  } else {
    out << "| gate | layer | verdict | key statistic | rule |\n|---|---|---|---|---|\n";
    for (const auto& gate : model.gates) {
      out << "| " << md_text(gate.name) << " | " << layer_text(gate.layer) << " | **"
          << verdict_word(gate.verdict) << "** | " << md_text(gate.key_statistic) << " | "
          << md_text(gate.rule) << " |\n";
    }
    out << "\n" << md_text(std::string(gate_legend())) << "\n";
  }

  if (!model.findings.empty()) {
    out << "\n#### Top findings\n\n";
    std::string previous_reproduce;
    for (const auto& finding : model.findings) {
      out << "- **" << severity_name(finding.severity) << "** " << md_code(finding.id) << ": "
          << md_text(finding.claim) << "\n";
      if (!finding.next.empty()) out << "  - next: " << md_text(finding.next) << "\n";
      if (finding.reproduce.empty()) continue;
      out << "  - reproduce: "
          << (finding.reproduce == previous_reproduce ? "as above" : md_code(finding.reproduce))
          << "\n";
      previous_reproduce = finding.reproduce;
    }
    if (model.findings_total > model.findings.size()) {
      out << "\n"
          << model.findings_total - model.findings.size()
          << " more findings: " << md_code("loupe ledger show " + header.run_id) << " lists all.\n";
    }
  }

  if (!model.profiles.empty()) {
    out << "\n#### Error profiles of failing checks\n\n";
    for (const auto& profile : model.profiles) {
      out << "- " << md_code(profile.probe + " " + profile.point) << " output "
          << md_code(profile.output) << " along " << md_code(profile.axis) << ": "
          << md_text(profile.sentence) << "\n";
    }
  }
  if (!model.sweeps.empty()) {
    out << "\n#### Bench comparisons\n\n"
        << "| bench | comparison | point | ratio | CI | verdict |\n|---|---|---|---|---|---|\n";
    for (const auto& sweep : model.sweeps) {
      for (const auto& point : sweep.points) {
        out << "| " << md_text(sweep.probe) << " | " << md_text(sweep.comparison) << " | "
            << md_text(point.point.empty() ? "default" : point.point) << " | "
            << check::format_number(point.ratio) << " | [" << check::format_number(point.ci_low)
            << ", " << check::format_number(point.ci_high) << "] | " << md_text(point.verdict)
            << " (band ±" << check::format_number(sweep.threshold * 100) << "%) |\n";
      }
      if (sweep.points_omitted > 0) {
        out << "| " << md_text(sweep.probe) << " | " << md_text(sweep.comparison) << " | "
            << sweep.points_omitted << " more point(s) not shown | | | |\n";
      }
    }
  }
  if (!model.timelines.empty()) {
    out << "\n#### Scenario timelines\n\n";
    for (const auto& timeline : model.timelines) {
      out << "- " << md_code(timeline.probe + " " + timeline.point) << ": "
          << md_text(timeline.caption) << "\n";
    }
  }
  if (!model.trends.gates.empty()) {
    out << "\n#### Trends\n\n"
        << md_text(std::string(kTrendCaption)) << ".\n\n"
        << "| gate | commit | run | estimate [CI] | |\n|---|---|---|---|---|\n";
    for (const auto& entry : model.trends.gates) {
      for (const auto& point : entry.trend.points) {
        std::vector<std::string> marks;
        if (point.regression) marks.push_back("**regression**");
        if (point.run_id == header.run_id) marks.push_back("this run");
        for (const auto& annotation : point.annotations) marks.push_back(md_text(annotation));
        std::string mark_text;
        for (const auto& mark : marks) mark_text += (mark_text.empty() ? "" : "; ") + mark;
        out << "| " << md_text(entry.gate) << " | " << md_code(point.commit.substr(0, 12)) << " | "
            << md_code(point.run_id) << " | " << md_text(trend_value(point)) << " | " << mark_text
            << " |\n";
      }
    }
    out << "\n";
    for (const auto& entry : model.trends.gates)
      out << "- " << md_text(trend_heading(entry)) << "\n";
    if (!trend_left_out(model.trends).empty()) {
      out << "- " << md_text(trend_left_out(model.trends)) << "\n";
    }
  }
  const auto omitted = omissions(model);
  const auto stats = nonzero_stats(model.stats);
  if (!model.notes.empty() || !omitted.empty() || !stats.empty()) out << "\n#### Notes\n\n";
  for (const auto& note : model.notes) out << "- " << md_text(note) << "\n";
  for (const auto& note : omitted) out << "- " << md_text(note) << " (see the HTML report)\n";
  for (const auto& [name, count] : stats) {
    out << "- trace input repaired or dropped: " << md_code(name) << " " << count << "\n";
  }
  if (!header.subject_failure.empty()) {
    out << "\n**Subject failure:** " << md_text(header.subject_failure) << "\n";
  }
  out << "\n"
      << md_code("loupe report " + header.run_id + " --html FILE") << " renders the plots.\n";
  return out.str();
}

}  // namespace loupe::report
