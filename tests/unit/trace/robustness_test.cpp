// Real files break the rules: every prefix of a valid trace is read (with repairs counted) or
// refused with loupe::Error — never a crash or another exception.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "loupe/error.hpp"
#include "trace/import/import.hpp"

namespace loupe::trace {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

TEST(Robustness, EveryPrefixOfAChromeTraceIsReadOrRefused) {
  const std::string text =
      read_file(fs::path(LOUPE_TRACE_GOLDEN_DIR) / "kineto_overlap_gaps" / "input.json");
  ASSERT_GT(text.size(), 1000u);
  size_t read = 0, refused = 0;
  for (size_t length = 1; length <= text.size(); ++length) {
    std::string prefix = text.substr(0, length);
    Model model;
    ModelBuilder builder(model);
    try {
      import_chrome_json(prefix, "prefix.json", builder, 0);
      builder.finish();
      ++read;
      if (length < text.size() - 4) {
        EXPECT_EQ(model.stats.count(Stat::trace_json_truncated), 1) << "length " << length;
      }
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInput);
      ++refused;
    }
  }
  EXPECT_GT(read, text.size() / 2);
}

TEST(Robustness, EveryPrefixOfABinaryTraceIsReadOrRefused) {
  const std::string bytes =
      read_file(fs::path(LOUPE_TRACE_GOLDEN_DIR) / "locks_binary" / "input.loupetrace");
  ASSERT_GT(bytes.size(), 500u);
  for (size_t length = 0; length < bytes.size(); ++length) {
    Model model;
    ModelBuilder builder(model);
    EXPECT_THROW(
        import_loupe_binary(std::string_view(bytes).substr(0, length), "prefix", builder, 0), Error)
        << "length " << length;
  }
  Model model;
  ModelBuilder builder(model);
  import_loupe_binary(bytes, "whole", builder, 0);
  builder.finish();
  EXPECT_EQ(model.slices.size(), 4u);
}

TEST(Robustness, CorruptedBytesNeverCrashTheJsonReader) {
  const std::string text =
      read_file(fs::path(LOUPE_TRACE_GOLDEN_DIR) / "chrome_corner_cases" / "input.json");
  // Overwrite each position with bytes that break structure, strings or encoding.
  for (char replacement : {'\0', '"', '{', ']', '\xC3', '\\'}) {
    for (size_t position = 0; position < text.size(); position += 3) {
      std::string broken = text;
      broken[position] = replacement;
      Model model;
      ModelBuilder builder(model);
      try {
        import_chrome_json(broken, "broken.json", builder, 0);
        builder.finish();
      } catch (const Error& error) {
        EXPECT_EQ(error.code(), ErrorCode::kInput);
      }
    }
  }
}

}  // namespace
}  // namespace loupe::trace
