// `loupe mcp [--home DIR] [--skeletons DIR] [--max-message-size SIZE] [--tool-timeout ...]`: the
// MCP server over stdio (src/mcp/server.hpp). stdout carries protocol messages only: the command
// keeps the real stdout for them and points file descriptor 1 at stderr, so nothing else written to
// stdout can corrupt the stream. Exit 0 on EOF. SIGINT/SIGTERM stop the subjects of running calls
// before the server exits.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/commands.hpp"
#include "core/gzip.hpp"
#include "core/process.hpp"
#include "gate/recorded_run.hpp"
#include "mcp/access.hpp"
#include "mcp/server.hpp"

namespace loupe::cli {
namespace {

struct McpOptions {
  std::string home;
  std::string skeletons;
  std::vector<std::string> allow_paths;
  std::string max_message_size;
  std::vector<std::string> tool_timeouts;
};

// "SECONDS" (every tool) or "TOOL=SECONDS" → settings.time_bounds_s; throws Error(kUsage).
void add_tool_timeout(const std::string& text, mcp::ServerSettings& settings) {
  const size_t equals = text.find('=');
  const std::string tool = equals == std::string::npos ? "*" : text.substr(0, equals);
  const std::string seconds = equals == std::string::npos ? text : text.substr(equals + 1);
  const bool known = tool == "*" || std::any_of(mcp::all_tools().begin(), mcp::all_tools().end(),
                                                [&](const mcp::Tool& t) { return t.name == tool; });
  double value = 0;
  size_t used = 0;
  try {
    value = std::stod(seconds, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (!known || used == 0 || used != seconds.size() || !(value > 0) || value > 1e7) {
    throw Error(ErrorCode::kUsage,
                "--tool-timeout '" + text + "': expected SECONDS or TOOL=SECONDS with a known " +
                    "tool and a positive number of seconds",
                "e.g. --tool-timeout analyze_trace=10 or --tool-timeout 30 (docs/mcp.md)");
  }
  settings.time_bounds_s[tool] = value;
}

// A client that dies without closing stdin gets SIGTERM from its supervisor: subjects run in their
// own sessions, so they would outlive the server unless it stops them.
void watch_termination() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread([signals] {
    int signal_number = 0;
    while (sigwait(&signals, &signal_number) != 0) {
    }
    gate::interrupt_subjects();
    std::_Exit(128 + signal_number);
  }).detach();
}

void add_mcp_command(CLI::App& app, CommandResult& result) {
  auto options = std::make_shared<McpOptions>();
  CLI::App* mcp = app.add_subcommand(
      "mcp", "Serve loupe's tools to coding agents over MCP (stdio, JSON-RPC 2.0); docs/mcp.md");
  mcp->add_option("--home", options->home,
                  "default folder for runs and the ledger (default .loupe/ at the git root)");
  mcp->add_option("--skeletons", options->skeletons,
                  "the skeleton library folder (default skeletons/ of the source tree)");
  mcp->add_option("--allow-path", options->allow_paths,
                  "a folder outside the project root that clients may name (repeatable; "
                  "docs/mcp.md, Access)");
  mcp->add_option("--max-message-size", options->max_message_size,
                  "the longest message read, e.g. 16M (default); a longer one is answered with "
                  "a JSON-RPC error and skipped");
  mcp->add_option("--tool-timeout", options->tool_timeouts,
                  "[TOOL=]SECONDS: the time bound of a tool's calls, or of every tool "
                  "(repeatable; defaults in docs/mcp.md)");
  mcp->callback([options, &result] {
    result.kind = "mcp";
    mcp::ServerSettings settings;
    if (!options->max_message_size.empty()) {
      settings.max_message_bytes = parse_byte_size("--max-message-size", options->max_message_size);
    }
    for (const std::string& text : options->tool_timeouts) add_tool_timeout(text, settings);
    if (!options->home.empty()) settings.home = std::filesystem::absolute(options->home);
    if (!options->skeletons.empty()) {
      settings.skeletons = std::filesystem::absolute(options->skeletons);
    }
    settings.cwd = std::filesystem::current_path();
    // What a client may reach: the project root, and the folders the person starting the server
    // named (its own home and skeleton library included). Read once, before serving.
    std::vector<std::filesystem::path> allowed;
    for (const auto& dir : options->allow_paths) allowed.push_back(std::filesystem::absolute(dir));
    if (settings.home) allowed.push_back(*settings.home);
    if (settings.skeletons) allowed.push_back(*settings.skeletons);
    settings.access =
        std::make_shared<const mcp::AccessPolicy>(mcp::load_access_policy(settings.cwd, allowed));

    std::cout.flush();
    const int protocol_fd = ::dup(STDOUT_FILENO);
    FILE* protocol = protocol_fd >= 0 ? ::fdopen(protocol_fd, "w") : nullptr;
    if (protocol == nullptr) {
      throw Error(ErrorCode::kInternal, "loupe mcp: cannot duplicate stdout for the protocol");
    }
    ::dup2(STDERR_FILENO, STDOUT_FILENO);
    // A client that closed its end must not kill the server mid-write.
    ::signal(SIGPIPE, SIG_IGN);
    watch_termination();

    // Own buffering for stdin: the server reads it in chunks of what is ready (a message may be
    // megabytes), which the stdio-synchronised stream would hand over a byte at a time.
    std::ios::sync_with_stdio(false);
    mcp::Server server(settings);
    std::cerr << "loupe mcp: serving " << mcp::all_tools().size()
              << " tools on stdio (docs/mcp.md)\n";
    result.exit_code = server.serve(std::cin, [protocol](std::string_view line) {
      std::fwrite(line.data(), 1, line.size(), protocol);
      std::fputc('\n', protocol);
      std::fflush(protocol);
    });
    std::fclose(protocol);
  });
}

}  // namespace

LOUPE_REGISTER_COMMAND(90, add_mcp_command);

}  // namespace loupe::cli
