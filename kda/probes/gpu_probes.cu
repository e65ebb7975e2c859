// The kda subject's GPU probes (issue 9), compiled into `kda` where a CUDA compiler exists:
// checks of every CUDA kernel against the CPU path, and the decode bench timed by CUDA events.
//   kda probe list
//   loupe probe run decode_gpu_vs_cpu --set kernel=merged -- build/bin/kda probe
//   loupe probe run cp_merge_gpu --set T=65536 --set shards=8 --set precision=tf32_truncate
//       -- build/bin/kda probe
//   loupe probe run decode_gpu --set batch=256 --set H=64 -- build/bin/kda probe
// Without a device the checks stop with a subject error naming the missing device and the bench
// skips its point ("no CUDA device"); both stay listed, so an objective written for the GPU
// parses everywhere.
#include <loupe/probe.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "kda/gpu/cp_chain.cuh"
#include "kda/gpu/harness.cuh"
#include "kda/gpu/reference.hpp"
#include "kda/kernels/cpu/decode.hpp"
#include "kda/kernels/cuda/decode.cuh"
#include "kda/math/generator.hpp"
#include "kda/probes/with_device.cuh"

namespace kda::probes {
namespace {

namespace cuda = kda::kernels::cuda;
using gpu::DeviceBuffer;

constexpr int64_t kDim = 128;

__nv_bfloat16* as_bf16(DeviceBuffer<uint16_t>& buffer) {
  return reinterpret_cast<__nv_bfloat16*>(buffer.get());
}

// ---- decode_gpu_vs_cpu ------------------------------------------------------------------------

// Values the GPU reads as bf16: the generator's floats rounded to bf16, so both paths read the
// same numbers and the check measures the kernels, not the input conversion.
std::vector<float> rounded_to_bf16(const std::vector<float>& values) {
  std::vector<float> out(values.size());
  for (size_t index = 0; index < values.size(); ++index) {
    out[index] = gpu::bf16_bits_to_float(gpu::to_bf16_bits(values[index]));
  }
  return out;
}

std::vector<uint16_t> bf16_bits(std::span<const float> values) {
  std::vector<uint16_t> out(values.size());
  for (size_t index = 0; index < values.size(); ++index) {
    out[index] = gpu::to_bf16_bits(values[index]);
  }
  return out;
}

// One token of (B, T, ...) arrays, as bf16 bits: the (N, ...) slice the kernels read.
std::vector<uint16_t> token_slice(std::span<const float> values, int64_t batch, int64_t tokens,
                                  int64_t token, int64_t row) {
  std::vector<uint16_t> out(static_cast<size_t>(batch * row));
  for (int64_t sequence = 0; sequence < batch; ++sequence) {
    const auto begin = values.begin() + (sequence * tokens + token) * row;
    const auto bits = bf16_bits(std::span<const float>(begin, begin + row));
    std::copy(bits.begin(), bits.end(), out.begin() + sequence * row);
  }
  return out;
}

void declare_decode_gpu_inputs(loupe::CheckSetup& setup) {
  const auto& p = setup.point();
  const int64_t batch = p.get_int("batch"), heads = p.get_int("H"), steps = p.get_int("steps");
  if (batch < 1 || batch > 4096 || heads < 1 || steps < 1) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "decode_gpu_vs_cpu: batch must be in [1, 4096], H and steps positive (got "
                       "batch=" +
                           std::to_string(batch) + ", H=" + std::to_string(heads) +
                           ", steps=" + std::to_string(steps) + ")",
                       "--set batch=8 --set H=16 --set steps=4");
  }
  const Shape shape{batch, steps, heads, heads, kDim, kDim};
  const auto raw = math::generate_raw_decode_inputs(shape, setup.seed());
  auto put = [&](const char* name, const std::vector<float>& values, std::vector<int64_t> dims,
                 std::vector<std::string> axes) {
    auto storage = setup.input<float>(name, std::move(dims), std::move(axes));
    std::copy(values.begin(), values.end(), storage.begin());
  };
  put("q", rounded_to_bf16(raw.q), {batch, steps, heads, kDim}, {"B", "T", "H", "K"});
  put("k", rounded_to_bf16(raw.k), {batch, steps, heads, kDim}, {"B", "T", "H", "K"});
  put("v", rounded_to_bf16(raw.v), {batch, steps, heads, kDim}, {"B", "T", "HV", "V"});
  put("g_raw", rounded_to_bf16(raw.g_raw), {batch, steps, heads, kDim}, {"B", "T", "HV", "K"});
  put("b_raw", rounded_to_bf16(raw.b_raw), {batch, steps, heads}, {"B", "T", "HV"});
  put("a_log", raw.a_log, {heads}, {"HV"});
  put("dt_bias", raw.dt_bias, {heads, kDim}, {"HV", "K"});
  // A non-zero initial state, and distinct slots among 2·batch (continuous batching).
  math::NormalStream normal(setup.seed() ^ 0x5EEDu);
  auto state = setup.input<float>("S0", {batch, heads, kDim, kDim}, {"B", "HV", "K", "V"});
  for (auto& value : state) value = static_cast<float>(0.1 * normal.normal());
  std::vector<int32_t> slots(static_cast<size_t>(2 * batch));
  std::iota(slots.begin(), slots.end(), 0);
  std::mt19937_64 shuffle(setup.seed() ^ 0x51075u);
  std::shuffle(slots.begin(), slots.end(), shuffle);
  auto indices = setup.input<int32_t>("state_indices", {batch}, {"B"});
  std::copy(slots.begin(), slots.begin() + batch, indices.begin());
  setup.output<float>("o", {batch, steps, heads, kDim}, {"B", "T", "HV", "V"})
      .along("T")
      .tolerance("rms_ratio", 1e-5);
  setup.output<float>("S", {batch, heads, kDim, kDim}, {"B", "HV", "K", "V"})
      .tolerance("rms_ratio", 1e-5);
}

