#include "kda/kernels/cpu/cp.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "kda/kernels/cpu/chunk.hpp"
#include "kda/math/generator.hpp"
#include "kda_test_util.hpp"
#include "loupe/error.hpp"

namespace kda::kernels::cpu {
namespace {

using kda::testing::rms_ratio;
using math::DotPrecision;

TEST(CpShardStarts, SplitsOnChunkBoundaries) {
  EXPECT_EQ(cp_shard_starts(4096, 8),
            (std::vector<int64_t>{0, 512, 1024, 1536, 2048, 2560, 3072, 3584}));
  EXPECT_EQ(cp_shard_starts(200, 3), (std::vector<int64_t>{0, 64, 128}));
  EXPECT_EQ(cp_shard_starts(64, 2), (std::vector<int64_t>{0, 0}));
}

// Incident 1 at T = 4096 (reference/kda.md's first table row): CP's boundary states against the
// non-CP chunked pass's states at the same tokens, over every boundary after the first.
struct Drift {
  Outputs<float> non_cp;
  std::vector<int64_t> starts;
};

Drift non_cp_pass(const Inputs<float>& inputs, int shards) {
  KernelOptions options;
  options.threads = 2;
  options.boundary_tokens = cp_shard_starts(inputs.shape.tokens, shards);
  return {chunk(inputs, options), options.boundary_tokens};
}

double boundary_drift(const Inputs<float>& inputs, const Drift& reference, int shards,
                      DotPrecision precision) {
  KernelOptions options;
  options.threads = 2;
  const Outputs<float> cp_out = cp(inputs, options, {shards, precision});
  const size_t state_size =
      static_cast<size_t>(inputs.shape.value_heads * inputs.shape.key_dim * inputs.shape.value_dim);
  EXPECT_EQ(cp_out.boundary_states.size(), reference.non_cp.boundary_states.size());
  // Shard 0 starts from h0 in both; the drift lives in boundaries 1 .. P-1.
  return rms_ratio(cp_out.boundary_states, reference.non_cp.boundary_states, state_size);
}

Inputs<float> incident_inputs(int64_t tokens, math::Decay decay) {
  math::GeneratorOptions generator;
  generator.decay = decay;
  generator.seed = 1;
  return math::generate_inputs({1, tokens, 1, 1, 128, 128}, generator);
}

TEST(CpVsNonCp, Tf32TruncationDriftsWithSlowDecay) {
  const Inputs<float> inputs = incident_inputs(4096, math::Decay::kSlow);
  const Drift reference = non_cp_pass(inputs, 8);
  const double ieee = boundary_drift(inputs, reference, 8, DotPrecision::kIeee);
  const double tf32_rz = boundary_drift(inputs, reference, 8, DotPrecision::kTf32Rz);
  const double tf32_rne = boundary_drift(inputs, reference, 8, DotPrecision::kTf32Rne);
  const double tf32x3 = boundary_drift(inputs, reference, 8, DotPrecision::kTf32x3);
  // reference/kda.md, T = 4k, 8 shards: ≈4e-3 truncated, ≈8e-4 rounded, ≈4e-7 3xTF32, ≈3e-7 fp32.
  EXPECT_GE(tf32_rz, 4e-3 / 3);
  EXPECT_LE(tf32_rz, 4e-3 * 3);
  EXPECT_GE(tf32_rne, 8e-4 / 3);
  EXPECT_LE(tf32_rne, 8e-4 * 3);
  EXPECT_LE(tf32x3, 2e-6);
  EXPECT_LE(ieee, 2e-6);
  // Truncation is a bias, rounding is noise: the truncated chain drifts several times further.
  EXPECT_GT(tf32_rz, 4 * tf32_rne);
}

// The required result: T = 16384, 8 shards, slow decay, K = V = 128, H = 1.
TEST(CpVsNonCp, Incident1AtT16384) {
  const Inputs<float> inputs = incident_inputs(16384, math::Decay::kSlow);
  const Drift reference = non_cp_pass(inputs, 8);
  const double ieee = boundary_drift(inputs, reference, 8, DotPrecision::kIeee);
  const double tf32_rz = boundary_drift(inputs, reference, 8, DotPrecision::kTf32Rz);
  const double tf32x3 = boundary_drift(inputs, reference, 8, DotPrecision::kTf32x3);
  EXPECT_GE(tf32_rz, 2e-2 / 3);
  EXPECT_LE(tf32_rz, 2e-2 * 3);
  EXPECT_LE(tf32x3, 2e-6);
  EXPECT_LE(ieee, 2e-6);
  // Two shards: no drift beyond the ieee level at the truncating precision.
  const Drift two = non_cp_pass(inputs, 2);
  EXPECT_LE(boundary_drift(inputs, two, 2, DotPrecision::kTf32Rz), std::max(ieee, 1e-7));
}

TEST(CpVsNonCp, TwoShardsNeverDrift) {
  // With two shards the M chain only multiplies the zero initial state: no precision shows.
  const Inputs<float> inputs = incident_inputs(4096, math::Decay::kSlow);
  const Drift reference = non_cp_pass(inputs, 2);
  for (DotPrecision precision : {DotPrecision::kIeee, DotPrecision::kTf32Rz, DotPrecision::kBf16}) {
    EXPECT_LE(boundary_drift(inputs, reference, 2, precision), 1e-6)
        << math::precision_name(precision);
  }
}

TEST(CpVsNonCp, FastDecayIsTheControlWithNoDrift) {
  const Inputs<float> inputs = incident_inputs(4096, math::Decay::kFast);
  const Drift reference = non_cp_pass(inputs, 8);
  for (DotPrecision precision : {DotPrecision::kIeee, DotPrecision::kBf16, DotPrecision::kTf32Rz,
                                 DotPrecision::kTf32Rne, DotPrecision::kTf32x3}) {
    EXPECT_LE(boundary_drift(inputs, reference, 8, precision), 1e-6)
        << math::precision_name(precision);
  }
}

TEST(Cp, OutputsAndFinalStateMatchTheFp64Chunk) {
  math::GeneratorOptions generator;
  generator.decay = math::Decay::kSlow;
  generator.seed = 4;
  Inputs<float> inputs = math::generate_inputs({2, 1000, 2, 4, 64, 48}, generator);
  inputs.h0.assign(2 * 4 * 64 * 48, 0.05f);
  const Inputs<double> wide = convert_inputs<double>(inputs);
  const Outputs<double> oracle = chunk(wide, {});
  KernelOptions options;
  options.threads = 2;
  const Outputs<double> cp64 = cp(wide, options, {5, DotPrecision::kIeee});
  EXPECT_LE(rms_ratio(cp64.o, oracle.o), 1e-10);
  EXPECT_LE(rms_ratio(cp64.state, oracle.state), 1e-10);
  const Outputs<float> cp32 = cp(inputs, options, {3, DotPrecision::kTf32x3});
  EXPECT_LE(rms_ratio(cp32.o, oracle.o), 5e-3);
  EXPECT_LE(rms_ratio(cp32.state, oracle.state), 5e-3);
  // Shard 0 starts from h0.
  EXPECT_EQ(std::vector<float>(cp32.boundary_states.begin(), cp32.boundary_states.begin() + 10),
            std::vector<float>(10, 0.05f));
}

TEST(Cp, ThreadCountDoesNotChangeTheResult) {
  const Inputs<float> inputs = incident_inputs(1024, math::Decay::kSlow);
  KernelOptions one, two;
  two.threads = 2;
  EXPECT_EQ(cp(inputs, one, {4, DotPrecision::kTf32Rz}).o,
            cp(inputs, two, {4, DotPrecision::kTf32Rz}).o);
}

TEST(Cp, RejectsVariableLengthBatches) {
  Inputs<float> inputs = incident_inputs(128, math::Decay::kFast);
  inputs.cu_seqlens = {0, 64, 128};
  EXPECT_THROW(cp(inputs, {}, {2, DotPrecision::kIeee}), loupe::Error);
}

}  // namespace
}  // namespace kda::kernels::cpu
