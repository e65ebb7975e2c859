#include "report/trend.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/json.hpp"
#include "core/process.hpp"
#include "report/model.hpp"

namespace loupe::report {
namespace {

std::string trend_number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", value);
  return text;
}

std::string trend_coordinate(double value) {
  if (!std::isfinite(value)) value = 0;
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", value);
  return text;
}

std::string git_lines(const std::filesystem::path& repo, const std::vector<std::string>& args,
                      const std::string& what) {
  ProcessSpec spec;
  spec.argv = {"git", "-C", repo.empty() ? "." : repo.string()};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.timeout = std::chrono::minutes(2);
  const ProcessResult result = run_process(spec);
  if (!result.succeeded()) {
    throw Error(ErrorCode::kUsage,
                what + ": git " + result.describe() + ": " + result.stderr_tail(3, 300),
                "run it inside the repository whose runs the ledger holds");
  }
  return result.stdout_text;
}

std::optional<double> metric_of(const Finding& finding, const std::string& name) {
  for (const auto& [key, value] : finding.evidence.metrics) {
    if (key == name) return value;
  }
  return std::nullopt;
}

std::string probe_of(const Finding& finding) {
  if (!finding.where.probe.empty()) return finding.where.probe;
  const size_t first = finding.id.find('.');
  const size_t last = finding.id.rfind('.');
  if (first == std::string::npos || last <= first) return "";
  return finding.id.substr(first + 1, last - first - 1);
}

bool holds_point(const Finding& finding,
                 const std::vector<std::pair<std::string, std::string>>& wanted) {
  for (const auto& [key, text] : wanted) {
    bool found = false;
    for (const auto& [name, value] : finding.where.params) {
      if (name == key && value_to_string(value) == text) found = true;
    }
    if (!found) return false;
  }
  return true;
}

bool worse(double value, double previous, bool higher_is_better) {
  return higher_is_better ? value < previous : value > previous;
}

}  // namespace

