// analyze() and diff(): the analyses turned into findings and one bounded envelope.
#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "loupe/error.hpp"
#include "trace/analyze/analyze.hpp"

namespace loupe::trace {
namespace {

constexpr size_t kTableRows = 5;
constexpr size_t kNameChars = 80;

// Kernel names run to hundreds of characters; without --detail they are cut (and say so).
thread_local bool t_full_names = false;
std::string display(std::string_view name) {
  if (t_full_names || name.size() <= kNameChars) return std::string(name);
  return std::string(name.substr(0, kNameChars - 3)) + "...";
}

std::string percent(double fraction) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.0f%%", fraction * 100.0);
  return buffer;
}

// "1 slice", "3 slices".
std::string count_of(uint64_t count, const std::string& noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

double ratio(int64_t part, int64_t whole) {
  return whole == 0 ? 0.0 : static_cast<double>(part) / static_cast<double>(whole);
}

EventRef slice_ref(const Model& model, SliceId id) {
  EventRef ref;
  ref.id = id;
  ref.name = display(model.slice_name(id));
  ref.track = model.track_label(model.slices.track[id]);
  ref.start_ns = model.slices.start_ns[id];
  ref.end_ns = model.slices.end_ns[id];
  return ref;
}

Finding trace_finding(std::string id, Severity severity) {
  Finding finding;
  finding.id = std::move(id);
  finding.layer = Layer::kTrace;
  finding.severity = severity;
  return finding;
}

int severity_rank(Severity severity) {
  return severity == Severity::kFail ? 0 : (severity == Severity::kWarn ? 1 : 2);
}

Json files_json(const Model& model) {
  Json files = Json::array();
  for (const FileInfo& file : model.files) {
    files.push_back({{"path", file.path},
                     {"format", file.format},
                     {"clock_domain", file.clock_domain},
                     {"offset_ns", file.offset_ns},
                     {"events", file.events},
                     {"dropped_by_recorder", file.dropped_by_recorder}});
  }
  return files;
}

struct Analysis {
  Breakdown breakdown;
  std::optional<Overlap> overlap;
  Locks locks;
  std::vector<TrackGaps> gaps;
  StatsRegistry stats;
};

const ClassDef& find_class(const AnalyzeRequest& request, const std::string& name) {
  for (const ClassDef& def : request.classes) {
    if (def.name == name) return def;
  }
  throw Error(ErrorCode::kUsage, "class '" + name + "' is used but not defined",
              "define it with --class " + name + "=SELECTOR");
}

Analysis run_analyses(const Model& model, const AnalyzeRequest& request) {
  Analysis analysis;
  analysis.stats = model.stats;
  analysis.breakdown = compute_breakdown(model);
  if (request.overlap) {
    const ClassDef& a = find_class(request, request.overlap->first);
    const ClassDef& b = find_class(request, request.overlap->second);
    std::optional<Selector> window;
    if (!request.window_class.empty()) {
      window.emplace(find_class(request, request.window_class).selector);
    }
    analysis.overlap = compute_overlap(model, Selector(a.selector), Selector(b.selector), a.name,
                                       b.name, window ? &*window : nullptr, request.window_class);
  } else if (!request.window_class.empty()) {
    throw Error(ErrorCode::kUsage, "--window needs --overlap A,B",
                "e.g. --overlap compute,transfer --window layer");
  }
  analysis.locks = compute_locks(model, analysis.stats);
  analysis.gaps = compute_gaps(model, request.gap_threshold_ns);
  return analysis;
}

std::string zones_phrase(const std::vector<std::pair<std::string, int64_t>>& zones, int64_t whole) {
  std::string text;
  for (size_t index = 0; index < zones.size() && index < 2; ++index) {
    if (!text.empty()) text += ", ";
    text += display(zones[index].first) + " for " + percent(ratio(zones[index].second, whole));
  }
  return text.empty() ? "(no zone)" : text;
}

void add_findings(const Model& model, const Analysis& analysis, const AnalyzeRequest& request,
                  std::vector<Finding>& findings) {
  const int64_t span = model.end_ns - model.start_ns;
  const TrackIndex index(model);
  if (analysis.overlap) {
    const Overlap& overlap = *analysis.overlap;
    Finding finding = trace_finding("trace.overlap.classes", Severity::kInfo);
    finding.claim = overlap.a + " overlapped " + overlap.b + " for " +
                    percent(ratio(overlap.both_ns, overlap.a_ns)) + " of its " +
                    format_duration(overlap.a_ns) + "; " +
                    format_duration(overlap.a_ns - overlap.both_ns) + " of " + overlap.a +
                    " is exposed (" + overlap.b + ": " + format_duration(overlap.b_ns) + ")";
    finding.where.path = overlap.a + "," + overlap.b;
    finding.evidence.metrics = {
        {"a_ns", static_cast<double>(overlap.a_ns)},
        {"b_ns", static_cast<double>(overlap.b_ns)},
        {"overlap_ns", static_cast<double>(overlap.both_ns)},
        {"overlap_fraction_of_a", ratio(overlap.both_ns, overlap.a_ns)},
        {"exposed_a_ns", static_cast<double>(overlap.a_ns - overlap.both_ns)}};
    finding.next = "move " + overlap.a + " onto another thread or stream so it runs under " +
                   overlap.b + "; rerun with --window CLASS to see which instances lose overlap";
    findings.push_back(std::move(finding));
    if (!overlap.windows.empty()) {
      std::vector<const OverlapWindow*> worst;
      double low = 1.0, high = 0.0;
      for (const OverlapWindow& window : overlap.windows) {
        if (window.a_ns == 0) continue;
        worst.push_back(&window);
        low = std::min(low, ratio(window.both_ns, window.a_ns));
        high = std::max(high, ratio(window.both_ns, window.a_ns));
      }
      std::stable_sort(worst.begin(), worst.end(), [](const auto* left, const auto* right) {
        return left->a_ns - left->both_ns > right->a_ns - right->both_ns;
      });
      Finding per_window = trace_finding("trace.overlap.windows", Severity::kInfo);
      per_window.claim = "over " + count_of(overlap.windows.size(), "window") + " of " +
                         overlap.window_class + ", " + overlap.a + " overlapped " + overlap.b +
                         " by " + percent(worst.empty() ? 0.0 : low) + " to " +
                         percent(worst.empty() ? 0.0 : high) + " of its time";
      if (!worst.empty()) {
        const OverlapWindow& first = *worst.front();
        per_window.claim += "; the most exposed window is " +
                            display(model.slice_name(first.window)) + " with " +
                            format_duration(first.a_ns - first.both_ns) + " exposed";
        per_window.where.interval_ns =
            std::make_pair(model.slices.start_ns[first.window], model.slices.end_ns[first.window]);
      }
      for (size_t index_worst = 0; index_worst < worst.size() && index_worst < 3; ++index_worst) {
        per_window.evidence.events.push_back(slice_ref(model, worst[index_worst]->window));
      }
      per_window.evidence.metrics = {{"windows", static_cast<double>(overlap.windows.size())},
                                     {"min_overlap_fraction", worst.empty() ? 0.0 : low},
                                     {"max_overlap_fraction", worst.empty() ? 0.0 : high}};
      per_window.where.path = overlap.window_class;
      per_window.next = "inspect the most exposed window first: its events are evidence";
      findings.push_back(std::move(per_window));
    }
  }
  for (const LockContention& contention : analysis.locks.contentions) {
    const std::string lock = model.tracks[contention.lock].name;
    const std::string waiter = model.track_label(contention.waiter);
    const double span_fraction = ratio(contention.wait_ns, span);
    Finding finding = trace_finding("trace.locks.contention",
                                    span_fraction >= 0.01 ? Severity::kWarn : Severity::kInfo);
    finding.claim = waiter + " waited on lock " + lock + " for " +
                    format_duration(contention.wait_ns) + " in " +
                    count_of(contention.waits, "contended wait") + " (" + percent(span_fraction) +
                    " of the trace)";
    finding.where.path = "lock " + lock;
    finding.where.thread = waiter;
    finding.where.interval_ns = contention.longest;
    finding.evidence.metrics = {{"waits", static_cast<double>(contention.waits)},
                                {"wait_ns", static_cast<double>(contention.wait_ns)},
                                {"wait_fraction_of_span", span_fraction}};
    if (!contention.holders.empty()) {
      const auto& holder = contention.holders.front();
      const std::string holder_name = model.track_label(holder.thread);
      finding.claim += "; " + holder_name + " held it for " +
                       percent(ratio(holder.held_ns, contention.wait_ns)) +
                       " of that wait, inside " + zones_phrase(holder.zones, contention.wait_ns);
      finding.evidence.metrics.emplace_back("held_by_top_holder_fraction",
                                            ratio(holder.held_ns, contention.wait_ns));
      if (!holder.zones.empty()) {
        finding.evidence.metrics.emplace_back(
            "top_holder_zone_fraction", ratio(holder.zones.front().second, contention.wait_ns));
      }
      int64_t held_by_any = 0;
      for (const auto& each : contention.holders) held_by_any += each.held_ns;
      const double free_fraction = 1.0 - ratio(held_by_any, contention.wait_ns);
      finding.evidence.metrics.emplace_back("lock_free_fraction_of_wait", free_fraction);
      if (free_fraction >= 0.05) {
        finding.claim += "; the lock was free for " + percent(free_fraction) +
                         " of the wait (the waiter's wake-up)";
      }
      // Evidence: the holder's slice of the zone the claim names (its top zone), where it
      // overlaps the longest wait most, then the zones around it; without one, whatever the
      // holder had open when that wait began.
      // Plain copies, not a structured binding: clang 14 (the fuzz preset) cannot capture those.
      const int64_t wait_start = contention.longest.first;
      const int64_t wait_end = contention.longest.second;
      const SliceId open_at_start = index.innermost_at(holder.thread, wait_start);
      SliceId evidence = open_at_start;
      if (!holder.zones.empty()) {
        const std::string& top = holder.zones.front().first;
        int64_t best_overlap = 0;
        auto consider = [&](SliceId id) {
          if (model.slice_name(id) != top) return;
          const int64_t overlap = std::min(model.slices.end_ns[id], wait_end) -
                                  std::max(model.slices.start_ns[id], wait_start);
          if (overlap > best_overlap) best_overlap = overlap, evidence = id;
        };
        for (SliceId id = open_at_start; id != kNoSlice; id = model.slices.parent[id]) {
          consider(id);
        }
        constexpr int kMaxScanned = 4096;  // a wait with more slices inside names its first ones
        const std::vector<SliceId>& ids = index.slices(holder.thread);  // by start
        auto it = std::lower_bound(
            ids.begin(), ids.end(), wait_start,
            [&](SliceId id, int64_t value) { return model.slices.start_ns[id] < value; });
        for (int scanned = 0;
             it != ids.end() && scanned < kMaxScanned && model.slices.start_ns[*it] < wait_end;
             ++it, ++scanned) {
          consider(*it);
        }
      }
      for (SliceId id = evidence; id != kNoSlice; id = model.slices.parent[id]) {
        finding.evidence.events.push_back(slice_ref(model, id));
        if (finding.evidence.events.size() >= 3) break;
      }
      const std::string zone =
          holder.zones.empty() ? "(no zone)" : display(holder.zones.front().first);
      finding.next = "shorten what " + holder_name + " does under " + lock + " in " + zone +
                     " (or release the lock around it), then rerun and compare with `loupe trace "
                     "diff`";
    } else {
      finding.next = "no traced holder overlapped the waits: is the holder's thread recorded?";
    }
    findings.push_back(std::move(finding));
  }
  for (const TrackGaps& track_gaps : analysis.gaps) {
    if (track_gaps.gaps.empty()) continue;
    const std::string track = model.track_label(track_gaps.track);
    const double idle_fraction = ratio(track_gaps.idle_ns, track_gaps.span_ns);
    Finding finding =
        trace_finding("trace.gaps.idle", idle_fraction >= 0.1 ? Severity::kWarn : Severity::kInfo);
    const Gap& longest = track_gaps.gaps.front();
    finding.claim = track + " was idle " + count_of(track_gaps.gaps.size(), "time") +
                    " for at least " + format_duration(request.gap_threshold_ns) + ", in all " +
                    format_duration(track_gaps.idle_ns) + " (" + percent(idle_fraction) +
                    " of its span); the longest lasted " +
                    format_duration(longest.interval.second - longest.interval.first);
    if (track_gaps.feeder != kNoTrack) {
      finding.claim += "; meanwhile its feeder " + model.track_label(track_gaps.feeder) +
                       " was in " + zones_phrase(track_gaps.feeder_zones, track_gaps.idle_ns);
      finding.next =
          "make the feeder launch ahead (move " +
          (track_gaps.feeder_zones.empty() ? std::string("its work")
                                           : display(track_gaps.feeder_zones.front().first)) +
          " off the launch path), then rerun";
    } else {
      finding.next =
          "no flows lead into this track; record flows (LOUPE_FLOW_BEGIN/END, Kineto "
          "ac2g) to name what fed it";
    }
    finding.where.thread = track;
    finding.where.interval_ns = longest.interval;
    finding.evidence.metrics = {{"gaps", static_cast<double>(track_gaps.gaps.size())},
                                {"idle_ns", static_cast<double>(track_gaps.idle_ns)},
                                {"idle_fraction_of_span", idle_fraction}};
    finding.evidence.events.push_back(slice_ref(model, longest.before));
    finding.evidence.events.push_back(slice_ref(model, longest.after));
    findings.push_back(std::move(finding));
  }
  // Breakdown last: it describes, the others point at a culprit.
  // Breakdown: the three heaviest (track, name) pairs by self time.
  for (size_t row_index = 0; row_index < analysis.breakdown.rows.size() && row_index < 3;
       ++row_index) {
    const BreakdownRow& row = analysis.breakdown.rows[row_index];
    const int64_t busy = analysis.breakdown.busy_ns.at(row.track);
    Finding finding = trace_finding("trace.breakdown.top", Severity::kInfo);
    const std::string name = display(model.strings.get(row.name));
    const std::string track = model.track_label(row.track);
    finding.claim = name + " on " + track + ": self " + format_duration(row.self_ns) + " (" +
                    percent(ratio(row.self_ns, busy)) + " of the track's busy time), total " +
                    format_duration(row.total_ns) + " over " + count_of(row.count, "slice");
    finding.where.path = name;
    finding.where.thread = track;
    finding.evidence.metrics = {{"count", static_cast<double>(row.count)},
                                {"total_ns", static_cast<double>(row.total_ns)},
                                {"self_ns", static_cast<double>(row.self_ns)},
                                {"self_fraction_of_busy", ratio(row.self_ns, busy)}};
    finding.evidence.events.push_back(slice_ref(model, row.longest));
    finding.next = "zoom into " + name +
                   " (its longest slice is evidence) or compare against "
                   "another trace with `loupe trace diff`";
    findings.push_back(std::move(finding));
  }
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& left, const Finding& right) {
    return severity_rank(left.severity) < severity_rank(right.severity);
  });
}

