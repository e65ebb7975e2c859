#include "counters/ncu.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include "core/gzip.hpp"
#include "core/process.hpp"
#include "loupe/error.hpp"

namespace loupe::counters {

std::filesystem::path find_ncu() {
  if (const char* configured = std::getenv("LOUPE_NCU"); configured && *configured) {
    const std::filesystem::path path(configured);
    if (::access(path.c_str(), X_OK) != 0) {
      throw Error(ErrorCode::kUsage, "LOUPE_NCU=" + path.string() + " is not an executable file",
                  "point LOUPE_NCU at Nsight Compute's ncu, or unset it to search PATH");
    }
    return path;
  }
  const char* search = std::getenv("PATH");
  std::stringstream dirs(search ? search : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::filesystem::path candidate = std::filesystem::path(dir) / "ncu";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw Error(ErrorCode::kUsage, "ncu (Nsight Compute) is not on PATH, and LOUPE_NCU is not set",
              "install Nsight Compute (it ships with the CUDA toolkit: /usr/local/cuda/bin/ncu) or "
              "run where it is and pass the CSV it writes: loupe counters FILE.csv");
}

std::vector<std::string> profile_argv(const std::filesystem::path& ncu,
                                      const ProfileRequest& request) {
  std::vector<std::string> argv = {ncu.string()};
  for (std::string_view section : kCuratedSections) {
    argv.emplace_back("--section");
    argv.emplace_back(section);
  }
  std::string metrics;
  for (std::string_view metric : kExtraMetrics) {
    if (!metrics.empty()) metrics += ",";
    metrics += metric;
  }
  argv.emplace_back("--metrics");
  argv.push_back(metrics);
  for (const std::string& set : request.sets) {
    argv.emplace_back("--set");
    argv.push_back(set);
  }
  if (!request.kernel_regex.empty()) {
    argv.emplace_back("--kernel-name");
    argv.push_back("regex:" + request.kernel_regex);
  }
  if (request.launch_skip) {
    argv.emplace_back("--launch-skip");
    argv.push_back(std::to_string(*request.launch_skip));
  }
  if (request.launch_count) {
    argv.emplace_back("--launch-count");
    argv.push_back(std::to_string(*request.launch_count));
  }
  argv.emplace_back("--export");
  argv.push_back(request.report.string());
  argv.emplace_back("--force-overwrite");
  argv.insert(argv.end(), request.command.begin(), request.command.end());
  return argv;
}

std::vector<std::string> import_argv(const std::filesystem::path& ncu,
                                     const std::filesystem::path& report, std::string_view page) {
  return {ncu.string(), "--import", report.string(), "--csv", "--page", std::string(page)};
}

namespace {

ProcessResult run_ncu(const std::vector<std::string>& argv, const std::string& doing,
                      size_t stdout_limit = size_t{1} << 30) {
  ProcessSpec spec;
  spec.argv = argv;
  spec.stdout_limit = stdout_limit;
  spec.stderr_limit = size_t{4} << 20;
  ProcessResult result = run_process(spec);
  if (!result.succeeded()) {
    std::string tail = result.stderr_tail();
    if (tail.empty()) {
      // ncu prints its ==ERROR== lines on stdout.
      std::istringstream lines(result.stdout_text);
      std::string line;
      while (std::getline(lines, line)) {
        if (line.rfind("==ERROR==", 0) == 0) tail += line + "\n";
      }
    }
    // The status alone: describe() adds the wall time, which no two runs share.
    const std::string how = result.exit_code && !result.timed_out
                                ? "exited with status " + std::to_string(*result.exit_code)
                                : result.describe();
    throw Error(ErrorCode::kSubject,
                doing + ": ncu " + how + (tail.empty() ? "" : "; it said:\n" + tail),
                "run the same ncu command by hand to see all of its output");
  }
  return result;
}

}  // namespace

std::filesystem::path profile_command(const std::filesystem::path& ncu,
                                      const ProfileRequest& request) {
  if (request.command.empty()) {
    throw Error(ErrorCode::kUsage, "no command to profile after --",
                "loupe counters [--kernel REGEX] -- CMD ARGS...");
  }
  std::filesystem::create_directories(request.report.parent_path());
  run_ncu(profile_argv(ncu, request), "profiling " + request.command.front());
  std::filesystem::path written = request.report;
  written += ".ncu-rep";
  if (!std::filesystem::exists(written)) {
    throw Error(ErrorCode::kSubject,
                "ncu finished but wrote no report at " + written.string() +
                    " (did any kernel match the filter?)",
                "check --kernel, --launch-skip and --launch-count against the program's kernels");
  }
  return written;
}

Pages import_report(const std::filesystem::path& ncu, const std::filesystem::path& report) {
  // A .ncu-rep is compressed; what ncu --import prints from it is held under the decompression
  // caps (core/gzip.hpp), each page against the report's size.
  std::error_code size_error;
  const uint64_t report_size = std::filesystem::file_size(report, size_error);
  const DecompressionLimits limits = decompression_limits();
  const uint64_t allowed = inflate_allowance(size_error ? 0 : report_size, limits);
  auto page = [&](std::string_view name) {
    ProcessResult result = run_ncu(import_argv(ncu, report, name), "reading " + report.string(),
                                   static_cast<size_t>(std::min<uint64_t>(allowed, SIZE_MAX)));
    if (result.stdout_truncated) {
      throw inflate_cap_error(report.string(), size_error ? 0 : report_size, limits,
                              "in ncu --import's " + std::string(name) + " page");
    }
    return std::move(result.stdout_text);
  };
  Pages pages;
  pages.details = page("details");
  pages.raw = page("raw");
  return pages;
}

}  // namespace loupe::counters
