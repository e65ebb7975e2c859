// The critical path of one iteration (analyze.hpp, CriticalPath; docs/pytorch-traces.md): walked
// backwards from the iteration's end through CPU work, launches, GPU ops and synchronisations.
#include <algorithm>
#include <map>
#include <optional>

#include "core/pattern.hpp"
#include "trace/analyze/analyze.hpp"

namespace loupe::trace {
namespace {

// Safety net for the walk: every hop moves the frontier back or to an earlier op of one stream,
// so a real trace ends far sooner; a malformed one (zero-length loops) cannot spin.
constexpr size_t kMaxHops = 1'000'000;
// An op that starts this soon after an op of another stream ended, later than its own launch and
// its stream's previous op, waited for that op (an event: cudaStreamWaitEvent).
constexpr int64_t kEventSlackNs = 20'000;
// A helper thread idle at least this long was waiting (for the iteration's thread); shorter gaps
// between its zones are its own untraced work.
constexpr int64_t kHandOffNs = 20'000;

// A host call that returns only when GPU work has finished.
bool waits_for_gpu(std::string_view name) {
  return is_host_synchronisation(name) || name == "cudaMemcpy" || name == "hipMemcpy";
}

struct Iterations {
  std::vector<SliceId> ranges;  // on one thread, in time order
  std::string source;           // "ProfilerStep" or the --iteration pattern
};

Iterations find_iterations(const Model& model, const Warmup& warmup,
                           const std::string& iteration_pattern) {
  Iterations found;
  if (iteration_pattern.empty()) {
    found.ranges = warmup.steps;
    found.source = "ProfilerStep";
    return found;
  }
  const Pattern pattern = Pattern::compile(iteration_pattern, "--iteration");
  std::vector<uint8_t> matches(model.strings.size(), 0);
  for (StringId name = 0; name < model.strings.size(); ++name) {
    matches[name] = pattern.search(model.strings.get(name)) ? 1 : 0;
  }
  // The thread with the most matching ranges holds the iterations.
  std::map<TrackId, std::vector<SliceId>> by_thread;
  for (SliceId id = 0; id < model.slices.size(); ++id) {
    if (matches[model.slices.name[id]] == 0) continue;
    const Track& track = model.tracks[model.slices.track[id]];
    if (track.kind != TrackKind::kThread) continue;
    by_thread[track.main].push_back(id);
  }
  for (auto& [thread, ids] : by_thread) {
    if (ids.size() > found.ranges.size()) found.ranges = std::move(ids);
  }
  std::stable_sort(found.ranges.begin(), found.ranges.end(), [&](SliceId left, SliceId right) {
    return model.slices.start_ns[left] < model.slices.start_ns[right];
  });
  found.source = iteration_pattern;
  return found;
}

class Walk {
 public:
  Walk(const Model& model, const TrackIndex& index, const GpuOps& gpu, uint32_t file,
       CriticalPath& path)
      : model_(model), index_(index), gpu_(gpu), path_(path) {
    const SliceTable& slices = model.slices;
    for (SliceId id : gpu.ops) {
      const TrackId track = slices.track[id];
      if (model.tracks[track].file_index != file) continue;
      by_stream_[model.tracks[track].main].push_back(id);
      by_end_.emplace_back(slices.end_ns[id], id);
    }
    std::sort(by_end_.begin(), by_end_.end());
    for (auto& [stream, ids] : by_stream_) {
      std::stable_sort(ids.begin(), ids.end(), [&](SliceId left, SliceId right) {
        return slices.start_ns[left] < slices.start_ns[right];
      });
      // Per position: the op before it (in start order) that ends last, and that end.
      std::vector<std::pair<int64_t, SliceId>>& before = latest_before_[stream];
      before.resize(ids.size(), {INT64_MIN, kNoSlice});
      for (size_t at = 1; at < ids.size(); ++at) {
        before[at] = std::max(before[at - 1], {slices.end_ns[ids[at - 1]], ids[at - 1]});
      }
      for (size_t at = 0; at < ids.size(); ++at) position_[ids[at]] = at;
    }
    std::vector<uint8_t> wait_name(model.strings.size(), 0);
    for (StringId name = 0; name < model.strings.size(); ++name) {
      wait_name[name] = waits_for_gpu(model.strings.get(name)) ? 1 : 0;
    }
    for (SliceId id = 0; id < slices.size(); ++id) {
      if (wait_name[slices.name[id]] == 0) continue;
      const Track& track = model.tracks[slices.track[id]];
      if (track.kind != TrackKind::kThread || track.file_index != file) continue;
      waits_[track.main].push_back(id);
    }
    // A launch call that returned only after its op had finished waited for the GPU too: a
    // synchronous copy (cudaMemcpy, cudaMemcpyAsync to pageable memory), a full launch queue.
    for (SliceId id : gpu.ops) {
      const SliceId launch = gpu.launch_of[id];
      if (launch == kNoSlice || wait_name[slices.name[launch]] != 0) continue;
      if (slices.end_ns[id] <= slices.start_ns[launch] ||
          slices.end_ns[id] > slices.end_ns[launch]) {
        continue;
      }
      const Track& track = model.tracks[slices.track[launch]];
      if (track.file_index == file) waits_[track.main].push_back(launch);
    }
    for (auto& [thread, ids] : waits_) {
      std::stable_sort(ids.begin(), ids.end(), [&](SliceId left, SliceId right) {
        return slices.end_ns[left] < slices.end_ns[right];
      });
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    }
  }

