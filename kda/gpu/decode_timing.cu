// kda/gpu/decode_timing.cu — mode --time: tiled_v_decode against merged_v_decode with CUDA events.
// Method (reference/measurement.md): the two kernels interleave (ABAB, then BABA) in one process;
// the samples of a block queue behind a kernel that holds the stream until the host has enqueued
// them all, so launch gaps stay out; every end event is recorded on the legacy default stream,
// which waits for all work of every blocking stream — a whole-device sync on the GPU side,
// without a host round trip inside the measured interval (non-blocking streams would escape it).
// Hot: one state buffer. Cold: the state rotates over R ≥ 2 replicas covering ≥ 2× the L2, so
// each call reads its state from HBM as a model with many layers does. Graph: a CUDA graph of G
// calls (cold: G ≥ R, every replica once per replay), time per replay / G.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kda/gpu/harness.cuh"
#include "kda/gpu/reference.hpp"
#include "kda/kernels/cuda/decode.cuh"

namespace kda::gpu {
namespace {

namespace cuda = kda::kernels::cuda;

constexpr int kBlockSamples = 20;  // sample pairs queued behind one hold
constexpr int kWarmupCalls = 5;
constexpr int64_t kHoldTimeoutNs = 2'000'000'000;  // a hold never outlives 2 s (no deadlock)
constexpr double kVerdictThreshold = 0.02;
constexpr int kBootstrapResamples = 2000;

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t value;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(value));
  return value;
}

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

__global__ void fill_uniform_kernel(float* values_global, int64_t count, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    values_global[i] = static_cast<float>(z >> 40) * 0x1.0p-23f - 1.0f;  // [-1, 1)
  }
}

using Launcher = cudaError_t (*)(const cuda::DecodeProblem&, cudaStream_t);

struct Kernel {
  const char* name;
  Launcher launch;
};
const Kernel kKernels[2] = {{"tiled", cuda::launch_tiled_v_decode},
                            {"merged", cuda::launch_merged_v_decode}};

class StreamHold {
 public:
  StreamHold() {
    KDA_CUDA_CHECK(cudaHostAlloc(&flag_host_, sizeof(int), cudaHostAllocMapped));
    KDA_CUDA_CHECK(cudaHostGetDevicePointer(&flag_device_, const_cast<int*>(flag_host_), 0));
    KDA_CUDA_CHECK(cudaMalloc(&timed_out_, sizeof(int)));
    KDA_CUDA_CHECK(cudaMemset(timed_out_, 0, sizeof(int)));
  }
  ~StreamHold() {
    cudaFreeHost(const_cast<int*>(flag_host_));
    cudaFree(timed_out_);
  }
  void hold() {
    *flag_host_ = 0;
    hold_stream_kernel<<<1, 1>>>(flag_device_, kHoldTimeoutNs, timed_out_);
    KDA_CUDA_CHECK(cudaGetLastError());
  }
  void release() {
    __sync_synchronize();
    *flag_host_ = 1;
  }
  bool ever_timed_out() const {
    int value = 0;
    KDA_CUDA_CHECK(cudaMemcpy(&value, timed_out_, sizeof(int), cudaMemcpyDeviceToHost));
    return value != 0;
  }

 private:
  volatile int* flag_host_ = nullptr;
  int* flag_device_ = nullptr;
  int* timed_out_ = nullptr;
};

// Interleaved samples of two enqueue functions (each enqueues one sample's work on stream 0).
void sample_interleaved(StreamHold& hold, const std::function<void()>& enqueue_a,
                        const std::function<void()>& enqueue_b, int samples,
                        std::vector<double>& ms_a, std::vector<double>& ms_b) {
  for (int i = 0; i < kWarmupCalls; ++i) enqueue_a(), enqueue_b();
  KDA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> events(4 * kBlockSamples);
  for (auto& event : events) KDA_CUDA_CHECK(cudaEventCreate(&event));
  for (int done = 0; done < samples; done += kBlockSamples) {
    const int block = std::min(kBlockSamples, samples - done);
    hold.hold();
    for (int i = 0; i < block; ++i) {
      const bool a_first = (done + i) % 2 == 0;
      for (int turn = 0; turn < 2; ++turn) {
        const bool is_a = (turn == 0) == a_first;
        cudaEvent_t start = events[4 * i + 2 * (is_a ? 0 : 1)];
        cudaEvent_t stop = events[4 * i + 2 * (is_a ? 0 : 1) + 1];
        KDA_CUDA_CHECK(cudaEventRecord(start, cudaStreamLegacy));
        (is_a ? enqueue_a : enqueue_b)();
        KDA_CUDA_CHECK(cudaEventRecord(stop, cudaStreamLegacy));
      }
    }
    hold.release();
    KDA_CUDA_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < block; ++i) {
      float a = 0, b = 0;
      KDA_CUDA_CHECK(cudaEventElapsedTime(&a, events[4 * i], events[4 * i + 1]));
      KDA_CUDA_CHECK(cudaEventElapsedTime(&b, events[4 * i + 2], events[4 * i + 3]));
      ms_a.push_back(a);
      ms_b.push_back(b);
    }
  }
  for (auto& event : events) KDA_CUDA_CHECK(cudaEventDestroy(event));
}

double quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double position = q * (values.size() - 1);
  const size_t below = static_cast<size_t>(position);
  const size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (position - below) * (values[above] - values[below]);
}

struct RatioVerdict {
  double ratio, low, high;
  std::string verdict;
};

// B/A of medians with a 95 % bootstrap interval; DESIGN.md's rule with threshold 2 %.
RatioVerdict compare(const std::vector<double>& a, const std::vector<double>& b, uint64_t seed) {
  Random random(seed);
  std::vector<double> ratios, resample_a(a.size()), resample_b(b.size());
  for (int i = 0; i < kBootstrapResamples; ++i) {
    for (auto& value : resample_a) value = a[random.next() % a.size()];
    for (auto& value : resample_b) value = b[random.next() % b.size()];
    ratios.push_back(quantile(resample_b, 0.5) / quantile(resample_a, 0.5));
  }
  RatioVerdict result;
  result.ratio = quantile(b, 0.5) / quantile(a, 0.5);
  result.low = quantile(ratios, 0.025);
  result.high = quantile(ratios, 0.975);
  const double t = kVerdictThreshold;
  if (result.low >= 1 - t && result.high <= 1 + t) {
    result.verdict = "SAME";
  } else if (result.low > 1 && result.ratio > 1 + t) {
    result.verdict = "SLOWER";
  } else if (result.high < 1 && result.ratio < 1 - t) {
    result.verdict = "FASTER";
  } else {
    result.verdict = "AMBIGUOUS";
  }
  return result;
}

struct Measurement {
  std::string kernel, mode;  // mode: stream_hot, stream_cold, graph_hot, graph_cold
  int calls_per_sample = 1;
  std::vector<double> us_per_call;
};

double median_us(const Measurement& measurement) { return quantile(measurement.us_per_call, 0.5); }

