// tests/support/cli_run.hpp — runs a command line to completion and keeps what it printed, for the
// integration and adversarial tests. Standard output that starts with '{' is parsed as loupe's JSON
// envelope (a test then asserts on fields, not on text).
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/json.hpp"
#include "core/process.hpp"

namespace loupe::test_support {

struct CliRun {
  int exit_code = -1;  // -1 when the process did not exit by itself (timeout, signal)
  std::string out;
  std::string err;
  Json envelope;  // parsed stdout when it is one JSON object
};

// For a subject whose cheat relies on the allocator handing freed buffers back at the same
// addresses (a cache keyed on input pointers): AddressSanitizer's quarantine never does, so under
// the asan preset the cheat would never fire and its guard would have nothing to catch. Passed to
// loupe, which hands its environment to the subject; other builds ignore it.
inline const std::pair<std::string, std::string> kAllowAddressReuse{"ASAN_OPTIONS",
                                                                    "quarantine_size_mb=0"};

inline CliRun run_cli(const ProcessSpec& spec) {
  const ProcessResult result = run_process(spec);
  CliRun run;
  run.exit_code = result.exit_code.value_or(-1);
  run.out = result.stdout_text;
  run.err = result.stderr_text;
  if (!run.out.empty() && run.out.front() == '{') run.envelope = Json::parse(run.out);
  return run;
}

inline CliRun run_cli(std::vector<std::string> argv,
                      std::chrono::seconds timeout = std::chrono::seconds(120)) {
  ProcessSpec spec;
  spec.argv = std::move(argv);
  spec.timeout = timeout;
  return run_cli(spec);
}

#ifdef LOUPE_EXECUTABLE
// `loupe ARGUMENTS...` with the loupe of this build.
inline CliRun run_loupe(const std::vector<std::string>& arguments,
                        std::chrono::seconds timeout = std::chrono::seconds(120)) {
  std::vector<std::string> argv = {LOUPE_EXECUTABLE};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  return run_cli(std::move(argv), timeout);
}
#endif

// Copies the objective at `source` to `target` with its [subject] command replaced by
// `executable probe` and its working_dir dropped (the executable's path is absolute): an example
// objective run against the subject of this build. False when the file has no `command = ` line.
inline bool copy_objective(const std::filesystem::path& source, const std::filesystem::path& target,
                           const std::string& executable) {
  std::ifstream in(source);
  std::ostringstream text;
  bool replaced = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("command = ", 0) == 0) {
      text << "command = [\"" << executable << "\", \"probe\"]\n";
      replaced = true;
    } else if (line.rfind("working_dir = ", 0) != 0) {
      text << line << "\n";
    }
  }
  std::ofstream(target) << text.str();
  return replaced;
}

}  // namespace loupe::test_support
