// GPU analyses of Kineto-shaped traces (analyze.hpp, GpuAnalysis; docs/pytorch-traces.md).
#include <algorithm>
#include <cctype>
#include <functional>
#include <optional>

#include "trace/analyze/analyze.hpp"
#include "trace/analyze/tasks.hpp"

namespace loupe::trace {
namespace {

constexpr uint8_t kNotGpu = kNotGpuOp;
// Host-wait gaps whose launching thread's zones are looked up, longest first: enough to name the
// host work, bounded so that 100 k tiny gaps cost nothing.
constexpr size_t kZoneGaps = 32;
constexpr int64_t kOutlierFloorNs = 100'000;
constexpr int64_t kOutlierFactor = 10;
// Steps summarised by one task: a few hundred ops each, enough to outweigh handing them over.
constexpr size_t kStepsPerTask = 256;

bool iequals_prefix(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t index = 0; index < prefix.size(); ++index) {
    if (std::tolower(static_cast<unsigned char>(text[index])) != prefix[index]) return false;
  }
  return true;
}

GpuKind kind_from(uint8_t role, std::string_view name) {
  if (role == 0) return iequals_prefix(name, "nccl") ? GpuKind::kComm : GpuKind::kKernel;
  if (role == 2) return GpuKind::kMemset;
  if (name.find("HtoD") != std::string_view::npos) return GpuKind::kMemcpyHtoD;
  if (name.find("DtoH") != std::string_view::npos) return GpuKind::kMemcpyDtoH;
  if (name.find("DtoD") != std::string_view::npos) return GpuKind::kMemcpyDtoD;
  return GpuKind::kMemcpyOther;
}

bool is_copy(GpuKind kind) {
  return kind == GpuKind::kMemcpyHtoD || kind == GpuKind::kMemcpyDtoH ||
         kind == GpuKind::kMemcpyDtoD || kind == GpuKind::kMemcpyOther;
}

// Length of `intervals` (sorted, disjoint) inside [start, end).
int64_t covered(const std::vector<Interval>& intervals, int64_t start, int64_t end) {
  auto it = std::upper_bound(intervals.begin(), intervals.end(), Interval{start, INT64_MAX});
  if (it != intervals.begin()) --it;
  int64_t total = 0;
  for (; it != intervals.end() && it->first < end; ++it) {
    total += std::max<int64_t>(0, std::min(it->second, end) - std::max(it->first, start));
  }
  return total;
}

int64_t percentile(std::vector<int64_t>& values, size_t per_hundred) {
  if (values.empty()) return 0;
  const size_t rank = std::min(values.size() - 1, values.size() * per_hundred / 100);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(rank),
                   values.end());
  return values[rank];
}

struct Context {
  const Model& model;
  const TrackIndex& index;
  const std::vector<uint8_t>& kind;  // per slice: GpuKind or kNotGpu
  const std::vector<SliceId>& launch_of;
  const std::vector<uint32_t>& device_of;  // by track: the device (file, pid) index
  size_t devices;
  int64_t kernel_wait_ns;
  // Host waits, merged: per thread (main lane) its synchronisations, per process (device_of of
  // its threads) the collectives any of its threads ran.
  const std::vector<std::vector<Interval>>& sync_of_thread;
  const std::vector<std::vector<Interval>>& collective_of_process;
  const std::vector<uint8_t>& graph_launch;  // per name: cudaGraphLaunch (a graph's replay)
};

