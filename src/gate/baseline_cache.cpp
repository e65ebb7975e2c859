#include "gate/baseline_cache.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/process.hpp"
#include "core/sha256.hpp"
#include "loupe/error.hpp"
#include "probe/runner.hpp"

extern char** environ;

namespace loupe::gate {
namespace {

// The format of an entry; an entry of another format is a miss.
constexpr int kEntryFormat = 1;

std::string read_bytes(const std::filesystem::path& file, const std::string& what) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw Error(ErrorCode::kInput, "cannot read " + what + " " + file.string(),
                "--no-baseline-cache runs the baseline's check points without the cache");
  }
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::filesystem::path find_program(const SubjectSpec& subject) {
  namespace fs = std::filesystem;
  if (subject.command.empty()) {
    throw Error(ErrorCode::kInput, "the baseline's subject command is empty",
                "name the earlier build's program with --baseline");
  }
  const std::string& name = subject.command.front();
  if (name.find('/') != std::string::npos) {
    fs::path path(name);
    if (path.is_relative()) path = subject.working_dir.value_or(fs::current_path()) / path;
    return fs::absolute(path).lexically_normal();
  }
  const char* search = std::getenv("PATH");
  std::istringstream folders(search != nullptr ? search : "");
  for (std::string folder; std::getline(folders, folder, ':');) {
    const fs::path candidate = fs::path(folder.empty() ? "." : folder) / name;
    if (::access(candidate.c_str(), X_OK) == 0 && fs::is_regular_file(candidate)) {
      return fs::absolute(candidate).lexically_normal();
    }
  }
  throw Error(ErrorCode::kInput, "the baseline's program '" + name + "' is not in PATH",
              "--no-baseline-cache runs the baseline's check points without the cache");
}

// The libraries `ldd PROGRAM` resolves ("name => /path (0x...)" and "/lib64/ld-... (0x...)"); a
// static executable has none. Throws when ldd cannot run or names a library it did not find.
std::vector<std::filesystem::path> shared_libraries(const std::filesystem::path& program) {
  ProcessSpec spec;
  spec.argv = {"ldd", program.string()};
  spec.timeout = std::chrono::seconds(60);
  const ProcessResult result = run_process(spec);
  const std::string& text = result.stdout_text;
  if (!result.succeeded()) {
    if (text.find("not a dynamic executable") != std::string::npos ||
        result.stderr_text.find("not a dynamic executable") != std::string::npos) {
      return {};
    }
    throw Error(ErrorCode::kInput,
                "ldd " + program.string() + " " + result.describe() + ": " + result.stderr_tail(3),
                "--no-baseline-cache runs the baseline's check points without the cache");
  }
  std::vector<std::filesystem::path> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("not found") != std::string::npos) {
      throw Error(ErrorCode::kInput,
                  "ldd " + program.string() + ": a library is not found (" + line + ")",
                  "the baseline build cannot start as it is; rebuild it or fix LD_LIBRARY_PATH");
    }
    std::string path;
    const size_t arrow = line.find("=> ");
    if (arrow != std::string::npos) {
      path = line.substr(arrow + 3);
    } else {
      const size_t start = line.find_first_not_of(" \t");
      if (start == std::string::npos || line[start] != '/') continue;  // linux-vdso: no file
      path = line.substr(start);
    }
    const size_t space = path.find(" (");
    if (space != std::string::npos) path.resize(space);
    if (path.empty() || path.front() != '/') continue;
    out.emplace_back(path);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Json rules_to_json(const probe::RunRequest& request) {
  if (!request.analyze.rules) return nullptr;
  Json rules = Json::array();
  for (const auto& rule : request.analyze.rules->rules) {
    rules.push_back({{"name", rule.name}, {"match", rule.match}, {"when", rule.when_text}});
  }
  return rules;
}

template <typename T>
Json optional_to_json(const std::optional<T>& value) {
  return value ? Json(*value) : Json(nullptr);
}

const Json& field(const Json& object, const char* name) {
  if (!object.is_object() || !object.contains(name)) {
    throw Error(ErrorCode::kInput, std::string("no field '") + name + "'");
  }
  return object.at(name);
}

std::string string_field(const Json& object, const char* name) {
  const Json& value = field(object, name);
  if (!value.is_string()) throw Error(ErrorCode::kInput, std::string("'") + name + "' not a text");
  return value.get<std::string>();
}

}  // namespace

