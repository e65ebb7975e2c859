// core/stats_registry.hpp — counts of input problems that readers repaired or dropped.
//
// Perfetto's habit (STYLE.md item 5): one declared list of named problems, each with a severity;
// readers increment a counter instead of skipping silently, and every envelope carries the
// non-zero counts in "stats". Adding a stat means adding one line to LOUPE_STATS_LIST and a test
// that triggers it.
// Thread-safety: a StatsRegistry is owned by one operation on one thread; merge() combines them.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace loupe {

enum class StatSeverity { kInfo, kDataLoss, kError };

// X(name, severity, description)
#define LOUPE_STATS_LIST(X)                                                                       \
  X(diff_tensor_only_in_a, kInfo, "a tensor present in A only; reported, not compared")           \
  X(diff_tensor_only_in_b, kInfo, "a tensor present in B only; reported, not compared")           \
  X(diff_file_not_tensor, kInfo, "a file in a compared directory that is not .npy/.safetensors")  \
  X(trace_recorder_dropped, kDataLoss, "events the recorder dropped: a thread's buffer was full") \
  X(trace_slice_overlap_lane, kInfo,                                                              \
    "a slice overlapping part of its enclosing slice; moved to an overlap lane, time kept")       \
  X(trace_zone_end_unmatched, kDataLoss, "an end (E, zone end) with no open begin; dropped")      \
  X(trace_zone_unclosed, kDataLoss, "a begin never ended; closed at the track's last event")      \
  X(trace_flow_unmatched, kInfo, "a flow begin or end without its other side; dropped")           \
  X(trace_lock_event_unmatched, kInfo, "a lock obtain or release without its pair; dropped")      \
  X(trace_json_truncated, kDataLoss, "a JSON trace cut mid-event; complete events were read")     \
  X(trace_json_invalid_utf8, kInfo, "an invalid UTF-8 byte in a JSON trace, replaced by '?'")     \
  X(trace_json_control_character, kInfo, "a raw control character in a JSON string, replaced")    \
  X(trace_json_id_beyond_int64, kInfo, "an id that does not fit int64; kept as text")             \
  X(trace_json_event_malformed, kDataLoss,                                                        \
    "an event missing ph/ts or with ill-typed fields; dropped")                                   \
  X(trace_json_phase_unsupported, kInfo,                                                          \
    "an event phase loupe does not model (async b/n/e, O); skipped")                              \
  X(counters_preamble_line, kInfo, "an ncu ==PROF==/==WARNING== line before or between CSV rows") \
  X(counters_foreign_line, kInfo, "a line that is not ncu CSV (the program's own output)")        \
  X(counters_header_repeated, kInfo, "the CSV header again (concatenated exports); skipped")      \
  X(counters_row_malformed, kDataLoss,                                                            \
    "an ncu CSV row with the wrong number of fields or a bad launch ID; dropped")                 \
  X(counters_value_missing, kInfo,                                                                \
    "a metric value ncu printed as n/a, no data or empty; left out")                              \
  X(counters_value_not_number, kDataLoss,                                                         \
    "a metric value with a unit that is not a number; kept as text")                              \
  X(counters_unit_unknown, kInfo, "a metric unit loupe does not know; the value kept unscaled")   \
  X(counters_launch_conflict, kDataLoss,                                                          \
    "one launch ID with two kernel names across merged files; the later launch dropped")

enum class Stat : uint16_t {
#define LOUPE_STAT_ENUM(name, severity, description) name,
  LOUPE_STATS_LIST(LOUPE_STAT_ENUM)
#undef LOUPE_STAT_ENUM
      kCount
};

struct StatInfo {
  std::string_view name;
  StatSeverity severity;
  std::string_view description;
};

const StatInfo& stat_info(Stat stat);
std::string_view stat_severity_name(StatSeverity severity);

class StatsRegistry {
 public:
  void add(Stat stat, int64_t n = 1) { counts_[static_cast<size_t>(stat)] += n; }
  int64_t count(Stat stat) const { return counts_[static_cast<size_t>(stat)]; }
  void merge(const StatsRegistry& other);
  bool all_zero() const;

 private:
  std::array<int64_t, static_cast<size_t>(Stat::kCount)> counts_{};
};

}  // namespace loupe