Json analysis_data(const Model& model, const Analysis& analysis, const AnalyzeRequest& request,
                   bool& truncated) {
  const size_t rows = request.detail ? SIZE_MAX : kTableRows;
  Json data = Json::object();
  data["files"] = files_json(model);
  data["alignment"] = model.alignment;
  data["span_ns"] = model.end_ns - model.start_ns;
  std::map<std::string, int> kinds;
  for (const Track& track : model.tracks) ++kinds[std::string(track_kind_name(track.kind))];
  Json tracks = Json::object();
  for (const auto& [kind, count] : kinds) tracks[kind] = count;
  data["tracks"] = tracks;
  data["events"] = {{"slices", model.slices.size()},
                    {"instants", model.instants.size()},
                    {"counters", model.counters.size()},
                    {"flows", model.flows.size()},
                    {"lock_events", model.lock_events.size()}};
  Json breakdown = Json::array();
  for (size_t index = 0; index < analysis.breakdown.rows.size() && index < rows; ++index) {
    const BreakdownRow& row = analysis.breakdown.rows[index];
    breakdown.push_back({{"track", model.track_label(row.track)},
                         {"name", display(model.strings.get(row.name))},
                         {"count", row.count},
                         {"total_ns", row.total_ns},
                         {"self_ns", row.self_ns}});
  }
  truncated |= analysis.breakdown.rows.size() > rows;
  data["breakdown"] = breakdown;
  if (analysis.overlap) {
    const Overlap& overlap = *analysis.overlap;
    Json windows = Json::array();
    for (size_t index = 0; index < overlap.windows.size() && index < rows; ++index) {
      const OverlapWindow& window = overlap.windows[index];
      windows.push_back({{"window", window.window},
                         {"name", display(model.slice_name(window.window))},
                         {"start_ns", model.slices.start_ns[window.window]},
                         {"end_ns", model.slices.end_ns[window.window]},
                         {"a_ns", window.a_ns},
                         {"b_ns", window.b_ns},
                         {"overlap_ns", window.both_ns}});
    }
    truncated |= overlap.windows.size() > rows;
    data["overlap"] = {{"a", overlap.a},
                       {"b", overlap.b},
                       {"a_ns", overlap.a_ns},
                       {"b_ns", overlap.b_ns},
                       {"overlap_ns", overlap.both_ns},
                       {"window_class", overlap.window_class},
                       {"windows", windows}};
  }
  Json locks = Json::array();
  for (const LockSummary& lock : analysis.locks.locks) {
    locks.push_back({{"lock", model.tracks[lock.lock].name},
                     {"obtains", lock.obtains},
                     {"contended", lock.contended},
                     {"wait_ns", lock.wait_ns},
                     {"hold_ns", lock.hold_ns}});
  }
  data["locks"] = locks;
  Json gaps = Json::array();
  for (size_t index = 0; index < analysis.gaps.size() && index < rows; ++index) {
    const TrackGaps& track_gaps = analysis.gaps[index];
    gaps.push_back(
        {{"track", model.track_label(track_gaps.track)},
         {"feeder", track_gaps.feeder == kNoTrack ? Json(nullptr)
                                                  : Json(model.track_label(track_gaps.feeder))},
         {"gaps", track_gaps.gaps.size()},
         {"idle_ns", track_gaps.idle_ns},
         {"span_ns", track_gaps.span_ns}});
  }
  truncated |= analysis.gaps.size() > rows;
  data["gaps"] = gaps;
  data["gap_threshold_ns"] = request.gap_threshold_ns;
  return data;
}

