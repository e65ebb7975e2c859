#include "kda/math/gates.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kda/math/poly_exp.hpp"

namespace kda::math {
namespace {

TEST(L2Normalize, DividesByTheNormWithEpsilon) {
  std::vector<double> x = {3.0, 4.0};
  l2_normalize(x.data(), 2);
  EXPECT_DOUBLE_EQ(x[0], 3.0 / std::sqrt(25.0 + 1e-6));
  EXPECT_DOUBLE_EQ(x[1], 4.0 / std::sqrt(25.0 + 1e-6));
  std::vector<float> zero = {0.0f, 0.0f};
  l2_normalize(zero.data(), 2);
  EXPECT_EQ(zero[0], 0.0f);
}

TEST(Gates, BothFormsFollowTheFormulas) {
  const double g_raw = 0.3, a_log = -0.2, dt_bias = 0.1;
  EXPECT_DOUBLE_EQ(log_decay(GateForm::kSoftplus, g_raw, a_log, dt_bias),
                   -std::exp(a_log) * std::log1p(std::exp(g_raw + dt_bias)));
  EXPECT_DOUBLE_EQ(log_decay(GateForm::kBoundedSigmoid, g_raw, a_log, dt_bias),
                   -5.0 / (1.0 + std::exp(-std::exp(a_log) * (g_raw + dt_bias))));
  EXPECT_EQ(log_decay(GateForm::kLogDecay, -0.7, a_log, dt_bias), -0.7);
  EXPECT_EQ(softplus(30.0), 30.0);
}

TEST(Gates, BetaFormsIncludeTheTimesTwoOption) {
  EXPECT_DOUBLE_EQ(beta_value(BetaForm::kSigmoid, 0.0), 0.5);
  EXPECT_DOUBLE_EQ(beta_value(BetaForm::kSigmoidTimesTwo, 0.0), 1.0);
  EXPECT_EQ(beta_value(BetaForm::kGiven, 0.25), 0.25);
}

TEST(PolyExp, WithinTwoUlpOfLibmAndSaturatesLikeIt) {
  for (double x = -80.0; x < 80.0; x += 0.0137) {
    const float expected = std::exp(static_cast<float>(x));
    const float actual = poly_exp(static_cast<float>(x));
    EXPECT_LE(std::abs(actual - expected), 2.5e-7f * expected) << x;
    EXPECT_LE(std::abs(poly_exp(x) - std::exp(x)), 5e-16 * std::exp(x)) << x;
  }
  EXPECT_EQ(poly_exp(-100.0f), 0.0f);
  EXPECT_EQ(poly_exp(-1000.0), 0.0);
  EXPECT_TRUE(std::isinf(poly_exp(100.0f)));
  EXPECT_TRUE(std::isnan(poly_exp(NAN)));
  EXPECT_EQ(poly_exp(0.0), 1.0);
}

}  // namespace
}  // namespace kda::math
