#include "mcp/access.hpp"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "config/toml_reader.hpp"
#include "core/limits.hpp"
#include "gate/cascade.hpp"
#include "gate/objective.hpp"
#include "loupe/error.hpp"
#include "mcp/tool.hpp"

namespace loupe::mcp {
namespace {

constexpr const char* kConfigHint =
    "docs/mcp.md (Access) documents ROOT/.loupe/config.toml: [mcp] allow_subjects, allow_paths";
// Objectives are small; anything larger is not one, and is not read while looking for them.
constexpr uintmax_t kMaxObjectiveBytes = uintmax_t{1} << 20;

std::string quoted_command(const std::vector<std::string>& command) {
  std::string out = "[";
  for (size_t index = 0; index < command.size(); ++index) {
    if (index > 0) out += ", ";
    out += "\"";
    for (char c : command[index]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += "\"";
  }
  return out + "]";
}

// argv[0] resolved against `base` when it names a file by path; names looked up on PATH and the
// arguments are compared as written.
std::vector<std::string> normalised(std::vector<std::string> command,
                                    const std::filesystem::path& base) {
  if (!command.empty() && command.front().find('/') != std::string::npos) {
    std::filesystem::path program(command.front());
    if (program.is_relative()) program = base / program;
    command.front() = resolved_path(program).string();
  }
  return command;
}

bool pruned(const std::filesystem::path& dir) {
  const std::string name = dir.filename().string();
  return (!name.empty() && name[0] == '.') || name.rfind("build", 0) == 0 || name == "node_modules";
}

bool mentions_subject(const std::filesystem::path& file) {
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(file, error);
  if (error || size > kMaxObjectiveBytes) return false;
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str().find("[subject]") != std::string::npos;
}

}  // namespace

std::filesystem::path project_root(const std::filesystem::path& cwd) {
  const std::filesystem::path start = resolved_path(cwd);
  std::error_code ignored;
  for (auto dir = start; !dir.empty(); dir = dir.parent_path()) {
    if (std::filesystem::exists(dir / ".git", ignored)) return dir;
    if (dir == dir.root_path()) break;
  }
  return start;
}

std::filesystem::path project_config_file(const std::filesystem::path& root) {
  return root / ".loupe" / "config.toml";
}

AccessPolicy load_access_policy(const std::filesystem::path& cwd,
                                const std::vector<std::filesystem::path>& allowed_dirs) {
  AccessPolicy policy;
  policy.root = project_root(cwd);
  for (const auto& dir : allowed_dirs) policy.allowed_dirs.push_back(resolved_path(dir));
  policy.config_file = project_config_file(policy.root);
  std::error_code error;
  if (!std::filesystem::exists(policy.config_file, error)) return policy;
  std::ifstream in(policy.config_file, std::ios::binary);
  if (!in) {
    throw Error(ErrorCode::kConfig, policy.config_file.string() + ": cannot read the file",
                kConfigHint);
  }
  std::ostringstream text;
  text << in.rdbuf();
  const config::TomlReader reader(policy.config_file.string(), kConfigHint);
  const toml::table root = reader.parse(text.str());
  reader.allow_keys(root, "", {"mcp"});
  const toml::node* mcp = root.get("mcp");
  if (mcp == nullptr) return policy;
  const toml::table& table = reader.table_of(*mcp, "mcp");
  reader.allow_keys(table, "mcp", {"allow_subjects", "allow_paths"});
  if (const toml::node* subjects = table.get("allow_subjects")) {
    const toml::array& list = reader.array_of(*subjects, "mcp.allow_subjects");
    for (size_t index = 0; index < list.size(); ++index) {
      const std::string key = config::indexed("mcp.allow_subjects", index);
      std::vector<std::string> command = reader.strings_of(list[index], key);
      if (command.empty()) {
        reader.fail(list[index], key, "expected a command line (an array of strings), found []");
      }
      policy.allowed_subjects.push_back(std::move(command));
    }
  }
  for (const auto& text_path : reader.optional_strings(table, "allow_paths", "mcp")) {
    std::filesystem::path path(text_path);
    if (path.is_relative()) path = policy.root / path;
    policy.allowed_dirs.push_back(resolved_path(path));
  }
  return policy;
}

const std::filesystem::path& check_path_access(const AccessPolicy& policy,
                                               const std::filesystem::path& path,
                                               std::string_view argument) {
  if (is_within(path, policy.root)) return path;
  for (const auto& dir : policy.allowed_dirs) {
    if (is_within(path, dir)) return path;
  }
  throw Error(ErrorCode::kUsage,
              "path '" + std::string(argument) + "' resolves to " + resolved_path(path).string() +
                  ", outside the project root " + policy.root.string() +
                  "; expected a path inside it or inside a folder the server was allowed",
              "the MCP server reads and writes only under its project root (the git root of its "
              "working directory); a person can allow another folder with `loupe mcp "
              "--allow-path DIR` or allow_paths in " +
                  policy.config_file.string());
}

std::vector<std::vector<std::string>> declared_subjects(const AccessPolicy& policy,
                                                        const std::filesystem::path& cwd) {
  std::vector<std::vector<std::string>> subjects;
  std::error_code error;
  auto walk = std::filesystem::recursive_directory_iterator(
      policy.root, std::filesystem::directory_options::skip_permission_denied, error);
  if (error) return subjects;
  size_t visited = 0;
  for (auto entry = std::filesystem::begin(walk); entry != std::filesystem::end(walk);
       entry.increment(error)) {
    if (error || ++visited > kMaxScannedEntries) break;
    if (entry->is_directory(error)) {
      if (pruned(entry->path())) entry.disable_recursion_pending();
      continue;
    }
    if (entry->path().extension() != ".toml" || !entry->is_regular_file(error)) continue;
    if (!mentions_subject(entry->path())) continue;
    try {
      const gate::Objective objective = gate::parse_objective_file(entry->path());
      // As the cascade runs it (`env -C DIR K=V ... COMMAND`, what reproduce commands show),
      // and as written when it runs where run_probe runs subjects: relative arguments of a
      // subject that runs elsewhere would name other files.
      subjects.push_back(gate::subject_command(objective.subject));
      const std::filesystem::path base =
          objective.subject.working_dir ? resolved_path(*objective.subject.working_dir) : cwd;
      if (base == resolved_path(cwd)) {
        subjects.push_back(normalised(objective.subject.command, base));
      }
    } catch (const Error&) {
      // Not an objective (a skeleton, a config), or a broken one: it declares nothing.
    }
  }
  return subjects;
}

void check_subject_access(const AccessPolicy& policy, const std::vector<std::string>& command,
                          const std::filesystem::path& cwd) {
  const std::vector<std::string> wanted = normalised(command, cwd);
  for (const auto& allowed : policy.allowed_subjects) {
    if (normalised(allowed, policy.root) == wanted) return;
  }
  for (const auto& declared : declared_subjects(policy, cwd)) {
    if (declared == wanted || declared == command) return;
  }
  throw Error(ErrorCode::kUsage,
              "run_probe: subject " + quoted_command(command) +
                  " is not declared by an objective under the project root " +
                  policy.root.string() + " nor listed in " + policy.config_file.string() +
                  "; expected the command line of an objective's [subject]",
              "run it through run_objective, or let a person allow it: add [mcp] allow_subjects "
              "= [" +
                  quoted_command(command) + "] to " + policy.config_file.string() +
                  " (argv[0] relative to the project root), then restart the server");
}

AccessPolicy policy_of(const ServerSettings& settings) {
  if (settings.access) return *settings.access;
  const std::filesystem::path cwd =
      settings.cwd.empty() ? std::filesystem::current_path() : settings.cwd;
  std::vector<std::filesystem::path> allowed;
  if (settings.home) allowed.push_back(*settings.home);
  if (settings.skeletons) allowed.push_back(*settings.skeletons);
  AccessPolicy policy;
  policy.root = project_root(cwd);
  for (const auto& dir : allowed) policy.allowed_dirs.push_back(resolved_path(dir));
  policy.config_file = project_config_file(policy.root);
  return policy;
}

}  // namespace loupe::mcp
