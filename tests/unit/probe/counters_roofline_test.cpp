// The roofline guard on measured bytes (probe/counters_pass.hpp, apply_counters): with a device
// timer's ceiling in the observation, the DRAM bytes ncu measured replace the declared ones. The
// inputs are what a counters pass leaves in a point's folder (observation.json, counters/
// details.csv, raw.csv, pass.json), written by hand: no GPU, no ncu, no device timer needed.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "probe/counters_pass.hpp"
#include "support/scratch_dir.hpp"
#include "unit/counters/samples.hpp"

namespace loupe::probe {
namespace {

namespace fs = std::filesystem;
using namespace counters::samples;

const std::string kMerged = "void kda::cuda::merged_v_decode<128>(const float *, float *, int)";
constexpr double kDeclared = 1.6e7;  // bytes per call the bench declares
constexpr double kMedian = 1e-6;     // s per call of variant `double`
constexpr double kDeviceRate = 4e12;
constexpr double kMargin = 1.5;  // the device's rate × this is the most a call may imply

Json read_json(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return Json::parse(text.str());
}

class CountersRoofline : public ::testing::Test {
 protected:
  CountersRoofline() : dir_("counters-roofline") {}

  // A point whose bench declared kDeclared bytes per call and whose counters pass measured
  // `read_mbytes` DRAM bytes read per launch (one launch per call); `device` false: the ceiling
  // is this CPU's, not a device timer's.
  RunOutcome point(const std::string& read_mbytes, bool device = true) {
    const fs::path point_dir = dir_.path() / "point";
    fs::create_directories(point_dir / "counters");
    Json roofline = {{"read_bytes_per_s", kDeviceRate}, {"read_margin", kMargin}};
    if (device) roofline["device"] = "stand-in GPU";
    const Json observation = {{"params", {{"size", 4096}}},
                              {"bench",
                               {{"variants", {"base", "double"}},
                                {"bytes_per_call", kDeclared},
                                {"roofline", roofline}}}};
    std::ofstream(point_dir / "observation.json") << observation.dump(1);
    std::ofstream(point_dir / "counters" / "details.csv")
        << kDetailsHeader << launch_rows(0, kMerged);
    std::ofstream(point_dir / "counters" / "raw.csv")
        << raw_page({"dram__bytes_read.sum", "dram__bytes_write.sum"}, {"Mbyte", "byte"},
                    {{kMerged, {read_mbytes, "0"}}});
    std::ofstream(point_dir / "counters" / kCountersPassFile)
        << Json({{"variant", "double"}, {"report", "report.ncu-rep"}, {"ncu_argv", {"ncu"}}})
               .dump();

    RunOutcome outcome;
    outcome.observation_dir = point_dir;
    outcome.data = {{"kind", "bench"},
                    {"summaries",
                     {{"base", {{"median_s", 2 * kMedian}}}, {"double", {{"median_s", kMedian}}}}}};
    // The analysis's verdict on the declared bytes: 1.6e13 B/s, beyond 4e12 × 1.5.
    Finding declared;
    declared.id = "bench.squares.guard.roofline";
    declared.layer = Layer::kBench;
    declared.severity = Severity::kFail;
    declared.where.path = "double";
    declared.claim =
        "variant double claims 16000000 bytes per call in 1000 ns: 1.6e+13 B/s, 4x what the "
        "device (stand-in GPU) reaches (4e+12 B/s, measured next to it): the timed call cannot "
        "be doing that work";
    outcome.findings.push_back(declared);
    outcome.verdict = Verdict::kFail;
    outcome.exit_code = 1;
    return outcome;
  }

  static RunRequest request() {
    RunRequest request;
    request.probe = "squares";
    request.subject_command = {"/bin/bench_subject"};
    request.counters = CountersAttachment{"merged", 1};
    return request;
  }

  static const Finding* find(const RunOutcome& outcome, const std::string& id, Severity severity) {
    for (const auto& finding : outcome.findings) {
      if (finding.id == id && finding.severity == severity) return &finding;
    }
    return nullptr;
  }

