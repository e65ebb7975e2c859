// include/loupe/structure.hpp: every structure of the family is what its name says, the same
// seed gives the same values, and another seed moves the structure (issue 39: inputs with
// structure, declared).
#include "loupe/structure.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace loupe::structure {
namespace {

TEST(StructureTest, NamesRoundTrip) {
  EXPECT_EQ(kNames.size(), 7u);
  for (std::string_view text : kNames) {
    const auto kind = parse(text);
    ASSERT_TRUE(kind.has_value()) << text;
    EXPECT_EQ(name(*kind), text);
  }
  EXPECT_EQ(parse("outliers"), std::nullopt);
  EXPECT_EQ(name(Kind::kRaggedTail), "ragged_tail");
  EXPECT_EQ(name(Kind::kVAboveK), "v_above_k");
}

TEST(StructureTest, OutlierChannelsScaleWholeRowsTenToAHundredTimes) {
  constexpr int64_t kRows = 256, kCols = 8;
  std::vector<float> ones(kRows * kCols, 1.0f);
  const std::vector<int64_t> rows = scale_outlier_channels(ones, kRows, kCols, 7);
  ASSERT_FALSE(rows.empty());
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end()));
  // About one row in 16: 256 rows give 16 expected; a binomial draw stays within 4..40.
  EXPECT_GE(rows.size(), 4u);
  EXPECT_LE(rows.size(), 40u);
  for (int64_t row = 0; row < kRows; ++row) {
    const bool outlier = std::find(rows.begin(), rows.end(), row) != rows.end();
    const float first = ones[row * kCols];
    for (int64_t col = 0; col < kCols; ++col) EXPECT_EQ(ones[row * kCols + col], first);
    if (outlier) {
      EXPECT_GE(first, 10.0f);
      EXPECT_LE(first, 100.0f);
    } else {
      EXPECT_EQ(first, 1.0f);
    }
  }
  std::vector<float> again(kRows * kCols, 1.0f), other(kRows * kCols, 1.0f);
  EXPECT_EQ(scale_outlier_channels(again, kRows, kCols, 7), rows);
  EXPECT_EQ(again, ones);
  EXPECT_NE(scale_outlier_channels(other, kRows, kCols, 8), rows);
  // A matrix of one row still gets its outlier.
  std::vector<float> single(4, 1.0f);
  EXPECT_EQ(scale_outlier_channels(single, 1, 4, 3, {0.0, 10, 100}), (std::vector<int64_t>{0}));
  EXPECT_GE(single[0], 10.0f);
}

TEST(StructureTest, HeavyTailsHaveUnitVarianceAndFarMoreExtremesThanANormal) {
  std::vector<float> values(200000);
  fill_heavy_tailed(values, 11);
  double sum_sq = 0;
  size_t beyond_5 = 0;
  for (float value : values) {
    sum_sq += double(value) * value;
    beyond_5 += std::fabs(value) > 5.0f;
  }
  // Student-t(3) has infinite fourth moment, so the sample variance converges slowly: 0.6-1.6.
  EXPECT_GT(sum_sq / values.size(), 0.6);
  EXPECT_LT(sum_sq / values.size(), 1.6);
  // A unit normal puts 5.7e-7 of its mass beyond 5 (0.1 of 200,000 draws); t(3) at unit
  // variance puts about 1e-3 there (about 200 draws).
  EXPECT_GT(beyond_5, 50u);
  std::vector<float> again(values.size());
  fill_heavy_tailed(again, 11);
  EXPECT_EQ(again, values);
}

TEST(StructureTest, LongHistoryAndFastGatesDecayAsNamed) {
  constexpr int64_t kTokens = 3, kChannels = 64;
  std::vector<float> slow(kTokens * kChannels);
  fill_long_history_decay(slow, kTokens, kChannels, 5);
  for (int64_t channel = 0; channel < kChannels; ++channel) {
    EXPECT_LE(slow[channel], -1e-6f);
    EXPECT_GE(slow[channel], -1e-1f);
    EXPECT_EQ(slow[2 * kChannels + channel], slow[channel]);  // the same rate at every token
  }
  std::vector<float> fast(1000);
  fill_fast_gate_decay(fast, 5);
  double mean = 0;
  for (float value : fast) {
    EXPECT_LT(value, 0.0f);
    EXPECT_GT(value, -5.0f);
    mean += value / fast.size();
  }
  EXPECT_NEAR(mean, -2.5, 0.2);  // sigmoid of a symmetric draw averages 1/2
}

TEST(StructureTest, ShapeCorners) {
  EXPECT_EQ(distinct_value_dim(96, 32), 80);
  EXPECT_EQ(distinct_value_dim(128, 32), 104);
  EXPECT_EQ(distinct_value_dim(64, 16), 56);
  EXPECT_EQ(wider_value_dim(64, 32), 136);
  EXPECT_EQ(wider_value_dim(96, 32), 200);
  EXPECT_EQ(wider_value_dim(128, 16), 264);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const int64_t length = ragged_length(64, 7, seed);
    EXPECT_GT(length, 7 * 64);
    EXPECT_LT(length, 8 * 64);
    EXPECT_NE(length % 64, 0);
  }
  EXPECT_EQ(ragged_length(64, 7, 9), ragged_length(64, 7, 9));
}

}  // namespace
}  // namespace loupe::structure
