// Golden diff tests (STYLE.md item 12) on the real ncu exports of tests/fixtures/ncu: each folder
// under tests/golden/counters holds a request and the exact envelope expected; plus the facts the
// issue asks for, asserted by name so a regenerated golden cannot quietly lose them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json.hpp"
#include "counters/envelope.hpp"

namespace loupe::counters {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = LOUPE_NCU_FIXTURES;
const fs::path kGolden = LOUPE_COUNTERS_GOLDEN_DIR;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The fixture folder's absolute path becomes FIXTURES/ so goldens do not depend on the checkout.
void relative_paths(Json& json) {
  if (json.is_string()) {
    std::string text = json.get<std::string>();
    const std::string prefix = kFixtures.string() + "/";
    for (size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix))
      text.replace(at, prefix.size(), "FIXTURES/");
    json = text;
  } else if (json.is_structured()) {
    for (auto& item : json) relative_paths(item);
  }
}

struct Request {
  std::string command = "analyze";
  std::vector<std::string> inputs;
  AnalyzeOptions options;
  std::string kernel_a, kernel_b;
};

Request read_request(const fs::path& dir) {
  Request request;
  std::ifstream file(dir / "request.txt");
  std::string line;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.find(' ');
    const std::string key = line.substr(0, space);
    const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
    if (key == "command") request.command = value;
    if (key == "input") request.inputs.push_back((kFixtures / value).string());
    if (key == "kernel") {
      request.options.kernel_filter = Pattern::compile(value, "--kernel");
      request.options.kernel_pattern = value;
    }
    if (key == "kernel_a") request.kernel_a = value;
    if (key == "kernel_b") request.kernel_b = value;
    if (key == "bytes") request.options.declared.push_back(parse_declared_bytes(value));
    if (key == "detail") request.options.detail = true;
  }
  return request;
}

Json run_request(const Request& request) {
  StatsRegistry stats;
  const Profile profile = load_profile(request.inputs, stats);
  Json json;
  if (request.command == "diff") {
    const DiffSide a{"A", pick_group(profile, request.kernel_a, "--kernel-a", "A")};
    const DiffSide b{"B", pick_group(profile, request.kernel_b, "--kernel-b", "B")};
    json = envelope_to_json(comparison_envelope(a, b, compare(a, b, ""), stats));
  } else {
    json = envelope_to_json(analysis_envelope(profile, analyze(profile, request.options), stats));
  }
  relative_paths(json);
  return json;
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, MatchesExpected) {
  const fs::path dir = kGolden / GetParam();
  const std::string actual = run_request(read_request(dir)).dump(2) + "\n";
  const fs::path expected_file = dir / "expected.json";
  if (std::getenv("LOUPE_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(expected_file, std::ios::binary) << actual;
    GTEST_SKIP() << "updated " << expected_file;
  }
  EXPECT_EQ(actual, read_text(expected_file)) << "golden " << GetParam() << " differs";
}

INSTANTIATE_TEST_SUITE_P(Counters, Golden,
                         ::testing::Values("decode_details", "decode_both", "decode_diff",
                                           "merge_details"));

const Json* find(const Json& envelope, const std::string& id) {
  for (const Json& finding : envelope["findings"]) {
    if (finding["id"] == id) return &finding;
  }
  return nullptr;
}

double metric(const Json& finding, const std::string& name) {
  return finding["evidence"]["metrics"].at(name).get<double>();
}

Request decode_request() {
  Request request;
  request.inputs = {(kFixtures / "decode_details.csv.gz").string(),
                    (kFixtures / "decode_raw.csv.gz").string()};
  return request;
}

TEST(RealDecodeExports, BindingLimitOfEachKernel) {
  const Json envelope = run_request(decode_request());
  for (const std::string kernel : {"tiled_v_decode_kernel", "merged_v_decode_kernel"}) {
    const Json* bound = find(envelope, "counters." + kernel + ".bound");
    ASSERT_NE(bound, nullptr) << kernel;
    // B=1 decode: 128 (tiled) and 32 (merged) blocks on 132 SMs, no unit near its peak.
    EXPECT_NE(bound->at("claim").get<std::string>().find("is latency-bound"), std::string::npos)
        << bound->at("claim");
    EXPECT_LT(metric(*bound, "bound_pct"), 60.0);
  }
}

TEST(RealDecodeExports, OccupancyGapOfEachKernel) {
  const Json envelope = run_request(decode_request());
  for (const std::string kernel : {"tiled_v_decode_kernel", "merged_v_decode_kernel"}) {
    const Json* occupancy = find(envelope, "counters." + kernel + ".occupancy");
    ASSERT_NE(occupancy, nullptr) << kernel;
    EXPECT_DOUBLE_EQ(metric(*occupancy, "occupancy_theoretical_pct"), 25.0);
    EXPECT_GT(metric(*occupancy, "occupancy_gap_pct"), 10.0);
    EXPECT_NE(occupancy->at("claim").get<std::string>().find("set by registers"), std::string::npos)
        << occupancy->at("claim");
  }
}

TEST(RealDecodeExports, DiffLeadsWithInstructionsAndLoads) {
  Request request = decode_request();
  request.command = "diff";
  request.kernel_a = "tiled_v_decode";
  request.kernel_b = "merged_v_decode";
  const Json envelope = run_request(request);
  const Json& lead = envelope["findings"][0];
  EXPECT_EQ(lead["id"], "counters.diff.time");
  const std::string claim = lead["claim"];
  EXPECT_EQ(claim.rfind("tiled_v_decode_kernel (A) takes 1.1", 0), 0u) << claim;
  const size_t instructions = claim.find("the instructions");
  const size_t loads = claim.find("the load/store (LSU pipe) work");
  ASSERT_NE(instructions, std::string::npos) << claim;
  ASSERT_NE(loads, std::string::npos) << claim;
  EXPECT_LT(instructions, loads);  // the larger ratio first
  EXPECT_GT(metric(lead, "instructions_ratio"), 1.3);
  EXPECT_GT(metric(lead, "lsu_peak_sm_cycles_ratio"), 1.05);
  // The same DRAM traffic: the extra time is work, not bytes.
  EXPECT_NE(claim.find("(dram_bytes 1.0"), std::string::npos) << claim;
}

}  // namespace
}  // namespace loupe::counters