void time_point(int batch, int heads, const HarnessOptions& options, const cudaDeviceProp& device,
                StreamHold& hold, std::vector<Result>& results) {
  Random random(options.seed * 7919 + batch * 131 + heads);
  const int value_heads = heads;
  const DecodeInputs inputs = random_decode_inputs(batch, heads, value_heads, batch, random);
  auto as_bf16 = [](DeviceBuffer<uint16_t>& buffer) {
    return reinterpret_cast<__nv_bfloat16*>(buffer.get());
  };
  auto q = to_device(inputs.q), k = to_device(inputs.k), v = to_device(inputs.v);
  auto g_raw = to_device(inputs.g_raw), b_raw = to_device(inputs.b_raw);
  auto a_log = to_device(inputs.a_log), dt_bias = to_device(inputs.dt_bias);
  auto indices = to_device(inputs.state_indices);
  DeviceBuffer<float> o(int64_t{batch} * value_heads * kValueDim);
  const int64_t state_count = int64_t{batch} * value_heads * kKeyDim * kValueDim;
  const double state_bytes = state_count * 4.0;
  const int replicas =
      std::max<int>(2, static_cast<int>(std::ceil(2.0 * device.l2CacheSize / state_bytes)));
  DeviceBuffer<float> states(replicas * state_count);
  fill_uniform_kernel<<<4 * device.multiProcessorCount, 256>>>(states.get(), states.size(),
                                                               options.seed + batch + heads);
  KDA_CUDA_CHECK(cudaGetLastError());
  cuda::DecodeProblem problem;
  problem.q_global = as_bf16(q), problem.k_global = as_bf16(k), problem.v_global = as_bf16(v);
  problem.g_raw_global = as_bf16(g_raw), problem.b_raw_global = as_bf16(b_raw);
  problem.a_log_global = a_log.get(), problem.dt_bias_global = dt_bias.get();
  problem.state_indices_global = indices.get(), problem.o_global = o.get();
  problem.num_sequences = batch, problem.num_heads = heads, problem.num_value_heads = value_heads;
  problem.num_states = batch, problem.key_dim = kKeyDim, problem.value_dim = kValueDim;
  auto problem_on = [&](int replica) {
    cuda::DecodeProblem on = problem;
    on.state_global = states.get() + replica * state_count;
    return on;
  };

  std::vector<Measurement> measurements;
  int rotation = 0;  // shared by both kernels: consecutive calls never reuse a replica
  for (const bool cold : {false, true}) {
    Measurement a{kKernels[0].name, cold ? "stream_cold" : "stream_hot", 1, {}};
    Measurement b{kKernels[1].name, a.mode, 1, {}};
    auto enqueue = [&](const Kernel kernel) {
      return [&, cold, kernel] {
        const int replica = cold ? rotation++ % replicas : 0;
        KDA_CUDA_CHECK(kernel.launch(problem_on(replica), cudaStreamLegacy));
      };
    };
    std::vector<double> ms_a, ms_b;
    sample_interleaved(hold, enqueue(kKernels[0]), enqueue(kKernels[1]), options.samples, ms_a,
                       ms_b);
    for (double ms : ms_a) a.us_per_call.push_back(ms * 1e3);
    for (double ms : ms_b) b.us_per_call.push_back(ms * 1e3);
    measurements.push_back(std::move(a));
    measurements.push_back(std::move(b));
  }
  const int graph_calls = std::max(8, replicas);
  cudaStream_t capture_stream;
  KDA_CUDA_CHECK(cudaStreamCreateWithFlags(&capture_stream, cudaStreamNonBlocking));
  for (const bool cold : {false, true}) {
    cudaGraphExec_t graphs[2];
    for (int kernel = 0; kernel < 2; ++kernel) {
      cudaGraph_t graph;
      KDA_CUDA_CHECK(cudaStreamBeginCapture(capture_stream, cudaStreamCaptureModeThreadLocal));
      for (int call = 0; call < graph_calls; ++call) {
        KDA_CUDA_CHECK(
            kKernels[kernel].launch(problem_on(cold ? call % replicas : 0), capture_stream));
      }
      KDA_CUDA_CHECK(cudaStreamEndCapture(capture_stream, &graph));
      KDA_CUDA_CHECK(cudaGraphInstantiate(&graphs[kernel], graph, 0));
      KDA_CUDA_CHECK(cudaGraphDestroy(graph));
    }
    std::vector<double> ms_a, ms_b;
    sample_interleaved(
        hold, [&] { KDA_CUDA_CHECK(cudaGraphLaunch(graphs[0], cudaStreamLegacy)); },
        [&] { KDA_CUDA_CHECK(cudaGraphLaunch(graphs[1], cudaStreamLegacy)); }, options.samples,
        ms_a, ms_b);
    const std::string mode = cold ? "graph_cold" : "graph_hot";
    Measurement a{kKernels[0].name, mode, graph_calls, {}},
        b{kKernels[1].name, mode, graph_calls, {}};
    for (double ms : ms_a) a.us_per_call.push_back(ms * 1e3 / graph_calls);
    for (double ms : ms_b) b.us_per_call.push_back(ms * 1e3 / graph_calls);
    measurements.push_back(std::move(a));
    measurements.push_back(std::move(b));
    for (auto& graph : graphs) KDA_CUDA_CHECK(cudaGraphExecDestroy(graph));
  }
  KDA_CUDA_CHECK(cudaStreamDestroy(capture_stream));

  // A state read back must be finite: a kernel that stopped writing would leave NaN/garbage.
  const auto o_host = o.download();
  bool finite = true;
  for (float value : o_host) finite = finite && std::isfinite(value);

  for (size_t pair = 0; pair < measurements.size(); pair += 2) {
    const Measurement& tiled = measurements[pair];
    const Measurement& merged = measurements[pair + 1];
    const RatioVerdict verdict = compare(tiled.us_per_call, merged.us_per_call,
                                         options.seed + batch * 1009 + heads * 17 + pair);
    Result result;
    result.mode = "decode_timing";
    result.name = "B=" + std::to_string(batch) + " H=" + std::to_string(heads) + " " + tiled.mode;
    JsonObject& record = result.record;
    record.add("batch", batch)
        .add("H", heads)
        .add("HV", value_heads)
        .add("mode", tiled.mode)
        .add("calls_per_sample", tiled.calls_per_sample)
        .add("state_replicas", tiled.mode.find("cold") != std::string::npos ? replicas : 1)
        .add("state_bytes_per_call", state_bytes * 2);
    for (const Measurement* measurement : {&tiled, &merged}) {
      const double median = median_us(*measurement);
      JsonObject stats;
      stats.add("median_us", median)
          .add("p10_us", quantile(measurement->us_per_call, 0.1))
          .add("p90_us", quantile(measurement->us_per_call, 0.9))
          .add("min_us", quantile(measurement->us_per_call, 0.0))
          .add("samples", static_cast<int64_t>(measurement->us_per_call.size()))
          .add("state_tb_per_s", state_bytes * 2 / (median * 1e-6) / 1e12)
          .add("us_per_call", measurement->us_per_call);
      record.add_raw(measurement->kernel, stats.str());
    }
    record.add("ratio_merged_over_tiled", verdict.ratio)
        .add("ratio_ci95_low", verdict.low)
        .add("ratio_ci95_high", verdict.high)
        .add("verdict_merged_vs_tiled", verdict.verdict)
        .add("verdict_threshold", kVerdictThreshold)
        .add("outputs_finite", finite);
    result.gated = true;
    result.passed = finite;
    std::printf(
        "time B=%-3d H=%-2d %-11s tiled %9.2f us  merged %9.2f us  (%.2f TB/s)  "
        "merged/tiled %.3f [%.3f, %.3f] %s\n",
        batch, heads, tiled.mode.c_str(), median_us(tiled), median_us(merged),
        state_bytes * 2 / (median_us(merged) * 1e-6) / 1e12, verdict.ratio, verdict.low,
        verdict.high, verdict.verdict.c_str());
    results.push_back(std::move(result));
  }
}

