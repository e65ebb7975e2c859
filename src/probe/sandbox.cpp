// The sandbox's command line (see sandbox.hpp).
#include "probe/sandbox.hpp"

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string_view>
#include <system_error>

namespace loupe::probe {
namespace {

// Calls `each` on every non-empty part of a ':'-separated path list (PATH, PYTHONPATH=...).
template <typename Each>
void for_each_path(std::string_view list, Each each) {
  while (!list.empty()) {
    const size_t colon = list.find(':');
    if (colon != 0) each(list.substr(0, colon));
    list = colon == std::string_view::npos ? std::string_view() : list.substr(colon + 1);
  }
}

}  // namespace

std::vector<std::string> gpu_device_nodes(const std::filesystem::path& dev) {
  std::vector<std::string> nodes;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dev, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("nvidia", 0) == 0 || name == "dri" || name == "kfd") {
      nodes.push_back(entry.path().string());
    }
  }
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

bool user_namespace_available() {
  const pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) ::_exit(::unshare(CLONE_NEWUSER) == 0 ? 0 : 1);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::vector<std::string> sandbox_prefix(const std::filesystem::path& home,
                                        const std::filesystem::path& run_directory,
                                        const std::vector<std::string>& subject_command,
                                        bool gpu_nodes) {
  const std::string hidden = std::filesystem::absolute(home).string();
  // A /dev of its own (bwrap's --dev: null, zero, full, random, urandom, tty, pts, shm), fresh
  // for every run: the host's /dev is writable to a subject running as root, and a file left
  // there was read by the next run (round 6's dev_memo). A private /dev/shm: in its own pid
  // namespace every sandboxed mpirun has the same pid, so OpenMPI gave two concurrent runs one
  // job id and their ranks' shared-memory segments collided (segfaults). A subject's ranks all
  // run inside its sandbox and still share this one.
  std::vector<std::string> prefix = {"bwrap", "--ro-bind", "/", "/", "--dev", "/dev"};
  if (gpu_nodes) {
    for (const auto& node : gpu_device_nodes("/dev")) {
      prefix.insert(prefix.end(), {"--dev-bind", node, node});
    }
  }
  prefix.insert(prefix.end(),
                {"--tmpfs", "/dev/shm", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", hidden,
                 "--bind", run_directory.string(), run_directory.string(), "--chdir",
                 run_directory.string(), "--unshare-net", "--unshare-pid",
                 // System V shared memory and POSIX message queues outlive a run in the host's
                 // IPC namespace (round 4's ipc_memo_*).
                 "--unshare-ipc",
                 // A user namespace where the kernel allows one: the user and session keyrings
                 // are per user namespace, and without one a key added by a run was found by the
                 // next (round 6's keyring_memo). bwrap goes on without it where it is refused.
                 "--unshare-user-try", "--die-with-parent"});
  // The private /tmp would hide a subject that lives under /tmp (a test's script): its folder
  // (the file itself when it lies in /tmp directly) is bound read-only. A command wrapped in
  // `env -C DIR NAME=VALUE ... program` names paths relative to DIR and in its assignments
  // (PYTHONPATH=../build/python): each part of a value, split at ':', counts as an argument, and
  // a relative one resolves against DIR when the command changes there first.
  std::vector<std::string> binds;
  auto add_bind = [&binds](const std::string& folder) {  // each folder once
    for (size_t at = 1; at < binds.size(); at += 3) {
      if (binds[at] == folder) return;
    }
    binds.insert(binds.end(), {"--ro-bind", folder, folder});
  };
  std::filesystem::path base;  // `env -C DIR` / `--chdir DIR`: where relative paths point
  auto bind_argument = [&](const std::string& text) {
    std::error_code error;
    if (text.empty() || text[0] == '-') return;
    const std::filesystem::path given(text);
    const std::filesystem::path path = std::filesystem::absolute(
        given.is_relative() && !base.empty() ? base / given : given, error);
    if (error || !std::filesystem::exists(path, error)) return;
    // A folder is bound itself, a file by its folder (the file itself when it lies in /tmp).
    std::filesystem::path normal = path.lexically_normal();
    if (!normal.has_filename()) normal = normal.parent_path();  // "DIR/"
    const std::string folder = std::filesystem::is_directory(normal, error)
                                   ? normal.string()
                                   : normal.parent_path().string();
    const std::string bound = folder == "/tmp" ? normal.string() : folder;
    if (bound.rfind("/tmp/", 0) == 0) add_bind(bound);
  };
  for (size_t at = 0; at < subject_command.size(); ++at) {
    const std::string& arg = subject_command[at];
    if ((arg == "-C" || arg == "--chdir") && at + 1 < subject_command.size()) {
      base = subject_command[at + 1];
      bind_argument(subject_command[at + 1]);
      ++at;
      continue;
    }
    if (arg.rfind("--chdir=", 0) == 0) {
      base = arg.substr(8);
      bind_argument(arg.substr(8));
      continue;
    }
    const size_t equals = arg.find('=');
    if (equals != std::string::npos && arg[0] != '-' && arg[0] != '/') {
      for_each_path(std::string_view(arg).substr(equals + 1),
                    [&](std::string_view part) { bind_argument(std::string(part)); });
      continue;
    }
    bind_argument(arg);
  }
  // The same for the code the subject loads from /tmp without naming it: a checkout under /tmp
  // (the working directory) and the search paths it inherits — a Python subject's module on
  // PYTHONPATH, a library on LD_LIBRARY_PATH. Hidden, the subject crashed before its first probe.
  std::vector<std::string> folders;
  std::error_code cwd_error;
  folders.push_back(std::filesystem::current_path(cwd_error).string());
  for (const char* name : {"PYTHONPATH", "LD_LIBRARY_PATH", "PATH"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    for_each_path(value, [&](std::string_view part) { folders.emplace_back(part); });
  }
  for (const std::string& folder : folders) {
    std::error_code error;
    if (folder.rfind("/tmp/", 0) != 0 || !std::filesystem::is_directory(folder, error)) continue;
    add_bind(folder);
  }
  // Right after the private /tmp: before the tmpfs that hides loupe's home (a checkout under /tmp
  // holds .loupe/) and before the run directory's writable bind, so both stay on top.
  const auto private_tmp = std::find(prefix.begin(), prefix.end(), std::string("/tmp")) + 1;
  prefix.insert(private_tmp, binds.begin(), binds.end());
  prefix.push_back("--");
  return prefix;
}

}  // namespace loupe::probe