  // The GPU ops of the file launched from [start, end) on any thread of it; the one ending last.
  SliceId last_op_launched(int64_t start, int64_t end) const {
    SliceId last = kNoSlice;
    for (const auto& [op_end, id] : by_end_) {
      const SliceId launch = gpu_.launch_of[id];
      if (launch == kNoSlice) continue;
      const int64_t at = model_.slices.start_ns[launch];
      if (at < start || at >= end) continue;
      last = id;  // by_end_ ascends: the latest match ends last
    }
    return last;
  }

  void run(TrackId thread, int64_t from, SliceId from_op, int64_t start) {
    start_ = start;
    frontier_ = from;
    home_ = thread;
    std::optional<SliceId> op;
    if (from_op != kNoSlice) op = from_op;
    TrackId cpu_thread = thread;
    for (size_t hop = 0; hop < kMaxHops && frontier_ > start_; ++hop) {
      if (op) {
        const std::optional<SliceId> next = gpu_step(*op, cpu_thread);
        if (!next && cpu_thread == kNoTrack) break;
        op = next;
      } else {
        const TrackId was = cpu_thread;
        op = cpu_step(cpu_thread);
        if (!op && cpu_thread == was) break;
      }
    }
    if (frontier_ > start_)
      add(CriticalPath::Kind::kUntraced, "(nothing traced)", start_, kNoSlice);
  }

 private:
  // Adds [max(begin, start), frontier) to the path, attributed to `name`, and moves the frontier.
  void add(CriticalPath::Kind kind, const std::string& name, int64_t begin, SliceId slice) {
    begin = std::max(begin, start_);
    if (begin >= frontier_) return;
    path_.segments.push_back({kind, name, {begin, frontier_}, slice});
    frontier_ = begin;
  }

  // The CPU thread back from the frontier to its latest wait for the GPU: its work is on the
  // path, attributed to its innermost zones; then the op the wait ended on. nullopt: the thread's
  // work reaches back to the iteration's start.
  // Another thread (one that launched an op on the path) found idle for kHandOffNs hands the
  // path to the iteration's own thread at that moment (`thread` becomes it): an idle helper was
  // waiting for the thread that runs the iteration, as autograd's backward thread waits for the
  // forward.
  std::optional<SliceId> cpu_step(TrackId& thread) {
    const SliceTable& slices = model_.slices;
    SliceId waited = kNoSlice;
    auto found = waits_.find(thread);
    if (found != waits_.end()) {
      const std::vector<SliceId>& waits = found->second;
      auto after =
          std::upper_bound(waits.begin(), waits.end(), frontier_,
                           [&](int64_t value, SliceId id) { return value < slices.end_ns[id]; });
      while (after != waits.begin()) {
        const SliceId wait = *--after;
        if (slices.end_ns[wait] <= start_) break;
        // The op the wait returned on: the last of the file's ops to end inside it.
        auto op = std::upper_bound(by_end_.begin(), by_end_.end(),
                                   std::pair<int64_t, SliceId>{slices.end_ns[wait], kNoSlice});
        if (op != by_end_.begin() && (op - 1)->first > slices.start_ns[wait] &&
            (op - 1)->first <= frontier_) {
          waited = (op - 1)->second;
          break;
        }
      }
    }
    const int64_t until = waited != kNoSlice ? slices.end_ns[waited] : start_;
    // Innermost zones, latest first, so that each segment closes the frontier it starts from.
    const int64_t begin = std::max(until, start_);
    std::vector<Interval> pieces;
    cpu_pieces(thread, begin, frontier_, pieces);
    for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
      const SliceId zone = index_.innermost_at(thread, it->first);
      // Nothing open on the thread: it was idle (waiting for another thread, say autograd's
      // backward thread for the forward) or ran what the profiler did not record.
      if (zone == kNoSlice && thread != home_ && it->second - it->first >= kHandOffNs) {
        thread = home_;
        return std::nullopt;
      }
      if (zone == kNoSlice) {
        add(CriticalPath::Kind::kUntraced, "nothing traced on " + model_.track_label(thread),
            it->first, kNoSlice);
      } else {
        add(CriticalPath::Kind::kCpu, std::string(model_.slice_name(zone)), it->first, zone);
      }
    }
    if (waited == kNoSlice) return std::nullopt;
    return waited;
  }

