// Issue 17: a probe name with "../" made loupe write a run folder outside the home, and a subject
// that refused the request left its `.running-PID/` staging folder behind. run_probe checks the
// name before it creates anything and removes its staging folder on every way out.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "probe/runner.hpp"

namespace loupe::probe {
namespace {

namespace fs = std::filesystem;

class StagingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("loupe_probe_staging_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "home");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A request whose subject is a shell script (loupe's arguments follow as $1, $2, ...).
  RunRequest request(const std::string& probe, const std::string& script) const {
    RunRequest request;
    request.probe = probe;
    request.seed = 7;
    request.home = dir_ / "home";
    request.timeout_s = 30;
    request.subject_command = {"/bin/sh", "-c", script, "subject"};
    return request;
  }

  // Every path under the scratch folder, relative to it.
  std::vector<std::string> tree() const {
    std::vector<std::string> paths;
    for (const auto& entry : fs::recursive_directory_iterator(dir_)) {
      paths.push_back(fs::relative(entry.path(), dir_).string());
    }
    std::sort(paths.begin(), paths.end());
    return paths;
  }

  fs::path dir_;
};

TEST_F(StagingTest, Issue17AProbeNameThatLeavesTheHomeIsRefusedBeforeAnythingIsCreated) {
  const fs::path marker = dir_ / "ran";
  try {
    run_probe(request("../../escape", "touch " + marker.string()));
    FAIL() << "the probe name was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(),
              "the probe to run: probe name '../../escape': character 1 is not allowed; expected "
              "1 to 128 characters of A-Z a-z 0-9 _ -, the first a letter, digit or _");
  }
  EXPECT_EQ(tree(), std::vector<std::string>{"home"});
}

TEST_F(StagingTest, Issue17ASubjectThatRefusesTheRequestLeavesNoStagingFolder) {
  try {
    run_probe(request("p", "echo \"no probe named '$2'\" >&2; exit 2"));
    FAIL() << "the refusal was not reported";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_NE(error.message().find("no probe named 'p'"), std::string::npos) << error.message();
  }
  // Nothing was created in the home (the staging folder is a private one under $TMPDIR since
  // issue 16, and it is gone too).
  EXPECT_EQ(tree(), (std::vector<std::string>{"home"}));
}

TEST_F(StagingTest, ACrashingSubjectKeepsItsStderrButNotItsStagingFolder) {
  try {
    run_probe(request("p", "echo boom >&2; exit 3"));
    FAIL() << "the crash was not reported";
  } catch (const SubjectFailure& failure) {
    const auto& files = failure.finding().evidence.files;
    ASSERT_EQ(files.size(), 1u);
    const fs::path kept = files.front();
    EXPECT_EQ(kept.filename().string(), "failed-" + std::to_string(::getpid()) + ".stderr.txt");
    std::ifstream in(kept);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_EQ(text.str(), "boom\n");
    EXPECT_NE(failure.hint().find(kept.string()), std::string::npos) << failure.hint();
  }
  for (const auto& path : tree()) {
    EXPECT_EQ(path.find(".running-"), std::string::npos) << path;
  }
}

TEST(ExpandSweepSize, Issue17ASweepPastTheCapIsRefusedBeforeItIsExpanded) {
  std::string thousands = "T=1";
  for (int value = 2; value <= 3000; ++value) thousands += "," + std::to_string(value);
  std::string hundreds = "H=1";
  for (int value = 2; value <= 1000; ++value) hundreds += "," + std::to_string(value);
  try {
    expand_sweep({thousands, hundreds}, {});
    FAIL() << "a 3,000 x 1,000 sweep was expanded";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(),
              "--set/--zip: the sweep has more than 10000 points; expected at most 10000 per run");
  }
  // 3,000 points alone are within the cap.
  EXPECT_EQ(expand_sweep({thousands}, {}).size(), 3000u);
}

}  // namespace
}  // namespace loupe::probe
