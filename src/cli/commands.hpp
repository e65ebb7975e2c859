// cli/commands.hpp — how each `loupe` subcommand plugs into the executable.
//
// Each subcommand lives in its own file (diff_command.cpp, probe_command.cpp, ...) and registers
// itself with LOUPE_REGISTER_COMMAND(order, add_function). The add function declares the
// subcommand's options on `app` and sets a callback that does the work and stores the exit code
// in `result`; the callback throws loupe::Error for bad input, which main() renders (as an
// envelope when --json was given) and turns into exit 2 or 3.
// The CLI sources are compiled straight into the executable, so the registrars are never dropped.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace loupe::cli {

struct CommandResult {
  int exit_code = 0;
  bool json = false;  // --json was on the command line
  std::string kind;   // the envelope kind to use for errors, e.g. "diff"
  // Everything after the first "--": CLI11 appends these to a subcommand's positionals, and a
  // command with positionals of its own (`loupe counters FILE...` / `-- CMD`) tells them apart.
  std::vector<std::string> after_separator;
};

using CommandAdder = void (*)(CLI::App& app, CommandResult& result);

struct CommandRegistration {
  // `order` sorts the subcommands in --help.
  CommandRegistration(int order, CommandAdder adder);
};

// Every registered adder, in `order`.
void add_registered_commands(CLI::App& app, CommandResult& result);

}  // namespace loupe::cli

#define LOUPE_CLI_CONCAT_INNER(a, b) a##b
#define LOUPE_CLI_CONCAT(a, b) LOUPE_CLI_CONCAT_INNER(a, b)
#define LOUPE_REGISTER_COMMAND(order, adder)                                                       \
  static const ::loupe::cli::CommandRegistration LOUPE_CLI_CONCAT(loupe_command_, __LINE__)(order, \
                                                                                            adder)
