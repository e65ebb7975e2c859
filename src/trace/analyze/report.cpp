// analyze() and diff(): the analyses turned into findings and one bounded envelope.
#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "loupe/error.hpp"
#include "trace/analyze/analyze.hpp"
#include "trace/analyze/tasks.hpp"

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
  // Times in findings are relative to the trace's start (data.time_origin_ns gives it back).
  ref.start_ns = model.slices.start_ns[id] - model.start_ns;
  ref.end_ns = model.slices.end_ns[id] - model.start_ns;
  return ref;
}

Interval relative(const Model& model, Interval interval) {
  return {interval.first - model.start_ns, interval.second - model.start_ns};
}

// "+12.3 ms": a moment relative to the trace's start, for claims.
std::string at_time(const Model& model, int64_t ts) {
  return "+" + format_duration(ts - model.start_ns);
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
  Warmup warmup;
  GpuAnalysis gpu;
  std::vector<GilContention> gil;
  Breakdown breakdown;
  std::optional<Overlap> overlap;
  Locks locks;
  std::vector<TrackGaps> gaps;
  Collectives collectives;
  CriticalPath critical_path;
  StatsRegistry stats;
};

const ClassDef& find_class(const AnalyzeRequest& request, const std::string& name) {
  for (const ClassDef& def : request.classes) {
    if (def.name == name) return def;
  }
  throw Error(ErrorCode::kUsage, "class '" + name + "' is used but not defined",
              "define it with --class " + name + "=SELECTOR");
}

