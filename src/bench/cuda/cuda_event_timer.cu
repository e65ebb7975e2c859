// The CUDA-event timer behind loupe::Timer (include/loupe/bench.hpp, make_cuda_event_timer).
// Method (reference/measurement.md): hold the stream, flush L2, start event, the body's launches,
// end event on the legacy default stream, release, read; the SM clock per sample by NVML (loaded
// with dlopen, so nothing links the driver library) or by a clock64 / globaltimer spin.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loupe/bench.hpp"
#include "loupe/error.hpp"

namespace loupe {
namespace {

constexpr int64_t kHoldTimeoutNs = 1'000'000'000;  // a hold never outlives 1 s (no deadlock)
constexpr int64_t kClockSpinNs = 20'000;           // the clock64 estimate spins 20 µs

void check_cuda(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    throw Error(ErrorCode::kSubject,
                std::string("CUDA-event timer: ") + call + " failed: " + cudaGetErrorName(status) +
                    " (" + cudaGetErrorString(status) + ")",
                "run the bench alone on the device; check `nvidia-smi`");
  }
}
#define LOUPE_CUDA_TIMER_CHECK(call) check_cuda((call), #call)

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t value;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(value));
  return value;
}

// Spins until the host sets *release_flag (mapped host memory), or the timeout passes.
__global__ void hold_stream_kernel(const volatile int* release_flag, int64_t timeout_ns,
                                   int* timed_out_global) {
  const uint64_t start = global_timer_ns();
  while (*release_flag == 0) {
    if (static_cast<int64_t>(global_timer_ns() - start) > timeout_ns) {
      *timed_out_global = 1;
      return;
    }
  }
}

// SM cycles per ns over a short spin: the clock of the SM this thread runs on, in MHz.
__global__ void sm_clock_kernel(int64_t spin_ns, double* mhz_global) {
  const uint64_t start_ns = global_timer_ns();
  const long long start_cycles = clock64();
  uint64_t now_ns = start_ns;
  while (static_cast<int64_t>(now_ns - start_ns) < spin_ns) now_ns = global_timer_ns();
  const long long cycles = clock64() - start_cycles;
  *mhz_global = 1e3 * static_cast<double>(cycles) / static_cast<double>(now_ns - start_ns);
}

// The few NVML entry points the timer needs, declared here (nvml.h is not in every toolkit).
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
constexpr int kNvmlClockSm = 1;
// Throttle reasons that mean the clock was lowered under the sample: software power cap is left
// out (a bandwidth-bound kernel runs at the cap without losing clock), the clock check catches it.
constexpr unsigned long long kNvmlThrottleHwSlowdown = 0x8;
constexpr unsigned long long kNvmlThrottleSwThermal = 0x20;
constexpr unsigned long long kNvmlThrottleHwThermal = 0x40;
constexpr unsigned long long kNvmlThrottleHwPowerBrake = 0x80;
constexpr unsigned long long kThrottleMask = kNvmlThrottleHwSlowdown | kNvmlThrottleSwThermal |
                                             kNvmlThrottleHwThermal | kNvmlThrottleHwPowerBrake;

class Nvml {
 public:
  // Loads libnvidia-ml and finds the device with `pci_bus_id`; usable() says whether it worked.
  explicit Nvml(const std::string& pci_bus_id) {
    library_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library_ == nullptr) return;
    auto init = reinterpret_cast<NvmlReturn (*)()>(dlsym(library_, "nvmlInit_v2"));
    auto by_bus = reinterpret_cast<NvmlReturn (*)(const char*, NvmlDevice*)>(
        dlsym(library_, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock_info_ = reinterpret_cast<NvmlReturn (*)(NvmlDevice, int, unsigned*)>(
        dlsym(library_, "nvmlDeviceGetClockInfo"));
    reasons_ = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned long long*)>(
        dlsym(library_, "nvmlDeviceGetCurrentClocksEventReasons"));
    if (reasons_ == nullptr) {
      reasons_ = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned long long*)>(
          dlsym(library_, "nvmlDeviceGetCurrentClocksThrottleReasons"));
    }
    if (!init || !by_bus || !clock_info_ || init() != 0) return;
    usable_ = by_bus(pci_bus_id.c_str(), &device_) == 0;
    unsigned mhz = 0;
    usable_ = usable_ && clock_info_(device_, kNvmlClockSm, &mhz) == 0 && mhz > 0;
  }
  ~Nvml() {
    if (library_ != nullptr) dlclose(library_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool usable() const { return usable_; }
  double sm_clock_mhz() const {
    unsigned mhz = 0;
    return clock_info_(device_, kNvmlClockSm, &mhz) == 0 ? mhz : 0.0;
  }
  unsigned long long throttle_reasons() const {
    unsigned long long reasons = 0;
    return reasons_ != nullptr && reasons_(device_, &reasons) == 0 ? reasons : 0;
  }

 private:
  void* library_ = nullptr;
  bool usable_ = false;
  NvmlDevice device_ = nullptr;
  NvmlReturn (*clock_info_)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*reasons_)(NvmlDevice, unsigned long long*) = nullptr;
};