BuildIdentity identify_build(const SubjectSpec& subject, const std::filesystem::path& analyser) {
  BuildIdentity identity;
  identity.program = find_program(subject);
  const std::string bytes = read_bytes(identity.program, "the baseline's program");
  if (bytes.size() < 4 || bytes.compare(0, 4,
                                        "\x7f"
                                        "ELF") != 0) {
    throw Error(ErrorCode::kInput,
                "the baseline's program " + identity.program.string() +
                    " is not an ELF executable: what a script loads is not known, so its check "
                    "results are not cached",
                "the baseline's check points run on every run");
  }
  // An interpreter with a script (`python3 subject.py`): the script is one file of many it may
  // import, none of which a hash of the command's files would cover.
  const std::filesystem::path folder =
      subject.working_dir.value_or(std::filesystem::current_path());
  for (size_t index = 1; index < subject.command.size(); ++index) {
    std::filesystem::path word(subject.command[index]);
    if (word.is_relative()) word = folder / word;
    std::error_code ignored;
    if (std::filesystem::is_regular_file(word, ignored)) {
      throw Error(ErrorCode::kInput,
                  "the baseline's command names a file beside its program (" +
                      subject.command[index] +
                      "): what that file loads is not known, so its check results are not cached",
                  "the baseline's check points run on every run");
    }
  }
  identity.files.emplace_back(identity.program, sha256_hex(bytes));
  for (const auto& library : shared_libraries(identity.program)) {
    identity.files.emplace_back(library, sha256_hex(read_bytes(library, "the library")));
  }
  if (!analyser.empty()) {
    identity.files.emplace_back(analyser, sha256_hex(read_bytes(analyser, "loupe's executable")));
  }
  // The bytes decide, not where they lie: the program's path is in each request's command line
  // already, and a loupe or a library at another path with the same bytes analyses and runs alike.
  std::string text;
  for (const auto& file : identity.files) text += file.second + "\n";
  identity.hash = sha256_hex(text);
  return identity;
}

Json describe_request(const probe::RunRequest& request, int64_t repeat) {
  Json out = Json::object();
  out["probe"] = request.probe;
  out["sets"] = request.sets;
  out["seed"] = optional_to_json(request.seed);
  out["repeat"] = repeat;
  out["check_repeats"] = optional_to_json(request.repeat);
  out["precision"] = optional_to_json(request.precision);
  out["budget_s"] = optional_to_json(request.budget_s);
  out["round"] = optional_to_json(request.round);
  // Only where set: a check has none, and its keys stay those stored before benches took it.
  if (!request.variants.empty()) out["variants"] = request.variants;
  out["hidden"] = request.hidden;
  out["hidden_point"] = optional_to_json(request.hidden_point);
  out["add_hidden_point"] = request.add_hidden_point;
  out["sandbox"] = request.sandbox;
  out["subject_command"] = request.subject_command;
  out["launch"] = request.launch;
  out["pass_env"] = request.pass_env;
  // The values the subject would get from loupe's environment (core/process.hpp's allowlist and
  // the objective's pass_env), sorted by name.
  std::vector<std::string> allowed = subject_environment_allowlist();
  allowed.insert(allowed.end(), request.pass_env.begin(), request.pass_env.end());
  std::vector<std::string> environment;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const size_t equals = text.find('=');
    if (equals == std::string::npos) continue;
    if (environment_allowed(std::string_view(text).substr(0, equals), allowed)) {
      environment.push_back(text);
    }
  }
  std::sort(environment.begin(), environment.end());
  out["environment"] = environment;
  out["tolerances"] = request.analyze.tolerances;
  out["rules"] = rules_to_json(request);
  out["threshold"] = number_to_json(request.analyze.threshold);
  return out;
}

Json cached_point_to_json(const PointResult& point) {
  Json out = Json::object();
  out["layer"] = std::string(layer_name(point.layer));
  out["entry"] = point.entry;
  out["probe"] = point.probe;
  Json params = Json::array();
  for (const auto& [name, value] : point.params) params.push_back({name, value_to_json(value)});
  out["params"] = std::move(params);
  out["repeat"] = point.repeat;
  out["seed"] = point.seed;
  out["verdict"] = std::string(verdict_name(point.verdict));
  Json metrics = Json::array();
  for (const auto& metric : point.metrics) {
    metrics.push_back({{"variant", metric.variant},
                       {"name", metric.name},
                       {"value", number_to_json(metric.value)}});
  }
  out["metrics"] = std::move(metrics);
  Json findings = Json::array();
  for (const auto& finding : point.findings) findings.push_back(finding_to_json(finding));
  out["findings"] = std::move(findings);
  out["observation_dir"] = point.observation_dir;
  out["reproduce"] = point.reproduce;
  out["wall_s"] = number_to_json(point.wall_s);
  return out;
}

