// The sandbox's command line (src/probe/sandbox.hpp): which folders under /tmp are bound, and in
// what order, since bwrap mounts in order and a later mount hides an earlier one.
#include "probe/sandbox.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>

#include <gtest/gtest.h>

#include "core/process.hpp"
#include "loupe/error.hpp"

namespace loupe::probe {
namespace {

namespace fs = std::filesystem;

// Sets or unsets an environment variable for one test and puts it back afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value->c_str(), 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A checkout under /tmp with its .loupe home inside, a Python package folder, a library folder
// and a subject binary there, and a run directory beside them: a clean clone in /tmp.
class SandboxPrefixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Under /tmp itself, whatever TMPDIR says: only /tmp is made private.
    root_ = fs::path("/tmp") / ("loupe_sandbox_" + std::to_string(::getpid()) + "_" +
                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(checkout() / ".loupe" / "runs");
    fs::create_directories(root_ / "staging");
    fs::create_directories(root_ / "py");
    fs::create_directories(root_ / "lib");
    fs::create_directories(root_ / "bin");
    std::ofstream(root_ / "bin" / "subject") << "#!/bin/sh\n";
    std::ofstream(root_ / "py" / "module.py") << "VALUE = 1\n";
    std::ofstream(checkout() / ".loupe" / "ledger.sqlite") << "earlier runs\n";
    old_cwd_ = fs::current_path();
    fs::current_path(checkout());
  }
  void TearDown() override {
    fs::current_path(old_cwd_);
    fs::remove_all(root_);
  }

  fs::path checkout() const { return root_ / "checkout"; }
  fs::path home() const { return checkout() / ".loupe"; }
  // Like the runner's private directory under $TMPDIR.
  fs::path run_directory() const { return root_ / "staging"; }

  // The index of `flag` followed by `path` (and `path` again for binds), or npos.
  static size_t position(const std::vector<std::string>& prefix, const std::string& flag,
                         const std::string& path) {
    for (size_t index = 0; index + 1 < prefix.size(); ++index) {
      if (prefix[index] == flag && prefix[index + 1] == path) return index;
    }
    return std::string::npos;
  }

