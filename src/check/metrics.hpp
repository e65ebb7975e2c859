// check/metrics.hpp — elementwise comparison metrics of two tensors (docs/formats.md,
// "Comparison metrics"): max_abs, max_rel, rms_ratio, cos_dist, ulp_max, ulp_p99, mismatch_count,
// mismatch_frac, nonfinite_mismatch (and oracle_ratio, computed in compare.hpp).
//
// One pass over the data computes every metric; float32 against float32 (and float64 against
// float64) has its own loop over the raw bits, every other dtype pair is decoded in blocks to
// double; both feed one accumulation routine, so they agree exactly. Accumulators are double. NaN
// never makes a bound pass vacuously: a position holding NaN/Inf (on either side) makes max_abs,
// max_rel, rms_ratio, cos_dist and ulp_max +Inf, and bounds are checked as `value <= limit`, which
// NaN fails. Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loupe/tensor.hpp"

namespace loupe::check {

// The fixed metric names; tolerances, gates and skeleton conditions refer to them.
enum class Metric {
  kMaxAbs,
  kMaxRel,
  kRmsRatio,
  kCosDist,
  kUlpMax,
  kUlpP99,
  kMismatchCount,
  kMismatchFrac,
  kNonfiniteMismatch,
  kOracleRatio,  // only with an oracle: rms_ratio(A, O) / rms_ratio(B, O)
};

std::string_view metric_name(Metric metric);
// Every metric, in the order above.
std::span<const Metric> all_metrics();
// nullopt when `name` is not a metric name.
std::optional<Metric> parse_metric(std::string_view name);
// "max_abs, max_rel, ...": for error messages.
std::string metric_names_list();

// An element mismatches when |a - b| > atol + rtol * |b|.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

// torch.testing.assert_close's defaults (rtol, atol): float32 (1.3e-6, 1e-5), float64 (1e-7, 1e-7),
// bfloat16 (1.6e-2, 1e-5), float16 (1e-3, 1e-5); integers and bool exact. FP8 has no assert_close
// default: loupe uses rtol = 2^-stored mantissa bits (e4m3fn 0.125, e5m2 0.25), atol 1e-5.
Tolerance default_tolerance(DType dtype);
// The tolerance of the coarser dtype of a pair (the float one when only one is floating).
Tolerance default_tolerance(DType a, DType b);
// The dtype ULP distances are measured in: the one with fewer significand bits (the float one
// when only one is floating; an integer dtype when both are integers, where 1 ULP = 1).
DType coarser_dtype(DType a, DType b);

struct Metrics {
  int64_t numel = 0;
  int64_t finite_count = 0;        // positions where both values are finite
  double max_abs = 0;              // max |a - b| over finite pairs
  double max_rel = 0;              // max |a - b| / |b|; 0/0 = 0, x/0 = +Inf
  double rms_diff = 0;             // rms(a - b) over finite pairs
  double rms_b = 0;                // rms(b) over finite pairs
  double rms_ratio = 0;            // rms_diff / (rms_b + 1e-8)
  double cos_dist = 0;             // 1 - 2<a,b> / (|a|^2 + |b|^2); 0 when both are zero
  double ulp_max = 0;              // in coarser_dtype; +Inf when a NaN/Inf position disagrees
  double ulp_p99 = 0;              // exact nearest-rank 99th percentile over all positions
  int64_t mismatch_count = 0;      // outside atol + rtol*|b|, plus disagreeing NaN/Inf positions
  double mismatch_frac = 0;        // mismatch_count / numel
  int64_t nonfinite_mismatch = 0;  // positions where A or B is NaN or Inf (both alike included)
  // The worst position (flat C-order index): the first disagreeing NaN/Inf position if any, else
  // the largest |a - b|; -1 for empty tensors or when every position agrees exactly.
  int64_t worst_index = -1;
  double worst_a = 0;
  double worst_b = 0;
  Tolerance tolerance;
  DType ulp_dtype = DType::kF32;
};

// Metric value by name; oracle_ratio is not part of Metrics and yields NaN here.
double metric_value(const Metrics& metrics, Metric metric);

// REQUIRES: a.numel() == b.numel() (shapes are checked by the caller, which knows the file names).
// Throws Error(kInput) when one side is bool and the other is not.
Metrics compute_metrics(const Tensor& a, const Tensor& b, std::optional<Tolerance> tolerance = {});

// The same metrics on raw spans (ulp_dtype float32 / float64).
Metrics compute_metrics(std::span<const float> a, std::span<const float> b, Tolerance tolerance);
Metrics compute_metrics(std::span<const double> a, std::span<const double> b, Tolerance tolerance);

namespace detail {
// The dtype-generic chunked path, exposed so tests can check the float32 loop against it.
Metrics compute_metrics_generic(const Tensor& a, const Tensor& b, Tolerance tolerance);
// Elements [begin, begin + count) of `tensor` widened to double (exact; NaN and Inf kept).
void decode_to_double(const Tensor& tensor, int64_t begin, int64_t count, double* out);
}  // namespace detail

}  // namespace loupe::check
