// `loupe probe list|run` end to end against the test subjects (tests/subjects): every guard's
// adversarial candidate yields a finding naming the guard, and the exit codes are the documented
// ones. Runs in about 15 s (the bench cases sample for 0.3–0.5 s each).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/json.hpp"
#include "core/process.hpp"
#include "loupe/error.hpp"
#include "support/cli_run.hpp"

namespace loupe {
namespace {

namespace fs = std::filesystem;

using test_support::CliRun;

class ProbeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    home_ = fs::temp_directory_path() /
            ("loupe_probe_cli_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(home_);
    fs::create_directories(home_);
  }
  void TearDown() override { fs::remove_all(home_); }

  // `subject_args` follow the subject on its command line (a wrapper's program).
  CliRun loupe(std::vector<std::string> arguments, const std::string& subject,
               std::vector<std::pair<std::string, std::string>> extra_env = {},
               const std::vector<std::string>& subject_args = {}) const {
    ProcessSpec spec;
    spec.extra_env = std::move(extra_env);
    spec.argv = {LOUPE_EXECUTABLE};
    for (auto& argument : arguments) spec.argv.push_back(std::move(argument));
    if (arguments.empty() || spec.argv[1] != "probe" || spec.argv.size() < 3 ||
        spec.argv[2] != "list") {
      spec.argv.insert(spec.argv.end(), {"--home", home_.string()});
    }
    spec.argv.push_back("--");
    spec.argv.push_back(subject);
    spec.argv.insert(spec.argv.end(), subject_args.begin(), subject_args.end());
    spec.timeout = std::chrono::seconds(120);
    return test_support::run_cli(spec);
  }

  CliRun run_check(const std::string& probe, std::vector<std::string> extra = {}) const {
    std::vector<std::string> arguments = {"probe", "run", probe, "--seed", "7", "--json"};
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    return loupe(arguments, CHECK_SUBJECT);
  }

  CliRun run_bench(const std::string& probe, const std::string& budget) const {
    return loupe({"probe", "run", probe, "--seed", "3", "--budget", budget, "--json"},
                 BENCH_SUBJECT);
  }

  static std::set<std::string> finding_ids(const CliRun& run) {
    std::set<std::string> ids;
    for (const auto& finding : run.envelope.at("findings")) ids.insert(finding.at("id"));
    return ids;
  }

  static const Json& finding(const CliRun& run, const std::string& id) {
    for (const auto& item : run.envelope.at("findings")) {
      if (item.at("id") == id) return item;
    }
    throw std::runtime_error("no finding " + id + " in " + run.out);
  }

  fs::path home_;
};

TEST_F(ProbeCliTest, ListShowsEveryProbeWithItsParameters) {
  const CliRun run = loupe({"probe", "list", "--json"}, CHECK_SUBJECT);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.envelope.at("kind"), "probe.list");
  const Json& probes = run.envelope.at("data").at("probes");
  ASSERT_EQ(probes.size(), 6u);
  EXPECT_EQ(probes[0].at("name"), "sum_correct");
  EXPECT_EQ(probes[0].at("kind"), "check");
  EXPECT_EQ(probes[0].at("has_oracle"), true);
  EXPECT_EQ(probes[0].at("hidden_points"), 1);
  // Its values are listed (they are in the source anyway): loupe passes a hidden point with
  // --set, exactly like an asked one.
  EXPECT_EQ(probes[0].at("hidden_point_values"), Json::parse(R"([{"N": 777}])"));
  // And the range loupe draws N from over that corner, with its step.
  EXPECT_EQ(probes[0].at("hidden_ranges"),
            Json::parse(R"([{"name": "N", "low": 700, "high": 900, "step": 1}])"));
  const Json& param = probes[0].at("params").at(0);
  EXPECT_EQ(param.at("name"), "N");
  EXPECT_EQ(param.at("type"), "int");
  EXPECT_EQ(param.at("default"), 1024);
  EXPECT_EQ(param.at("allowed"), Json::parse("[256, 1024]"));
}

