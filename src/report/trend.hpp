// report/trend.hpp — `loupe ledger trend METRIC`: one metric across the recorded runs in commit
// order, with its interval per run, each step annotated with the hypothesis and decision that
// produced it, regressions marked; as text, JSON and an HTML page with an inline SVG plot.
//
// A run's value: with METRIC = gate:NAME, the gate's recorded estimate and interval; otherwise
// the first finding (of --probe, at the --point settings) whose evidence holds METRIC, with the
// interval from its ci_low/ci_high when it has them (bench ratios). Runs are ordered by their
// commit's place in `git rev-list --topo-order HEAD` (from --since on), then by start time; runs
// at commits not on that history, and runs with no value, are counted and said.
// A step is a regression when it is worse than the previous plotted run (lower is better unless
// higher_is_better): both intervals known and apart, or, without intervals, worse by more than
// `threshold` (relative).
// Thread-safety: build_trend reads the ledger it is given and runs git; renderings are pure.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/statistics.hpp"
#include "ledger/ledger.hpp"

namespace loupe::report {

struct TrendRequest {
  std::string metric;               // a finding metric name, or gate:NAME
  std::string probe;                // only findings of this probe (empty: any)
  std::vector<std::string> points;  // K=V settings the finding's point must hold
  std::string since;                // a git revision; empty: the whole history of HEAD
  bool higher_is_better = false;
  double threshold = 0.05;
  std::filesystem::path repo;  // where git runs; empty: the current folder
  size_t max_runs = 2000;      // runs read from the ledger, newest first
  std::string objective_path;  // only runs of this objective, as recorded (empty: any)
  std::string config_json;     // only runs of this configuration, as recorded (empty: any)
};

struct TrendPoint {
  std::string run_id;
  std::string commit;
  std::string started_at;
  double value = 0;
  std::optional<Interval> interval;
  size_t matches = 0;  // findings or gates that held the metric (the first is plotted)
  std::string where;   // the plotted finding's id and point, or the gate
  std::vector<std::string> annotations;  // "H3 retained: 3xTF32 merge", one per hypothesis
  bool regression = false;
  std::string reproduce;  // `loupe ledger show RUN`
};

struct Trend {
  TrendRequest request;
  std::vector<TrendPoint> points;  // commit order
  size_t runs_read = 0;
  size_t runs_off_history = 0;  // commit not on the history (or no commit recorded)
  size_t runs_without_value = 0;
  std::string history;  // "HEAD (abc1234)", "since v1 (...)"
};

// Throws Error(kUsage) for an empty metric, a malformed --point, or a --since git cannot resolve.
Trend build_trend(const ledger::Ledger& ledger, const TrendRequest& request);

std::string render_trend_text(const Trend& trend);
// One self-contained page: the plot (values, intervals, regressions in red, annotations) and the
// table.
std::string render_trend_html(const Trend& trend);
std::string render_trend_svg(const Trend& trend);

// The trends section of `loupe report RUN`: each gate of the run's objective across the
// objective's recorded runs (gate:NAME above), in commit order, the last `max_points` of each.
struct TrendSectionRequest {
  std::vector<std::pair<std::string, bool>> gates;  // name, higher_is_better, in report order
  std::string objective_path;                       // the run's, as recorded
  std::string config_json;     // the run's: another configuration's runs are another trajectory
  std::filesystem::path repo;  // where git runs
  size_t max_gates = 6;
  size_t max_points = 8;
  size_t max_runs = 200;  // the newest runs of the ledger read for each gate
};

struct GateTrend {
  std::string gate;
  Trend trend;                // its points cut to the newest max_points in commit order
  size_t points_omitted = 0;  // older points left out
  size_t regressions = 0;     // among the points shown
};

struct TrendSection {
  std::vector<GateTrend> gates;  // gates recorded by fewer than two runs are left out
  size_t gates_omitted = 0;      // not examined: past max_gates shown
  std::string note;              // why there is no section (no git history); empty otherwise
};

// Never throws for want of a history: a git failure becomes `note`. REQUIRES: `ledger` is open.
TrendSection build_trend_section(const ledger::Ledger& ledger, const TrendSectionRequest& request);

}  // namespace loupe::report
