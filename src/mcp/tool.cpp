#include "mcp/tool.hpp"

#include <algorithm>
#include <cmath>

#include "core/home.hpp"
#include "mcp/access.hpp"

namespace loupe::mcp {
namespace {

// Whole numbers print without a fraction ("[1, 100]", not "[1.0, 100.0]").
Json bound_json(double value) {
  if (value == std::floor(value) && std::fabs(value) < 1e15) return static_cast<int64_t>(value);
  return value;
}

std::string type_name(ParamType type) {
  switch (type) {
    case ParamType::kString:
      return "string";
    case ParamType::kInteger:
      return "integer";
    case ParamType::kNumber:
      return "number";
    case ParamType::kBoolean:
      return "boolean";
    case ParamType::kStringArray:
      return "array of strings";
    case ParamType::kNameList:
      return "array of names or a comma-separated string";
    case ParamType::kNameValues:
      return "object of NAME: value or array of NAME=VALUE strings";
  }
  return "value";
}

std::string join(const std::vector<std::string>& words, const std::string& separator) {
  std::string out;
  for (const auto& word : words) {
    if (!out.empty()) out += separator;
    out += word;
  }
  return out;
}

Json param_schema(const Param& param) {
  Json schema = Json::object();
  switch (param.type) {
    case ParamType::kString:
      schema["type"] = "string";
      if (!param.allowed.empty()) schema["enum"] = param.allowed;
      break;
    case ParamType::kInteger:
      schema["type"] = "integer";
      break;
    case ParamType::kNumber:
      schema["type"] = "number";
      break;
    case ParamType::kBoolean:
      schema["type"] = "boolean";
      break;
    case ParamType::kStringArray:
      schema["type"] = "array";
      schema["items"] = {{"type", "string"}};
      break;
    case ParamType::kNameList:
      schema["type"] = Json::array({"array", "string"});
      schema["items"] = {{"type", "string"}};
      break;
    case ParamType::kNameValues:
      // The object's values (numbers, strings, booleans) are checked by check_arguments.
      schema["type"] = Json::array({"object", "array"});
      schema["items"] = {{"type", "string"}};
      break;
  }
  if (param.minimum) schema["minimum"] = bound_json(*param.minimum);
  if (param.maximum) schema["maximum"] = bound_json(*param.maximum);
  if (!param.description.empty()) schema["description"] = param.description;
  return schema;
}

std::string allowed_text(const Param& param) {
  std::string text = param.name + " takes " + type_name(param.type);
  if (!param.allowed.empty()) text += ", one of: " + join(param.allowed, ", ");
  if (param.minimum && param.maximum) {
    text += " in [" + bound_json(*param.minimum).dump() + ", " + bound_json(*param.maximum).dump() +
            "]";
  } else if (param.minimum) {
    text += " >= " + bound_json(*param.minimum).dump();
  } else if (param.maximum) {
    text += " <= " + bound_json(*param.maximum).dump();
  }
  return text;
}

bool has_type(const Json& value, ParamType type) {
  switch (type) {
    case ParamType::kString:
      return value.is_string();
    case ParamType::kInteger:
      // 3.0 is an integer in JSON Schema; 3.5 is not.
      return value.is_number_integer() ||
             (value.is_number_float() && std::isfinite(value.get<double>()) &&
              value.get<double>() == std::floor(value.get<double>()));
    case ParamType::kNumber:
      return value.is_number();
    case ParamType::kBoolean:
      return value.is_boolean();
    case ParamType::kStringArray:
      if (!value.is_array()) return false;
      return std::all_of(value.begin(), value.end(),
                         [](const Json& item) { return item.is_string(); });
    case ParamType::kNameList:
      return value.is_string() || has_type(value, ParamType::kStringArray);
    case ParamType::kNameValues:
      if (value.is_object()) {
        return std::all_of(value.begin(), value.end(), [](const Json& item) {
          return item.is_number() || item.is_string() || item.is_boolean();
        });
      }
      return has_type(value, ParamType::kStringArray);
  }
  return false;
}

// The largest array inside `value` by serialised size, for cutting; nullptr when none is longer
// than one element.
Json* largest_array(Json& value, size_t* size) {
  Json* best = nullptr;
  *size = 0;
  auto visit = [&](auto&& self, Json& node) -> void {
    if (node.is_array()) {
      if (node.size() > 1) {
        const size_t bytes = dump_compact(node).size();
        if (bytes > *size) {
          *size = bytes;
          best = &node;
        }
      }
      for (auto& item : node) self(self, item);
    } else if (node.is_object()) {
      for (auto& item : node.items()) self(self, item.value());
    }
  };
  visit(visit, value);
  return best;
}

}  // namespace

double time_bound_s(const ServerSettings& settings, const Tool& tool) {
  if (const auto named = settings.time_bounds_s.find(tool.name);
      named != settings.time_bounds_s.end()) {
    return named->second;
  }
  if (const auto every = settings.time_bounds_s.find("*"); every != settings.time_bounds_s.end()) {
    return every->second;
  }
  return tool.long_running ? kLongToolTimeBoundS : kToolTimeBoundS;
}

Json input_schema(const Tool& tool) {
  Json properties = Json::object();
  Json required = Json::array();
  for (const auto& param : tool.params) {
    properties[param.name] = param_schema(param);
    if (param.required) required.push_back(param.name);
  }
  Json schema = {{"type", "object"}, {"properties", std::move(properties)}};
  if (!required.empty()) schema["required"] = std::move(required);
  schema["additionalProperties"] = false;
  return schema;
}

namespace {

// MCP's rule: destructiveHint and idempotentHint mean something only when readOnlyHint is false,
// so a read-only tool states readOnlyHint and openWorldHint alone (both differ from the
// defaults, false and true). 54 characters per read-only tool of the 12,000 tools/list may use.
Json annotations_json(const Annotations& annotations) {
  Json out = {{"readOnlyHint", annotations.read_only}};
  if (!annotations.read_only) {
    out["destructiveHint"] = annotations.destructive;
    out["idempotentHint"] = annotations.idempotent;
  }
  out["openWorldHint"] = annotations.open_world;
  return out;
}

}  // namespace

Json tool_definition(const Tool& tool) {
  return {{"name", tool.name},
          {"description", tool.description},
          {"inputSchema", input_schema(tool)},
          {"annotations", annotations_json(tool.annotations)}};
}

void check_arguments(const Tool& tool, const Json& arguments) {
  std::vector<std::string> names;
  for (const auto& param : tool.params) names.push_back(param.name);
  const std::string accepted =
      names.empty() ? "this tool takes no arguments" : "accepted arguments: " + join(names, ", ");
  if (arguments.is_null()) {
    for (const auto& param : tool.params) {
      if (param.required) {
        throw Error(ErrorCode::kUsage,
                    tool.name + ": missing required argument '" + param.name + "'",
                    allowed_text(param) + "; " + accepted);
      }
    }
    return;
  }
  if (!arguments.is_object()) {
    throw Error(ErrorCode::kUsage,
                tool.name + ": arguments must be an object, got " + arguments.type_name(),
                accepted);
  }
  for (const auto& item : arguments.items()) {
    const auto param = std::find_if(tool.params.begin(), tool.params.end(),
                                    [&](const Param& p) { return p.name == item.key(); });
    if (param == tool.params.end()) {
      throw Error(ErrorCode::kUsage, tool.name + ": unknown argument '" + item.key() + "'",
                  accepted);
    }
    const Json& value = item.value();
    if (!has_type(value, param->type)) {
      throw Error(ErrorCode::kUsage,
                  tool.name + ": argument '" + param->name + "' is " + value.type_name() + " " +
                      dump_compact(value) + ", expected " + type_name(param->type),
                  allowed_text(*param));
    }
    if (!param->allowed.empty() && std::find(param->allowed.begin(), param->allowed.end(),
                                             value.get<std::string>()) == param->allowed.end()) {
      throw Error(ErrorCode::kUsage,
                  tool.name + ": argument '" + param->name + "' is " + dump_compact(value) +
                      ", not one of the accepted values",
                  allowed_text(*param));
    }
    if (value.is_number()) {
      const double number = value.get<double>();
      if ((param->minimum && number < *param->minimum) ||
          (param->maximum && number > *param->maximum)) {
        throw Error(ErrorCode::kUsage,
                    tool.name + ": argument '" + param->name + "' is " + dump_compact(value) +
                        ", out of range",
                    allowed_text(*param));
      }
    }
  }
  for (const auto& param : tool.params) {
    if (param.required && !arguments.contains(param.name)) {
      throw Error(ErrorCode::kUsage, tool.name + ": missing required argument '" + param.name + "'",
                  allowed_text(param) + "; " + accepted);
    }
  }
}

std::optional<std::string> string_argument(const Json& arguments, const std::string& name) {
  if (!arguments.is_object() || !arguments.contains(name)) return std::nullopt;
  return arguments[name].get<std::string>();
}

std::optional<int64_t> integer_argument(const Json& arguments, const std::string& name) {
  if (!arguments.is_object() || !arguments.contains(name)) return std::nullopt;
  const Json& value = arguments[name];
  if (value.is_number_float()) return static_cast<int64_t>(value.get<double>());
  return value.get<int64_t>();
}

std::optional<double> number_argument(const Json& arguments, const std::string& name) {
  if (!arguments.is_object() || !arguments.contains(name)) return std::nullopt;
  return arguments[name].get<double>();
}

bool flag_argument(const Json& arguments, const std::string& name) {
  return arguments.is_object() && arguments.contains(name) && arguments[name].get<bool>();
}

std::vector<std::string> strings_argument(const Json& arguments, const std::string& name) {
  if (!arguments.is_object() || !arguments.contains(name)) return {};
  const Json& value = arguments[name];
  if (!value.is_object()) return value.get<std::vector<std::string>>();
  std::vector<std::string> pairs;
  for (const auto& item : value.items()) {
    const Json& setting = item.value();
    pairs.push_back(item.key() + "=" +
                    (setting.is_string() ? setting.get<std::string>() : dump_compact(setting)));
  }
  return pairs;
}

std::vector<std::string> names_argument(const Json& arguments, const std::string& name) {
  if (!arguments.is_object() || !arguments.contains(name)) return {};
  const Json& value = arguments[name];
  std::vector<std::string> names;
  if (value.is_array()) {
    names = value.get<std::vector<std::string>>();
  } else {
    const std::string text = value.get<std::string>();
    size_t start = 0;
    while (true) {
      const size_t comma = text.find(',', start);
      names.push_back(
          text.substr(start, (comma == std::string::npos ? text.size() : comma) - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  for (size_t index = 0; index < names.size(); ++index) {
    if (names[index].empty()) {
      throw Error(ErrorCode::kUsage,
                  name + " " + dump_compact(value) + ": empty name at position " +
                      std::to_string(index + 1),
                  "name every one, e.g. [\"B\", \"T\", \"H\", \"V\"] or \"B,T,H,V\"");
    }
  }
  return names;
}

std::filesystem::path resolve_path(const ServerSettings& settings, const std::string& text) {
  std::filesystem::path path(text);
  if (!path.is_absolute() && !settings.cwd.empty()) path = (settings.cwd / path).lexically_normal();
  check_path_access(policy_of(settings), path, text);
  return path;
}

std::filesystem::path home_dir(const ServerSettings& settings, const Json& arguments) {
  if (auto home = string_argument(arguments, "home")) return resolve_path(settings, *home);
  const std::filesystem::path cwd =
      settings.cwd.empty() ? std::filesystem::current_path() : settings.cwd;
  return std::filesystem::absolute(resolve_home(settings.home, cwd));
}

std::filesystem::path ledger_file(const ServerSettings& settings, const Json& arguments) {
  if (auto ledger = string_argument(arguments, "ledger")) return resolve_path(settings, *ledger);
  return home_dir(settings, arguments) / "ledger.sqlite";
}

Json bound_envelope(Json envelope, size_t max_bytes, const std::string& hint) {
  if (dump_compact(envelope).size() <= max_bytes) return envelope;
  std::vector<std::string> cut;
  // The note is added first so that its own size counts; a tool's own note is kept in front.
  if (!envelope["data"].is_object()) envelope["data"] = Json::object();
  const std::string earlier_note = envelope["data"].value("truncation", std::string());
  envelope["truncated"] = true;
  envelope["data"]["truncation"] = "";
  // Data first: its tables back the findings up, the findings are the answer.
  size_t arrays_cut = 0;
  while (dump_compact(envelope).size() > max_bytes) {
    size_t bytes = 0;
    Json* array = largest_array(envelope["data"], &bytes);
    if (array == nullptr) break;
    const size_t keep = array->size() / 2;
    array->erase(array->begin() + static_cast<std::ptrdiff_t>(keep), array->end());
    ++arrays_cut;
  }
  if (arrays_cut > 0) cut.push_back("tables in data shortened");
  if (dump_compact(envelope).size() > max_bytes) {
    const Json error = envelope.value("error", Json(nullptr));
    envelope["data"] = Json::object();
    envelope["data"]["truncation"] = "";
    envelope["error"] = error;
    cut.push_back("data omitted");
  }
  Json& findings = envelope["findings"];
  const size_t findings_total = findings.is_array() ? findings.size() : 0;
  while (findings.is_array() && findings.size() > kKeptFindings &&
         dump_compact(envelope).size() > max_bytes) {
    findings.erase(findings.size() - 1);
  }
  if (findings.is_array() && findings.size() < findings_total) {
    cut.push_back("showing " + std::to_string(findings.size()) + " of " +
                  std::to_string(findings_total) + " findings");
  }
  envelope["data"]["truncation"] = (earlier_note.empty() ? "" : earlier_note + "; then ") +
                                   join(cut, "; ") + " (answer limit " +
                                   std::to_string(max_bytes / 4) + " tokens); " + hint;
  return envelope;
}

Json error_envelope(const std::string& kind, const Error& error) {
  Envelope envelope;
  envelope.kind = kind;
  envelope.verdict = Verdict::kError;
  envelope.error = error;
  return envelope_to_json(envelope);
}

std::string dump_compact(const Json& value) {
  return value.dump(-1, ' ', false, nlohmann::detail::error_handler_t::replace);
}

Json call_result(const Json& envelope) {
  const std::string text = dump_compact(envelope);
  // structuredContent is the same JSON as the text: parse the text back so that both carry
  // exactly the same (UTF-8-repaired) content.
  Json structured = Json::parse(text);
  const bool is_error = envelope.contains("error") && !envelope["error"].is_null();
  return {{"content", Json::array({Json{{"type", "text"}, {"text", text}}})},
          {"structuredContent", std::move(structured)},
          {"isError", is_error}};
}

}  // namespace loupe::mcp
