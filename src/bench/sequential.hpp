// bench/sequential.hpp — deciding before the last pair: a group-sequential rule on paired ratios.
//
// Two builds run back to back give one ratio per pair (candidate / baseline: a bench round's
// medians, a scenario repeat's metric). A gate with a bound on that ratio ("/ baseline <= 1.5")
// need not wait for every pair when the first few already lie far beyond the bound: at a few
// looks (3, 5, 8, 12, 16, 24, ... pairs: each about 1.5 times the one before) it asks whether the
// ratios so far are above the bound beyond doubt, and the error it may make is spent over the
// looks (Bonferroni: each look gets alpha / looks, so the chance that any look decides wrongly is
// at most alpha, whatever the looks' dependence). The test at a look is two conditions, both
// needed:
//   - the one-sided p-value of Yuen's 20 %-trimmed t-test on log(ratio / bound) (trimmed_t_p's
//     test, halved, on the side of the ratios) is at most the look's alpha;
//   - at most ⌊0.2 n⌋ of the n ratios lie at or below the bound (the ones the trimming drops), so
//     that a few huge ratios (preempted pairs) cannot decide it alone.
// Ratios that are all equal and beyond the bound (a count of lock holds: the same in every run)
// have p = 0 and decide at the first look. What the rule does under "no change" on a loaded
// machine is measured by tests/unit/bench/sequential_test.cpp (A/A at the bound itself).
// Thread-safety: pure functions over value types.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace loupe::bench {

// The total false-decision rate the early looks may spend, per gate and parameter point.
inline constexpr double kSequentialAlpha = 0.01;
// The first look: fewer pairs than this never decide early.
inline constexpr int64_t kFirstLook = 3;

// The looks before `total` pairs: 3, 5, 8, 12, 16, 24, 32, 48, ... (from 8 on, alternately ×1.5 and
// ×4/3), each strictly below `total` (the last pair is the fixed-sample rule's, not a look).
std::vector<int64_t> sequential_looks(int64_t total);

// Which side of the bound the ratios lie on beyond doubt.
enum class SequentialSide { kUndecided, kAbove, kBelow };

struct SequentialDecision {
  SequentialSide side = SequentialSide::kUndecided;
  int64_t n = 0;          // the positive, finite ratios used
  int64_t beyond = 0;     // how many of them lie strictly beyond the bound on the tested side
  double estimate = 0.0;  // the median ratio
  double p_value = 1.0;   // one-sided, on the side of the ratios
  double alpha = 0.0;     // the look's share of kSequentialAlpha
  std::string rule;       // the sentence that decided (or why not)
};

// The look at n = ratios.size() pairs, `looks` the number of looks planned (sequential_looks'
// size; its share is alpha / looks). Undecided when n is below kFirstLook. `above` asks whether
// the ratios lie above `bound` (a `<=` gate fails then), else below it.
// REQUIRES: bound > 0, looks >= 1.
// `paired` false: the values are one build's own (a median gate within the build), and the rule
// speaks of values and repeats instead of pair ratios.
SequentialDecision sequential_look(std::span<const double> ratios, double bound, bool above,
                                   int64_t looks, double alpha = kSequentialAlpha,
                                   bool paired = true);

}  // namespace loupe::bench
