// Running a subject as a child process and placing its observation (see runner.hpp).
#include "probe/runner.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "check/compare.hpp"
#include "core/home.hpp"
#include "core/limits.hpp"
#include "core/process.hpp"
#include "core/sha256.hpp"
#include "core/trust.hpp"
#include "counters/analyze.hpp"
#include "counters/ncu.hpp"
#include "probe/counters_pass.hpp"
#include "probe/sandbox.hpp"

namespace loupe::probe {
namespace {

std::string join_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& arg : argv) {
    if (!out.empty()) out += ' ';
    const bool plain =
        !arg.empty() && arg.find_first_of(" \t\n'\"\\$`*?;&|<>()[]{}#~!") == std::string::npos;
    if (plain) {
      out += arg;
    } else {
      std::string quoted = "'";
      for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += quoted + "'";
    }
  }
  return out;
}

struct Limits {
  double timeout_s = 600;
  uint64_t memory_limit_bytes = 0;
  size_t output_limit_bytes = size_t{1} << 20;
  std::optional<std::filesystem::path> working_dir;  // the run's private directory
  std::vector<std::string> sandbox;                  // a prefix (bwrap ...) or empty
  std::vector<std::string> pass_env;                 // beyond subject_environment_allowlist()
};

ProcessResult run_subject(std::vector<std::string> argv, const Limits& limits) {
  ProcessSpec spec;
  spec.argv = limits.sandbox;
  spec.argv.insert(spec.argv.end(), argv.begin(), argv.end());
  spec.working_dir = limits.working_dir;
  spec.timeout = std::chrono::nanoseconds(static_cast<int64_t>(limits.timeout_s * 1e9));
  spec.stdout_limit = limits.output_limit_bytes;
  spec.stderr_limit = limits.output_limit_bytes;
  spec.kill_at_output_limit = true;
  spec.memory_limit_bytes = limits.memory_limit_bytes;
  // A subject sees the documented variables and those its objective names, not loupe's whole
  // environment (tokens and keys an agent's shell holds).
  std::vector<std::string> allowed = subject_environment_allowlist();
  allowed.insert(allowed.end(), limits.pass_env.begin(), limits.pass_env.end());
  spec.env_allowlist = std::move(allowed);
  try {
    return run_process(spec);
  } catch (const Error& error) {
    // Nothing ran: the command after -- is wrong, which is bad usage, not a subject failure.
    if (error.code() != ErrorCode::kSubject) throw;
    throw Error(ErrorCode::kUsage,
                "subject command '" + argv.front() + "' (the first word after --): " +
                    error.message() + "; expected an executable (a path, or a name on PATH)",
                "loupe probe list -- build/bin/kda probe");
  }
}

std::string seconds_text(double seconds) {
  std::ostringstream text;
  text << seconds;
  return text.str();
}

// Exit 2 from the subject is bad usage (its message says which choice was wrong); any other
// failure is the subject's, and becomes a SubjectFailure with a finding naming what happened.
void throw_for_failure(const ProcessResult& result, const std::vector<std::string>& argv,
                       const Limits& limits, const std::string& probe, Layer layer) {
  if (result.succeeded()) return;
  const std::string command = join_command(argv);
  const std::string tail = result.stderr_tail();
  const std::string stderr_part = tail.empty() ? "" : "\nstderr:\n" + tail;
  if (result.exit_code == 2 && !result.timed_out) {
    throw Error(ErrorCode::kUsage, "the subject refused the request: " + tail,
                "run `loupe probe list -- SUBJECT` to see the probes and their parameters");
  }
  Finding finding;
  finding.layer = layer;
  finding.severity = Severity::kFail;
  finding.where.subject = argv.empty() ? "" : std::filesystem::path(argv[0]).filename().string();
  finding.where.probe = probe;
  finding.reproduce = command;
  const double wall_s = static_cast<double>(result.wall_ns) * 1e-9;
  finding.evidence.metrics = {{"wall_s", wall_s}};
  std::string kind, message, hint;
  if (result.timed_out) {
    kind = "timeout";
    message = "subject timed out after " + seconds_text(limits.timeout_s) +
              " s; its process group was killed: " + command;
    hint = "raise --timeout, or run a smaller point";
    finding.claim = "the subject ran past its " + seconds_text(limits.timeout_s) +
                    " s timeout; its whole process group was killed";
    finding.next = "run the point directly to see where it hangs, or raise --timeout";
  } else if (result.memory_limit_exceeded) {
    kind = "memory_limit";
    message = "the subject " + result.describe() + ", above the limit of " +
              std::to_string(limits.memory_limit_bytes) + " bytes: " + command;
    hint = "raise --memory, or run a smaller point";
    finding.claim = "the subject's process group used " +
                    std::to_string(result.peak_resident_bytes) + " bytes resident, above the " +
                    std::to_string(limits.memory_limit_bytes) +
                    "-byte --memory limit; its process group was killed";
    finding.evidence.metrics.emplace_back("peak_resident_bytes",
                                          static_cast<double>(result.peak_resident_bytes));
    finding.evidence.metrics.emplace_back("memory_limit_bytes",
                                          static_cast<double>(limits.memory_limit_bytes));
    finding.next = "look for allocations that grow with the run; raise --memory if it is expected";
  } else if (result.output_limit_exceeded) {
    kind = "output_capped";
    const char* stream = result.stdout_truncated ? "stdout" : "stderr";
    const uint64_t dropped =
        result.stdout_truncated ? result.stdout_dropped : result.stderr_dropped;
    message = "the subject wrote more than " + std::to_string(limits.output_limit_bytes) +
              " bytes to " + stream + "; the first " + std::to_string(limits.output_limit_bytes) +
              " were kept, " + std::to_string(dropped) +
              " more were dropped, and its process group was killed: " + command;
    hint = "a subject writes observations into --out DIR, not to " + std::string(stream);
    finding.claim = "the subject flooded " + std::string(stream) + " past the " +
                    std::to_string(limits.output_limit_bytes) + "-byte limit (" +
                    std::to_string(dropped) + " bytes dropped); its process group was killed";
    finding.evidence.metrics.emplace_back("bytes_dropped", static_cast<double>(dropped));
    finding.next = "silence the subject's logging, or write it to a file";
  } else {
    kind = "crashed";
    message = "the subject " + result.describe() + ": " + command;
    hint = "run the command above directly to see the failure";
    // Inside the sandbox /tmp is private: a path there that the subject reaches without naming it
    // (a wrapper script's exec, a data file) is missing, and the subject's own error says only
    // "not found".
    const bool missing_file = tail.find("not found") != std::string::npos ||
                              tail.find("No such file") != std::string::npos;
    if (!limits.sandbox.empty() && missing_file && tail.find("/tmp/") != std::string::npos) {
      hint =
          "the sandbox gives the subject a private /tmp: a path under /tmp that it needs must be "
          "an argument of its command, its working directory or on PYTHONPATH, LD_LIBRARY_PATH "
          "or PATH to stay visible (docs/security.md); or run the command above directly";
    }
    finding.claim = "the subject " + result.describe();
    finding.next = "run the command directly to see the failure";
  }
  finding.id = std::string(layer_name(layer)) + "." + probe + ".subject." + kind;
  throw SubjectFailure(Error(ErrorCode::kSubject, message + stderr_part, hint), std::move(finding));
}