  test_support::ScratchDir dir_;
};

TEST_F(CountersRoofline, MeasuredBytesWithinTheDeviceRateSupersedeTheDeclaredJudgement) {
  RunOutcome outcome = point("2");  // 2 MB per call: 2e12 B/s, under 4e12 × 1.5
  apply_counters(request(), outcome);
  const Finding* superseded = find(outcome, "bench.squares.guard.roofline", Severity::kInfo);
  ASSERT_NE(superseded, nullptr);
  EXPECT_EQ(superseded->claim.rfind("superseded by the measured DRAM bytes (2000000 per call, "
                                    "ncu): variant double claims 16000000 bytes per call",
                                    0),
            0u)
      << superseded->claim;
  EXPECT_EQ(find(outcome, "bench.squares.guard.roofline", Severity::kFail), nullptr);
  EXPECT_EQ(outcome.verdict, Verdict::kPass);
  EXPECT_EQ(outcome.exit_code, 0);
  const Json& roofline = outcome.data["counters"]["roofline"];
  EXPECT_DOUBLE_EQ(roofline["implied_bytes_per_s"].get<double>(), 2e12);
  EXPECT_DOUBLE_EQ(roofline["device_bytes_per_s"].get<double>(), kDeviceRate);
  EXPECT_DOUBLE_EQ(roofline["margin"].get<double>(), kMargin);
  // 2 MB measured against 16 MB declared: the declaration is off by more than 25 %.
  EXPECT_NE(find(outcome, "bench.squares.guard.bytes_ratio", Severity::kWarn), nullptr);
  // The observation keeps the findings as judged now.
  const Json observation = read_json(outcome.observation_dir / "observation.json");
  bool kept = false;
  for (const auto& finding : observation["findings"]) {
    kept =
        kept || (finding["id"] == "bench.squares.guard.roofline" && finding["severity"] == "info");
  }
  EXPECT_TRUE(kept);
}

TEST_F(CountersRoofline, MeasuredBytesBeyondTheDeviceRateFail) {
  RunOutcome outcome = point("20");  // 20 MB per call in 1 µs: 2e13 B/s, 5x the device
  apply_counters(request(), outcome);
  const Finding* fail = nullptr;
  for (const auto& finding : outcome.findings) {
    if (finding.id == "bench.squares.guard.roofline" && finding.severity == Severity::kFail &&
        finding.claim.find("measured by ncu") != std::string::npos) {
      fail = &finding;
    }
  }
  ASSERT_NE(fail, nullptr);
  EXPECT_EQ(fail->claim,
            "variant double moved 20000000 DRAM bytes per call (measured by ncu) in 1000 ns: "
            "20000000000000 B/s, 5x what the device (stand-in GPU) reaches (4000000000000 B/s): "
            "the timed call cannot be doing that work");
  EXPECT_EQ(fail->where.path, "double");
  double measured = 0;
  for (const auto& [name, value] : fail->evidence.metrics) {
    if (name == "measured_bytes_per_call") measured = value;
  }
  EXPECT_DOUBLE_EQ(measured, 2e7);
  // The declared judgement gave way to the measured one; the verdict stays a failure.
  EXPECT_NE(find(outcome, "bench.squares.guard.roofline", Severity::kInfo), nullptr);
  EXPECT_EQ(outcome.verdict, Verdict::kFail);
  EXPECT_EQ(outcome.exit_code, 1);
}

TEST_F(CountersRoofline, ACpuCeilingLeavesTheDeclaredJudgementAlone) {
  RunOutcome outcome = point("2", /*device=*/false);
  apply_counters(request(), outcome);
  EXPECT_NE(find(outcome, "bench.squares.guard.roofline", Severity::kFail), nullptr);
  EXPECT_EQ(find(outcome, "bench.squares.guard.roofline", Severity::kInfo), nullptr);
  EXPECT_FALSE(outcome.data["counters"].contains("roofline"));
  EXPECT_DOUBLE_EQ(outcome.data["counters"]["measured_dram_bytes_per_call"].get<double>(), 2e6);
  EXPECT_EQ(outcome.verdict, Verdict::kFail);
}

TEST_F(CountersRoofline, APointWithoutAPassIsLeftAsItWas) {
  RunOutcome outcome = point("2");
  fs::remove(outcome.observation_dir / "counters" / kCountersPassFile);
  const std::vector<Finding> before = outcome.findings;
  apply_counters(request(), outcome);
  EXPECT_EQ(outcome.findings, before);
  EXPECT_FALSE(outcome.data.contains("counters"));
  EXPECT_EQ(outcome.verdict, Verdict::kFail);
}

}  // namespace
}  // namespace loupe::probe