PointResult cached_point_from_json(const Json& json) {
  PointResult point;
  point.layer = parse_layer(string_field(json, "layer"));
  point.entry = string_field(json, "entry");
  point.probe = string_field(json, "probe");
  const Json& params = field(json, "params");
  if (!params.is_array()) throw Error(ErrorCode::kInput, "'params' not an array");
  for (const Json& pair : params) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string()) {
      throw Error(ErrorCode::kInput, "'params' holds " + pair.dump() + ", not [name, value]");
    }
    point.params.emplace_back(pair[0].get<std::string>(), value_from_json(pair[1], "params"));
  }
  const Json& repeat = field(json, "repeat");
  const Json& seed = field(json, "seed");
  if (!repeat.is_number_integer() || !seed.is_number_unsigned()) {
    throw Error(ErrorCode::kInput, "'repeat' or 'seed' not an integer");
  }
  point.repeat = repeat.get<int64_t>();
  point.seed = seed.get<uint64_t>();
  point.verdict = parse_verdict(string_field(json, "verdict"));
  const Json& metrics = field(json, "metrics");
  if (!metrics.is_array()) throw Error(ErrorCode::kInput, "'metrics' not an array");
  for (const Json& metric : metrics) {
    point.metrics.push_back({string_field(metric, "variant"), string_field(metric, "name"),
                             number_from_json(field(metric, "value"), "metrics.value")});
  }
  const Json& findings = field(json, "findings");
  if (!findings.is_array()) throw Error(ErrorCode::kInput, "'findings' not an array");
  for (const Json& finding : findings) point.findings.push_back(finding_from_json(finding));
  point.observation_dir = string_field(json, "observation_dir");
  point.reproduce = string_field(json, "reproduce");
  point.wall_s = number_from_json(field(json, "wall_s"), "wall_s");
  return point;
}

BaselineCache::BaselineCache(std::filesystem::path dir, std::string build_hash, std::string run_id)
    : dir_(std::move(dir)), build_hash_(std::move(build_hash)), run_id_(std::move(run_id)) {}

std::string BaselineCache::key(const Json& description) const {
  return sha256_hex("loupe baseline cache " + std::to_string(kEntryFormat) + "\n" + build_hash_ +
                    "\n" + description.dump());
}

std::optional<CachedPoint> BaselineCache::find(const std::string& key) {
  const std::filesystem::path file = dir_ / (key + ".json");
  std::error_code missing;
  if (!std::filesystem::exists(file, missing)) return std::nullopt;
  try {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(ErrorCode::kInput, "cannot be read");
    const Json entry = Json::parse(in, nullptr, false);
    if (entry.is_discarded()) throw Error(ErrorCode::kInput, "is not valid JSON");
    const Json& format = field(entry, "format");
    if (!format.is_number_integer() || format.get<int>() != kEntryFormat) {
      throw Error(ErrorCode::kInput,
                  "has format " + format.dump() + ", not " + std::to_string(kEntryFormat));
    }
    if (string_field(entry, "key") != key) {
      throw Error(ErrorCode::kInput, "holds another key's point");
    }
    CachedPoint cached;
    cached.run = string_field(entry, "run");
    cached.point = cached_point_from_json(field(entry, "point"));
    if (cached.point.layer != Layer::kCheck) {
      throw Error(ErrorCode::kInput, "holds a point that is not a check's");
    }
    return cached;
  } catch (const Error& error) {
    warnings_.push_back("baseline cache: " + file.string() + " " + error.message() +
                        "; a miss (the point runs and its result replaces the entry)");
  } catch (const std::exception& error) {
    warnings_.push_back("baseline cache: " + file.string() + " is malformed (" + error.what() +
                        "); a miss (the point runs and its result replaces the entry)");
  }
  return std::nullopt;
}

void BaselineCache::store(const std::string& key, const PointResult& point) {
  if (point.layer != Layer::kCheck) return;
  Json entry = Json::object();
  entry["format"] = kEntryFormat;
  entry["key"] = key;
  entry["run"] = run_id_;
  entry["point"] = cached_point_to_json(point);
  const std::filesystem::path file = dir_ / (key + ".json");
  // A temporary name of this process: two runs storing the same key never mix their bytes.
  const std::filesystem::path partial =
      dir_ / (key + ".json." + std::to_string(::getpid()) + ".partial");
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    out << entry.dump() << "\n";
    if (!out) {
      warnings_.push_back("baseline cache: cannot write " + partial.string() +
                          "; the point is not cached");
      std::filesystem::remove(partial, error);
      return;
    }
  }
  std::filesystem::rename(partial, file, error);
  if (error) {
    warnings_.push_back("baseline cache: cannot rename " + partial.string() + " to " +
                        file.string() + " (" + error.message() + "); the point is not cached");
    std::filesystem::remove(partial, error);
    return;
  }
  ++stored_;
}

}  // namespace loupe::gate