// Removes a probe's staging folder, then each of `parents` in turn while it is empty, unless
// released (the observation was moved into place).
class StagingCleanup {
 public:
  StagingCleanup(std::filesystem::path staging, std::vector<std::filesystem::path> parents)
      : staging_(std::move(staging)), parents_(std::move(parents)) {}
  StagingCleanup(const StagingCleanup&) = delete;
  StagingCleanup& operator=(const StagingCleanup&) = delete;
  ~StagingCleanup() {
    if (released_) return;
    std::error_code ignored;
    std::filesystem::remove_all(staging_, ignored);
    for (const auto& parent : parents_) {
      if (!std::filesystem::remove(parent, ignored)) break;  // not empty, or gone
    }
  }
  void release() { released_ = true; }

 private:
  std::filesystem::path staging_;
  std::vector<std::filesystem::path> parents_;
  bool released_ = false;
};

Json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) {
    throw Error(ErrorCode::kSubject, "the subject wrote no " + path.string(),
                "a subject writes observation.json into --out DIR before exiting 0");
  }
  std::stringstream text;
  text << in.rdbuf();
  try {
    check_json_nesting(text.str(), path.string());
    return Json::parse(text.str());
  } catch (const nlohmann::json::exception& error) {
    throw Error(ErrorCode::kInput, path.string() + ": not valid JSON: " + json_error_text(error));
  }
}

// Whether bubblewrap can run a sandbox here (it needs unprivileged user namespaces, which some
// containers refuse): answered once per process by running `true` inside one.
std::optional<std::string> sandbox_unavailable_reason() {
  static const std::optional<std::string> reason = []() -> std::optional<std::string> {
    ProcessSpec probe;
    probe.argv = {"bwrap",
                  "--ro-bind",
                  "/",
                  "/",
                  "--dev",
                  "/dev",
                  "--proc",
                  "/proc",
                  "--unshare-net",
                  "--unshare-pid",
                  "--unshare-ipc",
                  "--die-with-parent",
                  "true"};
    probe.timeout = std::chrono::seconds(10);
    try {
      const ProcessResult result = run_process(probe);
      if (result.succeeded()) return std::nullopt;
      return "bwrap is installed but cannot create a sandbox here (" + result.describe() +
             (result.stderr_tail().empty() ? "" : ": " + result.stderr_tail(2, 300)) + ")";
    } catch (const Error&) {
      return std::string("bwrap (Debian package bubblewrap) is not installed");
    }
  }();
  return reason;
}

// A subject that lies inside loupe's home — a bisect's build of a commit, under
// <home>/bisect/builds/, run as `env -C TREE ...` — would be hidden with the home: the folders its
// arguments name there (a directory itself, a file's folder; never the home itself) are bound
// read-only again, on top of the home's tmpfs (after it: bwrap mounts in order). They hold the
// candidate's own code, not earlier runs.
void bind_subject_folders_in_home(std::vector<std::string>& prefix,
                                  const std::filesystem::path& home,
                                  const std::vector<std::string>& subject_command) {
  const std::filesystem::path hidden = std::filesystem::absolute(home).lexically_normal();
  std::vector<std::string> binds;
  for (const auto& arg : subject_command) {
    if (arg.empty() || arg[0] == '-') continue;
    std::error_code error;
    const std::filesystem::path path = std::filesystem::absolute(arg, error).lexically_normal();
    if (error || !std::filesystem::exists(path, error)) continue;
    const std::filesystem::path folder =
        std::filesystem::is_directory(path, error) ? path : path.parent_path();
    const std::filesystem::path relative = folder.lexically_relative(hidden);
    if (relative.empty() || relative == "." || *relative.begin() == "..") continue;
    binds.insert(binds.end(), {"--ro-bind", folder.string(), folder.string()});
  }
  if (prefix.empty() || binds.empty()) return;
  prefix.insert(prefix.end() - 1, binds.begin(), binds.end());  // before the closing "--"
}

// Checks every file of the observation against the digests the subject's runtime sent down its
// stdout (a pipe no child of the runtime holds). Returns what differs, empty when all agree.
std::vector<std::string> broken_seal(const std::filesystem::path& dir, const Json& seal) {
  std::vector<std::string> broken;
  for (const auto& [relative, digest] : seal.items()) {
    std::ifstream in(dir / relative, std::ios::binary);
    if (!in) {
      broken.push_back(relative + " (missing)");
      continue;
    }
    std::stringstream bytes;
    bytes << in.rdbuf();
    if (!digest.is_string() || sha256_hex(bytes.str()) != digest.get<std::string>()) {
      broken.push_back(relative);
    }
  }
  return broken;
}

// The subject's one-line JSON answer on stdout (the last line that parses), or null.
Json subject_reply(const std::string& stdout_text) {
  Json reply = nullptr;
  std::istringstream lines(stdout_text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    try {
      reply = Json::parse(line);
    } catch (const nlohmann::json::exception&) {
    }
  }
  return reply;
}

// A variant selection the subject's --variants can carry: names neither empty nor holding a
// comma, none twice. Whether the bench declares them, only the subject knows (it exits 2).
void check_variant_names(const std::vector<std::string>& variants) {
  for (size_t at = 0; at < variants.size(); ++at) {
    const std::string& name = variants[at];
    if (name.empty() || name.find(',') != std::string::npos) {
      throw Error(ErrorCode::kUsage,
                  "variants: name " + std::to_string(at + 1) + " is '" + name +
                      "'; expected a variant name, not empty and without a comma",
                  "loupe probe run BENCH --variants base,double -- SUBJECT");
    }
    if (std::find(variants.begin(), variants.begin() + static_cast<std::ptrdiff_t>(at), name) !=
        variants.begin() + static_cast<std::ptrdiff_t>(at)) {
      throw Error(ErrorCode::kUsage, "variants: '" + name + "' is named twice",
                  "each variant runs once; name it once");
    }
  }
}

// A bench's selected variants as the subject's --variants takes them.
std::string variant_list(const std::vector<std::string>& variants) {
  std::string text;
  for (const auto& name : variants) text += (text.empty() ? "" : ",") + name;
  return text;
}

}  // namespace

