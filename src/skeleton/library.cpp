#include "skeleton/library.hpp"

#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <tuple>

#include "core/json.hpp"
#include "loupe/error.hpp"

#ifndef LOUPE_SKELETON_SOURCE_DIR
#define LOUPE_SKELETON_SOURCE_DIR "skeletons"
#endif

namespace loupe::skeleton {
namespace {

constexpr std::string_view kHint = "skeletons/README.md documents every key";

constexpr std::array<std::pair<EvidenceStrength, std::string_view>, 4> kStrengthWords = {{
    {EvidenceStrength::kFixedUpstream, "fixed-upstream"},
    {EvidenceStrength::kPublished, "published"},
    {EvidenceStrength::kMeasured, "measured"},
    {EvidenceStrength::kReasoned, "reasoned"},
}};

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

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& word : words) {
    if (!out.empty()) out += ", ";
    out += word;
  }
  return out;
}

std::string child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string indexed(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

// Reads one skeleton file's TOML tree, failing with file, line and key.
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(int line, const std::string& key, const std::string& message) const {
    throw Error(ErrorCode::kConfig,
                file_ + ":" + std::to_string(line) + ": " + key + ": " + message,
                std::string(kHint));
  }
  [[noreturn]] void fail(const toml::node& node, const std::string& key,
                         const std::string& message) const {
    fail(line_of(node), key, message);
  }
  [[noreturn]] void expected(const toml::node& node, const std::string& key,
                             const std::string& what) const {
    fail(node, key, "expected " + what + ", found " + type_phrase(node));
  }
  static int line_of(const toml::node& node) { return static_cast<int>(node.source().begin.line); }

  void allow_keys(const toml::table& table, const std::string& path,
                  const std::vector<std::string>& allowed) const {
    // Report the first unknown key in file order, so the message is stable.
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
  const toml::table& table_of(const toml::node& node, const std::string& key) const {
    if (!node.is_table()) expected(node, key, "a table");
    return *node.as_table();
  }
  const toml::node& required(const toml::table& table, std::string_view key,
                             const std::string& path) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) fail(table, child(path, key), "missing; this key is required");
    return *node;
  }
  std::string string_of(const toml::node& node, const std::string& key) const {
    if (!node.is_string()) expected(node, key, "a string");
    return node.as_string()->get();
  }
  std::string required_text(const toml::table& table, std::string_view key,
                            const std::string& path) const {
    const toml::node& node = required(table, key, path);
    std::string text = string_of(node, child(path, key));
    if (std::all_of(text.begin(), text.end(),
                    [](char c) { return std::isspace(static_cast<unsigned char>(c)); })) {
      fail(node, child(path, key), "expected a non-empty string");
    }
    return text;
  }
  std::string optional_text(const toml::table& table, std::string_view key,
                            const std::string& path) const {
    const toml::node* node = table.get(key);
    return node == nullptr ? std::string() : string_of(*node, child(path, key));
  }
  const toml::array& array_of(const toml::node& node, const std::string& key) const {
    if (!node.is_array()) expected(node, key, "an array");
    return *node.as_array();
  }
  std::vector<std::string> strings_of(const toml::table& table, std::string_view key,
                                      const std::string& path) const {
    std::vector<std::string> out;
    const toml::node* node = table.get(key);
    if (node == nullptr) return out;
    const toml::array& array = array_of(*node, child(path, key));
    for (size_t index = 0; index < array.size(); ++index) {
      out.push_back(string_of(array[index], indexed(child(path, key), index)));
    }
    return out;
  }

 private:
  std::string file_;
};

bool is_skeleton_id(std::string_view id) {
  return !id.empty() && std::all_of(id.begin(), id.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) ||
           std::isdigit(static_cast<unsigned char>(c)) || c == '-';
  });
}

Params run_settings(const ledger::RunRecord& run) {
  Params settings;
  Json config;
  try {
    config = Json::parse(run.config_json);
  } catch (const Json::exception& error) {
    throw Error(ErrorCode::kInput,
                "run " + run.id + ": its recorded config is not JSON: " + error.what(),
                "the ledger holds what `loupe run` recorded; re-run the objective");
  }
  if (!config.is_object() || !config.contains("settings")) return settings;
  const Json& values = config["settings"];
  if (!values.is_object()) {
    throw Error(ErrorCode::kInput, "run " + run.id +
                                       ": config.settings: expected an object, found " +
                                       std::string(values.type_name()));
  }
  for (const auto& [key, value] : values.items()) {
    settings.emplace_back(key, value_from_json(value, "config.settings." + key));
  }
  return settings;
}

}  // namespace

std::string_view evidence_strength_name(EvidenceStrength strength) {
  for (const auto& [value, word] : kStrengthWords) {
    if (value == strength) return word;
  }
  return "?";
}

