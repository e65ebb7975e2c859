#include "check/findings.hpp"

#include <algorithm>
#include <cmath>

namespace loupe::check {
namespace {

std::string percent(double share) {
  char buffer[16];
  // Two decimals near 100%, so 99.97% does not read as all of it.
  if (share >= 0.99 && share < 1) {
    std::snprintf(buffer, sizeof buffer, "%.2f%%", std::floor(share * 1e4) / 1e2);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.3g%%", 100 * share);
  }
  return buffer;
}

Finding base_finding(const TensorComparison& comparison, const FindingContext& context,
                     std::string_view kind, Severity severity) {
  Finding finding;
  finding.id = context.id_prefix + "." + std::string(kind);
  finding.layer = Layer::kCheck;
  finding.severity = severity;
  finding.where = context.where;
  if (finding.where.path.empty()) finding.where.path = comparison.name;
  finding.where.coords = comparison.localisation.worst_coords;
  for (Metric metric : all_metrics()) {
    if (metric == Metric::kOracleRatio && !comparison.oracle) continue;
    finding.evidence.metrics.emplace_back(std::string(metric_name(metric)),
                                          comparison_value(comparison, metric));
  }
  finding.evidence.files = context.files;
  finding.reproduce = context.reproduce;
  return finding;
}

std::string failing_bounds(const TensorComparison& comparison, std::span<const Bound> bounds) {
  std::string out;
  for (const BoundResult& result : evaluate_bounds(comparison, bounds)) {
    if (result.pass) continue;
    if (!out.empty()) out += ", ";
    out += std::string(metric_name(result.metric)) + " " + format_number(result.value) + " " +
           std::string(failed_op_text(result.op)) + " " + format_number(result.limit);
  }
  return out;
}

}  // namespace

std::string comparison_headline(const TensorComparison& comparison) {
  const Metrics& metrics = comparison.metrics;
  std::string out = "rms_ratio " + format_number(metrics.rms_ratio) + ", max_abs " +
                    format_number(metrics.max_abs);
  if (!comparison.localisation.worst_coords.empty()) {
    out += " at " + coords_to_string(comparison.localisation.worst_coords);
  }
  out += ", " + std::to_string(metrics.mismatch_count) + " of " + std::to_string(metrics.numel) +
         " outside atol+rtol*|B|";
  if (metrics.nonfinite_mismatch > 0) {
    out += " (" + std::to_string(metrics.nonfinite_mismatch) + " hold NaN/Inf)";
  }
  return out;
}

std::string profile_sentence(const ErrorProfile& profile) {
  const ProfileClassification& shape = profile.classification;
  std::string out = std::string(profile_shape_name(shape.shape)) + " along " + profile.axis;
  switch (shape.shape) {
    case ProfileShape::kGrowing:
      // A first quarter with no error at all (CP's first shard starts from the exact state)
      // makes the ratio infinite; say what happened instead of printing "×inf".
      out += std::isfinite(shape.end_to_start)
                 ? ": ×" + format_number(shape.end_to_start) + " from the first to the last quarter"
                 : std::string(": none in the first quarter, present in the last");
      out += "; least-squares slope " + format_number(shape.slope_per_1000) + " per 1000 " +
             profile.axis + " (in units of rms(B))";
      break;
    case ProfileShape::kConcentrated:
      out += " in [" + std::to_string(shape.region_begin) + ", " +
             std::to_string(shape.region_end) + ") holding " + percent(shape.region_share) +
             " of squared error";
      break;
    case ProfileShape::kSpiky: {
      out += " at " + profile.axis + "=";
      for (size_t index = 0; index < shape.spikes.size(); ++index) {
        out += (index > 0 ? "," : "") + std::to_string(shape.spikes[index]);
      }
      break;
    }
    case ProfileShape::kFlat:
      break;
  }
  return out + " (" + std::to_string(profile.buckets.size()) + " buckets over " + profile.axis +
         "=" + std::to_string(profile.length) + ")";
}

std::string slice_sentence(const Localisation& localisation) {
  if (localisation.top_slices.empty()) return {};
  // The first slice, in order of times its fair share, that holds most of the error: a wide axis
  // (D = 32) can rank above a head holding all of it while its own top index holds under half.
  // Holding most also means well above its fair share: 55 % of two batch rows blames nothing.
  const auto holding = std::find_if(
      localisation.top_slices.begin(), localisation.top_slices.end(), [](const SliceShare& slice) {
        return slice.share > 0.5 && slice.share >= 1.5 / static_cast<double>(slice.extent);
      });
  if (holding != localisation.top_slices.end()) {
    const SliceShare& top = *holding;
    return top.axis + "=" + std::to_string(top.index) + " holds " + percent(top.share) +
           " of squared error (fair share " + percent(1.0 / static_cast<double>(top.extent)) + ")";
  }
  // Spread over several slices alike: name them all, so that no single one takes the blame.
  const SliceShare& top = localisation.top_slices.front();
  if (top.sharing.size() < 2 || !(top.sharing_share >= 0.8)) return {};
  if (static_cast<int64_t>(top.sharing.size()) == top.extent) {
    return "spread evenly over all " + std::to_string(top.extent) + " " + top.axis;
  }
  // A few slices are named; many are counted (a list of 80 channels says nothing more).
  if (top.sharing.size() > 8) {
    return "spread over " + std::to_string(top.sharing.size()) + " of " +
           std::to_string(top.extent) + " " + top.axis + " alike (" + percent(top.sharing_share) +
           " of squared error)";
  }
  std::string indices;
  for (size_t index = 0; index < top.sharing.size(); ++index) {
    indices += (index > 0 ? "," : "") + std::to_string(top.sharing[index]);
  }
  return top.axis + "=" + indices + " share " + percent(top.sharing_share) +
         " of squared error alike (" + std::to_string(top.sharing.size()) + " of " +
         std::to_string(top.extent) + ")";
}

std::string structure_sentence(const Localisation& localisation) {
  std::string out;
  if (!localisation.profile) return out;
  const std::string& axis = localisation.profile->axis;
  if (localisation.first_exceeding) {
    out += "first wrong step: " + axis + "=" + std::to_string(*localisation.first_exceeding);
  }
  if (localisation.periodicity) {
    const Periodicity& period = *localisation.periodicity;
    out += (out.empty() ? "" : "; ") + std::string("periodic along ") + axis + ": " +
           percent(period.share) + " of squared error at " + axis + " = " +
           std::to_string(period.residue) + " (mod " + std::to_string(period.period) + ")";
  }
  return out;
}

std::string onset_sentence(const TensorComparison& comparison) {
  const auto& positions = comparison.localisation.positions;
  const auto& profile = comparison.localisation.profile;
  if (!positions || !profile || (!positions->start && !positions->jump)) return {};
  std::string out;
  if (positions->start) {
    out = "error starts at " + profile->axis + "=" + std::to_string(*positions->start) +
          " (first position past tolerance)";
  }
  if (positions->jump) {
    out += (out.empty() ? "error " : "; ") + std::string("jumps ×") +
           format_number(positions->jump_factor) + " at " + profile->axis + "=" +
           std::to_string(*positions->jump);
  }
  return out;
}

std::optional<Finding> onset_finding(const TensorComparison& comparison,
                                     std::span<const Bound> bounds, const FindingContext& context) {
  const std::string sentence = onset_sentence(comparison);
  if (sentence.empty() || !diverged(comparison, bounds)) return std::nullopt;
  const PositionErrors& positions = *comparison.localisation.positions;
  Finding finding = base_finding(comparison, context, "onset", Severity::kWarn);
  const std::string& axis = comparison.localisation.profile->axis;
  finding.where.coords = {{axis, positions.start.value_or(positions.jump.value_or(0))}};
  finding.claim = comparison.name + ": " + sentence;
  if (positions.start) {
    finding.evidence.metrics.emplace_back("start", static_cast<double>(*positions.start));
  }
  if (positions.jump) {
    finding.evidence.metrics.emplace_back("jump", static_cast<double>(*positions.jump));
    finding.evidence.metrics.emplace_back("jump_factor", positions.jump_factor);
  }
  finding.next = context.next.empty() ? "look at what the step producing " + axis + "=" +
                                            std::to_string(finding.where.coords[0].second) +
                                            " did differently (its inputs, its cache slot)"
                                      : context.next;
  return finding;
}

std::vector<Finding> comparison_findings(const TensorComparison& comparison,
                                         std::span<const Bound> bounds,
                                         const FindingContext& context) {
  std::vector<Finding> findings;
  const bool past_tolerance = diverged(comparison, bounds);
  const std::string slice = slice_sentence(comparison.localisation);
  const auto& profile = comparison.localisation.profile;

  if (past_tolerance) {
    Finding finding = base_finding(comparison, context, "mismatch", Severity::kFail);
    finding.claim = comparison.name + " differs: " + comparison_headline(comparison);
    if (!bounds.empty()) finding.claim += "; bounds failed: " + failing_bounds(comparison, bounds);
    if (!slice.empty()) finding.claim += "; " + slice;
    const std::string structure = structure_sentence(comparison.localisation);
    if (!structure.empty()) finding.claim += "; " + structure;
    if (profile) finding.claim += "; error " + profile_sentence(*profile);
    if (comparison.localisation.first_exceeding) {
      finding.evidence.metrics.emplace_back(
          "first_exceeding", static_cast<double>(*comparison.localisation.first_exceeding));
    }
    if (comparison.localisation.periodicity) {
      finding.evidence.metrics.emplace_back(
          "period", static_cast<double>(comparison.localisation.periodicity->period));
      finding.evidence.metrics.emplace_back(
          "period_residue", static_cast<double>(comparison.localisation.periodicity->residue));
    }
    finding.next = !context.next.empty() ? context.next
                   : profile
                       ? "compare the producers of " + comparison.name + " at the worst coordinates"
                       : "rerun with --along AXIS (axes named by --axes) to profile the error and "
                         "find the slice holding it";
    findings.push_back(std::move(finding));
  }
  if (comparison.metrics.nonfinite_mismatch > 0) {
    Finding finding = base_finding(comparison, context, "nonfinite", Severity::kFail);
    finding.claim = comparison.name + ": " + std::to_string(comparison.metrics.nonfinite_mismatch) +
                    " positions hold NaN/Inf that the other side does not match; first at " +
                    coords_to_string(comparison.localisation.worst_coords) + " (A " +
                    format_number(comparison.metrics.worst_a) + ", B " +
                    format_number(comparison.metrics.worst_b) + ")";
    finding.next = context.next.empty() ? "find the first op producing a non-finite value there"
                                        : context.next;
    findings.push_back(std::move(finding));
  }
  if (past_tolerance && profile && profile->classification.shape != ProfileShape::kFlat) {
    const ProfileShape shape = profile->classification.shape;
    const std::string_view kind = shape == ProfileShape::kGrowing        ? "drift"
                                  : shape == ProfileShape::kConcentrated ? "concentrated"
                                                                         : "spiky";
    Finding finding = base_finding(comparison, context, kind, Severity::kWarn);
    finding.evidence.metrics.emplace_back("profile_spearman", profile->classification.spearman);
    finding.evidence.metrics.emplace_back("profile_end_to_start",
                                          profile->classification.end_to_start);
    finding.evidence.metrics.emplace_back("profile_slope_per_1000",
                                          profile->classification.slope_per_1000);
    finding.claim = comparison.name + ": error " + profile_sentence(*profile);
    if (!slice.empty()) finding.claim += "; " + slice;
    finding.next = context.next.empty()
                       ? (shape == ProfileShape::kGrowing
                              ? "an accumulation drifts: rerun at half and double the length of " +
                                    profile->axis + " and check the error scales with it"
                              : "inspect the " + profile->axis + " range named here")
                       : context.next;
    findings.push_back(std::move(finding));
  }
  if (comparison.oracle) {
    const OracleComparison& oracle = *comparison.oracle;
    // A relation that holds within the declared factor is information, not a warning: healthy
    // runs of the CP check (1.2x, well inside its factor) opened every report with it.
    const double factor = context.oracle_factor.value_or(2.0);
    const bool worse = !(oracle.ratio <= factor);
    Finding finding =
        base_finding(comparison, context, "oracle", worse ? Severity::kWarn : Severity::kInfo);
    finding.claim = comparison.name + ": A's error is " + format_number(oracle.ratio) +
                    "× B's own error against the oracle (rms_ratio " +
                    format_number(oracle.a_vs_oracle.rms_ratio) + " vs " +
                    format_number(oracle.b_vs_oracle.rms_ratio) + ")";
    finding.next = context.next.empty()
                       ? "bound it with --tol oracle_ratio=VALUE so the tolerance scales with the "
                         "problem"
                       : context.next;
    findings.push_back(std::move(finding));
  }
  if (!past_tolerance) {
    Finding finding = base_finding(comparison, context, "match", Severity::kInfo);
    finding.claim = comparison.name + " within tolerance: " + comparison_headline(comparison);
    finding.next = context.next;
    findings.push_back(std::move(finding));
  }
  return findings;
}

}  // namespace loupe::check