Analysis run_analyses(const Model& model, const AnalyzeRequest& request, const TrackIndex& index) {
  Analysis analysis;
  analysis.stats = model.stats;
  // A bad class or selector is a usage error found before any analysis starts.
  std::optional<Selector> overlap_a, overlap_b, window;
  if (request.overlap) {
    overlap_a.emplace(find_class(request, request.overlap->first).selector);
    overlap_b.emplace(find_class(request, request.overlap->second).selector);
    if (!request.window_class.empty()) {
      window.emplace(find_class(request, request.window_class).selector);
    }
  } else if (!request.window_class.empty()) {
    throw Error(ErrorCode::kUsage, "--window needs --overlap A,B",
                "e.g. --overlap compute,transfer --window layer");
  }
  // The analyses only read the model: they run side by side, each writing its own member of
  // `analysis` (locks its own stats, merged after). Warm-up comes first because the breakdown,
  // the GPU analyses and the critical path leave it out; the rest does not wait for it.
  TaskPool pool(request.threads);
  GpuOps gpu_ops;
  StatsRegistry lock_stats;
  std::vector<std::function<void()>> tasks;
  tasks.emplace_back([&] {
    analysis.warmup = classify_warmup(model, &index);
    gpu_ops = find_gpu_ops(model);
    std::vector<std::function<void()>> after_warmup;
    after_warmup.emplace_back([&] {
      analysis.gpu =
          compute_gpu(model, analysis.warmup, request.kernel_wait_ns, &index, &gpu_ops, &pool);
    });
    after_warmup.emplace_back([&] {
      // The workload's breakdown leaves out warm-up and the labels projected onto streams.
      std::vector<uint8_t> exclude = analysis.warmup.slice;
      std::vector<uint8_t> annotation_lane(model.tracks.size(), 0);
      bool any_annotation_lane = false;
      for (TrackId track = 0; track < model.tracks.size(); ++track) {
        annotation_lane[track] = model.tracks[track].lane == Lane::kAnnotation;
        any_annotation_lane |= annotation_lane[track] != 0;
      }
      if (any_annotation_lane) {
        exclude.resize(model.slices.size(), 0);
        for (SliceId id = 0; id < model.slices.size(); ++id) {
          if (annotation_lane[model.slices.track[id]] != 0) exclude[id] = 1;
        }
      }
      analysis.breakdown = compute_breakdown(model, exclude);
    });
    if (!analysis.warmup.steps.empty() || !request.iteration.empty()) {
      after_warmup.emplace_back([&] {
        analysis.critical_path =
            compute_critical_path(model, analysis.warmup, gpu_ops, request.iteration, &index);
      });
    }
    pool.run(std::move(after_warmup));
  });
  tasks.emplace_back([&] { analysis.gil = compute_gil(model, &index); });
  tasks.emplace_back(
      [&] { analysis.gaps = compute_gaps(model, request.gap_threshold_ns, &index); });
  tasks.emplace_back([&] { analysis.locks = compute_locks(model, lock_stats, &index); });
  tasks.emplace_back([&] { analysis.collectives = compute_collectives(model, index); });
  if (request.overlap) {
    tasks.emplace_back([&] {
      analysis.overlap = compute_overlap(model, *overlap_a, *overlap_b, request.overlap->first,
                                         request.overlap->second, window ? &*window : nullptr,
                                         request.window_class);
    });
  }
  pool.run(std::move(tasks));
  analysis.stats.merge(lock_stats);
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

// Ranking within one severity: what the user asked about (overlap classes), then a thread kept
// waiting by another (locks, the inferred GIL), GPU time not hidden, GPU streams starved, idle
// threads, launch and step statistics, then the descriptive findings and warm-up last.
int rank_of(const Finding& finding) {
  const std::string& id = finding.id;
  // Across ranks, the rank holding everyone up comes before anything within one rank.
  if (id == "trace.collectives.straggler") return -1;
  if (id.rfind("trace.overlap.", 0) == 0) return 0;
  if (id == "trace.locks.contention") return 1;
  if (id == "trace.locks.gil_inferred") return 2;
  if (id == "trace.gpu.comm_exposed" || id == "trace.gpu.copy_overlap") return 3;
  if (id == "trace.gpu.idle") return 4;
  if (id == "trace.gaps.idle") return 5;
  if (id == "trace.gpu.launch" || id == "trace.gpu.steps") return 6;
  if (id.rfind("trace.critical_path.", 0) == 0) return 6;
  if (id == "trace.warmup") return 8;
  return 7;
}

// Within one rank: time lost, in ns; for the inferred GIL, the share of the waiter's time (the
// thread losing most of its time leads).
int64_t impact_of(const Finding& finding) {
  if (finding.id == "trace.locks.gil_inferred") {
    for (const auto& [name, value] : finding.evidence.metrics) {
      if (name == "wait_fraction_of_waiter") return static_cast<int64_t>(value * 1e9);
    }
  }
  for (const auto& [name, value] : finding.evidence.metrics) {
    if (name == "wait_ns" || name == "exposed_ns" || name == "host_wait_ns" || name == "idle_ns" ||
        name == "exposed_a_ns" || name == "imposed_wait_ns") {
      return static_cast<int64_t>(value);
    }
  }
  return 0;
}

std::string zones_or(const std::vector<std::pair<std::string, int64_t>>& zones, int64_t whole) {
  std::string text;
  for (size_t index = 0; index < zones.size() && index < 2; ++index) {
    if (!text.empty()) text += ", ";
    const std::string name =
        zones[index].first == "(no zone)" ? "no traced range" : display(zones[index].first);
    text += name + " for " + percent(ratio(zones[index].second, whole));
  }
  return text.empty() ? "no traced range" : text;
}

std::string joined(const std::vector<std::string>& parts) {
  std::string text;
  for (const std::string& part : parts) text += (text.empty() ? "" : "; ") + part;
  return text;
}

void add_gil_findings(const Model& model, const Analysis& analysis,
                      std::vector<Finding>& findings) {
  using Explanation = GilContention::Holder::Explanation;
  for (const GilContention& contention : analysis.gil) {
    const std::string waiter = model.track_label(contention.waiter);
    // The stalls under a communication or worker thread's calls are waits for a result; the
    // lock is claimed only from the holders exclusion explains better.
    int64_t lock_ns = 0;
    uint64_t lock_waits = 0;
    const GilContention::Holder* lock_holder = nullptr;
    for (const GilContention::Holder& holder : contention.holders) {
      if (holder.explanation == Explanation::kResult) {
        const double share = ratio(holder.held_ns, contention.waiter_span_ns);
        if (share < 0.01) continue;
        const std::string holder_name = model.track_label(holder.thread);
        Finding finding = trace_finding("trace.wait.result", Severity::kInfo);
        finding.claim = waiter + " waited " + format_duration(holder.held_ns) + " in " +
                        count_of(holder.waits, "stall") + " (" + percent(share) +
                        " of its time) for the result of " + holder_name + "'s " +
                        display(holder.call) + " (" + std::to_string(holder.calls) +
                        " calls): a wait for a result, not interpreter-lock exclusion — " +
                        joined(holder.evidence) + " (an inference; sure: " + holder.confidence +
                        ")";
        finding.where.path = display(holder.call);
        finding.where.thread = waiter;
        finding.evidence.metrics = {
            {"waits", static_cast<double>(holder.waits)},
            {"wait_ns", static_cast<double>(holder.held_ns)},
            {"wait_fraction_of_waiter", share},
            {"stopped_before_call", static_cast<double>(holder.stopped_before_call)},
            {"inferred", 1.0}};
        if (holder.example != kNoSlice) {
          finding.evidence.events.push_back(slice_ref(model, holder.example));
        }
        finding.next =
            is_communication_call(holder.call)
                ? "the time is the collective's: load every rank's trace to see which rank it "
                  "waited for (trace.collectives), or overlap it with compute (async_op=True, "
                  "wait() only where the result is needed)"
                : "the waiter needs the holder's result: shorten that call or start it earlier";
        findings.push_back(std::move(finding));
        continue;
      }
      lock_ns += holder.held_ns;
      lock_waits += holder.waits;
      if (lock_holder == nullptr) lock_holder = &holder;
    }
    const double share = ratio(lock_ns, contention.waiter_span_ns);
    // Below 1 % of the waiter's time the pattern is as likely chance as the lock.
    if (share < 0.01 || lock_holder == nullptr) continue;
    const GilContention::Holder& holder = *lock_holder;
    const std::string holder_name = model.track_label(holder.thread);
    const std::string call = display(holder.call);
    const std::string range = holder.annotation.empty() ? call : display(holder.annotation);
    Finding finding = trace_finding("trace.locks.gil_inferred",
                                    share >= 0.05 ? Severity::kWarn : Severity::kInfo);
    finding.claim = waiter + " waited on lock GIL (inferred) for " + format_duration(lock_ns) +
                    " in " + count_of(lock_waits, "stall") + " (" + percent(share) +
                    " of its time); " + holder_name + " held it for " +
                    percent(ratio(holder.held_ns, lock_ns)) + " of that wait, inside " + call;
    if (range != call) finding.claim += " within " + range;
    finding.claim += " (" + std::to_string(holder.calls) +
                     " uninterrupted calls) — an inference: the waiter's own work ran " +
                     format_duration(holder.work_inside_ns) + " during those calls where " +
                     format_duration(holder.work_expected_ns) +
                     " was expected, and it resumed as they returned; exclusion rather than a "
                     "wait for a result, because " +
                     joined(holder.evidence) + " (sure: " + holder.confidence + ")";
    finding.where.path = "lock GIL (inferred)";
    finding.where.thread = waiter;
    finding.where.interval_ns = relative(model, contention.longest);
    finding.evidence.metrics = {
        {"waits", static_cast<double>(lock_waits)},
        {"wait_ns", static_cast<double>(lock_ns)},
        {"wait_fraction_of_waiter", share},
        {"held_by_top_holder_fraction", ratio(holder.held_ns, lock_ns)},
        {"waiter_work_during_calls_ns", static_cast<double>(holder.work_inside_ns)},
        {"waiter_work_expected_ns", static_cast<double>(holder.work_expected_ns)},
        {"inferred", 1.0}};
    if (holder.example != kNoSlice) {
      finding.evidence.events.push_back(slice_ref(model, holder.example));
    }
    if (holder.waiter_zone != kNoSlice) {
      finding.evidence.events.push_back(slice_ref(model, holder.waiter_zone));
    }
    finding.next = "release the interpreter lock around " + call + " in " + holder_name +
                   " (a C call made with the GIL released: ctypes.CDLL, Py_BEGIN_ALLOW_THREADS, "
                   "pybind11::gil_scoped_release), then rerun and compare with `loupe trace diff`";
    findings.push_back(std::move(finding));
  }
}

std::string kinds_phrase(const GpuSummary& gpu) {
  std::string text;
  for (size_t kind = 0; kind < gpu.kinds.size(); ++kind) {
    const GpuKindTime& time = gpu.kinds[kind];
    if (time.count == 0) continue;
    if (!text.empty()) text += ", ";
    text += std::string(gpu_kind_name(static_cast<GpuKind>(kind))) + " " +
            format_duration(time.union_ns) + " (" + std::to_string(time.count) + ")";
  }
  return text;
}

void add_gpu_findings(const Model& model, const Analysis& analysis,
                      std::vector<Finding>& findings) {
  const GpuAnalysis& analysis_gpu = analysis.gpu;
  if (!analysis_gpu.present) return;
  // The workload without its warm-up, unless warm-up is all there is.
  const GpuSummary& gpu = analysis_gpu.steady.busy_ns > 0 ? analysis_gpu.steady : analysis_gpu.all;
  // Every GPU figure below is measured in one window, and says so.
  const bool windowed = &gpu == &analysis_gpu.steady && analysis_gpu.ops_before_window > 0;
  const std::string scope = windowed
                                ? " (steady window from " +
                                      format_duration(analysis_gpu.window.first - model.start_ns) +
                                      ", warm-up before it left out)"
                                : "";
  // Exposed time matters when it is a visible part of the GPU's time line.
  auto matters = [&](int64_t exposed) {
    return exposed >= 100'000 && ratio(exposed, gpu.span_ns) >= 0.05;
  };
  if (gpu.comm_ns > 0) {
    const int64_t exposed = gpu.comm_ns - gpu.comm_under_compute_ns;
    Finding finding = trace_finding("trace.gpu.comm_exposed",
                                    matters(exposed) ? Severity::kWarn : Severity::kInfo);
    finding.claim = "communication (nccl kernels) ran " + format_duration(gpu.comm_ns) + scope +
                    "; compute overlapped " +
                    percent(ratio(gpu.comm_under_compute_ns, gpu.comm_ns)) + " of it, so " +
                    format_duration(exposed) + " is not hidden (" +
                    percent(ratio(exposed, gpu.span_ns)) + " of the GPU time line)";
    finding.where.path = "gpu communication";
    finding.evidence.metrics = {
        {"comm_ns", static_cast<double>(gpu.comm_ns)},
        {"comm_under_compute_ns", static_cast<double>(gpu.comm_under_compute_ns)},
        {"overlap_fraction_of_comm", ratio(gpu.comm_under_compute_ns, gpu.comm_ns)},
        {"exposed_ns", static_cast<double>(exposed)}};
    if (gpu.longest_exposed_comm != kNoSlice) {
      finding.evidence.events.push_back(slice_ref(model, gpu.longest_exposed_comm));
      finding.where.thread = model.track_label(model.slices.track[gpu.longest_exposed_comm]);
    }
    finding.next =
        "overlap the collective with compute (smaller DDP buckets so all-reduce starts during "
        "backward, or compute queued on another stream), or make it smaller; the evidence is the "
        "collective compute hides least";
    findings.push_back(std::move(finding));
  }
  if (gpu.copy_ns > 0) {
    const int64_t exposed = gpu.copy_ns - gpu.copy_under_compute_ns;
    Finding finding = trace_finding("trace.gpu.copy_overlap",
                                    matters(exposed) ? Severity::kWarn : Severity::kInfo);
    std::string directions;
    for (GpuKind kind : {GpuKind::kMemcpyHtoD, GpuKind::kMemcpyDtoH, GpuKind::kMemcpyDtoD,
                         GpuKind::kMemcpyOther}) {
      const GpuKindTime& time = gpu.kinds[static_cast<size_t>(kind)];
      if (time.count == 0) continue;
      if (!directions.empty()) directions += ", ";
      directions +=
          std::string(gpu_kind_name(kind)).substr(7) + " " + format_duration(time.union_ns);
    }
    finding.claim = "copies (" + directions + ") ran " + format_duration(gpu.copy_ns) + scope +
                    "; compute kernels overlapped " +
                    percent(ratio(gpu.copy_under_compute_ns, gpu.copy_ns)) + " of that time, " +
                    format_duration(exposed) + " of copying is exposed";
    finding.where.path = "gpu copy";
    finding.evidence.metrics = {
        {"copy_ns", static_cast<double>(gpu.copy_ns)},
        {"copy_under_compute_ns", static_cast<double>(gpu.copy_under_compute_ns)},
        {"overlap_fraction_of_copy", ratio(gpu.copy_under_compute_ns, gpu.copy_ns)},
        {"exposed_ns", static_cast<double>(exposed)}};
    if (gpu.longest_exposed_copy != kNoSlice) {
      finding.evidence.events.push_back(slice_ref(model, gpu.longest_exposed_copy));
      finding.where.thread = model.track_label(model.slices.track[gpu.longest_exposed_copy]);
    }
    finding.next = exposed > 0 ? "issue the copies on their own stream from pinned memory "
                                 "(non_blocking=True) so they run under the kernels"
                               : "nothing to do: the copies run under compute";
    findings.push_back(std::move(finding));
  }
  for (const StreamIdle& idle : gpu.streams) {
    const int64_t idle_ns = idle.host_wait_ns + idle.kernel_wait_ns + idle.sync_wait_ns +
                            idle.collective_wait_ns + idle.other_ns;
    if (idle_ns == 0) continue;
    const std::string stream = model.track_label(idle.stream);
    const bool starved =
        idle.host_wait_ns >= 1'000'000 && ratio(idle.host_wait_ns, idle.span_ns) >= 0.1;
    Finding finding = trace_finding("trace.gpu.idle", starved ? Severity::kWarn : Severity::kInfo);
    finding.claim = stream + " was idle " + format_duration(idle_ns) + ", " +
                    percent(ratio(idle_ns, idle.span_ns)) + " of its " +
                    format_duration(idle.span_ns) + " span" + scope + ": host wait " +
                    format_duration(idle.host_wait_ns) + ", kernel wait " +
                    format_duration(idle.kernel_wait_ns);
    if (idle.sync_wait_ns > 0) {
      finding.claim += ", host synchronisation " + format_duration(idle.sync_wait_ns);
    }
    if (idle.collective_wait_ns > 0) {
      finding.claim +=
          ", waiting on a collective's result " + format_duration(idle.collective_wait_ns);
    }
    finding.claim += ", other " + format_duration(idle.other_ns);
    if (idle.host_wait_ns > 0 && !idle.host_zones.empty()) {
      finding.claim += "; while it waited for the host, " +
                       (idle.feeder == kNoTrack ? std::string("the launching thread")
                                                : model.track_label(idle.feeder)) +
                       " was in " + zones_or(idle.host_zones, idle.host_zones_ns);
    }
    finding.where.thread = stream;
    if (idle.longest_after != kNoSlice) {
      finding.where.interval_ns = relative(model, idle.longest_host_wait);
      finding.evidence.events.push_back(slice_ref(model, idle.longest_before));
      finding.evidence.events.push_back(slice_ref(model, idle.longest_after));
    }
    finding.evidence.metrics = {
        {"span_ns", static_cast<double>(idle.span_ns)},
        {"busy_ns", static_cast<double>(idle.busy_ns)},
        {"host_wait_ns", static_cast<double>(idle.host_wait_ns)},
        {"kernel_wait_ns", static_cast<double>(idle.kernel_wait_ns)},
        {"sync_wait_ns", static_cast<double>(idle.sync_wait_ns)},
        {"collective_wait_ns", static_cast<double>(idle.collective_wait_ns)},
        {"other_ns", static_cast<double>(idle.other_ns)}};
    if (idle.collective_wait_ns > std::max(idle.host_wait_ns, idle.sync_wait_ns)) {
      finding.next =
          "the launching thread waited for a collective's result: start it earlier or overlap "
          "it with compute (async_op=True, wait() where the result is used); with every rank's "
          "trace loaded, trace.collectives names the rank it waited for";
    } else if (idle.sync_wait_ns > idle.host_wait_ns) {
      finding.next =
          "the launching thread sat in a synchronisation: move the .item() / "
          "cudaStreamSynchronize out of the launch loop or after the next launches";
    } else if (idle.host_wait_ns > 0 && !idle.host_zones.empty()) {
      const std::string top = idle.host_zones.front().first == "(no zone)"
                                  ? std::string("the untraced host work")
                                  : display(idle.host_zones.front().first);
      finding.next = "launch ahead of the GPU: take " + top +
                     " off the launching thread, or capture the launches in a CUDA graph";
    } else {
      finding.next =
          "the stream waited with work queued (events, other streams, synchronisation): read "
          "its gaps' neighbours in the evidence";
    }
    findings.push_back(std::move(finding));
  }
  const LaunchStats& launches = gpu.launches;
  if (launches.launches > 0) {
    Finding finding = trace_finding("trace.gpu.launch", Severity::kInfo);
    finding.claim =
        std::to_string(launches.launches) + (launches.launches == 1 ? " launch" : " launches") +
        " through ac2g flows or correlation ids: launch call p50 " +
        format_duration(launches.cpu_p50) + " (p95 " + format_duration(launches.cpu_p95) +
        "), GPU time p50 " + format_duration(launches.gpu_p50) + ", launch delay p50 " +
        format_duration(launches.delay_p50) + " (p95 " + format_duration(launches.delay_p95) +
        ", max " + format_duration(launches.delay_max) + "); " +
        std::to_string(launches.delay_outliers) + " delay and " +
        std::to_string(launches.cpu_outliers) +
        " launch-call outliers (above 100 us and 10x the median); " +
        std::to_string(launches.short_ops) + " ops ran shorter than their launch call";
    if (launches.worst_delay_op != kNoSlice) {
      finding.claim +=
          "; the longest delay " + at_time(model, model.slices.start_ns[launches.worst_delay_op]);
      finding.evidence.events.push_back(slice_ref(model, launches.worst_delay_launch));
      finding.evidence.events.push_back(slice_ref(model, launches.worst_delay_op));
    }
    finding.where.path = "gpu launches";
    finding.evidence.metrics = {{"launches", static_cast<double>(launches.launches)},
                                {"cpu_p50_ns", static_cast<double>(launches.cpu_p50)},
                                {"gpu_p50_ns", static_cast<double>(launches.gpu_p50)},
                                {"delay_p50_ns", static_cast<double>(launches.delay_p50)},
                                {"delay_p95_ns", static_cast<double>(launches.delay_p95)},
                                {"delay_outliers", static_cast<double>(launches.delay_outliers)},
                                {"cpu_outliers", static_cast<double>(launches.cpu_outliers)}};
    finding.next = launches.short_ops * 2 > launches.launches
                       ? "most ops are shorter than their launch: fuse them or capture a CUDA graph"
                       : "inspect the outliers (evidence: the longest delay's launch and op)";
    findings.push_back(std::move(finding));
  }
  if (gpu.graph_launches > 0) {
    Finding finding = trace_finding("trace.gpu.graphs", Severity::kInfo);
    finding.claim = count_of(gpu.graph_launches, "CUDA graph replay") + " (cudaGraphLaunch) ran " +
                    count_of(gpu.graph_ops, "op") + ", " + format_duration(gpu.graph_ns) +
                    " of GPU time (" + percent(ratio(gpu.graph_ns, gpu.busy_ns)) + " of busy)" +
                    scope + "; each replay counts as one launch";
    if (!gpu.graph_ranges.empty()) {
      finding.claim += "; issued from " + display(gpu.graph_ranges.front().first) + " (" +
                       format_duration(gpu.graph_ranges.front().second) + ")";
      if (gpu.graph_ranges.size() > 1) {
        finding.claim += " and " + count_of(gpu.graph_ranges.size() - 1, "other range");
      }
    }
    finding.where.path = "gpu graphs";
    finding.evidence.metrics = {{"graph_launches", static_cast<double>(gpu.graph_launches)},
                                {"graph_ops", static_cast<double>(gpu.graph_ops)},
                                {"graph_ns", static_cast<double>(gpu.graph_ns)},
                                {"graph_fraction_of_busy", ratio(gpu.graph_ns, gpu.busy_ns)}};
    finding.next =
        "the graph's ops are tied to their replay by its ac2g flow or correlation id: "
        "data.gpu.steady.graphs has "
        "the ranges that issued them";
    findings.push_back(std::move(finding));
  }
  {
    Finding finding = trace_finding("trace.gpu.time", Severity::kInfo);
    finding.claim = "GPU busy " + format_duration(gpu.busy_ns) + " of a " +
                    format_duration(gpu.span_ns) + " span (" +
                    percent(ratio(gpu.busy_ns, gpu.span_ns)) + ")" + scope + ": " +
                    kinds_phrase(gpu);
    finding.where.path = "gpu time";
    finding.evidence.metrics = {{"busy_ns", static_cast<double>(gpu.busy_ns)},
                                {"span_ns", static_cast<double>(gpu.span_ns)}};
    finding.next = "the table data.gpu.kinds has counts, summed and merged times per kind";
    findings.push_back(std::move(finding));
  }
  if (!analysis_gpu.steps.empty()) {
    Finding finding = trace_finding("trace.gpu.steps", Severity::kInfo);
    const GpuStep* slowest = nullptr;
    int64_t low = INT64_MAX, high = 0;
    for (const GpuStep& step : analysis_gpu.steps) {
      if (step.warmup) continue;
      const int64_t length = model.slices.end_ns[step.step] - model.slices.start_ns[step.step];
      low = std::min(low, length);
      high = std::max(high, length);
      if (slowest == nullptr ||
          length > model.slices.end_ns[slowest->step] - model.slices.start_ns[slowest->step]) {
        slowest = &step;
      }
    }
    const GpuStep& first = analysis_gpu.steps.front();
    finding.claim = count_of(analysis_gpu.steps.size(), "ProfilerStep");
    if (first.warmup) {
      finding.claim +=
          "; the first (" + display(model.slice_name(first.step)) + ", " +
          format_duration(model.slices.end_ns[first.step] - model.slices.start_ns[first.step]) +
          ") is warm-up, reported apart";
    }
    if (slowest != nullptr) {
      finding.claim += "; the others took " + format_duration(low) + " to " +
                       format_duration(high) + ", the slowest " +
                       display(model.slice_name(slowest->step)) + ": GPU busy " +
                       format_duration(slowest->gpu.busy_ns) + ", communication not hidden " +
                       format_duration(slowest->gpu.comm_ns - slowest->gpu.comm_under_compute_ns) +
                       ", copies not hidden " +
                       format_duration(slowest->gpu.copy_ns - slowest->gpu.copy_under_compute_ns);
      finding.evidence.events.push_back(slice_ref(model, slowest->step));
    }
    finding.where.path = "ProfilerStep";
    finding.evidence.metrics = {{"steps", static_cast<double>(analysis_gpu.steps.size())}};
    finding.next = "data.gpu.steps has each step's GPU time, overlap and idle split";
    findings.push_back(std::move(finding));
  }
}

void add_critical_path_finding(const Model& model, const Analysis& analysis,
                               std::vector<Finding>& findings) {
  const CriticalPath& path = analysis.critical_path;
  if (!path.present) return;
  using Kind = CriticalPath::Kind;
  const int64_t span = path.span.second - path.span.first;
  auto kind_ns = [&](Kind kind) { return path.kind_ns[static_cast<size_t>(kind)]; };
  Finding finding = trace_finding("trace.critical_path.iteration", Severity::kInfo);
  const int64_t range_ns =
      model.slices.end_ns[path.iteration] - model.slices.start_ns[path.iteration];
  std::string chosen =
      "the median of " + std::to_string(path.steady_iterations) + " after the first";
  if (path.steady_iterations == path.iterations) chosen = "the only one";
  if (path.steady_iterations == 1 && path.iterations == 2) chosen = "the one after the first";
  finding.claim = "critical path of " + display(model.slice_name(path.iteration)) + " (" + chosen +
                  ", " + format_duration(span) +
                  (span > range_ns ? " to the end of the GPU work it launched" : "") + "): CPU " +
                  percent(ratio(kind_ns(Kind::kCpu), span)) + ", GPU " +
                  percent(ratio(kind_ns(Kind::kGpu), span)) + ", launch latency " +
                  percent(ratio(kind_ns(Kind::kLaunch), span)) + ", GPU waits " +
                  percent(ratio(kind_ns(Kind::kWait), span));
  if (kind_ns(Kind::kUntraced) > 0) {
    finding.claim += ", untraced " + percent(ratio(kind_ns(Kind::kUntraced), span));
  }
  std::vector<std::string> top;
  for (size_t index = 0; index < path.items.size() && index < 3; ++index) {
    const CriticalPath::Item& item = path.items[index];
    top.push_back(display(item.name) + " (" + std::string(critical_path_kind_name(item.kind)) +
                  ") " + format_duration(item.ns) + ", " + percent(ratio(item.ns, span)));
  }
  if (!top.empty()) {
    finding.claim += "; longest on it: " + joined(top) +
                     " — each would shorten the step by at most its time on the path";
  }
  finding.where.path = "critical path";
  finding.where.thread = model.track_label(model.slices.track[path.iteration]);
  finding.where.interval_ns = relative(model, path.span);
  finding.evidence.events.push_back(slice_ref(model, path.iteration));
  for (const CriticalPath::Item& item : path.items) {
    if (item.kind == Kind::kGpu && item.example != kNoSlice) {
      finding.evidence.events.push_back(slice_ref(model, item.example));
      break;
    }
  }
  finding.evidence.metrics = {{"path_ns", static_cast<double>(span)},
                              {"cpu_ns", static_cast<double>(kind_ns(Kind::kCpu))},
                              {"gpu_ns", static_cast<double>(kind_ns(Kind::kGpu))},
                              {"launch_ns", static_cast<double>(kind_ns(Kind::kLaunch))},
                              {"gpu_wait_ns", static_cast<double>(kind_ns(Kind::kWait))},
                              {"untraced_ns", static_cast<double>(kind_ns(Kind::kUntraced))},
                              {"segments", static_cast<double>(path.segments.size())}};
  finding.next =
      "data.critical_path.items ranks what the path spent its time in; shorten the top one, "
      "or move CPU work off the path (launch earlier, fewer synchronisations)";
  findings.push_back(std::move(finding));
}

void add_warmup_finding(const Model& model, const Analysis& analysis,
                        std::vector<Finding>& findings) {
  const Warmup& warmup = analysis.warmup;
  if (warmup.items.empty()) return;
  Finding finding = trace_finding("trace.warmup", Severity::kInfo);
  std::string text;
  int64_t total = 0;
  for (size_t index = 0; index < warmup.items.size(); ++index) {
    const Warmup::Item& item = warmup.items[index];
    const int64_t length = model.slices.end_ns[item.slice] - model.slices.start_ns[item.slice];
    total += length;
    if (index >= 3) continue;
    if (!text.empty()) text += "; ";
    text += std::string(warmup_reason_name(item.reason)) + " " +
            display(model.slice_name(item.slice)) + " " + format_duration(length) + " at " +
            at_time(model, model.slices.start_ns[item.slice]);
    if (item.reason == Warmup::Reason::kFirstCall) {
      text += " (the " + std::to_string(item.later_calls) + " later calls: median " +
              format_duration(item.typical_ns) + ")";
    }
    finding.evidence.events.push_back(slice_ref(model, item.slice));
  }
  finding.claim = count_of(warmup.items.size(), "warm-up range") +
                  " kept out of the workload's findings: " + text;
  finding.where.path = "warm-up";
  finding.evidence.metrics = {{"items", static_cast<double>(warmup.items.size())},
                              {"warmup_ns", static_cast<double>(total)}};
  finding.next =
      "profile after a warm-up iteration (torch.profiler schedule(wait=1, warmup=1)) "
      "to keep one-off initialisation out of the trace";
  findings.push_back(std::move(finding));
}

std::string chance_text(double chance) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2g", chance);
  return text;
}

