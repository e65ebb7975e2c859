#include "check/unshard.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "check/compare.hpp"
#include "check/metrics.hpp"

namespace loupe::check {
namespace {

std::string rank_label(const Shard& shard) {
  return "rank " + std::to_string(shard.rank) + " (" + shard.origin + ")";
}

std::string share_percent(double share) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g%%", share * 100);
  return text;
}

// How one shard's slabs map into the logical tensor.
struct SlabPlan {
  std::vector<int64_t> local_shape;
  // Per axis: for each local coordinate, the logical coordinate (cut axes), else identity.
  std::vector<std::vector<int64_t>> logical_of_local;
};

// Calls emit(source_offset, destination_offset, count) for every contiguous run, in source order.
template <class Emit>
void for_each_run(const SlabPlan& plan, const std::vector<int64_t>& logical_shape,
                  std::optional<size_t> last_cut, Emit&& emit) {
  const size_t rank = logical_shape.size();
  std::vector<int64_t> strides(rank, 1);
  for (size_t axis = rank; axis-- > 1;) strides[axis - 1] = strides[axis] * logical_shape[axis];
  int64_t total = 1;
  for (int64_t extent : plan.local_shape) total *= extent;
  if (total == 0) return;
  if (!last_cut) {
    emit(0, 0, total);
    return;
  }
  // Runs: everything after the last cut axis is whole, so a run is a stretch of the last cut
  // axis whose logical coordinates are consecutive, times the inner size.
  const size_t cut = *last_cut;
  int64_t inner = 1;
  for (size_t axis = cut + 1; axis < rank; ++axis) inner *= logical_shape[axis];
  const std::vector<int64_t>& cut_map = plan.logical_of_local[cut];
  std::vector<std::pair<int64_t, int64_t>> segments;  // (local begin, length)
  for (int64_t local = 0; local < plan.local_shape[cut];) {
    int64_t end = local + 1;
    while (end < plan.local_shape[cut] && cut_map[end] == cut_map[end - 1] + 1) ++end;
    segments.emplace_back(local, end - local);
    local = end;
  }
  std::vector<int64_t> coords(cut, 0);
  int64_t source = 0;
  while (true) {
    int64_t outer_destination = 0;
    for (size_t axis = 0; axis < cut; ++axis) {
      outer_destination += plan.logical_of_local[axis][coords[axis]] * strides[axis];
    }
    for (const auto& [begin, length] : segments) {
      emit(source + begin * inner, outer_destination + cut_map[begin] * strides[cut],
           length * inner);
    }
    source += plan.local_shape[cut] * inner;
    size_t axis = cut;
    while (axis > 0) {
      --axis;
      if (++coords[axis] < plan.local_shape[axis]) break;
      coords[axis] = 0;
      if (axis == 0) return;
    }
    if (cut == 0) return;
  }
}

// Storage for a large logical tensor. Fresh memory costs a page fault per 4 KiB page on first
// touch, which for a 128 MiB tensor took as long as copying it; 2 MiB-aligned storage advised
// for transparent huge pages faults 512 times less often (where THP is off, nothing changes).
std::shared_ptr<std::byte[]> logical_storage(size_t byte_count) {
  constexpr size_t kHugePage = size_t{2} << 20;
  if (byte_count < 2 * kHugePage) return std::shared_ptr<std::byte[]>(new std::byte[byte_count]);
  void* memory = nullptr;
  const size_t rounded = (byte_count + kHugePage - 1) / kHugePage * kHugePage;
  if (posix_memalign(&memory, kHugePage, rounded) != 0) throw std::bad_alloc();
  madvise(memory, rounded, MADV_HUGEPAGE);  // advice only: failure leaves ordinary pages
  return std::shared_ptr<std::byte[]>(static_cast<std::byte*>(memory),
                                      [](std::byte* pointer) { std::free(pointer); });
}

int64_t count_differing(const Tensor& left, const Tensor& right) {
  const size_t element = dtype_size(left.dtype());
  const int64_t numel = left.numel();
  int64_t differing = 0;
  for (int64_t index = 0; index < numel; ++index) {
    if (std::memcmp(left.bytes() + index * element, right.bytes() + index * element, element)) {
      ++differing;
    }
  }
  return differing;
}

}  // namespace

