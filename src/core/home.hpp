// core/home.hpp — where loupe keeps its files (.loupe/ at the git root, DESIGN.md).
//
//   <home>/ledger.sqlite                       the ledger
//   <home>/runs/<run>/<probe>/<point>/         one probe point's observation
//   <home>/runs/<run>/report.html              a run's report
//   <home>/baseline-cache/<key>.json           a baseline build's check result, cached
// <home> is `--home DIR` when given, else .loupe/ at the git root of the working directory,
// else .loupe/ in the working directory.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "loupe/value.hpp"

namespace loupe {

std::filesystem::path resolve_home(const std::optional<std::filesystem::path>& override_dir,
                                   const std::filesystem::path& working_dir);

// A fresh run id, sortable by time: r20261130-041502-7f3a.
std::string new_run_id();

std::filesystem::path run_dir(const std::filesystem::path& home, const std::string& run_id);
// The point name is params_to_string(params), "default" when there are no parameters; characters
// outside [A-Za-z0-9_.,=+-] become '_'.
std::filesystem::path observation_dir(const std::filesystem::path& home, const std::string& run_id,
                                      const std::string& probe, const Params& params);

}  // namespace loupe
