// The guard primitives: poison patterns, checksums, address overlap.
#include "subject/guards.hpp"

#include <cmath>
#include <cstring>
#include <set>

#include <gtest/gtest.h>

namespace loupe::subject {
namespace {

TEST(Poison, FillsEveryElementWithANaNAndCountsIt) {
  Tensor tensor(DType::kF32, {4});
  fill_poison(tensor, 42);
  for (float value : tensor.data<float>()) EXPECT_TRUE(std::isnan(value));
  EXPECT_EQ(count_poison(tensor, 42), 4);
  tensor.mutable_data<float>()[1] = 0.0f;
  tensor.mutable_data<float>()[2] = std::nanf("");  // an ordinary NaN is not the poison
  EXPECT_EQ(count_poison(tensor, 42), 2);
  // Another run's key does not recognise this run's poison.
  EXPECT_EQ(count_poison(tensor, 43), 0);
}

TEST(Poison, PayloadsDifferBetweenElementsAndRunsAndAreNeverTheDefaultNaN) {
  Tensor first(DType::kF32, {64});
  Tensor second(DType::kF32, {64});
  fill_poison(first, 1);
  fill_poison(second, 2);
  std::set<uint32_t> payloads;
  int same_across_runs = 0;
  for (int index = 0; index < 64; ++index) {
    uint32_t a = 0, b = 0;
    std::memcpy(&a, first.bytes() + 4 * index, 4);
    std::memcpy(&b, second.bytes() + 4 * index, 4);
    payloads.insert(a);
    same_across_runs += a == b;
    EXPECT_NE(a & 0x7FFFFFFFu, 0x7FC00000u);  // 0/0's NaN, which arithmetic produces
  }
  EXPECT_GT(payloads.size(), 60u);
  EXPECT_LT(same_across_runs, 4);
}

TEST(Poison, CoversDoublesIntegersAndBfloat16) {
  Tensor doubles(DType::kF64, {3});
  fill_poison(doubles, 7);
  EXPECT_EQ(count_poison(doubles, 7), 3);
  EXPECT_TRUE(std::isnan(doubles.data<double>()[0]));
  Tensor integers(DType::kI32, {2});
  fill_poison(integers, 7);
  EXPECT_EQ(integers.data<int32_t>()[0], -1);
  EXPECT_EQ(count_poison(integers, 7), 2);
  Tensor bf16(DType::kBF16, {5});
  fill_poison(bf16, 7);
  EXPECT_EQ(count_poison(bf16, 7), 5);
  EXPECT_TRUE(std::isnan(bf16.element_as_double(0)));
}

TEST(Poison, AFreshZeroTensorHoldsNone) {
  Tensor tensor(DType::kF32, {8});
  EXPECT_EQ(count_poison(tensor, 9), 0);
}

TEST(Checksum, ChangesWithAnyByteAndTheLength) {
  std::byte data[13] = {};
  const uint64_t zero = checksum_bytes(data, 13);
  data[12] = std::byte{1};  // in the tail past the last full word
  EXPECT_NE(checksum_bytes(data, 13), zero);
  data[12] = std::byte{0};
  data[3] = std::byte{1};
  EXPECT_NE(checksum_bytes(data, 13), zero);
  data[3] = std::byte{0};
  EXPECT_EQ(checksum_bytes(data, 13), zero);
  EXPECT_NE(checksum_bytes(data, 12), zero);
}

TEST(RangesOverlap, SharesAByteOrNot) {
  char buffer[16] = {};
  EXPECT_TRUE(ranges_overlap(buffer, 8, buffer + 7, 8));
  EXPECT_FALSE(ranges_overlap(buffer, 8, buffer + 8, 8));
  EXPECT_TRUE(ranges_overlap(buffer + 4, 2, buffer, 16));
  EXPECT_FALSE(ranges_overlap(buffer, 0, buffer, 8));
  EXPECT_FALSE(ranges_overlap(nullptr, 8, buffer, 8));
}

}  // namespace
}  // namespace loupe::subject
