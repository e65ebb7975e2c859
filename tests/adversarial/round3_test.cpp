// Round 3 (round3_cases.cpp): candidates written as the held-out set's author would, two or more
// per class. Each test asserts the guard that rejects the candidate, or — where nothing does yet —
// the current outcome, with docs/security.md's "What is not guaranteed" saying so.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "loupe_cli.hpp"

namespace loupe::adversarial {
namespace {

using Guards = std::set<std::string>;

class Round3Test : public LoupeCliTest {
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
class Round3TimedTest : public Round3Test {
 protected:
  CliRun bench(const std::string& probe) const {
    return probe_run(ADVERSARIAL_SUBJECT, {probe, "--seed", "5", "--budget", "0.3"});
  }
};

// 1. Tampering: a thread started by a static initialiser lives in the runtime process, next to
// the files. The runtime seals each file with the digest of the bytes it wrote (not of a re-read)
// and never reads a written file back (it truncated one under the runtime's mapping: SIGBUS, exit
// 3, about 1 run in 10; or emptied one before it was digested: an unreadable observation, exit 2).
// Whether the copy lands is a race: when it does, the seal breaks; when it does not, the zeros the
// candidate wrote are compared and the thread is named. Either way the check fails (exit 1).
TEST_F(Round3Test, AStaticInitialiserThreadThatCopiesTheReferenceFails) {
  const CliRun run = check("static_thread_copier");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const bool sealed_broken = has(run, "check.static_thread_copier.guard.evidence_sealed", "fail");
  const bool compared = has(run, "check.static_thread_copier.mismatch", "fail") &&
                        has(run, "check.static_thread_copier.guard.runtime_thread", "info");
  EXPECT_TRUE(sealed_broken || compared) << run.out;
  EXPECT_FALSE(has(run, "check.static_thread_copier.subject.crashed", "fail")) << run.out;
}

// 1. Tampering: links planted where the runtime writes the candidate's outputs, pointing at the
// reference's files, made the runtime write through them (the seal caught it). Now the runtime
// removes what it finds where it writes, writes its own files, and says what it removed; the
// candidate's zeros are compared as they are.
TEST_F(Round3Test, SymlinksPlantedForTheCandidatesOutputsAreRemovedAndNamed) {
  const CliRun run = check("symlink_planted");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& planted = finding(run, "check.symlink_planted.guard.evidence_sealed");
  EXPECT_EQ(planted.at("severity"), "fail");
  EXPECT_NE(planted.at("claim").get<std::string>().find(
                "candidate_first/candidate.y.npy -> reference.y.npy"),
            std::string::npos)
      << planted.dump();
  EXPECT_TRUE(has(run, "check.symlink_planted.mismatch", "fail")) << run.out;
}

// 1 and 4. The candidate writes outputs 5 % off and replaces the reference's outputs with its own
// in the shared mapping the check's child hands them over in (passed before the per-path
// checksums): each path's checksums now go down a pipe before the next path runs.
TEST_F(Round3Test, RewritingTheReferencesOutputsInTheChildBreaksThePerPathSeal) {
  const CliRun run = check("rewrites_the_reference_slot");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  bool reference_first = false;
  for (const auto& item : run.envelope.at("findings")) {
    if (item.at("id") != "check.rewrites_the_reference_slot.guard.evidence_sealed") continue;
    EXPECT_EQ(item.at("severity"), "fail");
    EXPECT_EQ(item.at("where").at("path"), "reference.y");
    const std::string claim = item.at("claim");
    // Run after the reference, the candidate rewrites it synchronously: always caught there.
    reference_first =
        reference_first || claim.find(
                               "(reference_first pass): rewritten by code that ran after it in "
                               "the same process (candidate)") != std::string::npos;
  }
  EXPECT_TRUE(reference_first) << run.out;
}

// 2. Recognising the check: every check pass is a fresh process, and it used to make exactly 3
// candidate calls (the call and the 2 default repeats): a candidate right on its first 3 calls
// passed. Now 1 to 6 more follow, a count the runtime draws after the child started and hands it
// one call at a time, so the candidate's 4th call always comes and is compared.
TEST_F(Round3Test, RightOnItsFirstThreeCallsFailsOnTheSecretRepeats) {
  const CliRun run = check("right_first_three");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& repeated = finding(run, "check.right_first_three.nondeterministic");
  EXPECT_EQ(repeated.at("severity"), "fail");
  // The first call that differs is repeat 3: the 4th call of the process.
  EXPECT_NE(repeated.at("claim").get<std::string>().find("repeat 3 first differs"),
            std::string::npos)
      << repeated.dump();
}

// 2. Recognising the check: a hidden point written in the source is known to the candidate's
// author (it passed). A probe whose hidden points are all in the source, with no hidden range to
// draw from, now fails guard.hidden_point whatever the candidate does there.
TEST_F(Round3Test, AHiddenPointReadFromTheSourceFailsTheHiddenPointGuard) {
  const CliRun run = check("knows_the_hidden_point");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& hidden = finding(run, "check.knows_the_hidden_point.guard.hidden_point");
  EXPECT_EQ(hidden.at("severity"), "fail");
  EXPECT_NE(hidden.at("claim").get<std::string>().find(
                "the hidden point N=1536 (hidden point 0 of 1), seed "),
            std::string::npos)
      << hidden.dump();
  EXPECT_NE(hidden.at("claim").get<std::string>().find(
                "is written in the probe's source (.hidden_point) and the probe declares no "
                ".hidden_range"),
            std::string::npos)
      << hidden.dump();
  EXPECT_EQ(guards(run, "fail"), Guards{"guard.hidden_point"}) << run.out;
}

// 3. Work off the timed path: a thread per call, joined by the outputs accessor.
TEST_F(Round3TimedTest, AThreadPerCallJoinedByTheAccessorIsCaught) {
  const CliRun run = bench("per_call_thread");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& threads = finding(run, "bench.per_call_thread.guard.thread_count");
  EXPECT_EQ(threads.at("severity"), "fail");
  EXPECT_EQ(threads.at("where").at("path"), "async");
}

// 3. Work off the timed path: the work runs in a signal handler on the variant's own thread,
// after the batch; the idle accounting and the accessor bound both see it.
TEST_F(Round3TimedTest, WorkInASignalHandlerAfterTheBatchIsOffPathWork) {
  const CliRun run = bench("signal_handler_work");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Guards failed = guards(run, "fail");
  EXPECT_TRUE(failed.count("guard.off_path_work") == 1 ||
              failed.count("guard.deferred_output") == 1)
      << run.out;
}

// 4. Sabotaging the other side: SCHED_IDLE leaves the nice value and the affinity alone; the
// environment guard now reads the scheduling policy too (it passed before).
TEST_F(Round3TimedTest, SchedIdleOnTheSiblingIsAnEnvironmentFinding) {
  const CliRun run = bench("idle_class_sibling");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  bool baseline_changed = false;
  bool runtime_changed = false;
  for (const auto& item : run.envelope.at("findings")) {
    if (item.at("id") != "bench.idle_class_sibling.guard.environment") continue;
    EXPECT_EQ(item.at("severity"), "fail");
    const std::string claim = item.at("claim");
    EXPECT_NE(claim.find("scheduling policy SCHED_OTHER -> SCHED_IDLE"), std::string::npos)
        << claim;
    baseline_changed = baseline_changed || item.at("where").at("path") == "baseline";
    runtime_changed = runtime_changed || claim.find("the runtime process") == 0;
  }
  EXPECT_TRUE(baseline_changed) << run.out;
  EXPECT_TRUE(runtime_changed) << run.out;
}

// 4. Sabotaging the other side: an unmasked inexact exception would kill the next path.
TEST_F(Round3Test, UnmaskingTheInexactTrapIsAnEnvironmentFinding) {
  const CliRun run = check("traps_inexact");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& changed = finding(run, "check.traps_inexact.guard.environment");
  EXPECT_EQ(changed.at("severity"), "fail");
  EXPECT_EQ(changed.at("where").at("path"), "candidate");
  EXPECT_NE(changed.at("claim").get<std::string>().find("MXCSR 0x1f80 -> 0x0f80"),
            std::string::npos)
      << changed.dump();
}

// 5. Precision: an error spread evenly just under the tolerance is 6e4x the reference's own
// error against the oracle.
TEST_F(Round3Test, AnEvenErrorUnderTheToleranceFailsAgainstTheOracle) {
  const CliRun run = check("even_error_with_oracle");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(guards(run, "fail"), (Guards{"guard.precision", "guard.hidden_point"})) << run.out;
}

// 5. Precision: without an oracle loupe could not tell the reference's own error, and the error
// is inside the tolerance the probe declared (it passed). The reference now also runs rounding
// upward and downward: its outputs move by ~1e-7 of their rms, the candidate's error is ~1e-2.
TEST_F(Round3Test, AnEvenErrorUnderTheToleranceWithoutAnOracleFailsAgainstTheRoundingSpread) {
  const CliRun run = check("even_error_no_oracle");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(guards(run, "fail"), (Guards{"guard.precision", "guard.hidden_point"})) << run.out;
  const Json& precision = finding(run, "check.even_error_no_oracle.guard.precision");
  EXPECT_EQ(precision.at("where").at("path"), "candidate.y");
  EXPECT_NE(precision.at("claim").get<std::string>().find(
                "is declared float32 and the check has no oracle"),
            std::string::npos)
      << precision.dump();
  EXPECT_GT(
      precision.at("evidence").at("metrics").at("candidate_vs_reference").get<double>(),
      64 * precision.at("evidence").at("metrics").at("reference_rounding_spread").get<double>());
}

// 6. Reading earlier runs: memo_writer leaves its outputs wherever it can write outside its run
// directory; memo_reader replays them. Inside the sandbox nothing survives (private /tmp and
// /dev/shm, the rest read-only), so even the shown point fails; outside it, the secret seed fails
// the replay.
TEST_F(Round3Test, OutputsLeftOutsideTheRunDirectoryCannotBeReplayed) {
  const auto clean = [] {
    std::vector<std::string> dirs = {"/dev/shm", "/var/tmp"};
    if (const char* home = std::getenv("HOME")) dirs.push_back(std::string(home) + "/.cache");
    for (const std::string& dir : dirs) {
      std::error_code error;
      for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
        if (entry.path().filename().string().rfind("loupe-round3-memo-", 0) == 0) {
          std::filesystem::remove(entry.path(), error);
        }
      }
    }
  };
  clean();
  const CliRun writer = check("memo_writer");
  EXPECT_EQ(writer.exit_code, 0) << writer.out << writer.err;
  const bool sandboxed = writer.envelope.at("data").value("sandbox", "") == "bwrap";
  const CliRun reader = check("memo_reader");
  clean();
  EXPECT_EQ(reader.exit_code, 1) << reader.out << reader.err;
  const Json& hidden = finding(reader, "check.memo_reader.guard.hidden_point");
  EXPECT_EQ(hidden.at("severity"), "fail");
  if (sandboxed) {
    // Nothing to replay even at the shown point.
    EXPECT_EQ(hidden.at("claim").get<std::string>().rfind("the candidate also fails", 0), 0u)
        << hidden.dump();
  }
}

}  // namespace
}  // namespace loupe::adversarial
