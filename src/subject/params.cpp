// Parameter points from the command line: typed parsing and validation against the declaration.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "subject/runtime.hpp"

namespace loupe::subject {
namespace {

std::string type_name(const Value& value) {
  switch (value.index()) {
    case 0:
      return "bool";
    case 1:
      return "int";
    case 2:
      return "float";
    default:
      return "string";
  }
}

std::string allowed_list(const ParamSpec& spec) {
  std::string out;
  for (const auto& value : spec.allowed) out += (out.empty() ? "" : ", ") + value_to_string(value);
  return out;
}

std::string declared_list(const detail::ProbeDefinition& probe) {
  std::string out;
  for (const auto& spec : probe.params) {
    out += (out.empty() ? "" : ", ") + spec.name + " (" + type_name(spec.default_value) + ")";
  }
  return out.empty() ? "none" : out;
}

// Parses `text` as the type of the spec's default; nullopt when it is not one.
std::optional<Value> parse_typed(const ParamSpec& spec, const std::string& text) {
  switch (spec.default_value.index()) {
    case 0:
      if (text == "true" || text == "1") return Value(true);
      if (text == "false" || text == "0") return Value(false);
      return std::nullopt;
    case 1: {
      int64_t integer = 0;
      const char* end = text.data() + text.size();
      auto [ptr, error] = std::from_chars(text.data(), end, integer);
      if (error != std::errc() || ptr != end || text.empty()) return std::nullopt;
      return Value(integer);
    }
    case 2: {
      if (text.empty()) return std::nullopt;
      char* end = nullptr;
      const double number = std::strtod(text.c_str(), &end);
      if (end != text.c_str() + text.size()) return std::nullopt;
      return Value(number);
    }
    default:
      return Value(text);
  }
}

bool same_value(const Value& a, const Value& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<double>(&a)) return *x == std::get<double>(b);
  return a == b;
}

}  // namespace

Params resolve_point(const detail::ProbeDefinition& probe, const std::vector<std::string>& sets,
                     const Params* hidden_point) {
  Params point;
  for (const auto& spec : probe.params) point.emplace_back(spec.name, spec.default_value);

  auto find_spec = [&](const std::string& name) -> size_t {
    for (size_t index = 0; index < probe.params.size(); ++index) {
      if (probe.params[index].name == name) return index;
    }
    throw Error(ErrorCode::kUsage,
                "probe '" + probe.name + "' has no parameter '" + name +
                    "'; its parameters are: " + declared_list(probe),
                "see `list` for every probe's parameters");
  };

  for (const auto& set : sets) {
    const size_t equals = set.find('=');
    if (equals == std::string::npos || equals == 0) {
      throw Error(ErrorCode::kUsage, "--set '" + set + "': expected NAME=VALUE",
                  "for example --set T=16384");
    }
    const std::string name = set.substr(0, equals);
    const std::string text = set.substr(equals + 1);
    const size_t index = find_spec(name);
    const ParamSpec& spec = probe.params[index];
    auto value = parse_typed(spec, text);
    if (!value) {
      throw Error(ErrorCode::kUsage,
                  "probe '" + probe.name + "': parameter '" + name + "' is " +
                      type_name(spec.default_value) + ", got '" + text + "'" +
                      (spec.allowed.empty() ? "" : "; allowed: " + allowed_list(spec)),
                  "default: " + value_to_string(spec.default_value));
    }
    if (!spec.allowed.empty()) {
      bool allowed = false;
      for (const auto& candidate : spec.allowed) allowed = allowed || same_value(candidate, *value);
      // Values of hidden points, and of hidden ranges, are accepted like allowed ones: loupe
      // passes a hidden point exactly like an asked one.
      for (const auto& hidden : probe.hidden_points) {
        for (const auto& [hidden_name, hidden_value] : hidden) {
          allowed = allowed || (hidden_name == name && same_value(hidden_value, *value));
        }
      }
      for (const auto& range : probe.hidden_ranges) {
        const auto* number = std::get_if<int64_t>(&*value);
        allowed = allowed || (range.name == name && number != nullptr && *number >= range.low &&
                              *number <= range.high &&
                              (*number - range.low) % std::max<int64_t>(range.step, 1) == 0);
      }
      if (!allowed) {
        throw Error(ErrorCode::kUsage,
                    "probe '" + probe.name + "': parameter '" + name + "' = " + text +
                        " is not an allowed value; allowed: " + allowed_list(spec),
                    "default: " + value_to_string(spec.default_value));
      }
    }
    point[index].second = *value;
  }

  if (hidden_point != nullptr) {
    // Hidden points may leave the allowed sets: that is their purpose.
    for (const auto& [name, value] : *hidden_point) {
      const size_t index = find_spec(name);
      if (value.index() != probe.params[index].default_value.index()) {
        throw Error(ErrorCode::kInternal, "probe '" + probe.name + "': hidden point sets '" + name +
                                              "' to a " + type_name(value) + "; it is " +
                                              type_name(probe.params[index].default_value));
      }
      point[index].second = value;
    }
  }
  return point;
}

}  // namespace loupe::subject
