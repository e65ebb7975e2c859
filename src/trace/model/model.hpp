// trace/model/model.hpp — the one columnar model every importer fills and every analysis reads.
//
// Tables are structs of column vectors (perfetto trace_processor's habit): tracks (CPU threads,
// GPU streams, locks), slices with depth and parent, instants, counters, flows and lock events.
// Importers append through ModelBuilder, whose finish() sorts slices per track, repairs
// overlapping slices (counted in the stats registry) and computes depth and parent.
// A slice's id is its row index; event ids in findings are slice ids.
// Thread-safety: a finished Model is immutable and may be read from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/stats_registry.hpp"

namespace loupe::trace {

using StringId = uint32_t;
using TrackId = uint32_t;
using SliceId = uint32_t;
inline constexpr SliceId kNoSlice = 0xFFFFFFFFu;
inline constexpr TrackId kNoTrack = 0xFFFFFFFFu;

// Interns strings; id 0 is the empty string. Importers intern one or two names per event, so the
// lookup is an open-addressing table of ids keyed by a word-at-a-time hash (no allocation once a
// string is known). A view returned by get() stays valid until the next intern().
class StringPool {
 public:
  StringPool();
  StringId intern(std::string_view text);
  std::string_view get(StringId id) const { return strings_[id]; }
  size_t size() const { return strings_.size(); }

 private:
  void grow();

  std::vector<std::string> strings_;
  std::vector<uint64_t> hashes_;  // per id
  std::vector<StringId> slots_;   // id + 1 per slot, 0 when empty; a power of two in size
};

enum class TrackKind : uint8_t { kThread, kGpuStream, kLock, kCounter };
std::string_view track_kind_name(TrackKind kind);

// A thread or stream may hold several lanes: slices of one lane nest properly, lanes may overlap
// each other. Kineto's Python-stack events (`python_function`) interleave with record_function
// ranges (a range opens inside `_record_function_enter_new` and closes after it), so they get a
// lane of their own; `gpu_user_annotation` ranges are labels over a stream, not work on it; and a
// slice that overlaps part of its enclosing slice moves to the next overlap lane instead of being
// cut (ModelBuilder::finish). Every slice keeps its full time.
enum class Lane : uint8_t { kMain, kPython, kAnnotation, kOverlap };
std::string_view lane_name(Lane lane);

struct Track {
  TrackKind kind = TrackKind::kThread;
  std::string name;          // thread name, "stream 7", lock name, counter series
  std::string process_name;  // may be empty
  std::string pid;           // as written in the input (numbers as decimal text)
  std::string tid;           // thread id, stream id, or lock id
  uint32_t file_index = 0;
  bool shared_lock = false;
  Lane lane = Lane::kMain;
  uint32_t overlap_level = 0;  // 1, 2, ... for kOverlap lanes
  TrackId main = kNoTrack;     // the main lane of the same thread or stream (itself when main)
};

struct SliceTable {
  std::vector<int64_t> start_ns;
  std::vector<int64_t> end_ns;
  std::vector<TrackId> track;
  std::vector<StringId> name;
  std::vector<StringId> category;
  std::vector<uint32_t> depth;
  std::vector<SliceId> parent;
  // The event's `args` object as written: offset into Model::args_text << 24 | size (objects of
  // 16 MiB and more are not kept). Empty when no slice has args (loupe binary traces), so those
  // pay nothing for it.
  std::vector<uint64_t> args;
  size_t size() const { return start_ns.size(); }
};

struct InstantTable {
  std::vector<int64_t> ts_ns;
  std::vector<TrackId> track;
  std::vector<StringId> name;
  size_t size() const { return ts_ns.size(); }
};

struct CounterTable {
  std::vector<int64_t> ts_ns;
  std::vector<TrackId> track;  // a kCounter track per series
  std::vector<double> value;
  size_t size() const { return ts_ns.size(); }
};

struct FlowTable {
  std::vector<StringId> name;
  std::vector<SliceId> from_slice;  // kNoSlice when no slice encloses the flow's begin
  std::vector<SliceId> to_slice;
  std::vector<TrackId> from_track;
  std::vector<TrackId> to_track;
  std::vector<int64_t> from_ns;
  std::vector<int64_t> to_ns;
  size_t size() const { return name.size(); }
};

enum class LockEventKind : uint8_t { kWait, kObtain, kRelease };

// One row per wait-begin, obtain or release, sorted by time.
struct LockEventTable {
  std::vector<int64_t> ts_ns;
  std::vector<TrackId> lock;    // a kLock track
  std::vector<TrackId> thread;  // the thread that waited, obtained or released
  std::vector<LockEventKind> kind;
  std::vector<uint8_t> shared;  // 1 for the shared forms
  size_t size() const { return ts_ns.size(); }
};

// How one input file's clock was mapped onto the model's time line.
struct FileInfo {
  std::string path;
  std::string format;        // "loupe-binary", "chrome-json", "kineto"
  std::string clock_domain;  // "monotonic", "kineto-base", "unknown"
  int64_t offset_ns = 0;     // added to the file's timestamps
  uint64_t events = 0;
  uint64_t dropped_by_recorder = 0;
  // The rank of a multi-rank job this file holds: from Kineto's distributedInfo, else the file
  // name (rank-3, rank_3, rank3), else `--rank`, which overrides both; -1 when none says.
  int rank = -1;
  std::string rank_source;  // "distributedInfo", "file name", "--rank", or empty
  int world_size = 0;       // distributedInfo.world_size when given
  // The process groups this rank belongs to, as Kineto's distributedInfo.pg_config lists them
  // (creation order): gloo's collectives record no group of their own, so their worker thread
  // tells which of these ran them.
  struct ProcessGroup {
    std::string name;     // pg_name: "0", "1", ... alike on every rank
    std::string backend;  // backend_config: "cpu:gloo,cuda:gloo", "cuda:nccl"
    std::vector<int> ranks;
  };
  std::vector<ProcessGroup> process_groups;
};

struct Model {
  StringPool strings;
  std::vector<Track> tracks;
  SliceTable slices;
  InstantTable instants;
  CounterTable counters;
  FlowTable flows;
  LockEventTable lock_events;
  std::vector<FileInfo> files;
  std::string alignment;   // a sentence saying how the files' clocks were aligned
  bool one_clock = false;  // several files, all of one known clock domain (merged unshifted)
  StatsRegistry stats;
  std::string args_text;  // slices' args objects, back to back
  int64_t start_ns = 0;   // first and last timestamp of any event
  int64_t end_ns = 0;

