#include "check/metrics.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/float_formats.hpp"
#include "loupe/error.hpp"

namespace loupe::check {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

constexpr std::array<Metric, 10> kAllMetrics = {
    Metric::kMaxAbs,        Metric::kMaxRel,       Metric::kRmsRatio,
    Metric::kCosDist,       Metric::kUlpMax,       Metric::kUlpP99,
    Metric::kMismatchCount, Metric::kMismatchFrac, Metric::kNonfiniteMismatch,
    Metric::kOracleRatio};

// ULP distances: exact counts below 256, then one bucket per binade [2^k, 2^(k+1)) for k = 8..63,
// then one bucket for disagreeing NaN/Inf positions (infinite distance). The 99th percentile is
// read from the exact part when it lands there, else refined exactly by a second pass that
// collects the distances of its binade and selects (nth_element).
constexpr int kExactUlpBuckets = 256;
constexpr int kBinadeUlpBuckets = 56;
constexpr int kInfiniteUlpBucket = kExactUlpBuckets + kBinadeUlpBuckets;
constexpr int kUlpBuckets = kInfiniteUlpBucket + 1;

inline int ulp_bucket(uint64_t distance) {
  return distance < kExactUlpBuckets ? static_cast<int>(distance)
                                     : kExactUlpBuckets + (std::bit_width(distance) - 9);
}

// Distance between two sign-magnitude float encodings in units of the last place.
inline uint64_t ulp_distance(uint64_t bits_a, uint64_t bits_b, uint64_t sign_mask) {
  const uint64_t magnitude_a = bits_a & (sign_mask - 1);
  const uint64_t magnitude_b = bits_b & (sign_mask - 1);
  if ((bits_a & sign_mask) == (bits_b & sign_mask)) {
    return magnitude_a > magnitude_b ? magnitude_a - magnitude_b : magnitude_b - magnitude_a;
  }
  return magnitude_a + magnitude_b;  // across zero; +0 and -0 are both at zero
}

struct Accumulator {
  double sum_sq_diff = 0;
  double sum_sq_a = 0;
  double sum_sq_b = 0;
  double sum_ab = 0;
  double max_abs = 0;
  int64_t max_abs_index = -1;
  double max_abs_a = 0;
  double max_abs_b = 0;
  double max_rel = 0;
  int64_t mismatch = 0;
  int64_t nonfinite = 0;
  int64_t first_nonfinite = -1;
  double nonfinite_a = 0;
  double nonfinite_b = 0;
  int64_t finite = 0;
  uint64_t ulp_max = 0;
  std::array<int64_t, kUlpBuckets> ulp_histogram{};
  // Refinement pass: collect distances in [collect_low, collect_high].
  uint64_t collect_low = 0;
  uint64_t collect_high = 0;
  std::vector<uint64_t> collected;
};

template <bool kCollect>
inline void add_finite(Accumulator& acc, double a, double b, uint64_t ulp, int64_t index,
                       const Tolerance& tolerance) {
  if constexpr (kCollect) {
    if (ulp >= acc.collect_low && ulp <= acc.collect_high) acc.collected.push_back(ulp);
    return;
  }
  const double diff = a - b;
  const double abs_diff = std::fabs(diff);
  const double abs_b = std::fabs(b);
  acc.sum_sq_diff += diff * diff;
  acc.sum_sq_a += a * a;
  acc.sum_sq_b += b * b;
  acc.sum_ab += a * b;
  acc.mismatch += abs_diff > tolerance.atol + tolerance.rtol * abs_b;
  if (abs_diff > acc.max_abs) {
    acc.max_abs = abs_diff;
    acc.max_abs_index = index;
    acc.max_abs_a = a;
    acc.max_abs_b = b;
  }
  // Multiplying instead of dividing keeps the division off the common path; once max_rel is
  // infinite, inf * |b| is never exceeded (and inf * 0 is NaN, which compares false).
  if (abs_diff > acc.max_rel * abs_b) acc.max_rel = abs_b == 0 ? kInf : abs_diff / abs_b;
  acc.ulp_max = std::max(acc.ulp_max, ulp);
  ++acc.ulp_histogram[ulp_bucket(ulp)];
}

template <bool kCollect>
inline void add_nonfinite(Accumulator& acc, double a, double b, int64_t index) {
  const bool agree = (std::isnan(a) && std::isnan(b)) || a == b;
  if constexpr (kCollect) return;
  if (agree) {
    ++acc.ulp_histogram[0];
    return;
  }
  ++acc.nonfinite;
  ++acc.mismatch;
  ++acc.ulp_histogram[kInfiniteUlpBucket];
  if (acc.first_nonfinite < 0) {
    acc.first_nonfinite = index;
    acc.nonfinite_a = a;
    acc.nonfinite_b = b;
  }
}

template <class Float>
struct FloatBits;
template <>
struct FloatBits<float> {
  using Bits = uint32_t;
  static constexpr Bits kExponentMask = 0x7f800000u;
  static constexpr uint64_t kSignMask = 0x80000000u;
};
template <>
struct FloatBits<double> {
  using Bits = uint64_t;
  static constexpr Bits kExponentMask = 0x7ff0000000000000ull;
  static constexpr uint64_t kSignMask = 0x8000000000000000ull;
};

// The same-dtype float32/float64 loop: no decoding, ULPs straight from the bits.
template <class Float, bool kCollect>
void accumulate_native(const Float* a, const Float* b, int64_t count, const Tolerance& tolerance,
                       Accumulator& acc) {
  using Traits = FloatBits<Float>;
  using Bits = typename Traits::Bits;
  for (int64_t index = 0; index < count; ++index) {
    const Bits bits_a = std::bit_cast<Bits>(a[index]);
    const Bits bits_b = std::bit_cast<Bits>(b[index]);
    if ((bits_a & Traits::kExponentMask) == Traits::kExponentMask ||
        (bits_b & Traits::kExponentMask) == Traits::kExponentMask) {
      add_nonfinite<kCollect>(acc, a[index], b[index], index);
      continue;
    }
    ++acc.finite;
    add_finite<kCollect>(acc, a[index], b[index], ulp_distance(bits_a, bits_b, Traits::kSignMask),
                         index, tolerance);
  }
}

// ---- the generic path: decode chunks to double, encode to the coarser dtype for ULPs ----

const std::vector<double>& lut16(const MiniFloatFormat& format) {
  static const std::vector<double> half = [] {
    std::vector<double> table(65536);
    for (uint32_t bits = 0; bits < 65536; ++bits)
      table[bits] = decode_mini_float(bits, kHalfFormat);
    return table;
  }();
  static const std::vector<double> bfloat = [] {
    std::vector<double> table(65536);
    for (uint32_t bits = 0; bits < 65536; ++bits) {
      table[bits] = decode_mini_float(bits, kBFloat16Format);
    }
    return table;
  }();
  return format.mantissa_bits == kHalfFormat.mantissa_bits ? half : bfloat;
}

template <class T>
void decode_as(const std::byte* bytes, int64_t begin, int64_t count, double* out) {
  for (int64_t index = 0; index < count; ++index) {
    T value;
    std::memcpy(&value, bytes + (begin + index) * sizeof(T), sizeof(T));
    out[index] = static_cast<double>(value);
  }
}

void decode_chunk(const Tensor& tensor, int64_t begin, int64_t count, double* out) {
  const std::byte* bytes = tensor.bytes();
  switch (tensor.dtype()) {
    case DType::kBool:
    case DType::kU8:
      return decode_as<uint8_t>(bytes, begin, count, out);
    case DType::kI8:
      return decode_as<int8_t>(bytes, begin, count, out);
    case DType::kI16:
      return decode_as<int16_t>(bytes, begin, count, out);
    case DType::kI32:
      return decode_as<int32_t>(bytes, begin, count, out);
    case DType::kI64:
      return decode_as<int64_t>(bytes, begin, count, out);
    case DType::kU16:
      return decode_as<uint16_t>(bytes, begin, count, out);
    case DType::kU32:
      return decode_as<uint32_t>(bytes, begin, count, out);
    case DType::kU64:
      return decode_as<uint64_t>(bytes, begin, count, out);
    case DType::kF32:
      return decode_as<float>(bytes, begin, count, out);
    case DType::kF64:
      return decode_as<double>(bytes, begin, count, out);
    case DType::kF16:
    case DType::kBF16: {
      const auto& table = lut16(tensor.dtype() == DType::kF16 ? kHalfFormat : kBFloat16Format);
      for (int64_t index = 0; index < count; ++index) {
        uint16_t bits;
        std::memcpy(&bits, bytes + (begin + index) * 2, 2);
        out[index] = table[bits];
      }
      return;
    }
    case DType::kF8E4M3:
    case DType::kF8E5M2: {
      const MiniFloatFormat& format =
          tensor.dtype() == DType::kF8E4M3 ? kE4M3FNFormat : kE5M2Format;
      for (int64_t index = 0; index < count; ++index) {
        out[index] = decode_mini_float(static_cast<uint8_t>(bytes[begin + index]), format);
      }
      return;
    }
  }
}

const MiniFloatFormat* mini_format(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return &kHalfFormat;
    case DType::kBF16:
      return &kBFloat16Format;
    case DType::kF8E4M3:
      return &kE4M3FNFormat;
    case DType::kF8E5M2:
      return &kE5M2Format;
    default:
      return nullptr;
  }
}

