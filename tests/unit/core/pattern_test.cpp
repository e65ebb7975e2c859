// core/pattern.hpp: one linear-time engine for every pattern a user or client supplies (issue 34).
#include "core/pattern.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace loupe {
namespace {

std::string compile_error(const std::string& pattern) {
  try {
    Pattern::compile(pattern, "--kernel");
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    return error.message();
  }
  return "accepted";
}

TEST(Pattern, SearchFullMatchAndTheDocumentedSyntax) {
  const Pattern prefix = Pattern::compile("^prefill_layer", "-");
  EXPECT_TRUE(prefix.search("prefill_layer_3"));
  EXPECT_FALSE(prefix.search("decode prefill_layer"));
  EXPECT_TRUE(Pattern::compile(R"(aten::mm\b)", "-").search("aten::mm"));
  EXPECT_FALSE(Pattern::compile(R"(aten::mm\b)", "-").search("aten::mma"));
  EXPECT_TRUE(Pattern::compile(R"(grid .4, 32)", "-").search("k block (1) grid (4, 32, 1)"));
  EXPECT_TRUE(Pattern::compile(R"(\d+ms)", "-").full_match("12ms"));
  EXPECT_FALSE(Pattern::compile(R"(\d+ms)", "-").full_match("12ms later"));
  EXPECT_TRUE(Pattern::compile("(?i)NCCL", "-").search("ncclAllReduce"));
  EXPECT_TRUE(Pattern::compile("nccl", "-", ErrorCode::kUsage, true).search("NCCLKernel"));
  EXPECT_EQ(prefix.text(), "^prefill_layer");
}

TEST(Pattern, CaptureGroupsOfTheLeftmostMatch) {
  const Pattern rank = Pattern::compile("rank[-_.]?([0-9]{1,6})(x)?", "-");
  std::vector<std::string_view> groups;
  ASSERT_TRUE(rank.search("trace_rank-12.json", groups));
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0], "rank-12");
  EXPECT_EQ(groups[1], "12");
  EXPECT_EQ(groups[2], "");
  EXPECT_FALSE(rank.search("trace.json", groups));
  EXPECT_TRUE(groups.empty());
}

TEST(Pattern, InvalidPatternsNameThePatternAndTheReason) {
  EXPECT_EQ(compile_error("merged("),
            "--kernel 'merged(' is not a valid pattern: missing ): merged(");
  EXPECT_EQ(compile_error(R"((a)\1)"),
            R"(--kernel '(a)\1' is not a valid pattern: invalid escape sequence: \1)");
  EXPECT_EQ(compile_error("a(?=b)"),
            "--kernel 'a(?=b)' is not a valid pattern: invalid perl "
            "operator: (?=");
  EXPECT_EQ(compile_error("(a{1000}){1000}"),
            "--kernel '(a{1000}){1000}' is not a valid pattern: invalid repetition size: {1000}");
}

// Issue 34: a pattern of a megabyte is refused by its length before it is parsed, one whose
// program is large by its size (matching costs up to name length × program size).
TEST(Pattern, Issue34HugePatternsAreRefusedNotCompiled) {
  EXPECT_EQ(compile_error(std::string(size_t{1} << 20, 'a')),
            "--kernel '" + std::string(80, 'a') +
                "...' (1048576 characters) is not a valid pattern: longer than 4096 characters");
  EXPECT_NE(compile_error("[a-z]{600}").find("' is not a valid pattern: it compiles to "),
            std::string::npos);
  EXPECT_NE(compile_error("[a-z]{600}")
                .find(" instructions, more than 512 (matching costs up to "
                      "name length × program size)"),
            std::string::npos);
  EXPECT_NE(compile_error(std::string(1000, '(') + "a" + std::string(1000, ')'))
                .find("instructions, more than 512"),
            std::string::npos);
  EXPECT_EQ(compile_error("[a-z]{400}"), "accepted");
}

// Issue 34: patterns that backtrack exponentially, or recurse once per character, in a
// backtracking engine. Each answers correctly; the suite's time limit is the hang detector.
TEST(Pattern, Issue34CatastrophicPatternsAnswerOnLongNames) {
  const std::string name_a(200000, 'a');
  EXPECT_FALSE(Pattern::compile("(a|b)*c", "-").search(name_a));
  EXPECT_TRUE(Pattern::compile("(a|b)*c", "-").search(name_a + "c"));
  EXPECT_FALSE(Pattern::compile("^(a+)+$", "-").search(std::string(29, 'a') + "!"));
  EXPECT_TRUE(Pattern::compile("^(a+)+$", "-").search(name_a));
  EXPECT_FALSE(Pattern::compile("(x+x+)+y", "-").search(std::string(100000, 'x')));
  EXPECT_FALSE(Pattern::compile("((a*)*|b)*c", "-").search(name_a));
  const std::string nested = std::string(100, '(') + "a" + std::string(100, ')') + "+$";
  EXPECT_TRUE(Pattern::compile(nested, "-").search(name_a));
}

}  // namespace
}  // namespace loupe