int64_t ShardedAxis::piece_rank(int64_t piece) const {
  if (order == ShardOrder::kNatural) return piece;
  return piece < group_size ? piece : 2 * group_size - 1 - piece;
}

int64_t ShardedAxis::piece_chunk(int64_t piece) const {
  return order == ShardOrder::kZigzag && piece >= group_size ? 1 : 0;
}

Unsharded unshard(std::span<const Shard> shards, const DimsSpec& dims,
                  const ParallelConfig& parallel, std::string_view what) {
  const std::string name(what);
  const std::string hint =
      "each rank-<r>/ directory holds that rank's shard; check --dims and --parallel against "
      "how the run was cut (docs/sharded-diff.md)";
  Unsharded result;
  ShardLayout& layout = result.layout;
  layout.dims = dims;
  layout.parallel = parallel;
  for (const DimAxis& axis : dims.axes) {
    if (axis.group && !parallel.has(*axis.group)) {
      throw Error(ErrorCode::kUsage,
                  "'" + name + "': dims '" + dims.text + "' name group " +
                      std::string(parallel_axis_name(*axis.group)) + " on axis '" + axis.name +
                      "', but the run's groups are '" + parallel.to_string() + "'",
                  "give the group's size with --parallel (e.g. --parallel tp=2,cp=4)");
    }
  }
  // One shard per global rank.
  const int64_t world = parallel.world_size();
  std::vector<const Shard*> by_rank(static_cast<size_t>(world), nullptr);
  for (const Shard& shard : shards) {
    if (shard.rank < 0 || shard.rank >= world) {
      throw Error(ErrorCode::kInput,
                  "'" + name + "': " + rank_label(shard) + " is outside the " +
                      std::to_string(world) + " ranks of '" + parallel.to_string() + "'",
                  hint);
    }
    if (by_rank[shard.rank]) {
      throw Error(ErrorCode::kInput,
                  "'" + name + "': rank " + std::to_string(shard.rank) + " is given twice (" +
                      by_rank[shard.rank]->origin + " and " + shard.origin + ")",
                  hint);
    }
    by_rank[shard.rank] = &shard;
  }
  for (int64_t rank = 0; rank < world; ++rank) {
    if (!by_rank[rank]) {
      throw Error(ErrorCode::kInput,
                  "'" + name + "': no shard from rank " + std::to_string(rank) + " of the " +
                      std::to_string(world) + " ranks of '" + parallel.to_string() + "'",
                  hint);
    }
  }
  const Shard& first = *by_rank[0];
  const size_t rank_count = dims.axes.size();
  for (const Shard* shard : by_rank) {
    if (static_cast<size_t>(shard->tensor.rank()) != rank_count) {
      throw Error(ErrorCode::kInput,
                  "'" + name + "': " + rank_label(*shard) + " has shape " +
                      shape_to_string(shard->tensor.shape()) + " (" +
                      std::to_string(shard->tensor.rank()) + " axes), but dims '" + dims.text +
                      "' name " + std::to_string(rank_count),
                  hint);
    }
    if (shard->tensor.dtype() != first.tensor.dtype()) {
      throw Error(ErrorCode::kInput,
                  "'" + name + "': " + rank_label(*shard) + " is " +
                      std::string(dtype_name(shard->tensor.dtype())) + ", rank 0 is " +
                      std::string(dtype_name(first.tensor.dtype())) + "; expected one dtype",
                  hint);
    }
  }

  // Groups: cut, partial, replicated.
  for (const auto& [group, size] : parallel.groups) {
    const DimAxis* axis = dims.axis_of(group);
    if (!axis) {
      layout.replicated.push_back(group);
    } else if (axis->partial) {
      layout.partial.push_back(group);
      if (first.tensor.dtype() == DType::kBool) {
        throw Error(ErrorCode::kInput,
                    "'" + name + "': dims '" + dims.text + "' make it a partial sum over " +
                        std::string(parallel_axis_name(group)) + ", but it is boolean",
                    hint);
      }
    }
  }
  auto group_index = [&](ParallelAxis group) {
    for (size_t index = 0; index < parallel.groups.size(); ++index) {
      if (parallel.groups[index].first == group) return index;
    }
    return size_t{0};
  };

  // The logical shape, checking every shard's extents on the way.
  layout.shape.assign(rank_count, 0);
  for (size_t axis_index = 0; axis_index < rank_count; ++axis_index) {
    const DimAxis& axis = dims.axes[axis_index];
    const bool cut = axis.group && !axis.partial;
    if (!cut) {
      const int64_t extent = first.tensor.shape()[axis_index];
      for (const Shard* shard : by_rank) {
        if (shard->tensor.shape()[axis_index] != extent) {
          throw Error(ErrorCode::kInput,
                      "'" + name + "': " + rank_label(*shard) + ": axis '" + axis.name +
                          "' has extent " + std::to_string(shard->tensor.shape()[axis_index]) +
                          ", rank 0 has " + std::to_string(extent) + "; expected equal, since '" +
                          axis.name + "' is not cut",
                      hint);
        }
      }
      layout.shape[axis_index] = extent;
      continue;
    }
    ShardedAxis sharded;
    sharded.axis = axis_index;
    sharded.group = *axis.group;
    sharded.group_index = group_index(*axis.group);
    sharded.group_size = parallel.groups[sharded.group_index].second;
    sharded.order = axis.order;
    const int64_t width = sharded.group_size;
    // The extent each group rank holds, from the first shard with that group rank.
    std::vector<int64_t> local(static_cast<size_t>(width), -1);
    std::vector<const Shard*> holder(static_cast<size_t>(width), nullptr);
    for (const Shard* shard : by_rank) {
      const int64_t group_rank = shard->coords[sharded.group_index];
      const int64_t extent = shard->tensor.shape()[axis_index];
      if (local[group_rank] < 0) {
        local[group_rank] = extent;
        holder[group_rank] = shard;
      } else if (local[group_rank] != extent) {
        throw Error(ErrorCode::kInput,
                    "'" + name + "': " + rank_label(*shard) + ": axis '" + axis.name +
                        "' has extent " + std::to_string(extent) + ", but rank " +
                        std::to_string(holder[group_rank]->rank) + ", with the same " +
                        parallel_axis_label(sharded.group) + " rank " + std::to_string(group_rank) +
                        ", has " + std::to_string(local[group_rank]),
                    hint);
      }
    }
    sharded.piece_begin.push_back(0);
    if (axis.order == ShardOrder::kNatural) {
      for (int64_t group_rank = 0; group_rank < width; ++group_rank) {
        sharded.piece_begin.push_back(sharded.piece_begin.back() + local[group_rank]);
      }
    } else {
      for (int64_t group_rank = 0; group_rank < width; ++group_rank) {
        if (local[group_rank] % 2 != 0 || local[group_rank] != local[0]) {
          throw Error(
              ErrorCode::kInput,
              "'" + name + "': " + rank_label(*holder[group_rank]) + ": zigzag axis '" + axis.name +
                  "' has extent " + std::to_string(local[group_rank]) +
                  (local[group_rank] % 2 != 0
                       ? "; expected an even extent (two equal chunks)"
                       : ", but " + parallel_axis_label(sharded.group) + " rank 0 has " +
                             std::to_string(local[0]) + "; expected equal extents on every rank"),
              hint);
        }
      }
      const int64_t chunk = local[0] / 2;
      for (int64_t piece = 0; piece < 2 * width; ++piece) {
        sharded.piece_begin.push_back(sharded.piece_begin.back() + chunk);
      }
    }
    layout.shape[axis_index] = sharded.piece_begin.back();
    layout.sharded.push_back(std::move(sharded));
  }

  // Replicas: a rank with a nonzero coordinate on a replicated group holds a copy of the shard
  // with that coordinate 0; check the copy rather than trust it.
  std::vector<const Shard*> contributing;
  for (const Shard* shard : by_rank) {
    std::vector<int64_t> reference_coords = shard->coords;
    bool replica = false;
    std::optional<ParallelAxis> replica_group;
    for (ParallelAxis group : layout.replicated) {
      const size_t index = group_index(group);
      if (reference_coords[index] != 0) {
        replica = true;
        if (!replica_group) replica_group = group;
        reference_coords[index] = 0;
      }
    }
    if (!replica) {
      contributing.push_back(shard);
      continue;
    }
    const Shard& reference = *by_rank[parallel.rank_of(reference_coords)];
    if (shard->tensor.shape() != reference.tensor.shape()) {
      throw Error(ErrorCode::kInput,
                  "'" + name + "': " + rank_label(*shard) + " has shape " +
                      shape_to_string(shard->tensor.shape()) + ", but it is a " +
                      std::string(parallel_axis_name(*replica_group)) + " replica of rank " +
                      std::to_string(reference.rank) + ", shape " +
                      shape_to_string(reference.tensor.shape()),
                  hint);
    }
    if (std::memcmp(shard->tensor.bytes(), reference.tensor.bytes(), shard->tensor.nbytes())) {
      result.replica_mismatches.push_back({*replica_group, shard->rank, reference.rank,
                                           count_differing(shard->tensor, reference.tensor),
                                           shard->origin});
    }
  }

  // Assemble.
  std::optional<size_t> last_cut;
  for (const ShardedAxis& sharded : layout.sharded) last_cut = sharded.axis;
  auto plan_of = [&](const Shard& shard) {
    SlabPlan plan;
    plan.local_shape = shard.tensor.shape();
    plan.logical_of_local.resize(rank_count);
    for (const ShardedAxis& sharded : layout.sharded) {
      const int64_t group_rank = shard.coords[sharded.group_index];
      const int64_t extent = plan.local_shape[sharded.axis];
      std::vector<int64_t>& map = plan.logical_of_local[sharded.axis];
      map.resize(static_cast<size_t>(extent));
      if (sharded.order == ShardOrder::kNatural) {
        for (int64_t local = 0; local < extent; ++local) {
          map[local] = sharded.piece_begin[group_rank] + local;
        }
      } else {
        const int64_t chunk = extent / 2;
        const int64_t second = 2 * sharded.group_size - 1 - group_rank;
        for (int64_t local = 0; local < extent; ++local) {
          map[local] = local < chunk ? sharded.piece_begin[group_rank] + local
                                     : sharded.piece_begin[second] + local - chunk;
        }
      }
    }
    for (size_t axis = 0; axis < rank_count; ++axis) {
      if (plan.logical_of_local[axis].empty()) {
        plan.logical_of_local[axis].resize(static_cast<size_t>(plan.local_shape[axis]));
        for (int64_t local = 0; local < plan.local_shape[axis]; ++local) {
          plan.logical_of_local[axis][local] = local;
        }
      }
    }
    return plan;
  };

  const DType dtype = first.tensor.dtype();
  const size_t element = dtype_size(dtype);
  if (layout.partial.empty()) {
    // The contributing shards' runs tile the logical tensor, so every byte is written once:
    // storage without the zero fill Tensor(dtype, shape) would do (a second pass over it).
    int64_t numel = 1;
    for (int64_t extent : layout.shape) numel *= extent;
    const size_t byte_count = static_cast<size_t>(numel) * element;
    std::shared_ptr<std::byte[]> storage =
        byte_count > 0 ? logical_storage(byte_count) : std::shared_ptr<std::byte[]>();
    std::byte* destination = storage.get();
    for (const Shard* shard : contributing) {
      const std::byte* source = shard->tensor.bytes();
      for_each_run(plan_of(*shard), layout.shape, last_cut,
                   [&](int64_t from, int64_t to, int64_t count) {
                     std::memcpy(destination + to * element, source + from * element,
                                 static_cast<size_t>(count) * element);
                   });
    }
    result.tensor = byte_count > 0
                        ? Tensor(dtype, layout.shape,
                                 std::shared_ptr<const void>(storage, storage.get()), storage.get())
                        : Tensor(dtype, layout.shape);
  } else {
    // A partial sum adds every contributing rank's slab in float64, then rounds once.
    Tensor sum(DType::kF64, layout.shape);
    double* destination = sum.mutable_data<double>().data();
    std::vector<double> decoded;
    for (const Shard* shard : contributing) {
      for_each_run(plan_of(*shard), layout.shape, last_cut,
                   [&](int64_t from, int64_t to, int64_t count) {
                     decoded.resize(static_cast<size_t>(count));
                     detail::decode_to_double(shard->tensor, from, count, decoded.data());
                     for (int64_t index = 0; index < count; ++index) {
                       destination[to + index] += decoded[index];
                     }
                   });
    }
    result.tensor = dtype == DType::kF64 ? sum : sum.converted(dtype);
  }
  result.tensor.axes = dims.names();
  return result;
}

