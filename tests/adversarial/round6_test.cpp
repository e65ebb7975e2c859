// Round 6 (round6_cases.cpp, issue 33): candidates that tamper with the reference in their own
// process, reach another variant's control block, bend the clock the runtime times with, or
// compute the timed calls in advance from the seed. Each test asserts the guard that rejects the
// candidate, with its exit code; docs/security.md states what each guard still lets through.
#include <string>

#include "loupe_cli.hpp"

namespace loupe::adversarial {
namespace {

using Guards = std::set<std::string>;

class Round6Test : public LoupeCliTest {
 protected:
  CliRun check(const std::string& probe) const {
    return probe_run(ADVERSARIAL_SUBJECT, {probe, "--seed", "5"});
  }
  static bool has(const CliRun& run, const std::string& id, const std::string& severity) {
    for (const auto& item : run.envelope.at("findings")) {
      if (item.at("id") == id && item.at("severity") == severity) return true;
    }
    return false;
  }
};

// Tests that time work (a bench's samples, or a race or a count that the machine's load moves)
// use this fixture: ctest runs them alone (RUN_SERIAL, tests/adversarial/CMakeLists.txt); the
// others share the cores with other tests.
class Round6TimedTest : public Round6Test {
 protected:
  CliRun bench(const std::string& probe, const std::string& budget = "0.3") const {
    return probe_run(ADVERSARIAL_SUBJECT, {probe, "--seed", "5", "--budget", budget});
  }
};

// 1. The candidate patches the reference's code with a jump to its own 1 %-off arithmetic, so the
// reference that runs after it in its process agrees with it. It is judged against the reference
// that ran first in the other pass's process, and the two references differ.
TEST_F(Round6Test, AReferencePatchedInTheCandidatesProcessIsTamperingAndIsNotTheJudge) {
  const CliRun run = check("reference_code_patch");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& tampered = finding(run, "check.reference_code_patch.guard.reference_tampered");
  EXPECT_EQ(tampered.at("severity"), "fail");
  EXPECT_NE(tampered.at("claim").get<std::string>().find("the reference was tampered with"),
            std::string::npos)
      << tampered.dump();
  EXPECT_TRUE(has(run, "check.reference_code_patch.mismatch", "fail")) << run.out;
  EXPECT_EQ(guards(run, "fail"), (Guards{"guard.reference_tampered", "guard.hidden_point"}))
      << run.out;
}

// 1. The same through the state the reference reads: the candidate raises every weight of the
// reference's table to 1.01.
TEST_F(Round6Test, AReferenceWhoseStateTheCandidateRewroteIsTamperingAndIsNotTheJudge) {
  const CliRun run = check("reference_weights_poisoned");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_TRUE(has(run, "check.reference_weights_poisoned.guard.reference_tampered", "fail"))
      << run.out;
  EXPECT_TRUE(has(run, "check.reference_weights_poisoned.mismatch", "fail")) << run.out;
  EXPECT_EQ(guards(run, "fail"), (Guards{"guard.reference_tampered", "guard.hidden_point"}))
      << run.out;
}

// 1. Nothing public reaches a registered probe once subject_main runs: registering one from a
// candidate throws, and the candidate's process fails with the reason.
TEST_F(Round6Test, TheRegistryIsSealedBeforeAnyPathRuns) {
  const CliRun run = check("registry_append_at_run_time");
  EXPECT_EQ(run.exit_code, 3) << run.out << run.err;
  EXPECT_NE(run.out.find("after subject_main started; the registry was sealed then"),
            std::string::npos)
      << run.out << run.err;
}

// 3. A seccomp filter installed by the candidate's first call traps the clock system call and
// answers with a clock at 0.6x: the filter is seen in its process, and its batches report less
// time than their one thread used. A budget of 1 s lets batches reach about 1 ms (0.3 s leaves
// them at tens of microseconds here, input building bounding them, where 40 % of a batch hides
// under guard.timing's 200 us).
TEST_F(Round6TimedTest, ASeccompFilterInAVariantsProcessFailsAndItsClockIsNotBelieved) {
  const CliRun run = bench("seccomp_slow_clock", "1");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& intercepted = finding(run, "bench.seccomp_slow_clock.guard.syscall_interception");
  EXPECT_EQ(intercepted.at("severity"), "fail");
  EXPECT_EQ(intercepted.at("where").at("path"), "trapped");
  EXPECT_NE(intercepted.at("claim").get<std::string>().find("seccomp filter mode with 1 filter"),
            std::string::npos)
      << intercepted.dump();
  const Json& timing = finding(run, "bench.seccomp_slow_clock.guard.timing");
  EXPECT_EQ(timing.at("where").at("path"), "trapped");
  EXPECT_EQ(guards(run, "fail"), (Guards{"guard.syscall_interception", "guard.timing"})) << run.out;
}

// 3's control: a body that runs half its rows on a thread it starts and joins inside each call has
// one thread before and after its batch and more CPU than time where a core is free; no guard.
TEST_F(Round6TimedTest, AThreadStartedAndJoinedInsideTheCallIsNotASlowedClock) {
  const CliRun run = bench("honest_joined_threads", "1");
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(guards(run, "fail"), Guards{}) << run.out;
}

// 3. The same filter installed by the body before exec (the candidate's setup), for a bench of
// one body whose absolute time a gate would judge.
TEST_F(Round6TimedTest, ASeccompFilterInstalledBeforeExecFails) {
  const CliRun run = bench("seccomp_clock_from_setup", "1");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(finding(run, "bench.seccomp_clock_from_setup.guard.syscall_interception")
                .at("where")
                .at("path"),
            "body");
  EXPECT_EQ(guards(run, "fail"), (Guards{"guard.syscall_interception", "guard.timing"})) << run.out;
}

// 2. The candidate looks for the baseline's control block among its shared mappings to raise the
// declared verification bound: it holds no mapping of it, the runtime reads its own copy of the
// declaration, and the wrong outputs fail verification against the baseline (the warm-up call's
// too).
TEST_F(Round6TimedTest, AVariantCannotLoosenTheBaselinesDeclaredTolerance) {
  const CliRun run = bench("loosen_baseline_tolerance");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(
      finding(run, "bench.loosen_baseline_tolerance.guard.verify_reference").at("where").at("path"),
      "loosened.y");
  EXPECT_EQ(guards(run, "fail"), (Guards{"guard.verify_reference", "guard.warmup_mismatch"}))
      << run.out;
}

// 2. The same search clears the "has outputs" flag after the bound: verification still runs.
TEST_F(Round6TimedTest, AVariantCannotSwitchOffTheBaselinesVerification) {
  const CliRun run = bench("unverify_baseline");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(guards(run, "fail"), (Guards{"guard.verify_reference", "guard.warmup_mismatch"}))
      << run.out;
  EXPECT_EQ(run.envelope.at("data").value("verified_outputs", 0) > 0, true) << run.out;
}

// 4. The candidate derives the timed calls' seeds from its command line's seed in its warm-up
// call and computes their outputs there: the seeds come from a secret drawn after the warm-up, so
// nothing it computed is asked for (it computes every call and is not FASTER), and its warm-up
// call, thousands of times its timed ones, is named.
TEST_F(Round6TimedTest, TimedCallsCannotBeComputedInAdvanceFromTheSeed) {
  const CliRun run = bench("precomputed_from_seed");
  EXPECT_EQ(kinds(run).count("faster"), 0u) << run.out;
  const Json& warmup = finding(run, "bench.precomputed_from_seed.guard.costly_warmup");
  EXPECT_EQ(warmup.at("severity"), "warn");
  EXPECT_EQ(warmup.at("where").at("path"), "foreseen");
  EXPECT_EQ(guards(run, "fail"), Guards{}) << run.out;
}

// 6. Half the work (about 4 us a call) left to the outputs accessor, under
// guard.deferred_output's allowances, made the variant FASTER at 0.62x with no finding. The
// accessor's CPU beyond the baseline's is now charged to each of the variant's calls before the
// comparison: the ratio comes back to about 1 (0.96-1.26 in 5 runs under two busy loops; the
// charge, a least over a dozen readings, is as noisy as a microsecond, so a verdict of FASTER by
// a few percent remains possible, never the 38 % the deferral bought).
TEST_F(Round6TimedTest, WorkLeftToTheOutputsAccessorIsChargedToTheCalls) {
  const CliRun run = bench("accessor_finishes_half", "1");
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json& charged = finding(run, "bench.accessor_finishes_half.accessor_charged");
  EXPECT_EQ(charged.at("where").at("path"), "deferred");
  EXPECT_GT(charged.at("evidence").at("metrics").at("accessor_charge_s").get<double>(), 2e-6)
      << charged.dump();
  const Json& comparison = run.envelope.at("data").at("comparisons").at(0);
  EXPECT_GT(comparison.at("ratio").get<double>(), 0.85) << comparison.dump();
}

}  // namespace
}  // namespace loupe::adversarial
