// loupe/bench.hpp — bench probes: time a body (and its variants) with honest statistics.
//
//   struct Rows { std::vector<float> x, y; };                      // one input set and its output
//   LOUPE_BENCH(row_sums_speed)
//       .description("row sums: sequential loop vs blocked")
//       .param("N", 4096, {1024, 4096})
//       .body([](loupe::BenchState& state) {
//         const int64_t n = state.point().get_int("N");
//         state.set_bytes_per_call(4.0 * n * 65);
//         state.set_flops_per_call(1.0 * n * 64);
//         state.exec([n](uint64_t seed) { return make_rows(n, seed); },   // untimed
//                    {{"loop", [](Rows& rows) { sum_rows(rows); }},        // variant A (baseline)
//                     {"blocked", [](Rows& rows) { sum_rows_blocked(rows); }}},
//                    [](const Rows& rows) { return rows_output(rows); });  // for verification
//       });
//
// What the runtime does inside exec (measurement.md), so no author has to:
//  - each variant runs in a child process of its own (the body runs there too, once per
//    variant: it must declare the same variants each time); the subject's runtime process drives
//    them, checks every batch's time against its own clock and the child's CPU time, and accounts
//    CPU off the timed path, child processes, affinity and priority (docs/security.md);
//  - every timed call gets a fresh input set, built from a fresh seed outside the timed region,
//    so nothing can be cached by pointer or by content;
//  - warm-up, then samples (each one timed batch of calls, sized to about a millisecond) with
//    the variants interleaved in randomised blocks, until the 95 % CI half-width of every
//    variant's median is within --precision (default 1 %) or --budget seconds (default 2) are
//    spent;
//  - the thread count is read before and after every sample (work hidden on another thread);
//  - at least two timed calls per variant, chosen at random, have their outputs written next to
//    the outputs of the same variant and of the baseline (the first variant) run untimed on the
//    same inputs, for loupe to compare; the outputs accessor's own time is measured;
//  - after sampling, a few batches on inputs that repeat content already timed (in buffers of
//    their own) alternate with batches on fresh inputs: a body much faster on the repeats
//    replays results it cached (guard.content_cache);
//  - when the body declares bytes or flops per call, the best streaming-read and multiply-add
//    rates of one thread are measured next to it, so loupe can reject a speed beyond what this
//    machine can do (guard.roofline).
// Every raw sample is written to the observation; medians, CIs and the FASTER / SLOWER / SAME /
// AMBIGUOUS verdict of each variant against the first are computed by `loupe`, not here.
// Thread-safety: a BenchState belongs to the body it is handed to.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "loupe/probe.hpp"
#include "loupe/tensor.hpp"

namespace loupe {

// What the device a timer times can do, measured next to the samples for the roofline guard: its
// best streaming rate over a working set of the call's declared bytes. `margin` is how far above
// that rate a timed call may still claim to go (caches smaller than the working set).
struct DeviceCeiling {
  std::string device;      // "NVIDIA H200"
  std::string method;      // how bytes_per_s was measured
  double bytes_per_s = 0;  // read + write, as bytes_per_call counts them
  double margin = 4;
};

// What measures one sample: the CPU steady clock (the default), or the CUDA-event timer
// (make_cuda_event_timer below: start records an event, stop synchronises the device and reads
// the elapsed time).
class Timer {
 public:
  virtual ~Timer() = default;
  // Written to the observation: "cpu_steady_clock", "cuda_events".
  virtual std::string_view name() const = 0;
  virtual void start() = 0;
  // Seconds since start().
  virtual double stop() = 0;
  // After stop(): why the sample just timed must be dropped (the SM clock throttled during it),
  // or empty to keep it. The sampler counts every drop by reason in the observation.
  virtual std::string drop_reason() const { return {}; }
  // After stop(): facts measured beside the sample ("sm_clock_mhz"), written with the samples.
  virtual std::vector<std::pair<std::string, double>> sample_facts() const { return {}; }
  // How the timer measures (device, L2 flush bytes, clock source), written once.
  virtual std::vector<std::pair<std::string, std::string>> method() const { return {}; }
  // For a timer of another device (a GPU): that device's ceiling at `bytes_per_call`, measured
  // now. nullopt (the default) means the body runs on this CPU, whose rates the sampler measures.
  virtual std::optional<DeviceCeiling> ceiling(double /*bytes_per_call*/) { return std::nullopt; }
  // For a timer of another device: the seconds (read on `clock`, the runtime's wall clock) of
  // copying `bytes` from that device into this host's memory, measured now — what an honest
  // outputs accessor of a device body pays beyond a host copy (guard.deferred_output allows it).
  // nullopt (the default): the body's outputs are in host memory already.
  virtual std::optional<double> to_host_s(size_t /*bytes*/, double (* /*clock*/)()) {
    return std::nullopt;
  }
};

class SteadyClockTimer final : public Timer {
 public:
  std::string_view name() const override { return "cpu_steady_clock"; }
  void start() override { start_ = std::chrono::steady_clock::now(); }
  double stop() override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// The CUDA-event timer (src/bench/cuda; library loupe_cuda_timer, target loupe::cuda_timer, built
// only where loupe found a CUDA compiler). Per sample: start() queues a spin kernel that holds the
// stream until stop() (so host launch gaps stay out of the interval), writes a flush buffer of
// 2× the L2 size, records the start event; the body launches its calls on the legacy default
// stream (or any blocking stream); stop() records the end event on the legacy default stream —
// which waits for every blocking stream, a whole-device sync on the GPU side — releases the hold
// and reads the elapsed time. The SM clock is read per sample (NVML through dlopen when the
// driver has it, else a clock64 / globaltimer estimate: method() says which) and a sample whose
// clock fell below (1 − throttle_tolerance) × the highest clock seen, or that NVML reports as
// thermally or hardware throttled, is dropped. A body must not synchronise inside the timed
// region: the hold would stall until its 1 s timeout (the sample is then dropped, reason given).
// REQUIRES: the body's kernels were launched once before exec (CUDA loads modules lazily, and a
// first launch waits for an idle device, which a held stream is not).
struct CudaTimerOptions {
  bool flush_l2 = true;              // false: hot caches (state left in L2 by the previous call)
  double throttle_tolerance = 0.05;  // drop a sample whose clock fell by more than this fraction
};
// REQUIRES: a CUDA device (throws Error(kSubject) naming what is missing otherwise).
std::unique_ptr<Timer> make_cuda_event_timer(const CudaTimerOptions& options = {});
// Whether a CUDA device is present (false without a driver or device; never throws).
bool cuda_device_available();

namespace detail {
class BenchRunner;  // the sampler, inside libloupe

// exec's arguments with the input type erased.
struct ErasedBench {
  std::function<std::shared_ptr<void>(uint64_t seed)> make;
  std::vector<std::pair<std::string, std::function<void(void*)>>> variants;
  std::function<std::vector<NamedTensor>(const void*)> outputs;  // may be empty
};
}  // namespace detail

class BenchState {
 public:
  BenchState(const Point& point, detail::BenchRunner& runner) : point_(&point), runner_(&runner) {}