void add_collective_findings(const Model& model, const Analysis& analysis,
                             std::vector<Finding>& findings) {
  const Collectives& collectives = analysis.collectives;
  if (collectives.ranks.empty()) return;
  if (collectives.straggler) {
    const Straggler& straggler = *collectives.straggler;
    const bool by_chance = !straggler.stands_out;
    Finding finding =
        trace_finding("trace.collectives.straggler", by_chance ? Severity::kInfo : Severity::kWarn);
    const std::string rank = "rank " + std::to_string(straggler.rank);
    auto against = [](int64_t mine, int64_t others) {
      return format_duration(mine) +
             (others >= 0 ? " (the other ranks' median " + format_duration(others) + ")" : "");
    };
    finding.claim = rank + " arrived last at " + std::to_string(straggler.arrived_last) + " of " +
                    std::to_string(straggler.collectives) +
                    " collectives, keeping the other ranks waiting " +
                    format_duration(straggler.imposed_ns) + " in all (skew up to " +
                    format_duration(straggler.max_skew_ns) + ")" +
                    (straggler.within_clock_uncertainty
                         ? ", within the ranks' clock uncertainty (±" +
                               format_duration(straggler.clock_uncertainty_ns) +
                               "): the order of arrivals is not measured, no rank stands out"
                     : by_chance ? ", no more often than a random order would make some rank "
                                   "last (chance " +
                                       chance_text(straggler.chance_p) + "): no rank stands out"
                                 : "") +
                    ". Measured from each rank's previous collective to its arrival at those: "
                    "its " +
                    straggler.compute_source + " ran " +
                    against(straggler.compute_ns, straggler.compute_median_others_ns);
    if (straggler.before != "(nothing traced)") {
      finding.claim += ", most beyond the others in " + display(straggler.before) + ": " +
                       against(straggler.before_ns, straggler.before_median_others_ns);
    }
    finding.claim += "; its launching thread spent " +
                     against(straggler.sync_ns, straggler.sync_median_others_ns) +
                     " in synchronisations and " +
                     against(straggler.host_idle_ns, straggler.host_idle_median_others_ns) +
                     " with nothing traced";
    const std::string waited_in =
        straggler.waited_in == kNoSlice
            ? std::string()
            : display(std::string(model.slice_name(straggler.waited_in))) + " of group " +
                  straggler.waited_in_group;
    if (straggler.in_collectives_ns > 0) {
      finding.claim +=
          "; meanwhile its process was inside its other collectives for " +
          against(straggler.in_collectives_ns, straggler.in_collectives_median_others_ns) +
          ", most in " + waited_in +
          (straggler.waited_in_matched ? "" : ", which no other member's trace holds");
    }
    finding.claim += ". Inferred cause: ";
    if (straggler.cause == "compute") {
      finding.claim += "its extra compute (" + display(straggler.before) + ")";
    } else if (straggler.cause == "collective") {
      finding.claim += "it waited inside an earlier collective (" + waited_in +
                       ") for a member late there" +
                       (straggler.waited_in_matched ? "" : ", whose trace does not show it");
    } else if (straggler.cause == "host idle") {
      finding.claim += "its launching thread was idle (untraced host work)";
    } else if (straggler.cause == "host synchronisation") {
      finding.claim += "its launching thread sat in synchronisations";
    } else {
      finding.claim += "none of these explains half of the wait it imposed";
    }
    finding.where.path = straggler.before;
    finding.where.coords.emplace_back("rank", straggler.rank);
    if (straggler.collective_slice != kNoSlice) {
      finding.where.thread = model.track_label(model.slices.track[straggler.collective_slice]);
    }
    if (straggler.before_slice != kNoSlice) {
      finding.where.interval_ns = relative(model, {model.slices.start_ns[straggler.before_slice],
                                                   model.slices.end_ns[straggler.before_slice]});
      finding.evidence.events.push_back(slice_ref(model, straggler.before_slice));
    }
    if (straggler.collective_slice != kNoSlice) {
      finding.evidence.events.push_back(slice_ref(model, straggler.collective_slice));
    }
    finding.evidence.metrics = {
        {"rank", static_cast<double>(straggler.rank)},
        {"arrived_last", static_cast<double>(straggler.arrived_last)},
        {"collectives", static_cast<double>(straggler.collectives)},
        {"chance_p", straggler.chance_p},
        {"clock_uncertainty_ns", static_cast<double>(straggler.clock_uncertainty_ns)},
        {"imposed_wait_ns", static_cast<double>(straggler.imposed_ns)},
        {"max_skew_ns", static_cast<double>(straggler.max_skew_ns)},
        {"compute_ns", static_cast<double>(straggler.compute_ns)},
        {"compute_median_others_ns", static_cast<double>(straggler.compute_median_others_ns)},
        {"sync_ns", static_cast<double>(straggler.sync_ns)},
        {"sync_median_others_ns", static_cast<double>(straggler.sync_median_others_ns)},
        {"host_idle_ns", static_cast<double>(straggler.host_idle_ns)},
        {"host_idle_median_others_ns", static_cast<double>(straggler.host_idle_median_others_ns)},
        {"in_collectives_ns", static_cast<double>(straggler.in_collectives_ns)},
        {"in_collectives_median_others_ns",
         static_cast<double>(straggler.in_collectives_median_others_ns)},
        {"before_ns", static_cast<double>(straggler.before_ns)}};
    if (straggler.before_median_others_ns >= 0) {
      finding.evidence.metrics.emplace_back("before_median_others_ns",
                                            static_cast<double>(straggler.before_median_others_ns));
    }
    finding.next = "find why " + display(straggler.before) + " is slower on " + rank +
                   " (its share of the work, its device, what else runs there); balance or speed "
                   "it up, then rerun and compare the ranks' traces";
    findings.push_back(std::move(finding));
  }
  // The rank whose communication is least hidden by compute.
  const RankCollectives* exposed = nullptr;
  for (const RankCollectives& rank : collectives.per_rank) {
    if (rank.comm_ns == 0) continue;
    if (exposed == nullptr ||
        rank.comm_ns - rank.comm_hidden_ns > exposed->comm_ns - exposed->comm_hidden_ns) {
      exposed = &rank;
    }
  }
  if (exposed != nullptr) {
    Finding finding = trace_finding("trace.collectives.comm_exposed", Severity::kInfo);
    const int64_t exposed_ns = exposed->comm_ns - exposed->comm_hidden_ns;
    finding.claim =
        "rank " + std::to_string(exposed->rank) + ": " + format_duration(exposed_ns) + " of its " +
        format_duration(exposed->comm_ns) + " of communication is exposed (" +
        percent(ratio(exposed->comm_hidden_ns, exposed->comm_ns)) + " hidden by compute); " +
        format_duration(exposed->waited_ns) + " of it waiting for later ranks";
    finding.where.coords.emplace_back("rank", exposed->rank);
    if (exposed->track != kNoTrack) finding.where.thread = model.track_label(exposed->track);
    finding.evidence.metrics = {{"comm_ns", static_cast<double>(exposed->comm_ns)},
                                {"comm_hidden_ns", static_cast<double>(exposed->comm_hidden_ns)},
                                {"exposed_ns", static_cast<double>(exposed_ns)},
                                {"waited_ns", static_cast<double>(exposed->waited_ns)}};
    finding.next =
        "overlap communication with independent work (start the collective earlier, split it), "
        "or remove the wait for late ranks first (trace.collectives.straggler)";
    findings.push_back(std::move(finding));
  }
  if (!collectives.mismatches.empty()) {
    Finding finding = trace_finding("trace.collectives.unmatched", Severity::kWarn);
    std::string text;
    for (size_t at = 0; at < collectives.mismatches.size() && at < 3; ++at) {
      text += (text.empty() ? "" : "; ") + collectives.mismatches[at].text;
    }
    if (collectives.mismatches.size() > 3) {
      text += "; " + std::to_string(collectives.mismatches.size() - 3) + " more in " +
              "data.collectives.mismatches";
    }
    finding.claim = text + " (matched within each process group by " +
                    (collectives.sequence_numbers
                         ? std::string("Kineto's sequence numbers")
                         : std::string("order, checked on name, element counts and dtype")) +
                    ", so the other collectives still match)";
    const Collectives::Mismatch& first = collectives.mismatches.front();
    finding.where.path =
        first.collective + " #" + std::to_string(first.seq) + " of group " + first.group;
    finding.where.coords.emplace_back("rank", first.rank);
    finding.evidence.metrics = {{"unmatched", static_cast<double>(collectives.unmatched)},
                                {"mismatches", static_cast<double>(collectives.mismatches.size())}};
    finding.next =
        "give every rank's trace for the same time window (a trace cut short or a rank missing "
        "a step shows like this); a collective with different sizes or dtype on one rank is a "
        "bug in that rank's program";
    findings.push_back(std::move(finding));
  }
}

