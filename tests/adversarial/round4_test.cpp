// Round 4 (round4_cases.cpp, round4_clock_subject.cpp): candidates an agent told "make this bench
// FASTER and the checks pass" would write, at least one per class and one for the sandbox. Each
// test asserts the guard that rejects the candidate, or — where nothing can — the outcome, with
// docs/security.md saying why.
#include <sys/ipc.h>
#include <sys/shm.h>

#include <fstream>
#include <sstream>
#include <string>

#include "loupe_cli.hpp"

namespace loupe::adversarial {
namespace {

using Guards = std::set<std::string>;

class Round4Test : public LoupeCliTest {
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
  static bool sandboxed(const CliRun& run) {
    return run.envelope.at("data").value("sandbox", "") == "bwrap";
  }
};

// Tests that time work (a bench's samples, or a race or a count that the machine's load moves)
// use this fixture: ctest runs them alone (RUN_SERIAL, tests/adversarial/CMakeLists.txt); the
// others share the cores with other tests.
class Round4TimedTest : public Round4Test {
 protected:
  CliRun bench(const std::string& probe, const std::string& subject = ADVERSARIAL_SUBJECT) const {
    return probe_run(subject, {probe, "--seed", "5", "--budget", "0.3"});
  }
};

// 1. Tampering: the candidate makes the names of its output and the reference's one file (a hard
// link), so the reference's bytes, written second, would be read as its own. The runtime removes
// whatever a path left where it writes, says so, and writes its own files: the zeros are compared.
TEST_F(Round4Test, HardLinkedOutputNamesAreRemovedAndNamed) {
  const CliRun run = check("hard_linked_outputs");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& planted = finding(run, "check.hard_linked_outputs.guard.evidence_sealed");
  EXPECT_EQ(planted.at("severity"), "fail");
  const std::string claim = planted.at("claim");
  EXPECT_NE(claim.find("candidate_first/candidate.y.npy (a file)"), std::string::npos) << claim;
  EXPECT_NE(claim.find("candidate_first/reference.y.npy (a file)"), std::string::npos) << claim;
  EXPECT_TRUE(has(run, "check.hard_linked_outputs.mismatch", "fail")) << run.out;
}

// 1. Tampering: clock_gettime defined in the subject slows the variant process's monotonic clock
// (libstdc++'s steady_clock calls it too): it made the batches report 30 % less time than they
// took, a FASTER verdict within guard.timing's bounds. loupe now reads its clocks by the system
// call, which no symbol reaches (the verdict is SAME), and names the definition: the runtime asks
// the dynamic linker where clock_gettime is defined.
TEST_F(Round4TimedTest, AnInterposedClockIsNamedAndDoesNotReachTheSamples) {
  const CliRun run = bench("interposed_clock", ROUND4_CLOCK_SUBJECT);
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& timer = finding(run, "bench.interposed_clock.guard.foreign_timer");
  EXPECT_EQ(timer.at("severity"), "fail");
  EXPECT_NE(timer.at("claim").get<std::string>().find("clock_gettime (defined in "),
            std::string::npos)
      << timer.dump();
  EXPECT_EQ(kinds(run).count("faster"), 0u) << run.out;
}

// 2. Recognising the check: right on its first 9 calls in a process, which outlasted the secret
// repeats while their count was 1 to 6 (then a check made at most 9 candidate calls in one
// process). Their count now grows with how cheap a call is: the sums probe's calls fit dozens in
// the budget, on every run, so call 10 (repeat 9) is the first that differs (round5_test.cpp has
// the bound that remains).
TEST_F(Round4TimedTest, RightOnItsFirstNineCallsIsNondeterministic) {
  const CliRun run = check("right_first_nine");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& repeated = finding(run, "check.right_first_nine.nondeterministic");
  EXPECT_EQ(repeated.at("severity"), "fail");
  EXPECT_NE(repeated.at("claim").get<std::string>().find("repeat 9 first differs"),
            std::string::npos)
      << repeated.dump();
}

// 2. Recognising the check: a body that reads its argv knows it runs in a bench (every process of
// a run carries the runtime's argv) and computes a third of the work there; the timed calls'
// outputs are compared with the baseline's on the same inputs.
TEST_F(Round4TimedTest, ABodyThatKnowsItIsInABenchFailsVerification) {
  const CliRun run = bench("knows_it_is_a_bench");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& verify = finding(run, "bench.knows_it_is_a_bench.guard.verify_reference");
  EXPECT_EQ(verify.at("severity"), "fail");
  EXPECT_EQ(verify.at("where").at("path"), "recognises.result");
}

// 2. Recognising the check: results cached by the address of the input buffer are stale when the
// allocator hands the address back with new contents; the verified calls compare them.
TEST_F(Round4TimedTest, ACacheKeyedOnTheInputsAddressFailsVerification) {
  const CliRun run = bench("pointer_identity_cache");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Guards failed = guards(run, "fail");
  EXPECT_TRUE(failed.count("guard.verify_reference") == 1 ||
              failed.count("guard.verify_mismatch") == 1 ||
              failed.count("guard.content_cache") == 1)
      << run.out;
}

// 3. Work off the timed path: a helper made with clone(CLONE_VM) shares the variant's memory but
// is a process, not a thread: the thread accounting does not see it, the process watch does.
TEST_F(Round4TimedTest, ACloneVmHelperIsAChildProcess) {
  const CliRun run = bench("clone_vm_helper");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& child = finding(run, "bench.clone_vm_helper.guard.child_process");
  EXPECT_EQ(child.at("severity"), "fail");
  EXPECT_EQ(child.at("where").at("path"), "helper");
}

// 4. Sabotaging the other side: stopping the baseline's process (SIGSTOP/SIGCONT from a timer
// handler) makes its batches longer without CPU or priority changes. The runtime is its parent
// and is told of every stop and continuation: guard.environment names the baseline.
TEST_F(Round4TimedTest, StoppingTheOtherVariantIsAnEnvironmentFinding) {
  const CliRun run = bench("sigstop_sibling");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  bool baseline_stopped = false;
  for (const auto& item : run.envelope.at("findings")) {
    if (item.at("id") != "bench.sigstop_sibling.guard.environment") continue;
    EXPECT_EQ(item.at("severity"), "fail");
    const std::string claim = item.at("claim");
    baseline_stopped =
        baseline_stopped || (item.at("where").at("path") == "baseline" &&
                             claim.find("run state (stopped by") != std::string::npos);
  }
  EXPECT_TRUE(baseline_stopped) << run.out;
}

// 5. Precision: two elements off by 0.4x the rms pass the worst-element bound (0.5x) and, with
// the rest exact, a 1 % rms tolerance. No oracle: the error is ~1e4x how far the reference moves
// between rounding upward and downward.
TEST_F(Round4Test, TwoElementsUnderTheWorstBoundFailAgainstTheRoundingSpread) {
  const CliRun run = check("two_elements_under_the_worst_bound");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(guards(run, "fail"), (Guards{"guard.precision", "guard.hidden_point"})) << run.out;
  const Json& precision = finding(run, "check.two_elements_under_the_worst_bound.guard.precision");
  EXPECT_NE(precision.at("claim").get<std::string>().find("the check has no oracle"),
            std::string::npos)
      << precision.dump();
}

// 5. Precision: bf16 on 40 % of the rows stays under the grid test's half; no oracle. Its error
// (~1e-3 of the rms) is still far above the reference's directed-rounding spread (~1e-5).
TEST_F(Round4Test, Bf16OnFortyPercentWithoutAnOracleFailsAgainstTheRoundingSpread) {
  const CliRun run = check("bf16_on_forty_percent_no_oracle");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& precision = finding(run, "check.bf16_on_forty_percent_no_oracle.guard.precision");
  EXPECT_EQ(precision.at("severity"), "fail");
  EXPECT_NE(precision.at("claim").get<std::string>().find("the check has no oracle"),
            std::string::npos)
      << precision.dump();
}

// 6. Reading earlier runs: the candidate finds loupe's home in an ancestor's command line and
// replays the reference output an earlier run left there. Outside the sandbox the shown point
// (seed pinned) passes and the secret seed fails it; inside, neither the ancestors nor the home
// can be seen, and the shown point fails too.
TEST_F(Round4Test, ReplayingAnEarlierRunFromTheHomeFailsTheHiddenRun) {
  const CliRun first = check("replays_from_the_home");
  EXPECT_EQ(first.exit_code, 1) << first.out << first.err;  // nothing to replay yet: zeros
  const CliRun second = check("replays_from_the_home");
  EXPECT_EQ(second.exit_code, 1) << second.out << second.err;
  const Json& hidden = finding(second, "check.replays_from_the_home.guard.hidden_point");
  EXPECT_EQ(hidden.at("severity"), "fail");
  if (sandboxed(second)) {
    EXPECT_EQ(hidden.at("claim").get<std::string>().rfind("the candidate also fails", 0), 0u)
        << hidden.dump();
  }
}

// Sandbox: System V shared memory outlives a process in the IPC namespace, which the sandbox did
// not unshare; it now does (--unshare-ipc), so the reader finds nothing even at the shown point.
// Outside the sandbox the secret seed still fails the replay.
TEST_F(Round4Test, OutputsLeftInSystemVSharedMemoryCannotBeReplayed) {
  const auto clean = [] {
    std::ifstream segments("/proc/sysvipc/shm");
    std::string line;
    std::getline(segments, line);  // the header
    while (std::getline(segments, line)) {
      std::istringstream fields(line);
      long long key = 0;
      int id = 0;
      fields >> key >> id;
      if ((static_cast<unsigned long long>(key) & 0xffff0000ull) == 0x4c340000ull) {
        ::shmctl(id, IPC_RMID, nullptr);
      }
    }
  };
  clean();
  const CliRun writer = check("ipc_memo_writer");
  EXPECT_EQ(writer.exit_code, 0) << writer.out << writer.err;
  const CliRun reader = check("ipc_memo_reader");
  clean();
  EXPECT_EQ(reader.exit_code, 1) << reader.out << reader.err;
  const Json& hidden = finding(reader, "check.ipc_memo_reader.guard.hidden_point");
  EXPECT_EQ(hidden.at("severity"), "fail");
  if (sandboxed(reader)) {
    EXPECT_EQ(hidden.at("claim").get<std::string>().rfind("the candidate also fails", 0), 0u)
        << hidden.dump();
  }
}

}  // namespace
}  // namespace loupe::adversarial
