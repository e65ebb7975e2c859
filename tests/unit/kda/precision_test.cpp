#include "kda/math/precision.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "loupe/error.hpp"

namespace kda::math {
namespace {

TEST(RoundOperand, Tf32TruncationClearsThe13LowBits) {
  const float value = std::bit_cast<float>(0x3F7FFFFFu);  // just below 1
  EXPECT_EQ(std::bit_cast<uint32_t>(round_operand(value, DotPrecision::kTf32Rz)), 0x3F7FE000u);
  EXPECT_EQ(round_operand(-1.0f / 3.0f, DotPrecision::kTf32Rz),
            -std::bit_cast<float>(std::bit_cast<uint32_t>(1.0f / 3.0f) & ~0x1FFFu));
}

TEST(RoundOperand, Tf32NearestRoundsHalfToEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even significand, 1.
  EXPECT_EQ(round_operand(1.0f + 0x1.0p-11f, DotPrecision::kTf32Rne), 1.0f);
  EXPECT_EQ(round_operand(1.0f + 3 * 0x1.0p-11f, DotPrecision::kTf32Rne), 1.0f + 0x1.0p-9f);
  EXPECT_EQ(round_operand(std::bit_cast<float>(0x3F7FFFFFu), DotPrecision::kTf32Rne), 1.0f);
}

TEST(RoundOperand, Bf16KeepsEightSignificantBits) {
  EXPECT_EQ(round_operand(1.0f + 0x1.0p-8f, DotPrecision::kBf16), 1.0f);  // tie to even
  EXPECT_EQ(round_operand(1.0f + 0x1.8p-8f, DotPrecision::kBf16), 1.0f + 0x1.0p-7f);
  EXPECT_EQ(round_operand(3.0, DotPrecision::kBf16), 3.0);
}

TEST(RoundOperand, IeeeAndSpecialValuesPassUnchanged) {
  EXPECT_EQ(round_operand(0.1f, DotPrecision::kIeee), 0.1f);
  EXPECT_TRUE(std::isinf(round_operand(INFINITY, DotPrecision::kTf32Rne)));
  EXPECT_TRUE(std::isnan(round_operand(NAN, DotPrecision::kBf16)));
}

TEST(RoundOperand, DoubleKeepsTheSameSignificandWidth) {
  EXPECT_EQ(round_operand(1.0 + 0x1.0p-11, DotPrecision::kTf32Rz), 1.0);
  EXPECT_EQ(round_operand(1.0 + 0x1.0p-10, DotPrecision::kTf32Rz), 1.0 + 0x1.0p-10);
}

TEST(PrecisionGemm, ReadsOperandsAtThePrecision) {
  // 1 × 2 times 2 × 1: (a0, a1) · (b0, b1).
  const std::vector<float> a = {1.0f + 0x1.8p-12f, 1.0f - 0x1.0p-14f};
  const std::vector<float> b = {1.0f + 0x1.0p-20f, 3.0f};
  auto product = [&](DotPrecision precision) {
    float c = 0;
    precision_gemm(precision, false, false, 1, 1, 2, 1.0f, a.data(), 2, b.data(), 1, 0.0f, &c, 1);
    return c;
  };
  const double exact = double(a[0]) * b[0] + double(a[1]) * b[1];
  EXPECT_NEAR(product(DotPrecision::kIeee), exact, 1e-6);
  // Truncation: a0 → 1, a1 → 1 − 2^-11, b0 → 1.
  EXPECT_EQ(product(DotPrecision::kTf32Rz), 1.0f + 3.0f * (1.0f - 0x1.0p-11f));
  EXPECT_NEAR(product(DotPrecision::kTf32x3), exact, 1e-6);
  EXPECT_GT(std::abs(product(DotPrecision::kTf32Rz) - exact), 1e-3);
}

TEST(PrecisionGemm, Tf32x3IsAsAccurateAsFp32OnLargeProducts) {
  const int64_t n = 96;
  std::vector<float> a(n * n), b(n * n);
  for (int64_t idx = 0; idx < n * n; ++idx) {
    a[idx] = std::sin(0.37f * idx) + (idx % (n + 1) == 0 ? 1.0f : 0.0f);
    b[idx] = std::cos(0.11f * idx);
  }
  auto max_error = [&](DotPrecision precision) {
    std::vector<float> c(n * n);
    precision_gemm(precision, true, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(),
                   n);
    double worst = 0;
    for (int64_t row = 0; row < n; ++row) {
      for (int64_t col = 0; col < n; ++col) {
        double exact = 0;
        for (int64_t inner = 0; inner < n; ++inner) {
          exact += double(a[inner * n + row]) * b[inner * n + col];
        }
        worst = std::max(worst, std::abs(c[row * n + col] - exact));
      }
    }
    return worst;
  };
  EXPECT_LT(max_error(DotPrecision::kTf32x3), 1e-4);
  EXPECT_LT(max_error(DotPrecision::kIeee), 1e-4);
  EXPECT_GT(max_error(DotPrecision::kTf32Rne), 1e-3);
}

TEST(ParsePrecision, NamesRoundTripAndUnknownNamesAreUsageErrors) {
  for (DotPrecision precision : {DotPrecision::kIeee, DotPrecision::kBf16, DotPrecision::kTf32Rz,
                                 DotPrecision::kTf32Rne, DotPrecision::kTf32x3}) {
    EXPECT_EQ(parse_precision(precision_name(precision)), precision);
  }
  try {
    parse_precision("tf16");
    FAIL();
  } catch (const loupe::Error& error) {
    EXPECT_EQ(error.code(), loupe::ErrorCode::kUsage);
  }
}

}  // namespace
}  // namespace kda::math
