// kda/gpu/prefill.cu — the chunked prefill and its CP form on the GPU (prefill.cuh).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "kda/gpu/prefill.cuh"
#include "kda/gpu/reference.hpp"

namespace kda::gpu {
namespace {

namespace cuda = kda::kernels::cuda;

constexpr int64_t kMatrix = int64_t{kKeyDim} * kKeyDim;   // K × K
constexpr int64_t kState = int64_t{kKeyDim} * kValueDim;  // K × V

std::vector<uint16_t> bf16_of(std::span<const float> values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t index = 0; index < values.size(); ++index) bits[index] = to_bf16_bits(values[index]);
  return bits;
}

void require(bool condition, const char* what) {
  if (!condition) throw std::invalid_argument(what);
}

cuda::AffineMergeProblem merge(const float* a, int64_t a_stride, const float* b, int64_t b_stride,
                               const float* c, int64_t c_stride, float* out, int64_t out_stride,
                               int batch, int rows, int inner, int cols) {
  cuda::AffineMergeProblem problem;
  problem.a_global = a, problem.a_batch_stride = a_stride;
  problem.b_global = b, problem.b_batch_stride = b_stride;
  problem.c_global = c, problem.c_batch_stride = c_stride;
  problem.out_global = out, problem.out_batch_stride = out_stride;
  problem.batch = batch, problem.rows = rows, problem.inner = inner, problem.cols = cols;
  return problem;
}

void check_cp_shape(const GpuPrefill& prefill, int shards) {
  const PrefillShape& shape = prefill.shape();
  require(shape.batch == 1 && shape.lengths.empty(), "the CP prefill takes one sequence (batch 1)");
  require(shards >= 1 && shape.tokens % (kChunkSize * shards) == 0,
          "T must be a multiple of 64 x shards");
}

}  // namespace

GpuPrefill::GpuPrefill(const PrefillShape& shape) : shape_(shape) {
  if (!shape_.lengths.empty()) {
    std::vector<int> seqlens{0}, chunks{0};
    for (const int length : shape_.lengths) {
      require(length > 0, "GpuPrefill: a sequence length must be positive");
      seqlens.push_back(seqlens.back() + length);
      chunks.push_back(chunks.back() + cuda::chunks_of(length));
    }
    shape_.batch = static_cast<int>(shape_.lengths.size());
    shape_.tokens = seqlens.back();
    total_chunks_ = chunks.back();
    cu_seqlens = DeviceBuffer<int>(seqlens.size());
    cu_seqlens.upload(seqlens);
    cu_chunks = DeviceBuffer<int>(chunks.size());
    cu_chunks.upload(chunks);
  }
  const bool packed = !shape_.lengths.empty();
  const int64_t tokens = packed ? int64_t{shape_.tokens} : int64_t{shape.batch} * shape.tokens;
  const int64_t key_rows = tokens * shape.heads, value_rows = tokens * shape.value_heads;
  q = DeviceBuffer<uint16_t>(key_rows * kKeyDim);
  k = DeviceBuffer<uint16_t>(key_rows * kKeyDim);
  v = DeviceBuffer<uint16_t>(value_rows * kValueDim);
  g = DeviceBuffer<float>(value_rows * kKeyDim);
  beta = DeviceBuffer<float>(value_rows);
  o = DeviceBuffer<float>(value_rows * kValueDim);
  state = DeviceBuffer<float>(int64_t{shape_.batch} * shape.value_heads * kState);
  const auto sizes = cuda::chunk_workspace_sizes(problem(cuda::ChainPrecision::kTf32));
  q_decayed = DeviceBuffer<float>(sizes.q_decayed);
  k_to_end = DeviceBuffer<float>(sizes.k_to_end);
  w = DeviceBuffer<float>(sizes.w);
  u = DeviceBuffer<float>(sizes.u);
  a_qk = DeviceBuffer<float>(sizes.a_qk);
  decay_end = DeviceBuffer<float>(sizes.decay_end);
}

