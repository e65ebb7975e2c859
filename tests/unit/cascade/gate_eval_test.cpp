// Gate verdicts on synthetic point results: each rule's pass, fail, inconclusive and not-run.
#include "gate/gate_eval.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "bench/report.hpp"
#include "core/json.hpp"

namespace loupe::gate {
namespace {

const char* const kObjective = R"(name = "eval"
[subject]
command = ["subject", "probe"]

[[check]]
probe = "cp_vs_nocp"
params = { T = [1024, 4096], shards = 4 }

[[check]]
name = "control"
probe = "cp_vs_nocp"
params = { T = 1024, shards = 2 }

[[bench]]
probe = "decode"
variants = ["tiled", "merged"]
params = { batch = [8, 32] }

[[scenario]]
name = "prefill"
probe = "serve"
params = { mode = "prefill" }
repeats = 5

[[scenario]]
name = "transfer"
probe = "serve"
params = { mode = "transfer" }
repeats = 5

[[gate]]
name = "drift"
expr = "check.cp_vs_nocp.rms_ratio <= 2e-6"

[[gate]]
name = "drift_large_T"
expr = "check.cp_vs_nocp.rms_ratio <= 2e-6 where T >= 4096"

[[gate]]
name = "control_passes"
expr = "check.control passes"

[[gate]]
name = "kernel_not_slower"
expr = "decode[configured] not SLOWER than decode[any] where batch >= 32"

[[gate]]
name = "merged_faster"
expr = "decode[merged] FASTER than decode[tiled] where batch >= 32"

[[gate]]
name = "overhead"
expr = "scenario.transfer.wall_s / scenario.prefill.wall_s <= 1.05"

[[gate]]
name = "prefill_wall"
expr = "scenario.prefill.wall_s <= 0.5"

[[gate]]
name = "prefill_wall_median"
expr = "median(scenario.prefill.wall_s) <= 0.5"

[[deployment_key]]
key = "decode_kernel"
values = ["tiled", "merged"]
implies = [{ probe = "decode" }]

[[deployment]]
name = "incident"
settings = { decode_kernel = "tiled" }

[[deployment]]
name = "fixed"
settings = { decode_kernel = "merged" }
)";

class GateEvalTest : public ::testing::Test {
 protected:
  GateEvalTest() : objective_(parse_objective(kObjective, "eval.toml")) {}

  const GateSpec& gate(const std::string& name) const {
    for (const auto& spec : objective_.gates) {
      if (spec.name == name) return spec;
    }
    throw std::runtime_error("no gate " + name);
  }
  Plan plan(const std::string& config) const {
    return make_plan(objective_, resolve_configuration(objective_, config));
  }
  GateResult evaluate(const std::string& name, const std::vector<PointResult>& results,
                      const std::string& config = "") const {
    return evaluate_gate(gate(name), objective_, plan(config), results);
  }

  static PointResult check_point(const std::string& entry, int64_t T, double rms_ratio,
                                 Verdict verdict = Verdict::kPass) {
    PointResult point;
    point.layer = Layer::kCheck;
    point.entry = entry;
    point.probe = "cp_vs_nocp";
    point.params = {{"T", T}, {"shards", int64_t{4}}};
    point.verdict = verdict;
    point.metrics = {{"", "rms_ratio", rms_ratio}, {"", "max_abs", rms_ratio * 10}};
    Finding finding;
    finding.id = "check.cp_vs_nocp.drift";
    finding.severity = verdict == Verdict::kFail ? Severity::kFail : Severity::kInfo;
    finding.claim = "drift at T=" + std::to_string(T);
    finding.reproduce = "loupe probe run cp_vs_nocp --set T=" + std::to_string(T) + " --seed 7";
    point.findings = {finding};
    return point;
  }

  // merged / tiled = ratio with the interval and verdict given.
  static PointResult bench_point(int64_t batch, double ratio, Interval ci,
                                 bench::AbVerdict verdict) {
    PointResult point;
    point.layer = Layer::kBench;
    point.entry = "decode";
    point.probe = "decode";
    point.params = {{"batch", batch}};
    point.verdict = Verdict::kPass;
    bench::Comparison comparison;
    comparison.ratio = ratio;
    comparison.ci = ci;
    comparison.threshold = 0.05;
    comparison.verdict = verdict;
    point.comparisons.push_back({"tiled", "merged", comparison});
    return point;
  }