// The CPU path: kda's merged decode step in fp32 (the engine's own CPU kernel).
template <class Real>
void run_cpu_decode(loupe::CheckIo& io) {
  const auto& q_shape = io.input_tensor("q").shape();
  const Shape shape{q_shape[0], q_shape[1], q_shape[2], q_shape[2], kDim, kDim};
  auto take = [&](const char* name) {
    const auto values = io.input<float>(name);
    return std::vector<Real>(values.begin(), values.end());
  };
  const auto q = take("q"), k = take("k"), v = take("v"), g_raw = take("g_raw");
  const auto b_raw = take("b_raw");
  kernels::cpu::DecodeParams<Real> params;
  params.gate_form = math::GateForm::kSoftplus;
  params.beta_form = math::BetaForm::kSigmoid;
  params.l2norm = true;
  params.a_log = take("a_log");
  params.dt_bias = take("dt_bias");
  std::vector<Real> state = take("S0");
  // o is (B, T, HV, V): the step writes token t of every sequence through its sequence stride.
  auto o = io.output<Real>("o");
  const int64_t per_token = shape.heads * kDim;
  for (int64_t token = 0; token < shape.tokens; ++token) {
    const kernels::cpu::DecodeStep<Real> step{q.data() + token * per_token,
                                              k.data() + token * per_token,
                                              v.data() + token * per_token,
                                              g_raw.data() + token * per_token,
                                              b_raw.data() + token * shape.value_heads,
                                              shape.tokens};
    kernels::cpu::decode_step(kernels::cpu::DecodeVariant::kMerged, params, shape, step,
                              state.data(), o.data() + token * per_token, 2);
  }
  auto s_out = io.output<Real>("S");
  std::copy(state.begin(), state.end(), s_out.begin());
}

