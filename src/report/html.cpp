// The HTML rendering of the report model: one self-contained page. Inline CSS and inline SVG; no
// script, no font, no request: the Content-Security-Policy forbids every load, so a stray external
// reference shows up as a console error in the Chromium test instead of a silent fetch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <vector>

#include "check/compare.hpp"
#include "report/counters_plot.hpp"
#include "report/model.hpp"

namespace loupe::report {

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        // Control characters other than tab and newline are not allowed in HTML text.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

namespace {

// Coordinates in SVG user units: two decimals are plenty and keep the file deterministic.
std::string coordinate(double value) {
  if (!std::isfinite(value)) value = 0;
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", value);
  return text;
}

std::string number(double value) { return html_escape(check::format_number(value)); }

std::string duration_text(int64_t ns) {
  char text[32];
  const double value = static_cast<double>(ns);
  if (ns >= 1'000'000'000) {
    std::snprintf(text, sizeof(text), "%.3g s", value / 1e9);
  } else if (ns >= 1'000'000) {
    std::snprintf(text, sizeof(text), "%.3g ms", value / 1e6);
  } else if (ns >= 1'000) {
    std::snprintf(text, sizeof(text), "%.3g us", value / 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%lld ns", static_cast<long long>(ns));
  }
  return text;
}

std::string verdict_class(GateVerdict verdict) {
  switch (verdict) {
    case GateVerdict::kPass:
      return "pass";
    case GateVerdict::kFail:
      return "fail";
    case GateVerdict::kInconclusive:
      return "inconclusive";
    case GateVerdict::kNotRun:
      return "not-run";
  }
  return "not-run";
}

std::string severity_class(Severity severity) { return std::string(severity_name(severity)); }

// A stable colour per zone name, from a palette that reads on white.
std::string zone_colour(const std::string& name) {
  static const char* const kPalette[] = {"#8db6d9", "#a6d49f", "#d9b38c", "#c3a6d9", "#9fd4cf",
                                         "#d9d28c", "#b8c4d0", "#d4a6b8", "#a9c98b", "#c9b28b"};
  uint32_t hash = 2166136261u;
  for (unsigned char c : name) hash = (hash ^ c) * 16777619u;
  return kPalette[hash % (sizeof(kPalette) / sizeof(kPalette[0]))];
}

const char* kStyle = R"css(
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1b1f24;
  max-width:1200px;line-height:1.4}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
pre{background:#f6f8fa;padding:6px 8px;white-space:pre-wrap;word-break:break-all;margin:4px 0}
.summary{color:#57606a;margin:0 0 12px}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-weight:600;font-size:12px;
  color:#fff}
.pass{background:#1a7f37}.fail{background:#cf222e}.inconclusive{background:#9a6700}
.not-run,.none{background:#6e7781}.error{background:#8250df}
.warn{background:#bc4c00}.info{background:#0969da}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.rule{color:#57606a}
.finding{border:1px solid #d0d7de;border-radius:6px;padding:8px 12px;margin:8px 0}
.finding .claim{margin:4px 0}.finding dl{margin:4px 0;display:grid;
  grid-template-columns:max-content auto;gap:2px 12px;font-size:13px}
.finding dt{color:#57606a}.finding dd{margin:0}
figure{margin:12px 0 24px}figcaption{font-size:13px;color:#57606a;margin-top:4px}
svg{background:#fff;border:1px solid #d0d7de}
svg text{font-family:system-ui,sans-serif;font-size:11px;fill:#1b1f24}
svg text.zone-label{font-size:10px;fill:#1b1f24;pointer-events:none}
.note{color:#57606a;font-size:13px}
)css";

void render_profile(std::ostringstream& out, const ProfilePlot& plot) {
  const double width = 760, height = 260, left = 70, right = 20, top = 24, bottom = 40;
  const double plot_width = width - left - right, plot_height = height - top - bottom;
  double maximum = 0;
  double smallest = std::numeric_limits<double>::infinity();  // the smallest positive value
  auto consider = [&](double value) {
    if (!std::isfinite(value)) return;
    maximum = std::max(maximum, value);
    if (value > 0) smallest = std::min(smallest, value);
  };
  for (double value : plot.values) consider(value);
  if (plot.rms_ratio_bound) consider(*plot.rms_ratio_bound);
  if (maximum <= 0) maximum = 1;
  // Values (the tolerance included) spanning two decades or more: a linear axis flattens the
  // small ones, the tolerance line among them, to the baseline (issue 19), so the axis is log.
  const bool log_scale = std::isfinite(smallest) && maximum / smallest >= 100;
  const double floor_value = log_scale ? std::pow(10, std::floor(std::log10(smallest))) : 0;
  const double ceiling =
      log_scale ? std::pow(10, std::ceil(std::log10(maximum * 1.01))) : maximum * 1.1;
  const double length = static_cast<double>(std::max<int64_t>(1, plot.axis_length));
  auto x_of = [&](double position) { return left + plot_width * position / length; };
  auto y_of = [&](double value) {
    if (!log_scale) return top + plot_height * (1 - value / ceiling);
    const double clamped = std::max(value, floor_value);
    return top + plot_height *
                     (1 - std::log10(clamped / floor_value) / std::log10(ceiling / floor_value));
  };

  out << "<figure><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << coordinate(width)
      << "\" height=\"" << coordinate(height) << "\" viewBox=\"0 0 " << coordinate(width) << " "
      << coordinate(height) << "\" role=\"img\" aria-label=\"error profile of "
      << html_escape(plot.probe + " " + plot.output) << "\">\n";
  out << "<text x=\"" << coordinate(left) << "\" y=\"16\">rms(A-B)/rms(B) per bucket along "
      << html_escape(plot.axis) << " (" << html_escape(plot.shape) << ")"
      << (log_scale ? ", log scale" : "") << "</text>\n";
  // The tolerance's label sits above the plot, clear of the bars; the dashed line is drawn last.
  if (plot.rms_ratio_bound) {
    out << "<text x=\"" << coordinate(left + plot_width) << "\" y=\"16\" text-anchor=\"end\" "
        << "fill=\"#1a7f37\">- - - tolerance rms_ratio " << number(*plot.rms_ratio_bound)
        << "</text>\n";
  }
  // Axes and ticks.
  out << "<line x1=\"" << coordinate(left) << "\" y1=\"" << coordinate(top + plot_height)
      << "\" x2=\"" << coordinate(left + plot_width) << "\" y2=\"" << coordinate(top + plot_height)
      << "\" stroke=\"#57606a\"/>\n";
  out << "<line x1=\"" << coordinate(left) << "\" y1=\"" << coordinate(top) << "\" x2=\""
      << coordinate(left) << "\" y2=\"" << coordinate(top + plot_height)
      << "\" stroke=\"#57606a\"/>\n";
  std::vector<double> ticks;
  if (log_scale) {
    const int decades = static_cast<int>(std::lround(std::log10(ceiling / floor_value)));
    const int stride = std::max(1, (decades + 3) / 4);  // at most about five labels
    for (int decade = 0; decade <= decades; decade += stride) {
      ticks.push_back(floor_value * std::pow(10, decade));
    }
  } else {
    ticks = {0.0, ceiling * 0.5, ceiling};
  }
  for (double value : ticks) {
    out << "<text x=\"" << coordinate(left - 6) << "\" y=\"" << coordinate(y_of(value) + 4)
        << "\" text-anchor=\"end\">" << number(value) << "</text>\n";
  }
  for (double fraction : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const double position = length * fraction;
    out << "<text x=\"" << coordinate(x_of(position)) << "\" y=\""
        << coordinate(top + plot_height + 16) << "\" text-anchor=\"middle\">"
        << static_cast<int64_t>(std::llround(position)) << "</text>\n";
  }
  out << "<text x=\"" << coordinate(left + plot_width / 2) << "\" y=\"" << coordinate(height - 6)
      << "\" text-anchor=\"middle\">" << html_escape(plot.axis) << "</text>\n";
  for (size_t index = 0; index < plot.values.size(); ++index) {
    const double value = std::isfinite(plot.values[index]) ? plot.values[index] : 0;
    const auto [begin, end] = plot.bucket_ranges[index];
    if (log_scale && value <= 0) continue;  // no bar below the log axis's floor
    const double x = x_of(static_cast<double>(begin));
    const double bar_width = std::max(1.0, x_of(static_cast<double>(end)) - x - 1);
    out << "<rect x=\"" << coordinate(x) << "\" y=\"" << coordinate(y_of(value)) << "\" width=\""
        << coordinate(bar_width) << "\" height=\"" << coordinate(top + plot_height - y_of(value))
        << "\" fill=\"#cf222e\" fill-opacity=\"0.75\"><title>" << html_escape(plot.axis) << " ["
        << begin << ", " << end << "): " << number(value) << "</title></rect>\n";
  }
  if (plot.rms_ratio_bound) {
    const double y = y_of(*plot.rms_ratio_bound);
    out << "<line x1=\"" << coordinate(left) << "\" y1=\"" << coordinate(y) << "\" x2=\""
        << coordinate(left + plot_width) << "\" y2=\"" << coordinate(y)
        << "\" stroke=\"#1a7f37\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n";
  }
  out << "</svg>\n<figcaption><code>" << html_escape(plot.probe + " " + plot.point)
      << "</code> output <code>" << html_escape(plot.output)
      << "</code>: " << html_escape(plot.sentence) << "<br>observation <code>"
      << html_escape(plot.observation) << "</code></figcaption></figure>\n";
}

void render_sweep(std::ostringstream& out, const SweepPlot& plot) {
  const double left = 70, right = 20, top = 24, bottom = 70, plot_height = 200;
  const double step = 56;
  const double plot_width = std::max(440.0, step * static_cast<double>(plot.points.size()));
  const double width = left + plot_width + right, height = top + plot_height + bottom;
  double low = 1 - plot.threshold, high = 1 + plot.threshold;
  for (const auto& point : plot.points) {
    if (std::isfinite(point.ci_low)) low = std::min(low, point.ci_low);
    if (std::isfinite(point.ci_high)) high = std::max(high, point.ci_high);
    if (std::isfinite(point.ratio)) {
      low = std::min(low, point.ratio);
      high = std::max(high, point.ratio);
    }
  }
  const double pad = (high - low) * 0.08 + 1e-9;
  low -= pad;
  high += pad;
  auto y_of = [&](double value) {
    if (!std::isfinite(value)) value = value > 0 ? high : low;
    return top + plot_height * (high - value) / (high - low);
  };
  auto x_of = [&](size_t index) {
    return left + plot_width * (static_cast<double>(index) + 0.5) /
                      static_cast<double>(std::max<size_t>(1, plot.points.size()));
  };
  out << "<figure><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << coordinate(width)
      << "\" height=\"" << coordinate(height) << "\" viewBox=\"0 0 " << coordinate(width) << " "
      << coordinate(height) << "\" role=\"img\" aria-label=\"bench " << html_escape(plot.probe)
      << " ratios\">\n";
  out << "<text x=\"" << coordinate(left) << "\" y=\"16\">" << html_escape(plot.probe) << ": "
      << html_escape(plot.comparison) << " (candidate / baseline) with its CI</text>\n";
  // The SAME band [1 - t, 1 + t] and the line at 1.
  out << "<rect x=\"" << coordinate(left) << "\" y=\"" << coordinate(y_of(1 + plot.threshold))
      << "\" width=\"" << coordinate(plot_width) << "\" height=\""
      << coordinate(y_of(1 - plot.threshold) - y_of(1 + plot.threshold))
      << "\" fill=\"#1a7f37\" fill-opacity=\"0.12\"><title>verdict band ["
      << number(1 - plot.threshold) << ", " << number(1 + plot.threshold)
      << "]: SAME when the whole CI lies inside</title></rect>\n";
  out << "<line x1=\"" << coordinate(left) << "\" y1=\"" << coordinate(y_of(1)) << "\" x2=\""
      << coordinate(left + plot_width) << "\" y2=\"" << coordinate(y_of(1))
      << "\" stroke=\"#57606a\" stroke-dasharray=\"4 3\"/>\n";
  out << "<line x1=\"" << coordinate(left) << "\" y1=\"" << coordinate(top) << "\" x2=\""
      << coordinate(left) << "\" y2=\"" << coordinate(top + plot_height)
      << "\" stroke=\"#57606a\"/>\n";
  // Tick labels at the ends and at 1, unless 1 sits too close to an end to be read apart.
  std::vector<double> ticks = {low + pad, high - pad};
  if (std::fabs(y_of(1) - y_of(low + pad)) > 14 && std::fabs(y_of(1) - y_of(high - pad)) > 14) {
    ticks.push_back(1.0);
  }
  for (double value : ticks) {
    out << "<text x=\"" << coordinate(left - 6) << "\" y=\"" << coordinate(y_of(value) + 4)
        << "\" text-anchor=\"end\">" << number(value) << "</text>\n";
  }
  for (size_t index = 0; index < plot.points.size(); ++index) {
    const SweepPoint& point = plot.points[index];
    const double x = x_of(index);
    const std::string colour = point.verdict == "slower"   ? "#cf222e"
                               : point.verdict == "faster" ? "#0969da"
                               : point.verdict == "same"   ? "#1a7f37"
                                                           : "#9a6700";
    out << "<g><title>" << html_escape(point.point.empty() ? "default" : point.point) << ": ratio "
        << number(point.ratio) << " CI [" << number(point.ci_low) << ", " << number(point.ci_high)
        << "] " << html_escape(point.verdict) << "</title>\n";
    out << "<line x1=\"" << coordinate(x) << "\" y1=\"" << coordinate(y_of(point.ci_low))
        << "\" x2=\"" << coordinate(x) << "\" y2=\"" << coordinate(y_of(point.ci_high))
        << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/>\n";
    for (double value : {point.ci_low, point.ci_high}) {
      out << "<line x1=\"" << coordinate(x - 6) << "\" y1=\"" << coordinate(y_of(value))
          << "\" x2=\"" << coordinate(x + 6) << "\" y2=\"" << coordinate(y_of(value))
          << "\" stroke=\"" << colour << "\" stroke-width=\"2\"/>\n";
    }
    out << "<circle cx=\"" << coordinate(x) << "\" cy=\"" << coordinate(y_of(point.ratio))
        << "\" r=\"4\" fill=\"" << colour << "\"/>";
    if (point.failing) {
      out << "<circle cx=\"" << coordinate(x) << "\" cy=\"" << coordinate(y_of(point.ratio))
          << "\" r=\"8\" fill=\"none\" stroke=\"#cf222e\" stroke-width=\"2\" "
          << "class=\"failing\"/>";
    }
    out << "</g>\n";
    out << "<text x=\"" << coordinate(x) << "\" y=\"" << coordinate(top + plot_height + 14)
        << "\" text-anchor=\"end\" transform=\"rotate(-30 " << coordinate(x) << " "
        << coordinate(top + plot_height + 14) << ")\">"
        << html_escape(point.point.empty() ? "default" : point.point) << "</text>\n";
  }
  out << "</svg>\n<figcaption>";
  if (!plot.gate.empty()) {
    out << "Drawn as gate " << html_escape(plot.gate)
        << " states it: " << html_escape(plot.comparison) << ". ";
  }
  out << "Green band: the SAME band ±" << number(plot.threshold * 100)
      << "% (SLOWER needs the CI above 1 and the ratio above the band; FASTER symmetrically). "
      << "Points: red SLOWER, blue FASTER, green SAME, amber AMBIGUOUS";
  if (std::any_of(plot.points.begin(), plot.points.end(),
                  [](const SweepPoint& point) { return point.failing; })) {
    out << "; ringed: the verdict gate " << html_escape(plot.gate) << " fails on";
  }
  out << ".";
  if (plot.points_omitted > 0) {
    out << " " << plot.points_omitted << " more point(s) not drawn.";
  }
  out << "</figcaption></figure>\n";
}

void render_timeline(std::ostringstream& out, const TimelinePlot& plot) {
  const double label_width = 170, width = 1100, right = 16, top = 28, row_height = 34;
  const double bottom = 56;
  const double strip_width = width - label_width - right;
  const double height = top + row_height * static_cast<double>(plot.rows.size()) + bottom;
  const double duration = static_cast<double>(std::max<int64_t>(1, plot.duration_ns));
  auto x_of = [&](int64_t ns) {
    return label_width + strip_width * std::clamp(static_cast<double>(ns) / duration, 0.0, 1.0);
  };
  out << "<figure><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << coordinate(width)
      << "\" height=\"" << coordinate(height) << "\" viewBox=\"0 0 " << coordinate(width) << " "
      << coordinate(height) << "\" role=\"img\" aria-label=\"timeline of "
      << html_escape(plot.probe) << "\">\n";
  out << "<text x=\"4\" y=\"16\">scenario " << html_escape(plot.probe)
      << ": threads over time, their zones, lock waits (red) and holds (amber); outlined: the top "
         "contention</text>\n";
  for (size_t row_index = 0; row_index < plot.rows.size(); ++row_index) {
    const TimelineRow& row = plot.rows[row_index];
    const double y = top + row_height * static_cast<double>(row_index);
    out << "<text x=\"4\" y=\"" << coordinate(y + 14) << "\">" << html_escape(row.thread)
        << "</text>\n";
    if (row.omitted > 0) {
      out << "<text x=\"4\" y=\"" << coordinate(y + 27) << "\" fill=\"#57606a\">" << row.omitted
          << " not drawn</text>\n";
    }
    out << "<line x1=\"" << coordinate(label_width) << "\" y1=\"" << coordinate(y + row_height - 2)
        << "\" x2=\"" << coordinate(width - right) << "\" y2=\"" << coordinate(y + row_height - 2)
        << "\" stroke=\"#eaeef2\"/>\n";
    for (const auto& zone : row.zones) {
      const double zone_top = y + 2 + 5 * static_cast<double>(zone.depth);
      const double zone_height = std::max(4.0, 18 - 5 * static_cast<double>(zone.depth));
      const double x = x_of(zone.start_ns);
      out << "<rect x=\"" << coordinate(x) << "\" y=\"" << coordinate(zone_top) << "\" width=\""
          << coordinate(std::max(0.5, x_of(zone.end_ns) - x)) << "\" height=\""
          << coordinate(zone_height) << "\" fill=\"" << zone_colour(zone.name)
          << "\" stroke=\"#ffffff\" stroke-width=\"0.3\"><title>" << html_escape(zone.name) << " "
          << duration_text(zone.end_ns - zone.start_ns) << " at " << duration_text(zone.start_ns)
          << "</title></rect>\n";
      // The zone's name on its bar when it fits (about 6 px a character at 11 px).
      const double bar_width = x_of(zone.end_ns) - x;
      if (zone.depth == 0 && bar_width > 6.0 * static_cast<double>(zone.name.size()) + 6) {
        out << "<text x=\"" << coordinate(x + 3) << "\" y=\"" << coordinate(zone_top + 12)
            << "\" class=\"zone-label\">" << html_escape(zone.name) << "</text>\n";
      }
    }
    for (const auto& interval : row.intervals) {
      const bool wait = interval.kind == IntervalKind::kWait;
      const double x = x_of(interval.start_ns);
      out << "<rect x=\"" << coordinate(x) << "\" y=\"" << coordinate(y + 22) << "\" width=\""
          << coordinate(std::max(1.0, x_of(interval.end_ns) - x)) << "\" height=\"7\" fill=\""
          << (wait ? "#cf222e" : "#d4a72c") << "\""
          << (interval.highlighted ? " stroke=\"#1b1f24\" stroke-width=\"1.2\"" : "") << "><title>"
          << (wait ? "waits on " : "holds ") << html_escape(interval.lock) << " "
          << duration_text(interval.end_ns - interval.start_ns) << " at "
          << duration_text(interval.start_ns) << (interval.highlighted ? " (top contention)" : "")
          << "</title></rect>\n";
    }
  }
  const double axis_y = top + row_height * static_cast<double>(plot.rows.size()) + 4;
  out << "<line x1=\"" << coordinate(label_width) << "\" y1=\"" << coordinate(axis_y) << "\" x2=\""
      << coordinate(width - right) << "\" y2=\"" << coordinate(axis_y)
      << "\" stroke=\"#57606a\"/>\n";
  for (int tick = 0; tick <= 4; ++tick) {
    const int64_t ns = static_cast<int64_t>(duration * tick / 4);
    out << "<text x=\"" << coordinate(x_of(ns)) << "\" y=\"" << coordinate(axis_y + 14)
        << "\" text-anchor=\""
        << (tick == 0   ? "start"
            : tick == 4 ? "end"
                        : "middle")
        << "\">" << duration_text(ns) << "</text>\n";
  }
  // Legend.
  const double legend_y = axis_y + 30;
  out << "<rect x=\"" << coordinate(label_width) << "\" y=\"" << coordinate(legend_y - 8)
      << "\" width=\"14\" height=\"7\" fill=\"#cf222e\"/><text x=\"" << coordinate(label_width + 18)
      << "\" y=\"" << coordinate(legend_y) << "\">lock wait</text>\n"
      << "<rect x=\"" << coordinate(label_width + 90) << "\" y=\"" << coordinate(legend_y - 8)
      << "\" width=\"14\" height=\"7\" fill=\"#d4a72c\"/><text x=\""
      << coordinate(label_width + 108) << "\" y=\"" << coordinate(legend_y)
      << "\">lock held</text>\n"
      << "<rect x=\"" << coordinate(label_width + 180) << "\" y=\"" << coordinate(legend_y - 8)
      << "\" width=\"14\" height=\"7\" fill=\"#ffffff\" stroke=\"#1b1f24\" stroke-width=\"1.2\"/>"
      << "<text x=\"" << coordinate(label_width + 198) << "\" y=\"" << coordinate(legend_y)
      << "\">top contention: the waiter's waits and the holder's holds meanwhile</text>\n";
  out << "</svg>\n<figcaption><code>" << html_escape(plot.probe + " " + plot.point)
      << "</code>: " << html_escape(plot.caption) << ". Trace <code>"
      << html_escape(plot.trace_file) << "</code>, " << duration_text(plot.duration_ns) << ".";
  if (plot.rows_omitted > 0) out << " " << plot.rows_omitted << " more thread(s) not drawn.";
  if (std::any_of(plot.rows.begin(), plot.rows.end(),
                  [](const TimelineRow& row) { return row.omitted > 0; })) {
    out << " \"N not drawn\" under a thread counts its zones and lock intervals shorter than "
        << duration_text(plot.min_width_ns) << " (a 2000th of the window), nested deeper than "
        << plot.zone_depth << " levels, or past its " << plot.zones_per_row << " longest.";
  }
  out << "</figcaption></figure>\n";
}

// `same_reproduce`: the previous finding has the same command (one point, one trace diff): say
// so instead of repeating a long command.
void render_finding(std::ostringstream& out, const Finding& finding, bool same_reproduce) {
  out << "<div class=\"finding\"><span class=\"badge " << severity_class(finding.severity) << "\">"
      << severity_name(finding.severity) << "</span> <code>" << html_escape(finding.id)
      << "</code> <span class=\"note\">" << layer_name(finding.layer) << "</span>\n"
      << "<p class=\"claim\">" << html_escape(finding.claim) << "</p>\n<dl>\n";
  const Where& where = finding.where;
  std::string place = where.probe;
  if (!where.path.empty()) place += (place.empty() ? "" : " · ") + where.path;
  if (!where.params.empty()) place += (place.empty() ? "" : " · ") + params_to_string(where.params);
  if (!place.empty()) out << "<dt>where</dt><dd>" << html_escape(place) << "</dd>\n";
  if (!where.coords.empty()) {
    std::string coords;
    for (const auto& [axis, index] : where.coords) {
      coords += (coords.empty() ? "" : " ") + axis + "=" + std::to_string(index);
    }
    out << "<dt>coordinates</dt><dd>" << html_escape(coords) << "</dd>\n";
  }
  if (where.thread) out << "<dt>thread</dt><dd>" << html_escape(*where.thread) << "</dd>\n";
  if (where.interval_ns) {
    out << "<dt>interval</dt><dd>[" << where.interval_ns->first << ", " << where.interval_ns->second
        << ") ns</dd>\n";
  }
  if (!finding.evidence.metrics.empty()) {
    std::string metrics;
    for (const auto& [name, value] : finding.evidence.metrics) {
      metrics += (metrics.empty() ? "" : ", ") + name + " " + check::format_number(value);
    }
    out << "<dt>evidence</dt><dd>" << html_escape(metrics) << "</dd>\n";
  }
  if (!finding.evidence.events.empty()) {
    std::string events;
    size_t shown = 0;
    for (const auto& event : finding.evidence.events) {
      if (shown++ == 6) {
        events += ", … " + std::to_string(finding.evidence.events.size() - 6) + " more";
        break;
      }
      events += (events.empty() ? "" : ", ") + event.name + " on " + event.track + " (" +
                duration_text(event.end_ns - event.start_ns) + ")";
    }
    out << "<dt>events</dt><dd>" << html_escape(events) << "</dd>\n";
  }
  for (const auto& file : finding.evidence.files) {
    out << "<dt>file</dt><dd><code>" << html_escape(file) << "</code></dd>\n";
  }
  if (!finding.next.empty()) out << "<dt>next</dt><dd>" << html_escape(finding.next) << "</dd>\n";
  out << "</dl>\n";
  if (same_reproduce && !finding.reproduce.empty()) {
    out << "<p class=\"note\">reproduce: as above</p>\n";
  } else if (!finding.reproduce.empty()) {
    out << "<pre>" << html_escape(finding.reproduce) << "</pre>\n";
  }
  out << "</div>\n";
}

}  // namespace

std::string render_html(const Model& model) {
  std::ostringstream out;
  const Header& header = model.header;
  const std::string verdict(verdict_name(header.verdict));
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
         "style-src 'unsafe-inline'; img-src data:\">\n"
      << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      << "<title>loupe run " << html_escape(header.title) << " " << html_escape(header.run_id)
      << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n";
  out << "<h1>loupe run " << html_escape(header.title) << " <span class=\"badge "
      << html_escape(verdict) << "\">" << html_escape(verdict) << "</span></h1>\n";
  out << "<p class=\"summary\">run <code>" << html_escape(header.run_id) << "</code> of <code>"
      << html_escape(header.objective_path) << "</code>, configuration <code>"
      << html_escape(header.configuration) << "</code>: " << header.points << " point(s)";
  if (header.wall_s) out << " in " << number(*header.wall_s) << " s";
  out << ", " << html_escape(header.status) << ". Started " << html_escape(header.started_at);
  if (!header.ended_at.empty()) out << ", ended " << html_escape(header.ended_at);
  if (!header.git.empty()) out << ", commit <code>" << html_escape(header.git) << "</code>";
  out << ".</p>\n";
  if (!header.subject_failure.empty()) {
    out << "<p><span class=\"badge error\">subject failure</span> "
        << html_escape(header.subject_failure) << "</p>\n";
  }

  out << "<h2>Gates</h2>\n";
  if (model.gates.empty()) {
    out << "<p class=\"note\">No gates.</p>\n";
  } else {
    out << "<table>\n<thead><tr><th>gate</th><th>layer</th><th>verdict</th><th>key statistic</th>"
           "<th>rule</th></tr></thead>\n<tbody>\n";
    for (const auto& gate : model.gates) {
      out << "<tr><td>" << html_escape(gate.name) << "</td><td>"
          << (gate.layer ? std::string(layer_name(*gate.layer)) : "?")
          << "</td><td><span class=\"badge " << verdict_class(gate.verdict) << "\">"
          << verdict_word(gate.verdict) << "</span></td><td><code>"
          << html_escape(gate.key_statistic) << "</code></td><td class=\"rule\">"
          << html_escape(gate.rule) << "</td></tr>\n";
    }
    out << "</tbody>\n</table>\n<p class=\"note\">" << html_escape(std::string(gate_legend()))
        << "</p>\n";
  }

  if (!model.profiles.empty()) {
    out << "<h2>Error profiles of failing checks</h2>\n";
    for (const auto& plot : model.profiles) render_profile(out, plot);
  }
  if (model.profiles_omitted > 0) {
    out << "<p class=\"note\">" << model.profiles_omitted
        << " more error profile(s) not drawn.</p>\n";
  }
  if (!model.sweeps.empty()) {
    out << "<h2>Bench comparisons</h2>\n";
    for (const auto& plot : model.sweeps) render_sweep(out, plot);
  }
  if (model.sweeps_omitted > 0) {
    out << "<p class=\"note\">" << model.sweeps_omitted
        << " more bench comparison(s) not drawn.</p>\n";
  }
  if (!model.timelines.empty()) {
    out << "<h2>Scenario timelines</h2>\n";
    for (const auto& plot : model.timelines) render_timeline(out, plot);
  }
  if (model.timelines_omitted > 0) {
    out << "<p class=\"note\">" << model.timelines_omitted << " more timeline(s) not drawn.</p>\n";
  }

  if (!model.speed_of_light.kernels.empty()) {
    out << "<h2>Kernel speed of light</h2>\n";
    render_speed_of_light(out, model.speed_of_light);
  }

  if (!model.trends.gates.empty()) {
    // The page of `loupe ledger trend` per gate: the plot, regressions in red.
    out << "<h2>Trends</h2>\n<p class=\"note\">Each gate's estimate across this objective's "
           "recorded runs, in commit order; red marks a regression (worse than the run before, "
           "the intervals apart; without intervals, by more than 5 %).</p>\n";
    for (const auto& entry : model.trends.gates) {
      out << "<h3>" << html_escape(entry.gate) << " ("
          << (entry.trend.request.higher_is_better ? "higher" : "lower") << " is better, "
          << entry.trend.points.size() << " runs, " << entry.regressions << " regression(s))</h3>\n"
          << render_trend_svg(entry.trend);
      if (entry.points_omitted > 0) {
        out << "<p class=\"note\">" << entry.points_omitted << " older run(s) not drawn.</p>\n";
      }
    }
    if (model.trends.gates_omitted > 0) {
      out << "<p class=\"note\">" << model.trends.gates_omitted
          << " more gate(s) not drawn: <code>loupe ledger trend gate:NAME</code> draws any.</p>\n";
    }
  }

  out << "<h2>Top findings</h2>\n";
  if (model.findings.empty()) out << "<p class=\"note\">No fail or warn findings.</p>\n";
  std::string previous_reproduce;
  for (const auto& finding : model.findings) {
    render_finding(out, finding, finding.reproduce == previous_reproduce);
    previous_reproduce = finding.reproduce;
  }
  if (model.findings_total > model.findings.size()) {
    out << "<p class=\"note\">" << model.findings_total - model.findings.size()
        << " more findings: <code>loupe ledger show " << html_escape(header.run_id)
        << "</code> lists all.</p>\n";
  }

  bool any_stat = false;
  for (size_t index = 0; index < static_cast<size_t>(Stat::kCount); ++index) {
    any_stat = any_stat || model.stats.count(static_cast<Stat>(index)) != 0;
  }
  if (!model.notes.empty() || any_stat) {
    out << "<h2>Notes</h2>\n<ul>\n";
    for (const auto& note : model.notes) out << "<li>" << html_escape(note) << "</li>\n";
    for (size_t index = 0; index < static_cast<size_t>(Stat::kCount); ++index) {
      const Stat stat = static_cast<Stat>(index);
      if (model.stats.count(stat) == 0) continue;
      out << "<li>trace input repaired or dropped: <code>" << html_escape(stat_info(stat).name)
          << "</code> " << model.stats.count(stat) << " ("
          << html_escape(stat_info(stat).description) << ")</li>\n";
    }
    out << "</ul>\n";
  }
  if (!header.ledger_file.empty()) {
    out << "<p class=\"note\">Recorded in <code>" << html_escape(header.ledger_file)
        << "</code> (<code>loupe ledger show " << html_escape(header.run_id) << "</code>).</p>\n";
  }
  out << "</body>\n</html>\n";
  return out.str();
}

}  // namespace loupe::report
