#include "config/toml_reader.hpp"

#include <algorithm>
#include <cctype>
#include <tuple>

#include "core/limits.hpp"
#include "loupe/error.hpp"

namespace loupe::config {

std::string type_phrase(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date or time";
  }
}

std::string join(const std::vector<std::string>& words, std::string_view empty) {
  std::string out;
  for (const auto& word : words) {
    if (!out.empty()) out += ", ";
    out += word;
  }
  return out.empty() ? std::string(empty) : out;
}

std::string child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string indexed(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

toml::table TomlReader::parse(std::string_view text) const {
  // toml++ builds and frees tables recursively: a header of 100,000 dotted parts overflowed the
  // stack (`loupe plan`), so depth is bounded before it parses.
  check_toml_nesting(text, file_);
  try {
    return toml::parse(text, file_);
  } catch (const toml::parse_error& error) {
    throw Error(ErrorCode::kConfig,
                file_ + ":" + std::to_string(error.source().begin.line) + ":" +
                    std::to_string(error.source().begin.column) +
                    ": TOML syntax: " + std::string(error.description()),
                hint_);
  }
}

void TomlReader::fail(int line, const std::string& key, const std::string& message) const {
  throw Error(ErrorCode::kConfig, file_ + ":" + std::to_string(line) + ": " + key + ": " + message,
              hint_);
}

void TomlReader::fail(const toml::node& node, const std::string& key,
                      const std::string& message) const {
  fail(line_of(node), key, message);
}

void TomlReader::expected(const toml::node& node, const std::string& key,
                          const std::string& what) const {
  fail(node, key, "expected " + what + ", found " + type_phrase(node));
}

int TomlReader::line_of(const toml::node& node) {
  return static_cast<int>(node.source().begin.line);
}

std::vector<std::pair<std::string, const toml::node*>> TomlReader::ordered(
    const toml::table& table) {
  std::vector<std::tuple<uint32_t, uint32_t, std::string, const toml::node*>> entries;
  for (const auto& [key, node] : table) {
    entries.emplace_back(key.source().begin.line, key.source().begin.column, std::string(key.str()),
                         &node);
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
  });
  std::vector<std::pair<std::string, const toml::node*>> out;
  out.reserve(entries.size());
  for (auto& entry : entries) out.emplace_back(std::move(std::get<2>(entry)), std::get<3>(entry));
  return out;
}

void TomlReader::allow_keys(const toml::table& table, const std::string& path,
                            const std::vector<std::string>& allowed) const {
  // The first unknown key in file order, so the message does not depend on toml++'s sorting.
  std::vector<std::tuple<uint32_t, uint32_t, std::string>> unknown;
  for (const auto& [key, node] : table) {
    if (std::find(allowed.begin(), allowed.end(), key.str()) == allowed.end()) {
      unknown.emplace_back(key.source().begin.line, key.source().begin.column,
                           std::string(key.str()));
    }
  }
  if (unknown.empty()) return;
  std::sort(unknown.begin(), unknown.end());
  fail(static_cast<int>(std::get<0>(unknown.front())), child(path, std::get<2>(unknown.front())),
       "unknown key; expected one of " + join(allowed));
}

const toml::table& TomlReader::table_of(const toml::node& node, const std::string& key) const {
  if (!node.is_table()) expected(node, key, "a table");
  return *node.as_table();
}

const toml::array& TomlReader::array_of(const toml::node& node, const std::string& key) const {
  if (!node.is_array()) expected(node, key, "an array");
  return *node.as_array();
}

const toml::node& TomlReader::required(const toml::table& table, std::string_view key,
                                       const std::string& path) const {
  const toml::node* node = table.get(key);
  if (node == nullptr) fail(table, child(path, key), "missing; this key is required");
  return *node;
}

std::string TomlReader::string_of(const toml::node& node, const std::string& key) const {
  if (!node.is_string()) expected(node, key, "a string");
  return node.as_string()->get();
}

std::optional<std::string> TomlReader::optional_string(const toml::table& table,
                                                       std::string_view key,
                                                       const std::string& path) const {
  const toml::node* node = table.get(key);
  if (node == nullptr) return std::nullopt;
  return string_of(*node, child(path, key));
}

std::string TomlReader::required_text(const toml::table& table, std::string_view key,
                                      const std::string& path) const {
  const toml::node& node = required(table, key, path);
  std::string text = string_of(node, child(path, key));
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return std::isspace(static_cast<unsigned char>(c)); })) {
    fail(node, child(path, key), "expected a non-empty string");
  }
  return text;
}

double TomlReader::number_of(const toml::node& node, const std::string& key) const {
  if (node.is_integer()) return static_cast<double>(node.as_integer()->get());
  if (node.is_floating_point()) return node.as_floating_point()->get();
  expected(node, key, "a number");
}

int64_t TomlReader::integer_of(const toml::node& node, const std::string& key) const {
  if (!node.is_integer()) expected(node, key, "an integer");
  return node.as_integer()->get();
}

Value TomlReader::scalar_of(const toml::node& node, const std::string& key) const {
  if (node.is_integer()) return node.as_integer()->get();
  if (node.is_floating_point()) return node.as_floating_point()->get();
  if (node.is_string()) return node.as_string()->get();
  if (node.is_boolean()) return node.as_boolean()->get();
  expected(node, key, "an integer, a float, a string or a boolean");
}

std::vector<std::string> TomlReader::strings_of(const toml::node& node,
                                                const std::string& key) const {
  std::vector<std::string> out;
  const toml::array& array = array_of(node, key);
  for (size_t index = 0; index < array.size(); ++index) {
    out.push_back(string_of(array[index], indexed(key, index)));
  }
  return out;
}

std::vector<std::string> TomlReader::optional_strings(const toml::table& table,
                                                      std::string_view key,
                                                      const std::string& path) const {
  const toml::node* node = table.get(key);
  if (node == nullptr) return {};
  return strings_of(*node, child(path, key));
}

}  // namespace loupe::config
