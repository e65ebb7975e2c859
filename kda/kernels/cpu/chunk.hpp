// kda/kernels/cpu/chunk.hpp — the chunkwise KDA form with chunk C = 64 (reference/kda.md).
//
// Per chunk, with G the in-chunk cumulative log decay: A_kk and A_qk from sub-blocks of 16 whose
// exponentials never exceed 1 (e^{G_i − G_a0} · e^{G_a0 − G_j}), T = (I + A_kk)^{-1} Diag(β) by
// forward substitution, W = T (e^G ⊙ K), U = T V; then the chunk is an affine map of the state:
//   V' = U − W S;  O = (Q ⊙ e^G) S + tril(A_qk) V';  S ← Diag(e^{G_C}) S + K_gᵀ V'.
// The three state products run as OpenBLAS sgemm/dgemm (single-threaded, math/blas.hpp).
// Variable-length batches (cu_seqlens), initial and final states; fp32 and fp64.
// Thread-safety: chunk() reads `inputs` only. A ChunkPass belongs to one thread.
#pragma once

#include <cstdint>
#include <vector>

#include "kda/math/layout.hpp"
#include "kda/math/precision.hpp"

namespace kda::kernels::cpu {

inline constexpr int64_t kChunkSize = 64;  // C
inline constexpr int64_t kSubBlock = 16;   // rows of A computed against one reference token

// Records states at options.boundary_tokens (multiples of 64 or the sequence length).
template <class Real>
Outputs<Real> chunk(const Inputs<Real>& inputs, const KernelOptions& options);

// One chunk of one (sequence, value head) at a time: the building block of chunk() and cp().
template <class Real>
class ChunkPass {
 public:
  // `inputs` must outlive the pass. REQUIRES: validate_inputs(inputs) passed.
  ChunkPass(const Inputs<Real>& inputs, Real scale);

  // Prepares the chunk of `rows` ≤ 64 tokens starting at sequence-relative `offset`.
  void prepare(const SequenceSpan& span, int64_t value_head, int64_t offset, int64_t rows);

  // state ← M state + H for the prepared chunk; when `o` is not null, also writes the chunk's
  // output rows into `o`, the (B, T, HV, V) output of the whole batch.
  void apply(Real* state, Real* o);  // state: (K, V)

  // M = Diag(e^{G_C}) − K_gᵀ W, with the product's operands read at `precision`.
  void transition(math::DotPrecision precision, Real* m);  // m: (K, K)

 private:
  const Inputs<Real>& inputs_;
  Shape shape_;
  Real scale_;
  int64_t rows_ = 0, first_row_ = 0, value_head_ = 0;
  std::vector<Real> g_cum_;       // (C, K)  in-chunk cumulative log decay G
  std::vector<Real> q_decayed_;   // (C, K)  scale · q ⊙ e^G
  std::vector<Real> k_to_end_;    // (C, K)  K_g = k ⊙ e^{G_C − G}
  std::vector<Real> decay_end_;   // (K)     e^{G_C}
  std::vector<Real> a_kk_;        // (C, C)  strictly lower, rows scaled by β
  std::vector<Real> a_qk_;        // (C, C)  lower including the diagonal, scaled
  std::vector<Real> right_side_;  // (C, K + V)  β [e^G ⊙ k | v]
  std::vector<Real> inverse_;     // (C, C)  (I + A_kk)^{-1}
  std::vector<Real> w_u_;         // (C, K + V)  [W | U]
  std::vector<Real> v_new_;       // (C, V)  V' = U − W S
  std::vector<Real> left_k_, left_q_, right_k_, exps_;  // sub-block scratch
};

}  // namespace kda::kernels::cpu