// The GPU path: `kernel` over every step, state in slots of a (2·batch)-slot pool in place.
void run_gpu_decode(loupe::CheckIo& io, const std::string& kernel) {
  with_device("decode_gpu_vs_cpu", [&] {
    const auto& q_shape = io.input_tensor("q").shape();
    const int64_t batch = q_shape[0], tokens = q_shape[1], heads = q_shape[2];
    const int64_t row = heads * kDim, head_state = kDim * kDim;
    const int64_t num_states = 2 * batch;
    const auto indices = io.input<int32_t>("state_indices");
    const auto initial = io.input<float>("S0");
    // Unnamed slots hold NaN: a kernel that reads or writes the wrong slot cannot pass.
    std::vector<float> pool(static_cast<size_t>(num_states * heads * head_state), NAN);
    for (int64_t sequence = 0; sequence < batch; ++sequence) {
      std::copy_n(initial.begin() + sequence * heads * head_state, heads * head_state,
                  pool.begin() + indices[sequence] * heads * head_state);
    }
    DeviceBuffer<float> state = gpu::to_device(pool);
    auto device_indices = gpu::to_device(std::vector<int32_t>(indices.begin(), indices.end()));
    auto a_log = gpu::to_device(
        std::vector<float>(io.input<float>("a_log").begin(), io.input<float>("a_log").end()));
    auto dt_bias = gpu::to_device(
        std::vector<float>(io.input<float>("dt_bias").begin(), io.input<float>("dt_bias").end()));
    DeviceBuffer<float> o_step(static_cast<size_t>(batch * row));
    auto o = io.output<float>("o");
    for (int64_t token = 0; token < tokens; ++token) {
      auto q = gpu::to_device(token_slice(io.input<float>("q"), batch, tokens, token, row));
      auto k = gpu::to_device(token_slice(io.input<float>("k"), batch, tokens, token, row));
      auto v = gpu::to_device(token_slice(io.input<float>("v"), batch, tokens, token, row));
      auto g_raw = gpu::to_device(token_slice(io.input<float>("g_raw"), batch, tokens, token, row));
      auto b_raw =
          gpu::to_device(token_slice(io.input<float>("b_raw"), batch, tokens, token, heads));
      o_step.poison();
      cuda::DecodeProblem problem;
      problem.q_global = as_bf16(q), problem.k_global = as_bf16(k), problem.v_global = as_bf16(v);
      problem.g_raw_global = as_bf16(g_raw), problem.b_raw_global = as_bf16(b_raw);
      problem.a_log_global = a_log.get(), problem.dt_bias_global = dt_bias.get();
      problem.state_global = state.get(), problem.state_indices_global = device_indices.get();
      problem.o_global = o_step.get();
      problem.num_sequences = static_cast<int>(batch), problem.num_heads = static_cast<int>(heads);
      problem.num_value_heads = static_cast<int>(heads);
      problem.num_states = static_cast<int>(num_states);
      problem.key_dim = kDim, problem.value_dim = kDim;
      if (const char* error = cuda::decode_shape_error(problem)) {
        throw loupe::Error(loupe::ErrorCode::kUsage,
                           std::string("decode_gpu_vs_cpu: the CUDA kernels cannot run this "
                                       "point: ") +
                               error);
      }
      KDA_CUDA_CHECK(kernel == "tiled" ? cuda::launch_tiled_v_decode(problem, nullptr)
                                       : cuda::launch_merged_v_decode(problem, nullptr));
      KDA_CUDA_CHECK(cudaDeviceSynchronize());
      const auto host = o_step.download();
      for (int64_t sequence = 0; sequence < batch; ++sequence) {
        std::copy_n(host.begin() + sequence * row, row,
                    o.begin() + (sequence * tokens + token) * row);
      }
    }
    const auto final_pool = state.download();
    auto s_out = io.output<float>("S");
    for (int64_t sequence = 0; sequence < batch; ++sequence) {
      std::copy_n(final_pool.begin() + indices[sequence] * heads * head_state, heads * head_state,
                  s_out.begin() + sequence * heads * head_state);
    }
    return 0;
  });
}

}  // namespace

LOUPE_CHECK(decode_gpu_vs_cpu)
    .description(
        "CUDA decode kernel (tiled: CTA per (sequence, head, V tile of 32); merged: CTA per "
        "(sequence, head)) against kda's CPU decode; bf16 inputs, fp32 state in 2·batch slots; "
        "oracle: the CPU decode in fp64 (needs a CUDA device)")
    .param("kernel", "merged", {"tiled", "merged"})
    .param("batch", 8, {}, "sequences")
    .param("H", 16, {}, "heads (H = HV, K = V = 128)")
    .param("steps", 4, {}, "decode tokens")
    .hidden_point({{"batch", int64_t{37}}, {"H", int64_t{5}}, {"steps", int64_t{3}}})
    .hidden_range("batch", 17, 40)
    .hidden_range("steps", 1, 5)
    .inputs(declare_decode_gpu_inputs)
    .reference([](loupe::CheckIo& io) { run_cpu_decode<float>(io); })
    .candidate([](loupe::CheckIo& io) { run_gpu_decode(io, io.point().get_string("kernel")); })
    .oracle([](loupe::CheckIo& io) { run_cpu_decode<double>(io); });

// ---- cp_merge_gpu -----------------------------------------------------------------------------

