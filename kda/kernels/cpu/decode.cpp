#include "kda/kernels/cpu/decode.hpp"

#include <algorithm>
#include <string>

#include "kda/faults.hpp"
#include "kda/kernels/cpu/thread_pool.hpp"
#include "kda/kernels/cpu/token_step.hpp"
#include "loupe/error.hpp"

namespace kda::kernels::cpu {

std::string_view decode_variant_name(DecodeVariant variant) {
  return variant == DecodeVariant::kTiled ? "tiled" : "merged";
}

DecodeVariant parse_decode_variant(std::string_view name) {
  if (name == "tiled") return DecodeVariant::kTiled;
  if (name == "merged") return DecodeVariant::kMerged;
  throw loupe::Error(loupe::ErrorCode::kUsage, "unknown decode variant '" + std::string(name) + "'",
                     "use tiled or merged");
}

namespace {

template <class Real>
void check_params(const DecodeParams<Real>& params, const Shape& shape) {
  if (params.gate_form == math::GateForm::kLogDecay) return;
  if (static_cast<int64_t>(params.a_log.size()) != shape.value_heads ||
      static_cast<int64_t>(params.dt_bias.size()) != shape.value_heads * shape.key_dim) {
    throw loupe::Error(
        loupe::ErrorCode::kInput,
        "kda decode: A_log must hold HV=" + std::to_string(shape.value_heads) +
            " values and dt_bias HV*K=" + std::to_string(shape.value_heads * shape.key_dim) +
            ", got " + std::to_string(params.a_log.size()) + " and " +
            std::to_string(params.dt_bias.size()),
        "the raw gate forms need A_log (HV) and dt_bias (HV, K)");
  }
}

}  // namespace

// The per-(sequence, value head) preparation both variants run; the tiled one runs it per tile.
template <class Real>
struct TokenValues {
  std::vector<Real> q, k, alpha;
  Real beta = 0;

