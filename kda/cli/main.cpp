// The `kda` executable: the kda engine's command line. Errors are rendered here only.
#include <iostream>

#include "kda/cli/commands.hpp"
#include "loupe/error.hpp"

namespace {

int render_error(const loupe::Error& error) {
  std::cerr << "kda: " << error.message() << "\n";
  if (!error.hint().empty()) std::cerr << "hint: " << error.hint() << "\n";
  return loupe::exit_code(error.code());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kda — a Kimi Delta Attention engine (CPU kernels; loupe's reference subject)",
               "kda"};
  app.require_subcommand(1);
  int exit_code = 0;
  kda::cli::add_kernel_command(app, exit_code);
  kda::cli::add_generate_command(app, exit_code);
  kda::cli::add_serve_command(app, exit_code);
  kda::cli::add_model_commands(app, exit_code);
  kda::cli::add_dist_command(app, exit_code);
  kda::cli::add_probe_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::ParseError& error) {
    return render_error(loupe::Error(loupe::ErrorCode::kUsage, error.what(),
                                     "run with --help to see the accepted options"));
  } catch (const loupe::Error& error) {
    return render_error(error);
  } catch (const std::exception& error) {
    return render_error(
        loupe::Error(loupe::ErrorCode::kInternal, std::string("internal error: ") + error.what()));
  }
  return exit_code;
}
