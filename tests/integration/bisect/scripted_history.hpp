// A scripted git history of the bisect subject (subject.cpp.in), for the tests of `loupe bisect`:
// a fresh repository whose commits each either set knobs.hpp (the planted faults) or touch a
// note, so exactly the commits the test names change the subject's behaviour.
// Thread-safety: none; test fixtures call it from SetUpTestSuite.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/process.hpp"

namespace loupe::test_support {

inline std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void write_file(const std::filesystem::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::trunc);
  out << text;
}

inline std::string git(const std::filesystem::path& repo, const std::vector<std::string>& args) {
  ProcessSpec spec;
  spec.argv = {"git", "-C", repo.string()};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.extra_env = {{"GIT_AUTHOR_NAME", "loupe test"},
                    {"GIT_AUTHOR_EMAIL", "test@loupe"},
                    {"GIT_COMMITTER_NAME", "loupe test"},
                    {"GIT_COMMITTER_EMAIL", "test@loupe"}};
  const ProcessResult result = run_process(spec);
  EXPECT_TRUE(result.succeeded()) << args.front() << ": " << result.stderr_text;
  std::string out = result.stdout_text;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// knobs.hpp: EXTRA_WORK_PERCENT lengthens the bench's chain, SUM_FAULT drops the last column of
// every check point, SUM_FAULT_SLOTS (a bit mask) only at the points whose `slot` is a set bit.
// #ifndef: --over-values passes them with -D instead.
inline std::string knobs(int extra_work_percent, int sum_fault, unsigned sum_fault_slots = 0) {
  std::string text = "#pragma once\n";
  auto define = [&text](const std::string& name, const std::string& value) {
    text += "#ifndef " + name + "\n#define " + name + " " + value + "\n#endif\n";
  };
  define("EXTRA_WORK_PERCENT", std::to_string(extra_work_percent));
  define("SUM_FAULT", std::to_string(sum_fault));
  define("SUM_FAULT_SLOTS", std::to_string(sum_fault_slots) + "u");
  return text;
}

// One commit: its message and the knobs it sets (empty: a note changes, the subject does not).
struct ScriptedCommit {
  std::string message;
  std::string knob_text;
};

// Creates `repo` with the subject, the objective as loupe.toml, and one commit per entry;
// returns the commit hashes in order.
inline std::vector<std::string> commit_scripted_history(
    const std::filesystem::path& repo, const std::filesystem::path& subject_source,
    const std::string& objective, const std::vector<ScriptedCommit>& history) {
  std::filesystem::create_directories(repo);
  git(repo, {"init", "-q", "-b", "main"});
  write_file(repo / "subject.cpp", read_file(subject_source));
  write_file(repo / "loupe.toml", objective);
  write_file(repo / ".gitignore", ".loupe/\nsubject\n");
  std::vector<std::string> commits;
  int note = 0;
  for (const auto& commit : history) {
    if (!commit.knob_text.empty()) {
      write_file(repo / "knobs.hpp", commit.knob_text);
    } else {
      write_file(repo / "NOTES", "note " + std::to_string(++note) + "\n");
    }
    git(repo, {"add", "-A"});
    git(repo, {"commit", "-q", "-m", commit.message});
    commits.push_back(git(repo, {"rev-parse", "HEAD"}));
  }
  return commits;
}

// How each commit's tree builds the subject: the system compiler against this build's libloupe.
inline std::string subject_build_command(const std::string& defines = "") {
  return std::string("c++ -std=c++20 -O2 ") + defines + " -I" + LOUPE_INCLUDE_DIR +
         " subject.cpp " + LIBLOUPE_ARCHIVE + " -lpthread -o subject";
}

}  // namespace loupe::test_support
