// kda/kernels/cuda/tf32x3_chained_accumulator_affine_merge.cu — the diagnostic variant of
// tf32x3_affine_merge: the same operand split (hi = tf32(a), lo = tf32(a − hi); lo·hi + hi·lo +
// hi·hi), but all three mma of every step accumulate into one running accumulator, as a plain
// 3×TF32 GEMM mainloop does. It isolates the tensor core's accumulate from the operand split.
// Tiling: grid (cols / 64, rows / 64, batch); 128 threads = 4 warps of 32 × 32 outputs
// (affine_merge_tile.cuh); the inner dimension through shared memory in steps of 32.
#include "kda/kernels/cuda/affine_merge.cuh"
#include "kda/kernels/cuda/affine_merge_tile.cuh"

namespace kda::kernels::cuda {
namespace {

using namespace affine_merge_detail;

struct ChainedSplitTf32x3 {
  __device__ __forceinline__ void operator()(float (&d)[4], const float (&a)[4],
                                             const float (&b)[2]) const {
    uint32_t a_hi[4], a_lo[4], b_hi[2], b_lo[2];
    split_tf32(a, a_hi, a_lo);
    split_tf32(b, b_hi, b_lo);
    mma_tf32(d, a_lo, b_hi);
    mma_tf32(d, a_hi, b_lo);
    mma_tf32(d, a_hi, b_hi);
  }
};

__global__ void __launch_bounds__(kThreads)
    tf32x3_chained_accumulator_affine_merge_kernel(const AffineMergeProblem problem) {
  run_mma_tile(problem, ChainedSplitTf32x3{});
}

}  // namespace

cudaError_t launch_tf32x3_chained_accumulator_affine_merge(const AffineMergeProblem& problem,
                                                           cudaStream_t stream) {
  if (affine_merge_shape_error(problem) != nullptr) return cudaErrorInvalidValue;
  const dim3 grid(problem.cols / kTileCols, problem.rows / kTileRows, problem.batch);
  tf32x3_chained_accumulator_affine_merge_kernel<<<grid, kThreads, 0, stream>>>(problem);
  return cudaGetLastError();
}

}  // namespace kda::kernels::cuda
