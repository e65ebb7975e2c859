// kda/kernels/cuda/tf32_truncate_affine_merge.cu — out = A · B + C with mma.sync m16n8k8 TF32 on
// the raw fp32 operands: the tensor core reads the top 19 bits of each, so every operand is
// truncated to 10 mantissa bits, a bias toward zero of about 2^-11 per product. Chained over the
// near-identity M of slowly decaying gates, this is the drift of incident 1 (reference/kda.md).
// Tiling: grid (cols / 64, rows / 64, batch); 128 threads = 4 warps of 32 × 32 outputs
// (affine_merge_tile.cuh); the inner dimension through shared memory in steps of 32.
#include "kda/kernels/cuda/affine_merge.cuh"
#include "kda/kernels/cuda/affine_merge_tile.cuh"

namespace kda::kernels::cuda {
namespace {

using namespace affine_merge_detail;

struct TruncatingTf32 {
  __device__ __forceinline__ void operator()(float (&d)[4], const float (&a)[4],
                                             const float (&b)[2]) const {
    const uint32_t a_bits[4] = {__float_as_uint(a[0]), __float_as_uint(a[1]), __float_as_uint(a[2]),
                                __float_as_uint(a[3])};
    const uint32_t b_bits[2] = {__float_as_uint(b[0]), __float_as_uint(b[1])};
    mma_tf32(d, a_bits, b_bits);
  }
};

__global__ void __launch_bounds__(kThreads)
    tf32_truncate_affine_merge_kernel(const AffineMergeProblem problem) {
  run_mma_tile(problem, TruncatingTf32{});
}

}  // namespace

cudaError_t launch_tf32_truncate_affine_merge(const AffineMergeProblem& problem,
                                              cudaStream_t stream) {
  if (affine_merge_shape_error(problem) != nullptr) return cudaErrorInvalidValue;
  const dim3 grid(problem.cols / kTileCols, problem.rows / kTileRows, problem.batch);
  tf32_truncate_affine_merge_kernel<<<grid, kThreads, 0, stream>>>(problem);
  return cudaGetLastError();
}

}  // namespace kda::kernels::cuda