std::string reproduce_command(const std::string& probe, const Params& params, uint64_t seed,
                              const std::optional<int64_t>& hidden_point,
                              const std::optional<int>& repeat,
                              const std::vector<std::string>& subject_command,
                              const std::vector<std::string>& launch,
                              const std::vector<std::string>& variants) {
  std::vector<std::string> argv = {"loupe", "probe", "run", probe};
  if (!launch.empty()) {
    std::string words;
    for (const auto& word : launch) words += (words.empty() ? "" : " ") + word;
    argv.insert(argv.end(), {"--launch", words});
  }
  if (hidden_point) {
    argv.push_back("--hidden-point");
    argv.push_back(std::to_string(*hidden_point));
  } else {
    for (const auto& [name, value] : params) {
      argv.push_back("--set");
      argv.push_back(name + "=" + value_to_string(value));
    }
  }
  argv.push_back("--seed");
  argv.push_back(std::to_string(seed));
  if (repeat) {
    argv.push_back("--repeat");
    argv.push_back(std::to_string(*repeat));
  }
  if (!variants.empty()) argv.insert(argv.end(), {"--variants", variant_list(variants)});
  argv.push_back("--");
  for (const auto& arg : subject_command) argv.push_back(arg);
  return join_command(argv);
}

Json list_probes(const std::vector<std::string>& subject_command, double timeout_s,
                 uint64_t memory_limit_bytes, const std::vector<std::string>& pass_env) {
  if (subject_command.empty()) {
    throw Error(ErrorCode::kUsage, "no subject command after --",
                "loupe probe list -- build/bin/kda probe");
  }
  std::vector<std::string> argv = subject_command;
  argv.push_back("list");
  argv.push_back("--json");
  Limits limits;
  limits.timeout_s = timeout_s;
  limits.memory_limit_bytes = memory_limit_bytes;
  limits.output_limit_bytes = size_t{16} << 20;
  limits.pass_env = pass_env;
  const ProcessResult result = run_subject(argv, limits);
  throw_for_failure(result, argv, limits, "list", Layer::kCheck);
  try {
    check_json_nesting(result.stdout_text, join_command(argv) + ": the answer");
    Json list = Json::parse(result.stdout_text);
    if (!list.is_object() || !list.contains("probes") || !list["probes"].is_array()) {
      throw Error(ErrorCode::kSubject, join_command(argv) +
                                           ": the answer has no \"probes\" array; is this a loupe "
                                           "subject?");
    }
    return list;
  } catch (const nlohmann::json::exception& error) {
    throw Error(ErrorCode::kSubject, join_command(argv) + ": the answer is not JSON (" +
                                         json_error_text(error) + "); is this a loupe subject?");
  }
}

// The launcher's words with {ranks} replaced by the point's `ranks` (from --set ranks=N).
std::vector<std::string> launch_words(const RunRequest& request) {
  std::vector<std::string> words = request.launch;
  std::optional<std::string> ranks;
  for (const auto& set : request.sets) {
    if (set.rfind("ranks=", 0) == 0) ranks = set.substr(6);
  }
  for (auto& word : words) {
    const size_t at = word.find("{ranks}");
    if (at == std::string::npos) continue;
    if (!ranks || ranks->empty() || ranks->find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(*ranks) < 1) {
      throw Error(ErrorCode::kUsage,
                  "--launch '" + word + "' uses {ranks}, but the point sets " +
                      (ranks ? "ranks=" + *ranks + ", not a positive integer" : "no ranks"),
                  "add --set ranks=N (the probe's parameter the launcher honours)");
    }
    word.replace(at, 7, *ranks);
  }
  return words;
}

// A multi-rank check: rank 0's observation says how many ranks ran (launch.world_size); every
// other rank must have written DIR/rank-<r>/observation.json for the same probe, point and seed,
// from inputs with rank 0's checksums. Their summary goes into observation["ranks"].
void gather_ranks(const std::filesystem::path& staging, Json& observation) {
  if (!observation.contains("launch") || !observation["launch"].is_object()) return;
  const Json& launch = observation["launch"];
  const int64_t world = launch.value("world_size", int64_t{1});
  Json ranks = Json::array();
  Json first = Json::object();
  first["rank"] = 0;
  first["wall_s"] = observation.value("wall_s", 0.0);
  first["source"] = launch.value("source", std::string());
  ranks.push_back(std::move(first));
  auto checksums = [](const Json& rank_observation) {
    std::vector<std::string> out;
    if (!rank_observation.contains("check")) return out;
    for (const auto& input : rank_observation["check"].value("inputs", Json::array())) {
      out.push_back(input.value("name", std::string()) + ":" +
                    input.value("checksum", std::string()));
    }
    return out;
  };
  const std::vector<std::string> expected = checksums(observation);
  for (int64_t rank = 1; rank < world; ++rank) {
    const std::filesystem::path path =
        staging / ("rank-" + std::to_string(rank)) / "observation.json";
    if (!std::filesystem::exists(path)) {
      throw Error(ErrorCode::kSubject,
                  "rank " + std::to_string(rank) + " of " + std::to_string(world) +
                      " wrote no observation (" + path.string() + ")",
                  "every rank must see the same --out DIR: on several hosts, a shared file "
                  "system (docs/multi-rank.md)");
    }
    const Json other = read_json_file(path);
    for (const char* key : {"probe", "params", "seed"}) {
      if (other.value(key, Json()) != observation.value(key, Json())) {
        throw Error(ErrorCode::kSubject, path.string() + ": " + key + " " +
                                             other.value(key, Json()).dump() + " differs from " +
                                             "rank 0's " + observation.value(key, Json()).dump());
      }
    }
    if (checksums(other) != expected) {
      throw Error(ErrorCode::kSubject,
                  path.string() + ": rank " + std::to_string(rank) +
                      " computed on inputs whose checksums differ from rank 0's",
                  "every rank must generate its inputs from the seed alone");
    }
    Json entry = Json::object();
    entry["rank"] = rank;
    entry["wall_s"] = other.value("wall_s", 0.0);
    if (other.contains("check")) {
      entry["candidate_calls"] = other["check"].value("candidate_calls", 0);
      entry["input_mutation"] = other["check"]["guards"].value("input_mutation", Json::array());
    }
    ranks.push_back(std::move(entry));
  }
  observation["ranks"] = std::move(ranks);
}

