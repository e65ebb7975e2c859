#include "config/toml_reader.hpp"

#include <gtest/gtest.h>

#include "loupe/error.hpp"

namespace loupe::config {
namespace {

toml::table parse(std::string_view text) { return toml::parse(text, std::string("in.toml")); }

// Runs `body` and returns the error's message and hint; fails the test when nothing throws.
template <typename Body>
std::pair<std::string, std::string> failure_of(Body body) {
  try {
    body();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kConfig);
    return {error.what(), error.hint()};
  }
  ADD_FAILURE() << "expected an Error";
  return {};
}

TEST(TomlReader, TypeMismatchNamesFileLineKeyAndBothTypes) {
  const toml::table root = parse("a = 1\n[t]\nx = \"s\"\n");
  const TomlReader reader("in.toml", "see docs/x.md");
  const auto [message, hint] =
      failure_of([&] { reader.integer_of(*root["t"].as_table()->get("x"), "t.x"); });
  EXPECT_EQ(message, "in.toml:3: t.x: expected an integer, found a string");
  EXPECT_EQ(hint, "see docs/x.md");
}

TEST(TomlReader, MissingKeyNamesTheTableLine) {
  const toml::table root = parse("a = 1\n\n[t]\ny = 2\n");
  const TomlReader reader("in.toml", "h");
  const auto [message, hint] =
      failure_of([&] { reader.required(*root["t"].as_table(), "x", "t"); });
  EXPECT_EQ(message, "in.toml:3: t.x: missing; this key is required");
}

TEST(TomlReader, UnknownKeyIsTheFirstInFileOrder) {
  // toml++ iterates keys sorted ("aa" before "zz"); the report follows the file.
  const toml::table root = parse("zz = 1\nok = 2\naa = 3\n");
  const TomlReader reader("in.toml", "h");
  const auto [message, hint] = failure_of([&] { reader.allow_keys(root, "", {"ok"}); });
  EXPECT_EQ(message, "in.toml:1: zz: unknown key; expected one of ok");
}

TEST(TomlReader, SyntaxErrorsNameFileLineAndColumn) {
  const TomlReader reader("in.toml", "h");
  EXPECT_EQ(reader.parse("a = 1\n").size(), 1u);
  const auto [message, hint] = failure_of([&] { reader.parse("a = 1\nb = = 2\n"); });
  EXPECT_EQ(message.rfind("in.toml:2:5: TOML syntax: ", 0), 0u) << message;
  EXPECT_EQ(hint, "h");
}

TEST(TomlReader, OrderedKeepsWrittenOrder) {
  const toml::table root = parse("c = 1\na = 2\nb = { z = 1, y = 2 }\n");
  std::vector<std::string> keys;
  for (const auto& [key, node] : TomlReader::ordered(root)) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"c", "a", "b"}));
}

TEST(TomlReader, ScalarsNumbersAndStrings) {
  const toml::table root = parse(
      "i = 3\nf = 2.5\ns = \"x\"\nb = true\nl = [\"p\", \"q\"]\nbad = [\"p\", 1]\nw = \"  \"\n");
  const TomlReader reader("in.toml", "h");
  EXPECT_EQ(reader.number_of(*root.get("i"), "i"), 3.0);
  EXPECT_EQ(reader.number_of(*root.get("f"), "f"), 2.5);
  EXPECT_EQ(reader.scalar_of(*root.get("s"), "s"), Value(std::string("x")));
  EXPECT_EQ(reader.scalar_of(*root.get("b"), "b"), Value(true));
  EXPECT_EQ(reader.optional_strings(root, "l", ""), (std::vector<std::string>{"p", "q"}));
  EXPECT_TRUE(reader.optional_strings(root, "absent", "").empty());
  EXPECT_EQ(reader.optional_string(root, "absent", ""), std::nullopt);
  EXPECT_EQ(failure_of([&] { reader.optional_strings(root, "bad", ""); }).first,
            "in.toml:6: bad[1]: expected a string, found an integer");
  EXPECT_EQ(failure_of([&] { reader.required_text(root, "w", ""); }).first,
            "in.toml:7: w: expected a non-empty string");
  EXPECT_EQ(failure_of([&] { reader.scalar_of(*root.get("l"), "l"); }).first,
            "in.toml:5: l: expected an integer, a float, a string or a boolean, found an array");
}

TEST(Paths, ChildIndexedJoin) {
  EXPECT_EQ(child("", "a"), "a");
  EXPECT_EQ(child("bench[2]", "params"), "bench[2].params");
  EXPECT_EQ(indexed("bench", 2), "bench[2]");
  EXPECT_EQ(join({}), "(none)");
  EXPECT_EQ(join({}, ""), "");
  EXPECT_EQ(join({"a", "b"}), "a, b");
}

}  // namespace
}  // namespace loupe::config
