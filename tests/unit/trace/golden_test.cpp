// Golden diff tests (STYLE.md item 12): each folder under tests/golden/trace holds an input trace,
// a request (request.txt) and the expected output (expected.json). The test runs the request
// through the library and compares the output byte for byte. To accept a reviewed change, run
// with LOUPE_UPDATE_GOLDEN=1 and inspect the diff of expected.json.
//
// request.txt, one directive a line:
//   command analyze|diff|export     input FILE (repeatable; diff takes two)
//   class NAME=SELECTOR             overlap A,B       window CLASS
//   gap_threshold_ns N              detail
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json.hpp"
#include "trace/analyze/analyze.hpp"
#include "trace/export/chrome_export.hpp"
#include "trace/import/import.hpp"

namespace loupe::trace {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// File paths in the output are reduced to their names so the goldens do not depend on the
// checkout's location.
void strip_paths(Json& files) {
  for (Json& file : files)
    file["path"] = fs::path(file["path"].get<std::string>()).filename().string();
}

std::string run_request(const fs::path& dir) {
  std::ifstream request_file(dir / "request.txt");
  std::string line, command = "analyze";
  std::vector<std::string> inputs;
  AnalyzeRequest request;
  while (std::getline(request_file, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.find(' ');
    const std::string key = line.substr(0, space);
    const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
    if (key == "command") command = value;
    if (key == "input") inputs.push_back((dir / value).string());
    if (key == "class") request.classes.push_back(parse_class(value));
    if (key == "overlap") {
      const size_t comma = value.find(',');
      request.overlap = std::make_pair(value.substr(0, comma), value.substr(comma + 1));
    }
    if (key == "window") request.window_class = value;
    if (key == "gap_threshold_ns") request.gap_threshold_ns = std::stoll(value);
    if (key == "detail") request.detail = true;
  }
  if (command == "export") {
    std::ostringstream out;
    write_chrome_json(load_traces(inputs), out);
    return out.str();
  }
  Json json;
  if (command == "diff") {
    EXPECT_EQ(inputs.size(), 2u);
    json = envelope_to_json(diff(load_traces({inputs[0]}), load_traces({inputs[1]}), request));
    strip_paths(json["data"]["a"]["files"]);
    strip_paths(json["data"]["b"]["files"]);
  } else {
    json = envelope_to_json(analyze(load_traces(inputs), request));
    strip_paths(json["data"]["files"]);
  }
  return json.dump(2) + "\n";
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, MatchesExpected) {
  const fs::path dir = fs::path(LOUPE_TRACE_GOLDEN_DIR) / GetParam();
  const std::string actual = run_request(dir);
  const fs::path expected_path = dir / "expected.json";
  if (std::getenv("LOUPE_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(expected_path, std::ios::binary) << actual;
  }
  ASSERT_TRUE(fs::exists(expected_path)) << expected_path;
  EXPECT_EQ(actual, read_text(expected_path))
      << "golden " << GetParam() << " changed; review, then LOUPE_UPDATE_GOLDEN=1";
}

std::vector<std::string> golden_cases() {
  std::vector<std::string> cases;
  for (const auto& entry : fs::directory_iterator(LOUPE_TRACE_GOLDEN_DIR)) {
    if (entry.is_directory() && fs::exists(entry.path() / "request.txt")) {
      cases.push_back(entry.path().filename().string());
    }
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Trace, Golden, ::testing::ValuesIn(golden_cases()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace loupe::trace
