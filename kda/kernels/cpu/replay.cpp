#include "kda/kernels/cpu/replay.hpp"

#include <algorithm>
#include <string>

#include "kda/faults.hpp"
#include "kda/kernels/cpu/thread_pool.hpp"
#include "kda/kernels/cpu/token_step.hpp"
#include "loupe/error.hpp"

namespace kda::kernels::cpu {

template <class Real>
ReplayDecoder<Real>::ReplayDecoder(DecodeParams<Real> params, const Shape& shape, int64_t window,
                                   std::vector<Real> initial_state)
    : params_(std::move(params)), shape_(shape), window_(window) {
  if (window < 1) {
    throw loupe::Error(
        loupe::ErrorCode::kUsage,
        "kda replay: the window L must be at least 1, got " + std::to_string(window));
  }
  scale_ = static_cast<Real>(effective_scale(params_.scale, shape.key_dim));
  const int64_t pairs = shape.batch * shape.value_heads;
  checkpoint_ = std::move(initial_state);
  checkpoint_.resize(static_cast<size_t>(pairs * shape.key_dim * shape.value_dim), 0);
  ring_k_.resize(static_cast<size_t>(window * pairs * shape.key_dim));
  ring_alpha_.resize(ring_k_.size());
  ring_beta_.resize(static_cast<size_t>(window * pairs));
  ring_v_.resize(static_cast<size_t>(window * pairs * shape.value_dim));
}

template <class Real>
void ReplayDecoder<Real>::replay(int64_t pair, Real* scratch, const Real* q, Real* o) const {
  const int64_t key_dim = shape_.key_dim, value_dim = shape_.value_dim;
  const int64_t pairs = shape_.batch * shape_.value_heads, state_size = key_dim * value_dim;
  std::copy_n(checkpoint_.data() + pair * state_size, state_size, scratch);
  thread_local std::vector<Real> delta, discarded;
  delta.resize(static_cast<size_t>(value_dim));
  discarded.resize(static_cast<size_t>(value_dim));
  // Planted fault replay_full_ring_skip: once the ring is full, the replay skips its oldest
  // token (an off-by-one at the wrap), so every L-th step loses a token.
  const int64_t first_slot = fault("replay_full_ring_skip") && fill_ == window_ ? 1 : 0;
  // Planted fault replay_ring_reversed: the ring replayed newest first (the order of a stack).
  const bool reversed = fault("replay_ring_reversed");
  for (int64_t turn = first_slot; turn < fill_; ++turn) {
    const int64_t slot = reversed ? fill_ - 1 - (turn - first_slot) : turn;
    const int64_t slot_pair = slot * pairs + pair;
    const bool last = turn == fill_ - 1;
    // Only the newest token's output is wanted; earlier ones were written at their own step.
    token_step(scratch, key_dim, value_dim, value_dim, ring_alpha_.data() + slot_pair * key_dim,
               ring_k_.data() + slot_pair * key_dim, q, ring_v_.data() + slot_pair * value_dim,
               ring_beta_[slot_pair], delta.data(), last ? o : discarded.data());
  }
}

template <class Real>
void ReplayDecoder<Real>::step(const DecodeStep<Real>& step, Real* o, int threads) {
  const int64_t key_dim = shape_.key_dim, value_dim = shape_.value_dim;
  const int64_t value_heads = shape_.value_heads, pairs = shape_.batch * value_heads;
  const int64_t state_size = key_dim * value_dim;
  const int64_t slot = fill_;
  std::vector<Real> queries(static_cast<size_t>(pairs * key_dim));
  // The merged decode's preparation, once per (sequence, value head), into the ring.
  const Shape& shape = shape_;
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const int64_t seq_idx = pair / value_heads, value_head = pair % value_heads;
    const int64_t head = value_head / shape.group_size();
    const int64_t row = seq_idx * step.sequence_stride;
    const int64_t slot_pair = slot * pairs + pair;
    Real* q = queries.data() + pair * key_dim;
    Real* k = ring_k_.data() + slot_pair * key_dim;
    std::copy_n(step.q + (row * shape.heads + head) * key_dim, key_dim, q);
    std::copy_n(step.k + (row * shape.heads + head) * key_dim, key_dim, k);
    if (params_.l2norm) {
      math::l2_normalize(q, key_dim);
      math::l2_normalize(k, key_dim);
    }
    for (int64_t dim = 0; dim < key_dim; ++dim) q[dim] *= scale_;
    const Real* g = step.g + (row * value_heads + value_head) * key_dim;
    const bool raw_gate = params_.gate_form != math::GateForm::kLogDecay;
    const Real a_log = raw_gate ? params_.a_log.at(value_head) : Real(0);
    Real* alpha = ring_alpha_.data() + slot_pair * key_dim;
    for (int64_t dim = 0; dim < key_dim; ++dim) {
      const Real bias = raw_gate ? params_.dt_bias.at(value_head * key_dim + dim) : Real(0);
      alpha[dim] = std::exp(math::log_decay(params_.gate_form, g[dim], a_log, bias));
    }
    ring_beta_[slot_pair] =
        math::beta_value(params_.beta_form, step.beta[row * value_heads + value_head]);
    std::copy_n(step.v + (row * value_heads + value_head) * value_dim, value_dim,
                ring_v_.data() + slot_pair * value_dim);
  }
  fill_ = slot + 1;
  const bool write_back = fill_ == window_;
  parallel_for(pairs, threads, [&](int64_t pair) {
    thread_local std::vector<Real> scratch;
    scratch.resize(static_cast<size_t>(state_size));
    const int64_t seq_idx = pair / value_heads, value_head = pair % value_heads;
    const int64_t row = seq_idx * step.sequence_stride;
    replay(pair, scratch.data(), queries.data() + pair * key_dim,
           o + (row * value_heads + value_head) * value_dim);
    if (write_back)
      std::copy(scratch.begin(), scratch.end(), checkpoint_.begin() + pair * state_size);
  });
  if (write_back) fill_ = 0;
}