  fs::path root_;
  fs::path old_cwd_;
};

// Regression (commit 421d98d): from a clean clone in /tmp every Python probe subject crashed at
// import, because the private /tmp hid the checkout and the PYTHONPATH folder under it. They are
// bound read-only right after the private /tmp, and before the tmpfs that hides the home (which
// lies inside the checkout) and the run directory's writable bind, so those two stay on top.
TEST_F(SandboxPrefixTest, FoldersUnderTmpAreBoundAfterThePrivateTmpAndBeforeTheHomeIsHidden) {
  ScopedEnv python_path("PYTHONPATH", (root_ / "py").string() + ":/usr/lib/python3/dist-packages");
  ScopedEnv library_path("LD_LIBRARY_PATH", (root_ / "missing").string());
  ScopedEnv path("PATH", (root_ / "lib").string() + ":/usr/bin:/bin");
  const std::vector<std::string> prefix = sandbox_prefix(
      home(), run_directory(), {(root_ / "bin" / "subject").string(), "run", "--seed", "7"});

  ASSERT_EQ(prefix.front(), "bwrap");
  ASSERT_EQ(prefix.back(), "--");
  const size_t private_tmp = position(prefix, "--tmpfs", "/tmp");
  const size_t hidden_home = position(prefix, "--tmpfs", home().string());
  const size_t writable_run = position(prefix, "--bind", run_directory().string());
  ASSERT_NE(private_tmp, std::string::npos);
  ASSERT_NE(hidden_home, std::string::npos);
  ASSERT_NE(writable_run, std::string::npos);
  EXPECT_LT(hidden_home, writable_run);
  // A fresh /dev of bwrap's own, never the host's, and a private /dev/shm after it (concurrent
  // sandboxed mpiruns collided there).
  EXPECT_NE(position(prefix, "--dev", "/dev"), std::string::npos);
  EXPECT_EQ(position(prefix, "--dev-bind", "/dev"), std::string::npos);
  EXPECT_GT(position(prefix, "--tmpfs", "/dev/shm"), position(prefix, "--dev", "/dev"));
  EXPECT_NE(std::find(prefix.begin(), prefix.end(), "--unshare-user-try"), prefix.end());
  EXPECT_NE(position(prefix, "--tmpfs", "/dev/shm"), std::string::npos);
  for (const fs::path& folder : {root_ / "bin", checkout(), root_ / "py", root_ / "lib"}) {
    const size_t bound = position(prefix, "--ro-bind", folder.string());
    ASSERT_NE(bound, std::string::npos) << folder;
    EXPECT_EQ(prefix[bound + 2], folder.string());
    EXPECT_GT(bound, private_tmp) << folder;
    EXPECT_LT(bound, hidden_home) << folder;
  }
  // Folders outside /tmp are under the read-only root already; missing ones are not bound.
  EXPECT_EQ(position(prefix, "--ro-bind", "/usr/lib/python3/dist-packages"), std::string::npos);
  EXPECT_EQ(position(prefix, "--ro-bind", "/usr/bin"), std::string::npos);
  EXPECT_EQ(position(prefix, "--ro-bind", (root_ / "missing").string()), std::string::npos);
  EXPECT_EQ(std::count(prefix.begin(), prefix.end(), std::string("--ro-bind")), 5);
}

// A command wrapped in `env -C DIR NAME=VALUE program` (the Python example's objective): the folder
// it changes to, the folders its assignments name relative to that folder, and the program it
// then runs by a relative name are bound; a value part that names nothing is not.
TEST_F(SandboxPrefixTest, AnEnvWrappedCommandsFoldersAreBoundRelativeToItsDirectory) {
  ScopedEnv python_path("PYTHONPATH", "");
  ScopedEnv library_path("LD_LIBRARY_PATH", "");
  ScopedEnv path("PATH", "/usr/bin:/bin");
  fs::current_path(old_cwd_);  // relative names must resolve against -C, not the working directory
  const std::vector<std::string> prefix =
      sandbox_prefix(home(), run_directory(),
                     {"env", "-C", (root_ / "bin").string() + "/", "PYTHONPATH=../py:../nowhere",
                      "OPENBLAS_NUM_THREADS=1", "/usr/bin/python3", "subject", "run"});
  for (const fs::path& folder : {root_ / "bin", root_ / "py"}) {
    EXPECT_NE(position(prefix, "--ro-bind", folder.string()), std::string::npos) << folder;
  }
  EXPECT_EQ(position(prefix, "--ro-bind", (root_ / "nowhere").string()), std::string::npos);
  // Each folder once, and nothing else of the test's /tmp root (the run directory, the checkout).
  size_t under_root = 0;
  std::string all;
  for (size_t index = 0; index + 1 < prefix.size(); ++index) {
    all += prefix[index] + " ";
    if (prefix[index] == "--ro-bind" && prefix[index + 1].rfind(root_.string(), 0) == 0) {
      ++under_root;
    }
  }
  EXPECT_EQ(under_root, 2u) << all;
}

// The same layout run by bwrap, where it can create a sandbox: the module on PYTHONPATH is
// readable, the home inside the checkout is empty, and only the run directory is writable.
TEST_F(SandboxPrefixTest, InsideBwrapTheModuleIsReadableAndTheHomeHidden) {
  ProcessSpec probe_bwrap;
  probe_bwrap.argv = {"bwrap", "--ro-bind", "/", "/", "--", "/bin/true"};
  probe_bwrap.timeout = std::chrono::seconds(20);
  try {
    if (!run_process(probe_bwrap).succeeded()) GTEST_SKIP() << "bwrap cannot create a sandbox here";
  } catch (const Error&) {
    GTEST_SKIP() << "bwrap (Debian package bubblewrap) is not installed";
  }
  ScopedEnv python_path("PYTHONPATH", (root_ / "py").string());
  std::vector<std::string> argv =
      sandbox_prefix(home(), run_directory(), {(root_ / "bin" / "subject").string()});
  const std::string script = "cat " + (root_ / "py" / "module.py").string() + " && ls -A " +
                             home().string() + " | wc -l && touch written && (touch " +
                             (checkout() / "outside").string() + " 2>/dev/null || echo ro)";
  argv.insert(argv.end(), {"/bin/sh", "-c", script});
  ProcessSpec spec;
  spec.argv = argv;
  spec.timeout = std::chrono::seconds(20);
  const ProcessResult result = run_process(spec);
  ASSERT_TRUE(result.succeeded()) << result.describe() << "\n" << result.stderr_text;
  EXPECT_EQ(result.stdout_text, "VALUE = 1\n0\nro\n");
  EXPECT_TRUE(fs::exists(run_directory() / "written"));
  EXPECT_FALSE(fs::exists(checkout() / "outside"));
}

// GPU device nodes are bound one by one into the fresh /dev where asked, and not otherwise.
TEST_F(SandboxPrefixTest, GpuNodesAreBoundOnlyWhereAsked) {
  const fs::path dev = root_ / "dev";
  fs::create_directories(dev / "dri");
  for (const char* name : {"nvidia0", "nvidiactl", "nvidia-uvm", "null", "sda"}) {
    std::ofstream(dev / name) << "";
  }
  EXPECT_EQ(gpu_device_nodes(dev),
            (std::vector<std::string>{(dev / "dri").string(), (dev / "nvidia-uvm").string(),
                                      (dev / "nvidia0").string(), (dev / "nvidiactl").string()}));
  const std::vector<std::string> without =
      sandbox_prefix(home(), run_directory(), {(root_ / "bin" / "subject").string()}, false);
  EXPECT_EQ(std::count(without.begin(), without.end(), std::string("--dev-bind")), 0);
  const std::vector<std::string> with =
      sandbox_prefix(home(), run_directory(), {(root_ / "bin" / "subject").string()}, true);
  EXPECT_EQ(std::count(with.begin(), with.end(), std::string("--dev-bind")),
            static_cast<std::ptrdiff_t>(gpu_device_nodes("/dev").size()));
}

// Regression (issue 33): a run left a file in the host's /dev (writable to a subject running as
// root) and a key in the shared keyrings, and the next run read both. Each run now gets a fresh
// /dev and, where the kernel allows it, a user namespace of its own, whose keyrings are its own.
TEST_F(SandboxPrefixTest, ARunLeavesNothingInDevOrTheKeyringsForTheNext) {
  ProcessSpec probe_bwrap;
  probe_bwrap.argv = {"bwrap", "--ro-bind", "/", "/", "--", "/bin/true"};
  probe_bwrap.timeout = std::chrono::seconds(20);
  try {
    if (!run_process(probe_bwrap).succeeded()) GTEST_SKIP() << "bwrap cannot create a sandbox here";
  } catch (const Error&) {
    GTEST_SKIP() << "bwrap (Debian package bubblewrap) is not installed";
  }
  if (!user_namespace_available()) GTEST_SKIP() << "no user namespaces: keyrings are shared";
  const std::string marker = "loupe_sandbox_marker_" + std::to_string(::getpid());
  // add_key(2) is system call 248 and keyctl(2) 250 on x86-64; the user (-4) and session (-3)
  // keyrings; KEYCTL_SEARCH is 10.
  // Perl's syscall passes a variable's string as a pointer (a literal is refused as read-only).
  const std::string names = "my ($type, $name, $value) = (\"user\", \"" + marker + "\", \"v\"); ";
  const std::string write =
      "echo left > /dev/" + marker + " && echo left > /dev/shm/" + marker + " && perl -e '" +
      names +
      "for my $ring (-4, -3) { syscall(248, $type, $name, $value, 1, $ring) > 0 or exit 1 }'" +
      " && echo written";
  const std::string read =
      "for f in /dev/" + marker + " /dev/shm/" + marker +
      "; do test -e $f && echo found $f; done; perl -e '" + names +
      "for my $ring (-4, -3) { print \"key found\\n\" if syscall(250, 10, $ring, $type, $name, "
      "0) > 0 }'; echo read";
  std::string outputs;
  for (const std::string& script : {write, read}) {
    std::vector<std::string> argv =
        sandbox_prefix(home(), run_directory(), {(root_ / "bin" / "subject").string()});
    argv.insert(argv.end(), {"/bin/sh", "-c", script});
    ProcessSpec spec;
    spec.argv = argv;
    spec.timeout = std::chrono::seconds(20);
    const ProcessResult result = run_process(spec);
    ASSERT_TRUE(result.succeeded()) << result.describe() << "\n" << result.stderr_text;
    outputs += result.stdout_text;
  }
  EXPECT_EQ(outputs, "written\nread\n");
  EXPECT_FALSE(fs::exists("/dev/" + marker));
}

}  // namespace
}  // namespace loupe::probe
