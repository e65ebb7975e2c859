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
// Sequences: B of T tokens each, or a packed varlen batch (cu_seqlens, the inputs (1, Σ T_b, …)).
// A sequence's last chunk may be partial: its rows past the end are read as zero (q, k, v, g, β),
// which makes them identity steps of the recurrence, and its outputs past the end are not written.
// Intra-card context parallelism (launch_chunk_prefill_cp, chunk_cp.cu): one sequence of T tokens
// split into P shards is, in memory, P sequences of T / P tokens (B, T, … layouts), so chunk_intra
// runs once; chunk_state runs the shards at once from zero, carrying beside each shard's end state
// H_r its transition M_r (the product of its chunk maps, in 3×TF32 whatever the pass's precision);
// chunk_cp_scan chains S_{r+1} = M_r S_r + H_r (3×TF32, M's diagonal in fp32); chunk_state runs
// the shards again from S_r and writes o. No host round trip: four launches.
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

// Per (sequence, chunk, value head) intermediates, chunk-major: entry e = (c_b + c) · HV + hv with
// c_b the sequence's first chunk (b · ⌈T / 64⌉, or cu_chunks[b]), so a reshaped problem (P
// sequences of T / P tokens) addresses the same entries.
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
  // With cu_seqlens: q, k, v, g, β and o are packed (1, T, …), T = Σ T_b.
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
  // The context-parallel pass's first phase: beside the state tiles, chunk_state carries each
  // (sequence, value head)'s transition M = Π_c (Diag(e^{G_C}) − K_gᵀ W) from the identity (U
  // taken as zero), in 3×TF32, into (B, HV, K, K); nullptr: none.
  float* transition_global = nullptr;
  // Varlen: sequence b is tokens [cu_seqlens[b], cu_seqlens[b + 1]) of the packed inputs and
  // chunks [cu_chunks[b], cu_chunks[b + 1]) of the workspace, cu_chunks[b + 1] − cu_chunks[b] =
  // ⌈T_b / 64⌉; both device int32 (B + 1), total_chunks = cu_chunks[B] (host copy, for the grid).
  // nullptr: B sequences of `tokens` each.
  const int* cu_seqlens = nullptr;
  const int* cu_chunks = nullptr;
  int total_chunks = 0;
  int batch = 0;        // B
  int tokens = 0;       // T per sequence (with cu_seqlens: Σ T_b)
  int heads = 0;        // H
  int value_heads = 0;  // HV, a multiple of H
  int key_dim = 0;      // K
  int value_dim = 0;    // V
  float scale = 0;      // applied to q (K^-0.5 usually)
  ChainPrecision precision = ChainPrecision::kTf32;
  ChunkWorkspace workspace;
};

__host__ __device__ inline int chunks_of(int tokens) {
  return (tokens + kPrefillChunk - 1) / kPrefillChunk;
}

// Chunks of the whole problem (every sequence's, partial ones included).
inline int64_t chunk_count(const ChunkPrefillProblem& problem) {
  return problem.cu_seqlens != nullptr ? int64_t{problem.total_chunks}
                                       : int64_t{problem.batch} * chunks_of(problem.tokens);
}

// One sequence's place in the inputs and in the workspace.
struct SequenceSpan {
  int64_t token_begin = 0;  // its first token's row in the (packed) inputs and o
  int tokens = 0;           // T_b
  int64_t chunk_begin = 0;  // its first chunk's index (entries (chunk_begin + c) · HV + hv)
};
__device__ __forceinline__ SequenceSpan sequence_span(const ChunkPrefillProblem& p, int sequence) {
  if (p.cu_seqlens != nullptr) {
    const int begin = p.cu_seqlens[sequence];
    return {begin, p.cu_seqlens[sequence + 1] - begin, p.cu_chunks[sequence]};
  }
  return {int64_t{sequence} * p.tokens, p.tokens, int64_t{sequence} * chunks_of(p.tokens)};
}

