// kda/gpu/harness.cuh — what the parts of kda_gpu share: CUDA error checks, an owning device
// buffer, a small JSON writer and the result record every mode appends to.
// Thread-safety: single-threaded use only (the harness drives one device from one thread).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace kda::gpu {

// A failed CUDA call: the harness stops (exit 3) and names the call and where it was made.
class CudaFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) {
    throw CudaFailure(std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
                      cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
  }
}
#define KDA_CUDA_CHECK(call) ::kda::gpu::check_cuda((call), #call, __FILE__, __LINE__)

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    KDA_CUDA_CHECK(cudaMalloc(&data_, count * sizeof(T)));
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_) cudaFree(data_);
  }
  T* get() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  void upload(const std::vector<T>& host) {
    if (host.size() != count_) throw std::logic_error("DeviceBuffer::upload: size mismatch");
    KDA_CUDA_CHECK(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    KDA_CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  // Every byte 0xFF: a NaN in every fp32 element, so an unwritten output cannot pass a check.
  void poison() { KDA_CUDA_CHECK(cudaMemset(data_, 0xFF, bytes())); }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
  DeviceBuffer<T> buffer(host.size());
  buffer.upload(host);
  return buffer;
}

// A JSON object written field by field (keys are code constants; strings are escaped).
class JsonObject {
 public:
  JsonObject& add(const std::string& key, double value);
  JsonObject& add(const std::string& key, int64_t value);
  JsonObject& add(const std::string& key, int value) { return add(key, int64_t{value}); }
  JsonObject& add(const std::string& key, bool value);
  JsonObject& add(const std::string& key, const std::string& value);
  JsonObject& add(const std::string& key, const char* value) {
    return add(key, std::string(value));
  }
  JsonObject& add(const std::string& key, const std::vector<double>& values);
  JsonObject& add_raw(const std::string& key, const std::string& json);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(const std::string& name);
  std::string body_;
};

std::string json_array(const std::vector<std::string>& items);
std::string json_number(double value);

// One result line of any mode: its JSON record and whether it passed (checks and gated targets).
struct Result {
  std::string mode;  // "check", "cp_drift", "decode_timing", "prefill", "environment"
  std::string name;
  bool gated = false;
  bool passed = true;
  JsonObject record;
};

struct HarnessOptions {
  uint64_t seed = 0;
  int samples = 60;
  bool quick = false;
  // --time at these shapes only (empty: the default sweep). Lets a profiler such as ncu see the
  // launches of one serving shape without skipping through the others.
  std::vector<int> batches;
  std::vector<int> head_counts;   // --time and --prefill (H = HV there)
  std::vector<int> token_counts;  // --prefill at these T only (empty: 1024, 8192, 65536)
};

// The modes; each appends its results and prints one line per result as it goes.
void run_checks(const HarnessOptions& options, std::vector<Result>& results);
void run_cp_drift(const HarnessOptions& options, std::vector<Result>& results);
void run_decode_timing(const HarnessOptions& options, std::vector<Result>& results);
void run_prefill_check(const HarnessOptions& options, std::vector<Result>& results);

}  // namespace kda::gpu