void bound(Envelope& envelope, const AnalyzeRequest& request) {
  if (!request.detail && envelope.findings.size() > request.top) {
    envelope.data["findings_total"] = envelope.findings.size();
    envelope.findings.resize(request.top);
    envelope.truncated = true;
  }
  if (envelope.truncated) {
    envelope.data["truncation"] =
        "findings and tables were cut to the top entries; rerun with --detail for all";
  }
}

}  // namespace

Envelope analyze(const Model& model, const AnalyzeRequest& request) {
  t_full_names = request.detail;
  const Analysis analysis = run_analyses(model, request);
  Envelope envelope;
  envelope.kind = "trace.analyze";
  envelope.verdict = Verdict::kNone;
  add_findings(model, analysis, request, envelope.findings);
  envelope.data = analysis_data(model, analysis, request, envelope.truncated);
  envelope.stats = analysis.stats;
  bound(envelope, request);
  return envelope;
}

namespace {

struct Change {
  std::string id;
  std::string what;
  int64_t a_ns;
  int64_t b_ns;
};

template <typename Key>
void compare(const std::map<Key, int64_t>& a, const std::map<Key, int64_t>& b, int64_t min_delta,
             const std::string& id, const std::function<std::string(const Key&)>& describe,
             std::vector<Change>& out) {
  std::set<Key> keys;
  for (const auto& [key, value] : a) keys.insert(key);
  for (const auto& [key, value] : b) keys.insert(key);
  for (const Key& key : keys) {
    const int64_t before = a.count(key) ? a.at(key) : 0;
    const int64_t after = b.count(key) ? b.at(key) : 0;
    const int64_t delta = after - before;
    const int64_t larger = std::max(before, after);
    if (std::llabs(delta) >= min_delta && std::llabs(delta) * 10 >= larger) {
      out.push_back({id, describe(key), before, after});
    }
  }
}

}  // namespace

