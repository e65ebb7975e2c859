// gate/expression.hpp — the gate expression language of objective files, as a typed AST.
//
// Grammar (docs/objective.md, "Gate expressions"; keywords are case-insensitive):
//   gate       := bound | verdict | passes
//   bound      := metric_ref [ "/" ( metric_ref | "baseline" ) ] comparison NUMBER [ where ]
//               | "median" "(" metric_ref ")" comparison NUMBER [ where ]
//   metric_ref := LAYER "." ENTRY [ "[" VARIANT "]" ] "." METRIC      LAYER := check|bench|scenario
//   verdict    := ENTRY [ "[" selector "]" ] [ "not" ] ( "SLOWER" "than" | "FASTER" "than" |
//                 "SAME" "as" ) ( ENTRY "[" selector "]" | "baseline" ) [ where ]
//                 (the selector may be left out, meaning every variant, only before "baseline")
//   selector   := VARIANT | "configured" | "any"
//   passes     := "check" "." ENTRY "passes" [ where ]
//   where      := "where" condition { "and" condition }
//   condition  := PARAM comparison literal       literal := NUMBER | true | false | WORD | "text"
//   comparison := "<=" | "<" | ">=" | ">" | "==" | "!="
// A bound with "/" is relative: the ratio of two named probes' metric, gated as a non-inferiority
// test on its confidence interval. A verdict gate uses the bench A/B verdicts of DESIGN.md.
// Thread-safety: value types and pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/finding.hpp"
#include "loupe/error.hpp"
#include "loupe/value.hpp"

namespace loupe::gate {

enum class Comparison { kLess, kLessEqual, kGreater, kGreaterEqual, kEqual, kNotEqual };

// "<", "<=", ">", ">=", "==", "!=".
std::string_view comparison_symbol(Comparison comparison);
// Numbers compare as numbers (an int against a float too), strings as strings, bools by ==/!=.
// Values of different kinds are never equal and never ordered (false, except for !=).
bool compare_values(const Value& left, Comparison comparison, const Value& right);

// check.cp_drift.rms_ratio, bench.decode[merged].mean_s
struct MetricRef {
  Layer layer = Layer::kCheck;
  std::string entry;
  std::optional<std::string> variant;
  std::string metric;
  bool operator==(const MetricRef&) const = default;
};

// batch >= 32
struct Condition {
  std::string param;
  Comparison comparison = Comparison::kEqual;
  Value value;
  bool operator==(const Condition&) const = default;
};

// True when the point holds the parameter and the comparison holds.
bool condition_holds(const Condition& condition, const Params& point);
bool conditions_hold(const std::vector<Condition>& conditions, const Params& point);

// metric <= limit (absolute), metric / other <= limit (relative, non-inferiority), or
// metric / baseline <= limit (against the same metric of the baseline build or run, on the same
// points and seeds; `versus_baseline`).
struct MetricBound {
  MetricRef metric;
  std::optional<MetricRef> baseline;  // the other entry of a relative bound
  bool versus_baseline = false;
  // median(metric) <= x: each point's median over its repeats (or seeds) must satisfy the
  // bound, not every repeat's value — for a metric that a preempted repeat can throw far off
  // (a lock wait under load). Absolute bounds only.
  bool median = false;
  Comparison comparison = Comparison::kLessEqual;
  double limit = 0;
  std::vector<Condition> where;
  bool operator==(const MetricBound&) const = default;
};

enum class VariantSelector { kNamed, kConfigured, kAny };

// decode[merged], decode[configured], decode[any]
struct VariantRef {
  std::string bench;
  VariantSelector selector = VariantSelector::kNamed;
  std::string variant;  // when kNamed
  bool operator==(const VariantRef&) const = default;
};

enum class AbRelation { kSlower, kFaster, kSame };

// decode[merged] not SLOWER than decode[tiled] where batch >= 32; with `versus_baseline`,
// decode[merged] not SLOWER than baseline: the same variant of the baseline build, timed
// interleaved with it (`other` then repeats `subject`).
struct BenchVerdict {
  VariantRef subject;
  bool negated = false;
  AbRelation relation = AbRelation::kSlower;
  VariantRef other;
  bool versus_baseline = false;
  std::vector<Condition> where;
  bool operator==(const BenchVerdict&) const = default;
};

// check.cp_control passes: every point of the check met its tolerances.
struct CheckPasses {
  std::string check;
  std::vector<Condition> where;
  bool operator==(const CheckPasses&) const = default;
};

using GateExpression = std::variant<MetricBound, BenchVerdict, CheckPasses>;

// Throws Error(kConfig) "at column N: expected ..., found ..." (1-based columns); the objective
// parser prefixes the file, line and key.
GateExpression parse_gate_expression(std::string_view text);

// The canonical text: parse_gate_expression(gate_expression_to_string(e)) == e.
std::string gate_expression_to_string(const GateExpression& expression);

// The cascade layer whose probes decide the gate (a relative bound's two references share it).
Layer gate_layer(const GateExpression& expression);

}  // namespace loupe::gate
