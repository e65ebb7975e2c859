#include "bench/report.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace loupe::bench {
namespace {

Comparison slower_comparison() {
  std::vector<double> a;
  std::vector<double> b;
  for (int index = 0; index < 50; ++index) {
    a.push_back(0.010 * (1.0 + 0.005 * std::sin(index)));
    b.push_back(0.011 * (1.0 + 0.005 * std::cos(index)));
  }
  return compare(a, b, {.threshold = 0.02, .seed = 4});
}

TEST(BenchReportTest, ComparisonJsonCarriesTheEvidence) {
  Comparison comparison = slower_comparison();
  ASSERT_EQ(comparison.verdict, AbVerdict::kSlower);
  Json json = comparison_to_json(comparison, "old", "new");
  // One direction: B (the candidate, "new") over A (the baseline, "old"), and the verdict is B's.
  EXPECT_EQ(json["baseline"], "old");
  EXPECT_EQ(json["candidate"], "new");
  EXPECT_EQ(json["ratio_of"], "candidate/baseline");
  EXPECT_GT(json["ratio"].get<double>(), 1.0);
  EXPECT_EQ(json["verdict"], "SLOWER");
  EXPECT_DOUBLE_EQ(json["ratio"].get<double>(), comparison.ratio);
  ASSERT_EQ(json["ci"].size(), 2u);
  EXPECT_DOUBLE_EQ(json["ci"][0].get<double>(), comparison.ci.low);
  EXPECT_DOUBLE_EQ(json["ci"][1].get<double>(), comparison.ci.high);
  EXPECT_EQ(json["n"]["baseline"], 50);
  EXPECT_EQ(json["n"]["candidate"], 50);
  EXPECT_DOUBLE_EQ(json["threshold"].get<double>(), 0.02);
  EXPECT_EQ(json["rule"], comparison.rule);
  EXPECT_EQ(json["seed"], 4);
  EXPECT_EQ(json["resamples"], 2000);
  EXPECT_TRUE(json["adjusted_p_value"].is_null());
  EXPECT_TRUE(json["more_samples_per_arm"].is_null());
}

TEST(BenchReportTest, NonFiniteNumbersBecomeStrings) {
  ArmSummary summary;
  summary.n = 1;
  summary.median = 1.0;
  summary.relative_half_width = NAN;
  summary.median_ci = {1.0, INFINITY};
  Json json = summary_to_json(summary);
  EXPECT_EQ(json["relative_half_width"], "nan");
  EXPECT_EQ(json["median_ci_s"][1], "inf");
  EXPECT_EQ(json["n"], 1);
}

TEST(BenchReportTest, StopJson) {
  StopDecision stop{.stop = true,
                    .reason = StopReason::kBudgetSpent,
                    .relative_half_width = 0.03,
                    .minimum_detectable_effect = 0.043};
  Json json = stop_to_json(stop);
  EXPECT_EQ(json["reason"], "budget_spent");
  EXPECT_DOUBLE_EQ(json["relative_half_width"].get<double>(), 0.03);
}

TEST(BenchReportTest, FindingNamesTheVerdictAndWhere) {
  Comparison comparison = slower_comparison();
  FindingContext context{.subject = "shell",
                         .probe = "cmd",
                         .params = {},
                         .path = "",
                         .reproduce = "loupe bench --cmd 'a' --vs 'b' --seed 4",
                         .files = {}};
  Finding finding = comparison_finding(comparison, context);
  EXPECT_EQ(finding.id, "bench.cmd.slower");
  EXPECT_EQ(finding.layer, Layer::kBench);
  EXPECT_EQ(finding.severity, Severity::kWarn);
  EXPECT_NE(finding.claim.find("slower than A"), std::string::npos) << finding.claim;
  EXPECT_NE(finding.claim.find("n = 50/50"), std::string::npos) << finding.claim;
  // Issue 19: a bench's variants are named in the claim, not "B" and "A".
  context.name_a = "tiled";
  context.name_b = "merged";
  const std::string named = comparison_finding(comparison, context).claim;
  EXPECT_EQ(named.rfind("merged is ", 0), 0u) << named;
  EXPECT_NE(named.find(" slower than tiled (ratio of medians merged/tiled "), std::string::npos)
      << named;
  EXPECT_EQ(finding.where.probe, "cmd");
  EXPECT_EQ(finding.reproduce, context.reproduce);
  ASSERT_GE(finding.evidence.metrics.size(), 9u);
  EXPECT_EQ(finding.evidence.metrics[0].first, "ratio");
  EXPECT_DOUBLE_EQ(finding.evidence.metrics[0].second, comparison.ratio);
  EXPECT_FALSE(finding.next.empty());
  // It serialises with the one finding schema.
  Json json = finding_to_json(finding);
  EXPECT_EQ(json["id"], "bench.cmd.slower");
  EXPECT_EQ(finding_from_json(json), finding);
}

TEST(BenchReportTest, NonInferiorityJson) {
  NonInferiority gate;
  gate.verdict = GateVerdict::kInconclusive;
  gate.ratio = 1.04;
  gate.ci = {1.03, 1.07};
  gate.bound = 1.05;
  gate.n_a = 10;
  gate.n_b = 12;
  gate.rule = "inconclusive";
  Json json = non_inferiority_to_json(gate);
  EXPECT_EQ(json["verdict"], "inconclusive");
  EXPECT_EQ(json["ratio_of"], "candidate/baseline");
  EXPECT_EQ(json["n"]["baseline"], 10);
  EXPECT_EQ(json["n"]["candidate"], 12);
}

}  // namespace
}  // namespace loupe::bench
