// Builds the report model from a ledger RunRecord and the run's observation files.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "bench/report.hpp"
#include "check/compare.hpp"
#include "check/diff.hpp"
#include "check/findings.hpp"
#include "core/json.hpp"
#include "core/limits.hpp"
#include "core/pattern.hpp"
#include "core/trust.hpp"
#include "ledger/exchange.hpp"
#include "report/counters_plot.hpp"
#include "report/model.hpp"
#include "trace/analyze/analyze.hpp"
#include "trace/import/import.hpp"

namespace loupe::report {
namespace {

namespace fs = std::filesystem;

// A member of a JSON object, or `fallback` when absent or when `object` is not an object.
// (nlohmann's value(key, default) returns a copy, and GCC warns about its temporaries.)
const Json& field(const Json& object, const char* key, const Json& fallback) {
  if (!object.is_object()) return fallback;
  const auto it = object.find(key);
  return it == object.end() ? fallback : *it;
}
const Json& empty_object() {
  static const Json empty = Json::object();
  return empty;
}
const Json& empty_array() {
  static const Json empty = Json::array();
  return empty;
}

// "2026-11-30T04:15:02Z" → seconds since the epoch; nullopt for anything else.
std::optional<int64_t> parse_utc(const std::string& text) {
  std::tm parts{};
  std::istringstream stream(text);
  stream >> std::get_time(&parts, "%Y-%m-%dT%H:%M:%SZ");
  if (stream.fail()) return std::nullopt;
  return static_cast<int64_t>(timegm(&parts));
}

std::string configuration_text(const std::string& config_json, std::vector<std::string>& notes) {
  Json config;
  try {
    check_json_nesting(config_json, "the run's recorded configuration");
    config = Json::parse(config_json);
  } catch (const Error& error) {
    notes.push_back(error.message());
    return "(unknown)";
  } catch (const Json::exception& error) {
    notes.push_back("the run's recorded configuration is not JSON: " + json_error_text(error));
    return "(unknown)";
  }
  std::string text = "(ad hoc)";
  if (config.is_object() && config.contains("name") && config["name"].is_string()) {
    text = config["name"].get<std::string>();
  }
  if (config.is_object() && config.contains("settings") && config["settings"].is_object()) {
    for (const auto& [key, value] : config["settings"].items()) {
      text += " " + key + "=" + value_to_string(value_from_json(value, "settings." + key));
    }
  }
  return text;
}

Verdict gates_verdict(const std::vector<GateRow>& gates) {
  bool any_fail = false, any_inconclusive = false, any_pass = false;
  for (const auto& gate : gates) {
    any_fail = any_fail || gate.verdict == GateVerdict::kFail;
    any_inconclusive = any_inconclusive || gate.verdict == GateVerdict::kInconclusive;
    any_pass = any_pass || gate.verdict == GateVerdict::kPass;
  }
  if (any_fail) return Verdict::kFail;
  if (any_inconclusive) return Verdict::kInconclusive;
  if (any_pass) return Verdict::kPass;
  return Verdict::kNone;
}

std::optional<double> metric(const Finding& finding, std::string_view name) {
  for (const auto& [key, value] : finding.evidence.metrics) {
    if (key == name) return value;
  }
  return std::nullopt;
}

// What the top findings are: fail and warn findings, decided bench comparisons (FASTER or SLOWER
// is info, but it is what a bench gate turns on), and the trace analyses that explain a gate
// (which may be info: "B's lock wait grew from 0 to 83 %"), in the order the ledger holds them —
// gate explanations first, then the points' findings.
bool worth_showing(const Finding& finding) {
  if (finding.severity != Severity::kInfo || finding.layer == Layer::kTrace) return true;
  const std::string_view id = finding.id;
  return finding.layer == Layer::kBench && (id.ends_with(".faster") || id.ends_with(".slower"));
}

// Every key of `subset` is in `params` with the same value.
bool params_include(const Params& params, const Params& subset) {
  for (const auto& wanted : subset) {
    auto it = std::find_if(params.begin(), params.end(),
                           [&](const auto& entry) { return entry.first == wanted.first; });
    if (it == params.end() || !(it->second == wanted.second)) return false;
  }
  return true;
}

// One observation directory, read once.
struct Observation {
  fs::path dir;
  Json json;
  std::string kind;
  std::string probe;
  Params params;
};

class ObservationCache {
 public:
  ObservationCache(const std::vector<std::string>& dirs, std::vector<std::string>& notes) {
    size_t unreadable = 0;
    std::string first_problem;
    for (const auto& dir : dirs) {
      const fs::path file = fs::path(dir) / "observation.json";
      try {
        std::ifstream in(file);
        if (!in) throw Error(ErrorCode::kInput, file.string() + ": cannot be opened");
        Observation observation;
        observation.dir = dir;
        try {
          // An imported run names observation files anywhere: bounded before nlohmann parses.
          std::ostringstream text;
          text << in.rdbuf();
          check_json_nesting(text.str(), file.string());
          observation.json = Json::parse(text.str());
        } catch (const Json::exception& error) {
          throw Error(ErrorCode::kInput, file.string() + ": not JSON: " + json_error_text(error));
        }
        if (!observation.json.is_object()) {
          throw Error(ErrorCode::kInput, file.string() + ": expected a JSON object");
        }
        observation.kind = observation.json.value("kind", "");
        observation.probe = observation.json.value("probe", "");
        for (const auto& [name, value] :
             field(observation.json, "params", empty_object()).items()) {
          observation.params.emplace_back(name, value_from_json(value, "params." + name));
        }
        observations_.push_back(std::move(observation));
      } catch (const Error& error) {
        if (unreadable++ == 0) first_problem = error.message();
      } catch (const Json::exception& error) {
        if (unreadable++ == 0) first_problem = file.string() + ": " + json_error_text(error);
      }
    }
    if (unreadable > 0) {
      notes.push_back(std::to_string(unreadable) + " of " + std::to_string(dirs.size()) +
                      " observation(s) could not be read, so their plots are missing (first: " +
                      first_problem + ")");
    }
  }
  const std::vector<Observation>& all() const { return observations_; }

