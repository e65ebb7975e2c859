// core/trust.hpp — which findings say a point's results cannot be believed.
//
// A guard ("<layer>.<probe>.guard.<name>") other than the ones that describe how a candidate's
// numbers are wrong (guard.precision, guard.worst_element, guard.nonfinite: they accompany a
// mismatch, which the gates judge) says whether the results can be believed, not what they are:
// the hidden run, tampering, timing, environment, sealing and cache guards. A run with one of
// severity fail fails whatever its gates say (gate::cascade_verdict, the report's verdict, a
// bisect step). Pure function; thread-safe.
#pragma once

#include <string_view>

#include "core/finding.hpp"

namespace loupe {

bool undermines_results(const Finding& finding);

// How a guard.hidden_point claim starts when the candidate failed at a shown point too: it is
// wrong, not specialised to what it was shown, and the finding only says where else (it does not
// undermine the results: the shown point's own findings and the gates decide).
inline constexpr std::string_view kHiddenAlsoFails = "the candidate also fails at the hidden point";

}  // namespace loupe
