// kda/kernels/cuda/chunk_prefill.cuh — the chunked KDA prefill on the GPU (reference/kda.md,
// "Chunkwise form"), chunks of C = 64 tokens, K = V = 128, in two launches:
//   chunk_intra (chunk_intra.cu): one CTA per (sequence, chunk, value head), all chunks at once.
//       G = cumsum(g); Q_g = scale · q ⊙ e^G, K_g = k ⊙ e^{G_C − G}, e^{G_C}; A_kk, A_qk as one
//       product of k e^G and k e^{−G} when every |G| ≤ 30, else from sub-blocks of 16 rows whose
//       exponentials stay bounded (as kda's CPU chunk); T = (I + A_kk)^{-1} by blocks;
//       W = T diag(β) (e^G ⊙ k), U = T diag(β) v. The products on the tensor cores in 3×TF32, so
//       the workspace is fp32-grade; everything is written to the workspace.
//   chunk_state (chunk_state.cu): one CTA per (sequence, value head, V tile of 32 or 64), walking
//       the chunks in order with the state tile in registers and shared memory:
//       V' = U − W S;  O = Q_g S + A_qk V';  S ← Diag(e^{G_C}) S + K_gᵀ V'
//       on the tensor cores (mma.sync m16n8k8) in TF32 (operands rounded to nearest, once, where
//       they are stored) or 3×TF32 (hi/lo split, as accurate as fp32 here): ChainPrecision. The
//       diagonal decay is applied in fp32 outside the products, so TF32 never rounds the inherited
//       state (incident 1).
// A CP shard pass is the same launch on a reshaped problem: one sequence of T tokens split into P
// shards is, in memory, P sequences of T/P tokens (B, T, … layouts), so chunk_intra runs once and
// chunk_state runs per shard with its start states in h0 (kda/gpu/prefill.cu).
// Thread-safety: launches are asynchronous on the given stream; problems are only read.
// Ownership: every pointer is device memory owned by the caller.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kda::kernels::cuda {

inline constexpr int kPrefillChunk = 64;      // C
inline constexpr int kPrefillKeyDim = 128;    // K (the only one compiled)
inline constexpr int kPrefillValueDim = 128;  // V
inline constexpr int kPrefillValueTile = 32;  // V columns per chunk_state CTA

enum class ChainPrecision { kTf32, kTf32x3 };

// Per (sequence, chunk, value head) intermediates, chunk-major: entry e = (b · NC + c) · HV + hv
// with NC = T / 64, so a reshaped problem (P sequences of T / P tokens) addresses the same entries.
// With ChainPrecision::kTf32, Q_g, K_g, W and A_qk (tensor-core operands only) are stored rounded
// to nearest TF32; U and e^{G_C} stay fp32.
struct ChunkWorkspace {
  float* q_decayed = nullptr;  // (entries, C, K)  scale · q ⊙ e^G
  float* k_to_end = nullptr;   // (entries, C, K)  K_g = k ⊙ e^{G_C − G}
  float* w = nullptr;          // (entries, C, K)  W
  float* u = nullptr;          // (entries, C, V)  U
  float* a_qk = nullptr;       // (entries, C, C)  lower triangle with the diagonal, scaled
  float* decay_end = nullptr;  // (entries, K)     e^{G_C}
};

struct ChunkPrefillProblem {
  const __nv_bfloat16* q_global = nullptr;  // (B, T, H, K), L2-normalised
  const __nv_bfloat16* k_global = nullptr;  // (B, T, H, K), L2-normalised
  const __nv_bfloat16* v_global = nullptr;  // (B, T, HV, V)
  const float* g_global = nullptr;          // (B, T, HV, K) log decay per token and channel
  const float* beta_global = nullptr;       // (B, T, HV)
  const float* h0_global = nullptr;         // (B, HV, K, V), or nullptr: zero start states
  float* o_global = nullptr;                // (B, T, HV, V), or nullptr: no output
  float* state_global = nullptr;            // (B, HV, K, V) final states, or nullptr
  // The state before every chunk c with c % record_every == 0, (B, NC / record_every, HV, K, V);
  // nullptr: none recorded.
  float* record_global = nullptr;
  int record_every = 1;
  int batch = 0;        // B
  int tokens = 0;       // T, a multiple of 64
  int heads = 0;        // H
  int value_heads = 0;  // HV, a multiple of H
  int key_dim = 0;      // K
  int value_dim = 0;    // V
  float scale = 0;      // applied to q (K^-0.5 usually)
  ChainPrecision precision = ChainPrecision::kTf32;
  ChunkWorkspace workspace;
};

