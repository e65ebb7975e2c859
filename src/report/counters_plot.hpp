// report/counters_plot.hpp — the per-kernel speed-of-light chart of a run's counters findings.
//
// Kept apart from html.cpp's other plots so the two evolve without touching each other.
// speed_of_light_plot reads the `counters.<kernel>.bound` findings (src/counters) of a run: each
// gives one kernel's share of peak on DRAM, L2, L1 and the SM. render_speed_of_light draws them as
// grouped horizontal bars (inline SVG, every string escaped), the binding unit emphasised and the
// latency threshold marked. Thread-safety: pure functions.
#pragma once

#include <sstream>
#include <vector>

#include "core/finding.hpp"
#include "report/model.hpp"

namespace loupe::report {

SpeedOfLightPlot speed_of_light_plot(const std::vector<Finding>& findings, size_t max_kernels);
void render_speed_of_light(std::ostringstream& out, const SpeedOfLightPlot& plot);

}  // namespace loupe::report
