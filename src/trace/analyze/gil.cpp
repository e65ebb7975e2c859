// The interpreter lock of Python programs, inferred from the timeline (analyze.hpp, GilContention).
//
// A thread waiting for the GIL runs no Python, so it begins and ends no traced range. Stalls alone
// prove nothing (a thread blocked in queue.get stalls too, and a pure-Python loop shows no range
// either), so the inference rests on exclusion: a holder's long calls of one kind (moe_dispatch)
// and a waiter whose own innermost work runs between them but never during any of them, although,
// were the two independent, a good part of it would have. A call that releases the lock
// (ctypes.CDLL, most of torch) lets the other thread work meanwhile, and the statistic sees it.
#include <algorithm>
#include <cctype>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "trace/analyze/analyze.hpp"

namespace loupe::trace {
namespace {

constexpr int64_t kMinStallNs = 200'000;
// A waiter resumes within this long after the holder's call returns (the interpreter hands the
// lock over at the holder's next release or switch-interval check).
constexpr int64_t kResumeWindowNs = 1'000'000;
constexpr int64_t kMinExpectedNs = 200'000;
constexpr double kExclusionRatio = 0.1;
// A waiter that went quiet this long before the holder's call began was not stopped by it.
constexpr int64_t kStoppedBeforeNs = 5'000;

struct Stall {
  int64_t start, end;
  SliceId zone;       // innermost slice open over the stall (any lane); kNoSlice at top level
  SliceId main_zone;  // innermost slice of the main lane (record_function ranges, ops)
};

struct PythonThread {
  TrackId main;
  std::vector<TrackId> lanes;
  std::vector<Stall> stalls;   // in time order
  std::vector<Interval> work;  // union of its innermost (leaf) slices
  int64_t first = INT64_MAX, last = INT64_MIN;
};

bool contains_python(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("python") != std::string::npos;
}

SliceId innermost(const Model& model, const TrackIndex& index, const std::vector<TrackId>& lanes,
                  int64_t ts) {
  SliceId best = kNoSlice;
  for (TrackId lane : lanes) {
    const SliceId id = index.innermost_at(lane, ts);
    if (id == kNoSlice) continue;
    if (best == kNoSlice || model.slices.start_ns[id] > model.slices.start_ns[best]) best = id;
  }
  return best;
}

// Threads that run C++ for the process and take no interpreter lock: the run loops and watchdogs
// of the process groups, and other threads PyTorch starts and names pt_*.
bool worker_thread_name(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (std::string_view word : {"gloo", "nccl", "watchdog", "watchdg", "processgroup"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  // pt_* as a name of its own ("pt_autograd_0", Kineto's "thread 721 (pt_gloo_runloop)"), not
  // inside a word ("script_runner").
  for (size_t at = lower.find("pt_"); at != std::string::npos; at = lower.find("pt_", at + 1)) {
    if (at == 0 || lower[at - 1] == '(' || lower[at - 1] == ' ') return true;
  }
  return false;
}

bool works_within(const std::vector<Interval>& work, int64_t start, int64_t end) {
  auto it = std::upper_bound(work.begin(), work.end(), Interval{start, INT64_MAX});
  if (it != work.begin()) --it;
  for (; it != work.end() && it->first < end; ++it) {
    if (std::min(it->second, end) > std::max(it->first, start)) return true;
  }
  return false;
}

}  // namespace

bool is_communication_call(std::string_view name) {
  for (std::string_view prefix :
       {"gloo:", "nccl:", "c10d::", "mpi:", "MPI_", "record_param_comms", "ProcessGroup"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

std::vector<GilContention> compute_gil(const Model& model, const TrackIndex* shared_index) {
  const SliceTable& slices = model.slices;
  StringId annotation = 0, python_function = 0;
  for (StringId id = 1; id < model.strings.size(); ++id) {
    if (model.strings.get(id) == "user_annotation") annotation = id;
    if (model.strings.get(id) == "python_function") python_function = id;
  }
  // Python threads: CPU threads with Python stacks or record_function ranges, or with ATen ops and
  // a Python name.
  std::map<TrackId, PythonThread> threads;
  for (TrackId track = 0; track < model.tracks.size(); ++track) {
    const Track& info = model.tracks[track];
    if (info.kind != TrackKind::kThread) continue;
    threads[info.main].main = info.main;
    threads[info.main].lanes.push_back(track);
  }
  // 1: Python ranges or frames; 2: ATen ops (a Python thread when its name says so). A thread
  // with runtime calls only is not one: Kineto may file a thread's CUDA runtime calls under
  // another thread id than its ops.
  std::vector<uint8_t> python(model.tracks.size(), 0);
  StringId cpu_op = 0;
  for (StringId id = 1; id < model.strings.size(); ++id) {
    if (model.strings.get(id) == "cpu_op") cpu_op = id;
  }
  if (annotation == 0 && python_function == 0 && cpu_op == 0) return {};
  std::vector<TrackId> main_of(model.tracks.size());
  for (TrackId track = 0; track < model.tracks.size(); ++track) {
    main_of[track] = model.tracks[track].main;
  }
  // A thread whose only record_function ranges are collectives (gloo's run loop: a
  // `gloo:all_reduce` range per call) runs C++ that takes no interpreter lock; it can hold a
  // result others wait for, but its own gaps are waits for the next call handed to it. Kineto
  // names such a thread after the process as well ("thread 1146 (python3)"), so its name alone
  // does not tell it apart.
  std::vector<uint8_t> collective_ranges(model.tracks.size(), 0);
  std::vector<uint8_t> other_ranges(model.tracks.size(), 0);
  for (SliceId id = 0; id < slices.size(); ++id) {
    const StringId category = slices.category[id];
    if (category == 0) continue;
    const TrackId main = main_of[slices.track[id]];
    uint8_t& mark = python[main];
    if (category == annotation || category == python_function) {
      mark = 1;
      if (category == annotation && is_communication_call(model.strings.get(slices.name[id]))) {
        collective_ranges[main] = 1;
      } else {
        other_ranges[main] = 1;
      }
    } else if (category == cpu_op && mark == 0) {
      mark = 2;
    }
  }
  // Which threads run Python frames (a with_stack trace records them on every Python thread).
  std::vector<uint8_t> python_frames(model.tracks.size(), 0);
  bool any_frames = false;
  if (python_function != 0) {
    for (SliceId id = 0; id < slices.size(); ++id) {
      if (slices.category[id] != python_function) continue;
      python_frames[main_of[slices.track[id]]] = 1;
      any_frames = true;
    }
  }
  // An interpreter lock needs an interpreter. A process shows one when a thread of it runs Python
  // frames, when it or one of its threads is named python (python3, python3.10), or when it has
  // torch.profiler's ProfilerStep ranges (stepped from Python). A C++ server's threads (an
  // inference service's schedulers) carry record_function ranges and ATen ops too, and stall
  // under each other's calls for reasons of their own: no interpreter lock is inferred there.
  std::set<std::pair<uint32_t, std::string>> python_processes;
  auto process_of = [&](TrackId track) {
    return std::make_pair(model.tracks[track].file_index, model.tracks[track].pid);
  };
  for (TrackId track = 0; track < model.tracks.size(); ++track) {
    const Track& info = model.tracks[track];
    if (info.kind != TrackKind::kThread) continue;
    if (python_frames[info.main] != 0 || contains_python(info.name) ||
        contains_python(info.process_name)) {
      python_processes.insert(process_of(track));
    }
  }
  std::vector<uint8_t> step_name(model.strings.size(), 0);
  bool any_step = false;
  for (StringId id = 1; id < model.strings.size(); ++id) {
    step_name[id] = model.strings.get(id).substr(0, 13) == "ProfilerStep#";
    any_step = any_step || step_name[id] != 0;
  }
  if (any_step) {
    for (SliceId id = 0; id < slices.size(); ++id) {
      if (step_name[slices.name[id]] != 0 &&
          model.tracks[slices.track[id]].kind == TrackKind::kThread) {
        python_processes.insert(process_of(slices.track[id]));
      }
    }
  }
  auto is_python = [&](TrackId main) {
    if (python_processes.count(process_of(main)) == 0) return false;
    return python[main] == 1 || (python[main] == 2 && contains_python(model.tracks[main].name));
  };
  size_t python_threads = 0;
  for (const auto& [main, thread] : threads) python_threads += is_python(main) ? 1 : 0;
  if (python_threads < 2) return {};
  std::vector<uint8_t> has_child(slices.size(), 0);
  for (SliceId id = 0; id < slices.size(); ++id) {
    if (slices.parent[id] != kNoSlice) has_child[slices.parent[id]] = 1;
  }
  std::optional<TrackIndex> own_index;
  const TrackIndex& index = shared_index != nullptr ? *shared_index : own_index.emplace(model);
  std::vector<PythonThread*> pythons;
  for (auto& [main, thread] : threads) {
    if (!is_python(main)) continue;
    // Every start and end of the thread's slices, ascending and distinct. A lane's starts come in
    // order already (TrackIndex), so only the ends need sorting: the lanes' runs of starts are
    // merged, then merged with the ends (half of one sort of both, on millions of slices).
    size_t count = 0;
    for (TrackId lane : thread.lanes) count += index.slices(lane).size();
    if (count == 0) continue;
    std::vector<int64_t> starts, ends;
    starts.reserve(count);
    ends.reserve(count);
    // The leaves likewise: each lane's run is merged into the runs before it when in order
    // (union_of sorts whatever is not).
    std::vector<Interval> leaves;
    leaves.reserve(count);
    bool leaves_sorted = true;
    for (TrackId lane : thread.lanes) {
      const size_t run = starts.size();
      const size_t leaf_run = leaves.size();
      for (SliceId id : index.slices(lane)) {
        starts.push_back(slices.start_ns[id]);
        ends.push_back(slices.end_ns[id]);
        if (has_child[id] == 0) leaves.emplace_back(slices.start_ns[id], slices.end_ns[id]);
      }
      std::inplace_merge(starts.begin(), starts.begin() + static_cast<std::ptrdiff_t>(run),
                         starts.end());
      const auto leaf_middle = leaves.begin() + static_cast<std::ptrdiff_t>(leaf_run);
      leaves_sorted = leaves_sorted && std::is_sorted(leaf_middle, leaves.end());
      if (leaves_sorted) std::inplace_merge(leaves.begin(), leaf_middle, leaves.end());
    }
    std::sort(ends.begin(), ends.end());
    thread.first = std::min(starts.front(), ends.front());
    thread.last = std::max(starts.back(), ends.back());
    thread.work = union_of(std::move(leaves));
    // Walk the merged bounds: each step between consecutive distinct ones is a stall when long.
    size_t next_start = 0, next_end = 0;
    int64_t previous = thread.first;
    while (next_start < starts.size() || next_end < ends.size()) {
      const bool take_start = next_end == ends.size() ||
                              (next_start < starts.size() && starts[next_start] <= ends[next_end]);
      const int64_t bound = take_start ? starts[next_start++] : ends[next_end++];
      if (bound == previous) continue;
      const int64_t start = previous, end = bound;
      previous = bound;
      if (end - start < kMinStallNs) continue;
      const int64_t middle = start + (end - start) / 2;
      thread.stalls.push_back({start, end, innermost(model, index, thread.lanes, middle),
                               index.innermost_at(main, middle)});
    }
    pythons.push_back(&thread);
  }
  std::vector<GilContention> result;
  if (pythons.size() < 2) return result;
  for (PythonThread* waiter : pythons) {
    if (collective_ranges[waiter->main] != 0 && other_ranges[waiter->main] == 0) continue;
    GilContention contention;
    contention.waiter = waiter->main;
    contention.waiter_span_ns = waiter->last - waiter->first;
    if (contention.waiter_span_ns <= 0) continue;
    const int64_t waiter_work = total_length(waiter->work);
    const Track& waiter_track = model.tracks[waiter->main];
    for (PythonThread* holder : pythons) {
      if (holder == waiter) continue;
      // An interpreter lock is one process's: a thread of another process (another rank's file,
      // or another pid in the same file) cannot hold it, however well its calls line up with the
      // waiter's stalls — ranks stall together at every collective.
      const Track& holder_track = model.tracks[holder->main];
      if (holder_track.file_index != waiter_track.file_index ||
          holder_track.pid != waiter_track.pid) {
        continue;
      }
      // The holder's calls, by kind: the main lane's innermost range (the record_function range
      // or op the call is made in), else the innermost slice of any lane.
      std::map<StringId, std::vector<const Stall*>> kinds;
      for (const Stall& stall : holder->stalls) {
        const SliceId key = stall.main_zone != kNoSlice ? stall.main_zone : stall.zone;
        if (key == kNoSlice) continue;
        if (stall.end <= waiter->first || stall.start >= waiter->last) continue;
        kinds[slices.name[key]].push_back(&stall);
      }
      for (const auto& [kind, calls] : kinds) {
        if (calls.size() < 2) continue;
        std::vector<Interval> covered;
        for (const Stall* call : calls) {
          covered.emplace_back(std::max(call->start, waiter->first),
                               std::min(call->end, waiter->last));
        }
        covered = union_of(std::move(covered));
        // The waiter must work between the calls (not merely before and after them, as a main
        // thread blocked in join() does): exclusion needs the chance to overlap.
        size_t interleaved = 0;
        for (size_t at = 0; at + 1 < covered.size(); ++at) {
          interleaved += works_within(waiter->work, covered[at].second, covered[at + 1].first);
        }
        if (interleaved < 2 || interleaved * 2 < covered.size() - 1) continue;
        GilContention::Holder result_holder;
        result_holder.thread = holder->main;
        result_holder.calls = calls.size();
        result_holder.calls_ns = total_length(covered);
        result_holder.work_inside_ns = total_length(intersect(waiter->work, covered));
        result_holder.work_expected_ns = static_cast<int64_t>(
            static_cast<double>(waiter_work) * static_cast<double>(result_holder.calls_ns) /
            static_cast<double>(contention.waiter_span_ns));
        if (result_holder.work_expected_ns < kMinExpectedNs ||
            static_cast<double>(result_holder.work_inside_ns) >
                kExclusionRatio * static_cast<double>(result_holder.work_expected_ns)) {
          continue;
        }
        // Time lost: the waiter's stalls under these calls, when it resumed right after one.
        int64_t longest = 0;
        uint64_t waits = 0;
        for (const Stall& stall : waiter->stalls) {
          int64_t under = 0, last_end = INT64_MIN;
          const Stall* widest = nullptr;
          int64_t widest_ns = 0;
          for (const Stall* call : calls) {
            const int64_t both =
                std::min(call->end, stall.end) - std::max(call->start, stall.start);
            if (both <= 0) continue;
            under += both;
            last_end = std::max(last_end, call->end);
            if (both > widest_ns) widest_ns = both, widest = call;
          }
          if (under == 0 || stall.end - last_end > kResumeWindowNs) continue;
          ++waits;
          result_holder.held_ns += under;
          if (under > longest) {
            longest = under;
            result_holder.example =
                widest->main_zone != kNoSlice ? widest->main_zone : widest->zone;
            result_holder.waiter_zone = stall.zone;
            if (stall.end - stall.start > contention.longest.second - contention.longest.first) {
              contention.longest = {stall.start, stall.end};
            }
          }
        }
        if (waits == 0) continue;
        // Result or exclusion: what the holder is, and whether the waiter had already stopped
        // when the call began (a lock stops it when the holder takes it, not before).
        for (const Stall& stall : waiter->stalls) {
          for (const Stall* call : calls) {
            if (call->start < stall.start || call->start >= stall.end) continue;
            if (stall.end - call->end > kResumeWindowNs || call->end > stall.end) continue;
            if (call->start - stall.start >= kStoppedBeforeNs) ++result_holder.stopped_before_call;
            break;
          }
        }
        const std::string_view call_name = model.slice_name(result_holder.example);
        const std::string& holder_name = model.tracks[holder->main].name;
        std::vector<std::string> result_signs, lock_signs;
        if (is_communication_call(call_name)) {
          result_signs.push_back("the call is a collective (" + std::string(call_name) +
                                 "), which runs in C++ without the interpreter lock");
        }
        if (worker_thread_name(holder_name)) {
          result_signs.push_back("the holder is a communication or worker thread (" + holder_name +
                                 ")");
        }
        if (any_frames && python_frames[holder->main] != 0) {
          lock_signs.push_back("the holder runs Python frames");
        }
        if (!is_communication_call(call_name)) {
          lock_signs.push_back("the call (" + std::string(call_name) + ") is not a collective");
        }
        const bool before_most = result_holder.stopped_before_call * 2 > waits;
        const std::string stopped = "the waiter stopped before the call began in " +
                                    std::to_string(result_holder.stopped_before_call) + " of " +
                                    std::to_string(waits) + " waits";
        if (!result_signs.empty()) {
          result_holder.explanation = GilContention::Holder::Explanation::kResult;
          if (before_most) result_signs.push_back(stopped + " (it was waiting for the result)");
          result_holder.evidence = result_signs;
          result_holder.confidence =
              result_signs.size() >= 3 ? "high" : (result_signs.size() == 2 ? "moderate" : "low");
        } else {
          if (!before_most) {
            lock_signs.push_back("in " + std::to_string(waits - result_holder.stopped_before_call) +
                                 " of " + std::to_string(waits) +
                                 " waits the waiter stopped only as the call began");
          }
          result_holder.evidence = lock_signs;
          result_holder.confidence =
              lock_signs.size() >= 3 ? "high" : (lock_signs.size() == 2 ? "moderate" : "low");
        }
        const SliceId example = result_holder.example;
        result_holder.call = std::string(model.slice_name(example));
        for (SliceId range = example; range != kNoSlice; range = slices.parent[range]) {
          if (slices.category[range] == annotation) {
            result_holder.annotation = std::string(model.slice_name(range));
            break;
          }
        }
        result_holder.waits = waits;
        contention.waits += waits;
        contention.wait_ns += result_holder.held_ns;
        contention.holders.push_back(std::move(result_holder));
      }
    }
    if (contention.holders.empty()) continue;
    std::stable_sort(
        contention.holders.begin(), contention.holders.end(),
        [](const auto& left, const auto& right) { return left.held_ns > right.held_ns; });
    result.push_back(std::move(contention));
  }
  std::stable_sort(result.begin(), result.end(),
                   [](const GilContention& left, const GilContention& right) {
                     return left.wait_ns > right.wait_ns;
                   });
  return result;
}

}  // namespace loupe::trace
