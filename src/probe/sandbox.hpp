// probe/sandbox.hpp — the bubblewrap command line `loupe probe run` puts before a subject.
//
// sandbox_prefix: "bwrap" and its arguments, ending with "--": the system read-only, a fresh
// minimal /dev (plus the GPU device nodes where asked) with a private /dev/shm, a private /tmp,
// loupe's home hidden under an empty tmpfs, only the run directory writable (also the working
// directory), no network, PID and IPC namespaces of its own, and a user namespace where the
// kernel allows one (the keyrings are per user namespace). The private /tmp would hide code the
// subject needs from under /tmp: the folder of each subject argument that names an existing path
// there (the file itself directly in /tmp), the current working directory and the PYTHONPATH,
// LD_LIBRARY_PATH and PATH folders there are bound read-only right after the private /tmp —
// before the tmpfs over the home (a checkout under /tmp holds .loupe/) and before the run
// directory's writable bind, so that both stay on top (bwrap applies its mounts in order).
// docs/security.md, "The sandbox".
// Reads the process's working directory and environment. Thread-safety: as getenv.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace loupe::probe {

// `gpu_nodes`: bind the host's GPU device nodes (/dev/nvidia*, /dev/dri, /dev/kfd) into the
// sandbox's /dev; false leaves it with bwrap's minimal nodes only.
std::vector<std::string> sandbox_prefix(const std::filesystem::path& home,
                                        const std::filesystem::path& run_directory,
                                        const std::vector<std::string>& subject_command,
                                        bool gpu_nodes = true);
// The GPU device nodes directly under `dev` (nvidia*, dri, kfd), sorted.
std::vector<std::string> gpu_device_nodes(const std::filesystem::path& dev);
// Whether this process may create a user namespace (bwrap's --unshare-user-try creates one only
// then): without one, the sandbox shares the user and session keyrings of its uid.
bool user_namespace_available();

}  // namespace loupe::probe
