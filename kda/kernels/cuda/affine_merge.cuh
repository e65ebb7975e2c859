// kda/kernels/cuda/affine_merge.cuh — the context-parallel merge on the GPU: batched
//   out = A · B + C      A (rows × inner), B (inner × cols), C (rows × cols) or none
// which is both an M-chain product (M ← M_chunk · M) and the merge S ← M S + H (K × K times K × V),
// in three precisions, one kernel each (reference/kda.md, incident 1):
//   tf32_truncate_affine_merge (tf32_truncate_affine_merge.cu): mma.sync m16n8k8 TF32 on the raw
//       fp32 bits — the tensor core reads the top 19 bits, truncating each operand (Triton's
//       tl.dot)
//   tf32x3_affine_merge (tf32x3_affine_merge.cu): 3×TF32, hi = tf32(a), lo = tf32(a − hi),
//       a·b ≈ hi·hi + hi·lo + lo·hi — the upstream fix, as accurate as fp32 here
//   fp32_affine_merge (fp32_affine_merge.cu): fp32 FMA on the CUDA cores
// and a diagnostic: tf32x3_chained_accumulator_affine_merge, 3×TF32 with one accumulator through
// every mma (what tf32x3_affine_merge avoids; README.md has the measurement).
// Thread-safety: launches are asynchronous on the given stream; out must not alias A, B or C.
// Ownership: every pointer is device memory owned by the caller. All matrices are row-major.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace kda::kernels::cuda {

struct AffineMergeProblem {
  const float* a_global = nullptr;  // (batch, rows, inner)
  int64_t a_batch_stride = 0;       // elements between batch entries (0: one A for all)
  const float* b_global = nullptr;  // (batch, inner, cols)
  int64_t b_batch_stride = 0;
  const float* c_global = nullptr;  // (batch, rows, cols), or nullptr for out = A · B
  int64_t c_batch_stride = 0;
  float* out_global = nullptr;  // (batch, rows, cols)
  int64_t out_batch_stride = 0;
  int batch = 0;
  int rows = 0;
  int inner = 0;
  int cols = 0;
};

// The CTA tile every merge kernel uses: 64 × 64 outputs, the inner dimension in steps of 32.
inline constexpr int kMergeTileRows = 64;
inline constexpr int kMergeTileCols = 64;
inline constexpr int kMergeTileInner = 32;

// nullptr when the kernels can run `problem`, else what is wrong with it (a static string).
inline const char* affine_merge_shape_error(const AffineMergeProblem& problem) {
  if (problem.batch <= 0 || problem.batch > 65535) return "batch must be in [1, 65535]";
  if (problem.rows <= 0 || problem.rows % kMergeTileRows != 0)
    return "rows must be a multiple of 64";
  if (problem.cols <= 0 || problem.cols % kMergeTileCols != 0)
    return "cols must be a multiple of 64";
  if (problem.inner <= 0 || problem.inner % kMergeTileInner != 0) {
    return "inner must be a multiple of 32";
  }
  if (!problem.a_global || !problem.b_global || !problem.out_global)
    return "a tensor pointer is null";
  return nullptr;
}

// REQUIRES: affine_merge_shape_error(problem) == nullptr (else cudaErrorInvalidValue, no launch).
cudaError_t launch_tf32_truncate_affine_merge(const AffineMergeProblem& problem,
                                              cudaStream_t stream);
cudaError_t launch_tf32x3_affine_merge(const AffineMergeProblem& problem, cudaStream_t stream);
cudaError_t launch_tf32x3_chained_accumulator_affine_merge(const AffineMergeProblem& problem,
                                                           cudaStream_t stream);
cudaError_t launch_fp32_affine_merge(const AffineMergeProblem& problem, cudaStream_t stream);
// 3×TF32 off the diagonal, A[r][r] · B[r][c] in fp32 (tf32x3_exact_diagonal_affine_merge.cu).
cudaError_t launch_tf32x3_exact_diagonal_affine_merge(const AffineMergeProblem& problem,
                                                      cudaStream_t stream);

}  // namespace kda::kernels::cuda
