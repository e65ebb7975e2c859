#include <algorithm>
#include <optional>

#include "trace/analyze/analyze.hpp"

namespace loupe::trace {

std::vector<TrackGaps> compute_gaps(const Model& model, int64_t threshold_ns,
                                    const TrackIndex* shared_index) {
  // GPU streams when the trace has any, else every CPU thread.
  bool has_gpu = false;
  for (const Track& track : model.tracks) has_gpu |= track.kind == TrackKind::kGpuStream;
  const TrackKind wanted = has_gpu ? TrackKind::kGpuStream : TrackKind::kThread;
  std::optional<TrackIndex> own_index;
  const TrackIndex& index = shared_index != nullptr ? *shared_index : own_index.emplace(model);
  // Feeder: the other track with most flows into the track.
  std::map<TrackId, std::map<TrackId, uint64_t>> flows_into;
  for (size_t row = 0; row < model.flows.size(); ++row) {
    if (model.flows.from_track[row] != model.flows.to_track[row]) {
      ++flows_into[model.flows.to_track[row]][model.flows.from_track[row]];
    }
  }
  std::vector<TrackGaps> result;
  for (TrackId track = 0; track < model.tracks.size(); ++track) {
    // Lanes are parts of a thread or stream (annotation labels, Python stacks): the main lane is
    // the one that feeds and runs work.
    if (model.tracks[track].kind != wanted || model.tracks[track].lane != Lane::kMain) continue;
    const auto& ids = index.slices(track);
    if (ids.empty()) continue;
    TrackGaps gaps;
    gaps.track = track;
    uint64_t best = 0;
    for (const auto& [from, count] : flows_into[track]) {
      if (count > best) {
        best = count;
        gaps.feeder = from;
      }
    }
    const SliceTable& slices = model.slices;
    int64_t covered_until = slices.start_ns[ids.front()];
    SliceId last_top = kNoSlice;
    gaps.span_ns = 0;
    int64_t span_end = covered_until;
    for (SliceId id : ids) {
      if (slices.depth[id] != 0) continue;
      if (slices.start_ns[id] - covered_until >= threshold_ns && last_top != kNoSlice) {
        gaps.gaps.push_back({track, {covered_until, slices.start_ns[id]}, last_top, id});
        gaps.idle_ns += slices.start_ns[id] - covered_until;
      }
      if (slices.end_ns[id] >= covered_until) {
        covered_until = slices.end_ns[id];
        last_top = id;
      }
      span_end = std::max(span_end, slices.end_ns[id]);
    }
    gaps.span_ns = span_end - slices.start_ns[ids.front()];
    std::stable_sort(gaps.gaps.begin(), gaps.gaps.end(), [](const Gap& left, const Gap& right) {
      return left.interval.second - left.interval.first >
             right.interval.second - right.interval.first;
    });
    if (gaps.feeder != kNoTrack) {
      std::map<std::string, int64_t> totals;
      for (const Gap& gap : gaps.gaps) {
        for (const auto& [name, ns] :
             innermost_zones(model, index, gaps.feeder, gap.interval.first, gap.interval.second)) {
          totals[name] += ns;
        }
      }
      gaps.feeder_zones.assign(totals.begin(), totals.end());
      std::stable_sort(
          gaps.feeder_zones.begin(), gaps.feeder_zones.end(),
          [](const auto& left, const auto& right) { return left.second > right.second; });
    }
    result.push_back(std::move(gaps));
  }
  std::stable_sort(result.begin(), result.end(), [](const TrackGaps& left, const TrackGaps& right) {
    return left.idle_ns > right.idle_ns;
  });
  return result;
}

}  // namespace loupe::trace
