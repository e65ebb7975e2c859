// cupti_overhead_bench: what CUPTI kernel tracing (src/trace/cupti) costs decode throughput.
// Decode (merged-V kernel, batch 32, H = 64, no CUDA graphs, state rotated over ≥ 2× L2) is run
// in blocks of back-to-back calls timed by the host clock up to a device sync; blocks alternate
// untraced / traced (ABBA order) in one process; the overhead is the ratio of median block times.
//   cupti_overhead_bench [--blocks 16] [--calls 2000] [--batch 32] [--heads 64] [--json FILE]
// Exit 0 with a result, 4 without a CUDA device (callers skip), 3 on a CUDA or CUPTI failure.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kda/kernels/cuda/decode.cuh"
#include "loupe/error.hpp"
#include "trace/cupti/cupti_tracer.hpp"

namespace {

namespace cuda = kda::kernels::cuda;

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    throw loupe::Error(loupe::ErrorCode::kSubject,
                       std::string(call) + " failed: " + cudaGetErrorString(status));
  }
}
#define BENCH_CUDA_CHECK(call) check((call), #call)

__global__ void fill_kernel(float* values, int64_t count, float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    values[i] = scale * static_cast<float>((i * 2654435761ll) % 2001 - 1000) / 1000.0f;
  }
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  int blocks = 16, calls = 2000, batch = 32, heads = 64;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "cupti_overhead_bench: %s needs a value\n", flag.c_str());
      return 2;
    }
    const char* value = argv[++i];
    if (flag == "--blocks")
      blocks = std::atoi(value);
    else if (flag == "--calls")
      calls = std::atoi(value);
    else if (flag == "--batch")
      batch = std::atoi(value);
    else if (flag == "--heads")
      heads = std::atoi(value);
    else if (flag == "--json")
      json_path = value;
    else {
      std::fprintf(stderr, "cupti_overhead_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (blocks < 2 || calls < 1 || batch < 1 || heads < 1) {
    std::fprintf(stderr, "cupti_overhead_bench: --blocks >= 2, --calls, --batch, --heads >= 1\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("cupti_overhead_bench: no CUDA device; skipped\n");
    return 4;
  }
  try {
    cudaDeviceProp properties{};
    BENCH_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
    const int64_t rows = int64_t{batch} * heads;
    const int64_t state_count = rows * 128 * 128;
    const int replicas = std::max<int>(
        2, static_cast<int>(std::ceil(2.0 * properties.l2CacheSize / (4.0 * state_count))));
    float *state = nullptr, *o = nullptr, *a_log = nullptr, *dt_bias = nullptr;
    __nv_bfloat16* inputs = nullptr;
    int32_t* indices = nullptr;
    BENCH_CUDA_CHECK(cudaMalloc(&state, sizeof(float) * state_count * replicas));
    BENCH_CUDA_CHECK(cudaMalloc(&o, sizeof(float) * rows * 128));
    BENCH_CUDA_CHECK(cudaMalloc(&a_log, sizeof(float) * heads));
    BENCH_CUDA_CHECK(cudaMalloc(&dt_bias, sizeof(float) * heads * 128));
    BENCH_CUDA_CHECK(cudaMalloc(&inputs, sizeof(__nv_bfloat16) * rows * (4 * 128 + 1)));
    BENCH_CUDA_CHECK(cudaMalloc(&indices, sizeof(int32_t) * batch));
    fill_kernel<<<528, 256>>>(state, state_count * replicas, 0.1f);
    fill_kernel<<<4, 256>>>(a_log, heads, 1.0f);
    fill_kernel<<<4, 256>>>(dt_bias, heads * 128, 0.5f);
    BENCH_CUDA_CHECK(cudaMemset(inputs, 0x3C, sizeof(__nv_bfloat16) * rows * (4 * 128 + 1)));
    std::vector<int32_t> slots(batch);
    for (int i = 0; i < batch; ++i) slots[i] = i;
    BENCH_CUDA_CHECK(
        cudaMemcpy(indices, slots.data(), sizeof(int32_t) * batch, cudaMemcpyHostToDevice));
    cuda::DecodeProblem problem;
    problem.q_global = inputs;
    problem.k_global = inputs + rows * 128;
    problem.v_global = inputs + 2 * rows * 128;
    problem.g_raw_global = inputs + 3 * rows * 128;
    problem.b_raw_global = inputs + 4 * rows * 128;
    problem.a_log_global = a_log, problem.dt_bias_global = dt_bias;
    problem.state_indices_global = indices, problem.o_global = o;
    problem.num_sequences = batch, problem.num_heads = heads, problem.num_value_heads = heads;
    problem.num_states = batch, problem.key_dim = 128, problem.value_dim = 128;

    auto run_block = [&]() {
      const auto begin = std::chrono::steady_clock::now();
      for (int call = 0; call < calls; ++call) {
        problem.state_global = state + (call % replicas) * state_count;
        BENCH_CUDA_CHECK(cuda::launch_merged_v_decode(problem, cudaStreamLegacy));
      }
      BENCH_CUDA_CHECK(cudaDeviceSynchronize());
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    };
    run_block();  // warm-up: module load, clocks up
    std::vector<double> plain, traced, pair_ratios;
    uint64_t kernels_recorded = 0, dropped = 0;
    for (int block = 0; block < blocks; ++block) {
      // ABBA: each traced block sits next to an untraced one in both orders.
      const bool traced_first = block % 2 == 1;
      double plain_s = 0, traced_s = 0;
      for (int turn = 0; turn < 2; ++turn) {
        if ((turn == 0) == traced_first) {
          loupe::trace::cupti::start();
          traced_s = run_block();
          const auto counts = loupe::trace::cupti::stop_and_discard();
          kernels_recorded += counts.kernels;
          dropped += counts.dropped;
        } else {
          plain_s = run_block();
        }
      }
      plain.push_back(plain_s);
      traced.push_back(traced_s);
      pair_ratios.push_back(traced_s / plain_s);
    }
    const double ratio = median(traced) / median(plain);
    const double us_per_call_plain = 1e6 * median(plain) / calls;
    const double us_per_call_traced = 1e6 * median(traced) / calls;
    std::printf(
        "cupti overhead: decode merged B=%d H=%d, %d blocks x %d calls: untraced %.2f us/call, "
        "traced %.2f us/call, traced/untraced %.4f (pairs %.4f .. %.4f); %llu kernels recorded, "
        "%llu dropped\n",
        batch, heads, blocks, calls, us_per_call_plain, us_per_call_traced, ratio,
        *std::min_element(pair_ratios.begin(), pair_ratios.end()),
        *std::max_element(pair_ratios.begin(), pair_ratios.end()),
        static_cast<unsigned long long>(kernels_recorded),
        static_cast<unsigned long long>(dropped));
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      out << "{\"bench\":\"cupti_overhead\",\"batch\":" << batch << ",\"H\":" << heads
          << ",\"blocks\":" << blocks << ",\"calls_per_block\":" << calls
          << ",\"us_per_call_untraced\":" << us_per_call_plain
          << ",\"us_per_call_traced\":" << us_per_call_traced << ",\"ratio\":" << ratio
          << ",\"kernels_recorded\":" << kernels_recorded << ",\"dropped\":" << dropped << "}\n";
    }
    cudaFree(state), cudaFree(o), cudaFree(a_log), cudaFree(dt_bias), cudaFree(inputs);
    cudaFree(indices);
  } catch (const loupe::Error& error) {
    std::fprintf(stderr, "cupti_overhead_bench: %s\n", error.message().c_str());
    return 3;
  }
  return 0;
}