double evidence_weight(EvidenceStrength strength) {
  switch (strength) {
    case EvidenceStrength::kFixedUpstream:
      return 1.0;
    case EvidenceStrength::kPublished:
      return 0.6;
    case EvidenceStrength::kMeasured:
      return 0.5;
    case EvidenceStrength::kReasoned:
      return 0.3;
  }
  return 0;
}

Skeleton parse_skeleton(std::string_view text, const std::filesystem::path& file) {
  const Reader reader(file.string());
  toml::table root;
  try {
    root = toml::parse(text, file.string());
  } catch (const toml::parse_error& error) {
    throw Error(ErrorCode::kConfig,
                file.string() + ":" + std::to_string(error.source().begin.line) + ":" +
                    std::to_string(error.source().begin.column) +
                    ": TOML syntax: " + std::string(error.description()),
                std::string(kHint));
  }
  reader.allow_keys(root, "",
                    {"id", "title", "tags", "applies_when", "transformation", "constraints",
                     "validation", "evidence"});
  Skeleton skeleton;
  skeleton.file = file;
  const toml::node& id_node = reader.required(root, "id", "");
  skeleton.id = reader.string_of(id_node, "id");
  if (!is_skeleton_id(skeleton.id)) {
    reader.fail(id_node, "id",
                "expected lowercase letters, digits and '-', found '" + skeleton.id + "'");
  }
  if (file.extension() == ".toml" && file.stem().string() != skeleton.id) {
    reader.fail(
        id_node, "id",
        "expected '" + file.stem().string() + "' (the file's name), found '" + skeleton.id + "'");
  }
  skeleton.title = reader.required_text(root, "title", "");
  skeleton.tags = reader.strings_of(root, "tags", "");

  const toml::node& applies_when = reader.required(root, "applies_when", "");
  skeleton.applies_when = reader.string_of(applies_when, "applies_when");
  skeleton.applies_when_line = Reader::line_of(applies_when);
  try {
    skeleton.condition = parse_condition(skeleton.applies_when);
  } catch (const Error& error) {
    reader.fail(applies_when, "applies_when", error.message());
  }

  const toml::table& transformation =
      reader.table_of(reader.required(root, "transformation", ""), "transformation");
  reader.allow_keys(transformation, "transformation", {"summary", "code"});
  skeleton.transformation = reader.required_text(transformation, "summary", "transformation");
  if (const toml::node* code = transformation.get("code")) {
    const toml::array& pointers = reader.array_of(*code, "transformation.code");
    for (size_t index = 0; index < pointers.size(); ++index) {
      const std::string path = indexed("transformation.code", index);
      const toml::table& pointer = reader.table_of(pointers[index], path);
      reader.allow_keys(pointer, path, {"path", "symbol"});
      skeleton.code.push_back({reader.required_text(pointer, "path", path),
                               reader.optional_text(pointer, "symbol", path)});
    }
  }

  const toml::table& constraints =
      reader.table_of(reader.required(root, "constraints", ""), "constraints");
  reader.allow_keys(constraints, "constraints",
                    {"registers", "shared_memory", "parallelism", "precision"});
  skeleton.constraints.registers = reader.required_text(constraints, "registers", "constraints");
  skeleton.constraints.shared_memory =
      reader.required_text(constraints, "shared_memory", "constraints");
  skeleton.constraints.parallelism =
      reader.required_text(constraints, "parallelism", "constraints");
  skeleton.constraints.precision = reader.required_text(constraints, "precision", "constraints");

  const toml::table& validation =
      reader.table_of(reader.required(root, "validation", ""), "validation");
  reader.allow_keys(validation, "validation", {"probes", "gates", "how"});
  skeleton.validation.probes = reader.strings_of(validation, "probes", "validation");
  skeleton.validation.gates = reader.strings_of(validation, "gates", "validation");
  skeleton.validation.how = reader.required_text(validation, "how", "validation");
  if (skeleton.validation.probes.empty() && skeleton.validation.gates.empty()) {
    reader.fail(validation, "validation", "expected at least one of probes and gates");
  }

  const toml::table& evidence = reader.table_of(reader.required(root, "evidence", ""), "evidence");
  reader.allow_keys(evidence, "evidence", {"strength", "items"});
  const toml::node& strength = reader.required(evidence, "strength", "evidence");
  const std::string strength_word = reader.string_of(strength, "evidence.strength");
  bool known = false;
  std::vector<std::string> words;
  for (const auto& [value, word] : kStrengthWords) {
    words.emplace_back(word);
    if (word == strength_word) {
      skeleton.strength = value;
      known = true;
    }
  }
  if (!known) {
    reader.fail(strength, "evidence.strength",
                "expected one of " + join(words) + ", found '" + strength_word + "'");
  }
  const toml::array& items =
      reader.array_of(reader.required(evidence, "items", "evidence"), "evidence.items");
  if (items.empty()) reader.fail(evidence, "evidence.items", "expected at least one item");
  for (size_t index = 0; index < items.size(); ++index) {
    const std::string path = indexed("evidence.items", index);
    const toml::table& item = reader.table_of(items[index], path);
    reader.allow_keys(item, path, {"source", "claim"});
    skeleton.evidence.push_back(
        {reader.required_text(item, "source", path), reader.required_text(item, "claim", path)});
  }
  return skeleton;
}

