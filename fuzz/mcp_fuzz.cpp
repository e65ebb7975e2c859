// libFuzzer target: the MCP server's message handler (src/mcp/server.hpp, Server::handle_line),
// one JSON-RPC line per input against a server whose home is a scratch folder. handle_line must
// never throw and every line it returns must be JSON; anything else is a bug. Lines that name the
// two tools that start processes are skipped: run_probe refuses subjects no objective under the
// root declares (src/mcp/access.hpp), but a fuzzer must not execute what it happens to spell.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/json.hpp"
#include "core/limits.hpp"
#include "mcp/server.hpp"

namespace {

loupe::mcp::Server& server() {
  static loupe::mcp::Server* instance = [] {
    const std::filesystem::path scratch =
        std::filesystem::temp_directory_path() / ("loupe_mcp_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(scratch);
    loupe::mcp::ServerSettings settings;
    settings.home = scratch / "home";
    settings.cwd = scratch;
    settings.client_name = "mcp_fuzz";
    return new loupe::mcp::Server(settings);
  }();
  return *instance;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view line(reinterpret_cast<const char*>(data), size);
  line = line.substr(0, line.find('\n'));  // handle_line takes one line without its newline
  try {
    // The harness reads the line only to skip the run tools; a line nested deeper than the server
    // accepts is left to handle_line, which refuses it before parsing (issue 17: a 100,000-deep
    // message overflowed the stack inside nlohmann-json).
    loupe::check_json_nesting(line, "fuzz input");
    const loupe::Json message = loupe::Json::parse(line, nullptr, false);
    if (message.is_object() && message.contains("params") && message["params"].is_object()) {
      const loupe::Json& name = message["params"].value("name", loupe::Json());
      if (name == "run_probe" || name == "run_objective") return 0;
    }
  } catch (const loupe::Json::exception&) {
    // Not readable as JSON: handle_line answers a parse error, which is what is fuzzed.
  } catch (const loupe::Error&) {
    // Nested too deep: the same.
  }
  for (const std::string& out : server().handle_line(line)) {
    if (!loupe::Json::accept(out)) std::abort();  // every message written must be JSON
  }
  return 0;
}