  std::string_view slice_name(SliceId id) const { return strings.get(slices.name[id]); }
  std::string_view slice_category(SliceId id) const { return strings.get(slices.category[id]); }
  std::string_view slice_args(SliceId id) const {
    if (slices.args.empty()) return {};
    return std::string_view(args_text).substr(slices.args[id] >> 24, slices.args[id] & 0xFFFFFF);
  }
  // "name (pid/tid)", "name [python] (pid/tid)" for a lane; unique within the model. In a model
  // of several ranks, prefixed "rank R: " (tracks are read grouped by rank).
  std::string track_label(TrackId id) const;
  // The rank of the file the track came from; -1 when unknown.
  int track_rank(TrackId id) const {
    return files.empty() ? -1 : files[tracks[id].file_index].rank;
  }
  // Two or more distinct ranks among the files.
  bool multi_rank() const;
};

// Builds a Model. Slices may be added in any order; finish() sorts and nests them.
class ModelBuilder {
 public:
  explicit ModelBuilder(Model& model) : model_(model) {}

  // Finds or creates the track keyed by (file, kind, pid, tid).
  TrackId track(uint32_t file_index, TrackKind kind, std::string_view pid, std::string_view tid);
  // Finds or creates a lane of `main` (same file, pid and tid; kind follows the main track's at
  // finish()).
  TrackId lane(TrackId main, Lane lane, uint32_t overlap_level = 0);
  Track& track_info(TrackId id) { return model_.tracks[id]; }

