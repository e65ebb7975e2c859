// kda/kernels/cuda/tf32x3_exact_diagonal_affine_merge.cu — out = A · B + C as in
// tf32x3_affine_merge.cu, but A's diagonal in fp32: out = fma(A[r][r], B[r][c], (A − diag A) · B)
// + C, the off-diagonal product in 3×TF32. An M chain of slow decays is near the identity, so the
// diagonal carries most of each output; taking it off the tensor cores leaves the mma sums (which
// round toward zero) only the small off-diagonal part. The experiment behind issue 9's target of
// ≤ 2e-6 at T = 65536, 8 shards, where plain 3×TF32 measured 5.3e-6 (kda/gpu/README.md).
// Tiling: as every merge (affine_merge_tile.cuh), plus 64 diagonal entries in shared memory.
#include "kda/kernels/cuda/affine_merge.cuh"
#include "kda/kernels/cuda/affine_merge_tile.cuh"

namespace kda::kernels::cuda {
namespace {

using namespace affine_merge_detail;

__global__ void __launch_bounds__(kThreads)
    tf32x3_exact_diagonal_affine_merge_kernel(const AffineMergeProblem problem) {
  run_mma_tile<true>(problem, SplitTf32x3{});
}

}  // namespace

cudaError_t launch_tf32x3_exact_diagonal_affine_merge(const AffineMergeProblem& problem,
                                                      cudaStream_t stream) {
  if (affine_merge_shape_error(problem) != nullptr) return cudaErrorInvalidValue;
  const dim3 grid(problem.cols / kTileCols, problem.rows / kTileRows, problem.batch);
  tf32x3_exact_diagonal_affine_merge_kernel<<<grid, kThreads, 0, stream>>>(problem);
  return cudaGetLastError();
}

}  // namespace kda::kernels::cuda