TEST_F(ProbeCliTest, CorrectCandidateWithReorderedSummationPasses) {
  const CliRun run = run_check("sum_correct");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(run.envelope.at("verdict"), "pass");
  EXPECT_TRUE(finding_ids(run).count("check.sum_correct.match")) << run.out;
  const fs::path observation = run.envelope.at("data").at("observation").get<std::string>();
  EXPECT_EQ(observation.parent_path().filename(), "N=1024");
  EXPECT_EQ(observation.parent_path().parent_path().filename(), "sum_correct");
  std::ifstream in(observation);
  const Json written = Json::parse(in);
  EXPECT_EQ(written.at("seed"), 7);
  EXPECT_EQ(written.at("verdict"), "pass");
  EXPECT_FALSE(written.at("findings").empty());
  EXPECT_TRUE(written.at("stderr_tail").is_string());
  EXPECT_TRUE(fs::exists(observation.parent_path() / "oracle" / "y.npy"));
  // The reordered sum differs from the sequential one in the last bits, not bitwise equal.
  const Json& comparison = run.envelope.at("data").at("comparisons").at(0);
  EXPECT_GT(comparison.at("metrics").at("rms_ratio").get<double>(), 0.0);
  EXPECT_LE(comparison.at("metrics").at("rms_ratio").get<double>(), 1e-6);
  EXPECT_EQ(comparison.at("profile").at("axis"), "N");
}

TEST_F(ProbeCliTest, CandidateReturningTheReferenceBufferIsCaughtByAliasAndOrder) {
  const CliRun run = run_check("sum_alias");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(run.envelope.at("verdict"), "fail");
  const auto ids = finding_ids(run);
  EXPECT_TRUE(ids.count("check.sum_alias.guard.output_alias")) << run.out;
  EXPECT_TRUE(ids.count("check.sum_alias.guard.order_dependence")) << run.out;
  EXPECT_TRUE(ids.count("check.sum_alias.mismatch")) << run.out;
  const Json& alias = finding(run, "check.sum_alias.guard.output_alias");
  EXPECT_EQ(alias.at("severity"), "fail");
  EXPECT_NE(alias.at("claim").get<std::string>().find("reference output y"), std::string::npos);
  EXPECT_NE(alias.at("reproduce").get<std::string>().find("--seed 7"), std::string::npos);
}

TEST_F(ProbeCliTest, CandidateMutatingItsInputsIsCaught) {
  const CliRun run = run_check("sum_mutate");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& mutation = finding(run, "check.sum_mutate.guard.input_mutation");
  EXPECT_EQ(mutation.at("severity"), "fail");
  EXPECT_EQ(mutation.at("where").at("path"), "candidate.x");
  EXPECT_EQ(mutation.at("reproduce"),
            std::string("loupe probe run sum_mutate --set N=1024 --seed 7 -- ") + CHECK_SUBJECT);
}

TEST_F(ProbeCliTest, CandidateWritingHalfItsOutputIsCaught) {
  const CliRun run = run_check("sum_half", {"--set", "N=256"});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& unwritten = finding(run, "check.sum_half.guard.output_unwritten");
  EXPECT_NE(unwritten.at("claim").get<std::string>().find("left 128 of 256 elements"),
            std::string::npos)
      << unwritten.dump();
  EXPECT_TRUE(finding_ids(run).count("check.sum_half.nonfinite"));
}

TEST_F(ProbeCliTest, ReferenceThatIgnoresItsInputsCannotDiscriminate) {
  const CliRun run = run_check("sum_vacuous");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_EQ(run.envelope.at("verdict"), "inconclusive");
  EXPECT_TRUE(finding_ids(run).count("check.sum_vacuous.guard.cannot_discriminate")) << run.out;
}

TEST_F(ProbeCliTest, RepeatFindsWhereANondeterministicCandidateFirstDiffers) {
  const CliRun run = run_check("sum_flaky", {"--repeat", "2"});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  const Json& nondeterministic = finding(run, "check.sum_flaky.nondeterministic");
  // The perturbed element is y[N / 3] = y[341].
  EXPECT_EQ(nondeterministic.at("where").at("coords"), Json::parse(R"({"N": 341})"));
  EXPECT_NE(nondeterministic.at("reproduce").get<std::string>().find("--repeat 2"),
            std::string::npos);

  const CliRun stable = run_check("sum_correct", {"--repeat", "2"});
  EXPECT_EQ(stable.exit_code, 0) << stable.out;
  EXPECT_TRUE(finding_ids(stable).count("check.sum_correct.deterministic"));
}

