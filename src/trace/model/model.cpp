#include "trace/model/model.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <map>
#include <numeric>
#include <optional>
#include <system_error>
#include <thread>

namespace loupe::trace {

namespace {

// Eight bytes at a time with a multiply-xorshift mix; names are short, so this beats a
// byte-at-a-time hash. Quality only has to spread ids over the table.
uint64_t hash_text(std::string_view text) {
  constexpr uint64_t kMultiplier = 0x9E3779B97F4A7C15ull;
  uint64_t hash = text.size() * kMultiplier;
  const char* data = text.data();
  size_t left = text.size();
  while (left >= 8) {
    uint64_t word = 0;
    std::memcpy(&word, data, 8);
    hash = (hash ^ word) * kMultiplier;
    hash ^= hash >> 29;
    data += 8;
    left -= 8;
  }
  if (left > 0) {
    uint64_t word = 0;
    std::memcpy(&word, data, left);
    hash = (hash ^ word) * kMultiplier;
    hash ^= hash >> 29;
  }
  hash *= kMultiplier;
  return hash ^ (hash >> 32);
}

}  // namespace

StringPool::StringPool() : slots_(64, 0) { intern(""); }

StringId StringPool::intern(std::string_view text) {
  const uint64_t hash = hash_text(text);
  const size_t mask = slots_.size() - 1;
  for (size_t slot = hash & mask;; slot = (slot + 1) & mask) {
    const StringId entry = slots_[slot];
    if (entry == 0) {
      const auto id = static_cast<StringId>(strings_.size());
      strings_.emplace_back(text);
      hashes_.push_back(hash);
      slots_[slot] = id + 1;
      // Keep the table at most half full.
      if (strings_.size() * 2 > slots_.size()) grow();
      return id;
    }
    if (hashes_[entry - 1] == hash && strings_[entry - 1] == text) return entry - 1;
  }
}

void StringPool::grow() {
  std::vector<StringId> slots(slots_.size() * 2, 0);
  const size_t mask = slots.size() - 1;
  for (size_t id = 0; id < strings_.size(); ++id) {
    size_t slot = hashes_[id] & mask;
    while (slots[slot] != 0) slot = (slot + 1) & mask;
    slots[slot] = static_cast<StringId>(id + 1);
  }
  slots_ = std::move(slots);
}

std::string_view track_kind_name(TrackKind kind) {
  switch (kind) {
    case TrackKind::kThread:
      return "thread";
    case TrackKind::kGpuStream:
      return "gpu_stream";
    case TrackKind::kLock:
      return "lock";
    case TrackKind::kCounter:
      return "counter";
  }
  return "thread";
}

std::string_view lane_name(Lane lane) {
  switch (lane) {
    case Lane::kMain:
      return "main";
    case Lane::kPython:
      return "python";
    case Lane::kAnnotation:
      return "annotations";
    case Lane::kOverlap:
      return "overlap";
  }
  return "main";
}

std::string Model::track_label(TrackId id) const {
  const Track& track = tracks[id];
  std::string label = track.name.empty() ? std::string(track_kind_name(track.kind)) : track.name;
  if (track.lane != Lane::kMain) {
    label += " [";
    label += lane_name(track.lane);
    if (track.lane == Lane::kOverlap) label += " " + std::to_string(track.overlap_level);
    label += "]";
  }
  label += " (" + track.pid + "/" + track.tid + ")";
  if (multi_rank() && track_rank(id) >= 0)
    label = "rank " + std::to_string(track_rank(id)) + ": " + label;
  return label;
}

bool Model::multi_rank() const {
  int first = -1;
  for (const FileInfo& file : files) {
    if (file.rank < 0) continue;
    if (first < 0) first = file.rank;
    if (file.rank != first) return true;
  }
  return false;
}

TrackId ModelBuilder::track(uint32_t file_index, TrackKind kind, std::string_view pid,
                            std::string_view tid) {
  std::string key = std::to_string(file_index);
  key += '\x1f';
  key += static_cast<char>('0' + static_cast<int>(kind));
  key += '\x1f';
  key += pid;
  key += '\x1f';
  key += tid;
  auto found = track_ids_.find(key);
  if (found != track_ids_.end()) return found->second;
  const auto id = static_cast<TrackId>(model_.tracks.size());
  Track track;
  track.kind = kind;
  track.pid = std::string(pid);
  track.tid = std::string(tid);
  track.file_index = file_index;
  track.main = id;
  model_.tracks.push_back(std::move(track));
  track_ids_.emplace(std::move(key), id);
  return id;
}

TrackId ModelBuilder::lane(TrackId main, Lane lane, uint32_t overlap_level) {
  if (lane == Lane::kMain) return main;
  main = model_.tracks[main].main;
  std::string key = lane_key(main, lane, overlap_level);
  auto found = track_ids_.find(key);
  if (found != track_ids_.end()) return found->second;
  const auto id = static_cast<TrackId>(model_.tracks.size());
  Track track = model_.tracks[main];
  track.lane = lane;
  track.overlap_level = overlap_level;
  track.main = main;
  model_.tracks.push_back(std::move(track));
  track_ids_.emplace(std::move(key), id);
  return id;
}

std::string ModelBuilder::lane_key(TrackId main, Lane lane, uint32_t overlap_level) {
  return "lane\x1f" + std::to_string(main) + '\x1f' + std::to_string(static_cast<int>(lane)) +
         '\x1f' + std::to_string(overlap_level);
}

void ModelBuilder::append(ModelBuilder& part) {
  Model& from = part.model_;
  // Into an empty model the part moves whole: nothing to re-intern, shift or copy.
  const Model& to = model_;
  if (to.slices.size() == 0 && to.tracks.empty() && to.strings.size() == 1 &&
      to.instants.size() == 0 && to.counters.size() == 0 && to.lock_events.size() == 0 &&
      to.flows.size() == 0 && to.files.empty() && to.args_text.empty() && flows_.empty() &&
      to.stats.all_zero()) {
    model_ = std::move(from);
    track_ids_ = std::move(part.track_ids_);
    flows_ = std::move(part.flows_);
    part.track_ids_.clear();
    part.flows_.clear();
    from = Model();
    return;
  }
  // Strings: the part's ids interned here, in the part's order (as a serial import would).
  std::vector<StringId> string_of(from.strings.size());
  for (StringId id = 0; id < from.strings.size(); ++id) {
    string_of[id] = intern(from.strings.get(id));
  }
  // Tracks: a part's tracks belong to its file alone (the file index is in their key), so they
  // are appended whole, their ids shifted.
  const auto track_base = static_cast<TrackId>(model_.tracks.size());
  auto moved_track = [track_base](TrackId id) { return id == kNoTrack ? id : id + track_base; };
  for (Track& track : from.tracks) {
    track.main = moved_track(track.main);
    model_.tracks.push_back(std::move(track));
  }
  for (auto& [key, id] : part.track_ids_) {
    const Track& track = model_.tracks[id + track_base];
    if (track.lane == Lane::kMain) {
      track_ids_.emplace(key, id + track_base);
    } else {
      track_ids_.emplace(lane_key(track.main, track.lane, track.overlap_level), id + track_base);
    }
  }
  // Slices, their args shifted past this model's args text.
  SliceTable& slices = model_.slices;
  const SliceTable& part_slices = from.slices;
  const size_t base_rows = slices.size(), part_rows = part_slices.size();
  slices.start_ns.insert(slices.start_ns.end(), part_slices.start_ns.begin(),
                         part_slices.start_ns.end());
  slices.end_ns.insert(slices.end_ns.end(), part_slices.end_ns.begin(), part_slices.end_ns.end());
  for (size_t row = 0; row < part_rows; ++row) {
    slices.track.push_back(part_slices.track[row] + track_base);
    slices.name.push_back(string_of[part_slices.name[row]]);
    slices.category.push_back(string_of[part_slices.category[row]]);
  }
  if (!part_slices.args.empty() || !slices.args.empty()) {
    // As add_slice: the column starts with the first slice that has args, zeros before it.
    const uint64_t args_base = model_.args_text.size();
    slices.args.reserve(std::max(slices.start_ns.capacity(), base_rows + part_rows));
    slices.args.resize(base_rows, 0);
    for (size_t row = 0; row < part_rows; ++row) {
      const uint64_t args = row < part_slices.args.size() ? part_slices.args[row] : 0;
      slices.args.push_back(args == 0 ? 0 : args + (args_base << 24));
    }
  }
  model_.args_text += from.args_text;
  for (size_t row = 0; row < from.instants.size(); ++row) {
    add_instant(from.instants.track[row] + track_base, from.instants.ts_ns[row],
                string_of[from.instants.name[row]]);
  }
  for (size_t row = 0; row < from.counters.size(); ++row) {
    add_counter(from.counters.track[row] + track_base, from.counters.ts_ns[row],
                from.counters.value[row]);
  }
  const LockEventTable& locks = from.lock_events;
  for (size_t row = 0; row < locks.size(); ++row) {
    add_lock_event(locks.lock[row] + track_base, locks.thread[row] + track_base, locks.ts_ns[row],
                   locks.kind[row], locks.shared[row] != 0);
  }
  for (const PendingFlow& flow : part.flows_) {
    add_flow(string_of[flow.name], moved_track(flow.from_track), flow.from_ns,
             moved_track(flow.to_track), flow.to_ns, flow.bind_to_next);
  }
  for (FileInfo& file : from.files) model_.files.push_back(std::move(file));
  model_.stats.merge(from.stats);
  part.flows_.clear();
  part.track_ids_.clear();
  from = Model();
}

void ModelBuilder::reserve_slices(size_t count) {
  SliceTable& slices = model_.slices;
  const size_t total = slices.size() + count;
  slices.start_ns.reserve(total);
  slices.end_ns.reserve(total);
  slices.track.reserve(total);
  slices.name.reserve(total);
  slices.category.reserve(total);
}

SliceId ModelBuilder::add_slice(TrackId track, int64_t start_ns, int64_t end_ns, StringId name,
                                StringId category, uint64_t args_offset, uint32_t args_size) {
  SliceTable& slices = model_.slices;
  const auto row = static_cast<SliceId>(slices.size());
  slices.start_ns.push_back(start_ns);
  slices.end_ns.push_back(end_ns);
  slices.track.push_back(track);
  slices.name.push_back(name);
  slices.category.push_back(category);
  if (args_size > 0 && args_size < (1u << 24)) {
    // The first slice with args creates the column; earlier rows have none.
    if (slices.args.size() < row) slices.args.resize(row, 0);
    slices.args.push_back(args_offset << 24 | args_size);
  } else if (!slices.args.empty()) {
    slices.args.push_back(0);
  }
  return row;
}

void ModelBuilder::add_slices(std::vector<int64_t>&& start_ns, std::vector<int64_t>&& end_ns,
                              std::vector<TrackId>&& track, std::vector<StringId>&& name,
                              std::vector<StringId>&& category, std::vector<uint64_t>&& args) {
  SliceTable& slices = model_.slices;
  const size_t base = slices.size();
  const size_t count = start_ns.size();
  auto append = [base](auto& column, auto&& part) {
    if (base == 0) {
      column = std::move(part);
    } else {
      column.insert(column.end(), part.begin(), part.end());
    }
  };
  append(slices.start_ns, std::move(start_ns));
  append(slices.end_ns, std::move(end_ns));
  append(slices.track, std::move(track));
  append(slices.name, std::move(name));
  append(slices.category, std::move(category));
  // As add_slice: the column starts with the first row that has args, zeros before it.
  const bool any_args = std::any_of(args.begin(), args.end(),
                                    [](uint64_t packed) { return (packed & 0xFFFFFF) != 0; });
  if (any_args) {
    if (slices.args.empty() && base == 0) {
      slices.args = std::move(args);
    } else {
      slices.args.resize(base, 0);
      slices.args.insert(slices.args.end(), args.begin(), args.end());
    }
  } else if (!slices.args.empty()) {
    slices.args.resize(base + count, 0);
  }
}

void ModelBuilder::add_instant(TrackId track, int64_t ts_ns, StringId name) {
  model_.instants.ts_ns.push_back(ts_ns);
  model_.instants.track.push_back(track);
  model_.instants.name.push_back(name);
}

void ModelBuilder::add_counter(TrackId track, int64_t ts_ns, double value) {
  model_.counters.ts_ns.push_back(ts_ns);
  model_.counters.track.push_back(track);
  model_.counters.value.push_back(value);
}

void ModelBuilder::add_lock_event(TrackId lock, TrackId thread, int64_t ts_ns, LockEventKind kind,
                                  bool shared) {
  LockEventTable& events = model_.lock_events;
  events.ts_ns.push_back(ts_ns);
  events.lock.push_back(lock);
  events.thread.push_back(thread);
  events.kind.push_back(kind);
  events.shared.push_back(shared ? 1 : 0);
}

void ModelBuilder::add_flow(StringId name, TrackId from_track, int64_t from_ns, TrackId to_track,
                            int64_t to_ns, bool bind_to_next) {
  flows_.push_back({name, from_track, from_ns, to_track, to_ns, bind_to_next});
}

namespace {

template <typename T>
void permute(std::vector<T>& column, const std::vector<uint32_t>& order) {
  std::vector<T> sorted(column.size());
  for (size_t row = 0; row < order.size(); ++row) sorted[row] = column[order[row]];
  column = std::move(sorted);
}

// The same into `spare`, which then holds the column's old storage: the next column of the type
// is permuted into that, not into fresh memory (a 4-million-row column is 16 or 32 MB of pages
// to fault in, again on every round of sort_slices).
template <typename T>
void permute(std::vector<T>& column, const std::vector<uint32_t>& order, std::vector<T>& spare) {
  spare.resize(column.size());
  for (size_t row = 0; row < order.size(); ++row) spare[row] = column[order[row]];
  column.swap(spare);
}

// Below this many rows finish() does its steps on one thread: a thread costs more than it saves.
constexpr size_t kTwoThreadRows = 200'000;

// Runs `first` on a thread of its own and `second` on this one, when there are rows enough and
// two hardware threads; otherwise both here. Each writes only what is its own.
template <typename First, typename Second>
void side_by_side(size_t rows, First&& first, Second&& second) {
  if (rows >= kTwoThreadRows && std::thread::hardware_concurrency() >= 2) {
    std::optional<std::thread> helper;
    std::exception_ptr error;
    try {
      helper.emplace([&] {
        try {
          first();
        } catch (...) {
          error = std::current_exception();
        }
      });
    } catch (const std::system_error&) {  // no thread to be had: both here
    }
    if (helper) {
      try {
        second();
      } catch (...) {
        helper->join();
        throw;
      }
      helper->join();
      if (error) std::rethrow_exception(error);
      return;
    }
  }
  first();
  second();
}

// Merges the adjacent runs [first, middle) and [middle, last), each in order, through `buffer`.
// Rows of the left run that come before the right run's first row stay where they are, and so
// do rows of the right run that come after the left run's last: runs that only touch cost two
// binary searches.
template <typename Iterator, typename Before>
void merge_runs(Iterator first, Iterator middle, Iterator last, Before before,
                std::vector<uint32_t>& buffer) {
  const uint32_t right_first = *middle, left_last = *(middle - 1);
  if (!before(right_first, left_last)) return;
  first = std::upper_bound(first, middle, right_first, before);
  last = std::lower_bound(middle, last, left_last, before);
  buffer.assign(first, middle);
  auto left = buffer.begin();
  auto right = middle;
  auto out = first;
  while (left != buffer.end() && right != last) *out++ = before(*right, *left) ? *right++ : *left++;
  std::copy(left, buffer.end(), out);  // what is left of the right run is in place already
}

// Sorts rows by `before`, a strict total order. A trace's rows of one track mostly come in a few
// long runs already in order (Kineto writes a thread's events as two or three interleaved time
// ranges per profiling window, and a long file repeats that window after window): the runs are
// found and merged pairwise, round after round, which costs about a pass over the rows where a
// comparison sort costs log n. Rows out of order one by one (short runs) go to std::sort. Either
// way the result is the one order `before` defines.
template <typename Iterator, typename Before>
void sort_runs(Iterator begin, Iterator end, Before before, std::vector<uint32_t>& buffer) {
  const size_t count = static_cast<size_t>(end - begin);
  // Runs of fewer than this many rows on average: std::sort.
  constexpr size_t kShortestAverageRun = 16;
  std::vector<size_t> bounds{0};  // where each run starts, then the end
  for (size_t at = 1; at < count; ++at) {
    if (!before(begin[at], begin[at - 1])) continue;
    bounds.push_back(at);
    if (bounds.size() * kShortestAverageRun > count) {
      std::sort(begin, end, before);
      return;
    }
  }
  if (bounds.size() == 1) return;
  bounds.push_back(count);
  std::vector<size_t> merged;
  while (bounds.size() > 2) {
    const size_t runs = bounds.size() - 1;
    merged.assign(1, 0);
    for (size_t run = 0; run + 1 < runs; run += 2) {
      merge_runs(begin + bounds[run], begin + bounds[run + 1], begin + bounds[run + 2], before,
                 buffer);
      merged.push_back(bounds[run + 2]);
    }
    if (runs % 2 == 1) merged.push_back(count);  // the last run waits for the next round
    bounds.swap(merged);
  }
}

}  // namespace

void ModelBuilder::sort_slices() {
  SliceTable& slices = model_.slices;
  const size_t count = slices.size();
  // Sort by (track, start, longer first) so parents precede their children.
  auto before = [&](uint32_t left, uint32_t right) {
    if (slices.track[left] != slices.track[right]) return slices.track[left] < slices.track[right];
    if (slices.start_ns[left] != slices.start_ns[right]) {
      return slices.start_ns[left] < slices.start_ns[right];
    }
    if (slices.end_ns[left] != slices.end_ns[right]) {
      return slices.end_ns[left] > slices.end_ns[right];
    }
    return left < right;
  };
  // The binary reader emits slices already in order; skip the sort then.
  bool sorted = true;
  for (uint32_t row = 1; row < count && sorted; ++row) sorted = before(row - 1, row);
  if (sorted) return;
  // Tracks arrive interleaved (a CPU thread and the GPU stream it feeds) but each track's rows
  // mostly in time order: a stable counting sort by track, then each track's rows sorted by
  // their runs (sort_runs), gives the order one sort of every row would.
  TrackId track_end = 0;
  for (TrackId track : slices.track) track_end = std::max(track_end, track + 1);
  std::vector<uint32_t> first(static_cast<size_t>(track_end) + 1, 0);
  for (TrackId track : slices.track) ++first[track + 1];
  for (size_t track = 0; track < track_end; ++track) first[track + 1] += first[track];
  std::vector<uint32_t> order(count);
  std::vector<uint32_t> next(first.begin(), first.end() - 1);
  for (uint32_t row = 0; row < count; ++row) order[next[slices.track[row]]++] = row;
  // The tracks' runs are disjoint: the largest sorts on a thread of its own, the rest on this one
  // (a Kineto file's launching thread holds about half the rows).
  size_t largest = 0;
  for (size_t track = 0; track < track_end; ++track) {
    if (first[track + 1] - first[track] > first[largest + 1] - first[largest]) largest = track;
  }
  auto sort_track = [&](size_t track, std::vector<uint32_t>& buffer) {
    sort_runs(order.begin() + first[track], order.begin() + first[track + 1], before, buffer);
  };
  side_by_side(
      count,
      [&] {
        std::vector<uint32_t> buffer;
        sort_track(largest, buffer);
      },
      [&] {
        std::vector<uint32_t> buffer;
        for (size_t track = 0; track < track_end; ++track) {
          if (track != largest) sort_track(track, buffer);
        }
      });
  // The columns are permuted independently: the two wide ones on one thread, the rest on the
  // other.
  side_by_side(
      count,
      [&] {
        std::vector<int64_t> spare;
        permute(slices.start_ns, order, spare);
        permute(slices.end_ns, order, spare);
      },
      [&] {
        std::vector<uint32_t> spare;
        permute(slices.track, order, spare);
        permute(slices.name, order, spare);
        permute(slices.category, order, spare);
        if (!slices.args.empty()) permute(slices.args, order);
      });
}

size_t ModelBuilder::nest_slices() {
  SliceTable& slices = model_.slices;
  const size_t count = slices.size();
  side_by_side(
      count, [&] { slices.depth.assign(count, 0); },
      [&] { slices.parent.assign(count, kNoSlice); });
  // Nest with a stack per track. A slice that starts inside an open slice but ends after it
  // (real Chrome and Kineto traces have such X events) moves to the track's next overlap lane,
  // whole: cutting it to its parent would lose time every total and overlap is built on.
  // Tracks nest apart from one another, so the rows are nested in two ranges split at a track's
  // first row, side by side; the rows to move are moved after, in row order, so the lanes are
  // made in the order one pass would make them.
  auto nest_rows = [&](size_t begin, size_t end, std::vector<SliceId>& moved) {
    std::vector<SliceId> stack;
    TrackId current_track = kNoTrack;
    for (auto id = static_cast<SliceId>(begin); id < end; ++id) {
      if (slices.track[id] != current_track) {
        stack.clear();
        current_track = slices.track[id];
      }
      while (!stack.empty() && slices.end_ns[stack.back()] <= slices.start_ns[id]) {
        stack.pop_back();
      }
      if (!stack.empty()) {
        const SliceId parent = stack.back();
        if (slices.end_ns[id] > slices.end_ns[parent]) {
          moved.push_back(id);
          continue;
        }
        slices.parent[id] = parent;
        slices.depth[id] = slices.depth[parent] + 1;
      }
      stack.push_back(id);
    }
  };
  // The track boundary nearest the middle row.
  size_t split = count / 2, after = count / 2;
  while (split > 0 && split < count && slices.track[split] == slices.track[split - 1]) --split;
  while (after > 0 && after < count && slices.track[after] == slices.track[after - 1]) ++after;
  if (after - count / 2 < count / 2 - split) split = after;
  std::vector<SliceId> moved_before, moved_after;
  side_by_side(
      count, [&] { nest_rows(split, count, moved_after); },
      [&] { nest_rows(0, split, moved_before); });
  moved_before.insert(moved_before.end(), moved_after.begin(), moved_after.end());
  for (const SliceId id : moved_before) {
    const Track& info = model_.tracks[slices.track[id]];
    const uint32_t level = info.lane == Lane::kOverlap ? info.overlap_level + 1 : 1;
    slices.track[id] = lane(slices.track[id], Lane::kOverlap, level);
  }
  return moved_before.size();
}

void ModelBuilder::finish() {
  SliceTable& slices = model_.slices;
  const size_t count = slices.size();
  if (!slices.args.empty()) slices.args.resize(count, 0);
  sort_slices();
  // Moved slices land on new tracks: sort and nest again until every lane nests (one round on
  // ordinary traces, two or three where several ranges overlap one another).
  while (const size_t moved = nest_slices()) {
    model_.stats.add(Stat::trace_slice_overlap_lane, static_cast<int64_t>(moved));
    sort_slices();
  }
  // A lane is of its thread's or stream's kind.
  for (Track& track : model_.tracks) {
    if (track.lane != Lane::kMain && track.main != kNoTrack) {
      const TrackKind main_kind = model_.tracks[track.main].kind;
      if (main_kind == TrackKind::kGpuStream) track.kind = main_kind;
      track.name = model_.tracks[track.main].name;
      track.process_name = model_.tracks[track.main].process_name;
    }
  }

  // Lock events sorted by time; at one timestamp a release comes before an obtain.
  LockEventTable& locks = model_.lock_events;
  std::vector<uint32_t> lock_order(locks.size());
  std::iota(lock_order.begin(), lock_order.end(), 0u);
  auto kind_rank = [](LockEventKind kind) {
    return kind == LockEventKind::kRelease ? 0 : (kind == LockEventKind::kWait ? 1 : 2);
  };
  std::stable_sort(lock_order.begin(), lock_order.end(), [&](uint32_t left, uint32_t right) {
    if (locks.ts_ns[left] != locks.ts_ns[right]) return locks.ts_ns[left] < locks.ts_ns[right];
    return kind_rank(locks.kind[left]) < kind_rank(locks.kind[right]);
  });
  permute(locks.ts_ns, lock_order);
  permute(locks.lock, lock_order);
  permute(locks.thread, lock_order);
  permute(locks.kind, lock_order);
  permute(locks.shared, lock_order);

  // Time range of the model.
  bool any = false;
  int64_t first = 0;
  int64_t last = 0;
  auto see = [&](int64_t ts) {
    if (!any) {
      first = last = ts;
      any = true;
    }
    first = std::min(first, ts);
    last = std::max(last, ts);
  };
  for (size_t row = 0; row < count; ++row) {
    see(slices.start_ns[row]);
    see(slices.end_ns[row]);
  }
  for (int64_t ts : model_.instants.ts_ns) see(ts);
  for (int64_t ts : model_.counters.ts_ns) see(ts);
  for (int64_t ts : locks.ts_ns) see(ts);
  model_.start_ns = first;
  model_.end_ns = last;

  // Bind flows to slices (binary traces without flows skip building the index).
  if (flows_.empty()) return;
  TrackIndex index(model_);
  // A flow names a thread or stream, not a lane. An event that overlapped part of the one before
  // it moved to an overlap lane (a kernel that starts before the previous one ends: programmatic
  // dependent launch on one stream), so the point that lands at its start binds to it there,
  // not to the op it overlaps on the main lane.
  std::vector<std::vector<TrackId>> overlap_lanes(model_.tracks.size());
  for (TrackId track = 0; track < model_.tracks.size(); ++track) {
    const TrackId main = model_.tracks[track].main;
    if (main != track && main < overlap_lanes.size()) overlap_lanes[main].push_back(track);
  }
  auto bind_at = [&](TrackId track, int64_t ts) {
    const SliceId enclosing = index.innermost_at(track, ts);
    if (track >= overlap_lanes.size() || overlap_lanes[track].empty() ||
        (enclosing != kNoSlice && slices.start_ns[enclosing] == ts)) {
      return enclosing;
    }
    for (TrackId lane : overlap_lanes[track]) {
      const SliceId starting = index.innermost_at(lane, ts);
      if (starting != kNoSlice && slices.start_ns[starting] == ts) return starting;
    }
    return enclosing;
  };
  FlowTable& flows = model_.flows;
  const size_t flow_count = flows.size() + flows_.size();
  const size_t existing = flows.size();
  flows.name.resize(flow_count);
  flows.from_track.resize(flow_count);
  flows.to_track.resize(flow_count);
  flows.from_ns.resize(flow_count);
  flows.to_ns.resize(flow_count);
  flows.from_slice.resize(flow_count);
  flows.to_slice.resize(flow_count);
  // Each flow's binding is two searches of the index, independent of every other flow's: the
  // rows are split in two halves, each written in place.
  auto bind = [&](size_t begin, size_t end) {
    for (size_t pending = begin; pending < end; ++pending) {
      const PendingFlow& flow = flows_[pending];
      const size_t row = existing + pending;
      flows.name[row] = flow.name;
      flows.from_track[row] = flow.from_track;
      flows.to_track[row] = flow.to_track;
      flows.from_ns[row] = flow.from_ns;
      flows.to_ns[row] = flow.to_ns;
      flows.from_slice[row] = bind_at(flow.from_track, flow.from_ns);
      flows.to_slice[row] = flow.bind_to_next
                                ? index.next_starting_at_or_after(flow.to_track, flow.to_ns)
                                : bind_at(flow.to_track, flow.to_ns);
    }
  };
  const size_t half = flows_.size() / 2;
  side_by_side(
      flows_.size(), [&] { bind(half, flows_.size()); }, [&] { bind(0, half); });
  flows_.clear();
}

TrackIndex::TrackIndex(const Model& model) : model_(model), by_track_(model.tracks.size()) {
  // Slices are sorted by (track, start, longer first) after finish().
  std::vector<uint32_t> counts(by_track_.size(), 0);
  for (TrackId track : model.slices.track) ++counts[track];
  for (size_t track = 0; track < by_track_.size(); ++track) by_track_[track].reserve(counts[track]);
  for (SliceId id = 0; id < model.slices.size(); ++id) {
    by_track_[model.slices.track[id]].push_back(id);
  }
  contiguous_.resize(by_track_.size(), 0);
  for (size_t track = 0; track < by_track_.size(); ++track) {
    const auto& ids = by_track_[track];
    contiguous_[track] = !ids.empty() && ids.back() - ids.front() + 1 == ids.size();
  }
}

SliceId TrackIndex::innermost_at(TrackId track, int64_t ts) const {
  if (track >= by_track_.size()) return kNoSlice;
  const auto& ids = by_track_[track];
  const SliceTable& slices = model_.slices;
  // The last slice starting at or before ts; walk up its parents until one contains ts.
  SliceId candidate = kNoSlice;
  if (contiguous_[track]) {
    // The track's rows are one run of the table: search the start column itself.
    const auto begin = slices.start_ns.begin() + ids.front();
    const auto after = std::upper_bound(begin, begin + static_cast<std::ptrdiff_t>(ids.size()), ts);
    if (after == begin) return kNoSlice;
    candidate = ids.front() + static_cast<SliceId>(after - begin) - 1;
  } else {
    auto after = std::upper_bound(ids.begin(), ids.end(), ts, [&](int64_t value, SliceId id) {
      return value < slices.start_ns[id];
    });
    if (after == ids.begin()) return kNoSlice;
    candidate = *(after - 1);
  }
  while (candidate != kNoSlice) {
    const bool inside = slices.start_ns[candidate] <= ts &&
                        (ts < slices.end_ns[candidate] || slices.start_ns[candidate] == ts);
    if (inside) return candidate;
    candidate = slices.parent[candidate];
  }
  // A sibling subtree may end before ts while an earlier top-level slice still contains it only
  // through nesting, which the parent walk covers; nothing contains ts.
  return kNoSlice;
}

std::vector<LockSpan> derive_lock_spans(const Model& model, StatsRegistry& stats) {
  struct State {
    int64_t wait_start = -1;
    std::vector<std::pair<int64_t, bool>> holds;  // obtain time, shared
  };
  std::map<std::pair<TrackId, TrackId>, State> states;
  std::vector<LockSpan> spans;
  const LockEventTable& events = model.lock_events;
  for (size_t row = 0; row < events.size(); ++row) {
    State& state = states[{events.lock[row], events.thread[row]}];
    const int64_t ts = events.ts_ns[row];
    const bool shared = events.shared[row] != 0;
    switch (events.kind[row]) {
      case LockEventKind::kWait:
        if (state.wait_start >= 0) stats.add(Stat::trace_lock_event_unmatched);
        state.wait_start = ts;
        break;
      case LockEventKind::kObtain:
        if (state.wait_start >= 0) {
          spans.push_back(
              {events.lock[row], events.thread[row], state.wait_start, ts, false, shared});
          state.wait_start = -1;
        }
        state.holds.emplace_back(ts, shared);
        break;
      case LockEventKind::kRelease:
        if (state.holds.empty()) {
          stats.add(Stat::trace_lock_event_unmatched);
          break;
        }
        spans.push_back({events.lock[row], events.thread[row], state.holds.back().first, ts, true,
                         state.holds.back().second});
        state.holds.pop_back();
        break;
    }
  }
  for (auto& [key, state] : states) {
    if (state.wait_start >= 0) stats.add(Stat::trace_lock_event_unmatched);
    for (const auto& [start, shared] : state.holds) {
      spans.push_back({key.first, key.second, start, model.end_ns, true, shared});
      stats.add(Stat::trace_lock_event_unmatched);
    }
  }
  std::sort(spans.begin(), spans.end(), [](const LockSpan& left, const LockSpan& right) {
    if (left.start_ns != right.start_ns) return left.start_ns < right.start_ns;
    if (left.lock != right.lock) return left.lock < right.lock;
    return left.thread < right.thread;
  });
  return spans;
}

SliceId TrackIndex::next_starting_at_or_after(TrackId track, int64_t ts) const {
  if (track >= by_track_.size()) return kNoSlice;
  const auto& ids = by_track_[track];
  const SliceTable& slices = model_.slices;
  auto found = std::lower_bound(ids.begin(), ids.end(), ts, [&](SliceId id, int64_t value) {
    return slices.start_ns[id] < value;
  });
  return found == ids.end() ? kNoSlice : *found;
}

}  // namespace loupe::trace
