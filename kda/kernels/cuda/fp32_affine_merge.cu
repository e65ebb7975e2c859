// kda/kernels/cuda/fp32_affine_merge.cu — out = A · B + C with fp32 FMA on the CUDA cores: the
// precision baseline for the merge and the form the shard-local H chain runs in.
// Tiling: grid (cols / 64, rows / 64, batch); 128 threads, each an 8 × 4 block of the 64 × 64
// tile (rows 8·(t / 16) + i, columns 4·(t % 16) + j); the inner dimension through shared memory
// in steps of 32 (affine_merge_tile.cuh).
#include "kda/kernels/cuda/affine_merge.cuh"
#include "kda/kernels/cuda/affine_merge_tile.cuh"

namespace kda::kernels::cuda {
namespace {

using namespace affine_merge_detail;

constexpr int kThreadRows = 8;
constexpr int kThreadCols = 4;
constexpr int kThreadsAcross = kTileCols / kThreadCols;  // 16

__global__ void __launch_bounds__(kThreads)
    fp32_affine_merge_kernel(const AffineMergeProblem problem) {
  __shared__ TileShared shared;
  const TileCoordinates tile = tile_coordinates(problem);
  const int thread_row0 = (threadIdx.x / kThreadsAcross) * kThreadRows;
  const int thread_col0 = (threadIdx.x % kThreadsAcross) * kThreadCols;
  float accumulators[kThreadRows][kThreadCols] = {};
  for (int inner0 = 0; inner0 < problem.inner; inner0 += kTileInner) {
    __syncthreads();
    load_tile(problem, tile, inner0, shared);
    __syncthreads();
#pragma unroll 8
    for (int inner = 0; inner < kTileInner; ++inner) {
      const float4 b = *reinterpret_cast<const float4*>(&shared.b[inner][thread_col0]);
#pragma unroll
      for (int i = 0; i < kThreadRows; ++i) {
        const float a = shared.a[thread_row0 + i][inner];
        accumulators[i][0] = fmaf(a, b.x, accumulators[i][0]);
        accumulators[i][1] = fmaf(a, b.y, accumulators[i][1]);
        accumulators[i][2] = fmaf(a, b.z, accumulators[i][2]);
        accumulators[i][3] = fmaf(a, b.w, accumulators[i][3]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kThreadRows; ++i) {
    const int64_t offset =
        static_cast<int64_t>(tile.row0 + thread_row0 + i) * problem.cols + tile.col0 + thread_col0;
    float4 value =
        make_float4(accumulators[i][0], accumulators[i][1], accumulators[i][2], accumulators[i][3]);
    if (tile.c_global) {
      const float4 addend = *reinterpret_cast<const float4*>(tile.c_global + offset);
      value.x += addend.x, value.y += addend.y, value.z += addend.z, value.w += addend.w;
    }
    *reinterpret_cast<float4*>(tile.out_global + offset) = value;
  }
}

}  // namespace

cudaError_t launch_fp32_affine_merge(const AffineMergeProblem& problem, cudaStream_t stream) {
  if (affine_merge_shape_error(problem) != nullptr) return cudaErrorInvalidValue;
  const dim3 grid(problem.cols / kTileCols, problem.rows / kTileRows, problem.batch);
  fp32_affine_merge_kernel<<<grid, kThreads, 0, stream>>>(problem);
  return cudaGetLastError();
}

}  // namespace kda::kernels::cuda
