// The bench sampler. Each variant runs in a child process of its own (bench_channel.hpp); this
// process (the runtime process) builds nothing and calls nothing of the body's: it tells the
// children what to do, times their batches on its own steady clock, accounts the CPU time of
// every child, and writes the raw samples. It decides no verdict.
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <typeinfo>

#include "bench/stopping.hpp"
#include "loupe/bench.hpp"
#include "subject/bench_channel.hpp"
#include "subject/isolation.hpp"
#include "subject/runtime.hpp"

namespace loupe {
namespace {

// The monotonic clock, read by the system call (subject::raw_clock_seconds): the batch times a
// variant's process reports are read here, next to code that may define clock_gettime.
double now_s() { return subject::raw_clock_seconds(CLOCK_MONOTONIC); }

// The CPU time of the calling process, all its threads (the variant's process when a child
// calls it).
double own_process_cpu_s() { return subject::raw_clock_seconds(CLOCK_PROCESS_CPUTIME_ID); }

void copy_text(char* into, size_t capacity, const std::string& text) {
  std::snprintf(into, capacity, "%s", text.c_str());
}

// Whether a timer is one of loupe's own: the steady clock, or the CUDA-event timer of
// src/bench/cuda (a class in loupe's namespace, recognised by its type's name, since libloupe does
// not link CUDA). Any other timer could report whatever it likes.
bool timer_is_loupes(const Timer& timer) {
  if (typeid(timer) == typeid(SteadyClockTimer)) return true;
  const std::string type = typeid(timer).name();
  return timer.name() == "cuda_events" && type.rfind("N5loupe", 0) == 0 &&
         type.find("14CudaEventTimerE") != std::string::npos;
}

}  // namespace

namespace detail {

// The child's side: collects what the body declares, then serves the runtime's commands for one
// variant.
class BenchRunner {
 public:
  // `slot`: which of the variants to run this process serves — the slot-th of
  // RunOptions::variants, or of the declared variants when none are selected; SIZE_MAX: none.
  BenchRunner(const ProbeDefinition& probe, const subject::RunOptions& options,
              subject::BenchControl* control, std::byte* area, size_t slot)
      : probe_(probe), options_(options), control_(control), area_(area), slot_(slot) {}

  void skip(std::string reason) {
    skipped_ = true;
    skip_reason_ = std::move(reason);
  }
  bool skipped() const { return skipped_; }
  void set_bytes(double bytes) { bytes_per_call_ = bytes; }
  void set_flops(double flops) { flops_per_call_ = flops; }
  void set_timer(std::unique_ptr<Timer> timer) { timer_ = std::move(timer); }
  void set_verify_tolerance(std::string metric, double bound) {
    verify_metric_ = std::move(metric);
    verify_bound_ = bound;
  }
  void exec(ErasedBench bench);
  // After the body returned: what it declared, for a body that skipped or never called exec.
  void declare_end();
  // The counters pass's record ({calls, variants}) once exec ran one; null otherwise.
  const Json& counters_pass() const { return counters_pass_; }

 private:
  void declare(const ErasedBench* bench);
  // The counters pass (RunOptions::counters_pass): the selected variants' calls, untimed.
  void run_counters_pass(const ErasedBench& bench);
  void serve(const ErasedBench& bench, size_t variant);
  void wait_command(uint32_t last);

