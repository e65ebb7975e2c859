// counters/envelope.hpp — the envelopes `loupe counters` and the MCP tool `counters` answer, and
// the inputs they read (CSV exports and .ncu-rep reports).
// Include only from .cpp files: it pulls in nlohmann-json (core/json.hpp).
// Thread-safety: pure functions, except load_profile, which may start ncu for a report.
#pragma once

#include <string>
#include <vector>

#include "core/json.hpp"
#include "counters/analyze.hpp"

namespace loupe::counters {

// The inputs merged into one profile: CSV exports (either page) read in place, .ncu-rep reports
// through `ncu --import` (both pages). An input "details.csv,raw.csv" names the pages of one run.
// Throws Error(kInput) for a missing or malformed file, Error(kUsage) when a report needs an ncu
// that is not there.
Profile load_profile(const std::vector<std::string>& inputs, StatsRegistry& stats);

// Kind "counters": the findings, and in data the files, pages, launches and every kernel group's
// medians (`kernels`), with what the bounded output left out.
Envelope analysis_envelope(const Profile& profile, const Analysis& analysis,
                           const StatsRegistry& stats);
// Kind "counters.diff": the findings (the explanation first) and in data A's and B's groups and
// the side-by-side rows.
Envelope comparison_envelope(const DiffSide& a, const DiffSide& b, const Comparison& comparison,
                             const StatsRegistry& stats);

// The one kernel configuration `pattern` selects for a diff side; throws Error(kUsage) naming
// `option` and listing the kernels when it selects none or several.
KernelGroup pick_group(const Profile& profile, const std::string& pattern, std::string_view option,
                       std::string_view side);

Json group_to_json(const KernelGroup& group);

}  // namespace loupe::counters
