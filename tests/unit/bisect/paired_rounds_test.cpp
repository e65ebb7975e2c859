// PairedRounds, the A/B rule of a bench or scenario step of `loupe bisect`, on scripted values:
// which round decides, that a change is decided only at a look, and that a retry keeps the rounds
// it has. The good build's value is 1 in every round, so each round's ratio is the step's value.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "bisect/bisect.hpp"

namespace loupe::bisect {
namespace {

// Noise around 1 (0.95 and 1.05 alternating: AMBIGUOUS whatever the rounds), except rounds
// 13-17 (0-based 12-16), which read 1.04: five values that alone make a clear SLOWER.
double noise_then_a_run(int64_t round) {
  if (round >= 12 && round < 17) return 1.04;
  return round % 2 == 0 ? 0.95 : 1.05;
}

PairedRounds::RoundFn scripted(double (*value)(int64_t), std::vector<int64_t>* asked = nullptr) {
  return [value, asked](int64_t round) {
    if (asked) asked->push_back(round);
    return std::pair{1.0, value(round)};
  };
}

TEST(PairedRounds, ARetryGoesOnFromTheRoundsItHas) {
  PairedRounds rounds{PairedRounds::Rule{}};
  const PairedRounds::State first = rounds.run(12, scripted(noise_then_a_run));
  EXPECT_FALSE(first.decided);
  EXPECT_EQ(first.comparison.verdict, bench::AbVerdict::kAmbiguous);
  EXPECT_EQ(rounds.step().size(), 12u);
  // The retry runs rounds 13-24 only and weighs all 24: still AMBIGUOUS, not the run's SLOWER.
  std::vector<int64_t> asked;
  const PairedRounds::State retry = rounds.run(24, scripted(noise_then_a_run, &asked));
  EXPECT_EQ(asked.front(), 12);
  EXPECT_EQ(asked.back(), 23);
  EXPECT_EQ(rounds.step().size(), 24u);
  EXPECT_FALSE(retry.decided);
  EXPECT_EQ(retry.comparison.verdict, bench::AbVerdict::kAmbiguous) << retry.comparison.rule;
}

TEST(PairedRounds, TheRunAloneWouldHaveDecidedSlower) {
  // What a retry started afresh saw: the five values of 1.04 first.
  PairedRounds rounds{PairedRounds::Rule{}};
  const PairedRounds::State state = rounds.run(24, [](int64_t round) {
    return std::pair{1.0, noise_then_a_run(round + 12)};
  });
  EXPECT_TRUE(state.decided);
  EXPECT_EQ(state.comparison.verdict, bench::AbVerdict::kSlower);
  EXPECT_EQ(rounds.step().size(), 5u);
}

TEST(PairedRounds, AChangeIsDecidedOnlyAtALook) {
  // 10 % slower in every round, compared from round 6: the interval says SLOWER at 6 and 7,
  // which are no looks; it is decided at 8.
  PairedRounds::Rule rule;
  rule.min_rounds = 6;
  PairedRounds rounds{rule};
  std::vector<int64_t> seen;
  std::vector<bench::AbVerdict> verdicts;
  const PairedRounds::State state = rounds.run(
      12,
      [](int64_t) {
        return std::pair{1.0, 1.10};
      },
      [&](int64_t round, const PairedRounds::State& at) {
        seen.push_back(round);
        verdicts.push_back(at.comparison.verdict);
      });
  EXPECT_TRUE(state.decided);
  EXPECT_EQ(state.comparison.verdict, bench::AbVerdict::kSlower);
  EXPECT_EQ(seen, (std::vector<int64_t>{6, 7, 8}));
  EXPECT_EQ(verdicts[0], bench::AbVerdict::kSlower);  // by the interval, at no look
  EXPECT_EQ(rounds.step().size(), 8u);
}

TEST(PairedRounds, SameIsDecidedAtAnyRoundFromTheFifth) {
  PairedRounds rounds{PairedRounds::Rule{}};
  const PairedRounds::State state = rounds.run(12, [](int64_t round) {
    return std::pair{1.0, round == 5 ? 1.001 : 1.0};
  });
  EXPECT_TRUE(state.decided);
  EXPECT_EQ(state.comparison.verdict, bench::AbVerdict::kSame);
  EXPECT_EQ(rounds.step().size(), 5u);
}

TEST(PairedRounds, AnIntervalChangeLeftUndecidedEndsAmbiguousAndSaysWhy) {
  // Rounds 6 and 7 only (no look among them): the interval's SLOWER is not a verdict.
  PairedRounds::Rule rule;
  rule.min_rounds = 6;
  PairedRounds rounds{rule};
  const PairedRounds::State state = rounds.run(7, [](int64_t) { return std::pair{1.0, 1.2}; });
  EXPECT_TRUE(state.compared);
  EXPECT_FALSE(state.decided);
  EXPECT_EQ(state.comparison.verdict, bench::AbVerdict::kAmbiguous);
  EXPECT_NE(state.comparison.rule.find("decided only at a look"), std::string::npos)
      << state.comparison.rule;
}

TEST(PairedRounds, TheLooksShareFivePerCent) {
  const PairedRounds::Rule rule;  // 5..24: looks at 5, 8, 12 and 24
  EXPECT_TRUE(rule.is_look(5));
  EXPECT_TRUE(rule.is_look(24));
  EXPECT_FALSE(rule.is_look(13));
  EXPECT_DOUBLE_EQ(rule.alpha(), 0.05 / 4);
  PairedRounds::Rule longer;
  longer.max_rounds = 20;  // 5, 8, 12, 20, 40
  EXPECT_DOUBLE_EQ(longer.alpha(), 0.05 / 5);
}

}  // namespace
}  // namespace loupe::bisect