Trend build_trend(const ledger::Ledger& ledger, const TrendRequest& request) {
  if (request.metric.empty() || request.metric == "gate:") {
    throw Error(ErrorCode::kUsage, "trend: METRIC is empty",
                "name a finding metric (ratio, rms_ratio, wall_s, ...) or gate:NAME");
  }
  std::vector<std::pair<std::string, std::string>> wanted;
  for (const auto& text : request.points) {
    const size_t equals = text.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == text.size()) {
      throw Error(ErrorCode::kUsage, "--point '" + text + "': expected K=V",
                  "for example --point batch=32");
    }
    wanted.emplace_back(text.substr(0, equals), text.substr(equals + 1));
  }
  Trend trend;
  trend.request = request;

  // The history: commit -> its place, oldest first.
  std::vector<std::string> args = {"rev-list", "--topo-order", "--reverse", "HEAD"};
  std::string since_commit;
  if (!request.since.empty()) {
    since_commit = git_lines(request.repo, {"rev-parse", "--verify", request.since + "^{commit}"},
                             "--since " + request.since);
    while (!since_commit.empty() && since_commit.back() == '\n') since_commit.pop_back();
    args.back() = since_commit + "..HEAD";
  }
  std::map<std::string, size_t> order;
  size_t place = 0;
  if (!since_commit.empty()) order[since_commit] = place++;
  std::istringstream lines(git_lines(request.repo, args, "listing the history of HEAD"));
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) order.emplace(line, place++);
  }
  trend.history =
      request.since.empty() ? "the history of HEAD" : "from " + request.since + " to HEAD";

  const bool gate_metric = request.metric.rfind("gate:", 0) == 0;
  const std::string gate_name = gate_metric ? request.metric.substr(5) : "";
  struct Ordered {
    size_t place;
    TrendPoint point;
  };
  std::vector<Ordered> found;
  const auto summaries = ledger.list_runs(static_cast<int64_t>(request.max_runs));
  trend.runs_read = summaries.size();
  std::map<std::string, std::vector<std::string>> annotations;
  for (const auto& hypothesis : ledger.list_hypotheses()) {
    for (const auto& link : hypothesis.links) {
      if (link.role != ledger::LinkRole::kCandidate) continue;
      std::string text = "H" + std::to_string(hypothesis.id) + " " +
                         std::string(ledger::hypothesis_status_name(hypothesis.status)) + ": " +
                         hypothesis.text.substr(0, 80);
      annotations[link.run_id].push_back(text);
    }
  }
  for (const auto& summary : summaries) {
    if (summary.status != ledger::RunStatus::kCompleted) {
      ++trend.runs_without_value;
      continue;
    }
    if (!request.objective_path.empty() && summary.objective_path != request.objective_path) {
      continue;
    }
    const ledger::RunRecord run = ledger.get_run(summary.id);
    if (!request.config_json.empty() && run.config_json != request.config_json) continue;
    const auto at = order.find(run.git.commit);
    if (run.git.commit.empty() || at == order.end()) {
      ++trend.runs_off_history;
      continue;
    }
    TrendPoint point;
    point.run_id = run.id;
    point.commit = run.git.commit;
    point.started_at = run.started_at;
    point.reproduce = "loupe ledger show " + run.id;
    bool has_value = false;
    if (gate_metric) {
      for (const auto& gate : run.gates) {
        if (gate.name != gate_name) continue;
        Json statistics;
        try {
          statistics = Json::parse(gate.statistics_json);
        } catch (const nlohmann::json::exception&) {
          continue;
        }
        if (!statistics.is_object() || !statistics.contains("estimate") ||
            !statistics["estimate"].is_number()) {
          continue;
        }
        ++point.matches;
        if (has_value) continue;
        point.value = statistics["estimate"].get<double>();
        const Json& interval = statistics.contains("interval") ? statistics["interval"] : Json();
        if (interval.is_array() && interval.size() == 2 && interval[0].is_number() &&
            interval[1].is_number()) {
          point.interval = Interval{interval[0].get<double>(), interval[1].get<double>()};
        }
        point.where = "gate " + gate.name;
        has_value = true;
      }
    } else {
      for (const auto& finding : run.findings) {
        if (!request.probe.empty() && probe_of(finding) != request.probe) continue;
        if (!holds_point(finding, wanted)) continue;
        const auto value = metric_of(finding, request.metric);
        if (!value) continue;
        ++point.matches;
        if (has_value) continue;
        point.value = *value;
        const auto low = metric_of(finding, "ci_low");
        const auto high = metric_of(finding, "ci_high");
        if (request.metric == "ratio" && low && high) point.interval = Interval{*low, *high};
        point.where = finding.id + " " + params_to_string(finding.where.params);
        has_value = true;
      }
    }
    if (!has_value) {
      ++trend.runs_without_value;
      continue;
    }
    point.annotations = annotations[run.id];
    found.push_back({at->second, point});
  }
  std::stable_sort(found.begin(), found.end(), [](const Ordered& a, const Ordered& b) {
    if (a.place != b.place) return a.place < b.place;
    return a.point.started_at < b.point.started_at;
  });
  for (auto& entry : found) {
    TrendPoint& point = entry.point;
    if (!trend.points.empty()) {
      const TrendPoint& previous = trend.points.back();
      if (point.interval && previous.interval) {
        point.regression = request.higher_is_better ? point.interval->high < previous.interval->low
                                                    : point.interval->low > previous.interval->high;
      } else if (previous.value != 0) {
        const double change = (point.value - previous.value) / std::fabs(previous.value);
        point.regression = worse(point.value, previous.value, request.higher_is_better) &&
                           std::fabs(change) > request.threshold;
      }
    }
    trend.points.push_back(std::move(point));
  }
  return trend;
}

