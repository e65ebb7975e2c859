// The adversarial suite: every known way of gaming a harness is rejected by `loupe probe run`
// with a finding that names the guard that caught it, and the honest candidates raise no guard.
// Check cases are deterministic and asserted exactly; bench cases time real work with effects of
// 10x or more and run alone (RUN_SERIAL).
#include <string>

#include "loupe_cli.hpp"

namespace loupe::adversarial {
namespace {

using Guards = std::set<std::string>;

class AdversarialTest : public LoupeCliTest {
 protected:
  CliRun check(const std::string& probe) const {
    return probe_run(ADVERSARIAL_SUBJECT, {probe, "--seed", "7"});
  }
};

// Tests that time work (a bench's samples, or a race or a count that the machine's load moves)
// use this fixture: ctest runs them alone (RUN_SERIAL, tests/adversarial/CMakeLists.txt); the
// others share the cores with other tests.
class AdversarialTimedTest : public AdversarialTest {
 protected:
  CliRun bench(const std::string& probe) const {
    return probe_run(ADVERSARIAL_SUBJECT, {probe, "--seed", "3", "--budget", "0.3"});
  }
};

TEST_F(AdversarialTest, HonestCheckPassesEveryGuardIncludingTheHiddenPoint) {
  const CliRun run = check("honest_check");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(run.envelope.at("verdict"), "pass");
  EXPECT_EQ(kinds(run, "fail"), Guards{});
  EXPECT_EQ(kinds(run, "warn"), Guards{});
  // The hidden point was run, passed, and is revealed only now.
  const Json& hidden = finding(run, "check.honest_check.guard.hidden_point");
  EXPECT_EQ(hidden.at("severity"), "info");
  // N drawn in secret from the probe's hidden range, over its hidden point's corner.
  const int64_t drawn = hidden.at("where").at("params").at("N").get<int64_t>();
  EXPECT_TRUE(drawn >= 600 && drawn <= 1000) << hidden.dump();
  const Json& hidden_runs = run.envelope.at("data").at("hidden_runs");
  ASSERT_EQ(hidden_runs.size(), 1u);
  EXPECT_EQ(hidden_runs[0].at("hidden").at("point").at("N"), drawn);
  EXPECT_EQ(hidden_runs[0].at("hidden").at("index"), 0);
  EXPECT_EQ(hidden_runs[0].at("hidden").at("drawn_from").size(), 1u);
  EXPECT_EQ(hidden_runs[0].at("params").at("N"), drawn);
  // Passed like an asked point, with a seed loupe drew in secret (not the pinned 7).
  EXPECT_NE(hidden_runs[0].at("seed"), 7);
  EXPECT_EQ(hidden_runs[0].at("hidden").at("seed"), hidden_runs[0].at("seed"));
}

TEST_F(AdversarialTimedTest, HonestBenchRaisesNoGuard) {
  const CliRun run = bench("honest_bench");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(guards(run), Guards{}) << run.out;
  // The roofline was measured next to it and written to the observation.
  EXPECT_EQ(run.envelope.at("data").at("verify_failures"), 0);
}

TEST_F(AdversarialTest, ReusingTheReferenceBufferIsCaughtByOutputAlias) {
  const CliRun run = check("reuse_reference_buffer");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(run.envelope.at("verdict"), "fail");
  // The hidden run (a secret seed at the same point) fails the same way.
  EXPECT_EQ(guards(run, "fail"),
            (Guards{"guard.output_alias", "guard.order_dependence", "guard.hidden_point"}));
  const Json& alias = finding(run, "check.reuse_reference_buffer.guard.output_alias");
  EXPECT_NE(alias.at("claim").get<std::string>().find("overlapping reference output y"),
            std::string::npos)
      << alias.dump();
}

TEST_F(AdversarialTest, MutatingTheInputIsCaughtByInputMutation) {
  const CliRun run = check("mutate_input");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(guards(run, "fail"), (Guards{"guard.input_mutation", "guard.hidden_point"}));
  EXPECT_EQ(finding(run, "check.mutate_input.guard.input_mutation").at("where").at("path"),
            "candidate.x");
}

TEST_F(AdversarialTest, PartialWritesAreCaughtByOutputUnwritten) {
  const CliRun run = check("partial_write");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  // The unwritten half is the poison, so guard.nonfinite stays silent: one guard, one cause.
  EXPECT_EQ(guards(run, "fail"), (Guards{"guard.output_unwritten", "guard.hidden_point"}));
  EXPECT_NE(finding(run, "check.partial_write.guard.output_unwritten")
                .at("claim")
                .get<std::string>()
                .find("left 512 of 1024 elements"),
            std::string::npos);
}

TEST_F(AdversarialTest, NanOutputsAreCaughtByNonfinite) {
  const CliRun run = check("nan_output");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(guards(run, "fail"), (Guards{"guard.nonfinite", "guard.hidden_point"}));
  const Json& nonfinite = finding(run, "check.nan_output.guard.nonfinite");
  EXPECT_NE(nonfinite.at("claim").get<std::string>().find("holds 1024 NaN and 0 Inf"),
            std::string::npos)
      << nonfinite.dump();
  EXPECT_EQ(nonfinite.at("where").at("coords"), Json::parse(R"({"N": 0})"));
}

TEST_F(AdversarialTest, NearConstantReferenceCannotDiscriminate) {
  const CliRun run = check("vacuous_reference");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(run.envelope.at("verdict"), "inconclusive");
  EXPECT_EQ(guards(run), (Guards{"guard.cannot_discriminate", "guard.hidden_point"}));
  const std::string claim =
      finding(run, "check.vacuous_reference.guard.cannot_discriminate").at("claim");
  EXPECT_NE(claim.find("a constant output (its mean, 1e+03) meets every tolerance"),
            std::string::npos)
      << claim;
}

TEST_F(AdversarialTest, HardCodedShapesFailAtTheHiddenPoint) {
  const CliRun run = check("hardcoded_shape");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(run.envelope.at("verdict"), "fail");
  // Right at the point it was shown...
  bool visible_mismatch = false;
  for (const auto& item : run.envelope.at("findings")) {
    if (item.at("id") == "check.hardcoded_shape.mismatch" &&
        item.at("where").at("params").at("N") == 1024) {
      visible_mismatch = true;
    }
  }
  EXPECT_FALSE(visible_mismatch) << run.out;
  // ...wrong at the one it was not.
  const Json& hidden = finding(run, "check.hardcoded_shape.guard.hidden_point");
  EXPECT_EQ(hidden.at("severity"), "fail");
  const int64_t drawn = hidden.at("where").at("params").at("N").get<int64_t>();
  EXPECT_TRUE(drawn >= 700 && drawn <= 760) << hidden.dump();
  const std::string at = "N=" + std::to_string(drawn);
  EXPECT_NE(hidden.at("claim").get<std::string>().find(
                "passes at the point(s) it was shown (N=1024) but fails at the hidden point " + at +
                " (hidden point 0 of 1, sizes drawn from the probe's hidden ranges), seed "),
            std::string::npos)
      << hidden.dump();
  // The hidden run reproduces like any other: its point and its (now revealed) seed.
  EXPECT_NE(hidden.at("reproduce").get<std::string>().find("--set " + at + " --seed "),
            std::string::npos);
  EXPECT_EQ(guards(run, "fail"), Guards{"guard.hidden_point"});
}

TEST_F(AdversarialTest, GuardPrecisionBlamedFloat8ForAMaskingBugRegression) {
  const CliRun run = check("masking_bug");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const std::string claim = finding(run, "check.masking_bug.guard.precision").at("claim");
  EXPECT_EQ(claim.find("float8"), std::string::npos) << claim;
  EXPECT_EQ(claim.find("arithmetic, or of an algorithm"), std::string::npos) << claim;
  EXPECT_NE(claim.find("not spread like rounding"), std::string::npos) << claim;
  // The mismatch says where: every 64th row.
  const std::string mismatch = finding(run, "check.masking_bug.mismatch").at("claim");
  EXPECT_NE(mismatch.find("N = 63 (mod 64)"), std::string::npos) << mismatch;
}

// An output declared approximate (TF32 tensor-core inputs against an fp32 reference) is judged
// by its tolerances, with an oracle as without one; undeclared, the same arithmetic fails.
TEST_F(AdversarialTest, DeclaredTf32InputsPassAndUndeclaredFailPrecision) {
  const CliRun declared = check("tf32_inputs_declared");
  EXPECT_EQ(declared.exit_code, 0) << declared.out << declared.err;
  EXPECT_EQ(kinds(declared, "fail"), Guards{}) << declared.out;
  const CliRun undeclared = check("tf32_inputs_undeclared");
  EXPECT_EQ(undeclared.exit_code, 1) << undeclared.out << undeclared.err;
  EXPECT_EQ(kinds(undeclared, "fail"), (Guards{"guard.precision", "guard.hidden_point"}));
  const std::string claim =
      finding(undeclared, "check.tf32_inputs_undeclared.guard.precision").at("claim");
  EXPECT_NE(claim.find("the error of tf32"), std::string::npos) << claim;
}

// Incident 1's shape: an error that grows along the chain is neither "rounding everywhere" nor
// "a mask"; the precision guard says it compounds, and where to look.
TEST_F(AdversarialTest, AnErrorGrowingAlongAChainIsCalledCompounding) {
  const CliRun run = check("truncated_chain");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& precision = finding(run, "check.truncated_chain.guard.precision");
  const std::string claim = precision.at("claim");
  EXPECT_NE(claim.find("the error grows along N (rising steadily, at least twice as large at "
                       "the end as at the start): it compounds along a chain"),
            std::string::npos)
      << claim;
  EXPECT_EQ(claim.find("a mask"), std::string::npos) << claim;
  EXPECT_NE(precision.at("next").get<std::string>().find("carried from one N step to the next"),
            std::string::npos)
      << precision.dump();
}

TEST_F(AdversarialTest, NonfiniteReferenceCalledZeroRegression) {
  const CliRun run = check("nonfinite_reference");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(run.envelope.at("verdict"), "fail");
  const std::string claim =
      finding(run, "check.nonfinite_reference.guard.nonfinite_reference").at("claim");
  EXPECT_NE(claim.find("holds 896 NaN/Inf of 1024 elements (87.5 %)"), std::string::npos) << claim;
  EXPECT_EQ(run.out.find("zero (rms"), std::string::npos) << run.out;
}

TEST_F(AdversarialTest, SilentBfloat16DowngradeIsCaughtByPrecision) {
  const CliRun run = check("bf16_downgrade");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  // It is within the declared tolerance: only the guard fails it (at the hidden run too).
  EXPECT_EQ(kinds(run, "fail"), (Guards{"guard.precision", "guard.hidden_point"}));
  const std::string claim = finding(run, "check.bf16_downgrade.guard.precision").at("claim");
  EXPECT_NE(claim.find("declared float32"), std::string::npos) << claim;
  EXPECT_NE(claim.find("1024 of its 1024 non-zero elements are bfloat16 values, or within 4 ulps"),
            std::string::npos)
      << claim;
  EXPECT_NE(claim.find("it was computed in bfloat16, not float32"), std::string::npos) << claim;
}

TEST_F(AdversarialTimedTest, PointerKeyedCacheIsCaughtByVerification) {
  const CliRun run = bench("pointer_cache");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_TRUE(guards(run, "fail").count("guard.verify_mismatch")) << run.out;
}

TEST_F(AdversarialTimedTest, ContentKeyedCacheIsCaughtByReplayTiming) {
  const CliRun run = bench("content_cache");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  // Its cached results are right, so verification cannot see it; only the timing can.
  EXPECT_EQ(guards(run, "fail"), Guards{"guard.content_cache"}) << run.out;
}

TEST_F(AdversarialTimedTest, WorkOnADetachedThreadIsCaughtByThreadCount) {
  const CliRun run = bench("detached_thread");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_TRUE(guards(run, "fail").count("guard.thread_count")) << run.out;
}

TEST_F(AdversarialTimedTest, ImplausibleSpeedIsCaughtByTheRoofline) {
  const CliRun run = bench("lazy_speedup");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  // The accessor does the work: the timed call is beyond the roofline, and the accessor's own
  // time (measured since round 2) says where the work went. The work it defers also runs inside
  // the runtime's window around a sample, so now and then (1 sample of 148 on a quiet 2-core
  // machine) that window's CPU outgrows the reported batch and guard.timing fails it as well.
  Guards failed = guards(run, "fail");
  failed.erase("guard.timing");
  EXPECT_EQ(failed, (Guards{"guard.roofline", "guard.deferred_output"})) << run.out;
  const std::string claim = finding(run, "bench.lazy_speedup.guard.roofline").at("claim");
  EXPECT_NE(claim.find("claims 4194304 bytes per call"), std::string::npos) << claim;
}

TEST_F(AdversarialTimedTest, ATimerOfTheBodysOwnIsRefusedWhateverCeilingItClaims) {
  // Round 1 let a timer report another device's ceiling. Only loupe's timers may time a bench
  // now: the samples are taken with the steady clock, and the CPU's roofline judges 1 GB/call.
  const CliRun generous =
      probe_run(ADVERSARIAL_SUBJECT, {"offloaded_bench", "--seed", "3", "--budget", "0.3"});
  EXPECT_EQ(generous.exit_code, 1) << generous.out << generous.err;
  EXPECT_EQ(guards(generous, "fail"), (Guards{"guard.foreign_timer", "guard.roofline"}))
      << generous.out;
  const std::string claim =
      finding(generous, "bench.offloaded_bench.guard.foreign_timer").at("claim");
  EXPECT_NE(claim.find("the body set its own timer (test_accelerator_clock"), std::string::npos)
      << claim;
}

}  // namespace
}  // namespace loupe::adversarial