void add_findings(const Model& model, const TrackIndex& index, const Analysis& analysis,
                  const AnalyzeRequest& request, std::vector<Finding>& findings) {
  const int64_t span = model.end_ns - model.start_ns;
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
        per_window.where.interval_ns = relative(
            model, {model.slices.start_ns[first.window], model.slices.end_ns[first.window]});
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
  // Long holds of shared locks: latent contention, reported whether or not a waiter came.
  for (const LongHold& hold : analysis.locks.long_holds) {
    const std::string lock = model.tracks[hold.lock].name;
    const std::string holder = model.track_label(hold.thread);
    const int64_t held = hold.interval.second - hold.interval.first;
    Finding finding = trace_finding("trace.locks.long_hold", Severity::kInfo);
    char times[32];
    std::snprintf(times, sizeof times, "%.1fx",
                  ratio(held, std::max<int64_t>(hold.median_hold_ns, 1)));
    finding.claim = holder + " held lock " + lock + " for " + format_duration(held) + " (" + times +
                    " its median hold of " + format_duration(hold.median_hold_ns) + ") inside " +
                    zones_phrase(hold.zones, held) + "; " +
                    (hold.waiters == 0 ? std::string("no thread waited meanwhile, but any that "
                                                     "needs the lock then will")
                                       : count_of(hold.waiters, "wait") + " overlapped it");
    finding.where.path = "lock " + lock;
    finding.where.thread = holder;
    finding.where.interval_ns = hold.interval;
    finding.evidence.metrics = {{"hold_ns", static_cast<double>(held)},
                                {"median_hold_ns", static_cast<double>(hold.median_hold_ns)},
                                {"waiters", static_cast<double>(hold.waiters)}};
    finding.next = "release the lock around the long part of " +
                   (hold.zones.empty() ? std::string("the hold") : hold.zones.front().first) +
                   " if it does not need it";
    findings.push_back(std::move(finding));
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
    finding.where.interval_ns = relative(model, contention.longest);
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
  add_gil_findings(model, analysis, findings);
  add_gpu_findings(model, analysis, findings);
  for (const TrackGaps& track_gaps : analysis.gaps) {
    if (track_gaps.gaps.empty()) continue;
    // GPU streams: trace.gpu.idle says the same with the cause of each gap.
    if (analysis.gpu.present && model.tracks[track_gaps.track].kind == TrackKind::kGpuStream) {
      continue;
    }
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
    finding.where.interval_ns = relative(model, longest.interval);
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
    const auto busy_found = analysis.breakdown.busy_ns.find(row.track);
    const int64_t busy = busy_found == analysis.breakdown.busy_ns.end() ? 0 : busy_found->second;
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
  add_warmup_finding(model, analysis, findings);
  add_critical_path_finding(model, analysis, findings);
  add_collective_findings(model, analysis, findings);
  // Across ranks every finding says whose: the rank of its first evidence event (or its thread).
  if (model.multi_rank()) {
    for (Finding& finding : findings) {
      bool has_rank = false;
      for (const auto& [name, value] : finding.where.coords) has_rank |= name == "rank";
      if (has_rank || finding.evidence.events.empty()) continue;
      const SliceId first = static_cast<SliceId>(finding.evidence.events.front().id);
      if (first >= model.slices.size()) continue;
      const int rank = model.track_rank(model.slices.track[first]);
      if (rank >= 0) finding.where.coords.emplace_back("rank", rank);
    }
  }
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& left, const Finding& right) {
    if (severity_rank(left.severity) != severity_rank(right.severity)) {
      return severity_rank(left.severity) < severity_rank(right.severity);
    }
    if (rank_of(left) != rank_of(right)) return rank_of(left) < rank_of(right);
    // Breakdown rows keep their order (by self time); the others go by time lost.
    if (left.id == "trace.breakdown.top") return false;
    return impact_of(left) > impact_of(right);
  });
}