namespace {

gpu::GateKind parse_gate(const std::string& decay) {
  return decay == "fast" ? gpu::GateKind::kFastForget : gpu::GateKind::kSlowDecay;
}

// The fp64 chunk maps of the incident-1 stream, computed once per (key, gate, chunks) in this
// process: the reference and the candidate read the same maps (an input, derived from one).
struct ChunkMaps {
  std::vector<double> m_all, h_all;
};

const ChunkMaps& chunk_maps(uint64_t key, gpu::GateKind gate, int chunks) {
  static std::mutex mutex;
  static std::map<std::tuple<uint64_t, int, int>, std::shared_ptr<ChunkMaps>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& entry = cache[{key, static_cast<int>(gate), chunks}];
  if (!entry) {
    if (cache.size() > 2) {  // two seeds' maps at most (the check and its second-seed run)
      for (auto it = cache.begin(); it != cache.end();) {
        it = it->second ? cache.erase(it) : std::next(it);
      }
    }
    entry = std::make_shared<ChunkMaps>();
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    gpu::incident1_chunk_maps(key, gate, chunks, threads, entry->m_all, entry->h_all);
  }
  return *entry;
}

struct CpPoint {
  uint64_t key;
  gpu::GateKind gate;
  int chunks, shards;
};

CpPoint read_cp_point(const loupe::CheckIo& io) {
  const auto& p = io.point();
  return {io.input<uint64_t>("chunk_key")[0], parse_gate(p.get_string("decay")),
          static_cast<int>(p.get_int("T") / gpu::kChunkSize),
          static_cast<int>(p.get_int("shards"))};
}

}  // namespace

LOUPE_CHECK(cp_merge_gpu)
    .description(
        "CP merge on the GPU (M chain and S <- M S + H in the precision under test) against the "
        "fp64 non-CP chain: states at every shard boundary; incident 1 on hardware (needs a CUDA "
        "device)")
    .param("T", 65536, {}, "tokens (a multiple of 64 x shards)")
    .param("shards", 8, {}, "CP shards (>= 2)")
    .param("precision", "tf32x3",
           {"tf32_truncate", "tf32x3", "fp32", "tf32x3_chained_accumulator",
            "tf32x3_exact_diagonal"},
           "the merge kernel's arithmetic")
    .param("decay", "slow", {"slow", "fast"}, "slow: rates in [1e-6, 1e-1]; fast: -5 sigmoid")
    .inputs([](loupe::CheckSetup& setup) {
      const auto& p = setup.point();
      const int64_t tokens = p.get_int("T"), shards = p.get_int("shards");
      if (shards < 2 || tokens <= 0 || tokens % (gpu::kChunkSize * shards) != 0 ||
          tokens > (int64_t{1} << 20)) {
        throw loupe::Error(loupe::ErrorCode::kUsage,
                           "cp_merge_gpu: T must be a positive multiple of 64 x shards (at most "
                           "1048576) and shards >= 2 (got T=" +
                               std::to_string(tokens) + ", shards=" + std::to_string(shards) + ")",
                           "--set T=65536 --set shards=8");
      }
      // The stream's generator key: the chunk maps are a function of it alone (reference.hpp).
      setup.input<uint64_t>("chunk_key", {1})[0] = setup.seed() * 0x9E3779B97F4A7C15ull + 101;
      // The GPU merges in fp32 (or TF32) against the fp64 chain: that narrowing is what this
      // check measures, so the precision guard leaves S to its tolerance.
      setup.output<double>("S", {shards - 1, kDim, kDim}, {"P", "K", "V"})
          .along("P")
          .tolerance("rms_ratio", 2e-6)
          .stored_narrow("float32");
    })
    .reference([](loupe::CheckIo& io) {
      const CpPoint point = read_cp_point(io);
      const ChunkMaps& maps = chunk_maps(point.key, point.gate, point.chunks);
      const int per_shard = point.chunks / point.shards;
      std::vector<int> boundaries;
      for (int shard = 1; shard < point.shards; ++shard) boundaries.push_back(shard * per_shard);
      const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
      const auto states =
          gpu::chain_states(maps.m_all, maps.h_all, point.chunks, boundaries, threads);
      auto out = io.output<double>("S");
      for (int shard = 1; shard < point.shards; ++shard) {
        const auto& state = states.at(shard * per_shard);
        std::copy(state.begin(), state.end(), out.begin() + (shard - 1) * kDim * kDim);
      }
    })
    .candidate([](loupe::CheckIo& io) {
      with_device("cp_merge_gpu", [&] {
        const CpPoint point = read_cp_point(io);
        const ChunkMaps& maps = chunk_maps(point.key, point.gate, point.chunks);
        const gpu::MergeForm* form = gpu::find_merge_form(io.point().get_string("precision"));
        const auto m_device =
            gpu::to_device(std::vector<float>(maps.m_all.begin(), maps.m_all.end()));
        const auto h_device =
            gpu::to_device(std::vector<float>(maps.h_all.begin(), maps.h_all.end()));
        const gpu::CpRun run = gpu::run_cp(*form, m_device, h_device, point.chunks, point.shards);
        auto out = io.output<double>("S");
        std::copy(run.boundaries.begin(), run.boundaries.end(), out.begin());
        return 0;
      });
    });