  // Returns the slice's row until finish() reorders rows.
  SliceId add_slice(TrackId track, int64_t start_ns, int64_t end_ns, StringId name,
                    StringId category, uint64_t args_offset = 0, uint32_t args_size = 0);
  // Appends the rows add_slice would add one by one, column by column; into an empty table the
  // columns are moved, not copied (an importer's bulk path). `args` as SliceTable::args, or
  // empty when no row has args. REQUIRES: the columns have one length (args: it or none).
  void add_slices(std::vector<int64_t>&& start_ns, std::vector<int64_t>&& end_ns,
                  std::vector<TrackId>&& track, std::vector<StringId>&& name,
                  std::vector<StringId>&& category, std::vector<uint64_t>&& args);
  void set_slice_end(SliceId row, int64_t end_ns) { model_.slices.end_ns[row] = end_ns; }
  void reserve_slices(size_t count);
  void add_instant(TrackId track, int64_t ts_ns, StringId name);
  void add_counter(TrackId track, int64_t ts_ns, double value);
  void add_lock_event(TrackId lock, TrackId thread, int64_t ts_ns, LockEventKind kind, bool shared);
  // A flow is bound to slices in finish(): the begin to the innermost slice enclosing from_ns on
  // from_track; the end to the innermost slice enclosing to_ns on to_track, or, when
  // bind_to_next is set (Chrome "f" without "bp":"e"), to the next slice starting at or after it.
  void add_flow(StringId name, TrackId from_track, int64_t from_ns, TrackId to_track, int64_t to_ns,
                bool bind_to_next);
  // Room for `count` more add_flow calls, so a bulk importer's flows do not grow by doubling.
  void reserve_flows(size_t count) { flows_.reserve(flows_.size() + count); }

  StringId intern(std::string_view text) { return model_.strings.intern(text); }
  Model& model() { return model_; }

  // Whether importers keep each slice's `args` object (Model::args_text). Only the Chrome export
  // writes them back; the analyses never read them, and copying ~100 bytes per Kineto event cost
  // analysis ~5 % of its time, so they are off unless asked for (load_traces' keep_args).
  void keep_args(bool keep) { keep_args_ = keep; }
  bool keeps_args() const { return keep_args_; }

  // Moves what `part` built (other files, imported by a builder of their own, not finished) into
  // this model after what it holds: strings interned here, track ids shifted, args re-based. The
  // result is the model one builder importing the same files in the same order would hold, so
  // files may be parsed on threads of their own and appended in order (load_traces).
  // REQUIRES: the part's files are not among this model's (file indices are part of track keys).
  void append(ModelBuilder& part);

  // Sorts, repairs and nests. Call once, after every file was added.
  void finish();

 private:
  static std::string lane_key(TrackId main, Lane lane, uint32_t overlap_level);
  void sort_slices();
  // Nests slices; returns how many overlapped part of their parent and moved to a lane.
  size_t nest_slices();
  struct PendingFlow {
    StringId name;
    TrackId from_track;
    int64_t from_ns;
    TrackId to_track;
    int64_t to_ns;
    bool bind_to_next;
  };
  bool keep_args_ = false;
  Model& model_;
  std::unordered_map<std::string, TrackId> track_ids_;
  std::vector<PendingFlow> flows_;
};

// Waits (wait-begin to obtain) and holds (obtain to release) of one thread on one lock, derived
// from the lock events. Unpaired events are counted in `stats` (trace_lock_event_unmatched);
// a hold still open at the end of the trace ends at Model::end_ns.
struct LockSpan {
  TrackId lock;
  TrackId thread;
  int64_t start_ns;
  int64_t end_ns;
  bool hold;  // false: a contended wait
  bool shared;
};
std::vector<LockSpan> derive_lock_spans(const Model& model, StatsRegistry& stats);

// Innermost slice of `track` that contains ts (start <= ts < end, or ts == start for empty
// slices); kNoSlice when none. Uses the per-track index built by TrackIndex.
class TrackIndex {
 public:
  explicit TrackIndex(const Model& model);
  // Slices of the track, sorted by (start, depth).
  const std::vector<SliceId>& slices(TrackId track) const { return by_track_[track]; }
  SliceId innermost_at(TrackId track, int64_t ts) const;
  SliceId next_starting_at_or_after(TrackId track, int64_t ts) const;

 private:
  const Model& model_;
  std::vector<std::vector<SliceId>> by_track_;
  std::vector<uint8_t> contiguous_;  // by track: 1 when its ids are consecutive rows
};

}  // namespace loupe::trace