TrendSection build_trend_section(const ledger::Ledger& ledger, const TrendSectionRequest& request) {
  TrendSection section;
  for (const auto& [gate, higher_is_better] : request.gates) {
    if (section.gates.size() == request.max_gates) {
      ++section.gates_omitted;
      continue;
    }
    TrendRequest trend_request;
    trend_request.metric = "gate:" + gate;
    trend_request.higher_is_better = higher_is_better;
    trend_request.repo = request.repo;
    trend_request.max_runs = request.max_runs;
    trend_request.objective_path = request.objective_path;
    trend_request.config_json = request.config_json;
    GateTrend entry;
    entry.gate = gate;
    try {
      entry.trend = build_trend(ledger, trend_request);
    } catch (const Error& error) {
      // Outside a repository (or with git missing) runs have no commit order to plot.
      section.note = "no trends: " + error.message();
      section.gates.clear();
      return section;
    }
    // One run is no trajectory: the gate table already says its value.
    if (entry.trend.points.size() < 2) continue;
    std::vector<TrendPoint>& points = entry.trend.points;
    if (points.size() > request.max_points) {
      entry.points_omitted = points.size() - request.max_points;
      points.erase(points.begin(), points.begin() + static_cast<ptrdiff_t>(entry.points_omitted));
    }
    for (const auto& point : points) entry.regressions += point.regression ? 1 : 0;
    section.gates.push_back(std::move(entry));
  }
  return section;
}

std::string render_trend_text(const Trend& trend) {
  std::ostringstream out;
  out << "trend of " << trend.request.metric
      << (trend.request.probe.empty() ? "" : " (probe " + trend.request.probe + ")");
  for (const auto& point : trend.request.points) out << " " << point;
  out << " over " << trend.history << ": " << trend.points.size() << " runs ("
      << (trend.request.higher_is_better ? "higher" : "lower") << " is better)\n";
  for (const auto& point : trend.points) {
    out << (point.regression ? "! " : "  ") << point.commit.substr(0, 12) << "  " << point.run_id
        << "  " << trend_number(point.value);
    if (point.interval) {
      out << " [" << trend_number(point.interval->low) << ", " << trend_number(point.interval->high)
          << "]";
    }
    if (point.regression) out << "  REGRESSION";
    for (const auto& annotation : point.annotations) out << "  " << annotation;
    out << "\n";
  }
  if (trend.points.empty()) {
    out << "no run holds " << trend.request.metric
        << ": check the metric name (loupe ledger show RUN lists each finding's metrics)\n";
  }
  if (trend.runs_off_history > 0 || trend.runs_without_value > 0) {
    out << "left out: " << trend.runs_off_history << " runs at commits not on " << trend.history
        << ", " << trend.runs_without_value << " runs without the metric (or not completed)\n";
  }
  return out.str();
}

