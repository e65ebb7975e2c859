#include <algorithm>
#include <optional>

#include "trace/analyze/analyze.hpp"

namespace loupe::trace {
namespace {

std::vector<std::pair<std::string, int64_t>> sorted_by_time(std::map<std::string, int64_t> totals) {
  std::vector<std::pair<std::string, int64_t>> out(totals.begin(), totals.end());
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& left, const auto& right) { return left.second > right.second; });
  return out;
}

void add_innermost(const Model& model, const TrackIndex& index, TrackId track, int64_t start,
                   int64_t end, std::map<std::string, int64_t>& totals) {
  if (end <= start) return;
  const SliceTable& slices = model.slices;
  // The slices overlapping [start, end): the ancestors of the innermost slice at `start`, and
  // every slice that starts inside the window.
  std::vector<SliceId> overlapping;
  for (SliceId id = index.innermost_at(track, start); id != kNoSlice; id = slices.parent[id]) {
    overlapping.push_back(id);
  }
  const auto& ids = index.slices(track);
  auto first = std::lower_bound(ids.begin(), ids.end(), start, [&](SliceId id, int64_t value) {
    return slices.start_ns[id] < value;
  });
  for (auto it = first; it != ids.end() && slices.start_ns[*it] < end; ++it) {
    if (std::find(overlapping.begin(), overlapping.end(), *it) == overlapping.end()) {
      overlapping.push_back(*it);
    }
  }
  auto clipped = [&](SliceId id) {
    return std::max<int64_t>(
        0, std::min(slices.end_ns[id], end) - std::max(slices.start_ns[id], start));
  };
  std::map<SliceId, int64_t> self;
  int64_t top_level = 0;
  for (SliceId id : overlapping) self[id] += clipped(id);
  for (SliceId id : overlapping) {
    const SliceId parent = slices.parent[id];
    if (parent != kNoSlice && self.count(parent) != 0) {
      self[parent] -= clipped(id);
    } else {
      top_level += clipped(id);
    }
  }
  for (const auto& [id, ns] : self) {
    if (ns > 0) totals[std::string(model.slice_name(id))] += ns;
  }
  if (end - start - top_level > 0) totals["(no zone)"] += end - start - top_level;
}

}  // namespace

std::vector<std::pair<std::string, int64_t>> innermost_zones(const Model& model,
                                                             const TrackIndex& index, TrackId track,
                                                             int64_t start, int64_t end) {
  std::map<std::string, int64_t> totals;
  add_innermost(model, index, track, start, end, totals);
  return sorted_by_time(std::move(totals));
}

Locks compute_locks(const Model& model, StatsRegistry& stats, const TrackIndex* shared_index) {
  const std::vector<LockSpan> spans = derive_lock_spans(model, stats);
  std::optional<TrackIndex> own_index;
  const TrackIndex& index = shared_index != nullptr ? *shared_index : own_index.emplace(model);
  Locks result;
  std::map<TrackId, LockSummary> summaries;
  std::map<TrackId, std::vector<const LockSpan*>> holds;  // per lock, by start
  for (const LockSpan& span : spans) {
    LockSummary& summary = summaries[span.lock];
    summary.lock = span.lock;
    if (span.hold) {
      ++summary.obtains;
      summary.hold_ns += span.end_ns - span.start_ns;
      holds[span.lock].push_back(&span);
    } else {
      ++summary.contended;
      summary.wait_ns += span.end_ns - span.start_ns;
    }
  }
  std::map<TrackId, std::vector<int64_t>> hold_max_end;
  for (const auto& [lock, list] : holds) {
    std::vector<int64_t>& max_end = hold_max_end[lock];
    int64_t running = INT64_MIN;
    for (const LockSpan* hold : list) {
      running = std::max(running, hold->end_ns);
      max_end.push_back(running);
    }
  }
  struct Accumulator {
    LockContention contention;
    std::map<TrackId, std::pair<int64_t, std::map<std::string, int64_t>>> holders;
  };
  std::map<std::pair<TrackId, TrackId>, Accumulator> contentions;
  for (const LockSpan& wait : spans) {
    if (wait.hold) continue;
    Accumulator& accumulator = contentions[{wait.lock, wait.thread}];
    LockContention& contention = accumulator.contention;
    contention.lock = wait.lock;
    contention.waiter = wait.thread;
    ++contention.waits;
    contention.wait_ns += wait.end_ns - wait.start_ns;
    if (wait.end_ns - wait.start_ns > contention.longest.second - contention.longest.first) {
      contention.longest = {wait.start_ns, wait.end_ns};
    }
    // Holds are sorted by start; the running maximum of their ends is monotone, so the first hold
    // that can overlap the wait is found by binary search (shared holds may overlap each other).
    const auto& lock_holds = holds[wait.lock];
    const auto& max_end = hold_max_end[wait.lock];
    auto first = std::upper_bound(max_end.begin(), max_end.end(), wait.start_ns) - max_end.begin();
    auto stop = std::lower_bound(
        lock_holds.begin(), lock_holds.end(), wait.end_ns,
        [](const LockSpan* hold, int64_t value) { return hold->start_ns < value; });
    for (auto it = lock_holds.begin() + first; it < stop; ++it) {
      const LockSpan& hold = **it;
      if (hold.thread == wait.thread) continue;
      const int64_t start = std::max(hold.start_ns, wait.start_ns);
      const int64_t end = std::min(hold.end_ns, wait.end_ns);
      if (end <= start) continue;
      auto& [held_ns, zones] = accumulator.holders[hold.thread];
      held_ns += end - start;
      add_innermost(model, index, hold.thread, start, end, zones);
    }
  }
  for (auto& [key, accumulator] : contentions) {
    for (auto& [thread, held] : accumulator.holders) {
      accumulator.contention.holders.push_back({thread, held.first, sorted_by_time(held.second)});
    }
    std::stable_sort(
        accumulator.contention.holders.begin(), accumulator.contention.holders.end(),
        [](const auto& left, const auto& right) { return left.held_ns > right.held_ns; });
    result.contentions.push_back(std::move(accumulator.contention));
  }
  std::stable_sort(result.contentions.begin(), result.contentions.end(),
                   [](const LockContention& left, const LockContention& right) {
                     return left.wait_ns > right.wait_ns;
                   });
  for (const auto& [lock, summary] : summaries) result.locks.push_back(summary);
  return result;
}

}  // namespace loupe::trace