// Elements of each workspace array for `problem`.
struct ChunkWorkspaceSizes {
  int64_t entries = 0, q_decayed = 0, k_to_end = 0, w = 0, u = 0, a_qk = 0, decay_end = 0;
};
inline ChunkWorkspaceSizes chunk_workspace_sizes(const ChunkPrefillProblem& problem) {
  ChunkWorkspaceSizes sizes;
  sizes.entries = chunk_count(problem) * problem.value_heads;
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
  if (p.tokens <= 0) return "T must be positive";
  if ((p.cu_seqlens == nullptr) != (p.cu_chunks == nullptr)) {
    return "cu_seqlens and cu_chunks go together";
  }
  if (p.cu_seqlens != nullptr && (p.total_chunks < p.batch || p.total_chunks <= 0)) {
    return "total_chunks must be cu_chunks[B], at least one chunk per sequence";
  }
  if (p.cu_seqlens != nullptr && (p.record_global != nullptr || p.transition_global != nullptr)) {
    return "recorded states and transitions need sequences of equal length (no cu_seqlens)";
  }
  if (p.heads <= 0 || p.value_heads <= 0 || p.value_heads % p.heads != 0 || p.value_heads > 65535) {
    return "HV must be a positive multiple of H (at most 65535)";
  }
  if (p.record_global != nullptr &&
      (p.record_every <= 0 || chunks_of(p.tokens) % p.record_every != 0)) {
    return "record_every must divide the number of chunks ⌈T / 64⌉";
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

// The context-parallel prefill's device buffers for P shards (chunk_cp.cu), fp32:
// transitions (B·P, HV, K, K), shard_ends and starts (B·P, HV, K, V).
struct ChunkCpWorkspace {
  float* transitions = nullptr;
  float* shard_ends = nullptr;
  float* starts = nullptr;
};
inline int64_t chunk_cp_workspace_elements(const ChunkPrefillProblem& problem, int shards) {
  return int64_t{problem.batch} * shards * problem.value_heads * kPrefillKeyDim * kPrefillKeyDim;
}
// nullptr when launch_chunk_prefill_cp can run `problem` in `shards` shards, else why not.
inline const char* chunk_prefill_cp_error(const ChunkPrefillProblem& p, int shards) {
  if (const char* error = chunk_prefill_shape_error(p)) return error;
  if (shards < 2) return "context parallelism needs at least 2 shards";
  if (p.cu_seqlens != nullptr) return "context parallelism takes sequences of equal length";
  if (p.tokens % (kPrefillChunk * shards) != 0) return "T must be a multiple of 64 x shards";
  if (int64_t{p.batch} * shards > 65535) return "B x shards must be at most 65535";
  if (p.record_global != nullptr || p.transition_global != nullptr) {
    return "the context-parallel pass records no states and takes no transition buffer";
  }
  return nullptr;
}
// The shard count to ask for when the caller names none; 1: no context parallelism at this shape.
// The one-pass prefill's chunk_state has B·HV·4 CTAs (32-column V tiles), each walking all of its
// sequence's chunks; shards double while the second pass's CTAs still fit in one wave of
// `multiprocessors` and each shard keeps at least 16 chunks (the first pass and the scan cost a
// shard's worth of work each, so thinner shards stop paying). Varlen batches and T not a multiple
// of 64 take 1.
inline int chunk_prefill_cp_shards(const ChunkPrefillProblem& problem, int multiprocessors) {
  if (problem.cu_seqlens != nullptr || problem.tokens % kPrefillChunk != 0) return 1;
  const int64_t ctas = int64_t{problem.batch} * problem.value_heads * (kPrefillValueDim / 32);
  const int chunks = problem.tokens / kPrefillChunk;
  int shards = 1;
  while (ctas * shards * 2 <= multiprocessors && chunks % (shards * 2) == 0 &&
         chunks / (shards * 2) >= 16 && int64_t{problem.batch} * shards * 2 <= 65535) {
    shards *= 2;
  }
  return shards;
}
// REQUIRES: chunk_prefill_cp_error(problem, shards) == nullptr (else cudaErrorInvalidValue, no
// launch); each ChunkCpWorkspace array holds chunk_cp_workspace_elements(problem, shards) floats.
// Writes o and the final states as launch_chunk_prefill does, the shards at once: chunk_intra,
// chunk_state (H and M per shard), chunk_cp_scan (start states, and the final states), chunk_state
// (o from each shard's start state).
cudaError_t launch_chunk_prefill_cp(const ChunkPrefillProblem& problem, int shards,
                                    const ChunkCpWorkspace& cp, cudaStream_t stream);

// For the CP chain: per workspace entry, the operands of M = Diag(e^{G_C}) − K_gᵀ W as an affine
// merge out = A · B + C (affine_merge.cuh): neg_k_to_end_t = −K_gᵀ (entries, K, C) and diagonal =
// Diag(e^{G_C}) (entries, K, K); B is the workspace's W (entries, C, K).
cudaError_t launch_chunk_transition_operands(const ChunkPrefillProblem& problem,
                                             float* neg_k_to_end_t, float* diagonal,
                                             cudaStream_t stream);

}  // namespace kda::kernels::cuda
