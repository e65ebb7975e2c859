#include "check/localise.hpp"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "loupe/error.hpp"

namespace loupe::check {
namespace {

std::vector<ProfileBucket> buckets_from(const std::vector<double>& values) {
  std::vector<ProfileBucket> buckets;
  for (size_t index = 0; index < values.size(); ++index) {
    const int64_t begin = static_cast<int64_t>(index) * 16;
    // 16 positions per bucket, so squared error = 16 * value^2 (with rms(B) = 1).
    buckets.push_back({begin, begin + 16, values[index], 16 * values[index] * values[index]});
  }
  return buckets;
}

// A deterministic wiggle in [-1, 1].
double wiggle(size_t index) { return std::sin(static_cast<double>(index) * 12.9898); }

TEST(ClassifyProfileTest, ErrorProportionalToPositionIsGrowing) {
  std::vector<double> values;
  for (size_t index = 0; index < 64; ++index) values.push_back(1e-3 * (index + 0.5));
  const ProfileClassification shape = classify_profile(buckets_from(values));
  EXPECT_EQ(shape.shape, ProfileShape::kGrowing);
  EXPECT_DOUBLE_EQ(shape.spearman, 1.0);
  // First quarter mean 8e-3, last 56e-3: x7.
  EXPECT_DOUBLE_EQ(shape.end_to_start, 7.0);
  // 1e-3 per bucket of 16 positions = 0.0625 per 1000 positions.
  EXPECT_NEAR(shape.slope_per_1000, 0.0625, 1e-12);
}

TEST(ClassifyProfileTest, NoisyConstantErrorIsFlat) {
  std::vector<double> values;
  for (size_t index = 0; index < 64; ++index) values.push_back(1e-3 * (1 + 0.2 * wiggle(index)));
  EXPECT_EQ(classify_profile(buckets_from(values)).shape, ProfileShape::kFlat);
}

TEST(ClassifyProfileTest, NoErrorIsFlat) {
  EXPECT_EQ(classify_profile(buckets_from(std::vector<double>(64, 0.0))).shape,
            ProfileShape::kFlat);
}

TEST(ClassifyProfileTest, ErrorInOneRegionIsConcentrated) {
  std::vector<double> values(64, 1e-4);
  for (size_t index = 20; index < 24; ++index) values[index] = 1e-2;
  const ProfileClassification shape = classify_profile(buckets_from(values));
  EXPECT_EQ(shape.shape, ProfileShape::kConcentrated);
  EXPECT_EQ(shape.region_begin, 20 * 16);
  EXPECT_EQ(shape.region_end, 24 * 16);
  EXPECT_GT(shape.region_share, 0.99);
}

TEST(ClassifyProfileTest, IsolatedSpikesFarApartAreSpiky) {
  std::vector<double> values(64, 1e-4);
  values[5] = 1e-2;
  values[40] = 1e-2;
  const ProfileClassification shape = classify_profile(buckets_from(values));
  EXPECT_EQ(shape.shape, ProfileShape::kSpiky);
  EXPECT_EQ(shape.spikes, (std::vector<int64_t>{5 * 16, 40 * 16}));
}

TEST(LocaliseTest, CoordsAreNamedInCOrder) {
  const Coords coords = coords_of(23, {2, 3, 4}, {"T", "H", "V"});
  EXPECT_EQ(coords_to_string(coords), "T=1 H=2 V=3");
  EXPECT_EQ(resolve_axis_names(2, {}), (std::vector<std::string>{"d0", "d1"}));
  EXPECT_EQ(resolve_axis_names(2, {"T", "V"}), (std::vector<std::string>{"T", "V"}));
}

// B random; A = B plus an error in head 1 that grows with t (a drifting accumulation), and a
// much smaller constant error elsewhere.
void make_pair(bool drifting, Tensor& a, Tensor& b) {
  const int64_t length = 256, heads = 4, width = 8;
  a = Tensor(DType::kF32, {length, heads, width});
  b = Tensor(DType::kF32, {length, heads, width});
  auto data_a = a.mutable_data<float>();
  auto data_b = b.mutable_data<float>();
  for (int64_t t = 0; t < length; ++t) {
    for (int64_t head = 0; head < heads; ++head) {
      for (int64_t v = 0; v < width; ++v) {
        const size_t index = static_cast<size_t>((t * heads + head) * width + v);
        data_b[index] = static_cast<float>(wiggle(index));
        const double sign = (index % 2 == 0) ? 1.0 : -1.0;
        double error = 1e-6 * sign;
        if (head == 1) error = drifting ? 1e-4 * (t + 1) * sign : 1e-3 * sign;
        data_a[index] = static_cast<float>(data_b[index] + error);
      }
    }
  }
}

TEST(LocaliseTest, DriftingPairIsGrowingAndNamesTheHead) {
  Tensor a, b;
  make_pair(true, a, b);
  const Metrics metrics = compute_metrics(a, b);
  const Localisation where = localise(a, b, metrics, {"T", "H", "V"}, std::string("T"));
  ASSERT_TRUE(where.profile);
  EXPECT_EQ(where.profile->buckets.size(), 64u);
  EXPECT_EQ(where.profile->buckets[1].begin, 4);
  EXPECT_EQ(where.profile->classification.shape, ProfileShape::kGrowing);
  ASSERT_FALSE(where.top_slices.empty());
  EXPECT_EQ(where.top_slices[0].axis, "H");
  EXPECT_EQ(where.top_slices[0].index, 1);
  EXPECT_GT(where.top_slices[0].share, 0.99);
  EXPECT_EQ(where.worst_coords[1], (std::pair<std::string, int64_t>{"H", 1}));
}

TEST(LocaliseTest, ConstantErrorPairIsFlat) {
  Tensor a, b;
  make_pair(false, a, b);
  const Metrics metrics = compute_metrics(a, b);
  const Localisation where = localise(a, b, metrics, {"T", "H", "V"}, std::string("T"));
  ASSERT_TRUE(where.profile);
  EXPECT_EQ(where.profile->classification.shape, ProfileShape::kFlat);
}

TEST(LocaliseTest, ShortAxesGetOneBucketPerPosition) {
  Tensor a(DType::kF32, {3, 2}), b(DType::kF32, {3, 2});
  a.mutable_data<float>()[5] = 1;  // T=2, V=1
  const Metrics metrics = compute_metrics(a, b);
  const Localisation where = localise(a, b, metrics, {"T", "V"}, std::string("T"));
  ASSERT_TRUE(where.profile);
  ASSERT_EQ(where.profile->buckets.size(), 3u);
  EXPECT_EQ(where.profile->buckets[2].squared_error, 1.0);
  EXPECT_EQ(where.profile->buckets[0].squared_error, 0.0);
  EXPECT_EQ(coords_to_string(where.worst_coords), "T=2 V=1");
}

TEST(LocaliseTest, UnknownAxisIsAUsageError) {
  Tensor a(DType::kF32, {2, 2}), b(DType::kF32, {2, 2});
  try {
    localise(a, b, compute_metrics(a, b), {"d0", "d1"}, std::string("T"));
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(), "--along T: no such axis; the axes are d0,d1");
  }
}

TEST(PeriodicityTest, ErrorEveryChunkEndFindsThePeriodNotItsDivisorsOrMultiples) {
  // Positions == 63 (mod 64) carry the error over rounding noise; 2, 4, ... 32 also hold all of
  // it in one residue, but only a fraction of those positions carry error; 128 splits it.
  std::vector<double> error(1024);
  for (size_t t = 0; t < error.size(); ++t) error[t] = 1e-7 * (1 + 0.5 * wiggle(t));
  for (size_t t = 63; t < error.size(); t += 64) error[t] = 1e-2;
  const auto found = find_periodicity(error);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->period, 64);
  EXPECT_EQ(found->residue, 63);
  EXPECT_EQ(found->occurrences, 16);
  EXPECT_GT(found->share, 0.999);
}

