// skeleton/condition.hpp — the applies_when expression language of skeletons: conditions over a
// run's findings (id patterns with globs, metric thresholds, severities) and parameters (the
// run's deployment settings and its findings' parameter points), combined with and/or/not.
//
//   expr     := or
//   or       := and ("or" and)*
//   and      := unary ("and" unary)*
//   unary    := "not" unary | "(" expr ")" | atom
//   atom     := finding [ "." METRIC OP NUMBER ]
//             | "param" "(" NAME ")" OP (NUMBER | STRING | true | false)
//             | "param" "(" NAME ")" "in" "[" VALUE ("," VALUE)* "]"
//   finding  := "finding" "(" STRING ("," SEVERITY)* ")"      SEVERITY: fail | warn | info
//   OP       := < <= > >= == !=
// A finding atom holds when some finding's id matches the glob (gate/review.hpp glob_matches over
// '.'-separated ids: `*` within one part, `**` across parts) with one of the severities (any when
// none is listed) and, with a metric, when that finding's metric compares true. A param atom
// holds when the run's deployment setting or some finding's parameter point has the name with a
// value that compares true. skeletons/README.md documents it with examples.
// Thread-safety: value types and pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/finding.hpp"
#include "loupe/value.hpp"

namespace loupe::skeleton {

enum class CompareOp { kLess, kLessEqual, kGreater, kGreaterEqual, kEqual, kNotEqual, kIn };

// "<", "<=", ">", ">=", "==", "!=", "in".
std::string_view compare_op_text(CompareOp op);

struct Condition {
  enum class Kind { kAnd, kOr, kNot, kFinding, kParam };
  Kind kind = Kind::kFinding;
  std::vector<Condition> operands;  // kAnd, kOr: two or more; kNot: one
  // kFinding: the id glob and the accepted severities (empty: any).
  std::string pattern;
  std::vector<Severity> severities;
  // kFinding with a metric, or kParam: the metric or parameter name, the comparison, and the
  // operand (a number for metrics; kIn compares with each of `values`).
  std::string name;
  bool has_comparison = false;
  CompareOp op = CompareOp::kEqual;
  std::vector<Value> values;  // one value, or the list of `in`
  int column = 0;             // 1-based column of the atom in the expression
  bool operator==(const Condition&) const = default;
};

// Parses an expression. Throws Error(kConfig) "at column N: expected ..., found ... in 'TEXT'".
Condition parse_condition(std::string_view text);

// The expression back as text, normalised (spacing, parentheses where needed).
std::string condition_to_string(const Condition& condition);

// Glob over '.'-separated finding ids: `*` matches within one part, `**` across parts.
bool finding_id_matches(std::string_view pattern, std::string_view id);

struct Evaluation {
  bool holds = false;
  // When it holds: one line per atom that made it hold, naming the finding ids and values
  // ("finding check.cp_vs_nocp.drift (fail): rms_ratio 3.2e-03 > 1e-04"; "param precision =
  // tf32_rz (deployment setting)"; "no finding matches trace.*.lock_wait").
  std::vector<std::string> reasons;
  // The strongest severity among the findings cited by the reasons; absent when only parameters
  // or absences were cited.
  std::optional<Severity> strongest;
  // How much evidence the reasons carry: each finding atom adds its cited finding's severity
  // weight (fail 1.0, warn 0.7, info 0.5), each param atom 0.5, `not` nothing; `and` sums its
  // operands, `or` takes its strongest operand that holds.
  double weight = 0;
  // The reasons (above) that cite an inferred finding (core/finding.hpp evidence_kind): a
  // condition resting on them holds by correlation only.
  std::vector<std::string> inferred;
};

// `settings` are the run's deployment settings (its recorded config).
Evaluation evaluate(const Condition& condition, const std::vector<Finding>& findings,
                    const Params& settings);

}  // namespace loupe::skeleton
