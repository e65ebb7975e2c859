// check/findings.hpp — a comparison turned into findings (DESIGN.md's schema), for `loupe diff`
// and for the probe layer's checks alike.
// Thread-safety: pure functions of their arguments.
#pragma once

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
};

// Kinds, each at most once:
//   mismatch      fail  past tolerance (bounds, else assert_close's rule); coords = worst element
//   nonfinite     fail  NaN/Inf positions disagree
//   drift         warn  the error profile is growing (only when diverged)
//   concentrated  warn  the error sits in one region along the profiled axis (only when diverged)
//   spiky         warn  a few isolated buckets carry the error (only when diverged)
//   oracle        warn when A's error against the oracle exceeds B's own, else info
//   match         info  within tolerance
// where.path is the comparison's name unless the context sets one; evidence.metrics holds every
// metric (oracle_ratio with an oracle).
std::vector<Finding> comparison_findings(const TensorComparison& comparison,
                                         std::span<const Bound> bounds,
                                         const FindingContext& context);

// One line for people: "rms_ratio 3.1e-3, max_abs 0.021 at T=4095 H=1 V=3, 812 of 65536 outside
// atol+rtol*|B|".
std::string comparison_headline(const TensorComparison& comparison);
// "growing: x7.1 from the first to the last quarter of T, slope 2.3e-3 per 1000 T" etc.
std::string profile_sentence(const ErrorProfile& profile);
// "H=1 holds 93% of squared error (fair share 25%)": the first of top_slices holding most of the
// squared error (> 50%); empty when none does.
std::string slice_sentence(const Localisation& localisation);

}  // namespace loupe::check
