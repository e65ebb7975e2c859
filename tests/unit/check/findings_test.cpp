#include "check/findings.hpp"

#include <algorithm>
#include <limits>

#include <gtest/gtest.h>

namespace loupe::check {
namespace {

Tensor make(std::vector<float> values) {
  Tensor tensor(DType::kF32, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), tensor.mutable_data<float>().begin());
  return tensor;
}

std::vector<std::string> ids(const std::vector<Finding>& findings) {
  std::vector<std::string> out;
  for (const auto& finding : findings) out.push_back(finding.id);
  return out;
}

double metric_of(const Finding& finding, const std::string& name) {
  for (const auto& [metric, value] : finding.evidence.metrics) {
    if (metric == name) return value;
  }
  return -1;
}

TEST(FindingsTest, MismatchCarriesCoordsMetricsAndTheContext) {
  const TensorComparison comparison =
      compare_tensors("layer_03.npy", make({1, 2, 3, 4}), make({1, 2, 3, 5}), nullptr, {});
  FindingContext context;
  context.id_prefix = "check.scan_vs_ref";
  context.where.subject = "kda";
  context.where.probe = "scan_vs_ref";
  context.reproduce = "loupe probe run scan_vs_ref --seed 7";
  const auto findings = comparison_findings(comparison, {}, context);
  ASSERT_EQ(ids(findings), (std::vector<std::string>{"check.scan_vs_ref.mismatch"}));
  const Finding& finding = findings[0];
  EXPECT_EQ(finding.severity, Severity::kFail);
  EXPECT_EQ(finding.layer, Layer::kCheck);
  EXPECT_EQ(finding.where.subject, "kda");
  EXPECT_EQ(finding.where.path, "layer_03.npy");
  EXPECT_EQ(finding.where.coords, (Coords{{"d0", 3}}));
  EXPECT_EQ(metric_of(finding, "max_abs"), 1.0);
  EXPECT_EQ(metric_of(finding, "mismatch_count"), 1.0);
  EXPECT_EQ(metric_of(finding, "oracle_ratio"), -1);  // absent without an oracle
  EXPECT_EQ(finding.reproduce, "loupe probe run scan_vs_ref --seed 7");
  EXPECT_EQ(finding.claim,
            "layer_03.npy differs: rms_ratio 0.16, max_abs 1 at d0=3, 1 of 4 outside "
            "atol+rtol*|B|");
}

// Found by examples/pytorch: a head holding all of the error was not named because D's top index
// (extent 32, a third of the error) ranks first by times its fair share.
TEST(FindingsTest, SliceSentenceNamesTheHeadWhenAWiderAxisRanksFirst) {
  Localisation localisation;
  localisation.top_slices = {{"D", 0, 32, 0.3}, {"H", 1, 4, 1.0}};
  EXPECT_EQ(slice_sentence(localisation), "H=1 holds 100% of squared error (fair share 25%)");
  localisation.top_slices = {{"D", 0, 32, 0.3}, {"H", 1, 4, 0.4}};
  EXPECT_EQ(slice_sentence(localisation), "");
}

TEST(FindingsTest, WithinToleranceIsOneMatch) {
  const TensorComparison comparison = compare_tensors("x", make({1, 2}), make({1, 2}), nullptr, {});
  const auto findings = comparison_findings(comparison, {}, {});
  ASSERT_EQ(ids(findings), (std::vector<std::string>{"check.diff.match"}));
  EXPECT_EQ(findings[0].severity, Severity::kInfo);
}

TEST(FindingsTest, FailedBoundsAreNamedInTheClaim) {
  const TensorComparison comparison = compare_tensors("x", make({1, 2}), make({1, 3}), nullptr, {});
  const std::vector<Bound> bounds = {{Metric::kMaxAbs, 0.5}};
  const auto findings = comparison_findings(comparison, bounds, {});
  ASSERT_EQ(ids(findings), (std::vector<std::string>{"check.diff.mismatch"}));
  EXPECT_NE(findings[0].claim.find("bounds failed: max_abs 1 > 0.5"), std::string::npos);
}

TEST(FindingsTest, NonfiniteDisagreementIsItsOwnFinding) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const TensorComparison comparison =
      compare_tensors("x", make({1, nan}), make({1, 2}), nullptr, {});
  const auto findings = comparison_findings(comparison, {}, {});
  EXPECT_EQ(ids(findings),
            (std::vector<std::string>{"check.diff.mismatch", "check.diff.nonfinite"}));
  EXPECT_EQ(
      findings[1].claim,
      "x: 1 positions hold NaN/Inf that the other side does not match; first at d0=1 (A nan, B "
      "2)");
}

