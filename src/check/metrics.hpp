// check/metrics.hpp — elementwise comparison metrics of two tensors (docs/formats.md,
// "Comparison metrics"): max_abs, max_rel, rms_ratio, cos_dist, ulp_max, ulp_p99, mismatch_count,
// mismatch_frac, nonfinite_mismatch (and oracle_ratio, computed in compare.hpp).
//
// One pass over the data computes every metric; float32 against float32 (and float64 against
// float64) has its own loop over the raw bits, every other dtype pair is decoded in blocks to
// double; both feed one accumulation routine, so they agree exactly. Accumulators are double. NaN
// never makes a bound pass vacuously: a position holding NaN/Inf (on either side) makes max_abs,
// max_rel, rms_ratio, cos_dist and ulp_max +Inf, and bounds are checked as `value <= limit`, which
// NaN fails. A position agrees the way torch.testing.assert_close says: the same infinity on both
// sides agrees, NaN against NaN only under equal_nan, anything else non-finite is a mismatch.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <limits>
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
  // The statistics (add_statistics, a second pass): docs/formats.md, "Statistics".
  kCosine,
  kMeanAbs,
  kAbsP50,
  kAbsP90,
  kAbsP99,
  kAbsP999,
  kAMean,
  kAAbsMean,
  kAStd,
  kAMin,
  kAMax,
  kBMean,
  kBAbsMean,
  kBStd,
  kBMin,
  kBMax,
  kDowncastMaxAbs,
  kDowncastRmsRatio,
  kDowncastMismatchCount,
};

std::string_view metric_name(Metric metric);
// The core metrics, kMaxAbs..kOracleRatio in the order above: findings' evidence carries them.
std::span<const Metric> all_metrics();
// The statistics, kCosine..kDowncastMismatchCount, and whether `metric` is one. cosine is
// computed by compute_metrics; the others need add_statistics.
std::span<const Metric> statistic_metrics();
bool is_statistic(Metric metric);
// nullopt when `name` is neither a metric name nor an alias: SGLang's comparator names `rel` and
// `rel_diff` (DeepGEMM's 1 - 2<x,y>/(|x|^2+|y|^2), which is cos_dist), `max_abs_diff` and
// `mean_abs_diff`.
std::optional<Metric> parse_metric(std::string_view name);
// "max_abs, max_rel, ...": every metric name, then the aliases; for error messages.
std::string metric_names_list();

// An element mismatches when |a - b| > atol + rtol * |b| (torch.isclose's rule, in double); a
// position holding NaN/Inf mismatches unless both sides hold the same infinity, or both NaN and
// equal_nan is set.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
  bool equal_nan = false;
};

// torch.testing.assert_close's defaults (rtol, atol), torch/testing/_comparison.py
// _DTYPE_PRECISIONS: float32 (1.3e-6, 1e-5), float64 (1e-7, 1e-7), bfloat16 (1.6e-2, 1e-5),
// float16 (1e-3, 1e-5); every other dtype (fp8, integers, bool) exact (0, 0).
Tolerance default_tolerance(DType dtype);
// torch's rule for a pair: the larger atol and the larger rtol of the two dtypes' defaults.
Tolerance default_tolerance(DType a, DType b);
// The dtype ULP distances are measured in: the one with fewer significand bits (the float one
// when only one is floating; an integer dtype when both are integers, where 1 ULP = 1).
DType coarser_dtype(DType a, DType b);

// Statistics are NaN until computed.
inline constexpr double kUnset = std::numeric_limits<double>::quiet_NaN();

// One side's values, over its finite elements (all NaN when it has none).
struct SideStatistics {
  double mean = kUnset;
  double abs_mean = kUnset;
  double std = kUnset;  // population standard deviation (divides by the count)
  double min = kUnset;
  double max = kUnset;
};

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
  int64_t nonfinite_mismatch = 0;  // NaN/Inf positions that disagree (see Tolerance)
  int64_t nonfinite_equal = 0;  // NaN/Inf positions that agree: the same ±Inf, NaN/NaN (equal_nan)
  // The worst position (flat C-order index): the first disagreeing NaN/Inf position if any, else
  // the largest |a - b|; -1 for empty tensors or when every position agrees exactly.
  int64_t worst_index = -1;
  double worst_a = 0;
  double worst_b = 0;
  Tolerance tolerance;
  DType ulp_dtype = DType::kF32;
  // <a,b> / (|a| |b|) over finite pairs; 1 when both are all zero, 0 when only one is; NaN when a
  // NaN/Inf position disagrees.
  double cosine = 1;

  // The statistics: NaN until add_statistics fills them (and sets has_statistics).
  bool has_statistics = false;
  double mean_abs = kUnset;  // mean |a - b| over finite pairs
  // Percentiles of |a - b| over every position (a disagreeing NaN/Inf position is +Inf, an agreeing
  // one 0), nearest rank; see add_statistics for their precision.
  double abs_p50 = kUnset;
  double abs_p90 = kUnset;
  double abs_p99 = kUnset;
  double abs_p999 = kUnset;
  SideStatistics a;
  SideStatistics b;
  // Both sides rounded to the coarser dtype first (nearest, ties to even); the plain values when
  // both sides already share a dtype.
  DType downcast_dtype = DType::kF32;
  double downcast_max_abs = kUnset;
  double downcast_rms_ratio = kUnset;
  double downcast_mismatch_count = kUnset;
};

// Metric value by name; oracle_ratio is not part of Metrics and yields NaN here.
double metric_value(const Metrics& metrics, Metric metric);

// REQUIRES: a.numel() == b.numel() (shapes are checked by the caller, which knows the file names).
// Throws Error(kInput) when one side is bool and the other is not.
Metrics compute_metrics(const Tensor& a, const Tensor& b, std::optional<Tolerance> tolerance = {});

// Fills the statistics of `metrics` (computed by compute_metrics on the same pair) in a second
// pass over both tensors. Percentiles of |a - b| come from a histogram of 32 sub-buckets per
// binade: each is the upper edge of its sub-bucket, capped at max_abs, so never below the exact
// nearest-rank value and above it by less than 1/32 of its binade's start (3.2 %); exact when it
// is 0 or max_abs. Values below 2^-126 share one bucket whose upper edge is 2^-126.
void add_statistics(const Tensor& a, const Tensor& b, Metrics& metrics);

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
