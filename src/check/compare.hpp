// check/compare.hpp — compare a candidate tensor A with a reference B (optionally both with an
// oracle O): metrics, localisation and tolerance bounds. `loupe diff` and the probe layer's checks
// call the same functions, so a check and a diff of the same tensors say the same thing.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "check/localise.hpp"
#include "check/metrics.hpp"
#include "loupe/tensor.hpp"

namespace loupe::check {

struct CompareOptions {
  // Axis names; when not one per axis, the tensor's own `axes`, else d0, d1, ...
  std::vector<std::string> axes;
  // Profile the error along this axis and find the slice holding most of it.
  std::optional<std::string> along;
  // Elementwise tolerance for mismatch_count; default_tolerance(A, B) when unset.
  std::optional<Tolerance> tolerance;
  // NaN against NaN agrees (assert_close's equal_nan), whichever tolerance applies.
  bool equal_nan = false;
  // Compute the statistics (add_statistics, a second pass over the data).
  bool statistics = false;
  // The rms_ratio bound: the profile then names the first position along `along` whose own error
  // passes it (Localisation::first_exceeding).
  std::optional<double> profile_threshold;
};

struct OracleComparison {
  Metrics a_vs_oracle;
  Metrics b_vs_oracle;
  // rms_ratio(A, O) / rms_ratio(B, O): how many times B's own error A's error is. 1 when both are
  // exactly 0, +Inf when only B's is.
  double ratio = 0;
};

struct TensorComparison {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype_a = DType::kF32;
  DType dtype_b = DType::kF32;
  std::vector<std::string> axes;  // resolved, one per axis
  Metrics metrics;
  Localisation localisation;
  std::optional<OracleComparison> oracle;
};

// REQUIRES nothing of the shapes: differing shapes (or an oracle of another shape) throw
// Error(kInput) "shapes differ: A [..] vs B [..]"; bool against a number throws Error(kInput).
// Callers that know file names catch and add them.
TensorComparison compare_tensors(std::string name, const Tensor& a, const Tensor& b,
                                 const Tensor* oracle, const CompareOptions& options);

// A metric of a comparison, oracle_ratio included (NaN without an oracle).
double comparison_value(const TensorComparison& comparison, Metric metric);

enum class ComparisonOp { kLessEqual, kLess, kGreaterEqual, kGreater };
// "<=", "<", ">=", ">".
std::string_view comparison_op_text(ComparisonOp op);
// What a failed bound shows: ">" for "<=", ">=" for "<", "<" for ">=", "<=" for ">".
std::string_view failed_op_text(ComparisonOp op);
// `value op limit`; false whenever either is NaN.
bool holds(double value, ComparisonOp op, double limit);

// METRIC op LIMIT (--tol METRIC=VALUE is METRIC <= VALUE).
struct Bound {
  Metric metric = Metric::kRmsRatio;
  double limit = 0;
  ComparisonOp op = ComparisonOp::kLessEqual;
  bool operator==(const Bound&) const = default;
};
struct BoundResult {
  Metric metric = Metric::kRmsRatio;
  double value = 0;
  double limit = 0;
  bool pass = false;  // value op limit; NaN never passes
  ComparisonOp op = ComparisonOp::kLessEqual;
};

// "rms_ratio=5e-3" → Bound. Throws Error(kUsage) naming the text, and listing the metric names
// when the name is unknown.
Bound parse_bound(std::string_view text);
std::vector<BoundResult> evaluate_bounds(const TensorComparison& comparison,
                                         std::span<const Bound> bounds);
// Past tolerance: any bound fails; without bounds, assert_close's rule (mismatch_count > 0, which
// counts disagreeing NaN/Inf positions too).
bool diverged(const TensorComparison& comparison, std::span<const Bound> bounds);

// "[4096, 4, 16]"
std::string shape_to_string(const std::vector<int64_t>& shape);
// Compact number for summaries: 3 significant digits, exponent form outside [1e-3, 1e4).
std::string format_number(double value);

}  // namespace loupe::check
