#include "kda/kernels/cpu/recurrent.hpp"

#include <algorithm>
#include <vector>

#include "kda/kernels/cpu/thread_pool.hpp"
#include "kda/kernels/cpu/token_step.hpp"
#include "kda/math/poly_exp.hpp"

namespace kda::kernels::cpu {

template <class Real>
Outputs<Real> recurrent(const Inputs<Real>& inputs, const KernelOptions& options) {
  validate_inputs(inputs);
  const Shape& shape = inputs.shape;
  const int64_t key_dim = shape.key_dim, value_dim = shape.value_dim;
  const int64_t heads = shape.heads, value_heads = shape.value_heads;
  const Real scale = static_cast<Real>(effective_scale(options, key_dim));
  const auto spans = sequence_spans(shape, inputs.cu_seqlens);
  const int64_t state_size = key_dim * value_dim;

  Outputs<Real> outputs;
  outputs.o.assign(static_cast<size_t>(shape.batch * shape.tokens * value_heads * value_dim), 0);
  outputs.state.assign(spans.size() * static_cast<size_t>(value_heads * state_size), 0);

  const auto& boundaries = options.boundary_tokens;
  validate_boundary_tokens(boundaries, spans, 1);
  const int64_t boundary_count = static_cast<int64_t>(boundaries.size());
  outputs.boundary_states.assign(
      spans.size() * static_cast<size_t>(boundary_count * value_heads * state_size), 0);
  auto record = [&](int64_t seq_idx, int64_t boundary_idx, int64_t value_head, const Real* state) {
    std::copy_n(state, state_size,
                outputs.boundary_states.data() +
                    ((seq_idx * boundary_count + boundary_idx) * value_heads + value_head) *
                        state_size);
  };

  const int64_t items = static_cast<int64_t>(spans.size()) * value_heads;
  parallel_for(items, options.threads, [&](int64_t item) {
    const SequenceSpan& span = spans[static_cast<size_t>(item / value_heads)];
    const int64_t value_head = item % value_heads;
    const int64_t head = value_head / shape.group_size();
    const int64_t seq_idx = item / value_heads;
    Real* state = outputs.state.data() + (seq_idx * value_heads + value_head) * state_size;
    if (!inputs.h0.empty()) {
      std::copy_n(inputs.h0.data() + (seq_idx * value_heads + value_head) * state_size, state_size,
                  state);
    }
    std::vector<Real> alpha(static_cast<size_t>(key_dim)), q_scaled(alpha.size());
    std::vector<Real> delta(static_cast<size_t>(value_dim));
    int64_t next_boundary = 0;
    for (int64_t token = span.token_begin; token < span.token_end; ++token) {
      if (next_boundary < boundary_count &&
          boundaries[next_boundary] == token - span.token_begin) {
        record(seq_idx, next_boundary++, value_head, state);
      }
      const int64_t row = span.batch_idx * shape.tokens + token;
      math::poly_exp(inputs.g.data() + (row * value_heads + value_head) * key_dim, alpha.data(),
                     key_dim);
      const Real* q = inputs.q.data() + (row * heads + head) * key_dim;
      for (int64_t dim = 0; dim < key_dim; ++dim) q_scaled[dim] = q[dim] * scale;
      token_step(state, key_dim, value_dim, value_dim, alpha.data(),
                 inputs.k.data() + (row * heads + head) * key_dim, q_scaled.data(),
                 inputs.v.data() + (row * value_heads + value_head) * value_dim,
                 inputs.beta[row * value_heads + value_head], delta.data(),
                 outputs.o.data() + (row * value_heads + value_head) * value_dim);
    }
    while (next_boundary < boundary_count) record(seq_idx, next_boundary++, value_head, state);
  });
  return outputs;
}

template Outputs<float> recurrent(const Inputs<float>&, const KernelOptions&);
template Outputs<double> recurrent(const Inputs<double>&, const KernelOptions&);

}  // namespace kda::kernels::cpu