TEST_F(ProbeCliTest, HiddenPointIsRevealedOnlyInTheObservation) {
  const CliRun run = loupe({"probe", "run", "sum_correct", "--hidden", "--json"}, CHECK_SUBJECT);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json& data = run.envelope.at("data");
  EXPECT_EQ(data.at("params").at("N"), 777);
  EXPECT_EQ(data.at("hidden").at("index"), 0);
  const std::string reproduce = finding(run, "check.sum_correct.match").at("reproduce");
  EXPECT_NE(reproduce.find("--hidden-point 0 --seed "), std::string::npos) << reproduce;
}

TEST_F(ProbeCliTest, BadUsageExitsTwoListingTheValidChoices) {
  CliRun run = run_check("no_such_probe");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.envelope.at("verdict"), "error");
  EXPECT_NE(run.out.find("sum_correct, sum_alias"), std::string::npos) << run.out;

  run = run_check("sum_correct", {"--set", "N=12"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.out.find("allowed: 256, 1024"), std::string::npos) << run.out;

  run = run_check("sum_correct", {"--set", "N=many"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.out.find("parameter 'N' is int, got 'many'"), std::string::npos) << run.out;

  run = run_check("sum_correct", {"--set", "M=1"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.out.find("its parameters are: N (int)"), std::string::npos) << run.out;
}

TEST_F(ProbeCliTest, CrashingSubjectExitsThree) {
  const fs::path script = home_ / "crasher.sh";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\necho 'about to crash' >&2\nkill -SEGV $$\n";
  }
  fs::permissions(script, fs::perms::owner_all);
  const CliRun run = loupe({"probe", "run", "anything", "--json"}, script.string());
  EXPECT_EQ(run.exit_code, 3) << run.out << run.err;
  EXPECT_EQ(run.envelope.at("error").at("code"), "subject");
  const std::string message = run.envelope.at("error").at("message");
  EXPECT_NE(message.find("SIGSEGV"), std::string::npos) << message;
  EXPECT_NE(message.find("about to crash"), std::string::npos) << message;
}

// A wrapper that execs a program under /tmp without naming it on the subject command: inside the
// sandbox's private /tmp the program is missing, and the hint says why and what to do, not only
// the shell's "not found".
TEST_F(ProbeCliTest, AnUnnamedTmpPathHiddenByTheSandboxIsNamedInTheHint) {
  ProcessSpec probe_bwrap;
  probe_bwrap.argv = {"bwrap", "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--", "/bin/true"};
  probe_bwrap.timeout = std::chrono::seconds(20);
  try {
    if (!run_process(probe_bwrap).succeeded()) GTEST_SKIP() << "bwrap cannot create a sandbox here";
  } catch (const Error&) {
    GTEST_SKIP() << "bwrap (Debian package bubblewrap) is not installed";
  }
  const fs::path elsewhere = fs::path("/tmp") / ("loupe-elsewhere-" + std::to_string(::getpid()));
  fs::create_directories(elsewhere);
  const fs::path tool = elsewhere / "tool";
  // The tool is the check subject: `list` (run outside the sandbox) finds it, the run cannot.
  std::ofstream(tool) << "#!/bin/sh\nexec '" CHECK_SUBJECT "' \"$@\"\n";
  fs::permissions(tool, fs::perms::owner_all);
  const fs::path script = home_ / "wrapper.sh";
  std::ofstream(script) << "#!/bin/sh\nexec '" << tool.string() << "' \"$@\"\n";
  fs::permissions(script, fs::perms::owner_all);
  const CliRun run = loupe({"probe", "run", "sum_correct", "--json"}, script.string());
  fs::remove_all(elsewhere);
  EXPECT_EQ(run.exit_code, 3) << run.out << run.err;
  const std::string hint = run.envelope.at("error").value("hint", "");
  EXPECT_EQ(hint.rfind("the sandbox gives the subject a private /tmp: a path under /tmp that it "
                       "needs must be an argument of its command",
                       0),
            0u)
      << run.out;
}

TEST_F(ProbeCliTest, TimeoutKillsTheSubjectAndExitsThree) {
  const fs::path script = home_ / "sleeper.sh";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\nsleep 100 &\nsleep 100\n";
  }
  fs::permissions(script, fs::perms::owner_all);
  const auto start = std::chrono::steady_clock::now();
  const CliRun run = loupe({"probe", "run", "slow", "--timeout", "0.5", "--json"}, script.string());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(run.exit_code, 3) << run.out << run.err;
  EXPECT_NE(run.out.find("timed out"), std::string::npos) << run.out;
  EXPECT_LT(seconds, 30.0);
}