  const ProbeDefinition& probe_;
  const subject::RunOptions& options_;
  subject::BenchControl* control_;
  std::byte* area_;
  size_t slot_;
  bool skipped_ = false;
  std::string skip_reason_;
  bool executed_ = false;
  double bytes_per_call_ = 0;
  double flops_per_call_ = 0;
  std::unique_ptr<Timer> timer_ = std::make_unique<SteadyClockTimer>();
  std::string verify_metric_ = "rms_ratio";
  double verify_bound_ = 1e-6;
  Json counters_pass_ = nullptr;
};

void BenchRunner::declare(const ErasedBench* bench) {
  subject::BenchControl& control = *control_;
  control.declaration.executed = bench != nullptr;
  control.declaration.skipped = skipped_;
  copy_text(control.declaration.skip_reason, sizeof control.declaration.skip_reason, skip_reason_);
  control.declaration.variant_count =
      bench == nullptr ? 0 : static_cast<uint32_t>(bench->variants.size());
  if (bench != nullptr) {
    for (size_t index = 0; index < bench->variants.size() && index < subject::kMaxVariants;
         ++index) {
      copy_text(control.declaration.variant_names[index], subject::kNameBytes,
                bench->variants[index].first);
    }
    control.declaration.has_outputs = static_cast<bool>(bench->outputs);
  }
  control.declaration.bytes_per_call = bytes_per_call_;
  control.declaration.flops_per_call = flops_per_call_;
  copy_text(control.declaration.timer_name, sizeof control.declaration.timer_name,
            std::string(timer_->name()));
  copy_text(control.declaration.timer_type, sizeof control.declaration.timer_type,
            typeid(*timer_).name());
  control.declaration.timer_is_loupes = timer_is_loupes(*timer_);
  control.declaration.timer_is_device =
      control.declaration.timer_is_loupes && timer_->name() == "cuda_events";
  copy_text(control.declaration.verify_metric, sizeof control.declaration.verify_metric,
            verify_metric_);
  control.declaration.verify_bound = verify_bound_;
  Json method = Json::object();
  for (const auto& [key, value] : timer_->method()) method[key] = value;
  copy_text(control.declaration.timer_method, sizeof control.declaration.timer_method,
            method.dump());
  control.declared = true;
  control.answer.store(1, std::memory_order_release);
  subject::futex_wake(control.answer);
}

void BenchRunner::declare_end() {
  if (!control_->declared) declare(nullptr);
}

void BenchRunner::wait_command(uint32_t last) {
  while (control_->command.load(std::memory_order_acquire) == last) {
    subject::futex_wait(control_->command, last, 0.1);
  }
}

void BenchRunner::exec(ErasedBench bench) {
  if (skipped_) return;
  if (executed_) {
    throw Error(ErrorCode::kInternal, "bench '" + probe_.name + "' calls exec twice",
                "one exec per point; declare alternatives as variants");
  }
  executed_ = true;
  if (bench.variants.empty()) {
    throw Error(ErrorCode::kInternal, "bench '" + probe_.name + "': exec with no variants");
  }
  if (bench.variants.size() > subject::kMaxVariants) {
    throw Error(ErrorCode::kInternal, "bench '" + probe_.name + "': more than " +
                                          std::to_string(subject::kMaxVariants) + " variants");
  }
  for (const auto& [name, call] : bench.variants) {
    if (std::count_if(bench.variants.begin(), bench.variants.end(),
                      [&](const auto& other) { return other.first == name; }) > 1) {
      throw Error(ErrorCode::kInternal,
                  "bench '" + probe_.name + "': variant '" + name + "' is declared twice");
    }
  }
  if (options_.counters_pass > 0) {
    run_counters_pass(bench);
    declare(&bench);
    return;
  }
  declare(&bench);
  // The declared variant this slot runs; a selected name the body does not declare leaves the
  // process idle, and the runtime process, which reads the declaration, refuses the request.
  size_t variant = slot_;
  if (!options_.variants.empty()) {
    variant = SIZE_MAX;
    for (size_t index = 0; slot_ < options_.variants.size() && index < bench.variants.size();
         ++index) {
      if (bench.variants[index].first == options_.variants[slot_]) variant = index;
    }
  }
  if (variant >= bench.variants.size()) return;
  serve(bench, variant);
}

void BenchRunner::run_counters_pass(const ErasedBench& bench) {
  // --counters-variant, else the variants selected with --variants, else every declared one.
  std::vector<std::string> asked = options_.variants;
  if (!options_.counters_variant.empty()) asked = {options_.counters_variant};
  std::vector<size_t> selected;
  std::string names;
  for (size_t variant = 0; variant < bench.variants.size(); ++variant) {
    names += (names.empty() ? "" : ", ") + bench.variants[variant].first;
    if (asked.empty()) selected.push_back(variant);
  }
  for (const std::string& name : asked) {
    const auto found = std::find_if(bench.variants.begin(), bench.variants.end(),
                                    [&](const auto& declared) { return declared.first == name; });
    if (found == bench.variants.end() && !options_.counters_variant.empty()) {
      throw Error(ErrorCode::kUsage, "--counters-variant '" + options_.counters_variant +
                                         "': bench '" + probe_.name +
                                         "' has no such variant; the variants are: " + names);
    }
    if (found == bench.variants.end()) {
      throw Error(ErrorCode::kUsage, "--variants: bench '" + probe_.name + "' has no variant '" +
                                         name + "'; its variants are: " + names);
    }
    selected.push_back(static_cast<size_t>(found - bench.variants.begin()));
  }
  // No timer runs and no sample is kept: the profiler replays each launch many times, so what it
  // sees is never a timing. Fresh inputs per call, seeded like the timed calls, so the kernel
  // moves the bytes it moves when timed.
  Json variants = Json::array();
  uint64_t work = 0;
  for (size_t variant : selected) {
    const auto& call = bench.variants[variant].second;
    for (int64_t index = 0; index < options_.counters_pass; ++index) {
      std::shared_ptr<void> input = bench.make(subject::derive_seed(options_.seed, 1000 + work++));
      call(input.get());
    }
    variants.push_back(bench.variants[variant].first);
  }
  counters_pass_ = Json::object();
  counters_pass_["calls"] = options_.counters_pass;
  counters_pass_["variants"] = std::move(variants);
}

void BenchRunner::serve(const ErasedBench& bench, size_t variant) {
  subject::BenchControl& control = *control_;
  const auto& call = bench.variants[variant].second;
  std::vector<std::shared_ptr<void>> works;
  std::vector<NamedTensor> last_outputs;
  uint32_t last = 1;
  while (true) {
    // The child sleeps between commands, "run" included: the runtime reads its CPU clock
    // between commands, and the kernel counts a thread that is on a CPU (spinning) only up to its
    // last scheduler tick, which moved up to a tick of CPU from one interval into the next and
    // made honest variants look like work off the timed path (or timing tampered with) under
    // load. The wake-up's latency falls before the batch's first timestamp.
    wait_command(last);
    last = control.command.load(std::memory_order_acquire);
    const subject::BenchOp op = control.op;
    control.failed = false;
    try {
      switch (op) {
        case subject::BenchOp::kPrepare:
          works.clear();
          for (uint64_t index = 0; index < control.calls; ++index) {
            works.push_back(bench.make(
                control.repeat
                    ? control.repeat_seed
                    : subject::derive_seed(control.work_seed, 1000 + control.first_work + index)));
          }
          break;
        case subject::BenchOp::kRun:
          if (control.declaration.timer_is_device) {
            timer_->start();
            for (auto& work : works) call(work.get());
            control.timer_seconds = timer_->stop();
            copy_text(control.drop_reason, sizeof control.drop_reason, timer_->drop_reason());
            const auto facts = timer_->sample_facts();
            control.fact_count = static_cast<uint32_t>(std::min<size_t>(facts.size(), 8));
            for (uint32_t index = 0; index < control.fact_count; ++index) {
              copy_text(control.fact_names[index], subject::kNameBytes, facts[index].first);
              control.fact_values[index] = facts[index].second;
            }
          } else {
            control.batch_start = now_s();
            for (auto& work : works) call(work.get());
            control.batch_end = now_s();
          }
          break;
        case subject::BenchOp::kMaterialise: {
          // CPU time as well as wall time: preemption under load stretches the wall time of an
          // honest accessor, never the CPU its process spends in it.
          const double cpu_start = own_process_cpu_s();
          const double start = now_s();
          last_outputs = bench.outputs(works.at(control.chosen).get());
          const double materialised = now_s();
          control.accessor_cpu_s = own_process_cpu_s() - cpu_start;
          control.output_bytes =
              subject::write_tensors(last_outputs, area_, subject::kOutputAreaBytes);
          control.accessor_s = materialised - start;
          control.serialise_s = now_s() - materialised;
          break;
        }
        case subject::BenchOp::kCopy: {
          const double start = now_s();
          control.output_bytes =
              subject::write_tensors(last_outputs, area_, subject::kOutputAreaBytes);
          control.serialise_s = now_s() - start;
          // A device body's accessor brings its outputs from the device first: the same bytes
          // copied by the timer, once the host copy is done.
          control.to_host_s = 0;
          if (control.declaration.timer_is_device) {
            control.to_host_s = timer_->to_host_s(control.output_bytes, &now_s).value_or(0.0);
          }
          break;
        }
        case subject::BenchOp::kUntimed: {
          // The last batch's input sets go first when no verification reads them any more
          // (release_works): a GPU body's input set can take a fifth of the device's memory,
          // and each variant's process holds its own.
          if (control.release_works) works.clear();
          std::shared_ptr<void> work = bench.make(control.seed);
          call(work.get());
          control.output_bytes =
              subject::write_tensors(bench.outputs(work.get()), area_, subject::kOutputAreaBytes);
          break;
        }
        case subject::BenchOp::kCeiling: {
          Json ceiling = Json::object();
          if (auto device = timer_->ceiling(bytes_per_call_)) {
            ceiling["device"] = device->device;
            ceiling["method"] = device->method;
            ceiling["bytes_per_s"] = device->bytes_per_s;
            ceiling["margin"] = device->margin;
          }
          copy_text(control.ceiling, sizeof control.ceiling, ceiling.dump());
          break;
        }
        case subject::BenchOp::kQuit:
        case subject::BenchOp::kNone:
          break;
      }
    } catch (const std::exception& error) {
      control.failed = true;
      copy_text(control.message, sizeof control.message,
                "bench '" + probe_.name + "', variant '" + bench.variants[variant].first +
                    "': " + error.what());
    }
    control.answer.store(last, std::memory_order_release);
    subject::futex_wake(control.answer);
    if (op == subject::BenchOp::kQuit || control.failed) return;
  }
}

}  // namespace detail

namespace subject {
namespace {

// One variant's child and everything measured about it.
struct VariantChild {
  std::string name;
  pid_t pid = -1;
  pid_t first_pid = -1;  // pid, kept after the child is reaped
  std::unique_ptr<SharedRegion> region;
  BenchControl* control = nullptr;
  std::byte* area = nullptr;
  uint32_t sequence = 1;
  uint64_t commands = 0;  // during the sampling phase
  std::vector<double> seconds_per_call;
  std::vector<int64_t> rounds;  // per sample: the round it was timed in
  std::vector<int64_t> threads_before, threads_after;
  std::vector<double> windows, window_cpu;  // per sample: the runtime's window, the child's CPU
  std::vector<double> window_main_cpu;      // per sample: the CPU of the child's main thread alone
  std::map<std::string, std::vector<double>> facts;
  int verified = 0;
  size_t forced_verify_at = 0;
  // Its process still holds the inputs of its last timed batch, not yet verified (the batch's
  // first work index): a later round verifies that batch instead of timing another.
  bool holds_timed_batch = false;
  uint64_t held_first_work = 0;
  // Its last timed batch waits for a verification later in the round.
  bool verify_pending = false;
  double last_batch_s = 0;
  // CPU accounting (seconds), from the child's process CPU clock read by the runtime.
  double cpu_start = 0, cpu_end = 0;
  double run_cpu = 0, run_wall = 0;
  double prepare_cpu = 0, prepare_wall = 0;
  uint64_t prepared_calls = 0;
  double other_cpu = 0, other_wall = 0;
  double waited_start = 0, waited_end = 0;
  std::map<pid_t, std::pair<std::string, double>> threads_start, threads_end;
  // Per recorded sample: the CPU its other threads alive since sampling began used from the end
  // of the previous sample to the end of this one (its input set, its batch, its wait). Work
  // handed to such a thread recurs with the batches; an idle library thread's wake-up does not.
  std::vector<double> helper_cpu;
  double helper_cpu_last = 0;
  double cpu_while_others_timed = 0, wall_while_others_timed = 0;
  std::vector<std::string> descendants;  // processes seen under it during sampling
  ExecEnvironment environment;           // affinity and priority when it declared
  std::vector<std::string> environment_changes;
  // Seccomp filters and tracers its process has beyond the runtime's own (syscall_interception),
  // read once it declared (after the body's setup), before every sample and at the end.
  std::vector<std::string> interceptions;
  std::vector<double> warmup_calls;  // seconds of each warm-up call
  uint64_t warmup_last_seed = 0;     // the input set of its last warm-up call
};

// The last warm-up call of a variant, judged like a timed call (round 6's precomputed_from_seed
// did its unjudged work there): its outputs, the variant's own untimed on the same inputs, and
// the baseline's.
struct WarmupVerified {
  size_t variant;
  uint64_t seed;
  std::vector<NamedTensor> timed, untimed, reference;
};

// The CPU, so far, of the child's threads other than the timed one that were alive when the
// sampling phase began (threads_start): those the off-path accounting judges.
double helper_threads_cpu(const VariantChild& child) {
  double total = 0;
  for (const auto& [tid, reading] : thread_cpu_seconds(child.pid)) {
    if (tid != child.first_pid && child.threads_start.count(tid) != 0) total += reading.second;
  }
  return total;
}

// The outputs accessor timed on another call of a verified batch (no files, no reruns): one more
// reading of what an honest accessor costs, so guard.deferred_output judges the least of many.
struct AccessorProbe {
  double accessor_s, accessor_cpu_s, copy_s;
};

struct Verified {
  size_t variant;
  size_t sample;
  int ordinal;  // among the variant's verified calls: names its files
  uint64_t seed;
  double materialise_s, materialise_cpu_s, copy_s, to_host_s, call_s;
  std::vector<NamedTensor> timed, untimed, reference;
  std::vector<AccessorProbe> probes;
};

// The best of a few streaming reads of `bytes` bytes just written, as make() leaves its inputs.
// 64 bits from the kernel's entropy, never written down before it is used.
uint64_t secret_seed() {
  std::random_device entropy;
  return (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
}

double best_read_rate(size_t bytes) {
  const size_t words = std::max<size_t>(bytes / sizeof(uint64_t), 64);
  std::vector<uint64_t> buffer(words);
  double best = 0;
  uint64_t sink = 0;
  for (int attempt = 0; attempt < 7; ++attempt) {
    for (size_t index = 0; index < words; ++index) buffer[index] = index * 0x9E3779B97F4A7C15ull;
    const auto start = std::chrono::steady_clock::now();
    uint64_t lanes[8] = {};
    size_t index = 0;
    for (; index + 8 <= words; index += 8) {
      for (int lane = 0; lane < 8; ++lane) lanes[lane] += buffer[index + lane];
    }
    for (; index < words; ++index) lanes[0] += buffer[index];
    for (uint64_t lane : lanes) sink ^= lane;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > 0) best = std::max(best, static_cast<double>(words * sizeof(uint64_t)) / seconds);
  }
  asm volatile("" : : "g"(sink) : "memory");  // the sums are used, so the reads happen
  return best;
}

// Multiply-adds in 8 independent chains (2 flops each), the best of a few runs.
double best_flop_rate() {
  constexpr int kSteps = 1 << 18;
  double best = 0;
  double sink = 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    double chains[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const auto start = std::chrono::steady_clock::now();
    for (int step = 0; step < kSteps; ++step) {
      for (double& chain : chains) chain = chain * 0.999999 + 1e-7;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (double chain : chains) sink += chain;
    if (seconds > 0) best = std::max(best, 2.0 * 8 * kSteps / seconds);
  }
  asm volatile("" : : "g"(sink) : "memory");
  return best;
}

class Supervisor {
 public:
  Supervisor(const detail::ProbeDefinition& probe, const Point& point, const RunOptions& options,
             ObservationFiles& files)
      : probe_(probe),
        point_(point),
        options_(options),
        files_(files),
        rng_(secret_seed()),
        work_seed_(options.seed) {}

  ~Supervisor() {
    for (auto& child : children_) {
      if (child.pid > 0) kill_child(child.pid);
    }
  }

  Json run();

 private:
  void spawn(size_t variant);
  void await_declared(VariantChild& child);
  void await(VariantChild& child, uint32_t sequence, double expected_s);
  // Sends `op`, waits for the answer; returns the wall seconds on this process's clock and
  // adds the child's CPU seconds to *cpu.
  double command(VariantChild& child, BenchOp op, double expected_s, double* cpu);
  // One timed batch of `calls` calls on fresh input sets (or on copies of `repeat_seed`'s).
  // `record`: keep its window, CPU and thread counts with the samples (not for replay batches).
  double sample(size_t variant, size_t calls, std::optional<uint64_t> repeat_seed,
                uint64_t* first_seed, bool record = true);
  void verify(size_t variant, size_t calls, uint64_t first_work, double call_s);
  // One untimed call of `child`'s variant on the input set of `seed`, its outputs in the child's
  // area. Its process drops its prepared input sets first unless a verification still reads
  // them: a pending one, or in a later round the held batch the end of sampling verifies.
  void untimed(VariantChild& child, uint64_t seed);
  void check_environment(VariantChild& child);
  void check_interception(VariantChild& child);
  void note_stops(VariantChild& child);
  Json measure_roofline();
  std::vector<pid_t> pids(pid_t except) const;

  const detail::ProbeDefinition& probe_;
  const Point& point_;
  const RunOptions& options_;
  ObservationFiles& files_;
  // Which calls are verified, the variants' order: from a secret, not from the seed on the
  // command line, which a variant's process can read.
  std::mt19937_64 rng_;
  // What the timed calls' input sets derive from: the command line's seed during the warm-up, a
  // secret drawn once the warm-up is over from then on (recorded in the observation afterwards),
  // so no warm-up call can compute the timed calls' outputs in advance (round 6's
  // precomputed_from_seed). A later round keeps the seed: both builds of a round time the
  // same inputs.
  uint64_t work_seed_;
  std::vector<VariantChild> children_;
  // What the first variant's body declared, copied out of its control block before any variant
  // call ran (BenchDeclaration): the runtime reads nothing declared from a block afterwards.
  BenchDeclaration declared_{};
  SyscallInterception own_interception_ = syscall_interception(0);
  ExecEnvironment own_environment_;
  std::vector<std::string> own_environment_changes_;
  bool device_timer_ = false;
  uint64_t next_work_ = 0;
  uint64_t last_first_work_ = 0;
  size_t calls_per_sample_ = 1;
  std::vector<Verified> verified_;
  std::vector<WarmupVerified> warmup_verified_;
  std::map<std::string, int64_t> dropped_;
  std::vector<std::string> strays_;
};

void Supervisor::spawn(size_t variant) {
  VariantChild child;
  child.region = std::make_unique<SharedRegion>(sizeof(BenchControl) + 64 + kOutputAreaBytes,
                                                /*reserve=*/false);
  child.control = new (child.region->data()) BenchControl();
  child.area = child.region->data() + (sizeof(BenchControl) + 63) / 64 * 64;
  child.control->command.store(1);
  BenchControl* control = child.control;
  std::byte* area = child.area;
  const detail::ProbeDefinition& probe = probe_;
  const Point& point = point_;
  const RunOptions& options = options_;
  child.pid = fork_child([&probe, &point, &options, control, area, variant]() -> int {
    detail::BenchRunner runner(probe, options, control, area, variant);
    BenchState state(point, runner);
    try {
      probe.bench_body(state);
      runner.declare_end();
    } catch (const std::exception& error) {
      control->failed = true;
      copy_text(control->message, sizeof control->message,
                "bench '" + probe.name + "': the body threw: " + error.what());
      control->answer.store(1);
      futex_wake(control->answer);
      return 3;
    }
    return 0;
  });
  child.first_pid = child.pid;
  // The variants forked after this one inherit no mapping of its control block (a variant that
  // could write another's block could raise its call count or switch off its verification:
  // round 6's loosen_baseline_tolerance).
  child.region->keep_from_later_children();
  children_.push_back(std::move(child));
  VariantChild& spawned = children_.back();
  await_declared(spawned);
  check_interception(spawned);
  if (variant == 0) {
    declared_ = spawned.control->declaration;
    return;
  }
  // Every variant's process runs the body: it must declare what the first one did.
  const BenchDeclaration& again = spawned.control->declaration;
  if (again.has_outputs != declared_.has_outputs || again.verify_bound != declared_.verify_bound ||
      std::string(again.verify_metric) != declared_.verify_metric ||
      again.bytes_per_call != declared_.bytes_per_call ||
      again.flops_per_call != declared_.flops_per_call) {
    throw Error(ErrorCode::kInternal,
                "bench '" + probe_.name +
                    "': the body declares different outputs, verification tolerance, bytes or "
                    "flops when run again; what it declares must not depend on state");
  }
}

void Supervisor::check_interception(VariantChild& child) {
  if (child.pid <= 0) return;
  for (const auto& sentence :
       interception_beyond(own_interception_, syscall_interception(child.pid))) {
    if (std::find(child.interceptions.begin(), child.interceptions.end(), sentence) ==
        child.interceptions.end()) {
      child.interceptions.push_back(sentence);
    }
  }
}

void Supervisor::await_declared(VariantChild& child) {
  while (child.control->answer.load(std::memory_order_acquire) == 0) {
    futex_wait(child.control->answer, 0, 0.05);
    int status = 0;
    if (child.control->answer.load() == 0 && ::waitpid(child.pid, &status, WNOHANG) == child.pid) {
      child.pid = -1;
      throw Error(ErrorCode::kSubject,
                  "bench '" + probe_.name + "': a variant's process ended before exec (" +
                      (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                           : "status " + std::to_string(WEXITSTATUS(status))) +
                      ")");
    }
  }
  if (child.control->failed) {
    throw Error(ErrorCode::kSubject, std::string(child.control->message));
  }
}

void Supervisor::await(VariantChild& child, uint32_t sequence, double expected_s) {
  auto done = [&] { return child.control->answer.load(std::memory_order_acquire) == sequence; };
  if (done()) return;
  // Sleep through most of a batch whose length is known, then watch for the answer closely, so
  // the end of the interval is read within a few microseconds without holding a core meanwhile.
  if (expected_s > 300e-6) futex_wait(child.control->answer, sequence - 1, 0.7 * expected_s);
  const double spin_until = now_s() + std::max(0.5 * expected_s, 200e-6);
  while (!done() && now_s() < spin_until) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  while (!done()) {
    futex_wait(child.control->answer, sequence - 1, 0.05);
    // A variant stopped by another would never answer.
    if (!done()) note_stops(child);
    int status = 0;
    if (!done() && ::waitpid(child.pid, &status, WNOHANG) == child.pid) {
      child.pid = -1;
      throw Error(
          ErrorCode::kSubject,
          "bench '" + probe_.name + "': variant '" + child.name + "''s process " +
              (WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                   : "exited with status " + std::to_string(WEXITSTATUS(status))) +
              " while it ran the body",
          "run the probe directly (SUBJECT run ...) to see the failure");
    }
  }
}

double Supervisor::command(VariantChild& child, BenchOp op, double expected_s, double* cpu) {
  child.control->op = op;
  ++child.commands;
  const uint32_t sequence = ++child.sequence;
  const double cpu_before = process_cpu_seconds(child.pid);
  const double start = now_s();
  child.control->command.store(sequence, std::memory_order_release);
  futex_wake(child.control->command);
  await(child, sequence, expected_s);
  const double wall = now_s() - start;
  if (cpu != nullptr) {
    *cpu += std::max(0.0, settled_process_cpu_seconds(child.pid, 2e-3) - cpu_before);
  }
  if (child.control->failed) throw Error(ErrorCode::kSubject, std::string(child.control->message));
  return wall;
}

// A variant's process stopped (SIGSTOP, SIGTSTP) and continued by someone else: its batch took
// longer than its work, with no CPU and inside the window (round 4's sigstop_sibling stopped the
// baseline for every other 300 us from a timer handler in the other variant). The runtime is its
// parent, so the kernel reports the stop and the continuation to it: each is recorded as a
// change of the variant's environment, and a stopped variant is continued.
void Supervisor::note_stops(VariantChild& child) {
  if (child.pid <= 0) return;
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(child.pid), &info, WSTOPPED | WCONTINUED | WNOHANG) !=
            0 ||
        info.si_pid != child.pid) {
      break;
    }
    const std::string change = info.si_code == CLD_CONTINUED
                                   ? std::string("run state (stopped by a signal, then continued)")
                                   : "run state (stopped by signal " +
                                         std::to_string(info.si_status) + ", " +
                                         strsignal(info.si_status) + ")";
    if (info.si_code != CLD_CONTINUED) ::kill(child.pid, SIGCONT);
    if (std::find(child.environment_changes.begin(), child.environment_changes.end(), change) ==
        child.environment_changes.end()) {
      child.environment_changes.push_back(change);
    }
  }
}

void Supervisor::check_environment(VariantChild& child) {
  note_stops(child);
  check_interception(child);
  const ExecEnvironment now = capture_environment(child.pid);
  ExecEnvironment expected = child.environment;
  expected.threads = now.threads;  // thread counts are the thread_count guard's
  for (const auto& change : environment_changes(expected, now)) {
    if (std::find(child.environment_changes.begin(), child.environment_changes.end(), change) ==
        child.environment_changes.end()) {
      child.environment_changes.push_back(change);
    }
  }
  const ExecEnvironment own = capture_environment(::getpid());
  ExecEnvironment own_expected = own_environment_;
  own_expected.threads = own.threads;
  for (const auto& change : environment_changes(own_expected, own)) {
    if (std::find(own_environment_changes_.begin(), own_environment_changes_.end(), change) ==
        own_environment_changes_.end()) {
      own_environment_changes_.push_back(change);
      // Put the timer's process back as it was, so later samples are not slowed.
      if (!own_environment_.cpus.empty()) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int cpu : own_environment_.cpus) CPU_SET(cpu, &set);
        ::sched_setaffinity(0, sizeof set, &set);
      }
      if (own_environment_.policy >= 0 && own.policy != own_environment_.policy) {
        const sched_param none{};
        ::sched_setscheduler(0, own_environment_.policy, &none);  // needs RLIMIT_NICE headroom
      }
    }
  }
}