// Elements of each workspace array for `problem`.
struct ChunkWorkspaceSizes {
  int64_t entries = 0, q_decayed = 0, k_to_end = 0, w = 0, u = 0, a_qk = 0, decay_end = 0;
};
inline ChunkWorkspaceSizes chunk_workspace_sizes(const ChunkPrefillProblem& problem) {
  ChunkWorkspaceSizes sizes;
  sizes.entries = int64_t{problem.batch} * (problem.tokens / kPrefillChunk) * problem.value_heads;
  sizes.q_decayed = sizes.k_to_end = sizes.w = sizes.entries * kPrefillChunk * kPrefillKeyDim;
  sizes.u = sizes.entries * kPrefillChunk * kPrefillValueDim;
  sizes.a_qk = sizes.entries * kPrefillChunk * kPrefillChunk;
  sizes.decay_end = sizes.entries * kPrefillKeyDim;
  return sizes;
}

// nullptr when the kernels can run `problem`, else what is wrong with it (a static string).
inline const char* chunk_prefill_shape_error(const ChunkPrefillProblem& p) {
  if (p.key_dim != kPrefillKeyDim || p.value_dim != kPrefillValueDim) {
    return "K and V must be 128 (the only head sizes compiled)";
  }
  if (p.batch <= 0 || p.batch > 65535) return "batch must be in [1, 65535]";
  if (p.tokens <= 0 || p.tokens % kPrefillChunk != 0) return "T must be a positive multiple of 64";
  if (p.heads <= 0 || p.value_heads <= 0 || p.value_heads % p.heads != 0 || p.value_heads > 65535) {
    return "HV must be a positive multiple of H (at most 65535)";
  }
  if (p.record_global != nullptr &&
      (p.record_every <= 0 || (p.tokens / kPrefillChunk) % p.record_every != 0)) {
    return "record_every must divide the number of chunks T / 64";
  }
  if (!p.q_global || !p.k_global || !p.v_global || !p.g_global || !p.beta_global) {
    return "an input pointer is null";
  }
  const ChunkWorkspace& w = p.workspace;
  if (!w.q_decayed || !w.k_to_end || !w.w || !w.u || !w.a_qk || !w.decay_end) {
    return "a workspace pointer is null";
  }
  return nullptr;
}

// REQUIRES: chunk_prefill_shape_error(problem) == nullptr (else cudaErrorInvalidValue, no launch).
// Writes the workspace from the inputs.
cudaError_t launch_chunk_intra(const ChunkPrefillProblem& problem, cudaStream_t stream);
// Reads the workspace (and h0); writes o, the final states and the recorded states.
cudaError_t launch_chunk_state(const ChunkPrefillProblem& problem, cudaStream_t stream);
// Both, in order.
cudaError_t launch_chunk_prefill(const ChunkPrefillProblem& problem, cudaStream_t stream);

// For the CP chain: per workspace entry, the operands of M = Diag(e^{G_C}) − K_gᵀ W as an affine
// merge out = A · B + C (affine_merge.cuh): neg_k_to_end_t = −K_gᵀ (entries, K, C) and diagonal =
// Diag(e^{G_C}) (entries, K, K); B is the workspace's W (entries, C, K).
cudaError_t launch_chunk_transition_operands(const ChunkPrefillProblem& problem,
                                             float* neg_k_to_end_t, float* diagonal,
                                             cudaStream_t stream);

}  // namespace kda::kernels::cuda
