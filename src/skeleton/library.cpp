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

#include "config/toml_reader.hpp"
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

using config::child;
using config::indexed;
using config::join;
// Reads one skeleton file's TOML tree, failing with file, line and key.
using Reader = config::TomlReader;

bool is_skeleton_id(std::string_view id) {
  return !id.empty() && std::all_of(id.begin(), id.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) ||
           std::isdigit(static_cast<unsigned char>(c)) || c == '-';
  });
}

Params run_settings(const ledger::RunRecord& run) {
  Params settings;
  for (const auto& [key, value] : ledger::recorded_settings(run)) {
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
  const Reader reader(file.string(), std::string(kHint));
  const toml::table root = reader.parse(text);
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
  skeleton.tags = reader.optional_strings(root, "tags", "");

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
                               reader.optional_string(pointer, "symbol", path).value_or("")});
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
  skeleton.validation.probes = reader.optional_strings(validation, "probes", "validation");
  skeleton.validation.gates = reader.optional_strings(validation, "gates", "validation");
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
    // Installed (PREFIX/bin/loupe → PREFIX/share/loupe/skeletons), then the build tree
    // (ROOT/build/bin/loupe → ROOT/skeletons).
    for (const auto& beside : {exe.parent_path() / ".." / "share" / "loupe" / "skeletons",
                               exe.parent_path() / ".." / ".." / "skeletons"}) {
      if (std::filesystem::is_directory(beside, error)) return beside.lexically_normal();
    }
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
                       std::move(evaluation.reasons), std::move(evaluation.inferred)});
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
  return {{"skeleton", match.skeleton_id},
          {"score", match.score},
          {"reasons", match.reasons},
          {"inferred", match.inferred}};
}

}  // namespace loupe::skeleton