// Bits of each value in the float dtype `coarse`: raw when the tensor already is `coarse`, else
// the value rounded to nearest even in `coarse`.
void coarse_bits_chunk(const Tensor& tensor, DType coarse, int64_t begin, int64_t count,
                       const double* values, uint64_t* out) {
  if (tensor.dtype() == coarse) {
    const size_t width = dtype_size(coarse);
    const std::byte* bytes = tensor.bytes() + static_cast<size_t>(begin) * width;
    for (int64_t index = 0; index < count; ++index) {
      uint64_t bits = 0;
      std::memcpy(&bits, bytes + static_cast<size_t>(index) * width, width);  // little-endian
      out[index] = bits;
    }
    return;
  }
  if (coarse == DType::kF64) {
    for (int64_t index = 0; index < count; ++index)
      out[index] = std::bit_cast<uint64_t>(values[index]);
  } else if (coarse == DType::kF32) {
    for (int64_t index = 0; index < count; ++index) {
      out[index] = std::bit_cast<uint32_t>(static_cast<float>(values[index]));
    }
  } else {
    const MiniFloatFormat& format = *mini_format(coarse);
    for (int64_t index = 0; index < count; ++index) {
      out[index] = encode_mini_float(values[index], format);
    }
  }
}

template <bool kCollect>
void accumulate_generic(const Tensor& a, const Tensor& b, const Tolerance& tolerance, DType coarse,
                        Accumulator& acc) {
  constexpr int64_t kChunk = 4096;
  std::vector<double> values_a(kChunk), values_b(kChunk);
  std::vector<uint64_t> bits_a(kChunk), bits_b(kChunk);
  const bool float_ulps = dtype_is_floating(coarse);
  const uint64_t sign_mask = float_ulps ? uint64_t{1} << (8 * dtype_size(coarse) - 1) : 0;
  const int64_t numel = a.numel();
  for (int64_t begin = 0; begin < numel; begin += kChunk) {
    const int64_t count = std::min(kChunk, numel - begin);
    decode_chunk(a, begin, count, values_a.data());
    decode_chunk(b, begin, count, values_b.data());
    if (float_ulps) {
      coarse_bits_chunk(a, coarse, begin, count, values_a.data(), bits_a.data());
      coarse_bits_chunk(b, coarse, begin, count, values_b.data(), bits_b.data());
    }
    for (int64_t offset = 0; offset < count; ++offset) {
      const double value_a = values_a[offset];
      const double value_b = values_b[offset];
      const int64_t index = begin + offset;
      if (!std::isfinite(value_a) || !std::isfinite(value_b)) {
        add_nonfinite<kCollect>(acc, value_a, value_b, index);
        continue;
      }
      uint64_t ulp;
      if (float_ulps) {
        ulp = ulp_distance(bits_a[offset], bits_b[offset], sign_mask);
      } else {
        // Integers: one unit is one ULP (exact below 2^53, where doubles hold every integer).
        const double distance = std::fabs(value_a - value_b);
        ulp = distance >= 1.8e19 ? std::numeric_limits<uint64_t>::max()
                                 : static_cast<uint64_t>(distance);
      }
      ++acc.finite;
      add_finite<kCollect>(acc, value_a, value_b, ulp, index, tolerance);
    }
  }
}