Envelope diff(const Model& a, const Model& b, const AnalyzeRequest& request) {
  t_full_names = request.detail;
  const Analysis analysis_a = run_analyses(a, request);
  const Analysis analysis_b = run_analyses(b, request);
  const int64_t span_a = a.end_ns - a.start_ns, span_b = b.end_ns - b.start_ns;
  // Changes smaller than 0.5 % of the longer trace are noise for this purpose.
  const int64_t min_delta = std::max<int64_t>(1, std::max(span_a, span_b) / 200);
  std::vector<Change> changes;
  using NamePair = std::pair<std::string, std::string>;
  auto breakdown_map = [](const Model& model, const Analysis& analysis) {
    std::map<NamePair, int64_t> totals;
    for (const BreakdownRow& row : analysis.breakdown.rows) {
      // Thread ids and stream numbers change between runs: compare per kind of track.
      totals[{std::string(track_kind_name(model.tracks[row.track].kind)) + "s",
              std::string(model.strings.get(row.name))}] += row.self_ns;
    }
    return totals;
  };
  compare<NamePair>(
      breakdown_map(a, analysis_a), breakdown_map(b, analysis_b), min_delta, "trace.diff.breakdown",
      [](const NamePair& key) {
        return "self time of " + display(key.second) + " on " + key.first;
      },
      changes);
  auto lock_map = [](const Model& model, const Analysis& analysis) {
    std::map<NamePair, int64_t> totals;
    for (const LockContention& contention : analysis.locks.contentions) {
      totals[{model.tracks[contention.lock].name, model.tracks[contention.waiter].name}] +=
          contention.wait_ns;
    }
    return totals;
  };
  compare<NamePair>(
      lock_map(a, analysis_a), lock_map(b, analysis_b), min_delta, "trace.diff.locks",
      [](const NamePair& key) { return key.second + "'s wait on lock " + key.first; }, changes);
  auto gap_map = [](const Model& model, const Analysis& analysis) {
    std::map<std::string, int64_t> totals;
    for (const TrackGaps& gaps : analysis.gaps) {
      totals[std::string(track_kind_name(model.tracks[gaps.track].kind)) + "s"] += gaps.idle_ns;
    }
    return totals;
  };
  compare<std::string>(
      gap_map(a, analysis_a), gap_map(b, analysis_b), min_delta, "trace.diff.gaps",
      [](const std::string& key) { return "idle time (gaps) of all " + key; }, changes);
  if (analysis_a.overlap && analysis_b.overlap) {
    const Overlap& before = *analysis_a.overlap;
    const Overlap& after = *analysis_b.overlap;
    std::map<std::string, int64_t> exposed_a{{before.a, before.a_ns - before.both_ns}};
    std::map<std::string, int64_t> exposed_b{{after.a, after.a_ns - after.both_ns}};
    const std::string b_class = before.b;
    compare<std::string>(
        exposed_a, exposed_b, min_delta, "trace.diff.overlap",
        [&](const std::string& key) {
          return "exposed time of " + key + " (not under " + b_class + ")";
        },
        changes);
  }
  // What the user asked about (overlap) first, then locks, gaps and breakdown; larger first.
  auto rank = [](const std::string& id) {
    return id == "trace.diff.overlap" ? 0
           : id == "trace.diff.locks" ? 1
           : id == "trace.diff.gaps"  ? 2
                                      : 3;
  };
  std::stable_sort(changes.begin(), changes.end(), [&](const Change& left, const Change& right) {
    if (rank(left.id) != rank(right.id)) return rank(left.id) < rank(right.id);
    return std::llabs(left.b_ns - left.a_ns) > std::llabs(right.b_ns - right.a_ns);
  });

  Envelope envelope;
  envelope.kind = "trace.diff";
  envelope.verdict = Verdict::kNone;
  {
    Finding span = trace_finding("trace.diff.span", Severity::kInfo);
    span.claim = "trace span " + format_duration(span_a) + " -> " + format_duration(span_b) +
                 " (B/A " + (span_a == 0 ? std::string("n/a") : percent(ratio(span_b, span_a))) +
                 ")";
    span.evidence.metrics = {{"a_span_ns", static_cast<double>(span_a)},
                             {"b_span_ns", static_cast<double>(span_b)}};
    span.next = "the changes below say where the difference comes from";
    envelope.findings.push_back(std::move(span));
  }
  Json table = Json::array();
  for (const Change& change : changes) {
    table.push_back(
        {{"id", change.id}, {"what", change.what}, {"a_ns", change.a_ns}, {"b_ns", change.b_ns}});
    const bool worse = change.b_ns > change.a_ns;
    Finding finding = trace_finding(change.id, worse ? Severity::kWarn : Severity::kInfo);
    finding.claim = change.what + " went from " + format_duration(change.a_ns) + " to " +
                    format_duration(change.b_ns) + " (" + (worse ? "+" : "") +
                    format_duration(change.b_ns - change.a_ns) + ")";
    finding.where.path = change.what;
    finding.evidence.metrics = {{"a_ns", static_cast<double>(change.a_ns)},
                                {"b_ns", static_cast<double>(change.b_ns)},
                                {"delta_ns", static_cast<double>(change.b_ns - change.a_ns)}};
    finding.next = "run `loupe trace analyze` on both traces and compare the evidence of this item";
    envelope.findings.push_back(std::move(finding));
  }
  envelope.data = Json::object();
  envelope.data["a"] = {{"files", files_json(a)}, {"span_ns", span_a}};
  envelope.data["b"] = {{"files", files_json(b)}, {"span_ns", span_b}};
  envelope.data["min_delta_ns"] = min_delta;
  envelope.data["changes"] = table;
  envelope.stats = analysis_a.stats;
  envelope.stats.merge(analysis_b.stats);
  bound(envelope, request);
  return envelope;
}

}  // namespace loupe::trace