Skeleton load_skeleton_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw Error(ErrorCode::kInput, file.string() + ": cannot read the skeleton file",
                "check that the file exists and is readable");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_skeleton(text.str(), file);
}

std::vector<Skeleton> load_library(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code error;
  std::filesystem::directory_iterator it(dir, error);
  if (error) {
    throw Error(ErrorCode::kInput,
                "skeleton library " + dir.string() + ": cannot read the folder: " + error.message(),
                "set LOUPE_SKELETONS or pass --skeletons DIR to name the folder of skeleton files");
  }
  for (const auto& entry : it) {
    if (entry.is_regular_file() && entry.path().extension() == ".toml")
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<Skeleton> library;
  for (const auto& file : files) {
    Skeleton skeleton = load_skeleton_file(file);
    if (const Skeleton* other = find_skeleton(library, skeleton.id)) {
      throw Error(ErrorCode::kConfig,
                  file.string() + ":1: id: '" + skeleton.id + "' is already the id of " +
                      other->file.string(),
                  std::string(kHint));
    }
    library.push_back(std::move(skeleton));
  }
  return library;
}

std::filesystem::path default_library_dir() {
  if (const char* env = std::getenv("LOUPE_SKELETONS"); env != nullptr && *env != '\0') {
    return env;
  }
  std::error_code error;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    const auto beside = exe.parent_path() / ".." / ".." / "skeletons";
    if (std::filesystem::is_directory(beside, error)) return beside.lexically_normal();
  }
  return LOUPE_SKELETON_SOURCE_DIR;
}

std::vector<Match> match_run(const std::vector<Skeleton>& library, const ledger::RunRecord& run) {
  const Params settings = run_settings(run);
  std::vector<Match> matches;
  for (const auto& skeleton : library) {
    Evaluation evaluation = evaluate(skeleton.condition, run.findings, settings);
    if (!evaluation.holds) continue;
    matches.push_back({skeleton.id, evidence_weight(skeleton.strength) * evaluation.weight,
                       std::move(evaluation.reasons)});
  }
  std::stable_sort(matches.begin(), matches.end(), [](const Match& a, const Match& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.skeleton_id < b.skeleton_id;
  });
  return matches;
}

const Skeleton* find_skeleton(const std::vector<Skeleton>& library, std::string_view id) {
  for (const auto& skeleton : library) {
    if (skeleton.id == id) return &skeleton;
  }
  return nullptr;
}

Json skeleton_to_json(const Skeleton& skeleton, bool detail) {
  Json json = {{"id", skeleton.id},
               {"title", skeleton.title},
               {"applies_when", condition_to_string(skeleton.condition)},
               {"evidence_strength", evidence_strength_name(skeleton.strength)},
               {"file", skeleton.file.string()}};
  if (!detail) return json;
  json["tags"] = skeleton.tags;
  Json code = Json::array();
  for (const auto& pointer : skeleton.code) {
    code.push_back({{"path", pointer.path}, {"symbol", pointer.symbol}});
  }
  json["transformation"] = {{"summary", skeleton.transformation}, {"code", code}};
  json["constraints"] = {{"registers", skeleton.constraints.registers},
                         {"shared_memory", skeleton.constraints.shared_memory},
                         {"parallelism", skeleton.constraints.parallelism},
                         {"precision", skeleton.constraints.precision}};
  json["validation"] = {{"probes", skeleton.validation.probes},
                        {"gates", skeleton.validation.gates},
                        {"how", skeleton.validation.how}};
  Json items = Json::array();
  for (const auto& item : skeleton.evidence) {
    items.push_back({{"source", item.source}, {"claim", item.claim}});
  }
  json["evidence"] = {{"strength", evidence_strength_name(skeleton.strength)},
                      {"weight", evidence_weight(skeleton.strength)},
                      {"items", items}};
  return json;
}

Json match_to_json(const Match& match) {
  return {{"skeleton", match.skeleton_id}, {"score", match.score}, {"reasons", match.reasons}};
}

}  // namespace loupe::skeleton
