#include "gate/plan.hpp"

#include "gate/causes.hpp"
#include "loupe/structure.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "core/json.hpp"

namespace loupe::gate {
namespace {

std::string trim(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  const size_t end = text.find_last_not_of(" \t");
  return std::string(text.substr(begin, end - begin + 1));
}

std::string comma_list(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& word : words) {
    if (!out.empty()) out += ", ";
    out += word;
  }
  return out.empty() ? "(none)" : out;
}

[[noreturn]] void usage(const std::string& message, const std::string& hint) {
  throw Error(ErrorCode::kUsage, "--config: " + message, hint);
}

// A value typed from its text: true/false, an integer, a float, else a string.
Value infer_value(const std::string& text) {
  if (text == "true") return true;
  if (text == "false") return false;
  errno = 0;
  char* end = nullptr;
  const long long integer = std::strtoll(text.c_str(), &end, 10);
  if (errno == 0 && end != text.c_str() && *end == '\0') return static_cast<int64_t>(integer);
  errno = 0;
  const double real = std::strtod(text.c_str(), &end);
  if (errno == 0 && end != text.c_str() && *end == '\0') return real;
  return text;
}

void set(std::vector<Setting>& settings, Setting setting) {
  for (auto& existing : settings) {
    if (existing.key == setting.key) {
      existing.value = std::move(setting.value);
      return;
    }
  }
  settings.push_back(std::move(setting));
}

struct Override {
  std::string probe;
  std::string param;
  Value value;
};

std::string settings_text(const Configuration& configuration) {
  std::string out;
  for (const auto& setting : configuration.settings) {
    if (!out.empty()) out += ", ";
    out += setting.key + "=" + value_to_string(setting.value);
  }
  return out;
}

std::string padded(const std::string& text, size_t width) {
  return text.size() >= width ? text : text + std::string(width - text.size(), ' ');
}

}  // namespace

