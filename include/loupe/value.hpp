// loupe/value.hpp — a typed parameter value (int, float, string or bool).
//
// Probe parameters, finding coordinates and gate operands all carry values of this type, so a
// parameter point survives a round trip through the command line, JSON and the ledger unchanged.
// Thread-safety: a value type.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace loupe {

using Value = std::variant<bool, int64_t, double, std::string>;

// A parameter point, in declaration order: [("T", 16384), ("shards", 8)].
using Params = std::vector<std::pair<std::string, Value>>;

// The text form used on command lines and in directory names: 16384, 0.5, tf32_rz, true.
std::string value_to_string(const Value& value);

// "T=16384,shards=8": the point's name under .loupe/runs/<run>/<probe>/.
std::string params_to_string(const Params& params);

}  // namespace loupe
