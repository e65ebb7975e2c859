// `loupe run --baseline BUILD` and the baseline cache end to end, on a cheap kda check gated
// against the baseline build: the first run stores the baseline's check point, the second takes
// it from the cache and names the first run; a corrupt entry is a miss with a warning; a changed
// parameter, a changed program byte and --no-baseline-cache each run it again. About 10-25 s
// (8 runs of loupe, each a check point of each build, 0.3-1.5 s, and the subject's listing).
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "support/cli_run.hpp"

namespace loupe {
namespace {

namespace fs = std::filesystem;
using test_support::CliRun;
using test_support::run_loupe;

class BaselineCacheCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("loupe_baseline_cache_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // The baseline: a copy of this build's kda, so that a byte of it can change.
    baseline_ = dir_ / "kda-base";
    fs::copy_file(KDA_EXECUTABLE, baseline_);
    objective_ = dir_ / "cache.toml";
    std::ofstream(objective_) << "name = \"baseline-cache\"\n"
                                 "[subject]\n"
                                 "command = [\""
                              << KDA_EXECUTABLE
                              << "\", \"probe\"]\n"
                                 "environment = { OMP_NUM_THREADS = \"1\" }\n"
                                 "timeout_s = 60\n"
                                 "[[check]]\n"
                                 "name = \"decode_recurrence\"\n"
                                 "probe = \"decode_vs_recurrence\"\n"
                                 "params = { variant = \"merged\", steps = 4 }\n"
                                 "seed = 7\n"
                                 "[[gate]]\n"
                                 "name = \"decode_error_not_above_baseline\"\n"
                                 "expr = \"check.decode_recurrence.max_abs / baseline <= 1.5\"\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  CliRun run(const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> args = {
        "run",    objective_.string(),      "--baseline", baseline_.string(),
        "--home", (dir_ / "home").string(), "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_loupe(args);
  }

  fs::path dir_;
  fs::path baseline_;
  fs::path objective_;
};

const Json& cache_of(const CliRun& run) { return run.envelope.at("data").at("baseline_cache"); }

TEST_F(BaselineCacheCliTest, TheSecondRunTakesTheBaselinesCheckFromTheCacheAndNamesTheFirst) {
  const CliRun first = run();
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_EQ(cache_of(first).at("enabled"), true);
  EXPECT_EQ(cache_of(first).at("hits"), 0);
  EXPECT_EQ(cache_of(first).at("stored"), 1);
  const std::string first_run = first.envelope.at("data").at("run");

  const CliRun second = run();
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  const Json& cache = cache_of(second);
  EXPECT_EQ(cache.at("hits"), 1);
  EXPECT_EQ(cache.at("stored"), 0);
  ASSERT_EQ(cache.at("points").size(), 1u);
  EXPECT_EQ(cache.at("points")[0].at("entry"), "decode_recurrence");
  EXPECT_EQ(cache.at("points")[0].at("params").at("variant"), "merged");
  EXPECT_EQ(cache.at("points")[0].at("run"), first_run);
  EXPECT_EQ(cache.at("warnings").size(), 0u);
  // The gate read the cached value as it reads a value of this run.
  ASSERT_EQ(second.envelope.at("data").at("gates").size(), 1u);
  EXPECT_EQ(second.envelope.at("data").at("gates")[0].at("verdict"), "pass");

  // The same in text, on stderr.
  const CliRun text = run_loupe({"run", objective_.string(), "--baseline", baseline_.string(),
                                 "--home", (dir_ / "home").string()});
  ASSERT_EQ(text.exit_code, 0) << text.out << text.err;
  EXPECT_NE(text.err.find("baseline cache: 1 check run(s) of the baseline build taken from the "
                          "cache, stored by run " +
                          first_run + ": check decode_recurrence (1)\n"),
            std::string::npos)
      << text.err;

  // A corrupt entry: a miss with a warning, never a crash; the point runs and is stored again.
  size_t corrupted = 0;
  for (const auto& entry : fs::directory_iterator(dir_ / "home" / "baseline-cache")) {
    std::ofstream(entry.path(), std::ios::trunc) << "{\"format\": 1, \"key\"";
    ++corrupted;
  }
  ASSERT_EQ(corrupted, 1u);
  const CliRun after_corruption = run();
  ASSERT_EQ(after_corruption.exit_code, 0) << after_corruption.out << after_corruption.err;
  EXPECT_EQ(cache_of(after_corruption).at("hits"), 0);
  EXPECT_EQ(cache_of(after_corruption).at("stored"), 1);
  ASSERT_EQ(cache_of(after_corruption).at("warnings").size(), 1u);
  const std::string warning = cache_of(after_corruption).at("warnings")[0];
  EXPECT_NE(warning.find(" is not valid JSON; a miss"), std::string::npos) << warning;
}

TEST_F(BaselineCacheCliTest, AChangedParameterAChangedByteAndTheFlagEachRunTheBaselineAgain) {
  ASSERT_EQ(run().exit_code, 0);
  // Another parameter: another key.
  const CliRun changed_param = run({"--set", "steps=5"});
  ASSERT_EQ(changed_param.exit_code, 0) << changed_param.out << changed_param.err;
  EXPECT_EQ(cache_of(changed_param).at("hits"), 0);
  EXPECT_EQ(cache_of(changed_param).at("stored"), 1);
  // The flag: nothing read, nothing stored, and the run says so.
  const CliRun flag = run({"--no-baseline-cache"});
  ASSERT_EQ(flag.exit_code, 0) << flag.out << flag.err;
  EXPECT_EQ(cache_of(flag).at("enabled"), false);
  EXPECT_EQ(cache_of(flag).at("off_reason"), "--no-baseline-cache");
  EXPECT_EQ(cache_of(flag).at("hits"), 0);
  EXPECT_EQ(cache_of(flag).at("stored"), 0);
  // Another byte in the baseline's program: another build.
  {
    std::ofstream out(baseline_, std::ios::binary | std::ios::app);
    out << '\0';
  }
  const CliRun changed_bytes = run();
  ASSERT_EQ(changed_bytes.exit_code, 0) << changed_bytes.out << changed_bytes.err;
  EXPECT_EQ(cache_of(changed_bytes).at("hits"), 0);
  EXPECT_EQ(cache_of(changed_bytes).at("stored"), 1);
}

}  // namespace
}  // namespace loupe
