// tests/unit/kda_cuda/reference_test.cpp — the fp64 side of the GPU harness
// (kda/gpu/reference.hpp), checked on the CPU: every GPU figure kda_gpu reports is measured against
// these.
#include "kda/gpu/reference.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace kda::gpu {
namespace {

TEST(ChunkAffineMapTest, MatchesTokenStepsForEveryGate) {
  for (GateKind gate : {GateKind::kSlowDecay, GateKind::kFastForget, GateKind::kSteepForget}) {
    const ChunkInputs chunk = incident1_chunk(11, gate, 3);
    std::vector<double> m(kKeyDim * kKeyDim), h(kKeyDim * kValueDim);
    chunk_affine_map(chunk, m.data(), h.data());
    Random random(5);
    std::vector<double> state(kKeyDim * kValueDim);
    for (auto& value : state) value = random.normal();
    std::vector<double> expected = state;
    chunk_token_steps(chunk, expected.data());
    std::vector<double> mapped(h);
    for (int row = 0; row < kKeyDim; ++row) {
      for (int key = 0; key < kKeyDim; ++key) {
        for (int column = 0; column < kValueDim; ++column) {
          mapped[row * kValueDim + column] +=
              m[row * kKeyDim + key] * state[key * kValueDim + column];
        }
      }
    }
    EXPECT_LT(rms_ratio(mapped.data(), expected.data(), mapped.size()), 1e-11)
        << gate_kind_name(gate);
  }
}

// The largest reach of a chunk's 16-token blocks (chunk_intra.cu: a block's largest cumulative log
// decay G minus the smallest G up to the block's end), over channels and blocks.
double largest_block_reach(const ChunkInputs& chunk) {
  double reach = 0;
  for (int key = 0; key < kKeyDim; ++key) {
    double sum = 0, prefix_min = 0;
    for (int block = 0; block < kChunkSize / 16; ++block) {
      double block_max = -1e300;
      for (int row = 16 * block; row < 16 * (block + 1); ++row) {
        sum += chunk.g[row * kKeyDim + key];
        block_max = std::max(block_max, sum);
        prefix_min = row == 0 ? sum : std::min(prefix_min, sum);
      }
      reach = std::max(reach, block_max - prefix_min);
    }
  }
  return reach;
}

// kda_gpu --prefill's gates reach chunk_intra's two ways of making A: fast gates stay within its
// whole-chunk product's bound of 80 in every chunk, steep gates pass it in every chunk.
TEST(GateKindTest, FastAndSteepGatesFallOnEitherSideOfTheWholeChunkBound) {
  for (int chunk_index = 0; chunk_index < 16; ++chunk_index) {
    EXPECT_LT(largest_block_reach(incident1_chunk(26, GateKind::kFastForget, chunk_index)), 80.0)
        << chunk_index;
    EXPECT_GT(largest_block_reach(incident1_chunk(26, GateKind::kSteepForget, chunk_index)), 80.0)
        << chunk_index;
  }
  EXPECT_STREQ(gate_kind_name(GateKind::kSteepForget), "steep_forget");
}

TEST(ChainStatesTest, EqualsChunkByChunkTokenSteps) {
  const int num_chunks = 3;
  std::vector<double> m_all, h_all;
  incident1_chunk_maps(2, GateKind::kSlowDecay, num_chunks, 2, m_all, h_all);
  const auto states = chain_states(m_all, h_all, num_chunks, {0, 2, 3}, 2);
  std::vector<double> state(kKeyDim * kValueDim, 0.0);
  for (double value : states.at(0)) ASSERT_EQ(value, 0.0);
  for (int chunk_index = 0; chunk_index < num_chunks; ++chunk_index) {
    chunk_token_steps(incident1_chunk(2, GateKind::kSlowDecay, chunk_index), state.data());
    if (chunk_index + 1 >= 2) {
      EXPECT_LT(rms_ratio(states.at(chunk_index + 1).data(), state.data(), state.size()), 1e-11);
    }
  }
}

// The algebra of the context-parallel prefill (kda/kernels/cuda/chunk_cp.cu): a shard's transition
// M is its state walk with v = 0 from the identity (chunk_state's transition tiles), its offset H
// the walk from zero, and the walk from any S equals M S + H (what chunk_cp_scan chains).
TEST(ShardTransitionTest, IsTheWalkWithZeroValuesFromTheIdentity) {
  constexpr int kChunks = 3;
  std::vector<ChunkInputs> chunks;
  for (int c = 0; c < kChunks; ++c) chunks.push_back(incident1_chunk(4, GateKind::kSlowDecay, c));
  auto walk = [&](std::vector<double> state, bool zero_values) {
    for (ChunkInputs chunk : chunks) {
      if (zero_values) std::fill(chunk.v.begin(), chunk.v.end(), 0.0);
      chunk_token_steps(chunk, state.data());
    }
    return state;
  };
  static_assert(kKeyDim == kValueDim, "M (K x K) walks as a state (K x V)");
  std::vector<double> identity(kKeyDim * kValueDim, 0.0);
  for (int row = 0; row < kKeyDim; ++row) identity[row * kValueDim + row] = 1.0;
  const std::vector<double> transition = walk(identity, true);
  const std::vector<double> offset = walk(std::vector<double>(kKeyDim * kValueDim, 0.0), false);

  // M against the product of the chunk maps, M_2 M_1 M_0.
  std::vector<double> product = identity, m(kKeyDim * kKeyDim), h(kKeyDim * kValueDim);
  for (const ChunkInputs& chunk : chunks) {
    chunk_affine_map(chunk, m.data(), h.data());
    std::vector<double> next(kKeyDim * kKeyDim, 0.0);
    for (int row = 0; row < kKeyDim; ++row) {
      for (int inner = 0; inner < kKeyDim; ++inner) {
        for (int column = 0; column < kKeyDim; ++column) {
          next[row * kKeyDim + column] +=
              m[row * kKeyDim + inner] * product[inner * kKeyDim + column];
        }
      }
    }
    product = next;
  }
  EXPECT_LT(rms_ratio(transition.data(), product.data(), product.size()), 1e-11);

  Random random(8);
  std::vector<double> start(kKeyDim * kValueDim);
  for (auto& value : start) value = random.normal();
  std::vector<double> scanned = offset;
  for (int row = 0; row < kKeyDim; ++row) {
    for (int inner = 0; inner < kKeyDim; ++inner) {
      for (int column = 0; column < kValueDim; ++column) {
        scanned[row * kValueDim + column] +=
            transition[row * kKeyDim + inner] * start[inner * kValueDim + column];
      }
    }
  }
  const std::vector<double> walked = walk(start, false);
  EXPECT_LT(rms_ratio(scanned.data(), walked.data(), walked.size()), 1e-11);
}

TEST(Incident1ChunkTest, SlowGatesDecayWithinTheRangeAndKeysAreUnit) {
  const ChunkInputs chunk = incident1_chunk(9, GateKind::kSlowDecay, 0);
  for (int c = 0; c < kChunkSize; ++c) {
    double norm2 = 0;
    for (int key = 0; key < kKeyDim; ++key) {
      const double g = chunk.g[c * kKeyDim + key];
      EXPECT_GE(-g, 1e-6 * (1 - 1e-12));
      EXPECT_LE(-g, 1e-1 * (1 + 1e-12));
      EXPECT_EQ(g, chunk.g[key]);  // one rate per channel, the same every token
      norm2 += chunk.k[c * kKeyDim + key] * chunk.k[c * kKeyDim + key];
    }
    EXPECT_NEAR(norm2, 1.0, 1e-12);
    EXPECT_GT(chunk.beta[c], 0.0);
    EXPECT_LT(chunk.beta[c], 1.0);
  }
}

TEST(DecodeReferenceTest, ZeroStateGivesBetaTimesValueAlongTheKey) {
  Random random(4);
  DecodeInputs inputs = random_decode_inputs(2, 1, 2, 3, random);
  std::vector<double> state(static_cast<size_t>(3) * 2 * kKeyDim * kValueDim, 0.0), o;
  decode_reference(inputs, state, o);
  // From S = 0: S' = β k vᵀ, so o = β (k·q) v with normalised k and scaled q.
  for (int sequence = 0; sequence < 2; ++sequence) {
    for (int value_head = 0; value_head < 2; ++value_head) {
      const int64_t row = sequence * 2 + value_head;
      double q2 = 0, k2 = 0, qk = 0;
      for (int key = 0; key < kKeyDim; ++key) {
        const double q = bf16_bits_to_float(inputs.q[sequence * kKeyDim + key]);
        const double k = bf16_bits_to_float(inputs.k[sequence * kKeyDim + key]);
        q2 += q * q, k2 += k * k, qk += q * k;
      }
      const double scale = qk / std::sqrt(q2 + 1e-6) / std::sqrt(k2 + 1e-6) / std::sqrt(128.0);
      const double beta = 1 / (1 + std::exp(-double(bf16_bits_to_float(inputs.b_raw[row]))));
      for (int column = 0; column < kValueDim; ++column) {
        const double v = bf16_bits_to_float(inputs.v[row * kValueDim + column]);
        EXPECT_NEAR(o[row * kValueDim + column], beta * scale * v, 1e-12);
      }
    }
  }
}

TEST(Bf16Test, RoundsToNearestEven) {
  EXPECT_EQ(to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(bf16_bits_to_float(to_bf16_bits(1.0f + 0x1.0p-8f)), 1.0f);  // tie → even
  EXPECT_EQ(bf16_bits_to_float(to_bf16_bits(1.0f + 0x1.8p-8f)), 1.0f + 0x1.0p-7f);
}

// kda_gpu --prefill's inputs: drawn per (sequence, chunk) on any number of threads with the same
// result; q, k, v already bf16 (what the GPU reads); q and k unit rows; GVA layout.
TEST(PrefillInputsTest, ThreadsChangeNothingAndRowsAreBf16UnitVectors) {
  const PrefillInputs one = prefill_inputs(26, GateKind::kSlowDecay, 2, 192, 2, 4, 1);
  const PrefillInputs many = prefill_inputs(26, GateKind::kSlowDecay, 2, 192, 2, 4, 5);
  EXPECT_EQ(many.q, one.q);
  EXPECT_EQ(many.k, one.k);
  EXPECT_EQ(many.v, one.v);
  EXPECT_EQ(many.g, one.g);
  EXPECT_EQ(many.beta, one.beta);
  ASSERT_EQ(one.q.size(), size_t{2 * 192 * 2 * kKeyDim});
  ASSERT_EQ(one.v.size(), size_t{2 * 192 * 4 * kValueDim});
  ASSERT_EQ(one.g.size(), size_t{2 * 192 * 4 * kKeyDim});
  ASSERT_EQ(one.beta.size(), size_t{2 * 192 * 4});
  for (const std::vector<float>* values : {&one.q, &one.k, &one.v}) {
    for (float value : *values) ASSERT_EQ(bf16_bits_to_float(to_bf16_bits(value)), value);
  }
  for (const std::vector<float>* rows : {&one.q, &one.k}) {
    for (size_t row = 0; row < rows->size() / kKeyDim; ++row) {
      double norm2 = 0;
      for (int d = 0; d < kKeyDim; ++d)
        norm2 += double((*rows)[row * kKeyDim + d]) * (*rows)[row * kKeyDim + d];
      ASSERT_NEAR(std::sqrt(norm2), 1.0, 0.01) << row;  // bf16 rounding of a unit row
    }
  }
  // Slow gates: each channel's decay rate holds over T; β in (0, 1).
  for (int hv = 0; hv < 4; ++hv) {
    for (int d = 0; d < kKeyDim; ++d) {
      const float first = one.g[(0 * 4 + hv) * kKeyDim + d];
      EXPECT_LT(first, 0.0f);
      EXPECT_EQ(one.g[(191 * 4 + hv) * kKeyDim + d], first);
    }
  }
  for (float b : one.beta) {
    EXPECT_GT(b, 0.0f);
    EXPECT_LT(b, 1.0f);
  }
  // Another seed, other sequences and heads: other numbers.
  const PrefillInputs other = prefill_inputs(27, GateKind::kSlowDecay, 2, 192, 2, 4, 1);
  EXPECT_NE(other.q, one.q);
  EXPECT_NE(std::vector<float>(one.k.begin(), one.k.begin() + kKeyDim),
            std::vector<float>(one.k.begin() + kKeyDim, one.k.begin() + 2 * kKeyDim));
}

TEST(PrefillInputsTest, ShapesTheKernelsCannotRunAreRefused) {
  EXPECT_THROW(prefill_inputs(1, GateKind::kFastForget, 1, 100, 2, 4, 1), std::invalid_argument);
  EXPECT_THROW(prefill_inputs(1, GateKind::kFastForget, 1, 128, 2, 3, 1), std::invalid_argument);
  EXPECT_THROW(prefill_inputs(1, GateKind::kFastForget, 0, 128, 2, 4, 1), std::invalid_argument);
}

}  // namespace
}  // namespace kda::gpu
