// kda/kernels/cuda/affine_merge_tile.cuh — device pieces of the three affine merge kernels.
// A CTA of 128 threads owns a 64 × 64 tile of out; the inner dimension streams through shared
// memory in steps of 32 (A tile 64 × 32, B tile 32 × 64, padded so the mma fragment reads of a
// warp hit 32 distinct banks). The tensor-core kernels give each of the 4 warps a 32 × 32 quarter:
// 2 × 4 mma tiles of m16n8, 32 accumulators per lane.
#pragma once

#include <cstdint>

#include "kda/kernels/cuda/affine_merge.cuh"

namespace kda::kernels::cuda::affine_merge_detail {

inline constexpr int kThreads = 128;
inline constexpr int kTileRows = kMergeTileRows;    // 64
inline constexpr int kTileCols = kMergeTileCols;    // 64
inline constexpr int kTileInner = kMergeTileInner;  // 32
inline constexpr int kAPitch = kTileInner + 4;      // row g, col t → bank 4g + t: conflict-free
inline constexpr int kBPitch = kTileCols + 8;       // row t, col g → bank 8t + g: conflict-free
inline constexpr int kWarpRows = 32;
inline constexpr int kWarpCols = 32;
inline constexpr int kMmaRows = 16;
inline constexpr int kMmaCols = 8;
inline constexpr int kMmaInner = 8;
inline constexpr int kWarpMmaRows = kWarpRows / kMmaRows;  // 2
inline constexpr int kWarpMmaCols = kWarpCols / kMmaCols;  // 4

struct TileShared {
  float a[kTileRows][kAPitch];   // (64, 32) of A
  float b[kTileInner][kBPitch];  // (32, 64) of B
};

struct TileCoordinates {
  const float* a_global;  // (rows, inner) of this batch entry
  const float* b_global;  // (inner, cols)
  const float* c_global;  // (rows, cols) or nullptr
  float* out_global;      // (rows, cols)
  int row0, col0;
};

__device__ __forceinline__ TileCoordinates tile_coordinates(const AffineMergeProblem& problem) {
  const int64_t batch = blockIdx.z;
  TileCoordinates tile;
  tile.a_global = problem.a_global + batch * problem.a_batch_stride;
  tile.b_global = problem.b_global + batch * problem.b_batch_stride;
  tile.c_global = problem.c_global ? problem.c_global + batch * problem.c_batch_stride : nullptr;
  tile.out_global = problem.out_global + batch * problem.out_batch_stride;
  tile.row0 = blockIdx.y * kTileRows;
  tile.col0 = blockIdx.x * kTileCols;
  return tile;
}

// Stage inner columns [inner0, inner0 + 32) of A's rows and the same rows of B's columns.
__device__ __forceinline__ void load_tile(const AffineMergeProblem& problem,
                                          const TileCoordinates& tile, int inner0,
                                          TileShared& shared) {
  for (int index = threadIdx.x; index < kTileRows * kTileInner / 4; index += kThreads) {
    const int row = index / (kTileInner / 4), col = 4 * (index % (kTileInner / 4));
    const float4 value = *reinterpret_cast<const float4*>(
        tile.a_global + static_cast<int64_t>(tile.row0 + row) * problem.inner + inner0 + col);
    shared.a[row][col] = value.x, shared.a[row][col + 1] = value.y;
    shared.a[row][col + 2] = value.z, shared.a[row][col + 3] = value.w;
  }
  for (int index = threadIdx.x; index < kTileInner * kTileCols / 4; index += kThreads) {
    const int row = index / (kTileCols / 4), col = 4 * (index % (kTileCols / 4));
    const float4 value = *reinterpret_cast<const float4*>(
        tile.b_global + static_cast<int64_t>(inner0 + row) * problem.cols + tile.col0 + col);
    *reinterpret_cast<float4*>(&shared.b[row][col]) = value;
  }
}

// D += A · B on one m16n8k8 tile; operands are tf32 bit patterns in 32-bit registers (a raw fp32
// pattern is read as tf32 by ignoring its low 13 bits).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Round to nearest (ties away) into a tf32 bit pattern.
__device__ __forceinline__ uint32_t to_tf32(float value) {
  uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(bits) : "f"(value));
  return bits;
}

