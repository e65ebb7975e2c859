#include "kda/math/generator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "loupe/error.hpp"

namespace kda::math {
namespace {

TEST(Generator, SameSeedSameInputsOtherSeedOtherInputs) {
  const Shape shape{2, 10, 1, 2, 16, 8};
  GeneratorOptions options;
  options.seed = 42;
  const Inputs<float> first = generate_inputs(shape, options);
  const Inputs<float> again = generate_inputs(shape, options);
  EXPECT_EQ(first.q, again.q);
  EXPECT_EQ(first.g, again.g);
  options.seed = 43;
  EXPECT_NE(generate_inputs(shape, options).q, first.q);
  validate_inputs(first);
}

TEST(Generator, KeysAreUnitNormAndMostlyInASmallSubspace) {
  const Shape shape{1, 200, 1, 1, 64, 8};
  GeneratorOptions options;
  const Inputs<float> inputs = generate_inputs(shape, options);
  for (int64_t row = 0; row < 200; ++row) {
    double norm = 0;
    for (int64_t dim = 0; dim < 64; ++dim)
      norm += inputs.k[row * 64 + dim] * inputs.k[row * 64 + dim];
    EXPECT_NEAR(norm, 1.0, 1e-5);
  }
}

TEST(Generator, SlowDecayIsConstantPerChannelWithinTheRange) {
  GeneratorOptions options;
  options.decay = Decay::kSlow;
  const Inputs<float> inputs = generate_inputs({1, 5, 1, 2, 32, 8}, options);
  for (int64_t token = 1; token < 5; ++token) {
    for (int64_t idx = 0; idx < 64; ++idx) EXPECT_EQ(inputs.g[token * 64 + idx], inputs.g[idx]);
  }
  for (float value : inputs.g) {
    EXPECT_LE(value, -0.99e-6f);
    EXPECT_GE(value, -0.101f);
  }
}

TEST(Generator, FastDecayAndBetaStayInTheirRanges) {
  const Inputs<float> inputs = generate_inputs({1, 50, 1, 1, 16, 8}, {});
  for (float value : inputs.g) {
    EXPECT_LT(value, 0.0f);
    EXPECT_GT(value, -5.0f);
  }
  for (float value : inputs.beta) {
    EXPECT_GT(value, 0.0f);
    EXPECT_LT(value, 1.0f);
  }
  const auto [low, high] = std::minmax_element(inputs.g.begin(), inputs.g.end());
  EXPECT_LT(*low, -3.5f);
  EXPECT_GT(*high, -1.5f);
}

TEST(Generator, DecayNamesParse) {
  EXPECT_EQ(parse_decay("slow"), Decay::kSlow);
  EXPECT_EQ(parse_decay(decay_name(Decay::kFast)), Decay::kFast);
  EXPECT_THROW(parse_decay("medium"), loupe::Error);
}

}  // namespace
}  // namespace kda::math
