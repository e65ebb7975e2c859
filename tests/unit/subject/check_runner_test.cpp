// run_check on probes defined in the test: what the subject records for each guard.
#include <time.h>

#include <cfenv>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "loupe/check.hpp"
#include "subject/runtime.hpp"

namespace loupe::subject {
namespace {

namespace fs = std::filesystem;

class CheckRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("loupe_check_runner_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    probe_.name = "double_it";
    probe_.kind = ProbeKind::kCheck;
    probe_.check_inputs = [](CheckSetup& setup) {
      std::span<float> x = setup.input<float>("x", {4}, {"T"});
      for (size_t index = 0; index < x.size(); ++index) {
        x[index] = static_cast<float>(setup.seed() % 100 + index);
      }
      setup.output<float>("y", {4}, {"T"});
    };
    probe_.check_reference = [](CheckIo& io) {
      auto x = io.input<float>("x");
      auto y = io.output<float>("y");
      for (size_t index = 0; index < x.size(); ++index) y[index] = 2 * x[index];
    };
  }
  void TearDown() override { fs::remove_all(dir_); }

  Json run(std::function<void(CheckIo&)> candidate, int repeat = 0) {
    probe_.check_candidate = std::move(candidate);
    RunOptions options;
    options.out_dir = dir_;
    options.seed = 5;
    options.repeat = repeat;
    ObservationFiles files(dir_);
    const Point point;
    return run_check(probe_, point, options, files);
  }

  fs::path dir_;
  detail::ProbeDefinition probe_;
};

TEST_F(CheckRunnerTest, HonestCandidateRecordsNoGuardAndSharesFiles) {
  const Json check = run(probe_.check_reference);
  EXPECT_TRUE(check["guards"]["input_mutation"].empty());
  EXPECT_TRUE(check["guards"]["output_unwritten"].empty());
  EXPECT_TRUE(check["guards"]["output_alias"].empty());
  // candidate_first: candidate, reference; reference_first: reference, candidate. Identical
  // outputs share one file.
  ASSERT_EQ(check["runs"].size(), 4u);
  EXPECT_EQ(check["runs"][0]["outputs"]["y"], "candidate_first/candidate.y.npy");
  EXPECT_EQ(check["runs"][1]["outputs"]["y"], "candidate_first/candidate.y.npy");
  EXPECT_EQ(check["runs"][3]["outputs"]["y"], "candidate_first/candidate.y.npy");
  EXPECT_EQ(check["alt_seed"]["seed"], derive_seed(5, 1));
  EXPECT_TRUE(fs::exists(dir_ / "alt_seed" / "reference.y.npy"));
}

TEST_F(CheckRunnerTest, MutationIsRecordedAndUndoneBeforeTheNextPath) {
  const Json check = run([](CheckIo& io) {
    auto x = io.input<float>("x");
    const_cast<float*>(x.data())[0] = -1;
    io.output<float>("y")[0] = 0;
    for (size_t index = 1; index < 4; ++index) io.output<float>("y")[index] = 2 * x[index];
  });
  ASSERT_EQ(check["guards"]["input_mutation"].size(), 2u);
  EXPECT_EQ(check["guards"]["input_mutation"][0]["path"], "candidate");
  EXPECT_EQ(check["guards"]["input_mutation"][0]["input"], "x");
  // The reference running after the candidate saw the original input: its output is 2 * 5.
  const Tensor reference = read_npy(dir_ / check["runs"][1]["outputs"]["y"].get<std::string>());
  EXPECT_EQ(reference.data<float>()[0], 10.0f);
}

TEST_F(CheckRunnerTest, UnwrittenElementsAreCounted) {
  const Json check = run([](CheckIo& io) { io.output<float>("y")[0] = 1; });
  ASSERT_EQ(check["guards"]["output_unwritten"].size(), 2u);
  EXPECT_EQ(check["guards"]["output_unwritten"][0]["poisoned"], 3);
  EXPECT_EQ(check["guards"]["output_unwritten"][0]["numel"], 4);
}

TEST_F(CheckRunnerTest, BoundOutputOverlappingAnInputIsRecorded) {
  const Json check = run([](CheckIo& io) {
    // "Returns" its input as the output.
    io.bind_output("y", io.input<float>("x").data());
  });
  ASSERT_EQ(check["guards"]["output_alias"].size(), 2u);
  EXPECT_EQ(check["guards"]["output_alias"][0]["aliases"], "input x");
  EXPECT_EQ(check["runs"][0]["bound"]["y"], true);
}

TEST_F(CheckRunnerTest, RepeatWritesOnlyOutputsThatDiffer) {
  int calls = 0;
  const Json check = run(
      [&calls](CheckIo& io) {
        auto x = io.input<float>("x");
        auto y = io.output<float>("y");
        for (size_t index = 0; index < x.size(); ++index) y[index] = 2 * x[index];
        // The repeats run in the process of the candidate_first call, right after it (and the
        // reference): call 3 of that process is the second repeat.
        if (++calls == 3) y[2] += 1;
      },
      2);
  // The 2 asked repeats, then the secret ones (the same output as the first call's again).
  EXPECT_EQ(check["repeat"]["asked"], 2);
  const size_t made = check["repeat"]["outputs"].size();
  EXPECT_GE(made, 3u);
  EXPECT_LE(made, 2u + 256u);
  EXPECT_EQ(check["repeat"]["count"], made);
  EXPECT_EQ(check["repeat"]["outputs"][0]["y"], "candidate_first/candidate.y.npy");
  EXPECT_EQ(check["repeat"]["outputs"][1]["y"], "repeat/2/candidate.y.npy");
  for (size_t index = 2; index < made; ++index) {
    EXPECT_EQ(check["repeat"]["outputs"][index]["y"], "candidate_first/candidate.y.npy");
  }
}

// The secret repeats grow with how cheap a call is: this body's calls take microseconds, so the
// count is past the floor's 1 to 6 on every run (as many calls as fit 25 to 50 ms, at most 256),
// and none of them is written (all bit-identical to the first call).
TEST_F(CheckRunnerTest, SecretRepeatsOfACheapCallOutnumberTheFloor) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const Json check = run(probe_.check_reference, 2);
    const size_t made = check["repeat"]["outputs"].size();
    EXPECT_GT(made, 2u + 6u);
    EXPECT_LE(made, 2u + 256u);
    EXPECT_EQ(check["repeat"]["count"], made);
    for (const auto& files : check["repeat"]["outputs"]) {
      EXPECT_EQ(files["y"], "candidate_first/candidate.y.npy");
    }
    EXPECT_FALSE(fs::exists(dir_ / "repeat")) << check["repeat"].dump();
  }
}

