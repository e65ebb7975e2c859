// The speed-of-light chart (src/report/counters_plot.hpp) from counters findings.
#include "report/counters_plot.hpp"

#include <gtest/gtest.h>

namespace loupe::report {
namespace {

Finding bound_finding(const std::string& kernel, const std::string& claim,
                      std::vector<std::pair<std::string, double>> metrics) {
  Finding finding;
  finding.id = "counters." + kernel + ".bound";
  finding.layer = Layer::kCounters;
  finding.claim = claim;
  finding.where.params = {{"block", std::string("(64, 1, 1)")},
                          {"grid", std::string("(4, 32, 1)")},
                          {"launches", int64_t{30}}};
  finding.evidence.metrics = std::move(metrics);
  return finding;
}

TEST(SpeedOfLightPlot, OneBarGroupPerBoundFinding) {
  std::vector<Finding> findings = {
      bound_finding("tiled", "tiled block (64, 1, 1) grid (4, 32, 1) is latency-bound: no unit",
                    {{"bound_pct", 17.9},
                     {"dram_pct", 7.1},
                     {"l2_pct", 17.9},
                     {"l1_pct", 8.2},
                     {"sm_pct", 2.9}}),
      bound_finding("merged", "merged block (64, 1, 1) grid (4, 32, 1) is DRAM-bound at 93.1 %",
                    {{"dram_pct", 93.1}, {"l2_pct", 41.0}})};
  Finding occupancy = findings[0];
  occupancy.id = "counters.tiled.occupancy";
  findings.push_back(occupancy);
  Finding diff = findings[0];
  diff.id = "counters.diff.bound";
  findings.push_back(diff);
  const SpeedOfLightPlot plot = speed_of_light_plot(findings, 16);
  ASSERT_EQ(plot.kernels.size(), 2u);
  EXPECT_EQ(plot.kernels[0].kernel, "tiled block (64, 1, 1) grid (4, 32, 1)");
  EXPECT_EQ(plot.kernels[0].bound, "latency");
  EXPECT_EQ(plot.kernels[0].units, (std::vector<std::pair<std::string, double>>{
                                       {"DRAM", 7.1}, {"L2", 17.9}, {"L1", 8.2}, {"SM", 2.9}}));
  EXPECT_EQ(plot.kernels[1].bound, "DRAM");
  EXPECT_EQ(plot.omitted, 0u);
}

TEST(SpeedOfLightPlot, CapCountsWhatItLeavesOut) {
  std::vector<Finding> findings;
  for (int index = 0; index < 5; ++index)
    findings.push_back(
        bound_finding("k" + std::to_string(index), "is SM-bound at 70 %", {{"sm_pct", 70.0}}));
  const SpeedOfLightPlot plot = speed_of_light_plot(findings, 3);
  EXPECT_EQ(plot.kernels.size(), 3u);
  EXPECT_EQ(plot.omitted, 2u);
  std::ostringstream out;
  render_speed_of_light(out, plot);
  EXPECT_NE(out.str().find("2 more kernel(s) not drawn."), std::string::npos);
}

TEST(SpeedOfLightPlot, KernelNamesAreEscaped) {
  const SpeedOfLightPlot plot = speed_of_light_plot(
      {bound_finding("a<b>", "is DRAM-bound at 90 %", {{"dram_pct", 90.0}})}, 4);
  std::ostringstream out;
  render_speed_of_light(out, plot);
  EXPECT_EQ(out.str().find("a<b>"), std::string::npos);
  EXPECT_NE(out.str().find("a&lt;b&gt;"), std::string::npos);
  EXPECT_NE(out.str().find("DRAM 90.0 % of peak"), std::string::npos);
}

}  // namespace
}  // namespace loupe::report
