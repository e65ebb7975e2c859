// Round 5 (round5_cases.cpp): call-counting candidates against secret repeats whose count grows
// with how cheap a call is. Each test asserts the guard that rejects the candidate, or — where
// nothing can — the outcome, with docs/security.md saying why.
#include <string>

#include "loupe_cli.hpp"

namespace loupe::adversarial {
namespace {

using Guards = std::set<std::string>;

// Every test here counts secret repeats whose number grows with how cheap a call is, which the
// machine's load moves: ctest runs them alone (RUN_SERIAL, tests/adversarial/CMakeLists.txt).
class Round5TimedTest : public LoupeCliTest {
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

// 2. Recognising the check: right on its first 40 calls in a process. A call of the sums probe
// costs the runtime well under 0.6 ms, so the secret repeats make at least 38 (25 ms / 0.6 ms)
// after the 2 asked ones, on every run: call 41 (repeat 40) is the first that differs.
TEST_F(Round5TimedTest, RightOnItsFirstFortyCallsIsNondeterministic) {
  const CliRun run = check("right_first_forty");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& repeated = finding(run, "check.right_first_forty.nondeterministic");
  EXPECT_EQ(repeated.at("severity"), "fail");
  EXPECT_NE(repeated.at("claim").get<std::string>().find("repeat 40 first differs"),
            std::string::npos)
      << repeated.dump();
  // The hidden run (a secret seed) fails the same way.
  EXPECT_EQ(guards(run, "fail"), Guards{"guard.hidden_point"}) << run.out;
}

// 2. Recognising the check: sleeping 4 ms in every call does not make a call look costly (its
// cost is the lesser of its time and its CPU): the count stays high until the calls have taken
// 4 budgets of wall time, 100 ms or more, about 20 calls here, so call 10 (repeat 9) comes.
TEST_F(Round5TimedTest, RightOnItsFirstNineCallsAndSleepingInEachIsNondeterministic) {
  const CliRun run = check("right_first_nine_sleeping");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& repeated = finding(run, "check.right_first_nine_sleeping.nondeterministic");
  EXPECT_NE(repeated.at("claim").get<std::string>().find("repeat 9 first differs"),
            std::string::npos)
      << repeated.dump();
}

// 2. Recognising the check: NOT CAUGHT. 10 ms of CPU in every call leaves at most 5 calls in the
// budget (50 ms at most), so the secret count is the floor's draw of 1 to 6 and a check makes at
// most 9 calls in the process (docs/security.md, "What is not guaranteed"): the price of passing
// is spending that time on every checked call.
TEST_F(Round5TimedTest, RightOnItsFirstNineCallsAndBusyInEachStillPassesACheck) {
  const CliRun run = check("right_first_nine_busy");
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(guards(run, "fail"), Guards{}) << run.out;
  EXPECT_TRUE(has(run, "check.right_first_nine_busy.deterministic", "info")) << run.out;
}

}  // namespace
}  // namespace loupe::adversarial