// Issue 38: one direction everywhere. "double" (the candidate: every variant after the first)
// does twice the work of "base" (the baseline: the first variant); every field of the JSON that
// states a direction says the candidate is slower: the comparison's ratio (candidate/baseline,
// named by ratio_of) and verdict, the finding's id, claim, path and metrics, and the text line.
TEST_F(ProbeCliTest, SlowerCandidateSaysSlowerInEveryDirectionField) {
  const CliRun run = run_bench("squares", "1");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json& comparison = run.envelope.at("data").at("comparisons").at(0);
  EXPECT_EQ(comparison.at("baseline"), "base");
  EXPECT_EQ(comparison.at("candidate"), "double");
  EXPECT_EQ(comparison.at("ratio_of"), "candidate/baseline");
  EXPECT_EQ(comparison.at("verdict"), "SLOWER") << comparison.dump();
  EXPECT_GT(comparison.at("ratio").get<double>(), 1.0);
  EXPECT_GT(comparison.at("ci").at(0).get<double>(), 1.0);
  EXPECT_NE(comparison.at("rule").get<std::string>().find("SLOWER: the 95% CI of "
                                                          "candidate/baseline"),
            std::string::npos)
      << comparison.at("rule");
  const Json& slower = finding(run, "bench.squares.slower");
  EXPECT_EQ(slower.at("severity"), "warn");
  EXPECT_EQ(slower.at("where").at("path"), "double vs base");
  EXPECT_EQ(slower.at("claim").get<std::string>().rfind("double is ", 0), 0u) << slower.dump();
  EXPECT_NE(slower.at("claim").get<std::string>().find(" slower than base ("), std::string::npos)
      << slower.dump();
  EXPECT_NE(slower.at("claim").get<std::string>().find("ratios double/base "), std::string::npos)
      << slower.dump();
  const Json& metrics = slower.at("evidence").at("metrics");
  EXPECT_GT(metrics.at("ratio").get<double>(), 1.0);
  EXPECT_GT(metrics.at("ci_low").get<double>(), 1.0);
  EXPECT_GT(metrics.at("median_b_s").get<double>(), metrics.at("median_a_s").get<double>());
  EXPECT_EQ(finding_ids(run).count("bench.squares.faster"), 0u) << run.out;
}

TEST_F(ProbeCliTest, BenchComparesVariantsFromRawSamples) {
  const CliRun run = run_bench("squares", "0.5");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json& data = run.envelope.at("data");
  EXPECT_TRUE(data.at("summaries").contains("base"));
  EXPECT_TRUE(data.at("summaries").contains("double"));
  EXPECT_GT(data.at("summaries").at("base").at("bytes_per_s").get<double>(), 0.0);
  ASSERT_EQ(data.at("comparisons").size(), 1u);
  EXPECT_EQ(data.at("comparisons")[0].at("baseline"), "base");
  EXPECT_EQ(data.at("comparisons")[0].at("candidate"), "double");
  ASSERT_EQ(run.envelope.at("findings").size(), 1u);
  EXPECT_EQ(run.envelope.at("findings")[0].at("id").get<std::string>().rfind("bench.squares.", 0),
            0u);
  const fs::path dir = fs::path(data.at("observation").get<std::string>()).parent_path();
  std::ifstream in(dir / "samples.json");
  const Json samples = Json::parse(in);
  EXPECT_EQ(samples.at("variants").size(), 2u);
  EXPECT_EQ(samples.at("variants")[0].at("samples").size(),
            data.at("summaries").at("base").at("n").get<size_t>());
  // Each verified call of a batch of many calls carries the accessor timed on 4 other calls of
  // its batch, which guard.deferred_output judges with it (an honest squares accessor costs 2-80
  // us from call to call; the least of 2-3 verified calls failed it in ~1 run of 20).
  std::ifstream observation_in(data.at("observation").get<std::string>());
  const Json observation = Json::parse(observation_in);
  ASSERT_GT(observation.at("bench").at("calls_per_sample").get<int64_t>(), 4);
  ASSERT_FALSE(observation.at("bench").at("verified").empty());
  for (const Json& verified : observation.at("bench").at("verified")) {
    ASSERT_EQ(verified.at("accessor_probes").size(), 4u) << verified.dump();
    for (const Json& probe : verified.at("accessor_probes")) {
      EXPECT_GT(probe.at("accessor_s").get<double>(), 0.0);
      EXPECT_GT(probe.at("accessor_cpu_s").get<double>(), 0.0);
      EXPECT_GT(probe.at("copy_s").get<double>(), 0.0);
    }
  }
}