Json summary_json(const Model& model, const GpuSummary& gpu, size_t rows, bool& truncated) {
  Json kinds = Json::array();
  for (size_t kind = 0; kind < gpu.kinds.size(); ++kind) {
    const GpuKindTime& time = gpu.kinds[kind];
    if (time.count == 0) continue;
    kinds.push_back({{"kind", gpu_kind_name(static_cast<GpuKind>(kind))},
                     {"count", time.count},
                     {"sum_ns", time.sum_ns},
                     {"union_ns", time.union_ns}});
  }
  Json streams = Json::array();
  for (size_t index = 0; index < gpu.streams.size() && index < rows; ++index) {
    const StreamIdle& idle = gpu.streams[index];
    streams.push_back(
        {{"stream", model.track_label(idle.stream)},
         {"feeder", idle.feeder == kNoTrack ? Json(nullptr) : Json(model.track_label(idle.feeder))},
         {"ops", idle.ops},
         {"span_ns", idle.span_ns},
         {"busy_ns", idle.busy_ns},
         {"host_wait_ns", idle.host_wait_ns},
         {"kernel_wait_ns", idle.kernel_wait_ns},
         {"sync_wait_ns", idle.sync_wait_ns},
         {"collective_wait_ns", idle.collective_wait_ns},
         {"other_ns", idle.other_ns},
         {"queue",
          {{"changes", idle.queue_changes},
           {"mean", idle.queue_mean},
           {"time_mean", idle.queue_time_mean},
           {"median", idle.queue_median},
           {"max", idle.queue_max}}}});
  }
  truncated |= gpu.streams.size() > rows;
  const LaunchStats& launches = gpu.launches;
  Json graph_ranges = Json::array();
  for (size_t index = 0; index < gpu.graph_ranges.size() && index < rows; ++index) {
    graph_ranges.push_back({{"range", display(gpu.graph_ranges[index].first)},
                            {"gpu_ns", gpu.graph_ranges[index].second}});
  }
  truncated |= gpu.graph_ranges.size() > rows;
  return {{"busy_ns", gpu.busy_ns},
          {"graphs",
           {{"launches", gpu.graph_launches},
            {"ops", gpu.graph_ops},
            {"gpu_ns", gpu.graph_ns},
            {"ranges", graph_ranges}}},
          {"span_ns", gpu.span_ns},
          {"kinds", kinds},
          {"copy_ns", gpu.copy_ns},
          {"copy_under_compute_ns", gpu.copy_under_compute_ns},
          {"compute_ns", gpu.compute_ns},
          {"comm_ns", gpu.comm_ns},
          {"comm_under_compute_ns", gpu.comm_under_compute_ns},
          {"streams", streams},
          {"launches",
           {{"count", launches.launches},
            {"cpu_p50_ns", launches.cpu_p50},
            {"cpu_p95_ns", launches.cpu_p95},
            {"cpu_max_ns", launches.cpu_max},
            {"gpu_p50_ns", launches.gpu_p50},
            {"gpu_p95_ns", launches.gpu_p95},
            {"gpu_max_ns", launches.gpu_max},
            {"delay_p50_ns", launches.delay_p50},
            {"delay_p95_ns", launches.delay_p95},
            {"delay_max_ns", launches.delay_max},
            {"delay_outliers", launches.delay_outliers},
            {"cpu_outliers", launches.cpu_outliers},
            {"short_ops", launches.short_ops}}}};
}