// ---- decode_gpu (bench) -----------------------------------------------------------------------

namespace {

// Fills device memory from a seed: a counter hash per element, uniform in [low, high).
__device__ __forceinline__ float hashed_uniform(uint64_t seed, int64_t index, float low,
                                                float high) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return low + (high - low) * static_cast<float>(z >> 40) * 0x1.0p-24f;
}

__global__ void fill_bf16_kernel(__nv_bfloat16* values_global, int64_t count, uint64_t seed,
                                 float low, float high) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    values_global[i] = __float2bfloat16(hashed_uniform(seed, i, low, high));
  }
}

__global__ void fill_float_kernel(float* values_global, int64_t count, uint64_t seed, float low,
                                  float high) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    values_global[i] = hashed_uniform(seed, i, low, high);
  }
}

enum class DecodeKernel { kTiled = 0, kMerged = 1 };

// Device buffers of one decode input set; the state is (batch, HV, K, V), slot i = sequence π(i).
struct DecodeSlot {
  DeviceBuffer<uint16_t> q, k, v, g_raw, b_raw;  // (N, H, K), (N, H, K), (N, HV, V), ..., (N, HV)
  DeviceBuffer<float> a_log, dt_bias;            // (HV), (HV, K)
  DeviceBuffer<float> state;                     // (N, HV, K, V)
  DeviceBuffer<int32_t> state_indices;           // (N)
  DeviceBuffer<float> o;                         // (N, HV, V)
  cudaGraphExec_t graphs[2] = {nullptr, nullptr};
  ~DecodeSlot() {
    for (auto graph : graphs) {
      if (graph != nullptr) cudaGraphExecDestroy(graph);
    }
  }
  cuda::DecodeProblem problem(int batch, int heads) {
    cuda::DecodeProblem p;
    p.q_global = as_bf16(q), p.k_global = as_bf16(k), p.v_global = as_bf16(v);
    p.g_raw_global = as_bf16(g_raw), p.b_raw_global = as_bf16(b_raw);
    p.a_log_global = a_log.get(), p.dt_bias_global = dt_bias.get();
    p.state_global = state.get(), p.state_indices_global = state_indices.get();
    p.o_global = o.get();
    p.num_sequences = batch, p.num_heads = heads, p.num_value_heads = heads;
    p.num_states = batch, p.key_dim = kDim, p.value_dim = kDim;
    return p;
  }
};

cudaError_t launch_decode(DecodeKernel kernel, const cuda::DecodeProblem& problem,
                          cudaStream_t stream) {
  return kernel == DecodeKernel::kTiled ? cuda::launch_tiled_v_decode(problem, stream)
                                        : cuda::launch_merged_v_decode(problem, stream);
}

