// The `loupe` executable: thin subcommands over the libraries; errors rendered here only.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <vector>

#include "cli/commands.hpp"
#include "core/json.hpp"

namespace {

int render_error(const loupe::Error& error, const loupe::cli::CommandResult& result) {
  if (result.json) {
    loupe::Envelope envelope;
    envelope.kind = result.kind.empty() ? "error" : result.kind;
    envelope.verdict = loupe::Verdict::kError;
    envelope.error = error;
    std::cout << loupe::render_envelope(envelope) << "\n";
  } else {
    std::cerr << "loupe: " << error.message() << "\n";
    if (!error.hint().empty()) std::cerr << "hint: " << error.hint() << "\n";
  }
  return loupe::exit_code(error.code());
}

}  // namespace

namespace loupe::cli {
namespace {

struct Registered {
  int order;
  CommandAdder adder;
};

std::vector<Registered>& registry() {
  static std::vector<Registered> commands;
  return commands;
}

}  // namespace

CommandRegistration::CommandRegistration(int order, CommandAdder adder) {
  registry().push_back({order, adder});
}

void add_registered_commands(CLI::App& app, CommandResult& result) {
  auto commands = registry();
  std::stable_sort(commands.begin(), commands.end(),
                   [](const Registered& a, const Registered& b) { return a.order < b.order; });
  for (const auto& command : commands) command.adder(app, result);
}

}  // namespace loupe::cli

int main(int argc, char** argv) {
  CLI::App app{"loupe — dense, attributable feedback for inference systems", "loupe"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "loupe 0.1.0");
  loupe::cli::CommandResult result;
  // --json anywhere before "--" asks for an envelope; what follows "--" is the subject's command.
  for (int index = 1; index < argc; ++index) {
    std::string_view argument(argv[index]);
    if (argument == "--") {
      result.after_separator.assign(argv + index + 1, argv + argc);
      break;
    }
    if (argument == "--json") result.json = true;
  }
  loupe::cli::add_registered_commands(app, result);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
    return render_error(loupe::Error(loupe::ErrorCode::kUsage, error.what(),
                                     "run with --help to see the accepted options"),
                        result);
  } catch (const loupe::Error& error) {
    return render_error(error, result);
  } catch (const std::filesystem::filesystem_error& error) {
    // A folder or file loupe could not create, read or move, in loupe's words rather than the
    // library's "filesystem error: ..." text.
    return render_error(
        loupe::Error(loupe::ErrorCode::kInput,
                     "cannot use " + error.path1().string() + ": " + error.code().message(),
                     "check that the path exists and that loupe may write there (--home DIR)"),
        result);
  } catch (const std::exception& error) {
    return render_error(
        loupe::Error(loupe::ErrorCode::kInternal, std::string("internal error: ") + error.what()),
        result);
  }
  return result.exit_code;
}
