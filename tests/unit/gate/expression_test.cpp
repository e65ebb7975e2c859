#include "gate/expression.hpp"

#include <gtest/gtest.h>

namespace loupe::gate {
namespace {

std::string parse_error(const std::string& text) {
  try {
    parse_gate_expression(text);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kConfig);
    return error.message();
  }
  return "no error";
}

TEST(GateExpressionTest, AbsoluteBound) {
  const auto expression = parse_gate_expression("check.cp_vs_nocp.rms_ratio <= 2e-6");
  MetricBound expected;
  expected.metric = {Layer::kCheck, "cp_vs_nocp", std::nullopt, "rms_ratio"};
  expected.comparison = Comparison::kLessEqual;
  expected.limit = 2e-6;
  EXPECT_EQ(expression, GateExpression(expected));
  EXPECT_EQ(gate_layer(expression), Layer::kCheck);
  EXPECT_EQ(gate_expression_to_string(expression), "check.cp_vs_nocp.rms_ratio <= 2e-06");
}

TEST(GateExpressionTest, MedianOfAnAbsoluteBound) {
  const auto expression = parse_gate_expression(
      "MEDIAN(scenario.prefill_transfer.prefill_worker_interpreter_lock_wait_share) <= 0.2");
  MetricBound expected;
  expected.metric = {Layer::kScenario, "prefill_transfer", std::nullopt,
                     "prefill_worker_interpreter_lock_wait_share"};
  expected.median = true;
  expected.comparison = Comparison::kLessEqual;
  expected.limit = 0.2;
  EXPECT_EQ(expression, GateExpression(expected));
  EXPECT_EQ(gate_expression_to_string(expression),
            "median(scenario.prefill_transfer.prefill_worker_interpreter_lock_wait_share) <= 0.2");
  EXPECT_EQ(parse_error("median(scenario.a.wall_s / scenario.b.wall_s) <= 1"),
            "at column 26: expected ')', found '/'");
  EXPECT_EQ(parse_error("median(scenario.a.wall_s) / baseline <= 1"),
            "at column 27: expected a comparison (median(...) takes an absolute bound: a ratio "
            "has its own interval), found '/'");
  EXPECT_EQ(parse_error("median(check.a passes)"),
            "at column 16: expected '.' and a metric (median takes a metric), found 'passes'");
  EXPECT_EQ(parse_error("median(decode[merged]) <= 1"),
            "at column 8: expected a metric (LAYER.NAME.METRIC) inside median(...), found "
            "'decode'");
}

TEST(GateExpressionTest, RelativeBoundBetweenNamedScenarios) {
  const auto expression =
      parse_gate_expression("scenario.prefill_transfer.wall_s / scenario.prefill.wall_s <= 1.05");
  MetricBound expected;
  expected.metric = {Layer::kScenario, "prefill_transfer", std::nullopt, "wall_s"};
  expected.baseline = MetricRef{Layer::kScenario, "prefill", std::nullopt, "wall_s"};
  expected.comparison = Comparison::kLessEqual;
  expected.limit = 1.05;
  EXPECT_EQ(expression, GateExpression(expected));
  EXPECT_EQ(gate_layer(expression), Layer::kScenario);
  EXPECT_EQ(gate_expression_to_string(expression),
            "scenario.prefill_transfer.wall_s / scenario.prefill.wall_s <= 1.05");
}

TEST(GateExpressionTest, RelativeBoundBetweenVariantsWithWhere) {
  const auto expression = parse_gate_expression(
      "bench.decode[merged].mean_s / bench.decode[tiled].mean_s < 1 where batch >= 32 and "
      "H == 64");
  MetricBound expected;
  expected.metric = {Layer::kBench, "decode", "merged", "mean_s"};
  expected.baseline = MetricRef{Layer::kBench, "decode", "tiled", "mean_s"};
  expected.comparison = Comparison::kLess;
  expected.limit = 1;
  expected.where = {{"batch", Comparison::kGreaterEqual, int64_t{32}},
                    {"H", Comparison::kEqual, int64_t{64}}};
  EXPECT_EQ(expression, GateExpression(expected));
  EXPECT_EQ(gate_expression_to_string(expression),
            "bench.decode[merged].mean_s / bench.decode[tiled].mean_s < 1.0 where batch >= 32 "
            "and H == 64");
}

TEST(GateExpressionTest, BenchVerdicts) {
  const auto configured =
      parse_gate_expression("decode[configured] not SLOWER than decode[any] where batch >= 32");
  BenchVerdict expected;
  expected.subject = {"decode", VariantSelector::kConfigured, ""};
  expected.negated = true;
  expected.relation = AbRelation::kSlower;
  expected.other = {"decode", VariantSelector::kAny, ""};
  expected.where = {{"batch", Comparison::kGreaterEqual, int64_t{32}}};
  EXPECT_EQ(configured, GateExpression(expected));
  EXPECT_EQ(gate_layer(configured), Layer::kBench);

  const auto named = parse_gate_expression("decode[merged] not slower than decode[tiled]");
  expected.subject = {"decode", VariantSelector::kNamed, "merged"};
  expected.other = {"decode", VariantSelector::kNamed, "tiled"};
  expected.where.clear();
  EXPECT_EQ(named, GateExpression(expected));
  EXPECT_EQ(gate_expression_to_string(named), "decode[merged] not SLOWER than decode[tiled]");

  const auto same = parse_gate_expression(
      "decode[merged] SAME as decode[tiled] where mode == "
      "\"prefill+transfer\" and fast == true");
  EXPECT_EQ(gate_expression_to_string(same),
            "decode[merged] SAME as decode[tiled] where mode == \"prefill+transfer\" and fast == "
            "true");
  const auto faster = parse_gate_expression("decode[merged] FASTER than decode[tiled]");
  EXPECT_EQ(std::get<BenchVerdict>(faster).relation, AbRelation::kFaster);
  EXPECT_FALSE(std::get<BenchVerdict>(faster).negated);
}

TEST(GateExpressionTest, CheckPasses) {
  const auto expression = parse_gate_expression("check.cp_control passes where T > 1024.5");
  CheckPasses expected{"cp_control", {{"T", Comparison::kGreater, 1024.5}}};
  EXPECT_EQ(expression, GateExpression(expected));
  EXPECT_EQ(gate_expression_to_string(expression), "check.cp_control passes where T > 1024.5");
}

TEST(GateExpressionTest, AgainstTheBaseline) {
  const auto bound = parse_gate_expression("check.state_cache.rms_ratio / baseline <= 1.2");
  MetricBound expected;
  expected.metric = {Layer::kCheck, "state_cache", std::nullopt, "rms_ratio"};
  expected.versus_baseline = true;
  expected.comparison = Comparison::kLessEqual;
  expected.limit = 1.2;
  EXPECT_EQ(bound, GateExpression(expected));
  EXPECT_EQ(gate_expression_to_string(bound), "check.state_cache.rms_ratio / baseline <= 1.2");

  const auto verdict = parse_gate_expression("decode not SLOWER than baseline where batch >= 32");
  const auto& parsed = std::get<BenchVerdict>(verdict);
  EXPECT_TRUE(parsed.versus_baseline);
  EXPECT_TRUE(parsed.negated);
  EXPECT_EQ(parsed.subject.selector, VariantSelector::kAny);
  EXPECT_EQ(gate_expression_to_string(verdict),
            "decode[any] not SLOWER than baseline where batch >= 32");
  // A bench named "baseline" is still a bench.
  EXPECT_FALSE(std::get<BenchVerdict>(parse_gate_expression("baseline[x] SAME as baseline[y]"))
                   .versus_baseline);
  // "any" on the left is for the baseline only.
  EXPECT_NE(parse_error("b[any] SAME as b[x]"), "no error");
}

TEST(GateExpressionTest, CanonicalTextParsesBackToTheSameTree) {
  for (const char* text :
       {"check.a.max_abs >= -3", "scenario.a.tokens_per_s / scenario.b.tokens_per_s >= 0.95",
        "b[x] not FASTER than b[configured] where precision != tf32_rz",
        "check.a passes where decay == slow and T <= 4096", "check.a.ulp_p99 == 0",
        "check.a.rms_ratio / baseline <= 1.5", "b[configured] not SLOWER than baseline"}) {
    const auto expression = parse_gate_expression(text);
    EXPECT_EQ(parse_gate_expression(gate_expression_to_string(expression)), expression) << text;
  }
}

TEST(GateExpressionTest, ErrorsNameTheColumnAndWhatWasExpected) {
  EXPECT_EQ(parse_error(""),
            "at column 1: expected a metric (check.NAME.METRIC), a bench verdict (NAME[VARIANT] "
            "...) or check.NAME passes, found the end");
  EXPECT_EQ(parse_error("check.cp.rms_ratio <= "),
            "at column 23: expected a number, found the end");
  // A sign and a point followed by no digit read nothing: once an endless loop (objective_fuzz).
  EXPECT_EQ(parse_error("chec+.re <= 1"), "at column 5: expected a number, found '+.'");
  EXPECT_EQ(parse_error("check.cp.rms_ratio <= -.e"),
            "at column 23: expected a number, found '-.'");
  EXPECT_EQ(parse_error("check.cp.rms_ratio 2e-6"),
            "at column 20: expected a comparison (<=, <, >=, >, ==, !=), found '2e-6'");
  EXPECT_EQ(parse_error("check.cp <= 1"),
            "at column 10: expected '.' and a metric, or 'passes', found '<='");
  EXPECT_EQ(parse_error("scenario.a passes"),
            "at column 12: expected '.' and a metric ('passes' applies to checks), found "
            "'passes'");
  EXPECT_EQ(parse_error("scenario.a.wall_s / check.b.wall_s <= 1"),
            "at column 21: expected a metric of the same layer (scenario) after '/': a ratio "
            "compares two probes of one layer, found 'check'");
  EXPECT_EQ(parse_error("decode[merged] SLOWER decode[tiled]"),
            "at column 23: expected 'than', found 'decode'");
  EXPECT_EQ(parse_error("decode[merged] BETTER than decode[tiled]"),
            "at column 16: expected SLOWER, FASTER or SAME (optionally after 'not'), found "
            "'BETTER'");
  EXPECT_EQ(parse_error("decode[merged] not SLOWER than prefill[tiled]"),
            "at column 32: expected the bench 'decode' again: a verdict compares two variants of "
            "one bench, found 'prefill'");
  EXPECT_EQ(parse_error("decode[any] not SLOWER than decode[tiled]"),
            "at column 8: expected a variant name or 'configured' on the left ('any' belongs on "
            "the right), found 'any'");
  EXPECT_EQ(parse_error("decode[merged not SLOWER than decode[tiled]"),
            "at column 15: expected ']', found 'not'");
  EXPECT_EQ(parse_error("check.a.x <= 1 where"),
            "at column 21: expected a parameter name, found the end");
  EXPECT_EQ(parse_error("check.a.x <= 1 where T >= "),
            "at column 27: expected a number, true, false, a word or a quoted string, found the "
            "end");
  EXPECT_EQ(parse_error("check.a.x <= 1 extra"),
            "at column 16: expected 'where' or the end, "
            "found 'extra'");
  EXPECT_EQ(parse_error("check.a.x <= 1 where mode == \"open"),
            "at column 30: expected a closing \", found the end");
  EXPECT_EQ(parse_error("check.a.x <= 1e999"),
            "at column 14: expected a finite number, found "
            "'1e999'");
  EXPECT_EQ(parse_error("check.a.x <= 1 where T = 3"),
            "at column 24: expected a name, a number, a comparison, '.', '/', '[', ']', '(' or "
            "')', found "
            "'='");
}

TEST(GateConditionTest, ValuesCompareByKind) {
  EXPECT_TRUE(compare_values(int64_t{32}, Comparison::kGreaterEqual, int64_t{32}));
  EXPECT_TRUE(compare_values(int64_t{32}, Comparison::kLess, 32.5));
  EXPECT_TRUE(compare_values(std::string("tf32_rz"), Comparison::kEqual, std::string("tf32_rz")));
  EXPECT_TRUE(compare_values(true, Comparison::kEqual, true));
  EXPECT_FALSE(compare_values(true, Comparison::kLess, false));
  EXPECT_FALSE(compare_values(std::string("32"), Comparison::kEqual, int64_t{32}));
  EXPECT_TRUE(compare_values(std::string("32"), Comparison::kNotEqual, int64_t{32}));

  const Params point = {{"batch", int64_t{64}}, {"mode", std::string("decode")}};
  EXPECT_TRUE(conditions_hold({{"batch", Comparison::kGreaterEqual, int64_t{32}},
                               {"mode", Comparison::kEqual, std::string("decode")}},
                              point));
  EXPECT_FALSE(conditions_hold({{"batch", Comparison::kLess, int64_t{32}}}, point));
  EXPECT_FALSE(condition_holds({"H", Comparison::kEqual, int64_t{64}}, point));
  EXPECT_TRUE(conditions_hold({}, point));
}

}  // namespace
}  // namespace loupe::gate