// hi = tf32(x) (round to nearest), lo = tf32(x − hi): x ≈ hi + lo to about 2^-22 relative, the
// operand split of every 3×TF32 form.
template <int N>
__device__ __forceinline__ void split_tf32(const float (&x)[N], uint32_t (&hi)[N],
                                           uint32_t (&lo)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    hi[i] = to_tf32(x[i]);
    lo[i] = to_tf32(x[i] - __uint_as_float(hi[i]));
  }
}

// One m16n8k8 step in 3×TF32: lo·hi + hi·lo into one fresh accumulator, hi·hi into another, both
// folded into the running sum `d` by fp32 adds (round to nearest); lo·lo is dropped. Shared by
// tf32x3_affine_merge.cu and tf32x3_exact_diagonal_affine_merge.cu.
struct SplitTf32x3 {
  __device__ __forceinline__ void operator()(float (&d)[4], const float (&a)[4],
                                             const float (&b)[2]) const {
    uint32_t a_hi[4], a_lo[4], b_hi[2], b_lo[2];
    split_tf32(a, a_hi, a_lo);
    split_tf32(b, b_hi, b_lo);
    float small[4] = {}, large[4] = {};
    mma_tf32(small, a_lo, b_hi);
    mma_tf32(small, a_hi, b_lo);
    mma_tf32(large, a_hi, b_hi);
#pragma unroll
    for (int i = 0; i < 4; ++i) d[i] += large[i] + small[i];
  }
};

// The fragments of one m16n8k8 step (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32):
// group = lane / 4, quad = lane % 4; A holds (group, quad), (group + 8, quad), (group, quad + 4),
// (group + 8, quad + 4); B holds (quad, group), (quad + 4, group); D holds (group, 2 quad + {0,1})
// and (group + 8, 2 quad + {0,1}).
__device__ __forceinline__ void load_a_fragment(const TileShared& shared, int row0, int inner0,
                                                int lane, float (&a)[4]) {
  const int group = lane / 4, quad = lane % 4;
  a[0] = shared.a[row0 + group][inner0 + quad];
  a[1] = shared.a[row0 + group + 8][inner0 + quad];
  a[2] = shared.a[row0 + group][inner0 + quad + 4];
  a[3] = shared.a[row0 + group + 8][inner0 + quad + 4];
}

__device__ __forceinline__ void load_b_fragment(const TileShared& shared, int inner0, int col0,
                                                int lane, float (&b)[2]) {
  const int group = lane / 4, quad = lane % 4;
  b[0] = shared.b[inner0 + quad][col0 + group];
  b[1] = shared.b[inner0 + quad + 4][col0 + group];
}

// out = D + C for one warp's 32 × 32 quarter; with `diagonal` (the tile's A[r][r], 64 of them),
// out = fma(A[r][r], B[r][c], D) + C: the diagonal product in fp32, rounded once.
__device__ __forceinline__ void store_warp_accumulators(
    const AffineMergeProblem& problem, const TileCoordinates& tile, int warp_row0, int warp_col0,
    int lane, const float (&accumulators)[kWarpMmaRows][kWarpMmaCols][4],
    const float* diagonal = nullptr) {
  const int group = lane / 4, quad = lane % 4;
#pragma unroll
  for (int mma_row = 0; mma_row < kWarpMmaRows; ++mma_row) {
#pragma unroll
    for (int mma_col = 0; mma_col < kWarpMmaCols; ++mma_col) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = tile.row0 + warp_row0 + mma_row * kMmaRows + group + 8 * half;
        const int col = tile.col0 + warp_col0 + mma_col * kMmaCols + 2 * quad;
        const int64_t offset = static_cast<int64_t>(row) * problem.cols + col;
        float2 value = make_float2(accumulators[mma_row][mma_col][2 * half],
                                   accumulators[mma_row][mma_col][2 * half + 1]);
        if (diagonal != nullptr && row < problem.inner) {
          const float d = diagonal[row - tile.row0];
          const float2 b = *reinterpret_cast<const float2*>(
              tile.b_global + static_cast<int64_t>(row) * problem.cols + col);
          value.x = fmaf(d, b.x, value.x), value.y = fmaf(d, b.y, value.y);
        }
        if (tile.c_global) {
          const float2 addend = *reinterpret_cast<const float2*>(tile.c_global + offset);
          value.x += addend.x, value.y += addend.y;
        }
        *reinterpret_cast<float2*>(tile.out_global + offset) = value;
      }
    }
  }
}