Json gpu_json(const Model& model, const GpuAnalysis& gpu, const AnalyzeRequest& request,
              size_t rows, bool& truncated) {
  Json out = Json::object();
  out["kernel_wait_ns"] = request.kernel_wait_ns;
  // The one window every figure of `steady` was measured in (times relative to time_origin_ns).
  out["window"] = {
      {"start_ns", gpu.window.first - model.start_ns},
      {"end_ns", gpu.window.second - model.start_ns},
      {"ops_before", gpu.ops_before_window},
      {"warmup_ops_inside", gpu.warmup_ops_inside},
      {"rule",
       "opens when the last GPU op launched inside a warm-up range (first ProfilerStep, slow "
       "first call, module loading) that began in the trace's first half ends; ops are clipped "
       "to it"}};
  out["steady"] = summary_json(model, gpu.steady, rows, truncated);
  out["all"] = summary_json(model, gpu.all, rows, truncated);
  Json steps = Json::array();
  for (size_t index = 0; index < gpu.steps.size() && index < rows; ++index) {
    const GpuStep& step = gpu.steps[index];
    const GpuSummary& summary = step.gpu;
    int64_t host_wait = 0, other = 0;
    for (const StreamIdle& idle : summary.streams) {
      host_wait += idle.host_wait_ns;
      other += idle.other_ns;
    }
    steps.push_back({{"step", display(model.slice_name(step.step))},
                     {"warmup", step.warmup},
                     {"start_ns", model.slices.start_ns[step.step] - model.start_ns},
                     {"dur_ns", model.slices.end_ns[step.step] - model.slices.start_ns[step.step]},
                     {"gpu_busy_ns", summary.busy_ns},
                     {"comm_ns", summary.comm_ns},
                     {"comm_under_compute_ns", summary.comm_under_compute_ns},
                     {"copy_ns", summary.copy_ns},
                     {"copy_under_compute_ns", summary.copy_under_compute_ns},
                     {"host_wait_ns", host_wait},
                     {"other_idle_ns", other},
                     {"launch_delay_p50_ns", summary.launches.delay_p50}});
  }
  truncated |= gpu.steps.size() > rows;
  out["steps"] = steps;
  return out;
}