TEST_F(ProbeCliTest, BenchThreadLeftRunningIsCaught) {
  const CliRun run = run_bench("thread_leak", "0.3");
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_TRUE(finding_ids(run).count("bench.thread_leak.guard.thread_count")) << run.out;
}

TEST_F(ProbeCliTest, BenchReplayingCachedResultsIsCaughtByVerification) {
  const CliRun run = loupe({"probe", "run", "stale", "--seed", "3", "--budget", "0.3", "--json"},
                           BENCH_SUBJECT, {test_support::kAllowAddressReuse});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_TRUE(finding_ids(run).count("bench.stale.guard.verify_mismatch")) << run.out;
}

// The bench section of the observation a run wrote.
Json bench_section(const CliRun& run) {
  std::ifstream in(run.envelope.at("data").at("observation").get<std::string>());
  return Json::parse(in).at("bench");
}

// variant -> how many of its timed calls were verified.
std::map<std::string, int> verified_per_variant(const Json& bench) {
  std::map<std::string, int> counts;
  for (const auto& entry : bench.at("verified")) ++counts[entry.at("variant").get<std::string>()];
  return counts;
}

TEST_F(ProbeCliTest, ALaterRoundSkipsWhatRoundZeroMeasuredOnceAndStillVerifiesEveryVariant) {
  // Round 0 (no --round): the content-cache replays of both variants, the roofline (the bench
  // declares bytes and flops), two verified timed calls per variant at least.
  // (Exit 1 allowed: under load guard.timing fails an honest sample now and then, in any round;
  // what this test holds is which measurements each round makes.)
  const CliRun first = run_bench("squares", "0.3");
  ASSERT_TRUE(first.exit_code == 0 || first.exit_code == 1) << first.out << first.err;
  const Json zero = bench_section(first);
  EXPECT_EQ(zero.at("round"), 0);
  EXPECT_EQ(first.envelope.at("data").at("round"), 0);
  EXPECT_EQ(zero.at("replays").size(), 2u);
  EXPECT_TRUE(zero.at("roofline").is_object());
  for (const auto& [variant, count] : verified_per_variant(zero)) EXPECT_GE(count, 2) << variant;
  EXPECT_EQ(verified_per_variant(zero).size(), 2u);

  // Round 2: no replays, no roofline; every variant still has a timed call verified against its
  // untimed run (and the second against the first variant's), on round 2's own inputs.
  const CliRun later =
      loupe({"probe", "run", "squares", "--seed", "3", "--budget", "0.3", "--round", "2", "--json"},
            BENCH_SUBJECT);
  ASSERT_TRUE(later.exit_code == 0 || later.exit_code == 1) << later.out << later.err;
  for (const std::string& id : finding_ids(later)) {
    EXPECT_EQ(id.find("verify"), std::string::npos) << id;  // every verified call matched
  }
  const Json two = bench_section(later);
  EXPECT_EQ(two.at("round"), 2);
  EXPECT_EQ(later.envelope.at("data").at("round"), 2);
  EXPECT_TRUE(two.at("replays").empty());
  EXPECT_TRUE(two.at("roofline").is_null());
  std::set<std::string> phases;
  for (const auto& [phase, seconds] : two.at("phases_s").items()) phases.insert(phase);
  EXPECT_EQ(phases, (std::set<std::string>{"start", "warmup", "sampling", "replays",
                                           "verify_after_sampling", "roofline", "end"}));
  const auto counts = verified_per_variant(two);
  ASSERT_EQ(counts.size(), 2u);
  for (const auto& [variant, count] : counts) EXPECT_GE(count, 1) << variant;
  for (const auto& entry : two.at("verified")) {
    if (entry.at("variant") == "double") EXPECT_TRUE(entry.contains("reference"));
    for (const auto& earlier : zero.at("verified")) EXPECT_NE(entry.at("seed"), earlier.at("seed"));
  }
  EXPECT_GT(later.envelope.at("data").at("summaries").at("base").at("n").get<int64_t>(), 0);
  EXPECT_EQ(later.envelope.at("data").at("comparisons").size(), 1u);
}

