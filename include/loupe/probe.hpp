// loupe/probe.hpp — how a subject declares its probes, and the command line every subject gets.
//
// A subject is a program under study. It declares probes at namespace scope, in the style of
// GoogleTest and NVBench, and hands its command line to loupe::subject_main:
//
//   #include <loupe/probe.hpp>
//
//   LOUPE_CHECK(row_sums)                                       // loupe/check.hpp
//       .description("row sums: blocked summation against a sequential loop")
//       .param("N", 4096, {1024, 4096})
//       .inputs([](loupe::CheckSetup& setup) { ... })            // inputs from setup.seed()
//       .reference([](loupe::CheckIo& io) { ... })
//       .candidate([](loupe::CheckIo& io) { ... });
//
//   LOUPE_BENCH(row_sums_speed)                                 // loupe/bench.hpp
//       .param("N", 4096, {1024, 4096})
//       .body([](loupe::BenchState& state) { state.exec(make, {{"loop", f}, {"blocked", g}}); });
//
//   LOUPE_SCENARIO(pipeline)
//       .body([](loupe::ScenarioState& state) { state.record_metric("tokens_per_s", ...); });
//
//   int main(int argc, char** argv) { return loupe::subject_main(argc, argv); }
//
// The program then answers `SUBJECT list [--json]` and
// `SUBJECT run PROBE [--set k=v ...] [--seed N] [--hidden] [--repeat N] --out DIR [--json]`,
// writing DIR/observation.json (docs/formats.md, "Observation"). It never decides a verdict:
// `loupe probe run ... -- SUBJECT` reads the files and decides.
//
// This header includes loupe/check.hpp and loupe/bench.hpp at its end, so one include is enough.
// Link the subject with CMake target loupe::loupe (in-tree or from find_package(loupe)); it
// carries loupe's core, so nothing else from loupe is needed. Compile the files that declare
// probes into the executable itself: a static library's object holding only registrations is
// dropped by the linker (as with GoogleTest), unless linked whole-archive.
// Thread-safety: registration happens during static initialisation, before main; subject_main
// seals the registry (no public function reads or changes it afterwards). Check paths and bench
// bodies run in child processes forked from the thread that called subject_main (docs/security.md);
// `run` ends the process with _exit once the observation is written, so no static destructor of the
// subject runs after it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "loupe/error.hpp"
#include "loupe/tensor.hpp"
#include "loupe/value.hpp"

namespace loupe {

enum class ProbeKind { kCheck, kBench, kScenario };

// "check", "bench", "scenario".
std::string_view probe_kind_name(ProbeKind kind);

// One declared parameter. An empty `allowed` accepts any value of the default's type.
struct ParamSpec {
  std::string name;
  Value default_value;
  std::vector<Value> allowed;
  std::string description;
};

// The parameter point a probe body runs at: every declared parameter, in declaration order, set
// on the command line or defaulted. Getters throw Error(kInternal) naming the parameter when it
// is not declared or has another type (get_float also accepts an int parameter).
class Point {
 public:
  Point() = default;
  explicit Point(Params params) : params_(std::move(params)) {}

  const Params& params() const { return params_; }
  bool has(std::string_view name) const;
  const Value& get(std::string_view name) const;
  int64_t get_int(std::string_view name) const;
  double get_float(std::string_view name) const;
  const std::string& get_string(std::string_view name) const;
  bool get_bool(std::string_view name) const;

