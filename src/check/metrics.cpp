#include "check/metrics.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>

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

constexpr std::array<Metric, 19> kStatisticMetrics = {Metric::kCosine,
                                                      Metric::kMeanAbs,
                                                      Metric::kAbsP50,
                                                      Metric::kAbsP90,
                                                      Metric::kAbsP99,
                                                      Metric::kAbsP999,
                                                      Metric::kAMean,
                                                      Metric::kAAbsMean,
                                                      Metric::kAStd,
                                                      Metric::kAMin,
                                                      Metric::kAMax,
                                                      Metric::kBMean,
                                                      Metric::kBAbsMean,
                                                      Metric::kBStd,
                                                      Metric::kBMin,
                                                      Metric::kBMax,
                                                      Metric::kDowncastMaxAbs,
                                                      Metric::kDowncastRmsRatio,
                                                      Metric::kDowncastMismatchCount};

// Other tools' names for loupe's metrics (SGLang's comparator, DeepGEMM's calc_diff).
constexpr std::array<std::pair<std::string_view, Metric>, 4> kAliases = {{
    {"rel", Metric::kCosDist},
    {"rel_diff", Metric::kCosDist},
    {"max_abs_diff", Metric::kMaxAbs},
    {"mean_abs_diff", Metric::kMeanAbs},
}};

// ULP distances go to a histogram: exact counts below 256, then 32 sub-buckets per binade
// [2^k, 2^(k+1)) for k = 8..63, then one bucket for NaN/Inf positions (infinite
// distance). The 99th percentile is exact when it lands below 256; above, it is the upper edge of
// its sub-bucket: never below the exact value, and above it by less than 1/32 of the binade's
// start (3.2 %). One pass over the data, no second pass to refine (bench/diff).
constexpr int kExactUlpBuckets = 256;
constexpr int kSubBucketBits = 5;
constexpr int kBinadeUlpBuckets = 56 << kSubBucketBits;
constexpr int kInfiniteUlpBucket = kExactUlpBuckets + kBinadeUlpBuckets;
constexpr int kUlpBuckets = kInfiniteUlpBucket + 1;
// Increments alternate over two copies, so a run of equal distances is not one store-load chain.
constexpr int kHistogramCopies = 2;
constexpr int64_t kBlock = 1024;  // elements decoded at a time on the generic path

inline size_t ulp_bucket(uint64_t distance) {
  // Both candidates are computed and one selected, so the compiler can avoid a branch.
  const int width = std::bit_width(distance);
  const int shift = width > 8 ? width - 1 - kSubBucketBits : 0;
  const size_t binade_bucket = kExactUlpBuckets +
                               (static_cast<size_t>(width - 9) << kSubBucketBits) +
                               ((distance >> shift) & ((1 << kSubBucketBits) - 1));
  return width <= 8 ? static_cast<size_t>(distance) : binade_bucket;
}

