#include "kda/kernels/cpu/cp.hpp"

#include <algorithm>
#include <string>

#include "kda/faults.hpp"
#include "kda/kernels/cpu/chunk.hpp"
#include "kda/kernels/cpu/thread_pool.hpp"
#include "loupe/error.hpp"

namespace kda::kernels::cpu {

std::vector<int64_t> cp_shard_starts(int64_t tokens, int shards) {
  const int64_t chunks = (tokens + kChunkSize - 1) / kChunkSize;
  std::vector<int64_t> starts;
  for (int64_t shard = 0; shard < shards; ++shard) {
    starts.push_back(std::min(tokens, shard * chunks / shards * kChunkSize));
  }
  return starts;
}

template <class Real>
void cp_piece_summary(const Inputs<Real>& inputs, Real scale, const SequenceSpan& span,
                      int64_t value_head, int64_t begin, int64_t end, math::DotPrecision precision,
                      bool need_chain, Real* m, Real* h) {
  const int64_t key_dim = inputs.shape.key_dim;
  const int64_t transition_size = key_dim * key_dim;
  std::fill_n(m, transition_size, Real(0));
  std::fill_n(h, key_dim * inputs.shape.value_dim, Real(0));
  for (int64_t dim = 0; dim < key_dim; ++dim) m[dim * key_dim + dim] = 1;
  std::vector<Real> m_chunk(static_cast<size_t>(transition_size)), product(m_chunk.size());
  ChunkPass<Real> pass(inputs, scale);
  // Planted fault cp_summary_two_passes: the chain M and the offset H formed in two separate
  // loops over the shard's chunks, each preparing every chunk (the same values, every chunk
  // prepared twice in phase 1 when the chain is needed).
  const bool two_passes = fault("cp_summary_two_passes") && need_chain;
  if (two_passes) {
    for (int64_t offset = begin; offset < end; offset += kChunkSize) {
      pass.prepare(span, value_head, offset, std::min(kChunkSize, end - offset));
      pass.apply(h, nullptr);
    }
  }
  for (int64_t offset = begin; offset < end; offset += kChunkSize) {
    pass.prepare(span, value_head, offset, std::min(kChunkSize, end - offset));
    if (need_chain) {
      pass.transition(precision, m_chunk.data());
      // Planted fault cp_chain_order: the chain accumulated as M * M_chunk, not M_chunk * M (the
      // transitions do not commute, so every shard after the first starts from a wrong state).
      const bool swapped = fault("cp_chain_order");
      math::precision_gemm(precision, false, false, key_dim, key_dim, key_dim, Real(1),
                           swapped ? m : m_chunk.data(), key_dim, swapped ? m_chunk.data() : m,
                           key_dim, Real(0), product.data(), key_dim);
      std::copy(product.begin(), product.end(), m);
    }
    if (!two_passes) pass.apply(h, nullptr);
  }
}

template <class Real>
void cp_merge_step(math::DotPrecision precision, int64_t key_dim, int64_t value_dim, const Real* m,
                   const Real* previous, const Real* h, Real* next) {
  math::precision_gemm(precision, false, false, key_dim, value_dim, key_dim, Real(1), m, key_dim,
                       previous, value_dim, Real(0), next, value_dim);
  for (int64_t idx = 0; idx < key_dim * value_dim; ++idx) next[idx] += h[idx];
}

template <class Real>
void cp_piece_outputs(const Inputs<Real>& inputs, Real scale, const SequenceSpan& span,
                      int64_t value_head, int64_t begin, int64_t end, Real* state, Real* o) {
  ChunkPass<Real> pass(inputs, scale);
  // Planted fault cp_outputs_dead_transition: the output pass also forms each chunk's transition
  // (as the summary pass does) and throws it away: the same result, slower CP prefill only.
  std::vector<Real> unused(fault("cp_outputs_dead_transition")
                               ? static_cast<size_t>(inputs.shape.key_dim * inputs.shape.key_dim)
                               : 0);
  for (int64_t offset = begin; offset < end; offset += kChunkSize) {
    pass.prepare(span, value_head, offset, std::min(kChunkSize, end - offset));
    if (!unused.empty()) pass.transition(math::DotPrecision::kIeee, unused.data());
    pass.apply(state, o);
  }
}

template <class Real>
Outputs<Real> cp(const Inputs<Real>& inputs, const KernelOptions& options,
                 const CpOptions& cp_options) {
  validate_inputs(inputs);
  if (!inputs.cu_seqlens.empty() || !options.boundary_tokens.empty()) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda cp: variable-length batches and boundary_tokens are not supported",
                       "cp records the state at each shard start in boundary_states");
  }
  if (cp_options.shards < 1) {
    throw loupe::Error(loupe::ErrorCode::kUsage, "kda cp: shards must be at least 1, got " +
                                                     std::to_string(cp_options.shards));
  }
  const Shape& shape = inputs.shape;
  const int64_t key_dim = shape.key_dim, value_dim = shape.value_dim;
  const int64_t value_heads = shape.value_heads, shards = cp_options.shards;
  const int64_t state_size = key_dim * value_dim, transition_size = key_dim * key_dim;
  const Real scale = static_cast<Real>(effective_scale(options, key_dim));
  const auto spans = sequence_spans(shape, {});
  std::vector<int64_t> starts = cp_shard_starts(shape.tokens, cp_options.shards);
  starts.push_back(shape.tokens);
  const math::DotPrecision precision = cp_options.precision;
  const int64_t pairs = shape.batch * value_heads;  // (sequence, value head) pairs

  Outputs<Real> outputs;
  outputs.o.assign(static_cast<size_t>(shape.batch * shape.tokens * value_heads * value_dim), 0);
  outputs.state.assign(static_cast<size_t>(pairs * state_size), 0);
  // Per (pair, shard): its chain M (K, K), its zero-start state H (K, V), its start state S.
  std::vector<Real> chain(static_cast<size_t>(pairs * shards * transition_size));
  std::vector<Real> offsets(static_cast<size_t>(pairs * shards * state_size), 0);
  std::vector<Real> starts_state(offsets.size(), 0);
  auto pair_shard = [&](int64_t item) { return std::pair{item / shards, item % shards}; };

  // Phase 1: (M, H) per shard. The last shard's are never used; shard 0's M only multiplies h0.
  parallel_for(pairs * shards, options.threads, [&](int64_t item) {
    const auto [pair, shard] = pair_shard(item);
    if (shard == shards - 1) return;
    // Planted fault cp_chain_guard: the chain skipped for shard 1 too (its M left the identity), as
    // if only the shards after the second inherited a state; shows with three shards or more.
    const int64_t first_chained = fault("cp_chain_guard") ? 2 : 1;
    cp_piece_summary(inputs, scale, spans[static_cast<size_t>(pair / value_heads)],
                     pair % value_heads, starts[shard], starts[shard + 1], precision,
                     shard >= first_chained || !inputs.h0.empty(),
                     chain.data() + item * transition_size, offsets.data() + item * state_size);
  });

  // Merge: S_{r+1} = M_r S_r + H_r, per pair, at the chosen precision.
  for (int64_t pair = 0; pair < pairs; ++pair) {
    Real* first = starts_state.data() + pair * shards * state_size;
    if (!inputs.h0.empty()) std::copy_n(inputs.h0.data() + pair * state_size, state_size, first);
    for (int64_t shard = 0; shard + 1 < shards; ++shard) {
      const int64_t item = pair * shards + shard;
      // Planted fault cp_merge_offset: the second shard's offset H is dropped from the scan.
      const bool drop_offset = fault("cp_merge_offset") && shard == 1;
      const std::vector<Real> no_offset(drop_offset ? state_size : 0, Real(0));
      cp_merge_step(precision, key_dim, value_dim, chain.data() + item * transition_size,
                    starts_state.data() + item * state_size,
                    drop_offset ? no_offset.data() : offsets.data() + item * state_size,
                    starts_state.data() + (item + 1) * state_size);
    }
  }

  // Phase 2: each shard's chunked pass from its start state writes its outputs.
  parallel_for(pairs * shards, options.threads, [&](int64_t item) {
    const auto [pair, shard] = pair_shard(item);
    const SequenceSpan& span = spans[static_cast<size_t>(pair / value_heads)];
    const int64_t value_head = pair % value_heads;
    std::vector<Real> state(starts_state.begin() + item * state_size,
                            starts_state.begin() + (item + 1) * state_size);
    if (shard == cp_options.lost_start_state_shard) std::fill(state.begin(), state.end(), Real(0));
    cp_piece_outputs(inputs, scale, span, value_head, starts[shard], starts[shard + 1],
                     state.data(), outputs.o.data());
    if (shard == shards - 1) {
      std::copy(state.begin(), state.end(), outputs.state.begin() + pair * state_size);
    }
  });

  // boundary_states: (B, P, HV, K, V) from the (B, HV, P, K, V) order used above.
  outputs.boundary_states.resize(starts_state.size());
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const int64_t batch_idx = pair / value_heads, value_head = pair % value_heads;
    for (int64_t shard = 0; shard < shards; ++shard) {
      std::copy_n(starts_state.data() + (pair * shards + shard) * state_size, state_size,
                  outputs.boundary_states.data() +
                      ((batch_idx * shards + shard) * value_heads + value_head) * state_size);
    }
  }
  return outputs;
}

#define KDA_CP_PIECES(Real)                                                                        \
  template void cp_piece_summary(const Inputs<Real>&, Real, const SequenceSpan&, int64_t, int64_t, \
                                 int64_t, math::DotPrecision, bool, Real*, Real*);                 \
  template void cp_merge_step(math::DotPrecision, int64_t, int64_t, const Real*, const Real*,      \
                              const Real*, Real*);                                                 \
  template void cp_piece_outputs(const Inputs<Real>&, Real, const SequenceSpan&, int64_t, int64_t, \
                                 int64_t, Real*, Real*);
KDA_CP_PIECES(float)
KDA_CP_PIECES(double)
#undef KDA_CP_PIECES

template Outputs<float> cp(const Inputs<float>&, const KernelOptions&, const CpOptions&);
template Outputs<double> cp(const Inputs<double>&, const KernelOptions&, const CpOptions&);

}  // namespace kda::kernels::cpu