RunOutcome run_probe(const RunRequest& request) {
  if (request.subject_command.empty()) {
    throw Error(ErrorCode::kUsage, "no subject command after --",
                "loupe probe run PROBE -- build/bin/kda probe");
  }
  // Bad --tol texts and probe names are usage errors before anything runs or is created: the
  // probe name becomes a folder under the home ("../x" once wrote a run outside it).
  for (const auto& text : request.analyze.tolerances) check::parse_bound(text);
  check_probe_name(request.probe, "the probe to run");
  check_variant_names(request.variants);
  const std::filesystem::path home = resolve_home(request.home, std::filesystem::current_path());
  const std::string run_id = request.run_id.empty() ? new_run_id() : request.run_id;
  uint64_t seed = 0;
  if (request.seed) {
    seed = *request.seed;
  } else {
    std::random_device entropy;
    // Small enough to type back in a reproduce command.
    seed = ((static_cast<uint64_t>(entropy()) << 32) ^ entropy()) % 1000000000ull;
  }

  // The subject writes into a private directory outside loupe's home, which is also its
  // working directory: it is not told where the home (and earlier runs' outputs) is. The
  // directory is moved into the home once the subject has said which point it ran.
  const std::filesystem::path probe_dir = run_dir(home, run_id) / request.probe;
  check_under_home(probe_dir, home, "the probe's folder");
  std::string pattern = (std::filesystem::temp_directory_path() / "loupe-run-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw Error(ErrorCode::kSubject, "cannot create a private directory for the subject under " +
                                         std::filesystem::temp_directory_path().string());
  }
  const std::filesystem::path staging = pattern;
  // Whatever ends the call before the observation is in place, the staging folder goes.
  StagingCleanup cleanup{staging, {}};

  std::vector<std::string> subject_argv = request.subject_command;
  // The subject runs in its private directory: a relative path to it must not change meaning.
  if (subject_argv.front().find('/') != std::string::npos &&
      std::filesystem::path(subject_argv.front()).is_relative()) {
    subject_argv.front() =
        (std::filesystem::current_path() / subject_argv.front()).lexically_normal().string();
  }
  std::vector<std::string> argv = launch_words(request);
  argv.insert(argv.end(), subject_argv.begin(), subject_argv.end());
  argv.insert(argv.end(), {"run", request.probe});
  for (const auto& set : request.sets) argv.insert(argv.end(), {"--set", set});
  argv.insert(argv.end(), {"--seed", std::to_string(seed)});
  if (request.hidden_point) {
    argv.insert(argv.end(), {"--hidden-point", std::to_string(*request.hidden_point)});
  } else if (request.hidden) {
    argv.push_back("--hidden");
  }
  // Passed whenever asked, 0 included: `--repeat 0` turns the secret repeats off too.
  if (request.repeat) argv.insert(argv.end(), {"--repeat", std::to_string(*request.repeat)});
  if (request.precision) {
    std::ostringstream text;
    text << *request.precision;
    argv.insert(argv.end(), {"--precision", text.str()});
  }
  if (request.budget_s) {
    std::ostringstream text;
    text << *request.budget_s;
    argv.insert(argv.end(), {"--budget", text.str()});
  }
  if (request.round) argv.insert(argv.end(), {"--round", std::to_string(*request.round)});
  if (!request.variants.empty()) {
    argv.insert(argv.end(), {"--variants", variant_list(request.variants)});
  }
  argv.insert(argv.end(), {"--out", staging.string(), "--json"});

  Limits limits;
  limits.timeout_s = request.timeout_s;
  limits.memory_limit_bytes = request.memory_limit_bytes;
  limits.output_limit_bytes = request.output_limit_bytes;
  limits.pass_env = request.pass_env;
  limits.working_dir = staging;
  const std::optional<std::string> sandbox_missing = sandbox_off_reason(request);
  if (!sandbox_missing) {
    std::filesystem::create_directories(home);  // bwrap hides it: it must exist
    limits.sandbox = sandbox_prefix(home, staging, request.subject_command);
    bind_subject_folders_in_home(limits.sandbox, home, request.subject_command);
  }
  const ProcessResult result = run_subject(argv, limits);
  {
    std::ofstream stderr_file(staging / "stderr.txt");
    stderr_file << result.stderr_text;
    if (result.stderr_truncated) {
      stderr_file << "\n[loupe: stderr capped at " << request.output_limit_bytes << " bytes; "
                  << result.stderr_dropped << " more bytes dropped]\n";
    }
  }
  try {
    throw_for_failure(result, argv, limits, request.probe, request.layer.value_or(Layer::kCheck));
  } catch (const SubjectFailure& failure) {
    // A crash's stderr is evidence: it stays next to where the point would have been.
    std::filesystem::create_directories(probe_dir);
    const std::filesystem::path kept =
        probe_dir / ("failed-" + std::to_string(getpid()) + ".stderr.txt");
    std::error_code ignored;
    std::filesystem::rename(staging / "stderr.txt", kept, ignored);
    if (ignored) {  // another filesystem
      std::filesystem::copy_file(staging / "stderr.txt", kept,
                                 std::filesystem::copy_options::overwrite_existing, ignored);
    }
    Finding finding = failure.finding();
    finding.evidence.files.push_back(kept.string());
    throw SubjectFailure(
        Error(failure.code(), failure.message(),
              failure.hint() + " (the subject's stderr is in " + kept.string() + ")"),
        std::move(finding));
  }

  // The seal first: nothing of the observation is read before its digests are checked.
  const Json reply = subject_reply(result.stdout_text);
  const Json seal = reply.is_object() ? reply.value("seal", Json(nullptr)) : Json(nullptr);
  // A subject that speaks the protocol through files (examples/python-subject) sends no seal:
  // its files are taken as written, and the outcome says so.
  const bool sealed = seal.is_object() && seal.contains("observation.json");
  std::vector<std::string> tampered;
  if (sealed) tampered = broken_seal(staging, seal);
  Json observation = read_json_file(staging / "observation.json");
  Params params;
  std::optional<int64_t> hidden_point;
  try {
    for (const auto& [name, value] : observation.at("params").items()) {
      params.emplace_back(name, value_from_json(value, "params." + name));
    }
    if (observation.contains("hidden") && observation["hidden"].is_object()) {
      hidden_point = observation["hidden"].at("index").get<int64_t>();
    }
    observation["stderr_tail"] = result.stderr_tail(20, 4000);
  } catch (const nlohmann::json::exception& error) {
    throw Error(ErrorCode::kInput, (staging / "observation.json").string() +
                                       ": bad params/hidden: " + json_error_text(error));
  }
  gather_ranks(staging, observation);
  {
    std::ofstream out(staging / "observation.json");
    out << observation.dump(1) << "\n";
  }

  const std::filesystem::path point_dir = observation_dir(home, run_id, request.probe, params);
  check_under_home(point_dir, home, "the point's folder");
  std::filesystem::remove_all(point_dir);
  std::filesystem::create_directories(point_dir.parent_path());
  std::error_code moved;
  std::filesystem::rename(staging, point_dir, moved);
  if (moved) {  // another filesystem: copy (the cleanup removes the staging folder)
    std::filesystem::copy(staging, point_dir, std::filesystem::copy_options::recursive);
  } else {
    cleanup.release();
  }

  AnalyzeOptions analyze = request.analyze;
  analyze.reproduce = reproduce_command(request.probe, params, seed, hidden_point, request.repeat,
                                        request.subject_command, request.launch, request.variants);
  analyze.bootstrap_seed = seed;
  RunOutcome outcome;
  try {
    outcome = analyze_observation(point_dir, analyze);
    outcome.analysed_findings = outcome.findings.size();
  } catch (const Error&) {
    // Evidence that was tampered with may not even parse: the seal's finding is the verdict.
    if (tampered.empty()) throw;
    outcome.observation_dir = point_dir;
  }
  outcome.data["run"] = run_id;
  if (observation.contains("ranks")) outcome.data["ranks"] = observation["ranks"];
  const Layer layer = request.layer.value_or(Layer::kCheck);
  const std::string subject =
      std::filesystem::path(request.subject_command.front()).filename().string();
  if (!tampered.empty()) {
    std::string list;
    for (const auto& item : tampered) list += (list.empty() ? "" : ", ") + item;
    Finding finding;
    finding.id = std::string(layer_name(layer)) + "." + request.probe + ".guard.evidence_sealed";
    finding.layer = layer;
    finding.severity = Severity::kFail;
    finding.claim =
        "the observation does not match the digests the subject's runtime sealed it "
        "with (" +
        list + "): something changed the evidence after it was written";
    finding.where.subject = subject;
    finding.where.probe = request.probe;
    finding.where.params = params;
    finding.evidence.files = {(point_dir / "observation.json").string()};
    finding.next = "nothing may write into the observation directory but loupe's runtime";
    finding.reproduce = analyze.reproduce;
    outcome.findings.push_back(std::move(finding));
    outcome.verdict = Verdict::kFail;
    outcome.exit_code = 1;
    outcome.summary +=
        "  fail " + outcome.findings.back().id + ": " + outcome.findings.back().claim + "\n";
  }
  outcome.data["sandbox"] = sandbox_missing ? Json(*sandbox_missing) : Json("bwrap");
  outcome.data["sealed"] = sealed;
  // After the verdict, never during: the counters pass is a separate, untimed process. Not on
  // evidence that failed its seal: its verdict stands alone.
  if (request.counters && tampered.empty()) attach_counters(request, seed, outcome);
  return outcome;
}

