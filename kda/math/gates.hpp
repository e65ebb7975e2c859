// kda/math/gates.hpp — the per-token elementwise math of KDA: L2 normalisation, the two gate
// forms, beta's sigmoid (reference/kda.md, "Recurrence").
//
// Header-only and inline because the decode kernels call these in their innermost loops.
// Thread-safety: pure functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

namespace kda::math {

// x / sqrt(Σx² + eps), the normalisation FLA applies to q and k over K.
inline constexpr double kL2NormEps = 1e-6;

template <class Real>
void l2_normalize(Real* x, int64_t length) {
  Real sum_sq = 0;
  for (int64_t idx = 0; idx < length; ++idx) sum_sq += x[idx] * x[idx];
  const Real inv_norm = Real(1) / std::sqrt(sum_sq + Real(kL2NormEps));
  for (int64_t idx = 0; idx < length; ++idx) x[idx] *= inv_norm;
}

// Normalises every row of `row_length` elements in place (q or k in (B, T, H, K): row_length K).
template <class Real>
void l2_normalize_rows(std::span<Real> data, int64_t row_length) {
  for (size_t begin = 0; begin + row_length <= data.size(); begin += row_length) {
    l2_normalize(data.data() + begin, row_length);
  }
}

// How a raw gate value becomes the per-token log decay g (≤ 0).
enum class GateForm {
  kLogDecay,        // the input already is g
  kSoftplus,        // g = −exp(A_log[hv]) · softplus(g_raw + dt_bias[hv, k])
  kBoundedSigmoid,  // g = −5 · sigmoid(exp(A_log[hv]) · (g_raw + dt_bias[hv, k]))
};

// How a raw beta value becomes β.
enum class BetaForm {
  kGiven,           // the input already is β
  kSigmoid,         // β = sigmoid(b_raw)
  kSigmoidTimesTwo  // β = 2 · sigmoid(b_raw), allowing negative eigenvalues of (I − β k kᵀ)
};

template <class Real>
Real softplus(Real x) {
  // torch's threshold: above 20, softplus(x) == x to fp32 precision.
  return x > Real(20) ? x : std::log1p(std::exp(x));
}

template <class Real>
Real sigmoid(Real x) {
  return Real(1) / (Real(1) + std::exp(-x));
}

// g for one channel; `a_log` is A_log[hv] and `dt_bias` is dt_bias[hv, k].
template <class Real>
Real log_decay(GateForm form, Real g_raw, Real a_log, Real dt_bias) {
  switch (form) {
    case GateForm::kLogDecay:
      return g_raw;
    case GateForm::kSoftplus:
      return -std::exp(a_log) * softplus(g_raw + dt_bias);
    case GateForm::kBoundedSigmoid:
      return Real(-5) * sigmoid(std::exp(a_log) * (g_raw + dt_bias));
  }
  return g_raw;
}

template <class Real>
Real beta_value(BetaForm form, Real b_raw) {
  switch (form) {
    case BetaForm::kGiven:
      return b_raw;
    case BetaForm::kSigmoid:
      return sigmoid(b_raw);
    case BetaForm::kSigmoidTimesTwo:
      return Real(2) * sigmoid(b_raw);
  }
  return b_raw;
}

}  // namespace kda::math