TEST(PeriodicityTest, OffByOneRingWrapIsPeriodic) {
  // A ring of 4 that rereads a stale slot at every wrap: error at t == 0 (mod 4) from t = 4.
  std::vector<double> error(37, 0.0);
  for (size_t t = 4; t < error.size(); t += 4) error[t] = 1e-3 * (1 + 0.1 * wiggle(t));
  const auto found = find_periodicity(error);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->period, 4);
  EXPECT_EQ(found->residue, 0);
}

TEST(PeriodicityTest, FlatGrowingOrSingleErrorsAreNotPeriodic) {
  std::vector<double> flat(512), growing(512), single(512, 0.0);
  for (size_t t = 0; t < 512; ++t) {
    flat[t] = 1e-3 * (1 + 0.2 * wiggle(t));
    growing[t] = 1e-6 * static_cast<double>(t + 1);
  }
  single[100] = 1.0;
  EXPECT_FALSE(find_periodicity(flat).has_value());
  EXPECT_FALSE(find_periodicity(growing).has_value());
  EXPECT_FALSE(find_periodicity(single).has_value());
  EXPECT_FALSE(find_periodicity(std::vector<double>(512, 0.0)).has_value());
}

TEST(FirstExceedingTest, NamesTheFirstPositionAboveTheTolerance) {
  std::vector<double> error(100, 1e-7);
  error[32] = 2e-3;
  error[70] = 5e-2;
  EXPECT_EQ(first_exceeding(error, 1e-3), 32);
  EXPECT_EQ(first_exceeding(error, 1e-2), 70);
  EXPECT_FALSE(first_exceeding(error, 1.0).has_value());
}

TEST(LocaliseTest, SlicesSharingTheErrorAreAllListed) {
  // (T=8, H=4): heads 1 and 3 carry equal error, 0 and 2 none.
  Tensor a(DType::kF64, {8, 4}), b(DType::kF64, {8, 4});
  auto values_a = a.mutable_data<double>();
  auto values_b = b.mutable_data<double>();
  for (int64_t t = 0; t < 8; ++t) {
    for (int64_t h = 0; h < 4; ++h) {
      values_b[t * 4 + h] = 1.0;
      values_a[t * 4 + h] = h % 2 == 1 ? 1.1 : 1.0;
    }
  }
  const Metrics metrics = compute_metrics(a, b);
  const Localisation found = localise(a, b, metrics, {"T", "H"}, std::string("T"), 1e-3);
  ASSERT_EQ(found.top_slices.size(), 1u);
  EXPECT_EQ(found.top_slices[0].sharing, (std::vector<int64_t>{1, 3}));
  EXPECT_NEAR(found.top_slices[0].sharing_share, 1.0, 1e-12);
  EXPECT_EQ(found.first_exceeding, 0);
}

}  // namespace
}  // namespace loupe::check
