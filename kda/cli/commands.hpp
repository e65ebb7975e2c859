// kda/cli/commands.hpp — the subcommands of the `kda` executable.
//
// Each add_* function declares one subcommand on `app` with a callback that does the work and
// stores its exit code in `exit_code`; callbacks throw loupe::Error, which main() renders.
#pragma once

#include <CLI/CLI.hpp>

namespace kda::cli {

// `kda kernel recurrent|chunk|cp|decode|replay --in DIR --out DIR ...`
void add_kernel_command(CLI::App& app, int& exit_code);

// `kda generate --shape B,T,H,HV,K,V --decay slow|fast --seed N --out DIR`: the seeded inputs of
// math/generator.hpp as the .npy files `kda kernel` reads.
void add_generate_command(CLI::App& app, int& exit_code);

// `kda serve --mode prefill|prefill+transfer|decode|disaggregated ...`: the disaggregated server
// of incident 2 (kda/serve/server.hpp).
void add_serve_command(CLI::App& app, int& exit_code);

// `kda prefill ...` and `kda decode ...`: the KDA model alone (kda/model/model.hpp).
void add_model_commands(CLI::App& app, int& exit_code);

// `kda dist cp ...`: CP prefill across the ranks of mpirun / srun / torchrun-style env (kda/dist).
void add_dist_command(CLI::App& app, int& exit_code);

// `kda probe list|run ...`: the loupe subject interface (loupe::subject_main).
void add_probe_command(CLI::App& app, int& exit_code);

}  // namespace kda::cli
