// core/float_formats.hpp — exact decoding and round-to-nearest-even encoding of the small float
// formats that have no C++ type: float16, bfloat16, float8_e4m3fn and float8_e5m2.
//
// Decoding is exact (every value of these formats is a double). Encoding rounds a double to the
// nearest representable value, ties to even, and keeps the sign of zeros, NaN and infinities.
// Overflow goes to infinity where the format has one (f16, bf16, e5m2), and to NaN for e4m3fn,
// which has none (OCP FP8 "FN": S.1111.111 is NaN, there is no infinity).
// Rounding works on integer bits, so it does not depend on the floating-point rounding mode.
// Thread-safety: pure functions.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace loupe {

// A binary floating-point format of at most 32 bits: 1 sign bit, exponent_bits, mantissa_bits.
struct MiniFloatFormat {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  bool ieee_specials;  // true: all-ones exponent means Inf (mantissa 0) or NaN; false: e4m3fn rule
};

inline constexpr MiniFloatFormat kHalfFormat{5, 10, 15, true};
inline constexpr MiniFloatFormat kBFloat16Format{8, 7, 127, true};
inline constexpr MiniFloatFormat kE4M3FNFormat{4, 3, 7, false};
inline constexpr MiniFloatFormat kE5M2Format{5, 2, 15, true};

// The value of `bits` (the low 1 + exponent_bits + mantissa_bits bits) in `format`.
inline double decode_mini_float(uint32_t bits, const MiniFloatFormat& format) {
  const int m = format.mantissa_bits;
  const uint32_t exponent_max = (1u << format.exponent_bits) - 1;
  const uint64_t sign = static_cast<uint64_t>((bits >> (format.exponent_bits + m)) & 1u) << 63;
  const uint32_t exponent = (bits >> m) & exponent_max;
  const uint32_t mantissa = bits & ((1u << m) - 1);
  if ((format.ieee_specials && exponent == exponent_max) ||
      (!format.ieee_specials && exponent == exponent_max && mantissa == (1u << m) - 1)) {
    const bool is_nan = !format.ieee_specials || mantissa != 0;
    // Infinity, or the quiet NaN: every double exponent bit set.
    return std::bit_cast<double>(sign | (uint64_t{0x7FF} << 52) |
                                 (is_nan ? uint64_t{1} << 51 : uint64_t{0}));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^(1 - bias - m), exact
    const double magnitude = std::ldexp(static_cast<double>(mantissa), 1 - format.bias - m);
    return sign != 0 ? -magnitude : magnitude;
  }
  // Normal: rebias the exponent and left-align the mantissa in the double's 52 bits.
  const uint64_t double_exponent =
      static_cast<uint64_t>(static_cast<int>(exponent) - format.bias + 1023);
  return std::bit_cast<double>(sign | (double_exponent << 52) |
                               (static_cast<uint64_t>(mantissa) << (52 - m)));
}

// The largest finite value of `format` (f16: 65504, bf16: 3.3895e38, e4m3fn: 448, e5m2: 57344).
inline double mini_float_max(const MiniFloatFormat& format) {
  const int m = format.mantissa_bits;
  const int exponent_max = (1 << format.exponent_bits) - 1;
  if (format.ieee_specials) {
    return std::ldexp(static_cast<double>((1 << (m + 1)) - 1), exponent_max - 1 - format.bias - m);
  }
  // e4m3fn: the all-ones exponent holds normal numbers except the all-ones mantissa (NaN).
  return std::ldexp(static_cast<double>((1 << (m + 1)) - 2), exponent_max - format.bias - m);
}