void GpuPrefill::upload(std::span<const float> q_host, std::span<const float> k_host,
                        std::span<const float> v_host, std::span<const float> g_host,
                        std::span<const float> beta_host) {
  require(q_host.size() == q.size() && k_host.size() == k.size() && v_host.size() == v.size() &&
              g_host.size() == g.size() && beta_host.size() == beta.size(),
          "GpuPrefill::upload: an input's size does not match the shape");
  q.upload(bf16_of(q_host));
  k.upload(bf16_of(k_host));
  v.upload(bf16_of(v_host));
  g.upload(std::vector<float>(g_host.begin(), g_host.end()));
  beta.upload(std::vector<float>(beta_host.begin(), beta_host.end()));
}

cuda::ChunkPrefillProblem GpuPrefill::problem(cuda::ChainPrecision precision) const {
  cuda::ChunkPrefillProblem p;
  p.q_global = reinterpret_cast<const __nv_bfloat16*>(q.get());
  p.k_global = reinterpret_cast<const __nv_bfloat16*>(k.get());
  p.v_global = reinterpret_cast<const __nv_bfloat16*>(v.get());
  p.g_global = g.get(), p.beta_global = beta.get();
  p.o_global = o.get(), p.state_global = state.get();
  p.batch = shape_.batch, p.tokens = shape_.tokens;
  p.heads = shape_.heads, p.value_heads = shape_.value_heads;
  p.key_dim = kKeyDim, p.value_dim = kValueDim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kKeyDim));
  p.precision = precision;
  p.workspace = {q_decayed.get(), k_to_end.get(), w.get(), u.get(), a_qk.get(), decay_end.get()};
  if (!shape_.lengths.empty()) {
    p.cu_seqlens = cu_seqlens.get(), p.cu_chunks = cu_chunks.get();
    p.total_chunks = total_chunks_;
  }
  return p;
}

void GpuPrefill::launch(cuda::ChainPrecision precision) {
  KDA_CUDA_CHECK(cuda::launch_chunk_prefill(problem(precision), cudaStreamLegacy));
}

void GpuPrefill::launch_cp(cuda::ChainPrecision precision, int shards) {
  const cuda::ChunkPrefillProblem p = problem(precision);
  if (const char* error = cuda::chunk_prefill_cp_error(p, shards))
    throw std::invalid_argument(error);
  const int64_t elements = cuda::chunk_cp_workspace_elements(p, shards);
  DeviceBuffer<float> transitions(elements), shard_ends(elements), starts(elements);
  KDA_CUDA_CHECK(cuda::launch_chunk_prefill_cp(
      p, shards, {transitions.get(), shard_ends.get(), starts.get()}, cudaStreamLegacy));
  KDA_CUDA_CHECK(cudaDeviceSynchronize());  // before the buffers go
}

CpPrefillRun run_nocp_prefill(GpuPrefill& prefill, int shards, cuda::ChainPrecision precision) {
  check_cp_shape(prefill, shards);
  const PrefillShape& shape = prefill.shape();
  DeviceBuffer<float> starts(int64_t{shards} * shape.value_heads * kState);
  starts.poison();
  prefill.o.poison();
  cuda::ChunkPrefillProblem problem = prefill.problem(precision);
  problem.record_global = starts.get();
  problem.record_every = shape.tokens / kChunkSize / shards;
  KDA_CUDA_CHECK(cuda::launch_chunk_prefill(problem, cudaStreamLegacy));
  KDA_CUDA_CHECK(cudaDeviceSynchronize());
  return {starts.download(), prefill.o.download()};
}