// The slots a decode bench point draws its input sets from. Cold: at least enough slots to cover
// 2× the L2, handed out first-in first-out, so consecutive calls rotate through more memory than
// the cache holds (a model with many layers reads each layer's state from HBM). Hot: one slot,
// shared by every call, whose state stays in L2 (when it fits) across calls.
// Graph mode: a call replays a CUDA graph of G decode steps, as a captured decode step of G
// layers is replayed in serving; each slot holds G state replicas, one per step (cold: G · state
// ≥ 2× L2, so every step reads HBM; hot: G = 8, which fit in L2 together at batch 1), and the
// time per step is the call's / G.
class DecodeSlotPool {
 public:
  DecodeSlotPool(int batch, int heads, bool cold, bool graph)
      : batch_(batch), heads_(heads), cold_(cold), graph_(graph) {
    int device = 0;
    KDA_CUDA_CHECK(cudaGetDevice(&device));
    cudaDeviceProp properties{};
    KDA_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
    l2_bytes_ = properties.l2CacheSize;
    sm_count_ = properties.multiProcessorCount;
    const int covering_l2 =
        std::max<int>(2, static_cast<int>(std::ceil(2.0 * l2_bytes_ / state_bytes())));
    if (graph_) graph_steps_ = cold_ ? covering_l2 : kHotGraphSteps;
    const int minimum = cold_ ? (graph_ ? 2 : covering_l2) : 1;
    size_t total_bytes = 0;
    KDA_CUDA_CHECK(cudaMemGetInfo(&free_bytes_, &total_bytes));  // tens of ms: once, not per slot
    for (int index = 0; index < minimum; ++index) free_.push_back(allocate());
    if (graph_) KDA_CUDA_CHECK(cudaStreamCreateWithFlags(&capture_, cudaStreamNonBlocking));
    // output_into's staging, allocated here: a first cudaMallocHost inside the accessor costs
    // milliseconds, which guard.deferred_output would count against the variant.
    KDA_CUDA_CHECK(cudaMallocHost(&pinned_, output_size() * sizeof(float)));
    // Load both kernels before anything is timed: CUDA loads modules lazily, and a first launch
    // waits for an idle device, which the CUDA-event timer's held stream is not.
    fill(0, 0);
    for (const DecodeKernel kernel : {DecodeKernel::kTiled, DecodeKernel::kMerged}) {
      KDA_CUDA_CHECK(launch_decode(kernel, slots_[0]->problem(batch_, heads_), cudaStreamLegacy));
    }
    KDA_CUDA_CHECK(cudaDeviceSynchronize());
    hot_state_written_ = false;
  }
  ~DecodeSlotPool() {
    if (capture_ != nullptr) cudaStreamDestroy(capture_);
    if (pinned_ != nullptr) cudaFreeHost(pinned_);
  }
  double state_bytes() const { return 4.0 * batch_ * heads_ * kDim * kDim; }
  // Decode steps per call: 1, or G in graph mode.
  int steps_per_call() const { return graph_steps_; }

  // A slot for a new input set (cold: the least recently used free one, or a new one).
  int acquire() {
    if (!cold_) return 0;
    if (free_.empty()) free_.push_back(allocate());
    const int slot = free_.front();
    free_.pop_front();
    return slot;
  }
  void release(int slot) {
    if (cold_) free_.push_back(slot);
  }

