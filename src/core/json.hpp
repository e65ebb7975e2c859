// core/json.hpp — JSON forms of findings, errors, stats and the envelope (nlohmann-json).
//
// The envelope is what every `loupe ... --json` prints, exactly once:
//   {"loupe": 1, "kind", "verdict", "findings", "data", "error", "truncated", "stats"}
// Non-finite numbers (NaN, ±Inf) are not JSON; they are written as the strings "nan", "inf" and
// "-inf" and read back as numbers.
// Include this only from .cpp files that build or read JSON: nlohmann-json is slow to compile.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/finding.hpp"
#include "core/stats_registry.hpp"
#include "loupe/error.hpp"

namespace loupe {

// Objects keep insertion order, so output is stable in shape and parameter points keep their order.
using Json = nlohmann::ordered_json;

Json number_to_json(double value);
// Accepts a number or one of "nan", "inf", "-inf"; throws Error(kInput) naming `field` otherwise.
double number_from_json(const Json& value, std::string_view field);

Json value_to_json(const Value& value);
Value value_from_json(const Json& value, std::string_view field);

Json finding_to_json(const Finding& finding);
// Throws Error(kInput) naming the missing or ill-typed field.
Finding finding_from_json(const Json& json);

Json stats_to_json(const StatsRegistry& stats);

// A library exception's text in loupe's words: nlohmann-json's "[json.exception.parse_error.101]
// parse error at line 1, column 2: syntax error while parsing value - ..." loses its bracketed
// tag ("line 1, column 2: syntax error while parsing value - ..."); any other text is unchanged.
std::string json_error_text(const std::exception& error);

struct Envelope {
  std::string kind;  // the command: "diff", "probe.run", "trace.analyze", ...
  Verdict verdict = Verdict::kNone;
  std::vector<Finding> findings;
  Json data = Json::object();
  std::optional<Error> error;
  bool truncated = false;
  StatsRegistry stats;
};

Json envelope_to_json(const Envelope& envelope);
// One line of JSON, no trailing newline.
std::string render_envelope(const Envelope& envelope);

}  // namespace loupe