TEST_F(ProbeCliTest, ALaterRoundStillCatchesAnAddressCacheByVerification) {
  const CliRun run =
      loupe({"probe", "run", "stale", "--seed", "3", "--budget", "0.3", "--round", "1", "--json"},
            BENCH_SUBJECT, {test_support::kAllowAddressReuse});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  // By verification of its last timed batch, which holds reused addresses (seed 3 puts the forced
  // verification on the round's first batch, where the cache has yet to replay anything: until
  // session 6 only the cold first accessor flagged it, as guard.deferred_output).
  EXPECT_TRUE(finding_ids(run).count("bench.stale.guard.verify_mismatch")) << run.out;
}

TEST_F(ProbeCliTest, RoundIsABenchOption) {
  const CliRun run = run_check("sum_correct", {"--round", "1"});
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.out.find("--round: probe 'sum_correct' is a check; expected a bench"),
            std::string::npos)
      << run.out;
}

// The variant names of samples.json, in its order (one entry per variant's process).
std::vector<std::string> sampled_variants(const CliRun& run) {
  std::ifstream in(
      fs::path(run.envelope.at("data").at("observation").get<std::string>()).parent_path() /
      "samples.json");
  const Json samples = Json::parse(in);
  std::vector<std::string> names;
  for (const auto& variant : samples.at("variants")) names.push_back(variant.at("name"));
  return names;
}

// Issues 36/38: a bench of three variants asked for two runs those two alone, in the order asked
// (the first is the baseline), one process each.
TEST_F(ProbeCliTest, VariantsRunsOnlyTheNamedVariantsInTheirOrder) {
  const CliRun all = run_bench("trio", "0.3");
  ASSERT_TRUE(all.exit_code == 0 || all.exit_code == 1) << all.out << all.err;
  EXPECT_EQ(sampled_variants(all), (std::vector<std::string>{"one", "two", "three"}));

  const CliRun two = loupe({"probe", "run", "trio", "--seed", "3", "--budget", "0.3", "--variants",
                            "three,one", "--json"},
                           BENCH_SUBJECT);
  // (Exit 1 allowed: under load guard.timing fails an honest sample now and then.)
  ASSERT_TRUE(two.exit_code == 0 || two.exit_code == 1) << two.out << two.err;
  const Json bench = bench_section(two);
  EXPECT_EQ(bench.at("variants"), Json::array({"three", "one"}));
  EXPECT_EQ(sampled_variants(two), (std::vector<std::string>{"three", "one"}));
  std::ifstream in(
      fs::path(two.envelope.at("data").at("observation").get<std::string>()).parent_path() /
      "samples.json");
  const Json samples = Json::parse(in);
  ASSERT_EQ(samples.at("accounting").size(), 2u);  // two processes' records, no third
  for (const auto& order : samples.at("block_orders")) {
    EXPECT_EQ(std::set<int>(order.begin(), order.end()), (std::set<int>{0, 1})) << order.dump();
  }
  const Json& data = two.envelope.at("data");
  std::set<std::string> summarised;
  for (const auto& [name, summary] : data.at("summaries").items()) summarised.insert(name);
  EXPECT_EQ(summarised, (std::set<std::string>{"three", "one"}));
  ASSERT_EQ(data.at("comparisons").size(), 1u);
  EXPECT_EQ(data.at("comparisons")[0].at("baseline"), "three");
  EXPECT_EQ(data.at("comparisons")[0].at("candidate"), "one");
  const auto verified = verified_per_variant(bench);
  EXPECT_EQ(verified.size(), 2u);
  EXPECT_EQ(verified.count("two"), 0u);
  // The commands that reproduce the point ask for the same variants.
  size_t reproducible = 0;
  for (const auto& finding : two.envelope.at("findings")) {
    const std::string reproduce = finding.value("reproduce", std::string());
    if (reproduce.empty()) continue;
    ++reproducible;
    EXPECT_NE(reproduce.find(" --variants three,one -- "), std::string::npos) << reproduce;
  }
  EXPECT_GT(reproducible, 0u) << two.out;
}

