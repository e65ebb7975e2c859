// kda/kernels/cuda/decode_warp_slice.cuh — the device pieces both decode kernels are built from.
// A warp owns a (K = 128) × 16 slice of one head's state: lane = row_lane · 4 + column_lane, with
// column_lane ∈ [0, 4) holding 4 adjacent columns (one 16-byte vector) and row_lane ∈ [0, 8)
// holding rows row_lane + 8·i, i ∈ [0, 16). So each lane keeps 16 float4 = 64 state values in
// registers, one load instruction of the warp reads 8 rows × 64 contiguous bytes, and every
// reduction over K (v̂ = Sᵀk, Sᵀq) is 16 in-lane adds plus three shuffles across row lanes: no
// shared memory. The per-token values (normalised q and k, q·k, α = exp(g), β) come from shared
// memory, written by compute_token_values. The tiled kernel is built from the slice pieces below;
// the merged kernel shares the token values and bf16 loads but lays its warps along whole rows
// (merged_v_decode.cu), reducing in the same order, so the two stay bit-identical.
#pragma once

#include <cuda_bf16.h>

#include "kda/kernels/cuda/decode.cuh"

namespace kda::kernels::cuda::decode_detail {

inline constexpr int kKeyDim = kDecodeKeyDim;
inline constexpr int kValueDim = kDecodeValueDim;
inline constexpr int kWarpSize = 32;
inline constexpr int kSliceColumns = 16;                    // V columns per warp
inline constexpr int kColumnLanes = kSliceColumns / 4;      // 4 lanes × float4
inline constexpr int kRowLanes = kWarpSize / kColumnLanes;  // 8
inline constexpr int kRowsPerLane = kKeyDim / kRowLanes;    // 16
inline constexpr float kNormEps = 1e-6f;

// The per-token values of one (sequence, value head), shared by every warp of a CTA.
struct TokenValuesShared {
  float q[kKeyDim];      // (K) L2-normalised, × K^-0.5
  float k[kKeyDim];      // (K) L2-normalised
  float alpha[kKeyDim];  // (K) exp(g)
  float beta;
  float q_dot_k;
};

struct SliceRegisters {
  float4 state[kRowsPerLane];  // (16 rows, 4 columns) of this lane
  float4 v;                    // (4 columns)
};

__device__ __forceinline__ float4 load_bf16x4(const __nv_bfloat16* source_global) {
  // 8-byte load: the 4 values are adjacent and 8-byte aligned (K, V multiples of 4).
  const uint2 bits = *reinterpret_cast<const uint2*>(source_global);
  const __nv_bfloat162 low = *reinterpret_cast<const __nv_bfloat162*>(&bits.x);
  const __nv_bfloat162 high = *reinterpret_cast<const __nv_bfloat162*>(&bits.y);
  const float2 a = __bfloat1622float2(low), b = __bfloat1622float2(high);
  return make_float4(a.x, a.y, b.x, b.y);
}

__device__ __forceinline__ float warp_sum_all(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// Sum over the row lanes (lane bits 2..4) only: each column lane keeps its own columns.
__device__ __forceinline__ float4 sum_over_row_lanes(float4 value) {
  for (int offset = kColumnLanes; offset < kWarpSize; offset *= 2) {
    value.x += __shfl_xor_sync(0xffffffffu, value.x, offset);
    value.y += __shfl_xor_sync(0xffffffffu, value.y, offset);
    value.z += __shfl_xor_sync(0xffffffffu, value.z, offset);
    value.w += __shfl_xor_sync(0xffffffffu, value.w, offset);
  }
  return value;
}

__device__ __forceinline__ float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// Issued before compute_token_values so the state's HBM latency overlaps that work.
__device__ __forceinline__ void load_slice(const float* head_state_global,      // (K, V)
                                           const __nv_bfloat16* v_head_global,  // (V)
                                           int slice_column0, int lane, SliceRegisters& slice) {
  const int row_lane = lane / kColumnLanes, column = slice_column0 + 4 * (lane % kColumnLanes);
#pragma unroll
  for (int i = 0; i < kRowsPerLane; ++i) {
    const int row = row_lane + kRowLanes * i;
    slice.state[i] = *reinterpret_cast<const float4*>(head_state_global + row * kValueDim + column);
  }
  slice.v = load_bf16x4(v_head_global + column);
}

// Warp 0 normalises q and k and forms q·k; the other warps compute α over K; thread 0 of warp 0
// computes β. REQUIRES: blockDim.x ≥ 64; a __syncthreads() before the values are read.
__device__ __forceinline__ void compute_token_values(const DecodeProblem& problem, int sequence,
                                                     int value_head, TokenValuesShared& values) {
  const int thread = threadIdx.x, lane = thread % kWarpSize, warp = thread / kWarpSize;
  const int head = value_head / (problem.num_value_heads / problem.num_heads);
  if (warp == 0) {
    const int64_t qk_offset =
        (static_cast<int64_t>(sequence) * problem.num_heads + head) * kKeyDim + 4 * lane;
    const float4 q = load_bf16x4(problem.q_global + qk_offset);
    const float4 k = load_bf16x4(problem.k_global + qk_offset);
    const float q_norm2 = warp_sum_all(q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w);
    const float k_norm2 = warp_sum_all(k.x * k.x + k.y * k.y + k.z * k.z + k.w * k.w);
    const float q_scale = 1.f / sqrtf(static_cast<float>(kKeyDim) * (q_norm2 + kNormEps));
    const float k_scale = 1.f / sqrtf(k_norm2 + kNormEps);
    const float4 q_n = make_float4(q.x * q_scale, q.y * q_scale, q.z * q_scale, q.w * q_scale);
    const float4 k_n = make_float4(k.x * k_scale, k.y * k_scale, k.z * k_scale, k.w * k_scale);
    *reinterpret_cast<float4*>(values.q + 4 * lane) = q_n;
    *reinterpret_cast<float4*>(values.k + 4 * lane) = k_n;
    const float q_dot_k =
        warp_sum_all(q_n.x * k_n.x + q_n.y * k_n.y + q_n.z * k_n.z + q_n.w * k_n.w);
    if (lane == 0) {
      values.q_dot_k = q_dot_k;
      const float b_raw = __bfloat162float(
          problem
              .b_raw_global[static_cast<int64_t>(sequence) * problem.num_value_heads + value_head]);
      values.beta = 1.f / (1.f + expf(-b_raw));
    }
  } else {
    const float decay_rate = expf(problem.a_log_global[value_head]);
    const int64_t g_offset =
        (static_cast<int64_t>(sequence) * problem.num_value_heads + value_head) * kKeyDim;
    for (int key = thread - kWarpSize; key < kKeyDim; key += blockDim.x - kWarpSize) {
      const float x = __bfloat162float(problem.g_raw_global[g_offset + key]) +
                      problem.dt_bias_global[value_head * kKeyDim + key];
      values.alpha[key] = expf(-decay_rate * softplus(x));
    }
  }
}

// The token step on one warp's slice, state already in registers; writes the new state back and
// this slice's 16 outputs. o = (Diag(α)S)ᵀq + δ (k·q) is Sᵀq after the update, without a second
// pass over the state.
__device__ __forceinline__ void update_slice(const TokenValuesShared& values,
                                             float* head_state_global,  // (K, V)
                                             float* o_head_global,      // (V)
                                             int slice_column0, int lane, SliceRegisters& slice) {
  const int row_lane = lane / kColumnLanes, column = slice_column0 + 4 * (lane % kColumnLanes);
  float4 projection = make_float4(0.f, 0.f, 0.f, 0.f);  // Σ_k S[k, :] k[k]
  float4 readout = make_float4(0.f, 0.f, 0.f, 0.f);     // Σ_k S[k, :] q[k]
#pragma unroll
  for (int i = 0; i < kRowsPerLane; ++i) {
    const int row = row_lane + kRowLanes * i;
    const float alpha = values.alpha[row], key = values.k[row], query = values.q[row];
    float4& s = slice.state[i];
    s.x *= alpha, s.y *= alpha, s.z *= alpha, s.w *= alpha;
    projection.x = fmaf(key, s.x, projection.x), projection.y = fmaf(key, s.y, projection.y);
    projection.z = fmaf(key, s.z, projection.z), projection.w = fmaf(key, s.w, projection.w);
    readout.x = fmaf(query, s.x, readout.x), readout.y = fmaf(query, s.y, readout.y);
    readout.z = fmaf(query, s.z, readout.z), readout.w = fmaf(query, s.w, readout.w);
  }
  projection = sum_over_row_lanes(projection);
  readout = sum_over_row_lanes(readout);
  const float beta = values.beta;
  const float4 delta =
      make_float4(beta * (slice.v.x - projection.x), beta * (slice.v.y - projection.y),
                  beta * (slice.v.z - projection.z), beta * (slice.v.w - projection.w));
#pragma unroll
  for (int i = 0; i < kRowsPerLane; ++i) {
    const int row = row_lane + kRowLanes * i;
    const float key = values.k[row];
    float4 s = slice.state[i];
    s.x = fmaf(key, delta.x, s.x), s.y = fmaf(key, delta.y, s.y);
    s.z = fmaf(key, delta.z, s.z), s.w = fmaf(key, delta.w, s.w);
    *reinterpret_cast<float4*>(head_state_global + row * kValueDim + column) = s;
  }
  if (row_lane == 0) {
    const float q_dot_k = values.q_dot_k;
    *reinterpret_cast<float4*>(o_head_global + column) =
        make_float4(fmaf(q_dot_k, delta.x, readout.x), fmaf(q_dot_k, delta.y, readout.y),
                    fmaf(q_dot_k, delta.z, readout.z), fmaf(q_dot_k, delta.w, readout.w));
  }
}

}  // namespace kda::kernels::cuda::decode_detail
