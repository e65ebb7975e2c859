#include <algorithm>
#include <unordered_map>

#include "trace/analyze/analyze.hpp"

namespace loupe::trace {

Breakdown compute_breakdown(const Model& model, const std::vector<uint8_t>& exclude) {
  const SliceTable& slices = model.slices;
  // Self time: a slice's duration minus its direct children's (siblings never overlap after
  // ModelBuilder::finish clamps them).
  // A GPU op that lies inside another on its stream ran beside it (concurrent kernels), not
  // inside a call: it takes nothing from the other's self time.
  const std::vector<uint8_t> roles = category_roles(model);
  std::vector<int64_t> self(slices.size());
  for (SliceId id = 0; id < slices.size(); ++id) self[id] = slices.end_ns[id] - slices.start_ns[id];
  for (SliceId id = 0; id < slices.size(); ++id) {
    const SliceId parent = slices.parent[id];
    if (parent == kNoSlice) continue;
    if (roles[slices.category[id]] != kNotGpuOp && roles[slices.category[parent]] != kNotGpuOp) {
      continue;
    }
    self[parent] -= slices.end_ns[id] - slices.start_ns[id];
  }
  Breakdown result;
  // A GPU op that overlapped part of the one before it sits on an overlap lane of its stream (a
  // kernel launched to start before the previous one ends: programmatic dependent launch); its
  // time belongs to the stream. Streams with overlap lanes are summed apart, over the main lane
  // and its overlap lanes, as unions of intervals (their slices are not in one start order); the
  // others take the running ends below. A gpu_user_annotation range that overlapped another
  // lands on such a lane too: it labels the stream's time and is no row of it. (A thread's
  // overlap lanes may hold Python frames or ranges of either lane: they keep rows of their own.)
  std::vector<uint8_t> merged(model.tracks.size(), 0);  // by main track: has overlap lanes
  for (const Track& info : model.tracks) {
    if (info.lane == Lane::kOverlap && info.main != kNoTrack &&
        model.tracks[info.main].kind == TrackKind::kGpuStream) {
      merged[info.main] = 1;
    }
  }
  StringId annotation_category = 0;
  for (StringId id = 1; id < model.strings.size(); ++id) {
    if (model.strings.get(id) == "gpu_user_annotation") annotation_category = id;
  }
  struct MergedRow {
    BreakdownRow row;
    std::vector<Interval> spans;
  };
  std::vector<MergedRow> merged_rows;
  std::unordered_map<uint64_t, uint32_t> merged_row_of;  // main track << 32 | name
  std::map<TrackId, std::vector<Interval>> merged_busy;
  // Slices are sorted by (track, start): a running end per (track, name) gives the union.
  struct Accumulator {
    BreakdownRow row;
    int64_t covered_until = INT64_MIN;
  };
  // One accumulator per (track, name), found through a table by name that is reset at each new
  // track (a map lookup per slice was most of this analysis on millions of slices).
  std::vector<Accumulator> rows;
  constexpr uint32_t kNone = 0xFFFFFFFFu;
  std::vector<uint32_t> row_of_name(model.strings.size(), kNone);
  std::vector<StringId> names_seen;
  TrackId current_track = kNoTrack;
  int64_t busy_until = INT64_MIN;
  int64_t* busy = nullptr;  // the track's entry in busy_ns, once it has one
  for (SliceId id = 0; id < slices.size(); ++id) {
    const TrackId track = slices.track[id];
    const int64_t start = slices.start_ns[id], end = slices.end_ns[id];
    if (track != current_track) {
      current_track = track;
      busy_until = INT64_MIN;
      busy = nullptr;
      for (StringId name : names_seen) row_of_name[name] = kNone;
      names_seen.clear();
    }
    if (!exclude.empty() && exclude[id] != 0) continue;
    const Track& info = model.tracks[track];
    const TrackId main = info.lane == Lane::kOverlap ? info.main : track;
    if (main < merged.size() && merged[main] != 0 &&
        (info.lane == Lane::kMain || info.lane == Lane::kOverlap)) {
      if (annotation_category != 0 && slices.category[id] == annotation_category) continue;
      if (slices.depth[id] == 0) merged_busy[main].emplace_back(start, end);
      const uint64_t key = static_cast<uint64_t>(main) << 32 | slices.name[id];
      const auto [found, fresh] =
          merged_row_of.try_emplace(key, static_cast<uint32_t>(merged_rows.size()));
      if (fresh) {
        merged_rows.emplace_back();
        merged_rows.back().row.track = main;
        merged_rows.back().row.name = slices.name[id];
      }
      MergedRow& merged_row = merged_rows[found->second];
      ++merged_row.row.count;
      merged_row.row.self_ns += self[id];
      merged_row.spans.emplace_back(start, end);
      const SliceId longest = merged_row.row.longest;
      if (longest == kNoSlice || end - start > slices.end_ns[longest] - slices.start_ns[longest]) {
        merged_row.row.longest = id;
      }
      continue;
    }
    if (slices.depth[id] == 0) {
      if (busy == nullptr) busy = &result.busy_ns[track];
      *busy += std::max<int64_t>(0, end - std::max(start, busy_until));
      busy_until = std::max(busy_until, end);
    }
    uint32_t& slot = row_of_name[slices.name[id]];
    if (slot == kNone) {
      slot = static_cast<uint32_t>(rows.size());
      rows.emplace_back();
      names_seen.push_back(slices.name[id]);
    }
    Accumulator& accumulator = rows[slot];
    BreakdownRow& row = accumulator.row;
    if (row.count == 0) {
      row.track = track;
      row.name = slices.name[id];
    }
    ++row.count;
    row.self_ns += self[id];
    row.total_ns += std::max<int64_t>(0, end - std::max(start, accumulator.covered_until));
    accumulator.covered_until = std::max(accumulator.covered_until, end);
    if (row.longest == kNoSlice ||
        end - start > slices.end_ns[row.longest] - slices.start_ns[row.longest]) {
      row.longest = id;
    }
  }
  // Ties in self time keep (track, name) order.
  result.rows.reserve(rows.size() + merged_rows.size());
  for (const Accumulator& accumulator : rows) result.rows.push_back(accumulator.row);
  for (MergedRow& merged_row : merged_rows) {
    merged_row.row.total_ns = total_length(union_of(std::move(merged_row.spans)));
    // Slices of one name that overlap each other (a kernel overlapping its own next launch)
    // count their common time once: self is at most the union.
    merged_row.row.self_ns = std::min(merged_row.row.self_ns, merged_row.row.total_ns);
    result.rows.push_back(merged_row.row);
  }
  for (auto& [main, spans] : merged_busy) {
    result.busy_ns[main] = total_length(union_of(std::move(spans)));
  }
  std::sort(result.rows.begin(), result.rows.end(),
            [](const BreakdownRow& left, const BreakdownRow& right) {
              return std::pair(left.track, left.name) < std::pair(right.track, right.name);
            });
  std::stable_sort(result.rows.begin(), result.rows.end(),
                   [](const BreakdownRow& left, const BreakdownRow& right) {
                     return left.self_ns > right.self_ns;
                   });
  return result;
}

}  // namespace loupe::trace