// `value` rounded to nearest even in `format`, as bits in the low 1 + exponent + mantissa bits.
// Works on the bits of the double: the 53-bit significand is shifted right to the target's
// precision and rounded on the bits shifted out, so the result is rounded exactly once.
inline uint32_t encode_mini_float(double value, const MiniFloatFormat& format) {
  const int m = format.mantissa_bits;
  const uint32_t exponent_max = (1u << format.exponent_bits) - 1;
  const uint64_t value_bits = std::bit_cast<uint64_t>(value);
  const uint32_t sign = (value_bits >> 63) != 0 ? 1u << (format.exponent_bits + m) : 0u;
  const uint32_t nan_bits = format.ieee_specials
                                ? sign | (exponent_max << m) | (1u << (m - 1))  // quiet NaN
                                : sign | (exponent_max << m) | ((1u << m) - 1);
  const uint32_t infinity_bits = format.ieee_specials ? sign | (exponent_max << m) : nan_bits;
  // The largest finite encoding, without sign.
  const uint32_t max_finite_bits = format.ieee_specials
                                       ? ((exponent_max - 1) << m) | ((1u << m) - 1)
                                       : (exponent_max << m) | ((1u << m) - 2);
  const int double_exponent = static_cast<int>((value_bits >> 52) & 0x7FF);
  const uint64_t double_mantissa = value_bits & ((uint64_t{1} << 52) - 1);
  if (double_exponent == 0x7FF) return double_mantissa != 0 ? nan_bits : infinity_bits;
  // Zeros, and double subnormals (below 2^-1022, far under half the smallest target subnormal).
  if (double_exponent == 0) return sign;

  const int exponent = double_exponent - 1023;  // value in [2^exponent, 2^(exponent+1))
  const int min_exponent = 1 - format.bias;
  if (exponent > static_cast<int>(exponent_max) - format.bias) return infinity_bits;
  const uint64_t significand = double_mantissa | (uint64_t{1} << 52);  // 53 bits
  // Bits to drop: 52 - m in the normal range, more below it (subnormal results).
  const int shift = 52 - m + (exponent < min_exponent ? min_exponent - exponent : 0);
  if (shift > 53) return sign;  // below half the smallest subnormal: rounds to zero
  uint64_t units = significand >> shift;
  const uint64_t remainder = significand & ((uint64_t{1} << shift) - 1);
  const uint64_t half = uint64_t{1} << (shift - 1);
  if (remainder > half || (remainder == half && (units & 1) != 0)) ++units;

  uint32_t magnitude_bits;
  if (exponent < min_exponent) {
    // Subnormal; units == 2^m carried into the smallest normal, which this encodes too.
    magnitude_bits = static_cast<uint32_t>(units);
  } else {
    int biased_exponent = exponent + format.bias;
    if (units == (uint64_t{1} << (m + 1))) {  // rounding carried into the next binade
      units >>= 1;
      ++biased_exponent;
    }
    if (biased_exponent > static_cast<int>(exponent_max)) return infinity_bits;
    magnitude_bits = (static_cast<uint32_t>(biased_exponent) << m) |
                     static_cast<uint32_t>(units - (uint64_t{1} << m));
  }
  if (magnitude_bits > max_finite_bits) return infinity_bits;
  return sign | magnitude_bits;
}

inline float half_to_float(uint16_t bits) {
  return static_cast<float>(decode_mini_float(bits, kHalfFormat));
}
inline uint16_t float_to_half(double value) {
  return static_cast<uint16_t>(encode_mini_float(value, kHalfFormat));
}
inline float bfloat16_to_float(uint16_t bits) {
  return static_cast<float>(decode_mini_float(bits, kBFloat16Format));
}
inline uint16_t float_to_bfloat16(double value) {
  return static_cast<uint16_t>(encode_mini_float(value, kBFloat16Format));
}
inline float e4m3fn_to_float(uint8_t bits) {
  return static_cast<float>(decode_mini_float(bits, kE4M3FNFormat));
}
inline uint8_t float_to_e4m3fn(double value) {
  return static_cast<uint8_t>(encode_mini_float(value, kE4M3FNFormat));
}
inline float e5m2_to_float(uint8_t bits) {
  return static_cast<float>(decode_mini_float(bits, kE5M2Format));
}
inline uint8_t float_to_e5m2(double value) {
  return static_cast<uint8_t>(encode_mini_float(value, kE5M2Format));
}

}  // namespace loupe