// The stream's queue length (StreamIdle): launches and starts of `ids`, one stream's ops, as
// changes in time order; at equal times a launch counts before a start (it came first).
void queue_length(const Context& context, const std::vector<SliceId>& ids, StreamIdle& idle) {
  const SliceTable& slices = context.model.slices;
  using Change = std::pair<int64_t, int>;  // (time, +1 launch or -1 start)
  auto earlier = [](const Change& left, const Change& right) {
    return left.first != right.first ? left.first < right.first : left.second > right.second;
  };
  // Launches and starts each come mostly in time order (ops by start, launched first in first
  // out): two sorted runs merge into the order one sort of both gives, in linear time.
  std::vector<Change> launches, starts;
  launches.reserve(ids.size());
  starts.reserve(ids.size());
  for (SliceId id : ids) {
    const SliceId launch = context.launch_of[id];
    if (launch == kNoSlice) continue;
    launches.emplace_back(slices.start_ns[launch], +1);
    starts.emplace_back(slices.start_ns[id], -1);
  }
  if (launches.empty()) return;
  if (!std::is_sorted(launches.begin(), launches.end(), earlier)) {
    std::sort(launches.begin(), launches.end(), earlier);
  }
  if (!std::is_sorted(starts.begin(), starts.end(), earlier)) {
    std::sort(starts.begin(), starts.end(), earlier);
  }
  std::vector<Change> changes(launches.size() + starts.size());
  std::merge(launches.begin(), launches.end(), starts.begin(), starts.end(), changes.begin(),
             earlier);
  std::vector<int64_t> values;
  values.reserve(changes.size());
  int64_t length = 0, sum = 0;
  double weighted = 0;
  for (size_t at = 0; at < changes.size(); ++at) {
    length += changes[at].second;
    values.push_back(length);
    sum += length;
    idle.queue_max = std::max(idle.queue_max, length);
    if (at + 1 < changes.size()) {
      weighted += static_cast<double>(length) *
                  static_cast<double>(changes[at + 1].first - changes[at].first);
    }
  }
  idle.queue_changes = values.size();
  idle.queue_mean = static_cast<double>(sum) / static_cast<double>(values.size());
  const int64_t span = changes.back().first - changes.front().first;
  idle.queue_time_mean = span > 0 ? weighted / static_cast<double>(span) : 0;
  const size_t middle = (values.size() - 1) / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(middle),
                   values.end());
  idle.queue_median = values[middle];
}

