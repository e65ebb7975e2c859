#include "check/rules.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "config/toml_reader.hpp"
#include "core/pattern.hpp"
#include "loupe/error.hpp"

namespace loupe::check {
namespace {

constexpr std::string_view kHint =
    "see docs/formats.md, \"Threshold rules\": [[rule]] tables with match = 'REGEX' and "
    "when = [\"rel <= 0.0085\", ...]";

// Compiled patterns, kept so that 10,000 tensors do not recompile one pattern 10,000 times.
const Pattern& compiled(const std::string& pattern) {
  static std::mutex mutex;
  static std::map<std::string, Pattern> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = cache.find(pattern);
  if (found == cache.end()) {
    found =
        cache.emplace(pattern, Pattern::compile(pattern, "rule pattern", ErrorCode::kConfig)).first;
  }
  return found->second;
}

constexpr std::string_view kNoPredicate =
    "expected at least one predicate, e.g. \"mismatch_frac <= 1\" to accept anything";

}  // namespace

Rule make_rule(std::string name, std::string match, std::vector<std::string> when_text, int line,
               const std::string& where) {
  Rule rule;
  rule.name = std::move(name);
  rule.match = std::move(match);
  rule.line = line;
  try {
    compiled(rule.match);
  } catch (const Error& error) {
    throw Error(ErrorCode::kConfig, where + ": " + error.message(), std::string(kHint));
  }
  if (when_text.empty()) {
    throw Error(ErrorCode::kConfig, where + ": " + std::string(kNoPredicate), std::string(kHint));
  }
  for (const std::string& predicate : when_text) {
    rule.when.push_back(parse_predicate(predicate, where));
  }
  rule.when_text = std::move(when_text);
  return rule;
}

bool rules_name_statistic(const RuleSet& rules) {
  for (const Rule& rule : rules.rules) {
    for (const Bound& bound : rule.when) {
      if (is_statistic(bound.metric)) return true;
    }
  }
  return false;
}

std::string rule_decision_sentence(const Rule& rule, const std::string& origin,
                                   std::span<const BoundResult> results) {
  std::string out =
      "rule '" + rule.name + "' (" + origin + ":" + std::to_string(rule.line) + ") decided: ";
  for (size_t position = 0; position < results.size(); ++position) {
    const BoundResult& bound = results[position];
    out += (position > 0 ? "; " : "") + std::string(metric_name(bound.metric)) + " " +
           format_number(bound.value) + " " +
           std::string(bound.pass ? comparison_op_text(bound.op) : failed_op_text(bound.op)) + " " +
           format_number(bound.limit);
  }
  return out;
}

bool name_matches(const std::string& pattern, const std::string& name) {
  return compiled(pattern).search(name);
}

Bound parse_predicate(std::string_view text, const std::string& where) {
  size_t position = 0;
  auto skip_space = [&] {
    while (position < text.size() && std::isspace(static_cast<unsigned char>(text[position]))) {
      ++position;
    }
  };
  auto fail = [&](const std::string& what) -> Error {
    return Error(ErrorCode::kConfig,
                 where + ": predicate '" + std::string(text) + "' at character " +
                     std::to_string(position + 1) + ": expected " + what,
                 "write METRIC OP NUMBER, e.g. \"rel <= 0.0085\"; metrics: " + metric_names_list());
  };
  skip_space();
  const size_t name_begin = position;
  while (position < text.size() &&
         (std::isalnum(static_cast<unsigned char>(text[position])) || text[position] == '_')) {
    ++position;
  }
  const std::string name(text.substr(name_begin, position - name_begin));
  if (name.empty()) throw fail("a metric name");
  const auto metric = parse_metric(name);
  if (!metric) {
    position = name_begin;
    throw fail("a metric name, found '" + name + "'");
  }
  skip_space();
  Bound bound;
  bound.metric = *metric;
  const std::string_view rest = text.substr(position);
  if (rest.rfind("<=", 0) == 0) {
    bound.op = ComparisonOp::kLessEqual;
    position += 2;
  } else if (rest.rfind(">=", 0) == 0) {
    bound.op = ComparisonOp::kGreaterEqual;
    position += 2;
  } else if (rest.rfind("<", 0) == 0) {
    bound.op = ComparisonOp::kLess;
    position += 1;
  } else if (rest.rfind(">", 0) == 0) {
    bound.op = ComparisonOp::kGreater;
    position += 1;
  } else {
    throw fail("one of <=, <, >=, >");
  }
  skip_space();
  const std::string number(text.substr(position));
  char* end = nullptr;
  const double limit = std::strtod(number.c_str(), &end);
  size_t used = static_cast<size_t>(end - number.c_str());
  while (used < number.size() && std::isspace(static_cast<unsigned char>(number[used]))) ++used;
  if (number.empty() || end == number.c_str() || used != number.size() || std::isnan(limit)) {
    throw fail("a number");
  }
  bound.limit = limit;
  return bound;
}

RuleSet parse_rules(std::string_view text, const std::string& origin) {
  const config::TomlReader reader(origin, std::string(kHint));
  const toml::table root = reader.parse(text);
  reader.allow_keys(root, "", {"rule"});
  RuleSet rules;
  rules.origin = origin;
  const toml::node* list = root.get("rule");
  if (list == nullptr) {
    throw Error(ErrorCode::kConfig, origin + ": no [[rule]] tables; expected at least one",
                std::string(kHint));
  }
  const toml::array& array = reader.array_of(*list, "rule");
  for (size_t index = 0; index < array.size(); ++index) {
    const std::string path = config::indexed("rule", index);
    const toml::table& table = reader.table_of(*array.get(index), path);
    reader.allow_keys(table, path, {"name", "match", "when"});
    Rule rule;
    std::string name =
        reader.optional_string(table, "name", path).value_or("rule " + std::to_string(index + 1));
    std::string match = reader.required_text(table, "match", path);
    try {
      compiled(match);
    } catch (const Error& error) {
      reader.fail(*table.get("match"), config::child(path, "match"), error.message());
    }
    const toml::node& when = reader.required(table, "when", path);
    std::vector<std::string> when_text = reader.strings_of(when, config::child(path, "when"));
    if (when_text.empty()) {
      reader.fail(when, config::child(path, "when"), std::string(kNoPredicate));
    }
    const std::string where = origin + ":" + std::to_string(config::TomlReader::line_of(when)) +
                              ": " + config::child(path, "when");
    rules.rules.push_back(make_rule(std::move(name), std::move(match), std::move(when_text),
                                    config::TomlReader::line_of(table), where));
  }
  return rules;
}

RuleSet read_rules(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw Error(ErrorCode::kInput, "--rules " + path.string() + ": cannot read the file",
                "pass a TOML file of [[rule]] tables (docs/formats.md, \"Threshold rules\")");
  }
  std::stringstream text;
  text << file.rdbuf();
  return parse_rules(text.str(), path.string());
}

std::optional<size_t> deciding_rule(const RuleSet& rules, const std::string& name) {
  for (size_t index = 0; index < rules.rules.size(); ++index) {
    if (name_matches(rules.rules[index].match, name)) return index;
  }
  return std::nullopt;
}

}  // namespace loupe::check
