// Which probes no gate covers (see coverage.hpp).
#include "gate/coverage.hpp"

#include <algorithm>

#include "gate/gate_eval.hpp"
#include "loupe/error.hpp"

namespace loupe::gate {

std::vector<ProbeCoverage> probe_coverage(const Objective& objective, const Json& probe_list) {
  if (!probe_list.is_object() || !probe_list.contains("probes") ||
      !probe_list["probes"].is_array()) {
    throw Error(ErrorCode::kSubject, "the subject's probe list has no \"probes\" array",
                "run `SUBJECT list --json` and check it is a loupe subject");
  }
  std::vector<ProbeCoverage> out;
  for (const auto& probe : probe_list["probes"]) {
    if (!probe.is_object() || !probe.contains("name") || !probe["name"].is_string()) continue;
    ProbeCoverage row;
    row.probe = probe["name"].get<std::string>();
    row.kind = probe.value("kind", "");
    for (Layer layer : {Layer::kCheck, Layer::kBench, Layer::kScenario}) {
      for (const auto& entry : objective.entries(layer)) {
        if (entry.probe != row.probe) continue;
        row.entries.push_back(std::string(layer_name(layer)) + " " + entry.name);
        for (const auto& gate : objective.gates) {
          for (const auto& [gate_layer, gate_entry] : gate_entries(gate.expression)) {
            if (gate_layer == layer && gate_entry == entry.name &&
                std::find(row.gates.begin(), row.gates.end(), gate.name) == row.gates.end()) {
              row.gates.push_back(gate.name);
            }
          }
        }
      }
    }
    for (const auto& [name, reason] : objective.coverage_ungated) {
      if (name == row.probe) row.ungated_reason = reason;
    }
    out.push_back(std::move(row));
  }
  return out;
}

namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::string gap_text(const ProbeCoverage& row) {
  return row.entries.empty() ? "no entry runs it"
                             : "run by " + joined(row.entries) + " without a gate reading it";
}

}  // namespace

std::vector<Finding> coverage_findings(const Objective& objective,
                                       const std::vector<ProbeCoverage>& coverage) {
  std::vector<Finding> out;
  for (const auto& row : coverage) {
    if (!row.gates.empty()) continue;
    Finding finding;
    finding.layer = row.kind == "bench"      ? Layer::kBench
                    : row.kind == "scenario" ? Layer::kScenario
                                             : Layer::kCheck;
    finding.where.probe = row.probe;
    finding.reproduce = "loupe plan " + objective.file.string();
    if (!row.ungated_reason.empty()) {
      finding.id = "coverage.declared_ungated";
      finding.severity = Severity::kInfo;
      finding.claim = "probe " + row.probe + " (" + row.kind +
                      ") is not gated, as declared: " + row.ungated_reason;
      finding.next = "gate it where it can run";
    } else {
      finding.id = "coverage.ungated";
      finding.severity = Severity::kWarn;
      finding.claim = "no gate covers probe " + row.probe + " (" + row.kind +
                      "): " + gap_text(row) + "; a fault in its path would pass this objective";
      finding.next = row.entries.empty()
                         ? "add a [[" + row.kind + "]] running " + row.probe +
                               " and a gate reading it, or list it under [coverage] ungated "
                               "with the reason"
                         : "add a gate reading it (check.NAME passes, a bound, or a verdict "
                           "against the baseline)";
    }
    out.push_back(std::move(finding));
  }
  for (const auto& [name, reason] : objective.coverage_ungated) {
    const bool known = std::any_of(coverage.begin(), coverage.end(),
                                   [&](const ProbeCoverage& row) { return row.probe == name; });
    if (known) continue;
    Finding finding;
    finding.id = "coverage.unknown_probe";
    finding.layer = Layer::kCheck;
    finding.severity = Severity::kWarn;
    finding.where.probe = name;
    finding.reproduce = "loupe plan " + objective.file.string();
    finding.claim = "[coverage] ungated names probe " + name +
                    ", which the subject does not declare (" + reason + ")";
    finding.next = "remove it from [coverage] ungated, or check the subject's probe list";
    out.push_back(std::move(finding));
  }
  return out;
}

std::string render_coverage(const std::vector<ProbeCoverage>& coverage) {
  size_t gated = 0;
  std::vector<const ProbeCoverage*> gaps, declared;
  for (const auto& row : coverage) {
    if (!row.gates.empty()) {
      ++gated;
    } else if (row.ungated_reason.empty()) {
      gaps.push_back(&row);
    } else {
      declared.push_back(&row);
    }
  }
  std::string out = "coverage: " + std::to_string(gated) + " of " +
                    std::to_string(coverage.size()) + " probes gated";
  if (!declared.empty()) out += ", " + std::to_string(declared.size()) + " declared ungated";
  out += gaps.empty() ? "\n" : "; NOT gated:\n";
  for (const auto* row : gaps) {
    out += "  " + row->probe + " (" + row->kind + "): " + gap_text(*row) + "\n";
  }
  for (const auto* row : declared) {
    out +=
        "  " + row->probe + " (" + row->kind + "): declared ungated: " + row->ungated_reason + "\n";
  }
  return out;
}

}  // namespace loupe::gate
