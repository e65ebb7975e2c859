#include "check/unshard.hpp"

#include <limits>
#include <ostream>

#include <gtest/gtest.h>

#include "loupe/error.hpp"

namespace loupe::check {
namespace {

// A float32 tensor whose element i is i (exact up to 2^24).
Tensor iota(std::vector<int64_t> shape, float offset = 0) {
  Tensor tensor(DType::kF32, std::move(shape));
  auto data = tensor.mutable_data<float>();
  for (size_t index = 0; index < data.size(); ++index)
    data[index] = offset + static_cast<float>(index);
  return tensor;
}

// The logical coordinate of local coordinate `local` on a cut axis (the definition, element by
// element, independent of unshard's slab runs).
int64_t logical_coordinate(int64_t local, int64_t local_extent, int64_t group_rank, int64_t width,
                           ShardOrder order) {
  if (order == ShardOrder::kNatural) return group_rank * local_extent + local;
  const int64_t chunk = local_extent / 2;
  return local < chunk ? group_rank * chunk + local
                       : (2 * width - 1 - group_rank) * chunk + local - chunk;
}

// Cuts `logical` into one shard per rank by the spec, element by element (equal pieces).
std::vector<Shard> cut(const Tensor& logical, const DimsSpec& dims,
                       const ParallelConfig& parallel) {
  std::vector<Shard> shards;
  const std::vector<int64_t>& shape = logical.shape();
  for (int64_t rank = 0; rank < parallel.world_size(); ++rank) {
    Shard shard;
    shard.rank = rank;
    shard.coords = parallel.coords_of(rank);
    shard.origin = "rank-" + std::to_string(rank) + "/x.npy";
    std::vector<int64_t> local_shape = shape;
    for (size_t axis = 0; axis < shape.size(); ++axis) {
      const DimAxis& dim = dims.axes[axis];
      if (dim.group && !dim.partial) local_shape[axis] /= parallel.size_of(*dim.group);
    }
    shard.tensor = Tensor(DType::kF32, local_shape);
    auto out = shard.tensor.mutable_data<float>();
    const auto in = logical.data<float>();
    std::vector<int64_t> coords(shape.size(), 0);
    for (size_t flat = 0; flat < out.size(); ++flat) {
      int64_t source = 0;
      for (size_t axis = 0; axis < shape.size(); ++axis) {
        const DimAxis& dim = dims.axes[axis];
        int64_t coordinate = coords[axis];
        if (dim.group && !dim.partial) {
          size_t group_index = 0;
          while (parallel.groups[group_index].first != *dim.group) ++group_index;
          coordinate = logical_coordinate(coordinate, local_shape[axis], shard.coords[group_index],
                                          parallel.groups[group_index].second, dim.order);
        }
        source = source * shape[axis] + coordinate;
      }
      out[flat] = in[source];
      for (size_t axis = shape.size(); axis-- > 0;) {
        if (++coords[axis] < local_shape[axis]) break;
        coords[axis] = 0;
      }
    }
    shards.push_back(std::move(shard));
  }
  return shards;
}

void expect_equal(const Tensor& left, const Tensor& right) {
  ASSERT_EQ(left.shape(), right.shape());
  const auto a = left.data<float>();
  const auto b = right.data<float>();
  for (size_t index = 0; index < a.size(); ++index) ASSERT_EQ(a[index], b[index]) << index;
}

std::string unshard_error(std::span<const Shard> shards, const std::string& dims,
                          const std::string& parallel) {
  try {
    unshard(shards, parse_dims(dims, "--dims"), parse_parallel(parallel, "--parallel"), "x");
  } catch (const Error& error) {
    return error.message();
  }
  ADD_FAILURE() << "no error";
  return {};
}

struct Case {
  std::vector<int64_t> shape;
  std::string dims;
  std::string parallel;
};

// "b t(cp) d on cp=4" in test output instead of the struct's bytes.
void PrintTo(const Case& param, std::ostream* out) {
  *out << "'" << param.dims << "' on " << param.parallel;
}

class RoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(RoundTrip, UnshardInvertsTheCut) {
  const Case& param = GetParam();
  const Tensor logical = iota(param.shape);
  const DimsSpec dims = parse_dims(param.dims, "--dims");
  const ParallelConfig parallel = parse_parallel(param.parallel, "--parallel");
  const std::vector<Shard> shards = cut(logical, dims, parallel);
  const Unsharded result = unshard(shards, dims, parallel, "x");
  expect_equal(result.tensor, logical);
  EXPECT_EQ(result.tensor.axes, dims.names());
  EXPECT_TRUE(result.replica_mismatches.empty());
}

INSTANTIATE_TEST_SUITE_P(
    EveryOrderAndGroup, RoundTrip,
    ::testing::Values(Case{{2, 8, 3}, "b t(cp) d", "cp=4"},
                      Case{{2, 8, 3}, "b t(cp,zigzag) d", "cp=2"},
                      Case{{1, 16, 4, 2}, "b t(cp,zigzag) h(tp) d", "tp=2,cp=4"},
                      Case{{1, 16, 4, 2}, "b t(cp,zigzag) h(tp) d", "cp=4,tp=2"},
                      Case{{4, 6, 2}, "e(ep) t(sp) d", "ep=2,sp=3"},
                      Case{{6, 4}, "r(dp) d(tp)", "dp=3,tp=2"},
                      Case{{3, 8}, "t d(tp)", "tp=8"},  // the innermost axis cut
                      Case{{2, 8, 3}, "b t(cp) d", "cp=1"}));

TEST(Unshard, ZigzagPutsEachRanksChunksAtRAndTwoWMinusOneMinusR) {
  // T = 8 on cp = 2: chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  std::vector<Shard> shards(2);
  shards[0] = {0, {0}, Tensor(DType::kF32, {4}), "rank-0"};
  shards[1] = {1, {1}, Tensor(DType::kF32, {4}), "rank-1"};
  const float rank0[] = {0, 1, 6, 7}, rank1[] = {2, 3, 4, 5};
  std::copy(rank0, rank0 + 4, shards[0].tensor.mutable_data<float>().begin());
  std::copy(rank1, rank1 + 4, shards[1].tensor.mutable_data<float>().begin());
  const Unsharded result =
      unshard(shards, parse_dims("t(cp,zigzag)", "--dims"), parse_parallel("cp=2", "p"), "x");
  expect_equal(result.tensor, iota({8}));
  ASSERT_EQ(result.layout.sharded.size(), 1u);
  EXPECT_EQ(result.layout.sharded[0].piece_begin, (std::vector<int64_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(result.layout.sharded[0].piece_rank(3), 0);
  EXPECT_EQ(result.layout.sharded[0].piece_chunk(3), 1);
  EXPECT_EQ(result.layout.sharded[0].piece_rank(2), 1);
}

TEST(Unshard, NaturalOrderAcceptsUnevenShards) {
  std::vector<Shard> shards = {{0, {0}, iota({3, 2}), "rank-0"},
                               {1, {1}, iota({1, 2}, 6), "rank-1"}};
  const Unsharded result =
      unshard(shards, parse_dims("t(cp) d", "--dims"), parse_parallel("cp=2", "p"), "x");
  expect_equal(result.tensor, iota({4, 2}));
  EXPECT_EQ(result.layout.sharded[0].piece_begin, (std::vector<int64_t>{0, 3, 4}));
}

TEST(Unshard, PartialSumsAcrossTheGroup) {
  // tp=2 partial over d, cut over t by cp=2 as well: 4 ranks, tp fastest.
  const ParallelConfig parallel = parse_parallel("tp=2,cp=2", "p");
  const DimsSpec dims = parse_dims("t(cp) d(tp,partial)", "--dims");
  std::vector<Shard> shards;
  for (int64_t rank = 0; rank < 4; ++rank) {
    const auto coords = parallel.coords_of(rank);
    // tp rank 0 holds i, tp rank 1 holds 0.5 i, over the cp rank's rows.
    Tensor part = iota({2, 3}, static_cast<float>(coords[1] * 6));
    for (float& value : part.mutable_data<float>()) value *= coords[0] == 0 ? 1.0f : 0.5f;
    shards.push_back({rank, coords, part, "rank-" + std::to_string(rank)});
  }
  const Unsharded result = unshard(shards, dims, parallel, "x");
  Tensor expected = iota({4, 3});
  for (float& value : expected.mutable_data<float>()) value *= 1.5f;
  expect_equal(result.tensor, expected);
  EXPECT_EQ(result.layout.partial, (std::vector<ParallelAxis>{ParallelAxis::kTp}));
  EXPECT_EQ(result.tensor.dtype(), DType::kF32);
}

TEST(Unshard, ReplicatedGroupsAreCheckedNotTrusted) {
  // tp=2 is absent from the dims: tp rank 1 holds a copy of tp rank 0's shard.
  const ParallelConfig parallel = parse_parallel("tp=2,cp=2", "p");
  const DimsSpec dims = parse_dims("t(cp) d", "--dims");
  std::vector<Shard> shards;
  for (int64_t rank = 0; rank < 4; ++rank) {
    const auto coords = parallel.coords_of(rank);
    shards.push_back({rank, coords, iota({2, 3}, static_cast<float>(coords[1] * 6)),
                      "rank-" + std::to_string(rank) + "/x.npy"});
  }
  shards[3].tensor.mutable_data<float>()[4] = -1;  // tp 1, cp 1: one element off
  const Unsharded result = unshard(shards, dims, parallel, "x");
  expect_equal(result.tensor, iota({4, 3}));
  ASSERT_EQ(result.replica_mismatches.size(), 1u);
  EXPECT_EQ(result.replica_mismatches[0].group, ParallelAxis::kTp);
  EXPECT_EQ(result.replica_mismatches[0].rank, 3);
  EXPECT_EQ(result.replica_mismatches[0].reference_rank, 2);
  EXPECT_EQ(result.replica_mismatches[0].differing, 1);
  EXPECT_EQ(result.layout.replicated, (std::vector<ParallelAxis>{ParallelAxis::kTp}));
}

TEST(Unshard, ErrorsNameTheRankTheFileAndTheAxis) {
  const ParallelConfig cp2 = parse_parallel("cp=2", "p");
  std::vector<Shard> good = cut(iota({8, 2}), parse_dims("t(cp) d", "d"), cp2);

  std::vector<Shard> missing = {good[0]};
  EXPECT_EQ(unshard_error(missing, "t(cp) d", "cp=2"),
            "'x': no shard from rank 1 of the 2 ranks of 'cp=2'");

  std::vector<Shard> twice = {good[0], good[0]};
  EXPECT_EQ(unshard_error(twice, "t(cp) d", "cp=2"),
            "'x': rank 0 is given twice (rank-0/x.npy and rank-0/x.npy)");

  std::vector<Shard> outside = good;
  outside[1].rank = 5;
  EXPECT_EQ(unshard_error(outside, "t(cp) d", "cp=2"),
            "'x': rank 5 (rank-1/x.npy) is outside the 2 ranks of 'cp=2'");

  EXPECT_EQ(unshard_error(good, "t(cp) d e", "cp=2"),
            "'x': rank 0 (rank-0/x.npy) has shape [4, 2] (2 axes), but dims 't(cp) d e' name 3");

  std::vector<Shard> dtype = good;
  dtype[1].tensor = dtype[1].tensor.converted(DType::kF64);
  EXPECT_EQ(unshard_error(dtype, "t(cp) d", "cp=2"),
            "'x': rank 1 (rank-1/x.npy) is float64, rank 0 is float32; expected one dtype");

  std::vector<Shard> uncut = good;
  uncut[1].tensor = iota({4, 3});
  EXPECT_EQ(unshard_error(uncut, "t(cp) d", "cp=2"),
            "'x': rank 1 (rank-1/x.npy): axis 'd' has extent 3, rank 0 has 2; expected equal, "
            "since 'd' is not cut");

  std::vector<Shard> odd = good;
  odd[0].tensor = iota({3, 2});
  odd[1].tensor = iota({3, 2});
  EXPECT_EQ(unshard_error(odd, "t(cp,zigzag) d", "cp=2"),
            "'x': rank 0 (rank-0/x.npy): zigzag axis 't' has extent 3; expected an even extent "
            "(two equal chunks)");

  std::vector<Shard> unequal = good;
  unequal[1].tensor = iota({2, 2});
  EXPECT_EQ(unshard_error(unequal, "t(cp,zigzag) d", "cp=2"),
            "'x': rank 1 (rank-1/x.npy): zigzag axis 't' has extent 2, but CP rank 0 has 4; "
            "expected equal extents on every rank");

  // Natural cut: ranks sharing a cp rank (here tp replicas) must agree on the extent.
  const ParallelConfig tp2cp2 = parse_parallel("tp=2,cp=2", "p");
  std::vector<Shard> natural = cut(iota({8, 2}), parse_dims("t(cp) d", "d"), tp2cp2);
  natural[2].tensor = iota({3, 2});
  EXPECT_EQ(unshard_error(natural, "t(cp) d", "tp=2,cp=2"),
            "'x': rank 3 (rank-3/x.npy): axis 't' has extent 4, but rank 2, with the same CP "
            "rank 1, has 3");

  try {
    unshard(good, parse_dims("t(cp) d(tp)", "d"), cp2, "x");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(),
              "'x': dims 't(cp) d(tp)' name group tp on axis 'd', but the run's groups are 'cp=2'");
  }

  std::vector<Shard> boolean = good;
  for (Shard& shard : boolean) shard.tensor = shard.tensor.converted(DType::kBool);
  EXPECT_EQ(unshard_error(boolean, "t d(cp,partial)", "cp=2"),
            "'x': dims 't d(cp,partial)' make it a partial sum over cp, but it is boolean");
}

TEST(AttributeError, AFaultInOneZigzagChunkIsNamedByRankChunkAndRange) {
  // T = 64 over cp = 4 zigzag: 8 chunks of 8; chunk 6 belongs to rank 1 as its second chunk.
  const DimsSpec dims = parse_dims("b t(cp,zigzag) d", "--dims");
  const ParallelConfig parallel = parse_parallel("cp=4", "p");
  const Tensor reference = iota({2, 64, 3});
  const Unsharded unsharded = unshard(cut(reference, dims, parallel), dims, parallel, "x");
  Tensor candidate = iota({2, 64, 3});
  auto data = candidate.mutable_data<float>();
  data[(1 * 64 + 50) * 3 + 2] += 4;  // b=1, t=50 (chunk 6), d=2
  data[(0 * 64 + 49) * 3 + 0] += 3;  // b=0, t=49
  const ShardAttribution attribution = attribute_error(candidate, reference, unsharded.layout);
  EXPECT_DOUBLE_EQ(attribution.total_squared_error, 25.0);
  ASSERT_EQ(attribution.axes.size(), 1u);
  EXPECT_EQ(attribution.axes[0].top_rank, 1);
  EXPECT_DOUBLE_EQ(attribution.axes[0].top_share, 1.0);
  EXPECT_DOUBLE_EQ(attribution.axes[0].ranks[1].chunk_shares[1], 1.0);
  EXPECT_DOUBLE_EQ(attribution.axes[0].piece_squared_error[6], 25.0);
  EXPECT_TRUE(attribution.concentrated);
  EXPECT_EQ(attribution.global_ranks, (std::vector<int64_t>{1}));
  EXPECT_EQ(attribution_sentence(attribution),
            "CP rank 1 holds 100% of the squared error (fair share 25%): its second zigzag "
            "chunk, t in [48, 56); global rank 1");
}

TEST(AttributeError, TwoGroupsNameTheGlobalRank) {
  const DimsSpec dims = parse_dims("t(cp) h(tp) d", "--dims");
  const ParallelConfig parallel = parse_parallel("tp=2,cp=4", "p");
  const Tensor reference = iota({16, 4, 2});
  const Unsharded unsharded = unshard(cut(reference, dims, parallel), dims, parallel, "x");
  Tensor candidate = iota({16, 4, 2});
  candidate.mutable_data<float>()[(9 * 4 + 3) * 2 + 1] += 1;  // t=9 (cp rank 2), h=3 (tp rank 1)
  const ShardAttribution attribution = attribute_error(candidate, reference, unsharded.layout);
  EXPECT_TRUE(attribution.concentrated);
  EXPECT_EQ(attribution.global_ranks, (std::vector<int64_t>{5}));  // tp 1 + 2 * cp 2
  EXPECT_EQ(attribution_sentence(attribution),
            "CP rank 2 holds 100% of the squared error (fair share 25%): t in [8, 12); TP rank 1 "
            "holds 100% of the squared error (fair share 50%): h in [2, 4); global rank 5");
}

TEST(AttributeError, SpreadErrorIsNotConcentrated) {
  const DimsSpec dims = parse_dims("t(cp) d", "--dims");
  const ParallelConfig parallel = parse_parallel("cp=2", "p");
  const Tensor reference = iota({4, 2});
  const Unsharded unsharded = unshard(cut(reference, dims, parallel), dims, parallel, "x");
  Tensor candidate = iota({4, 2});
  for (float& value : candidate.mutable_data<float>()) value += 1;
  const ShardAttribution attribution = attribute_error(candidate, reference, unsharded.layout);
  EXPECT_FALSE(attribution.concentrated);
  EXPECT_DOUBLE_EQ(attribution.axes[0].top_share, 0.5);
  EXPECT_EQ(attribution_sentence(attribution),
            "CP rank 0 holds the most, 50% of the squared error (fair share 50%): t in [0, 2)");
  // No error at all: nothing to say.
  EXPECT_EQ(attribution_sentence(attribute_error(reference, reference, unsharded.layout)), "");
}

TEST(AttributeError, NonFloat32PairsAndNonFiniteValues) {
  const DimsSpec dims = parse_dims("t(cp) d", "--dims");
  const ParallelConfig parallel = parse_parallel("cp=2", "p");
  const Tensor reference = iota({4, 2});
  const Unsharded unsharded = unshard(cut(reference, dims, parallel), dims, parallel, "x");
  Tensor candidate = iota({4, 2});
  candidate.mutable_data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  candidate.mutable_data<float>()[6] += 2;
  const ShardAttribution f32 = attribute_error(candidate, reference, unsharded.layout);
  EXPECT_EQ(f32.nonfinite_skipped, 1);
  EXPECT_DOUBLE_EQ(f32.total_squared_error, 4.0);
  const ShardAttribution f64 = attribute_error(candidate.converted(DType::kF64),
                                               reference.converted(DType::kF64), unsharded.layout);
  EXPECT_EQ(f64.nonfinite_skipped, 1);
  EXPECT_DOUBLE_EQ(f64.total_squared_error, 4.0);
  EXPECT_EQ(f64.axes[0].top_rank, 1);
}

TEST(DumpMetadata, ReadsLoupesKeys) {
  const DumpMetadata meta = parse_dump_metadata({{"loupe.dims", "b t h d"},
                                                 {"loupe.dims.o", "b t(cp) h d"},
                                                 {"loupe.parallel", "cp=2"},
                                                 {"loupe.rank", "1"},
                                                 {"loupe.rank.cp", "1"},
                                                 {"loupe.step", "3"},
                                                 {"loupe.request_ids", "7, 2,5"},
                                                 {"loupe.seq_lens", "1,1,1"},
                                                 {"other", "ignored"}},
                                                "o", "f.safetensors");
  EXPECT_EQ(meta.dims, "b t(cp) h d");
  EXPECT_EQ(meta.parallel, "cp=2");
  EXPECT_EQ(meta.rank, 1);
  EXPECT_EQ(meta.group_ranks.at(ParallelAxis::kCp), 1);
  EXPECT_EQ(meta.step, 3);
  EXPECT_EQ(meta.request_ids, (std::vector<int64_t>{7, 2, 5}));
  EXPECT_EQ(meta.seq_lens, (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(parse_dump_metadata({{"loupe.dims", "b t"}}, "other", "f").dims, "b t");
}

TEST(DumpMetadata, MalformedValuesNameTheKey) {
  auto message = [](const std::map<std::string, std::string>& metadata) {
    try {
      parse_dump_metadata(metadata, "o", "f.safetensors");
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInput);
      return error.message();
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({{"loupe.step", "two"}}),
            "f.safetensors: metadata loupe.step 'two': expected a whole number >= 0");
  EXPECT_EQ(message({{"loupe.rank", "-1"}}),
            "f.safetensors: metadata loupe.rank '-1': expected a whole number >= 0");
  EXPECT_EQ(message({{"loupe.request_ids", "1,,2"}}),
            "f.safetensors: metadata loupe.request_ids item 2 '': expected a whole number >= 0");
  EXPECT_EQ(message({{"loupe.rank.xp", "1"}}),
            "f.safetensors: metadata key 'loupe.rank.xp': unknown group 'xp'; expected "
            "loupe.rank.tp, .cp, .ep, .sp or .dp");
}

}  // namespace
}  // namespace loupe::check
