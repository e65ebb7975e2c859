// kda/kernels/cuda/tiled_v_decode.cu — decode, one CTA per (sequence, value head, V tile of 32).
// Tiling: grid (V / 32, HV, N); 64 threads = 2 warps, each warp a (K = 128) × 16 state slice held
// in registers (decode_warp_slice.cuh): 64 fp32 values per lane. Every CTA recomputes, over all of
// K, the q/k normalisation, the gate, exp(g) and β — the redundancy of incident 3 (4× that work
// for V = 128, and 4× the reads of q, k and g_raw), in exchange for 4× more CTAs at small batch.
// The state slice load is issued before that work so its latency overlaps it.
#include "kda/kernels/cuda/decode.cuh"
#include "kda/kernels/cuda/decode_warp_slice.cuh"

namespace kda::kernels::cuda {
namespace {

using namespace decode_detail;

constexpr int kTileColumns = 32;                          // BV
constexpr int kTileWarps = kTileColumns / kSliceColumns;  // 2
constexpr int kTileThreads = kTileWarps * kWarpSize;      // 64

__global__ void __launch_bounds__(kTileThreads) tiled_v_decode_kernel(const DecodeProblem problem) {
  __shared__ TokenValuesShared values_shared;
  const int tile = blockIdx.x, value_head = blockIdx.y, sequence = blockIdx.z;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t state_slot = problem.state_indices_global[sequence];
  float* head_state_global =  // (K, V)
      problem.state_global +
      (state_slot * problem.num_value_heads + value_head) * kKeyDim * kValueDim;
  const int64_t head_row = static_cast<int64_t>(sequence) * problem.num_value_heads + value_head;
  const int slice_column0 = tile * kTileColumns + warp * kSliceColumns;

  SliceRegisters slice;
  load_slice(head_state_global, problem.v_global + head_row * kValueDim, slice_column0, lane,
             slice);
  compute_token_values(problem, sequence, value_head, values_shared);
  __syncthreads();
  update_slice(values_shared, head_state_global, problem.o_global + head_row * kValueDim,
               slice_column0, lane, slice);
}

}  // namespace

cudaError_t launch_tiled_v_decode(const DecodeProblem& problem, cudaStream_t stream) {
  if (decode_shape_error(problem) != nullptr) return cudaErrorInvalidValue;
  const dim3 grid(kValueDim / kTileColumns, problem.num_value_heads, problem.num_sequences);
  tiled_v_decode_kernel<<<grid, kTileThreads, 0, stream>>>(problem);
  return cudaGetLastError();
}

}  // namespace kda::kernels::cuda
