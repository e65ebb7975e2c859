// kda/math/blas.hpp — row-major GEMM over OpenBLAS, for float and double.
//
// OpenBLAS runs single-threaded in kda: every kda entry point that calls it first calls
// use_single_threaded_blas(), which sets openblas_set_num_threads(1) once for the process.
// kda parallelises over shards, sequences and heads itself; nested OpenBLAS threads would
// oversubscribe the cores. Thread-safety: gemm may be called from many threads at once.
#pragma once

#include <cstdint>

namespace kda::math {

// Sets OpenBLAS to one thread, once per process; later calls are free.
void use_single_threaded_blas();

// C = alpha · op(A) · op(B) + beta · C, row-major, op(A) m × k, op(B) k × n.
template <class Real>
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, Real alpha,
          const Real* a, int64_t lda, const Real* b, int64_t ldb, Real beta, Real* c, int64_t ldc);

}  // namespace kda::math