CpPrefillRun run_cp_prefill(GpuPrefill& prefill, int shards, const MergeForm& form,
                            cuda::ChainPrecision precision) {
  check_cp_shape(prefill, shards);
  require(shards >= 2, "the CP prefill needs at least 2 shards");
  const PrefillShape& shape = prefill.shape();
  const int value_heads = shape.value_heads;
  const int chunks = shape.tokens / kChunkSize, per_shard = chunks / shards;
  cuda::ChunkPrefillProblem full = prefill.problem(precision);
  full.o_global = nullptr, full.state_global = nullptr;
  KDA_CUDA_CHECK(cuda::launch_chunk_intra(full, cudaStreamLegacy));

  // Every chunk's map M_c = Diag(e^{G_C}) − K_gᵀ W, in the form under test (entries: chunk-major,
  // e = c · HV + hv).
  const int64_t entries = int64_t{chunks} * value_heads;
  DeviceBuffer<float> neg_kt(entries * kKeyDim * kChunkSize), diagonal(entries * kMatrix);
  DeviceBuffer<float> maps(entries * kMatrix);
  KDA_CUDA_CHECK(
      cuda::launch_chunk_transition_operands(full, neg_kt.get(), diagonal.get(), cudaStreamLegacy));
  constexpr int64_t kMaxBatch = 32768;
  for (int64_t first = 0; first < entries; first += kMaxBatch) {
    const int batch = static_cast<int>(std::min(kMaxBatch, entries - first));
    KDA_CUDA_CHECK(
        form.launch(merge(neg_kt.get() + first * kKeyDim * kChunkSize, kKeyDim * kChunkSize,
                          prefill.w.get() + first * kChunkSize * kKeyDim, kChunkSize * kKeyDim,
                          diagonal.get() + first * kMatrix, kMatrix, maps.get() + first * kMatrix,
                          kMatrix, batch, kKeyDim, kChunkSize, kKeyDim),
                    cudaStreamLegacy));
  }

  // Each shard's M: the product of its chunk maps, all shards at once per head: (HV, P, K, K).
  DeviceBuffer<float> chain(int64_t{value_heads} * shards * kMatrix);
  DeviceBuffer<float> next(chain.size());
  for (int hv = 0; hv < value_heads; ++hv) {
    for (int shard = 0; shard < shards; ++shard) {
      const int64_t entry = int64_t{shard} * per_shard * value_heads + hv;
      KDA_CUDA_CHECK(cudaMemcpyAsync(chain.get() + (int64_t{hv} * shards + shard) * kMatrix,
                                     maps.get() + entry * kMatrix, kMatrix * sizeof(float),
                                     cudaMemcpyDeviceToDevice, cudaStreamLegacy));
    }
  }
  for (int step = 1; step < per_shard; ++step) {
    for (int hv = 0; hv < value_heads; ++hv) {
      const int64_t entry = int64_t{step} * value_heads + hv;  // shard 0's; shard r is r·per later
      float* chain_hv = chain.get() + int64_t{hv} * shards * kMatrix;
      float* next_hv = next.get() + int64_t{hv} * shards * kMatrix;
      KDA_CUDA_CHECK(form.launch(
          merge(maps.get() + entry * kMatrix, int64_t{per_shard} * value_heads * kMatrix, chain_hv,
                kMatrix, nullptr, 0, next_hv, kMatrix, shards, kKeyDim, kKeyDim, kKeyDim),
          cudaStreamLegacy));
    }
    std::swap(chain, next);
  }

  // Phase 1: H_r, each shard's chunk pass from a zero state (P sequences of T / P tokens).
  DeviceBuffer<float> offsets(int64_t{shards} * value_heads * kState);
  cuda::ChunkPrefillProblem sharded = full;
  sharded.batch = shards, sharded.tokens = shape.tokens / shards;
  sharded.state_global = offsets.get();
  KDA_CUDA_CHECK(cuda::launch_chunk_state(sharded, cudaStreamLegacy));

  // The scan S_0 = 0, S_{r+1} = M_r S_r + H_r, every head at once.
  DeviceBuffer<float> starts(int64_t{shards} * value_heads * kState);
  KDA_CUDA_CHECK(cudaMemsetAsync(starts.get(), 0, int64_t{value_heads} * kState * sizeof(float),
                                 cudaStreamLegacy));
  for (int shard = 0; shard + 1 < shards; ++shard) {
    const int64_t here = int64_t{shard} * value_heads * kState;
    KDA_CUDA_CHECK(
        form.launch(merge(chain.get() + int64_t{shard} * kMatrix, int64_t{shards} * kMatrix,
                          starts.get() + here, kState, offsets.get() + here, kState,
                          starts.get() + here + value_heads * kState, kState, value_heads, kKeyDim,
                          kKeyDim, kValueDim),
                    cudaStreamLegacy));
  }

  // Phase 2: each shard's chunk pass from its start state writes its outputs.
  prefill.o.poison();
  sharded.h0_global = starts.get();
  sharded.o_global = prefill.o.get();
  sharded.state_global = nullptr;
  KDA_CUDA_CHECK(cuda::launch_chunk_state(sharded, cudaStreamLegacy));
  KDA_CUDA_CHECK(cudaDeviceSynchronize());
  return {starts.download(), prefill.o.download()};
}

}  // namespace kda::gpu