// Spends `seconds` of this thread's CPU time.
void spin_cpu(double seconds) {
  timespec start{}, now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
  do {
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  } while (static_cast<double>(now.tv_sec - start.tv_sec) +
               1e-9 * static_cast<double>(now.tv_nsec - start.tv_nsec) <
           seconds);
}

// A call that spends 20 ms of CPU leaves at most 2 in the budget (50 ms at most): the count is the
// floor's draw, 1 to 6 secret repeats after the 2 asked ones, as before the count grew with the
// cost.
TEST_F(CheckRunnerTest, SecretRepeatsOfACostlyCallKeepTheFloor) {
  const Json check = run(
      [this](CheckIo& io) {
        spin_cpu(0.020);
        probe_.check_reference(io);
      },
      2);
  const size_t made = check["repeat"]["outputs"].size();
  EXPECT_GE(made, 3u);
  EXPECT_LE(made, 8u);
}

// A call that sleeps 2 ms costs little CPU: sleeping does not shrink the count, which past the
// floor stops once the calls have taken 4 budgets of wall time (100 to 200 ms): more than 6 and
// at most 101 secret repeats.
TEST_F(CheckRunnerTest, SecretRepeatsOfASleepingCallStopAtTheWallBound) {
  const Json check = run(
      [this](CheckIo& io) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        probe_.check_reference(io);
      },
      2);
  const size_t made = check["repeat"]["outputs"].size();
  EXPECT_GT(made, 2u + 6u);
  EXPECT_LE(made, 2u + 101u);
}

