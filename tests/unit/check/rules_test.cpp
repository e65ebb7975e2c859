#include "check/rules.hpp"

#include <gtest/gtest.h>

#include "loupe/error.hpp"

namespace loupe::check {
namespace {

std::string error_of(std::string_view text) {
  try {
    parse_rules(text, "rules.toml");
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kConfig);
    return error.message();
  }
  return "no error";
}

TEST(RulesTest, ParsesOrderedRulesWithPredicatesAndNames) {
  const RuleSet rules = parse_rules(
      "[[rule]]\n"
      "name = \"attention\"\n"
      "match = 'layers\\.\\d+\\.attn'\n"
      "when = [\"rel <= 0.0085\", \"max_abs<1e-2\"]\n"
      "\n"
      "[[rule]]\n"
      "match = '.*'\n"
      "when = [\"cosine >= 0.999\", \"abs_p99 > 0\"]\n",
      "rules.toml");
  ASSERT_EQ(rules.rules.size(), 2u);
  const Rule& first = rules.rules[0];
  EXPECT_EQ(first.name, "attention");
  EXPECT_EQ(first.line, 1);
  ASSERT_EQ(first.when.size(), 2u);
  EXPECT_EQ(first.when[0].metric, Metric::kCosDist);  // rel is an alias
  EXPECT_EQ(first.when[0].op, ComparisonOp::kLessEqual);
  EXPECT_EQ(first.when[0].limit, 0.0085);
  EXPECT_EQ(first.when[1].metric, Metric::kMaxAbs);
  EXPECT_EQ(first.when[1].op, ComparisonOp::kLess);
  EXPECT_EQ(first.when_text[1], "max_abs<1e-2");
  EXPECT_EQ(rules.rules[1].name, "rule 2");
  EXPECT_EQ(rules.rules[1].line, 6);
  EXPECT_EQ(rules.rules[1].when[0].op, ComparisonOp::kGreaterEqual);
  EXPECT_EQ(rules.rules[1].when[1].op, ComparisonOp::kGreater);
}

TEST(RulesTest, TheFirstMatchingRuleDecides) {
  const RuleSet rules = parse_rules(
      "[[rule]]\nmatch = 'attn'\nwhen = [\"rel <= 1e-3\"]\n"
      "[[rule]]\nmatch = '^layers\\.1\\.'\nwhen = [\"rel <= 1e-2\"]\n",
      "rules.toml");
  EXPECT_EQ(deciding_rule(rules, "layers.1.attn.out"), 0u);  // searched, not anchored
  EXPECT_EQ(deciding_rule(rules, "layers.1.mlp"), 1u);
  EXPECT_EQ(deciding_rule(rules, "layers.10.mlp"), std::nullopt);
}

TEST(RulesTest, MistakesNameTheFileLineAndKey) {
  EXPECT_EQ(
      error_of("[[rule]]\nmatch = 'x'\nwhen = [\"rms <= 1\"]\n")
          .rfind("rules.toml:3: rule[0].when: predicate 'rms <= 1' at character 1: expected a "
                 "metric name, found 'rms'",
                 0),
      0u);
  EXPECT_EQ(error_of("[[rule]]\nmatch = 'x'\nwhen = [\"rel == 1\"]\n"),
            "rules.toml:3: rule[0].when: predicate 'rel == 1' at character 5: expected one of "
            "<=, <, >=, >");
  EXPECT_EQ(error_of("[[rule]]\nmatch = 'x'\nwhen = [\"rel <= abc\"]\n"),
            "rules.toml:3: rule[0].when: predicate 'rel <= abc' at character 8: expected a number");
  EXPECT_NE(error_of("[[rule]]\nwhen = [\"rel <= 1\"]\n").find("rule[0].match"), std::string::npos);
  EXPECT_NE(error_of("[[rule]]\nmatch = '('\nwhen = [\"rel <= 1\"]\n")
                .find("rules.toml:2: rule[0].match: rule pattern '(' is not a valid pattern"),
            std::string::npos);
  EXPECT_NE(error_of("[[rule]]\nmatch = 'x'\nwhen = []\n").find("expected at least one predicate"),
            std::string::npos);
  EXPECT_NE(
      error_of("[[rule]]\nmatch = 'x'\nwhen = [\"rel <= 1\"]\nthreshold = 2\n").find("threshold"),
      std::string::npos);
  EXPECT_EQ(error_of(""), "rules.toml: no [[rule]] tables; expected at least one");
}

}  // namespace
}  // namespace loupe::check
