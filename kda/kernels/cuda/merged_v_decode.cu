// kda/kernels/cuda/merged_v_decode.cu — decode, one CTA per (sequence, value head), all of V.
// Tiling: grid (HV, N); 256 threads = 8 warps, each warp a (K = 128) × 16 state slice held in
// registers (decode_warp_slice.cuh): 64 fp32 values per lane, the whole 64 KB head state across
// the CTA. The q/k normalisation, gate, exp(g) and β are computed once per (sequence, head) into
// shared memory (warp 0: q, k, q·k, β; warps 1–7: α) and read by all 8 warps; the reductions
// over K are warp shuffles. The fix of incident 3; it gives up 4× CTA-level parallelism against
// tiled_v_decode, which matters only when N · HV CTAs do not fill the GPU.
#include "kda/kernels/cuda/decode.cuh"
#include "kda/kernels/cuda/decode_warp_slice.cuh"

namespace kda::kernels::cuda {
namespace {

using namespace decode_detail;

constexpr int kMergedWarps = kValueDim / kSliceColumns;   // 8
constexpr int kMergedThreads = kMergedWarps * kWarpSize;  // 256

__global__ void __launch_bounds__(kMergedThreads)
    merged_v_decode_kernel(const DecodeProblem problem) {
  __shared__ TokenValuesShared values_shared;
  const int value_head = blockIdx.x, sequence = blockIdx.y;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int64_t state_slot = problem.state_indices_global[sequence];
  float* head_state_global =  // (K, V)
      problem.state_global +
      (state_slot * problem.num_value_heads + value_head) * kKeyDim * kValueDim;
  const int64_t head_row = static_cast<int64_t>(sequence) * problem.num_value_heads + value_head;
  const int slice_column0 = warp * kSliceColumns;

  SliceRegisters slice;
  load_slice(head_state_global, problem.v_global + head_row * kValueDim, slice_column0, lane,
             slice);
  compute_token_values(problem, sequence, value_head, values_shared);
  __syncthreads();
  update_slice(values_shared, head_state_global, problem.o_global + head_row * kValueDim,
               slice_column0, lane, slice);
}

}  // namespace

cudaError_t launch_merged_v_decode(const DecodeProblem& problem, cudaStream_t stream) {
  if (decode_shape_error(problem) != nullptr) return cudaErrorInvalidValue;
  const dim3 grid(problem.num_value_heads, problem.num_sequences);
  merged_v_decode_kernel<<<grid, kMergedThreads, 0, stream>>>(problem);
  return cudaGetLastError();
}

}  // namespace kda::kernels::cuda
