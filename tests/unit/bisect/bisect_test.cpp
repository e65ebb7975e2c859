// The search of `loupe bisect` on synthetic verdicts: how many points it evaluates, where it
// ends, and that ambiguous or unbuildable points never move the bracket.
#include "bisect/bisect.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

namespace loupe::bisect {
namespace {

struct Trace {
  std::vector<size_t> evaluated;
  Search search;
};

// Runs the search to its end with `verdict_of(index)` answering each step; the bad end is
// recorded first, as run_bisect does after verifying it.
Trace run_search(size_t points, const std::function<StepVerdict(size_t)>& verdict_of) {
  Trace trace{{}, Search(points)};
  trace.search.record(points - 1, StepVerdict::kBad);
  while (const auto next = trace.search.next()) {
    trace.evaluated.push_back(*next);
    trace.search.record(*next, verdict_of(*next));
  }
  return trace;
}

TEST(BisectSearch, FindsEveryFirstBadPointOfSixteenWithinFourSteps) {
  for (size_t first_bad = 1; first_bad < 16; ++first_bad) {
    const Trace trace = run_search(16, [&](size_t index) {
      return index >= first_bad ? StepVerdict::kBad : StepVerdict::kGood;
    });
    EXPECT_TRUE(trace.search.found()) << first_bad;
    EXPECT_EQ(trace.search.first_bad(), first_bad);
    EXPECT_EQ(trace.search.last_good(), first_bad - 1);
    // 14 points between the ends: ceil(log2 15) = 4 steps at most.
    EXPECT_LE(trace.evaluated.size(), 4u) << first_bad;
  }
}

TEST(BisectSearch, EightPointsTakeAtMostThreeSteps) {
  for (size_t first_bad = 1; first_bad < 8; ++first_bad) {
    const Trace trace = run_search(8, [&](size_t index) {
      return index >= first_bad ? StepVerdict::kBad : StepVerdict::kGood;
    });
    EXPECT_EQ(trace.search.first_bad(), first_bad);
    EXPECT_LE(trace.evaluated.size(), 3u);
  }
}

TEST(BisectSearch, StartsInTheMiddle) {
  Search search(9);
  search.record(8, StepVerdict::kBad);
  EXPECT_EQ(search.next(), 4u);
}

TEST(BisectSearch, AnAmbiguousStepDoesNotMoveTheBracket) {
  // First bad at 5 of 0..8; the middle (4) is ambiguous: the search steps to its neighbours and
  // ends with 4 between the last good (3) and the first bad (5), named as a candidate.
  const Trace trace = run_search(9, [](size_t index) {
    if (index == 4) return StepVerdict::kAmbiguous;
    return index >= 5 ? StepVerdict::kBad : StepVerdict::kGood;
  });
  EXPECT_EQ(trace.evaluated.front(), 4u);
  EXPECT_EQ(trace.evaluated[1], 3u);  // the nearest undecided point, the earlier on a tie
  EXPECT_EQ(trace.search.last_good(), 3u);
  EXPECT_EQ(trace.search.first_bad(), 5u);
  // 4 sits between the last good and the first bad: not found, 4 and 5 are the candidates.
  EXPECT_FALSE(trace.search.found());
  EXPECT_EQ(trace.search.undecided(), (std::vector<size_t>{4}));
}

TEST(BisectSearch, AnAmbiguousStepOutsideTheFinalBracketDoesNotHideTheAnswer) {
  const Trace trace = run_search(9, [](size_t index) {
    if (index == 4) return StepVerdict::kAmbiguous;
    return index >= 2 ? StepVerdict::kBad : StepVerdict::kGood;
  });
  EXPECT_TRUE(trace.search.found());
  EXPECT_EQ(trace.search.first_bad(), 2u);
}

TEST(BisectSearch, AVerdictOutsideTheBracketChangesNothing) {
  Search search(8);
  search.record(7, StepVerdict::kBad);
  search.record(3, StepVerdict::kBad);
  search.record(5, StepVerdict::kGood);  // contradicts 3: ignored, the bracket stays [0, 3]
  EXPECT_EQ(search.last_good(), 0u);
  EXPECT_EQ(search.first_bad(), 3u);
}

TEST(BisectSearch, OnlyUnbuildablePointsLeftEndsTheSearch) {
  const Trace trace = run_search(4, [](size_t) { return StepVerdict::kUnbuildable; });
  EXPECT_EQ(trace.evaluated, (std::vector<size_t>{1, 2}));
  EXPECT_FALSE(trace.search.found());
  EXPECT_EQ(trace.search.undecided(), (std::vector<size_t>{1, 2}));
}

TEST(BisectSearch, TwoPointsAreFoundWithoutAStep) {
  Search search(2);
  search.record(1, StepVerdict::kBad);
  EXPECT_FALSE(search.next());
  EXPECT_TRUE(search.found());
}

TEST(BisectSearch, VerdictNames) {
  EXPECT_EQ(step_verdict_name(StepVerdict::kGood), "good");
  EXPECT_EQ(step_verdict_name(StepVerdict::kBad), "bad");
  EXPECT_EQ(step_verdict_name(StepVerdict::kAmbiguous), "ambiguous");
  EXPECT_EQ(step_verdict_name(StepVerdict::kUnbuildable), "unbuildable");
}

}  // namespace
}  // namespace loupe::bisect