  // Writes the input set of `seed` into `slot` (untimed); cold also writes a fresh state.
  void fill(int slot_index, uint64_t seed) {
    DecodeSlot& slot = *slots_[slot_index];
    const int grid = 4 * sm_count_, block = 256;
    auto bf16 = [&](DeviceBuffer<uint16_t>& buffer, uint64_t stream, float low, float high) {
      fill_bf16_kernel<<<grid, block>>>(as_bf16(buffer), buffer.size(), seed * 16 + stream, low,
                                        high);
    };
    bf16(slot.q, 1, -1.7f, 1.7f);
    bf16(slot.k, 2, -1.7f, 1.7f);
    bf16(slot.v, 3, -1.7f, 1.7f);
    bf16(slot.g_raw, 4, -2.0f, 1.0f);
    bf16(slot.b_raw, 5, -2.0f, 2.0f);
    fill_float_kernel<<<grid, block>>>(slot.a_log.get(), slot.a_log.size(), seed * 16 + 6, 0.0f,
                                       2.7f);
    fill_float_kernel<<<grid, block>>>(slot.dt_bias.get(), slot.dt_bias.size(), seed * 16 + 7,
                                       -0.5f, 0.5f);
    if (cold_ || !hot_state_written_) {
      fill_float_kernel<<<grid, block>>>(slot.state.get(), slot.state.size(), seed * 16 + 8, -0.1f,
                                         0.1f);
      hot_state_written_ = true;
    }
    KDA_CUDA_CHECK(cudaGetLastError());
    // Continuous batching: sequence n updates slot π(n), a permutation drawn from the seed.
    std::vector<int32_t> permutation(static_cast<size_t>(batch_));
    std::iota(permutation.begin(), permutation.end(), 0);
    std::mt19937_64 shuffle(seed);
    std::shuffle(permutation.begin(), permutation.end(), shuffle);
    slot.state_indices.upload(permutation);
    slot.o.poison();
    if (graph_ && slot.graphs[0] == nullptr) capture_graphs(slot);
    KDA_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // One call: a kernel launch, or one replay of a graph holding that launch, on the legacy
  // default stream (the CUDA-event timer's stream).
  void call(int slot_index, DecodeKernel kernel) {
    DecodeSlot& slot = *slots_[slot_index];
    if (graph_) {
      KDA_CUDA_CHECK(cudaGraphLaunch(slot.graphs[static_cast<int>(kernel)], cudaStreamLegacy));
    } else {
      KDA_CUDA_CHECK(launch_decode(kernel, slot.problem(batch_, heads_), cudaStreamLegacy));
    }
  }

  // A slot's o, (batch, H, V), copied into `out` through pinned host memory: the pageable copy
  // (staged by the driver, into a fresh vector) took 5x the timed call at batch 32, H = 64 on the
  // H200, which guard.deferred_output reads as work done outside the timed region.
  int64_t output_size() const { return int64_t{batch_} * heads_ * kDim; }
  void output_into(int slot_index, float* out) const {
    const DeviceBuffer<float>& o = slots_[slot_index]->o;
    KDA_CUDA_CHECK(cudaMemcpy(pinned_, o.get(), o.bytes(), cudaMemcpyDeviceToHost));
    std::copy(pinned_, pinned_ + o.size(), out);
  }

 private:
  int allocate() {
    // A pool that would take over half of the free device memory is a bench that cannot run.
    const double pool_bytes =
        1.1 * state_bytes() * graph_steps_ * static_cast<double>(slots_.size() + 1);
    if (pool_bytes > 0.5 * static_cast<double>(free_bytes_)) {
      throw loupe::Error(loupe::ErrorCode::kSubject,
                         "decode_gpu: slot " + std::to_string(slots_.size()) + " of " +
                             std::to_string(state_bytes() / 1e9) +
                             " GB would take the pool past "
                             "half of the " +
                             std::to_string(free_bytes_ / 1e9) + " GB free on the device",
                         "lower batch or H, or --budget (fewer calls per sample)");
    }
    auto slot = std::make_unique<DecodeSlot>();
    const size_t tokens = static_cast<size_t>(batch_) * heads_;
    slot->q = DeviceBuffer<uint16_t>(tokens * kDim);
    slot->k = DeviceBuffer<uint16_t>(tokens * kDim);
    slot->v = DeviceBuffer<uint16_t>(tokens * kDim);
    slot->g_raw = DeviceBuffer<uint16_t>(tokens * kDim);
    slot->b_raw = DeviceBuffer<uint16_t>(tokens);
    slot->a_log = DeviceBuffer<float>(heads_);
    slot->dt_bias = DeviceBuffer<float>(static_cast<size_t>(heads_) * kDim);
    slot->state = DeviceBuffer<float>(tokens * kDim * kDim * graph_steps_);  // G replicas
    slot->state_indices = DeviceBuffer<int32_t>(batch_);
    slot->o = DeviceBuffer<float>(tokens * kDim);
    slots_.push_back(std::move(slot));
    return static_cast<int>(slots_.size()) - 1;
  }

  void capture_graphs(DecodeSlot& slot) {
    for (const DecodeKernel kernel : {DecodeKernel::kTiled, DecodeKernel::kMerged}) {
      cudaGraph_t graph;
      KDA_CUDA_CHECK(cudaStreamBeginCapture(capture_, cudaStreamCaptureModeThreadLocal));
      const size_t replica = slot.state.size() / graph_steps_;
      for (int step = 0; step < graph_steps_; ++step) {
        cuda::DecodeProblem problem = slot.problem(batch_, heads_);
        problem.state_global = slot.state.get() + step * replica;
        KDA_CUDA_CHECK(launch_decode(kernel, problem, capture_));
      }
      KDA_CUDA_CHECK(cudaStreamEndCapture(capture_, &graph));
      KDA_CUDA_CHECK(cudaGraphInstantiate(&slot.graphs[static_cast<int>(kernel)], graph, 0));
      KDA_CUDA_CHECK(cudaGraphDestroy(graph));
    }
  }

  int batch_, heads_;
  bool cold_, graph_;
  static constexpr int kHotGraphSteps = 8;
  int graph_steps_ = 1;
  int l2_bytes_ = 0, sm_count_ = 0;
  size_t free_bytes_ = 0;  // free device memory when the pool was made
  bool hot_state_written_ = false;
  cudaStream_t capture_ = nullptr;
  std::vector<std::unique_ptr<DecodeSlot>> slots_;
  std::deque<int> free_;
  float* pinned_ = nullptr;  // output_into's staging, o's size (every slot's)
};

// One input set of the bench: a slot leased from the pool for as long as the work lives.
class DecodeGpuWork {
 public:
  DecodeGpuWork(std::shared_ptr<DecodeSlotPool> pool, uint64_t seed) : pool_(std::move(pool)) {
    slot_ = pool_->acquire();
    pool_->fill(slot_, seed);
  }
  DecodeGpuWork(DecodeGpuWork&& other) noexcept
      : pool_(std::move(other.pool_)), slot_(other.slot_) {}
  DecodeGpuWork(const DecodeGpuWork&) = delete;
  DecodeGpuWork& operator=(const DecodeGpuWork&) = delete;
  DecodeGpuWork& operator=(DecodeGpuWork&&) = delete;
  ~DecodeGpuWork() {
    if (pool_) pool_->release(slot_);
  }
  void call(DecodeKernel kernel) { pool_->call(slot_, kernel); }
  int64_t output_size() const { return pool_->output_size(); }
  void output_into(float* out) const { pool_->output_into(slot_, out); }

