// TomlReader: typed access to a parsed TOML tree that fails with file, line and key.
//
// The objective parser (src/gate/objective.cpp) and the skeleton library (src/skeleton) read
// TOML the same way: every value is fetched through one of these accessors, and every mistake
// becomes Error(kConfig) "FILE:LINE: KEY: expected WHAT, found TYPE" with the caller's hint
// (the document that lists the keys). Keys are named by their path ("bench[2].params.batch").
#pragma once

#include <toml++/toml.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loupe/value.hpp"

namespace loupe::config {

// "a string", "an integer", ... : the phrase a message uses for the node's type.
std::string type_phrase(const toml::node& node);
// "a, b, c"; `empty` when there are no words.
std::string join(const std::vector<std::string>& words, std::string_view empty = "(none)");
// "path.key" (or "key" at the root) and "path[index]".
std::string child(const std::string& path, std::string_view key);
std::string indexed(const std::string& path, size_t index);

class TomlReader {
 public:
  TomlReader(std::string file, std::string hint) : file_(std::move(file)), hint_(std::move(hint)) {}

  // The file's text as a TOML tree; a syntax error is "FILE:LINE:COLUMN: TOML syntax: ...".
  toml::table parse(std::string_view text) const;

  [[noreturn]] void fail(int line, const std::string& key, const std::string& message) const;
  [[noreturn]] void fail(const toml::node& node, const std::string& key,
                         const std::string& message) const;
  // "expected WHAT, found TYPE".
  [[noreturn]] void expected(const toml::node& node, const std::string& key,
                             const std::string& what) const;
  static int line_of(const toml::node& node);

  // The table's entries in the order they were written (toml++ keeps them sorted by key).
  static std::vector<std::pair<std::string, const toml::node*>> ordered(const toml::table& table);
  // Fails on the first key (in file order) that is not in `allowed`.
  void allow_keys(const toml::table& table, const std::string& path,
                  const std::vector<std::string>& allowed) const;

  const toml::table& table_of(const toml::node& node, const std::string& key) const;
  const toml::array& array_of(const toml::node& node, const std::string& key) const;
  const toml::node& required(const toml::table& table, std::string_view key,
                             const std::string& path) const;

  std::string string_of(const toml::node& node, const std::string& key) const;
  std::optional<std::string> optional_string(const toml::table& table, std::string_view key,
                                             const std::string& path) const;
  // A required string that is not only whitespace.
  std::string required_text(const toml::table& table, std::string_view key,
                            const std::string& path) const;
  double number_of(const toml::node& node, const std::string& key) const;
  int64_t integer_of(const toml::node& node, const std::string& key) const;
  // An integer, float, string or boolean.
  Value scalar_of(const toml::node& node, const std::string& key) const;
  // An array of strings at `node`.
  std::vector<std::string> strings_of(const toml::node& node, const std::string& key) const;
  // table[key] as an array of strings; empty when the key is absent.
  std::vector<std::string> optional_strings(const toml::table& table, std::string_view key,
                                            const std::string& path) const;

  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::string hint_;
};

}  // namespace loupe::config