// Runs `pass(accumulator)` once for the metrics and, when the 99th percentile lands in a binade
// bucket, once more collecting that binade's distances.
template <class Pass, class CollectPass>
Metrics finish(int64_t numel, const Tolerance& tolerance, DType ulp_dtype, Pass pass,
               CollectPass collect_pass) {
  Accumulator acc;
  pass(acc);
  Metrics metrics;
  metrics.numel = numel;
  metrics.finite_count = acc.finite;
  metrics.tolerance = tolerance;
  metrics.ulp_dtype = ulp_dtype;
  metrics.max_abs = acc.max_abs;
  metrics.max_rel = acc.max_rel;
  if (acc.finite > 0) {
    metrics.rms_diff = std::sqrt(acc.sum_sq_diff / static_cast<double>(acc.finite));
    metrics.rms_b = std::sqrt(acc.sum_sq_b / static_cast<double>(acc.finite));
  }
  metrics.rms_ratio = metrics.rms_diff / (metrics.rms_b + 1e-8);
  const double norms = acc.sum_sq_a + acc.sum_sq_b;
  metrics.cos_dist = norms == 0 ? 0.0 : 1.0 - 2.0 * acc.sum_ab / norms;
  metrics.ulp_max = static_cast<double>(acc.ulp_max);
  metrics.mismatch_count = acc.mismatch;
  metrics.mismatch_frac = numel > 0 ? static_cast<double>(acc.mismatch) / numel : 0.0;
  metrics.nonfinite_mismatch = acc.nonfinite;
  if (acc.first_nonfinite >= 0) {
    metrics.worst_index = acc.first_nonfinite;
    metrics.worst_a = acc.nonfinite_a;
    metrics.worst_b = acc.nonfinite_b;
    metrics.max_abs = metrics.max_rel = metrics.rms_ratio = metrics.cos_dist = kInf;
    metrics.ulp_max = kInf;
  } else {
    metrics.worst_index = acc.max_abs_index;
    metrics.worst_a = acc.max_abs_a;
    metrics.worst_b = acc.max_abs_b;
  }

  if (numel > 0) {
    const int64_t rank = (99 * numel + 99) / 100;  // nearest rank: ceil(0.99 n), 1-based
    int64_t before = 0;
    int bucket = 0;
    while (before + acc.ulp_histogram[bucket] < rank) before += acc.ulp_histogram[bucket++];
    if (bucket < kExactUlpBuckets) {
      metrics.ulp_p99 = bucket;
    } else if (bucket == kInfiniteUlpBucket) {
      metrics.ulp_p99 = kInf;
    } else {
      const int binade = bucket - kExactUlpBuckets + 8;
      Accumulator collector;
      collector.collect_low = uint64_t{1} << binade;
      collector.collect_high =
          binade == 63 ? std::numeric_limits<uint64_t>::max() : (uint64_t{1} << (binade + 1)) - 1;
      collect_pass(collector);
      auto nth = collector.collected.begin() + (rank - before - 1);
      std::nth_element(collector.collected.begin(), nth, collector.collected.end());
      metrics.ulp_p99 = static_cast<double>(*nth);
    }
  }
  return metrics;
}