 private:
  Params params_;
};

class CheckSetup;
class CheckIo;
class BenchState;
class ScenarioState;

namespace detail {

// An integer parameter's range loupe draws hidden values from (ProbeBuilder::hidden_range).
struct HiddenRange {
  std::string name;
  int64_t low = 0;
  int64_t high = 0;
  int64_t step = 1;  // values low, low + step, ... up to high
};

// What a registration macro records. Read by the runtime; subjects never touch it directly.
struct ProbeDefinition {
  std::string name;
  ProbeKind kind = ProbeKind::kCheck;
  std::string description;
  std::vector<ParamSpec> params;
  // Points loupe may add to a check's run (ProbeBuilder::hidden_point, hidden_range).
  std::vector<Params> hidden_points;
  std::vector<HiddenRange> hidden_ranges;
  std::string file;
  int line = 0;
  std::function<void(CheckSetup&)> check_inputs;
  std::function<void(CheckIo&)> check_reference;
  std::function<void(CheckIo&)> check_candidate;
  std::function<void(CheckIo&)> check_oracle;
  std::function<void(BenchState&)> bench_body;
  std::function<void(ScenarioState&)> scenario_body;
};

// Adds a probe to the process-wide registry; a second probe with the same name is reported by
// subject_main (exit 3) rather than here, because this runs before main.
// REQUIRES: static initialisation (the registration macros). subject_main seals the registry
// before any probe code runs: the definitions move where nothing public reaches them, and a
// later call throws Error(kInternal) — a candidate cannot replace a registered path.
ProbeDefinition& register_probe(std::string name, ProbeKind kind, const char* file, int line);

template <class T>
Value to_value(const T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    return Value(value);
  } else if constexpr (std::is_integral_v<T>) {
    return Value(static_cast<int64_t>(value));
  } else if constexpr (std::is_floating_point_v<T>) {
    return Value(static_cast<double>(value));
  } else {
    static_assert(std::is_convertible_v<T, std::string>,
                  "a parameter is an integer, a floating-point number, a bool or a string");
    return Value(std::string(value));
  }
}

// The object a registration macro's static variable holds; it exists only so that the builder
// chain can end in an initialisation.
struct Registered {
  template <class Builder>
  Registered(const Builder&) {}  // NOLINT(google-explicit-constructor): the macro relies on it
};

}  // namespace detail

// The chainable part every probe kind shares.
template <class Derived>
class ProbeBuilder {
 public:
  explicit ProbeBuilder(detail::ProbeDefinition& definition) : definition_(&definition) {}

  // One line: what the probe observes (shown by `list`).
  Derived& description(std::string text) {
    definition_->description = std::move(text);
    return self();
  }

  // A named typed parameter with its default and, optionally, the values it may take:
  //   .param("T", 16384, {1024, 16384}) .param("precision", "ieee", {"ieee", "tf32_rz"})
  //   .param("scale", 0.5) .param("l2norm", true)
  // REQUIRES: the default is among `allowed` when `allowed` is not empty.
  template <class T>
  Derived& param(std::string name, T default_value, std::initializer_list<T> allowed = {},
                 std::string description = {}) {
    ParamSpec spec{std::move(name), detail::to_value(default_value), {}, std::move(description)};
    for (const auto& value : allowed) spec.allowed.push_back(detail::to_value(value));
    definition_->params.push_back(std::move(spec));
    return self();
  }

  // A corner of the domain loupe may start a check's hidden run from, with values that need not
  // be in the allowed sets (HV = 3 H, K != V): loupe picks one of the corners in secret, then
  // draws every hidden_range's parameter over it, and passes the result exactly like an asked
  // point (`--set`, with a seed it draws in secret), saying afterwards that it was hidden.
  // Its values are in the source, so a candidate's author can read them: a probe that declares
  // hidden points and no hidden_range fails guard.hidden_point (the hidden run would check
  // nothing the author could not prepare for); declare a range for at least one size.
  // Parameters the point leaves out keep the asked point's values (their defaults when none was
  // asked): the hidden run checks the asked configuration at another shape.
  Derived& hidden_point(Params point) {
    definition_->hidden_points.push_back(std::move(point));
    return self();
  }

  // Integer parameter `name` may take any value low, low + step, ... up to high at a hidden
  // point: loupe draws one in secret for each run (over the corner it picked, if any; other
  // parameters keep the asked values), and the subject accepts it outside the allowed set.
  // REQUIRES: low <= high, step >= 1.
  Derived& hidden_range(std::string name, int64_t low, int64_t high, int64_t step = 1) {
    definition_->hidden_ranges.push_back({std::move(name), low, high, step < 1 ? 1 : step});
    return self();
  }

 protected:
  Derived& self() { return static_cast<Derived&>(*this); }
  detail::ProbeDefinition* definition_;
};

// A scenario: runs a pipeline configuration once and records metrics (and optionally a trace).
class ScenarioState {
 public:
  ScenarioState(const Point& point, uint64_t seed, std::filesystem::path out_dir)
      : point_(&point), seed_(seed), out_dir_(std::move(out_dir)) {}

  const Point& point() const { return *point_; }
  uint64_t seed() const { return seed_; }
  // The observation directory: write trace or other files here and declare them below.
  const std::filesystem::path& out_dir() const { return out_dir_; }

