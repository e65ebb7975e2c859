// Round 2, second set (round2b_cases.cpp): three candidates written against round 2's guards, each
// rejected through a general guard, not one written for it. Bench cases, so they run alone.
#include <string>

#include "loupe_cli.hpp"

namespace loupe::adversarial {
namespace {

using Guards = std::set<std::string>;

class Round2bTest : public LoupeCliTest {};

// Tests that time work (a bench's samples, or a race or a count that the machine's load moves)
// use this fixture: ctest runs them alone (RUN_SERIAL, tests/adversarial/CMakeLists.txt); the
// others share the cores with other tests.
class Round2bTimedTest : public Round2bTest {
 protected:
  CliRun bench(const std::string& probe) const {
    return probe_run(ADVERSARIAL_SUBJECT, {probe, "--seed", "5", "--budget", "0.3"});
  }
};

// 2. Recognising the check: the timed calls (back to back) are told from the verification calls
// (after a pause) by their cadence.
TEST_F(Round2bTimedTest, AVariantStaleOnlyInsideABatchFailsVerification) {
  const CliRun run = bench("stale_when_batched");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& mismatch = finding(run, "bench.stale_when_batched.guard.verify_mismatch");
  EXPECT_EQ(mismatch.at("severity"), "fail");
  EXPECT_EQ(mismatch.at("where").at("path"), "cadence.result");
}

// 3. Work off the timed path: two thirds of the work in the outputs accessor is 2x the timed call,
// inside the accessor's absolute bound (4x); against the baseline's accessor it is not.
TEST_F(Round2bTimedTest, AnAccessorThatFinishesTheWorkIsDeferredOutput) {
  const CliRun run = bench("accessor_finishes_the_work");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& deferred = finding(run, "bench.accessor_finishes_the_work.guard.deferred_output");
  EXPECT_EQ(deferred.at("severity"), "fail");
  EXPECT_EQ(deferred.at("where").at("path"), "lazy");
  EXPECT_NE(deferred.at("claim").get<std::string>().find("against the baseline baseline's"),
            std::string::npos)
      << deferred.dump();
  // Nothing else was wrong with it: its outputs are right.
  EXPECT_EQ(guards(run, "fail"), Guards{"guard.deferred_output"}) << run.out;
}

// 4. Sabotaging the other side: the saboteur changes the baseline's process, not its own.
TEST_F(Round2bTimedTest, LoweringTheSiblingVariantsPriorityIsAnEnvironmentFinding) {
  const CliRun run = bench("slows_the_sibling");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  bool baseline_changed = false;
  for (const auto& item : run.envelope.at("findings")) {
    if (item.at("id") != "bench.slows_the_sibling.guard.environment") continue;
    EXPECT_EQ(item.at("severity"), "fail");
    baseline_changed = baseline_changed || item.at("where").at("path") == "baseline";
  }
  EXPECT_TRUE(baseline_changed) << run.out;
}

}  // namespace
}  // namespace loupe::adversarial
