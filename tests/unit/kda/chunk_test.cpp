#include "kda/kernels/cpu/chunk.hpp"

#include <gtest/gtest.h>

#include "kda/kernels/cpu/recurrent.hpp"
#include "kda/math/generator.hpp"
#include "kda_test_util.hpp"
#include "loupe/error.hpp"

namespace kda::kernels::cpu {
namespace {

using math::generate_inputs;

using kda::testing::rms_ratio;

struct FlaShape {
  int64_t batch, tokens, heads, value_heads, dim;
};

Shape to_shape(const FlaShape& fla) {
  return {fla.batch, fla.tokens, fla.heads, fla.value_heads, fla.dim, fla.dim};
}

// A non-zero initial state, so the chunk map's state terms are exercised from the first chunk.
template <class Real>
void add_initial_state(Inputs<Real>& inputs, uint64_t seed, int64_t sequences = 0) {
  math::NormalStream stream(seed);
  const Shape& s = inputs.shape;
  if (sequences == 0) sequences = s.batch;
  inputs.h0.resize(static_cast<size_t>(sequences * s.value_heads * s.key_dim * s.value_dim));
  for (auto& value : inputs.h0) value = static_cast<Real>(0.1 * stream.normal());
}

class ChunkVsRecurrent : public ::testing::TestWithParam<FlaShape> {};

// FLA's test shapes (B, T, H, HV, D), all of them.
INSTANTIATE_TEST_SUITE_P(FlaShapes, ChunkVsRecurrent,
                         ::testing::Values(FlaShape{1, 64, 1, 1, 64}, FlaShape{2, 512, 3, 3, 60},
                                           FlaShape{3, 1000, 4, 4, 100},
                                           FlaShape{4, 1024, 4, 4, 128},
                                           FlaShape{2, 1500, 4, 4, 128},
                                           FlaShape{4, 2048, 8, 8, 64},
                                           FlaShape{2, 1024, 2, 8, 128}));

TEST_P(ChunkVsRecurrent, MatchesTheFp64OracleInFp32AndFp64) {
  math::GeneratorOptions generator;
  generator.seed = 7;
  Inputs<float> inputs = generate_inputs(to_shape(GetParam()), generator);
  add_initial_state(inputs, 11);
  const Inputs<double> wide = convert_inputs<double>(inputs);
  KernelOptions options;
  options.threads = 2;
  const Outputs<double> oracle = recurrent(wide, options);
  const Outputs<double> chunk64 = chunk(wide, options);
  const Outputs<float> chunk32 = chunk(inputs, options);
  EXPECT_LE(rms_ratio(chunk64.o, oracle.o), 1e-10);
  EXPECT_LE(rms_ratio(chunk64.state, oracle.state), 1e-10);
  EXPECT_LE(rms_ratio(chunk32.o, oracle.o), 5e-3);
  EXPECT_LE(rms_ratio(chunk32.state, oracle.state), 5e-3);
}

TEST(Chunk, SlowDecayMatchesTheRecurrence) {
  math::GeneratorOptions generator;
  generator.decay = math::Decay::kSlow;
  generator.seed = 3;
  const Inputs<float> inputs = generate_inputs({1, 777, 2, 4, 64, 32}, generator);
  const Inputs<double> wide = convert_inputs<double>(inputs);
  const Outputs<double> oracle = recurrent(wide, {});
  EXPECT_LE(rms_ratio(chunk(wide, {}).o, oracle.o), 1e-10);
  EXPECT_LE(rms_ratio(chunk(inputs, {}).o, oracle.o), 5e-3);
}

// Decays too strong for e^{G_a0 − G_j} to be formed take the per-pair path inside a sub-block.
TEST(Chunk, StrongDecayTakesThePerPairPathAndStaysFinite) {
  math::GeneratorOptions generator;
  generator.seed = 5;
  Inputs<float> inputs = generate_inputs({1, 200, 1, 1, 32, 32}, generator);
  for (auto& value : inputs.g) value *= 8.0f;  // up to −40 per token
  const Inputs<double> wide = convert_inputs<double>(inputs);
  const Outputs<double> oracle = recurrent(wide, {});
  EXPECT_LE(rms_ratio(chunk(wide, {}).o, oracle.o), 1e-10);
  EXPECT_LE(rms_ratio(chunk(inputs, {}).o, oracle.o), 5e-3);
}

TEST(Chunk, VariableLengthSequencesEqualSeparateRuns) {
  math::GeneratorOptions generator;
  generator.seed = 9;
  Inputs<double> packed =
      convert_inputs<double>(generate_inputs({1, 300, 2, 2, 32, 48}, generator));
  packed.cu_seqlens = {0, 64, 65, 200, 300};
  add_initial_state(packed, 4, 4);
  const Outputs<double> oracle = recurrent(packed, {});
  const Outputs<double> chunked = chunk(packed, {});
  EXPECT_LE(rms_ratio(chunked.o, oracle.o), 1e-10);
  EXPECT_LE(rms_ratio(chunked.state, oracle.state), 1e-10);
  ASSERT_EQ(chunked.state.size(), 4u * 2 * 32 * 48);
}

TEST(Chunk, RecordsStatesAtBoundaryTokens) {
  math::GeneratorOptions generator;
  generator.seed = 2;
  const Inputs<double> inputs =
      convert_inputs<double>(generate_inputs({2, 200, 1, 2, 16, 16}, generator));
  KernelOptions options;
  options.boundary_tokens = {0, 64, 192, 200};
  const Outputs<double> chunked = chunk(inputs, options);
  const Outputs<double> oracle = recurrent(inputs, options);
  ASSERT_EQ(chunked.boundary_states.size(), 2u * 4 * 2 * 16 * 16);
  EXPECT_LE(rms_ratio(chunked.boundary_states, oracle.boundary_states, 2 * 16 * 16), 1e-10);
  // Offset 0 is the (zero) initial state; offset 200 the final state.
  for (size_t idx = 0; idx < 2 * 16 * 16; ++idx) EXPECT_EQ(chunked.boundary_states[idx], 0.0);
  EXPECT_EQ(std::vector<double>(chunked.boundary_states.begin() + 3 * 512,
                                chunked.boundary_states.begin() + 4 * 512),
            std::vector<double>(chunked.state.begin(), chunked.state.begin() + 512));
}

TEST(Chunk, RejectsBoundaryTokensOffChunkEdges) {
  const Inputs<float> inputs = math::generate_inputs({1, 128, 1, 1, 16, 16}, {});
  KernelOptions options;
  options.boundary_tokens = {10};
  EXPECT_THROW(chunk(inputs, options), loupe::Error);
}

TEST(Chunk, RejectsMisshapenInputs) {
  Inputs<float> inputs = math::generate_inputs({1, 64, 1, 1, 16, 16}, {});
  inputs.beta.pop_back();
  try {
    chunk(inputs, {});
    FAIL() << "expected loupe::Error";
  } catch (const loupe::Error& error) {
    EXPECT_EQ(error.code(), loupe::ErrorCode::kInput);
    EXPECT_NE(error.message().find("beta"), std::string::npos);
  }
}

}  // namespace
}  // namespace kda::kernels::cpu