ShardAttribution attribute_error(const Tensor& a, const Tensor& b, const ShardLayout& layout) {
  ShardAttribution result;
  if (layout.sharded.empty()) return result;
  const std::vector<int64_t>& shape = layout.shape;
  const size_t rank_count = shape.size();
  const size_t cut_count = layout.sharded.size();
  // Joint bins over the pieces of every cut axis (mixed radix, first cut axis slowest).
  std::vector<int64_t> radix;
  int64_t bin_count = 1;
  for (const ShardedAxis& sharded : layout.sharded) {
    radix.push_back(sharded.pieces());
    bin_count *= sharded.pieces();
  }
  std::vector<double> bins(static_cast<size_t>(bin_count), 0.0);
  std::vector<int64_t> strides(rank_count, 1);
  for (size_t axis = rank_count; axis-- > 1;) strides[axis - 1] = strides[axis] * shape[axis];
  const size_t last = layout.sharded.back().axis;
  const int64_t inner = strides[last];
  // The piece of every coordinate along each cut axis.
  std::vector<std::vector<int64_t>> piece_of(cut_count);
  for (size_t index = 0; index < cut_count; ++index) {
    const ShardedAxis& sharded = layout.sharded[index];
    piece_of[index].resize(static_cast<size_t>(shape[sharded.axis]));
    for (int64_t piece = 0; piece < sharded.pieces(); ++piece) {
      for (int64_t position = sharded.piece_begin[piece]; position < sharded.piece_begin[piece + 1];
           ++position) {
        piece_of[index][position] = piece;
      }
    }
  }
  const bool native_f32 = a.dtype() == DType::kF32 && b.dtype() == DType::kF32;
  const float* a32 = native_f32 ? a.data<float>().data() : nullptr;
  const float* b32 = native_f32 ? b.data<float>().data() : nullptr;
  std::vector<double> block_a, block_b;
  // Sum of squared finite differences over [begin, begin + count); counts skipped pairs.
  auto run_sum = [&](int64_t begin, int64_t count) {
    if (native_f32) {
      // Eight lanes keep the float64 sum vectorisable without reassociating one accumulator.
      double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      const float* pa = a32 + begin;
      const float* pb = b32 + begin;
      int64_t index = 0;
      for (; index + 8 <= count; index += 8) {
        for (int lane = 0; lane < 8; ++lane) {
          const double diff = static_cast<double>(pa[index + lane]) - pb[index + lane];
          lanes[lane] += diff * diff;
        }
      }
      for (; index < count; ++index) {
        const double diff = static_cast<double>(pa[index]) - pb[index];
        lanes[0] += diff * diff;
      }
      double sum = 0;
      for (double lane : lanes) sum += lane;
      if (std::isfinite(sum)) return sum;
      // Rare: a NaN/Inf in the run; redo it leaving those pairs out.
      sum = 0;
      for (index = 0; index < count; ++index) {
        const double diff = static_cast<double>(pa[index]) - pb[index];
        if (std::isfinite(diff)) {
          sum += diff * diff;
        } else {
          ++result.nonfinite_skipped;
        }
      }
      return sum;
    }
    double sum = 0;
    constexpr int64_t kBlock = 4096;
    block_a.resize(kBlock);
    block_b.resize(kBlock);
    for (int64_t offset = 0; offset < count; offset += kBlock) {
      const int64_t length = std::min(kBlock, count - offset);
      detail::decode_to_double(a, begin + offset, length, block_a.data());
      detail::decode_to_double(b, begin + offset, length, block_b.data());
      for (int64_t index = 0; index < length; ++index) {
        const double diff = block_a[index] - block_b[index];
        if (std::isfinite(diff)) {
          sum += diff * diff;
        } else {
          ++result.nonfinite_skipped;
        }
      }
    }
    return sum;
  };

  // Walk the axes before the last cut axis; along it, one run per piece.
  const ShardedAxis& last_axis = layout.sharded.back();
  std::vector<int64_t> coords(last, 0);
  const bool empty = std::any_of(shape.begin(), shape.end(), [](int64_t e) { return e == 0; });
  while (!empty) {
    int64_t base = 0, outer_bin = 0;
    for (size_t axis = 0; axis < last; ++axis) base += coords[axis] * strides[axis];
    for (size_t index = 0; index + 1 < cut_count; ++index) {
      outer_bin = outer_bin * radix[index] + piece_of[index][coords[layout.sharded[index].axis]];
    }
    for (int64_t piece = 0; piece < last_axis.pieces(); ++piece) {
      const int64_t begin = last_axis.piece_begin[piece];
      const int64_t length = last_axis.piece_begin[piece + 1] - begin;
      bins[outer_bin * radix.back() + piece] += run_sum(base + begin * inner, length * inner);
    }
    if (last == 0) break;
    size_t axis = last;
    bool done = false;
    while (true) {
      --axis;
      if (++coords[axis] < shape[axis]) break;
      coords[axis] = 0;
      if (axis == 0) {
        done = true;
        break;
      }
    }
    if (done) break;
  }

  for (double value : bins) result.total_squared_error += value;
  const double total = result.total_squared_error;
  // Marginals per cut axis.
  for (size_t index = 0; index < cut_count; ++index) {
    AxisAttribution attribution;
    attribution.axis = layout.sharded[index];
    attribution.axis_name = layout.dims.axes[attribution.axis.axis].name;
    attribution.piece_squared_error.assign(static_cast<size_t>(radix[index]), 0.0);
    int64_t stride = 1;
    for (size_t later = index + 1; later < cut_count; ++later) stride *= radix[later];
    for (int64_t bin = 0; bin < bin_count; ++bin) {
      attribution.piece_squared_error[(bin / stride) % radix[index]] += bins[bin];
    }
    const ShardedAxis& sharded = attribution.axis;
    attribution.ranks.resize(static_cast<size_t>(sharded.group_size));
    for (int64_t group_rank = 0; group_rank < sharded.group_size; ++group_rank) {
      attribution.ranks[group_rank].rank = group_rank;
      attribution.ranks[group_rank].chunk_shares.assign(
          sharded.order == ShardOrder::kZigzag ? 2 : 1, 0.0);
    }
    std::vector<double> rank_error(static_cast<size_t>(sharded.group_size), 0.0);
    for (int64_t piece = 0; piece < sharded.pieces(); ++piece) {
      const int64_t owner = sharded.piece_rank(piece);
      rank_error[owner] += attribution.piece_squared_error[piece];
      attribution.ranks[owner].chunk_shares[sharded.piece_chunk(piece)] +=
          attribution.piece_squared_error[piece];
    }
    for (int64_t group_rank = 0; group_rank < sharded.group_size; ++group_rank) {
      RankShare& share = attribution.ranks[group_rank];
      share.share = total > 0 ? rank_error[group_rank] / total : 0.0;
      for (double& chunk : share.chunk_shares) {
        chunk = rank_error[group_rank] > 0 ? chunk / rank_error[group_rank] : 0.0;
      }
      if (share.share > attribution.top_share) {
        attribution.top_share = share.share;
        attribution.top_rank = group_rank;
      }
    }
    result.axes.push_back(std::move(attribution));
  }

  // Concentrated: one rank of every cut axis holds the error; the share held jointly.
  if (total > 0) {
    result.concentrated =
        std::all_of(result.axes.begin(), result.axes.end(), [](const AxisAttribution& attribution) {
          return attribution.top_share >= kRankHoldsShare;
        });
    double joint = 0;
    for (int64_t bin = 0; bin < bin_count; ++bin) {
      int64_t rest = bin;
      bool inside = true;
      for (size_t index = cut_count; index-- > 0;) {
        const int64_t piece = rest % radix[index];
        rest /= radix[index];
        if (layout.sharded[index].piece_rank(piece) != result.axes[index].top_rank) inside = false;
      }
      if (inside) joint += bins[bin];
    }
    result.concentrated_share = joint / total;
    if (result.concentrated) {
      for (int64_t rank = 0; rank < layout.parallel.world_size(); ++rank) {
        const std::vector<int64_t> coords_of = layout.parallel.coords_of(rank);
        bool matches = true;
        for (const AxisAttribution& attribution : result.axes) {
          if (coords_of[attribution.axis.group_index] != attribution.top_rank) matches = false;
        }
        if (matches) result.global_ranks.push_back(rank);
      }
    }
  }
  return result;
}

