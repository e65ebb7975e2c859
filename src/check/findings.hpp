// check/findings.hpp — a comparison turned into findings (DESIGN.md's schema), for `loupe diff`
// and for the probe layer's checks alike.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "check/compare.hpp"
#include "core/finding.hpp"

namespace loupe::check {

struct FindingContext {
  std::string id_prefix = "check.diff";  // ids are <id_prefix>.<kind>
  Where where;                           // subject, probe, params; coords are filled in here
  std::vector<std::string> files;        // evidence files (the compared inputs)
  std::string reproduce;                 // the command that reproduces the comparison
  std::string next;                      // overrides the suggested next experiment when set
  // The factor A's error against the oracle may be of B's own (a relative_to_oracle tolerance);
  // within it the oracle finding is info, beyond it warn. Undeclared: 2, the same order of error.
  std::optional<double> oracle_factor;
};

// Kinds, each at most once:
//   mismatch      fail  past tolerance (bounds, else assert_close's rule); coords = worst element
//   nonfinite     fail  positions hold NaN/Inf (either side; alike on both sides too)
//   drift         warn  the error profile is growing (only when diverged)
//   concentrated  warn  the error sits in one region along the profiled axis (only when diverged)
//   spiky         warn  a few isolated buckets carry the error (only when diverged)
//   oracle        warn when A's error against the oracle exceeds oracle_factor x B's own, else info
//   match         info  within tolerance
// where.path is the comparison's name unless the context sets one; evidence.metrics holds every
// metric (oracle_ratio with an oracle).
std::vector<Finding> comparison_findings(const TensorComparison& comparison,
                                         std::span<const Bound> bounds,
                                         const FindingContext& context);

// With a per-position table (`along`): "error starts at T=37 (first position past tolerance);
// jumps ×12 at T=40"; empty when neither is found.
std::string onset_sentence(const TensorComparison& comparison);
// The `onset` finding (warn, for a comparison past tolerance with a start or a jump): where.coords
// holds the start (else the jump) position. `loupe diff` reports it; checks do not.
std::optional<Finding> onset_finding(const TensorComparison& comparison,
                                     std::span<const Bound> bounds, const FindingContext& context);

// One line for people: "rms_ratio 3.1e-3, max_abs 0.021 at T=4095 H=1 V=3, 812 of 65536 outside
// atol+rtol*|B|".
std::string comparison_headline(const TensorComparison& comparison);
// "growing: x7.1 from the first to the last quarter of T, slope 2.3e-3 per 1000 T" etc.
std::string profile_sentence(const ErrorProfile& profile);
// "H=1 holds 93% of squared error (fair share 25%)": the first of top_slices holding most of the
// squared error (> 50%). When none does, the slices that share it alike: "H=0,2 share 97% of
// squared error alike (2 of 4)", or "spread evenly over all 4 H"; empty otherwise.
std::string slice_sentence(const Localisation& localisation);
// "first wrong step: T=32; periodic along T: 98% of squared error at T = 31 (mod 32)"; empty
// when the profile found neither.
std::string structure_sentence(const Localisation& localisation);

}  // namespace loupe::check
