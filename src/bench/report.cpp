#include "bench/report.hpp"

#include <cmath>
#include <cstdio>

namespace loupe::bench {
namespace {

std::string fixed_digits(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", digits, value);
  return buffer;
}

std::string percent_change(double ratio) {
  return fixed_digits(std::fabs(ratio - 1.0) * 100.0, 1) + "%";
}

// How much slower: "4.2%", or from twice the time on "2.65×" (a percentage past 100 reads badly).
std::string slower_by(double ratio) {
  return ratio >= 2.0 ? fixed_digits(ratio, 2) + "×" : percent_change(ratio);
}

}  // namespace

Json interval_to_json(Interval interval) {
  return Json::array({number_to_json(interval.low), number_to_json(interval.high)});
}

Json summary_to_json(const ArmSummary& summary) {
  Json json = Json::object();
  json["n"] = summary.n;
  json["median_s"] = number_to_json(summary.median);
  json["median_ci_s"] = interval_to_json(summary.median_ci);
  json["relative_half_width"] = number_to_json(summary.relative_half_width);
  json["minimum_detectable_effect"] = number_to_json(summary.minimum_detectable_effect);
  json["cv"] = number_to_json(summary.cv);
  json["mean_s"] = number_to_json(summary.mean);
  json["min_s"] = number_to_json(summary.min);
  json["max_s"] = number_to_json(summary.max);
  return json;
}

Json comparison_to_json(const Comparison& comparison, const std::string& baseline,
                        const std::string& candidate) {
  Json json = Json::object();
  json["baseline"] = baseline;
  json["candidate"] = candidate;
  json["ratio_of"] = "candidate/baseline";
  json["ratio"] = number_to_json(comparison.ratio);
  json["ci"] = interval_to_json(comparison.ci);
  json["relative_half_width"] = number_to_json(comparison.relative_half_width);
  json["minimum_detectable_effect"] = number_to_json(comparison.minimum_detectable_effect);
  json["verdict"] = std::string(ab_verdict_name(comparison.verdict));
  json["rule"] = comparison.rule;
  json["threshold"] = number_to_json(comparison.threshold);
  json["confidence"] = number_to_json(comparison.confidence);
  json["n"] = Json{{"baseline", comparison.a.n}, {"candidate", comparison.b.n}};
  // The rounds of a paired comparison (ratio, ci and p_value are then the per-round ratios');
  // null when the arms were compared as independent samples.
  json["pairs"] = comparison.pairs > 0 ? Json(comparison.pairs) : Json(nullptr);
  json["p_value"] = number_to_json(comparison.p_value);
  json["adjusted_p_value"] =
      comparison.adjusted_p_value ? number_to_json(*comparison.adjusted_p_value) : Json(nullptr);
  json["more_samples_per_arm"] =
      comparison.more_samples_per_arm ? Json(*comparison.more_samples_per_arm) : Json(nullptr);
  json["seed"] = comparison.seed;
  json["resamples"] = comparison.resamples;
  return json;
}

Json stop_to_json(const StopDecision& stop) {
  Json json = Json::object();
  json["reason"] = std::string(stop_reason_name(stop.reason));
  json["relative_half_width"] = number_to_json(stop.relative_half_width);
  json["minimum_detectable_effect"] = number_to_json(stop.minimum_detectable_effect);
  return json;
}

Json non_inferiority_to_json(const NonInferiority& gate) {
  Json json = Json::object();
  json["verdict"] = std::string(gate_verdict_name(gate.verdict));
  json["ratio_of"] = "candidate/baseline";
  json["ratio"] = number_to_json(gate.ratio);
  json["ci"] = interval_to_json(gate.ci);
  json["bound"] = number_to_json(gate.bound);
  json["n"] = Json{{"baseline", gate.n_a}, {"candidate", gate.n_b}};
  json["rule"] = gate.rule;
  return json;
}

Finding comparison_finding(const Comparison& comparison, const FindingContext& context) {
  Finding finding;
  finding.id = "bench." + context.probe + "." + std::string(ab_verdict_id(comparison.verdict));
  finding.layer = Layer::kBench;
  finding.severity = comparison.verdict == AbVerdict::kSlower ? Severity::kWarn : Severity::kInfo;

  const std::string& a = context.name_a;
  const std::string& b = context.name_b;
  const bool paired = comparison.pairs > 0;
  const std::string evidence_text =
      (paired ? "median of the per-round ratios " : "ratio of medians ") + b + "/" + a + " " +
      fixed_digits(comparison.ratio, 4) + ", " + fixed_digits(comparison.confidence * 100.0, 0) +
      "% CI [" + fixed_digits(comparison.ci.low, 4) + ", " + fixed_digits(comparison.ci.high, 4) +
      "], " +
      (paired ? std::to_string(comparison.pairs) + " rounds"
              : "n = " + std::to_string(comparison.a.n) + "/" + std::to_string(comparison.b.n)) +
      ", threshold " + fixed_digits(comparison.threshold * 100.0, 1) + "%";
  switch (comparison.verdict) {
    case AbVerdict::kSlower:
      finding.claim = b + " is " + slower_by(comparison.ratio) + " slower than " + a + " (" +
                      evidence_text + ")";
      finding.next = "profile " + b + " against " + a +
                     " to find where the extra time goes; rerun with another seed to confirm";
      break;
    case AbVerdict::kFaster:
      finding.claim = b + " is " + percent_change(comparison.ratio) + " faster than " + a + " (" +
                      evidence_text + ")";
      finding.next =
          "check that " + b + " computes the same outputs as " + a + " before keeping the speed-up";
      break;
    case AbVerdict::kSame:
      finding.claim = b + " and " + a + " take the same time within ±" +
                      fixed_digits(comparison.threshold * 100.0, 1) + "% (" + evidence_text + ")";
      finding.next =
          "to resolve smaller effects, lower --threshold and raise --budget (or --precision)";
      break;
    case AbVerdict::kAmbiguous:
      finding.claim =
          "not enough evidence to tell " + b + " from " + a + " (" + evidence_text + ")";
      finding.next = comparison.more_samples_per_arm
                         ? "rerun with a budget for about " +
                               std::to_string(*comparison.more_samples_per_arm) +
                               (comparison.pairs > 0 ? " more rounds" : " more samples per arm")
                         : "the estimate sits on the threshold; change the threshold or accept "
                           "that the difference is about that size";
      break;
  }

  finding.where.subject = context.subject;
  finding.where.probe = context.probe;
  finding.where.path = context.path;
  finding.where.params = context.params;
  auto& metrics = finding.evidence.metrics;
  metrics.emplace_back("ratio", comparison.ratio);
  metrics.emplace_back("ci_low", comparison.ci.low);
  metrics.emplace_back("ci_high", comparison.ci.high);
  metrics.emplace_back("threshold", comparison.threshold);
  metrics.emplace_back("n_a", static_cast<double>(comparison.a.n));
  metrics.emplace_back("n_b", static_cast<double>(comparison.b.n));
  metrics.emplace_back("median_a_s", comparison.a.median);
  metrics.emplace_back("median_b_s", comparison.b.median);
  metrics.emplace_back("p_value", comparison.p_value);
  if (comparison.pairs > 0) metrics.emplace_back("pairs", static_cast<double>(comparison.pairs));
  if (comparison.adjusted_p_value) {
    metrics.emplace_back("adjusted_p_value", *comparison.adjusted_p_value);
  }
  finding.evidence.files = context.files;
  finding.reproduce = context.reproduce;
  return finding;
}

}  // namespace loupe::bench