// The mainloop of the tensor-core kernels: stream the inner dimension through shared memory and
// hand each m16n8k8 step's raw fp32 fragments to `multiply_accumulate(d, a, b)`, which decides the
// precision. Then out = D + C. With kExactDiagonal, A's diagonal A[r][r] is taken out of the
// tensor-core product (zeroed in shared memory) and added in fp32 at the store: for a near-identity
// A (an M chain of slow decays) the mma sums then carry only the small off-diagonal part, so their
// round-toward-zero bias is relative to that part, not to the whole state.
template <bool kExactDiagonal = false, class MultiplyAccumulate>
__device__ __forceinline__ void run_mma_tile(const AffineMergeProblem& problem,
                                             MultiplyAccumulate multiply_accumulate) {
  __shared__ TileShared shared;
  __shared__ float diagonal[kTileRows];
  const TileCoordinates tile = tile_coordinates(problem);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warp_row0 = (warp / 2) * kWarpRows, warp_col0 = (warp % 2) * kWarpCols;
  float accumulators[kWarpMmaRows][kWarpMmaCols][4] = {};
  if (kExactDiagonal && threadIdx.x < kTileRows) diagonal[threadIdx.x] = 0.0f;
  for (int inner0 = 0; inner0 < problem.inner; inner0 += kTileInner) {
    __syncthreads();  // the previous step's fragment reads are done
    load_tile(problem, tile, inner0, shared);
    __syncthreads();
    if (kExactDiagonal) {
      const int inner = tile.row0 + static_cast<int>(threadIdx.x) - inner0;
      if (threadIdx.x < kTileRows && inner >= 0 && inner < kTileInner) {
        diagonal[threadIdx.x] = shared.a[threadIdx.x][inner];
        shared.a[threadIdx.x][inner] = 0.0f;
      }
      __syncthreads();
    }
#pragma unroll
    for (int step = 0; step < kTileInner; step += kMmaInner) {
      float a[kWarpMmaRows][4], b[kWarpMmaCols][2];
#pragma unroll
      for (int mma_row = 0; mma_row < kWarpMmaRows; ++mma_row) {
        load_a_fragment(shared, warp_row0 + mma_row * kMmaRows, step, lane, a[mma_row]);
      }
#pragma unroll
      for (int mma_col = 0; mma_col < kWarpMmaCols; ++mma_col) {
        load_b_fragment(shared, step, warp_col0 + mma_col * kMmaCols, lane, b[mma_col]);
      }
#pragma unroll
      for (int mma_row = 0; mma_row < kWarpMmaRows; ++mma_row) {
#pragma unroll
        for (int mma_col = 0; mma_col < kWarpMmaCols; ++mma_col) {
          multiply_accumulate(accumulators[mma_row][mma_col], a[mma_row], b[mma_col]);
        }
      }
    }
  }
  if (kExactDiagonal) __syncthreads();  // every diagonal entry written before any store reads it
  store_warp_accumulators(problem, tile, warp_row0, warp_col0, lane, accumulators,
                          kExactDiagonal ? diagonal : nullptr);
}

}  // namespace kda::kernels::cuda::affine_merge_detail
