// counters/profile.hpp — what Nsight Compute measured: launches, their metrics and rule results.
//
// read_ncu_csv reads either page of `ncu --csv`: the details page (header "ID", ..., "Section
// Name", "Metric Name", "Metric Unit", "Metric Value" and, in newer ncu, the rule columns "Rule
// Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup"): one row
// per launch and metric or rule; and the raw page (`--page raw`): one row per launch, a column per
// metric, and a second row holding the units. Values are normalised to base units
// (csv.hpp normalise_unit: bytes, ns, hz, byte/s). Several files (the details and raw pages of
// one report) merge launch by launch on the launch ID.
// Errors: a file that cannot be read, holds no ncu header, breaks CSV quoting, or holds no launch
// throws Error(kInput) naming the file and the line (and column where there is one); ncu's own
// ==ERROR== lines are quoted in that message. Rows that can be read but not used are dropped and
// counted in the StatsRegistry (counters_* stats), never skipped silently.
// Thread-safety: value types; the readers are pure functions of their input.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/stats_registry.hpp"

namespace loupe::counters {

// One measured value, compact: a raw page holds a value per launch × column (millions in a large
// export), so the names, units and text values are interned in the Profile and referred to by
// index. Read them through Profile::view.
struct Metric {
  uint32_t key = 0;         // Profile::keys: (section, name)
  uint32_t unit = 0;        // Profile::units: the normalised unit
  uint32_t text = kNoText;  // Profile::texts: the value as printed when it is not a number
  double value = std::numeric_limits<double>::quiet_NaN();  // NaN when the value is text
  static constexpr uint32_t kNoText = 0xffffffffu;
};

// Which metric: the details page's section display name ("GPU Speed Of Light Throughput") and
// metric name; a raw-page metric has an empty section and ncu's metric name
// ("dram__bytes_read.sum").
struct MetricKey {
  std::string section;
  std::string name;
};

// A metric with its names resolved.
struct MetricView {
  std::string_view section;
  std::string_view name;
  std::string_view unit;  // normalised (csv.hpp), e.g. "byte", "ns", "%"
  double value = std::numeric_limits<double>::quiet_NaN();
  std::string_view text;
};

// One guided-analysis rule that fired (details page, rule columns).
struct RuleResult {
  std::string section;       // the section identifier ncu gives rule rows ("SpeedOfLight")
  std::string name;          // "SOLBottleneck"
  std::string type;          // "OPT", "WRN", "INF", ...
  std::string description;   // ncu's advice, verbatim
  std::string speedup_type;  // "local" or "global"; empty when none
  double speedup_pct = std::numeric_limits<double>::quiet_NaN();
};

struct Launch {
  int64_t id = 0;      // ncu's launch ID within the report
  std::string kernel;  // the kernel name as ncu printed it (demangled by default)
  std::string block;   // "(128, 1, 1)"
  std::string grid;    // "(64, 16, 1)"
  std::string device;
  std::string compute_capability;
  std::string process;  // "PID name"
  std::string stream;
  std::vector<Metric> metrics;
  std::vector<RuleResult> rules;
  std::string file;  // the file (and line) the launch was first read from: "a.csv:4"
};

struct Profile {
  std::vector<std::string> files;
  std::vector<Launch> launches;  // in launch ID order
  bool has_details = false;
  bool has_raw = false;
  std::vector<MetricKey> keys;
  std::vector<std::string> units;
  std::vector<std::string> texts;

  // The index of (section, name) in keys, added when absent.
  uint32_t intern_key(std::string_view section, std::string_view name);
  uint32_t intern_unit(std::string_view unit);
  // The index of (section, name) in keys, or nullopt when no launch has it.
  std::optional<uint32_t> key_of(std::string_view section, std::string_view name) const;
  MetricView view(const Metric& metric) const;
  // The first metric called `name` in `section` ("" is the raw page) of `launch`, if any.
  std::optional<MetricView> find(const Launch& launch, std::string_view section,
                                 std::string_view name) const;

 private:
  std::unordered_map<std::string, uint32_t> key_index_;  // section + '\x1f' + name
  std::string scratch_;
};

// Reads one CSV export (either page) into `profile`, merging into launches already there.
// `source` names the input in messages (the path). REQUIRES: text is the whole file.
void parse_ncu_csv(std::string_view text, const std::string& source, Profile& profile,
                   StatsRegistry& stats);
// Reads one file (memory-mapped; gzip-compressed files are inflated first) into `profile`,
// merging.
void read_ncu_csv_file(const std::filesystem::path& file, Profile& profile, StatsRegistry& stats);
// Reads the files in order and merges them.
Profile read_ncu_csv(const std::vector<std::filesystem::path>& files, StatsRegistry& stats);

}  // namespace loupe::counters