template <class Float>
Metrics native_metrics(std::span<const Float> a, std::span<const Float> b, Tolerance tolerance,
                       DType dtype) {
  if (a.size() != b.size()) {
    throw Error(ErrorCode::kInternal, "compute_metrics: " + std::to_string(a.size()) +
                                          " elements against " + std::to_string(b.size()));
  }
  const int64_t count = static_cast<int64_t>(a.size());
  return finish(
      count, tolerance, dtype,
      [&](Accumulator& acc) {
        accumulate_native<Float, false>(a.data(), b.data(), count, tolerance, acc);
      },
      [&](Accumulator& acc) {
        accumulate_native<Float, true>(a.data(), b.data(), count, tolerance, acc);
      });
}

}  // namespace

std::string_view metric_name(Metric metric) {
  switch (metric) {
    case Metric::kMaxAbs:
      return "max_abs";
    case Metric::kMaxRel:
      return "max_rel";
    case Metric::kRmsRatio:
      return "rms_ratio";
    case Metric::kCosDist:
      return "cos_dist";
    case Metric::kUlpMax:
      return "ulp_max";
    case Metric::kUlpP99:
      return "ulp_p99";
    case Metric::kMismatchCount:
      return "mismatch_count";
    case Metric::kMismatchFrac:
      return "mismatch_frac";
    case Metric::kNonfiniteMismatch:
      return "nonfinite_mismatch";
    case Metric::kOracleRatio:
      return "oracle_ratio";
  }
  return "unknown";
}

std::span<const Metric> all_metrics() { return kAllMetrics; }

std::optional<Metric> parse_metric(std::string_view name) {
  for (Metric metric : kAllMetrics) {
    if (metric_name(metric) == name) return metric;
  }
  return std::nullopt;
}

