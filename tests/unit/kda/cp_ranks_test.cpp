// kda/dist's CP across ranks without MPI: the ranks are threads of this test sharing an
// in-process communicator, so every build checks that the multi-rank path is the one-process cp
// bit for bit (tests/integration/multirank does the same with mpirun where MPI is built).
#include "kda/dist/cp_ranks.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "kda/kernels/cpu/cp.hpp"
#include "kda/math/generator.hpp"
#include "loupe/error.hpp"
#include "thread_communicator.hpp"

namespace kda::dist {
namespace {

Inputs<float> slow_inputs(int64_t tokens, int64_t value_heads) {
  math::GeneratorOptions options;
  options.decay = math::Decay::kSlow;
  options.seed = 5;
  return math::generate_inputs({2, tokens, 1, value_heads, 32, 48}, options);
}

// Runs cp_across_ranks on `ranks` threads; returns every rank's outputs and own rows of o.
std::vector<std::pair<Outputs<float>, std::vector<float>>> run_ranks(const Inputs<float>& inputs,
                                                                     int ranks,
                                                                     RankedCpOptions options) {
  ThreadGroup group(ranks);
  std::vector<std::pair<Outputs<float>, std::vector<float>>> results(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      ThreadCommunicator communicator(group, rank);
      KernelOptions kernel_options;
      kernel_options.threads = 1;
      auto& [outputs, local] = results[static_cast<size_t>(rank)];
      outputs = cp_across_ranks(inputs, kernel_options, communicator, options, &local);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

TEST(CpAcrossRanks, EveryRankHoldsTheOneProcessCpBitForBitInBothOrders) {
  const Inputs<float> inputs = slow_inputs(1024, 2);
  for (const std::string order : {"natural", "zigzag"}) {
    RankedCpOptions options;
    options.precision = math::DotPrecision::kTf32Rz;
    options.order = order;
    const auto results = run_ranks(inputs, 4, options);
    KernelOptions one;
    one.threads = 1;
    const Outputs<float> expected =
        kernels::cpu::cp(inputs, one, {order == "zigzag" ? 8 : 4, math::DotPrecision::kTf32Rz});
    for (const auto& [outputs, local] : results) {
      EXPECT_EQ(outputs.o, expected.o) << order;
      EXPECT_EQ(outputs.state, expected.state) << order;
      EXPECT_EQ(outputs.boundary_states, expected.boundary_states) << order;
    }
    // Rank 1's own rows: natural, tokens [256, 512); zigzag, pieces 1 and 6 of 8 (128 tokens
    // each), for both sequences of the batch.
    const int64_t token_size = 2 * 48;
    const std::vector<std::pair<int64_t, int64_t>> held =
        order == "zigzag" ? std::vector<std::pair<int64_t, int64_t>>{{128, 256}, {768, 896}}
                          : std::vector<std::pair<int64_t, int64_t>>{{256, 512}};
    std::vector<float> rows;
    for (int64_t batch_idx = 0; batch_idx < 2; ++batch_idx) {
      for (const auto& [begin, end] : held) {
        rows.insert(rows.end(), expected.o.begin() + (batch_idx * 1024 + begin) * token_size,
                    expected.o.begin() + (batch_idx * 1024 + end) * token_size);
      }
    }
    EXPECT_EQ(results[1].second, rows) << order;
  }
}

TEST(CpAcrossRanks, ZigzagNeedsWholeChunksPerPiece) {
  const Inputs<float> inputs = slow_inputs(1000, 1);
  ThreadGroup group(1);
  ThreadCommunicator communicator(group, 0);
  RankedCpOptions options;
  options.order = "zigzag";
  try {
    cp_across_ranks(inputs, {}, communicator, options);
    FAIL() << "expected an error";
  } catch (const loupe::Error& error) {
    EXPECT_EQ(error.code(), loupe::ErrorCode::kUsage);
    EXPECT_EQ(error.message(),
              "kda cp across ranks, zigzag: T = 1000 does not cut into 2W = 2 equal pieces of "
              "whole 64-token chunks");
  }
}

TEST(CpAcrossRanks, TheRankTraceRecordsStagesAndCollectivesWithTheRank) {
  const Inputs<float> inputs = slow_inputs(512, 1);
  ThreadGroup group(2);
  std::vector<std::string> texts(2);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kda-rank-trace-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      ThreadCommunicator communicator(group, rank);
      RankTrace trace(rank, 2, "threads");
      RankedCpOptions options;
      options.trace = &trace;
      cp_across_ranks(inputs, {}, communicator, options);
      const std::filesystem::path file = dir / ("rank-" + std::to_string(rank) + ".json");
      trace.write_kineto_json(file);
      std::stringstream text;
      text << std::ifstream(file).rdbuf();
      texts[static_cast<size_t>(rank)] = text.str();
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::filesystem::remove_all(dir);
  const std::string& rank1 = texts[1];
  EXPECT_NE(rank1.find("\"distributedInfo\": {\"backend\": \"threads\", \"rank\": 1, "
                       "\"world_size\": 2"),
            std::string::npos)
      << rank1;
  for (const char* name : {"\"cp_summaries\"", "\"cp_scan\"", "\"cp_outputs\""}) {
    EXPECT_NE(rank1.find(name), std::string::npos) << name;
  }
  // Two allgathers: the summaries, then the outputs; sequence numbers 0 and 1.
  EXPECT_NE(rank1.find("\"name\": \"threads:allgather\""), std::string::npos);
  EXPECT_NE(rank1.find("\"Seq\": 0"), std::string::npos);
  EXPECT_NE(rank1.find("\"Seq\": 1"), std::string::npos);
  EXPECT_EQ(rank1.find("\"Seq\": 2"), std::string::npos);
}

}  // namespace
}  // namespace kda::dist