std::string render_trend_svg(const Trend& trend) {
  constexpr double kWidth = 720, kHeight = 260, kLeft = 60, kRight = 20, kTop = 20, kBottom = 50;
  std::ostringstream out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\" role=\"img\" aria-label=\"" << html_escape(trend.request.metric) << " by commit\">\n";
  if (trend.points.empty()) {
    out << "<text x=\"20\" y=\"40\">no run holds the metric</text></svg>\n";
    return out.str();
  }
  double low = trend.points.front().value;
  double high = low;
  for (const auto& point : trend.points) {
    low = std::min(low, point.interval ? point.interval->low : point.value);
    high = std::max(high, point.interval ? point.interval->high : point.value);
  }
  if (high == low) {
    high += std::fabs(high) * 0.05 + 1e-12;
    low -= std::fabs(low) * 0.05 + 1e-12;
  }
  const double span = high - low;
  auto x_of = [&](size_t index) {
    const double count = static_cast<double>(trend.points.size());
    return kLeft + (count == 1 ? 0.5 : static_cast<double>(index) / (count - 1)) *
                       (kWidth - kLeft - kRight);
  };
  auto y_of = [&](double value) {
    return kTop + (high - value) / span * (kHeight - kTop - kBottom);
  };
  out << "<line x1=\"" << kLeft << "\" y1=\"" << kTop << "\" x2=\"" << kLeft << "\" y2=\""
      << kHeight - kBottom << "\" stroke=\"#57606a\"/>\n";
  out << "<text x=\"4\" y=\"" << trend_coordinate(y_of(high) + 4) << "\" font-size=\"11\">"
      << html_escape(trend_number(high)) << "</text>\n<text x=\"4\" y=\""
      << trend_coordinate(y_of(low)) << "\" font-size=\"11\">" << html_escape(trend_number(low))
      << "</text>\n";
  std::string path;
  for (size_t index = 0; index < trend.points.size(); ++index) {
    path += (index == 0 ? "M" : " L") + trend_coordinate(x_of(index)) + " " +
            trend_coordinate(y_of(trend.points[index].value));
  }
  out << "<path d=\"" << path << "\" fill=\"none\" stroke=\"#0969da\"/>\n";
  for (size_t index = 0; index < trend.points.size(); ++index) {
    const TrendPoint& point = trend.points[index];
    const std::string x = trend_coordinate(x_of(index));
    if (point.interval) {
      out << "<line x1=\"" << x << "\" y1=\"" << trend_coordinate(y_of(point.interval->low))
          << "\" x2=\"" << x << "\" y2=\"" << trend_coordinate(y_of(point.interval->high))
          << "\" stroke=\"#57606a\"/>\n";
    }
    out << "<circle cx=\"" << x << "\" cy=\"" << trend_coordinate(y_of(point.value)) << "\" r=\""
        << (point.regression ? 5 : 3) << "\" fill=\"" << (point.regression ? "#cf222e" : "#0969da")
        << "\"><title>"
        << html_escape(point.commit.substr(0, 12) + " " + point.run_id + " " +
                       trend_number(point.value) + (point.regression ? " regression" : ""))
        << "</title></circle>\n";
    out << "<text x=\"" << x << "\" y=\"" << trend_coordinate(kHeight - kBottom + 14)
        << "\" font-size=\"10\" text-anchor=\"middle\">" << html_escape(point.commit.substr(0, 7))
        << "</text>\n";
    if (!point.annotations.empty()) {
      out << "<text x=\"" << x << "\" y=\"" << trend_coordinate(kHeight - kBottom + 28)
          << "\" font-size=\"10\" text-anchor=\"middle\">"
          << html_escape(point.annotations.front().substr(0, point.annotations.front().find(':')))
          << "</text>\n";
    }
  }
  out << "</svg>\n";
  return out.str();
}

std::string render_trend_html(const Trend& trend) {
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
         "'unsafe-inline'\">\n<title>loupe trend "
      << html_escape(trend.request.metric) << "</title>\n"
      << "<style>body{font:14px system-ui,sans-serif;margin:2em;color:#1f2328}"
         "table{border-collapse:collapse}td,th{border:1px solid #d0d7de;padding:3px 6px}"
         ".regression{color:#cf222e;font-weight:bold}</style></head><body>\n"
      << "<h1>" << html_escape(trend.request.metric) << " over " << html_escape(trend.history)
      << "</h1>\n"
      << render_trend_svg(trend)
      << "<table><tr><th>commit</th><th>run</th><th>value</th><th>interval</th><th>where</th>"
         "<th>hypotheses</th><th>reproduce</th></tr>\n";
  for (const auto& point : trend.points) {
    std::string hypotheses;
    for (const auto& annotation : point.annotations) {
      hypotheses += (hypotheses.empty() ? "" : "; ") + annotation;
    }
    out << "<tr" << (point.regression ? " class=\"regression\"" : "") << "><td>"
        << html_escape(point.commit.substr(0, 12)) << "</td><td>" << html_escape(point.run_id)
        << "</td><td>" << html_escape(trend_number(point.value))
        << (point.regression ? " regression" : "") << "</td><td>"
        << (point.interval ? html_escape("[" + trend_number(point.interval->low) + ", " +
                                         trend_number(point.interval->high) + "]")
                           : std::string("-"))
        << "</td><td>" << html_escape(point.where) << "</td><td>" << html_escape(hypotheses)
        << "</td><td><code>" << html_escape(point.reproduce) << "</code></td></tr>\n";
  }
  out << "</table>\n<p>" << trend.runs_off_history << " runs at commits not on this history, "
      << trend.runs_without_value << " without the metric, left out.</p>\n</body></html>\n";
  return out.str();
}

}  // namespace loupe::report
