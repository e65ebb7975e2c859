// kda/kernels/cuda/merged_v_decode.cu — decode, one CTA per (sequence, value head), all of V.
// Tiling: grid (HV, N); 256 threads = 8 warps. Warp w holds the K rows w, w + 8, ..., w + 120 of
// the 128 × 128 head state in registers, lane l the 4 columns 4l..4l+3 of each: 16 float4 = 64
// fp32 values per lane, the whole 64 KB head state across the CTA, and every load or store
// instruction of a warp moves one whole 512-byte row. The q/k normalisation, gate, exp(g) and β
// are computed once per (sequence, head) into shared memory (warp 0: q, k, q·k, β; warps 1–7: α)
// and read by all 8 warps (a row index is warp-uniform: broadcasts). A reduction over K (Sᵀk,
// Sᵀq) is 16 in-lane multiply-adds, then the 8 warps' partials combine through 8 KB of shared
// memory in the same tree the tiled kernel's shuffles form, so both kernels give bit-identical
// results. The fix of incident 3; it gives up 4× CTA-level parallelism against tiled_v_decode,
// which matters only when N · HV CTAs do not fill the GPU.
#include "kda/kernels/cuda/decode.cuh"
#include "kda/kernels/cuda/decode_warp_slice.cuh"

namespace kda::kernels::cuda {
namespace {

using namespace decode_detail;

constexpr int kMergedWarps = kRowLanes;                   // 8: warp w ~ the tiled row lane w
constexpr int kMergedThreads = kMergedWarps * kWarpSize;  // 256
static_assert(kWarpSize * 4 == kValueDim, "a warp's 32 lanes × float4 cover one row of V");

// Each warp's partial sums over its 16 rows, one float4 (4 columns) per lane.
struct PartialsShared {
  float4 projection[kMergedWarps][kWarpSize];  // Σ_k S[k, :] k[k] over the warp's rows
  float4 readout[kMergedWarps][kWarpSize];     // Σ_k S[k, :] q[k]
};

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)): the order of the xor-4/8/16 shuffle
// butterfly in sum_over_row_lanes (fp32 addition is commutative, so each pair is exact).
__device__ __forceinline__ float4 tree_sum(const float4 (&partial)[kMergedWarps][kWarpSize],
                                           int lane) {
  return add4(
      add4(add4(partial[0][lane], partial[1][lane]), add4(partial[2][lane], partial[3][lane])),
      add4(add4(partial[4][lane], partial[5][lane]), add4(partial[6][lane], partial[7][lane])));
}

__global__ void __launch_bounds__(kMergedThreads)
    merged_v_decode_kernel(const DecodeProblem problem) {
  __shared__ TokenValuesShared values_shared;
  __shared__ PartialsShared partials;
  const int value_head = blockIdx.x, sequence = blockIdx.y;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t state_slot = problem.state_indices_global[sequence];
  float* head_state_global =  // (K, V)
      problem.state_global +
      (state_slot * problem.num_value_heads + value_head) * kKeyDim * kValueDim;
  const int64_t head_row = static_cast<int64_t>(sequence) * problem.num_value_heads + value_head;
  const int column = 4 * lane;

  // Issued before the token values so the state's HBM latency overlaps that work.
  float4 state[kRowsPerLane];  // rows warp + 8 i, columns column..column+3
#pragma unroll
  for (int i = 0; i < kRowsPerLane; ++i) {
    const int row = warp + kRowLanes * i;
    state[i] = *reinterpret_cast<const float4*>(head_state_global + row * kValueDim + column);
  }
  const float4 v = load_bf16x4(problem.v_global + head_row * kValueDim + column);
  compute_token_values(problem, sequence, value_head, values_shared);
  __syncthreads();

  float4 projection = make_float4(0.f, 0.f, 0.f, 0.f);
  float4 readout = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int i = 0; i < kRowsPerLane; ++i) {
    const int row = warp + kRowLanes * i;
    const float alpha = values_shared.alpha[row], key = values_shared.k[row],
                query = values_shared.q[row];
    float4& s = state[i];
    s.x *= alpha, s.y *= alpha, s.z *= alpha, s.w *= alpha;
    projection.x = fmaf(key, s.x, projection.x), projection.y = fmaf(key, s.y, projection.y);
    projection.z = fmaf(key, s.z, projection.z), projection.w = fmaf(key, s.w, projection.w);
    readout.x = fmaf(query, s.x, readout.x), readout.y = fmaf(query, s.y, readout.y);
    readout.z = fmaf(query, s.z, readout.z), readout.w = fmaf(query, s.w, readout.w);
  }
  partials.projection[warp][lane] = projection;
  partials.readout[warp][lane] = readout;
  __syncthreads();
  projection = tree_sum(partials.projection, lane);
  const float beta = values_shared.beta;
  const float4 delta = make_float4(beta * (v.x - projection.x), beta * (v.y - projection.y),
                                   beta * (v.z - projection.z), beta * (v.w - projection.w));
#pragma unroll
  for (int i = 0; i < kRowsPerLane; ++i) {
    const int row = warp + kRowLanes * i;
    const float key = values_shared.k[row];
    float4 s = state[i];
    s.x = fmaf(key, delta.x, s.x), s.y = fmaf(key, delta.y, s.y);
    s.z = fmaf(key, delta.z, s.z), s.w = fmaf(key, delta.w, s.w);
    *reinterpret_cast<float4*>(head_state_global + row * kValueDim + column) = s;
  }
  if (warp == 0) {
    readout = tree_sum(partials.readout, lane);
    const float q_dot_k = values_shared.q_dot_k;
    *reinterpret_cast<float4*>(problem.o_global + head_row * kValueDim + column) =
        make_float4(fmaf(q_dot_k, delta.x, readout.x), fmaf(q_dot_k, delta.y, readout.y),
                    fmaf(q_dot_k, delta.z, readout.z), fmaf(q_dot_k, delta.w, readout.w));
  }
}

}  // namespace

cudaError_t launch_merged_v_decode(const DecodeProblem& problem, cudaStream_t stream) {
  if (decode_shape_error(problem) != nullptr) return cudaErrorInvalidValue;
  const dim3 grid(problem.num_value_heads, problem.num_sequences);
  merged_v_decode_kernel<<<grid, kMergedThreads, 0, stream>>>(problem);
  return cudaGetLastError();
}

}  // namespace kda::kernels::cuda
