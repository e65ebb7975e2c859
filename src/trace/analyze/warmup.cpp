// Warm-up: one-off work that is not the workload (analyze.hpp, Warmup).
#include <algorithm>
#include <optional>

#include "trace/analyze/analyze.hpp"

namespace loupe::trace {
namespace {

// A first call counts as initialisation when it is this many times the median of the later calls
// of the same name, and at least kFirstCallFloorNs long (a 3 us op taking 40 us is noise).
constexpr int64_t kFirstCallFactor = 10;
constexpr int64_t kFirstCallFloorNs = 1'000'000;
constexpr uint64_t kFirstCallMinLater = 2;

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

std::string_view warmup_reason_name(Warmup::Reason reason) {
  switch (reason) {
    case Warmup::Reason::kProfiler:
      return "the profiler's own span";
    case Warmup::Reason::kModuleLoading:
      return "module loading";
    case Warmup::Reason::kFirstCall:
      return "first call";
    case Warmup::Reason::kFirstStep:
      return "first ProfilerStep";
  }
  return "warm-up";
}

Warmup classify_warmup(const Model& model, const TrackIndex* shared_index) {
  const SliceTable& slices = model.slices;
  Warmup result;
  // Per name: the earliest slice on a CPU thread and how many there are. Names are few, so
  // columns indexed by string id keep this one pass over the slices without hashing.
  const size_t names = model.strings.size();
  std::vector<SliceId> first(names, kNoSlice);
  std::vector<uint64_t> count(names, 0);
  const StringId trace_category = [&] {
    for (StringId id = 0; id < names; ++id) {
      if (model.strings.get(id) == "Trace") return id;
    }
    return StringId{0};
  }();
  std::vector<uint8_t> thread(model.tracks.size(), 0);  // per track: a CPU thread's lane
  for (TrackId track = 0; track < model.tracks.size(); ++track) {
    thread[track] = model.tracks[track].kind == TrackKind::kThread;
  }
  for (SliceId id = 0; id < slices.size(); ++id) {
    if (thread[slices.track[id]] == 0) continue;
    const StringId name = slices.name[id];
    ++count[name];
    if (first[name] == kNoSlice || slices.start_ns[id] < slices.start_ns[first[name]]) {
      first[name] = id;
    }
    if (trace_category != 0 && slices.category[id] == trace_category) {
      result.items.push_back({id, Warmup::Reason::kProfiler});
    }
  }
  // Per name, what it is: 0 workload, 1 profiler, 2 module loading, 3 a first-call candidate,
  // 4 a ProfilerStep.
  std::vector<uint8_t> role(names, 0);
  std::vector<uint32_t> candidate(names, UINT32_MAX);
  std::vector<std::vector<int64_t>> later;  // per candidate: the later calls' durations
  // Per candidate: 1 when a later call of the name begins inside the first on its thread. Such a
  // first call is the outer call of a nested name (PyTorch's `_call_impl` around every submodule's,
  // a recursive `forward`): it holds the later calls rather than repeating them, so its length
  // says nothing about initialisation (it would cut the whole forward pass as warm-up).
  std::vector<uint8_t> encloses;
  for (StringId name = 1; name < names; ++name) {
    if (first[name] == kNoSlice) continue;
    const std::string_view text = model.strings.get(name);
    if (starts_with(text, "PyTorch Profiler")) {
      role[name] = 1;
    } else if (text == "Runtime Triggered Module Loading" || text == "Lazy Function Loading") {
      role[name] = 2;
    } else if (starts_with(text, "ProfilerStep#")) {
      role[name] = 4;
    } else if (count[name] >= kFirstCallMinLater + 1 &&
               slices.end_ns[first[name]] - slices.start_ns[first[name]] >= kFirstCallFloorNs) {
      role[name] = 3;
      candidate[name] = static_cast<uint32_t>(later.size());
      later.emplace_back();
      encloses.push_back(0);
    }
  }
  for (SliceId id = 0; id < slices.size(); ++id) {
    if (thread[slices.track[id]] == 0) continue;
    const StringId name = slices.name[id];
    switch (role[name]) {
      case 1:
        if (trace_category == 0 || slices.category[id] != trace_category) {
          result.items.push_back({id, Warmup::Reason::kProfiler});
        }
        break;
      case 2:
        result.items.push_back({id, Warmup::Reason::kModuleLoading});
        break;
      case 3:
        if (id != first[name]) {
          later[candidate[name]].push_back(slices.end_ns[id] - slices.start_ns[id]);
          const SliceId head = first[name];
          if (model.tracks[slices.track[id]].main == model.tracks[slices.track[head]].main &&
              slices.start_ns[id] < slices.end_ns[head]) {
            encloses[candidate[name]] = 1;
          }
        }
        break;
      case 4:
        result.steps.push_back(id);
        break;
      default:
        break;
    }
  }
  for (StringId name = 1; name < names; ++name) {
    if (role[name] != 3 || encloses[candidate[name]] != 0) continue;
    std::vector<int64_t>& durations = later[candidate[name]];
    const auto middle = durations.begin() + static_cast<std::ptrdiff_t>(durations.size() / 2);
    std::nth_element(durations.begin(), middle, durations.end());
    const int64_t median = *middle;
    const SliceId head = first[name];
    if (slices.end_ns[head] - slices.start_ns[head] >=
        kFirstCallFactor * std::max<int64_t>(median, 1)) {
      result.items.push_back({head, Warmup::Reason::kFirstCall, median, durations.size()});
    }
  }
  // ProfilerStep#N ranges: the first is warm-up (allocator, autotuning, lazy initialisation).
  std::stable_sort(result.steps.begin(), result.steps.end(), [&](SliceId left, SliceId right) {
    return slices.start_ns[left] < slices.start_ns[right];
  });
  if (result.steps.size() >= 2) {
    result.items.push_back({result.steps.front(), Warmup::Reason::kFirstStep});
  }
  // Mark each item and everything inside it on its thread (every lane), then the GPU work the
  // marked slices launched.
  if (result.items.empty()) return result;
  result.slice.assign(slices.size(), 0);
  std::optional<TrackIndex> own_index;
  const TrackIndex& index = shared_index != nullptr ? *shared_index : own_index.emplace(model);
  for (const Warmup::Item& item : result.items) {
    const TrackId main = model.tracks[slices.track[item.slice]].main;
    const int64_t start = slices.start_ns[item.slice], end = slices.end_ns[item.slice];
    for (TrackId track = 0; track < model.tracks.size(); ++track) {
      if (model.tracks[track].main != main) continue;
      const auto& ids = index.slices(track);
      auto it = std::lower_bound(ids.begin(), ids.end(), start, [&](SliceId id, int64_t value) {
        return slices.start_ns[id] < value;
      });
      for (; it != ids.end() && slices.start_ns[*it] < end; ++it) {
        if (slices.end_ns[*it] <= end) result.slice[*it] = 1;
      }
    }
    result.slice[item.slice] = 1;
  }
  for (size_t row = 0; row < model.flows.size(); ++row) {
    const SliceId from = model.flows.from_slice[row], to = model.flows.to_slice[row];
    if (from != kNoSlice && to != kNoSlice && result.slice[from] != 0) result.slice[to] = 1;
  }
  std::stable_sort(result.items.begin(), result.items.end(),
                   [&](const Warmup::Item& left, const Warmup::Item& right) {
                     return slices.end_ns[left.slice] - slices.start_ns[left.slice] >
                            slices.end_ns[right.slice] - slices.start_ns[right.slice];
                   });
  return result;
}

}  // namespace loupe::trace
