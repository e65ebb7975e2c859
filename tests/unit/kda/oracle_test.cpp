// The fp64 oracle every kda check is judged against (kda/probes/oracle.hpp): its threads change
// nothing, and it agrees with kda's own fp64 recurrence, a separate formulation.
#include "kda/probes/oracle.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kda/kernels/cpu/recurrent.hpp"
#include "kda/math/generator.hpp"
#include "kda_test_util.hpp"

namespace kda::probes {
namespace {

struct Case {
  Shape shape;
  Inputs<float> inputs;
};

// GVA (HV = 3 H), K != V, T not a multiple of 64, slow gates (the state keeps every token).
Case gva_case() {
  const Shape shape{2, 200, 2, 6, 32, 24};
  math::GeneratorOptions options;
  options.seed = 26;
  options.decay = math::Decay::kSlow;
  return {shape, math::generate_inputs(shape, options)};
}

OracleOutputs run_oracle(const Case& c, std::span<const int64_t> boundaries, int threads) {
  return oracle_recurrence(c.shape, c.inputs.q, c.inputs.k, c.inputs.v, c.inputs.g, c.inputs.beta,
                           OracleForms{}, boundaries, threads);
}

// Issue 26: the T = 65536 checks need the oracle on the device host's 16 cores; each (b, hv)
// pair is still one sequential loop, so any thread count must give the same bits.
TEST(OracleRecurrence, ThreadsGiveBitIdenticalOutputsStatesAndBoundaryStates) {
  const Case c = gva_case();
  const std::vector<int64_t> boundaries = {0, 64, 128, 200};
  const OracleOutputs one = run_oracle(c, boundaries, 1);
  for (int threads : {2, 5, 12, 64}) {
    const OracleOutputs many = run_oracle(c, boundaries, threads);
    EXPECT_EQ(many.o, one.o) << threads << " threads";
    EXPECT_EQ(many.state, one.state) << threads << " threads";
    EXPECT_EQ(many.boundary_states, one.boundary_states) << threads << " threads";
  }
  // The boundary at T is the final state; the one at 0 is the zero state.
  const size_t per_state = static_cast<size_t>(6 * 32 * 24);
  for (int64_t b = 0; b < 2; ++b) {
    for (size_t i = 0; i < per_state; ++i) {
      EXPECT_EQ(one.boundary_states[(b * 4 + 0) * per_state + i], 0.0);
      EXPECT_EQ(one.boundary_states[(b * 4 + 3) * per_state + i], one.state[b * per_state + i]);
    }
  }
}

TEST(OracleRecurrence, AgreesWithKdasFp64RecurrenceToRounding) {
  const Case c = gva_case();
  const OracleOutputs oracle = run_oracle(c, {}, 3);
  Inputs<double> wide;
  wide.shape = c.shape;
  wide.q.assign(c.inputs.q.begin(), c.inputs.q.end());
  wide.k.assign(c.inputs.k.begin(), c.inputs.k.end());
  wide.v.assign(c.inputs.v.begin(), c.inputs.v.end());
  wide.g.assign(c.inputs.g.begin(), c.inputs.g.end());
  wide.beta.assign(c.inputs.beta.begin(), c.inputs.beta.end());
  KernelOptions options;
  options.threads = 2;
  const Outputs<double> kernel = kernels::cpu::recurrent(wide, options);
  EXPECT_LE(kda::testing::rms_ratio(oracle.o, kernel.o), 1e-12);
  EXPECT_LE(kda::testing::rms_ratio(oracle.state, kernel.state), 1e-12);
  double largest = 0;
  for (double value : oracle.o) largest = std::max(largest, std::abs(value));
  EXPECT_GT(largest, 1e-3);  // the outputs are not all (near) zero
}

// Fewer pairs than threads, and a zero-thread request, still run every pair once.
TEST(OracleRecurrence, MoreThreadsThanPairsAndZeroThreadsRunEveryPairOnce) {
  const Shape shape{1, 70, 1, 1, 16, 16};
  math::GeneratorOptions options;
  options.seed = 3;
  const Inputs<float> inputs = math::generate_inputs(shape, options);
  const OracleOutputs one = oracle_recurrence(shape, inputs.q, inputs.k, inputs.v, inputs.g,
                                              inputs.beta, OracleForms{}, {}, 1);
  for (int threads : {0, 8}) {
    const OracleOutputs other = oracle_recurrence(shape, inputs.q, inputs.k, inputs.v, inputs.g,
                                                  inputs.beta, OracleForms{}, {}, threads);
    EXPECT_EQ(other.o, one.o);
    EXPECT_EQ(other.state, one.state);
  }
}

}  // namespace
}  // namespace kda::probes