std::vector<pid_t> Supervisor::pids(pid_t except) const {
  std::vector<pid_t> out;
  for (const auto& child : children_) {
    if (child.pid > 0 && child.pid != except) out.push_back(child.pid);
  }
  return out;
}

double Supervisor::sample(size_t variant, size_t calls, std::optional<uint64_t> repeat_seed,
                          uint64_t* first_seed, bool record) {
  VariantChild& child = children_[variant];
  BenchControl& control = *child.control;
  control.calls = calls;
  control.repeat = repeat_seed.has_value();
  control.repeat_seed = repeat_seed.value_or(0);
  control.first_work = next_work_;
  if (!repeat_seed) {
    last_first_work_ = next_work_;
    next_work_ += calls;
  }
  control.work_seed = work_seed_;
  if (first_seed != nullptr) *first_seed = derive_seed(work_seed_, 1000 + control.first_work);
  // The slow readings (/proc) come first, so that "run" follows "prepare"'s answer at once,
  // while the child is still watching for it.
  check_environment(child);
  for (pid_t descendant : children_of(child.pid)) {
    child.descendants.push_back("pid " + std::to_string(descendant));
  }
  // Threads with the process's memory: workers a body joined may still be in the kernel's count.
  const int64_t before = live_thread_count(child.pid);
  child.prepare_wall += command(child, BenchOp::kPrepare, 0, &child.prepare_cpu);
  child.prepared_calls += calls;
  std::vector<double> others_before;
  for (const auto& other : children_) others_before.push_back(process_cpu_seconds(other.pid));
  const double cpu_before = child.run_cpu;
  const double main_before = main_thread_cpu_seconds(child.pid);
  const double wall = command(child, BenchOp::kRun, child.last_batch_s, &child.run_cpu);
  const double main_after = main_thread_cpu_seconds(child.pid);
  const int64_t after = live_thread_count(child.pid);
  if (record) {
    const double helpers = after > 1 ? helper_threads_cpu(child) : 0.0;
    child.helper_cpu.push_back(std::max(0.0, helpers - child.helper_cpu_last));
    child.helper_cpu_last = helpers;
    child.windows.push_back(wall);
    child.window_cpu.push_back(child.run_cpu - cpu_before);
    child.window_main_cpu.push_back(std::max(0.0, main_after - main_before));
  }
  for (size_t index = 0; index < children_.size(); ++index) {
    if (index == variant) continue;
    children_[index].cpu_while_others_timed +=
        std::max(0.0, process_cpu_seconds(children_[index].pid) - others_before[index]);
    children_[index].wall_while_others_timed += wall;
  }
  for (pid_t descendant : children_of(child.pid)) {
    child.descendants.push_back("pid " + std::to_string(descendant));
  }
  child.run_wall += wall;
  child.last_batch_s = wall;
  if (record) {
    child.threads_before.push_back(before);
    child.threads_after.push_back(after);
  }
  return device_timer_ ? control.timer_seconds : control.batch_end - control.batch_start;
}

