// `loupe executor-task DIR INDEX`: one point of a run fanned out by a batch executor (the Slurm
// executor's array tasks run it; gate/executor.hpp). Not for people: it is hidden from --help.
#include <cstdint>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "gate/executor.hpp"

namespace loupe::cli {
namespace {

struct ExecutorTaskOptions {
  std::string dir;
  int64_t index = -1;
};

void add_executor_task_command(CLI::App& app, CommandResult& result) {
  auto options = std::make_shared<ExecutorTaskOptions>();
  CLI::App* task = app.add_subcommand("executor-task", "");  // empty description: hidden
  task->group("");
  task->add_option("DIR", options->dir, "the layer's spec directory (points.json)")->required();
  task->add_option("INDEX", options->index, "the point's index (the array task id)")->required();
  task->callback([options, &result] {
    result.kind = "executor-task";
    result.exit_code = gate::run_executor_task(options->dir, options->index);
  });
}

}  // namespace

LOUPE_REGISTER_COMMAND(95, add_executor_task_command);

}  // namespace loupe::cli