// `ops`: GPU op ids, ascending (so by track, then start), each overlapping `window`. Every
// interval statistic (time by kind, overlap, idle) sees an op clipped to the window, so all kinds
// are measured over one span; launch statistics take the ops whole.
GpuSummary summarize(const Context& context, const std::vector<SliceId>& ops, Interval window) {
  const Model& model = context.model;
  const SliceTable& slices = model.slices;
  GpuSummary summary;
  if (ops.empty()) return summary;
  auto begin = [&](SliceId id) { return std::max(slices.start_ns[id], window.first); };
  auto finish = [&](SliceId id) { return std::min(slices.end_ns[id], window.second); };
  int64_t first = INT64_MAX, last = INT64_MIN;
  // Per device (file, pid): intervals per kind; per stream (its main lane): the ops.
  std::vector<std::array<std::vector<Interval>, static_cast<size_t>(GpuKind::kCount)>> devices(
      context.devices);
  std::vector<std::vector<SliceId>> by_stream(model.tracks.size());
  for (SliceId id : ops) {
    const auto kind = static_cast<GpuKind>(context.kind[id]);
    const int64_t start = begin(id), end = finish(id);
    GpuKindTime& time = summary.kinds[static_cast<size_t>(kind)];
    ++time.count;
    time.sum_ns += end - start;
    first = std::min(first, start);
    last = std::max(last, end);
    const TrackId track = slices.track[id];
    devices[context.device_of[track]][static_cast<size_t>(kind)].emplace_back(start, end);
    by_stream[model.tracks[track].main].push_back(id);
  }
  summary.span_ns = last - first;
  int64_t worst_comm = 0, worst_copy = 0;
  for (size_t device = 0; device < devices.size(); ++device) {
    auto& per_kind = devices[device];
    // Merge each kind once; the unions of kinds build the rest (merged lists are short).
    std::array<std::vector<Interval>, static_cast<size_t>(GpuKind::kCount)> merged;
    std::vector<Interval> all, copy;
    for (size_t kind = 0; kind < per_kind.size(); ++kind) {
      merged[kind] = union_of(std::move(per_kind[kind]));
      summary.kinds[kind].union_ns += total_length(merged[kind]);
      all.insert(all.end(), merged[kind].begin(), merged[kind].end());
      if (is_copy(static_cast<GpuKind>(kind))) {
        copy.insert(copy.end(), merged[kind].begin(), merged[kind].end());
      }
    }
    const std::vector<Interval>& compute = merged[static_cast<size_t>(GpuKind::kKernel)];
    const std::vector<Interval>& comm = merged[static_cast<size_t>(GpuKind::kComm)];
    copy = union_of(std::move(copy));
    summary.busy_ns += total_length(union_of(std::move(all)));
    summary.compute_ns += total_length(compute);
    summary.comm_ns += total_length(comm);
    summary.copy_ns += total_length(copy);
    summary.copy_under_compute_ns += total_length(intersect(copy, compute));
    summary.comm_under_compute_ns += total_length(intersect(comm, compute));
    // The single op that compute hides least, as evidence.
    for (SliceId id : ops) {
      const auto kind = static_cast<GpuKind>(context.kind[id]);
      if (kind != GpuKind::kComm && !is_copy(kind)) continue;
      if (context.device_of[slices.track[id]] != device) continue;
      const int64_t exposed = finish(id) - begin(id) - covered(compute, begin(id), finish(id));
      int64_t& worst = kind == GpuKind::kComm ? worst_comm : worst_copy;
      SliceId& evidence =
          kind == GpuKind::kComm ? summary.longest_exposed_comm : summary.longest_exposed_copy;
      if (exposed > worst) worst = exposed, evidence = id;
    }
  }
  // Idle time per stream, split by cause.
  struct HostGap {
    Interval gap;
    TrackId thread;
    size_t stream;
  };
  std::vector<HostGap> host_gaps;
  for (TrackId stream = 0; stream < by_stream.size(); ++stream) {
    std::vector<SliceId>& ids = by_stream[stream];
    if (ids.empty()) continue;
    // One lane's ids are in start order already; overlap lanes interleave.
    auto by_start = [&](SliceId left, SliceId right) { return begin(left) < begin(right); };
    if (!std::is_sorted(ids.begin(), ids.end(), by_start)) {
      std::stable_sort(ids.begin(), ids.end(), by_start);
    }
    StreamIdle idle;
    idle.stream = stream;
    idle.ops = ids.size();
    std::map<TrackId, uint64_t> launchers;
    int64_t covered_until = finish(ids.front());
    SliceId before = ids.front();
    int64_t busy = 0, busy_start = begin(ids.front());
    for (size_t at = 0; at < ids.size(); ++at) {
      const SliceId id = ids[at];
      const SliceId launch = context.launch_of[id];
      if (launch != kNoSlice) ++launchers[model.tracks[slices.track[launch]].main];
      const int64_t start = begin(id);
      if (at > 0 && start > covered_until) {
        busy += covered_until - busy_start;
        busy_start = start;
        const int64_t gap = start - covered_until;
        const TrackId thread =
            launch != kNoSlice ? model.tracks[slices.track[launch]].main : kNoTrack;
        const bool late = launch != kNoSlice && slices.start_ns[launch] >= covered_until;
        if (late && 2 * covered(context.sync_of_thread[thread], covered_until, start) >= gap) {
          idle.sync_wait_ns += gap;
        } else if (late && 2 * covered(context.collective_of_process[context.device_of[thread]],
                                       covered_until, start) >=
                               gap) {
          idle.collective_wait_ns += gap;
        } else if (late) {
          idle.host_wait_ns += gap;
          ++idle.host_wait_gaps;
          if (gap > idle.longest_host_wait.second - idle.longest_host_wait.first) {
            idle.longest_host_wait = {covered_until, start};
            idle.longest_before = before;
            idle.longest_after = id;
          }
          host_gaps.push_back({{covered_until, start},
                               model.tracks[slices.track[launch]].main,
                               summary.streams.size()});
        } else if (launch != kNoSlice && gap <= context.kernel_wait_ns) {
          idle.kernel_wait_ns += gap;
        } else {
          idle.other_ns += gap;
        }
      }
      if (finish(id) >= covered_until) {
        covered_until = finish(id);
        before = id;
      }
    }
    busy += covered_until - busy_start;
    idle.busy_ns = busy;
    queue_length(context, ids, idle);
    idle.span_ns = covered_until - begin(ids.front());
    uint64_t most = 0;
    for (const auto& [thread, count] : launchers) {
      if (count > most) most = count, idle.feeder = thread;
    }
    summary.streams.push_back(std::move(idle));
  }
  // What the launching thread did during the longest host-wait gaps of each stream. Gaps were
  // gathered stream by stream: order each stream's run only as far as its first kZoneGaps.
  auto longer = [](const HostGap& left, const HostGap& right) {
    const int64_t left_ns = left.gap.second - left.gap.first;
    const int64_t right_ns = right.gap.second - right.gap.first;
    if (left_ns != right_ns) return left_ns > right_ns;
    return left.gap.first < right.gap.first;
  };
  std::vector<std::map<std::string, int64_t>> zones(summary.streams.size());
  for (size_t begin = 0; begin < host_gaps.size();) {
    size_t end = begin;
    while (end < host_gaps.size() && host_gaps[end].stream == host_gaps[begin].stream) ++end;
    const auto first = host_gaps.begin() + static_cast<std::ptrdiff_t>(begin);
    const auto stop = first + static_cast<std::ptrdiff_t>(std::min(end - begin, kZoneGaps));
    std::partial_sort(first, stop, host_gaps.begin() + static_cast<std::ptrdiff_t>(end), longer);
    for (auto it = first; it != stop; ++it) {
      const HostGap& gap = *it;
      for (const auto& [name, ns] :
           innermost_zones(model, context.index, gap.thread, gap.gap.first, gap.gap.second)) {
        zones[gap.stream][name] += ns;
      }
      summary.streams[gap.stream].host_zones_ns += gap.gap.second - gap.gap.first;
    }
    begin = end;
  }
  for (size_t stream = 0; stream < summary.streams.size(); ++stream) {
    auto& out = summary.streams[stream].host_zones;
    out.assign(zones[stream].begin(), zones[stream].end());
    std::stable_sort(out.begin(), out.end(), [](const auto& left, const auto& right) {
      return left.second > right.second;
    });
  }
  std::stable_sort(summary.streams.begin(), summary.streams.end(),
                   [](const StreamIdle& left, const StreamIdle& right) {
                     return left.host_wait_ns > right.host_wait_ns;
                   });
  // Launch statistics through the ac2g flows (or correlation ids), one per launch call: a CUDA
  // graph's replay is one launch, its GPU time from its first op's start to its last op's end.
  LaunchStats& stats = summary.launches;
  std::vector<std::pair<SliceId, SliceId>> launched;  // (launch, op)
  for (SliceId id : ops) {
    const SliceId launch = context.launch_of[id];
    if (launch != kNoSlice) launched.emplace_back(launch, id);
  }
  if (!std::is_sorted(launched.begin(), launched.end())) {
    std::sort(launched.begin(), launched.end());
  }
  std::vector<int64_t> cpu, gpu, delay;
  int64_t worst_delay = INT64_MIN, worst_cpu = INT64_MIN;
  std::vector<Interval> graph_time;
  std::map<std::string, int64_t> graph_ranges;
  for (size_t at = 0; at < launched.size();) {
    const SliceId launch = launched[at].first;
    SliceId first_op = launched[at].second;
    int64_t gpu_start = INT64_MAX, gpu_end = INT64_MIN;
    size_t end = at;
    for (; end < launched.size() && launched[end].first == launch; ++end) {
      const SliceId id = launched[end].second;
      if (slices.start_ns[id] < gpu_start) gpu_start = slices.start_ns[id], first_op = id;
      gpu_end = std::max(gpu_end, slices.end_ns[id]);
    }
    if (context.graph_launch[slices.name[launch]] != 0) {
      ++summary.graph_launches;
      summary.graph_ops += end - at;
      int64_t replay_ns = 0;
      for (size_t op = at; op < end; ++op) {
        graph_time.emplace_back(begin(launched[op].second), finish(launched[op].second));
        replay_ns += finish(launched[op].second) - begin(launched[op].second);
      }
      // The range that issued the replay: the launch's nearest enclosing slice that is not a
      // runtime call (a record_function range, the op), else the launch itself.
      SliceId range = slices.parent[launch];
      while (range != kNoSlice && is_runtime_call_name(model.slice_name(range))) {
        range = slices.parent[range];
      }
      graph_ranges[std::string(model.slice_name(range == kNoSlice ? launch : range))] += replay_ns;
    }
    at = end;
    const int64_t cpu_ns = slices.end_ns[launch] - slices.start_ns[launch];
    const int64_t gpu_ns = gpu_end - gpu_start;
    const int64_t delay_ns = gpu_start - slices.end_ns[launch];
    cpu.push_back(cpu_ns);
    gpu.push_back(gpu_ns);
    delay.push_back(delay_ns);
    stats.short_ops += gpu_ns < cpu_ns ? 1 : 0;
    if (delay_ns > worst_delay) {
      worst_delay = delay_ns;
      stats.worst_delay_launch = launch;
      stats.worst_delay_op = first_op;
    }
    if (cpu_ns > worst_cpu) worst_cpu = cpu_ns, stats.worst_cpu_launch = launch;
  }
  summary.graph_ns = total_length(union_of(std::move(graph_time)));
  summary.graph_ranges.assign(graph_ranges.begin(), graph_ranges.end());
  std::stable_sort(summary.graph_ranges.begin(), summary.graph_ranges.end(),
                   [](const auto& left, const auto& right) { return left.second > right.second; });
  stats.launches = cpu.size();
  if (stats.launches > 0) {
    stats.cpu_max = *std::max_element(cpu.begin(), cpu.end());
    stats.gpu_max = *std::max_element(gpu.begin(), gpu.end());
    stats.delay_max = *std::max_element(delay.begin(), delay.end());
    stats.cpu_p50 = percentile(cpu, 50);
    stats.gpu_p50 = percentile(gpu, 50);
    stats.delay_p50 = percentile(delay, 50);
    const int64_t cpu_cut = std::max(kOutlierFloorNs, kOutlierFactor * stats.cpu_p50);
    const int64_t delay_cut = std::max(kOutlierFloorNs, kOutlierFactor * stats.delay_p50);
    for (int64_t value : cpu) stats.cpu_outliers += value > cpu_cut ? 1 : 0;
    for (int64_t value : delay) stats.delay_outliers += value > delay_cut ? 1 : 0;
    stats.cpu_p95 = percentile(cpu, 95);
    stats.gpu_p95 = percentile(gpu, 95);
    stats.delay_p95 = percentile(delay, 95);
  }
  return summary;
}

}  // namespace

