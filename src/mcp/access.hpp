// mcp/access.hpp — what an MCP client may reach through `loupe mcp` (docs/security.md, "What the
// CLI and the MCP server may reach"; docs/mcp.md, "Access").
//
// A client is less trusted than the person who started the server. It may name files only inside
// the project root (the git root of the server's working directory, else that directory), or in
// a folder the person allowed (`loupe mcp --allow-path DIR`, the server's own --home and
// --skeletons, `allow_paths` in the project config); paths are resolved with symbolic links
// followed before they are compared. It may start only subjects that an objective under the
// project root declares, or that the project config lists:
//
//   ROOT/.loupe/config.toml
//   [mcp]
//   allow_subjects = [["build/bin/kda", "probe"]]   # exact command lines; argv[0] from ROOT
//   allow_paths = ["/data/traces"]                   # relative to ROOT
//
// Everything else is refused with Error(kUsage) naming the argument, where it resolved and how
// to allow it. Thread-safety: an AccessPolicy is immutable once loaded.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace loupe::mcp {

struct ServerSettings;

struct AccessPolicy {
  std::filesystem::path root;                              // resolved project root
  std::vector<std::filesystem::path> allowed_dirs;         // resolved; outside the root
  std::vector<std::vector<std::string>> allowed_subjects;  // [mcp] allow_subjects, as written
  std::filesystem::path config_file;                       // ROOT/.loupe/config.toml
};

// The git root of `cwd` (the nearest folder holding .git), else `cwd`; resolved.
std::filesystem::path project_root(const std::filesystem::path& cwd);
// ROOT/.loupe/config.toml.
std::filesystem::path project_config_file(const std::filesystem::path& root);

// The policy of a server started in `cwd` with these extra allowed folders (--allow-path,
// --home, --skeletons). Reads the project config when it exists; throws Error(kConfig) naming
// the file, line and key when it is malformed.
AccessPolicy load_access_policy(const std::filesystem::path& cwd,
                                const std::vector<std::filesystem::path>& allowed_dirs);

// Returns `path` when it resolves inside the root or an allowed folder; else throws
// Error(kUsage) naming `argument` (the text the client sent) and where it resolves.
const std::filesystem::path& check_path_access(const AccessPolicy& policy,
                                               const std::filesystem::path& path,
                                               std::string_view argument);

// The subject command lines the objectives under the root declare: each objective's command as
// written (argv[0] resolved against its working directory, else `cwd`) and as the cascade runs
// it (gate::subject_command). Objectives that do not parse are skipped; the walk skips hidden
// folders, build*/ and node_modules/ and stops after kMaxScannedEntries entries.
inline constexpr size_t kMaxScannedEntries = 20000;
std::vector<std::vector<std::string>> declared_subjects(const AccessPolicy& policy,
                                                        const std::filesystem::path& cwd);

// Throws Error(kUsage) unless `command` (as run_probe would run it from `cwd`) is declared by an
// objective under the root or listed in allow_subjects; the message says how to allow it.
void check_subject_access(const AccessPolicy& policy, const std::vector<std::string>& command,
                          const std::filesystem::path& cwd);

// The settings' policy, or (tests and fuzzing build settings by hand) the default policy of
// settings.cwd with its home allowed.
AccessPolicy policy_of(const ServerSettings& settings);

}  // namespace loupe::mcp