  // [begin, end) cut where the thread's innermost zone changes: at the starts and ends of the
  // slices that begin inside it, and the ends of those open at `begin` (its innermost's chain).
  void cpu_pieces(TrackId thread, int64_t begin, int64_t end, std::vector<Interval>& pieces) const {
    const SliceTable& slices = model_.slices;
    std::vector<int64_t> cuts{begin, end};
    for (SliceId open = index_.innermost_at(thread, begin); open != kNoSlice;
         open = slices.parent[open]) {
      if (slices.end_ns[open] > begin && slices.end_ns[open] < end) {
        cuts.push_back(slices.end_ns[open]);
      }
    }
    const std::vector<SliceId>& ids = index_.slices(thread);
    auto it = std::lower_bound(ids.begin(), ids.end(), begin, [&](SliceId id, int64_t value) {
      return slices.start_ns[id] < value;
    });
    for (; it != ids.end() && slices.start_ns[*it] < end; ++it) {
      cuts.push_back(slices.start_ns[*it]);
      if (slices.end_ns[*it] < end) cuts.push_back(slices.end_ns[*it]);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    for (size_t at = 0; at + 1 < cuts.size(); ++at) {
      if (cuts[at] >= begin && cuts[at + 1] <= end) pieces.emplace_back(cuts[at], cuts[at + 1]);
    }
  }

  // One GPU op on the path; what bound its start: the op before it on its stream, its launch
  // call, or an op of another stream that ended just before it (an event the stream waited on).
  // Returns the next op; nullopt after moving to the launching thread (`thread` set) or at the end.
  std::optional<SliceId> gpu_step(SliceId op, TrackId& thread) {
    const SliceTable& slices = model_.slices;
    const int64_t op_start = slices.start_ns[op];
    add(CriticalPath::Kind::kGpu, std::string(model_.slice_name(op)), op_start, op);
    thread = kNoTrack;
    if (frontier_ <= start_) return std::nullopt;
    const TrackId stream = model_.tracks[slices.track[op]].main;
    const auto& [stream_end, stream_before] = latest_before_.at(stream)[position_.at(op)];
    const SliceId launch = gpu_.launch_of[op];
    // When the op was queued: when its launch call returned, or — for a call that returned
    // only after the op began (a blocking copy, a full queue) — when the call began.
    int64_t launch_end = INT64_MIN;
    if (launch != kNoSlice) {
      launch_end =
          slices.end_ns[launch] <= op_start ? slices.end_ns[launch] : slices.start_ns[launch];
    }
    // The latest op of another stream to end at or before this one's start.
    int64_t other_end = INT64_MIN;
    SliceId other = kNoSlice;
    auto it = std::upper_bound(by_end_.begin(), by_end_.end(),
                               std::pair<int64_t, SliceId>{op_start, kNoSlice});
    for (size_t looked = 0; it != by_end_.begin() && looked < 64; ++looked) {
      --it;
      if (model_.tracks[slices.track[it->second]].main == stream) continue;
      other_end = it->first, other = it->second;
      break;
    }
    const int64_t bound_by = std::max(stream_end, launch_end);
    if (other != kNoSlice && other_end > bound_by && op_start - other_end <= kEventSlackNs) {
      add(CriticalPath::Kind::kWait, "wait on " + model_.track_label(slices.track[other]),
          other_end, other);
      return other;
    }
    if (bound_by == INT64_MIN) return std::nullopt;
    if (launch != kNoSlice && launch_end == bound_by) {
      add(CriticalPath::Kind::kLaunch, "launch latency", launch_end, launch);
      thread = model_.tracks[slices.track[launch]].main;
      return std::nullopt;
    }
    if (stream_before != kNoSlice && stream_end == bound_by) {
      add(CriticalPath::Kind::kWait, "stream gap", std::min(stream_end, op_start), stream_before);
      return stream_before;
    }
    return std::nullopt;
  }

  const Model& model_;
  const TrackIndex& index_;
  const GpuOps& gpu_;
  CriticalPath& path_;
  std::map<TrackId, std::vector<SliceId>> by_stream_;
  std::map<TrackId, std::vector<std::pair<int64_t, SliceId>>> latest_before_;
  std::map<SliceId, size_t> position_;
  std::vector<std::pair<int64_t, SliceId>> by_end_;
  std::map<TrackId, std::vector<SliceId>> waits_;  // per thread, by end
  int64_t start_ = 0, frontier_ = 0;
  TrackId home_ = kNoTrack;  // the iteration's thread
};

}  // namespace

std::string_view critical_path_kind_name(CriticalPath::Kind kind) {
  switch (kind) {
    case CriticalPath::Kind::kCpu:
      return "cpu";
    case CriticalPath::Kind::kGpu:
      return "gpu";
    case CriticalPath::Kind::kLaunch:
      return "launch";
    case CriticalPath::Kind::kWait:
      return "gpu_wait";
    case CriticalPath::Kind::kUntraced:
      return "untraced";
    case CriticalPath::Kind::kCount:
      break;
  }
  return "other";
}

CriticalPath compute_critical_path(const Model& model, const Warmup& warmup, const GpuOps& gpu,
                                   const std::string& iteration_pattern,
                                   const TrackIndex* shared_index) {
  CriticalPath path;
  const Iterations iterations = find_iterations(model, warmup, iteration_pattern);
  if (iterations.ranges.empty()) return path;
  const SliceTable& slices = model.slices;
  // The first iteration is warm-up when there are others; of the rest, the median by duration.
  std::vector<SliceId> steady(iterations.ranges.begin() + (iterations.ranges.size() >= 2 ? 1 : 0),
                              iterations.ranges.end());
  auto length = [&](SliceId id) { return slices.end_ns[id] - slices.start_ns[id]; };
  std::vector<SliceId> by_length = steady;
  std::stable_sort(by_length.begin(), by_length.end(),
                   [&](SliceId left, SliceId right) { return length(left) < length(right); });
  path.present = true;
  path.iteration = by_length[(by_length.size() - 1) / 2];
  path.iterations = iterations.ranges.size();
  path.steady_iterations = steady.size();
  path.source = iterations.source;
  std::optional<TrackIndex> own_index;
  const TrackIndex& index = shared_index != nullptr ? *shared_index : own_index.emplace(model);
  const TrackId thread = model.tracks[slices.track[path.iteration]].main;
  const int64_t start = slices.start_ns[path.iteration];
  const int64_t cpu_end = slices.end_ns[path.iteration];
  Walk walk(model, index, gpu, model.tracks[thread].file_index, path);
  // The iteration ends when its CPU range and the GPU work launched in it have both finished.
  const SliceId last_op = gpu.ops.empty() ? kNoSlice : walk.last_op_launched(start, cpu_end);
  int64_t end = cpu_end;
  SliceId from_op = kNoSlice;
  if (last_op != kNoSlice && slices.end_ns[last_op] > cpu_end) {
    end = slices.end_ns[last_op];
    from_op = last_op;
  }
  path.span = {start, end};
  walk.run(thread, end, from_op, start);
  std::reverse(path.segments.begin(), path.segments.end());
  std::map<std::pair<CriticalPath::Kind, std::string>, size_t> item_of;
  for (const CriticalPath::Segment& segment : path.segments) {
    const int64_t ns = segment.interval.second - segment.interval.first;
    path.kind_ns[static_cast<size_t>(segment.kind)] += ns;
    auto [it, added] = item_of.try_emplace({segment.kind, segment.name}, path.items.size());
    if (added) path.items.push_back({segment.kind, segment.name, 0, 0, segment.slice});
    CriticalPath::Item& item = path.items[it->second];
    item.ns += ns;
    ++item.segments;
    if (segment.kind == CriticalPath::Kind::kGpu &&
        (item.example == kNoSlice || ns > length(item.example))) {
      item.example = segment.slice;
    }
  }
  std::stable_sort(path.items.begin(), path.items.end(),
                   [](const auto& left, const auto& right) { return left.ns > right.ns; });
  return path;
}

}  // namespace loupe::trace
