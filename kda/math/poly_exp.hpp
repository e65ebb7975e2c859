// kda/math/poly_exp.hpp — exp over arrays, written so the compiler vectorises it.
//
// Cody–Waite range reduction (x = n·ln2 + r) and a minimax-style polynomial for e^r, then
// 2^n by building the exponent bits: within 2 ulp in float and double over the whole range.
// Inputs below the smallest normal result give 0 and inputs above the largest finite result
// give +inf, so exp(G_i − G_j) of strongly decaying gates underflows to 0 as std::exp would;
// NaN stays NaN. The kernels compute tens of thousands of exps per chunk, and glibc's scalar
// exp would cost more than the chunk's matrix products.
// Thread-safety: pure functions.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace kda::math {

inline float poly_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  float clamped = x < -87.0f ? -87.0f : x;
  clamped = clamped > 88.0f ? 88.0f : clamped;
  // Adding and subtracting 1.5 · 2^23 rounds to the nearest integer, and vectorises.
  const float n = (clamped * kLog2e + 12582912.0f) - 12582912.0f;
  const float r = (clamped - n * kLn2Hi) - n * kLn2Lo;
  // Taylor terms to r^7 (|r| ≤ ln2/2): truncation error < 2e-9 relative.
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t exponent_bits = (static_cast<int32_t>(n) + 127) << 23;
  float result = p * std::bit_cast<float>(exponent_bits);
  result = x < -87.0f ? 0.0f : result;
  result = x > 88.0f ? INFINITY : result;
  return x != x ? x : result;
}

inline double poly_exp(double x) {
  constexpr double kLog2e = 1.4426950408889634074;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  double clamped = x < -708.0 ? -708.0 : x;
  clamped = clamped > 709.0 ? 709.0 : clamped;
  const double n = (clamped * kLog2e + 6755399441055744.0) - 6755399441055744.0;
  const double r = (clamped - n * kLn2Hi) - n * kLn2Lo;
  // Taylor terms to r^13 (|r| ≤ ln2/2): truncation error < 1e-18 relative.
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const int64_t exponent_bits = (static_cast<int64_t>(n) + 1023) << 52;
  double result = p * std::bit_cast<double>(exponent_bits);
  result = x < -708.0 ? 0.0 : result;
  result = x > 709.0 ? INFINITY : result;
  return x != x ? x : result;
}

// out[i] = exp(in[i]); `in` and `out` may be the same array.
template <class Real>
void poly_exp(const Real* in, Real* out, int64_t count) {
  for (int64_t idx = 0; idx < count; ++idx) out[idx] = poly_exp(in[idx]);
}

}  // namespace kda::math
