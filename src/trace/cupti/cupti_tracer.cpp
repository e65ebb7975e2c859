// CUPTI activity → Chrome trace (Kineto shape). See cupti_tracer.hpp.
#include "trace/cupti/cupti_tracer.hpp"

#include <cupti.h>
#include <cxxabi.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "loupe/error.hpp"

namespace loupe::trace::cupti {
namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr size_t kBufferAlignment = 8;

using detail::ApiRecord;
using detail::GpuKind;
using detail::GpuRecord;
using detail::SyncRecord;

struct Session {
  std::mutex mutex;  // guards the record vectors (CUPTI completes buffers on its own thread)
  std::vector<GpuRecord> gpu;
  std::vector<ApiRecord> api;
  std::vector<SyncRecord> sync;
  SessionCounts counts;
  std::unordered_map<const char*, std::string> kernel_names;  // CUPTI keeps names alive
  bool active = false;
};

Session& session() {
  static Session* instance = new Session;  // never destroyed: CUPTI may call back at exit
  return *instance;
}
bool& monotonic_timestamps() {
  static bool monotonic = false;
  return monotonic;
}
std::mutex& control_mutex() {
  static std::mutex mutex;
  return mutex;
}

void check(CUptiResult result, const char* call) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(result, &text);
  throw Error(ErrorCode::kSubject,
              std::string("CUPTI: ") + call + " failed: " + (text ? text : "unknown error"),
              "is libcupti from the same CUDA version as the driver? Another profiler (nsys, "
              "ncu) attached to the process also makes CUPTI refuse");
}
#define LOUPE_CUPTI_CHECK(call) check((call), #call)

uint64_t CUPTIAPI monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(now.tv_nsec);
}

std::string demangled(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                             std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlignment, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t,
                               size_t valid_size) {
  Session& state = session();
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
          auto [name, inserted] = state.kernel_names.try_emplace(kernel->name);
          if (inserted) name->second = demangled(kernel->name ? kernel->name : "kernel");
          state.gpu.push_back(
              {GpuKind::kKernel,
               kernel->deviceId,
               kernel->streamId,
               kernel->start,
               kernel->end,
               kernel->correlationId,
               0,
               name->second,
               {static_cast<uint32_t>(kernel->gridX), static_cast<uint32_t>(kernel->gridY),
                static_cast<uint32_t>(kernel->gridZ)},
               {static_cast<uint32_t>(kernel->blockX), static_cast<uint32_t>(kernel->blockY),
                static_cast<uint32_t>(kernel->blockZ)},
               kernel->registersPerThread});
          ++state.counts.kernels;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* copy = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
          static const char* const kKinds[] = {"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                               "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
          const uint32_t kind = copy->copyKind < 11 ? copy->copyKind : 0;
          state.gpu.push_back({GpuKind::kMemcpy,
                               copy->deviceId,
                               copy->streamId,
                               copy->start,
                               copy->end,
                               copy->correlationId,
                               copy->bytes,
                               std::string("Memcpy ") + kKinds[kind],
                               {},
                               {},
                               0});
          ++state.counts.memcpys;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* set = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
          state.gpu.push_back({GpuKind::kMemset,
                               set->deviceId,
                               set->streamId,
                               set->start,
                               set->end,
                               set->correlationId,
                               set->bytes,
                               "Memset",
                               {},
                               {},
                               0});
          ++state.counts.memsets;
          break;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME: {
          const auto* call = reinterpret_cast<const CUpti_ActivityAPI*>(record);
          state.api.push_back({call->processId, call->threadId, call->cbid, call->start, call->end,
                               call->correlationId});
          ++state.counts.runtime_calls;
          break;
        }
        case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
          const auto* wait = reinterpret_cast<const CUpti_ActivitySynchronization2*>(record);
          state.sync.push_back({static_cast<uint32_t>(wait->type), wait->streamId, wait->start,
                                wait->end, wait->correlationId});
          ++state.counts.synchronizations;
          break;
        }
        default:
          ++state.counts.other;
          break;
      }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped) == CUPTI_SUCCESS) {
      state.counts.dropped += dropped;
    }
  }
  std::free(buffer);
}

constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION};

SessionCounts stop_session() {
  std::lock_guard<std::mutex> control(control_mutex());
  Session& state = session();
  if (!state.active) {
    throw Error(ErrorCode::kUsage, "CUPTI tracing: stop without a session",
                "call loupe::trace::cupti::start() first");
  }
  LOUPE_CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  for (CUpti_ActivityKind kind : kKinds) LOUPE_CUPTI_CHECK(cuptiActivityDisable(kind));
  LOUPE_CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  state.active = false;
  std::lock_guard<std::mutex> lock(state.mutex);
  return state.counts;
}

std::string runtime_name(uint32_t callback) {
  const char* name = nullptr;
  if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, callback, &name) != CUPTI_SUCCESS ||
      name == nullptr) {
    return "cuda runtime " + std::to_string(callback);
  }
  std::string text(name);
  const size_t version = text.rfind("_v");  // cudaLaunchKernel_v7000 → cudaLaunchKernel
  if (version != std::string::npos && version + 2 < text.size() &&
      text.find_first_not_of("0123456789", version + 2) == std::string::npos) {
    text.resize(version);
  }
  return text;
}

void write_trace(const std::string& path, const SessionCounts& counts) {
  Session& state = session();
  std::string out;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    detail::Activity activity;
    activity.gpu = std::move(state.gpu);
    activity.api = std::move(state.api);
    activity.sync = std::move(state.sync);
    activity.counts = counts;
    activity.monotonic = monotonic_timestamps();
    state.gpu.clear();
    state.api.clear();
    state.sync.clear();
    out = detail::chrome_trace(activity, runtime_name);
  }
  std::ofstream file(path, std::ios::binary);
  file << out;
  if (!file) {
    throw Error(ErrorCode::kInput, "CUPTI tracing: cannot write " + path,
                "check that the directory exists and is writable");
  }
}

}  // namespace

void start() {
  std::lock_guard<std::mutex> control(control_mutex());
  Session& state = session();
  if (state.active) {
    throw Error(ErrorCode::kUsage, "CUPTI tracing: a session is already on",
                "stop it before starting another (CUPTI's activity API is process-wide)");
  }
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    state.gpu.clear();
    state.api.clear();
    state.sync.clear();
    state.counts = {};
  }
  // Once per process: CUPTI does not take a new timestamp source once records have been made.
  static bool registered = false;
  if (!registered) {
    // Without the callback (an older CUPTI) records keep CUPTI's own clock; the file says so.
    monotonic_timestamps() = cuptiActivityRegisterTimestampCallback(monotonic_ns) == CUPTI_SUCCESS;
    LOUPE_CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    registered = true;
  }
  for (CUpti_ActivityKind kind : kKinds) LOUPE_CUPTI_CHECK(cuptiActivityEnable(kind));
  state.active = true;
}

SessionCounts stop_and_write(const std::string& path) {
  const SessionCounts counts = stop_session();
  write_trace(path, counts);
  return counts;
}

SessionCounts stop_and_discard() {
  const SessionCounts counts = stop_session();
  Session& state = session();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.gpu.clear();
  state.api.clear();
  state.sync.clear();
  return counts;
}

bool active() {
  std::lock_guard<std::mutex> control(control_mutex());
  return session().active;
}

}  // namespace loupe::trace::cupti
