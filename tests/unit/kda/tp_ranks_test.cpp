// kda/dist's tensor-parallel model prefill with ranks as threads: every rank's gathered logits and
// residual streams against the one-process Model::prefill, at 1, 2 and 4 ranks, an uneven split
// of the vocabulary, W8A8 layers and the CP prefill kernel.
#include "kda/dist/tp_ranks.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>

#include "kda/model/model.hpp"
#include "loupe/error.hpp"
#include "thread_communicator.hpp"

namespace kda::dist {
namespace {

struct Forward {
  std::vector<float> logits, hidden;
};

Forward one_process(const model::Model& model, const std::vector<int32_t>& prompts,
                    int64_t requests, int64_t tokens) {
  model::StateCache cache(model::CacheDType::kF32, requests, model.config().layers,
                          model.config().head_dim);
  Forward forward;
  forward.logits = model.prefill(prompts, requests, tokens, cache, &forward.hidden);
  return forward;
}

std::vector<Forward> across_threads(const model::Model& model, const std::vector<int32_t>& prompts,
                                    int64_t requests, int64_t tokens, int ranks) {
  ThreadGroup group(ranks);
  std::vector<Forward> results(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      ThreadCommunicator communicator(group, rank);
      Forward& forward = results[static_cast<size_t>(rank)];
      forward.logits =
          tp_prefill_across_ranks(model, prompts, requests, tokens, communicator, &forward.hidden);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

// tp_ranks_vs_notp's tolerance (kda/probes/tp_probes.cpp): rms of the difference over the
// one-process output's rms.
constexpr double kProbeBound = 1e-6;

double rms_ratio(const std::vector<float>& actual, const std::vector<float>& expected) {
  EXPECT_EQ(actual.size(), expected.size());
  double error = 0, norm = 0;
  for (size_t idx = 0; idx < std::min(actual.size(), expected.size()); ++idx) {
    error += std::pow(static_cast<double>(actual[idx]) - expected[idx], 2);
    norm += std::pow(static_cast<double>(expected[idx]), 2);
  }
  return norm > 0 ? std::sqrt(error / norm) : std::sqrt(error);
}

model::ModelConfig four_heads() {
  model::ModelConfig config;
  config.heads = 4;
  config.head_dim = 32;
  config.layers = 2;
  config.vocab = 300;  // over 4 ranks: 128, 64, 64, 44 rows (model.hpp, kVocabGranule)
  config.seed = 3;
  return config;
}

void expect_every_rank_equals_one_process(const model::ModelConfig& config, int ranks,
                                          const std::string& label) {
  const model::Model model(config);
  const int64_t requests = 2, tokens = 40;
  const std::vector<int32_t> prompts = model::generate_prompts(requests, tokens, config.vocab, 9);
  const Forward expected = one_process(model, prompts, requests, tokens);
  ASSERT_EQ(expected.logits.size(), static_cast<size_t>(requests * config.vocab));
  for (const Forward& rank : across_threads(model, prompts, requests, tokens, ranks)) {
    if (ranks == 1) {
      // One rank runs the one-process arithmetic on the same matrices: bit for bit.
      EXPECT_EQ(rank.logits, expected.logits) << label;
      EXPECT_EQ(rank.hidden, expected.hidden) << label;
      continue;
    }
    // More ranks: each head's projections, convolution, recurrence and norm, and each logit, are
    // the same sums in the rank's narrower matrices, but which of OpenBLAS's sgemm kernels sums
    // them, and in what blocking, depends on the matrix width and on the CPU (bit for bit on
    // the machine that first ran this; rms 4e-7 on an AVX-512 EPYC, whose kernels block
    // the narrower matrices otherwise). What holds everywhere is the probe's fp32 bound.
    EXPECT_LE(rms_ratio(rank.logits, expected.logits), kProbeBound)
        << label << " logits at " << ranks << " ranks";
    EXPECT_LE(rms_ratio(rank.hidden, expected.hidden), kProbeBound)
        << label << " hidden at " << ranks << " ranks";
  }
}

TEST(TpAcrossRanks, EveryRankHoldsTheOneProcessLogitsAndHiddenWithinTheProbesBound) {
  for (int ranks : {1, 2, 4}) expect_every_rank_equals_one_process(four_heads(), ranks, "fp32");
}

TEST(TpAcrossRanks, UnevenHeadsW8a8AndTheCpKernelAlsoMatchWithinTheProbesBound) {
  model::ModelConfig config = four_heads();
  config.heads = 3;  // over 2 ranks: 2 heads and 1
  expect_every_rank_equals_one_process(config, 2, "3 heads");
  config = four_heads();
  config.w8a8 = true;
  expect_every_rank_equals_one_process(config, 4, "w8a8");
  config = four_heads();
  config.cp_shards = 2;
  config.cp_precision = math::DotPrecision::kTf32x3;
  expect_every_rank_equals_one_process(config, 2, "cp");
}

TEST(TpAcrossRanks, VocabularySharesAreCutAt64RowsWhileEveryRankGetsOne) {
  EXPECT_EQ(model::tensor_parallel_starts(300, 4, "rows", 64),
            (std::vector<int64_t>{0, 128, 192, 256, 300}));
  EXPECT_EQ(model::tensor_parallel_starts(256, 4, "rows", 64),
            (std::vector<int64_t>{0, 64, 128, 192, 256}));
  // Fewer than 64 rows per rank: single rows, the first ones one more.
  EXPECT_EQ(model::tensor_parallel_starts(250, 4, "rows", 64),
            (std::vector<int64_t>{0, 63, 126, 188, 250}));
  EXPECT_EQ(model::tensor_parallel_starts(3, 2, "heads"), (std::vector<int64_t>{0, 2, 3}));
}

// Off the 64-row cut (250 rows over 4 ranks) the vocabulary shares are single rows: the fp32
// bound the tp_ranks_vs_notp probe declares still holds.
TEST(TpAcrossRanks, OffTheVocabularyCutTheLogitsStayWithinTheProbesBound) {
  model::ModelConfig config = four_heads();
  config.vocab = 250;
  const model::Model model(config);
  const std::vector<int32_t> prompts = model::generate_prompts(2, 40, config.vocab, 9);
  const Forward expected = one_process(model, prompts, 2, 40);
  const Forward rank0 = across_threads(model, prompts, 2, 40, 4)[0];
  EXPECT_LE(rms_ratio(rank0.hidden, expected.hidden), kProbeBound);
  EXPECT_LE(rms_ratio(rank0.logits, expected.logits), kProbeBound);
}

// The control: a gather that puts the ranks' head blocks in the wrong columns (rank order
// reversed) moves the residual stream and the logits by order one, far outside the bound.
TEST(TpAcrossRanks, AGatherThatMisplacesTheHeadBlocksIsFarOutsideTheBound) {
  const model::ModelConfig config = four_heads();
  const model::Model model(config);
  const std::vector<int32_t> prompts = model::generate_prompts(2, 40, config.vocab, 9);
  const Forward expected = one_process(model, prompts, 2, 40);
  ThreadGroup group(2);
  std::vector<Forward> results(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      ThreadCommunicator communicator(group, rank);
      model::TensorParallel tp = tensor_parallel_of(communicator);
      model::TensorParallel swapped = tp;
      swapped.gather = [&tp](const float* block, int64_t rows, std::span<const int64_t> starts,
                             float* full) {
        tp.gather(block, rows, starts, full);
        const int64_t width = starts.back(), half = starts[1];
        if (half * 2 != width) return;  // only the equal head blocks are swapped
        for (int64_t row = 0; row < rows; ++row) {
          std::swap_ranges(full + row * width, full + row * width + half,
                           full + row * width + half);
        }
      };
      results[rank].logits = model.prefill_tensor_parallel(prompts, 2, 40, swapped);
    });
  }
  for (std::thread& thread : threads) thread.join();
  double error = 0, norm = 0;
  for (size_t idx = 0; idx < expected.logits.size(); ++idx) {
    error += std::pow(static_cast<double>(results[0].logits[idx]) - expected.logits[idx], 2);
    norm += std::pow(static_cast<double>(expected.logits[idx]), 2);
  }
  EXPECT_GT(std::sqrt(error / norm), 1e-2);
}

TEST(TpAcrossRanks, MoreRanksThanHeadsIsAUsageErrorBeforeAnyCollective) {
  model::ModelConfig config = four_heads();
  config.heads = 2;
  const model::Model model(config);
  const std::vector<int32_t> prompts = model::generate_prompts(1, 8, config.vocab, 1);
  // No other rank runs: a collective would wait for ever, so the refusal must come first.
  ThreadGroup group(4);
  ThreadCommunicator communicator(group, 0);
  try {
    tp_prefill_across_ranks(model, prompts, 1, 8, communicator);
    FAIL() << "expected a usage error";
  } catch (const loupe::Error& error) {
    EXPECT_EQ(error.code(), loupe::ErrorCode::kUsage);
    EXPECT_EQ(error.message(), "kda model: 2 heads cannot be split over 4 tensor-parallel ranks");
  }
}

}  // namespace
}  // namespace kda::dist
