// mcp/tool.hpp — what an MCP tool of `loupe mcp` is: a name, a flat input schema, honest
// annotations and the operation it calls; plus the helpers every tool shares (argument checks,
// bounded answers). Tools declare no outputSchema: every answer is the one loupe envelope of
// docs/formats.md, and tools/list, which every agent session pays for in tokens, stays under
// 12,000 characters (issue 19: it was 31,000, half of it the envelope's schema repeated 16 times).
//
// A tool's answer is always one loupe envelope (core/json.hpp), the same JSON `loupe ... --json`
// prints; tools/call returns it as structuredContent and, serialised, as the text content.
// Answers are concise by default (about kConciseBytes) and never above kMaxBytes (bytes / 4
// approximates tokens); whatever is cut is announced (truncated: true, data.truncation) with a
// hint to narrow the request.
// Include only from src/mcp and src/cli/mcp_command.cpp: pulls in nlohmann-json.
// Thread-safety: tools are immutable after all_tools(); a call runs on one thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "loupe/error.hpp"

namespace loupe::mcp {

inline constexpr size_t kConciseBytes = 8000;  // ~2,000 tokens: the default answer
inline constexpr size_t kMaxBytes = 32000;     // ~8,000 tokens: no answer is larger
inline constexpr size_t kDefaultMaxMessageBytes = size_t{16} << 20;
// A call that runs subjects (long_running) may take an hour; any other tool reads files and
// answers in seconds, so a minute is ample and bounds what one client request can hold.
inline constexpr double kLongToolTimeBoundS = 3600;
inline constexpr double kToolTimeBoundS = 60;

struct AccessPolicy;  // mcp/access.hpp

// What the server was started with (`loupe mcp --home DIR --skeletons DIR --allow-path DIR`).
struct ServerSettings {
  std::optional<std::filesystem::path> home;       // else .loupe/ at the git root of cwd
  std::filesystem::path cwd;                       // relative paths resolve here
  std::optional<std::filesystem::path> skeletons;  // else skeleton::default_library_dir()
  std::string client_name = "mcp-client";          // from initialize; recorded as who decided
  // What a client may reach (paths, subjects); absent: the default policy of cwd (access.hpp).
  std::shared_ptr<const AccessPolicy> access;
  // The longest message read (one line, without its newline); a longer one is answered with
  // -32600 and skipped to its newline without being held (`loupe mcp --max-message-size`).
  size_t max_message_bytes = kDefaultMaxMessageBytes;
  // Time bounds in seconds, by tool name, over the defaults of default_time_bound; the key "*"
  // sets every tool not named (`loupe mcp --tool-timeout [TOOL=]SECONDS`).
  std::map<std::string, double> time_bounds_s;
};

struct CallContext {
  const ServerSettings& settings;
  // Sends notifications/progress when the request carried a progressToken, else does nothing.
  // REQUIRES: `progress` increases from call to call.
  std::function<void(double progress, std::optional<double> total, const std::string& message)>
      progress;
  // Set when the client cancelled the request or closed stdin; long tools stop when it is set.
  const std::atomic<bool>* cancelled = nullptr;
};

// kNameList: an array of names, or one comma-separated string ("B,T,H,V").
// kNameValues: an object {NAME: value}, or an array of "NAME=VALUE" strings; read as the latter.
enum class ParamType { kString, kInteger, kNumber, kBoolean, kStringArray, kNameList, kNameValues };

// One property of a flat input schema.
struct Param {
  Param(std::string name_, ParamType type_, std::string description_, bool required_ = false,
        std::vector<std::string> allowed_ = {}, std::optional<double> minimum_ = {},
        std::optional<double> maximum_ = {})
      : name(std::move(name_)),
        type(type_),
        description(std::move(description_)),
        required(required_),
        allowed(std::move(allowed_)),
        minimum(minimum_),
        maximum(maximum_) {}