Configuration resolve_configuration(const Objective& objective, std::string_view spec) {
  Configuration configuration;
  std::vector<std::string> items;
  for (size_t start = 0; start <= spec.size();) {
    const size_t comma = spec.find(',', start);
    const size_t end = comma == std::string_view::npos ? spec.size() : comma;
    std::string item = trim(spec.substr(start, end - start));
    if (!item.empty()) items.push_back(std::move(item));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  std::vector<std::string> names;
  for (const auto& deployment : objective.deployments) names.push_back(deployment.name);
  std::vector<std::string> keys;
  for (const auto& key : objective.deployment_keys) keys.push_back(key.key);
  const std::string file = objective.file.string();

  for (size_t index = 0; index < items.size(); ++index) {
    const std::string& item = items[index];
    const size_t equals = item.find('=');
    if (equals == std::string::npos) {
      if (index != 0) {
        usage("'" + item + "' is not KEY=VALUE; a configuration name may only come first",
              "write NAME,KEY=VALUE,...");
      }
      const Deployment* deployment = objective.find_deployment(item);
      if (deployment == nullptr) {
        usage("no [[deployment]] named '" + item + "' in " + file + "; named: " + comma_list(names),
              "pass one of those names, or KEY=VALUE settings");
      }
      configuration.name = deployment->name;
      for (const auto& [key, value] : deployment->settings) {
        set(configuration.settings, {key, value});
      }
      continue;
    }
    const std::string key_text = trim(item.substr(0, equals));
    const std::string value_text = trim(item.substr(equals + 1));
    const DeploymentKey* key = objective.find_deployment_key(key_text);
    if (key == nullptr) {
      usage(file + " declares no deployment key '" + key_text + "'; keys: " + comma_list(keys),
            "add a [[deployment_key]] to the objective, or use one of those keys");
    }
    if (value_text.empty()) usage(key_text + "= has no value", "write KEY=VALUE");
    Value value = infer_value(value_text);
    if (!key->values.empty()) {
      const auto match = std::find_if(key->values.begin(), key->values.end(), [&](const Value& v) {
        return value_to_string(v) == value_text;
      });
      if (match == key->values.end()) {
        std::vector<std::string> allowed;
        for (const auto& v : key->values) allowed.push_back(value_to_string(v));
        usage(key_text + "=" + value_text + ": expected one of " + comma_list(allowed),
              "the values come from [[deployment_key]] '" + key_text + "' in " + file);
      }
      value = *match;
    }
    set(configuration.settings, {key_text, std::move(value)});
  }
  return configuration;
}

namespace {

// a × b, saturated at kSaturated so that no product of a file's list lengths overflows.
constexpr int64_t kSaturated = int64_t{1} << 50;
int64_t bounded_product(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  if (a > kSaturated / b) return kSaturated;
  return std::min(a * b, kSaturated);
}

std::string count_text(int64_t count) {
  return count >= kSaturated ? "more than " + std::to_string(kSaturated) : std::to_string(count);
}

}  // namespace

void check_run_size(const Objective& objective, const Plan& plan) {
  int64_t total = 0;
  for (Layer layer : {Layer::kCheck, Layer::kBench, Layer::kScenario}) {
    const auto& entries = objective.entries(layer);
    for (size_t index = 0; index < entries.size(); ++index) {
      const ProbeEntry& entry = entries[index];
      if (find_left_out(plan, layer, entry.name) != nullptr) continue;
      int64_t points = 1;
      for (const auto& axis : entry.params) {
        points = bounded_product(points, static_cast<int64_t>(axis.values.size()));
      }
      if (!entry.zip.empty()) {
        points = bounded_product(points, static_cast<int64_t>(entry.zip.front().values.size()));
      }
      const int64_t runs = bounded_product(points, std::max<int64_t>(entry.repeats, 1));
      total = std::min(total + runs, kSaturated);
      if (total > kMaxSubjectRunsPerRun) {
        throw Error(ErrorCode::kConfig,
                    objective.file.string() + ":" + std::to_string(entry.line) + ": " +
                        std::string(layer_name(layer)) + "[" + std::to_string(index) + "] '" +
                        entry.name + "': " + count_text(points) + " point(s) x " +
                        std::to_string(entry.repeats) + " repeat(s) brings the run to " +
                        count_text(total) + " subject runs; expected at most " +
                        std::to_string(kMaxSubjectRunsPerRun) + " per run",
                    "sweep fewer values or repeats, or split the sweep across objectives "
                    "(docs/objective.md, \"Size of a run\")");
      }
    }
  }
}

Plan make_plan(const Objective& objective, const Configuration& configuration) {
  Plan plan;
  plan.configuration = configuration;
  std::vector<Setting> effective = configuration.settings;
  for (const auto& key : objective.deployment_keys) {
    if (!key.default_value) continue;
    const bool set_by_configuration =
        std::any_of(configuration.settings.begin(), configuration.settings.end(),
                    [&](const Setting& setting) { return setting.key == key.key; });
    if (set_by_configuration) continue;
    plan.defaults.push_back({key.key, *key.default_value});
    effective.push_back(plan.defaults.back());
  }
  std::vector<Override> overrides;
  std::vector<std::pair<std::string, std::string>> switched_off;  // probe -> "KEY=VALUE"
  for (const auto& setting : effective) {
    const DeploymentKey* key = objective.find_deployment_key(setting.key);
    if (key == nullptr) {
      usage(objective.file.string() + " declares no deployment key '" + setting.key + "'",
            "resolve_configuration checks keys");
    }
    const std::string text = value_to_string(setting.value);
    for (const auto& implication : key->implies) {
      if (!implication.run.empty()) {
        const auto entry = std::find_if(implication.run.begin(), implication.run.end(),
                                        [&](const auto& item) { return item.first == text; });
        if (entry == implication.run.end()) {
          usage(setting.key + "=" + text + ": the run switch of [[deployment_key]] '" +
                    setting.key + "' for probe '" + implication.probe + "' has no entry for '" +
                    text + "'",
                "add it to run = { ... } in " + objective.file.string());
        }
        if (!entry->second) switched_off.emplace_back(implication.probe, setting.key + "=" + text);
        continue;
      }
      Value value = setting.value;
      if (!implication.map.empty()) {
        const auto mapped = std::find_if(implication.map.begin(), implication.map.end(),
                                         [&](const auto& entry) { return entry.first == text; });
        if (mapped == implication.map.end()) {
          usage(setting.key + "=" + text + ": the map of [[deployment_key]] '" + setting.key +
                    "' for probe '" + implication.probe + "' has no entry for '" + text + "'",
                "add it to the map in " + objective.file.string());
        }
        value = mapped->second;
      }
      if (implication.param) {
        auto existing = std::find_if(overrides.begin(), overrides.end(), [&](const Override& o) {
          return o.probe == implication.probe && o.param == *implication.param;
        });
        if (existing != overrides.end()) {
          existing->value = value;
        } else {
          overrides.push_back({implication.probe, *implication.param, value});
        }
        continue;
      }
      for (const auto& bench : objective.benches) {
        if (bench.probe != implication.probe) continue;
        const std::string variant = value_to_string(value);
        auto existing =
            std::find_if(plan.configured_variants.begin(), plan.configured_variants.end(),
                         [&](const auto& entry) { return entry.first == bench.name; });
        if (existing != plan.configured_variants.end()) {
          existing->second = variant;
        } else {
          plan.configured_variants.emplace_back(bench.name, variant);
        }
      }
    }
  }

  for (Layer layer : {Layer::kCheck, Layer::kBench, Layer::kScenario}) {
    for (const auto& entry : objective.entries(layer)) {
      const auto off = std::find_if(switched_off.begin(), switched_off.end(),
                                    [&](const auto& item) { return item.first == entry.probe; });
      if (off != switched_off.end()) {
        plan.left_out.push_back({layer, entry.name, entry.probe, off->second});
        continue;
      }
    }
  }
  check_run_size(objective, plan);
  for (Layer layer : {Layer::kCheck, Layer::kBench, Layer::kScenario}) {
    for (const auto& entry : objective.entries(layer)) {
      if (find_left_out(plan, layer, entry.name) != nullptr) continue;
      std::vector<PlanTask> entry_tasks;
      for (Params point : expand_points(entry)) {
        PlanTask task{layer, entry.name, entry.probe, {}, {}, entry.repeats * entry.seeds};
        for (const auto& override_value : overrides) {
          if (override_value.probe != entry.probe) continue;
          auto existing = std::find_if(point.begin(), point.end(), [&](const auto& param) {
            return param.first == override_value.param;
          });
          if (existing != point.end()) {
            existing->second = override_value.value;
          } else {
            point.emplace_back(override_value.param, override_value.value);
          }
          task.configured.push_back(override_value.param);
        }
        task.params = std::move(point);
        const bool duplicate =
            std::any_of(entry_tasks.begin(), entry_tasks.end(),
                        [&](const PlanTask& other) { return other.params == task.params; });
        if (!duplicate) entry_tasks.push_back(std::move(task));
      }
      plan.tasks.insert(plan.tasks.end(), entry_tasks.begin(), entry_tasks.end());
    }
  }
  return plan;
}

const LeftOutEntry* find_left_out(const Plan& plan, Layer layer, std::string_view entry) {
  for (const auto& left_out : plan.left_out) {
    if (left_out.layer == layer && left_out.entry == entry) return &left_out;
  }
  return nullptr;
}

std::optional<std::string> configured_variant(const Plan& plan, std::string_view bench) {
  for (const auto& [name, variant] : plan.configured_variants) {
    if (name == bench) return variant;
  }
  return std::nullopt;
}

namespace {

// The plan's entries, each once, in the plan's order.
std::vector<std::pair<Layer, std::string>> planned_entries(const Plan& plan) {
  std::vector<std::pair<Layer, std::string>> out;
  for (const auto& task : plan.tasks) {
    const std::pair<Layer, std::string> entry{task.layer, task.entry};
    if (std::find(out.begin(), out.end(), entry) == out.end()) out.push_back(entry);
  }
  return out;
}

std::string join_labels(const std::vector<std::string>& labels) {
  std::string out;
  for (const auto& label : labels) out += (out.empty() ? "" : ", ") + label;
  return out;
}

}  // namespace

std::vector<StructureRow> structures_seen(const Objective& objective, const Plan& plan) {
  const bool any = std::any_of(objective.checks.begin(), objective.checks.end(),
                               [](const ProbeEntry& entry) { return !entry.structures.empty(); });
  std::vector<StructureRow> rows;
  if (!any) return rows;
  for (const auto& [layer, name] : planned_entries(plan)) {
    if (layer != Layer::kCheck) continue;
    const ProbeEntry* entry = objective.find_entry(layer, name);
    if (entry == nullptr) continue;
    StructureRow row;
    row.entry = name;
    row.declared = !entry->structures.empty();
    for (std::string_view structure : structure::kNames) {
      const std::string text(structure);
      const bool sees = std::find(entry->structures.begin(), entry->structures.end(), text) !=
                        entry->structures.end();
      (sees ? row.sees : row.never_sees).push_back(text);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string render_plan(const Plan& plan, const Objective& objective, size_t max_tasks) {
  std::ostringstream out;
  out << "plan for " << objective.file.string() << ", ";
  if (plan.configuration.settings.empty()) {
    out << "no configuration (the file's own points)";
  } else if (!plan.configuration.name.empty()) {
    out << "configuration " << plan.configuration.name << " (" << settings_text(plan.configuration)
        << ")";
  } else {
    out << "configuration " << settings_text(plan.configuration);
  }
  if (!plan.defaults.empty()) {
    Configuration defaults;
    defaults.settings = plan.defaults;
    out << "; by default " << settings_text(defaults);
  }
  out << ": " << plan.tasks.size() << (plan.tasks.size() == 1 ? " task" : " tasks") << "\n";
  size_t entry_width = 0;
  size_t probe_width = 0;
  for (const auto& task : plan.tasks) {
    entry_width = std::max(entry_width, task.entry.size());
    probe_width = std::max(probe_width, task.probe.size());
  }
  bool any_configured = false;
  size_t shown = 0;
  for (const auto& task : plan.tasks) {
    if (shown == max_tasks) {
      out << "  ... " << plan.tasks.size() - shown << " more tasks (--json lists them all)\n";
      break;
    }
    std::string point;
    for (const auto& [name, value] : task.params) {
      if (!point.empty()) point += ",";
      point += name + "=" + value_to_string(value);
      if (std::find(task.configured.begin(), task.configured.end(), name) !=
          task.configured.end()) {
        point += "*";
        any_configured = true;
      }
    }
    if (point.empty()) point = "(defaults)";
    out << "  " << padded(std::string(layer_name(task.layer)), 8) << "  "
        << padded(task.entry, entry_width) << "  " << padded(task.probe, probe_width) << "  "
        << point;
    if (task.repeats > 1) out << "  x" << task.repeats;
    out << "\n";
    ++shown;
  }
  for (const auto& [bench, variant] : plan.configured_variants) {
    out << "bench " << bench << ": " << bench << "[configured] is " << variant << "\n";
  }
  for (const auto& left_out : plan.left_out) {
    out << "left out: " << layer_name(left_out.layer) << " " << left_out.entry << " ("
        << left_out.probe << "), by " << left_out.reason << "\n";
  }
  if (any_configured) out << "* set by the configuration\n";
  if (!objective.components.empty()) {
    // What a failing gate will be traced to (gate/causes.hpp): each component's most specific
    // entry, and the components only composite entries run (a fault there names no component).
    const auto planned = planned_entries(plan);
    out << "components (covers):\n";
    const auto coverage = component_coverage(objective, planned);
    for (const auto& row : coverage) {
      out << "  " << row.component << ": ";
      if (row.most_specific.empty()) {
        out << "no planned entry runs it\n";
        continue;
      }
      out << join_labels(row.most_specific);
      if (row.most_specific_size > 1) {
        out << " (with " << row.most_specific_size - 1
            << " other component(s): no entry runs it alone)";
      }
      if (!row.also.empty()) out << "; also run by " << join_labels(row.also);
      out << "\n";
    }
    const auto bare = entries_without_covers(objective, planned);
    if (!bare.empty()) out << "  without covers: " << join_labels(bare) << "\n";
    const auto untimed = untimed_components(coverage);
    if (!untimed.empty()) {
      out << "  untimed (no planned bench or scenario covers them: a slowdown there passes every "
             "gate): "
          << join_labels(untimed) << "\n";
    }
  }
  const auto seen = structures_seen(objective, plan);
  if (!seen.empty()) {
    out << "structures (docs/structures.md):\n";
    for (const auto& row : seen) {
      out << "  check " << row.entry << ": ";
      out << (row.sees.empty() ? "none" : join_labels(row.sees));
      if (!row.never_sees.empty()) out << "; never sees " << join_labels(row.never_sees);
      out << "\n";
    }
  }
  return out.str();
}

nlohmann::ordered_json configuration_to_json(const Configuration& configuration) {
  Json settings = Json::object();
  for (const auto& setting : configuration.settings) {
    settings[setting.key] = value_to_json(setting.value);
  }
  return {{"name", configuration.name.empty() ? Json(nullptr) : Json(configuration.name)},
          {"settings", settings}};
}

nlohmann::ordered_json plan_to_json(const Plan& plan, const Objective& objective) {
  Json tasks = Json::array();
  for (const auto& task : plan.tasks) {
    Json params = Json::object();
    for (const auto& [name, value] : task.params) params[name] = value_to_json(value);
    tasks.push_back({{"layer", layer_name(task.layer)},
                     {"entry", task.entry},
                     {"probe", task.probe},
                     {"params", params},
                     {"configured", task.configured},
                     {"repeats", task.repeats}});
  }
  Json variants = Json::object();
  for (const auto& [bench, variant] : plan.configured_variants) variants[bench] = variant;
  Json defaults = Json::object();
  for (const auto& setting : plan.defaults) defaults[setting.key] = value_to_json(setting.value);
  Json left_out = Json::array();
  for (const auto& entry : plan.left_out) {
    left_out.push_back({{"layer", layer_name(entry.layer)},
                        {"entry", entry.entry},
                        {"probe", entry.probe},
                        {"reason", entry.reason}});
  }
  const auto planned = planned_entries(plan);
  Json components = Json::array();
  const auto coverage = component_coverage(objective, planned);
  for (const auto& row : coverage) {
    components.push_back({{"name", row.component},
                          {"description", objective.find_component(row.component)->description},
                          {"most_specific", row.most_specific},
                          {"most_specific_covers", row.most_specific_size},
                          {"also", row.also},
                          {"timed_by", row.timed_by}});
  }
  Json structures = Json::array();
  for (const auto& row : structures_seen(objective, plan)) {
    structures.push_back({{"entry", row.entry},
                          {"declared", row.declared},
                          {"sees", row.sees},
                          {"never_sees", row.never_sees}});
  }
  return {{"objective", objective.file.string()},
          {"configuration", configuration_to_json(plan.configuration)},
          {"tasks", tasks},
          {"configured_variants", variants},
          {"defaults", defaults},
          {"left_out", left_out},
          {"components", components},
          {"without_covers", entries_without_covers(objective, planned)},
          {"untimed", untimed_components(coverage)},
          {"structures", structures}};
}

}  // namespace loupe::gate