// The smallest and the largest distance of a binade sub-bucket.
inline std::pair<uint64_t, uint64_t> ulp_bucket_range(size_t bucket) {
  const int binade = static_cast<int>((bucket - kExactUlpBuckets) >> kSubBucketBits) + 8;
  const uint64_t sub_bucket = (bucket - kExactUlpBuckets) & ((1 << kSubBucketBits) - 1);
  const int step_bits = binade - kSubBucketBits;
  const uint64_t low = (uint64_t{1} << binade) + (sub_bucket << step_bits);
  return {low, low + ((uint64_t{1} << step_bits) - 1)};
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

// The same distance for encodings of at most 32 bits, through signed ordinals (branch-free).
inline uint64_t ulp_distance_narrow(uint32_t bits_a, uint32_t bits_b) {
  const int64_t magnitude_a = bits_a & 0x7fffffffu;
  const int64_t magnitude_b = bits_b & 0x7fffffffu;
  const int64_t ordinal_a = (bits_a >> 31) ? -magnitude_a : magnitude_a;
  const int64_t ordinal_b = (bits_b >> 31) ? -magnitude_b : magnitude_b;
  const int64_t distance = ordinal_a - ordinal_b;
  return static_cast<uint64_t>(distance < 0 ? -distance : distance);
}

// The running state of the metrics pass: scalars only, so that once a loop copies it into a local
// the compiler keeps it in registers.
struct Running {
  double sum_sq_diff = 0;
  double sum_sq_a = 0;
  double sum_sq_b = 0;
  double sum_ab = 0;
  double max_abs = 0;
  double max_abs_a = 0;
  double max_abs_b = 0;
  double max_rel = 0;
  int64_t max_abs_index = -1;
  int64_t mismatch = 0;
  int64_t finite = 0;
  uint64_t ulp_max = 0;
};

struct Accumulator {
  Running running;
  std::vector<int64_t> ulp_histograms = std::vector<int64_t>(kUlpBuckets * kHistogramCopies, 0);
  int64_t nonfinite = 0;
  int64_t nonfinite_equal = 0;
  int64_t first_nonfinite = -1;
  double nonfinite_a = 0;
  double nonfinite_b = 0;
};

inline bool is_finite(double value) {
  return std::fabs(value) <= std::numeric_limits<double>::max();
}

// Every path (float32, float64, generic) feeds elements in index order to this one function, so
// all paths give bit-identical metrics for the same values.
// `histogram` is the copy for this index: index & (kHistogramCopies - 1).
inline void accumulate_finite(Running& run, int64_t* histogram, double a, double b, uint64_t ulp,
                              int64_t index, const Tolerance& tolerance) {
  const double diff = a - b;
  const double abs_diff = std::fabs(diff);
  const double abs_b = std::fabs(b);
  run.sum_sq_diff += diff * diff;
  run.sum_sq_a += a * a;
  run.sum_sq_b += b * b;
  run.sum_ab += a * b;
  run.mismatch += abs_diff > tolerance.atol + tolerance.rtol * abs_b;
  // Multiplying keeps the division off the common path. Once max_rel is +Inf nothing exceeds it
  // (and Inf * 0 is NaN, which compares false); 0/0 never enters.
  const bool new_max_abs = abs_diff > run.max_abs;
  const bool new_max_rel = abs_diff > run.max_rel * abs_b;
  if (new_max_abs | new_max_rel) [[unlikely]] {
    if (new_max_abs) {
      run.max_abs = abs_diff;
      run.max_abs_index = index;
      run.max_abs_a = a;
      run.max_abs_b = b;
    }
    if (new_max_rel) run.max_rel = abs_b == 0 ? kInf : std::max(run.max_rel, abs_diff / abs_b);
  }
  run.ulp_max = std::max(run.ulp_max, ulp);
  ++histogram[ulp_bucket(ulp)];
  ++run.finite;
}

// A position where A or B is NaN or Inf: torch.testing.assert_close's rule decides. The same
// infinity on both sides agrees (distance 0); NaN against NaN agrees only under equal_nan (by
// default a NaN on both sides is two broken computations, and a candidate compared with a
// reference that broke the same way must not pass); anything else is a mismatch at an infinite
// distance.
void accumulate_nonfinite(Accumulator& acc, double a, double b, int64_t index, bool equal_nan) {
  if (a == b || (equal_nan && std::isnan(a) && std::isnan(b))) {
    ++acc.nonfinite_equal;
    ++acc.ulp_histograms[0];
    return;
  }
  ++acc.nonfinite;  // also a mismatch; finish() adds it to mismatch_count
  ++acc.ulp_histograms[kInfiniteUlpBucket];
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

// The same-dtype float32/float64 loop: no decoding, NaN/Inf tested on the bits, ULPs from them.
template <class Float>
void accumulate_native(const Float* a, const Float* b, int64_t numel, const Tolerance& tolerance,
                       Accumulator& acc) {
  using Traits = FloatBits<Float>;
  using Bits = typename Traits::Bits;
  static_assert(kHistogramCopies == 2, "the loop below alternates over two histogram copies");
  Running run = acc.running;
  int64_t* even_histogram = acc.ulp_histograms.data();
  int64_t* odd_histogram = even_histogram + kUlpBuckets;
  const Tolerance local_tolerance = tolerance;  // a copy the compiler can keep in registers
  auto step = [&](int64_t index, int64_t* histogram) {
    const Bits bits_a = std::bit_cast<Bits>(a[index]);
    const Bits bits_b = std::bit_cast<Bits>(b[index]);
    if (((bits_a & Traits::kExponentMask) == Traits::kExponentMask) |
        ((bits_b & Traits::kExponentMask) == Traits::kExponentMask)) [[unlikely]] {
      accumulate_nonfinite(acc, a[index], b[index], index, local_tolerance.equal_nan);
      return;
    }
    uint64_t ulp;
    if constexpr (sizeof(Bits) == 4) {
      ulp = ulp_distance_narrow(bits_a, bits_b);
    } else {
      ulp = ulp_distance(bits_a, bits_b, Traits::kSignMask);
    }
    accumulate_finite(run, histogram, a[index], b[index], ulp, index, local_tolerance);
  };
  int64_t index = 0;
  for (; index + 1 < numel; index += 2) {
    step(index, even_histogram);
    step(index + 1, odd_histogram);
  }
  if (index < numel) step(index, even_histogram);
  acc.running = run;
}

template <class Float>
void run_native(const Float* a, const Float* b, int64_t numel, const Tolerance& tolerance,
                Accumulator& acc) {
  accumulate_native<Float>(a, b, numel, tolerance, acc);
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
  if (tensor.dtype() == DType::kF32 && coarse == DType::kBF16) {
    // bfloat16 is float32's upper half: round the low 16 bits to nearest even on the bits, which
    // is exact for finite values (NaN/Inf positions never use their ULPs).
    const std::byte* bytes = tensor.bytes() + static_cast<size_t>(begin) * 4;
    for (int64_t index = 0; index < count; ++index) {
      uint32_t bits;
      std::memcpy(&bits, bytes + static_cast<size_t>(index) * 4, 4);
      out[index] = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
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

void accumulate_generic(const Tensor& a, const Tensor& b, const Tolerance& tolerance, DType coarse,
                        Accumulator& acc) {
  std::vector<double> values_a(kBlock), values_b(kBlock);
  std::vector<uint64_t> bits_a(kBlock), bits_b(kBlock);
  const bool float_ulps = dtype_is_floating(coarse);
  const uint64_t sign_mask = float_ulps ? uint64_t{1} << (8 * dtype_size(coarse) - 1) : 0;
  const int64_t numel = a.numel();
  Running run = acc.running;
  int64_t* histograms = acc.ulp_histograms.data();
  for (int64_t begin = 0; begin < numel; begin += kBlock) {
    const int64_t count = std::min(kBlock, numel - begin);
    decode_chunk(a, begin, count, values_a.data());
    decode_chunk(b, begin, count, values_b.data());
    if (float_ulps) {
      coarse_bits_chunk(a, coarse, begin, count, values_a.data(), bits_a.data());
      coarse_bits_chunk(b, coarse, begin, count, values_b.data(), bits_b.data());
    }
    for (int64_t offset = 0; offset < count; ++offset) {
      const double value_a = values_a[offset];
      const double value_b = values_b[offset];
      if (!is_finite(value_a) || !is_finite(value_b)) {
        accumulate_nonfinite(acc, value_a, value_b, begin + offset, tolerance.equal_nan);
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
      accumulate_finite(run, histograms + ((begin + offset) & (kHistogramCopies - 1)) * kUlpBuckets,
                        value_a, value_b, ulp, begin + offset, tolerance);
    }
  }
  acc.running = run;
}

// `run_pass(accumulator)` makes the one pass over the data.
template <class RunPass>
Metrics finish(int64_t numel, const Tolerance& tolerance, DType ulp_dtype, RunPass run_pass) {
  Accumulator acc;
  run_pass(acc);
  const Running& run = acc.running;
  Metrics metrics;
  metrics.numel = numel;
  metrics.finite_count = run.finite;
  metrics.tolerance = tolerance;
  metrics.ulp_dtype = ulp_dtype;
  metrics.max_abs = run.max_abs;
  metrics.max_rel = run.max_rel;
  if (run.finite > 0) {
    metrics.rms_diff = std::sqrt(run.sum_sq_diff / static_cast<double>(run.finite));
    metrics.rms_b = std::sqrt(run.sum_sq_b / static_cast<double>(run.finite));
  }
  metrics.rms_ratio = metrics.rms_diff / (metrics.rms_b + 1e-8);
  const double norms = run.sum_sq_a + run.sum_sq_b;
  metrics.cos_dist = norms == 0 ? 0.0 : 1.0 - 2.0 * run.sum_ab / norms;
  if (run.sum_sq_a == 0 || run.sum_sq_b == 0) {
    metrics.cosine = run.sum_sq_a == run.sum_sq_b ? 1.0 : 0.0;
  } else {
    metrics.cosine = run.sum_ab / (std::sqrt(run.sum_sq_a) * std::sqrt(run.sum_sq_b));
  }
  metrics.ulp_max = static_cast<double>(run.ulp_max);
  metrics.mismatch_count = run.mismatch + acc.nonfinite;
  metrics.mismatch_frac = numel > 0 ? static_cast<double>(metrics.mismatch_count) / numel : 0.0;
  metrics.nonfinite_mismatch = acc.nonfinite;
  metrics.nonfinite_equal = acc.nonfinite_equal;
  if (acc.first_nonfinite >= 0) {
    metrics.worst_index = acc.first_nonfinite;
    metrics.worst_a = acc.nonfinite_a;
    metrics.worst_b = acc.nonfinite_b;
    metrics.max_abs = metrics.max_rel = metrics.rms_ratio = metrics.cos_dist = kInf;
    metrics.ulp_max = kInf;
    metrics.cosine = std::numeric_limits<double>::quiet_NaN();
  } else {
    metrics.worst_index = run.max_abs_index;
    metrics.worst_a = run.max_abs_a;
    metrics.worst_b = run.max_abs_b;
  }
  if (numel == 0) return metrics;

  std::vector<int64_t> histogram(kUlpBuckets, 0);
  for (int copy = 0; copy < kHistogramCopies; ++copy) {
    for (size_t bucket = 0; bucket < kUlpBuckets; ++bucket) {
      histogram[bucket] += acc.ulp_histograms[copy * kUlpBuckets + bucket];
    }
  }
  const int64_t rank = (99 * numel + 99) / 100;  // nearest rank: ceil(0.99 n), 1-based
  int64_t before = 0;
  size_t bucket = 0;
  while (before + histogram[bucket] < rank) before += histogram[bucket++];
  if (bucket < kExactUlpBuckets) {
    metrics.ulp_p99 = static_cast<double>(bucket);
    return metrics;
  }
  if (bucket == kInfiniteUlpBucket) {
    metrics.ulp_p99 = kInf;
    return metrics;
  }
  metrics.ulp_p99 = static_cast<double>(ulp_bucket_range(bucket).second);
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
  return finish(count, tolerance, dtype, [&](Accumulator& acc) {
    run_native<Float>(a.data(), b.data(), count, tolerance, acc);
  });
}

// ---- the statistics' pass (add_statistics) ----

// |a - b| histogram: bucket 0 holds exact zeros, bucket 1 everything in (0, 2^kLowestBinade),
// then 32 sub-buckets per binade [2^e, 2^(e+1)) for e = kLowestBinade..kHighestBinade, then one
// bucket for +Inf (and anything above).
constexpr int kLowestBinade = -126;
constexpr int kHighestBinade = 127;
constexpr int kAbsSubBuckets = 32;
constexpr size_t kAbsFirstBinadeBucket = 2;
constexpr size_t kAbsInfiniteBucket =
    kAbsFirstBinadeBucket +
    static_cast<size_t>(kHighestBinade - kLowestBinade + 1) * kAbsSubBuckets;

// From the bits of a non-negative double: the biased exponent picks the binade, the top 5
// mantissa bits the sub-bucket (no frexp: this runs once per element).
inline size_t abs_bucket(double value) {
  const uint64_t bits = std::bit_cast<uint64_t>(value);
  const int64_t binade = static_cast<int64_t>(bits >> 52) - 1023;  // sign bit is 0: |a - b|
  if (value == 0) return 0;
  if (binade < kLowestBinade) return 1;
  if (binade > kHighestBinade) return kAbsInfiniteBucket;  // Inf, and NaN never arrives here
  return kAbsFirstBinadeBucket + static_cast<size_t>(binade - kLowestBinade) * kAbsSubBuckets +
         static_cast<size_t>((bits >> 47) & (kAbsSubBuckets - 1));
}

// The exclusive upper edge of a bucket (0 for the zero bucket, +Inf for the last).
double abs_bucket_upper_edge(size_t bucket) {
  if (bucket == 0) return 0;
  if (bucket == 1) return std::ldexp(1.0, kLowestBinade);
  if (bucket >= kAbsInfiniteBucket) return kInf;
  const size_t offset = bucket - kAbsFirstBinadeBucket;
  const int binade = kLowestBinade + static_cast<int>(offset / kAbsSubBuckets);
  const double sub = static_cast<double>(offset % kAbsSubBuckets);
  return std::ldexp(1.0 + (sub + 1) / kAbsSubBuckets, binade);
}

struct SideAccumulator {
  int64_t count = 0;
  double sum = 0;
  double sum_abs = 0;
  double sum_sq = 0;
  double min = kInf;
  double max = -kInf;

  void add(double value) {
    if (!is_finite(value)) return;
    ++count;
    sum += value;
    sum_abs += std::fabs(value);
    sum_sq += value * value;
    min = std::min(min, value);
    max = std::max(max, value);
  }
  SideStatistics finish() const {
    SideStatistics out;
    if (count == 0) return out;
    const double n = static_cast<double>(count);
    out.mean = sum / n;
    out.abs_mean = sum_abs / n;
    out.std = std::sqrt(std::max(0.0, sum_sq / n - out.mean * out.mean));
    out.min = min;
    out.max = max;
    return out;
  }
};

// `tensor` rounded to the float dtype `coarse` (nearest, ties to even).
Tensor rounded_to(const Tensor& tensor, DType coarse) {
  Tensor out(coarse, tensor.shape());
  std::vector<double> values(kBlock);
  std::byte* bytes = out.mutable_bytes();
  const size_t width = dtype_size(coarse);
  for (int64_t begin = 0; begin < tensor.numel(); begin += kBlock) {
    const int64_t count = std::min(kBlock, tensor.numel() - begin);
    decode_chunk(tensor, begin, count, values.data());
    for (int64_t index = 0; index < count; ++index) {
      std::byte* to = bytes + static_cast<size_t>(begin + index) * width;
      if (coarse == DType::kF64) {
        std::memcpy(to, &values[index], 8);
      } else if (coarse == DType::kF32) {
        const float narrow = static_cast<float>(values[index]);
        std::memcpy(to, &narrow, 4);
      } else {
        const uint32_t bits = encode_mini_float(values[index], *mini_format(coarse));
        std::memcpy(to, &bits, width);  // little-endian: the low bytes
      }
    }
  }
  return out;
}

}  // namespace

void add_statistics(const Tensor& a, const Tensor& b, Metrics& metrics) {
  std::vector<double> values_a(kBlock), values_b(kBlock);
  std::vector<int64_t> histogram(kAbsInfiniteBucket + 1, 0);
  SideAccumulator side_a, side_b;
  double sum_abs = 0;
  const bool equal_nan = metrics.tolerance.equal_nan;
  const int64_t numel = a.numel();
  for (int64_t begin = 0; begin < numel; begin += kBlock) {
    const int64_t count = std::min(kBlock, numel - begin);
    decode_chunk(a, begin, count, values_a.data());
    decode_chunk(b, begin, count, values_b.data());
    for (int64_t offset = 0; offset < count; ++offset) {
      const double value_a = values_a[offset];
      const double value_b = values_b[offset];
      side_a.add(value_a);
      side_b.add(value_b);
      if (is_finite(value_a) && is_finite(value_b)) {
        const double abs_diff = std::fabs(value_a - value_b);
        sum_abs += abs_diff;
        ++histogram[abs_bucket(abs_diff)];
      } else {
        const bool agree =
            value_a == value_b || (equal_nan && std::isnan(value_a) && std::isnan(value_b));
        ++histogram[agree ? 0 : kAbsInfiniteBucket];
      }
    }
  }
  metrics.has_statistics = true;
  metrics.a = side_a.finish();
  metrics.b = side_b.finish();
  metrics.mean_abs =
      metrics.finite_count > 0 ? sum_abs / static_cast<double>(metrics.finite_count) : 0.0;
  if (metrics.nonfinite_mismatch > 0) metrics.mean_abs = kInf;
  // Nearest rank: the ceil(q * n)-th smallest, q given in thousandths.
  auto percentile = [&](int64_t thousandths) {
    if (numel == 0) return 0.0;
    const int64_t rank = std::max<int64_t>(1, (thousandths * numel + 999) / 1000);
    int64_t before = 0;
    size_t bucket = 0;
    while (before + histogram[bucket] < rank) before += histogram[bucket++];
    const double edge = abs_bucket_upper_edge(bucket);
    return bucket == kAbsInfiniteBucket ? kInf : std::min(edge, metrics.max_abs);
  };
  metrics.abs_p50 = percentile(500);
  metrics.abs_p90 = percentile(900);
  metrics.abs_p99 = percentile(990);
  metrics.abs_p999 = percentile(999);

  const bool both_float = dtype_is_floating(a.dtype()) && dtype_is_floating(b.dtype());
  metrics.downcast_dtype = coarser_dtype(a.dtype(), b.dtype());
  if (a.dtype() == b.dtype() || !both_float) {
    metrics.downcast_max_abs = metrics.max_abs;
    metrics.downcast_rms_ratio = metrics.rms_ratio;
    metrics.downcast_mismatch_count = static_cast<double>(metrics.mismatch_count);
    return;
  }
  const Tensor& narrow_a =
      a.dtype() == metrics.downcast_dtype ? a : rounded_to(a, metrics.downcast_dtype);
  const Tensor& narrow_b =
      b.dtype() == metrics.downcast_dtype ? b : rounded_to(b, metrics.downcast_dtype);
  const Metrics downcast = compute_metrics(narrow_a, narrow_b, metrics.tolerance);
  metrics.downcast_max_abs = downcast.max_abs;
  metrics.downcast_rms_ratio = downcast.rms_ratio;
  metrics.downcast_mismatch_count = static_cast<double>(downcast.mismatch_count);
}

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
    case Metric::kCosine:
      return "cosine";
    case Metric::kMeanAbs:
      return "mean_abs";
    case Metric::kAbsP50:
      return "abs_p50";
    case Metric::kAbsP90:
      return "abs_p90";
    case Metric::kAbsP99:
      return "abs_p99";
    case Metric::kAbsP999:
      return "abs_p999";
    case Metric::kAMean:
      return "a_mean";
    case Metric::kAAbsMean:
      return "a_abs_mean";
    case Metric::kAStd:
      return "a_std";
    case Metric::kAMin:
      return "a_min";
    case Metric::kAMax:
      return "a_max";
    case Metric::kBMean:
      return "b_mean";
    case Metric::kBAbsMean:
      return "b_abs_mean";
    case Metric::kBStd:
      return "b_std";
    case Metric::kBMin:
      return "b_min";
    case Metric::kBMax:
      return "b_max";
    case Metric::kDowncastMaxAbs:
      return "downcast_max_abs";
    case Metric::kDowncastRmsRatio:
      return "downcast_rms_ratio";
    case Metric::kDowncastMismatchCount:
      return "downcast_mismatch_count";
  }
  return "unknown";
}

std::span<const Metric> all_metrics() { return kAllMetrics; }

std::span<const Metric> statistic_metrics() { return kStatisticMetrics; }

bool is_statistic(Metric metric) {
  return std::find(kStatisticMetrics.begin(), kStatisticMetrics.end(), metric) !=
         kStatisticMetrics.end();
}

std::optional<Metric> parse_metric(std::string_view name) {
  for (Metric metric : kAllMetrics) {
    if (metric_name(metric) == name) return metric;
  }
  for (Metric metric : kStatisticMetrics) {
    if (metric_name(metric) == name) return metric;
  }
  for (const auto& [alias, metric] : kAliases) {
    if (alias == name) return metric;
  }
  return std::nullopt;
}

std::string metric_names_list() {
  std::string out;
  for (Metric metric : kAllMetrics) {
    if (!out.empty()) out += ", ";
    out += metric_name(metric);
  }
  for (Metric metric : kStatisticMetrics) out += ", " + std::string(metric_name(metric));
  out += " (aliases:";
  for (const auto& [alias, metric] : kAliases) {
    out += " " + std::string(alias) + "=" + std::string(metric_name(metric));
  }
  return out + ")";
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

Tolerance default_tolerance(DType a, DType b) {
  const Tolerance left = default_tolerance(a);
  const Tolerance right = default_tolerance(b);
  return {std::max(left.atol, right.atol), std::max(left.rtol, right.rtol)};
}

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
    case Metric::kCosine:
      return metrics.cosine;
    case Metric::kMeanAbs:
      return metrics.mean_abs;
    case Metric::kAbsP50:
      return metrics.abs_p50;
    case Metric::kAbsP90:
      return metrics.abs_p90;
    case Metric::kAbsP99:
      return metrics.abs_p99;
    case Metric::kAbsP999:
      return metrics.abs_p999;
    case Metric::kAMean:
      return metrics.a.mean;
    case Metric::kAAbsMean:
      return metrics.a.abs_mean;
    case Metric::kAStd:
      return metrics.a.std;
    case Metric::kAMin:
      return metrics.a.min;
    case Metric::kAMax:
      return metrics.a.max;
    case Metric::kBMean:
      return metrics.b.mean;
    case Metric::kBAbsMean:
      return metrics.b.abs_mean;
    case Metric::kBStd:
      return metrics.b.std;
    case Metric::kBMin:
      return metrics.b.min;
    case Metric::kBMax:
      return metrics.b.max;
    case Metric::kDowncastMaxAbs:
      return metrics.downcast_max_abs;
    case Metric::kDowncastRmsRatio:
      return metrics.downcast_rms_ratio;
    case Metric::kDowncastMismatchCount:
      return metrics.downcast_mismatch_count;
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
  return finish(a.numel(), tolerance, coarse,
                [&](Accumulator& acc) { accumulate_generic(a, b, tolerance, coarse, acc); });
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
