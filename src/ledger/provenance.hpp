// ledger/provenance.hpp — what a run records about where it came from: content hashes of the
// objective and of the working tree's diff, and the git state of the working directory.
// Thread-safety: free functions without shared state.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "ledger/ledger.hpp"

namespace loupe::ledger {

// SHA-256 of the bytes, as 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);

// SHA-256 of a file's bytes. Throws Error(kInput) naming the file when it cannot be read.
std::string file_sha256(const std::filesystem::path& file);

// The paths of `git status --porcelain=v1 -z` output (both paths of a rename), sorted, unique.
std::vector<std::string> parse_porcelain_paths(std::string_view porcelain);

// The commit at HEAD, whether tracked files differ from it, the hash of `git diff HEAD`, and
// every path that differs from HEAD (untracked files included, ignored ones not).
// Outside a repository (or without git) every field is empty and dirty is false: a run outside
// version control is still recorded.
GitState read_git_state(const std::filesystem::path& working_dir);

}  // namespace loupe::ledger