  std::string name;
  ParamType type = ParamType::kString;
  std::string description;  // empty: the name says it all (run, hypothesis, home, ledger)
  bool required = false;
  std::vector<std::string> allowed;  // strings: the accepted values (an enum)
  std::optional<double> minimum;     // numbers and integers
  std::optional<double> maximum;
};

struct Annotations {
  bool read_only = true;
  bool destructive = false;
  bool idempotent = true;
  bool open_world = false;
};

struct Tool {
  std::string name;  // [a-z0-9_], at most 64 characters
  std::string description;
  std::vector<Param> params;
  Annotations annotations;
  bool long_running = false;  // runs on the worker thread, with progress and cancellation
  std::string envelope_kind;  // the envelope's kind, e.g. "run", "diff"
  std::string narrow_hint;    // how to ask for less when an answer was truncated
  // Returns the envelope. Throws loupe::Error for bad input; the server turns it into an error
  // envelope with isError true.
  std::function<Json(const Json& arguments, CallContext& context)> call;
};

// The time bound of a call of `tool` in seconds: settings.time_bounds_s[tool.name], else
// settings.time_bounds_s["*"], else kLongToolTimeBoundS for long-running tools and kToolTimeBoundS
// for the others.
double time_bound_s(const ServerSettings& settings, const Tool& tool);

// {"type": "object", "properties": ..., "required": [...], "additionalProperties": false}.
Json input_schema(const Tool& tool);
// {name, description, inputSchema, annotations} for tools/list (no title: the name says it, and
// tools/list is paid for by every agent session; issue 19 caps it at 12,000 characters).
Json tool_definition(const Tool& tool);

// Throws Error(kUsage) naming the first argument that the input schema rejects, with the
// accepted values or type in the hint. `arguments` must be an object (or null: no arguments).
void check_arguments(const Tool& tool, const Json& arguments);

// Argument accessors; the arguments were checked, so a present value has the right type.
std::optional<std::string> string_argument(const Json& arguments, const std::string& name);
std::optional<int64_t> integer_argument(const Json& arguments, const std::string& name);
std::optional<double> number_argument(const Json& arguments, const std::string& name);
bool flag_argument(const Json& arguments, const std::string& name);
// kStringArray and kNameValues ({"T": 2048} reads as "T=2048"; a string value is taken as is).
std::vector<std::string> strings_argument(const Json& arguments, const std::string& name);
// kNameList: the array, or the string split at commas; an empty name throws Error(kUsage).
std::vector<std::string> names_argument(const Json& arguments, const std::string& name);

// A path argument resolved against the server's working directory. Throws Error(kUsage) when it
// resolves (symbolic links followed) outside the project root and every allowed folder
// (access.hpp).
std::filesystem::path resolve_path(const ServerSettings& settings, const std::string& text);
// --home given to the tool, else the server's, else .loupe/ at the git root of cwd.
std::filesystem::path home_dir(const ServerSettings& settings, const Json& arguments);
// The ledger file: the `ledger` argument, else HOME/ledger.sqlite.
std::filesystem::path ledger_file(const ServerSettings& settings, const Json& arguments);

// Cuts the envelope until its serialised form is at most `max_bytes`: the longest arrays in data
// first (halved), then data itself, and only then findings from the end, never the first
// kKeptFindings (findings are ordered most important first: they are the answer, data the
// tables behind it). Sets truncated and data.truncation (what was cut and `hint`). An envelope
// already small enough is returned as is.
inline constexpr size_t kKeptFindings = 3;
Json bound_envelope(Json envelope, size_t max_bytes, const std::string& hint);

// The error envelope of a failed call.
Json error_envelope(const std::string& kind, const Error& error);

// {content: [{type: "text", text}], structuredContent: envelope, isError}; text is the compact
// serialisation of the envelope (invalid UTF-8 replaced), and isError is true iff error is set.
Json call_result(const Json& envelope);

// Serialises compactly, replacing invalid UTF-8 instead of throwing.
std::string dump_compact(const Json& value);

}  // namespace loupe::mcp