 private:
  std::shared_ptr<DecodeSlotPool> pool_;
  int slot_ = 0;
};

}  // namespace

LOUPE_BENCH(decode_gpu)
    .description(
        "one decode token on the GPU: V-tiled kernel (baseline) against merged-V, CUDA events; "
        "cold: L2 flushed and state rotated over >= 2x L2; graph: each call replays a CUDA graph "
        "of G steps over G state replicas (cold: G x state >= 2x L2; hot: G = 8), so per step = "
        "median / G and bytes_per_call = 8 B H K V G; bytes = fp32 state read + written (needs a "
        "CUDA device)")
    .param("batch", 32, {}, "sequences")
    .param("H", 64, {}, "heads (H = HV, K = V = 128)")
    .param("state", "cold", {"cold", "hot"},
           "hot: one shared state slot, no flush (outputs not verified: calls share the state)")
    .param("graph", false, {}, "launch each call as a CUDA-graph replay")
    .body([](loupe::BenchState& state) {
      if (!loupe::cuda_device_available()) {
        state.skip("no CUDA device");
        return;
      }
      const int64_t batch = state.get_int("batch"), heads = state.get_int("H");
      if (batch < 1 || batch > 65535 || heads < 1 || heads > 1024) {
        throw loupe::Error(loupe::ErrorCode::kUsage,
                           "decode_gpu: batch must be in [1, 65535] and H in [1, 1024] (got "
                           "batch=" +
                               std::to_string(batch) + ", H=" + std::to_string(heads) + ")",
                           "--set batch=32 --set H=64");
      }
      const bool cold = state.get_string("state") == "cold";
      const bool graph = state.get_bool("graph");
      with_device("decode_gpu", [&] {
        auto pool = std::make_shared<DecodeSlotPool>(static_cast<int>(batch),
                                                     static_cast<int>(heads), cold, graph);
        loupe::CudaTimerOptions timer;
        timer.flush_l2 = cold;
        state.set_timer(loupe::make_cuda_event_timer(timer));
        state.set_bytes_per_call(2.0 * pool->state_bytes() * pool->steps_per_call());
        auto run = [](DecodeKernel kernel) {
          return [kernel](DecodeGpuWork& work) { work.call(kernel); };
        };
        std::function<std::vector<loupe::NamedTensor>(const DecodeGpuWork&)> outputs;
        if (cold) {
          outputs = [](const DecodeGpuWork& work) {
            loupe::Tensor tensor(loupe::DType::kF32, {work.output_size()});
            work.output_into(tensor.mutable_data<float>().data());
            return std::vector<loupe::NamedTensor>{{"o", tensor}};
          };
        }
        state.exec([pool](uint64_t seed) { return DecodeGpuWork(pool, seed); },
                   {{"tiled", run(DecodeKernel::kTiled)}, {"merged", run(DecodeKernel::kMerged)}},
                   std::move(outputs));
        return 0;
      });
    });

}  // namespace kda::probes
