// `loupe run --check-workers N` end to end (issue 39): kda's cheap checks of two entries that
// share a probe, gated within the build and against a baseline build, run one after another and
// two at a time. Two workers decide every gate as one does, on the same values; every point's
// observation lands in a folder of its own and no staging folder is left; the baseline cache
// stores the baseline's check points from two workers and a second run takes them all from it.
// About 10-20 s (4 runs of loupe, 7 check points of the candidate and 5 of the baseline each).
// The decode checks' rms_ratio bound is 1e-3 here, not the probe's 1e-5: their hidden runs draw
// tiny shapes (one step, V = 12) at which a near-cancelling output made the unchanged kda's
// rms_ratio 5.5e-5 about once in a dozen runs, and these tests are about scheduling, not numerics.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "support/cli_run.hpp"

namespace loupe {
namespace {

namespace fs = std::filesystem;
using test_support::CliRun;
using test_support::run_loupe;

class CheckWorkersCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loupe_check_workers_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    baseline_ = dir_ / "kda-base";
    fs::copy_file(KDA_EXECUTABLE, baseline_);
    objective_ = dir_ / "workers.toml";
    std::ofstream(objective_) << "name = \"check-workers\"\n"
                                 "[subject]\n"
                                 "command = [\""
                              << KDA_EXECUTABLE << R"(", "probe"]
environment = { OMP_NUM_THREADS = "1" }
timeout_s = 60
[[check]]
name = "decode_recurrence"
probe = "decode_vs_recurrence"
params = { variant = ["merged", "tiled"], steps = 4 }
tolerances = { rms_ratio = 1e-3 }
seed = 7
[[check]]
name = "decode_kernels_agree"
probe = "decode_tiled_vs_merged"
params = { batch = 2, H = 4 }
seed = 7
[[check]]
name = "replay"
probe = "replay_vs_decode"
params = { L = [4, 8], steps = 8 }
seed = 7
[[check]]
name = "decode_recurrence_again"
probe = "decode_vs_recurrence"
params = { variant = ["merged", "tiled"], steps = 5 }
tolerances = { rms_ratio = 1e-3 }
seed = 8
[[gate]]
name = "decode_matches_recurrence"
expr = "check.decode_recurrence passes"
[[gate]]
name = "kernels_agree"
expr = "check.decode_kernels_agree passes"
[[gate]]
name = "replay_matches_decode"
expr = "check.replay passes"
[[gate]]
name = "decode_error_not_above_baseline"
expr = "check.decode_recurrence.max_abs / baseline <= 1.5"
[[gate]]
name = "replay_error_not_above_baseline"
expr = "check.replay.max_abs / baseline <= 1.5"
[[gate]]
name = "again_error_not_above_baseline"
expr = "check.decode_recurrence_again.max_abs / baseline <= 1.5"
)";
  }
  void TearDown() override { fs::remove_all(dir_); }

  CliRun run(const std::string& workers, const std::string& home) const {
    return run_loupe({"run", objective_.string(), "--baseline", baseline_.string(), "--home",
                      (dir_ / home).string(), "--check-workers", workers, "--json"});
  }

  fs::path dir_;
  fs::path baseline_;
  fs::path objective_;
};

// Each gate's verdict and the value it decided on.
std::map<std::string, std::string> gates_of(const CliRun& run) {
  std::map<std::string, std::string> out;
  for (const auto& gate : run.envelope.at("data").at("gates")) {
    out[gate.at("name")] =
        gate.at("verdict").get<std::string>() + " " + gate.at("statistics").at("estimate").dump();
  }
  return out;
}

// The folders of the run's points (the candidate's and the baseline's), relative to the run's.
std::set<std::string> point_folders(const fs::path& run_dir) {
  std::set<std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(run_dir)) {
    if (entry.path().filename() == "observation.json" &&
        entry.path().parent_path().filename() != "hidden") {
      out.insert(fs::relative(entry.path().parent_path(), run_dir).string());
    }
  }
  return out;
}

