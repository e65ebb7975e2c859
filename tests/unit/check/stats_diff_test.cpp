// Stats-only dumps: loupe's stats of a tensor equal the Python package's (same definitions), and
// the comparison rule (hash, non-finite counts, norm and quantile relative differences).
#include "check/stats_diff.hpp"

#include <cmath>

#include <gtest/gtest.h>

namespace loupe::check {
namespace {

Tensor f32(std::vector<float> values) {
  Tensor tensor(DType::kF32, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), tensor.mutable_data<float>().begin());
  return tensor;
}

TEST(TensorStatsTest, NormMeanQuantilesAndCountsOfTheFiniteValues) {
  const TensorStats stats = tensor_stats("x", f32({3, NAN, 4, INFINITY, 0}));
  EXPECT_EQ(stats.dtype, "float32");
  EXPECT_EQ(stats.shape, std::vector<int64_t>{5});
  EXPECT_EQ(stats.norm, 5.0);
  EXPECT_EQ(stats.mean, 7.0 / 3.0);
  EXPECT_EQ(stats.finite, 3);
  EXPECT_EQ(stats.nan_count, 1);
  EXPECT_EQ(stats.inf_count, 1);
  // numpy.quantile([0, 3, 4], [0, 0.01, 0.5, 0.99, 1]) (python/tests/test_dump.py asserts the
  // same).
  ASSERT_EQ(stats.quantiles.size(), 5u);
  EXPECT_EQ(stats.quantiles[0], 0.0);
  EXPECT_DOUBLE_EQ(stats.quantiles[1], 0.06);
  EXPECT_EQ(stats.quantiles[2], 3.0);
  EXPECT_DOUBLE_EQ(stats.quantiles[3], 3.98);
  EXPECT_EQ(stats.quantiles[4], 4.0);
  // SHA-256 of the float32 bytes: equal bytes, equal hash; one ulp apart, another hash.
  EXPECT_EQ(tensor_stats("y", f32({3, NAN, 4, INFINITY, 0})).sha256, stats.sha256);
  EXPECT_NE(tensor_stats("y", f32({3, NAN, std::nextafter(4.0f, 5.0f), INFINITY, 0})).sha256,
            stats.sha256);
  EXPECT_EQ(stats.sha256.size(), 64u);
}

}  // namespace
}  // namespace loupe::check
