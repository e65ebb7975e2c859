#include "core/finding.hpp"

#include "core/trust.hpp"

#include <array>
#include <string>

#include "loupe/error.hpp"

namespace loupe {
namespace {

template <class Enum, size_t N>
Enum parse_word(std::string_view text, const std::array<std::string_view, N>& words,
                std::string_view what) {
  for (size_t index = 0; index < N; ++index) {
    if (words[index] == text) return static_cast<Enum>(index);
  }
  std::string expected;
  for (auto word : words) {
    if (!expected.empty()) expected += ", ";
    expected += word;
  }
  throw Error(ErrorCode::kInput,
              std::string(what) + " '" + std::string(text) + "' is not one of: " + expected);
}

constexpr std::array<std::string_view, 5> kLayerNames = {"check", "bench", "scenario", "trace",
                                                         "counters"};
constexpr std::array<std::string_view, 3> kSeverityNames = {"fail", "warn", "info"};
constexpr std::array<std::string_view, 5> kVerdictNames = {"pass", "fail", "inconclusive", "error",
                                                           "none"};
constexpr std::array<std::string_view, 4> kGateVerdictNames = {"pass", "fail", "inconclusive",
                                                               "not-run"};
constexpr std::array<std::string_view, 3> kEvidenceKindNames = {"measured", "inferred", "verified"};

}  // namespace

std::string_view layer_name(Layer layer) { return kLayerNames[static_cast<size_t>(layer)]; }
std::string_view severity_name(Severity severity) {
  return kSeverityNames[static_cast<size_t>(severity)];
}
std::string_view verdict_name(Verdict verdict) {
  return kVerdictNames[static_cast<size_t>(verdict)];
}
std::string_view gate_verdict_name(GateVerdict verdict) {
  return kGateVerdictNames[static_cast<size_t>(verdict)];
}
Layer parse_layer(std::string_view text) { return parse_word<Layer>(text, kLayerNames, "layer"); }
Severity parse_severity(std::string_view text) {
  return parse_word<Severity>(text, kSeverityNames, "severity");
}
Verdict parse_verdict(std::string_view text) {
  return parse_word<Verdict>(text, kVerdictNames, "verdict");
}

std::string_view evidence_kind_name(EvidenceKind kind) {
  return kEvidenceKindNames[static_cast<size_t>(kind)];
}

EvidenceKind parse_evidence_kind(std::string_view text) {
  return parse_word<EvidenceKind>(text, kEvidenceKindNames, "evidence kind");
}

EvidenceKind evidence_kind(const Finding& finding) {
  if (finding.evidence.kind) return *finding.evidence.kind;
  return finding.layer == Layer::kTrace || finding.layer == Layer::kCounters
             ? EvidenceKind::kInferred
             : EvidenceKind::kMeasured;
}

std::string verification_experiment(const Finding& finding) {
  if (evidence_kind(finding) != EvidenceKind::kInferred) return "";
  if (!finding.next.empty()) return finding.next;
  return "a controlled A/B that changes only the suspected cause (a bench or scenario gate "
         "against a baseline run), linked to both runs through a hypothesis";
}

bool undermines_results(const Finding& finding) {
  if (finding.severity != Severity::kFail) return false;
  constexpr std::string_view kGuard = ".guard.";
  const size_t at = finding.id.find(kGuard);
  if (at == std::string::npos) return false;
  const std::string_view name = std::string_view(finding.id).substr(at + kGuard.size());
  if (name == "hidden_point") return finding.claim.rfind(kHiddenAlsoFails, 0) != 0;
  return name != "precision" && name != "worst_element" && name != "nonfinite";
}

}  // namespace loupe
