// kda/gpu/prefill.cuh — the chunked prefill on the GPU as the engine drives it: device buffers for
// one problem, the plain pass, and the context-parallel pass (reference/kda.md, "Context
// parallelism"): per shard, H from a zero state by the ordinary chunk pass (chunk_state on the
// problem reshaped to P sequences of T / P tokens) and M as the product of the shard's chunk maps
// Diag(e^{G_C}) − K_gᵀ W in the merge form under test (affine_merge.cuh); the scan S_{r+1} =
// M_r S_r + H_r in that form; then each shard's chunk pass from S_r writes its outputs. Incident 1
// end to end on hardware. Shared by kda's GPU probes (kda/probes/prefill_gpu_probes.cu).
// Thread-safety: one caller per object; launches on the legacy default stream.
// Ownership: GpuPrefill owns its device buffers; results are host memory.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kda/gpu/cp_chain.cuh"
#include "kda/gpu/harness.cuh"
#include "kda/kernels/cuda/chunk_prefill.cuh"

namespace kda::gpu {

struct PrefillShape {
  int batch = 1, tokens = 0, heads = 0, value_heads = 0;  // K = V = 128
  // Varlen: the lengths of the sequences packed along T (then batch = lengths.size() and tokens =
  // their sum, the inputs (1, tokens, …), the states (batch, HV, K, V)); empty: `batch` sequences
  // of `tokens` each.
  std::vector<int> lengths{};
};

class GpuPrefill {
 public:
  // Device buffers for `shape`, inputs uninitialised.
  explicit GpuPrefill(const PrefillShape& shape);
  // Uploads host inputs: q, k (B, T, H, K) and v (B, T, HV, V) rounded to bf16; g (B, T, HV, K)
  // and beta (B, T, HV) as fp32. REQUIRES: the sizes match the shape (std::invalid_argument).
  void upload(std::span<const float> q, std::span<const float> k, std::span<const float> v,
              std::span<const float> g, std::span<const float> beta);

  const PrefillShape& shape() const { return shape_; }
  // The problem over this object's buffers (o and the final state included, no h0, no records).
  kernels::cuda::ChunkPrefillProblem problem(kernels::cuda::ChainPrecision precision) const;

  // Launches chunk_intra then chunk_state (asynchronous). Throws CudaFailure.
  void launch(kernels::cuda::ChainPrecision precision);
  // The same outputs by intra-card context parallelism in `shards` shards
  // (launch_chunk_prefill_cp; its buffers allocated here), then a device synchronisation.
  // REQUIRES: chunk_prefill_cp_error(problem(precision), shards) == nullptr
  // (std::invalid_argument).
  void launch_cp(kernels::cuda::ChainPrecision precision, int shards);

  DeviceBuffer<uint16_t> q, k, v;  // bf16 bits
  DeviceBuffer<float> g, beta;
  DeviceBuffer<float> o, state;                                    // (B, T, HV, V), (B, HV, K, V)
  DeviceBuffer<float> q_decayed, k_to_end, w, u, a_qk, decay_end;  // the workspace
  DeviceBuffer<int> cu_seqlens, cu_chunks;                         // varlen only: (B + 1)

 private:
  int total_chunks_ = 0;
  PrefillShape shape_;
};

struct CpPrefillRun {
  std::vector<float> starts;  // (P, HV, K, V): the state each shard starts from (shard 0: zero)
  std::vector<float> o;       // (1, T, HV, V)
};

// The one-device pass (B = 1) recording the states where `shards` equal shards start.
// REQUIRES: batch 1, T a multiple of 64 · shards. Throws CudaFailure.
CpPrefillRun run_nocp_prefill(GpuPrefill& prefill, int shards,
                              kernels::cuda::ChainPrecision precision);

// The context-parallel pass: the chunk passes in `precision`, the M chain and the scan in `form`.
// REQUIRES: as run_nocp_prefill, shards >= 2. Throws CudaFailure.
CpPrefillRun run_cp_prefill(GpuPrefill& prefill, int shards, const MergeForm& form,
                            kernels::cuda::ChainPrecision precision);

}  // namespace kda::gpu