void time_copy_bandwidth(std::vector<Result>& results) {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer<char> source(bytes), target(bytes);
  KDA_CUDA_CHECK(cudaMemset(source.get(), 1, bytes));
  cudaEvent_t start, stop;
  KDA_CUDA_CHECK(cudaEventCreate(&start));
  KDA_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> tb_per_s;
  for (int i = 0; i < 23; ++i) {
    KDA_CUDA_CHECK(cudaEventRecord(start));
    KDA_CUDA_CHECK(cudaMemcpyAsync(target.get(), source.get(), bytes, cudaMemcpyDeviceToDevice));
    KDA_CUDA_CHECK(cudaEventRecord(stop));
    KDA_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    KDA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (i >= 3) tb_per_s.push_back(2.0 * bytes / (ms * 1e-3) / 1e12);
  }
  KDA_CUDA_CHECK(cudaEventDestroy(start));
  KDA_CUDA_CHECK(cudaEventDestroy(stop));
  Result result;
  result.mode = "decode_timing";
  result.name = "copy_bandwidth";
  result.record.add("measure", "device_to_device_copy_1GiB")
      .add("median_tb_per_s", quantile(tb_per_s, 0.5))
      .add("samples", static_cast<int64_t>(tb_per_s.size()));
  std::printf("time copy 1 GiB device to device: %.2f TB/s (read + write, median of %zu)\n",
              quantile(tb_per_s, 0.5), tb_per_s.size());
  results.push_back(std::move(result));
}

}  // namespace

void run_decode_timing(const HarnessOptions& options, std::vector<Result>& results) {
  cudaDeviceProp device;
  KDA_CUDA_CHECK(cudaGetDeviceProperties(&device, 0));
  StreamHold hold;
  time_copy_bandwidth(results);
  std::vector<int> batches = {1, 8, 32, 128, 256};
  std::vector<int> head_counts = {32, 64};
  if (options.quick) batches = {1, 32}, head_counts = {32};
  if (!options.batches.empty()) batches = options.batches;
  if (!options.head_counts.empty()) head_counts = options.head_counts;
  for (int heads : head_counts) {
    for (int batch : batches) time_point(batch, heads, options, device, hold, results);
  }
  if (hold.ever_timed_out()) {
    std::printf("time WARNING: a stream hold timed out; some samples may include launch gaps\n");
  }
  Result result;
  result.mode = "decode_timing";
  result.name = "stream_hold";
  result.record.add("hold_timed_out", hold.ever_timed_out());
  results.push_back(std::move(result));
}

}  // namespace kda::gpu
