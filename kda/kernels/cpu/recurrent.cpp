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
  const int64_t value_heads = shape.value_heads;
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
    std::copy_n(
        state, state_size,
        outputs.boundary_states.data() +
            ((seq_idx * boundary_count + boundary_idx) * value_heads + value_head) * state_size);
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
    // alpha and q are computed per token into two-slot buffers (see sweep_tokens).
    std::vector<Real> alpha(static_cast<size_t>(2 * key_dim)), q_scaled(alpha.size());
    std::vector<Real> delta(static_cast<size_t>(value_dim)), projection(delta.size());
    struct Accessors {
      const Inputs<Real>& in;
      int64_t first_row, head, value_head;
      Real scale;
      Real* alpha_slots;
      Real* q_slots;
      Real* o_base;
      int64_t row(int64_t token) const { return first_row + token; }
      const Real* alpha(int64_t token) const {
        const int64_t key_dim = in.shape.key_dim;
        Real* slot = alpha_slots + (token & 1) * key_dim;
        math::poly_exp(in.g.data() + (row(token) * in.shape.value_heads + value_head) * key_dim,
                       slot, key_dim);
        return slot;
      }
      const Real* k(int64_t token) const {
        return in.k.data() + (row(token) * in.shape.heads + head) * in.shape.key_dim;
      }
      const Real* q(int64_t token) const {
        const int64_t key_dim = in.shape.key_dim;
        const Real* raw = in.q.data() + (row(token) * in.shape.heads + head) * key_dim;
        Real* slot = q_slots + (token & 1) * key_dim;
        for (int64_t dim = 0; dim < key_dim; ++dim) slot[dim] = raw[dim] * scale;
        return slot;
      }
      const Real* v(int64_t token) const {
        return in.v.data() + (row(token) * in.shape.value_heads + value_head) * in.shape.value_dim;
      }
      Real beta(int64_t token) const {
        return in.beta[row(token) * in.shape.value_heads + value_head];
      }
      Real* o(int64_t token) const {
        return o_base + (row(token) * in.shape.value_heads + value_head) * in.shape.value_dim;
      }
    };
    const bool vector_columns = value_dim % token_step_detail::Vector<Real>::kLanes == 0;
    int64_t next_boundary = 0;
    int64_t token = 0;
    while (token < span.length()) {
      // Run to the next recorded boundary (or the end) in one call.
      while (next_boundary < boundary_count && boundaries[next_boundary] == token) {
        record(seq_idx, next_boundary++, value_head, state);
      }
      const int64_t stop =
          next_boundary < boundary_count ? boundaries[next_boundary] : span.length();
      const Accessors at{inputs,
                         span.batch_idx * shape.tokens + span.token_begin + token,
                         head,
                         value_head,
                         scale,
                         alpha.data(),
                         q_scaled.data(),
                         outputs.o.data()};
      if (vector_columns) {
        sweep_tokens(state, key_dim, value_dim, value_dim, stop - token, at, delta.data(),
                     projection.data());
      } else {
        for (int64_t step = 0; step < stop - token; ++step) {
          token_step(state, key_dim, value_dim, value_dim, at.alpha(step), at.k(step), at.q(step),
                     at.v(step), at.beta(step), delta.data(), at.o(step));
        }
      }
      token = stop;
    }
    while (next_boundary < boundary_count) record(seq_idx, next_boundary++, value_head, state);
  });
  return outputs;
}

template Outputs<float> recurrent(const Inputs<float>&, const KernelOptions&);
template Outputs<double> recurrent(const Inputs<double>&, const KernelOptions&);

}  // namespace kda::kernels::cpu