void Supervisor::verify(size_t variant, size_t calls, uint64_t first_work, double call_s) {
  VariantChild& child = children_[variant];
  Verified entry;
  entry.variant = variant;
  entry.sample = child.seconds_per_call.size() - 1;
  entry.ordinal = child.verified;
  // Any call of the batch may be the one verified, so a body cannot be honest only on the last.
  const size_t chosen = static_cast<size_t>(rng_() % calls);
  entry.seed = derive_seed(work_seed_, 1000 + first_work + chosen);
  entry.call_s = call_s;
  child.control->chosen = chosen;
  // The timed call's outputs, materialised by the body's accessor; then the cost of a plain copy
  // of the same tensors, so work hidden in the accessor shows.
  child.other_wall += command(child, BenchOp::kMaterialise, 0, &child.other_cpu);
  entry.materialise_s = child.control->accessor_s;
  entry.materialise_cpu_s = child.control->accessor_cpu_s;
  entry.timed = read_tensors(child.area, child.control->output_bytes);
  child.other_wall += command(child, BenchOp::kCopy, 0, &child.other_cpu);
  entry.copy_s = child.control->serialise_s;
  entry.to_host_s = child.control->to_host_s;
  // The accessor on up to kAccessorProbes other calls of the batch, each the first on its call (a
  // body that defers its work to the accessor pays it on every one). An honest accessor of a
  // cheap call costs 2-80 us from one call to the next on this 2-core VM (allocating its tensors
  // faults pages in), so the guard, which allows 10 us over the baseline's accessor, read the
  // least of two or three verified calls as deferred work in ~1 run of 20 (squares, session 6).
  constexpr size_t kAccessorProbes = 4;
  for (size_t probe = 1; probe <= std::min(kAccessorProbes, calls - 1); ++probe) {
    child.control->chosen = (chosen + probe) % calls;
    child.other_wall += command(child, BenchOp::kMaterialise, 0, &child.other_cpu);
    entry.probes.push_back(
        {child.control->accessor_s, child.control->accessor_cpu_s, child.control->serialise_s});
  }
  // The batch is verified: nothing reads its input sets again.
  child.verify_pending = false;
  child.holds_timed_batch = false;
  untimed(child, entry.seed);
  entry.untimed = read_tensors(child.area, child.control->output_bytes);
  if (variant != 0) {
    VariantChild& baseline = children_[0];
    untimed(baseline, entry.seed);
    entry.reference = read_tensors(baseline.area, baseline.control->output_bytes);
  }
  verified_.push_back(std::move(entry));
  ++child.verified;
}

