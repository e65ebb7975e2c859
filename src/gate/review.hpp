// gate/review.hpp — the review boundary of an objective: does a change need a person's sign-off?
//
// An objective's [review.CATEGORY] tables list path globs and parameters (docs/objective.md).
// review_triggers matches what changed between two runs — repository paths (from the commits'
// diff) and parameter or deployment-key names whose values differ — against them, and says which
// category each hit belongs to and why, so a decision can be recorded as needs-review naming it.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gate/objective.hpp"

namespace loupe::gate {

// Glob over '/'-separated paths: `*` matches within one path segment, `?` one character of a
// segment, `**` any number of characters across segments, and `**/` zero or more whole folders
// (`kda/**` is everything under kda/, `**/CMakeLists.txt` every CMakeLists.txt).
bool glob_matches(std::string_view pattern, std::string_view path);

struct ReviewTrigger {
  std::string category;  // numerics, concurrency, production-risk
  std::string reason;    // "path kda/kernels/cpu/decode.cpp matches kda/kernels/**"
  bool operator==(const ReviewTrigger&) const = default;
};

// Every (category, changed path or parameter) hit, in the objective's category order, then the
// order of `changed_paths` and `changed_params`.
std::vector<ReviewTrigger> review_triggers(const Objective& objective,
                                           const std::vector<std::string>& changed_paths,
                                           const std::vector<std::string>& changed_params);

}  // namespace loupe::gate
