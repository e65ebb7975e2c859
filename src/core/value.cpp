#include "loupe/value.hpp"

#include <cmath>
#include <cstdio>

namespace loupe {

std::string value_to_string(const Value& value) {
  struct Visitor {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const {
      if (std::isnan(d)) return "nan";
      if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
      // Shortest text that reads back to the same double.
      char buffer[32];
      for (int precision = 6; precision <= 17; ++precision) {
        std::snprintf(buffer, sizeof buffer, "%.*g", precision, d);
        if (std::strtod(buffer, nullptr) == d) break;
      }
      return buffer;
    }
    std::string operator()(const std::string& s) const { return s; }
  };
  return std::visit(Visitor{}, value);
}

std::string params_to_string(const Params& params) {
  std::string out;
  for (const auto& [name, value] : params) {
    if (!out.empty()) out += ',';
    out += name;
    out += '=';
    out += value_to_string(value);
  }
  return out;
}

}  // namespace loupe
