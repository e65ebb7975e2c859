// kda/kernels/cuda/decode.cuh — one decode token of Kimi Delta Attention on the GPU, for a batch of
// sequences with continuous batching (each sequence names the state slot it updates in place).
//   S ← Diag(α) S;  v̂ = Sᵀ k;  S ← S + k (β (v − v̂))ᵀ;  o = Sᵀ (q · K^-0.5)
// with q, k L2-normalised over K (eps 1e-6), g = −exp(A_log) · softplus(g_raw + dt_bias), α =
// exp(g), β = sigmoid(b_raw). Two kernels compute the same function with different tilings:
//   tiled_v_decode  (tiled_v_decode.cu):  one CTA per (sequence, head, V tile of 32)
//   merged_v_decode (merged_v_decode.cu): one CTA per (sequence, head), all of V
// Thread-safety: launches are asynchronous on the given stream; a DecodeProblem is only read.
// Ownership: every pointer is device memory owned by the caller.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kda::kernels::cuda {

// The only head sizes the kernels are compiled for.
inline constexpr int kDecodeKeyDim = 128;
inline constexpr int kDecodeValueDim = 128;

struct DecodeProblem {
  const __nv_bfloat16* q_global = nullptr;        // (N, H, K)
  const __nv_bfloat16* k_global = nullptr;        // (N, H, K)
  const __nv_bfloat16* v_global = nullptr;        // (N, HV, V)
  const __nv_bfloat16* g_raw_global = nullptr;    // (N, HV, K)
  const __nv_bfloat16* b_raw_global = nullptr;    // (N, HV)
  const float* a_log_global = nullptr;            // (HV)
  const float* dt_bias_global = nullptr;          // (HV, K)
  float* state_global = nullptr;                  // (num_states, HV, K, V), updated in place
  const int32_t* state_indices_global = nullptr;  // (N), each in [0, num_states), distinct
  float* o_global = nullptr;                      // (N, HV, V), fp32
  int num_sequences = 0;                          // N
  int num_heads = 0;                              // H (q/k heads)
  int num_value_heads = 0;                        // HV, a multiple of H
  int key_dim = 0;                                // K
  int value_dim = 0;                              // V
  int num_states = 0;
};

// nullptr when the kernels can run `problem`, else what is wrong with it (a static string).
inline const char* decode_shape_error(const DecodeProblem& problem) {
  if (problem.key_dim != kDecodeKeyDim) return "key_dim must be 128";
  if (problem.value_dim != kDecodeValueDim) return "value_dim must be 128";
  if (problem.num_sequences <= 0) return "num_sequences must be positive";
  if (problem.num_sequences > 65535) return "num_sequences must be at most 65535 (grid.z)";
  if (problem.num_heads <= 0 || problem.num_value_heads <= 0) return "head counts must be positive";
  if (problem.num_value_heads % problem.num_heads != 0) return "HV must be a multiple of H";
  if (problem.num_states <= 0) return "num_states must be positive";
  if (!problem.q_global || !problem.k_global || !problem.v_global || !problem.g_raw_global ||
      !problem.b_raw_global || !problem.a_log_global || !problem.dt_bias_global ||
      !problem.state_global || !problem.state_indices_global || !problem.o_global) {
    return "a tensor pointer is null";
  }
  return nullptr;
}

// REQUIRES: decode_shape_error(problem) == nullptr (else returns cudaErrorInvalidValue and
// launches nothing); distinct state indices (two sequences updating one slot race).
cudaError_t launch_tiled_v_decode(const DecodeProblem& problem, cudaStream_t stream);
cudaError_t launch_merged_v_decode(const DecodeProblem& problem, cudaStream_t stream);

}  // namespace kda::kernels::cuda