std::string attribution_sentence(const ShardAttribution& attribution) {
  if (attribution.axes.empty() || !(attribution.total_squared_error > 0)) return {};
  std::string out;
  for (const AxisAttribution& axis : attribution.axes) {
    const ShardedAxis& sharded = axis.axis;
    const RankShare& top = axis.ranks[axis.top_rank];
    const bool holds = axis.top_share >= kRankHoldsShare;
    if (!out.empty()) out += "; ";
    out += parallel_axis_label(sharded.group) + " rank " + std::to_string(axis.top_rank) +
           (holds ? " holds " : " holds the most, ") + share_percent(axis.top_share) +
           " of the squared error (fair share " +
           share_percent(1.0 / static_cast<double>(sharded.group_size)) + ")";
    // Name the chunk and the logical range of the rank's error.
    std::vector<int64_t> pieces;
    for (int64_t piece = 0; piece < sharded.pieces(); ++piece) {
      if (sharded.piece_rank(piece) == axis.top_rank) pieces.push_back(piece);
    }
    if (sharded.order == ShardOrder::kZigzag) {
      const int64_t chunk = top.chunk_shares[1] > top.chunk_shares[0] ? 1 : 0;
      if (top.chunk_shares[chunk] >= kRankHoldsShare) {
        const int64_t piece = pieces[chunk == 0 ? 0 : 1];
        out += ": its " + std::string(chunk == 0 ? "first" : "second") + " zigzag chunk, " +
               axis.axis_name + " in [" + std::to_string(sharded.piece_begin[piece]) + ", " +
               std::to_string(sharded.piece_begin[piece + 1]) + ")";
        continue;
      }
      out += ": both zigzag chunks (" + share_percent(top.chunk_shares[0]) + " / " +
             share_percent(top.chunk_shares[1]) + "), " + axis.axis_name + " in [" +
             std::to_string(sharded.piece_begin[pieces[0]]) + ", " +
             std::to_string(sharded.piece_begin[pieces[0] + 1]) + ") and [" +
             std::to_string(sharded.piece_begin[pieces[1]]) + ", " +
             std::to_string(sharded.piece_begin[pieces[1] + 1]) + ")";
      continue;
    }
    out += ": " + axis.axis_name + " in [" + std::to_string(sharded.piece_begin[pieces[0]]) + ", " +
           std::to_string(sharded.piece_begin[pieces[0] + 1]) + ")";
  }
  if (attribution.concentrated && !attribution.global_ranks.empty()) {
    out += attribution.global_ranks.size() == 1 ? "; global rank " : "; global ranks ";
    for (size_t index = 0; index < attribution.global_ranks.size(); ++index) {
      out += (index ? ", " : "") + std::to_string(attribution.global_ranks[index]);
    }
  }
  return out;
}

