// core/limits.hpp: the bounds checked before a library parser sees input, probe names, and
// whether a path lies under a folder (issue 17).
#include "core/limits.hpp"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "loupe/error.hpp"

namespace loupe {
namespace {

namespace fs = std::filesystem;

std::string json_error(const std::string& text, size_t depth = kMaxJsonDepth) {
  try {
    check_json_nesting(text, "in.json", depth);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    return error.message();
  }
  return "accepted";
}

std::string toml_error(const std::string& text) {
  try {
    check_toml_nesting(text, "in.toml");
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kConfig);
    return error.message();
  }
  return "accepted";
}

TEST(JsonNesting, CountsArraysAndObjectsOutsideStrings) {
  EXPECT_EQ(json_error("[[[]]]", 3), "accepted");
  EXPECT_EQ(json_error("{\"a\": [1, {\"b\": \"[[[[\\\"[[[[\"}]}", 3), "accepted");
  EXPECT_EQ(json_error("[\n [[[]]]]", 3),
            "in.json: offset 5 (line 2, column 4): JSON nested deeper than 3 levels; expected at "
            "most 3 nested arrays and objects");
  EXPECT_EQ(json_error(std::string(100000, '[')),
            "in.json: offset 128 (line 1, column 129): JSON nested deeper than 128 levels; "
            "expected at most 128 nested arrays and objects");
}

TEST(TomlNesting, CountsDottedKeyPartsAndNestedValuesOutsideStringsAndComments) {
  std::string parts = "a";
  for (int part = 1; part < 64; ++part) parts += ".a";
  EXPECT_EQ(toml_error("[" + parts + "]\nx = 1\n"), "accepted");  // 64 parts
  EXPECT_EQ(toml_error("[" + parts + ".a]\n"),
            "in.toml:1:129: a key with more than 64 dotted parts; expected at most 64");
  EXPECT_EQ(toml_error(parts + ".\"quoted\" = 1\n"),
            "in.toml:1:128: a key with more than 64 dotted parts; expected at most 64");
  // Dots in values, strings and comments are not key parts.
  EXPECT_EQ(toml_error("x = \"" + std::string(500, '.') + "\"\ny = 1.5 # " + std::string(500, '.') +
                       "\nz = '''\n" + std::string(500, '.') + "\n'''\n"),
            "accepted");
  EXPECT_EQ(toml_error("v = " + std::string(64, '[') + std::string(64, ']') + "\n"), "accepted");
  EXPECT_EQ(toml_error("v = " + std::string(65, '[') + std::string(65, ']') + "\n"),
            "in.toml:1:69: arrays and tables nested deeper than 64 levels; expected at most 64");
  EXPECT_EQ(toml_error("v = \"[[[[\"\nw = \"\"\"\n" + std::string(100, '{') + "\n\"\"\"\n"),
            "accepted");
}

TEST(ProbeNames, AreLettersDigitsUnderscoresAndDashes) {
  for (const char* name : {"cp_vs_nocp", "decode-gpu", "_private", "9lives", "a"}) {
    EXPECT_TRUE(is_probe_name(name)) << name;
  }
  for (const char* name : {"", "../x", "..", ".", "a/b", "-flag", "a b", "a.b", "ü"}) {
    EXPECT_FALSE(is_probe_name(name)) << name;
  }
  EXPECT_TRUE(is_probe_name(std::string(128, 'a')));
  EXPECT_FALSE(is_probe_name(std::string(129, 'a')));
  try {
    check_probe_name("cp/../../x", "loupe probe run");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(),
              "loupe probe run: probe name 'cp/../../x': character 3 is not allowed; expected 1 "
              "to 128 characters of A-Z a-z 0-9 _ -, the first a letter, digit or _");
  }
}

TEST(PathsUnderAFolder, FollowSymbolicLinksBeforeComparing) {
  const fs::path dir = fs::temp_directory_path() / ("loupe_limits_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "home" / "runs");
  fs::create_directories(dir / "outside");
  fs::create_directory_symlink(dir / "outside", dir / "home" / "runs" / "link");
  EXPECT_TRUE(is_within(dir / "home" / "runs" / "r1" / "p", dir / "home"));
  EXPECT_TRUE(is_within(dir / "home", dir / "home"));
  EXPECT_FALSE(is_within(dir / "home" / ".." / "outside", dir / "home"));
  EXPECT_FALSE(is_within(dir / "home" / "runs" / "link" / "p", dir / "home"));
  EXPECT_FALSE(is_within(dir / "homework", dir / "home"));
  try {
    check_under_home(dir / "home" / "runs" / "link" / "p", dir / "home", "the point's folder");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.message(), "the point's folder " + (dir / "home/runs/link/p").string() +
                                   " resolves to " + (fs::canonical(dir) / "outside/p").string() +
                                   ", outside the home " + (fs::canonical(dir) / "home").string() +
                                   "; expected a path under the home");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace loupe
