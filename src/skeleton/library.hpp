// skeleton/library.hpp — the skeleton library: validated optimisation moves, one TOML file each
// (skeletons/*.toml; skeletons/README.md documents the schema and the applies_when language),
// and matching them against a recorded run's findings and parameters.
//
// load_library reads every *.toml of a folder (sorted by file name) and validates it: unknown
// keys, wrong types, duplicate ids and applies_when expressions that do not parse are
// Error(kConfig) "FILE:LINE: KEY: expected ..." (applies_when errors add the column inside the
// expression). match_run evaluates each skeleton's condition against a run and ranks those that
// hold, best first, each with the reasons (finding ids and values) that made it hold.
// toml++ and nlohmann-json stay in the .cpp files (only json_fwd.hpp is included here).
// Thread-safety: value types and pure functions; a loaded library may be shared read-only.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ledger/ledger.hpp"
#include "skeleton/condition.hpp"

namespace loupe::skeleton {

// How strong the evidence for a skeleton is; it weighs a match's score (skeletons/README.md).
enum class EvidenceStrength { kFixedUpstream, kPublished, kMeasured, kReasoned };

// "fixed-upstream", "published", "measured", "reasoned"; the parser throws Error(kConfig).
std::string_view evidence_strength_name(EvidenceStrength strength);
// 1.0, 0.6, 0.5, 0.3: a fix proven upstream outranks a published idea, a move measured here,
// and one only reasoned out.
double evidence_weight(EvidenceStrength strength);

struct CodePointer {
  std::string path;    // repository path, e.g. kda/math/cp.cpp
  std::string symbol;  // a function or type in it; may be empty
  bool operator==(const CodePointer&) const = default;
};

struct ResourceCost {
  std::string registers;
  std::string shared_memory;
  std::string parallelism;
  std::string precision;
  bool operator==(const ResourceCost&) const = default;
};

struct Validation {
  std::vector<std::string> probes;  // subject probes that prove it, e.g. "cp_vs_nocp"
  std::vector<std::string> gates;   // gate expressions or gate names of examples/kda objectives
  std::string how;                  // prose: what to run and what should change
  bool operator==(const Validation&) const = default;
};

struct EvidenceItem {
  std::string source;  // "ledger run r2026...", "reference/kda.md incident 1", a URL
  std::string claim;   // the result, with its figures
  bool operator==(const EvidenceItem&) const = default;
};

struct Skeleton {
  std::string id;                 // [a-z0-9-]+, unique in the library
  std::string title;              // one line
  std::string applies_when;       // the expression as written
  Condition condition;            // its parsed form
  std::string transformation;     // what to change, in prose
  std::vector<CodePointer> code;  // where, in kda/
  ResourceCost constraints;
  Validation validation;
  EvidenceStrength strength = EvidenceStrength::kReasoned;
  std::vector<EvidenceItem> evidence;
  std::vector<std::string> tags;
  std::filesystem::path file;
  int applies_when_line = 0;  // line of applies_when in `file`
};

// Every *.toml under `dir` (not recursive), sorted by file name. Throws Error(kInput) when the
// folder cannot be read and Error(kConfig) "FILE:LINE: KEY: ..." for a bad file.
std::vector<Skeleton> load_library(const std::filesystem::path& dir);
// One file (load_library calls it). `text` overload: `file` names it in errors.
Skeleton load_skeleton_file(const std::filesystem::path& file);
Skeleton parse_skeleton(std::string_view text, const std::filesystem::path& file);

// $LOUPE_SKELETONS when set, else, beside the running executable, ../share/loupe/skeletons (an
// installed PREFIX/bin/loupe) or ../../skeletons (build/bin/loupe → skeletons/) when it exists,
// else the source tree's skeletons/ (compile definition).
std::filesystem::path default_library_dir();

struct Match {
  std::string skeleton_id;
  // evidence_weight(strength) × the condition's Evaluation::weight (condition.hpp): stronger
  // evidence and more, more severe confirming findings rank higher.
  double score = 0;
  std::vector<std::string> reasons;   // one per condition atom that held, with ids and values
  std::vector<std::string> inferred;  // those of `reasons` that rest on inferred findings
  bool operator==(const Match&) const = default;
};

// The skeletons whose applies_when holds for the run, best first (score, then id).
std::vector<Match> match_run(const std::vector<Skeleton>& library, const ledger::RunRecord& run);

// nullptr when no skeleton has that id.
const Skeleton* find_skeleton(const std::vector<Skeleton>& library, std::string_view id);

// {"id", "title", "applies_when", "evidence_strength", "file"} plus, with detail, the
// transformation, code pointers, constraints, validation, evidence and tags.
nlohmann::ordered_json skeleton_to_json(const Skeleton& skeleton, bool detail);
// {"skeleton", "score", "reasons"}.
nlohmann::ordered_json match_to_json(const Match& match);

}  // namespace loupe::skeleton
