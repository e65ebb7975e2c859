// Causes before symptoms (see causes.hpp).
#include "gate/causes.hpp"

#include <algorithm>
#include <set>

#include "core/json.hpp"

namespace loupe::gate {
namespace {

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

const GateSpec* find_gate(const Objective& objective, const std::string& name) {
  for (const auto& gate : objective.gates) {
    if (gate.name == name) return &gate;
  }
  return nullptr;
}

size_t gate_index(const Objective& objective, const std::string& name) {
  for (size_t index = 0; index < objective.gates.size(); ++index) {
    if (objective.gates[index].name == name) return index;
  }
  return objective.gates.size();
}

}  // namespace

std::vector<std::string> gate_covers(const Objective& objective, const GateSpec& gate) {
  std::set<std::string> covers;
  for (const auto& [layer, name] : gate_entries(gate.expression)) {
    const ProbeEntry* entry = objective.find_entry(layer, name);
    if (entry == nullptr || entry->covers.empty()) return {};
    covers.insert(entry->covers.begin(), entry->covers.end());
  }
  return {covers.begin(), covers.end()};
}

bool explains(const std::vector<std::string>& specific, const std::vector<std::string>& composite) {
  if (specific.empty() || specific.size() >= composite.size()) return false;
  return std::includes(composite.begin(), composite.end(), specific.begin(), specific.end());
}

CauseReport explain_failures(const Objective& objective, const std::vector<GateResult>& gates) {
  struct Failing {
    std::string name;
    std::vector<std::string> covers;
    size_t order;
  };
  std::vector<Failing> failing;
  for (const auto& gate : gates) {
    if (gate.verdict != GateVerdict::kFail) continue;
    const GateSpec* spec = find_gate(objective, gate.name);
    failing.push_back({gate.name,
                       spec != nullptr ? gate_covers(objective, *spec) : std::vector<std::string>{},
                       gate_index(objective, gate.name)});
  }
  // Most specific first: fewest components (none known: last), then the objective's order.
  std::stable_sort(failing.begin(), failing.end(), [](const Failing& a, const Failing& b) {
    const size_t a_size = a.covers.empty() ? SIZE_MAX : a.covers.size();
    const size_t b_size = b.covers.empty() ? SIZE_MAX : b.covers.size();
    return a_size != b_size ? a_size < b_size : a.order < b.order;
  });
  CauseReport report;
  std::vector<FollowingGate> follows;
  std::vector<size_t> follows_order;
  for (const Failing& gate : failing) {
    // The first in this order that explains it is the most specific: nothing failing is inside
    // it (that would be smaller still, and explain the gate too), so it is a cause.
    const auto cause = std::find_if(failing.begin(), failing.end(), [&](const Failing& other) {
      return explains(other.covers, gate.covers);
    });
    if (cause == failing.end()) {
      report.causes.push_back(gate.name);
      continue;
    }
    FollowingGate link;
    link.gate = gate.name;
    link.cause = cause->name;
    link.via = cause->covers;
    const GateSpec* spec = find_gate(objective, gate.name);
    for (const auto& [layer, name] : gate_entries(spec->expression)) {
      const ProbeEntry* entry = objective.find_entry(layer, name);
      if (entry == nullptr) continue;
      const bool runs = std::any_of(link.via.begin(), link.via.end(), [&](const std::string& c) {
        return std::find(entry->covers.begin(), entry->covers.end(), c) != entry->covers.end();
      });
      if (runs) {
        link.entry = name;
        link.entry_layer = layer;
        break;
      }
    }
    link.sentence = link.gate + " fails because " + std::string(layer_name(link.entry_layer)) +
                    " " + link.entry + " runs " + join_names(link.via) + ", which fails " +
                    link.cause;
    follows.push_back(std::move(link));
    follows_order.push_back(gate.order);
  }
  // The following gates in the objective's order.
  std::vector<size_t> by_order(follows.size());
  for (size_t at = 0; at < by_order.size(); ++at) by_order[at] = at;
  std::stable_sort(by_order.begin(), by_order.end(),
                   [&](size_t a, size_t b) { return follows_order[a] < follows_order[b]; });
  for (size_t at : by_order) report.follows.push_back(std::move(follows[at]));
  return report;
}

std::vector<std::string> cause_lines(const CauseReport& report, const Objective& objective) {
  std::vector<std::string> lines;
  for (size_t at = 0; at < report.causes.size(); ++at) {
    const GateSpec* spec = find_gate(objective, report.causes[at]);
    const std::vector<std::string> covers =
        spec != nullptr ? gate_covers(objective, *spec) : std::vector<std::string>{};
    lines.push_back(std::string(at == 0 ? "lead: " : "also: ") + report.causes[at] +
                    (covers.empty() ? " (its components are not declared)"
                                    : " (covers " + join_names(covers) + ")"));
  }
  for (const auto& link : report.follows) lines.push_back(link.sentence);
  return lines;
}

nlohmann::ordered_json cause_report_to_json(const CauseReport& report, const Objective& objective) {
  Json out = Json::object();
  out["lead"] = report.causes.empty() ? Json(nullptr) : Json(report.causes.front());
  Json causes = Json::array();
  for (const auto& name : report.causes) {
    const GateSpec* spec = find_gate(objective, name);
    causes.push_back(
        {{"gate", name},
         {"covers", spec != nullptr ? gate_covers(objective, *spec) : std::vector<std::string>{}}});
  }
  out["causes"] = std::move(causes);
  Json follows = Json::array();
  for (const auto& link : report.follows) {
    follows.push_back({{"gate", link.gate},
                       {"cause", link.cause},
                       {"entry", link.entry},
                       {"via", link.via},
                       {"sentence", link.sentence}});
  }
  out["follows"] = std::move(follows);
  return out;
}

std::vector<ComponentCoverage> component_coverage(
    const Objective& objective, const std::vector<std::pair<Layer, std::string>>& planned) {
  std::vector<ComponentCoverage> out;
  for (const Component& component : objective.components) {
    ComponentCoverage row;
    row.component = component.name;
    std::vector<std::pair<size_t, std::string>> running;  // (components covered, "layer entry")
    for (const auto& [layer, name] : planned) {
      const ProbeEntry* entry = objective.find_entry(layer, name);
      if (entry == nullptr) continue;
      if (std::find(entry->covers.begin(), entry->covers.end(), component.name) ==
          entry->covers.end()) {
        continue;
      }
      running.emplace_back(entry->covers.size(), std::string(layer_name(layer)) + " " + name);
      if (layer == Layer::kBench || layer == Layer::kScenario) {
        row.timed_by.push_back(std::string(layer_name(layer)) + " " + name);
      }
    }
    if (!running.empty()) {
      size_t fewest = SIZE_MAX;
      for (const auto& [size, label] : running) fewest = std::min(fewest, size);
      row.most_specific_size = fewest;
      for (const auto& [size, label] : running) {
        (size == fewest ? row.most_specific : row.also).push_back(label);
      }
    }
    out.push_back(std::move(row));
  }
  return out;
}

std::vector<std::string> untimed_components(const std::vector<ComponentCoverage>& coverage) {
  std::vector<std::string> out;
  for (const ComponentCoverage& row : coverage) {
    if (row.timed_by.empty()) out.push_back(row.component);
  }
  return out;
}

std::vector<std::string> entries_without_covers(
    const Objective& objective, const std::vector<std::pair<Layer, std::string>>& planned) {
  std::vector<std::string> out;
  for (const auto& [layer, name] : planned) {
    const ProbeEntry* entry = objective.find_entry(layer, name);
    if (entry != nullptr && entry->covers.empty()) {
      out.push_back(std::string(layer_name(layer)) + " " + name);
    }
  }
  return out;
}

}  // namespace loupe::gate