TEST_F(ProbeCliTest, AnUnknownVariantExitsTwoNamingTheBenchTheNameAndItsVariants) {
  CliRun run = loupe({"probe", "run", "trio", "--seed", "3", "--budget", "0.3", "--variants",
                      "one,four", "--json"},
                     BENCH_SUBJECT);
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.out.find("--variants: bench 'trio' has no variant 'four'; its variants are: one, "
                         "two, three"),
            std::string::npos)
      << run.out;

  run = loupe({"probe", "run", "trio", "--variants", "one,,two", "--json"}, BENCH_SUBJECT);
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.out.find("variants: name 2 is ''"), std::string::npos) << run.out;

  run = loupe({"probe", "run", "trio", "--variants", "one,one", "--json"}, BENCH_SUBJECT);
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.out.find("variants: 'one' is named twice"), std::string::npos) << run.out;

  run = run_check("sum_correct", {"--variants", "a,b"});
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_NE(run.out.find("--variants: probe 'sum_correct' is a check; expected a bench"),
            std::string::npos)
      << run.out;
}

// A Slurm task runs its point from the layer's points.json through `loupe executor-task`: the
// point's `variants` reach the subject there too.
TEST_F(ProbeCliTest, ABatchTasksPointCarriesItsVariantsToTheSubject) {
  const fs::path spec = home_ / "spec";
  fs::create_directories(spec);
  Json point = Json::object();
  point["probe"] = "trio";
  point["sets"] = Json::array();
  point["seed"] = 3;
  point["timeout_s"] = 120.0;
  point["memory_limit_bytes"] = 0;
  point["home"] = home_.string();
  point["staging_id"] = "task/.staging";
  point["subject"] = Json::array({BENCH_SUBJECT});
  point["layer"] = "bench";
  point["tolerances"] = Json::array();
  point["threshold"] = 0.02;
  point["budget_s"] = 0.3;
  point["variants"] = Json::array({"two", "three"});
  {
    std::ofstream out(spec / "points.json");
    out << Json::array({point}).dump() << "\n";
  }
  ProcessSpec task;
  task.argv = {LOUPE_EXECUTABLE, "executor-task", spec.string(), "0"};
  task.timeout = std::chrono::seconds(120);
  const CliRun run = test_support::run_cli(task);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  std::ifstream result_in(spec / "result-0.json");
  const Json result = Json::parse(result_in);
  ASSERT_TRUE(result.at("ok").get<bool>()) << result.dump();
  std::ifstream in(fs::path(result.at("observation_dir").get<std::string>()) / "observation.json");
  EXPECT_EQ(Json::parse(in).at("bench").at("variants"), Json::array({"two", "three"}));
}

// A subject built against a libloupe from before --variants (a baseline or bisect build of an
// older commit) lists no selects_variants and would refuse the option: every variant runs, as it
// did, and a warn finding says so.
TEST_F(ProbeCliTest, ASubjectWithoutVariantSelectionRunsEveryVariantAndSaysSo) {
  // Beside the home, not in it: the sandbox hides loupe's home from the subject.
  const fs::path folder = home_.string() + ".subject";
  struct Cleanup {
    fs::path path;
    ~Cleanup() { fs::remove_all(path); }
  } cleanup{folder};
  fs::create_directories(folder);
  const fs::path script = folder / "older_runtime.sh";
  {
    std::ofstream out(script);
    // The subject's path is the wrapper's first argument: the sandbox binds a /tmp folder only
    // where the command names it (a build in a clone under /tmp).
    out << "#!/bin/sh\nsubject=\"$1\"\nshift\nif [ \"$1\" = list ]; then\n"
           "  \"$subject\" \"$@\" | sed 's/,\"selects_variants\":true//g'\nelse\n"
           "  for word in \"$@\"; do [ \"$word\" = --variants ] && exit 9; done\n"
           "  exec \"$subject\" \"$@\"\nfi\n";
  }
  fs::permissions(script, fs::perms::owner_all);
  const CliRun run = loupe({"probe", "run", "trio", "--seed", "3", "--budget", "0.3", "--variants",
                            "three,one", "--json"},
                           script.string(), {}, {BENCH_SUBJECT});
  ASSERT_TRUE(run.exit_code == 0 || run.exit_code == 1) << run.out << run.err;
  EXPECT_EQ(bench_section(run).at("variants"), Json::array({"one", "two", "three"}));
  const Json& warning = finding(run, "bench.trio.variants_not_selected");
  EXPECT_EQ(warning.at("severity"), "warn");
  EXPECT_NE(warning.at("claim").get<std::string>().find("every variant the bench declares ran, "
                                                        "not only three,one"),
            std::string::npos)
      << warning.dump();
}

