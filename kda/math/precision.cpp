#include "kda/math/precision.hpp"

#include <algorithm>
#include <bit>
#include <string>
#include <vector>

#include "kda/math/blas.hpp"
#include "loupe/error.hpp"

namespace kda::math {

std::string_view precision_name(DotPrecision precision) {
  switch (precision) {
    case DotPrecision::kIeee:
      return "ieee";
    case DotPrecision::kBf16:
      return "bf16";
    case DotPrecision::kTf32Rz:
      return "tf32_rz";
    case DotPrecision::kTf32Rne:
      return "tf32_rne";
    case DotPrecision::kTf32x3:
      return "tf32x3";
  }
  return "ieee";
}

DotPrecision parse_precision(std::string_view name) {
  for (DotPrecision precision : {DotPrecision::kIeee, DotPrecision::kBf16, DotPrecision::kTf32Rz,
                                 DotPrecision::kTf32Rne, DotPrecision::kTf32x3}) {
    if (precision_name(precision) == name) return precision;
  }
  throw loupe::Error(loupe::ErrorCode::kUsage, "unknown dot precision '" + std::string(name) + "'",
                     "use one of ieee, bf16, tf32_rz, tf32_rne, tf32x3");
}

namespace {

// Keeps the top `kept_bits` of the significand's stored bits, truncating or rounding to nearest
// even. NaN and infinity pass unchanged; a rounding carry into the exponent is the correct result.
template <class Real, class Bits, int kStoredBits, int kExponentShift>
Real round_significand(Real value, int kept_bits, bool nearest) {
  Bits bits = std::bit_cast<Bits>(value);
  const Bits exponent_mask = (Bits(1) << (sizeof(Bits) * 8 - 1)) - (Bits(1) << kExponentShift);
  if ((bits & exponent_mask) == exponent_mask) return value;
  const int dropped = kStoredBits - kept_bits;
  const Bits drop_mask = (Bits(1) << dropped) - 1;
  if (nearest) {
    const Bits half = Bits(1) << (dropped - 1);
    const Bits lsb = (bits >> dropped) & 1;
    bits += half - 1 + lsb;
  }
  return std::bit_cast<Real>(bits & ~drop_mask);
}

float round_float(float value, int kept_bits, bool nearest) {
  return round_significand<float, uint32_t, 23, 23>(value, kept_bits, nearest);
}
double round_double(double value, int kept_bits, bool nearest) {
  return round_significand<double, uint64_t, 52, 52>(value, kept_bits, nearest);
}

constexpr int kBf16StoredBits = 7;
constexpr int kTf32StoredBits = 10;

template <class Real>
Real round_any(Real value, DotPrecision precision) {
  auto round = [](Real x, int kept, bool nearest) {
    if constexpr (sizeof(Real) == 4) {
      return round_float(x, kept, nearest);
    } else {
      return round_double(x, kept, nearest);
    }
  };
  switch (precision) {
    case DotPrecision::kIeee:
      return value;
    case DotPrecision::kBf16:
      return round(value, kBf16StoredBits, true);
    case DotPrecision::kTf32Rz:
      return round(value, kTf32StoredBits, false);
    case DotPrecision::kTf32Rne:
    case DotPrecision::kTf32x3:
      return round(value, kTf32StoredBits, true);
  }
  return value;
}

// Copies the stored (rows × cols, stride ld) operand into `hi` (and `lo` for tf32x3), rounded.
template <class Real>
void split_operand(DotPrecision precision, const Real* source, int64_t rows, int64_t cols,
                   int64_t ld, std::vector<Real>& hi, std::vector<Real>& lo) {
  hi.resize(static_cast<size_t>(rows * cols));
  if (precision == DotPrecision::kTf32x3) lo.resize(hi.size());
  for (int64_t row = 0; row < rows; ++row) {
    const Real* source_row = source + row * ld;
    Real* hi_row = hi.data() + row * cols;
    for (int64_t col = 0; col < cols; ++col) hi_row[col] = round_any(source_row[col], precision);
    if (precision == DotPrecision::kTf32x3) {
      Real* lo_row = lo.data() + row * cols;
      for (int64_t col = 0; col < cols; ++col) {
        lo_row[col] = round_any(Real(source_row[col] - hi_row[col]), DotPrecision::kTf32Rne);
      }
    }
  }
}

}  // namespace

float round_operand(float value, DotPrecision precision) { return round_any(value, precision); }
double round_operand(double value, DotPrecision precision) { return round_any(value, precision); }

template <class Real>
void precision_gemm(DotPrecision precision, bool transpose_a, bool transpose_b, int64_t m,
                    int64_t n, int64_t k, Real alpha, const Real* a, int64_t lda, const Real* b,
                    int64_t ldb, Real beta, Real* c, int64_t ldc) {
  if (precision == DotPrecision::kIeee) {
    gemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  thread_local std::vector<Real> a_hi, a_lo, b_hi, b_lo;
  const int64_t a_rows = transpose_a ? k : m, a_cols = transpose_a ? m : k;
  const int64_t b_rows = transpose_b ? n : k, b_cols = transpose_b ? k : n;
  split_operand(precision, a, a_rows, a_cols, lda, a_hi, a_lo);
  split_operand(precision, b, b_rows, b_cols, ldb, b_hi, b_lo);
  if (precision != DotPrecision::kTf32x3) {
    gemm(transpose_a, transpose_b, m, n, k, alpha, a_hi.data(), a_cols, b_hi.data(), b_cols, beta,
         c, ldc);
    return;
  }
  // The three products as one GEMM over an inner dimension of 3k, [lo_a hi_a hi_a] · [hi_b; lo_b;
  // hi_b], so they share one accumulation (as a 3xTF32 kernel's accumulator does) and one call.
  thread_local std::vector<Real> a_cat, b_cat;
  a_cat.resize(3 * a_hi.size());
  b_cat.resize(3 * b_hi.size());
  const Real* a_parts[3] = {a_lo.data(), a_hi.data(), a_hi.data()};
  const Real* b_parts[3] = {b_hi.data(), b_lo.data(), b_hi.data()};
  // op(A) is m × 3k: stored m × 3k (parts side by side) or, transposed, 3k × m (parts stacked).
  for (int part = 0; part < 3; ++part) {
    if (transpose_a) {
      std::copy(a_parts[part], a_parts[part] + a_hi.size(), a_cat.data() + part * a_hi.size());
    } else {
      for (int64_t row = 0; row < m; ++row) {
        std::copy_n(a_parts[part] + row * k, k, a_cat.data() + row * 3 * k + part * k);
      }
    }
    if (transpose_b) {
      for (int64_t row = 0; row < n; ++row) {
        std::copy_n(b_parts[part] + row * k, k, b_cat.data() + row * 3 * k + part * k);
      }
    } else {
      std::copy(b_parts[part], b_parts[part] + b_hi.size(), b_cat.data() + part * b_hi.size());
    }
  }
  gemm(transpose_a, transpose_b, m, n, 3 * k, alpha, a_cat.data(), transpose_a ? m : 3 * k,
       b_cat.data(), transpose_b ? 3 * k : n, beta, c, ldc);
}

template void precision_gemm<float>(DotPrecision, bool, bool, int64_t, int64_t, int64_t, float,
                                    const float*, int64_t, const float*, int64_t, float, float*,
                                    int64_t);
template void precision_gemm<double>(DotPrecision, bool, bool, int64_t, int64_t, int64_t, double,
                                     const double*, int64_t, const double*, int64_t, double,
                                     double*, int64_t);

}  // namespace kda::math