TEST(FindingsTest, GrowingProfileIsADriftAndTheOracleIsCompared) {
  std::vector<float> a(128), b(128), oracle(128);
  for (size_t t = 0; t < 128; ++t) {
    oracle[t] = 1.0f;
    b[t] = 1.0f + 1e-6f;
    a[t] = 1.0f + 1e-4f * static_cast<float>(t + 1);
  }
  const Tensor tensor_oracle = make(oracle);
  CompareOptions options;
  options.axes = {"T"};
  options.along = "T";
  const TensorComparison comparison =
      compare_tensors("scan", make(a), make(b), &tensor_oracle, options);
  const auto findings = comparison_findings(comparison, {}, {});
  EXPECT_EQ(ids(findings), (std::vector<std::string>{"check.diff.mismatch", "check.diff.drift",
                                                     "check.diff.oracle"}));
  EXPECT_EQ(findings[1].severity, Severity::kWarn);
  EXPECT_EQ(findings[1].claim.substr(0, 31), "scan: error growing along T: ×");
  EXPECT_EQ(findings[2].severity, Severity::kWarn);
  EXPECT_GT(metric_of(findings[2], "oracle_ratio"), 100);
}

// Regression (cp_oracle_warn_within_factor): a healthy CP run opened its findings with "A's
// error is 1.2x B's own" as a warning; within the declared factor (or 2 when none is declared)
// it is information.
TEST(FindingsTest, CpOracleWarnWithinFactorRegression) {
  std::vector<float> a(64), b(64), oracle(64);
  for (size_t t = 0; t < 64; ++t) {
    oracle[t] = 1.0f + 0.01f * static_cast<float>(t);
    b[t] = oracle[t] + (t % 2 == 0 ? 1e-5f : -1e-5f);
    a[t] = oracle[t] + (t % 2 == 0 ? 1.2e-5f : -1.2e-5f);
  }
  const Tensor tensor_oracle = make(oracle);
  const TensorComparison comparison = compare_tensors("S", make(a), make(b), &tensor_oracle, {});
  auto oracle_finding = [](const std::vector<Finding>& findings) {
    for (const auto& finding : findings) {
      if (finding.id == "check.diff.oracle") return finding;
    }
    return Finding{};
  };
  const Finding undeclared = oracle_finding(comparison_findings(comparison, {}, {}));
  EXPECT_EQ(undeclared.severity, Severity::kInfo);
  FindingContext strict;
  strict.oracle_factor = 1.1;
  EXPECT_EQ(oracle_finding(comparison_findings(comparison, {}, strict)).severity, Severity::kWarn);
}

TEST(FindingsTest, MismatchNamesTheFirstWrongStepAndThePeriod) {
  // Error at every 32nd position from T=31 on: "first wrong step: T=31", period 32.
  std::vector<float> a(256, 1.0f), b(256, 1.0f);
  for (size_t t = 31; t < 256; t += 32) a[t] = 1.5f;
  CompareOptions options;
  options.axes = {"T"};
  options.along = "T";
  options.profile_threshold = 1e-3;
  const TensorComparison comparison = compare_tensors("o", make(a), make(b), nullptr, options);
  const std::vector<Bound> bounds = {{Metric::kRmsRatio, 1e-3}};
  const auto findings = comparison_findings(comparison, bounds, {});
  ASSERT_FALSE(findings.empty());
  EXPECT_NE(findings[0].claim.find("first wrong step: T=31"), std::string::npos)
      << findings[0].claim;
  EXPECT_NE(findings[0].claim.find("periodic along T: 100% of squared error at T = 31 (mod 32)"),
            std::string::npos)
      << findings[0].claim;
  EXPECT_EQ(metric_of(findings[0], "first_exceeding"), 31);
  EXPECT_EQ(metric_of(findings[0], "period"), 32);
}

TEST(FindingsTest, ErrorSharedByEveryHeadBlamesNoSingleOne) {
  // (T, H) with the same error in all four heads: no "H=k holds".
  std::vector<float> a(64 * 4, 1.0f), b(64 * 4, 1.0f);
  for (size_t t = 0; t < 64; ++t) {
    for (size_t h = 0; h < 4; ++h)
      a[t * 4 + h] = 1.0f + 0.01f * static_cast<float>(1 + (t + h) % 3);
  }
  Tensor tensor_a(DType::kF32, {64, 4}), tensor_b(DType::kF32, {64, 4});
  std::copy(a.begin(), a.end(), tensor_a.mutable_data<float>().begin());
  std::copy(b.begin(), b.end(), tensor_b.mutable_data<float>().begin());
  CompareOptions options;
  options.axes = {"T", "H"};
  options.along = "T";
  const TensorComparison comparison = compare_tensors("o", tensor_a, tensor_b, nullptr, options);
  EXPECT_EQ(slice_sentence(comparison.localisation), "spread evenly over all 4 H");
}

}  // namespace
}  // namespace loupe::check
