#include "check/compare.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "loupe/error.hpp"

namespace loupe::check {
namespace {

void require_same_shape(const Tensor& a, const Tensor& b, std::string_view label_a,
                        std::string_view label_b) {
  if (a.shape() != b.shape()) {
    throw Error(ErrorCode::kInput,
                "shapes differ: " + std::string(label_a) + " is " + shape_to_string(a.shape()) +
                    ", " + std::string(label_b) + " is " + shape_to_string(b.shape()) +
                    "; expected the same shape",
                "compare tensors of one shape (reshape or slice one side first)");
  }
}

}  // namespace

std::string_view comparison_op_text(ComparisonOp op) {
  switch (op) {
    case ComparisonOp::kLessEqual:
      return "<=";
    case ComparisonOp::kLess:
      return "<";
    case ComparisonOp::kGreaterEqual:
      return ">=";
    case ComparisonOp::kGreater:
      return ">";
  }
  return "?";
}

std::string_view failed_op_text(ComparisonOp op) {
  switch (op) {
    case ComparisonOp::kLessEqual:
      return ">";
    case ComparisonOp::kLess:
      return ">=";
    case ComparisonOp::kGreaterEqual:
      return "<";
    case ComparisonOp::kGreater:
      return "<=";
  }
  return "?";
}

bool holds(double value, ComparisonOp op, double limit) {
  switch (op) {
    case ComparisonOp::kLessEqual:
      return value <= limit;
    case ComparisonOp::kLess:
      return value < limit;
    case ComparisonOp::kGreaterEqual:
      return value >= limit;
    case ComparisonOp::kGreater:
      return value > limit;
  }
  return false;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    if (axis > 0) out += ", ";
    out += std::to_string(shape[axis]);
  }
  return out + "]";
}

std::string format_number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == std::floor(value) && std::fabs(value) < 1e9) {
    return std::to_string(static_cast<int64_t>(value));
  }
  char buffer[32];
  const double magnitude = std::fabs(value);
  std::snprintf(buffer, sizeof buffer, magnitude >= 1e-3 && magnitude < 1e4 ? "%.3g" : "%.2e",
                value);
  return buffer;
}

TensorComparison compare_tensors(std::string name, const Tensor& a, const Tensor& b,
                                 const Tensor* oracle, const CompareOptions& options) {
  require_same_shape(a, b, "A", "B");
  if (oracle != nullptr) require_same_shape(*oracle, b, "the oracle", "B");
  TensorComparison comparison;
  comparison.name = std::move(name);
  comparison.shape = a.shape();
  comparison.dtype_a = a.dtype();
  comparison.dtype_b = b.dtype();
  comparison.axes = resolve_axis_names(
      a.rank(), static_cast<int64_t>(options.axes.size()) == a.rank() ? options.axes : a.axes);
  auto tolerance_for = [&](const Tensor& left, const Tensor& right) {
    Tolerance tolerance =
        options.tolerance.value_or(default_tolerance(left.dtype(), right.dtype()));
    tolerance.equal_nan = tolerance.equal_nan || options.equal_nan;
    return tolerance;
  };
  comparison.metrics = compute_metrics(a, b, tolerance_for(a, b));
  if (options.statistics) add_statistics(a, b, comparison.metrics);
  comparison.localisation =
      localise(a, b, comparison.metrics, comparison.axes, options.along, options.profile_threshold);
  if (oracle != nullptr) {
    OracleComparison against;
    against.a_vs_oracle = compute_metrics(a, *oracle, tolerance_for(a, *oracle));
    against.b_vs_oracle = compute_metrics(b, *oracle, tolerance_for(b, *oracle));
    const double error_a = against.a_vs_oracle.rms_ratio;
    const double error_b = against.b_vs_oracle.rms_ratio;
    if (error_a == 0 && error_b == 0) {
      against.ratio = 1;
    } else if (error_b == 0) {
      against.ratio = std::numeric_limits<double>::infinity();
    } else {
      against.ratio = error_a / error_b;
    }
    comparison.oracle = against;
  }
  return comparison;
}

double comparison_value(const TensorComparison& comparison, Metric metric) {
  if (metric == Metric::kOracleRatio) {
    return comparison.oracle ? comparison.oracle->ratio : std::numeric_limits<double>::quiet_NaN();
  }
  return metric_value(comparison.metrics, metric);
}

Bound parse_bound(std::string_view text) {
  const size_t equals = text.find('=');
  if (equals == std::string_view::npos) {
    throw Error(ErrorCode::kUsage,
                "--tol " + std::string(text) + ": expected METRIC=VALUE (e.g. rms_ratio=5e-3)",
                "metrics: " + metric_names_list());
  }
  const std::string_view name = text.substr(0, equals);
  const auto metric = parse_metric(name);
  if (!metric) {
    throw Error(ErrorCode::kUsage,
                "--tol " + std::string(text) + ": unknown metric '" + std::string(name) +
                    "'; valid metrics: " + metric_names_list(),
                "see docs/formats.md, \"Comparison metrics\"");
  }
  const std::string value_text(text.substr(equals + 1));
  char* end = nullptr;
  const double limit = std::strtod(value_text.c_str(), &end);
  if (value_text.empty() || end != value_text.c_str() + value_text.size() || std::isnan(limit)) {
    throw Error(ErrorCode::kUsage,
                "--tol " + std::string(text) + ": '" + value_text + "' is not a number",
                "write the bound as METRIC=VALUE, e.g. rms_ratio=5e-3");
  }
  return {*metric, limit};
}

std::vector<BoundResult> evaluate_bounds(const TensorComparison& comparison,
                                         std::span<const Bound> bounds) {
  std::vector<BoundResult> results;
  for (const Bound& bound : bounds) {
    const double value = comparison_value(comparison, bound.metric);
    results.push_back(
        {bound.metric, value, bound.limit, holds(value, bound.op, bound.limit), bound.op});
  }
  return results;
}

bool diverged(const TensorComparison& comparison, std::span<const Bound> bounds) {
  if (bounds.empty()) return comparison.metrics.mismatch_count > 0;
  for (const BoundResult& result : evaluate_bounds(comparison, bounds)) {
    if (!result.pass) return true;
  }
  return false;
}

}  // namespace loupe::check
