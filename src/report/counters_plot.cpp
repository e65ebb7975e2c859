#include "report/counters_plot.hpp"

#include <array>
#include <cstdio>
#include <string>

namespace loupe::report {
namespace {

// The latency threshold of src/counters (kBoundThresholdPct); drawn, not decided, here.
constexpr double kBoundLinePct = 60.0;
constexpr std::array<std::pair<const char*, const char*>, 4> kUnits = {
    {{"DRAM", "dram_pct"}, {"L2", "l2_pct"}, {"L1", "l1_pct"}, {"SM", "sm_pct"}}};

std::string fixed(double value, int decimals = 1) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

SpeedOfLightPlot speed_of_light_plot(const std::vector<Finding>& findings, size_t max_kernels) {
  SpeedOfLightPlot plot;
  for (const Finding& finding : findings) {
    if (finding.layer != Layer::kCounters || finding.id.rfind("counters.", 0) != 0 ||
        !ends_with(finding.id, ".bound") || finding.id.rfind("counters.diff.", 0) == 0) {
      continue;
    }
    SpeedOfLightBar bar;
    bar.kernel = finding.id.substr(9, finding.id.size() - 9 - 6);
    for (const auto& [name, value] : finding.where.params) {
      if (name == "grid" || name == "block") {
        if (const auto* text = std::get_if<std::string>(&value))
          bar.kernel += " " + name + " " + *text;
      }
    }
    for (const auto& [unit, metric] : kUnits) {
      for (const auto& [name, value] : finding.evidence.metrics) {
        if (name == metric) bar.units.emplace_back(unit, value);
      }
    }
    // "... is DRAM-bound at ..." or "... is latency-bound: ...".
    const size_t bound = finding.claim.find("-bound");
    if (bound != std::string::npos) {
      const size_t start = finding.claim.rfind(' ', bound);
      bar.bound = finding.claim.substr(start + 1, bound - start - 1);
    }
    if (bar.units.empty()) continue;
    if (plot.kernels.size() == max_kernels) {
      ++plot.omitted;
      continue;
    }
    plot.kernels.push_back(std::move(bar));
  }
  return plot;
}

void render_speed_of_light(std::ostringstream& out, const SpeedOfLightPlot& plot) {
  const double left = 250, right = 60, top = 28, bar_height = 11, group_gap = 12;
  const double plot_width = 420;
  const double group_height = bar_height * kUnits.size() + group_gap;
  const double height = top + group_height * static_cast<double>(plot.kernels.size()) + 28;
  const double width = left + plot_width + right;
  auto x_of = [&](double pct) {
    return left + plot_width * std::min(std::max(pct, 0.0), 100.0) / 100.0;
  };
  out << "<figure><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << fixed(width, 0)
      << "\" height=\"" << fixed(height, 0) << "\" viewBox=\"0 0 " << fixed(width, 0) << " "
      << fixed(height, 0) << "\" role=\"img\" aria-label=\"kernel speed of light\">\n";
  out << "<text x=\"" << fixed(left, 0)
      << "\" y=\"16\">share of peak per unit, median over launches (ncu SpeedOfLight)</text>\n";
  const double axis_bottom = top + group_height * static_cast<double>(plot.kernels.size());
  for (double pct : {0.0, 25.0, 50.0, 75.0, 100.0}) {
    out << "<line x1=\"" << fixed(x_of(pct)) << "\" y1=\"" << fixed(top) << "\" x2=\""
        << fixed(x_of(pct)) << "\" y2=\"" << fixed(axis_bottom) << "\" stroke=\"#d0d7de\"/>\n";
    out << "<text x=\"" << fixed(x_of(pct)) << "\" y=\"" << fixed(axis_bottom + 14)
        << "\" text-anchor=\"middle\">" << fixed(pct, 0) << " %</text>\n";
  }
  out << "<line x1=\"" << fixed(x_of(kBoundLinePct)) << "\" y1=\"" << fixed(top) << "\" x2=\""
      << fixed(x_of(kBoundLinePct)) << "\" y2=\"" << fixed(axis_bottom)
      << "\" stroke=\"#9a6700\" stroke-dasharray=\"4 3\"><title>below " << fixed(kBoundLinePct, 0)
      << " % on every unit: latency-bound</title></line>\n";
  for (size_t index = 0; index < plot.kernels.size(); ++index) {
    const SpeedOfLightBar& bar = plot.kernels[index];
    const double group_top = top + group_height * static_cast<double>(index);
    out << "<text x=\"" << fixed(left - 8) << "\" y=\"" << fixed(group_top + 2 * bar_height)
        << "\" text-anchor=\"end\">" << html_escape(bar.kernel.substr(0, 48)) << "</text>\n";
    out << "<text x=\"" << fixed(left - 8) << "\" y=\"" << fixed(group_top + 3.3 * bar_height)
        << "\" text-anchor=\"end\" fill=\"#57606a\">" << html_escape(bar.bound)
        << "-bound</text>\n";
    for (size_t unit = 0; unit < bar.units.size(); ++unit) {
      const auto& [name, pct] = bar.units[unit];
      const double y = group_top + bar_height * static_cast<double>(unit);
      const bool binding = name == bar.bound;
      out << "<g><title>" << html_escape(bar.kernel) << ": " << html_escape(name) << " "
          << fixed(pct) << " % of peak</title><rect x=\"" << fixed(left) << "\" y=\"" << fixed(y)
          << "\" width=\"" << fixed(x_of(pct) - left) << "\" height=\"" << fixed(bar_height - 2)
          << "\" fill=\"" << (binding ? "#0969da" : "#8cb4e0") << "\"/></g>\n";
      out << "<text x=\"" << fixed(x_of(pct) + 4) << "\" y=\"" << fixed(y + bar_height - 3) << "\">"
          << html_escape(name) << " " << fixed(pct) << "</text>\n";
    }
  }
  out << "</svg>\n<figcaption>Dark bar: the binding unit. Dashed line: " << fixed(kBoundLinePct, 0)
      << " % — a kernel below it on every unit is latency-bound (loupe counters).";
  if (plot.omitted > 0) out << " " << plot.omitted << " more kernel(s) not drawn.";
  out << "</figcaption></figure>\n";
}

}  // namespace loupe::report