std::string_view gpu_kind_name(GpuKind kind) {
  switch (kind) {
    case GpuKind::kKernel:
      return "kernels";
    case GpuKind::kComm:
      return "communication";
    case GpuKind::kMemcpyHtoD:
      return "memcpy HtoD";
    case GpuKind::kMemcpyDtoH:
      return "memcpy DtoH";
    case GpuKind::kMemcpyDtoD:
      return "memcpy DtoD";
    case GpuKind::kMemcpyOther:
      return "memcpy other";
    case GpuKind::kMemset:
      return "memset";
    case GpuKind::kCount:
      break;
  }
  return "other";
}

namespace {
// The API call a runtime or driver function names (StreamSynchronize of cudaStreamSynchronize,
// hipStreamSynchronize, cuStreamSynchronize); empty for any other name.
std::string_view runtime_api_call(std::string_view name) {
  for (std::string_view prefix : {"cuda", "hip", "cu"}) {
    if (name.size() > prefix.size() && name.substr(0, prefix.size()) == prefix &&
        std::isupper(static_cast<unsigned char>(name[prefix.size()])) != 0) {
      return name.substr(prefix.size());
    }
  }
  return {};
}
}  // namespace

bool is_runtime_call_name(std::string_view name) { return !runtime_api_call(name).empty(); }

