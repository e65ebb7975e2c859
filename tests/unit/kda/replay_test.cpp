#include "kda/kernels/cpu/replay.hpp"

#include <gtest/gtest.h>

#include "kda/math/generator.hpp"
#include "kda_test_util.hpp"
#include "loupe/error.hpp"

namespace kda::kernels::cpu {
namespace {

using kda::testing::rms_ratio;

class ReplayVsDecode : public ::testing::TestWithParam<int64_t> {};

INSTANTIATE_TEST_SUITE_P(Windows, ReplayVsDecode, ::testing::Values(1, 4, 16));

TEST_P(ReplayVsDecode, OutputsAndStatesEqualPlainDecode) {
  const int64_t window = GetParam();
  const auto raw = math::generate_raw_decode_inputs({4, 37, 2, 4, 64, 64}, 12);
  const Shape& s = raw.shape;
  DecodeParams<float> params;
  params.gate_form = math::GateForm::kBoundedSigmoid;
  params.beta_form = math::BetaForm::kSigmoidTimesTwo;
  params.l2norm = true;
  params.a_log = raw.a_log;
  params.dt_bias = raw.dt_bias;
  std::vector<float> initial(static_cast<size_t>(s.batch * s.value_heads * s.key_dim * s.value_dim),
                             0.02f);
  ReplayDecoder<float> replayer(params, s, window, initial);
  std::vector<float> state = initial;
  const size_t out_size = static_cast<size_t>(s.batch * s.tokens * s.value_heads * s.value_dim);
  std::vector<float> decoded(out_size), replayed(out_size);
  for (int64_t token = 0; token < s.tokens; ++token) {
    DecodeStep<float> step{raw.q.data() + token * s.heads * s.key_dim,
                           raw.k.data() + token * s.heads * s.key_dim,
                           raw.v.data() + token * s.value_heads * s.value_dim,
                           raw.g_raw.data() + token * s.value_heads * s.key_dim,
                           raw.b_raw.data() + token * s.value_heads,
                           s.tokens};
    const int64_t out_offset = token * s.value_heads * s.value_dim;
    decode_step(DecodeVariant::kMerged, params, s, step, state.data(), decoded.data() + out_offset);
    replayer.step(step, replayed.data() + out_offset, 2);
    // The checkpoint is written back exactly every L steps.
    EXPECT_EQ(replayer.ring_fill(), (token + 1) % window);
    if ((token + 1) % window == 0) {
      EXPECT_LE(rms_ratio(replayer.checkpoint(), state), 1e-6);
    }
  }
  EXPECT_LE(rms_ratio(replayed, decoded), 1e-6);
  EXPECT_LE(rms_ratio(replayer.state(), state), 1e-6);
  if (window > 1) {
    EXPECT_GT(rms_ratio(replayer.checkpoint(), state), 1e-3);  // 37 % L != 0: stale
  }
}

TEST(Replay, PrefillContractEqualsDecode) {
  math::GeneratorOptions generator;
  generator.seed = 6;
  const Inputs<float> inputs = math::generate_inputs({2, 30, 1, 2, 32, 32}, generator);
  const Outputs<float> decoded = decode(DecodeVariant::kMerged, inputs, {}, false);
  const Outputs<float> replayed = replay(inputs, {}, false, 4);
  EXPECT_LE(rms_ratio(replayed.o, decoded.o), 1e-6);
  EXPECT_LE(rms_ratio(replayed.state, decoded.state), 1e-6);
}

TEST(Replay, RejectsAnEmptyWindow) {
  EXPECT_THROW(ReplayDecoder<float>({}, {1, 1, 1, 1, 8, 8}, 0, {}), loupe::Error);
}

}  // namespace
}  // namespace kda::kernels::cpu
