// trace/analyze/analyze.hpp — the analyses over the columnar model, each producing findings.
//
//   breakdown  per track and name: count, total (a union of intervals) and self time
//   overlap    between two user classes, overall and per instance of a window class
//   locks      contended waits per lock and waiter, who held the lock meanwhile and what the
//              holder was doing (its innermost open zone)
//   gaps       idle intervals of GPU streams (or threads) above a threshold, and what the thread
//              feeding the track (by flows) was doing meanwhile
//   warm-up    the profiler's own span, module loading, first calls far slower than the later
//              ones, the first ProfilerStep: reported apart, kept out of the workload's findings
//   gpu        on traces with GPU work, by default: GPU time by kind, copy/compute and
//              communication/compute overlap, idle time per stream split into host wait /
//              kernel wait / other, kernel launch statistics through the ac2g flows, queue
//              length per stream, per step
//   critical path  of one iteration (a ProfilerStep or a named range): the CPU work, launches,
//              GPU ops and synchronisations that decided when it finished, and each one's time
//   gil        Python programs: stalls of one Python thread inside an open zone that coincide
//              with another's uninterrupted call, inferred as waits for the interpreter lock
//   diff       two traces of one workload compared through the above
// Every result is a loupe::Finding (layer trace) with slice ids and time windows as evidence,
// plus a table in the envelope's data; output is bounded unless `detail` is set.
// Include only from .cpp files: pulls in core/json.hpp.
// Thread-safety: pure functions over a finished Model.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/json.hpp"
#include "core/pattern.hpp"
#include "trace/model/model.hpp"

namespace loupe::trace {

class TaskPool;  // tasks.hpp

// A selector picks slices. Terms joined by '&' must all match:
//   name:PATTERN    the slice name matches the pattern (RE2 syntax, core/pattern.hpp; searched:
//                   anchor with ^ and $)
//   cat:CATEGORY    one of the slice's comma-separated categories equals CATEGORY
//   thread:X        on a CPU thread track whose name is X or whose tid is X
//   stream:X        on a GPU stream track whose name is X or whose stream id is X
//   track:X         on any track whose name or id is X
//   kind:K          on a track of kind thread | gpu_stream
// A term without a prefix is a name pattern. Throws Error(kUsage) naming a malformed term.
class Selector {
 public:
  explicit Selector(const std::string& text);
  // Marks, per slice, whether it is selected.
  std::vector<uint8_t> select(const Model& model) const;
  const std::string& text() const { return text_; }

