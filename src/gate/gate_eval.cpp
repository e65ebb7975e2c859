// Gate verdicts from probe point results (see gate_eval.hpp for the rules).
#include "gate/gate_eval.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "bench/report.hpp"
#include "bench/sequential.hpp"
#include "check/compare.hpp"
#include "core/json.hpp"
#include "core/statistics.hpp"
#include "trace/analyze/analyze.hpp"
#include "trace/import/import.hpp"

namespace loupe::gate {
namespace {

using check::format_number;

std::string interval_text(const Interval& interval) {
  return "[" + format_number(interval.low) + ", " + format_number(interval.high) + "]";
}

std::string point_text(const Params& params) {
  return params.empty() ? "the default point" : params_to_string(params);
}

std::string where_text(const std::vector<Condition>& where) {
  if (where.empty()) return "";
  std::string out = " where ";
  for (size_t index = 0; index < where.size(); ++index) {
    if (index > 0) out += " and ";
    out += where[index].param + " " + std::string(comparison_symbol(where[index].comparison)) +
           " " + value_to_string(where[index].value);
  }
  return out;
}

bool number_satisfies(double value, Comparison comparison, double limit) {
  if (std::isnan(value)) return false;
  return compare_values(Value(value), comparison, Value(limit));
}

// Fixed per gate, so the same observations always give the same interval (FNV-1a of the name).
uint64_t gate_seed(const std::string& name) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : name) hash = (hash ^ c) * 1099511628211ull;
  return hash % 1000000000ull;
}

std::vector<const PointResult*> selected_points(std::span<const PointResult> results, Layer layer,
                                                const std::string& entry,
                                                const std::vector<Condition>& where) {
  std::vector<const PointResult*> out;
  for (const auto& result : results) {
    if (result.layer == layer && result.entry == entry && conditions_hold(where, result.params)) {
      out.push_back(&result);
    }
  }
  return out;
}

std::optional<double> metric_of(const PointResult& point, const MetricRef& ref) {
  for (const auto& metric : point.metrics) {
    if (metric.name == ref.metric && metric.variant == ref.variant.value_or("")) {
      return metric.value;
    }
  }
  return std::nullopt;
}