// The secret repeats share one slot: the first that differs from the first call is kept and
// written, and no call is made after it (the check fails on it).
TEST_F(CheckRunnerTest, ASecretRepeatThatDiffersIsWrittenAndEndsTheRepeats) {
  int calls = 0;
  const Json check = run(
      [&calls](CheckIo& io) {
        auto x = io.input<float>("x");
        auto y = io.output<float>("y");
        for (size_t index = 0; index < x.size(); ++index) y[index] = 2 * x[index];
        // Call 20 of the candidate_first process: repeat 19, the 17th secret one.
        if (++calls == 20) y[1] += 1;
      },
      2);
  ASSERT_EQ(check["repeat"]["count"], 19) << check["repeat"].dump();
  ASSERT_EQ(check["repeat"]["outputs"].size(), 19u);
  for (size_t index = 0; index < 18; ++index) {
    EXPECT_EQ(check["repeat"]["outputs"][index]["y"], "candidate_first/candidate.y.npy");
  }
  EXPECT_EQ(check["repeat"]["outputs"][18]["y"], "repeat/19/candidate.y.npy");
  const Tensor kept = read_npy(dir_ / "repeat/19/candidate.y.npy");
  const Tensor first = read_npy(dir_ / "candidate_first/candidate.y.npy");
  EXPECT_EQ(kept.data<float>()[1], first.data<float>()[1] + 1);
  EXPECT_EQ(kept.data<float>()[0], first.data<float>()[0]);
}

// A candidate that changes the rounding mode on every call is named once for its secret repeats,
// not once per repeat.
TEST_F(CheckRunnerTest, AGuardRecordOfTheSecretRepeatsIsKeptOnce) {
  const Json check = run(
      [this](CheckIo& io) {
        probe_.check_reference(io);
        std::fesetround(FE_UPWARD);
      },
      1);
  // Each change (the rounding mode, MXCSR's rounding bits) once for the asked repeat/1 and once
  // for the secret ones, recorded at the first, repeat/2.
  std::map<std::string, int> asked, secret;
  for (const auto& entry : check["guards"]["environment"]) {
    const std::string pass = entry["pass"];
    if (pass == "repeat/1") ++asked[entry["change"]];
    if (pass.rfind("repeat/", 0) == 0 && pass != "repeat/1") {
      EXPECT_EQ(pass, "repeat/2");
      ++secret[entry["change"]];
    }
  }
  EXPECT_FALSE(asked.empty()) << check["guards"]["environment"].dump();
  EXPECT_EQ(secret, asked) << check["guards"]["environment"].dump();
}

// Without an oracle the reference runs once rounding upward and once downward (guard.precision
// compares the candidate's error with how far they move); the rounding mode set for those calls
// is not recorded as the reference's change of the environment.
TEST_F(CheckRunnerTest, WithoutAnOracleTheReferenceRunsInBothDirectedRoundings) {
  probe_.check_reference = [](CheckIo& io) {
    auto x = io.input<float>("x");
    auto y = io.output<float>("y");
    for (size_t index = 0; index < x.size(); ++index) y[index] = x[index] / 3.0f;
  };
  const Json check = run(probe_.check_reference);
  ASSERT_TRUE(check.contains("rounding")) << check.dump();
  EXPECT_EQ(check["rounding"]["up"]["y"], "rounding_up/reference.y.npy");
  EXPECT_EQ(check["rounding"]["down"]["y"], "rounding_down/reference.y.npy");
  EXPECT_EQ(check["guards"]["environment"].size(), 0u) << check.dump();
  const Tensor up = read_npy(dir_ / "rounding_up/reference.y.npy");
  const Tensor down = read_npy(dir_ / "rounding_down/reference.y.npy");
  const Tensor nearest = read_npy(dir_ / check["runs"][1]["outputs"]["y"].get<std::string>());
  int moved = 0;
  for (size_t index = 0; index < 4; ++index) {
    EXPECT_GE(up.data<float>()[index], nearest.data<float>()[index]);
    EXPECT_LE(down.data<float>()[index], nearest.data<float>()[index]);
    moved += up.data<float>()[index] != down.data<float>()[index] ? 1 : 0;
  }
  // x / 3 is inexact for every x here (seed 5: 5, 6, 7, 8) but 6: 5/3, 7/3 and 8/3 move.
  EXPECT_EQ(moved, 3);
}

TEST_F(CheckRunnerTest, RelativeToleranceWithoutOracleIsAProbeBug) {
  probe_.check_inputs = [](CheckSetup& setup) {
    setup.input<float>("x", {4});
    setup.output<float>("y", {4}).tolerance_vs_oracle("rms_ratio", 2);
  };
  try {
    run(probe_.check_reference);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInternal);
    EXPECT_NE(error.message().find("has no oracle"), std::string::npos);
  }
}

}  // namespace
}  // namespace loupe::subject