Json critical_path_json(const Model& model, const CriticalPath& path, size_t rows,
                        bool& truncated) {
  const int64_t span = path.span.second - path.span.first;
  Json kinds = Json::object();
  for (size_t kind = 0; kind < path.kind_ns.size(); ++kind) {
    kinds[std::string(critical_path_kind_name(static_cast<CriticalPath::Kind>(kind))) + "_ns"] =
        path.kind_ns[kind];
  }
  Json items = Json::array();
  for (size_t index = 0; index < path.items.size() && index < rows; ++index) {
    const CriticalPath::Item& item = path.items[index];
    items.push_back({{"kind", critical_path_kind_name(item.kind)},
                     {"name", display(item.name)},
                     {"ns", item.ns},
                     {"share", ratio(item.ns, span)},
                     {"segments", item.segments}});
  }
  truncated |= path.items.size() > rows;
  Json segments = Json::array();
  for (size_t index = 0; index < path.segments.size() && index < rows; ++index) {
    const CriticalPath::Segment& segment = path.segments[index];
    segments.push_back({{"kind", critical_path_kind_name(segment.kind)},
                        {"name", display(segment.name)},
                        {"start_ns", segment.interval.first - model.start_ns},
                        {"end_ns", segment.interval.second - model.start_ns}});
  }
  truncated |= path.segments.size() > rows;
  return {{"iteration", display(model.slice_name(path.iteration))},
          {"source", path.source},
          {"iterations", path.iterations},
          {"steady_iterations", path.steady_iterations},
          {"start_ns", path.span.first - model.start_ns},
          {"end_ns", path.span.second - model.start_ns},
          {"span_ns", span},
          {"kinds", kinds},
          {"items", items},
          {"segment_count", path.segments.size()},
          {"segments", segments}};
}

