// Issue 17: inputs nested deep enough to overflow the stack inside a library parser (SIGSEGV,
// exit 139) before loupe's bounds existed. Each is built here at the size that crashed, read
// through the normal reader, and must be refused with a loupe::Error naming the input, the position
// and the limit. Small copies of each are fuzz seeds (fuzz/corpus/*/deep_*).
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/limits.hpp"
#include "gate/objective.hpp"
#include "ledger/exchange.hpp"
#include "loupe/error.hpp"
#include "loupe/tensor.hpp"
#include "trace/import/import.hpp"

namespace loupe {
namespace {

namespace fs = std::filesystem;

class DeepNesting : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("loupe_deep_nesting_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    const fs::path path = dir_ / name;
    std::ofstream out(path, std::ios::binary);
    out << bytes;
    return path.string();
  }

  fs::path dir_;
};

std::string repeated(const std::string& text, size_t count) {
  std::string out;
  out.reserve(text.size() * count);
  for (size_t index = 0; index < count; ++index) out += text;
  return out;
}

// The error's message, or a failure naming what was read without one.
template <class Read>
std::string error_of(Read read) {
  try {
    read();
  } catch (const Error& error) {
    return error.message();
  }
  ADD_FAILURE() << "read without an error";
  return {};
}

TEST_F(DeepNesting, Issue17NpyHeaderWithFiftyThousandParenthesesIsRefused) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + repeated("(", 50000) +
                       repeated(")", 50000) + ", }";
  while ((12 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes = "\x93NUMPY\x02";
  bytes += '\0';
  const uint32_t length = static_cast<uint32_t>(header.size());
  bytes.append(reinterpret_cast<const char*>(&length), 4);
  const std::string path = write("deep.npy", bytes + header);
  const std::string message = error_of([&] { (void)read_npy(path); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("header at offset 70"), std::string::npos) << message;
  EXPECT_NE(message.find("expected at most 8 nested tuples or lists"), std::string::npos)
      << message;
}

TEST_F(DeepNesting, Issue17SafetensorsHeaderNestedHundredThousandDeepIsRefused) {
  const std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"y":)" +
                             repeated("[", 100000) + repeated("]", 100000) + "}}";
  const uint64_t length = header.size();
  std::string bytes(reinterpret_cast<const char*>(&length), 8);
  const std::string path = write("deep.safetensors", bytes + header + std::string(4, '\0'));
  const std::string message = error_of([&] { (void)read_safetensors(path); });
  EXPECT_NE(message.find(path + ": header at offset 8"), std::string::npos) << message;
  // The bracket that opens level 129: the 127th '[' (two objects are open), offset 57 + 126 of
  // the header.
  EXPECT_NE(message.find(": offset 183 (line 1, column 184)"), std::string::npos) << message;
  EXPECT_NE(message.find("JSON nested deeper than 128 levels"), std::string::npos) << message;
}

TEST_F(DeepNesting, Issue17ChromeTraceNestedHundredThousandDeepIsReadWithoutRecursion) {
  // simdjson On-Demand never descends into what the importer does not read: a slice's deep args
  // are skipped, and a counter whose args are not an object of numbers is counted as malformed.
  const std::string deep = repeated("[", 100000) + repeated("]", 100000);
  const std::string path =
      write("deep.json",
            R"({"traceEvents":[{"ph":"X","name":"a","pid":1,"tid":1,"ts":0,"dur":1,"args":)" +
                deep + R"(},{"ph":"C","name":"c","pid":1,"tid":1,"ts":0,"args":)" + deep + "}]}");
  const trace::Model model = trace::load_traces({path});
  EXPECT_EQ(model.slices.size(), 1u);
  EXPECT_EQ(model.stats.count(Stat::trace_json_event_malformed), 1);
}

TEST_F(DeepNesting, Issue17JsonThatIsNotATraceIsRefused) {
  const std::string path = write("config.json", R"({"name": "a config", "values": [1, 2]})");
  const std::string message = error_of([&] { (void)trace::load_traces({path}); });
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("offset 0: a JSON object without a \"traceEvents\" array"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("expected a Chrome/Kineto trace"), std::string::npos) << message;
  const std::string numbers = write("numbers.json", "[1, 2, 3]");
  const std::string list = error_of([&] { (void)trace::load_traces({numbers}); });
  EXPECT_NE(list.find("offset 0: a list of values none of which is an event object"),
            std::string::npos)
      << list;
  // An empty trace is still a trace.
  EXPECT_NO_THROW((void)trace::load_traces({write("empty.json", "[]")}));
}

TEST_F(DeepNesting, Issue17LedgerExportNestedFiftyThousandDeepIsRefused) {
  const std::string text =
      R"({"loupe_ledger_export": 1, "run": )" + repeated("[", 50000) + repeated("]", 50000) + "}";
  const std::string message = error_of([&] { (void)ledger::import_run(text, "deep.json"); });
  // The bracket that opens level 129: the 128th '[' after the 34-byte prefix.
  EXPECT_EQ(message.rfind("deep.json: offset 161 (line 1, column 162): ", 0), 0u) << message;
  EXPECT_NE(message.find("expected at most 128 nested arrays and objects"), std::string::npos)
      << message;
}

TEST_F(DeepNesting, Issue17LedgerExportNestedTwentyThousandDeepInItsConfigIsRefused) {
  // 20,000 deep imported, and then broke `loupe report` when it read the config back.
  ledger::RunRecord run;
  run.id = "r20260101-000000-0000";
  run.status = ledger::RunStatus::kCompleted;
  run.started_at = "2026-01-01T00:00:00Z";
  run.config_json = "{}";
  std::string text = ledger::export_run(run);
  const std::string marker = "\"config\": {}";
  const size_t at = text.find(marker);
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, marker.size(),
               "\"config\": {\"deep\": " + repeated("[", 20000) + repeated("]", 20000) + "}");
  const std::string message = error_of([&] { (void)ledger::import_run(text, "config.json"); });
  EXPECT_EQ(message.rfind("config.json: offset ", 0), 0u) << message;
  EXPECT_NE(message.find("JSON nested deeper than 128 levels"), std::string::npos) << message;
}

TEST_F(DeepNesting, Issue17ObjectiveWithHundredThousandDottedHeaderPartsIsRefused) {
  std::string header = "[a";
  for (int part = 1; part < 100000; ++part) header += ".a";
  const std::string text = "name = \"deep\"\n" + header + "]\nb = 1\n";
  const std::string message = error_of([&] { (void)gate::parse_objective(text, "deep.toml"); });
  // The 64th dot, on line 2: column 2 + 2 * 63 + 1.
  EXPECT_EQ(message.rfind("deep.toml:2:" + std::to_string(2 + 2 * 63 + 1) + ": ", 0), 0u)
      << message;
  EXPECT_NE(message.find("a key with more than 64 dotted parts; expected at most 64"),
            std::string::npos)
      << message;
}

TEST_F(DeepNesting, Issue17ObjectiveWithDeepArraysIsRefused) {
  const std::string text =
      "name = \"deep\"\nv = " + repeated("[", 100000) + repeated("]", 100000) + "\n";
  const std::string message = error_of([&] { (void)gate::parse_objective(text, "deep.toml"); });
  EXPECT_EQ(message.rfind("deep.toml:2:", 0), 0u) << message;
  EXPECT_NE(message.find("nested deeper than 64 levels"), std::string::npos) << message;
}

}  // namespace
}  // namespace loupe
