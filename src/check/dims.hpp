// check/dims.hpp — how a tensor dumped by many ranks is laid out: the dims spec of one tensor
// (`b t(cp,zigzag) h(tp) d`), the parallel groups of a run (`tp=2,cp=4`) and the rank layout that
// numbers the ranks. Grammar and layout: docs/sharded-diff.md.
//
//   spec      := token (' '+ token)*
//   token     := name | name '(' modifier (',' modifier)* ')'
//   name      := [A-Za-z_][A-Za-z0-9_]*
//   modifier  := 'tp' | 'cp' | 'ep' | 'sp' | 'dp'      the group that shards this axis
//              | 'natural' | 'zigzag'                   how the axis is cut (default natural)
//              | 'partial'                              the tensor is a partial sum over the group
//
// Rank layout: the groups in the order `--parallel` (or `loupe.parallel`) lists them, the FIRST
// varying fastest: with tp=2,cp=4, global rank r has tp rank r % 2 and cp rank r / 2.
// Thread-safety: pure functions of their arguments; values are plain data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loupe/error.hpp"

namespace loupe::check {

enum class ParallelAxis { kTp, kCp, kEp, kSp, kDp };
inline constexpr ParallelAxis kAllParallelAxes[] = {
    ParallelAxis::kTp, ParallelAxis::kCp, ParallelAxis::kEp, ParallelAxis::kSp, ParallelAxis::kDp};
// "tp", "cp", ...
std::string_view parallel_axis_name(ParallelAxis axis);
// "TP", "CP", ... for sentences.
std::string parallel_axis_label(ParallelAxis axis);
std::optional<ParallelAxis> parse_parallel_axis(std::string_view name);

// natural: rank r holds the r-th of W contiguous pieces. zigzag (ring-attention load balance):
// the axis is cut into 2W chunks and rank r holds chunks r and 2W-1-r, in that order.
enum class ShardOrder { kNatural, kZigzag };
std::string_view shard_order_name(ShardOrder order);

struct DimAxis {
  std::string name;
  std::optional<ParallelAxis> group;  // the group that shards the axis (or, with partial, sums it)
  ShardOrder order = ShardOrder::kNatural;
  // The tensor is a partial sum across `group`: every rank holds the axis whole, and the logical
  // tensor is the sum of the group's tensors.
  bool partial = false;
};

struct DimsSpec {
  std::string text;  // as given
  std::vector<DimAxis> axes;

  std::vector<std::string> names() const;
  // The token that mentions `group` (sharded or partial), or nullptr.
  const DimAxis* axis_of(ParallelAxis group) const;
};

// Parses a dims spec. `origin` names where the text came from in errors ("--dims",
// "rank-0/o.safetensors: metadata loupe.dims"). Throws Error(code) naming the token's position
// (1-based), the token and what was expected; also for a repeated axis name, a group used by two
// axes, two groups or two orders on one axis, and zigzag or partial without a group.
DimsSpec parse_dims(std::string_view text, std::string_view origin,
                    ErrorCode code = ErrorCode::kUsage);

// The parallel groups of a run, in rank-layout order (the first varies fastest).
struct ParallelConfig {
  std::vector<std::pair<ParallelAxis, int64_t>> groups;

  int64_t world_size() const;
  // 1 for a group the run does not have.
  int64_t size_of(ParallelAxis group) const;
  bool has(ParallelAxis group) const;
  // The rank along each group (in `groups` order) of global rank `rank`.
  // REQUIRES: 0 <= rank < world_size().
  std::vector<int64_t> coords_of(int64_t rank) const;
  // The inverse of coords_of.
  int64_t rank_of(const std::vector<int64_t>& coords) const;
  // "tp=2,cp=4"
  std::string to_string() const;
};

// Parses "tp=2,cp=4" (sizes >= 1, each group once). Throws Error(code) naming the item's
// position and what was expected.
ParallelConfig parse_parallel(std::string_view text, std::string_view origin,
                              ErrorCode code = ErrorCode::kUsage);

}  // namespace loupe::check
