#include "kda/kernels/cpu/chunk.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kda/faults.hpp"
#include "kda/kernels/cpu/thread_pool.hpp"
#include "kda/math/blas.hpp"
#include "kda/math/poly_exp.hpp"

namespace kda::kernels::cpu {
namespace {

// Largest in-block decay span for which e^{G_a0 − G_j} (≥ 1) is formed directly; beyond it the
// diagonal block's pairs take one exp each. e^30 and e^300 keep every product far from overflow.
template <class Real>
constexpr Real kSafeSpan = sizeof(Real) == 4 ? Real(30) : Real(300);

}  // namespace

template <class Real>
ChunkPass<Real>::ChunkPass(const Inputs<Real>& inputs, Real scale)
    : inputs_(inputs), shape_(inputs.shape), scale_(scale) {
  const auto key_dim = static_cast<size_t>(shape_.key_dim);
  const auto value_dim = static_cast<size_t>(shape_.value_dim);
  const auto chunk = static_cast<size_t>(kChunkSize);
  g_cum_.resize(chunk * key_dim);
  q_decayed_.resize(chunk * key_dim);
  k_to_end_.resize(chunk * key_dim);
  decay_end_.resize(key_dim);
  a_kk_.resize(chunk * chunk);
  a_qk_.resize(chunk * chunk);
  w_u_.resize(chunk * (key_dim + value_dim));
  right_side_.resize(w_u_.size());
  inverse_.resize(chunk * chunk);
  v_new_.resize(chunk * value_dim);
  left_k_.resize(static_cast<size_t>(kSubBlock) * key_dim);
  left_q_.resize(left_k_.size());
  right_k_.resize(chunk * key_dim);
  exps_.resize(chunk * key_dim);
}

template <class Real>
void ChunkPass<Real>::prepare(const SequenceSpan& span, int64_t value_head, int64_t offset,
                              int64_t rows) {
  const int64_t key_dim = shape_.key_dim, value_dim = shape_.value_dim;
  const int64_t heads = shape_.heads, value_heads = shape_.value_heads;
  // Planted fault chunk_head_map: value heads mapped round-robin instead of in groups.
  const int64_t head =
      fault("chunk_head_map") ? value_head % heads : value_head / shape_.group_size();
  const int64_t wide = key_dim + value_dim;
  rows_ = rows;
  value_head_ = value_head;
  first_row_ = span.batch_idx * shape_.tokens + span.token_begin + offset;
  auto q_row = [&](int64_t row) {
    return inputs_.q.data() + ((first_row_ + row) * heads + head) * key_dim;
  };
  auto k_row = [&](int64_t row) {
    return inputs_.k.data() + ((first_row_ + row) * heads + head) * key_dim;
  };
  auto beta_at = [&](int64_t row) {
    // Planted fault chunk_last_beta: the last token of a chunk takes its predecessor's beta.
    if (fault("chunk_last_beta") && row == rows - 1 && row > 0) --row;
    return inputs_.beta[(first_row_ + row) * value_heads + value_head];
  };

  // G: in-chunk cumulative log decay.
  for (int64_t row = 0; row < rows; ++row) {
    const Real* g = inputs_.g.data() + ((first_row_ + row) * value_heads + value_head) * key_dim;
    Real* g_cum = g_cum_.data() + row * key_dim;
    if (row == 0) {
      std::copy_n(g, key_dim, g_cum);
      continue;
    }
    const Real* previous = g_cum - key_dim;
    for (int64_t dim = 0; dim < key_dim; ++dim) g_cum[dim] = previous[dim] + g[dim];
  }
  // Planted fault chunk_tail_decay: the end-of-chunk decay read at the chunk's nominal last row
  // (C - 1), which a partial last chunk (T not a multiple of C) never wrote.
  const Real* g_end =
      g_cum_.data() + ((fault("chunk_tail_decay") ? kChunkSize : rows) - 1) * key_dim;
  math::poly_exp(g_end, decay_end_.data(), key_dim);

  // e^G ⊙ q (scaled), e^{G_C − G} ⊙ k, and β e^G ⊙ k | β v as the right-hand side of T.
  math::poly_exp(g_cum_.data(), exps_.data(), rows * key_dim);
  for (int64_t row = 0; row < rows; ++row) {
    const Real* q = q_row(row);
    const Real* k = k_row(row);
    const Real* exp_g = exps_.data() + row * key_dim;
    const Real* g_cum = g_cum_.data() + row * key_dim;
    const Real beta = beta_at(row);
    Real* __restrict q_decayed = q_decayed_.data() + row * key_dim;
    Real* __restrict k_to_end = k_to_end_.data() + row * key_dim;
    Real* __restrict w_row = right_side_.data() + row * wide;
    for (int64_t dim = 0; dim < key_dim; ++dim) {
      q_decayed[dim] = scale_ * q[dim] * exp_g[dim];
      w_row[dim] = beta * k[dim] * exp_g[dim];
      k_to_end[dim] = g_end[dim] - g_cum[dim];
    }
    math::poly_exp(k_to_end, k_to_end, key_dim);
    for (int64_t dim = 0; dim < key_dim; ++dim) k_to_end[dim] *= k[dim];
    const Real* v = inputs_.v.data() + ((first_row_ + row) * value_heads + value_head) * value_dim;
    for (int64_t dim = 0; dim < value_dim; ++dim) w_row[key_dim + dim] = beta * v[dim];
  }

  // A_kk and A_qk, one block row of 16 at a time against the reference token a0 of the block.
  std::fill(a_kk_.begin(), a_kk_.end(), Real(0));
  std::fill(a_qk_.begin(), a_qk_.end(), Real(0));
  for (int64_t block_begin = 0; block_begin < rows; block_begin += kSubBlock) {
    const int64_t block_end = std::min(block_begin + kSubBlock, rows);
    const int64_t block_rows = block_end - block_begin;
    const Real* g_ref = g_cum_.data() + block_begin * key_dim;
    // Left factors e^{G_i − G_a0} ≤ 1.
    for (int64_t row = block_begin; row < block_end; ++row) {
      Real* exps = exps_.data() + (row - block_begin) * key_dim;
      const Real* g_cum = g_cum_.data() + row * key_dim;
      for (int64_t dim = 0; dim < key_dim; ++dim) exps[dim] = g_cum[dim] - g_ref[dim];
    }
    math::poly_exp(exps_.data(), exps_.data(), block_rows * key_dim);
    for (int64_t row = block_begin; row < block_end; ++row) {
      const Real* exps = exps_.data() + (row - block_begin) * key_dim;
      const Real* q = q_row(row);
      const Real* k = k_row(row);
      Real* left_k = left_k_.data() + (row - block_begin) * key_dim;
      Real* left_q = left_q_.data() + (row - block_begin) * key_dim;
      for (int64_t dim = 0; dim < key_dim; ++dim) {
        left_k[dim] = k[dim] * exps[dim];
        left_q[dim] = scale_ * q[dim] * exps[dim];
      }
    }
    // Right factors e^{G_a0 − G_j}: ≤ 1 for earlier blocks; ≥ 1 but bounded inside the block.
    Real span = 0;
    for (int64_t dim = 0; dim < key_dim; ++dim) {
      span = std::max(span, g_ref[dim] - g_cum_[(block_end - 1) * key_dim + dim]);
    }
    const bool factor_diagonal = span <= kSafeSpan<Real>;
    const int64_t right_rows = factor_diagonal ? block_end : block_begin;
    for (int64_t row = 0; row < right_rows; ++row) {
      Real* right = right_k_.data() + row * key_dim;
      const Real* g_cum = g_cum_.data() + row * key_dim;
      for (int64_t dim = 0; dim < key_dim; ++dim) right[dim] = g_ref[dim] - g_cum[dim];
    }
    // Planted fault chunk_right_factor_libm_exp: the right factors, which can exceed 1 inside the
    // block, taken with the C library's scalar exp "for the full range" instead of poly_exp (the
    // same values to rounding; the scalar call does not vectorise).
    if (fault("chunk_right_factor_libm_exp")) {
      for (int64_t idx = 0; idx < right_rows * key_dim; ++idx)
        right_k_[idx] = std::exp(right_k_[idx]);
    } else {
      math::poly_exp(right_k_.data(), right_k_.data(), right_rows * key_dim);
    }
    for (int64_t row = 0; row < right_rows; ++row) {
      Real* right = right_k_.data() + row * key_dim;
      const Real* k = k_row(row);
      for (int64_t dim = 0; dim < key_dim; ++dim) right[dim] *= k[dim];
    }
    // Every pair the factors cover, as two small GEMMs; the entries on and above the diagonal
    // that the triangles must not hold are cleared afterwards.
    if (right_rows > 0) {
      math::gemm(false, true, block_rows, right_rows, key_dim, Real(1), left_k_.data(), key_dim,
                 right_k_.data(), key_dim, Real(0), a_kk_.data() + block_begin * kChunkSize,
                 kChunkSize);
      math::gemm(false, true, block_rows, right_rows, key_dim, Real(1), left_q_.data(), key_dim,
                 right_k_.data(), key_dim, Real(0), a_qk_.data() + block_begin * kChunkSize,
                 kChunkSize);
    }
    for (int64_t row = block_begin; row < block_end; ++row) {
      for (int64_t col = row; col < block_end; ++col) {
        a_kk_[row * kChunkSize + col] = 0;
        if (col > row) a_qk_[row * kChunkSize + col] = 0;
      }
    }
    if (factor_diagonal) continue;
    // Strong decay inside the block: one exp per pair and channel, each at most 1.
    for (int64_t row = block_begin; row < block_end; ++row) {
      const Real* k = k_row(row);
      const Real* q = q_row(row);
      const Real* g_row = g_cum_.data() + row * key_dim;
      for (int64_t col = block_begin; col <= row; ++col) {
        Real* pair_exps = exps_.data();
        const Real* g_col = g_cum_.data() + col * key_dim;
        for (int64_t dim = 0; dim < key_dim; ++dim) pair_exps[dim] = g_row[dim] - g_col[dim];
        math::poly_exp(pair_exps, pair_exps, key_dim);
        const Real* k_col = k_row(col);
        Real kk = 0, qk = 0;
        for (int64_t dim = 0; dim < key_dim; ++dim) {
          kk += k[dim] * pair_exps[dim] * k_col[dim];
          qk += q[dim] * pair_exps[dim] * k_col[dim];
        }
        if (col < row) a_kk_[row * kChunkSize + col] = kk;
        // Planted fault chunk_pair_qk_unscaled: the per-pair path leaves out the query scale that
        // the factored path folds into left_q (only blocks whose decay spans more than kSafeSpan).
        a_qk_[row * kChunkSize + col] = fault("chunk_pair_qk_unscaled") ? qk : qk * scale_;
      }
    }
  }
  for (int64_t row = 0; row < rows; ++row) {
    const Real beta = beta_at(row);
    for (int64_t col = 0; col < row; ++col) a_kk_[row * kChunkSize + col] *= beta;
  }

  // T = (I + A_kk)^{-1} by forward substitution on the C × C triangle (row i of T is
  // e_i − Σ_{j<i} A_kk[i, j] · row j of T), then [W | U] = T · β [e^G k | v] as one GEMM.
  std::fill(inverse_.begin(), inverse_.end(), Real(0));
  for (int64_t row = 0; row < rows; ++row) {
    Real* __restrict target = inverse_.data() + row * kChunkSize;
    for (int64_t col = 0; col < row; ++col) {
      const Real factor = a_kk_[row * kChunkSize + col];
      const Real* __restrict source = inverse_.data() + col * kChunkSize;
      for (int64_t inner = 0; inner <= col; ++inner) target[inner] -= factor * source[inner];
    }
    target[row] = 1;
  }
  math::gemm(false, false, rows, wide, rows, Real(1), inverse_.data(), kChunkSize,
             right_side_.data(), wide, Real(0), w_u_.data(), wide);
}

template <class Real>
void ChunkPass<Real>::apply(Real* state, Real* o) {
  const int64_t key_dim = shape_.key_dim, value_dim = shape_.value_dim;
  const int64_t wide = key_dim + value_dim;
  for (int64_t row = 0; row < rows_; ++row) {
    std::memcpy(v_new_.data() + row * value_dim, w_u_.data() + row * wide + key_dim,
                sizeof(Real) * static_cast<size_t>(value_dim));
  }
  // V' = U − W S
  math::gemm(false, false, rows_, value_dim, key_dim, Real(-1), w_u_.data(), wide, state, value_dim,
             Real(1), v_new_.data(), value_dim);
  if (o != nullptr) {
    const int64_t ldo = shape_.value_heads * value_dim;
    Real* o_chunk = o + first_row_ * ldo + value_head_ * value_dim;
    math::gemm(false, false, rows_, value_dim, key_dim, Real(1), q_decayed_.data(), key_dim, state,
               value_dim, Real(0), o_chunk, ldo);
    math::gemm(false, false, rows_, value_dim, rows_, Real(1), a_qk_.data(), kChunkSize,
               v_new_.data(), value_dim, Real(1), o_chunk, ldo);
  }
  if (fault("chunk_decay_gemm")) {
    // Planted fault chunk_decay_gemm: the end-of-chunk decay as S <- Diag(e^{G_C}) S, a K x K x V
    // GEMM into a temporary (the same values; the rows' scaling done by BLAS).
    std::vector<Real> diagonal(static_cast<size_t>(key_dim * key_dim), Real(0));
    std::vector<Real> decayed(static_cast<size_t>(key_dim * value_dim));
    for (int64_t dim = 0; dim < key_dim; ++dim) diagonal[dim * key_dim + dim] = decay_end_[dim];
    math::gemm(false, false, key_dim, value_dim, key_dim, Real(1), diagonal.data(), key_dim, state,
               value_dim, Real(0), decayed.data(), value_dim);
    std::copy(decayed.begin(), decayed.end(), state);
  } else {
    // Planted fault chunk_decay_square_state: the end-of-chunk decay scales the first K columns
    // of each state row, as if the state were K x K (it is K x V): where V > K (value heads wider
    // than the keys, e.g. V = 2K) the columns beyond K never decay. Kept within the row where
    // K > V, where the slip would write past the state.
    const int64_t decayed_columns =
        fault("chunk_decay_square_state") ? std::min(key_dim, value_dim) : value_dim;
    for (int64_t dim = 0; dim < key_dim; ++dim) {
      Real* state_row = state + dim * value_dim;
      const Real decay = decay_end_[dim];
      for (int64_t col = 0; col < decayed_columns; ++col) state_row[col] *= decay;
    }
  }
  math::gemm(true, false, key_dim, value_dim, rows_, Real(1), k_to_end_.data(), key_dim,
             v_new_.data(), value_dim, Real(1), state, value_dim);
}

template <class Real>
void ChunkPass<Real>::transition(math::DotPrecision precision, Real* m) {
  const int64_t key_dim = shape_.key_dim;
  math::precision_gemm(precision, true, false, key_dim, key_dim, rows_, Real(-1), k_to_end_.data(),
                       key_dim, w_u_.data(), key_dim + shape_.value_dim, Real(0), m, key_dim);
  for (int64_t dim = 0; dim < key_dim; ++dim) m[dim * key_dim + dim] += decay_end_[dim];
}

template <class Real>
Outputs<Real> chunk(const Inputs<Real>& inputs, const KernelOptions& options) {
  validate_inputs(inputs);
  math::use_single_threaded_blas();
  const Shape& shape = inputs.shape;
  const int64_t value_heads = shape.value_heads;
  const int64_t state_size = shape.key_dim * shape.value_dim;
  const Real scale = static_cast<Real>(effective_scale(options, shape.key_dim));
  const auto spans = sequence_spans(shape, inputs.cu_seqlens);
  const auto& boundaries = options.boundary_tokens;
  validate_boundary_tokens(boundaries, spans, kChunkSize);
  const int64_t boundary_count = static_cast<int64_t>(boundaries.size());

  Outputs<Real> outputs;
  outputs.o.assign(static_cast<size_t>(shape.batch * shape.tokens * value_heads * shape.value_dim),
                   0);
  outputs.state.assign(spans.size() * static_cast<size_t>(value_heads * state_size), 0);
  outputs.boundary_states.assign(
      spans.size() * static_cast<size_t>(boundary_count * value_heads * state_size), 0);

  const int64_t items = static_cast<int64_t>(spans.size()) * value_heads;
  parallel_for(items, options.threads, [&](int64_t item) {
    const int64_t seq_idx = item / value_heads, value_head = item % value_heads;
    const SequenceSpan& span = spans[static_cast<size_t>(seq_idx)];
    Real* state = outputs.state.data() + item * state_size;
    if (!inputs.h0.empty()) std::copy_n(inputs.h0.data() + item * state_size, state_size, state);
    auto record = [&](int64_t boundary_idx) {
      std::copy_n(
          state, state_size,
          outputs.boundary_states.data() +
              ((seq_idx * boundary_count + boundary_idx) * value_heads + value_head) * state_size);
    };
    ChunkPass<Real> pass(inputs, scale);
    int64_t next_boundary = 0;
    for (int64_t offset = 0; offset < span.length(); offset += kChunkSize) {
      while (next_boundary < boundary_count && boundaries[next_boundary] == offset) {
        record(next_boundary++);
      }
      pass.prepare(span, value_head, offset, std::min(kChunkSize, span.length() - offset));
      // Planted fault chunk_prefill_slow: every chunk prepared twice (same result, slower).
      if (fault("chunk_prefill_slow")) {
        pass.prepare(span, value_head, offset, std::min(kChunkSize, span.length() - offset));
      }
      pass.apply(state, outputs.o.data());
    }
    while (next_boundary < boundary_count) record(next_boundary++);
  });
  return outputs;
}

template class ChunkPass<float>;
template class ChunkPass<double>;
template Outputs<float> chunk(const Inputs<float>&, const KernelOptions&);
template Outputs<double> chunk(const Inputs<double>&, const KernelOptions&);

}  // namespace kda::kernels::cpu
