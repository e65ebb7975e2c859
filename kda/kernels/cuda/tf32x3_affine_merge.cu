// kda/kernels/cuda/tf32x3_affine_merge.cu — out = A · B + C with 3×TF32 on the tensor cores:
// each operand is split as hi = tf32(a) (round to nearest), lo = tf32(a − hi), and
// a · b ≈ lo·hi + hi·lo + hi·hi (lo·lo, ≈ 2^-22 relative, is dropped). The upstream fix of
// incident 1. Each m16n8k8 step's products go into fresh accumulators (the two small terms in
// one, hi·hi in another) that fp32 adds, rounding to nearest, fold into the running sum: mma
// rounds its sum toward zero (measured), a bias that compounds along an M chain. At T = 65536,
// 8 shards: 5.3e-6 this way, 1.2e-4 with one chained accumulator
// (tf32x3_chained_accumulator_affine_merge.cu), 1.6e-6 in fp32 FMA (kda/gpu/README.md).
// Tiling: grid (cols / 64, rows / 64, batch); 128 threads = 4 warps of 32 × 32 outputs
// (affine_merge_tile.cuh); the inner dimension through shared memory in steps of 32.
#include "kda/kernels/cuda/affine_merge.cuh"
#include "kda/kernels/cuda/affine_merge_tile.cuh"

namespace kda::kernels::cuda {
namespace {

using namespace affine_merge_detail;

__global__ void __launch_bounds__(kThreads)
    tf32x3_affine_merge_kernel(const AffineMergeProblem problem) {
  run_mma_tile(problem, SplitTf32x3{});
}

}  // namespace

cudaError_t launch_tf32x3_affine_merge(const AffineMergeProblem& problem, cudaStream_t stream) {
  if (affine_merge_shape_error(problem) != nullptr) return cudaErrorInvalidValue;
  const dim3 grid(problem.cols / kTileCols, problem.rows / kTileRows, problem.batch);
  tf32x3_affine_merge_kernel<<<grid, kThreads, 0, stream>>>(problem);
  return cudaGetLastError();
}

}  // namespace kda::kernels::cuda