TEST_F(CheckWorkersCliTest, TwoWorkersDecideWhatOneDoesAndTheCacheStoresAndServesTheBaseline) {
  const CliRun one = run("1", "home-one");
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  const CliRun two = run("2", "home-two");
  ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
  EXPECT_EQ(gates_of(two), gates_of(one));
  EXPECT_EQ(gates_of(two).size(), 6u);
  EXPECT_EQ(two.envelope.at("verdict"), "pass");

  // Every point in a folder of its own, the same folders as one worker's (7 candidate points, the
  // baseline's 6 under baseline/), and no staging folder left behind.
  const std::string run_one = one.envelope.at("data").at("run");
  const std::string run_two = two.envelope.at("data").at("run");
  const std::set<std::string> folders_one = point_folders(dir_ / "home-one" / "runs" / run_one);
  const std::set<std::string> folders_two = point_folders(dir_ / "home-two" / "runs" / run_two);
  EXPECT_EQ(folders_one.size(), 13u);
  EXPECT_EQ(folders_two, folders_one);
  for (const auto& entry : fs::recursive_directory_iterator(dir_ / "home-two" / "runs")) {
    EXPECT_EQ(entry.path().filename().string().rfind(".staging", 0), std::string::npos)
        << entry.path();
  }

  // The baseline's 6 check points stored from two workers, all taken from the cache next time.
  const Json& stored = two.envelope.at("data").at("baseline_cache");
  EXPECT_EQ(stored.at("stored"), 6);
  EXPECT_EQ(stored.at("hits"), 0);
  EXPECT_EQ(stored.at("warnings").size(), 0u);
  const CliRun warm = run("2", "home-two");
  ASSERT_EQ(warm.exit_code, 0) << warm.out << warm.err;
  EXPECT_EQ(warm.envelope.at("data").at("baseline_cache").at("hits"), 6);
  EXPECT_EQ(warm.envelope.at("data").at("baseline_cache").at("stored"), 0);
  EXPECT_EQ(gates_of(warm), gates_of(one));
}

// The hidden run is the candidate's guard: each of the candidate's 7 check points has one (its
// observation under hidden/), none of the baseline build's 6 does, and no point warns that its
// hidden run was off (guard.hidden_off). Before, both builds ran one per point (a third of a cold
// baseline side's time in kda's objective, and an unchanged baseline could fail a point on a fresh
// seed).
TEST_F(CheckWorkersCliTest, TheBaselineBuildsCheckPointsRunNoHiddenRun) {
  const CliRun done = run("2", "home");
  ASSERT_EQ(done.exit_code, 0) << done.out << done.err;
  const fs::path run_dir = dir_ / "home" / "runs" / done.envelope.at("data").at("run");
  int candidate = 0, candidate_hidden = 0, baseline = 0, baseline_hidden = 0;
  for (const std::string& folder : point_folders(run_dir)) {
    const bool of_baseline = folder.rfind("baseline/", 0) == 0;
    const bool hidden = fs::exists(run_dir / folder / "hidden" / "observation.json");
    (of_baseline ? baseline : candidate) += 1;
    (of_baseline ? baseline_hidden : candidate_hidden) += hidden ? 1 : 0;
  }
  EXPECT_EQ(candidate, 7);
  EXPECT_EQ(candidate_hidden, 7);
  EXPECT_EQ(baseline, 6);
  EXPECT_EQ(baseline_hidden, 0);
  EXPECT_EQ(done.out.find("hidden_off"), std::string::npos);
}

TEST_F(CheckWorkersCliTest, AWorkerCountOutsideOneToSixtyFourIsAUsageError) {
  const CliRun zero = run("0", "home");
  EXPECT_EQ(zero.exit_code, 2) << zero.out << zero.err;
  EXPECT_EQ(zero.envelope.at("error").at("message"),
            "--check-workers '0': expected an integer from 1 to 64");
}

}  // namespace
}  // namespace loupe
