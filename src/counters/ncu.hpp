// counters/ncu.hpp — running Nsight Compute: profiling a command and importing a report.
//
// `loupe counters -- CMD` profiles CMD once with the curated sections (kCuratedSections) into a
// report file, then imports that report twice — the details page and the raw page — so one
// profiling pass yields both. ncu is `LOUPE_NCU` when set, else `ncu` on PATH.
// Errors: no ncu → Error(kUsage) saying how to get one (exit 2); ncu or CMD failing → Error
// (kSubject) with ncu's exit status and its last stderr lines (exit 3).
// Thread-safety: the argv builders are pure; profile/import start child processes.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loupe::counters {

// The sections `loupe counters -- CMD` asks for: enough for every finding in analyze.hpp.
inline constexpr std::array<std::string_view, 6> kCuratedSections = {
    "SpeedOfLight", "MemoryWorkloadAnalysis", "ComputeWorkloadAnalysis", "Occupancy",
    "LaunchStats",  "WarpStateStats"};

// Metrics collected besides the sections: exact per-launch counts the sections only give as
// rates or shares (DRAM bytes read and written, instructions, global loads and stores, and the
// requests and sectors of global loads). They land on the raw page.
inline constexpr std::array<std::string_view, 8> kExtraMetrics = {
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "smsp__inst_executed.sum",
    "smsp__inst_executed_op_global_ld.sum",
    "smsp__inst_executed_op_global_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "gpu__time_duration.sum"};

struct ProfileRequest {
  std::vector<std::string> command;  // CMD and its arguments; REQUIRES: not empty
  std::string kernel_regex;          // empty: every kernel
  std::optional<int64_t> launch_skip;
  std::optional<int64_t> launch_count;
  std::vector<std::string> sets;  // ncu section sets added to the curated sections
  std::filesystem::path report;   // where the .ncu-rep goes (ncu adds the suffix)
};

// ncu's path: $LOUPE_NCU when set (it must exist), else `ncu` on $PATH. Throws Error(kUsage)
// when there is none, naming what was looked for.
std::filesystem::path find_ncu();

// The argv that profiles the request: ncu --section ... --metrics M,... [--set S]
// [--kernel-name regex:R] [--launch-skip N] [--launch-count N] --export REPORT
// --force-overwrite CMD...
std::vector<std::string> profile_argv(const std::filesystem::path& ncu,
                                      const ProfileRequest& request);
// The argv that prints one page of a report as CSV: ncu --import R --csv --page details|raw.
std::vector<std::string> import_argv(const std::filesystem::path& ncu,
                                     const std::filesystem::path& report, std::string_view page);

struct Pages {
  std::string details;  // CSV text
  std::string raw;
};

// Runs ncu on the request (stdout and stderr of CMD pass through ncu and are kept for errors).
// Returns the report's path (with .ncu-rep).
std::filesystem::path profile_command(const std::filesystem::path& ncu,
                                      const ProfileRequest& request);
// Both pages of a report as CSV text.
Pages import_report(const std::filesystem::path& ncu, const std::filesystem::path& report);

}  // namespace loupe::counters
