// One door through `loupe bisect` (issue 33): a four-commit history whose third commit replaces
// the check's candidate with one that replays the seed-7 outputs committed in replay.bin. It passes
// at the shown seed 7, so only the hidden run's secret seed (which bisect's points get, the same
// for every step) makes the gate go bad there, and bisect names that commit.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "../bisect/scripted_history.hpp"
#include "core/process.hpp"
#include "support/cli_run.hpp"
#include "support/scratch_dir.hpp"

namespace loupe {
namespace {

constexpr const char* kObjective = R"(name = "door-bisect"
[subject]
command = ["./subject"]
working_dir = "."
timeout_s = 60

[[check]]
probe = "sums"
seed = 7

[[gate]]
name = "sums_match"
expr = "check.sums passes"
)";

std::string replay_knob(int replay) {
  return "#pragma once\n#define REPLAY " + std::to_string(replay) + "\n";
}

// The candidate's outputs at seed 7, computed as the honest candidate does from the inputs the
// probe draws (N = 64 rows of 256 uniform values in [0.5, 1.5) from std::mt19937(seed)).
void write_seed7_sums(const std::filesystem::path& file) {
  std::mt19937 generator(7);
  std::uniform_real_distribution<float> uniform(0.5f, 1.5f);
  std::vector<float> sums(64);
  for (float& sum : sums) {
    float total = 0;
    for (int column = 0; column < 256; ++column) total += uniform(generator);
    sum = total;
  }
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(sums.data()),
             static_cast<std::streamsize>(sums.size() * sizeof(float)));
}

TEST(DoorBisect, AReplayingCandidateIsTheFirstBadCommit) {
  const test_support::ScratchDir scratch("door-bisect");
  const std::filesystem::path repo = scratch.path() / "repo";
  std::filesystem::create_directories(repo);
  write_seed7_sums(repo / "replay.bin");  // committed with the first commit
  const std::vector<std::string> commits = test_support::commit_scripted_history(
      repo, DOOR_BISECT_SUBJECT_SOURCE, kObjective,
      {{"initial: row sums, and their seed-7 outputs", replay_knob(0)},
       {"notes: how to build", ""},
       {"sums: replay the recorded outputs", replay_knob(1)},
       {"notes: done", ""}});
  ProcessSpec spec;
  spec.argv = {LOUPE_EXECUTABLE,
               "bisect",
               "--objective",
               "loupe.toml",
               "--json",
               "--good",
               commits[0],
               "--bad",
               commits[3],
               "--gate",
               "sums_match",
               "--build",
               test_support::subject_build_command()};
  spec.working_dir = repo;
  spec.timeout = std::chrono::seconds(300);
  const test_support::CliRun run = test_support::run_cli(spec);
  ASSERT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& data = run.envelope.at("data");
  EXPECT_EQ(data.at("first_bad").at("commit"), commits[2]) << run.err;
  EXPECT_EQ(data.at("parent").at("commit"), commits[1]);
  EXPECT_EQ(data.at("first_bad").at("evidence").at("gate").at("verdict"), "fail");
  EXPECT_EQ(run.envelope.at("findings").at(0).at("id"), "bisect.sums_match.first_bad");
}

}  // namespace
}  // namespace loupe