  static std::vector<PointResult> scenario_points(const std::string& entry,
                                                  const std::vector<double>& walls) {
    std::vector<PointResult> out;
    for (size_t repeat = 0; repeat < walls.size(); ++repeat) {
      PointResult point;
      point.layer = Layer::kScenario;
      point.entry = entry;
      point.probe = "serve";
      point.params = {{"mode", std::string(entry)}};
      point.repeat = static_cast<int64_t>(repeat);
      point.verdict = Verdict::kPass;
      point.metrics = {{"", "wall_s", walls[repeat]}};
      out.push_back(point);
    }
    return out;
  }

  static std::vector<PointResult> scenarios(const std::vector<double>& prefill,
                                            const std::vector<double>& transfer) {
    auto out = scenario_points("prefill", prefill);
    for (auto& point : scenario_points("transfer", transfer)) out.push_back(point);
    return out;
  }

  Objective objective_;
};

// median(...): one repeat thrown far off (a preempted holder) fails the every-value bound and
// not the median's; a median over the bound fails, and only the repeats over it are attached.
TEST_F(GateEvalTest, MedianBoundJudgesEachPointsMedianOverItsRepeats) {
  const auto one_off = scenarios({0.1, 0.2, 0.9, 0.1, 0.3}, {});
  EXPECT_EQ(evaluate("prefill_wall", one_off).verdict, GateVerdict::kFail);
  const auto median = evaluate("prefill_wall_median", one_off);
  EXPECT_EQ(median.verdict, GateVerdict::kPass) << median.rule;
  EXPECT_DOUBLE_EQ(median.statistics.estimate.value(), 0.2);
  EXPECT_EQ(median.statistics.n, 5);
  EXPECT_EQ(median.rule,
            "pass: every point's median satisfies <= 0.5; the largest "
            "median(scenario.prefill.wall_s) over 1 point(s) (5 value(s)) is 0.2 at mode=prefill "
            "(its 5 seeds: median 0.2, spread [0.1, 0.9])");

  const auto mostly_over = evaluate("prefill_wall_median", scenarios({0.6, 0.2, 0.9, 0.7}, {}));
  EXPECT_EQ(mostly_over.verdict, GateVerdict::kFail) << mostly_over.rule;
  EXPECT_DOUBLE_EQ(mostly_over.statistics.estimate.value(), 0.65);  // (0.6 + 0.7) / 2

  const auto broken = evaluate("prefill_wall_median", scenarios({0.1, std::nan(""), 0.1}, {}));
  EXPECT_EQ(broken.verdict, GateVerdict::kFail) << broken.rule;
}

TEST_F(GateEvalTest, AbsoluteBoundPassesWhenEveryPointSatisfiesIt) {
  const auto result = evaluate(
      "drift", {check_point("cp_vs_nocp", 1024, 1e-7), check_point("cp_vs_nocp", 4096, 3e-7)});
  EXPECT_EQ(result.verdict, GateVerdict::kPass);
  EXPECT_EQ(result.layer, Layer::kCheck);
  EXPECT_EQ(result.statistics.n, 2);
  EXPECT_EQ(result.statistics.estimate, 3e-7);  // the largest value is reported
  EXPECT_EQ(result.statistics.bound, 2e-6);
  EXPECT_EQ(result.statistics.comparison, "<=");
  EXPECT_EQ(result.statistics.point, (Params{{"T", int64_t{4096}}, {"shards", int64_t{4}}}));
  EXPECT_EQ(result.rule.rfind("pass: every value satisfies <= 2.00e-06", 0), 0u) << result.rule;
  EXPECT_TRUE(result.findings.empty());
}

TEST_F(GateEvalTest, AbsoluteBoundFailsOnTheWorstPointAndCarriesItsFindings) {
  const auto result = evaluate("drift", {check_point("cp_vs_nocp", 1024, 1e-7),
                                         check_point("cp_vs_nocp", 4096, 9e-2, Verdict::kFail)});
  EXPECT_EQ(result.verdict, GateVerdict::kFail);
  EXPECT_EQ(result.statistics.estimate, 9e-2);
  EXPECT_EQ(result.statistics.point, (Params{{"T", int64_t{4096}}, {"shards", int64_t{4}}}));
  ASSERT_EQ(result.findings.size(), 1u);
  EXPECT_EQ(result.findings[0].claim, "drift at T=4096");
  EXPECT_EQ(result.findings[0].reproduce, "loupe probe run cp_vs_nocp --set T=4096 --seed 7");
  EXPECT_EQ(result.rule.rfind("fail: the largest check.cp_vs_nocp.rms_ratio", 0), 0u)
      << result.rule;
}

TEST_F(GateEvalTest, AbsoluteBoundFailsOnNaN) {
  const auto result = evaluate("drift", {check_point("cp_vs_nocp", 1024, 1e-7),
                                         check_point("cp_vs_nocp", 4096, std::nan(""))});
  EXPECT_EQ(result.verdict, GateVerdict::kFail);
  ASSERT_TRUE(result.statistics.estimate.has_value());
  EXPECT_TRUE(std::isnan(*result.statistics.estimate));
}

TEST_F(GateEvalTest, WhereClausePicksThePoints) {
  const std::vector<PointResult> results = {check_point("cp_vs_nocp", 1024, 5e-3),
                                            check_point("cp_vs_nocp", 4096, 1e-7)};
  EXPECT_EQ(evaluate("drift", results).verdict, GateVerdict::kFail);
  const auto large = evaluate("drift_large_T", results);
  EXPECT_EQ(large.verdict, GateVerdict::kPass);
  EXPECT_EQ(large.statistics.n, 1);
}

TEST_F(GateEvalTest, AbsoluteBoundWithoutTheMetricIsInconclusive) {
  PointResult point = check_point("cp_vs_nocp", 1024, 1e-7);
  point.metrics = {{"", "max_abs", 1.0}};
  const auto result = evaluate("drift", {point});
  EXPECT_EQ(result.verdict, GateVerdict::kInconclusive);
  EXPECT_EQ(result.statistics.n, 0);
  EXPECT_NE(result.rule.find("their metrics: max_abs"), std::string::npos) << result.rule;
}

TEST_F(GateEvalTest, CheckPassesFollowsThePointVerdicts) {
  EXPECT_EQ(evaluate("control_passes", {check_point("control", 1024, 0)}).verdict,
            GateVerdict::kPass);
  const auto failed = evaluate("control_passes", {check_point("control", 1024, 0),
                                                  check_point("control", 1024, 1, Verdict::kFail)});
  EXPECT_EQ(failed.verdict, GateVerdict::kFail);
  EXPECT_EQ(failed.findings.size(), 1u);
  EXPECT_EQ(failed.rule.rfind("fail: 1 of 2 point(s) of check control", 0), 0u) << failed.rule;
  EXPECT_EQ(
      evaluate("control_passes", {check_point("control", 1024, 0, Verdict::kInconclusive)}).verdict,
      GateVerdict::kInconclusive);
  // The other check's points are not this gate's.
  EXPECT_EQ(evaluate("control_passes", {check_point("cp_vs_nocp", 1024, 0)}).verdict,
            GateVerdict::kInconclusive);
}

TEST_F(GateEvalTest, BenchVerdictUsesTheConfiguredVariant) {
  // merged / tiled = 0.5: merged is FASTER, so tiled is SLOWER than merged.
  const std::vector<PointResult> results = {
      bench_point(8, 1.0, {0.98, 1.02}, bench::AbVerdict::kSame),
      bench_point(32, 0.5, {0.48, 0.52}, bench::AbVerdict::kFaster)};
  const auto incident = evaluate("kernel_not_slower", results, "incident");
  EXPECT_EQ(incident.verdict, GateVerdict::kFail);
  EXPECT_DOUBLE_EQ(*incident.statistics.estimate, 2.0);  // tiled / merged
  EXPECT_DOUBLE_EQ(incident.statistics.interval->low, 1.0 / 0.52);
  EXPECT_EQ(incident.statistics.point, (Params{{"batch", int64_t{32}}}));
  EXPECT_EQ(incident.statistics.n, 1);  // batch 8 is not selected
  EXPECT_NE(incident.rule.find("tiled/merged = 2 [1.92, 2.08] is SLOWER"), std::string::npos)
      << incident.rule;

  const auto fixed = evaluate("kernel_not_slower", results, "fixed");
  EXPECT_EQ(fixed.verdict, GateVerdict::kPass);
  EXPECT_DOUBLE_EQ(*fixed.statistics.estimate, 0.5);

  EXPECT_EQ(evaluate("merged_faster", results).verdict, GateVerdict::kPass);
}

// Issue 38, one direction everywhere: the bench states merged (its later variant) against tiled
// (its first); the gate reads tiled, the configured kernel, as the candidate. orient_to_gates
// restates the comparison and its finding the gate's way round, so every field agrees with it.
TEST_F(GateEvalTest, OrientToGatesStatesTheBenchTheWayTheGateReadsIt) {
  auto with_finding = [](PointResult point) {
    bench::FindingContext context;
    context.subject = "kda";
    context.probe = "decode";
    context.params = point.params;
    context.path = "merged vs tiled";
    context.name_a = "tiled";
    context.name_b = "merged";
    context.reproduce = "loupe probe run decode --seed 7";
    point.comparisons[0].comparison.a.n = 10;
    point.comparisons[0].comparison.b.n = 12;
    point.findings = {bench::comparison_finding(point.comparisons[0].comparison, context)};
    return point;
  };
  const std::vector<PointResult> as_measured = {
      with_finding(bench_point(8, 1.0, {0.98, 1.02}, bench::AbVerdict::kSame)),
      with_finding(bench_point(32, 0.5, {0.48, 0.52}, bench::AbVerdict::kFaster))};
  ASSERT_EQ(as_measured[1].findings[0].id, "bench.decode.faster");

  std::vector<PointResult> results = as_measured;
  std::vector<GateResult> gates = {
      evaluate_gate(gate("kernel_not_slower"), objective_, plan("incident"), results)};
  ASSERT_EQ(gates[0].verdict, GateVerdict::kFail);
  ASSERT_EQ(gates[0].findings.size(), 1u);
  EXPECT_EQ(gates[0].statistics.candidate, "tiled");
  EXPECT_EQ(gates[0].statistics.baseline, "merged");
  const auto statistics = gate_statistics_to_json(gates[0].statistics);
  EXPECT_EQ(statistics.at("ratio_of"), "candidate/baseline");
  EXPECT_EQ(statistics.at("candidate"), "tiled");
  EXPECT_EQ(statistics.at("baseline"), "merged");

  orient_to_gates(objective_, plan("incident"), results, gates);
  const VariantComparison& oriented = results[1].comparisons[0];
  EXPECT_EQ(oriented.a, "merged");  // the baseline
  EXPECT_EQ(oriented.b, "tiled");   // the candidate
  EXPECT_DOUBLE_EQ(oriented.comparison.ratio, 2.0);
  EXPECT_DOUBLE_EQ(oriented.comparison.ci.low, 1.0 / 0.52);
  EXPECT_DOUBLE_EQ(oriented.comparison.ci.high, 1.0 / 0.48);
  EXPECT_EQ(oriented.comparison.verdict, bench::AbVerdict::kSlower);
  EXPECT_EQ(oriented.comparison.a.n, 12);
  EXPECT_EQ(oriented.comparison.b.n, 10);
  const Finding& finding = results[1].findings[0];
  EXPECT_EQ(finding.id, "bench.decode.slower");
  EXPECT_EQ(finding.severity, Severity::kWarn);
  EXPECT_EQ(finding.where.path, "tiled vs merged");
  EXPECT_EQ(finding.claim.rfind("tiled is 2.00× slower than merged (ratio of medians "
                                "tiled/merged 2.0000, 95% CI [1.9231, 2.0833], n = 12/10",
                                0),
            0u)
      << finding.claim;
  EXPECT_EQ(finding.reproduce, "loupe probe run decode --seed 7");
  EXPECT_EQ(gates[0].findings[0], finding);  // the gate's copy too
  // SAME stays SAME, the other way round.
  EXPECT_EQ(results[0].findings[0].id, "bench.decode.same");
  EXPECT_EQ(results[0].findings[0].where.path, "tiled vs merged");
  // The gate reads the restated comparison to the same verdict and statistics.
  const GateResult again =
      evaluate_gate(gate("kernel_not_slower"), objective_, plan("incident"), results);
  EXPECT_EQ(again.verdict, GateVerdict::kFail);
  EXPECT_DOUBLE_EQ(*again.statistics.estimate, 2.0);
  EXPECT_EQ(again.rule, gates[0].rule);

  // Where the gate's candidate is the bench's own (merged, configured in "fixed"), nothing moves.
  std::vector<PointResult> fixed = as_measured;
  std::vector<GateResult> none;
  orient_to_gates(objective_, plan("fixed"), fixed, none);
  EXPECT_EQ(fixed[1].comparisons[0].a, "tiled");
  EXPECT_EQ(fixed[1].findings[0], as_measured[1].findings[0]);
}

TEST_F(GateEvalTest, AmbiguousBenchVerdictIsInconclusive) {
  const auto result =
      evaluate("kernel_not_slower",
               {bench_point(32, 1.03, {0.9, 1.2}, bench::AbVerdict::kAmbiguous)}, "incident");
  EXPECT_EQ(result.verdict, GateVerdict::kInconclusive);
  EXPECT_NE(result.rule.find("AMBIGUOUS"), std::string::npos) << result.rule;
}

TEST_F(GateEvalTest, BenchVerdictWithoutConfigurationIsInconclusive) {
  const auto result = evaluate("kernel_not_slower",
                               {bench_point(32, 0.5, {0.48, 0.52}, bench::AbVerdict::kFaster)});
  EXPECT_EQ(result.verdict, GateVerdict::kInconclusive);
  EXPECT_NE(result.rule.find("names no single variant"), std::string::npos) << result.rule;
}

TEST_F(GateEvalTest, BenchVerdictWithNoSelectedPointIsInconclusive) {
  const auto result =
      evaluate("kernel_not_slower", {bench_point(8, 0.5, {0.48, 0.52}, bench::AbVerdict::kFaster)},
               "incident");
  EXPECT_EQ(result.verdict, GateVerdict::kInconclusive);
}

TEST_F(GateEvalTest, RelativeBoundFailsWhenTheWholeIntervalExceedsIt) {
  const auto result =
      evaluate("overhead", scenarios({1.0, 1.01, 0.99, 1.0, 1.02}, {2.0, 2.02, 1.98, 2.0, 2.04}));
  EXPECT_EQ(result.verdict, GateVerdict::kFail);
  EXPECT_EQ(result.statistics.n, 5);
  EXPECT_EQ(result.statistics.n_baseline, 5);
  EXPECT_DOUBLE_EQ(*result.statistics.estimate, 2.0);
  EXPECT_GT(result.statistics.interval->low, 1.05);
  EXPECT_EQ(result.statistics.bound, 1.05);
  EXPECT_EQ(result.statistics.confidence, 0.95);
  EXPECT_EQ(result.rule.rfind("fail: the 95% bootstrap CI of the ratio of medians", 0), 0u)
      << result.rule;
}

TEST_F(GateEvalTest, RelativeBoundPassesWhenTheWholeIntervalIsWithinIt) {
  const auto result =
      evaluate("overhead", scenarios({1.0, 1.01, 0.99, 1.0, 1.02}, {1.0, 0.99, 1.01, 1.0, 1.0}));
  EXPECT_EQ(result.verdict, GateVerdict::kPass);
  EXPECT_LE(result.statistics.interval->high, 1.05);
}

TEST_F(GateEvalTest, RelativeBoundStraddlingTheLimitIsInconclusive) {
  const auto result =
      evaluate("overhead", scenarios({1.0, 1.0, 1.0, 1.0, 1.0}, {0.9, 0.95, 1.05, 1.15, 1.2}));
  EXPECT_EQ(result.verdict, GateVerdict::kInconclusive);
  EXPECT_TRUE(result.statistics.interval->contains(1.05));
}

TEST_F(GateEvalTest, RelativeBoundIsDeterministic) {
  const auto points = scenarios({1.0, 1.1, 0.9, 1.0, 1.05}, {1.2, 1.0, 1.1, 1.3, 1.0});
  const auto first = evaluate("overhead", points);
  const auto second = evaluate("overhead", points);
  EXPECT_EQ(first.statistics.interval, second.statistics.interval);
  EXPECT_EQ(first.statistics.seed, second.statistics.seed);
}

TEST_F(GateEvalTest, NotRunGateSaysWhy) {
  const auto result = not_run_gate(gate("overhead"), "the cascade stopped after the check layer");
  EXPECT_EQ(result.verdict, GateVerdict::kNotRun);
  EXPECT_EQ(result.layer, Layer::kScenario);
  EXPECT_EQ(result.rule, "not run: the cascade stopped after the check layer");
  EXPECT_EQ(gate_result_to_json(result).at("verdict"), "not-run");
}

TEST_F(GateEvalTest, JsonCarriesTheStatistics) {
  const auto result = evaluate("drift", {check_point("cp_vs_nocp", 4096, 3e-7)});
  const auto json = gate_result_to_json(result);
  EXPECT_EQ(json.at("name"), "drift");
  EXPECT_EQ(json.at("layer"), "check");
  EXPECT_EQ(json.at("verdict"), "pass");
  EXPECT_EQ(json.at("statistics").at("n"), 1);
  EXPECT_EQ(json.at("statistics").at("bound"), 2e-6);
  EXPECT_EQ(json.at("statistics").at("point").at("T"), 4096);
  EXPECT_EQ(key_statistic(result), "3.00e-07 <= 2.00e-06 n=1");
}

// A scenario gate against a baseline build before its last repeat: only at a look (3, 5, 8, ...
// pairs for 25 repeats), only from paired repeats, and only a FAIL.
TEST(DecideBeforeLastRepeatTest, FailsAtALookWhenTheRepeatsSoFarLieFarBeyondTheBound) {
  const Objective objective = parse_objective(R"(name = "looks"
[subject]
command = ["subject", "probe"]

[[scenario]]
name = "transfer"
probe = "serve"
repeats = 25

[[gate]]
name = "holds_vs_baseline"
expr = "scenario.transfer.holds / baseline <= 1.5"

[[gate]]
name = "floor_vs_baseline"
expr = "scenario.transfer.holds / baseline >= 0.5"
)",
                                              "looks.toml");
  auto points = [](int64_t n, double holds, bool paired) {
    std::vector<PointResult> out;
    for (int64_t repeat = 0; repeat < n; ++repeat) {
      PointResult point;
      point.layer = Layer::kScenario;
      point.entry = "transfer";
      point.probe = "serve";
      point.repeat = repeat;
      point.paired = paired;
      point.metrics = {{"", "holds", holds}};
      out.push_back(point);
    }
    return out;
  };
  const GateSpec& holds = objective.gates[0];
  const std::vector<PointResult> baseline = points(25, 1.0, true);
  // Ten holds against one: decided at the first look, and at the second; 4 pairs are no look.
  const auto at_three = decide_before_last_repeat(holds, points(3, 10.0, true), baseline, 25);
  ASSERT_TRUE(at_three.has_value());
  EXPECT_EQ(at_three->verdict, GateVerdict::kFail);
  EXPECT_EQ(at_three->statistics.n, 3);
  EXPECT_DOUBLE_EQ(*at_three->statistics.estimate, 10.0);
  EXPECT_EQ(at_three->rule,
            "fail: scenario.transfer.holds / baseline is not <= 1.5 at the default point, decided "
            "at a look before the last of 25 repeats: the repeats of both builds run back to back "
            "are above beyond doubt after 3 pairs: 3 of 3 pair ratios above 1.5 (median 10), "
            "one-sided 20 %-trimmed t-test on log(ratio / 1.5) p = 0 against 0.00167 (0.01 spent "
            "over 6 looks)");
  EXPECT_FALSE(decide_before_last_repeat(holds, points(4, 10.0, true), baseline, 25));
  EXPECT_TRUE(decide_before_last_repeat(holds, points(5, 10.0, true), baseline, 25));
  // Not beyond the bound, or not run back to back (a recorded baseline): nothing early.
  EXPECT_FALSE(decide_before_last_repeat(holds, points(3, 1.0, true), baseline, 25));
  EXPECT_FALSE(decide_before_last_repeat(holds, points(3, 10.0, false), baseline, 25));
  // 3 repeats in all: the third is the last, decided by the fixed-sample rule alone.
  EXPECT_FALSE(decide_before_last_repeat(holds, points(3, 10.0, true), baseline, 3));
  // A lower bound fails when the ratios lie below it.
  const GateSpec& floor = objective.gates[1];
  EXPECT_TRUE(decide_before_last_repeat(floor, points(3, 0.1, true), baseline, 25));
  EXPECT_FALSE(decide_before_last_repeat(floor, points(3, 10.0, true), baseline, 25));
}