 private:
  struct Term {
    enum class Kind { kName, kCategory, kThread, kStream, kTrack, kTrackKind } kind;
    std::string value;
    std::optional<Pattern> pattern;
  };
  bool track_matches(const Model& model, TrackId track) const;
  std::string text_;
  std::vector<Term> terms_;
};

struct ClassDef {
  std::string name;
  std::string selector;
};
// Parses "NAME=SELECTOR"; throws Error(kUsage).
ClassDef parse_class(const std::string& text);
// Parses "100us", "2ms", "1.5s", "500ns" (a bare number is nanoseconds); throws Error(kUsage)
// naming `input` (the option or argument it came from) and the text.
int64_t parse_duration_ns(std::string_view input, const std::string& text);

struct AnalyzeRequest {
  std::vector<ClassDef> classes;
  std::optional<std::pair<std::string, std::string>> overlap;  // class names
  std::string window_class;                                    // empty: no windows
  int64_t gap_threshold_ns = 100'000;
  int64_t kernel_wait_ns = 10'000;  // gpu idle: shorter gaps after an enqueued op are kernel wait
  // Critical path: a pattern naming the iteration ranges; empty: the ProfilerStep ranges.
  std::string iteration;
  bool detail = false;
  size_t top = 6;
  // Threads the analyses run on once the model is built (they only read it), the caller's
  // included; 0: min(hardware threads, TaskPool::kMaxThreads); 1: one after another. The
  // findings and data are the same whatever the count.
  unsigned threads = 0;  // findings shown without detail (tables keep 5 rows, names 80 characters)
};

using Interval = std::pair<int64_t, int64_t>;
// Sorts and merges; empty intervals are dropped.
std::vector<Interval> union_of(std::vector<Interval> intervals);
int64_t total_length(const std::vector<Interval>& intervals);
std::vector<Interval> intersect(const std::vector<Interval>& left,
                                const std::vector<Interval>& right);

struct BreakdownRow {
  TrackId track;
  StringId name;
  uint64_t count = 0;
  int64_t total_ns = 0;  // union of the name's slices on the track
  int64_t self_ns = 0;   // minus time in child slices
  SliceId longest = kNoSlice;
};
struct Breakdown {
  std::vector<BreakdownRow> rows;      // by self time, descending
  std::map<TrackId, int64_t> busy_ns;  // union of each track's slices
};
// `exclude` (per slice, may be empty): slices left out (warm-up, the profiler's own span).
Breakdown compute_breakdown(const Model& model, const std::vector<uint8_t>& exclude = {});

// One-off work that is not the workload: reported apart and kept out of its findings.
struct Warmup {
  enum class Reason : uint8_t { kProfiler, kModuleLoading, kFirstCall, kFirstStep };
  struct Item {
    SliceId slice;
    Reason reason;
    int64_t typical_ns = 0;  // kFirstCall: the median of the later calls of the same name
    uint64_t later_calls = 0;
  };
  // Per slice: 1 when warm-up (an item, inside one or launched by one); empty when no items.
  std::vector<uint8_t> slice;
  std::vector<Item> items;     // by duration, descending
  std::vector<SliceId> steps;  // ProfilerStep#N ranges on CPU threads, in time order
};
std::string_view warmup_reason_name(Warmup::Reason reason);
// `index` (optional): a TrackIndex of the model to reuse; built when absent (likewise below).
Warmup classify_warmup(const Model& model, const TrackIndex* index = nullptr);

// GPU work (Kineto's kernel / gpu_memcpy / gpu_memset categories, loupe's CUPTI export) by kind.
enum class GpuKind : uint8_t {
  kKernel,  // computation
  kComm,    // communication: kernels named nccl* (HTA's rule), e.g. ncclDevKernel_AllReduce_...
  kMemcpyHtoD,
  kMemcpyDtoH,
  kMemcpyDtoD,
  kMemcpyOther,  // peer-to-peer, host-to-host, unnamed directions
  kMemset,
  kCount
};
std::string_view gpu_kind_name(GpuKind kind);
struct GpuKindTime {
  uint64_t count = 0;
  int64_t sum_ns = 0;    // summed durations
  int64_t union_ns = 0;  // time at least one op of the kind ran (per device, added up)
};
// Idle time of one stream between its first and last op, split by cause (docs/pytorch-traces.md):
//   host wait    the next op's launch call began after the stream went idle: the host was late
//   kernel wait  the next op was already enqueued and the gap is below kernel_wait_ns (launch
//                latency between back-to-back ops)
//   host sync    the host was late because the launching thread sat in a synchronisation
//                (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, .item())
//                for at least half of the gap
//   collective   the host was late while its process ran a collective (gloo:*, nccl:*, c10d::*,
//                record_param_comms) for at least half of the gap: it waited for the result
//   other        enqueued but still waiting (an event, another stream), or no launch to tell
// The launch of an op is its ac2g flow's source, else the runtime call with its correlation id.
struct StreamIdle {
  TrackId stream = kNoTrack;
  TrackId feeder = kNoTrack;  // the thread that launched most of the stream's ops
  uint64_t ops = 0;
  int64_t span_ns = 0, busy_ns = 0, host_wait_ns = 0, kernel_wait_ns = 0, other_ns = 0;
  int64_t sync_wait_ns = 0, collective_wait_ns = 0;
  uint64_t host_wait_gaps = 0;
  Interval longest_host_wait{0, 0};
  SliceId longest_before = kNoSlice, longest_after = kNoSlice;
  // What the launching threads were in during host-wait gaps (the longest ones), descending.
  std::vector<std::pair<std::string, int64_t>> host_zones;
  int64_t host_zones_ns = 0;  // the gap time those zones cover
  // Queue length: ops launched to the stream and not yet started. +1 at each op's launch call
  // start (a graph's replay enqueues all its ops), −1 at the op's start; ops without a launch
  // call are left out. Over the values after each change (HTA's statistic) and over time.
  uint64_t queue_changes = 0;
  double queue_mean = 0;       // mean of the values after each change
  double queue_time_mean = 0;  // time-weighted over the stream's first change to its last op start
  int64_t queue_max = 0;
  int64_t queue_median = 0;  // of the values after each change (the lower middle one)
};
struct LaunchStats {
  uint64_t launches = 0;  // launch calls; a CUDA graph's replay (cudaGraphLaunch) is one
  // Medians, 95th percentiles and maxima: the launch call's CPU duration, the op's GPU duration,
  // and the launch delay = GPU start − launch call end (HTA's definition).
  int64_t cpu_p50 = 0, cpu_p95 = 0, cpu_max = 0;
  int64_t gpu_p50 = 0, gpu_p95 = 0, gpu_max = 0;
  int64_t delay_p50 = 0, delay_p95 = 0, delay_max = 0;
  uint64_t delay_outliers = 0, cpu_outliers = 0;  // above max(100 us, 10 x the median)
  uint64_t short_ops = 0;                         // GPU duration below the launch call's
  SliceId worst_delay_launch = kNoSlice, worst_delay_op = kNoSlice;
  SliceId worst_cpu_launch = kNoSlice;
};
struct GpuSummary {
  std::array<GpuKindTime, static_cast<size_t>(GpuKind::kCount)> kinds{};
  int64_t busy_ns = 0;  // any op on any stream of a device, per device, added up
  int64_t span_ns = 0;  // first op start to last op end
  int64_t copy_ns = 0, compute_ns = 0, comm_ns = 0;  // merged intervals per device, added up
  int64_t copy_under_compute_ns = 0;                 // copy ∩ compute
  int64_t comm_under_compute_ns = 0;                 // comm ∩ compute
  SliceId longest_exposed_comm = kNoSlice, longest_exposed_copy = kNoSlice;
  std::vector<StreamIdle> streams;  // by host wait, descending
  LaunchStats launches;             // one per launch call: a graph's replay counts once
  // CUDA graphs: ops launched by cudaGraphLaunch (tied to it by flow or correlation id), their
  // replays, and the GPU time they covered (merged).
  uint64_t graph_launches = 0, graph_ops = 0;
  int64_t graph_ns = 0;
  // Per range that issued replays (the launch's nearest enclosing non-runtime slice): the summed
  // GPU time of the graph ops, descending.
  std::vector<std::pair<std::string, int64_t>> graph_ranges;
};
struct GpuStep {
  SliceId step = kNoSlice;  // the ProfilerStep#N slice
  bool warmup = false;      // the first step
  GpuSummary gpu;
};
struct GpuAnalysis {
  bool present = false;
  // The steady window: from the end of the last warm-up op (first step, first calls, module
  // loading) launched inside a warm-up range that began in the trace's first half, to the last
  // op's end. Every statistic of `steady` is measured inside it, each op clipped to it.
  Interval window{0, 0};
  uint64_t ops_before_window = 0;  // ops that ended before it opened, left out
  uint64_t warmup_ops_inside = 0;  // later warm-up ops, kept inside it
  GpuSummary steady;               // the ops inside the window
  GpuSummary all;                  // every op
  std::vector<GpuStep> steps;
};

// The GPU ops of a model and their launch calls: what the GPU analyses and the critical path
// share. Empty when the model has no GPU stream.
struct GpuOps {
  std::vector<uint8_t> kind;       // per slice: its GpuKind, or kNotGpuOp
  std::vector<SliceId> ops;        // ascending
  std::vector<SliceId> launch_of;  // per slice: its ac2g flow's source on a CPU thread, or kNoSlice
};
inline constexpr uint8_t kNotGpuOp = 0xFF;
GpuOps find_gpu_ops(const Model& model);
// Per category id: kGpuKernelRole, kGpuMemcpyRole, kGpuMemsetRole, or kNotGpuOp; a category
// field may list several, comma-separated.
inline constexpr uint8_t kGpuKernelRole = 0, kGpuMemcpyRole = 1, kGpuMemsetRole = 2;
std::vector<uint8_t> category_roles(const Model& model);
// GPU runtime calls by what they do, in CUDA's runtime and driver spellings and ROCm's (Kineto
// writes HIP's names on AMD GPUs: hipStreamSynchronize, hipGraphLaunch). A host synchronisation
// returns when GPU work has finished: the stream, device and event synchronisations, and
// aten::item / aten::_local_scalar_dense, which read a result back.
bool is_host_synchronisation(std::string_view name);
// A graph's replay: cudaGraphLaunch, hipGraphLaunch, cuGraphLaunch (and their _ptsz forms).
bool is_graph_launch(std::string_view name);
// A call of the GPU runtime or driver API: a name starting cuda, hip or cu followed by a capital.
bool is_runtime_call_name(std::string_view name);
// `ops` (optional): find_gpu_ops' answer to reuse. `pool` (optional): runs the summaries (every
// op's, the steady window's, each step's) side by side; the result is the same without it.
GpuAnalysis compute_gpu(const Model& model, const Warmup& warmup, int64_t kernel_wait_ns,
                        const TrackIndex* index = nullptr, const GpuOps* ops = nullptr,
                        TaskPool* pool = nullptr);

// The critical path of one iteration: the chain of CPU work, launches, GPU ops and waits that
// decided when it finished, walked backwards from its end (the later of its range's end and the
// end of the last GPU op launched in it). At a GPU op, what bound its start: its launch call
// (then the launching thread), the previous op of its stream, or an op of another stream that
// ended within 20 µs before it (an event). On a CPU thread: its innermost zones back to its
// latest wait for the GPU (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
// a synchronous cudaMemcpy, .item(), a launch call that returned after its own op finished),
// then the op that wait returned on. Iterations: the
// ProfilerStep ranges, or the ranges matching `iteration` on the thread with most of them; the
// first is warm-up when there are others, and of the rest the median by duration is walked.
struct CriticalPath {
  enum class Kind : uint8_t { kCpu, kGpu, kLaunch, kWait, kUntraced, kCount };
  struct Segment {
    Kind kind;
    // The CPU zone, the GPU op, "launch latency", "stream gap", "wait on <stream>", or "nothing
    // traced on <thread>" (no zone open: idle, or work the profiler did not record).
    std::string name;
    Interval interval;
    SliceId slice = kNoSlice;
  };
  // Per (kind, name): its time on the path — at most what the step would save were it free.
  struct Item {
    Kind kind;
    std::string name;
    int64_t ns = 0;
    uint64_t segments = 0;
    SliceId example = kNoSlice;
  };
  bool present = false;
  SliceId iteration = kNoSlice;
  uint64_t iterations = 0, steady_iterations = 0;
  std::string source;  // "ProfilerStep" or the iteration pattern
  Interval span{0, 0};
  std::vector<Segment> segments;  // in time order; they tile `span`
  std::vector<Item> items;        // by time on the path, descending
  std::array<int64_t, static_cast<size_t>(Kind::kCount)> kind_ns{};
};
std::string_view critical_path_kind_name(CriticalPath::Kind kind);
// Throws Error(kUsage) when `iteration_pattern` is not a valid pattern.
CriticalPath compute_critical_path(const Model& model, const Warmup& warmup, const GpuOps& gpu,
                                   const std::string& iteration_pattern,
                                   const TrackIndex* index = nullptr);

// The interpreter lock of a Python program, inferred from the timeline (no lock events exist).
// A holder thread's uninterrupted call — a stretch of at least 200 us in which no slice of the
// holder begins or ends — excludes a waiter thread when the waiter's own work (its innermost
// slices) runs between those calls (after at least half of them) but not during them although,
// spread evenly, a good part of it would have (observed ≤ 10 % of expected, at least 200 us
// expected): a lock the calls hold explains that. The time the waiter lost is its stalls under
// those calls that end within 1 ms after one returns. Reported in the shape of a lock
// contention, marked as an inference.
struct GilContention {
  TrackId waiter;
  uint64_t waits = 0;
  int64_t wait_ns = 0;
  int64_t waiter_span_ns = 0;  // the waiter's first to last slice
  Interval longest{0, 0};
  struct Holder {
    TrackId thread;
    int64_t held_ns = 0;     // the waiter's stalls under the holder's calls
    std::string call;        // the holder's innermost slice in the call
    std::string annotation;  // its enclosing record_function range, or empty
    uint64_t calls = 0;
    uint64_t waits = 0;              // the waiter's stalls under them
    int64_t calls_ns = 0;            // the calls' time within the waiter's span
    int64_t work_inside_ns = 0;      // the waiter's own work during the calls
    int64_t work_expected_ns = 0;    // ... had it been independent of them
    SliceId example = kNoSlice;      // the call at the longest wait
    SliceId waiter_zone = kNoSlice;  // what the waiter had open then (kNoSlice: nothing)
    // Which explanation the timeline supports better. The same stall-under-call pattern is left
    // by a waiter blocked on the holder's result (a collective on a communication thread, a
    // future, a queue): that is no exclusion. kResult when the holder is a communication or
    // worker thread (its call is a collective, or its name says so); kLock otherwise.
    enum class Explanation : uint8_t { kLock, kResult } explanation = Explanation::kLock;
    std::vector<std::string> evidence;  // the observations behind `explanation`, said plainly
    uint64_t stopped_before_call = 0;   // waits in which the waiter stopped before the call began
    std::string confidence;             // "high", "moderate" or "low": how many observations agree
  };
  std::vector<Holder> holders;  // descending by held_ns
};
std::vector<GilContention> compute_gil(const Model& model, const TrackIndex* index = nullptr);
// A host call of a communication library as PyTorch's profiler names it (gloo:all_reduce,
// nccl:all_reduce, c10d::allreduce_, record_param_comms, mpi:*, MPI_*).
bool is_communication_call(std::string_view name);

struct OverlapWindow {
  SliceId window;
  int64_t a_ns, b_ns, both_ns;
};
struct Overlap {
  std::string a, b;
  int64_t a_ns = 0, b_ns = 0, both_ns = 0;  // |A|, |B|, |A ∩ B|
  std::vector<OverlapWindow> windows;       // per instance of the window class, in time order
  std::string window_class;
};
Overlap compute_overlap(const Model& model, const Selector& a, const Selector& b,
                        const std::string& a_name, const std::string& b_name,
                        const Selector* window, const std::string& window_name);

// Time a thread spent in each innermost open zone over [start, end); "(no zone)" for the rest.
std::vector<std::pair<std::string, int64_t>> innermost_zones(const Model& model,
                                                             const TrackIndex& index, TrackId track,
                                                             int64_t start, int64_t end);

struct LockContention {
  TrackId lock;
  TrackId waiter;
  uint64_t waits = 0;
  int64_t wait_ns = 0;
  Interval longest{0, 0};
  // Per holder: time it held the lock while the waiter waited, and its zones meanwhile.
  struct Holder {
    TrackId thread;
    int64_t held_ns = 0;
    std::vector<std::pair<std::string, int64_t>> zones;  // descending
  };
  std::vector<Holder> holders;  // descending by held_ns
};
struct LockSummary {
  TrackId lock;
  uint64_t obtains = 0;
  uint64_t contended = 0;
  int64_t wait_ns = 0;
  int64_t hold_ns = 0;
};
// A hold of a shared lock (one that some thread waited on, or that two or more threads take)
// lasting at least twice the lock's median hold and 50 µs: latent contention, visible before a
// waiter happens to arrive during it.
struct LongHold {
  TrackId lock;
  TrackId thread;
  Interval interval{0, 0};
  int64_t median_hold_ns = 0;                          // of the lock, for scale
  uint64_t waiters = 0;                                // waits that overlapped it
  std::vector<std::pair<std::string, int64_t>> zones;  // the holder's innermost zones, descending
};
struct Locks {
  std::vector<LockSummary> locks;
  std::vector<LockContention> contentions;  // descending by wait_ns
  std::vector<LongHold> long_holds;         // descending by duration, at most kMaxLongHolds
};
inline constexpr size_t kMaxLongHolds = 5;
Locks compute_locks(const Model& model, StatsRegistry& stats, const TrackIndex* index = nullptr);

struct Gap {
  TrackId track;
  Interval interval;
  SliceId before = kNoSlice, after = kNoSlice;
};
struct TrackGaps {
  TrackId track;
  TrackId feeder = kNoTrack;  // the thread with most flows into the track
  int64_t span_ns = 0;
  int64_t idle_ns = 0;                                        // in gaps above the threshold
  std::vector<Gap> gaps;                                      // descending by length
  std::vector<std::pair<std::string, int64_t>> feeder_zones;  // over all gaps, descending
};
std::vector<TrackGaps> compute_gaps(const Model& model, int64_t threshold_ns,
                                    const TrackIndex* index = nullptr);

// Collectives across the ranks of one job (docs/multi-rank.md), when the files hold two or more
// ranks. A collective is a slice named nccl:* (Kineto's host op), ncclDevKernel_* / ncclKernel_*
// (its GPU kernel), mpi:* or MPI_* (kda's MPI calls, MPI profilers). Collectives are grouped —
// host ops or GPU kernels, per process group (args "Process Group Name"), whose members are read
// from "Process Group Ranks" (else: the ranks that ran it) — and matched within the group by
// Kineto's sequence number ("Seq") when every call has one, else in start order, where a member
// whose next call differs in "Collective name", "In msg nelems", "Out msg nelems" or "dtype" from
// what most members run next lacks this one. A member without a call, or with a different one,
// is a mismatch, never a shifted match. Arrival = start, or for a host collective that stages a
// CUDA tensor (gloo: a synchronisation inside its range blocked on a device-to-host copy of the
// rank's) the copy's end; the last arriver holds the others: imposed wait = Σ over the other ranks
// of (last arrival − their arrival). GPU kernel groups decide when
// present (a host op only enqueues), host groups otherwise.
struct CollectiveInstance {
  std::string group;            // "kernel pg 0", "host pg 0"
  uint64_t index = 0;           // n-th of its group
  int64_t seq = 0;              // Kineto's "Seq" when every call of the group has one, else index+1
  std::string name;             // "Collective name" ("allreduce"), else the slice's name
  std::vector<SliceId> slices;  // per rank, in Collectives::ranks order; kNoSlice: not there
  int last_rank = -1;
  int64_t skew_ns = 0;  // last arrival − first arrival (clock-corrected)
  int64_t imposed_ns = 0;
  bool decides = false;  // of the groups the straggler and overlap use
};
struct RankCollectives {
  int rank = -1;
  TrackId track = kNoTrack;  // where most of its deciding collectives ran
  uint64_t collectives = 0, arrived_last = 0;
  int64_t comm_ns = 0;               // union of its deciding collectives
  int64_t comm_hidden_ns = 0;        // ... under its own compute
  int64_t waited_ns = 0;             // its arrival to the last arrival, summed
  int64_t imposed_ns = 0;            // the others' wait for it
  int64_t clock_offset_ns = 0;       // median (end − reference rank's end) of matched collectives
  int64_t clock_uncertainty_ns = 0;  // largest deviation from that median
  uint64_t clock_samples = 0;
};
// The straggler and its cause, read where the cause lives: over the windows from each rank's
// previous collective to its arrival at the ones the straggler held up, what the rank's compute
// ran (GPU kernels when the collectives are kernels, its threads' innermost work otherwise) and
// what its launching thread did (synchronisations, time with nothing traced), each against the
// median of the other ranks. All measured; `cause` is the inference from them.
// Below 5 collectives of two ranks even arriving last at all is a chance of 1 in 16 or more, so the
// test cannot decide: such a straggler stays a warn, as it was before the test.
inline constexpr uint64_t kStragglerMinCollectives = 5;
inline constexpr double kStragglerChance = 0.05;
struct Straggler {
  int rank = -1;
  uint64_t arrived_last = 0, collectives = 0;
  // The chance of arriving last at least arrived_last times were the order random (each of its
  // collectives: 1 / members present). With kStragglerMinCollectives or more, a chance above
  // kStragglerChance and less than two thirds of the wait all ranks imposed, no rank stands out
  // (the finding is info).
  double chance_p = 1.0;
  bool stands_out = true;  // false: the case above, or the skews within the clocks' uncertainty
  // The uncertainty of arrival times (data.collectives.clock); when the largest skew is within
  // it, no arrival order is measured and no rank stands out.
  int64_t clock_uncertainty_ns = 0;
  bool within_clock_uncertainty = false;
  int64_t imposed_ns = 0, max_skew_ns = 0;
  std::string compute_source;  // "GPU kernels" or "thread work"
  int64_t compute_ns = 0, compute_median_others_ns = -1;
  int64_t sync_ns = 0, sync_median_others_ns = -1;
  int64_t host_idle_ns = 0, host_idle_median_others_ns = -1;
  // Time its process spent inside its own other collectives (not the one it arrived at: one its
  // group's other members did not record, or another group's) while its launching thread had not
  // yet handed the collective over; not counted as idle.
  int64_t in_collectives_ns = 0, in_collectives_median_others_ns = -1;
  SliceId waited_in = kNoSlice;  // the straggler's collective it spent longest in
  std::string waited_in_group;
  bool waited_in_matched = false;  // whether that collective matched across ranks
  uint64_t others = 0;             // ranks compared
  // "compute", "collective" (it waited inside another collective), "host idle", "host
  // synchronisation" (the excess explains at least half of the wait it imposed on each rank), or
  // "unexplained".
  std::string cause;
  std::string before;               // the work that ran longest beyond the others' median
  int64_t before_share_ns = 0;      // the imposed wait behind which `before` came
  SliceId before_slice = kNoSlice;  // its longest slice before the heaviest collective
  SliceId collective_slice = kNoSlice;
  int64_t before_ns = 0;                 // the straggler's time in it, over the windows
  int64_t before_median_others_ns = -1;  // the others' median time in it
  uint64_t before_others = 0;
};
struct Collectives {
  std::vector<int> ranks;  // distinct, ascending; empty unless two or more
  std::vector<CollectiveInstance> instances;
  std::vector<RankCollectives> per_rank;  // in `ranks` order
  std::optional<Straggler> straggler;
  // Collectives not recorded on every member of their group (each once, as `mismatches` says).
  uint64_t unmatched = 0;
  // A member without a group's collective, or one whose name, element counts or dtype differ
  // from what the other members ran: "rank 3 has no allreduce #7 of group 0". When a trace holds
  // both host calls and GPU kernels, each is said once, from the kind that decides (the kernels);
  // a host call's mismatch is kept only where the kernels showed none like it.
  struct Mismatch {
    std::string group;
    int64_t seq = 0;
    std::string collective;
    int rank = -1;
    std::string text;
    std::string kind;        // whose matching found it: "kernel" or "host"
    bool missing = false;    // the rank has no such call (else: it differs)
    std::string matched_in;  // the matching group ("kernel pg 0")
  };
  std::vector<Mismatch> mismatches;
  bool sequence_numbers = false;  // some group matched on Kineto's sequence numbers
  uint64_t outside_group = 0;     // collectives of a group recorded on a rank outside it
  std::string clock;              // how the ranks' clocks relate, with the uncertainty
  // How the process group of collectives that record none (gloo's) was read; empty when none.
  std::string host_groups;
};
Collectives compute_collectives(const Model& model, const TrackIndex& index);

// The whole `loupe trace analyze` answer: findings and data, bounded unless request.detail.
Envelope analyze(const Model& model, const AnalyzeRequest& request);
// `loupe trace diff`: B against A.
Envelope diff(const Model& a, const Model& b, const AnalyzeRequest& request);

// "1.234 ms"-style durations used in claims.
std::string format_duration(int64_t ns);

}  // namespace loupe::trace