 private:
  std::vector<Observation> observations_;
};

Tensor read_tensor(const fs::path& file) {
  if (file.extension() == ".safetensors") {
    auto tensors = read_safetensors(file);
    if (tensors.size() != 1) {
      throw Error(ErrorCode::kInput,
                  file.string() + ": expected one tensor, found " + std::to_string(tensors.size()));
    }
    return std::move(tensors.front().tensor);
  }
  return read_npy(file);
}

// The error profiles of a failing check's outputs that declare a profile axis.
void add_profiles(const Observation& observation, Model& model, const Limits& limits,
                  std::set<std::string>& seen) {
  const Json& check = field(observation.json, "check", empty_object());
  // output -> path -> file, from the candidate-first pass.
  std::map<std::string, std::map<std::string, std::string>> files;
  for (const auto& run : field(check, "runs", empty_array())) {
    if (run.value("pass", "") != "candidate_first") continue;
    for (const auto& [output, file] : field(run, "outputs", empty_object()).items()) {
      files[output][run.value("path", "")] = file.get<std::string>();
    }
  }
  for (const auto& output : field(check, "outputs", empty_array())) {
    const std::string name = output.value("name", "");
    const std::string along = output.value("profile_axis", "");
    if (along.empty()) continue;
    const std::string key =
        observation.probe + "|" + params_to_string(observation.params) + "|" + name;
    if (!seen.insert(key).second) continue;
    if (model.profiles.size() == limits.profiles) {
      ++model.profiles_omitted;
      continue;
    }
    const std::string candidate_file = files[name]["candidate"];
    const std::string reference_file = files[name]["reference"];
    if (candidate_file.empty() || reference_file.empty()) {
      model.notes.push_back((observation.dir / "observation.json").string() + ": output '" + name +
                            "' names no candidate_first files; its profile is not drawn");
      continue;
    }
    check::CompareOptions options;
    for (const auto& axis : field(output, "axes", empty_array())) {
      options.axes.push_back(axis.get<std::string>());
    }
    options.along = along;
    check::TensorComparison comparison;
    try {
      const Tensor candidate = read_tensor(observation.dir / candidate_file);
      const Tensor reference = read_tensor(observation.dir / reference_file);
      comparison = check::compare_tensors(name, candidate, reference, nullptr, options);
    } catch (const Error& error) {
      model.notes.push_back("the profile of " + observation.probe + " output " + name +
                            " is not drawn: " + error.message());
      continue;
    }
    if (!comparison.localisation.profile) continue;
    const auto& profile = *comparison.localisation.profile;
    ProfilePlot plot;
    plot.probe = observation.probe;
    plot.point = params_to_string(observation.params);
    plot.output = name;
    plot.axis = profile.axis;
    plot.axis_length = profile.length;
    for (const auto& bucket : profile.buckets) {
      plot.bucket_ranges.emplace_back(bucket.begin, bucket.end);
      plot.values.push_back(bucket.value);
    }
    plot.shape = std::string(check::profile_shape_name(profile.classification.shape));
    plot.sentence = check::profile_sentence(profile);
    for (const auto& tolerance : field(output, "tolerances", empty_array())) {
      if (tolerance.value("metric", "") == "rms_ratio" &&
          !tolerance.value("relative_to_oracle", false) && tolerance.contains("bound")) {
        plot.rms_ratio_bound = number_from_json(tolerance["bound"], "bound");
      }
    }
    plot.observation = observation.dir.string();
    model.profiles.push_back(std::move(plot));
  }
}

// The A/B findings of the run's benches, grouped by probe and comparison.
void add_sweeps(const std::vector<Finding>& findings, Model& model, const Limits& limits) {
  std::map<std::string, size_t> index;  // probe|path -> position in model.sweeps
  for (const auto& finding : findings) {
    if (finding.layer != Layer::kBench) continue;
    const auto ratio = metric(finding, "ratio");
    const auto low = metric(finding, "ci_low");
    const auto high = metric(finding, "ci_high");
    const auto threshold = metric(finding, "threshold");
    if (!ratio || !low || !high || !threshold) continue;
    const std::string key = finding.where.probe + "|" + finding.where.path;
    auto it = index.find(key);
    if (it == index.end()) {
      if (model.sweeps.size() == limits.sweeps) {
        ++model.sweeps_omitted;
        continue;
      }
      SweepPlot plot;
      plot.probe = finding.where.probe;
      plot.comparison = finding.where.path;
      plot.threshold = *threshold;
      model.sweeps.push_back(std::move(plot));
      it = index.emplace(key, model.sweeps.size() - 1).first;
    }
    SweepPlot& plot = model.sweeps[it->second];
    if (plot.points.size() == limits.sweep_points) {
      ++plot.points_omitted;
      continue;
    }
    const size_t dot = finding.id.rfind('.');
    plot.points.push_back({params_to_string(finding.where.params), *ratio, *low, *high,
                           dot == std::string::npos ? finding.id : finding.id.substr(dot + 1)});
  }
}

// A bench gate states its comparison as SUBJECT/OTHER ("at batch=32,H=16 tiled/merged = 1.99
// [1.97, 2.03] is SLOWER", gate_eval.cpp); a sweep of the same two variants is drawn that way
// round too, and the points showing the verdict the gate fails on are marked, so the plot says
// what the gate says (issue 19: the plot showed merged/tiled = 0.45 beside tiled/merged = 2.22).
// The bench finding of the same comparison the other way round (A/B instead of B/A), so that the
// finding the report shows states what the gate and the plot state.
Finding reversed_bench_finding(const Finding& finding) {
  const size_t vs = finding.where.path.find(" vs ");
  bench::Comparison comparison;
  comparison.ratio = 1 / metric(finding, "ratio").value_or(1);
  comparison.ci = {1 / metric(finding, "ci_high").value_or(1),
                   1 / metric(finding, "ci_low").value_or(1)};
  comparison.threshold = metric(finding, "threshold").value_or(0);
  comparison.a.n = static_cast<int64_t>(metric(finding, "n_b").value_or(0));
  comparison.b.n = static_cast<int64_t>(metric(finding, "n_a").value_or(0));
  comparison.a.median = metric(finding, "median_b_s").value_or(0);
  comparison.b.median = metric(finding, "median_a_s").value_or(0);
  comparison.p_value = metric(finding, "p_value").value_or(1);
  comparison.adjusted_p_value = metric(finding, "adjusted_p_value");
  const std::string kind = finding.id.substr(finding.id.rfind('.') + 1);
  comparison.verdict = kind == "faster"   ? bench::AbVerdict::kSlower
                       : kind == "slower" ? bench::AbVerdict::kFaster
                       : kind == "same"   ? bench::AbVerdict::kSame
                                          : bench::AbVerdict::kAmbiguous;
  bench::FindingContext context;
  context.subject = finding.where.subject;
  context.probe = finding.where.probe;
  context.params = finding.where.params;
  context.name_a = finding.where.path.substr(0, vs);
  context.name_b = finding.where.path.substr(vs + 4);
  context.path = context.name_b + " vs " + context.name_a;
  context.reproduce = finding.reproduce;
  context.files = finding.evidence.files;
  return bench::comparison_finding(comparison, context);
}

void orient_sweeps(Model& model) {
  static const Pattern stated = Pattern::compile(R"(( |^)([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+) = )",
                                                 "the stated-ratio pattern", ErrorCode::kInternal);
  for (SweepPlot& plot : model.sweeps) {
    std::sort(plot.points.begin(), plot.points.end(),
              [](const SweepPoint& left, const SweepPoint& right) {
                return check::natural_less(left.point, right.point);
              });
    const size_t vs = plot.comparison.find(" vs ");
    if (vs == std::string::npos) continue;
    const std::string b = plot.comparison.substr(0, vs);
    const std::string a = plot.comparison.substr(vs + 4);
    plot.comparison = b + " / " + a;
    for (const GateRow& gate : model.gates) {
      if (gate.layer && *gate.layer != Layer::kBench) continue;
      std::vector<std::string_view> match;
      if (!stated.search(gate.rule, match)) continue;
      const std::string subject(match[2]), other(match[3]);
      if (!((subject == a && other == b) || (subject == b && other == a))) continue;
      plot.gate = gate.name;
      if (subject == a) {  // drawn B/A; the gate says A/B
        plot.comparison = a + " / " + b;
        for (Finding& finding : model.findings) {
          if (finding.layer == Layer::kBench && finding.where.probe == plot.probe &&
              finding.where.path == b + " vs " + a) {
            finding = reversed_bench_finding(finding);
          }
        }
        for (SweepPoint& point : plot.points) {
          point.ratio = 1 / point.ratio;
          point.ci_low = 1 / std::exchange(point.ci_high, 1 / point.ci_low);
          if (point.verdict == "faster") {
            point.verdict = "slower";
          } else if (point.verdict == "slower") {
            point.verdict = "faster";
          }
        }
      }
      // "fail: tiled not SLOWER than merged ... is contradicted: ...": the points showing
      // SLOWER are the ones it fails on.
      if (gate.verdict == GateVerdict::kFail) {
        const std::string asked = gate.rule.substr(0, gate.rule.find(" is contradicted"));
        for (const char* word : {"slower", "faster", "same"}) {
          std::string upper(word);
          for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
          const bool negated = asked.find(" not " + upper) != std::string::npos;
          if (asked.find(" " + upper + " ") == std::string::npos) continue;
          for (SweepPoint& point : plot.points) {
            point.failing = negated ? point.verdict == word
                                    : point.verdict != word && point.verdict != "ambiguous";
          }
          break;
        }
      }
      break;
    }
  }
}

std::string thread_label(const trace::Model& trace, trace::TrackId track) {
  const auto& info = trace.tracks[track];
  return info.name.empty() ? trace.track_label(track) : info.name;
}

TimelinePlot make_timeline(const trace::Model& trace, const Limits& limits) {
  TimelinePlot plot;
  plot.duration_ns = std::max<int64_t>(1, trace.end_ns - trace.start_ns);
  StatsRegistry scratch;
  const trace::Locks locks = trace::compute_locks(trace, scratch);
  const std::vector<trace::LockSpan> spans = trace::derive_lock_spans(trace, scratch);

  // The top contention: its waiter's waits and the holder's holds meanwhile are highlighted.
  const trace::LockContention* top = locks.contentions.empty() ? nullptr : &locks.contentions[0];
  const trace::TrackId holder =
      top != nullptr && !top->holders.empty() ? top->holders[0].thread : trace::kNoTrack;
  std::vector<std::pair<int64_t, int64_t>> highlighted_waits;
  if (top != nullptr) {
    for (const auto& span : spans) {
      if (!span.hold && span.lock == top->lock && span.thread == top->waiter) {
        highlighted_waits.emplace_back(span.start_ns, span.end_ns);
      }
    }
    plot.caption = thread_label(trace, top->waiter) + " waited on " + trace.tracks[top->lock].name +
                   " " + std::to_string(top->waits) + " time(s) for " +
                   trace::format_duration(top->wait_ns) + " in all (longest " +
                   trace::format_duration(top->longest.second - top->longest.first) + ")";
    if (holder != trace::kNoTrack) {
      const auto& held = top->holders[0];
      plot.caption += "; " + thread_label(trace, holder) + " held it for " +
                      trace::format_duration(held.held_ns) + " of that";
      if (!held.zones.empty()) plot.caption += ", mostly in " + held.zones.front().first;
    }
  } else {
    plot.caption = "no contended lock wait in this trace";
  }

  // Rows: the waiter and the holder first, then every other thread that did anything.
  std::vector<trace::TrackId> order;
  auto add_row = [&](trace::TrackId track) {
    if (track == trace::kNoTrack) return;
    if (std::find(order.begin(), order.end(), track) == order.end()) order.push_back(track);
  };
  if (top != nullptr) add_row(top->waiter);
  add_row(holder);
  const trace::TrackIndex index(trace);
  for (trace::TrackId track = 0; track < trace.tracks.size(); ++track) {
    if (trace.tracks[track].kind != trace::TrackKind::kThread &&
        trace.tracks[track].kind != trace::TrackKind::kGpuStream) {
      continue;
    }
    bool busy = !index.slices(track).empty();
    for (const auto& span : spans) busy = busy || span.thread == track;
    if (busy) add_row(track);
  }
  if (order.size() > limits.timeline_rows) {
    plot.rows_omitted = order.size() - limits.timeline_rows;
    order.resize(limits.timeline_rows);
  }

  // Narrower than a 2000th of the strip: not visible at any reasonable width.
  const int64_t min_width = std::max<int64_t>(1, plot.duration_ns / 2000);
  plot.min_width_ns = min_width;
  plot.zone_depth = limits.zone_depth;
  plot.zones_per_row = limits.zones_per_row;
  for (trace::TrackId track : order) {
    TimelineRow row;
    row.thread = thread_label(trace, track);
    std::vector<TimelineZone> zones;
    for (trace::SliceId slice : index.slices(track)) {
      const int64_t start = trace.slices.start_ns[slice] - trace.start_ns;
      const int64_t end = trace.slices.end_ns[slice] - trace.start_ns;
      const uint32_t depth = trace.slices.depth[slice];
      if (depth >= limits.zone_depth || end - start < min_width) {
        ++row.omitted;
        continue;
      }
      zones.push_back({start, end, depth, std::string(trace.slice_name(slice))});
    }
    if (zones.size() > limits.zones_per_row) {
      // Keep the longest; the rest are counted.
      std::stable_sort(zones.begin(), zones.end(), [](const auto& left, const auto& right) {
        return left.end_ns - left.start_ns > right.end_ns - right.start_ns;
      });
      row.omitted += zones.size() - limits.zones_per_row;
      zones.resize(limits.zones_per_row);
      std::stable_sort(zones.begin(), zones.end(), [](const auto& left, const auto& right) {
        return left.start_ns < right.start_ns ||
               (left.start_ns == right.start_ns && left.depth < right.depth);
      });
    }
    row.zones = std::move(zones);

    std::vector<TimelineInterval> intervals;
    for (const auto& span : spans) {
      if (span.thread != track) continue;
      TimelineInterval interval;
      interval.kind = span.hold ? IntervalKind::kHold : IntervalKind::kWait;
      interval.start_ns = span.start_ns - trace.start_ns;
      interval.end_ns = span.end_ns - trace.start_ns;
      interval.lock = trace.tracks[span.lock].name;
      if (top != nullptr && span.lock == top->lock) {
        if (!span.hold && track == top->waiter) interval.highlighted = true;
        if (span.hold && track == holder) {
          for (const auto& [wait_start, wait_end] : highlighted_waits) {
            if (span.start_ns < wait_end && wait_start < span.end_ns) interval.highlighted = true;
          }
        }
      }
      // Highlighted intervals are always drawn; others only when visible.
      if (!interval.highlighted && interval.end_ns - interval.start_ns < min_width) {
        ++row.omitted;
        continue;
      }
      intervals.push_back(std::move(interval));
    }
    if (intervals.size() > limits.zones_per_row) {
      std::stable_sort(intervals.begin(), intervals.end(), [](const auto& left, const auto& right) {
        if (left.highlighted != right.highlighted) return left.highlighted;
        return left.end_ns - left.start_ns > right.end_ns - right.start_ns;
      });
      row.omitted += intervals.size() - limits.zones_per_row;
      intervals.resize(limits.zones_per_row);
      std::stable_sort(intervals.begin(), intervals.end(), [](const auto& left, const auto& right) {
        return left.start_ns < right.start_ns;
      });
    }
    row.intervals = std::move(intervals);
    plot.rows.push_back(std::move(row));
  }
  return plot;
}

// Timelines of the scenarios that the run's trace findings (failing scenario gates) explain.
void add_timelines(const std::vector<Finding>& findings, const ObservationCache& observations,
                   Model& model, const Limits& limits) {
  std::vector<std::pair<std::string, Params>> wanted;
  for (const auto& finding : findings) {
    if (finding.layer != Layer::kTrace || finding.where.probe.empty()) continue;
    std::pair<std::string, Params> key{finding.where.probe, finding.where.params};
    if (std::find(wanted.begin(), wanted.end(), key) == wanted.end()) wanted.push_back(key);
  }
  for (const auto& [probe, params] : wanted) {
    if (model.timelines.size() == limits.timelines) {
      ++model.timelines_omitted;
      continue;
    }
    const Observation* match = nullptr;
    for (const auto& observation : observations.all()) {
      if (observation.kind != "scenario" || observation.probe != probe) continue;
      if (!params_include(observation.params, params)) continue;
      const Json& scenario = field(observation.json, "scenario", empty_object());
      if (field(scenario, "traces", empty_array()).empty()) continue;
      match = &observation;
      break;
    }
    if (match == nullptr) {
      model.notes.push_back("no recorded trace of scenario " + probe + " " +
                            params_to_string(params) + ": its timeline is not drawn");
      continue;
    }
    std::vector<std::string> files;
    for (const auto& file :
         field(field(match->json, "scenario", empty_object()), "traces", empty_array())) {
      files.push_back((match->dir / file.get<std::string>()).string());
    }
    try {
      const trace::Model trace = trace::load_traces(files);
      TimelinePlot plot = make_timeline(trace, limits);
      plot.probe = probe;
      plot.point = params_to_string(match->params);
      plot.trace_file = files.front();
      model.stats.merge(trace.stats);
      model.timelines.push_back(std::move(plot));
    } catch (const Error& error) {
      model.notes.push_back("the timeline of scenario " + probe +
                            " is not drawn: " + error.message());
    }
  }
}

}  // namespace

std::string verdict_word(GateVerdict verdict) {
  std::string word(gate_verdict_name(verdict));
  for (auto& c : word) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return word;
}

std::string key_statistic(const std::string& gate_name, GateVerdict verdict,
                          const std::string& statistics_json) {
  if (verdict == GateVerdict::kNotRun) return "-";
  Json statistics;
  try {
    check_json_nesting(statistics_json, "gate '" + gate_name + "': recorded statistics");
    statistics = Json::parse(statistics_json);
  } catch (const Json::exception& error) {
    throw Error(
        ErrorCode::kInput,
        "gate '" + gate_name + "': recorded statistics are not JSON: " + json_error_text(error),
        "the ledger entry is damaged; `loupe ledger export RUN` shows it");
  }
  if (!statistics.is_object()) {
    throw Error(ErrorCode::kInput,
                "gate '" + gate_name + "': recorded statistics are not a JSON object");
  }
  auto number = [&](const char* field) -> std::optional<double> {
    if (!statistics.contains(field) || statistics[field].is_null()) return std::nullopt;
    return number_from_json(statistics[field], std::string("gate '") + gate_name + "' " + field);
  };
  const int64_t n = statistics.contains("n") && statistics["n"].is_number_integer()
                        ? statistics["n"].get<int64_t>()
                        : 0;
  const std::string comparison =
      statistics.contains("comparison") && statistics["comparison"].is_string()
          ? statistics["comparison"].get<std::string>()
          : "";
  std::string out;
  if (auto estimate = number("estimate")) out = check::format_number(*estimate);
  if (statistics.contains("interval") && statistics["interval"].is_array() &&
      statistics["interval"].size() == 2) {
    out += " [" + check::format_number(number_from_json(statistics["interval"][0], "interval")) +
           ", " + check::format_number(number_from_json(statistics["interval"][1], "interval")) +
           "]";
  }
  const auto bound = number("bound");
  if (!comparison.empty() && bound && comparison != "passes") {
    if (comparison.find("than") != std::string::npos ||
        comparison.find("as") != std::string::npos) {
      out += " (t " + check::format_number(*bound) + ")";
    } else {
      out += " " + comparison + " " + check::format_number(*bound);
    }
  }
  if (comparison == "passes") out = std::to_string(n) + " point(s)";
  out += " n=" + std::to_string(n);
  return out;
}

Model build_model(const ledger::RunRecord& run, const BuildOptions& options) {
  Model model;
  Header& header = model.header;
  header.run_id = run.id;
  header.objective_path = run.objective_path;
  header.title =
      options.title.empty() ? fs::path(run.objective_path).filename().string() : options.title;
  header.configuration = configuration_text(run.config_json, model.notes);
  header.status = std::string(ledger::run_status_name(run.status));
  if (run.imported) {
    header.status += " (imported)";
    model.notes.push_back("imported from " + run.imported->source + " (export sha256 " +
                          run.imported->digest.substr(0, 12) + ") at " + run.imported->imported_at +
                          ": its evidence was not produced by this ledger's loupe");
  }
  header.started_at = run.started_at;
  header.ended_at = run.ended_at.value_or("");
  if (!run.git.commit.empty()) {
    header.git = run.git.commit.substr(0, 12) + (run.git.dirty ? " (dirty)" : "");
  }
  header.points = run.observations.size();
  header.wall_s = options.wall_s;
  if (!header.wall_s && run.ended_at) {
    const auto start = parse_utc(run.started_at);
    const auto end = parse_utc(*run.ended_at);
    if (start && end) header.wall_s = static_cast<double>(*end - *start);
  }
  header.ledger_file = options.ledger_file;
  header.subject_failure = options.subject_failure;

  for (const auto& gate : run.gates) {
    GateRow row;
    row.name = gate.name;
    for (const auto& [name, layer] : options.gate_layers) {
      if (name == gate.name) row.layer = layer;
    }
    row.verdict = gate.verdict;
    row.key_statistic = key_statistic(gate.name, gate.verdict, gate.statistics_json);
    row.rule = gate.rule;
    model.gates.push_back(std::move(row));
  }
  header.verdict = gates_verdict(model.gates);
  // A failing guard on the candidate's points fails the run whatever its gates say, as
  // gate::cascade_verdict decided it (the ledger holds the candidate's point findings only).
  for (const auto& finding : run.findings) {
    if (undermines_results(finding)) header.verdict = Verdict::kFail;
  }
  if (run.status == ledger::RunStatus::kFailed) header.verdict = Verdict::kError;

  for (const auto& finding : run.findings) {
    if (!worth_showing(finding)) continue;
    ++model.findings_total;
    if (model.findings.size() < options.limits.findings) model.findings.push_back(finding);
  }

  add_sweeps(run.findings, model, options.limits);
  model.speed_of_light = speed_of_light_plot(run.findings, options.limits.speed_of_light_kernels);
  orient_sweeps(model);
  if (options.plots) {
    const ObservationCache observations(run.observations, model.notes);
    std::set<std::string> seen;
    for (const auto& observation : observations.all()) {
      if (observation.kind != "check" || observation.json.value("verdict", "") != "fail") continue;
      add_profiles(observation, model, options.limits, seen);
    }
    add_timelines(run.findings, observations, model, options.limits);
  }
  return model;
}

}  // namespace loupe::report
