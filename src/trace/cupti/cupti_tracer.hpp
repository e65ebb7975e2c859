// src/trace/cupti/cupti_tracer.hpp — GPU activity (kernels, memcpy, memset, synchronisation and the
// CUDA runtime calls that caused them) recorded through CUPTI and written as a Chrome trace in the
// PyTorch-profiler (Kineto) shape that src/trace/import reads: GPU work on tracks (pid = device,
// tid = stream) whose category makes them GPU streams, each runtime call on its CPU thread, and an
// "ac2g" flow from the launching call to the GPU work it caused (CUPTI's correlation id).
// Timestamps are CLOCK_MONOTONIC (CUPTI's timestamp callback), the clock loupe's recorder uses.
//
// Two ways in: link loupe_cupti and call start()/stop_and_write(); or trace any CUDA program
// without relinking it: CUDA_INJECTION64_PATH=libloupe_cupti_inject.so LOUPE_CUPTI_TRACE=out.json.
// Thread-safety: start/stop are serialised; CUPTI delivers buffers on its own thread.
// Ownership: one tracing session per process (CUPTI's activity API is process-wide).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace loupe::trace::cupti {

struct SessionCounts {
  uint64_t kernels = 0, memcpys = 0, memsets = 0, synchronizations = 0, runtime_calls = 0;
  uint64_t dropped = 0;  // records CUPTI dropped (buffers full), written into the trace's stats
  uint64_t other = 0;    // records of kinds loupe does not read
};

// Enables activity recording. Throws loupe::Error(kSubject) naming the CUPTI call that failed, or
// kUsage when a session is already on.
void start();
// Flushes, disables, writes the Chrome trace to `path` and returns what was recorded. Throws
// loupe::Error(kInput) when the file cannot be written, kUsage when no session is on.
SessionCounts stop_and_write(const std::string& path);
// Flushes and disables without writing (an overhead measurement's "traced" arm needs no file).
SessionCounts stop_and_discard();
bool active();

namespace detail {

// What a session recorded, in the units CUPTI gives (ns on the session's clock).
enum class GpuKind : uint8_t { kKernel, kMemcpy, kMemset };
struct GpuRecord {
  GpuKind kind = GpuKind::kKernel;
  uint32_t device = 0, stream = 0;
  uint64_t start = 0, end = 0, correlation = 0, bytes = 0;
  std::string name;
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  uint32_t registers = 0;
};
struct ApiRecord {
  uint32_t process = 0, thread = 0, callback = 0;
  uint64_t start = 0, end = 0, correlation = 0;
};
struct SyncRecord {
  uint32_t type = 0, stream = 0;  // type: CUpti_ActivitySynchronizationType
  uint64_t start = 0, end = 0, correlation = 0;
};
struct Activity {
  std::vector<GpuRecord> gpu;
  std::vector<ApiRecord> api;
  std::vector<SyncRecord> sync;
  SessionCounts counts;
  bool monotonic = true;  // timestamps on CLOCK_MONOTONIC (else CUPTI's own clock)
};

// The Chrome trace (Kineto shape) of `activity`; `runtime_name` names a runtime callback id.
// Pure: no CUPTI call, so the format is tested without a GPU (tests/unit/kda_cuda).
std::string chrome_trace(const Activity& activity,
                         const std::function<std::string(uint32_t)>& runtime_name);

}  // namespace detail
}  // namespace loupe::trace::cupti