Json analysis_data(const Model& model, const Analysis& analysis, const AnalyzeRequest& request,
                   bool& truncated) {
  const size_t rows = request.detail ? SIZE_MAX : kTableRows;
  Json data = Json::object();
  data["files"] = files_json(model);
  data["alignment"] = model.alignment;
  data["time_origin_ns"] = model.start_ns;  // times in findings and tables are relative to it
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
                         {"start_ns", model.slices.start_ns[window.window] - model.start_ns},
                         {"end_ns", model.slices.end_ns[window.window] - model.start_ns},
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
  Json warmup = Json::array();
  for (size_t index = 0; index < analysis.warmup.items.size() && index < rows; ++index) {
    const Warmup::Item& item = analysis.warmup.items[index];
    Json row = {{"slice", item.slice},
                {"name", display(model.slice_name(item.slice))},
                {"reason", warmup_reason_name(item.reason)},
                {"track", model.track_label(model.slices.track[item.slice])},
                {"start_ns", model.slices.start_ns[item.slice] - model.start_ns},
                {"dur_ns", model.slices.end_ns[item.slice] - model.slices.start_ns[item.slice]}};
    if (item.reason == Warmup::Reason::kFirstCall) {
      row["later_calls"] = item.later_calls;
      row["later_median_ns"] = item.typical_ns;
    }
    warmup.push_back(std::move(row));
  }
  truncated |= analysis.warmup.items.size() > rows;
  data["warmup"] = warmup;
  Json gil = Json::array();
  for (const GilContention& contention : analysis.gil) {
    for (const GilContention::Holder& holder : contention.holders) {
      gil.push_back(
          {{"waiter", model.track_label(contention.waiter)},
           {"holder", model.track_label(holder.thread)},
           {"call", display(holder.call)},
           {"range", display(holder.annotation)},
           {"calls", holder.calls},
           {"waiter_work_during_calls_ns", holder.work_inside_ns},
           {"waiter_work_expected_ns", holder.work_expected_ns},
           {"wait_ns", holder.held_ns},
           {"waiter_span_ns", contention.waiter_span_ns},
           {"explanation", holder.explanation == GilContention::Holder::Explanation::kResult
                               ? "result wait"
                               : "lock"},
           {"evidence", holder.evidence},
           {"confidence", holder.confidence}});
    }
  }
  data["gil_inferred"] = gil;
  if (!analysis.collectives.ranks.empty()) {
    const Collectives& collectives = analysis.collectives;
    Json ranks = Json::array();
    for (const RankCollectives& rank : collectives.per_rank) {
      std::string file;
      for (const FileInfo& info : model.files) {
        if (info.rank == rank.rank) file = info.path;
      }
      ranks.push_back({{"rank", rank.rank},
                       {"file", file},
                       {"collectives", rank.collectives},
                       {"arrived_last", rank.arrived_last},
                       {"comm_ns", rank.comm_ns},
                       {"comm_hidden_ns", rank.comm_hidden_ns},
                       {"exposed_ns", rank.comm_ns - rank.comm_hidden_ns},
                       {"waited_ns", rank.waited_ns},
                       {"imposed_wait_ns", rank.imposed_ns},
                       {"clock_offset_ns", rank.clock_offset_ns},
                       {"clock_uncertainty_ns", rank.clock_uncertainty_ns}});
    }
    Json instances = Json::array();
    std::vector<const CollectiveInstance*> by_skew;
    for (const CollectiveInstance& instance : collectives.instances) by_skew.push_back(&instance);
    std::stable_sort(by_skew.begin(), by_skew.end(), [](const auto* left, const auto* right) {
      return left->skew_ns > right->skew_ns;
    });
    for (size_t index = 0; index < by_skew.size() && index < rows; ++index) {
      const CollectiveInstance& instance = *by_skew[index];
      instances.push_back({{"group", instance.group},
                           {"index", instance.index},
                           {"seq", instance.seq},
                           {"name", display(instance.name)},
                           {"last_rank", instance.last_rank},
                           {"skew_ns", instance.skew_ns},
                           {"imposed_wait_ns", instance.imposed_ns}});
    }
    truncated |= by_skew.size() > rows;
    Json file_ranks = Json::array();
    for (const FileInfo& info : model.files) {
      file_ranks.push_back(
          {{"file", info.path}, {"rank", info.rank}, {"source", info.rank_source}});
    }
    Json mismatches = Json::array();
    for (size_t index = 0; index < collectives.mismatches.size() && index < rows; ++index) {
      const Collectives::Mismatch& mismatch = collectives.mismatches[index];
      mismatches.push_back({{"group", mismatch.group},
                            {"seq", mismatch.seq},
                            {"collective", mismatch.collective},
                            {"rank", mismatch.rank},
                            {"kind", mismatch.kind},
                            {"text", mismatch.text}});
    }
    truncated |= collectives.mismatches.size() > rows;
    data["collectives"] = {
        {"ranks", ranks},
        {"instances", instances},
        {"matched", collectives.instances.size()},
        {"unmatched", collectives.unmatched},
        {"mismatches", mismatches},
        {"matched_by", collectives.sequence_numbers ? "sequence number" : "order and signature"},
        {"outside_group", collectives.outside_group},
        {"host_groups", collectives.host_groups},
        {"clock", collectives.clock},
        {"file_ranks", file_ranks}};
  }
  if (analysis.gpu.present) {
    data["gpu"] = gpu_json(model, analysis.gpu, request, rows, truncated);
  }
  if (analysis.critical_path.present) {
    data["critical_path"] = critical_path_json(model, analysis.critical_path, rows, truncated);
  }
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
  // One index of the model's tracks for every analysis (building it is a pass over the slices).
  const TrackIndex index(model);
  const Analysis analysis = run_analyses(model, request, index);
  Envelope envelope;
  envelope.kind = "trace.analyze";
  envelope.verdict = Verdict::kNone;
  add_findings(model, index, analysis, request, envelope.findings);
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
  const Analysis analysis_a = run_analyses(a, request, TrackIndex(a));
  const Analysis analysis_b = run_analyses(b, request, TrackIndex(b));
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
    for (const GilContention& contention : analysis.gil) {
      if (ratio(contention.wait_ns, contention.waiter_span_ns) < 0.01) continue;
      totals[{"GIL (inferred)", model.tracks[contention.waiter].name}] += contention.wait_ns;
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
  auto gpu_map = [](const Analysis& analysis) {
    std::map<std::string, int64_t> totals;
    if (!analysis.gpu.present) return totals;
    const GpuSummary& gpu = analysis.gpu.steady;
    totals["communication not hidden by compute"] = gpu.comm_ns - gpu.comm_under_compute_ns;
    totals["copying not hidden by compute"] = gpu.copy_ns - gpu.copy_under_compute_ns;
    int64_t host_wait = 0;
    // The host late for any reason: busy elsewhere, synchronising, waiting for a collective.
    for (const StreamIdle& idle : gpu.streams) {
      host_wait += idle.host_wait_ns + idle.sync_wait_ns + idle.collective_wait_ns;
    }
    totals["GPU idle waiting for the host"] = host_wait;
    for (size_t kind = 0; kind < gpu.kinds.size(); ++kind) {
      totals["GPU time of " + std::string(gpu_kind_name(static_cast<GpuKind>(kind)))] =
          gpu.kinds[kind].union_ns;
    }
    return totals;
  };
  compare<std::string>(
      gpu_map(analysis_a), gpu_map(analysis_b), min_delta, "trace.diff.gpu",
      [](const std::string& key) { return key + " (warm-up left out)"; }, changes);
  // Warm-up is compared last: a slower first call says little about the workload.
  auto warmup_map = [](const Model& model, const Analysis& analysis) {
    std::map<std::string, int64_t> totals;
    for (const Warmup::Item& item : analysis.warmup.items) {
      totals[std::string(warmup_reason_name(item.reason)) + " " +
             std::string(model.slice_name(item.slice))] +=
          model.slices.end_ns[item.slice] - model.slices.start_ns[item.slice];
    }
    return totals;
  };
  compare<std::string>(
      warmup_map(a, analysis_a), warmup_map(b, analysis_b), min_delta, "trace.diff.warmup",
      [](const std::string& key) { return "warm-up: " + display(key); }, changes);
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
    return id == "trace.diff.overlap"     ? 0
           : id == "trace.diff.locks"     ? 1
           : id == "trace.diff.gpu"       ? 2
           : id == "trace.diff.gaps"      ? 3
           : id == "trace.diff.breakdown" ? 4
                                          : 5;
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
    // A slower warm-up is reported, not flagged: it is not the workload.
    const bool worse = change.b_ns > change.a_ns && change.id != "trace.diff.warmup";
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