bool is_host_synchronisation(std::string_view name) {
  if (name == "aten::_local_scalar_dense" || name == "aten::item") return true;
  const std::string_view call = runtime_api_call(name);
  return call == "StreamSynchronize" || call == "DeviceSynchronize" || call == "EventSynchronize" ||
         call == "CtxSynchronize";
}

bool is_graph_launch(std::string_view name) {
  return runtime_api_call(name).substr(0, 11) == "GraphLaunch";
}

std::vector<uint8_t> category_roles(const Model& model) {
  std::vector<uint8_t> roles(model.strings.size(), kNotGpuOp);
  for (StringId id = 0; id < model.strings.size(); ++id) {
    std::string_view text = model.strings.get(id);
    while (!text.empty() && roles[id] == kNotGpuOp) {
      const size_t comma = text.find(',');
      const std::string_view part = text.substr(0, comma);
      if (part == "kernel" || part == "Kernel") roles[id] = kGpuKernelRole;
      if (part == "gpu_memcpy" || part == "Memcpy") roles[id] = kGpuMemcpyRole;
      if (part == "gpu_memset" || part == "Memset") roles[id] = kGpuMemsetRole;
      text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    }
  }
  return roles;
}

GpuOps find_gpu_ops(const Model& model) {
  GpuOps found;
  const SliceTable& slices = model.slices;
  const std::vector<uint8_t> roles = category_roles(model);
  // Per track: a stream's lane where work runs (not its annotation labels).
  std::vector<uint8_t> work_track(model.tracks.size(), 0);
  bool any = false;
  for (TrackId track = 0; track < model.tracks.size(); ++track) {
    const Track& info = model.tracks[track];
    work_track[track] = info.kind == TrackKind::kGpuStream && info.lane != Lane::kAnnotation;
    any |= work_track[track] != 0;
  }
  if (!any) return found;
  found.kind.assign(slices.size(), kNotGpu);
  for (SliceId id = 0; id < slices.size(); ++id) {
    if (work_track[slices.track[id]] == 0) continue;
    const uint8_t role = roles[slices.category[id]];
    if (role == kNotGpu) continue;
    found.kind[id] = static_cast<uint8_t>(kind_from(role, model.slice_name(id)));
    found.ops.push_back(id);
  }
  if (found.ops.empty()) return found;
  // The launch call of each op: the ac2g flow's source on a CPU thread.
  found.launch_of.assign(slices.size(), kNoSlice);
  for (size_t row = 0; row < model.flows.size(); ++row) {
    const SliceId from = model.flows.from_slice[row], to = model.flows.to_slice[row];
    if (from == kNoSlice || to == kNoSlice || found.kind[to] == kNotGpu) continue;
    if (model.tracks[slices.track[from]].kind != TrackKind::kThread) continue;
    found.launch_of[to] = from;
  }
  return found;
}

