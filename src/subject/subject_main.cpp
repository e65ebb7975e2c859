// The standard subject command line: `list` and `run`. The only place the runtime catches.
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <sstream>

#include "core/sha256.hpp"
#include "subject/isolation.hpp"
#include "subject/runtime.hpp"

namespace loupe::detail {
namespace {

constexpr std::string_view kUsage =
    "usage: SUBJECT list [--json]\n"
    "       SUBJECT run PROBE [--set NAME=VALUE ...] [--seed N] [--hidden | --hidden-point I]\n"
    "                   [--repeat N] [--counters-pass N [--counters-variant NAME]]\n"
    "                   [--variants NAME,NAME...] [--precision P] [--budget SECONDS] [--round R]\n"
    "                   --out DIR [--json]";

std::string probe_names() {
  std::string names;
  for (const auto& probe : subject::seal_registry())
    names += (names.empty() ? "" : ", ") + probe->name;
  return names.empty() ? "none" : names;
}

void check_registry() {
  std::set<std::string> seen;
  for (const auto& probe : subject::seal_registry()) {
    if (!seen.insert(probe->name).second) {
      throw Error(ErrorCode::kInternal,
                  "two probes are named '" + probe->name + "' (" + probe->file + ":" +
                      std::to_string(probe->line) + ")",
                  "probe names must be unique within a subject");
    }
  }
}

Json value_type_json(const Value& value) {
  static const char* names[] = {"bool", "int", "float", "string"};
  return names[value.index()];
}

Json list_json(const std::string& program) {
  Json probes = Json::array();
  for (const auto& probe : subject::seal_registry()) {
    Json entry = Json::object();
    entry["name"] = probe->name;
    entry["kind"] = std::string(probe_kind_name(probe->kind));
    entry["description"] = probe->description;
    Json params = Json::array();
    for (const auto& spec : probe->params) {
      Json param = Json::object();
      param["name"] = spec.name;
      param["type"] = value_type_json(spec.default_value);
      param["default"] = value_to_json(spec.default_value);
      Json allowed = Json::array();
      for (const auto& value : spec.allowed) allowed.push_back(value_to_json(value));
      param["allowed"] = std::move(allowed);
      if (!spec.description.empty()) param["description"] = spec.description;
      params.push_back(std::move(param));
    }
    entry["params"] = std::move(params);
    entry["has_oracle"] = static_cast<bool>(probe->check_oracle);
    entry["hidden_points"] = probe->hidden_points.size();
    // The values too (they are in the source): loupe passes a hidden point with --set, exactly
    // like an asked one, so nothing in the argv says which run is hidden.
    Json hidden_values = Json::array();
    for (const auto& point : probe->hidden_points) {
      Json values = Json::object();
      for (const auto& [name, value] : point) values[name] = value_to_json(value);
      hidden_values.push_back(std::move(values));
    }
    entry["hidden_point_values"] = std::move(hidden_values);
    Json ranges = Json::array();
    for (const auto& range : probe->hidden_ranges) {
      Json item = Json::object();
      item["name"] = range.name;
      item["low"] = range.low;
      item["high"] = range.high;
      item["step"] = range.step;
      ranges.push_back(std::move(item));
    }
    entry["hidden_ranges"] = std::move(ranges);
    // This runtime runs a subset of a bench's variants (run --variants): loupe passes a
    // selection only to a subject that says so, and runs every variant of an older one.
    if (probe->kind == ProbeKind::kBench) entry["selects_variants"] = true;
    probes.push_back(std::move(entry));
  }
  Json out = Json::object();
  out["subject"] = std::filesystem::path(program).filename().string();
  out["probes"] = std::move(probes);
  return out;
}

void print_list_text(const Json& list) {
  for (const auto& probe : list["probes"]) {
    std::cout << probe["name"].get<std::string>() << "  [" << probe["kind"].get<std::string>()
              << "]  " << probe["description"].get<std::string>() << "\n";
    for (const auto& param : probe["params"]) {
      std::cout << "    " << param["name"].get<std::string>() << " ("
                << param["type"].get<std::string>() << ", default " << param["default"].dump();
      if (!param["allowed"].empty()) std::cout << ", allowed " << param["allowed"].dump();
      std::cout << ")\n";
    }
  }
}

const ProbeDefinition& find_probe(const std::string& name) {
  for (const auto& probe : subject::seal_registry()) {
    if (probe->name == name) return *probe;
  }
  throw Error(ErrorCode::kUsage, "no probe named '" + name + "'; the probes are: " + probe_names(),
              "run `list` to see every probe and its parameters");
}

uint64_t parse_unsigned(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || text[0] == '-') {
    throw Error(ErrorCode::kUsage, flag + " '" + text + "': expected a non-negative integer");
  }
  return value;
}

double parse_positive(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(value > 0) || !std::isfinite(value)) {
    throw Error(ErrorCode::kUsage, flag + " '" + text + "': expected a positive number");
  }
  return value;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &parts);
  return buffer;
}

