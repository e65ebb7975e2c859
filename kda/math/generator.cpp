#include "kda/math/generator.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "kda/math/gates.hpp"
#include "loupe/error.hpp"

namespace kda::math {

std::string_view decay_name(Decay decay) { return decay == Decay::kSlow ? "slow" : "fast"; }

Decay parse_decay(std::string_view name) {
  if (name == "slow") return Decay::kSlow;
  if (name == "fast") return Decay::kFast;
  throw loupe::Error(loupe::ErrorCode::kUsage, "unknown decay '" + std::string(name) + "'",
                     "use slow or fast");
}

namespace {

void fill_normal(NormalStream& stream, std::vector<float>& out, size_t count, double scale = 1.0) {
  out.resize(count);
  for (auto& value : out) value = static_cast<float>(scale * stream.normal());
}

// Keys: a fixed random basis per head spans the subspace; each key is a normalised subspace
// vector plus noise of relative norm `noise`. The projection runs basis vector by basis vector
// over contiguous rows of the basis (vectorised), each channel's sum still taken in the basis
// order, so a seed gives the very same keys as a channel-by-channel sum.
void fill_keys(NormalStream& stream, const Shape& shape, int64_t subspace, double noise,
               std::vector<float>& out) {
  const int64_t key_dim = shape.key_dim;
  subspace = std::min(subspace, key_dim);
  std::vector<double> basis(static_cast<size_t>(shape.heads * subspace * key_dim));
  for (auto& value : basis) value = stream.normal();
  out.resize(static_cast<size_t>(shape.batch * shape.tokens * shape.heads * key_dim));
  std::vector<double> coefficients(static_cast<size_t>(subspace));
  std::vector<double> in_subspace(static_cast<size_t>(key_dim)), noise_part(in_subspace.size());
  for (int64_t row = 0; row < shape.batch * shape.tokens * shape.heads; ++row) {
    const int64_t head_idx = row % shape.heads;
    // The stream's order: the row's coefficients, then its noise, channel by channel.
    for (auto& value : coefficients) value = stream.normal();
    for (auto& value : noise_part) value = stream.normal();
    std::fill(in_subspace.begin(), in_subspace.end(), 0.0);
    for (int64_t basis_idx = 0; basis_idx < subspace; ++basis_idx) {
      const double coefficient = coefficients[basis_idx];
      const double* basis_row = basis.data() + (head_idx * subspace + basis_idx) * key_dim;
      for (int64_t dim = 0; dim < key_dim; ++dim) in_subspace[dim] += coefficient * basis_row[dim];
    }
    l2_normalize(in_subspace.data(), key_dim);
    l2_normalize(noise_part.data(), key_dim);
    for (int64_t dim = 0; dim < key_dim; ++dim) {
      out[row * key_dim + dim] = static_cast<float>(in_subspace[dim] + noise * noise_part[dim]);
    }
  }
}

}  // namespace

Inputs<float> generate_inputs(const Shape& shape, const GeneratorOptions& options) {
  Inputs<float> inputs;
  inputs.shape = shape;
  NormalStream stream(options.seed);
  const int64_t rows = shape.batch * shape.tokens;
  fill_normal(stream, inputs.q, static_cast<size_t>(rows * shape.heads * shape.key_dim));
  fill_keys(stream, shape, options.key_subspace, options.key_noise, inputs.k);
  fill_normal(stream, inputs.v, static_cast<size_t>(rows * shape.value_heads * shape.value_dim));
  if (options.normalize_qk) {
    l2_normalize_rows(std::span<float>(inputs.q), shape.key_dim);
    l2_normalize_rows(std::span<float>(inputs.k), shape.key_dim);
  }
  const int64_t gate_row = shape.value_heads * shape.key_dim;
  inputs.g.resize(static_cast<size_t>(rows * gate_row));
  if (options.decay == Decay::kSlow) {
    std::vector<float> rate(static_cast<size_t>(shape.batch * gate_row));
    for (auto& value : rate) {
      value = static_cast<float>(
          std::exp(std::log(1e-6) + (std::log(1e-1) - std::log(1e-6)) * stream.uniform()));
    }
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t batch_idx = row / std::max<int64_t>(shape.tokens, 1);
      for (int64_t idx = 0; idx < gate_row; ++idx) {
        inputs.g[row * gate_row + idx] = -rate[batch_idx * gate_row + idx];
      }
    }
  } else {
    for (auto& value : inputs.g) value = static_cast<float>(-5.0 * sigmoid(stream.normal()));
  }
  inputs.beta.resize(static_cast<size_t>(rows * shape.value_heads));
  for (auto& value : inputs.beta) value = static_cast<float>(sigmoid(stream.normal()));
  return inputs;
}

RawDecodeInputs generate_raw_decode_inputs(const Shape& shape, uint64_t seed) {
  RawDecodeInputs raw;
  raw.shape = shape;
  NormalStream stream(seed);
  const int64_t rows = shape.batch * shape.tokens;
  fill_normal(stream, raw.q, static_cast<size_t>(rows * shape.heads * shape.key_dim));
  fill_keys(stream, shape, 16, 0.1, raw.k);
  // Raw keys carry a norm that is not 1, so the kernels' normalisation does real work.
  for (auto& value : raw.k) value *= 3.0f;
  fill_normal(stream, raw.v, static_cast<size_t>(rows * shape.value_heads * shape.value_dim));
  fill_normal(stream, raw.g_raw, static_cast<size_t>(rows * shape.value_heads * shape.key_dim));
  fill_normal(stream, raw.b_raw, static_cast<size_t>(rows * shape.value_heads));
  raw.a_log.resize(static_cast<size_t>(shape.value_heads));
  for (auto& value : raw.a_log) value = static_cast<float>(2.0 * stream.uniform() - 1.0);
  fill_normal(stream, raw.dt_bias, static_cast<size_t>(shape.value_heads * shape.key_dim), 0.1);
  return raw;
}

}  // namespace kda::math
