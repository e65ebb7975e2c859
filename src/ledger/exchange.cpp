#include "ledger/exchange.hpp"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>

#include "core/limits.hpp"

namespace loupe::ledger {
namespace {

Json parse_stored_json(const std::string& text, std::string_view what, const std::string& run_id) {
  try {
    // A ledger written before imports were bounded may hold deeper JSON than loupe writes.
    check_json_nesting(text, "run " + run_id + ": its " + std::string(what));
    return Json::parse(text);
  } catch (const Json::exception& error) {
    throw Error(ErrorCode::kInput, "run " + run_id + ": its " + std::string(what) +
                                       " is not JSON: " + json_error_text(error));
  }
}

// Reads the import document field by field; every error names the source and the field path.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& expected) const {
    throw Error(ErrorCode::kInput, source_ + ": field '" + field + "': " + expected,
                "import reads what `loupe ledger export RUN` writes");
  }

  const Json& require(const Json& object, const std::string& path, const std::string& key) const {
    const std::string field = path.empty() ? key : path + "." + key;
    if (!object.is_object()) fail(path, "expected an object");
    auto it = object.find(key);
    if (it == object.end()) fail(field, "missing");
    return *it;
  }
  std::string string(const Json& object, const std::string& path, const std::string& key) const {
    const Json& value = require(object, path, key);
    if (!value.is_string()) {
      fail(path + "." + key, std::string("expected a string, found ") + value.type_name());
    }
    return value.get<std::string>();
  }
  const Json& object(const Json& parent, const std::string& path, const std::string& key) const {
    const Json& value = require(parent, path, key);
    if (!value.is_object()) {
      fail(path + "." + key, std::string("expected an object, found ") + value.type_name());
    }
    return value;
  }
  const Json& array(const Json& parent, const std::string& path, const std::string& key) const {
    const Json& value = require(parent, path, key);
    if (!value.is_array()) {
      fail(path + "." + key, std::string("expected an array, found ") + value.type_name());
    }
    return value;
  }
  template <class Parse>
  auto word(const Json& object, const std::string& path, const std::string& key,
            Parse parse) const {
    const std::string text = string(object, path, key);
    try {
      return parse(text);
    } catch (const Error& error) {
      fail(path + "." + key, error.message());
    }
  }
  // Fails on the first key (in document order) that `allowed` does not list: an export is read
  // whole against its schema, so a field loupe would drop silently is an error instead.
  void allow_keys(const Json& object, const std::string& path,
                  std::initializer_list<const char*> allowed) const {
    for (auto it = object.begin(); it != object.end(); ++it) {
      const bool known = std::any_of(allowed.begin(), allowed.end(),
                                     [&](const char* key) { return it.key() == key; });
      if (known) continue;
      std::string accepted;
      for (const char* key : allowed) accepted += (accepted.empty() ? "" : ", ") + std::string(key);
      fail(path.empty() ? it.key() : path + "." + it.key(),
           "unknown field; expected one of " + accepted);
    }
  }
  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

std::string index_path(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

// Leaves of two JSON values that differ, as dotted paths ("host.cpu"); "" for the root.
void collect_differences(const Json& a, const Json& b, const std::string& path,
                         std::vector<std::string>& out) {
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (auto it = a.begin(); it != a.end(); ++it) keys.insert(it.key());
    for (auto it = b.begin(); it != b.end(); ++it) keys.insert(it.key());
    // Keep A's order, then B's extra keys, so the report reads like the fingerprint.
    std::vector<std::string> ordered;
    for (auto it = a.begin(); it != a.end(); ++it) ordered.push_back(it.key());
    for (auto it = b.begin(); it != b.end(); ++it) {
      if (!a.contains(it.key())) ordered.push_back(it.key());
    }
    for (const auto& key : ordered) {
      const std::string child = path.empty() ? key : path + "." + key;
      if (!a.contains(key) || !b.contains(key)) {
        out.push_back(child);
      } else {
        collect_differences(a.at(key), b.at(key), child, out);
      }
    }
    return;
  }
  if (a != b) out.push_back(path.empty() ? "(whole fingerprint)" : path);
}

std::string verdict_or_dash(const std::optional<GateVerdict>& verdict) {
  return verdict ? std::string(gate_verdict_name(*verdict)) : std::string("-");
}

size_t width_of_names(const std::vector<GateChange>& gates) {
  size_t width = 4;
  for (const auto& gate : gates) width = std::max(width, gate.name.size());
  return width;
}

std::string padded(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

std::string short_hash(const std::string& hash) {
  return hash.size() > 12 ? hash.substr(0, 12) : (hash.empty() ? "-" : hash);
}

void render_findings(std::ostringstream& out, const std::vector<Finding>& findings, char mark,
                     size_t max_findings) {
  size_t shown = 0;
  for (const auto& finding : findings) {
    if (shown == max_findings) {
      out << "  ... " << findings.size() - shown << " more (--json lists them all)\n";
      break;
    }
    out << "  " << mark << " " << finding_key(finding) << " (" << severity_name(finding.severity)
        << "): " << finding.claim << "\n";
    ++shown;
  }
}

}  // namespace

Json run_to_json(const RunRecord& run) {
  Json gates = Json::array();
  for (const auto& gate : run.gates) {
    gates.push_back({{"name", gate.name},
                     {"verdict", gate_verdict_name(gate.verdict)},
                     {"statistics", parse_stored_json(gate.statistics_json,
                                                      "gate " + gate.name + " statistics", run.id)},
                     {"rule", gate.rule}});
  }
  Json findings = Json::array();
  for (const auto& finding : run.findings) findings.push_back(finding_to_json(finding));
  Json run_json = {
      {"id", run.id},
      {"status", run_status_name(run.status)},
      {"started_at", run.started_at},
      {"ended_at", run.ended_at ? Json(*run.ended_at) : Json(nullptr)},
      {"objective", {{"path", run.objective_path}, {"hash", run.objective_hash}}},
      {"git",
       {{"commit", run.git.commit},
        {"dirty", run.git.dirty},
        {"diff_hash", run.git.diff_hash},
        {"dirty_paths", run.git.dirty_paths}}},
      {"environment", parse_stored_json(run.environment_json, "environment", run.id)},
      {"config", parse_stored_json(run.config_json, "config", run.id)},
      {"gates", gates},
      {"findings", findings},
      {"observations", run.observations},
  };
  if (run.imported) {
    run_json["imported"] = {{"source", run.imported->source},
                            {"digest", run.imported->digest},
                            {"imported_at", run.imported->imported_at}};
  }
  return run_json;
}

std::string export_run(const RunRecord& run) {
  Json run_json = run_to_json(run);
  // Where a run was imported from is this ledger's record, not part of the run: the ledger that
  // imports the export records its own origin.
  run_json.erase("imported");
  Json document = {{"loupe_ledger_export", kExportVersion}, {"run", std::move(run_json)}};
  return document.dump(2) + "\n";
}

RunRecord import_run(std::string_view text, const std::string& source) {
  Json document;
  // An export nests about six levels; one nested 50,000 deep overflowed the stack, and one
  // 20,000 deep imported and then broke `loupe report`.
  check_json_nesting(text, source, kMaxJsonDepth);
  try {
    document = Json::parse(text);
  } catch (const Json::exception& error) {
    throw Error(ErrorCode::kInput, source + ": not JSON: " + json_error_text(error),
                "import reads what `loupe ledger export RUN` writes");
  }
  const Reader reader(source);
  if (!document.is_object()) {
    reader.fail("(document)", std::string("expected an object, found ") + document.type_name());
  }
  reader.allow_keys(document, "", {"loupe_ledger_export", "run"});
  const Json& version = reader.require(document, "", "loupe_ledger_export");
  if (!version.is_number_integer() || version.get<int64_t>() != kExportVersion) {
    reader.fail("loupe_ledger_export",
                "expected " + std::to_string(kExportVersion) + ", found " + version.dump());
  }
  const Json& run_json = reader.object(document, "", "run");
  const std::string path = "run";
  reader.allow_keys(run_json, path,
                    {"id", "status", "started_at", "ended_at", "objective", "git", "environment",
                     "config", "gates", "findings", "observations"});
  RunRecord run;
  run.id = reader.string(run_json, path, "id");
  // Run ids name folders under the home (runs/<run>/): the character set of probe names.
  if (!is_probe_name(run.id)) {
    reader.fail("run.id", "expected a run id of 1 to 128 characters of A-Z a-z 0-9 _ -, found '" +
                              run.id.substr(0, 80) + "'");
  }
  run.status = reader.word(run_json, path, "status", parse_run_status);
  if (run.status == RunStatus::kInProgress) {
    reader.fail("run.status", "an in-progress run cannot be imported; export it once it ended");
  }
  run.started_at = reader.string(run_json, path, "started_at");
  const Json& ended_at = reader.require(run_json, path, "ended_at");
  if (ended_at.is_string()) {
    run.ended_at = ended_at.get<std::string>();
  } else if (!ended_at.is_null()) {
    reader.fail("run.ended_at",
                std::string("expected a string or null, found ") + ended_at.type_name());
  }
  const Json& objective = reader.object(run_json, path, "objective");
  reader.allow_keys(objective, "run.objective", {"path", "hash"});
  run.objective_path = reader.string(objective, "run.objective", "path");
  run.objective_hash = reader.string(objective, "run.objective", "hash");
  const Json& git = reader.object(run_json, path, "git");
  reader.allow_keys(git, "run.git", {"commit", "dirty", "diff_hash", "dirty_paths"});
  run.git.commit = reader.string(git, "run.git", "commit");
  const Json& dirty = reader.require(git, "run.git", "dirty");
  if (!dirty.is_boolean()) {
    reader.fail("run.git.dirty", std::string("expected true or false, found ") + dirty.type_name());
  }
  run.git.dirty = dirty.get<bool>();
  run.git.diff_hash = reader.string(git, "run.git", "diff_hash");
  // Exports written before schema 3 have no dirty_paths: the run's changed paths are unknown.
  if (git.contains("dirty_paths")) {
    const Json& dirty_paths = reader.array(git, "run.git", "dirty_paths");
    for (size_t index = 0; index < dirty_paths.size(); ++index) {
      if (!dirty_paths[index].is_string()) {
        reader.fail(index_path("run.git.dirty_paths", index),
                    std::string("expected a string, found ") + dirty_paths[index].type_name());
      }
      run.git.dirty_paths.push_back(dirty_paths[index].get<std::string>());
    }
  }
  run.environment_json = reader.object(run_json, path, "environment").dump();
  run.config_json = reader.object(run_json, path, "config").dump();

  const Json& gates = reader.array(run_json, path, "gates");
  for (size_t index = 0; index < gates.size(); ++index) {
    const std::string gate_path = index_path("run.gates", index);
    GateRecord gate;
    if (gates[index].is_object()) {
      reader.allow_keys(gates[index], gate_path, {"name", "verdict", "statistics", "rule"});
    }
    gate.name = reader.string(gates[index], gate_path, "name");
    gate.verdict = reader.word(gates[index], gate_path, "verdict", parse_gate_verdict);
    gate.statistics_json = reader.object(gates[index], gate_path, "statistics").dump();
    gate.rule = reader.string(gates[index], gate_path, "rule");
    run.gates.push_back(std::move(gate));
  }
  const Json& findings = reader.array(run_json, path, "findings");
  for (size_t index = 0; index < findings.size(); ++index) {
    try {
      run.findings.push_back(finding_from_json(findings[index]));
    } catch (const Error& error) {
      reader.fail(index_path("run.findings", index), error.message());
    }
  }
  const Json& observations = reader.array(run_json, path, "observations");
  for (size_t index = 0; index < observations.size(); ++index) {
    if (!observations[index].is_string()) {
      reader.fail(index_path("run.observations", index),
                  std::string("expected a string, found ") + observations[index].type_name());
    }
    run.observations.push_back(observations[index].get<std::string>());
  }
  return run;
}

Verdict run_verdict(const RunRecord& run) {
  if (run.gates.empty()) return Verdict::kNone;
  bool unsure = false;
  for (const auto& gate : run.gates) {
    if (gate.verdict == GateVerdict::kFail) return Verdict::kFail;
    if (gate.verdict != GateVerdict::kPass) unsure = true;
  }
  return unsure ? Verdict::kInconclusive : Verdict::kPass;
}

std::string finding_key(const Finding& finding) {
  if (finding.where.params.empty()) return finding.id;
  return finding.id + "@" + params_to_string(finding.where.params);
}

RunComparison compare_runs(const RunRecord& a, const RunRecord& b) {
  RunComparison comparison;
  comparison.run_a = a.id;
  comparison.run_b = b.id;
  for (const auto& gate : a.gates) {
    GateChange change{gate.name, gate.verdict, std::nullopt};
    for (const auto& other : b.gates) {
      if (other.name == gate.name) change.after = other.verdict;
    }
    comparison.gates.push_back(change);
  }
  for (const auto& gate : b.gates) {
    const bool in_a = std::any_of(a.gates.begin(), a.gates.end(),
                                  [&](const GateRecord& other) { return other.name == gate.name; });
    if (!in_a) comparison.gates.push_back({gate.name, std::nullopt, gate.verdict});
  }
  std::set<std::string> keys_a;
  std::set<std::string> keys_b;
  for (const auto& finding : a.findings) keys_a.insert(finding_key(finding));
  for (const auto& finding : b.findings) keys_b.insert(finding_key(finding));
  std::set<std::string> seen;
  for (const auto& finding : b.findings) {
    const std::string key = finding_key(finding);
    if (!keys_a.count(key) && seen.insert(key).second) comparison.appeared.push_back(finding);
  }
  seen.clear();
  for (const auto& finding : a.findings) {
    const std::string key = finding_key(finding);
    if (!keys_b.count(key) && seen.insert(key).second) comparison.disappeared.push_back(finding);
  }
  collect_differences(parse_stored_json(a.environment_json, "environment", a.id),
                      parse_stored_json(b.environment_json, "environment", b.id), "",
                      comparison.environment_differences);
  comparison.objective_differs = a.objective_hash != b.objective_hash;
  for (const RunRecord* run : {&a, &b}) {
    if (run->imported)
      comparison.imported.push_back(run->id + " (from " + run->imported->source + ")");
  }
  return comparison;
}

std::string render_run_list(const std::vector<RunSummary>& runs, int64_t total, int64_t offset,
                            const std::string& ledger_file) {
  std::ostringstream out;
  if (total == 0) {
    out << "no runs in " << ledger_file << "; `loupe run OBJECTIVE` records one\n";
    return out.str();
  }
  if (runs.empty()) {
    out << "no runs at offset " << offset << "; " << ledger_file << " holds " << total
        << " (try --offset 0)\n";
    return out.str();
  }
  out << "runs " << offset + 1 << "-" << offset + static_cast<int64_t>(runs.size()) << " of "
      << total << " in " << ledger_file << " (newest first)\n";
  for (const auto& run : runs) {
    // Imported runs were not produced here: every listing says so.
    const std::string status =
        std::string(run_status_name(run.status)) + (run.imported ? " imported" : "");
    out << "  " << run.id << "  " << padded(status, 11) << "  " << run.started_at << "  gates "
        << run.gates_passed << " pass, " << run.gates_failed << " fail, " << run.gates_inconclusive
        << " inconclusive, " << run.gates_not_run << " not-run  findings " << run.findings << "  "
        << run.objective_path << "\n";
  }
  const int64_t next = offset + static_cast<int64_t>(runs.size());
  if (next < total) {
    out << total - next << " more: loupe ledger list --offset " << next << "\n";
  }
  return out.str();
}

Json run_list_to_json(const std::vector<RunSummary>& runs, int64_t total, int64_t offset) {
  Json list = Json::array();
  for (const auto& run : runs) {
    list.push_back({{"id", run.id},
                    {"status", run_status_name(run.status)},
                    {"started_at", run.started_at},
                    {"ended_at", run.ended_at ? Json(*run.ended_at) : Json(nullptr)},
                    {"objective", run.objective_path},
                    {"gates",
                     {{"pass", run.gates_passed},
                      {"fail", run.gates_failed},
                      {"inconclusive", run.gates_inconclusive},
                      {"not-run", run.gates_not_run}}},
                    {"findings", run.findings},
                    {"imported", run.imported}});
  }
  const int64_t next = offset + static_cast<int64_t>(runs.size());
  return {{"runs", list},
          {"total", total},
          {"offset", offset},
          {"next_offset", next < total ? Json(next) : Json(nullptr)}};
}

std::string render_run(const RunRecord& run, size_t max_findings) {
  std::ostringstream out;
  out << "run " << run.id << "  " << run_status_name(run.status) << "  started " << run.started_at;
  if (run.ended_at) out << ", ended " << *run.ended_at;
  out << "\n";
  if (run.imported) {
    out << "imported from " << run.imported->source << " (export sha256 "
        << short_hash(run.imported->digest) << ") at " << run.imported->imported_at
        << ": not produced by this ledger's loupe\n";
  }
  out << "objective " << run.objective_path << " (sha256 " << short_hash(run.objective_hash)
      << ")\n";
  out << "git " << (run.git.commit.empty() ? "-" : short_hash(run.git.commit));
  if (run.git.dirty) out << " dirty (diff sha256 " << short_hash(run.git.diff_hash) << ")";
  out << "\n";
  out << "config " << run.config_json << "\n";
  int64_t counts[4] = {0, 0, 0, 0};
  for (const auto& gate : run.gates) ++counts[static_cast<int>(gate.verdict)];
  out << "gates: " << counts[0] << " pass, " << counts[1] << " fail, " << counts[2]
      << " inconclusive, " << counts[3] << " not-run\n";
  size_t width = 4;
  for (const auto& gate : run.gates) width = std::max(width, gate.name.size());
  for (const auto& gate : run.gates) {
    out << "  " << padded(std::string(gate_verdict_name(gate.verdict)), 12) << " "
        << padded(gate.name, width) << "  " << gate.rule << "\n";
  }
  out << "findings: " << run.findings.size() << "\n";
  render_findings(out, run.findings, '*', max_findings);
  out << "observations: " << run.observations.size();
  if (!run.observations.empty()) out << " (first " << run.observations.front() << ")";
  out << "\n";
  return out.str();
}

std::string render_comparison(const RunComparison& comparison, size_t max_findings) {
  std::ostringstream out;
  out << "compare " << comparison.run_a << " -> " << comparison.run_b << "\n";
  size_t flipped = 0;
  for (const auto& gate : comparison.gates) flipped += gate.changed() ? 1 : 0;
  out << "gates: " << flipped << " changed, " << comparison.gates.size() - flipped
      << " unchanged\n";
  const size_t width = width_of_names(comparison.gates);
  for (const auto& gate : comparison.gates) {
    out << "  " << (gate.changed() ? "! " : "  ") << padded(gate.name, width) << "  "
        << padded(verdict_or_dash(gate.before), 12) << " -> " << verdict_or_dash(gate.after)
        << "\n";
  }
  out << "findings: " << comparison.appeared.size() << " appeared, "
      << comparison.disappeared.size() << " disappeared\n";
  render_findings(out, comparison.appeared, '+', max_findings);
  render_findings(out, comparison.disappeared, '-', max_findings);
  if (comparison.objective_differs) {
    out << "note: the two runs used different objective files (content hashes differ)\n";
  }
  for (const auto& run : comparison.imported) {
    out << "note: run " << run << " was imported: not produced by this ledger's loupe\n";
  }
  if (!comparison.environment_differences.empty()) {
    out << "warning: the environment fingerprints differ (";
    const size_t shown = std::min<size_t>(comparison.environment_differences.size(), 8);
    for (size_t index = 0; index < shown; ++index) {
      if (index > 0) out << ", ";
      out << comparison.environment_differences[index];
    }
    if (shown < comparison.environment_differences.size()) {
      out << ", and " << comparison.environment_differences.size() - shown << " more";
    }
    out << "): differences may come from the machine, not the change\n";
  }
  return out.str();
}

Json comparison_to_json(const RunComparison& comparison) {
  Json gates = Json::array();
  for (const auto& gate : comparison.gates) {
    gates.push_back({{"name", gate.name},
                     {"a", gate.before ? Json(gate_verdict_name(*gate.before)) : Json(nullptr)},
                     {"b", gate.after ? Json(gate_verdict_name(*gate.after)) : Json(nullptr)},
                     {"changed", gate.changed()}});
  }
  Json appeared = Json::array();
  for (const auto& finding : comparison.appeared) appeared.push_back(finding_to_json(finding));
  Json disappeared = Json::array();
  for (const auto& finding : comparison.disappeared) {
    disappeared.push_back(finding_to_json(finding));
  }
  return {{"a", comparison.run_a},
          {"b", comparison.run_b},
          {"gates", gates},
          {"findings", {{"appeared", appeared}, {"disappeared", disappeared}}},
          {"objective_differs", comparison.objective_differs},
          {"imported", comparison.imported},
          {"environment",
           {{"differs", !comparison.environment_differences.empty()},
            {"keys", comparison.environment_differences}}}};
}

}  // namespace loupe::ledger
