// check/unshard.hpp — put a tensor back together from its rank shards (by a dims spec), and say
// which ranks, chunks and logical ranges hold the error of a comparison of the result.
//
// unshard() writes each shard's slabs straight into their place in the logical buffer: one pass
// over the data (partial sums add into a float64 buffer, then round once to the shards' dtype).
// attribute_error() is one more pass over the compared pair, summing squared error per piece of
// every sharded axis jointly, so a fault is named by rank and by logical range at once.
// Layout and grammar: docs/sharded-diff.md. Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "check/dims.hpp"
#include "loupe/tensor.hpp"

namespace loupe::check {

// One rank's piece of one tensor.
struct Shard {
  int64_t rank = 0;             // global rank
  std::vector<int64_t> coords;  // its rank along each group of the ParallelConfig, in that order
  Tensor tensor;
  std::string origin;  // the file (and tensor) it came from, for messages
};

// An axis cut across a group, with its pieces in logical order.
struct ShardedAxis {
  size_t axis = 0;  // index into the dims (and the logical shape)
  ParallelAxis group = ParallelAxis::kTp;
  size_t group_index = 0;  // into ParallelConfig::groups
  int64_t group_size = 1;
  ShardOrder order = ShardOrder::kNatural;
  // natural: W pieces, piece r held by rank r; zigzag: 2W chunks, chunk c held by rank
  // min(c, 2W-1-c) as its first (c < W) or second chunk. pieces() + 1 offsets along the axis.
  std::vector<int64_t> piece_begin;

  int64_t pieces() const { return static_cast<int64_t>(piece_begin.size()) - 1; }
  int64_t piece_rank(int64_t piece) const;
  int64_t piece_chunk(int64_t piece) const;  // 0: the rank's first chunk, 1: its second
};

struct ShardLayout {
  DimsSpec dims;
  ParallelConfig parallel;
  std::vector<int64_t> shape;  // logical
  std::vector<ShardedAxis> sharded;
  std::vector<ParallelAxis> partial;     // groups whose tensors are summed
  std::vector<ParallelAxis> replicated;  // groups of the run the dims do not mention
};

// A rank of a replicated group whose copy differs from the copy of that group's rank 0.
struct ReplicaMismatch {
  ParallelAxis group = ParallelAxis::kTp;
  int64_t rank = 0;            // global rank of the differing copy
  int64_t reference_rank = 0;  // global rank of the copy it was checked against
  int64_t differing = 0;       // elements whose bytes differ
  std::string origin;
};

struct Unsharded {
  Tensor tensor;  // logical, named by dims (tensor.axes)
  ShardLayout layout;
  std::vector<ReplicaMismatch> replica_mismatches;
};

// `shards` holds every global rank of `parallel` exactly once (any order). Throws Error(kInput)
// naming `what` (the tensor), the rank, its file and the axis when: a rank is missing or given
// twice, a shard's rank (number of axes) differs from the dims, a dtype differs from rank 0's, an
// axis that is not cut differs in extent, a naturally cut axis differs between ranks of the same
// group rank, a zigzag axis is odd or differs between ranks, or a partial sum is boolean. A dims
// group absent from `parallel` is Error(kUsage).
Unsharded unshard(std::span<const Shard> shards, const DimsSpec& dims,
                  const ParallelConfig& parallel, std::string_view what);

// Squared error per joint piece of the sharded axes, and what it says about ranks.
struct PieceShare {
  std::vector<int64_t> pieces;  // one piece index per sharded axis
  double squared_error = 0;
};
struct RankShare {
  int64_t rank = 0;  // along the axis's group
  double share = 0;  // of the total squared error
  // zigzag: the share of this rank's error in its first and second chunk; natural: {1}.
  std::vector<double> chunk_shares;
};
struct AxisAttribution {
  ShardedAxis axis;
  std::string axis_name;
  std::vector<double> piece_squared_error;  // per piece, logical order
  std::vector<RankShare> ranks;             // per rank of the group
  int64_t top_rank = 0;
  double top_share = 0;
};
struct ShardAttribution {
  double total_squared_error = 0;
  int64_t nonfinite_skipped = 0;  // pairs with a NaN/Inf left out (worst_coords locates them)
  std::vector<AxisAttribution> axes;
  // When the error sits in one rank of every sharded axis: true, with the global ranks holding
  // it (every rank of a partial or replicated group with those coords).
  bool concentrated = false;
  std::vector<int64_t> global_ranks;
  double concentrated_share = 0;  // of the total, held by the joint piece set named
};

// A rank "holds" the error when its share is at least this (as for concentrated profiles).
inline constexpr double kRankHoldsShare = 0.8;

// REQUIRES: a and b have layout.shape. Empty attribution (no axes) when nothing is sharded.
ShardAttribution attribute_error(const Tensor& a, const Tensor& b, const ShardLayout& layout);

// "CP rank 5 holds 100% of the squared error (fair share 12.5%): its second zigzag chunk,
// t in [40960, 49152)"; for several axes, one clause each, then the global ranks. Empty when no
// axis is sharded or there is no error.
std::string attribution_sentence(const ShardAttribution& attribution);

// ---- dump metadata (safetensors __metadata__ keys; docs/formats.md, "Dump metadata") ----
struct DumpMetadata {
  std::optional<std::string> dims;                  // loupe.dims.<tensor>, else loupe.dims
  std::optional<std::string> parallel;              // loupe.parallel
  std::optional<int64_t> rank;                      // loupe.rank
  std::map<ParallelAxis, int64_t> group_ranks;      // loupe.rank.<group>
  std::optional<int64_t> step;                      // loupe.step
  std::optional<std::vector<int64_t>> request_ids;  // loupe.request_ids, comma-separated
  std::optional<std::vector<int64_t>> seq_lens;     // loupe.seq_lens, comma-separated
};
// Reads loupe's keys for `tensor` from a file's metadata; unknown keys are ignored. Throws
// Error(kInput) naming `origin`, the key and what was expected for a malformed number or group.
DumpMetadata parse_dump_metadata(const std::map<std::string, std::string>& metadata,
                                 const std::string& tensor, const std::string& origin);

}  // namespace loupe::check