std::vector<std::vector<std::string>> expand_sweep(const std::vector<std::string>& sets,
                                                   const std::vector<std::string>& zips) {
  struct Axis {
    std::string name;
    std::vector<std::string> values;
  };
  std::vector<std::string> names;
  auto parse = [&names](const std::string& text, const std::string& flag) {
    const size_t equals = text.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == text.size()) {
      throw Error(ErrorCode::kUsage, flag + " '" + text + "': expected NAME=VALUE[,VALUE...]",
                  "for example " + flag + " T=4096,16384");
    }
    Axis axis{text.substr(0, equals), {}};
    if (std::find(names.begin(), names.end(), axis.name) != names.end()) {
      throw Error(ErrorCode::kUsage, "parameter '" + axis.name + "' is given twice",
                  "give each parameter once, with a comma-separated list to sweep it");
    }
    names.push_back(axis.name);
    std::string rest = text.substr(equals + 1);
    size_t start = 0;
    while (true) {
      const size_t comma = rest.find(',', start);
      axis.values.push_back(rest.substr(start, comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return axis;
  };
  std::vector<Axis> crossed;
  for (const auto& text : sets) crossed.push_back(parse(text, "--set"));
  std::vector<Axis> zipped;
  for (const auto& text : zips) {
    zipped.push_back(parse(text, "--zip"));
    if (zipped.back().values.size() != zipped.front().values.size()) {
      throw Error(ErrorCode::kUsage,
                  "--zip " + zipped.back().name + " has " +
                      std::to_string(zipped.back().values.size()) + " values but --zip " +
                      zipped.front().name + " has " + std::to_string(zipped.front().values.size()),
                  "zipped lists move together, so they need the same length");
    }
  }

  // Counted before anything is expanded, with the objective's cap (gate/plan.hpp
  // kMaxSubjectRunsPerRun; repeated here, as src/probe sits below src/gate).
  constexpr size_t kMaxPoints = 10000;
  size_t count = zipped.empty() ? 1 : zipped.front().values.size();
  for (const auto& axis : crossed) {
    count = axis.values.size() == 0 || count <= kMaxPoints / axis.values.size()
                ? count * axis.values.size()
                : kMaxPoints + 1;
  }
  if (count > kMaxPoints) {
    throw Error(ErrorCode::kUsage,
                "--set/--zip: the sweep has more than " + std::to_string(kMaxPoints) +
                    " points; expected at most " + std::to_string(kMaxPoints) + " per run",
                "sweep fewer values, or split the sweep across several runs");
  }
  std::vector<std::vector<std::string>> points = {{}};
  if (!zipped.empty()) {
    points.clear();
    for (size_t row = 0; row < zipped.front().values.size(); ++row) {
      std::vector<std::string> point;
      for (const auto& axis : zipped) point.push_back(axis.name + "=" + axis.values[row]);
      points.push_back(std::move(point));
    }
  }
  // Crossed axes, the first varying slowest: expand from the last axis inwards.
  for (auto axis = crossed.rbegin(); axis != crossed.rend(); ++axis) {
    std::vector<std::vector<std::string>> expanded;
    for (const auto& value : axis->values) {
      for (const auto& point : points) {
        std::vector<std::string> next = {axis->name + "=" + value};
        next.insert(next.end(), point.begin(), point.end());
        expanded.push_back(std::move(next));
      }
    }
    points = std::move(expanded);
  }
  return points;
}

namespace {

// What the subject declares about one probe: its layer and its hidden points and ranges.
struct Declared {
  std::optional<Layer> layer;
  int64_t hidden_points = 0;
  Json hidden_point_values = Json::array();  // one object of NAME: value per point
  Json hidden_ranges = Json::array();        // {"name", "low", "high"}
  // A bench of a runtime that takes --variants (its listing says selects_variants).
  bool selects_variants = false;
};

Declared declared(const RunRequest& request) {
  Declared out;
  Json list;
  try {
    list = request.probe_list ? *request.probe_list
                              : list_probes(request.subject_command, request.timeout_s,
                                            request.memory_limit_bytes, request.pass_env);
  } catch (const SubjectFailure& failure) {
    // Named after the probe asked for: that is what the user ran.
    Finding finding = failure.finding();
    finding.where.probe = request.probe;
    finding.id = "check." + request.probe + finding.id.substr(finding.id.find(".subject."));
    throw SubjectFailure(failure, std::move(finding));
  }
  for (const auto& probe : list["probes"]) {
    if (!probe.is_object() || probe.value("name", "") != request.probe) continue;
    const std::string kind = probe.value("kind", "");
    if (kind == "check") out.layer = Layer::kCheck;
    if (kind == "bench") out.layer = Layer::kBench;
    if (kind == "scenario") out.layer = Layer::kScenario;
    const Json count = probe.value("hidden_points", Json(0));
    if (count.is_number_integer()) out.hidden_points = count.get<int64_t>();
    out.hidden_point_values = probe.value("hidden_point_values", Json::array());
    out.hidden_ranges = probe.value("hidden_ranges", Json::array());
    const Json selects = probe.value("selects_variants", Json(false));
    out.selects_variants = selects.is_boolean() && selects.get<bool>();
  }
  return out;
}

Params params_of_outcome(const RunOutcome& outcome) {
  Params params;
  const Json values = outcome.data.value("params", Json::object());
  for (const auto& [name, value] : values.items()) {
    params.emplace_back(name, value_from_json(value, "params." + name));
  }
  return params;
}

std::string first_reproduce(const RunOutcome& outcome) {
  for (const auto& finding : outcome.findings) {
    if (!finding.reproduce.empty()) return finding.reproduce;
  }
  return "";
}

// How the candidate fared at the hidden point, said next to how it fared at the visible ones.
// `source_only`: loupe took the hidden values from the probe's source alone (hidden points, no
// hidden range to draw); a subject built before hidden points were listed, which draws its hidden
// point itself, is not judged so.
Finding hidden_point_finding(const RunRequest& request, const std::vector<RunOutcome>& visible,
                             const RunOutcome& hidden, bool source_only) {
  bool visible_failed = false;
  std::string shown;
  for (const auto& point : visible) {
    visible_failed = visible_failed || point.verdict == Verdict::kFail;
    shown += (shown.empty() ? "" : "; ") + params_to_string(params_of_outcome(point));
  }
  const Params hidden_params = params_of_outcome(hidden);
  const Json info = hidden.data.value("hidden", Json(nullptr));
  std::string which;
  if (info.is_object() && info.contains("index") && info.contains("drawn_from")) {
    which = " (hidden point " + info.value("index", Json(0)).dump() + " of " +
            info.value("of", Json(0)).dump() + ", sizes drawn from the probe's hidden ranges)";
  } else if (info.is_object() && info.contains("index")) {
    which = " (hidden point " + info.value("index", Json(0)).dump() + " of " +
            info.value("of", Json(0)).dump() + ")";
  } else if (info.is_object() && info.contains("drawn_from")) {
    which = " (drawn from the probe's hidden ranges)";
  } else if (info.is_object() && info.contains("secret_seed_only")) {
    which = " (a shown point, with a seed drawn in secret)";
  }
  Finding finding;
  finding.id = "check." + request.probe + ".guard.hidden_point";
  finding.layer = Layer::kCheck;
  finding.where.subject =
      std::filesystem::path(request.subject_command.front()).filename().string();
  finding.where.probe = request.probe;
  finding.where.path = "candidate";
  finding.where.params = hidden_params;
  finding.evidence.files = {hidden.data.value("observation", "")};
  finding.reproduce = first_reproduce(hidden);
  const std::string at =
      params_to_string(hidden_params) + which +
      (info.is_object() && info.contains("seed") ? ", seed " + info["seed"].dump() : std::string());
  if (hidden.verdict == Verdict::kFail) {
    finding.severity = Severity::kFail;
    // Failing at a shown point too, the candidate is wrong, not specialised to what it was
    // shown: this finding then says where else, and does not fail a run whatever its gates say
    // (core/trust.hpp reads the claim's start).
    finding.claim =
        visible_failed
            ? std::string(kHiddenAlsoFails) + " " + at + ", drawn in secret"
            : "the candidate passes at the point(s) it was shown (" + shown +
                  ") but fails at the hidden point " + at +
                  ", drawn in secret and revealed only after the run: it may be specialised to "
                  "the shapes it was shown";
    finding.next = "rerun the hidden point (reproduce) and look for code that assumes a shape";
  } else if (source_only) {
    // Whatever the candidate did there: a point it could read proves nothing (round 3's
    // knows_the_hidden_point was right at the shown N and at the source's hidden N only).
    finding.severity = Severity::kFail;
    finding.claim = "the hidden point " + at +
                    " is written in the probe's source (.hidden_point) and the probe declares no "
                    ".hidden_range: a candidate's author can read it and be right there only, so "
                    "the hidden run shows nothing about other shapes (its verdict there: " +
                    std::string(verdict_name(hidden.verdict)) + ")";
    finding.next =
        "declare .hidden_range(NAME, LOW, HIGH[, STEP]) for a size of the probe: loupe draws it "
        "in secret over the hidden point";
  } else if (hidden.verdict == Verdict::kPass) {
    finding.severity = Severity::kInfo;
    finding.claim = "the candidate also passes at the hidden point " + at + ", drawn in secret";
  } else {
    finding.severity = Severity::kWarn;
    finding.claim = "at the hidden point " + at + ", drawn in secret, the check is " +
                    std::string(verdict_name(hidden.verdict));
  }
  return finding;
}

}  // namespace

std::vector<std::string> hidden_run_sets(const std::vector<std::string>& asked,
                                         const std::vector<std::string>& hidden) {
  auto name_of = [](const std::string& set) { return set.substr(0, set.find('=')); };
  std::vector<std::string> sets;
  for (const auto& set : asked) {
    const auto replaced = std::find_if(hidden.begin(), hidden.end(), [&](const std::string& value) {
      return name_of(value) == name_of(set);
    });
    sets.push_back(replaced == hidden.end() ? set : *replaced);
  }
  for (const auto& value : hidden) {
    const bool asked_it = std::any_of(asked.begin(), asked.end(), [&](const std::string& set) {
      return name_of(set) == name_of(value);
    });
    if (!asked_it) sets.push_back(value);
  }
  return sets;
}

namespace {

int verdict_rank(Verdict verdict) {
  switch (verdict) {
    case Verdict::kFail:
      return 4;
    case Verdict::kInconclusive:
      return 3;
    case Verdict::kPass:
      return 2;
    default:
      return 1;
  }
}

SweepOutcome run_points(const RunRequest& request,
                        const std::vector<std::vector<std::string>>& points) {
  RunRequest point_request = request;
  if (point_request.run_id.empty()) point_request.run_id = new_run_id();
  const bool may_add_hidden = request.add_hidden_point && !request.hidden && !request.hidden_point;
  if (request.counters) {
    // Refused before anything runs: a missing ncu or a bad regex found after minutes of sampling
    // would waste them.
    if (request.counters->launches < 1 || request.counters->launches > 10000) {
      throw Error(ErrorCode::kUsage, "--counters-launches " +
                                         std::to_string(request.counters->launches) +
                                         ": expected a count of calls from 1 to 10000");
    }
    Pattern::compile(request.counters->kernel_regex, "--counters");
    counters::find_ncu();
  }
  Declared probe_declared;
  if (may_add_hidden || !request.layer || request.counters || !request.variants.empty()) {
    probe_declared = declared(request);
    if (!point_request.layer) point_request.layer = probe_declared.layer;
  }
  // A bench of a subject built against a libloupe from before --variants (a baseline or bisect
  // build of an older commit) would refuse the option: it runs every variant, as it always did,
  // and the run says so.
  std::optional<Finding> variants_not_selected;
  if (!request.variants.empty() && probe_declared.layer == Layer::kBench &&
      !probe_declared.selects_variants) {
    point_request.variants.clear();
    Finding finding;
    finding.id = "bench." + request.probe + ".variants_not_selected";
    finding.layer = Layer::kBench;
    finding.severity = Severity::kWarn;
    finding.where.subject =
        std::filesystem::path(request.subject_command.front()).filename().string();
    finding.where.probe = request.probe;
    finding.claim =
        "the subject's runtime does not take --variants (its probe list has no "
        "selects_variants): every variant the bench declares ran, not only " +
        variant_list(request.variants) + ", each in a process of its own holding its own inputs";
    finding.next = "rebuild the subject against this libloupe to run only the variants asked for";
    variants_not_selected = std::move(finding);
  }
  if (request.counters && point_request.layer && *point_request.layer != Layer::kBench) {
    throw Error(ErrorCode::kUsage,
                "--counters: probe '" + request.probe + "' is not a bench; expected a bench",
                "counters attach to a bench's timed call");
  }
  // Decided once for every subject run of the sweep, and said once (guard_findings).
  const std::optional<std::string> sandbox_off = sandbox_off_reason(request);
  if (sandbox_off) {
    point_request.sandbox = false;
    point_request.no_sandbox_reason = *sandbox_off;
  }
  SweepOutcome sweep;
  for (const auto& sets : points) {
    point_request.sets = sets;
    sweep.points.push_back(run_probe(point_request));
    if (!request.hidden_elsewhere.empty()) {
      sweep.points.back().data["hidden_run_at"] = request.hidden_elsewhere;
    }
  }
  // Every check also runs one point the candidate's author never saw, with a seed loupe draws
  // in secret (even when --seed pins the others'): one of the probe's hidden points or a value
  // drawn from its hidden ranges when it declares any, else the first point again. The hidden
  // values replace the first point's; the parameters they leave out keep the first point's
  // values (the precision, the ranks the launcher starts), so the hidden run checks the same
  // configuration at another shape. It is passed exactly like an asked point (--set, --seed),
  // and revealed only afterwards.
  if (may_add_hidden && probe_declared.layer == Layer::kCheck) {
    std::random_device entropy;
    std::mt19937_64 secret(request.hidden_secret
                               ? *request.hidden_secret
                               : (static_cast<uint64_t>(entropy()) << 32) ^ entropy());
    RunRequest hidden_request = point_request;
    // A folder of its own: a hidden run at the shown point's parameters (a secret seed only)
    // would otherwise take the shown point's folder.
    hidden_request.run_id = point_request.run_id + "/hidden";
    hidden_request.seed = secret() % 1000000000ull;
    const bool old_subject =
        probe_declared.hidden_points > 0 && probe_declared.hidden_point_values.size() !=
                                                static_cast<size_t>(probe_declared.hidden_points);
    const size_t declared_points = probe_declared.hidden_point_values.size();
    Json reveal = Json::object();
    if (old_subject) {
      // A subject built before hidden points were listed: it draws one itself.
      hidden_request.sets.clear();
      hidden_request.hidden = true;
    } else if (declared_points > 0 || !probe_declared.hidden_ranges.empty()) {
      // A corner the source writes (one of the hidden points, picked in secret), then every
      // hidden range drawn over it: the corner keeps what the sizes must satisfy together
      // (HV a multiple of H), the draws are what nobody knows before the run.
      std::vector<std::pair<std::string, std::string>> chosen;  // name, value text, in order
      Json values = Json::object();
      auto put = [&](const std::string& name, const std::string& text, Json value) {
        auto same = std::find_if(chosen.begin(), chosen.end(),
                                 [&](const auto& entry) { return entry.first == name; });
        if (same == chosen.end()) {
          chosen.emplace_back(name, text);
        } else {
          same->second = text;
        }
        values[name] = std::move(value);
      };
      if (declared_points > 0) {
        const size_t choice = static_cast<size_t>(secret() % declared_points);
        for (const auto& [name, value] : probe_declared.hidden_point_values[choice].items()) {
          put(name, value_to_string(value_from_json(value, "hidden." + name)), value);
        }
        reveal["index"] = choice;
        reveal["of"] = declared_points;
      }
      for (const auto& range : probe_declared.hidden_ranges) {
        const int64_t low = range.value("low", int64_t{0});
        const int64_t high = std::max(low, range.value("high", int64_t{0}));
        const int64_t step = std::max<int64_t>(range.value("step", int64_t{1}), 1);
        const uint64_t count = static_cast<uint64_t>((high - low) / step) + 1;
        const int64_t value = low + step * static_cast<int64_t>(secret() % count);
        put(range.value("name", std::string()), std::to_string(value), value);
      }
      if (!probe_declared.hidden_ranges.empty())
        reveal["drawn_from"] = probe_declared.hidden_ranges;
      std::vector<std::string> sets;
      for (const auto& [name, text] : chosen) sets.push_back(name + "=" + text);
      reveal["point"] = std::move(values);
      hidden_request.sets = hidden_run_sets(points.front(), sets);
    } else {
      hidden_request.sets = points.front();
      reveal["secret_seed_only"] = true;
    }
    RunOutcome hidden = run_probe(hidden_request);
    if (!old_subject) {
      reveal["seed"] = *hidden_request.seed;
      hidden.data["hidden"] = reveal;
      const std::filesystem::path observation_file = hidden.observation_dir / "observation.json";
      Json observation = read_json_file(observation_file);
      observation["hidden"] = reveal;
      std::ofstream out(observation_file);
      out << observation.dump(1) << "\n";
    }
    sweep.hidden.push_back(std::move(hidden));
    sweep.findings.push_back(hidden_point_finding(
        request, sweep.points, sweep.hidden.back(),
        !old_subject && declared_points > 0 && probe_declared.hidden_ranges.empty()));
  }

  // Many points, many A/B tests: control the false-discovery rate across all of them.
  std::vector<bench::Comparison> comparisons;
  for (const auto& point : sweep.points) {
    for (const auto& record : point.bench_comparisons) comparisons.push_back(record.comparison);
  }
  if (sweep.points.size() > 1 && comparisons.size() > 1) {
    bench::control_false_discovery(comparisons);
    size_t index = 0;
    for (auto& point : sweep.points) {
      for (auto& record : point.bench_comparisons) {
        record.comparison = comparisons[index++];
        point.findings[record.finding_index] =
            bench::comparison_finding(record.comparison, record.context);
        point.findings[record.finding_index].claim += record.counters_clause;
        if (point.data.contains("comparisons") &&
            record.data_index < point.data["comparisons"].size()) {
          point.data["comparisons"][record.data_index] = bench::comparison_to_json(
              record.comparison, record.context.name_a, record.context.name_b);
        }
      }
      if (point.bench_comparisons.empty()) continue;
      // The observation keeps the corrected findings, not the per-point ones.
      const std::filesystem::path observation_file = point.observation_dir / "observation.json";
      Json observation = read_json_file(observation_file);
      Json findings = Json::array();
      for (const auto& finding : point.findings) findings.push_back(finding_to_json(finding));
      observation["findings"] = std::move(findings);
      std::ofstream out(observation_file);
      out << observation.dump(1) << "\n";
    }
  }

  for (const auto* group : {&sweep.points, &sweep.hidden}) {
    for (const auto& point : *group) {
      if (verdict_rank(point.verdict) > verdict_rank(sweep.verdict)) sweep.verdict = point.verdict;
      sweep.exit_code = std::max(sweep.exit_code, point.exit_code);
    }
  }
  const std::vector<Finding> off =
      guard_findings(request, point_request.layer.value_or(Layer::kCheck), sandbox_off);
  sweep.findings.insert(sweep.findings.end(), off.begin(), off.end());
  if (variants_not_selected) sweep.findings.push_back(*variants_not_selected);
  // A hidden point that proves nothing (all its values in the source) fails the run even where
  // the candidate passed there.
  for (const auto& finding : sweep.findings) {
    if (finding.severity == Severity::kFail && finding.id.size() > 18 &&
        finding.id.compare(finding.id.size() - 18, 18, "guard.hidden_point") == 0) {
      sweep.verdict = Verdict::kFail;
      sweep.exit_code = std::max(sweep.exit_code, 1);
    }
  }
  return sweep;
}

}  // namespace

SweepOutcome run_sweep(const RunRequest& request, const std::vector<std::string>& zips) {
  check_probe_name(request.probe, "the probe to run");  // before the subject lists its probes
  check_variant_names(request.variants);
  return run_points(request, expand_sweep(request.sets, zips));
}

SweepOutcome run_point(const RunRequest& request) {
  check_probe_name(request.probe, "the probe to run");  // before the subject lists its probes
  check_variant_names(request.variants);
  return run_points(request, {request.sets});
}

RunOutcome fold_point(SweepOutcome sweep) {
  RunOutcome outcome = std::move(sweep.points.front());
  // Where the shown point failed, its own findings say what is wrong and guard.hidden_point says
  // the hidden run failed too; the hidden run's findings would repeat them.
  const bool shown_failed = outcome.verdict == Verdict::kFail;
  Json hidden_runs = Json::array();
  for (auto& hidden : sweep.hidden) {
    for (auto& finding : hidden.findings) {
      if (finding.severity != Severity::kInfo && !shown_failed) {
        outcome.findings.push_back(std::move(finding));
      }
    }
    hidden_runs.push_back(hidden.data);
    outcome.data["hidden_observation_dir"] = hidden.observation_dir.string();
  }
  if (!hidden_runs.empty()) outcome.data["hidden_runs"] = std::move(hidden_runs);
  outcome.findings.insert(outcome.findings.end(), sweep.findings.begin(), sweep.findings.end());
  outcome.verdict = sweep.verdict;
  outcome.exit_code = sweep.exit_code;
  return outcome;
}

std::optional<std::string> sandbox_off_reason(const RunRequest& request) {
  const char* no_sandbox = std::getenv("LOUPE_NO_SANDBOX");
  if (no_sandbox != nullptr && *no_sandbox != '\0')
    return std::string("turned off (LOUPE_NO_SANDBOX)");
  if (!request.sandbox) {
    return request.no_sandbox_reason.empty() ? std::string("turned off by the caller")
                                             : request.no_sandbox_reason;
  }
  return sandbox_unavailable_reason();
}

std::vector<Finding> guard_findings(const RunRequest& request, Layer layer,
                                    const std::optional<std::string>& sandbox_off_reason) {
  std::vector<Finding> out;
  const std::string subject =
      request.subject_command.empty()
          ? std::string()
          : std::filesystem::path(request.subject_command.front()).filename().string();
  auto add = [&](const std::string& guard, const std::string& claim, const std::string& next) {
    Finding finding;
    finding.id = std::string(layer_name(layer)) + "." + request.probe + ".guard." + guard;
    finding.layer = layer;
    finding.severity = Severity::kWarn;
    finding.where.subject = subject;
    finding.where.probe = request.probe;
    finding.claim = claim;
    finding.next = next;
    out.push_back(std::move(finding));
  };
  if (sandbox_off_reason) {
    add("sandbox_off",
        "the subject ran outside the sandbox, " + *sandbox_off_reason +
            ": it could read what earlier runs left on this machine and leave files for later "
            "ones; only the secret seed of the hidden run stands against a replay",
        "install bubblewrap (scripts/install-deps) where it can create a user namespace, and "
        "run without --no-sandbox or LOUPE_NO_SANDBOX");
    // What loupe runs to see whether bwrap works here; the same for every point of a run, so a
    // run's points show the finding once.
    out.back().reproduce =
        "bwrap --ro-bind / / --dev /dev --proc /proc --unshare-net --unshare-pid "
        "--unshare-ipc --die-with-parent true";
  } else {
    // Without a user namespace bwrap goes on (--unshare-user-try), and the user and session
    // keyrings stay the host's: a key one run adds is there for the next.
    static const bool user_namespace = user_namespace_available();
    if (!user_namespace) {
      add("keyring_shared",
          "the sandbox ran without a user namespace (this kernel or container refuses one): the "
          "user and session keyrings are shared with the host, so a key one run adds is readable "
          "by later runs",
          "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or the "
          "container's seccomp profile) where loupe runs subjects");
    }
  }
  if (layer != Layer::kCheck) return out;
  if (!request.add_hidden_point && !request.hidden && !request.hidden_point &&
      request.hidden_elsewhere.empty()) {
    add("hidden_off",
        "no hidden run (turned off by --no-hidden): the candidate was judged only at the "
        "point(s) and seed(s) it was shown, which its author could have specialised it to",
        "rerun without --no-hidden");
  }
  if (request.repeat && *request.repeat == 0) {
    add("secret_repeats_off",
        "the candidate ran once per pass (--repeat 0 turns the asked and the secret repeats "
        "off): a candidate right only on its first calls in a process is not caught",
        "rerun without --repeat 0");
  } else if (!request.launch.empty()) {
    add("secret_repeats_off",
        "across ranks (--launch) only the asked repeats run, no secret ones: every rank must "
        "make the same calls, and a secret count cannot be handed to all of them alike",
        "run the check on one rank as well, without --launch, where the secret repeats apply");
  }
  return out;
}

}  // namespace loupe::probe
