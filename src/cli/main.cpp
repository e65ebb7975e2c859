// The `loupe` executable: thin subcommands over the libraries; errors rendered here only.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <vector>

#include "cli/commands.hpp"
#include "core/gzip.hpp"
#include "core/json.hpp"
#include "core/process.hpp"

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
  // The decompression caps (core/gzip.hpp) hold for every command that reads gzip input, so they
  // are options of loupe itself, accepted after the subcommand too: subcommands inherit
  // fallthrough from the app when they are added.
  app.fallthrough();
  loupe::cli::add_registered_commands(app, result);
  std::string max_inflated;
  std::string max_inflate_ratio;
  app.add_option("--max-inflated", max_inflated,
                 "the most a gzip input may inflate to, e.g. 32G (default 8G; LOUPE_MAX_INFLATED)");
  app.add_option("--max-inflate-ratio", max_inflate_ratio,
                 "past 32 MiB, the most a gzip input may inflate per compressed byte (default "
                 "50; LOUPE_MAX_INFLATE_RATIO)");

  try {
    // Read before the subcommand's callback runs: CLI11 sets a parent's options during the
    // parse, while callbacks may already be reading input.
    for (int index = 1; index < argc; ++index) {
      const std::string_view argument(argv[index]);
      if (argument == "--") break;
      for (const std::string_view name : {"--max-inflated", "--max-inflate-ratio"}) {
        std::string_view value;
        if (argument == name && index + 1 < argc) {
          value = argv[index + 1];
        } else if (argument.size() > name.size() + 1 && argument.substr(0, name.size()) == name &&
                   argument[name.size()] == '=') {
          value = argument.substr(name.size() + 1);
        } else {
          continue;
        }
        loupe::DecompressionLimits limits = loupe::decompression_limits();
        if (name == "--max-inflated") {
          limits.max_bytes = loupe::parse_byte_size(std::string(name), std::string(value));
        } else {
          limits.max_ratio = loupe::parse_inflate_ratio(value, name);
        }
        loupe::set_decompression_limits(limits);
      }
    }
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
  } catch (const std::bad_alloc&) {
    // Readers turn an allocation failure into an Error naming their input; one that reaches
    // here came from input too large for this machine's memory all the same.
    return render_error(loupe::Error(loupe::ErrorCode::kInput,
                                     "the input needs more memory than the process could allocate",
                                     "pass fewer or smaller inputs; gzip input is inflated under "
                                     "--max-inflated and --max-inflate-ratio"),
                        result);
  } catch (const std::exception& error) {
    return render_error(
        loupe::Error(loupe::ErrorCode::kInternal, std::string("internal error: ") + error.what()),
        result);
  }
  return result.exit_code;
}