std::string metric_names_list() {
  std::string out;
  for (Metric metric : kAllMetrics) {
    if (!out.empty()) out += ", ";
    out += metric_name(metric);
  }
  return out;
}

Tolerance default_tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return {1e-5, 1.3e-6};
    case DType::kF64:
      return {1e-7, 1e-7};
    case DType::kBF16:
      return {1e-5, 1.6e-2};
    case DType::kF16:
      return {1e-5, 1e-3};
    case DType::kF8E4M3:
      return {1e-5, 0.125};
    case DType::kF8E5M2:
      return {1e-5, 0.25};
    default:
      return {0, 0};
  }
}

DType coarser_dtype(DType a, DType b) {
  const bool float_a = dtype_is_floating(a);
  const bool float_b = dtype_is_floating(b);
  if (float_a != float_b) return float_a ? a : b;
  if (!float_a) return dtype_size(a) >= dtype_size(b) ? a : b;
  const int bits_a = dtype_mantissa_bits(a);
  const int bits_b = dtype_mantissa_bits(b);
  if (bits_a != bits_b) return bits_a < bits_b ? a : b;
  return dtype_size(a) <= dtype_size(b) ? a : b;
}

Tolerance default_tolerance(DType a, DType b) { return default_tolerance(coarser_dtype(a, b)); }

double metric_value(const Metrics& metrics, Metric metric) {
  switch (metric) {
    case Metric::kMaxAbs:
      return metrics.max_abs;
    case Metric::kMaxRel:
      return metrics.max_rel;
    case Metric::kRmsRatio:
      return metrics.rms_ratio;
    case Metric::kCosDist:
      return metrics.cos_dist;
    case Metric::kUlpMax:
      return metrics.ulp_max;
    case Metric::kUlpP99:
      return metrics.ulp_p99;
    case Metric::kMismatchCount:
      return static_cast<double>(metrics.mismatch_count);
    case Metric::kMismatchFrac:
      return metrics.mismatch_frac;
    case Metric::kNonfiniteMismatch:
      return static_cast<double>(metrics.nonfinite_mismatch);
    case Metric::kOracleRatio:
      return std::numeric_limits<double>::quiet_NaN();
  }
  return std::numeric_limits<double>::quiet_NaN();
}

Metrics compute_metrics(std::span<const float> a, std::span<const float> b, Tolerance tolerance) {
  return native_metrics<float>(a, b, tolerance, DType::kF32);
}

Metrics compute_metrics(std::span<const double> a, std::span<const double> b, Tolerance tolerance) {
  return native_metrics<double>(a, b, tolerance, DType::kF64);
}

namespace detail {

Metrics compute_metrics_generic(const Tensor& a, const Tensor& b, Tolerance tolerance) {
  const DType coarse = coarser_dtype(a.dtype(), b.dtype());
  return finish(
      a.numel(), tolerance, coarse,
      [&](Accumulator& acc) { accumulate_generic<false>(a, b, tolerance, coarse, acc); },
      [&](Accumulator& acc) { accumulate_generic<true>(a, b, tolerance, coarse, acc); });
}

void decode_to_double(const Tensor& tensor, int64_t begin, int64_t count, double* out) {
  decode_chunk(tensor, begin, count, out);
}

}  // namespace detail

Metrics compute_metrics(const Tensor& a, const Tensor& b, std::optional<Tolerance> tolerance) {
  if ((a.dtype() == DType::kBool) != (b.dtype() == DType::kBool)) {
    throw Error(ErrorCode::kInput,
                "cannot compare " + std::string(dtype_name(a.dtype())) + " with " +
                    std::string(dtype_name(b.dtype())) + ": bool compares only with bool",
                "convert both sides to one kind (bool masks, or numbers) before comparing");
  }
  if (a.numel() != b.numel()) {
    throw Error(ErrorCode::kInternal, "compute_metrics: " + std::to_string(a.numel()) +
                                          " elements against " + std::to_string(b.numel()));
  }
  const Tolerance used = tolerance.value_or(default_tolerance(a.dtype(), b.dtype()));
  if (a.dtype() == DType::kF32 && b.dtype() == DType::kF32) {
    return compute_metrics(a.data<float>(), b.data<float>(), used);
  }
  if (a.dtype() == DType::kF64 && b.dtype() == DType::kF64) {
    return compute_metrics(a.data<double>(), b.data<double>(), used);
  }
  return detail::compute_metrics_generic(a, b, used);
}

}  // namespace loupe::check