void Supervisor::untimed(VariantChild& child, uint64_t seed) {
  child.control->seed = seed;
  child.control->release_works =
      !child.verify_pending && !(options_.round > 0 && child.holds_timed_batch);
  child.other_wall += command(child, BenchOp::kUntimed, 0, &child.other_cpu);
}

Json Supervisor::run() {
  // Where the run's wall time goes, phase by phase (bench.phases_s in observation.json).
  const double run_start = now_s();
  own_environment_ = capture_environment(::getpid());
  spawn(0);
  const BenchDeclaration& first = declared_;
  Json bench = Json::object();
  bench["skipped"] = first.skipped ? Json(std::string(first.skip_reason)) : Json(nullptr);
  bench["executed"] = first.executed;
  if (first.skipped || !first.executed) {
    kill_child(children_[0].pid);
    children_[0].pid = -1;
    if (!first.skipped) {
      throw Error(ErrorCode::kInternal,
                  "bench '" + probe_.name + "': the body neither called exec nor skip",
                  "call state.exec(make, variants) or state.skip(\"reason\")");
    }
    return bench;
  }
  // The variants to run (RunOptions::variants, else every declared one), child i running the
  // i-th: the first child has run the body, so the names can be checked now.
  std::vector<std::string> declared_names;
  for (uint32_t index = 0; index < first.variant_count && index < kMaxVariants; ++index) {
    declared_names.emplace_back(first.variant_names[index]);
  }
  std::vector<std::string> run_names =
      options_.variants.empty() ? declared_names : options_.variants;
  for (const std::string& name : run_names) {
    if (std::find(declared_names.begin(), declared_names.end(), name) == declared_names.end()) {
      std::string names;
      for (const auto& declared : declared_names) names += (names.empty() ? "" : ", ") + declared;
      throw Error(ErrorCode::kUsage,
                  "--variants: bench '" + probe_.name + "' has no variant '" + name +
                      "'; its variants are: " + names,
                  "name variants the bench declares at this point, separated by commas");
    }
  }
  const size_t variant_count = run_names.size();
  children_[0].name = run_names[0];
  for (size_t variant = 1; variant < variant_count; ++variant) {
    spawn(variant);
    children_[variant].name = run_names[variant];
    const BenchDeclaration& again = children_[variant].control->declaration;
    bool same = again.variant_count == first.variant_count;
    for (size_t index = 0; same && index < declared_names.size(); ++index) {
      same = declared_names[index] == again.variant_names[index];
    }
    if (!same) {
      throw Error(ErrorCode::kInternal, "bench '" + probe_.name +
                                            "': the body declares different variants when run "
                                            "again; its variants must not depend on state");
    }
  }
  device_timer_ = first.timer_is_device;
  // A later round of a point measured in rounds of whole runs times inputs of its own (the same
  // for both builds of the round), not round 0's again.
  next_work_ = static_cast<uint64_t>(options_.round) << 32;
  const bool later_round = options_.round > 0;
  // This process's timed sleeps (its wait for a batch's end) wake when asked, not 50 us later;
  // set after the children are forked, which keep the default.
  ::prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
  for (auto& child : children_) {
    child.environment = capture_environment(child.pid);
    child.cpu_start = process_cpu_seconds(child.pid);
    child.waited_start = waited_children_cpu_seconds(child.pid);
  }

  // Warm-up: every variant at least twice (once in a later round: its first call in the new
  // process warms it, round 0 having shown what the first calls cost) and for a tenth of the
  // budget (at most 0.5 s), which also sizes the batch of calls one sample times to about a
  // millisecond.
  const int warmup_calls = later_round ? 1 : 2;
  const double warmup_start = now_s();
  const double warmup_budget = std::min(0.5, 0.1 * options_.budget_s);
  std::vector<double> call_times;
  double make_seconds = 0;
  uint64_t makes = 0;
  for (size_t variant = 0; variant < variant_count; ++variant) {
    const double variant_start = now_s();
    for (int call = 0;
         call < warmup_calls || now_s() - variant_start < warmup_budget / variant_count; ++call) {
      const double prepare_before = children_[variant].prepare_wall;
      call_times.push_back(sample(variant, 1, std::nullopt, &children_[variant].warmup_last_seed));
      children_[variant].warmup_calls.push_back(call_times.back());
      make_seconds += children_[variant].prepare_wall - prepare_before;
      ++makes;
      if (call > 1000) break;
    }
  }
  // The outputs accessor once per variant, on its last warm-up call, before anything is judged:
  // its first call pays what any first call does (fresh output memory faulting in, lazy set-up:
  // 130-190 us against 2-8 us later for the squares bench on this VM), which
  // guard.deferred_output, judging the least of the verified calls, read as deferred work now
  // and then. An accessor that defers work pays it on every verified call all the same.
  if (first.has_outputs) {
    for (size_t variant = 0; variant < variant_count; ++variant) {
      VariantChild& child = children_[variant];
      WarmupVerified entry{variant, child.warmup_last_seed, {}, {}, {}};
      child.control->chosen = 0;
      command(child, BenchOp::kMaterialise, 0, &child.other_cpu);
      entry.timed = read_tensors(child.area, child.control->output_bytes);
      command(child, BenchOp::kCopy, 0, &child.other_cpu);
      untimed(child, entry.seed);
      entry.untimed = read_tensors(child.area, child.control->output_bytes);
      if (variant != 0) {
        untimed(children_[0], entry.seed);
        entry.reference = read_tensors(children_[0].area, children_[0].control->output_bytes);
      }
      warmup_verified_.push_back(std::move(entry));
    }
  }
  for (auto& child : children_) {
    child.threads_before.clear();
    child.threads_after.clear();
    child.windows.clear();
    child.window_cpu.clear();
    child.window_main_cpu.clear();
    child.descendants.clear();
  }
  std::sort(call_times.begin(), call_times.end());
  const double typical_call = call_times[call_times.size() / 2];
  const double typical_make = make_seconds / static_cast<double>(std::max<uint64_t>(makes, 1));
  constexpr double kTargetSampleSeconds = 1e-3;
  const double by_time = typical_call > 0 ? std::ceil(kTargetSampleSeconds / typical_call) : 1e4;
  const double by_inputs =
      typical_make > 0 ? std::floor(0.05 * options_.budget_s / typical_make) : 1e4;
  calls_per_sample_ = static_cast<size_t>(std::clamp(std::min(by_time, by_inputs), 1.0, 10000.0));
  const double warmup_s = now_s() - warmup_start;
  if (!later_round) work_seed_ = secret_seed();
  // The accounting of the sampling phase starts here: warm-up (first calls, lazy set-up) is not
  // judged.
  for (auto& child : children_) {
    child.cpu_start = process_cpu_seconds(child.pid);
    child.threads_start = thread_cpu_seconds(child.pid);
    child.helper_cpu.clear();
    child.helper_cpu_last = helper_threads_cpu(child);
    child.run_cpu = child.run_wall = child.prepare_cpu = child.prepare_wall = 0;
    child.other_cpu = child.other_wall = 0;
    child.prepared_calls = 0;
    child.commands = 0;
    child.cpu_while_others_timed = child.wall_while_others_timed = 0;
  }

  constexpr size_t kMinSamples = 10;
  constexpr int64_t kMaxSamples = 100000;
  constexpr int kMaxVerified = 3;
  const bool has_outputs = first.has_outputs;
  for (auto& child : children_) child.forced_verify_at = rng_() % kMinSamples;
  const double start = now_s();
  // Rounds: each round times every variant once, back to back, so that load lasting longer than
  // a round falls on all of them and cancels in the per-round ratios the comparison decides on
  // (src/bench's compare_paired); the stopping rule's quantity is the same median of ratios. The
  // order is drawn once and reversed every round (AB, BA, AB, ...), so that no variant is always
  // second, and the verifications wait until the round's last batch so that nothing but batches
  // runs between a round's samples.
  std::vector<int> order(variant_count);
  for (size_t index = 0; index < order.size(); ++index) order[index] = static_cast<int>(index);
  std::shuffle(order.begin(), order.end(), rng_);
  std::vector<std::vector<int>> block_orders;
  std::string stop_reason;
  std::vector<double> stop_half_widths, stop_effects;
  for (int64_t round = 0;; ++round) {
    if (round > 0) std::reverse(order.begin(), order.end());
    block_orders.push_back(order);
    struct Pending {
      size_t variant;
      uint64_t first_work;
      double per_call;
    };
    std::vector<Pending> pending;
    for (int variant : order) {
      VariantChild& child = children_[variant];
      const uint64_t first_work = next_work_;
      const double elapsed = sample(variant, calls_per_sample_, std::nullopt, nullptr);
      child.holds_timed_batch = false;
      const std::string drop = device_timer_ ? std::string(child.control->drop_reason) : "";
      if (!drop.empty() &&
          dropped_[drop] <
              std::max<int64_t>(10, static_cast<int64_t>(child.seconds_per_call.size()))) {
        ++dropped_[drop];
        child.threads_before.pop_back();
        child.threads_after.pop_back();
        child.windows.pop_back();
        child.window_cpu.pop_back();
        child.window_main_cpu.pop_back();
        continue;
      }
      if (device_timer_) {
        for (uint32_t index = 0; index < child.control->fact_count; ++index) {
          child.facts[child.control->fact_names[index]].push_back(
              child.control->fact_values[index]);
        }
      }
      const double per_call = elapsed / static_cast<double>(calls_per_sample_);
      child.seconds_per_call.push_back(per_call);
      child.rounds.push_back(round);
      child.holds_timed_batch = true;
      child.held_first_work = first_work;
      const size_t index = child.seconds_per_call.size() - 1;
      const bool chosen = index == child.forced_verify_at || rng_() % 16 == 0;
      if (has_outputs && chosen && child.verified < kMaxVerified) {
        pending.push_back({static_cast<size_t>(variant), first_work, per_call});
        child.verify_pending = true;
      }
    }
    // Each child still holds the inputs of its batch: it prepares nothing until its next sample.
    for (const Pending& entry : pending) {
      verify(entry.variant, calls_per_sample_, entry.first_work, entry.per_call);
      children_[entry.variant].holds_timed_batch = false;
    }
    const double elapsed = now_s() - warmup_start;
    bench::StoppingRule rule;
    rule.precision = options_.precision;
    rule.budget_s = options_.budget_s;
    rule.max_samples = kMaxSamples;
    std::vector<bench::StopDecision> decisions;
    if (children_.size() == 1) {
      decisions.push_back(bench::should_stop(children_[0].seconds_per_call, elapsed, rule));
    }
    for (size_t variant = 1; variant < children_.size(); ++variant) {
      const std::vector<double> ratios =
          bench::round_ratios(children_[0].seconds_per_call, children_[0].rounds,
                              children_[variant].seconds_per_call, children_[variant].rounds);
      decisions.push_back(bench::should_stop_paired(ratios, elapsed, rule));
    }
    bool all_precise = true;
    std::optional<bench::StopDecision> forced;
    for (const auto& decision : decisions) {
      all_precise = all_precise && decision.reason == bench::StopReason::kPrecisionReached;
      if (decision.reason == bench::StopReason::kBudgetSpent ||
          decision.reason == bench::StopReason::kSampleCapReached) {
        forced = decision;
      }
    }
    if (all_precise || forced) {
      stop_reason = std::string(bench::stop_reason_name(
          all_precise ? bench::StopReason::kPrecisionReached : forced->reason));
      for (const auto& decision : decisions) {
        stop_half_widths.push_back(decision.relative_half_width);
        stop_effects.push_back(decision.minimum_detectable_effect);
      }
      break;
    }
  }
  const double sampling_s = now_s() - start;
  const double replays_start = now_s();

  // The content-cache probe: per variant, batches on fresh inputs alternated with batches whose
  // every input set repeats the content of one already timed (in buffers of their own). Once per
  // point: a later round's binary and point are round 0's, which ran it.
  Json replays = Json::array();
  if (!later_round) {
    const uint64_t seen_seed = derive_seed(work_seed_, 1000 + last_first_work_);
    const double batch_s =
        children_[0].seconds_per_call.empty()
            ? 0
            : children_[0].seconds_per_call.back() * static_cast<double>(calls_per_sample_);
    const int pairs = static_cast<int>(std::clamp(
        batch_s > 0 ? std::floor(0.1 * options_.budget_s / (2.0 * batch_s * variant_count)) : 6.0,
        4.0, 6.0));
    for (size_t variant = 0; variant < variant_count; ++variant) {
      std::vector<double> fresh, repeated;
      for (int pair = 0; pair < pairs; ++pair) {
        fresh.push_back(sample(variant, calls_per_sample_, std::nullopt, nullptr, false) /
                        static_cast<double>(calls_per_sample_));
        repeated.push_back(sample(variant, calls_per_sample_, seen_seed, nullptr, false) /
                           static_cast<double>(calls_per_sample_));
      }
      Json entry = Json::object();
      entry["variant"] = children_[variant].name;
      entry["seen_seed"] = seen_seed;
      entry["fresh"] = fresh;
      entry["repeated"] = repeated;
      replays.push_back(std::move(entry));
    }
  }
  const double verify_start = now_s();
  // A variant that ran out of budget before any sample was verified still gets one timed call
  // checked (two calls per variant at least, so outputs equal for different inputs show; in a
  // later round one, round 0 having compared two).
  if (has_outputs) {
    const int min_verified = later_round ? 1 : 2;
    for (size_t variant = 0; variant < variant_count; ++variant) {
      VariantChild& child = children_[variant];
      if (later_round && child.holds_timed_batch) {
        // No replay ran since sampling: the variant's process still holds its last timed batch,
        // which the variant could not know to be the last (the budget ended it). Verified
        // whatever was verified before: a body whose timed calls go wrong only once it has run
        // a while (a cache keyed on input addresses, which the allocator hands back from the
        // second batch on) is right on a round's first batches, where the forced verification
        // mostly falls, and round 0's replays and second post-sampling verification, which catch
        // it there, do not run in a later round.
        child.holds_timed_batch = false;
        verify(variant, calls_per_sample_, child.held_first_work, child.seconds_per_call.back());
      }
      while (child.verified < min_verified) {
        const uint64_t first_work = next_work_;
        const double elapsed = sample(variant, calls_per_sample_, std::nullopt, nullptr, false);
        verify(variant, calls_per_sample_, first_work,
               elapsed / static_cast<double>(calls_per_sample_));
      }
    }
  }
  const double roofline_start = now_s();
  // The machine's read and flop rates: once per point (round 0), like the replays.
  Json roofline = nullptr;
  if (!later_round && (first.bytes_per_call > 0 || first.flops_per_call > 0)) {
    roofline = measure_roofline();
  }
  const double end_start = now_s();

  // The end of the sampling phase's accounting, then every child is told to quit and reaped.
  const double phase_wall = now_s() - start;
  for (auto& child : children_) {
    child.cpu_end = process_cpu_seconds(child.pid);
    child.waited_end = waited_children_cpu_seconds(child.pid);
    child.threads_end = thread_cpu_seconds(child.pid);
    check_environment(child);
  }
  for (auto& child : children_) {
    command(child, BenchOp::kQuit, 0, nullptr);
    const ChildEnd end = reap_child(child.pid, pids(child.pid));
    child.pid = -1;
    for (const auto& stray : end.strays) strays_.push_back(child.name + ": " + stray);
  }

  // Files, now that no child is left to read or change them.
  // A verified call's outputs (timed, untimed, and the reference's for a candidate variant) as
  // files under `stem`, named in `item`: the verified calls' and the warm-up calls' alike.
  auto write_call_outputs = [this](Json& item, const std::string& stem, const auto& entry) {
    auto write = [&](const char* kind, const std::vector<NamedTensor>& tensors) {
      Json files = Json::object();
      for (const auto& output : tensors) {
        files[output.name] =
            files_.write_tensor(stem + "." + kind + "." + output.name, output.tensor);
      }
      return files;
    };
    item["timed"] = write("timed", entry.timed);
    item["untimed"] = write("untimed", entry.untimed);
    if (entry.variant != 0) item["reference"] = write("reference", entry.reference);
  };
  Json verified_json = Json::array();
  for (const auto& entry : verified_) {
    const VariantChild& child = children_[entry.variant];
    Json item = Json::object();
    item["variant"] = child.name;
    item["sample"] = entry.sample;
    item["seed"] = entry.seed;
    item["call_s"] = entry.call_s;
    // The accessor's own time on a timed call, and a plain copy of the tensors it returned.
    item["accessor_s"] = entry.materialise_s;
    item["accessor_cpu_s"] = entry.materialise_cpu_s;
    item["copy_s"] = entry.copy_s;
    if (entry.to_host_s > 0) item["to_host_s"] = entry.to_host_s;
    Json probes = Json::array();
    for (const AccessorProbe& probe : entry.probes) {
      Json timing = Json::object();
      timing["accessor_s"] = probe.accessor_s;
      timing["accessor_cpu_s"] = probe.accessor_cpu_s;
      timing["copy_s"] = probe.copy_s;
      probes.push_back(std::move(timing));
    }
    item["accessor_probes"] = std::move(probes);
    // Named by the ordinal, not the sample: the calls verified after sampling (a variant that had
    // fewer than 2) carry the last sample's index, and the files of a call verified on that
    // sample were overwritten by theirs — both entries then showed the same baseline outputs,
    // and guard.constant_output (which needs the baseline's to differ) missed a variant that
    // returns a constant (consistently_wrong, 1 run in 17).
    const std::string stem = "verify/" + child.name + "." + std::to_string(entry.ordinal);
    write_call_outputs(item, stem, entry);
    verified_json.push_back(std::move(item));
  }

  Json warmup_json = Json::array();
  for (const auto& entry : warmup_verified_) {
    const VariantChild& child = children_[entry.variant];
    Json item = Json::object();
    item["variant"] = child.name;
    item["seed"] = entry.seed;
    const std::string stem = "warmup/" + child.name;
    write_call_outputs(item, stem, entry);
    warmup_json.push_back(std::move(item));
  }

  Json samples_json = Json::object();
  samples_json["unit"] = "seconds_per_call";
  samples_json["calls_per_sample"] = calls_per_sample_;
  Json variants = Json::array();
  Json accounting = Json::array();
  for (const auto& child : children_) {
    Json entry = Json::object();
    entry["name"] = child.name;
    entry["samples"] = child.seconds_per_call;
    entry["rounds"] = child.rounds;
    entry["threads_before"] = child.threads_before;
    entry["threads_after"] = child.threads_after;
    // Per batch (seconds, not per call): the runtime process's window around it, and the CPU
    // time the child used in that window.
    entry["window_s"] = child.windows;
    entry["window_cpu_s"] = child.window_cpu;
    // The main thread's share of it: a body that starts and joins threads inside its batch has
    // one thread before and after, and more CPU than time on an idle machine.
    entry["window_main_thread_cpu_s"] = child.window_main_cpu;
    entry["warmup_call_s"] = child.warmup_calls;
    for (const auto& [fact, values] : child.facts) entry[fact] = values;
    variants.push_back(std::move(entry));
    Json account = Json::object();
    account["variant"] = child.name;
    account["cpu_s"] = child.cpu_end - child.cpu_start;
    account["run_cpu_s"] = child.run_cpu;
    account["run_wall_s"] = child.run_wall;
    account["prepare_cpu_s"] = child.prepare_cpu;
    account["prepare_wall_s"] = child.prepare_wall;
    account["prepared_calls"] = child.prepared_calls;
    account["other_cpu_s"] = child.other_cpu;
    account["commands"] = child.commands;
    const double idle_cpu =
        (child.cpu_end - child.cpu_start) - child.run_cpu - child.prepare_cpu - child.other_cpu;
    account["idle_cpu_s"] = std::max(0.0, idle_cpu);
    account["idle_wall_s"] =
        std::max(0.0, phase_wall - child.run_wall - child.prepare_wall - child.other_wall);
    account["cpu_while_others_timed_s"] = child.cpu_while_others_timed;
    account["wall_while_others_timed_s"] = child.wall_while_others_timed;
    account["waited_children_cpu_s"] = std::max(0.0, child.waited_end - child.waited_start);
    std::vector<std::string> descendants = child.descendants;
    std::sort(descendants.begin(), descendants.end());
    descendants.erase(std::unique(descendants.begin(), descendants.end()), descendants.end());
    account["child_processes"] = descendants;
    account["environment_changes"] = child.environment_changes;
    account["syscall_interception"] = child.interceptions;
    // Threads that lived through the sampling phase, with the CPU each used in it: the timed
    // thread (the process's first) and any other, which can only have worked off the timed path
    // or beside it (threads a call starts and joins are not among them).
    Json threads = Json::array();
    for (const auto& [tid, end] : child.threads_end) {
      const auto start = child.threads_start.find(tid);
      if (start == child.threads_start.end()) continue;
      Json thread = Json::object();
      thread["tid"] = tid;
      thread["name"] = end.first;
      thread["timed"] = tid == child.first_pid;
      thread["cpu_s"] = std::max(0.0, end.second - start->second.second);
      threads.push_back(std::move(thread));
    }
    account["threads"] = std::move(threads);
    account["helper_cpu_per_sample_s"] = child.helper_cpu;
    accounting.push_back(std::move(account));
  }
  samples_json["variants"] = std::move(variants);
  samples_json["block_orders"] = block_orders;
  samples_json["accounting"] = std::move(accounting);
  samples_json["runtime_environment_changes"] = own_environment_changes_;
  samples_json["left_running"] = strays_;
  const std::string samples_file = "samples.json";
  files_.prepare(samples_file);
  {
    std::ofstream out(files_.dir() / samples_file);
    out << samples_json.dump() << "\n";
    if (!out) {
      throw Error(ErrorCode::kSubject, "cannot write " + (files_.dir() / samples_file).string());
    }
  }
  files_.add(samples_file, "samples");

  bench["timer"] = std::string(first.timer_name);
  bench["timer_type"] = std::string(first.timer_type);
  bench["timer_is_loupes"] = first.timer_is_loupes;
  bench["timed_by"] =
      device_timer_ ? "cuda_events in the variant's process" : "the runtime process's steady clock";
  bench["bytes_per_call"] = first.bytes_per_call;
  bench["flops_per_call"] = first.flops_per_call;
  bench["precision"] = options_.precision;
  bench["budget_s"] = options_.budget_s;
  bench["calls_per_sample"] = calls_per_sample_;
  bench["warmup_s"] = warmup_s;
  bench["sampling_s"] = sampling_s;
  bench["stop_reason"] = stop_reason;
  bench["stop_relative_half_width"] = stop_half_widths;
  bench["stop_minimum_detectable_effect"] = stop_effects;
  Json names = Json::array();
  for (const auto& child : children_) names.push_back(child.name);
  bench["variants"] = std::move(names);
  bench["samples_file"] = samples_file;
  Json tolerance = Json::object();
  tolerance["metric"] = std::string(first.verify_metric);
  tolerance["bound"] = first.verify_bound;
  bench["verify_tolerance"] = std::move(tolerance);
  // Whether the body declared an outputs accessor: a bench that did and verified no call fails.
  bench["declared_outputs"] = first.has_outputs;
  bench["verified"] = std::move(verified_json);
  bench["warmup_verified"] = std::move(warmup_json);
  // The secret the timed calls' input sets derive from, revealed now that no call is left.
  bench["work_seed"] = work_seed_;
  Json dropped = Json::object();
  for (const auto& [reason, count] : dropped_) dropped[reason] = count;
  bench["dropped_samples"] = std::move(dropped);
  Json method = Json::object();
  try {
    method = Json::parse(std::string(first.timer_method));
  } catch (const nlohmann::json::exception&) {
    method = Json::object();
  }
  bench["timer_method"] = std::move(method);
  bench["replays"] = std::move(replays);
  bench["roofline"] = std::move(roofline);
  // Which round of whole runs this was (RunOptions::round); its presence also tells loupe that
  // this runtime takes --round.
  bench["round"] = options_.round;
  Json phases = Json::object();
  phases["start"] = warmup_start - run_start;  // the variants' processes forked and declared
  phases["warmup"] = warmup_s;
  phases["sampling"] = sampling_s;
  phases["replays"] = verify_start - replays_start;
  phases["verify_after_sampling"] = roofline_start - verify_start;
  phases["roofline"] = end_start - roofline_start;
  phases["end"] = now_s() - end_start;  // children reaped, files written
  bench["phases_s"] = std::move(phases);
  return bench;
}

