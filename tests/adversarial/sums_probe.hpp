// The "sums" probe the round 3-5 adversaries share (tests/adversarial/round*_cases.cpp): N rows of
// kWidth normal floats, y = each row's sum along N; the reference sums them in order.
#pragma once

#include <cstdint>
#include <random>
#include <span>

#include "loupe/probe.hpp"

namespace loupe::adversarial {

inline constexpr int64_t kWidth = 64;

inline loupe::CheckOutput& sums_setup(loupe::CheckSetup& setup) {
  const int64_t count = setup.point().get_int("N");
  std::span<float> x = setup.input<float>("x", {count, kWidth}, {"N", "D"});
  std::mt19937_64 rng(setup.seed());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& value : x) value = normal(rng);
  return setup.output<float>("y", {count}, {"N"}).along("N");
}

inline void sums(std::span<const float> x, std::span<float> y) {
  for (size_t row = 0; row < y.size(); ++row) {
    float total = 0;
    for (int64_t column = 0; column < kWidth; ++column) total += x[row * kWidth + column];
    y[row] = total;
  }
}

inline void sums_reference(loupe::CheckIo& io) {
  sums(io.input<float>("x"), io.output<float>("y"));
}

}  // namespace loupe::adversarial
