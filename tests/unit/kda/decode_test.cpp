#include "kda/kernels/cpu/decode.hpp"

#include <gtest/gtest.h>

#include "kda/kernels/cpu/recurrent.hpp"
#include "kda/math/generator.hpp"
#include "kda_test_util.hpp"
#include "loupe/error.hpp"

namespace kda::kernels::cpu {
namespace {

using kda::testing::rms_ratio;

// Runs `steps` raw decode tokens through one variant and returns (outputs, final states).
template <class Real>
std::pair<std::vector<Real>, std::vector<Real>> run_decode(DecodeVariant variant,
                                                           const math::RawDecodeInputs& raw,
                                                           const DecodeParams<Real>& params,
                                                           int threads) {
  const Shape& s = raw.shape;
  auto widen = [](const std::vector<float>& values) {
    return std::vector<Real>(values.begin(), values.end());
  };
  const auto q = widen(raw.q), k = widen(raw.k), v = widen(raw.v), g = widen(raw.g_raw),
             b = widen(raw.b_raw);
  std::vector<Real> state(static_cast<size_t>(s.batch * s.value_heads * s.key_dim * s.value_dim));
  std::vector<Real> o(static_cast<size_t>(s.batch * s.tokens * s.value_heads * s.value_dim));
  for (int64_t token = 0; token < s.tokens; ++token) {
    DecodeStep<Real> step{q.data() + token * s.heads * s.key_dim,
                          k.data() + token * s.heads * s.key_dim,
                          v.data() + token * s.value_heads * s.value_dim,
                          g.data() + token * s.value_heads * s.key_dim,
                          b.data() + token * s.value_heads,
                          s.tokens};
    decode_step(variant, params, s, step, state.data(),
                o.data() + token * s.value_heads * s.value_dim, threads);
  }
  return {o, state};
}

template <class Real>
DecodeParams<Real> raw_params(const math::RawDecodeInputs& raw, math::GateForm gate) {
  DecodeParams<Real> params;
  params.gate_form = gate;
  params.beta_form = math::BetaForm::kSigmoid;
  params.l2norm = true;
  params.a_log.assign(raw.a_log.begin(), raw.a_log.end());
  params.dt_bias.assign(raw.dt_bias.begin(), raw.dt_bias.end());
  return params;
}

TEST(Decode, TiledAndMergedAgree) {
  const auto raw = math::generate_raw_decode_inputs({8, 16, 2, 4, 128, 128}, 3);
  for (math::GateForm gate : {math::GateForm::kSoftplus, math::GateForm::kBoundedSigmoid}) {
    const auto params = raw_params<float>(raw, gate);
    const auto tiled = run_decode(DecodeVariant::kTiled, raw, params, 2);
    const auto merged = run_decode(DecodeVariant::kMerged, raw, params, 1);
    EXPECT_LE(rms_ratio(tiled.first, merged.first), 1e-6);
    EXPECT_LE(rms_ratio(tiled.second, merged.second), 1e-6);
    EXPECT_GT(rms_ratio(merged.first, std::vector<float>(merged.first.size(), 0.0f)), 0.5);
  }
}

TEST(Decode, MergedMatchesTheFp64RecurrenceOnPreparedInputs) {
  // Prepare the raw inputs the way the kernel does, in double, and run the oracle on them.
  const auto raw = math::generate_raw_decode_inputs({3, 40, 1, 2, 64, 96}, 5);
  const Shape& s = raw.shape;
  Inputs<double> prepared;
  prepared.shape = s;
  prepared.q.assign(raw.q.begin(), raw.q.end());
  prepared.k.assign(raw.k.begin(), raw.k.end());
  prepared.v.assign(raw.v.begin(), raw.v.end());
  math::l2_normalize_rows(std::span<double>(prepared.q), s.key_dim);
  math::l2_normalize_rows(std::span<double>(prepared.k), s.key_dim);
  prepared.g.resize(raw.g_raw.size());
  for (size_t idx = 0; idx < raw.g_raw.size(); ++idx) {
    const int64_t value_head = static_cast<int64_t>(idx) / s.key_dim % s.value_heads;
    const int64_t dim = static_cast<int64_t>(idx) % s.key_dim;
    prepared.g[idx] =
        math::log_decay<double>(math::GateForm::kSoftplus, raw.g_raw[idx], raw.a_log[value_head],
                                raw.dt_bias[value_head * s.key_dim + dim]);
  }
  prepared.beta.resize(raw.b_raw.size());
  for (size_t idx = 0; idx < raw.b_raw.size(); ++idx) {
    prepared.beta[idx] = math::sigmoid<double>(raw.b_raw[idx]);
  }
  const Outputs<double> oracle = recurrent(prepared, {});
  const auto merged =
      run_decode(DecodeVariant::kMerged, raw, raw_params<float>(raw, math::GateForm::kSoftplus), 1);
  EXPECT_LE(rms_ratio(merged.first, oracle.o), 1e-5);
  EXPECT_LE(rms_ratio(merged.second, oracle.state), 1e-5);
}

TEST(Decode, PrefillContractEqualsTheRecurrence) {
  math::GeneratorOptions generator;
  generator.seed = 8;
  Inputs<float> inputs = math::generate_inputs({2, 50, 2, 2, 32, 40}, generator);
  inputs.h0.assign(2 * 2 * 32 * 40, 0.1f);
  const Outputs<float> oracle = recurrent(inputs, {});
  for (DecodeVariant variant : {DecodeVariant::kTiled, DecodeVariant::kMerged}) {
    const Outputs<float> decoded = decode(variant, inputs, {}, false);
    EXPECT_LE(rms_ratio(decoded.o, oracle.o), 1e-6);
    EXPECT_LE(rms_ratio(decoded.state, oracle.state), 1e-6);
  }
}

TEST(Decode, RawGatesNeedALogAndDtBias) {
  const auto raw = math::generate_raw_decode_inputs({1, 1, 1, 1, 16, 16}, 1);
  DecodeParams<float> params;
  params.gate_form = math::GateForm::kSoftplus;
  std::vector<float> state(16 * 16), o(16);
  DecodeStep<float> step{raw.q.data(),     raw.k.data(),     raw.v.data(),
                         raw.g_raw.data(), raw.b_raw.data(), 1};
  EXPECT_THROW(decode_step(DecodeVariant::kMerged, params, raw.shape, step, state.data(), o.data()),
               loupe::Error);
}

TEST(Decode, ParsesVariantNames) {
  EXPECT_EQ(parse_decode_variant("tiled"), DecodeVariant::kTiled);
  EXPECT_EQ(parse_decode_variant("merged"), DecodeVariant::kMerged);
  EXPECT_THROW(parse_decode_variant("fused"), loupe::Error);
}

}  // namespace
}  // namespace kda::kernels::cpu
