// `loupe trace analyze` of eight ranks' Kineto traces at scale (issue 22, "Scale"): the files are
// generated here, ~LOUPE_RANK_FILE_MB MB each (default 20; docs/multi-rank.md's 200 MB figure is
// this test with LOUPE_RANK_FILE_MB=200), and loupe's peak resident memory is read from wait4's
// rusage of its process. The bound: at most 4x the input, as for one file (docs/performance.md).
// The files are parsed on threads and merged in order (load_traces): the findings of that import
// must be the serial import's, byte for byte.
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/json.hpp"
#include "trace/analyze/analyze.hpp"
#include "trace/import/import.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;

// One rank's Kineto trace: a CPU thread launching kernels on stream 7, compute kernels and an
// NCCL all-gather every 16 kernels (Kineto's NCCL args), ~230 bytes per event, until `bytes`.
void write_rank_trace(const fs::path& path, int rank, int world_size, size_t bytes) {
  std::ofstream out(path);
  out << "{\"schemaVersion\":1,\"distributedInfo\":{\"backend\":\"nccl\",\"rank\":" << rank
      << ",\"world_size\":" << world_size << "},\"traceEvents\":[\n";
  int64_t collective = 0;
  for (int64_t index = 0; static_cast<size_t>(out.tellp()) < bytes; ++index) {
    // Rank r runs late by r µs per step, so the collectives have a last arriver.
    const double ts = static_cast<double>(index) * 10.0 + rank * (index % 16 == 15 ? 3.0 : 0.0);
    out << "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":4242,"
           "\"tid\":4242,\"ts\":"
        << ts << ",\"dur\":3.5,\"args\":{\"correlation\":" << index << "}},\n";
    if (index % 16 == 15) {
      out << "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"ncclDevKernel_AllGather_RING_LL\","
             "\"pid\":0,\"tid\":7,\"ts\":"
          << ts + 4 << ",\"dur\":5.25,\"args\":{\"correlation\":" << index
          << ",\"stream\":7,\"Collective name\":\"_allgather_base\",\"In msg nelems\":4096,"
             "\"Out msg nelems\":"
          << 4096 * world_size << ",\"Group size\":" << world_size
          << ",\"Process Group Name\":\"0\",\"Seq\":" << collective++ << "}},\n";
    } else {
      out << "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"sm90_xmma_gemm_bf16bf16_bf16f32\","
             "\"pid\":0,\"tid\":7,\"ts\":"
          << ts + 4 << ",\"dur\":5.25,\"args\":{\"correlation\":" << index
          << ",\"stream\":7,\"device\":0,\"grid\":[132,1,1],\"block\":[384,1,1]}},\n";
    }
  }
  out << "{\"ph\":\"i\",\"name\":\"end\",\"pid\":4242,\"tid\":4242,\"ts\":0,\"s\":\"t\"}\n]}\n";
}

struct Measured {
  int exit_code = -1;
  double wall_s = 0;
  uint64_t peak_bytes = 0;  // the process's largest resident set (wait4's ru_maxrss)
  double cpu_s = 0;         // user + system
};

Measured run_measured(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  Measured measured;
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ) != 0) return measured;
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  rusage usage{};
  if (wait4(pid, &status, 0, &usage) != pid) return measured;
  measured.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  measured.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  measured.peak_bytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // kilobytes on Linux
  auto seconds = [](const timeval& time) { return time.tv_sec + time.tv_usec / 1e6; };
  measured.cpu_s = seconds(usage.ru_utime) + seconds(usage.ru_stime);
  return measured;
}

constexpr int kRanks = 8;

// The eight rank files, written once for the suite.
class RankIngest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* configured = std::getenv("LOUPE_RANK_FILE_MB");
    const size_t file_mb = configured != nullptr ? std::strtoul(configured, nullptr, 10) : 20;
    dir_ = fs::temp_directory_path() / ("loupe-rank-ingest-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    for (int rank = 0; rank < kRanks; ++rank) {
      const fs::path file = dir_ / ("rank-" + std::to_string(rank) + ".json");
      write_rank_trace(file, rank, kRanks, file_mb << 20);
      files_.push_back(file.string());
    }
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static inline fs::path dir_;
  static inline std::vector<std::string> files_;
};

TEST_F(RankIngest, EightRankFilesStayWithinFourTimesTheirSizeInMemory) {
  std::vector<std::string> args = {LOUPE_EXECUTABLE, "trace", "analyze"};
  uint64_t input_bytes = 0;
  const uint64_t one_file_bytes = fs::file_size(files_[0]);
  for (const std::string& file : files_) {
    input_bytes += fs::file_size(file);
    args.push_back(file);
  }
  const Measured one = run_measured({LOUPE_EXECUTABLE, "trace", "analyze", files_[0]});
  const Measured all = run_measured(args);
  std::printf(
      "%d rank files of %.1f MB: peak %.0f MB (%.2fx the input), %.2f s wall, %.2f s CPU; one "
      "file: peak %.0f MB (%.2fx), %.2f s wall, %.2f s CPU\n",
      kRanks, one_file_bytes / 1048576.0, all.peak_bytes / 1048576.0,
      static_cast<double>(all.peak_bytes) / input_bytes, all.wall_s, all.cpu_s,
      one.peak_bytes / 1048576.0, static_cast<double>(one.peak_bytes) / one_file_bytes, one.wall_s,
      one.cpu_s);
  ASSERT_EQ(one.exit_code, 0);
  ASSERT_EQ(all.exit_code, 0);
  EXPECT_LE(all.peak_bytes, 4 * input_bytes);
  EXPECT_LE(one.peak_bytes, 4 * one_file_bytes);
}

// The parallel import (one worker per core, and three workers) against the serial one: every
// finding and table row (--detail), JSON byte for byte, with the collectives matched across ranks.
TEST_F(RankIngest, ParallelImportGivesTheSerialImportsFindingsByteForByte) {
  using loupe::trace::load_traces;
  loupe::trace::AnalyzeRequest request;
  request.detail = true;
  const loupe::Json serial_json =
      loupe::envelope_to_json(loupe::trace::analyze(load_traces(files_, false, {}, 1), request));
  const loupe::Json& collectives = serial_json.at("data").at("collectives");
  EXPECT_EQ(collectives.at("ranks").size(), static_cast<size_t>(kRanks));
  EXPECT_GT(collectives.at("matched").get<uint64_t>(), 1000u);
  const std::string serial = serial_json.dump();
  for (const unsigned threads : {0u, 3u}) {
    const std::string parallel =
        loupe::envelope_to_json(
            loupe::trace::analyze(load_traces(files_, false, {}, threads), request))
            .dump();
    EXPECT_EQ(parallel.size(), serial.size()) << threads;
    EXPECT_TRUE(parallel == serial) << "threads " << threads;
  }
}

}  // namespace
