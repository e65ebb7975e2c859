// Collectives matched across ranks: arrival skew, the last arriver, the straggler and what it ran
// just before, communication hidden by compute per rank, and the ranks' clocks compared on the
// collectives' ends.
#include <algorithm>
#include <map>
#include <set>

#include "trace/analyze/analyze.hpp"

namespace loupe::trace {
namespace {

bool is_collective(std::string_view name) {
  for (std::string_view prefix : {"nccl:", "ncclDevKernel", "ncclKernel", "mpi:", "MPI_"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

// The string value of "key": "value" in a slice's args text; empty when absent.
std::string arg_string(std::string_view args, std::string_view key) {
  const std::string quoted = "\"" + std::string(key) + "\"";
  size_t at = args.find(quoted);
  if (at == std::string_view::npos) return {};
  at = args.find(':', at + quoted.size());
  if (at == std::string_view::npos) return {};
  at = args.find_first_not_of(" \t", at + 1);
  if (at == std::string_view::npos) return {};
  if (args[at] == '"') {
    const size_t end = args.find('"', at + 1);
    return end == std::string_view::npos ? std::string()
                                         : std::string(args.substr(at + 1, end - at - 1));
  }
  const size_t end = args.find_first_of(",}", at);
  return std::string(args.substr(at, end == std::string_view::npos ? args.size() - at : end - at));
}

int64_t median(std::vector<int64_t> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

// The slice a thread ran just before `id`: its latest sibling (same track, same parent) ending
// at or before `id` starts; the parent when it has none. Siblings on one track do not overlap, so
// scanning back from `id`'s place in the track's start order, the first sibling that has ended is
// the latest; the scan never goes back past the parent's start. (It used to scan the track from
// its beginning for every call: quadratic in a long rank trace's collectives.)
SliceId slice_before(const Model& model, const TrackIndex& index, SliceId id) {
  const TrackId track = model.slices.track[id];
  const SliceId parent = model.slices.parent[id];
  const int64_t start = model.slices.start_ns[id];
  const std::vector<SliceId>& slices = index.slices(track);
  const auto by_start = [&](SliceId slice, int64_t ts) {
    return model.slices.start_ns[slice] < ts;
  };
  const auto first = parent == kNoSlice ? slices.begin()
                                        : std::lower_bound(slices.begin(), slices.end(),
                                                           model.slices.start_ns[parent], by_start);
  auto at = std::upper_bound(slices.begin(), slices.end(), start, [&](int64_t ts, SliceId slice) {
    return ts < model.slices.start_ns[slice];
  });
  while (at != first) {
    const SliceId other = *--at;
    if (other == id || model.slices.parent[other] != parent) continue;
    if (model.slices.end_ns[other] > start) continue;
    return other;
  }
  return parent;
}

}  // namespace

Collectives compute_collectives(const Model& model, const TrackIndex& index) {
  Collectives out;
  std::set<int> rank_set;
  for (const FileInfo& file : model.files) {
    if (file.rank >= 0) rank_set.insert(file.rank);
  }
  if (rank_set.size() < 2) return out;
  out.ranks.assign(rank_set.begin(), rank_set.end());
  const size_t ranks = out.ranks.size();
  std::map<int, size_t> position;
  for (size_t at = 0; at < ranks; ++at) position[out.ranks[at]] = at;

  // group -> per rank -> collective slices in start order.
  std::map<std::string, std::vector<std::vector<SliceId>>> groups;
  bool any_kernel = false;
  for (SliceId id = 0; id < model.slices.size(); ++id) {
    if (!is_collective(model.slice_name(id))) continue;
    const TrackId track = model.slices.track[id];
    const int rank = model.track_rank(track);
    if (rank < 0 || model.tracks[track].lane == Lane::kAnnotation) continue;
    const bool kernel = model.tracks[track].kind == TrackKind::kGpuStream;
    any_kernel |= kernel;
    std::string group_name = arg_string(model.slice_args(id), "Process Group Name");
    const std::string group =
        std::string(kernel ? "kernel" : "host") + " pg " + (group_name.empty() ? "0" : group_name);
    auto& per_rank = groups[group];
    per_rank.resize(ranks);
    per_rank[position[rank]].push_back(id);
  }
  out.per_rank.resize(ranks);
  for (size_t at = 0; at < ranks; ++at) out.per_rank[at].rank = out.ranks[at];

  for (auto& [group, per_rank] : groups) {
    size_t shortest = SIZE_MAX, longest = 0;
    for (auto& slices : per_rank) {
      std::sort(slices.begin(), slices.end(), [&](SliceId left, SliceId right) {
        return model.slices.start_ns[left] < model.slices.start_ns[right];
      });
      shortest = std::min(shortest, slices.size());
      longest = std::max(longest, slices.size());
    }
    for (const auto& slices : per_rank) out.unmatched += slices.size() - shortest;
    const bool decides = (group.rfind("kernel", 0) == 0) == any_kernel;
    for (size_t n = 0; n < shortest; ++n) {
      CollectiveInstance instance;
      instance.group = group;
      instance.index = n;
      instance.decides = decides;
      for (size_t at = 0; at < ranks; ++at) instance.slices.push_back(per_rank[at][n]);
      out.instances.push_back(std::move(instance));
    }
  }

  // Clocks: the ends of one collective coincide on every rank (none leaves before the last
  // arrives), so end differences measure the clocks' offset; their spread bounds it.
  std::vector<std::vector<int64_t>> end_offsets(ranks);
  for (const CollectiveInstance& instance : out.instances) {
    if (!instance.decides) continue;
    const int64_t reference = model.slices.end_ns[instance.slices[0]];
    for (size_t at = 1; at < ranks; ++at) {
      end_offsets[at].push_back(model.slices.end_ns[instance.slices[at]] - reference);
    }
  }
  const bool shared_clock = model.alignment.find("share the clock domain") != std::string::npos;
  int64_t worst_uncertainty = 0;
  for (size_t at = 1; at < ranks; ++at) {
    RankCollectives& rank = out.per_rank[at];
    rank.clock_samples = end_offsets[at].size();
    if (end_offsets[at].empty()) continue;
    rank.clock_offset_ns = median(end_offsets[at]);
    for (int64_t offset : end_offsets[at]) {
      rank.clock_uncertainty_ns =
          std::max(rank.clock_uncertainty_ns, std::abs(offset - rank.clock_offset_ns));
    }
    worst_uncertainty = std::max(
        worst_uncertainty, std::max(std::abs(rank.clock_offset_ns), rank.clock_uncertainty_ns));
  }
  // Arrivals are compared on the shared clock when the files have one; otherwise each rank's
  // times are shifted by its offset from the collectives' ends.
  auto arrival = [&](size_t at, SliceId id) {
    return model.slices.start_ns[id] - (shared_clock ? 0 : out.per_rank[at].clock_offset_ns);
  };
  {
    char text[256];
    uint64_t samples = 0;
    for (const RankCollectives& rank : out.per_rank)
      samples = std::max(samples, rank.clock_samples);
    if (samples == 0) {
      out.clock = "no collective matched across ranks: the ranks' clocks are not compared";
    } else if (shared_clock) {
      std::snprintf(text, sizeof text,
                    "the ranks share one clock domain; the ends of %llu matched collectives "
                    "agree within %s (uncertainty of arrival times)",
                    static_cast<unsigned long long>(samples),
                    format_duration(worst_uncertainty).c_str());
      out.clock = text;
    } else {
      int64_t spread = 0;
      for (const RankCollectives& rank : out.per_rank)
        spread = std::max(spread, rank.clock_uncertainty_ns);
      std::snprintf(text, sizeof text,
                    "the ranks' clocks differ: aligned on the ends of %llu matched collectives "
                    "(median offset per rank), uncertainty ±%s",
                    static_cast<unsigned long long>(samples), format_duration(spread).c_str());
      out.clock = text;
    }
  }

  for (CollectiveInstance& instance : out.instances) {
    int64_t first = INT64_MAX, last = INT64_MIN;
    size_t last_at = 0;
    for (size_t at = 0; at < ranks; ++at) {
      const int64_t when = arrival(at, instance.slices[at]);
      first = std::min(first, when);
      if (when > last) {
        last = when;
        last_at = at;
      }
    }
    instance.last_rank = out.ranks[last_at];
    instance.skew_ns = last - first;
    for (size_t at = 0; at < ranks; ++at)
      instance.imposed_ns += last - arrival(at, instance.slices[at]);
    if (!instance.decides) continue;
    for (size_t at = 0; at < ranks; ++at) {
      RankCollectives& rank = out.per_rank[at];
      ++rank.collectives;
      rank.waited_ns += last - arrival(at, instance.slices[at]);
    }
    ++out.per_rank[last_at].arrived_last;
    out.per_rank[last_at].imposed_ns += instance.imposed_ns;
  }

  // Communication hidden by compute, per rank: its deciding collectives against its other
  // innermost work (GPU kernels when the collectives are kernels, leaf slices of its threads
  // otherwise).
  std::vector<uint8_t> has_child(model.slices.size(), 0);
  for (SliceId id = 0; id < model.slices.size(); ++id) {
    if (model.slices.parent[id] != kNoSlice) has_child[model.slices.parent[id]] = 1;
  }
  std::vector<std::vector<Interval>> comm(ranks), compute(ranks);
  std::vector<std::map<TrackId, int64_t>> comm_tracks(ranks);
  for (const CollectiveInstance& instance : out.instances) {
    if (!instance.decides) continue;
    for (size_t at = 0; at < ranks; ++at) {
      const SliceId id = instance.slices[at];
      comm[at].push_back({model.slices.start_ns[id], model.slices.end_ns[id]});
      comm_tracks[at][model.slices.track[id]] +=
          model.slices.end_ns[id] - model.slices.start_ns[id];
    }
  }
  for (SliceId id = 0; id < model.slices.size(); ++id) {
    const TrackId track = model.slices.track[id];
    const int rank = model.track_rank(track);
    if (rank < 0 || model.tracks[track].lane == Lane::kAnnotation) continue;
    if (is_collective(model.slice_name(id))) continue;
    const bool kernel = model.tracks[track].kind == TrackKind::kGpuStream;
    if (any_kernel ? !kernel : (kernel || has_child[id] != 0)) continue;
    compute[position[rank]].push_back({model.slices.start_ns[id], model.slices.end_ns[id]});
  }
  for (size_t at = 0; at < ranks; ++at) {
    RankCollectives& rank = out.per_rank[at];
    const std::vector<Interval> comm_union = union_of(comm[at]);
    rank.comm_ns = total_length(comm_union);
    rank.comm_hidden_ns = total_length(intersect(comm_union, union_of(compute[at])));
    int64_t most = -1;
    for (const auto& [track, ns] : comm_tracks[at]) {
      if (ns > most) {
        most = ns;
        rank.track = track;
      }
    }
  }

  // The straggler: the rank whose late arrivals kept the others waiting longest.
  size_t worst = 0;
  for (size_t at = 1; at < ranks; ++at) {
    if (out.per_rank[at].imposed_ns > out.per_rank[worst].imposed_ns) worst = at;
  }
  if (out.per_rank[worst].imposed_ns > 0) {
    Straggler straggler;
    straggler.rank = out.ranks[worst];
    straggler.arrived_last = out.per_rank[worst].arrived_last;
    straggler.collectives = out.per_rank[worst].collectives;
    straggler.imposed_ns = out.per_rank[worst].imposed_ns;
    std::map<std::string, int64_t> before_by_name;
    const CollectiveInstance* heaviest = nullptr;
    for (const CollectiveInstance& instance : out.instances) {
      if (!instance.decides || instance.last_rank != straggler.rank) continue;
      straggler.max_skew_ns = std::max(straggler.max_skew_ns, instance.skew_ns);
      const SliceId before = slice_before(model, index, instance.slices[worst]);
      const std::string name =
          before == kNoSlice ? "(nothing traced)" : std::string(model.slice_name(before));
      before_by_name[name] += instance.imposed_ns;
      if (heaviest == nullptr || instance.imposed_ns > heaviest->imposed_ns) heaviest = &instance;
    }
    for (const auto& [name, ns] : before_by_name) {
      if (ns > straggler.before_share_ns) {
        straggler.before = name;
        straggler.before_share_ns = ns;
      }
    }
    if (heaviest != nullptr) {
      straggler.collective_slice = heaviest->slices[worst];
      const SliceId before = slice_before(model, index, straggler.collective_slice);
      if (before != kNoSlice && model.slice_name(before) == straggler.before) {
        straggler.before_slice = before;
        straggler.before_ns = model.slices.end_ns[before] - model.slices.start_ns[before];
        std::vector<int64_t> others;
        for (size_t at = 0; at < ranks; ++at) {
          if (at == worst) continue;
          const SliceId other = slice_before(model, index, heaviest->slices[at]);
          if (other == kNoSlice || model.slice_name(other) != straggler.before) continue;
          others.push_back(model.slices.end_ns[other] - model.slices.start_ns[other]);
        }
        straggler.before_others = others.size();
        if (!others.empty()) straggler.before_median_others_ns = median(others);
      }
    }
    out.straggler = std::move(straggler);
  }
  return out;
}

}  // namespace loupe::trace
