// kda/math/precision.hpp — emulation of the dot-product precisions of GPU matrix units.
//
// A GPU's tensor cores read fp32 operands at a lower precision; the CP path's (M, H) products and
// merge are where that matters (reference/kda.md, incident 1). kda rounds the operands the way
// the hardware does, then multiplies in the engine's precision (fp32 sgemm or fp64 dgemm):
//   ieee      operands unchanged
//   bf16      operands rounded to bfloat16 (8 significant bits), round to nearest even
//   tf32_rz   operands truncated to TF32 (11 significant bits): bits & ~0x1FFF — what Triton's
//             tl.dot does with fp32 inputs on an H200
//   tf32_rne  operands rounded to TF32, round to nearest even
//   tf32x3    a = hi + lo, hi = tf32(a), lo = tf32(a − hi); a·b ≈ lo·hi + hi·lo + hi·hi, the three
//             products accumulated together (one GEMM over 3k)
// Thread-safety: pure functions; precision_gemm uses only its arguments and thread-local scratch.
#pragma once

#include <cstdint>
#include <string_view>

namespace kda::math {

enum class DotPrecision { kIeee, kBf16, kTf32Rz, kTf32Rne, kTf32x3 };

// "ieee", "bf16", "tf32_rz", "tf32_rne", "tf32x3".
std::string_view precision_name(DotPrecision precision);
// Throws loupe::Error(kUsage) naming the accepted values when `name` is none of them.
DotPrecision parse_precision(std::string_view name);

// One operand rounded as the precision reads it (tf32x3 reads hi exactly and keeps the rest in lo,
// so for it this returns the hi part). Works on float and double (double keeps its exponent range;
// the significand is cut to the same number of bits).
float round_operand(float value, DotPrecision precision);
double round_operand(double value, DotPrecision precision);

// C = alpha · op(A) · op(B) + beta · C in row-major storage, with op(X) = X or Xᵀ, where the
// products of op(A) (m × k) and op(B) (k × n) read their operands at `precision`.
// REQUIRES: lda, ldb, ldc are the row strides of A, B and C as stored.
template <class Real>
void precision_gemm(DotPrecision precision, bool transpose_a, bool transpose_b, int64_t m,
                    int64_t n, int64_t k, Real alpha, const Real* a, int64_t lda, const Real* b,
                    int64_t ldb, Real beta, Real* c, int64_t ldc);

}  // namespace kda::math