Json Supervisor::measure_roofline() {
  const BenchDeclaration& first = declared_;
  Json roofline = Json::object();
  if (device_timer_) {
    command(children_[0], BenchOp::kCeiling, 0, &children_[0].other_cpu);
    Json ceiling = Json::parse(std::string(children_[0].control->ceiling));
    if (ceiling.contains("device")) {
      // The body runs on another device: its rate, not this CPU's, bounds the claim; no flop
      // ceiling is measured there.
      roofline["device"] = ceiling["device"];
      roofline["method"] = ceiling["method"];
      roofline["hardware_threads"] = 1;
      roofline["read_bytes_per_s"] = ceiling["bytes_per_s"];
      roofline["read_margin"] = ceiling["margin"];
      return roofline;
    }
  }
  roofline["method"] =
      "one thread: best of 7 streaming reads of a just-written buffer of bytes_per_call bytes "
      "(8 integer lanes); best of 5 runs of 8 multiply-add chains";
  roofline["hardware_threads"] = std::max(1u, std::thread::hardware_concurrency());
  if (first.bytes_per_call > 0) {
    const size_t bytes = static_cast<size_t>(std::min(first.bytes_per_call, 1024.0 * 1024 * 1024));
    roofline["read_working_set_bytes"] = bytes;
    roofline["read_bytes_per_s"] = best_read_rate(bytes);
  }
  if (first.flops_per_call > 0) roofline["flops_per_s"] = best_flop_rate();
  return roofline;
}

}  // namespace