  const Point& point() const { return *point_; }
  // The point's parameters (NVBench's named axes): shorthands for point().get_*(name).
  int64_t get_int(std::string_view name) const { return point_->get_int(name); }
  double get_float(std::string_view name) const { return point_->get_float(name); }
  const std::string& get_string(std::string_view name) const { return point_->get_string(name); }
  bool get_bool(std::string_view name) const { return point_->get_bool(name); }

  // Marks this point as not measurable ("needs a GPU", "T not a multiple of 64"); exec then
  // does nothing and the observation carries the reason.
  void skip(std::string reason);
  bool skipped() const;

  // Work per call, for derived throughput (bytes/s, flop/s) in loupe's report, and for the
  // roofline guard: a variant faster than this machine can move the bytes or do the flops fails.
  void set_bytes_per_call(double bytes);
  void set_flops_per_call(double flops);
  // Replaces the steady-clock timer (before exec). Only loupe's own timers are used: the
  // CUDA-event timer (make_cuda_event_timer); any other is refused (guard.foreign_timer) and the
  // steady clock times the bench.
  void set_timer(std::unique_ptr<Timer> timer);
  // How loupe compares a verified timed call with the untimed run and with the baseline's
  // (default rms_ratio <= 1e-6). Before exec.
  void set_verify_tolerance(std::string metric, double bound);

  // Measures the variants (the first is the baseline every other one is compared with).
  // make(seed) builds one input set (untimed) and returns it by value; each variant runs one
  // call on a Work&; outputs (optional) names the output tensors of a call for verification.
  template <class Make>
  void exec(Make make,
            std::vector<
                std::pair<std::string, std::function<void(std::invoke_result_t<Make&, uint64_t>&)>>>
                variants,
            std::function<std::vector<NamedTensor>(const std::invoke_result_t<Make&, uint64_t>&)>
                outputs = {}) {
    using Work = std::invoke_result_t<Make&, uint64_t>;
    detail::ErasedBench erased;
    erased.make = [make](uint64_t seed) mutable -> std::shared_ptr<void> {
      return std::make_shared<Work>(make(seed));
    };
    for (auto& [name, call] : variants) {
      erased.variants.emplace_back(std::move(name), [call = std::move(call)](void* work) {
        call(*static_cast<Work*>(work));
      });
    }
    if (outputs) {
      erased.outputs = [outputs = std::move(outputs)](const void* work) {
        return outputs(*static_cast<const Work*>(work));
      };
    }
    exec_erased(std::move(erased));
  }

  // One body, no variants (it is called "body" in the observation).
  template <class Make, class Body>
  requires std::is_invocable_v < Body&, std::invoke_result_t<Make&, uint64_t>
  & > void exec(
          Make make, Body body,
          std::function<std::vector<NamedTensor>(const std::invoke_result_t<Make&, uint64_t>&)>
              outputs = {}) {
    using Work = std::invoke_result_t<Make&, uint64_t>;
    exec(std::move(make), {{"body", std::function<void(Work&)>(std::move(body))}},
         std::move(outputs));
  }

  void exec_erased(detail::ErasedBench bench);

 private:
  const Point* point_;
  detail::BenchRunner* runner_;
};

class BenchBuilder : public ProbeBuilder<BenchBuilder> {
 public:
  using ProbeBuilder::ProbeBuilder;
  // Declares the work at this point and calls state.exec (or state.skip). Required.
  BenchBuilder& body(std::function<void(BenchState&)> body) {
    definition_->bench_body = std::move(body);
    return *this;
  }
};

}  // namespace loupe

// LOUPE_BENCH(name).param(...).body([](loupe::BenchState& state) { ... state.exec(...); });
#define LOUPE_BENCH(name)                                                                     \
  [[maybe_unused]] static const ::loupe::detail::Registered LOUPE_PROBE_CONCAT(loupe_bench_,  \
                                                                               __COUNTER__) = \
      ::loupe::BenchBuilder(                                                                  \
          ::loupe::detail::register_probe(#name, ::loupe::ProbeKind::kBench, __FILE__, __LINE__))