template <class Real>
std::vector<Real> ReplayDecoder<Real>::state() const {
  const int64_t key_dim = shape_.key_dim, value_dim = shape_.value_dim;
  const int64_t pairs = shape_.batch * shape_.value_heads, state_size = key_dim * value_dim;
  std::vector<Real> current(checkpoint_.size());
  std::vector<Real> unused_q(static_cast<size_t>(key_dim), 0),
      unused_o(static_cast<size_t>(value_dim));
  for (int64_t pair = 0; pair < pairs; ++pair) {
    replay(pair, current.data() + pair * state_size, unused_q.data(), unused_o.data());
  }
  return current;
}

template <class Real>
Outputs<Real> replay(const Inputs<Real>& inputs, const KernelOptions& options, bool l2norm,
                     int64_t window) {
  validate_inputs(inputs);
  if (!inputs.cu_seqlens.empty() || !options.boundary_tokens.empty()) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda replay: variable-length batches and boundary_tokens are not supported");
  }
  const Shape& shape = inputs.shape;
  DecodeParams<Real> params;
  params.l2norm = l2norm;
  params.scale = effective_scale(options, shape.key_dim);
  ReplayDecoder<Real> decoder(params, shape, window, inputs.h0);
  Outputs<Real> outputs;
  outputs.o.assign(
      static_cast<size_t>(shape.batch * shape.tokens * shape.value_heads * shape.value_dim), 0);
  for (int64_t token = 0; token < shape.tokens; ++token) {
    DecodeStep<Real> step;
    step.q = inputs.q.data() + token * shape.heads * shape.key_dim;
    step.k = inputs.k.data() + token * shape.heads * shape.key_dim;
    step.v = inputs.v.data() + token * shape.value_heads * shape.value_dim;
    step.g = inputs.g.data() + token * shape.value_heads * shape.key_dim;
    step.beta = inputs.beta.data() + token * shape.value_heads;
    step.sequence_stride = shape.tokens;
    decoder.step(step, outputs.o.data() + token * shape.value_heads * shape.value_dim,
                 options.threads);
  }
  outputs.state = decoder.state();
  return outputs;
}

template class ReplayDecoder<float>;
template class ReplayDecoder<double>;
template Outputs<float> replay(const Inputs<float>&, const KernelOptions&, bool, int64_t);
template Outputs<double> replay(const Inputs<double>&, const KernelOptions&, bool, int64_t);

}  // namespace kda::kernels::cpu
