#include "ledger/provenance.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "core/process.hpp"
#include "core/sha256.hpp"
#include "loupe/error.hpp"

namespace loupe::ledger {
namespace {

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  return text;
}

}  // namespace

std::vector<std::string> parse_porcelain_paths(std::string_view porcelain) {
  std::vector<std::string> paths;
  bool next_is_source = false;  // a rename or copy entry is followed by its source path
  size_t start = 0;
  while (start < porcelain.size()) {
    size_t end = porcelain.find('\0', start);
    if (end == std::string_view::npos) end = porcelain.size();
    const std::string_view entry = porcelain.substr(start, end - start);
    start = end + 1;
    if (next_is_source) {
      paths.emplace_back(entry);
      next_is_source = false;
      continue;
    }
    if (entry.size() < 4) continue;  // "XY PATH"; anything shorter is not an entry
    paths.emplace_back(entry.substr(3));
    next_is_source = entry[0] == 'R' || entry[0] == 'C';
  }
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  return paths;
}

std::string sha256_hex(std::string_view bytes) { return loupe::sha256_hex(bytes); }

std::string file_sha256(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw Error(ErrorCode::kInput, file.string() + ": cannot be read to hash it",
                "check that the file exists and is readable");
  }
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return sha256_hex(bytes.str());
}

GitState read_git_state(const std::filesystem::path& working_dir) {
  // Reading must never write the repository: `git status` and `git diff` refresh the index's
  // stat data and write it back under .git/index.lock, which a killed loupe (a test's SIGKILL,
  // an interrupted run) left behind, and which fails the user's own git commands meanwhile
  // ("Unable to create index.lock: File exists"). --no-optional-locks stops status from writing;
  // `git diff HEAD` writes regardless, so the diff is the plumbing `diff-index -p`, which prints
  // the same patch without refreshing (and ignores diff settings of the user's config).
  auto git = [&](std::vector<std::string> args) {
    ProcessSpec spec;
    spec.argv = {"git", "--no-optional-locks", "-C", working_dir.string()};
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.timeout = std::chrono::seconds(30);
    return run_process(spec);
  };
  GitState state;
  ProcessResult head;
  try {
    head = git({"rev-parse", "HEAD"});
  } catch (const Error&) {
    return state;  // no git on this machine
  }
  if (!head.succeeded()) return state;
  state.commit = trimmed(head.stdout_text);
  const ProcessResult diff = git({"diff-index", "-p", "--no-color", "--no-ext-diff", "HEAD"});
  if (diff.succeeded() && !diff.stdout_text.empty()) {
    state.dirty = true;
    state.diff_hash = sha256_hex(diff.stdout_text);
  }
  // Porcelain paths are relative to the repository root wherever git runs; -z keeps names with
  // spaces whole. Untracked files count: a new kernel file is a change a reviewer must see.
  const ProcessResult status = git({"status", "--porcelain=v1", "-z", "--untracked-files=all"});
  if (status.succeeded()) state.dirty_paths = parse_porcelain_paths(status.stdout_text);
  return state;
}

}  // namespace loupe::ledger