class CudaEventTimer final : public Timer {
 public:
  explicit CudaEventTimer(const CudaTimerOptions& options) : options_(options) {
    int device = 0;
    LOUPE_CUDA_TIMER_CHECK(cudaGetDevice(&device));
    cudaDeviceProp properties{};
    LOUPE_CUDA_TIMER_CHECK(cudaGetDeviceProperties(&properties, device));
    device_name_ = properties.name;
    l2_bytes_ = static_cast<size_t>(properties.l2CacheSize);
    char bus_id[32] = {};
    LOUPE_CUDA_TIMER_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device));
    nvml_ = std::make_unique<Nvml>(bus_id);
    if (options_.flush_l2) {
      flush_bytes_ = 2 * std::max<size_t>(l2_bytes_, size_t{1} << 20);
      LOUPE_CUDA_TIMER_CHECK(cudaMalloc(&flush_buffer_, flush_bytes_));
    }
    LOUPE_CUDA_TIMER_CHECK(cudaHostAlloc(&flag_host_, sizeof(int), cudaHostAllocMapped));
    LOUPE_CUDA_TIMER_CHECK(
        cudaHostGetDevicePointer(&flag_device_, const_cast<int*>(flag_host_), 0));
    LOUPE_CUDA_TIMER_CHECK(cudaMalloc(&timed_out_device_, sizeof(int)));
    LOUPE_CUDA_TIMER_CHECK(cudaMalloc(&clock_mhz_device_, sizeof(double)));
    LOUPE_CUDA_TIMER_CHECK(cudaEventCreate(&start_));
    LOUPE_CUDA_TIMER_CHECK(cudaEventCreate(&end_));
    // Load the timer's own kernels now: with CUDA's lazy module loading, a first launch waits for
    // the device to go idle, which a held stream never does (until the hold times out).
    *flag_host_ = 1;
    hold_stream_kernel<<<1, 1, 0, cudaStreamLegacy>>>(flag_device_, 0, timed_out_device_);
    sm_clock_kernel<<<1, 1, 0, cudaStreamLegacy>>>(1, clock_mhz_device_);
    LOUPE_CUDA_TIMER_CHECK(cudaGetLastError());
    LOUPE_CUDA_TIMER_CHECK(cudaDeviceSynchronize());
  }
  ~CudaEventTimer() override {
    // Release a hold a caller abandoned (an exception between start and stop) before freeing.
    if (flag_host_ != nullptr) *flag_host_ = 1;
    cudaDeviceSynchronize();
    cudaEventDestroy(start_);
    cudaEventDestroy(end_);
    cudaFree(flush_buffer_);
    cudaFree(timed_out_device_);
    cudaFree(clock_mhz_device_);
    cudaFreeHost(const_cast<int*>(flag_host_));
  }

  std::string_view name() const override { return "cuda_events"; }

  void start() override {
    const double clock_before = nvml_->usable() ? nvml_->sm_clock_mhz() : 0.0;
    reasons_ = nvml_->usable() ? nvml_->throttle_reasons() : 0;
    LOUPE_CUDA_TIMER_CHECK(cudaMemsetAsync(timed_out_device_, 0, sizeof(int), cudaStreamLegacy));
    *flag_host_ = 0;
    __sync_synchronize();
    hold_stream_kernel<<<1, 1, 0, cudaStreamLegacy>>>(flag_device_, kHoldTimeoutNs,
                                                      timed_out_device_);
    LOUPE_CUDA_TIMER_CHECK(cudaGetLastError());
    if (options_.flush_l2) {
      // A different byte each sample: the write reaches memory, whatever the cache kept.
      LOUPE_CUDA_TIMER_CHECK(
          cudaMemsetAsync(flush_buffer_, ++flush_value_ & 0xFF, flush_bytes_, cudaStreamLegacy));
    }
    LOUPE_CUDA_TIMER_CHECK(cudaEventRecord(start_, cudaStreamLegacy));
    clock_before_mhz_ = clock_before;
  }

  double stop() override {
    LOUPE_CUDA_TIMER_CHECK(cudaEventRecord(end_, cudaStreamLegacy));
    __sync_synchronize();
    *flag_host_ = 1;
    LOUPE_CUDA_TIMER_CHECK(cudaEventSynchronize(end_));
    float milliseconds = 0;
    LOUPE_CUDA_TIMER_CHECK(cudaEventElapsedTime(&milliseconds, start_, end_));
    int timed_out = 0;
    LOUPE_CUDA_TIMER_CHECK(
        cudaMemcpy(&timed_out, timed_out_device_, sizeof(int), cudaMemcpyDeviceToHost));
    hold_timed_out_ = timed_out != 0;
    if (nvml_->usable()) {
      sm_clock_mhz_ = std::min(clock_before_mhz_, nvml_->sm_clock_mhz());
      reasons_ |= nvml_->throttle_reasons();
    } else {
      sm_clock_kernel<<<1, 1, 0, cudaStreamLegacy>>>(kClockSpinNs, clock_mhz_device_);
      LOUPE_CUDA_TIMER_CHECK(cudaGetLastError());
      LOUPE_CUDA_TIMER_CHECK(
          cudaMemcpy(&sm_clock_mhz_, clock_mhz_device_, sizeof(double), cudaMemcpyDeviceToHost));
    }
    highest_clock_mhz_ = std::max(highest_clock_mhz_, sm_clock_mhz_);
    return 1e-3 * milliseconds;
  }

  std::string drop_reason() const override {
    if (hold_timed_out_) {
      return "stream hold timed out: the body synchronised with the device, or enqueueing took "
             "over 1 s";
    }
    if ((reasons_ & kThrottleMask) != 0) return "nvml reports thermal or hardware slowdown";
    if (sm_clock_mhz_ < (1.0 - options_.throttle_tolerance) * highest_clock_mhz_) {
      return "sm clock below " + std::to_string(1.0 - options_.throttle_tolerance) +
             " x the highest seen";
    }
    return {};
  }

  std::vector<std::pair<std::string, double>> sample_facts() const override {
    return {{"sm_clock_mhz", sm_clock_mhz_}, {"throttle_reasons", static_cast<double>(reasons_)}};
  }

  std::vector<std::pair<std::string, std::string>> method() const override {
    return {{"device", device_name_},
            {"l2_bytes", std::to_string(l2_bytes_)},
            {"l2_flush_bytes", std::to_string(flush_bytes_)},
            {"end_event", "legacy default stream (waits for every blocking stream)"},
            {"launch_gaps", "excluded: launches queue behind a stream hold"},
            {"sm_clock_source",
             nvml_->usable() ? "nvml (min of start and end)" : "clock64 over globaltimer, 20 us"},
            {"throttle_tolerance", std::to_string(options_.throttle_tolerance)}};
  }

  // The GPU's streaming rate at the call's working set: device-to-device copies of half the
  // declared bytes (a copy reads and writes each byte once), 1 MiB to 512 MiB, repeated back to
  // back until 64 MiB are copied (so a small copy's launch latency is amortised, as a sample's
  // back-to-back calls are), best of 5 timed by events. Margin 4: a hot working set smaller than
  // the copy can stream from L2.
  std::optional<DeviceCeiling> ceiling(double bytes_per_call) override {
    constexpr size_t kMin = size_t{1} << 20, kMax = size_t{512} << 20;
    const size_t half = std::clamp(static_cast<size_t>(bytes_per_call / 2) / 256 * 256, kMin, kMax);
    DeviceCeiling ceiling;
    ceiling.device = device_name_;
    ceiling.margin = 4;
    void* source = nullptr;
    void* target = nullptr;
    if (cudaMalloc(&source, half) != cudaSuccess || cudaMalloc(&target, half) != cudaSuccess) {
      cudaGetLastError();  // clear the failed allocation's error
      cudaFree(source);
      ceiling.method = "not measured: cudaMalloc of 2 x " + std::to_string(half) +
                       " bytes failed (the guard then does not judge the speed)";
      return ceiling;
    }
    const size_t copies = std::max<size_t>(1, (size_t{64} << 20) / half);
    double best_s = 0;
    LOUPE_CUDA_TIMER_CHECK(cudaMemsetAsync(source, 1, half, cudaStreamLegacy));
    for (int round = 0; round < 6; ++round) {  // the first is a warm-up
      LOUPE_CUDA_TIMER_CHECK(cudaEventRecord(start_, cudaStreamLegacy));
      for (size_t copy = 0; copy < copies; ++copy) {
        LOUPE_CUDA_TIMER_CHECK(
            cudaMemcpyAsync(target, source, half, cudaMemcpyDeviceToDevice, cudaStreamLegacy));
      }
      LOUPE_CUDA_TIMER_CHECK(cudaEventRecord(end_, cudaStreamLegacy));
      LOUPE_CUDA_TIMER_CHECK(cudaEventSynchronize(end_));
      float milliseconds = 0;
      LOUPE_CUDA_TIMER_CHECK(cudaEventElapsedTime(&milliseconds, start_, end_));
      const double seconds = 1e-3 * milliseconds / static_cast<double>(copies);
      if (round > 0 && seconds > 0 && (best_s == 0 || seconds < best_s)) best_s = seconds;
    }
    cudaFree(source);
    cudaFree(target);
    ceiling.bytes_per_s = best_s > 0 ? 2.0 * static_cast<double>(half) / best_s : 0.0;
    ceiling.method = "best of 5 runs of " + std::to_string(copies) +
                     " back-to-back device-to-device copies of " + std::to_string(half) +
                     " bytes (read + write), CUDA events";
    return ceiling;
  }

  // A device-to-host cudaMemcpy of `bytes` into pageable host memory (what `tensor.cpu()` and most
  // accessors do; a pinned staging buffer is faster, so this allows at least what it costs):
  // the median of 3 after a warm-up, timed on the host by `clock` (the runtime's), since the
  // driver's staging and the synchronisation are part of what an accessor pays.
  std::optional<double> to_host_s(size_t bytes, double (*clock)()) override {
    if (bytes == 0) return 0.0;
    void* source = nullptr;
    if (cudaMalloc(&source, bytes) != cudaSuccess) {
      cudaGetLastError();  // clear the failed allocation's error
      return std::nullopt;
    }
    std::vector<unsigned char> host(bytes, 1);
    LOUPE_CUDA_TIMER_CHECK(cudaMemsetAsync(source, 1, bytes, cudaStreamLegacy));
    LOUPE_CUDA_TIMER_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    std::vector<double> seconds;
    for (int round = 0; round < 4; ++round) {  // the first is a warm-up
      const double start = clock();
      LOUPE_CUDA_TIMER_CHECK(cudaMemcpy(host.data(), source, bytes, cudaMemcpyDeviceToHost));
      const double end = clock();
      if (round > 0) seconds.push_back(end - start);
    }
    cudaFree(source);
    std::sort(seconds.begin(), seconds.end());
    return seconds[seconds.size() / 2];
  }

 private:
  CudaTimerOptions options_;
  std::string device_name_;
  size_t l2_bytes_ = 0;
  size_t flush_bytes_ = 0;
  void* flush_buffer_ = nullptr;
  unsigned flush_value_ = 0;
  std::unique_ptr<Nvml> nvml_;
  volatile int* flag_host_ = nullptr;
  int* flag_device_ = nullptr;
  int* timed_out_device_ = nullptr;
  double* clock_mhz_device_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t end_ = nullptr;
  bool hold_timed_out_ = false;
  unsigned long long reasons_ = 0;
  double clock_before_mhz_ = 0;
  double sm_clock_mhz_ = 0;
  double highest_clock_mhz_ = 0;
};

}  // namespace

bool cuda_device_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::unique_ptr<Timer> make_cuda_event_timer(const CudaTimerOptions& options) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    throw Error(ErrorCode::kSubject,
                std::string("CUDA-event timer: no CUDA device (cudaGetDeviceCount: ") +
                    cudaGetErrorName(status) + ", " + std::to_string(count) + " devices)",
                "run on a machine with an NVIDIA GPU, or skip the point with state.skip(...)");
  }
  return std::make_unique<CudaEventTimer>(options);
}

}  // namespace loupe
