// The probe registry, Point accessors and ScenarioState: the declarative half of the runtime.
#include <algorithm>

#include "loupe/probe.hpp"
#include "subject/runtime.hpp"

namespace loupe {

std::string_view probe_kind_name(ProbeKind kind) {
  switch (kind) {
    case ProbeKind::kCheck:
      return "check";
    case ProbeKind::kBench:
      return "bench";
    case ProbeKind::kScenario:
      return "scenario";
  }
  return "check";
}

namespace {

std::string_view value_type_name(const Value& value) {
  switch (value.index()) {
    case 0:
      return "bool";
    case 1:
      return "int";
    case 2:
      return "float";
    default:
      return "string";
  }
}

}  // namespace

bool Point::has(std::string_view name) const {
  return std::any_of(params_.begin(), params_.end(),
                     [&](const auto& entry) { return entry.first == name; });
}

const Value& Point::get(std::string_view name) const {
  for (const auto& [param_name, value] : params_) {
    if (param_name == name) return value;
  }
  std::string declared;
  for (const auto& entry : params_) declared += (declared.empty() ? "" : ", ") + entry.first;
  throw Error(ErrorCode::kInternal,
              "probe body asked for parameter '" + std::string(name) +
                  "', which the probe does not declare (declared: " +
                  (declared.empty() ? "none" : declared) + ")",
              "declare it with .param(\"" + std::string(name) + "\", default)");
}

namespace {

[[noreturn]] void wrong_type(std::string_view name, const Value& value, std::string_view wanted) {
  throw Error(ErrorCode::kInternal, "parameter '" + std::string(name) + "' is " +
                                        std::string(value_type_name(value)) + ", asked for as " +
                                        std::string(wanted));
}

}  // namespace

int64_t Point::get_int(std::string_view name) const {
  const Value& value = get(name);
  if (const auto* integer = std::get_if<int64_t>(&value)) return *integer;
  wrong_type(name, value, "int");
}

double Point::get_float(std::string_view name) const {
  const Value& value = get(name);
  if (const auto* number = std::get_if<double>(&value)) return *number;
  if (const auto* integer = std::get_if<int64_t>(&value)) return static_cast<double>(*integer);
  wrong_type(name, value, "float");
}

const std::string& Point::get_string(std::string_view name) const {
  const Value& value = get(name);
  if (const auto* text = std::get_if<std::string>(&value)) return *text;
  wrong_type(name, value, "string");
}

bool Point::get_bool(std::string_view name) const {
  const Value& value = get(name);
  if (const auto* flag = std::get_if<bool>(&value)) return *flag;
  wrong_type(name, value, "bool");
}

void ScenarioState::record_metric(std::string name, double value) {
  for (auto& entry : metrics_) {
    if (entry.first == name) {
      entry.second = value;
      return;
    }
  }
  metrics_.emplace_back(std::move(name), value);
}

void ScenarioState::add_trace(std::filesystem::path relative_path) {
  add_file(std::move(relative_path), "trace");
}

void ScenarioState::add_file(std::filesystem::path relative_path, std::string kind) {
  if (relative_path.is_absolute()) {
    throw Error(ErrorCode::kInternal,
                "scenario file '" + relative_path.string() + "' must be relative to out_dir()",
                "write it under state.out_dir() and pass the relative path");
  }
  files_.emplace_back(relative_path.generic_string(), std::move(kind));
}

namespace {

// Registrations run during static initialisation of other translation units, in an order the
// language does not fix: function-local statics.
std::vector<std::unique_ptr<detail::ProbeDefinition>>& open_registry() {
  static std::vector<std::unique_ptr<detail::ProbeDefinition>> probes;
  return probes;
}

struct Sealed {
  bool done = false;
  std::vector<std::unique_ptr<detail::ProbeDefinition>> probes;
};

Sealed& sealed() {
  static Sealed state;
  return state;
}

}  // namespace

namespace detail {

ProbeDefinition& register_probe(std::string name, ProbeKind kind, const char* file, int line) {
  if (sealed().done) {
    throw Error(ErrorCode::kInternal,
                "probe '" + name + "' is registered at " + file + ":" + std::to_string(line) +
                    " after subject_main started; the registry was sealed then",
                "declare probes at namespace scope with LOUPE_CHECK / LOUPE_BENCH / "
                "LOUPE_SCENARIO; a path cannot add or replace one");
  }
  auto definition = std::make_unique<ProbeDefinition>();
  definition->name = std::move(name);
  definition->kind = kind;
  definition->file = file;
  definition->line = line;
  open_registry().push_back(std::move(definition));
  return *open_registry().back();
}

}  // namespace detail

namespace subject {

const std::vector<std::unique_ptr<detail::ProbeDefinition>>& seal_registry() {
  Sealed& state = sealed();
  if (!state.done) {
    state.probes = std::move(open_registry());
    open_registry().clear();
    state.done = true;
  }
  return state.probes;
}

}  // namespace subject

}  // namespace loupe
