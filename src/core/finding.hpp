// core/finding.hpp — the finding, loupe's unit of feedback, and the verdict vocabulary.
//
// One schema everywhere (CLI --json, MCP, ledger, HTML); see DESIGN.md and docs/formats.md.
// JSON conversion lives in core/json.hpp so this header stays cheap to include.
// Thread-safety: value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loupe/value.hpp"

namespace loupe {

// kCounters: hardware-counter findings about one kernel (src/counters, `loupe counters`).
enum class Layer { kCheck, kBench, kScenario, kTrace, kCounters };
enum class Severity { kFail, kWarn, kInfo };
// Verdict of a command or envelope; gates use GateVerdict.
enum class Verdict { kPass, kFail, kInconclusive, kError, kNone };
enum class GateVerdict { kPass, kFail, kInconclusive, kNotRun };
// What a finding can support (issue 25): measured — a comparison or a statistic on controlled
// inputs (checks, benches, scenario metrics); inferred — a correlation read from observations
// (trace analyses, counter patterns, an inferred GIL), which cannot establish a cause alone;
// verified — a controlled A/B that changed only the suspected cause, linked through a hypothesis.
enum class EvidenceKind { kMeasured, kInferred, kVerified };

std::string_view layer_name(Layer layer);
std::string_view severity_name(Severity severity);
std::string_view verdict_name(Verdict verdict);
std::string_view gate_verdict_name(GateVerdict verdict);
// "measured", "inferred", "verified".
std::string_view evidence_kind_name(EvidenceKind kind);
// Parsers throw Error(kInput) naming the text and the accepted words.
Layer parse_layer(std::string_view text);
Severity parse_severity(std::string_view text);
Verdict parse_verdict(std::string_view text);
EvidenceKind parse_evidence_kind(std::string_view text);

// A trace event cited as evidence.
struct EventRef {
  uint64_t id = 0;
  std::string name;
  std::string track;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  bool operator==(const EventRef&) const = default;
};

struct Where {
  std::string subject;
  std::string probe;
  std::string path;                                     // code path or op, e.g. "cp.merge"
  Params params;                                        // the parameter point
  std::vector<std::pair<std::string, int64_t>> coords;  // named coordinates, e.g. T=49152
  std::optional<std::string> thread;
  std::optional<std::pair<int64_t, int64_t>> interval_ns;  // [start, end)
  bool operator==(const Where&) const = default;
};

struct Evidence {
  std::vector<std::pair<std::string, double>> metrics;  // names fixed in docs/formats.md
  std::vector<EventRef> events;
  std::vector<std::string> files;
  // Set by the producer when the layer's default is wrong; evidence_kind() reads it.
  std::optional<EvidenceKind> kind;
  bool operator==(const Evidence&) const = default;
};

struct Finding {
  std::string id;  // <layer>.<probe or analysis>.<kind>
  Layer layer = Layer::kCheck;
  Severity severity = Severity::kInfo;
  std::string claim;
  Where where;
  Evidence evidence;
  std::string next;       // the experiment that would confirm or refute the claim
  std::string reproduce;  // the exact command, seed included
  bool operator==(const Finding&) const = default;
};

// The finding's evidence kind: as set, else by its layer (trace and counters: inferred; checks,
// benches, scenarios: measured).
EvidenceKind evidence_kind(const Finding& finding);
// For an inferred finding: the experiment that would verify it (the finding's own `next` when it
// names one, else the controlled A/B to run). Empty for measured and verified findings.
std::string verification_experiment(const Finding& finding);

}  // namespace loupe