Json run_bench(const detail::ProbeDefinition& probe, const Point& point, const RunOptions& options,
               ObservationFiles& files) {
  if (!probe.bench_body) {
    throw Error(ErrorCode::kInternal, "bench '" + probe.name + "' has no body",
                "add .body([](loupe::BenchState& state) { ... state.exec(...); })");
  }
  if (options.counters_pass > 0) {
    // The counters pass runs the body in this process: it is profiled, never timed, so the
    // children that keep a timed variant apart have nothing to protect here.
    auto control = std::make_unique<BenchControl>();
    detail::BenchRunner runner(probe, options, control.get(), nullptr, SIZE_MAX);
    BenchState state(point, runner);
    probe.bench_body(state);
    runner.declare_end();
    if (!control->declaration.skipped && !control->declaration.executed) {
      throw Error(ErrorCode::kInternal,
                  "bench '" + probe.name + "': the body neither called exec nor skip",
                  "call state.exec(make, variants) or state.skip(\"reason\")");
    }
    Json bench = Json::object();
    bench["skipped"] = control->declaration.skipped
                           ? Json(std::string(control->declaration.skip_reason))
                           : Json(nullptr);
    bench["executed"] = control->declaration.executed;
    Json names = Json::array();
    for (uint32_t index = 0; index < control->declaration.variant_count && index < kMaxVariants;
         ++index) {
      names.push_back(std::string(control->declaration.variant_names[index]));
    }
    bench["variants"] = std::move(names);
    bench["timer"] = std::string(control->declaration.timer_name);
    bench["bytes_per_call"] = control->declaration.bytes_per_call;
    bench["flops_per_call"] = control->declaration.flops_per_call;
    bench["samples_file"] = "";
    bench["stop_reason"] = "counters_pass";
    bench["sampling_s"] = 0.0;
    bench["counters_pass"] = runner.counters_pass();
    return bench;
  }
  return Supervisor(probe, point, options, files).run();
}

