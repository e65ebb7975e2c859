// `loupe run` end to end on examples/python-subject/loupe.toml: subject.py (numpy, its probes
// declared with the Python package's decorators, python/loupe/probe.py) writes observation.json,
// .npy tensors, samples.json and a Chrome JSON trace, and loupe decides from those files exactly as
// for a C++ subject. The shipped configuration (fp16 sum of squares, a per-row kernel, batches in
// arrival order) fails its three gates, each with the finding that localises it; the fixed one
// passes all. About 10 s.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "core/process.hpp"
#include "support/cli_run.hpp"

namespace loupe {
namespace {

namespace fs = std::filesystem;

const fs::path kObjective = fs::path(LOUPE_SOURCE_DIR) / "examples/python-subject/loupe.toml";

using test_support::CliRun;
using test_support::run_loupe;

// Why the test cannot run here, or empty: the objective's interpreter must import numpy and
// the package `loupe` where the objective's PYTHONPATH points (build/release/python).
std::string python_missing() {
  if (!fs::exists("/usr/bin/python3")) return "/usr/bin/python3 is absent";
  ProcessSpec spec;
  spec.argv = {"/usr/bin/python3", "-c", "import numpy"};
  spec.timeout = std::chrono::seconds(60);
  if (!run_process(spec).succeeded())
    return "/usr/bin/python3 cannot import numpy (apt-get install python3-numpy)";
  spec.argv = {"/usr/bin/python3", "-c", "import loupe"};
  spec.extra_env = {{"PYTHONPATH", (fs::path(LOUPE_SOURCE_DIR) / "build/release/python").string()}};
  if (!run_process(spec).succeeded())
    return "the Python package is not built in build/release/python (LOUPE_BUILD_PYTHON)";
  return "";
}

std::map<std::string, std::string> gate_verdicts(const Json& gates) {
  std::map<std::string, std::string> out;
  for (const auto& gate : gates) out[gate.at("name")] = gate.at("verdict");
  return out;
}

const Json& gate_named(const Json& gates, const std::string& name) {
  for (const auto& gate : gates) {
    if (gate.at("name") == name) return gate;
  }
  ADD_FAILURE() << "no gate " << name;
  static const Json kNone = Json::object();
  return kNone;
}

std::set<std::string> finding_ids(const Json& gate) {
  std::set<std::string> ids;
  for (const auto& finding : gate.at("findings")) ids.insert(finding.at("id"));
  return ids;
}

class PythonSubjectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string missing = python_missing();
    if (!missing.empty()) GTEST_SKIP() << "skipped: " << missing;
    home_ = fs::temp_directory_path() /
            ("loupe_python_subject_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(home_);
  }
  void TearDown() override { fs::remove_all(home_); }

  CliRun run(const std::string& config) const {
    return run_loupe(
        {"run", kObjective.string(), "--config", config, "--home", home_.string(), "--json"});
  }

  fs::path home_;
};

TEST_F(PythonSubjectTest, ShippedFailsItsThreeGatesAndLocalisesEach) {
  const CliRun shipped = run("shipped");
  ASSERT_EQ(shipped.exit_code, 1) << shipped.out << shipped.err;
  EXPECT_EQ(shipped.envelope.at("verdict"), "fail");
  const Json& data = shipped.envelope.at("data");
  EXPECT_EQ(data.at("status"), "completed");
  const Json& gates = data.at("gates");
  EXPECT_EQ(gate_verdicts(gates),
            (std::map<std::string, std::string>{{"rmsnorm_matches_reference", "fail"},
                                                {"norm_kernel_not_slower", "fail"},
                                                {"padding_within_30pct", "fail"}}));
  // 1 check, 2 bench points, 1 scenario.
  EXPECT_EQ(data.at("tasks").size(), 4u);

  // The fp16 sum of squares overflows on the massive activations of tokens 0 and 46: the error
  // is concentrated in the first rows, and the worst coordinate is one of those tokens.
  const Json& check_gate = gate_named(gates, "rmsnorm_matches_reference");
  EXPECT_TRUE(finding_ids(check_gate).count("check.rmsnorm.mismatch")) << check_gate.dump();
  for (const auto& finding : check_gate.at("findings")) {
    if (finding.at("id") != "check.rmsnorm.mismatch") continue;
    EXPECT_EQ(finding.at("where").at("params").at("accumulate"), "fp16");
    EXPECT_EQ(finding.at("where").at("coords").at("T"), 46) << finding.dump();
    EXPECT_NE(finding.at("claim").get<std::string>().find("concentrated along T in [0, 48)"),
              std::string::npos)
        << finding.dump();
  }
  EXPECT_GT(check_gate.at("statistics").at("estimate").get<double>(), 1e-2);

  // The configured kernel (rowwise) is SLOWER than the vectorised one at both sizes.
  const Json& bench_gate = gate_named(gates, "norm_kernel_not_slower");
  EXPECT_TRUE(finding_ids(bench_gate).count("bench.rmsnorm_speed.slower")) << bench_gate.dump();

  // The padding gate reads a scenario metric: its finding carries the trace subject.py wrote.
  const Json& padding_gate = gate_named(gates, "padding_within_30pct");
  EXPECT_NEAR(padding_gate.at("statistics").at("estimate").get<double>(), 0.4452, 1e-4);
  EXPECT_TRUE(finding_ids(padding_gate).count("trace.breakdown.top")) << padding_gate.dump();

  // budget_s = 0.5 in the objective reached the subject's sampler.
  size_t benches = 0;
  for (const auto& task : data.at("tasks")) {
    if (task.at("layer") != "bench") continue;
    ++benches;
    std::ifstream in(fs::path(task.at("observation").get<std::string>()) / "observation.json");
    const Json observation = Json::parse(in);
    EXPECT_EQ(observation.at("bench").at("budget_s"), 0.5);
    EXPECT_EQ(observation.at("subject"), "subject.py");
  }
  EXPECT_EQ(benches, 2u);
}

TEST_F(PythonSubjectTest, FixedPassesEveryGate) {
  const CliRun fixed = run("fixed");
  ASSERT_EQ(fixed.exit_code, 0) << fixed.out << fixed.err;
  EXPECT_EQ(fixed.envelope.at("verdict"), "pass");
  const Json& gates = fixed.envelope.at("data").at("gates");
  EXPECT_EQ(gate_verdicts(gates),
            (std::map<std::string, std::string>{{"rmsnorm_matches_reference", "pass"},
                                                {"norm_kernel_not_slower", "pass"},
                                                {"padding_within_30pct", "pass"}}));
  EXPECT_NEAR(
      gate_named(gates, "padding_within_30pct").at("statistics").at("estimate").get<double>(),
      0.2122, 1e-4);
}

TEST_F(PythonSubjectTest, BadParameterFromTheSubjectIsExit2) {
  const CliRun run = run_loupe({"run", kObjective.string(), "--config", "fixed", "--set",
                                "accumulate=fp8", "--home", home_.string(), "--json"});
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_EQ(run.envelope.at("verdict"), "error");
  EXPECT_NE(run.envelope.at("error").at("message").get<std::string>().find(
                "parameter 'accumulate' = fp8 is not allowed; the allowed values are \"fp32\", "
                "\"fp16\""),
            std::string::npos)
      << run.out;
}

}  // namespace
}  // namespace loupe