std::string metric_names(const std::vector<const PointResult*>& points) {
  std::vector<std::string> names;
  for (const auto* point : points) {
    for (const auto& metric : point->metrics) {
      std::string name = metric.variant.empty() ? metric.name : metric.variant + "." + metric.name;
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "none" : out;
}

std::string ref_text(const MetricRef& ref) {
  return std::string(layer_name(ref.layer)) + "." + ref.entry +
         (ref.variant ? "[" + *ref.variant + "]" : "") + "." + ref.metric;
}

void attach_fail_findings(GateResult& gate, const PointResult& point) {
  for (const auto& finding : point.findings) {
    if (finding.severity == Severity::kFail) gate.findings.push_back(finding);
  }
}

// Whole interval satisfies → pass; none of it → fail; otherwise inconclusive.
GateVerdict interval_verdict(const Interval& ci, Comparison comparison, double limit) {
  if (!std::isfinite(ci.low) || !std::isfinite(ci.high)) return GateVerdict::kInconclusive;
  const bool low_ok = number_satisfies(ci.low, comparison, limit);
  const bool high_ok = number_satisfies(ci.high, comparison, limit);
  switch (comparison) {
    case Comparison::kLess:
    case Comparison::kLessEqual:
      return high_ok ? GateVerdict::kPass
                     : (low_ok ? GateVerdict::kInconclusive : GateVerdict::kFail);
    case Comparison::kGreater:
    case Comparison::kGreaterEqual:
      return low_ok ? GateVerdict::kPass
                    : (high_ok ? GateVerdict::kInconclusive : GateVerdict::kFail);
    case Comparison::kEqual:
      return low_ok && high_ok
                 ? GateVerdict::kPass
                 : (ci.contains(limit) ? GateVerdict::kInconclusive : GateVerdict::kFail);
    case Comparison::kNotEqual:
      return !ci.contains(limit)
                 ? GateVerdict::kPass
                 : (ci.low == ci.high ? GateVerdict::kFail : GateVerdict::kInconclusive);
  }
  return GateVerdict::kInconclusive;
}

void evaluate_absolute(const MetricBound& bound, std::span<const PointResult> results,
                       GateResult& gate) {
  const auto points = selected_points(results, bound.metric.layer, bound.metric.entry, bound.where);
  const std::string symbol(comparison_symbol(bound.comparison));
  gate.statistics.comparison = symbol;
  gate.statistics.bound = bound.limit;
  const bool larger_is_worse =
      bound.comparison == Comparison::kLess || bound.comparison == Comparison::kLessEqual;
  // What the bound judges: every value, or (median(...)) each point's median over its repeats
  // and seeds. A NaN among a point's values makes its median NaN: a broken measurement fails.
  struct Judged {
    const PointResult* point = nullptr;  // the first of `members`
    double value = 0.0;
    std::vector<const PointResult*> members;
    std::vector<double> values;
  };
  std::vector<Judged> judged;
  int64_t n = 0;
  for (const auto* point : points) {
    const auto value = metric_of(*point, bound.metric);
    if (!value) continue;
    ++n;
    auto same = judged.end();
    if (bound.median) {
      same = std::find_if(judged.begin(), judged.end(),
                          [&](const Judged& j) { return j.point->params == point->params; });
    }
    if (same == judged.end()) {
      judged.push_back({point, *value, {}, {}});
      same = judged.end() - 1;
    }
    same->members.push_back(point);
    same->values.push_back(*value);
  }
  if (bound.median) {
    for (auto& j : judged) {
      j.value =
          std::any_of(j.values.begin(), j.values.end(), [](double v) { return std::isnan(v); })
              ? std::numeric_limits<double>::quiet_NaN()
              : median(j.values);
    }
  }
  const Judged* worst_item = nullptr;
  const Judged* first_failure = nullptr;
  for (const auto& j : judged) {
    if (!number_satisfies(j.value, bound.comparison, bound.limit) && first_failure == nullptr) {
      first_failure = &j;
    }
    // A NaN is the worst value of all: it satisfies no bound.
    const bool worse = worst_item == nullptr ||
                       (!std::isnan(worst_item->value) &&
                        (std::isnan(j.value) || (larger_is_worse ? j.value > worst_item->value
                                                                 : j.value < worst_item->value)));
    if (worse) worst_item = &j;
  }
  gate.statistics.n = n;
  const std::string scope = where_text(bound.where);
  const std::string ref =
      bound.median ? "median(" + ref_text(bound.metric) + ")" : ref_text(bound.metric);
  if (n == 0) {
    gate.verdict = GateVerdict::kInconclusive;
    gate.rule = "inconclusive: no observation of " + ref_text(bound.metric) + scope + " (" +
                std::to_string(points.size()) +
                " point(s) selected; their metrics: " + metric_names(points) + ")";
    return;
  }
  const double worst = worst_item->value;
  const PointResult* worst_point = worst_item->point;
  gate.statistics.estimate = worst;
  gate.statistics.point = worst_point->params;
  const std::string which = larger_is_worse ? "the largest" : "the smallest";
  std::string value_text =
      bound.median ? ref + " over " + std::to_string(judged.size()) + " point(s) (" +
                         std::to_string(n) + " value(s))" + scope + " is " + format_number(worst) +
                         " at " + point_text(worst_point->params)
                   : ref + " over " + std::to_string(n) + " value(s)" + scope + " is " +
                         format_number(worst) + " at " + point_text(worst_point->params);
  // Several seeds (or repeats) of one point: their spread, so one lucky seed is visible.
  std::vector<double> at_worst;
  for (const auto* point : points) {
    if (point->params != worst_point->params) continue;
    if (const auto value = metric_of(*point, bound.metric); value && !std::isnan(*value)) {
      at_worst.push_back(*value);
    }
  }
  if (at_worst.size() > 1) {
    std::sort(at_worst.begin(), at_worst.end());
    value_text += " (its " + std::to_string(at_worst.size()) + " seeds: median " +
                  format_number(at_worst[at_worst.size() / 2]) + ", spread [" +
                  format_number(at_worst.front()) + ", " + format_number(at_worst.back()) + "])";
  }
  if (first_failure == nullptr) {
    gate.verdict = GateVerdict::kPass;
    gate.rule = "pass: " + std::string(bound.median ? "every point's median" : "every value") +
                " satisfies " + symbol + " " + format_number(bound.limit) + "; " + which + " " +
                value_text;
  } else {
    gate.verdict = GateVerdict::kFail;
    gate.rule =
        "fail: " + which + " " + value_text + ", not " + symbol + " " + format_number(bound.limit);
    for (const auto& j : judged) {
      if (number_satisfies(j.value, bound.comparison, bound.limit)) continue;
      for (size_t index = 0; index < j.members.size(); ++index) {
        // median(...): the repeats that pulled the median over; every value otherwise.
        if (bound.median && number_satisfies(j.values[index], bound.comparison, bound.limit)) {
          continue;
        }
        attach_fail_findings(gate, *j.members[index]);
      }
    }
  }
}

void evaluate_relative(const MetricBound& bound, const GateSpec& spec,
                       std::span<const PointResult> results, GateResult& gate) {
  const MetricRef& baseline = *bound.baseline;
  const std::string symbol(comparison_symbol(bound.comparison));
  gate.statistics.comparison = symbol;
  gate.statistics.bound = bound.limit;
  gate.statistics.confidence = spec.confidence;
  const std::string ratio_text = ref_text(bound.metric) + " / " + ref_text(baseline);
  gate.statistics.candidate = ref_text(bound.metric);
  gate.statistics.baseline = ref_text(baseline);
  const std::string scope = where_text(bound.where);
  const auto points_b =
      selected_points(results, bound.metric.layer, bound.metric.entry, bound.where);
  const auto points_a = selected_points(results, baseline.layer, baseline.entry, bound.where);

  // Two variants of one bench: each point's A/B interval of the ratio of medians.
  if (bound.metric.layer == Layer::kBench && bound.metric.entry == baseline.entry &&
      bound.metric.variant && baseline.variant) {
    const std::string& b = *bound.metric.variant;
    const std::string& a = *baseline.variant;
    GateVerdict verdict = GateVerdict::kPass;
    int64_t n = 0;
    bool decided = false;
    for (const auto* point : points_b) {
      for (const auto& comparison : point->comparisons) {
        Interval ci;
        double ratio = 0;
        if (comparison.a == a && comparison.b == b) {
          ci = comparison.comparison.ci;
          ratio = comparison.comparison.ratio;
        } else if (comparison.a == b && comparison.b == a) {
          ci = {1.0 / comparison.comparison.ci.high, 1.0 / comparison.comparison.ci.low};
          ratio = 1.0 / comparison.comparison.ratio;
        } else {
          continue;
        }
        ++n;
        const GateVerdict point_verdict = interval_verdict(ci, bound.comparison, bound.limit);
        const bool worse =
            !decided || (point_verdict == GateVerdict::kFail && verdict != GateVerdict::kFail) ||
            (point_verdict == GateVerdict::kInconclusive && verdict == GateVerdict::kPass);
        if (worse) {
          decided = true;
          verdict = point_verdict;
          gate.statistics.estimate = ratio;
          gate.statistics.interval = ci;
          gate.statistics.point = point->params;
          gate.statistics.confidence = comparison.comparison.confidence;
          gate.statistics.seed = comparison.comparison.seed;
          gate.statistics.n = comparison.comparison.b.n;
          gate.statistics.n_baseline = comparison.comparison.a.n;
        }
      }
    }
    if (n == 0) {
      gate.verdict = GateVerdict::kInconclusive;
      gate.rule = "inconclusive: no A/B comparison between " + a + " and " + b + " of bench " +
                  bound.metric.entry + scope;
      return;
    }
    gate.verdict = verdict;
    gate.rule =
        std::string(gate_verdict_name(verdict)) + ": at " + point_text(gate.statistics.point) +
        " the " + format_number(100 * gate.statistics.confidence.value_or(0.95)) +
        "% CI of the ratio of medians " + ratio_text + " is " +
        interval_text(*gate.statistics.interval) + " (estimate " +
        format_number(*gate.statistics.estimate) + "); pass iff it lies wholly " + symbol + " " +
        format_number(bound.limit) + ", fail iff no part does (" + std::to_string(n) + " point(s))";
    return;
  }

  std::vector<double> samples_a, samples_b;
  for (const auto* point : points_a) {
    if (auto value = metric_of(*point, baseline)) samples_a.push_back(*value);
  }
  for (const auto* point : points_b) {
    if (auto value = metric_of(*point, bound.metric)) samples_b.push_back(*value);
  }
  gate.statistics.n = static_cast<int64_t>(samples_b.size());
  gate.statistics.n_baseline = static_cast<int64_t>(samples_a.size());
  if (samples_a.empty() || samples_b.empty()) {
    gate.verdict = GateVerdict::kInconclusive;
    gate.rule = "inconclusive: no samples of " +
                (samples_b.empty() ? ref_text(bound.metric) : ref_text(baseline)) + scope +
                " (their metrics: " + metric_names(samples_b.empty() ? points_b : points_a) + ")";
    return;
  }
  bench::CompareOptions options;
  options.confidence = spec.confidence;
  options.seed = gate_seed(spec.name);
  options.threshold = std::max(1e-9, std::fabs(bound.limit - 1.0));
  const bench::NonInferiority test =
      bench::non_inferiority(samples_a, samples_b, bound.limit, options);
  gate.statistics.estimate = test.ratio;
  gate.statistics.interval = test.ci;
  gate.statistics.seed = options.seed;
  if (!points_b.empty()) gate.statistics.point = points_b.front()->params;
  gate.verdict = interval_verdict(test.ci, bound.comparison, bound.limit);
  gate.rule = std::string(gate_verdict_name(gate.verdict)) + ": the " +
              format_number(100 * spec.confidence) + "% bootstrap CI of the ratio of medians " +
              ratio_text + " over " + std::to_string(samples_b.size()) + " / " +
              std::to_string(samples_a.size()) + " repeats is " + interval_text(test.ci) +
              " (estimate " + format_number(test.ratio) + "); pass iff it lies wholly " + symbol +
              " " + format_number(bound.limit) + ", fail iff no part does";
  if (gate.verdict == GateVerdict::kInconclusive) gate.rule += "; more repeats would narrow it";
}

std::string selector_text(const VariantRef& ref) {
  switch (ref.selector) {
    case VariantSelector::kConfigured:
      return "configured";
    case VariantSelector::kAny:
      return "any";
    default:
      return ref.variant;
  }
}

// What `ref` means under the plan: one variant, or (for `any`) every variant but `exclude`.
std::optional<std::vector<std::string>> resolve_variants(const VariantRef& ref,
                                                         const Objective& objective,
                                                         const Plan& plan,
                                                         const std::string& exclude) {
  switch (ref.selector) {
    case VariantSelector::kNamed:
      return std::vector<std::string>{ref.variant};
    case VariantSelector::kConfigured: {
      auto variant = configured_variant(plan, ref.bench);
      if (!variant) return std::nullopt;
      return std::vector<std::string>{*variant};
    }
    case VariantSelector::kAny: {
      std::vector<std::string> out;
      if (const ProbeEntry* entry = objective.find_entry(Layer::kBench, ref.bench)) {
        for (const auto& variant : entry->variants) {
          if (variant != exclude) out.push_back(variant);
        }
      }
      return out;
    }
  }
  return std::nullopt;
}

std::string relation_text(const BenchVerdict& verdict) {
  std::string out = verdict.negated ? "not " : "";
  switch (verdict.relation) {
    case AbRelation::kSlower:
      return out + "SLOWER than";
    case AbRelation::kFaster:
      return out + "FASTER than";
    case AbRelation::kSame:
      return out + "SAME as";
  }
  return out;
}

void evaluate_bench_verdict(const BenchVerdict& verdict, const Objective& objective,
                            const Plan& plan, std::span<const PointResult> results,
                            GateResult& gate) {
  gate.statistics.comparison = relation_text(verdict);
  if (verdict.subject.bench != verdict.other.bench) {
    gate.verdict = GateVerdict::kInconclusive;
    gate.rule = "inconclusive: an A/B verdict compares two variants of one bench, not " +
                verdict.subject.bench + " with " + verdict.other.bench;
    return;
  }
  const auto subjects = resolve_variants(verdict.subject, objective, plan, "");
  if (!subjects || subjects->size() != 1) {
    gate.verdict = GateVerdict::kInconclusive;
    gate.rule = "inconclusive: " + verdict.subject.bench + "[" + selector_text(verdict.subject) +
                "] names no single variant under this configuration (run with --config setting "
                "the deployment key that selects " +
                verdict.subject.bench + "'s variant)";
    return;
  }
  const std::string subject = subjects->front();
  const auto others = resolve_variants(verdict.other, objective, plan, subject);
  if (!others || others->empty()) {
    gate.verdict = GateVerdict::kInconclusive;
    gate.rule = "inconclusive: " + verdict.other.bench + "[" + selector_text(verdict.other) +
                "] names no variant to compare " + subject + " with";
    return;
  }
  const auto points = selected_points(results, Layer::kBench, verdict.subject.bench, verdict.where);
  const bench::AbVerdict wanted =
      verdict.relation == AbRelation::kSlower   ? bench::AbVerdict::kSlower
      : verdict.relation == AbRelation::kFaster ? bench::AbVerdict::kFaster
                                                : bench::AbVerdict::kSame;
  int64_t n = 0;
  GateVerdict outcome = GateVerdict::kPass;
  std::string decisive;
  bool have_decisive = false;
  for (const auto* point : points) {
    for (const auto& other : *others) {
      bench::Comparison oriented;
      bool found = false;
      for (const auto& comparison : point->comparisons) {
        if (comparison.a == other && comparison.b == subject) {
          oriented = comparison.comparison;
          found = true;
        } else if (comparison.a == subject && comparison.b == other) {
          // The other way round: the ratio and its interval invert, and so does the verdict.
          oriented = bench::reversed(comparison.comparison);
          found = true;
        }
        if (found) break;
      }
      GateVerdict point_verdict = GateVerdict::kInconclusive;
      std::string sentence;
      if (!found) {
        sentence = "no A/B comparison of " + subject + " with " + other + " at " +
                   point_text(point->params);
      } else {
        ++n;
        const bool holds = oriented.verdict == wanted;
        if (oriented.verdict == bench::AbVerdict::kAmbiguous) {
          point_verdict = GateVerdict::kInconclusive;
        } else {
          point_verdict = holds != verdict.negated ? GateVerdict::kPass : GateVerdict::kFail;
        }
        sentence = "at " + point_text(point->params) + " " + subject + "/" + other + " = " +
                   format_number(oriented.ratio) + " " + interval_text(oriented.ci) + " is " +
                   std::string(bench::ab_verdict_name(oriented.verdict)) + " (t " +
                   format_number(oriented.threshold) + ")";
      }
      const bool worse =
          !have_decisive ||
          (point_verdict == GateVerdict::kFail && outcome != GateVerdict::kFail) ||
          (point_verdict == GateVerdict::kInconclusive && outcome == GateVerdict::kPass);
      if (worse) {
        have_decisive = true;
        outcome = point_verdict;
        decisive = sentence;
        gate.statistics.point = point->params;
        if (found) {
          gate.statistics.candidate = subject;
          gate.statistics.baseline = other;
          gate.statistics.estimate = oriented.ratio;
          gate.statistics.interval = oriented.ci;
          gate.statistics.bound = oriented.threshold;
          gate.statistics.confidence = oriented.confidence;
          gate.statistics.seed = oriented.seed;
        }
      }
      if (point_verdict == GateVerdict::kFail) {
        for (const auto& finding : point->findings) {
          if (finding.layer == Layer::kBench &&
              finding.where.path.find(subject) != std::string::npos &&
              finding.where.path.find(other) != std::string::npos) {
            gate.findings.push_back(finding);
          }
        }
      }
    }
  }
  gate.statistics.n = n;
  const std::string asked = subject + " " + relation_text(verdict) + " " + *others->begin() +
                            (others->size() > 1 ? " (and the other variants)" : "") +
                            where_text(verdict.where);
  if (!have_decisive) {
    gate.verdict = GateVerdict::kInconclusive;
    gate.rule = "inconclusive: no point of bench " + verdict.subject.bench + " was selected" +
                where_text(verdict.where);
    return;
  }
  gate.verdict = outcome;
  switch (outcome) {
    case GateVerdict::kPass:
      gate.rule = "pass: " + asked + " holds at every selected point (" + std::to_string(n) +
                  " comparison(s)); e.g. " + decisive;
      break;
    case GateVerdict::kFail:
      gate.rule = "fail: " + asked + " is contradicted: " + decisive;
      break;
    default:
      gate.rule = "inconclusive: " + decisive +
                  ", which decides neither way (AMBIGUOUS keeps "
                  "the gate undecided; more samples would settle it)";
      break;
  }
}

void evaluate_check_passes(const CheckPasses& passes, std::span<const PointResult> results,
                           GateResult& gate) {
  const auto points = selected_points(results, Layer::kCheck, passes.check, passes.where);
  gate.statistics.n = static_cast<int64_t>(points.size());
  gate.statistics.comparison = "passes";
  const std::string scope = where_text(passes.where);
  if (points.empty()) {
    gate.verdict = GateVerdict::kInconclusive;
    gate.rule = "inconclusive: no point of check " + passes.check + " was selected" + scope;
    return;
  }
  const PointResult* failed = nullptr;
  const PointResult* unsure = nullptr;
  int64_t failures = 0;
  for (const auto* point : points) {
    if (point->verdict == Verdict::kFail) {
      ++failures;
      if (failed == nullptr) failed = point;
      attach_fail_findings(gate, *point);
    } else if (point->verdict != Verdict::kPass && unsure == nullptr) {
      unsure = point;
    }
  }
  if (failed != nullptr) {
    gate.verdict = GateVerdict::kFail;
    gate.statistics.point = failed->params;
    std::string claim;
    for (const auto& finding : failed->findings) {
      if (finding.severity == Severity::kFail) {
        claim = finding.claim;
        break;
      }
    }
    gate.rule = "fail: " + std::to_string(failures) + " of " + std::to_string(points.size()) +
                " point(s) of check " + passes.check + scope + " broke their tolerances; first " +
                point_text(failed->params) + (claim.empty() ? "" : ": " + claim);
  } else if (unsure != nullptr) {
    gate.verdict = GateVerdict::kInconclusive;
    gate.statistics.point = unsure->params;
    gate.rule = "inconclusive: check " + passes.check + " at " + point_text(unsure->params) +
                " is " + std::string(verdict_name(unsure->verdict)) +
                " (it cannot discriminate a wrong candidate, or decided nothing)";
  } else {
    gate.verdict = GateVerdict::kPass;
    gate.rule = "pass: every one of " + std::to_string(points.size()) + " point(s) of check " +
                passes.check + scope + " met its tolerances";
  }
}

// --- against a baseline build or run ---------------------------------------------------------

const PointResult* baseline_of(const PointResult& point, const std::vector<PointResult>& baseline) {
  for (const auto& other : baseline) {
    if (other.layer == point.layer && other.entry == point.entry && other.repeat == point.repeat &&
        other.params == point.params) {
      return &other;
    }
  }
  return nullptr;
}

const std::vector<double>* values_of(
    const std::vector<std::pair<std::string, std::vector<double>>>& lists,
    const std::string& variant) {
  for (const auto& [name, samples] : lists) {
    if (name == variant) return &samples;
  }
  return nullptr;
}

const std::vector<double>* samples_of(const PointResult& point, const std::string& variant) {
  for (const auto& [name, samples] : point.samples) {
    if (name == variant) return &samples;
  }
  return nullptr;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

// candidate / baseline, with 0/0 = 1 (both exact) and x/0 = +Inf; NaN stays NaN.
double baseline_ratio(double candidate, double baseline) {
  if (std::isnan(candidate) || std::isnan(baseline)) return NAN;
  if (candidate == 0 && baseline == 0) return 1.0;
  if (baseline == 0) return INFINITY;
  return candidate / baseline;
}

std::string no_baseline_text(const PointResult& point) {
  return "the baseline has no observation of " + std::string(layer_name(point.layer)) + " " +
         point.entry + " at " + point_text(point.params) + " (repeat " +
         std::to_string(point.repeat + 1) + ")";
}

void evaluate_bound_versus_baseline(const MetricBound& bound, const GateSpec& spec,
                                    std::span<const PointResult> results,
                                    const std::vector<PointResult>& baseline, GateResult& gate) {
  const std::string symbol(comparison_symbol(bound.comparison));
  gate.statistics.comparison = symbol;
  gate.statistics.bound = bound.limit;
  const std::string scope = where_text(bound.where);
  const std::string ratio_text = ref_text(bound.metric) + " / baseline";
  gate.statistics.candidate = ref_text(bound.metric) + " of this build";
  gate.statistics.baseline = ref_text(bound.metric) + " of the baseline";
  const auto points = selected_points(results, bound.metric.layer, bound.metric.entry, bound.where);
  std::string missing;

  if (bound.metric.layer == Layer::kCheck) {
    // Per point, over its seeds (repeats): worst over worst and median over median.
    std::vector<std::pair<Params, std::pair<std::vector<double>, std::vector<double>>>> groups;
    std::vector<std::vector<const PointResult*>> group_points;
    for (const auto* point : points) {
      const auto value = metric_of(*point, bound.metric);
      if (!value) continue;
      const PointResult* base = baseline_of(*point, baseline);
      const std::optional<double> base_value = base ? metric_of(*base, bound.metric) : std::nullopt;
      if (!base_value) {
        if (missing.empty()) missing = no_baseline_text(*point);
        continue;
      }
      auto found = std::find_if(groups.begin(), groups.end(),
                                [&](const auto& group) { return group.first == point->params; });
      if (found == groups.end()) {
        groups.push_back({point->params, {}});
        group_points.emplace_back();
        found = groups.end() - 1;
      }
      found->second.first.push_back(*value);
      found->second.second.push_back(*base_value);
      group_points[static_cast<size_t>(found - groups.begin())].push_back(point);
    }
    int64_t n = 0;
    bool failed = false, have_worst = false;
    double worst_ratio = 0;
    std::string worst_text;
    for (size_t index = 0; index < groups.size(); ++index) {
      const auto& [params, values] = groups[index];
      const auto& [candidate, base] = values;
      n += static_cast<int64_t>(candidate.size());
      auto nan_max = [](const std::vector<double>& list) {
        double out = -INFINITY;
        for (double value : list)
          out = std::isnan(value) || std::isnan(out) ? NAN : std::max(out, value);
        return out;
      };
      const double worst_candidate = nan_max(candidate), worst_base = nan_max(base);
      const double by_worst = baseline_ratio(worst_candidate, worst_base);
      const double by_median = baseline_ratio(median(candidate), median(base));
      for (const auto& [ratio, how] :
           {std::pair{by_worst, "worst over worst"}, std::pair{by_median, "median over median"}}) {
        const bool satisfied = number_satisfies(ratio, bound.comparison, bound.limit);
        const bool worse =
            !have_worst || std::isnan(ratio) || (!std::isnan(worst_ratio) && ratio > worst_ratio);
        if (!satisfied && !failed) {
          failed = true;
          for (const auto* point : group_points[index]) attach_fail_findings(gate, *point);
        }
        if (worse) {
          have_worst = true;
          worst_ratio = ratio;
          gate.statistics.point = params;
          gate.statistics.estimate = ratio;
          worst_text =
              std::string(how) + " at " + point_text(params) + " over " +
              std::to_string(candidate.size()) +
              " seed(s): " + format_number(how[0] == 'w' ? worst_candidate : median(candidate)) +
              " vs the baseline's " + format_number(how[0] == 'w' ? worst_base : median(base)) +
              " (x" + format_number(ratio) + ")";
        }
      }
    }
    gate.statistics.n = n;
    if (failed) {
      gate.verdict = GateVerdict::kFail;
      gate.rule = "fail: " + ratio_text + scope + " is not " + symbol + " " +
                  format_number(bound.limit) + ": the largest ratio is " + worst_text;
    } else if (!missing.empty() || !have_worst) {
      gate.verdict = GateVerdict::kInconclusive;
      gate.rule =
          "inconclusive: " +
          (missing.empty() ? "no observation of " + ref_text(bound.metric) + scope : missing);
    } else {
      gate.verdict = GateVerdict::kPass;
      gate.rule = "pass: " + ratio_text + scope + " is " + symbol + " " +
                  format_number(bound.limit) + " at every point; the largest ratio is " +
                  worst_text;
    }
    return;
  }

  // Benches and scenarios: samples of both builds, non-inferiority on the ratio of medians.
  gate.statistics.confidence = spec.confidence;
  bench::CompareOptions options;
  options.confidence = spec.confidence;
  options.seed = gate_seed(spec.name);
  options.threshold = std::max(1e-9, std::fabs(bound.limit - 1.0));
  struct Group {
    Params params;
    std::vector<double> candidate, reference;
    bool paired = true;  // every value pair ran back to back (rounds, or repeats of a scenario)
  };
  std::vector<Group> groups;
  for (const auto* point : points) {
    const PointResult* base = baseline_of(*point, baseline);
    if (base == nullptr) {
      if (missing.empty()) missing = no_baseline_text(*point);
      continue;
    }
    std::vector<double> candidate, reference;
    bool paired = false;
    if (bound.metric.layer == Layer::kBench) {
      // The variant's timing samples: a bench metric is a statistic of them.
      const std::string variant = bound.metric.variant.value_or(
          point->samples.empty() ? std::string() : point->samples.front().first);
      const auto* mine = samples_of(*point, variant);
      const auto* theirs = samples_of(*base, variant);
      const auto* my_rounds = values_of(point->round_medians, variant);
      const auto* their_rounds = values_of(base->round_medians, variant);
      if (my_rounds != nullptr && their_rounds != nullptr && !my_rounds->empty() &&
          my_rounds->size() == their_rounds->size()) {
        candidate = *my_rounds;  // one median per round, round r of both back to back
        reference = *their_rounds;
        paired = true;
      } else if (mine == nullptr || theirs == nullptr) {
        if (missing.empty()) missing = "no timing samples of variant '" + variant + "'";
        continue;
      } else {
        candidate = *mine;
        reference = *theirs;
      }
    } else {
      const auto value = metric_of(*point, bound.metric);
      const auto base_value = metric_of(*base, bound.metric);
      if (!value || !base_value) continue;
      candidate = {*value};
      reference = {*base_value};
      paired = point->paired && base->paired;
    }
    // Scenario repeats are separate points: pool them per parameter point.
    auto found = std::find_if(groups.begin(), groups.end(),
                              [&](const Group& group) { return group.params == point->params; });
    if (found == groups.end()) {
      groups.push_back({point->params, {}, {}, true});
      found = groups.end() - 1;
    }
    found->candidate.insert(found->candidate.end(), candidate.begin(), candidate.end());
    found->reference.insert(found->reference.end(), reference.begin(), reference.end());
    found->paired = found->paired && paired;
  }
  GateVerdict verdict = GateVerdict::kPass;
  bool decided = false;
  int64_t decisive_pairs = 0;
  for (const Group& group : groups) {
    Interval ci;
    double ratio = 0;
    int64_t n_candidate = 0, n_baseline = 0, pairs = 0;
    GateVerdict point_verdict = GateVerdict::kInconclusive;
    if (group.paired) {
      // The builds ran back to back: the median of the per-pair ratios and its interval.
      const bench::Comparison comparison = compare_builds(
          group.reference, group.candidate, options.threshold, spec.confidence, options.seed);
      ci = comparison.ci;
      ratio = comparison.ratio;
      pairs = comparison.pairs;
      n_candidate = n_baseline = comparison.pairs;
      if (comparison.pairs >= bench::kMinSamplesForVerdict) {
        point_verdict = interval_verdict(ci, bound.comparison, bound.limit);
      }
    } else {
      const bench::NonInferiority test =
          bench::non_inferiority(group.reference, group.candidate, bound.limit, options);
      ci = test.ci;
      ratio = test.ratio;
      n_candidate = test.n_b;
      n_baseline = test.n_a;
      point_verdict = interval_verdict(test.ci, bound.comparison, bound.limit);
    }
    const bool worse =
        !decided || (point_verdict == GateVerdict::kFail && verdict != GateVerdict::kFail) ||
        (point_verdict == GateVerdict::kInconclusive && verdict == GateVerdict::kPass);
    if (worse) {
      decided = true;
      verdict = point_verdict;
      decisive_pairs = pairs;
      gate.statistics.estimate = ratio;
      gate.statistics.interval = ci;
      gate.statistics.point = group.params;
      gate.statistics.n = n_candidate;
      gate.statistics.n_baseline = n_baseline;
      gate.statistics.seed = options.seed;
    }
  }
  if (!decided) {
    gate.verdict = GateVerdict::kInconclusive;
    gate.rule = "inconclusive: " + (missing.empty() ? "no samples of " + ref_text(bound.metric) +
                                                          scope + " against the baseline"
                                                    : missing);
    return;
  }
  if (verdict == GateVerdict::kPass && !missing.empty()) verdict = GateVerdict::kInconclusive;
  gate.verdict = verdict;
  const std::string what = decisive_pairs > 0
                               ? "% bootstrap CI of the median of the per-round ratios " +
                                     ratio_text + " over " + std::to_string(decisive_pairs) +
                                     " rounds (the builds run back to back)"
                               : "% bootstrap CI of the ratio of medians " + ratio_text + " over " +
                                     std::to_string(*gate.statistics.n_baseline) + " baseline / " +
                                     std::to_string(gate.statistics.n) + " candidate samples";
  gate.rule = std::string(gate_verdict_name(verdict)) + ": at " +
              point_text(gate.statistics.point) + " the " + format_number(100 * spec.confidence) +
              what + " is " + interval_text(*gate.statistics.interval) + " (estimate " +
              format_number(*gate.statistics.estimate) + "); pass iff it lies wholly " + symbol +
              " " + format_number(bound.limit) + ", fail iff no part does" +
              (missing.empty() ? "" : "; " + missing);
}

void evaluate_bench_versus_baseline(const BenchVerdict& verdict, const GateSpec& spec,
                                    const Objective& objective, const Plan& plan,
                                    std::span<const PointResult> results,
                                    const std::vector<PointResult>& baseline, GateResult& gate,
                                    int64_t pending_comparisons) {
  gate.statistics.comparison = relation_text(verdict) + " baseline";
  const ProbeEntry* entry = objective.find_entry(Layer::kBench, verdict.subject.bench);
  const auto points = selected_points(results, Layer::kBench, verdict.subject.bench, verdict.where);
  const bench::AbVerdict wanted =
      verdict.relation == AbRelation::kSlower   ? bench::AbVerdict::kSlower
      : verdict.relation == AbRelation::kFaster ? bench::AbVerdict::kFaster
                                                : bench::AbVerdict::kSame;
  struct Item {
    const PointResult* point;
    std::string variant;
    bench::Comparison comparison;
  };
  std::vector<Item> items;
  std::string missing;
  for (const auto* point : points) {
    std::vector<std::string> variants;
    if (verdict.subject.selector == VariantSelector::kAny || entry == nullptr ||
        entry->variants.empty()) {
      for (const auto& [name, samples] : point->samples) variants.push_back(name);
    } else {
      const auto resolved = resolve_variants(verdict.subject, objective, plan, "");
      if (resolved) variants = *resolved;
    }
    const PointResult* base = baseline_of(*point, baseline);
    for (const auto& variant : variants) {
      const auto* mine = samples_of(*point, variant);
      const auto* theirs = base ? samples_of(*base, variant) : nullptr;
      if (mine == nullptr || theirs == nullptr || mine->empty() || theirs->empty()) {
        if (missing.empty()) {
          missing = base ? "no timing samples of " + variant + " at " + point_text(point->params)
                         : no_baseline_text(*point);
        }
        continue;
      }
      const double threshold = cross_build_threshold(entry);
      const auto* my_rounds = values_of(point->round_medians, variant);
      const auto* their_rounds = values_of(base->round_medians, variant);
      if (my_rounds != nullptr && their_rounds != nullptr && !my_rounds->empty() &&
          my_rounds->size() == their_rounds->size()) {
        // The two builds ran in rounds, back to back: the per-round ratios decide.
        items.push_back({point, variant,
                         compare_builds(*their_rounds, *my_rounds, threshold, spec.confidence,
                                        gate_seed(spec.name + variant))});
        continue;
      }
      bench::CompareOptions options;
      options.threshold = threshold;
      options.confidence = spec.confidence;
      options.seed = gate_seed(spec.name + variant);
      items.push_back({point, variant, bench::compare(*theirs, *mine, options)});
    }
  }
  std::vector<bench::Comparison> comparisons;
  for (const auto& item : items) comparisons.push_back(item.comparison);
  // Comparisons still to come count as p = 1: the control can then only loosen once they come,
  // so a SLOWER that survives it now survives it then.
  for (int64_t pending = 0; pending < pending_comparisons; ++pending) {
    bench::Comparison placeholder;
    placeholder.p_value = 1.0;
    comparisons.push_back(placeholder);
  }
  // Two builds in rounds: a change needs the look's alpha (round_look_alpha), even alone, shared
  // among the objective's bench gates against the baseline.
  const bool all_paired =
      !items.empty() && std::all_of(items.begin(), items.end(),
                                    [](const Item& item) { return item.comparison.pairs > 0; });
  if (all_paired) {
    bench::control_false_discovery(comparisons, round_look_alpha(objective));
  } else if (comparisons.size() > 1) {
    bench::control_false_discovery(comparisons);
  }
  comparisons.resize(items.size());
  GateVerdict outcome = GateVerdict::kPass;
  bool have = false;
  std::string decisive;
  for (size_t index = 0; index < items.size(); ++index) {
    const bench::Comparison& comparison = comparisons[index];
    GateVerdict point_verdict = GateVerdict::kInconclusive;
    if (verdict.negated && verdict.relation == AbRelation::kSlower) {
      // "not SLOWER than baseline" is a non-inferiority question: it fails on SLOWER and passes
      // once the interval's upper end is within the threshold, so that an AMBIGUOUS verdict
      // between SAME and FASTER (a change that helps a little) does not leave it undecided.
      if (comparison.verdict == bench::AbVerdict::kSlower) {
        point_verdict = GateVerdict::kFail;
      } else if (std::isfinite(comparison.ci.high) &&
                 comparison.ci.high <= 1.0 + comparison.threshold) {
        point_verdict = GateVerdict::kPass;
      }
    } else if (comparison.verdict != bench::AbVerdict::kAmbiguous) {
      point_verdict = (comparison.verdict == wanted) != verdict.negated ? GateVerdict::kPass
                                                                        : GateVerdict::kFail;
    }
    const bool worse =
        !have || (point_verdict == GateVerdict::kFail && outcome != GateVerdict::kFail) ||
        (point_verdict == GateVerdict::kInconclusive && outcome == GateVerdict::kPass);
    if (worse) {
      have = true;
      outcome = point_verdict;
      const Item& item = items[index];
      decisive =
          "at " + point_text(item.point->params) + " " + item.variant +
          " against the baseline's = " + format_number(comparison.ratio) + " " +
          interval_text(comparison.ci) + " is " +
          std::string(bench::ab_verdict_name(comparison.verdict)) + " (t " +
          format_number(comparison.threshold) + ", " +
          (comparison.pairs > 0 ? "median of " + std::to_string(comparison.pairs) +
                                      " per-round ratios, the builds run back to back)"
                                : std::to_string(comparison.a.n) + " baseline / " +
                                      std::to_string(comparison.b.n) + " candidate samples)");
      gate.statistics.point = item.point->params;
      gate.statistics.candidate = "this build's " + item.variant;
      gate.statistics.baseline = "the baseline's " + item.variant;
      gate.statistics.estimate = comparison.ratio;
      gate.statistics.interval = comparison.ci;
      gate.statistics.bound = comparison.threshold;
      gate.statistics.confidence = comparison.confidence;
      gate.statistics.seed = comparison.seed;
      gate.statistics.n = comparison.b.n;
      gate.statistics.n_baseline = comparison.a.n;
    }
  }
  const std::string asked = verdict.subject.bench + "[" + selector_text(verdict.subject) + "] " +
                            relation_text(verdict) + " baseline" + where_text(verdict.where);
  if (!have) {
    gate.verdict = GateVerdict::kInconclusive;
    gate.rule =
        "inconclusive: " + (missing.empty() ? "no point of bench " + verdict.subject.bench +
                                                  " was selected" + where_text(verdict.where)
                                            : missing);
    return;
  }
  if (outcome == GateVerdict::kPass && !missing.empty()) {
    outcome = GateVerdict::kInconclusive;
    decisive = missing;
  }
  gate.verdict = outcome;
  gate.rule =
      std::string(gate_verdict_name(outcome)) + ": " + asked + ": " + decisive +
      (outcome == GateVerdict::kPass ? " (" + std::to_string(items.size()) + " comparison(s) hold)"
                                     : "");
}

Json optional_number(const std::optional<double>& value) {
  return value ? number_to_json(*value) : Json(nullptr);
}

}  // namespace

void orient_to_gates(const Objective& objective, const Plan& plan, std::vector<PointResult>& points,
                     std::vector<GateResult>& gates) {
  struct Orientation {
    std::string candidate;
    std::vector<std::string> baselines;
  };
  std::map<std::string, Orientation> by_bench;
  for (const auto& gate : objective.gates) {
    const auto* verdict = std::get_if<BenchVerdict>(&gate.expression);
    if (verdict == nullptr || verdict->versus_baseline ||
        verdict->subject.bench != verdict->other.bench ||
        by_bench.contains(verdict->subject.bench)) {
      continue;
    }
    const auto subjects = resolve_variants(verdict->subject, objective, plan, "");
    if (!subjects || subjects->size() != 1) continue;
    const auto others = resolve_variants(verdict->other, objective, plan, subjects->front());
    if (!others || others->empty()) continue;
    by_bench[verdict->subject.bench] = {subjects->front(), *others};
  }
  if (by_bench.empty()) return;

  auto is_comparison_finding = [](const Finding& finding, const std::string& path) {
    if (finding.layer != Layer::kBench || finding.where.path != path) return false;
    for (bench::AbVerdict kind : {bench::AbVerdict::kFaster, bench::AbVerdict::kSlower,
                                  bench::AbVerdict::kSame, bench::AbVerdict::kAmbiguous}) {
      if (finding.id ==
          "bench." + finding.where.probe + "." + std::string(bench::ab_verdict_id(kind))) {
        return true;
      }
    }
    return false;
  };
  std::vector<std::pair<Finding, Finding>> restated;  // (as the bench said it, the gate's way)
  for (PointResult& point : points) {
    if (point.layer != Layer::kBench) continue;
    const auto orientation = by_bench.find(point.entry);
    if (orientation == by_bench.end()) continue;
    const std::string& candidate = orientation->second.candidate;
    const auto& baselines = orientation->second.baselines;
    for (VariantComparison& item : point.comparisons) {
      if (item.a != candidate ||
          std::find(baselines.begin(), baselines.end(), item.b) == baselines.end()) {
        continue;
      }
      const std::string old_path = item.b + " vs " + item.a;
      std::swap(item.a, item.b);
      item.comparison = bench::reversed(item.comparison);
      for (Finding& finding : point.findings) {
        if (!is_comparison_finding(finding, old_path)) continue;
        bench::FindingContext context;
        context.subject = finding.where.subject;
        context.probe = finding.where.probe;
        context.params = finding.where.params;
        context.path = item.b + " vs " + item.a;
        context.reproduce = finding.reproduce;
        context.files = finding.evidence.files;
        context.name_a = item.a;
        context.name_b = item.b;
        Finding oriented = bench::comparison_finding(item.comparison, context);
        // What a counters pass added to the claim (probe/counters_pass.hpp) stays.
        bench::FindingContext as_said = context;
        std::swap(as_said.name_a, as_said.name_b);
        as_said.path = old_path;
        const std::string said =
            bench::comparison_finding(bench::reversed(item.comparison), as_said).claim;
        if (finding.claim.size() > said.size() && finding.claim.rfind(said, 0) == 0) {
          oriented.claim += finding.claim.substr(said.size());
        }
        restated.emplace_back(finding, oriented);
        finding = std::move(oriented);
      }
    }
  }
  for (GateResult& gate : gates) {
    for (Finding& finding : gate.findings) {
      for (const auto& [said, oriented] : restated) {
        if (finding == said) {
          finding = oriented;
          break;
        }
      }
    }
  }
}

bench::Comparison compare_builds(std::span<const double> baseline,
                                 std::span<const double> candidate, double threshold,
                                 double confidence, uint64_t seed) {
  bench::CompareOptions options;
  options.threshold = threshold;
  options.confidence = confidence;
  options.seed = seed;  // fixed: the same values give the same interval
  return bench::compare_paired(baseline, candidate, options);
}

bool is_round_look(int64_t rounds) { return rounds == 5 || rounds == 8 || rounds == 12; }

double round_look_alpha() { return 0.05 / static_cast<double>(kRoundLooks); }

int64_t baseline_bench_gates(const Objective& objective) {
  int64_t count = 0;
  for (const GateSpec& gate : objective.gates) {
    const auto* verdict = std::get_if<BenchVerdict>(&gate.expression);
    if (verdict != nullptr && verdict->versus_baseline) ++count;
  }
  return count;
}

double round_look_alpha(const Objective& objective) {
  return round_look_alpha() /
         static_cast<double>(std::max<int64_t>(1, baseline_bench_gates(objective)));
}

double cross_build_threshold(const ProbeEntry* entry) {
  return 2 * (entry != nullptr && entry->threshold ? *entry->threshold : 0.02);
}

GateResult not_run_gate(const GateSpec& gate, const std::string& reason) {
  GateResult result;
  result.name = gate.name;
  result.expression = gate_expression_to_string(gate.expression);
  result.layer = gate_layer(gate.expression);
  result.verdict = GateVerdict::kNotRun;
  result.rule = "not run: " + reason;
  return result;
}

std::vector<std::pair<Layer, std::string>> gate_entries(const GateExpression& expression) {
  std::vector<std::pair<Layer, std::string>> entries;
  if (const auto* bound = std::get_if<MetricBound>(&expression)) {
    entries.emplace_back(bound->metric.layer, bound->metric.entry);
    if (bound->baseline) entries.emplace_back(bound->baseline->layer, bound->baseline->entry);
  } else if (const auto* verdict = std::get_if<BenchVerdict>(&expression)) {
    entries.emplace_back(Layer::kBench, verdict->subject.bench);
    if (verdict->other.bench != verdict->subject.bench) {
      entries.emplace_back(Layer::kBench, verdict->other.bench);
    }
  } else if (const auto* passes = std::get_if<CheckPasses>(&expression)) {
    entries.emplace_back(Layer::kCheck, passes->check);
  }
  return entries;
}

std::optional<std::string> left_out_reason(const GateSpec& gate, const Plan& plan) {
  for (const auto& [layer, entry] : gate_entries(gate.expression)) {
    if (const LeftOutEntry* left_out = find_left_out(plan, layer, entry)) {
      return "the configuration left out " + std::string(layer_name(layer)) + " " + entry + " (" +
             left_out->reason + ")";
    }
  }
  return std::nullopt;
}

bool is_baseline_gate(const GateExpression& expression) {
  if (const auto* bound = std::get_if<MetricBound>(&expression)) return bound->versus_baseline;
  if (const auto* verdict = std::get_if<BenchVerdict>(&expression)) return verdict->versus_baseline;
  return false;
}

bool baseline_reads_point(const Objective& objective, Layer layer, const std::string& entry,
                          const Params& params) {
  for (const GateSpec& gate : objective.gates) {
    if (const auto* bound = std::get_if<MetricBound>(&gate.expression)) {
      if (bound->versus_baseline && bound->metric.layer == layer && bound->metric.entry == entry &&
          conditions_hold(bound->where, params)) {
        return true;
      }
    } else if (const auto* verdict = std::get_if<BenchVerdict>(&gate.expression)) {
      if (verdict->versus_baseline && layer == Layer::kBench && verdict->subject.bench == entry &&
          conditions_hold(verdict->where, params)) {
        return true;
      }
    }
  }
  return false;
}

bool fails_at_any_point(const GateExpression& expression) {
  if (std::holds_alternative<CheckPasses>(expression)) return true;
  if (const auto* bound = std::get_if<MetricBound>(&expression)) {
    return bound->metric.layer == Layer::kCheck && !bound->baseline && !bound->versus_baseline;
  }
  return false;
}

GateResult evaluate_gate(const GateSpec& gate, const Objective& objective, const Plan& plan,
                         std::span<const PointResult> results,
                         const std::vector<PointResult>* baseline, int64_t pending_comparisons) {
  GateResult result;
  result.name = gate.name;
  result.expression = gate_expression_to_string(gate.expression);
  result.layer = gate_layer(gate.expression);
  if (is_baseline_gate(gate.expression) && baseline == nullptr) {
    return not_run_gate(gate,
                        "no baseline: run with --baseline RUN|latest|REV|BUILD_DIR (or "
                        "--baseline-subject CMD) to compare with an earlier build");
  }
  if (const auto* bound = std::get_if<MetricBound>(&gate.expression)) {
    if (bound->versus_baseline) {
      evaluate_bound_versus_baseline(*bound, gate, results, *baseline, result);
    } else if (bound->baseline) {
      evaluate_relative(*bound, gate, results, result);
    } else {
      evaluate_absolute(*bound, results, result);
    }
  } else if (const auto* verdict = std::get_if<BenchVerdict>(&gate.expression)) {
    if (verdict->versus_baseline) {
      evaluate_bench_versus_baseline(*verdict, gate, objective, plan, results, *baseline, result,
                                     pending_comparisons);
    } else {
      evaluate_bench_verdict(*verdict, objective, plan, results, result);
    }
  } else if (const auto* passes = std::get_if<CheckPasses>(&gate.expression)) {
    evaluate_check_passes(*passes, results, result);
  }
  return result;
}

namespace {

// The look before a scenario gate's last repeat: per parameter point, the values `value_of` gives
// for its points so far (in repeat order), tested at the looks of bench::sequential_looks. A
// FAIL when a point's values lie beyond the bound beyond doubt, nullopt otherwise. `paired`: the
// values are ratios of pairs against a baseline build (else one build's own values).
std::optional<GateResult> look_before_last_repeat(
    const GateSpec& gate, const MetricBound& bound, std::span<const PointResult> results,
    int64_t total_repeats, bool paired,
    const std::function<std::optional<double>(const PointResult&)>& value_of) {
  bool above = false;
  switch (bound.comparison) {
    case Comparison::kLess:
    case Comparison::kLessEqual:
      above = true;  // a `<=` gate fails when the values lie above its bound
      break;
    case Comparison::kGreater:
    case Comparison::kGreaterEqual:
      above = false;
      break;
    default:
      return std::nullopt;
  }
  if (!(bound.limit > 0.0)) return std::nullopt;
  const std::vector<int64_t> looks = bench::sequential_looks(total_repeats);
  if (looks.empty()) return std::nullopt;
  struct Group {
    Params params;
    std::vector<std::pair<int64_t, double>> values;  // (repeat, value)
    std::vector<const PointResult*> points;
  };
  std::vector<Group> groups;
  for (const auto* point :
       selected_points(results, bound.metric.layer, bound.metric.entry, bound.where)) {
    const std::optional<double> value = value_of(*point);
    if (!value) continue;
    auto found = std::find_if(groups.begin(), groups.end(),
                              [&](const Group& group) { return group.params == point->params; });
    if (found == groups.end()) {
      groups.push_back({point->params, {}, {}});
      found = groups.end() - 1;
    }
    found->values.emplace_back(point->repeat, *value);
    found->points.push_back(point);
  }
  for (Group& group : groups) {
    const auto n = static_cast<int64_t>(group.values.size());
    // Only at a look, so that each look is taken once however often this is asked.
    if (std::find(looks.begin(), looks.end(), n) == looks.end()) continue;
    std::sort(group.values.begin(), group.values.end());
    std::vector<double> values;
    for (const auto& [repeat, value] : group.values) values.push_back(value);
    const bench::SequentialDecision decision =
        bench::sequential_look(values, bound.limit, above, static_cast<int64_t>(looks.size()),
                               bench::kSequentialAlpha, paired);
    if (decision.side == bench::SequentialSide::kUndecided) continue;
    GateResult result;
    result.name = gate.name;
    result.expression = gate_expression_to_string(gate.expression);
    result.layer = Layer::kScenario;
    result.verdict = GateVerdict::kFail;
    const std::string symbol(comparison_symbol(bound.comparison));
    result.statistics.n = n;
    if (paired) result.statistics.n_baseline = n;
    result.statistics.estimate = decision.estimate;
    result.statistics.bound = bound.limit;
    result.statistics.comparison = symbol;
    result.statistics.point = group.params;
    if (paired) {
      result.statistics.candidate = ref_text(bound.metric) + " of this build";
      result.statistics.baseline = ref_text(bound.metric) + " of the baseline";
    }
    const std::string subject =
        paired ? ref_text(bound.metric) + " / baseline" : "median(" + ref_text(bound.metric) + ")";
    result.rule =
        "fail: " + subject + where_text(bound.where) + " is not " + symbol + " " +
        format_number(bound.limit) + " at " + point_text(group.params) +
        ", decided at a look before the last of " + std::to_string(total_repeats) + " repeats: " +
        (paired ? "the repeats of both builds run back to back are " : "the repeats so far are ") +
        decision.rule;
    for (const auto* point : group.points) attach_fail_findings(result, *point);
    return result;
  }
  return std::nullopt;
}

}  // namespace

std::optional<GateResult> decide_before_last_repeat(const GateSpec& gate,
                                                    std::span<const PointResult> results,
                                                    const std::vector<PointResult>& baseline,
                                                    int64_t total_repeats) {
  const auto* bound = std::get_if<MetricBound>(&gate.expression);
  if (bound == nullptr || !bound->versus_baseline || bound->metric.layer != Layer::kScenario) {
    return std::nullopt;
  }
  // The pair ratios of the repeats both builds ran back to back.
  return look_before_last_repeat(gate, *bound, results, total_repeats, /*paired=*/true,
                                 [&](const PointResult& point) -> std::optional<double> {
                                   const PointResult* base = baseline_of(point, baseline);
                                   if (base == nullptr || !point.paired || !base->paired)
                                     return std::nullopt;
                                   const auto value = metric_of(point, bound->metric);
                                   const auto base_value = metric_of(*base, bound->metric);
                                   if (!value || !base_value) return std::nullopt;
                                   return baseline_ratio(*value, *base_value);
                                 });
}

std::optional<GateResult> decide_median_before_last_repeat(const GateSpec& gate,
                                                           std::span<const PointResult> results,
                                                           int64_t total_repeats) {
  const auto* bound = std::get_if<MetricBound>(&gate.expression);
  if (bound == nullptr || !bound->median || bound->versus_baseline || bound->baseline ||
      bound->metric.layer != Layer::kScenario) {
    return std::nullopt;
  }
  return look_before_last_repeat(gate, *bound, results, total_repeats, /*paired=*/false,
                                 [&](const PointResult& point) -> std::optional<double> {
                                   const auto value = metric_of(point, bound->metric);
                                   if (!value || !std::isfinite(*value)) return std::nullopt;
                                   // sequential_look reads logarithms: 0 or less is far below any
                                   // positive bound.
                                   return *value > 0.0 ? *value : bound->limit * 1e-12;
                                 });
}

void explain_scenario_gate(GateResult& gate, const GateSpec& spec,
                           std::span<const PointResult> results, size_t max_findings,
                           const std::vector<PointResult>* baseline_points) {
  const auto* bound = std::get_if<MetricBound>(&spec.expression);
  if (bound == nullptr || bound->metric.layer != Layer::kScenario) return;
  auto first_with_trace = [&](const MetricRef& ref) -> const PointResult* {
    for (const auto* point : selected_points(results, ref.layer, ref.entry, bound->where)) {
      if (!point->traces.empty()) return point;
    }
    return nullptr;
  };
  const PointResult* candidate = first_with_trace(bound->metric);
  if (candidate == nullptr) return;
  const PointResult* baseline = bound->baseline ? first_with_trace(*bound->baseline) : nullptr;
  if (bound->versus_baseline && baseline_points != nullptr) {
    // The same scenario of the baseline build: who blocks whom now that did not before.
    for (const auto* point : selected_points(*baseline_points, bound->metric.layer,
                                             bound->metric.entry, bound->where)) {
      if (!point->traces.empty()) {
        baseline = point;
        break;
      }
    }
  }

  trace::AnalyzeRequest request;
  request.top = max_findings;
  Envelope envelope;
  std::string command;
  if (baseline != nullptr) {
    const trace::Model before = trace::load_traces(baseline->traces);
    const trace::Model after = trace::load_traces(candidate->traces);
    envelope = trace::diff(before, after, request);
    command = candidate->reproduce + " ; " + baseline->reproduce + " ; loupe trace diff";
    for (const auto& file : baseline->traces) command += " " + file;
    for (const auto& file : candidate->traces) command += " " + file;
  } else {
    envelope = trace::analyze(trace::load_traces(candidate->traces), request);
    command = candidate->reproduce + " ; loupe trace analyze";
    for (const auto& file : candidate->traces) command += " " + file;
  }
  size_t added = 0;
  for (auto& finding : envelope.findings) {
    if (added == max_findings) break;
    if (finding.severity == Severity::kInfo && baseline != nullptr &&
        finding.id.rfind("trace.diff.", 0) != 0) {
      continue;
    }
    if (finding.where.probe.empty()) finding.where.probe = candidate->probe;
    if (finding.where.params.empty()) finding.where.params = candidate->params;
    if (finding.reproduce.empty()) finding.reproduce = command;
    gate.findings.push_back(std::move(finding));
    ++added;
  }
}

void control_bench_false_discovery(std::vector<PointResult>& results) {
  std::map<std::string, std::vector<std::pair<size_t, size_t>>> by_entry;
  for (size_t point = 0; point < results.size(); ++point) {
    if (results[point].layer != Layer::kBench) continue;
    for (size_t index = 0; index < results[point].comparisons.size(); ++index) {
      by_entry[results[point].entry].emplace_back(point, index);
    }
  }
  for (const auto& [entry, places] : by_entry) {
    std::vector<size_t> points;
    for (const auto& [point, index] : places) {
      if (std::find(points.begin(), points.end(), point) == points.end()) points.push_back(point);
    }
    // One point: analyze_observation already controlled its own comparisons.
    if (points.size() < 2) continue;
    std::vector<bench::Comparison> comparisons;
    for (const auto& [point, index] : places) {
      comparisons.push_back(results[point].comparisons[index].comparison);
    }
    bench::control_false_discovery(comparisons);
    for (size_t item = 0; item < places.size(); ++item) {
      results[places[item].first].comparisons[places[item].second].comparison = comparisons[item];
    }
  }
}

Json gate_statistics_to_json(const GateStatistics& statistics) {
  Json out = Json::object();
  out["n"] = statistics.n;
  if (statistics.n_baseline) out["n_baseline"] = *statistics.n_baseline;
  out["estimate"] = optional_number(statistics.estimate);
  out["interval"] = statistics.interval ? Json::array({number_to_json(statistics.interval->low),
                                                       number_to_json(statistics.interval->high)})
                                        : Json(nullptr);
  out["bound"] = optional_number(statistics.bound);
  out["comparison"] = statistics.comparison;
  out["confidence"] = optional_number(statistics.confidence);
  out["seed"] = statistics.seed ? Json(*statistics.seed) : Json(nullptr);
  Json point = Json::object();
  for (const auto& [name, value] : statistics.point) point[name] = value_to_json(value);
  out["point"] = std::move(point);
  if (!statistics.candidate.empty() && statistics.estimate) {
    out["ratio_of"] = "candidate/baseline";
    out["candidate"] = statistics.candidate;
    out["baseline"] = statistics.baseline;
  }
  return out;
}

Json gate_result_to_json(const GateResult& gate) {
  Json out = Json::object();
  out["name"] = gate.name;
  out["expression"] = gate.expression;
  out["layer"] = std::string(layer_name(gate.layer));
  out["verdict"] = std::string(gate_verdict_name(gate.verdict));
  out["statistics"] = gate_statistics_to_json(gate.statistics);
  out["rule"] = gate.rule;
  Json findings = Json::array();
  for (const auto& finding : gate.findings) findings.push_back(finding_to_json(finding));
  out["findings"] = std::move(findings);
  return out;
}

std::string key_statistic(const GateResult& gate) {
  const GateStatistics& s = gate.statistics;
  if (gate.verdict == GateVerdict::kNotRun) return "-";
  std::string out;
  if (s.estimate) out = format_number(*s.estimate);
  if (s.interval) out += " " + interval_text(*s.interval);
  if (!s.comparison.empty() && s.bound && s.comparison != "passes") {
    if (s.comparison.find("than") != std::string::npos ||
        s.comparison.find("as") != std::string::npos) {
      out += " (t " + format_number(*s.bound) + ")";
    } else {
      out += " " + s.comparison + " " + format_number(*s.bound);
    }
  }
  if (s.comparison == "passes") out = std::to_string(s.n) + " point(s)";
  out += " n=" + std::to_string(s.n);
  return out;
}

}  // namespace loupe::gate
