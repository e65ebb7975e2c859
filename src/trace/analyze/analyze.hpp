// trace/analyze/analyze.hpp — the analyses over the columnar model, each producing findings.
//
//   breakdown  per track and name: count, total (a union of intervals) and self time
//   overlap    between two user classes, overall and per instance of a window class
//   locks      contended waits per lock and waiter, who held the lock meanwhile and what the
//              holder was doing (its innermost open zone)
//   gaps       idle intervals of GPU streams (or threads) above a threshold, and what the thread
//              feeding the track (by flows) was doing meanwhile
//   diff       two traces of one workload compared through the above
// Every result is a loupe::Finding (layer trace) with slice ids and time windows as evidence,
// plus a table in the envelope's data; output is bounded unless `detail` is set.
// Include only from .cpp files: pulls in core/json.hpp.
// Thread-safety: pure functions over a finished Model.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/json.hpp"
#include "trace/model/model.hpp"

namespace loupe::trace {

// A selector picks slices. Terms joined by '&' must all match:
//   name:REGEX      the slice name matches the ECMAScript regex (searched; anchor with ^ and $)
//   cat:CATEGORY    one of the slice's comma-separated categories equals CATEGORY
//   thread:X        on a CPU thread track whose name is X or whose tid is X
//   stream:X        on a GPU stream track whose name is X or whose stream id is X
//   track:X         on any track whose name or id is X
//   kind:K          on a track of kind thread | gpu_stream
// A term without a prefix is a name regex. Throws Error(kUsage) naming a malformed term.
class Selector {
 public:
  explicit Selector(const std::string& text);
  // Marks, per slice, whether it is selected.
  std::vector<uint8_t> select(const Model& model) const;
  const std::string& text() const { return text_; }

 private:
  struct Term {
    enum class Kind { kName, kCategory, kThread, kStream, kTrack, kTrackKind } kind;
    std::string value;
    std::optional<std::regex> regex;
  };
  bool track_matches(const Model& model, TrackId track) const;
  std::string text_;
  std::vector<Term> terms_;
};

struct ClassDef {
  std::string name;
  std::string selector;
};
// Parses "NAME=SELECTOR"; throws Error(kUsage).
ClassDef parse_class(const std::string& text);
// Parses "100us", "2ms", "1.5s", "500ns" (a bare number is nanoseconds); throws Error(kUsage)
// naming `input` (the option or argument it came from) and the text.
int64_t parse_duration_ns(std::string_view input, const std::string& text);

struct AnalyzeRequest {
  std::vector<ClassDef> classes;
  std::optional<std::pair<std::string, std::string>> overlap;  // class names
  std::string window_class;                                    // empty: no windows
  int64_t gap_threshold_ns = 100'000;
  bool detail = false;
  size_t top = 6;  // findings shown without detail (tables keep 5 rows, names 80 characters)
};

using Interval = std::pair<int64_t, int64_t>;
// Sorts and merges; empty intervals are dropped.
std::vector<Interval> union_of(std::vector<Interval> intervals);
int64_t total_length(const std::vector<Interval>& intervals);
std::vector<Interval> intersect(const std::vector<Interval>& left,
                                const std::vector<Interval>& right);

struct BreakdownRow {
  TrackId track;
  StringId name;
  uint64_t count = 0;
  int64_t total_ns = 0;  // union of the name's slices on the track
  int64_t self_ns = 0;   // minus time in child slices
  SliceId longest = kNoSlice;
};
struct Breakdown {
  std::vector<BreakdownRow> rows;      // by self time, descending
  std::map<TrackId, int64_t> busy_ns;  // union of each track's slices
};
Breakdown compute_breakdown(const Model& model);

struct OverlapWindow {
  SliceId window;
  int64_t a_ns, b_ns, both_ns;
};
struct Overlap {
  std::string a, b;
  int64_t a_ns = 0, b_ns = 0, both_ns = 0;  // |A|, |B|, |A ∩ B|
  std::vector<OverlapWindow> windows;       // per instance of the window class, in time order
  std::string window_class;
};
Overlap compute_overlap(const Model& model, const Selector& a, const Selector& b,
                        const std::string& a_name, const std::string& b_name,
                        const Selector* window, const std::string& window_name);

// Time a thread spent in each innermost open zone over [start, end); "(no zone)" for the rest.
std::vector<std::pair<std::string, int64_t>> innermost_zones(const Model& model,
                                                             const TrackIndex& index, TrackId track,
                                                             int64_t start, int64_t end);

struct LockContention {
  TrackId lock;
  TrackId waiter;
  uint64_t waits = 0;
  int64_t wait_ns = 0;
  Interval longest{0, 0};
  // Per holder: time it held the lock while the waiter waited, and its zones meanwhile.
  struct Holder {
    TrackId thread;
    int64_t held_ns = 0;
    std::vector<std::pair<std::string, int64_t>> zones;  // descending
  };
  std::vector<Holder> holders;  // descending by held_ns
};
struct LockSummary {
  TrackId lock;
  uint64_t obtains = 0;
  uint64_t contended = 0;
  int64_t wait_ns = 0;
  int64_t hold_ns = 0;
};
// A hold of a shared lock (one that some thread waited on, or that two or more threads take)
// lasting at least twice the lock's median hold and 50 µs: latent contention, visible before a
// waiter happens to arrive during it.
struct LongHold {
  TrackId lock;
  TrackId thread;
  Interval interval{0, 0};
  int64_t median_hold_ns = 0;                          // of the lock, for scale
  uint64_t waiters = 0;                                // waits that overlapped it
  std::vector<std::pair<std::string, int64_t>> zones;  // the holder's innermost zones, descending
};
struct Locks {
  std::vector<LockSummary> locks;
  std::vector<LockContention> contentions;  // descending by wait_ns
  std::vector<LongHold> long_holds;         // descending by duration, at most kMaxLongHolds
};
inline constexpr size_t kMaxLongHolds = 5;
Locks compute_locks(const Model& model, StatsRegistry& stats);

struct Gap {
  TrackId track;
  Interval interval;
  SliceId before = kNoSlice, after = kNoSlice;
};
struct TrackGaps {
  TrackId track;
  TrackId feeder = kNoTrack;  // the thread with most flows into the track
  int64_t span_ns = 0;
  int64_t idle_ns = 0;                                        // in gaps above the threshold
  std::vector<Gap> gaps;                                      // descending by length
  std::vector<std::pair<std::string, int64_t>> feeder_zones;  // over all gaps, descending
};
std::vector<TrackGaps> compute_gaps(const Model& model, int64_t threshold_ns);

// The whole `loupe trace analyze` answer: findings and data, bounded unless request.detail.
Envelope analyze(const Model& model, const AnalyzeRequest& request);
// `loupe trace diff`: B against A.
Envelope diff(const Model& a, const Model& b, const AnalyzeRequest& request);

// "1.234 ms"-style durations used in claims.
std::string format_duration(int64_t ns);

}  // namespace loupe::trace