// The objective path: `loupe run` hands each [[bench]]'s `variants` to the subject, so its
// observation holds those alone.
TEST_F(ProbeCliTest, AnObjectivesBenchVariantsAreTheOnlyOnesItsSubjectRuns) {
  const fs::path objective = home_ / "trio.toml";
  {
    std::ofstream out(objective);
    out << "name = \"trio\"\n[subject]\ncommand = [\"" << BENCH_SUBJECT
        << "\"]\ntimeout_s = 120\n\n"
           "[[bench]]\nprobe = \"trio\"\nvariants = [\"two\", \"one\"]\nbudget_s = 0.3\n\n"
           "[[gate]]\nname = \"one_not_slower\"\nexpr = \"trio[one] not SLOWER than trio[two]\"\n";
  }
  ProcessSpec spec;
  spec.argv = {LOUPE_EXECUTABLE, "run", objective.string(), "--home", home_.string(), "--json"};
  spec.timeout = std::chrono::seconds(120);
  const CliRun run = test_support::run_cli(spec);
  ASSERT_TRUE(run.exit_code == 0 || run.exit_code == 1) << run.out << run.err;
  std::vector<Json> benches;
  for (const auto& file : fs::recursive_directory_iterator(home_ / "runs")) {
    if (file.path().filename() != "observation.json") continue;
    std::ifstream in(file.path());
    const Json observation = Json::parse(in);
    if (observation.contains("bench")) benches.push_back(observation.at("bench"));
  }
  ASSERT_EQ(benches.size(), 1u) << run.out;
  EXPECT_EQ(benches[0].at("variants"), Json::array({"two", "one"}));
}

// A variant's process holds the input sets of its last timed batch; a verification's untimed
// call drops them before it makes its own (a GPU body's input set was a fifth of an H100's
// memory, and an untimed call beside a held batch ran it out). held_inputs outputs how many
// input sets its process holds at each call: one per batch when timed, so one when untimed too.
TEST_F(ProbeCliTest, AnUntimedVerificationCallHoldsNoInputsBesidesItsOwn) {
  const CliRun run = run_bench("held_inputs", "0.3");
  ASSERT_TRUE(run.exit_code == 0 || run.exit_code == 1) << run.out << run.err;
  const Json bench = bench_section(run);
  ASSERT_EQ(bench.at("calls_per_sample"), 1) << "a 1.5 ms call: one input set per batch";
  EXPECT_FALSE(bench.at("verified").empty());
  EXPECT_FALSE(bench.at("warmup_verified").empty());
  for (const std::string& id : finding_ids(run)) {
    EXPECT_EQ(id.find("mismatch"), std::string::npos) << id << "\n" << run.out;
  }
}

TEST_F(ProbeCliTest, SkippedBenchCarriesItsReason) {
  const CliRun run = run_bench("needs_gpu", "0.3");
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_EQ(run.envelope.at("verdict"), "none");
  EXPECT_EQ(run.envelope.at("data").at("skipped"), "needs a GPU");
}

TEST_F(ProbeCliTest, ScenarioRecordsMetricsAndTrace) {
  const CliRun run =
      loupe({"probe", "run", "pipeline", "--set", "tokens=4000", "--json"}, BENCH_SUBJECT);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json& data = run.envelope.at("data");
  EXPECT_TRUE(data.at("metrics").contains("tokens_per_s"));
  EXPECT_TRUE(data.at("metrics").contains("wall_s"));
  EXPECT_EQ(data.at("traces"), Json::parse(R"(["trace.json"])"));
  EXPECT_EQ(finding_ids(run), std::set<std::string>{"scenario.pipeline.metrics"});
}

TEST_F(ProbeCliTest, SweepRunsEveryPointIntoOneRun) {
  const CliRun run =
      loupe({"probe", "run", "sum_correct", "--set", "N=256,1024", "--seed", "7", "--json"},
            CHECK_SUBJECT);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const Json& points = run.envelope.at("data").at("points");
  ASSERT_EQ(points.size(), 2u);
  EXPECT_EQ(points[0].at("params").at("N"), 256);
  EXPECT_EQ(points[1].at("params").at("N"), 1024);
  EXPECT_EQ(points[0].at("run"), points[1].at("run"));
}

}  // namespace
}  // namespace loupe