GpuAnalysis compute_gpu(const Model& model, const Warmup& warmup, int64_t kernel_wait_ns,
                        const TrackIndex* shared_index, const GpuOps* shared_ops, TaskPool* pool) {
  GpuAnalysis result;
  const SliceTable& slices = model.slices;
  std::optional<GpuOps> own_ops;
  const GpuOps& found = shared_ops != nullptr ? *shared_ops : own_ops.emplace(find_gpu_ops(model));
  if (found.ops.empty()) return result;
  const std::vector<uint8_t>& kind = found.kind;
  const std::vector<SliceId>& ops = found.ops;
  const std::vector<SliceId>& launch_of = found.launch_of;
  result.present = true;
  // Devices: (file, pid) of the GPU tracks, numbered once.
  std::vector<uint32_t> device_of(model.tracks.size(), 0);
  std::map<std::pair<uint32_t, std::string>, uint32_t> devices;
  for (TrackId track = 0; track < model.tracks.size(); ++track) {
    const Track& info = model.tracks[track];
    device_of[track] =
        devices.try_emplace({info.file_index, info.pid}, static_cast<uint32_t>(devices.size()))
            .first->second;
  }
  std::optional<TrackIndex> own_index;
  const TrackIndex& index = shared_index != nullptr ? *shared_index : own_index.emplace(model);
  std::vector<std::vector<Interval>> sync_of_thread(model.tracks.size());
  std::vector<std::vector<Interval>> collective_of_process(devices.size());
  // Per name: 1 a synchronisation, 2 a collective (names are few; slices are many).
  std::vector<uint8_t> wait_role(model.strings.size(), 0);
  for (StringId name = 0; name < model.strings.size(); ++name) {
    const std::string_view text = model.strings.get(name);
    wait_role[name] = is_host_synchronisation(text) ? 1 : (is_communication_call(text) ? 2 : 0);
  }
  for (SliceId id = 0; id < slices.size(); ++id) {
    const uint8_t role = wait_role[slices.name[id]];
    if (role == 0) continue;
    const Track& track = model.tracks[slices.track[id]];
    if (track.kind != TrackKind::kThread) continue;
    if (role == 1) {
      sync_of_thread[track.main].emplace_back(slices.start_ns[id], slices.end_ns[id]);
    } else {
      collective_of_process[device_of[slices.track[id]]].emplace_back(slices.start_ns[id],
                                                                      slices.end_ns[id]);
    }
  }
  for (auto& intervals : sync_of_thread) intervals = union_of(std::move(intervals));
  for (auto& intervals : collective_of_process) intervals = union_of(std::move(intervals));
  std::vector<uint8_t> graph_launch(model.strings.size(), 0);
  for (StringId name = 0; name < model.strings.size(); ++name) {
    graph_launch[name] = is_graph_launch(model.strings.get(name));
  }
  const Context context{model,          index,          kind,
                        launch_of,      device_of,      devices.size(),
                        kernel_wait_ns, sync_of_thread, collective_of_process,
                        graph_launch};
  const Interval everything{INT64_MIN, INT64_MAX};
  // Per ProfilerStep: an op belongs to the step in which its launch call (else the op) began.
  std::vector<uint8_t> in_warmup_step(slices.size(), 0);
  std::vector<std::vector<SliceId>> per_step(warmup.steps.size());
  if (!warmup.steps.empty()) {
    for (SliceId id : ops) {
      const SliceId launch = launch_of[id];
      const int64_t at = launch != kNoSlice ? slices.start_ns[launch] : slices.start_ns[id];
      auto after = std::upper_bound(
          warmup.steps.begin(), warmup.steps.end(), at,
          [&](int64_t value, SliceId step) { return value < slices.start_ns[step]; });
      if (after == warmup.steps.begin()) continue;
      const size_t step = static_cast<size_t>(after - warmup.steps.begin()) - 1;
      if (at < slices.end_ns[warmup.steps[step]]) per_step[step].push_back(id);
    }
    const bool first_is_warmup = warmup.steps.size() >= 2;
    if (first_is_warmup) {
      for (SliceId id : per_step.front()) in_warmup_step[id] = 1;
    }
    result.steps.resize(warmup.steps.size());
    for (size_t step = 0; step < warmup.steps.size(); ++step) {
      result.steps[step].step = warmup.steps[step];
      result.steps[step].warmup = step == 0 && first_is_warmup;
    }
  }
  // One steady window for every statistic: it opens when the last GPU op of the leading
  // warm-up ends — launched inside (or itself inside) a warm-up range that began in the trace's
  // first half. Leaving warm-up ops out one by one kept the work that ran beside them (a copy
  // under a cut-away kernel), so each kind was measured over a different span.
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (SliceId id : ops) {
    first = std::min(first, slices.start_ns[id]);
    last = std::max(last, slices.end_ns[id]);
  }
  const int64_t middle = model.start_ns + (model.end_ns - model.start_ns) / 2;
  std::vector<Interval> leading;
  for (const Warmup::Item& item : warmup.items) {
    // The profiler's own span covers the whole trace: it launches nothing.
    if (item.reason == Warmup::Reason::kProfiler) continue;
    if (slices.start_ns[item.slice] <= middle) {
      leading.emplace_back(slices.start_ns[item.slice], slices.end_ns[item.slice]);
    }
  }
  leading = union_of(std::move(leading));
  auto in_leading = [&](SliceId id) {
    const SliceId launch = launch_of[id];
    const int64_t at = launch != kNoSlice ? slices.start_ns[launch] : slices.start_ns[id];
    return covered(leading, at, at + 1) > 0;
  };
  int64_t opens = first;
  // Warm-up ops: marked themselves, launched by a marked call (a graph's ops beyond the one its
  // flow reaches), or launched in the first step.
  auto warm = [&](SliceId id) {
    if (in_warmup_step[id] != 0) return true;
    if (warmup.slice.empty()) return false;
    return warmup.slice[id] != 0 || (launch_of[id] != kNoSlice && warmup.slice[launch_of[id]] != 0);
  };
  for (SliceId id : ops) {
    if (warm(id) && in_leading(id)) opens = std::max(opens, slices.end_ns[id]);
  }
  result.window = {opens, last};
  std::vector<SliceId> steady;
  for (SliceId id : ops) {
    if (slices.end_ns[id] <= opens) {
      ++result.ops_before_window;
      continue;
    }
    result.warmup_ops_inside += warm(id) ? 1 : 0;
    steady.push_back(id);
  }
  // The summaries are independent of one another: every op's, the steady window's, and the
  // steps' in runs of kStepsPerTask, each written into its own place.
  std::vector<std::function<void()>> tasks;
  tasks.emplace_back([&] { result.all = summarize(context, ops, everything); });
  if (opens != first) {
    tasks.emplace_back([&] { result.steady = summarize(context, steady, result.window); });
  }
  for (size_t begin = 0; begin < result.steps.size(); begin += kStepsPerTask) {
    tasks.emplace_back([&, begin] {
      const size_t end = std::min(result.steps.size(), begin + kStepsPerTask);
      for (size_t step = begin; step < end; ++step) {
        result.steps[step].gpu = summarize(context, per_step[step], everything);
      }
    });
  }
  if (pool != nullptr) {
    pool->run(std::move(tasks));
  } else {
    for (std::function<void()>& task : tasks) task();
  }
  if (opens == first) result.steady = result.all;
  return result;
}

}  // namespace loupe::trace