  void compute(const DecodeParams<Real>& params, const Shape& shape, const DecodeStep<Real>& step,
               int64_t seq_idx, int64_t value_head, Real scale) {
    const int64_t key_dim = shape.key_dim;
    // Planted fault decode_head_map: value heads mapped to key heads round-robin (hv % H), not
    // in groups (hv / (HV / H)). Both decode variants share this preparation.
    const int64_t head =
        fault("decode_head_map") ? value_head % shape.heads : value_head / shape.group_size();
    const int64_t row = seq_idx * step.sequence_stride;
    q.assign(step.q + (row * shape.heads + head) * key_dim,
             step.q + (row * shape.heads + head + 1) * key_dim);
    k.assign(step.k + (row * shape.heads + head) * key_dim,
             step.k + (row * shape.heads + head + 1) * key_dim);
    if (params.l2norm) {
      math::l2_normalize(q.data(), key_dim);
      math::l2_normalize(k.data(), key_dim);
    }
    for (auto& value : q) value *= scale;
    alpha.resize(static_cast<size_t>(key_dim));
    // Planted fault decode_gate_row_stride: the gate and beta rows strided by H, not HV (the same
    // while H = HV; with grouped value heads every sequence after the first reads another's gates).
    const int64_t gate_heads = fault("decode_gate_row_stride") ? shape.heads : shape.value_heads;
    const Real* g = step.g + (row * gate_heads + value_head) * key_dim;
    const bool raw_gate = params.gate_form != math::GateForm::kLogDecay;
    const Real a_log = raw_gate ? params.a_log[value_head] : Real(0);
    for (int64_t dim = 0; dim < key_dim; ++dim) {
      const Real bias = raw_gate ? params.dt_bias[value_head * key_dim + dim] : Real(0);
      alpha[dim] = std::exp(math::log_decay(params.gate_form, g[dim], a_log, bias));
    }
    beta = math::beta_value(params.beta_form, step.beta[row * gate_heads + value_head]);
    // Planted fault decode_beta_saturate: a write gate above 0.93 taken as exactly 1 (a
    // shortcut for saturated gates). Both kernels share it; only inputs that hold such a gate
    // (some seeds) show it.
    if (fault("decode_beta_saturate") && beta > Real(0.93)) beta = Real(1);
  }
};

// Planted fault decode_vector_columns: token_step's column loop taken one vector of columns at a
// time ("the remainder loop's form for every column: simpler, and the compiler unrolls it"): the
// same arithmetic per column in the same order, so the same bits, with one accumulator per pass
// where there were four, and every row's key, decay and query read once per vector.
template <class Real>
void token_step_vector_columns(Real* state, int64_t key_dim, int64_t columns, int64_t ld,
                               const Real* alpha, const Real* k, const Real* q, const Real* v,
                               Real beta, Real* delta, Real* o) {
  using namespace token_step_detail;
  constexpr int64_t kLanes = Vector<Real>::kLanes;
  if (columns % kLanes != 0) {
    token_step(state, key_dim, columns, ld, alpha, k, q, v, beta, delta, o);
    return;
  }
  for (int64_t col0 = 0; col0 < columns; col0 += kLanes) {
    decay_and_project<Real, 1>(state, key_dim, ld, col0, alpha, k, v, beta, delta);
    update_and_read<Real, 1>(state, key_dim, ld, col0, k, q, delta, o);
  }
}

template <class Real>
void decode_step(DecodeVariant variant, const DecodeParams<Real>& params, const Shape& shape,
                 const DecodeStep<Real>& step, Real* state, Real* o, int threads) {
  check_params(params, shape);
  const int64_t key_dim = shape.key_dim, value_dim = shape.value_dim;
  const int64_t value_heads = shape.value_heads, state_size = key_dim * value_dim;
  const Real scale = static_cast<Real>(effective_scale(params.scale, key_dim));
  const int64_t pairs = shape.batch * value_heads;
  // Planted fault decode_tail_tile: the tile count rounds down, so the columns of a V that is not
  // a multiple of the tile are never updated.
  const int64_t tiles = variant != DecodeVariant::kTiled ? 1
                        : fault("decode_tail_tile")      ? value_dim / kDecodeTile
                                                    : (value_dim + kDecodeTile - 1) / kDecodeTile;
  parallel_for(pairs * tiles, threads, [&](int64_t item) {
    const int64_t pair = item / tiles, tile = item % tiles;
    const int64_t seq_idx = pair / value_heads, value_head = pair % value_heads;
    thread_local TokenValues<Real> values;
    thread_local std::vector<Real> delta;
    values.compute(params, shape, step, seq_idx, value_head, scale);
    // Planted fault decode_merged_beta: the merged kernel's beta 2 % off.
    if (fault("decode_merged_beta") && variant == DecodeVariant::kMerged) values.beta *= Real(0.98);
    const int64_t col0 = variant == DecodeVariant::kTiled ? tile * kDecodeTile : 0;
    const int64_t columns =
        variant == DecodeVariant::kTiled ? std::min(kDecodeTile, value_dim - col0) : value_dim;
    delta.resize(static_cast<size_t>(columns));
    const int64_t row = seq_idx * step.sequence_stride;
    const int64_t value_offset = (row * value_heads + value_head) * value_dim + col0;
    // Planted fault decode_merged_slow: the merged kernel redoes half of its columns on a copy
    // of the state (the same result, about 1.5x the state traffic).
    if (fault("decode_merged_slow") && variant == DecodeVariant::kMerged) {
      thread_local std::vector<Real> scratch, scratch_o;
      scratch.assign(state + pair * state_size, state + (pair + 1) * state_size);
      scratch_o.resize(static_cast<size_t>(columns));
      token_step(scratch.data(), key_dim, columns / 2, value_dim, values.alpha.data(),
                 values.k.data(), values.q.data(), step.v + value_offset, values.beta, delta.data(),
                 scratch_o.data());
    }
    // Planted fault decode_state_staging: the merged kernel copies the pair's state into a
    // thread-local buffer, steps it there and copies it back (the same result, twice the state
    // traffic).
    if (fault("decode_state_staging") && variant == DecodeVariant::kMerged) {
      thread_local std::vector<Real> staged;
      staged.assign(state + pair * state_size, state + (pair + 1) * state_size);
      token_step(staged.data(), key_dim, columns, value_dim, values.alpha.data(), values.k.data(),
                 values.q.data(), step.v + value_offset, values.beta, delta.data(),
                 o + value_offset);
      std::copy(staged.begin(), staged.end(), state + pair * state_size);
      return;
    }
    if (fault("decode_vector_columns") && variant == DecodeVariant::kMerged) {
      token_step_vector_columns(state + pair * state_size + col0, key_dim, columns, value_dim,
                                values.alpha.data(), values.k.data(), values.q.data(),
                                step.v + value_offset, values.beta, delta.data(), o + value_offset);
      return;
    }
    token_step(state + pair * state_size + col0, key_dim, columns, value_dim, values.alpha.data(),
               values.k.data(), values.q.data(), step.v + value_offset, values.beta, delta.data(),
               o + value_offset);
  });
}

template <class Real>
Outputs<Real> decode(DecodeVariant variant, const Inputs<Real>& inputs,
                     const KernelOptions& options, bool l2norm) {
  DecodeParams<Real> params;
  params.l2norm = l2norm;
  return decode(variant, inputs, options, params);
}

template <class Real>
Outputs<Real> decode(DecodeVariant variant, const Inputs<Real>& inputs,
                     const KernelOptions& options, DecodeParams<Real> params) {
  validate_inputs(inputs);
  if (!inputs.cu_seqlens.empty() || !options.boundary_tokens.empty()) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda decode: variable-length batches and boundary_tokens are not supported");
  }
  const Shape& shape = inputs.shape;
  params.scale = effective_scale(options, shape.key_dim);
  Outputs<Real> outputs;
  outputs.o.assign(
      static_cast<size_t>(shape.batch * shape.tokens * shape.value_heads * shape.value_dim), 0);
  outputs.state = inputs.h0;
  outputs.state.resize(
      static_cast<size_t>(shape.batch * shape.value_heads * shape.key_dim * shape.value_dim), 0);
  for (int64_t token = 0; token < shape.tokens; ++token) {
    DecodeStep<Real> step;
    step.q = inputs.q.data() + token * shape.heads * shape.key_dim;
    step.k = inputs.k.data() + token * shape.heads * shape.key_dim;
    step.v = inputs.v.data() + token * shape.value_heads * shape.value_dim;
    step.g = inputs.g.data() + token * shape.value_heads * shape.key_dim;
    step.beta = inputs.beta.data() + token * shape.value_heads;
    step.sequence_stride = shape.tokens;
    decode_step(variant, params, shape, step, outputs.state.data(),
                outputs.o.data() + token * shape.value_heads * shape.value_dim, options.threads);
  }
  return outputs;
}

template void decode_step(DecodeVariant, const DecodeParams<float>&, const Shape&,
                          const DecodeStep<float>&, float*, float*, int);
template void decode_step(DecodeVariant, const DecodeParams<double>&, const Shape&,
                          const DecodeStep<double>&, double*, double*, int);
template Outputs<float> decode(DecodeVariant, const Inputs<float>&, const KernelOptions&, bool);
template Outputs<double> decode(DecodeVariant, const Inputs<double>&, const KernelOptions&, bool);
template Outputs<float> decode(DecodeVariant, const Inputs<float>&, const KernelOptions&,
                               DecodeParams<float>);
template Outputs<double> decode(DecodeVariant, const Inputs<double>&, const KernelOptions&,
                                DecodeParams<double>);

}  // namespace kda::kernels::cpu