// A median within the build before its last repeat: the repeats' own values against the bound,
// at a look, only a FAIL, and never for a gate that is not a median or not within the build.
TEST(DecideMedianBeforeLastRepeatTest, FailsAtALookWhenTheRepeatsSoFarLieFarBeyondTheBound) {
  const Objective objective = parse_objective(R"(name = "looks"
[subject]
command = ["subject", "probe"]

[[scenario]]
name = "transfer"
probe = "serve"
repeats = 25

[[gate]]
name = "blocked_within_2ms"
expr = "median(scenario.transfer.blocked_s) <= 0.002"

[[gate]]
name = "share_at_least"
expr = "median(scenario.transfer.blocked_s) >= 0.001"

[[gate]]
name = "every_value"
expr = "scenario.transfer.blocked_s <= 0.002"
)",
                                              "median_looks.toml");
  auto points = [](const std::vector<double>& values) {
    std::vector<PointResult> out;
    for (size_t repeat = 0; repeat < values.size(); ++repeat) {
      PointResult point;
      point.layer = Layer::kScenario;
      point.entry = "transfer";
      point.probe = "serve";
      point.repeat = static_cast<int64_t>(repeat);
      point.metrics = {{"", "blocked_s", values[repeat]}};
      out.push_back(point);
    }
    return out;
  };
  const GateSpec& within = objective.gates[0];
  // A consumer left asleep 60 ms a run: decided at the first look (3 repeats).
  const auto at_three = decide_median_before_last_repeat(within, points({0.06, 0.063, 0.065}), 25);
  ASSERT_TRUE(at_three.has_value());
  EXPECT_EQ(at_three->verdict, GateVerdict::kFail);
  EXPECT_EQ(at_three->statistics.n, 3);
  EXPECT_DOUBLE_EQ(*at_three->statistics.estimate, 0.063);
  const std::string begins =
      "fail: median(scenario.transfer.blocked_s) is not <= 0.002 at the default point, decided at "
      "a look before the last of 25 repeats: the repeats so far are above beyond doubt after 3 "
      "repeats: 3 of 3 values above 0.002 (median 0.063), one-sided 20 %-trimmed t-test on "
      "log(value / 0.002)";
  EXPECT_EQ(at_three->rule.substr(0, begins.size()), begins);
  EXPECT_NE(at_three->rule.find("3 of 3 values above 0.002"), std::string::npos) << at_three->rule;
  // 4 repeats are no look; honest values (0 included) decide nothing; one repeat of three on the
  // bound's side is more than the trimming allows at 3.
  EXPECT_FALSE(decide_median_before_last_repeat(within, points({0.06, 0.06, 0.06, 0.06}), 25));
  EXPECT_FALSE(decide_median_before_last_repeat(within, points({0.0, 0.0003, 0.0002}), 25));
  EXPECT_FALSE(decide_median_before_last_repeat(within, points({0.06, 0.0003, 0.06}), 25));
  // 3 repeats in all: the third is the last, decided by the fixed-sample rule alone.
  EXPECT_FALSE(decide_median_before_last_repeat(within, points({0.06, 0.06, 0.06}), 3));
  // A lower bound fails when the values lie below it; a value of 0 counts as far below.
  const GateSpec& floor = objective.gates[1];
  EXPECT_TRUE(decide_median_before_last_repeat(floor, points({0.0, 0.0, 0.0}), 25));
  EXPECT_FALSE(decide_median_before_last_repeat(floor, points({0.06, 0.06, 0.06}), 25));
  // Not a median: left to the fixed-sample rule.
  EXPECT_FALSE(
      decide_median_before_last_repeat(objective.gates[2], points({0.06, 0.06, 0.06}), 25));
}

}  // namespace
}  // namespace loupe::gate
