// GPU analyses of Kineto-shaped traces (analyze.hpp, GpuAnalysis; docs/pytorch-traces.md).
#include <algorithm>
#include <cctype>
#include <optional>

#include "trace/analyze/analyze.hpp"

namespace loupe::trace {
namespace {

constexpr uint8_t kNotGpu = 0xFF;
// Host-wait gaps whose launching thread's zones are looked up, longest first: enough to name the
// host work, bounded so that 100 k tiny gaps cost nothing.
constexpr size_t kZoneGaps = 32;
constexpr int64_t kOutlierFloorNs = 100'000;
constexpr int64_t kOutlierFactor = 10;

bool iequals_prefix(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t index = 0; index < prefix.size(); ++index) {
    if (std::tolower(static_cast<unsigned char>(text[index])) != prefix[index]) return false;
  }
  return true;
}

// Per category id: 0 kernel, 1 memcpy, 2 memset, kNotGpu otherwise. A category field may list
// several, comma-separated.
std::vector<uint8_t> category_roles(const Model& model) {
  std::vector<uint8_t> roles(model.strings.size(), kNotGpu);
  for (StringId id = 0; id < model.strings.size(); ++id) {
    std::string_view text = model.strings.get(id);
    while (!text.empty() && roles[id] == kNotGpu) {
      const size_t comma = text.find(',');
      const std::string_view part = text.substr(0, comma);
      if (part == "kernel" || part == "Kernel") roles[id] = 0;
      if (part == "gpu_memcpy" || part == "Memcpy") roles[id] = 1;
      if (part == "gpu_memset" || part == "Memset") roles[id] = 2;
      text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    }
  }
  return roles;
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
};

// `ops`: GPU op ids, ascending (so by track, then start).
GpuSummary summarize(const Context& context, const std::vector<SliceId>& ops) {
  const Model& model = context.model;
  const SliceTable& slices = model.slices;
  GpuSummary summary;
  if (ops.empty()) return summary;
  int64_t first = INT64_MAX, last = INT64_MIN;
  // Per device (file, pid): intervals per kind; per stream (its main lane): the ops.
  std::vector<std::array<std::vector<Interval>, static_cast<size_t>(GpuKind::kCount)>> devices(
      context.devices);
  std::vector<std::vector<SliceId>> by_stream(model.tracks.size());
  for (SliceId id : ops) {
    const auto kind = static_cast<GpuKind>(context.kind[id]);
    const int64_t start = slices.start_ns[id], end = slices.end_ns[id];
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
      const int64_t exposed = slices.end_ns[id] - slices.start_ns[id] -
                              covered(compute, slices.start_ns[id], slices.end_ns[id]);
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
    auto by_start = [&](SliceId left, SliceId right) {
      return slices.start_ns[left] < slices.start_ns[right];
    };
    if (!std::is_sorted(ids.begin(), ids.end(), by_start)) {
      std::stable_sort(ids.begin(), ids.end(), by_start);
    }
    StreamIdle idle;
    idle.stream = stream;
    idle.ops = ids.size();
    std::map<TrackId, uint64_t> launchers;
    int64_t covered_until = slices.end_ns[ids.front()];
    SliceId before = ids.front();
    int64_t busy = 0, busy_start = slices.start_ns[ids.front()];
    for (size_t at = 0; at < ids.size(); ++at) {
      const SliceId id = ids[at];
      const SliceId launch = context.launch_of[id];
      if (launch != kNoSlice) ++launchers[model.tracks[slices.track[launch]].main];
      const int64_t start = slices.start_ns[id];
      if (at > 0 && start > covered_until) {
        busy += covered_until - busy_start;
        busy_start = start;
        const int64_t gap = start - covered_until;
        if (launch != kNoSlice && slices.start_ns[launch] >= covered_until) {
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
      if (slices.end_ns[id] >= covered_until) {
        covered_until = slices.end_ns[id];
        before = id;
      }
    }
    busy += covered_until - busy_start;
    idle.busy_ns = busy;
    idle.span_ns = covered_until - slices.start_ns[ids.front()];
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
  // Launch statistics through the ac2g flows.
  LaunchStats& stats = summary.launches;
  std::vector<int64_t> cpu, gpu, delay;
  int64_t worst_delay = INT64_MIN, worst_cpu = INT64_MIN;
  for (SliceId id : ops) {
    const SliceId launch = context.launch_of[id];
    if (launch == kNoSlice) continue;
    const int64_t cpu_ns = slices.end_ns[launch] - slices.start_ns[launch];
    const int64_t gpu_ns = slices.end_ns[id] - slices.start_ns[id];
    const int64_t delay_ns = slices.start_ns[id] - slices.end_ns[launch];
    cpu.push_back(cpu_ns);
    gpu.push_back(gpu_ns);
    delay.push_back(delay_ns);
    stats.short_ops += gpu_ns < cpu_ns ? 1 : 0;
    if (delay_ns > worst_delay) {
      worst_delay = delay_ns;
      stats.worst_delay_launch = launch;
      stats.worst_delay_op = id;
    }
    if (cpu_ns > worst_cpu) worst_cpu = cpu_ns, stats.worst_cpu_launch = launch;
  }
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

GpuAnalysis compute_gpu(const Model& model, const Warmup& warmup, int64_t kernel_wait_ns,
                        const TrackIndex* shared_index) {
  GpuAnalysis result;
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
  if (!any) return result;
  std::vector<uint8_t> kind(slices.size(), kNotGpu);
  std::vector<SliceId> ops;
  for (SliceId id = 0; id < slices.size(); ++id) {
    if (work_track[slices.track[id]] == 0) continue;
    const uint8_t role = roles[slices.category[id]];
    if (role == kNotGpu) continue;
    kind[id] = static_cast<uint8_t>(kind_from(role, model.slice_name(id)));
    ops.push_back(id);
  }
  if (ops.empty()) return result;
  result.present = true;
  // The launch call of each op: the ac2g flow's source on a CPU thread.
  std::vector<SliceId> launch_of(slices.size(), kNoSlice);
  for (size_t row = 0; row < model.flows.size(); ++row) {
    const SliceId from = model.flows.from_slice[row], to = model.flows.to_slice[row];
    if (from == kNoSlice || to == kNoSlice || kind[to] == kNotGpu) continue;
    if (model.tracks[slices.track[from]].kind != TrackKind::kThread) continue;
    launch_of[to] = from;
  }
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
  const Context context{model, index, kind, launch_of, device_of, devices.size(), kernel_wait_ns};
  result.all = summarize(context, ops);
  // Per ProfilerStep: an op belongs to the step in which its launch call (else the op) began.
  std::vector<uint8_t> in_warmup_step(slices.size(), 0);
  if (!warmup.steps.empty()) {
    std::vector<std::vector<SliceId>> per_step(warmup.steps.size());
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
    for (size_t step = 0; step < warmup.steps.size(); ++step) {
      result.steps.push_back(
          {warmup.steps[step], step == 0 && first_is_warmup, summarize(context, per_step[step])});
    }
  }
  std::vector<SliceId> steady;
  for (SliceId id : ops) {
    const bool marked = !warmup.slice.empty() && warmup.slice[id] != 0;
    if (!marked && in_warmup_step[id] == 0) steady.push_back(id);
  }
  result.steady = steady.size() == ops.size() ? result.all : summarize(context, steady);
  return result;
}

}  // namespace loupe::trace