  // A metric by its docs/formats.md name (wall_s, tokens_per_s, ...). The runtime always records
  // wall_s around the body; a body that records wall_s itself replaces it.
  void record_metric(std::string name, double value);
  // A trace file the body wrote, relative to out_dir() (Chrome JSON or loupe's binary format).
  void add_trace(std::filesystem::path relative_path);
  // Any other file the body wrote, relative to out_dir().
  void add_file(std::filesystem::path relative_path, std::string kind);

  const std::vector<std::pair<std::string, double>>& metrics() const { return metrics_; }
  const std::vector<std::pair<std::string, std::string>>& files() const { return files_; }

 private:
  const Point* point_;
  uint64_t seed_;
  std::filesystem::path out_dir_;
  std::vector<std::pair<std::string, double>> metrics_;
  std::vector<std::pair<std::string, std::string>> files_;  // (relative path, kind)
};

class ScenarioBuilder : public ProbeBuilder<ScenarioBuilder> {
 public:
  using ProbeBuilder::ProbeBuilder;
  // The scenario itself. It receives the seed: scenarios are not adversarial checks.
  ScenarioBuilder& body(std::function<void(ScenarioState&)> body) {
    definition_->scenario_body = std::move(body);
    return *this;
  }
};

// The standard subject command line (see the top of this file). Returns the exit status:
// 0 the command ran (a run wrote its observation), 2 bad usage (unknown probe, unknown or
// ill-typed parameter, a value outside the allowed set — the message lists the valid choices),
// 3 the probe failed to run (an exception from a body, an unwritable directory).
// argv[0] names the subject in reproduce commands; argv[1] is the command (list or run).
// Inline (below) so that the compiler and build type in the environment fingerprint are the
// subject's own, not those libloupe was built with.
int subject_main(int argc, char** argv);
// The same, from already split arguments (args[0] is the command), for programs like `kda` that
// put the subject interface under a subcommand (`kda probe list`).
int subject_main(std::string program, const std::vector<std::string>& args);

// Registers `hook` to run when the child process a check path or bench body runs in ends (it
// ends with _exit: atexit handlers and static destructors never run there), for a library that
// must be shut down before its process ends, e.g. MPI_Finalize in a candidate that runs across
// ranks (docs/multi-rank.md). Registered from inside a path, it lives in that child only. Hooks
// run once, the last registered first; one that throws is skipped.
void at_path_process_exit(std::function<void()> hook);

namespace detail {
struct BuildInfo {
  std::string compiler;
  std::string build_type;  // "release" (NDEBUG and optimised), "debug", or "optimised+asserts"
};
int run_subject(std::string program, const std::vector<std::string>& args, const BuildInfo& build);

inline BuildInfo this_build() {
  BuildInfo build;
#if defined(__clang__)
  build.compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  build.compiler = "gcc " __VERSION__;
#else
  build.compiler = "unknown";
#endif
#if defined(NDEBUG) && defined(__OPTIMIZE__)
  build.build_type = "release";
#elif defined(__OPTIMIZE__)
  build.build_type = "optimised+asserts";
#else
  build.build_type = "debug";
#endif
  return build;
}
}  // namespace detail

inline int subject_main(std::string program, const std::vector<std::string>& args) {
  return detail::run_subject(std::move(program), args, detail::this_build());
}

inline int subject_main(int argc, char** argv) {
  std::vector<std::string> args;
  for (int index = 1; index < argc; ++index) args.emplace_back(argv[index]);
  return subject_main(argc > 0 ? std::string(argv[0]) : std::string("subject"), args);
}

}  // namespace loupe

#define LOUPE_PROBE_CONCAT_INNER(a, b) a##b
#define LOUPE_PROBE_CONCAT(a, b) LOUPE_PROBE_CONCAT_INNER(a, b)

// LOUPE_SCENARIO(name).param(...).body([](loupe::ScenarioState& state) { ... });
#define LOUPE_SCENARIO(name)                                                                    \
  [[maybe_unused]] static const ::loupe::detail::Registered LOUPE_PROBE_CONCAT(loupe_scenario_, \
                                                                               __COUNTER__) =   \
      ::loupe::ScenarioBuilder(::loupe::detail::register_probe(                                 \
          #name, ::loupe::ProbeKind::kScenario, __FILE__, __LINE__))

#include "loupe/bench.hpp"  // IWYU pragma: export
#include "loupe/check.hpp"  // IWYU pragma: export
