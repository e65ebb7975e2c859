// `kda probe list|run ...`: kda as a loupe subject (include/loupe/probe.hpp). Everything after
// `probe` goes to loupe::subject_main, which owns the subject command line.
#include <string>
#include <vector>

#include "kda/cli/commands.hpp"
#include "loupe/probe.hpp"

namespace kda::cli {

void add_probe_command(CLI::App& app, int& exit_code) {
  CLI::App* command = app.add_subcommand(
      "probe", "kda as a loupe subject: `kda probe list`, `kda probe run PROBE --out DIR ...`");
  command->prefix_command();
  command->callback([command, &exit_code] {
    const std::vector<std::string> args = command->remaining();
    exit_code = loupe::subject_main("kda probe", args);
  });
}

}  // namespace kda::cli
