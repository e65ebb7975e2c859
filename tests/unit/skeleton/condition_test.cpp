#include "skeleton/condition.hpp"

#include <gtest/gtest.h>

#include "loupe/error.hpp"

namespace loupe::skeleton {
namespace {

std::string parse_error(std::string_view text) {
  try {
    parse_condition(text);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kConfig);
    return error.message();
  }
  return "no error";
}

Finding finding(std::string id, Severity severity,
                std::vector<std::pair<std::string, double>> metrics, Params params = {}) {
  Finding result;
  result.id = std::move(id);
  result.severity = severity;
  result.evidence.metrics = std::move(metrics);
  result.where.params = std::move(params);
  return result;
}

TEST(ConditionTest, ParsesAtomsWithAndBindingTighterThanOr) {
  const Condition condition = parse_condition(
      "finding(\"check.*.drift\", warn, fail) or finding('bench.decode.faster').ratio < 0.95 and "
      "not param(precision) in [\"tf32_rz\", 'bf16', 3, true]");
  ASSERT_EQ(condition.kind, Condition::Kind::kOr);
  ASSERT_EQ(condition.operands.size(), 2u);
  EXPECT_EQ(condition.operands[0].pattern, "check.*.drift");
  EXPECT_EQ(condition.operands[0].severities,
            (std::vector<Severity>{Severity::kWarn, Severity::kFail}));
  EXPECT_EQ(condition.operands[0].column, 1);
  const Condition& conjunction = condition.operands[1];
  ASSERT_EQ(conjunction.kind, Condition::Kind::kAnd);
  EXPECT_EQ(conjunction.operands[0].name, "ratio");
  EXPECT_EQ(conjunction.operands[0].op, CompareOp::kLess);
  EXPECT_EQ(conjunction.operands[0].values, std::vector<Value>{0.95});
  EXPECT_EQ(conjunction.operands[1].kind, Condition::Kind::kNot);
  EXPECT_EQ(conjunction.operands[1].operands[0].values,
            (std::vector<Value>{std::string("tf32_rz"), std::string("bf16"), int64_t{3}, true}));
  EXPECT_EQ(condition_to_string(condition),
            "finding(\"check.*.drift\", warn, fail) or finding(\"bench.decode.faster\").ratio < "
            "0.95 and not param(precision) in [\"tf32_rz\", \"bf16\", 3, true]");
  EXPECT_EQ(condition_to_string(parse_condition("(param(a) == 1 or param(b) != \"x\") and "
                                                "not (finding(\"x\") and finding(\"y\"))")),
            "(param(a) == 1 or param(b) != \"x\") and not (finding(\"x\") and finding(\"y\"))");
}

TEST(ConditionTest, ParseErrorsNameTheColumnAndWhatWasExpected) {
  EXPECT_EQ(parse_error("finding(\"x\").rms_ratio >"),
            "at column 25: expected a number, found the end in 'finding(\"x\").rms_ratio >'");
  EXPECT_EQ(parse_error("finding(x)"),
            "at column 9: expected a quoted finding id pattern, found 'x' in 'finding(x)'");
  EXPECT_EQ(parse_error("param(precision) = \"tf32\""),
            "at column 18: expected a comparison (<, <=, >, >=, ==, !=), found '=' in "
            "'param(precision) = \"tf32\"'");
  EXPECT_EQ(parse_error("finding(\"x\", fatal)"),
            "at column 14: expected a severity (fail, warn, info), found 'fatal' in "
            "'finding(\"x\", fatal)'");
  EXPECT_EQ(parse_error("finding(\"x\") finding(\"y\")"),
            "at column 14: expected 'and', 'or' or the end, found 'finding' in "
            "'finding(\"x\") finding(\"y\")'");
  EXPECT_EQ(parse_error("gate(\"x\")"),
            "at column 1: expected finding(...), param(...), 'not' or '(', found 'gate' in "
            "'gate(\"x\")'");
  EXPECT_EQ(parse_error("finding(\"x\").ratio < \"big\""),
            "at column 22: expected a number, found the string \"big\" in "
            "'finding(\"x\").ratio < \"big\"'");
  EXPECT_EQ(parse_error("param(a) in [1, 2"),
            "at column 18: expected ']', found the end in 'param(a) in [1, 2'");
  EXPECT_EQ(parse_error("finding(\"x) "),
            "at column 9: expected a closing quote, found the end in 'finding(\"x) '");
  EXPECT_EQ(parse_error("\nfinding(\"x\")\n  and $"),
            "at line 3, column 7: expected a word, a string, a number, an operator or a "
            "parenthesis, found '$' in ' finding(\"x\")   and $'");
  EXPECT_EQ(parse_error(""),
            "at column 1: expected finding(...), param(...), 'not' or '(', found "
            "the end in ''");
}

TEST(ConditionTest, FindingIdGlobsWorkOnDottedParts) {
  EXPECT_TRUE(finding_id_matches("check.cp_vs_nocp.*", "check.cp_vs_nocp.drift"));
  EXPECT_FALSE(finding_id_matches("check.*", "check.cp_vs_nocp.drift"));
  EXPECT_TRUE(finding_id_matches("check.**", "check.cp_vs_nocp.guard.output_alias"));
  EXPECT_TRUE(finding_id_matches("*.*.locks", "trace.diff.locks"));
  EXPECT_TRUE(finding_id_matches("bench.decode.?aster", "bench.decode.faster"));
  EXPECT_FALSE(finding_id_matches("bench.decode", "bench.decode.faster"));
  EXPECT_FALSE(finding_id_matches("trace.diff.lock", "trace.diff.locks"));
}

TEST(ConditionTest, FindingAtomsFilterBySeverityAndMetric) {
  const std::vector<Finding> findings = {
      finding("check.cp_vs_nocp.oracle", Severity::kWarn, {{"rms_ratio", 2.1e-3}}),
      finding("check.cp_vs_nocp.mismatch", Severity::kFail, {{"rms_ratio", 2.1e-3}},
              {{"T", int64_t{2048}}, {"precision", std::string("tf32_rz")}}),
      finding("check.cp_vs_nocp.mismatch", Severity::kFail, {{"rms_ratio", 1.8e-3}}),
  };
  Evaluation metric = evaluate(
      parse_condition("finding(\"check.cp_vs_nocp.*\", fail).rms_ratio > 1e-4"), findings, {});
  EXPECT_TRUE(metric.holds);
  EXPECT_EQ(metric.reasons,
            std::vector<std::string>{"finding check.cp_vs_nocp.mismatch (fail) at T=2048,precision="
                                     "tf32_rz: rms_ratio 0.0021 > 0.0001 (+1 more)"});
  EXPECT_EQ(metric.strongest, Severity::kFail);
  EXPECT_DOUBLE_EQ(metric.weight, 1.0);

  EXPECT_FALSE(
      evaluate(parse_condition("finding(\"check.cp_vs_nocp.*\").rms_ratio > 1e-2"), findings, {})
          .holds);
  EXPECT_FALSE(
      evaluate(parse_condition("finding(\"check.cp_vs_nocp.oracle\", fail)"), findings, {}).holds);
  EXPECT_FALSE(
      evaluate(parse_condition("finding(\"check.cp_vs_nocp.*\").max_abs > 0"), findings, {})
          .holds);  // a metric the findings do not carry never compares true
  const Evaluation warn =
      evaluate(parse_condition("finding(\"check.cp_vs_nocp.oracle\")"), findings, {});
  EXPECT_EQ(warn.reasons, std::vector<std::string>{"finding check.cp_vs_nocp.oracle (warn)"});
  EXPECT_DOUBLE_EQ(warn.weight, 0.7);
}

TEST(ConditionTest, ParamAtomsReadSettingsFirstThenFindingPoints) {
  const std::vector<Finding> findings = {
      finding("trace.diff.locks", Severity::kWarn, {{"delta_ns", 4.3e7}},
              {{"dispatch_holds_lock", true}, {"layers", int64_t{4}}})};
  const Params settings = {{"precision", std::string("tf32_rz")}, {"shards", int64_t{8}}};
  auto holds = [&](std::string_view text) {
    return evaluate(parse_condition(text), findings, settings);
  };
  EXPECT_EQ(holds("param(precision) in [\"tf32_rz\", \"tf32_rne\"]").reasons,
            std::vector<std::string>{
                "param precision = tf32_rz (deployment setting) in [\"tf32_rz\", \"tf32_rne\"]"});
  EXPECT_EQ(holds("param(dispatch_holds_lock) == true").reasons,
            std::vector<std::string>{
                "param dispatch_holds_lock = true (point of finding trace.diff.locks) == true"});
  EXPECT_TRUE(holds("param(shards) >= 3").holds);
  EXPECT_TRUE(holds("param(shards) == 8.0").holds);       // numbers compare as numbers
  EXPECT_FALSE(holds("param(shards) == \"8\"").holds);    // a number never equals a string
  EXPECT_FALSE(holds("param(precision) > \"a\"").holds);  // strings have no order
  EXPECT_TRUE(holds("param(precision) != \"tf32x3\"").holds);
  EXPECT_FALSE(holds("param(missing) != 1").holds);  // an absent parameter holds nothing
  EXPECT_DOUBLE_EQ(holds("param(layers) == 4").weight, 0.5);
}

TEST(ConditionTest, AndSumsOrTakesTheStrongestNotCitesTheAbsence) {
  const std::vector<Finding> findings = {
      finding("check.x.mismatch", Severity::kFail, {}),
      finding("trace.diff.locks", Severity::kWarn, {}),
  };
  const Evaluation both = evaluate(parse_condition("finding(\"check.x.*\") and param(p) == 1"),
                                   findings, {{"p", int64_t{1}}});
  EXPECT_DOUBLE_EQ(both.weight, 1.5);
  EXPECT_EQ(both.reasons.size(), 2u);
  const Evaluation either = evaluate(
      parse_condition("finding(\"trace.**\") or finding(\"check.x.*\") or finding(\"none\")"),
      findings, {});
  EXPECT_DOUBLE_EQ(either.weight, 1.0);
  EXPECT_EQ(either.reasons, std::vector<std::string>{"finding check.x.mismatch (fail)"});
  const Evaluation absent =
      evaluate(parse_condition("not finding(\"bench.*.slower\")"), findings, {});
  EXPECT_TRUE(absent.holds);
  EXPECT_DOUBLE_EQ(absent.weight, 0.0);
  EXPECT_EQ(absent.reasons, std::vector<std::string>{"not finding(\"bench.*.slower\")"});
  EXPECT_FALSE(evaluate(parse_condition("not finding(\"check.x.mismatch\")"), findings, {}).holds);
  EXPECT_FALSE(
      evaluate(parse_condition("finding(\"check.x.*\") and finding(\"none\")"), findings, {})
          .holds);
}

}  // namespace
}  // namespace loupe::skeleton