DumpMetadata parse_dump_metadata(const std::map<std::string, std::string>& metadata,
                                 const std::string& tensor, const std::string& origin) {
  DumpMetadata out;
  auto integer = [&](const std::string& key, const std::string& text) {
    size_t used = 0;
    long long value = 0;
    bool ok = !text.empty();
    try {
      value = std::stoll(text, &used);
    } catch (const std::exception&) {
      ok = false;
    }
    if (!ok || used != text.size() || value < 0) {
      throw Error(ErrorCode::kInput,
                  origin + ": metadata " + key + " '" + text + "': expected a whole number >= 0",
                  "docs/formats.md lists loupe's metadata keys");
    }
    return static_cast<int64_t>(value);
  };
  auto integer_list = [&](const std::string& key, const std::string& text) {
    std::vector<int64_t> values;
    size_t start = 0;
    while (true) {
      const size_t comma = text.find(',', start);
      std::string item =
          text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      while (!item.empty() && item.front() == ' ') item.erase(item.begin());
      while (!item.empty() && item.back() == ' ') item.pop_back();
      values.push_back(integer(key + " item " + std::to_string(values.size() + 1), item));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return values;
  };
  for (const auto& [key, value] : metadata) {
    if (key == "loupe.dims" && !out.dims) {
      out.dims = value;
    } else if (key == "loupe.dims." + tensor) {
      out.dims = value;
    } else if (key == "loupe.parallel") {
      out.parallel = value;
    } else if (key == "loupe.rank") {
      out.rank = integer(key, value);
    } else if (key.rfind("loupe.rank.", 0) == 0) {
      const std::string group_name = key.substr(11);
      const auto group = parse_parallel_axis(group_name);
      if (!group) {
        throw Error(ErrorCode::kInput,
                    origin + ": metadata key '" + key + "': unknown group '" + group_name +
                        "'; expected loupe.rank.tp, .cp, .ep, .sp or .dp",
                    "docs/formats.md lists loupe's metadata keys");
      }
      out.group_ranks[*group] = integer(key, value);
    } else if (key == "loupe.step") {
      out.step = integer(key, value);
    } else if (key == "loupe.request_ids") {
      out.request_ids = integer_list(key, value);
    } else if (key == "loupe.seq_lens") {
      out.seq_lens = integer_list(key, value);
    }
  }
  // A per-tensor key wins over the file-wide one whatever the map's order.
  const auto specific = metadata.find("loupe.dims." + tensor);
  if (specific != metadata.end()) out.dims = specific->second;
  return out;
}

}  // namespace loupe::check
