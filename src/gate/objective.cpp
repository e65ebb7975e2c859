#include "gate/objective.hpp"

#include "loupe/structure.hpp"

#include "config/toml_reader.hpp"
#include "core/limits.hpp"
#include "core/pattern.hpp"
#include "gate/executor.hpp"
#include "gate/plan.hpp"

#include <toml++/toml.h>
#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

namespace loupe::gate {
namespace {

constexpr std::string_view kHint = "docs/objective.md documents every key";

bool is_word(std::string_view text, bool allow_dash = false) {
  if (text.empty() || !(std::isalpha(static_cast<unsigned char>(text[0])) || text[0] == '_')) {
    return false;
  }
  return std::all_of(text.begin(), text.end(), [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (allow_dash && c == '-');
  });
}

std::string value_phrase(const Value& value) {
  if (std::holds_alternative<std::string>(value)) return "'" + value_to_string(value) + "'";
  return value_to_string(value);
}

using config::child;
using config::indexed;
using config::join;
// Reads one file's TOML tree into the typed objective, failing with file, line and key.
using Reader = config::TomlReader;

SubjectSpec read_subject(const Reader& reader, const toml::table& table,
                         const std::filesystem::path& base) {
  const std::string path = "subject";
  reader.allow_keys(table, path,
                    {"command", "working_dir", "environment", "env", "timeout_s", "launch"});
  SubjectSpec subject;
  const toml::node& command = reader.required(table, "command", path);
  if (command.is_string()) {
    std::istringstream words(command.as_string()->get());
    for (std::string word; words >> word;) subject.command.push_back(word);
  } else if (command.is_array()) {
    subject.command = reader.strings_of(command, "subject.command");
  } else {
    reader.expected(command, "subject.command", "a string or an array of strings");
  }
  if (subject.command.empty()) {
    reader.fail(command, "subject.command", "expected the subject's command line, found nothing");
  }
  if (const toml::node* launch = table.get("launch")) {
    if (launch->is_string()) {
      std::istringstream words(launch->as_string()->get());
      for (std::string word; words >> word;) subject.launch.push_back(word);
    } else if (launch->is_array()) {
      subject.launch = reader.strings_of(*launch, "subject.launch");
    } else {
      reader.expected(*launch, "subject.launch", "a string or an array of strings");
    }
    if (subject.launch.empty()) {
      reader.fail(*launch, "subject.launch",
                  "expected a launcher's command line (\"mpirun -n {ranks}\"), found nothing");
    }
  }
  if (auto dir = reader.optional_string(table, "working_dir", path)) {
    subject.working_dir = (base / *dir).lexically_normal();
  }
  if (const toml::node* environment = table.get("environment")) {
    const toml::table& variables = reader.table_of(*environment, "subject.environment");
    for (const auto& [name, node] : Reader::ordered(variables)) {
      subject.environment.emplace_back(name,
                                       reader.string_of(*node, "subject.environment." + name));
    }
  }
  if (const toml::node* env = table.get("env")) {
    subject.pass_env = reader.strings_of(*env, "subject.env");
    for (size_t index = 0; index < subject.pass_env.size(); ++index) {
      const std::string& name = subject.pass_env[index];
      const std::string_view stem = !name.empty() && name.back() == '*'
                                        ? std::string_view(name).substr(0, name.size() - 1)
                                        : std::string_view(name);
      const bool valid = !stem.empty() && !std::isdigit(static_cast<unsigned char>(stem.front())) &&
                         std::all_of(stem.begin(), stem.end(), [](char c) {
                           return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                         });
      if (!valid) {
        reader.fail(*env, indexed("subject.env", index),
                    "expected a variable name (letters, digits, '_'), or a prefix ending in '*', "
                    "found '" +
                        name + "'");
      }
    }
  }
  if (const toml::node* timeout = table.get("timeout_s")) {
    subject.timeout_s = reader.number_of(*timeout, "subject.timeout_s");
    if (!(subject.timeout_s > 0)) {
      reader.fail(*timeout, "subject.timeout_s",
                  "expected a number of seconds above 0, found " +
                      value_to_string(Value(subject.timeout_s)));
    }
  }
  return subject;
}

BuildSpec read_build(const Reader& reader, const toml::table& table) {
  reader.allow_keys(table, "build", {"command", "subject_from", "timeout_s"});
  BuildSpec build;
  build.command = reader.required_text(table, "command", "build");
  if (const toml::node* from = table.get("subject_from")) {
    build.subject_from = reader.string_of(*from, "build.subject_from");
    const std::filesystem::path path(build.subject_from);
    // A folder inside the checkout: bisect maps it into each commit's tree.
    const bool escapes = std::any_of(
        path.begin(), path.end(), [](const std::filesystem::path& part) { return part == ".."; });
    if (build.subject_from.empty() || path.is_absolute() || escapes) {
      reader.fail(*from, "build.subject_from",
                  "expected a folder relative to the repository root, without '..', found '" +
                      build.subject_from + "'");
    }
  }
  if (const toml::node* timeout = table.get("timeout_s")) {
    build.timeout_s = reader.number_of(*timeout, "build.timeout_s");
    if (!(build.timeout_s > 0)) {
      reader.fail(
          *timeout, "build.timeout_s",
          "expected a number of seconds above 0, found " + value_to_string(Value(build.timeout_s)));
    }
  }
  return build;
}

std::vector<Value> axis_values(const Reader& reader, const toml::node& node, const std::string& key,
                               bool require_list) {
  if (!node.is_array()) {
    if (require_list) reader.expected(node, key, "a list of values (zipped lists step together)");
    return {reader.scalar_of(node, key)};
  }
  const toml::array& array = *node.as_array();
  if (array.empty()) reader.fail(node, key, "expected at least one value, found an empty list");
  std::vector<Value> values;
  for (size_t index = 0; index < array.size(); ++index) {
    values.push_back(reader.scalar_of(array[index], indexed(key, index)));
  }
  return values;
}

// A check's `rules`: a rules file (relative to the objective's folder) or an array of inline
// rule tables, each validated here so that `loupe plan` catches a mistake before anything runs.
check::RuleSet read_entry_rules(const Reader& reader, const toml::node& node,
                                const std::string& key, const std::filesystem::path& base) {
  if (const auto* file = node.as_string()) {
    const std::filesystem::path path = (base / file->get()).lexically_normal();
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      reader.fail(node, key,
                  "cannot read the rules file " + path.string() +
                      "; expected a TOML file of [[rule]] tables (docs/formats.md, \"Threshold "
                      "rules\")");
    }
    std::stringstream text;
    text << in.rdbuf();
    return check::parse_rules(text.str(), path.string());
  }
  if (!node.is_array()) {
    reader.expected(node, key, "a rules file name or an array of rule tables");
  }
  const toml::array& array = *node.as_array();
  if (array.empty()) {
    reader.fail(node, key, "expected at least one rule ({ match = 'REGEX', when = [...] })");
  }
  check::RuleSet rules;
  rules.origin = reader.file();
  for (size_t index = 0; index < array.size(); ++index) {
    const std::string path = indexed(key, index);
    const toml::table& table = reader.table_of(array[index], path);
    reader.allow_keys(table, path, {"name", "match", "when"});
    std::string name =
        reader.optional_string(table, "name", path).value_or("rule " + std::to_string(index + 1));
    std::string match = reader.required_text(table, "match", path);
    const toml::node& when = reader.required(table, "when", path);
    std::vector<std::string> when_text = reader.strings_of(when, child(path, "when"));
    const int line = Reader::line_of(table);
    const std::string where = reader.file() + ":" + std::to_string(line) + ": " + path;
    rules.rules.push_back(
        check::make_rule(std::move(name), std::move(match), std::move(when_text), line, where));
  }
  return rules;
}

ProbeEntry read_entry(const Reader& reader, const toml::table& table, Layer layer, size_t index,
                      const std::filesystem::path& base, const std::vector<Component>& components) {
  const std::string layer_word(layer_name(layer));
  const std::string path = indexed(layer_word, index);
  std::vector<std::string> allowed = {"probe",   "name", "description", "params",    "zip",
                                      "repeats", "seed", "covers",      "structures"};
  if (layer == Layer::kCheck) allowed.insert(allowed.end(), {"tolerances", "seeds", "rules"});
  if (layer == Layer::kBench) {
    allowed.insert(allowed.end(), {"variants", "threshold", "budget_s", "precision", "counters"});
  }
  if (layer == Layer::kScenario) allowed.push_back("threshold");
  reader.allow_keys(table, path, allowed);

  ProbeEntry entry;
  entry.layer = layer;
  entry.line = Reader::line_of(table);
  entry.probe = reader.string_of(reader.required(table, "probe", path), child(path, "probe"));
  if (!is_probe_name(entry.probe)) {
    // The probe name becomes a folder under the home: "../x" would write outside it.
    reader.fail(*table.get("probe"), child(path, "probe"),
                "expected a probe name of 1 to " + std::to_string(kMaxProbeNameLength) +
                    " characters of A-Z a-z 0-9 _ -, the first a letter, digit or _, found '" +
                    entry.probe + "'");
  }
  const auto name = reader.optional_string(table, "name", path);
  entry.name = name.value_or(entry.probe);
  if (!is_word(entry.name)) {
    const std::string key = name ? "name" : "probe";
    reader.fail(*table.get(key), child(path, key),
                "expected a name of letters, digits and '_' (gates refer to it), found '" +
                    entry.name + "'" + (name ? "" : "; add name = \"...\""));
  }
  entry.description = reader.optional_string(table, "description", path).value_or("");

  std::set<std::string> seen;
  if (const toml::node* params = table.get("params")) {
    const std::string key = child(path, "params");
    for (const auto& [param, node] : Reader::ordered(reader.table_of(*params, key))) {
      entry.params.push_back({param, axis_values(reader, *node, child(key, param), false)});
      seen.insert(param);
    }
  }
  if (const toml::node* zip = table.get("zip")) {
    const std::string key = child(path, "zip");
    std::string first;
    for (const auto& [param, node] : Reader::ordered(reader.table_of(*zip, key))) {
      if (seen.count(param)) {
        reader.fail(*node, child(key, param),
                    "'" + param + "' is already swept in " + child(path, "params") +
                        "; a parameter is either in params or in zip");
      }
      ParamAxis axis{param, axis_values(reader, *node, child(key, param), true)};
      if (!entry.zip.empty() && axis.values.size() != entry.zip.front().values.size()) {
        reader.fail(*node, child(key, param),
                    "expected " + std::to_string(entry.zip.front().values.size()) +
                        " values (as many as " + child(key, entry.zip.front().name) + "), found " +
                        std::to_string(axis.values.size()));
      }
      entry.zip.push_back(std::move(axis));
    }
  }
  if (const toml::node* tolerances = table.get("tolerances")) {
    const std::string key = child(path, "tolerances");
    for (const auto& [metric, node] : Reader::ordered(reader.table_of(*tolerances, key))) {
      const double bound = reader.number_of(*node, child(key, metric));
      if (!(bound >= 0)) {
        reader.fail(*node, child(key, metric),
                    "expected a bound of 0 or more, found " + value_to_string(Value(bound)));
      }
      entry.tolerances.emplace_back(metric, bound);
    }
  }
  if (const toml::node* rules = table.get("rules")) {
    const std::string key = child(path, "rules");
    if (!entry.tolerances.empty()) {
      reader.fail(*rules, key,
                  "rules replace the tolerances; give " + child(path, "tolerances") +
                      " or rules, not both");
    }
    entry.rules = read_entry_rules(reader, *rules, key, base);
  }
  if (const toml::node* variants = table.get("variants")) {
    const std::string key = child(path, "variants");
    entry.variants = reader.strings_of(*variants, key);
    if (entry.variants.size() < 2) {
      reader.fail(*variants, key,
                  "expected at least two variant names (a verdict compares two), found " +
                      std::to_string(entry.variants.size()));
    }
    std::set<std::string> unique;
    for (size_t at = 0; at < entry.variants.size(); ++at) {
      const std::string& variant = entry.variants[at];
      if (!is_word(variant) || variant == "configured" || variant == "any") {
        reader.fail(*variants, indexed(key, at),
                    "expected a variant name of letters, digits and '_' other than 'configured' "
                    "and 'any', found '" +
                        variant + "'");
      }
      if (!unique.insert(variant).second) {
        reader.fail(*variants, indexed(key, at), "'" + variant + "' is listed twice");
      }
    }
  }
  if (const toml::node* repeats = table.get("repeats")) {
    entry.repeats = reader.integer_of(*repeats, child(path, "repeats"));
    // One entry cannot repeat more than a whole run may run its subject (plan.hpp).
    constexpr int64_t kMaxRepeats = kMaxSubjectRunsPerRun;
    if (entry.repeats < 1 || entry.repeats > kMaxRepeats) {
      reader.fail(*repeats, child(path, "repeats"),
                  "expected 1 to " + std::to_string(kMaxRepeats) +
                      " (the cap on subject runs per "
                      "run), found " +
                      std::to_string(entry.repeats));
    }
  }
  if (const toml::node* seeds = table.get("seeds")) {
    entry.seeds = reader.integer_of(*seeds, child(path, "seeds"));
    if (entry.seeds < 1 || entry.seeds > 100) {
      reader.fail(*seeds, child(path, "seeds"),
                  "expected 1 to 100 seeds per point, found " + std::to_string(entry.seeds));
    }
  }
  if (const toml::node* threshold = table.get("threshold")) {
    const double value = reader.number_of(*threshold, child(path, "threshold"));
    if (!(value > 0 && value < 1)) {
      reader.fail(*threshold, child(path, "threshold"),
                  "expected a fraction between 0 and 1 (0.05 is 5 %), found " +
                      value_to_string(Value(value)));
    }
    entry.threshold = value;
  }
  if (const toml::node* seed = table.get("seed")) {
    const int64_t value = reader.integer_of(*seed, child(path, "seed"));
    if (value < 0) {
      reader.fail(*seed, child(path, "seed"), "expected 0 or more, found " + std::to_string(value));
    }
    entry.seed = static_cast<uint64_t>(value);
  }
  if (const toml::node* budget = table.get("budget_s")) {
    const double value = reader.number_of(*budget, child(path, "budget_s"));
    if (!(value > 0 && value <= 3600)) {
      reader.fail(*budget, child(path, "budget_s"),
                  "expected seconds of sampling per point, above 0 and at most 3600, found " +
                      value_to_string(Value(value)));
    }
    entry.budget_s = value;
  }
  if (const toml::node* precision = table.get("precision")) {
    const double value = reader.number_of(*precision, child(path, "precision"));
    if (!(value > 0 && value < 1)) {
      reader.fail(*precision, child(path, "precision"),
                  "expected a relative half-width between 0 and 1 (0.01 is 1 %), found " +
                      value_to_string(Value(value)));
    }
    entry.precision = value;
  }
  if (const toml::node* counters = table.get("counters")) {
    const std::string key = child(path, "counters");
    const toml::table& spec = reader.table_of(*counters, key);
    reader.allow_keys(spec, key, {"kernel", "launches"});
    EntryCounters parsed;
    const toml::node& kernel = reader.required(spec, "kernel", key);
    parsed.kernel = reader.string_of(kernel, child(key, "kernel"));
    bool valid = !parsed.kernel.empty();
    try {
      if (valid) Pattern::compile(parsed.kernel, "kernel", ErrorCode::kConfig);
    } catch (const Error&) {
      valid = false;
    }
    if (!valid) {
      reader.fail(kernel, child(key, "kernel"),
                  "expected a pattern (RE2 syntax) of the kernel name (\"merged_v_decode\"), "
                  "found " +
                      quoted_pattern(parsed.kernel));
    }
    if (const toml::node* launches = spec.get("launches")) {
      parsed.launches = reader.integer_of(*launches, child(key, "launches"));
      if (parsed.launches < 1 || parsed.launches > 10000) {
        reader.fail(*launches, child(key, "launches"),
                    "expected 1 to 10000 untimed calls (ncu's --launch-count), found " +
                        std::to_string(parsed.launches));
      }
    }
    entry.counters = std::move(parsed);
  }
  if (const toml::node* structures = table.get("structures")) {
    const std::string key = child(path, "structures");
    entry.structures = reader.strings_of(*structures, key);
    std::set<std::string> unique;
    for (size_t at = 0; at < entry.structures.size(); ++at) {
      const std::string& name = entry.structures[at];
      if (!structure::parse(name)) {
        std::vector<std::string> names(structure::kNames.begin(), structure::kNames.end());
        reader.fail(*structures, indexed(key, at),
                    "expected one of the input structures " + join(names) +
                        " (docs/structures.md), found '" + name + "'");
      }
      if (!unique.insert(name).second) {
        reader.fail(*structures, indexed(key, at), "'" + name + "' is listed twice");
      }
    }
  }
  if (const toml::node* covers = table.get("covers")) {
    const std::string key = child(path, "covers");
    entry.covers = reader.strings_of(*covers, key);
    if (entry.covers.empty()) {
      reader.fail(*covers, key,
                  "expected at least one component the probe runs (a check that covers nothing "
                  "explains no failure; leave covers out instead), found []");
    }
    std::set<std::string> unique;
    for (size_t at = 0; at < entry.covers.size(); ++at) {
      const std::string& name = entry.covers[at];
      const bool known = std::any_of(components.begin(), components.end(),
                                     [&](const Component& c) { return c.name == name; });
      if (!known) {
        std::vector<std::string> names;
        for (const auto& component : components) names.push_back(component.name);
        reader.fail(*covers, indexed(key, at),
                    "expected a component declared in [components]" +
                        (names.empty() ? std::string(" (the file declares none)")
                                       : " (" + join(names) + ")") +
                        ", found '" + name + "'");
      }
      if (!unique.insert(name).second) {
        reader.fail(*covers, indexed(key, at), "'" + name + "' is listed twice");
      }
    }
  }
  return entry;
}

std::vector<ProbeEntry> read_entries(const Reader& reader, const toml::node& node, Layer layer,
                                     const std::filesystem::path& base,
                                     const std::vector<Component>& components) {
  const std::string key(layer_name(layer));
  if (!node.is_array_of_tables()) {
    reader.expected(node, key, "an array of tables ([[" + key + "]])");
  }
  std::vector<ProbeEntry> entries;
  const toml::array& array = *node.as_array();
  for (size_t index = 0; index < array.size(); ++index) {
    ProbeEntry entry = read_entry(reader, *array[index].as_table(), layer, index, base, components);
    for (size_t other = 0; other < entries.size(); ++other) {
      if (entries[other].name == entry.name) {
        reader.fail(entry.line, indexed(key, index) + ".name",
                    "'" + entry.name + "' already names " + indexed(key, other) + " (line " +
                        std::to_string(entries[other].line) + "); give each entry its own name");
      }
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

DeploymentKey read_deployment_key(const Reader& reader, const toml::table& table, size_t index) {
  const std::string path = indexed("deployment_key", index);
  reader.allow_keys(table, path, {"key", "description", "values", "default", "implies"});
  DeploymentKey key;
  key.line = Reader::line_of(table);
  key.key = reader.string_of(reader.required(table, "key", path), child(path, "key"));
  if (!is_word(key.key, true)) {
    reader.fail(*table.get("key"), child(path, "key"),
                "expected a key of letters, digits, '_' and '-', found '" + key.key + "'");
  }
  key.description = reader.optional_string(table, "description", path).value_or("");
  if (const toml::node* values = table.get("values")) {
    key.values = axis_values(reader, *values, child(path, "values"), true);
  }
  if (const toml::node* default_node = table.get("default")) {
    const Value value = reader.scalar_of(*default_node, child(path, "default"));
    if (!key.values.empty() &&
        std::find(key.values.begin(), key.values.end(), value) == key.values.end()) {
      std::vector<std::string> allowed;
      for (const auto& v : key.values) allowed.push_back(value_to_string(v));
      reader.fail(*default_node, child(path, "default"),
                  "expected one of " + join(allowed) + ", found " + value_phrase(value));
    }
    key.default_value = value;
  }
  const toml::node& implies = reader.required(table, "implies", path);
  if (implies.is_array() && implies.as_array()->empty()) {
    reader.fail(implies, child(path, "implies"),
                "expected at least one { probe = \"...\", param = \"...\" }, found an empty array");
  }
  if (!implies.is_array_of_tables()) {
    reader.expected(implies, child(path, "implies"),
                    "an array of tables ({ probe = \"...\", param = \"...\" })");
  }
  const toml::array& array = *implies.as_array();
  for (size_t at = 0; at < array.size(); ++at) {
    const std::string implication_path = indexed(child(path, "implies"), at);
    const toml::table& implication_table = *array[at].as_table();
    reader.allow_keys(implication_table, implication_path, {"probe", "param", "map", "run"});
    Implication implication;
    implication.probe =
        reader.string_of(reader.required(implication_table, "probe", implication_path),
                         child(implication_path, "probe"));
    implication.param = reader.optional_string(implication_table, "param", implication_path);
    if (const toml::node* map = implication_table.get("map")) {
      const std::string map_path = child(implication_path, "map");
      for (const auto& [from, node] : Reader::ordered(reader.table_of(*map, map_path))) {
        implication.map.emplace_back(from, reader.scalar_of(*node, child(map_path, from)));
      }
      for (const auto& [from, to] : implication.map) {
        const bool declared =
            key.values.empty() ||
            std::any_of(key.values.begin(), key.values.end(),
                        [&from = from](const Value& v) { return value_to_string(v) == from; });
        if (!declared) {
          reader.fail(*map, child(map_path, from),
                      "'" + from + "' is not one of " + child(path, "values"));
        }
      }
      for (const auto& value : key.values) {
        const std::string text = value_to_string(value);
        const bool mapped = std::any_of(implication.map.begin(), implication.map.end(),
                                        [&](const auto& entry) { return entry.first == text; });
        if (!mapped) {
          reader.fail(*map, map_path,
                      "expected an entry for every value of " + child(path, "values") +
                          ", missing '" + text + "'");
        }
      }
    }
    if (const toml::node* run = implication_table.get("run")) {
      const std::string run_path = child(implication_path, "run");
      if (implication.param || !implication.map.empty()) {
        reader.fail(*run, run_path,
                    "expected either run = { VALUE = true|false, ... } or param/map, found both "
                    "(a switch turns the probe's entries on or off; it sets no parameter)");
      }
      for (const auto& [from, node] : Reader::ordered(reader.table_of(*run, run_path))) {
        if (!node->is_boolean()) reader.expected(*node, child(run_path, from), "true or false");
        const bool declared =
            key.values.empty() ||
            std::any_of(key.values.begin(), key.values.end(),
                        [&from = from](const Value& v) { return value_to_string(v) == from; });
        if (!declared) {
          reader.fail(*node, child(run_path, from),
                      "'" + from + "' is not one of " + child(path, "values"));
        }
        implication.run.emplace_back(from, node->as_boolean()->get());
      }
      if (implication.run.empty()) {
        reader.fail(*run, run_path, "expected at least one VALUE = true|false, found none");
      }
      for (const auto& value : key.values) {
        const std::string text = value_to_string(value);
        const bool listed = std::any_of(implication.run.begin(), implication.run.end(),
                                        [&](const auto& entry) { return entry.first == text; });
        if (!listed) {
          reader.fail(*run, run_path,
                      "expected an entry for every value of " + child(path, "values") +
                          ", missing '" + text + "'");
        }
      }
    }
    key.implies.push_back(std::move(implication));
  }
  return key;
}

// The value of setting `key` in the file's own type: a text that matches a declared value takes
// that value's type.
Deployment read_deployment(const Reader& reader, const toml::table& table, size_t index,
                           const std::vector<DeploymentKey>& keys) {
  const std::string path = indexed("deployment", index);
  reader.allow_keys(table, path, {"name", "description", "settings"});
  Deployment deployment;
  deployment.line = Reader::line_of(table);
  deployment.name = reader.string_of(reader.required(table, "name", path), child(path, "name"));
  if (!is_word(deployment.name, true)) {
    reader.fail(*table.get("name"), child(path, "name"),
                "expected a name of letters, digits, '_' and '-', found '" + deployment.name + "'");
  }
  deployment.description = reader.optional_string(table, "description", path).value_or("");
  const std::string settings_path = child(path, "settings");
  const toml::table& settings =
      reader.table_of(reader.required(table, "settings", path), settings_path);
  std::vector<std::string> declared;
  for (const auto& key : keys) declared.push_back(key.key);
  for (const auto& [name, node] : Reader::ordered(settings)) {
    const auto key = std::find_if(keys.begin(), keys.end(),
                                  [&name = name](const DeploymentKey& k) { return k.key == name; });
    if (key == keys.end()) {
      reader.fail(*node, child(settings_path, name),
                  "no [[deployment_key]] declares '" + name + "'; declared: " + join(declared));
    }
    const Value value = reader.scalar_of(*node, child(settings_path, name));
    if (!key->values.empty() &&
        std::find(key->values.begin(), key->values.end(), value) == key->values.end()) {
      std::vector<std::string> allowed;
      for (const auto& v : key->values) allowed.push_back(value_to_string(v));
      reader.fail(*node, child(settings_path, name),
                  "expected one of " + join(allowed) + ", found " + value_phrase(value));
    }
    deployment.settings.emplace_back(name, value);
  }
  return deployment;
}

// Every parameter name a probe's points can carry: swept ones and those deployment keys set.
std::vector<std::string> entry_param_names(const Objective& objective, const ProbeEntry& entry) {
  std::vector<std::string> names;
  for (const auto& axis : entry.params) names.push_back(axis.name);
  for (const auto& axis : entry.zip) names.push_back(axis.name);
  for (const auto& key : objective.deployment_keys) {
    for (const auto& implication : key.implies) {
      if (implication.probe == entry.probe && implication.param &&
          std::find(names.begin(), names.end(), *implication.param) == names.end()) {
        names.push_back(*implication.param);
      }
    }
  }
  return names;
}

std::vector<std::string> entry_names(const std::vector<ProbeEntry>& entries) {
  std::vector<std::string> names;
  for (const auto& entry : entries) names.push_back(entry.name);
  return names;
}

class GateValidator {
 public:
  GateValidator(const Reader& reader, const Objective& objective, const GateSpec& gate,
                std::string key)
      : reader_(reader), objective_(objective), gate_(gate), key_(std::move(key)) {}

  void validate() const {
    std::visit([this](const auto& expression) { check(expression); }, gate_.expression);
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    reader_.fail(gate_.line, key_, message);
  }

  const ProbeEntry& entry(Layer layer, const std::string& name) const {
    const ProbeEntry* found = objective_.find_entry(layer, name);
    if (found == nullptr) {
      const std::string layer_word(layer_name(layer));
      fail("no [[" + layer_word + "]] is named '" + name + "'; " + layer_word +
           " names: " + join(entry_names(objective_.entries(layer))));
    }
    return *found;
  }

  void variant(const ProbeEntry& bench, const std::string& name) const {
    if (std::find(bench.variants.begin(), bench.variants.end(), name) == bench.variants.end()) {
      fail("bench '" + bench.name + "' has no variant '" + name +
           "'; its variants: " + join(bench.variants));
    }
  }

  void where(const ProbeEntry& probe_entry, const std::vector<Condition>& conditions) const {
    const auto names = entry_param_names(objective_, probe_entry);
    for (const auto& condition : conditions) {
      if (std::find(names.begin(), names.end(), condition.param) == names.end()) {
        fail("where: '" + condition.param + "' is not a parameter of " +
             std::string(layer_name(probe_entry.layer)) + " '" + probe_entry.name +
             "'; its parameters: " + join(names));
      }
    }
  }

  void metric(const MetricRef& ref) const {
    const ProbeEntry& found = entry(ref.layer, ref.entry);
    if (ref.variant) {
      if (ref.layer != Layer::kBench) {
        fail("'" + ref.entry + "[" + *ref.variant + "]': only benches have variants");
      }
      variant(found, *ref.variant);
    }
  }

  void check(const MetricBound& bound) const {
    metric(bound.metric);
    if (bound.baseline) metric(*bound.baseline);
    where(entry(bound.metric.layer, bound.metric.entry), bound.where);
  }

  void check(const BenchVerdict& verdict) const {
    const ProbeEntry& bench = entry(Layer::kBench, verdict.subject.bench);
    if (verdict.versus_baseline) {
      // Against the baseline build a bench of one body (no variants) is gated as a whole.
      if (verdict.subject.selector == VariantSelector::kNamed && !bench.variants.empty()) {
        variant(bench, verdict.subject.variant);
      }
      if (verdict.subject.selector == VariantSelector::kConfigured && !selects_variant(bench)) {
        fail("'" + bench.name +
             "[configured]': no [[deployment_key]] implies the variant of probe '" + bench.probe +
             "' (an implies entry without param)");
      }
      where(bench, verdict.where);
      return;
    }
    if (bench.variants.empty()) {
      fail("bench '" + bench.name + "' declares no variants; add variants = [\"a\", \"b\"]");
    }
    for (const VariantRef* ref : {&verdict.subject, &verdict.other}) {
      if (ref->selector == VariantSelector::kNamed) variant(bench, ref->variant);
      if (ref->selector == VariantSelector::kConfigured && !selects_variant(bench)) {
        fail("'" + bench.name +
             "[configured]': no [[deployment_key]] implies the variant of "
             "probe '" +
             bench.probe + "' (an implies entry without param)");
      }
    }
    where(bench, verdict.where);
  }

  void check(const CheckPasses& passes) const {
    const ProbeEntry& found = entry(Layer::kCheck, passes.check);
    where(found, passes.where);
  }

  bool selects_variant(const ProbeEntry& bench) const {
    for (const auto& key : objective_.deployment_keys) {
      for (const auto& implication : key.implies) {
        if (implication.probe == bench.probe && !implication.param && implication.run.empty()) {
          return true;
        }
      }
    }
    return false;
  }

  const Reader& reader_;
  const Objective& objective_;
  const GateSpec& gate_;
  std::string key_;
};

GateSpec read_gate(const Reader& reader, const toml::table& table, size_t index) {
  const std::string path = indexed("gate", index);
  reader.allow_keys(table, path, {"name", "expr", "description", "confidence"});
  GateSpec gate;
  gate.name = reader.string_of(reader.required(table, "name", path), child(path, "name"));
  if (!is_word(gate.name, true)) {
    reader.fail(*table.get("name"), child(path, "name"),
                "expected a name of letters, digits, '_' and '-', found '" + gate.name + "'");
  }
  gate.description = reader.optional_string(table, "description", path).value_or("");
  const toml::node& expression = reader.required(table, "expr", path);
  gate.text = reader.string_of(expression, child(path, "expr"));
  gate.line = Reader::line_of(expression);
  try {
    gate.expression = parse_gate_expression(gate.text);
  } catch (const Error& error) {
    reader.fail(expression, child(path, "expr"), error.message() + " in '" + gate.text + "'");
  }
  if (const toml::node* confidence = table.get("confidence")) {
    gate.confidence = reader.number_of(*confidence, child(path, "confidence"));
    if (!(gate.confidence > 0 && gate.confidence < 1)) {
      reader.fail(*confidence, child(path, "confidence"),
                  "expected a level between 0 and 1 (0.95), found " +
                      value_to_string(Value(gate.confidence)));
    }
  }
  return gate;
}

ReviewCategory read_review_category(const Reader& reader, const std::string& name,
                                    const toml::node& node) {
  const std::string path = child("review", name);
  const toml::table& table = reader.table_of(node, path);
  reader.allow_keys(table, path, {"description", "paths", "params"});
  ReviewCategory category;
  category.name = name;
  if (const toml::node* paths = table.get("paths")) {
    category.paths = reader.strings_of(*paths, child(path, "paths"));
  }
  if (const toml::node* params = table.get("params")) {
    category.params = reader.strings_of(*params, child(path, "params"));
  }
  if (category.paths.empty() && category.params.empty()) {
    reader.fail(table, path, "expected paths = [...] or params = [...], found neither");
  }
  return category;
}

void validate_implications(const Reader& reader, const Objective& objective,
                           const toml::node& keys_node) {
  const toml::array& keys_array = *keys_node.as_array();
  for (size_t index = 0; index < objective.deployment_keys.size(); ++index) {
    const DeploymentKey& key = objective.deployment_keys[index];
    const toml::table& key_table = *keys_array[index].as_table();
    const toml::array& implies = *key_table.get("implies")->as_array();
    for (size_t at = 0; at < key.implies.size(); ++at) {
      const Implication& implication = key.implies[at];
      const std::string path = indexed(indexed("deployment_key", index) + ".implies", at);
      const toml::node& node = implies[at];
      std::vector<const ProbeEntry*> runs;
      std::vector<std::string> probes;
      for (Layer layer : {Layer::kCheck, Layer::kBench, Layer::kScenario}) {
        for (const auto& entry : objective.entries(layer)) {
          if (entry.probe == implication.probe) runs.push_back(&entry);
          if (std::find(probes.begin(), probes.end(), entry.probe) == probes.end()) {
            probes.push_back(entry.probe);
          }
        }
      }
      if (runs.empty()) {
        reader.fail(node, path + ".probe",
                    "no [[check]], [[bench]] or [[scenario]] runs probe '" + implication.probe +
                        "'; probes in this file: " + join(probes));
      }
      if (implication.param || !implication.run.empty()) continue;
      // A variant selector: every value it can take must name a variant of the benches.
      for (const ProbeEntry* entry : runs) {
        if (entry->layer != Layer::kBench || entry->variants.empty()) {
          reader.fail(node, path,
                      "expected param = \"...\" (probe '" + implication.probe +
                          "' is not a bench with variants, so there is no variant to select)");
        }
        std::vector<Value> selected = key.values;
        if (!implication.map.empty()) {
          selected.clear();
          for (const auto& [from, to] : implication.map) selected.push_back(to);
        }
        for (const auto& value : selected) {
          const std::string text = value_to_string(value);
          if (std::find(entry->variants.begin(), entry->variants.end(), text) ==
              entry->variants.end()) {
            reader.fail(node, path,
                        "the value '" + text + "' selects no variant of bench '" + entry->name +
                            "'; its variants: " + join(entry->variants));
          }
        }
      }
    }
  }
}

void validate_review(const Reader& reader, const Objective& objective,
                     const toml::table& review_table) {
  std::vector<std::string> known;
  for (Layer layer : {Layer::kCheck, Layer::kBench, Layer::kScenario}) {
    for (const auto& entry : objective.entries(layer)) {
      for (const auto& name : entry_param_names(objective, entry)) known.push_back(name);
    }
  }
  for (const auto& key : objective.deployment_keys) known.push_back(key.key);
  for (const auto& category : objective.review) {
    const toml::node& node = *review_table.get(category.name);
    for (size_t index = 0; index < category.params.size(); ++index) {
      const std::string& param = category.params[index];
      if (std::find(known.begin(), known.end(), param) == known.end()) {
        reader.fail(node, indexed("review." + category.name + ".params", index),
                    "'" + param +
                        "' is neither a parameter of a probe in this file nor a "
                        "deployment key");
      }
    }
  }
}

}  // namespace

std::string_view cascade_mode_name(CascadeMode mode) {
  return mode == CascadeMode::kAll ? "all" : "stop-at-first-failure";
}

const std::vector<ProbeEntry>& Objective::entries(Layer layer) const {
  static const std::vector<ProbeEntry> kNone;
  switch (layer) {
    case Layer::kCheck:
      return checks;
    case Layer::kBench:
      return benches;
    case Layer::kScenario:
      return scenarios;
    case Layer::kTrace:
    case Layer::kCounters:
      break;
  }
  return kNone;
}

const ProbeEntry* Objective::find_entry(Layer layer, std::string_view entry_name) const {
  for (const auto& entry : entries(layer)) {
    if (entry.name == entry_name) return &entry;
  }
  return nullptr;
}

const Component* Objective::find_component(std::string_view name) const {
  for (const auto& component : components) {
    if (component.name == name) return &component;
  }
  return nullptr;
}

const DeploymentKey* Objective::find_deployment_key(std::string_view key) const {
  for (const auto& candidate : deployment_keys) {
    if (candidate.key == key) return &candidate;
  }
  return nullptr;
}

const Deployment* Objective::find_deployment(std::string_view deployment_name) const {
  for (const auto& candidate : deployments) {
    if (candidate.name == deployment_name) return &candidate;
  }
  return nullptr;
}

std::vector<Params> expand_points(const ProbeEntry& entry) {
  std::vector<Params> points = {Params{}};
  for (const auto& axis : entry.params) {
    std::vector<Params> next;
    for (const auto& point : points) {
      for (const auto& value : axis.values) {
        Params extended = point;
        extended.emplace_back(axis.name, value);
        next.push_back(std::move(extended));
      }
    }
    points = std::move(next);
  }
  if (entry.zip.empty()) return points;
  std::vector<Params> zipped;
  const size_t rows = entry.zip.front().values.size();
  for (const auto& point : points) {
    for (size_t row = 0; row < rows; ++row) {
      Params extended = point;
      for (const auto& axis : entry.zip) extended.emplace_back(axis.name, axis.values[row]);
      zipped.push_back(std::move(extended));
    }
  }
  return zipped;
}

Objective parse_objective_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw Error(ErrorCode::kInput, file.string() + ": cannot read the objective file",
                "check the path; examples/kda/smoke.toml is a small objective");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_objective(text.str(), file);
}

Objective parse_objective(std::string_view text, const std::filesystem::path& file) {
  const Reader reader(file.string(), std::string(kHint));
  const toml::table root = reader.parse(text);
  reader.allow_keys(
      root, "",
      {"name", "description", "cascade", "subject", "check", "bench", "scenario", "gate",
       "deployment_key", "deployment", "review", "coverage", "executor", "build", "components"});
  Objective objective;
  objective.file = file;
  objective.name = reader.optional_string(root, "name", "").value_or("");
  objective.description = reader.optional_string(root, "description", "").value_or("");
  if (const toml::node* cascade = root.get("cascade")) {
    const std::string mode = reader.string_of(*cascade, "cascade");
    if (mode == "all") {
      objective.cascade = CascadeMode::kAll;
    } else if (mode != "stop-at-first-failure" && mode != "stop") {
      reader.fail(
          *cascade, "cascade",
          "expected \"stop\" (or \"stop-at-first-failure\") or \"all\", found \"" + mode + "\"");
    }
  }
  if (const toml::node* coverage = root.get("coverage")) {
    const toml::table& table = reader.table_of(*coverage, "coverage");
    reader.allow_keys(table, "coverage", {"ungated"});
    if (const toml::node* ungated = table.get("ungated")) {
      const std::string key = "coverage.ungated";
      for (const auto& [probe, node] : Reader::ordered(reader.table_of(*ungated, key))) {
        const std::string reason = reader.string_of(*node, child(key, probe));
        if (reason.empty()) {
          reader.fail(*node, child(key, probe),
                      "expected the reason no gate covers probe '" + probe + "', found ''");
        }
        objective.coverage_ungated.emplace_back(probe, reason);
      }
    }
  }
  if (const toml::node* executor = root.get("executor")) {
    objective.executor = read_executor_spec(reader, reader.table_of(*executor, "executor"));
  }
  if (const toml::node* build = root.get("build")) {
    objective.build = read_build(reader, reader.table_of(*build, "build"));
  }
  if (const toml::node* components = root.get("components")) {
    for (const auto& [name, node] : Reader::ordered(reader.table_of(*components, "components"))) {
      const std::string key = child("components", name);
      if (!is_word(name)) {
        reader.fail(*node, key,
                    "expected a component name of letters, digits and '_', found '" + name + "'");
      }
      const std::string description = reader.string_of(*node, key);
      if (description.empty()) {
        reader.fail(*node, key,
                    "expected what component '" + name + "' is (the code it names), found ''");
      }
      objective.components.push_back({name, description, Reader::line_of(*node)});
    }
  }
  const std::filesystem::path base = file.parent_path();
  objective.subject =
      read_subject(reader, reader.table_of(reader.required(root, "subject", ""), "subject"), base);
  if (const toml::node* node = root.get("check")) {
    objective.checks = read_entries(reader, *node, Layer::kCheck, base, objective.components);
  }
  if (const toml::node* node = root.get("bench")) {
    objective.benches = read_entries(reader, *node, Layer::kBench, base, objective.components);
  }
  if (const toml::node* node = root.get("scenario")) {
    objective.scenarios = read_entries(reader, *node, Layer::kScenario, base, objective.components);
  }
  if (objective.checks.empty() && objective.benches.empty() && objective.scenarios.empty()) {
    reader.fail(root, "check", "expected at least one [[check]], [[bench]] or [[scenario]]");
  }

  const toml::node* keys_node = root.get("deployment_key");
  if (keys_node != nullptr) {
    if (!keys_node->is_array_of_tables()) {
      reader.expected(*keys_node, "deployment_key", "an array of tables ([[deployment_key]])");
    }
    const toml::array& array = *keys_node->as_array();
    for (size_t index = 0; index < array.size(); ++index) {
      DeploymentKey key = read_deployment_key(reader, *array[index].as_table(), index);
      if (objective.find_deployment_key(key.key) != nullptr) {
        reader.fail(key.line, indexed("deployment_key", index) + ".key",
                    "'" + key.key + "' is declared twice");
      }
      objective.deployment_keys.push_back(std::move(key));
    }
    validate_implications(reader, objective, *keys_node);
  }
  if (const toml::node* node = root.get("deployment")) {
    if (!node->is_array_of_tables()) {
      reader.expected(*node, "deployment", "an array of tables ([[deployment]])");
    }
    const toml::array& array = *node->as_array();
    for (size_t index = 0; index < array.size(); ++index) {
      Deployment deployment =
          read_deployment(reader, *array[index].as_table(), index, objective.deployment_keys);
      if (objective.find_deployment(deployment.name) != nullptr) {
        reader.fail(deployment.line, indexed("deployment", index) + ".name",
                    "'" + deployment.name + "' names two deployments");
      }
      objective.deployments.push_back(std::move(deployment));
    }
  }
  if (const toml::node* node = root.get("gate")) {
    if (!node->is_array_of_tables())
      reader.expected(*node, "gate", "an array of tables ([[gate]])");
    const toml::array& array = *node->as_array();
    for (size_t index = 0; index < array.size(); ++index) {
      GateSpec gate = read_gate(reader, *array[index].as_table(), index);
      for (const auto& other : objective.gates) {
        if (other.name == gate.name) {
          reader.fail(*array[index].as_table()->get("name"), indexed("gate", index) + ".name",
                      "'" + gate.name + "' names two gates (the other on line " +
                          std::to_string(other.line) + ")");
        }
      }
      GateValidator(reader, objective, gate, indexed("gate", index) + ".expr").validate();
      objective.gates.push_back(std::move(gate));
    }
  }
  if (const toml::node* node = root.get("review")) {
    const toml::table& review = reader.table_of(*node, "review");
    reader.allow_keys(review, "review", {"numerics", "concurrency", "production-risk"});
    for (const auto& [name, category] : Reader::ordered(review)) {
      objective.review.push_back(read_review_category(reader, name, *category));
    }
    validate_review(reader, objective, review);
  }
  for (const PointResources& wanted : objective.executor.resources) {
    bool found = false;
    for (Layer layer : {Layer::kCheck, Layer::kBench, Layer::kScenario}) {
      found = found || objective.find_entry(layer, wanted.entry) != nullptr;
    }
    if (!found) {
      reader.fail(wanted.line, "executor.resources." + wanted.entry,
                  "names no [[check]], [[bench]] or [[scenario]] entry");
    }
  }
  return objective;
}

}  // namespace loupe::gate