Json run_scenario(const detail::ProbeDefinition& probe, const Point& point,
                  const RunOptions& options, ObservationFiles& files) {
  if (!probe.scenario_body) {
    throw Error(ErrorCode::kInternal, "scenario '" + probe.name + "' has no body",
                "add .body([](loupe::ScenarioState& state) { ... })");
  }
  ScenarioState state(point, options.seed, options.out_dir);
  const double start = now_s();
  probe.scenario_body(state);
  const double wall = now_s() - start;
  bool has_wall = false;
  for (const auto& [name, value] : state.metrics()) has_wall = has_wall || name == "wall_s";
  if (!has_wall) state.record_metric("wall_s", wall);
  Json scenario = Json::object();
  Json metrics = Json::object();
  for (const auto& [name, value] : state.metrics()) metrics[name] = number_to_json(value);
  scenario["metrics"] = std::move(metrics);
  Json traces = Json::array();
  for (const auto& [path, kind] : state.files()) {
    if (!std::filesystem::exists(options.out_dir / path)) {
      throw Error(ErrorCode::kSubject, "scenario '" + probe.name + "' declares file '" + path +
                                           "' but did not write it under " +
                                           options.out_dir.string());
    }
    files.add(path, kind);
    if (kind == "trace") traces.push_back(path);
  }
  scenario["traces"] = std::move(traces);
  return scenario;
}

}  // namespace subject

void BenchState::skip(std::string reason) { runner_->skip(std::move(reason)); }
bool BenchState::skipped() const { return runner_->skipped(); }
void BenchState::set_bytes_per_call(double bytes) { runner_->set_bytes(bytes); }
void BenchState::set_flops_per_call(double flops) { runner_->set_flops(flops); }
void BenchState::set_timer(std::unique_ptr<Timer> timer) { runner_->set_timer(std::move(timer)); }
void BenchState::set_verify_tolerance(std::string metric, double bound) {
  runner_->set_verify_tolerance(std::move(metric), bound);
}
void BenchState::exec_erased(detail::ErasedBench bench) { runner_->exec(std::move(bench)); }

}  // namespace loupe