// `--variants A,B,...`: the bench's variants to run, in order. Whether the body declares each
// name is known only once it has run (bench_runner.cpp checks it then).
std::vector<std::string> parse_variant_list(const ProbeDefinition& probe, const std::string& text) {
  if (probe.kind != ProbeKind::kBench) {
    throw Error(ErrorCode::kUsage,
                "--variants: probe '" + probe.name + "' is a " +
                    std::string(probe_kind_name(probe.kind)) + "; expected a bench",
                "only a bench has variants");
  }
  std::vector<std::string> names;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string name =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.empty()) {
      throw Error(ErrorCode::kUsage,
                  "--variants '" + text + "': an empty name at character " +
                      std::to_string(start + 1) + "; expected variant names separated by commas",
                  "--variants base,double");
    }
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      throw Error(ErrorCode::kUsage,
                  "--variants '" + text + "': variant '" + name + "' is named twice",
                  "each variant runs once; name it once");
    }
    names.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return names;
}

int run_command(const std::string& program, const std::vector<std::string>& args,
                const BuildInfo& build, bool json) {
  if (args.size() < 2 || args[1].rfind("--", 0) == 0) {
    throw Error(ErrorCode::kUsage, "run: expected a probe name; the probes are: " + probe_names(),
                std::string(kUsage));
  }
  const ProbeDefinition& probe = find_probe(args[1]);
  std::vector<std::string> sets;
  std::optional<uint64_t> seed;
  std::optional<std::filesystem::path> out_dir;
  bool hidden = false;
  std::optional<uint64_t> hidden_index;
  subject::RunOptions options;
  for (size_t index = 2; index < args.size(); ++index) {
    const std::string& flag = args[index];
    auto next = [&]() -> const std::string& {
      if (index + 1 >= args.size()) {
        throw Error(ErrorCode::kUsage, flag + " needs a value", std::string(kUsage));
      }
      return args[++index];
    };
    if (flag == "--set") {
      sets.push_back(next());
    } else if (flag == "--seed") {
      seed = parse_unsigned(flag, next());
    } else if (flag == "--out") {
      out_dir = next();
    } else if (flag == "--hidden") {
      hidden = true;
    } else if (flag == "--hidden-point") {
      hidden_index = parse_unsigned(flag, next());
      if (*hidden_index >= probe.hidden_points.size()) {
        throw Error(ErrorCode::kUsage,
                    "--hidden-point " + std::to_string(*hidden_index) + ": probe '" + probe.name +
                        "' has " + std::to_string(probe.hidden_points.size()) + " hidden points",
                    "hidden points are numbered from 0, as in a hidden run's observation");
      }
      hidden = true;
    } else if (flag == "--repeat") {
      options.repeat = static_cast<int>(std::min<uint64_t>(parse_unsigned(flag, next()), 1000));
    } else if (flag == "--precision") {
      options.precision = parse_positive(flag, next());
    } else if (flag == "--budget") {
      options.budget_s = parse_positive(flag, next());
    } else if (flag == "--round") {
      const std::string& text = next();
      const uint64_t round = parse_unsigned(flag, text);
      if (round > 1000000) {
        throw Error(ErrorCode::kUsage, "--round " + text + ": expected a round from 0 to 1000000");
      }
      options.round = static_cast<int64_t>(round);
    } else if (flag == "--counters-pass") {
      const std::string& text = next();
      const uint64_t calls = parse_unsigned(flag, text);
      if (calls < 1 || calls > 10000) {
        throw Error(ErrorCode::kUsage,
                    "--counters-pass " + text + ": expected a count of calls from 1 to 10000");
      }
      options.counters_pass = static_cast<int64_t>(calls);
    } else if (flag == "--counters-variant") {
      options.counters_variant = next();
    } else if (flag == "--variants") {
      options.variants = parse_variant_list(probe, next());
    } else if (flag == "--json") {
      continue;
    } else {
      throw Error(ErrorCode::kUsage,
                  "run: unknown option '" + flag +
                      "'; the options are --set, --seed, --hidden, --hidden-point, --repeat, "
                      "--precision, "
                      "--budget, --round, --counters-pass, --counters-variant, --variants, --out, "
                      "--json",
                  std::string(kUsage));
    }
  }
  if (!out_dir) {
    throw Error(ErrorCode::kUsage, "run: --out DIR is required", std::string(kUsage));
  }
  if (options.counters_pass > 0 && probe.kind != ProbeKind::kBench) {
    throw Error(ErrorCode::kUsage,
                "--counters-pass: probe '" + probe.name + "' is a " +
                    std::string(probe_kind_name(probe.kind)) + "; expected a bench",
                "counters attach to a bench's timed call");
  }
  if (options.round > 0 && probe.kind != ProbeKind::kBench) {
    throw Error(ErrorCode::kUsage,
                "--round: probe '" + probe.name + "' is a " +
                    std::string(probe_kind_name(probe.kind)) + "; expected a bench",
                "only a bench point is measured in rounds of whole runs");
  }
  if (!options.counters_variant.empty() && options.counters_pass == 0) {
    throw Error(ErrorCode::kUsage, "--counters-variant needs --counters-pass N",
                std::string(kUsage));
  }

  // Before any path runs: children cannot reach into this process, and what they orphan comes
  // back to it. A thread already running here was started before main, by a static initialiser.
  // Scenarios are not adversarial and run in this process as before (their timings, lock
  // contention included, must not change).
  const int64_t threads_at_start = probe.kind == ProbeKind::kScenario
                                       ? subject::thread_count(0)
                                       : subject::harden_runtime_process();

  // The secret: the seed (and hidden point) the candidate's author cannot know in advance.
  std::random_device entropy;
  const uint64_t secret = (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
  options.poison_key =
      subject::derive_seed((static_cast<uint64_t>(entropy()) << 32) ^ entropy(), 11);
  Json hidden_json = nullptr;
  const Params* hidden_point = nullptr;
  if (hidden && !probe.hidden_points.empty()) {
    const size_t index = hidden_index ? *hidden_index : secret % probe.hidden_points.size();
    hidden_point = &probe.hidden_points[index];
    hidden_json = Json::object();
    hidden_json["index"] = index;
    hidden_json["of"] = probe.hidden_points.size();
    Json values = Json::object();
    for (const auto& [name, value] : *hidden_point) values[name] = value_to_json(value);
    hidden_json["point"] = std::move(values);
  }
  // A multi-rank launch runs this command once per rank: every rank must draw the same inputs,
  // rank 0 writes the observation, the others write theirs to DIR/rank-<r>/ for loupe to gather.
  const subject::LaunchRank launch = subject::launch_rank_from_environment();
  if (launch.world_size > 1) {
    if (probe.kind != ProbeKind::kCheck) {
      throw Error(ErrorCode::kUsage,
                  "run: probe '" + probe.name + "' is a " +
                      std::string(probe_kind_name(probe.kind)) + "; a multi-rank launch (" +
                      launch.source + ", " + std::to_string(launch.world_size) +
                      " ranks) runs checks only",
                  "run benches and scenarios without a launcher");
    }
    if (!seed || (hidden && !hidden_index)) {
      throw Error(ErrorCode::kUsage,
                  "run: a multi-rank launch needs --seed (and --hidden-point rather than "
                  "--hidden): every rank must generate the same inputs",
                  "loupe probe run --launch passes the seed it drew");
    }
  }
  const Point point(subject::resolve_point(probe, sets, hidden_point));
  const std::string seed_source = seed ? "given" : "drawn";
  options.seed = seed ? *seed : subject::derive_seed(secret, 7);
  options.out_dir = *out_dir;
  if (launch.rank > 0) {
    options.out_dir /= "rank-" + std::to_string(launch.rank);
    options.candidate_only = true;
  }
  if (launch.world_size > 1) {
    options.multi_rank = true;
  }

  std::error_code error;
  std::filesystem::create_directories(options.out_dir, error);
  if (error) {
    throw Error(ErrorCode::kSubject, "cannot create the observation directory " +
                                         options.out_dir.string() + ": " + error.message());
  }
  subject::ObservationFiles files(options.out_dir);
  Json observation = Json::object();
  observation["loupe_observation"] = 1;
  observation["subject"] = std::filesystem::path(program).filename().string();
  observation["probe"] = probe.name;
  observation["kind"] = std::string(probe_kind_name(probe.kind));
  Json params = Json::object();
  for (const auto& [name, value] : point.params()) params[name] = value_to_json(value);
  observation["params"] = std::move(params);
  observation["seed"] = options.seed;
  observation["seed_source"] = seed_source;
  observation["hidden"] = hidden_json;
  Json argv = Json::array();
  argv.push_back(program);
  for (const auto& arg : args) argv.push_back(arg);
  observation["argv"] = std::move(argv);
  observation["started_at"] = utc_now();
  observation["environment"] = subject::environment_fingerprint(build);
  if (launch.world_size > 1) {
    Json launch_json = Json::object();
    launch_json["rank"] = launch.rank;
    launch_json["world_size"] = launch.world_size;
    launch_json["source"] = launch.source;
    observation["launch"] = std::move(launch_json);
  }
  Json runtime = Json::object();
  runtime["threads_at_start"] = threads_at_start;
  runtime["interposed_clocks"] = subject::interposed_clocks();
  runtime["isolation"] = "fork per path and per bench variant; timing by the runtime process";

  const auto start = std::chrono::steady_clock::now();
  Json section;
  switch (probe.kind) {
    case ProbeKind::kCheck:
      section = subject::run_check(probe, point, options, files);
      break;
    case ProbeKind::kBench:
      section = subject::run_bench(probe, point, options, files);
      break;
    case ProbeKind::kScenario:
      section = subject::run_scenario(probe, point, options, files);
      break;
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  observation["wall_s"] = wall;
  Json metrics = Json::object();
  if (probe.kind == ProbeKind::kScenario) metrics = section["metrics"];
  observation["metrics"] = std::move(metrics);
  observation[std::string(probe_kind_name(probe.kind))] = std::move(section);
  observation["files"] = files.listing();
  observation["runtime"] = std::move(runtime);
  // What the paths left where the runtime writes (ObservationFiles::prepare): removed, and said.
  files.remove_links();
  files.prepare("observation.json");
  observation["planted"] = files.planted();
  // Written by loupe after the subject exits: its verdict's findings and the stderr tail.
  observation["findings"] = Json::array();
  observation["stderr_tail"] = nullptr;

  const std::filesystem::path path = options.out_dir / "observation.json";
  const std::string observation_text = observation.dump(1) + "\n";
  {
    std::ofstream out(path);
    out << observation_text;
    if (!out) throw Error(ErrorCode::kSubject, "cannot write " + path.string());
  }
  if (launch.rank > 0) return 0;  // rank 0 alone answers on stdout
  // The seal: a digest of every file, sent down the pipe to loupe, which no child holds. loupe
  // recomputes them before it reads anything, so a file changed after this point is caught.
  // Each digest was taken as its file was written, from the bytes this process wrote.
  Json seal = Json::object();
  seal["observation.json"] = sha256_hex(observation_text);
  for (const auto& [relative, digest] : files.digests()) seal[relative] = digest;
  if (json) {
    Json reply = Json::object();
    reply["probe"] = probe.name;
    reply["observation"] = path.string();
    reply["seed"] = options.seed;
    reply["seal"] = std::move(seal);
    std::cout << reply.dump() << "\n";
  } else {
    std::cout << "wrote " << path.string() << "\n";
  }
  return 0;
}

}  // namespace

namespace {
int run_subject_inner(const std::string& program, const std::vector<std::string>& args,
                      const BuildInfo& build);
}  // namespace

int run_subject(std::string program, const std::vector<std::string>& args, const BuildInfo& build) {
  const int code = run_subject_inner(program, args, build);
  if (!args.empty() && args[0] == "run") {
    // A run ends here, not by returning to main: no atexit handler and no static destructor of
    // the subject runs after the observation is sealed.
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    ::_exit(code);
  }
  return code;
}

namespace {
int run_subject_inner(const std::string& program, const std::vector<std::string>& args,
                      const BuildInfo& build) {
  bool json = false;
  for (const auto& arg : args) json = json || arg == "--json";
  try {
    check_registry();
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
      std::cout << kUsage << "\n";
      return args.empty() ? 2 : 0;
    }
    if (args[0] == "list") {
      for (size_t index = 1; index < args.size(); ++index) {
        if (args[index] != "--json") {
          throw Error(ErrorCode::kUsage, "list: unknown option '" + args[index] + "'",
                      std::string(kUsage));
        }
      }
      const Json list = list_json(program);
      if (json) {
        std::cout << list.dump() << "\n";
      } else {
        print_list_text(list);
      }
      return 0;
    }
    if (args[0] == "run") return run_command(program, args, build, json);
    throw Error(ErrorCode::kUsage, "unknown command '" + args[0] + "'; the commands are list, run",
                std::string(kUsage));
  } catch (const Error& error) {
    if (json) {
      Json reply = Json::object();
      Json detail = Json::object();
      detail["code"] = std::string(error_code_name(error.code()));
      detail["message"] = error.message();
      detail["hint"] = error.hint();
      reply["error"] = std::move(detail);
      std::cout << reply.dump() << "\n";
    }
    std::cerr << std::filesystem::path(program).filename().string() << ": " << error.message()
              << "\n";
    if (!error.hint().empty()) std::cerr << "hint: " << error.hint() << "\n";
    return exit_code(error.code());
  } catch (const std::exception& error) {
    std::cerr << std::filesystem::path(program).filename().string()
              << ": internal error: " << error.what() << "\n";
    return 3;
  }
}

}  // namespace

}  // namespace loupe::detail
