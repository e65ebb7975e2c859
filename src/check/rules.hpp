// check/rules.hpp — per-tensor threshold rules for `loupe diff --rules FILE` and the Python
// package's `rules=` (docs/formats.md, "Threshold rules"): an ordered list of rules, each a
// tensor-name pattern and predicates over any metric (`rel <= 0.0085`, `max_abs <= 1e-2`). The
// first rule whose pattern matches a tensor's name decides it: the tensor passes when every
// predicate holds. A tensor no rule matches is an error (Error(kConfig), exit 2) naming it.
//
//   [[rule]]
//   name = "attention"                    # optional; "rule N" (1-based) when absent
//   match = 'layers\.\d+\.self_attn'      # a regular expression searched for in the name
//   when = ["rel <= 0.0085", "max_abs <= 1e-2"]
//
// Thread-safety: a RuleSet is immutable once read; matching is a pure function.
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "check/compare.hpp"

namespace loupe::check {

struct Rule {
  std::string name;
  std::string match;  // the pattern as written
  std::vector<Bound> when;
  std::vector<std::string> when_text;  // each predicate as written
  int line = 0;                        // where the rule starts in its file
  bool operator==(const Rule&) const = default;
};

struct RuleSet {
  std::string origin;  // the file (or "rules=" for text given in Python)
  std::vector<Rule> rules;
  bool operator==(const RuleSet&) const = default;
};

// Parses rules from TOML text; `origin` names it in messages. Throws Error(kConfig) naming the
// origin, the line and the key for a syntax error, an unknown key, a rule without `match` or
// `when`, a pattern that does not compile (core/pattern.hpp), or a predicate that is not
// "METRIC OP NUMBER" (OP one of <=, <, >=, >; METRIC any metric name or alias).
RuleSet parse_rules(std::string_view text, const std::string& origin);
// Reads and parses a rules file; Error(kInput) when it cannot be read.
RuleSet read_rules(const std::filesystem::path& path);

// A rule from its parts as written (an objective's inline `rules`, a rule sent to a Slurm task):
// compiles the pattern and parses each predicate. Throws Error(kConfig) with `where` in front of
// the message for a bad pattern, no predicate, or a bad predicate.
Rule make_rule(std::string name, std::string match, std::vector<std::string> when_text, int line,
               const std::string& where);

// "rel <= 0.0085" → Bound. Throws Error(kConfig) with `where` in front of the message.
Bound parse_predicate(std::string_view text, const std::string& where);

// The index of the first rule whose pattern matches `name`, nullopt when none does.
std::optional<size_t> deciding_rule(const RuleSet& rules, const std::string& name);

// Whether the regular expression `pattern` (ECMAScript syntax) is found in `name`. The only
// place rules touch a regex engine. Throws Error(kConfig) for an invalid pattern.
bool name_matches(const std::string& pattern, const std::string& name);

// Whether any rule's predicate names a statistic (check/metrics.hpp `is_statistic`): the
// comparison then needs add_statistics' second pass.
bool rules_name_statistic(const RuleSet& rules);

// "rule 'attention' (rules.toml:4) decided: cos_dist 0.012 > 0.0085; max_abs 3e-3 <= 0.01": each
// predicate's metric under its own name, its value, the operator that held (or the one that
// failed) and its limit.
std::string rule_decision_sentence(const Rule& rule, const std::string& origin,
                                   std::span<const BoundResult> results);

}  // namespace loupe::check
