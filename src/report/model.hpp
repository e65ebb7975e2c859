// report/model.hpp — the one result model of a recorded run, and its three renderings.
//
// build_model reads a ledger RunRecord and the run's observation files (observation.json, the
// check tensors, the scenario traces) into a Model: a header, the gate table, the findings worth
// reading first, and plot data where people would rather look than read — the error profile of a
// failing check along its profile axis, the A/B ratios of a bench sweep with their confidence
// intervals and the verdict band, and a timeline strip of the scenario a failing gate explains
// (threads as rows, zones, the lock-wait intervals and the holder's intervals highlighted).
// Everything is bounded: every list has a cap, and what a cap left out is counted in the model
// and said in every rendering.
// The renderings are pure functions of the Model: render_terminal (what `loupe run` and
// `loupe report RUN` print), render_markdown (a CI job summary: no images) and render_html (one
// self-contained page: inline SVG, no network, no script, every data string escaped).
// Errors: build_model never throws for a missing or unreadable observation (the run may have been
// moved or cleaned); it records a note instead. Thread-safety: value types and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/finding.hpp"
#include "core/stats_registry.hpp"
#include "ledger/ledger.hpp"
#include "report/trend.hpp"

namespace loupe::report {

struct Header {
  std::string run_id;
  std::string title;           // the objective's name, else its file
  std::string objective_path;  // as recorded
  std::string configuration;   // "incident precision=tf32_rz ..."; "(ad hoc)" without a name
  std::string status;          // ledger run status: completed, interrupted, failed, in-progress
  std::string started_at;
  std::string ended_at;  // empty while in progress
  std::string git;       // "abc1234 (dirty)"; empty outside a repository
  size_t points = 0;     // observations recorded
  std::optional<double> wall_s;
  Verdict verdict = Verdict::kNone;
  std::string ledger_file;
  std::string subject_failure;  // why the subject stopped the run; empty when it did not
};

struct GateRow {
  std::string name;
  std::optional<Layer> layer;  // unknown when the objective changed or is gone
  GateVerdict verdict = GateVerdict::kNotRun;
  std::string key_statistic;  // "2.1e-05 <= 2e-06 n=1", "-" when not run
  std::string rule;           // the sentence that decided
};

// The error profile of one output of a failing check along its profile axis.
struct ProfilePlot {
  std::string probe;
  std::string point;  // params_to_string of the point
  std::string output;
  std::string axis;
  int64_t axis_length = 0;
  std::vector<std::pair<int64_t, int64_t>> bucket_ranges;  // [begin, end) along the axis
  std::vector<double> values;                              // rms(A-B)/rms(B) per bucket
  std::string shape;                                       // flat, growing, concentrated, spiky
  std::string sentence;                                    // check::profile_sentence
  std::optional<double> rms_ratio_bound;                   // the output's tolerance, if any
  std::string observation;                                 // the observation directory
};

// One parameter point of a bench sweep: B / A with its confidence interval.
struct SweepPoint {
  std::string point;  // params_to_string
  double ratio = 0;
  double ci_low = 0;
  double ci_high = 0;
  std::string verdict;   // faster, slower, same, ambiguous
  bool failing = false;  // the verdict a failing gate of this comparison fails on
};

// The A/B ratios of one bench probe and variant pair across its points.
struct SweepPlot {
  std::string probe;
  std::string comparison;  // "merged / tiled": the ratio drawn, in a gate's direction when a
                           // gate compares these variants ("tiled / merged"), else the bench's
  double threshold = 0;    // the verdict band is [1 - threshold, 1 + threshold]
  std::vector<SweepPoint> points;  // in natural order of the point ("batch=1" < "batch=32")
  size_t points_omitted = 0;
  std::string gate;  // the gate whose direction is drawn; empty when none
};

struct TimelineZone {
  int64_t start_ns = 0;  // relative to the plot's window start
  int64_t end_ns = 0;
  uint32_t depth = 0;
  std::string name;
};

enum class IntervalKind { kWait, kHold };

struct TimelineInterval {
  IntervalKind kind = IntervalKind::kWait;
  int64_t start_ns = 0;  // relative to the plot's window start
  int64_t end_ns = 0;
  std::string lock;
  bool highlighted = false;  // the top contention: the waiter's waits and the holder's holds
};

struct TimelineRow {
  std::string thread;
  std::vector<TimelineZone> zones;
  std::vector<TimelineInterval> intervals;
  size_t omitted = 0;  // zones and intervals too narrow to draw, too deep, or past the cap
};

// A strip of one scenario's trace: the scenario a failing gate explains.
struct TimelinePlot {
  std::string probe;
  std::string point;
  std::string trace_file;
  int64_t duration_ns = 0;  // the window drawn: the whole trace
  std::vector<TimelineRow> rows;
  size_t rows_omitted = 0;
  // Why a row's zones or intervals are not drawn (TimelineRow::omitted): shorter than this, nested
  // deeper than zone_depth, or past the zones_per_row longest.
  int64_t min_width_ns = 0;
  size_t zone_depth = 0;
  size_t zones_per_row = 0;
  std::string caption;  // who blocked whom: "worker waited on L held by main for ..."
};

// One kernel's speed of light: the share of peak each unit reached, from the run's
// `counters.<kernel>.bound` finding (src/counters; metrics dram_pct, l2_pct, l1_pct, sm_pct).
struct SpeedOfLightBar {
  std::string kernel;  // the finding's kernel name and launch configuration
  std::string bound;   // "DRAM", "L2", "L1", "SM" or "latency": the claim's binding limit
  std::vector<std::pair<std::string, double>> units;  // ("DRAM", 93.1), ... in percent of peak
};

struct SpeedOfLightPlot {
  std::vector<SpeedOfLightBar> kernels;
  size_t omitted = 0;
};

// How many to keep; what a cap leaves out is counted and said.
struct Limits {
  size_t findings = 8;
  size_t profiles = 4;
  size_t sweeps = 4;
  size_t sweep_points = 32;
  size_t timelines = 2;
  size_t timeline_rows = 12;
  size_t zones_per_row = 400;
  size_t zone_depth = 3;  // zones nested deeper than this are not drawn
  size_t speed_of_light_kernels = 16;
};

struct Model {
  Header header;
  std::vector<GateRow> gates;
  std::vector<Finding> findings;  // the top findings, worst first
  size_t findings_total = 0;      // fail and warn findings of the run (the top ones included)
  std::vector<ProfilePlot> profiles;
  std::vector<SweepPlot> sweeps;
  std::vector<TimelinePlot> timelines;
  SpeedOfLightPlot speed_of_light;  // empty without counters findings
  size_t profiles_omitted = 0;
  size_t sweeps_omitted = 0;
  size_t timelines_omitted = 0;
  std::vector<std::string> notes;  // what could not be read or drawn, and why
  StatsRegistry stats;             // repairs made while reading the scenario traces
  // Each gate across the objective's recorded runs; filled by `loupe report` (build_trend_section
  // needs the ledger and git, build_model neither), empty otherwise.
  TrendSection trends;
};

struct BuildOptions {
  // Gate layers by name, from the objective (the ledger does not keep them); gates missing here
  // have an unknown layer.
  std::vector<std::pair<std::string, Layer>> gate_layers;
  std::string title;        // the objective's name; empty: its file name
  std::string ledger_file;  // shown in the header
  std::optional<double> wall_s;
  std::string subject_failure;
  Limits limits;
  bool plots = true;  // false: no observation file is read (terminal and Markdown need none)
};

Model build_model(const ledger::RunRecord& run, const BuildOptions& options);

// The key statistic of a gate from its recorded statistics (a JSON object in text): the same text
// as gate::key_statistic. Throws Error(kInput) naming the gate when the JSON is not an object.
std::string key_statistic(const std::string& gate_name, GateVerdict verdict,
                          const std::string& statistics_json);

// "FAIL", "PASS", "INCONCLUSIVE", "NOT-RUN".
std::string verdict_word(GateVerdict verdict);

// The three renderings.
std::string render_terminal(const Model& model);
// The one line under every rendering's gate table that says how to read a key statistic.
std::string_view gate_legend();
std::string render_markdown(const Model& model);
std::string render_html(const Model& model);

// <home>/runs/<run>/report.html: where `loupe run` leaves a run's page.
std::filesystem::path report_file(const std::filesystem::path& home, const std::string& run_id);

// Writes `text` to `file`, replacing it (through a temporary file and a rename, so a reader never
// sees half a page). Throws Error(kInput) naming the file when it cannot be written.
void write_text_file(const std::filesystem::path& file, const std::string& text);

// Text safe inside HTML text and attribute values: & < > " ' escaped, control characters (other
// than tab and newline) replaced by spaces.
std::string html_escape(std::string_view text);

}  // namespace loupe::report
