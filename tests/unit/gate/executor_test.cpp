// The executor's settings: the objective's [executor] table and the command-line overrides.
// (The Slurm executor itself runs against a real cluster in tests/integration/slurm; what it says
// when Slurm is not ready is tested here with fake sbatch, scontrol and sinfo scripts.)
#include "gate/executor.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "gate/objective.hpp"

namespace loupe::gate {
namespace {

// Lines 1-4: a valid objective the cases below extend from line 5 on.
const std::string kBase = R"([subject]
command = "build/bin/kda probe"
[[check]]
probe = "cp_vs_nocp"
)";

std::string config_error(const std::string& text) {
  try {
    parse_objective(text, "obj.toml");
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kConfig);
    return error.message();
  }
  return "no error";
}

TEST(ExecutorSpecTest, WithoutATableTheExecutorIsLocal) {
  const Objective objective = parse_objective(kBase, "obj.toml");
  EXPECT_EQ(objective.executor, ExecutorSpec{});
  EXPECT_EQ(objective.executor.kind, "local");
  EXPECT_EQ(objective.executor.retries, 2);
}

TEST(ExecutorSpecTest, EveryKeyIsRead) {
  const Objective objective = parse_objective(kBase + R"([executor]
kind = "slurm"
partition = "h200"
account = "inference"
time = "00:20:00"
gres = "gpu:1"
max_parallel = 16
retries = 3
poll_s = 0.25
shared_dir = "/shared/loupe"
)",
                                              "obj.toml");
  const ExecutorSpec& spec = objective.executor;
  EXPECT_EQ(spec.kind, "slurm");
  EXPECT_EQ(spec.partition, "h200");
  EXPECT_EQ(spec.account, "inference");
  EXPECT_EQ(spec.time_limit, "00:20:00");
  EXPECT_EQ(spec.gres, "gpu:1");
  EXPECT_EQ(spec.max_parallel, 16);
  EXPECT_EQ(spec.retries, 3);
  EXPECT_DOUBLE_EQ(spec.poll_s, 0.25);
  EXPECT_EQ(spec.shared_dir, "/shared/loupe");
}

TEST(ExecutorSpecTest, BadValuesNameTheFileLineAndKey) {
  EXPECT_EQ(config_error(kBase + "[executor]\nkind = \"ray\"\n"),
            "obj.toml:6: executor.kind: expected \"local\" or \"slurm\", found \"ray\"");
  EXPECT_EQ(config_error(kBase + "[executor]\nretries = 99\n"),
            "obj.toml:6: executor.retries: expected 0 to 20 resubmissions, found 99");
  EXPECT_EQ(config_error(kBase + "[executor]\nmax_parallel = -1\n"),
            "obj.toml:6: executor.max_parallel: expected 0 (no throttle) to 100000, found -1");
  EXPECT_NE(config_error(kBase + "[executor]\nqueue = \"x\"\n").find("executor.queue"),
            std::string::npos);
}

TEST(ExecutorSpecTest, EntriesMayAskForTheirOwnResources) {
  const Objective objective = parse_objective(kBase + R"([executor.resources.cp_vs_nocp]
gres = "gpu:1"
ntasks = 4
)",
                                              "obj.toml");
  ASSERT_EQ(objective.executor.resources.size(), 1u);
  const PointResources& wanted = objective.executor.resources[0];
  EXPECT_EQ(wanted.entry, "cp_vs_nocp");
  EXPECT_EQ(wanted.gres, "gpu:1");
  EXPECT_EQ(wanted.ntasks, 4);
  EXPECT_EQ(wanted.cpus_per_task, 0);
  EXPECT_EQ(config_error(kBase + "[executor.resources.nowhere]\nntasks = 2\n"),
            "obj.toml:5: executor.resources.nowhere: names no [[check]], [[bench]] or "
            "[[scenario]] entry");
  EXPECT_EQ(config_error(kBase + "[executor.resources.cp_vs_nocp]\nntasks = 0\n"),
            "obj.toml:6: executor.resources.cp_vs_nocp.ntasks: expected 1 to 4096, found 0");
}

TEST(ExecutorSpecTest, CommandLineSettingsOverrideAndAreChecked) {
  ExecutorSpec spec;
  apply_executor_setting(spec, "kind", "slurm");
  apply_executor_setting(spec, "max_parallel", "4");
  apply_executor_setting(spec, "gres", "gpu:2");
  EXPECT_EQ(spec.kind, "slurm");
  EXPECT_EQ(spec.max_parallel, 4);
  EXPECT_EQ(spec.gres, "gpu:2");
  try {
    apply_executor_setting(spec, "kind", "k8s");
    FAIL() << "k8s accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(), "--executor 'k8s': expected local or slurm");
  }
  try {
    apply_executor_setting(spec, "retries", "2x");
    FAIL() << "2x accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.message(), "--retries '2x': expected an integer from 0 to 20");
  }
}

// Issue 39: how many check points the local executor runs at once. Unset, min(2, CPUs); a batch
// executor runs its points where it likes and takes none.
TEST(ExecutorSpecTest, CheckWorkersAreReadCheckedAndOnlyTheLocalExecutorsOwn) {
  EXPECT_EQ(parse_objective(kBase, "obj.toml").executor.check_workers, 0);
  const int64_t by_default = default_check_workers();
  EXPECT_GE(by_default, 1);
  EXPECT_LE(by_default, 2);
  EXPECT_EQ(check_workers_of(ExecutorSpec{}), by_default);
  const Objective one = parse_objective(kBase + "[executor]\ncheck_workers = 1\n", "obj.toml");
  EXPECT_EQ(one.executor.check_workers, 1);
  EXPECT_EQ(check_workers_of(one.executor), 1);
  EXPECT_EQ(config_error(kBase + "[executor]\ncheck_workers = 0\n"),
            "obj.toml:6: executor.check_workers: expected 1 (one check point after another) to "
            "64, found 0");
  EXPECT_EQ(config_error(kBase + "[executor]\ncheck_workers = \"two\"\n").find("obj.toml:6"), 0u);

  ExecutorSpec spec;
  apply_executor_setting(spec, "check_workers", "3");
  EXPECT_EQ(check_workers_of(spec), 3);
  spec.kind = "slurm";
  EXPECT_EQ(check_workers_of(spec), 1);
  try {
    apply_executor_setting(spec, "check_workers", "65");
    FAIL() << "65 accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(), "--check-workers '65': expected an integer from 1 to 64");
  }
}

TEST(ExecutorSpecTest, SlurmWithoutSbatchSaysWhatToInstall) {
  ExecutorSpec spec;
  spec.kind = "slurm";
  ExecutorContext context;
  const char* path = std::getenv("PATH");
  const std::string saved = path == nullptr ? "" : path;
  ::setenv("PATH", "/nonexistent", 1);
  try {
    make_executor(spec, context);
    ADD_FAILURE() << "made a Slurm executor without sbatch";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(), "--executor slurm: sbatch is not on PATH");
  }
  ::setenv("PATH", saved.c_str(), 1);
}

// Issue 38: `loupe run --executor slurm` names the real missing piece. Each test puts fake Slurm
// commands in a folder that alone is PATH, and SLURM_CONF at a file of its own.
class SlurmReadinessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("loupe_slurm_ready_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "bin");
    for (const char* name : {"PATH", "SLURM_CONF"}) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name,
                          value == nullptr ? std::nullopt : std::optional<std::string>(value));
    }
    ::setenv("PATH", (dir_ / "bin").c_str(), 1);
    conf_ = dir_ / "slurm.conf";
    std::ofstream(conf_) << "ClusterName=fake\nSlurmctldHost=fakehost\n";
    ::setenv("SLURM_CONF", conf_.c_str(), 1);
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
    std::filesystem::remove_all(dir_);
  }

  // A fake command: a shell script with `body`.
  void command(const std::string& name, const std::string& body) const {
    const auto file = dir_ / "bin" / name;
    std::ofstream(file) << "#!/bin/sh\n" << body << "\n";
    std::filesystem::permissions(file, std::filesystem::perms::owner_all);
  }
  // A cluster that works: sbatch reads its configuration, the controller answers, and it has the
  // partitions debug (its default) and batch.
  void working_cluster() const {
    command("sbatch", "echo 'slurm 22.05.8'");
    command("scontrol", "echo 'Slurmctld(primary) at fakehost is UP'");
    command("sinfo", "printf 'debug\\nbatch\\ndebug\\n'");
  }

  Error refusal(const ExecutorSpec& spec) const {
    ExecutorContext context;
    context.home = dir_ / "home";
    context.run_id = "r1";
    try {
      make_executor(spec, context);
    } catch (const Error& error) {
      EXPECT_EQ(exit_code(error.code()), 2) << error.message();
      return error;
    }
    ADD_FAILURE() << "made a Slurm executor";
    return Error(ErrorCode::kInternal, "none");
  }

  static ExecutorSpec slurm(const std::string& partition = "") {
    ExecutorSpec spec;
    spec.kind = "slurm";
    spec.partition = partition;
    return spec;
  }

  std::filesystem::path dir_;
  std::filesystem::path conf_;
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

TEST_F(SlurmReadinessTest, SbatchNotOnPath) {
  const Error error = refusal(slurm());
  EXPECT_EQ(error.code(), ErrorCode::kUsage);
  EXPECT_EQ(error.message(), "--executor slurm: sbatch is not on PATH");
  EXPECT_NE(error.hint().find("slurm-client"), std::string::npos) << error.hint();
}

// The issue's case: the cluster is up and sbatch on PATH, but SLURM_CONF is not exported, so
// sbatch finds no configuration. It used to say "sbatch is not on PATH".
TEST_F(SlurmReadinessTest, NoConfigurationIsNamedNotAMissingSbatch) {
  if (std::filesystem::exists("/etc/slurm/slurm.conf")) {
    GTEST_SKIP() << "this machine has /etc/slurm/slurm.conf, which sbatch would read";
  }
  working_cluster();
  command("sbatch",
          "echo 'sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host' >&2\n"
          "echo 'sbatch: fatal: Could not establish a configuration source' >&2\nexit 1");
  ::unsetenv("SLURM_CONF");
  const Error error = refusal(slurm());
  EXPECT_EQ(error.code(), ErrorCode::kConfig);
  EXPECT_EQ(error.message(),
            "--executor slurm: no Slurm configuration: SLURM_CONF is not set and "
            "/etc/slurm/slurm.conf does not exist (`sbatch --version`: sbatch: fatal: Could not "
            "establish a configuration source)");
  EXPECT_EQ(error.hint().rfind("export SLURM_CONF=", 0), 0u) << error.hint();
  EXPECT_NE(error.hint().find("scripts/slurm-local up"), std::string::npos) << error.hint();
}

TEST_F(SlurmReadinessTest, SlurmConfNamingNoFile) {
  working_cluster();
  const auto missing = dir_ / "missing.conf";
  ::setenv("SLURM_CONF", missing.c_str(), 1);
  const Error error = refusal(slurm());
  EXPECT_EQ(error.code(), ErrorCode::kConfig);
  EXPECT_EQ(error.message(), "--executor slurm: no Slurm configuration: SLURM_CONF=" +
                                 missing.string() + " does not exist");
  EXPECT_EQ(error.hint().rfind("export SLURM_CONF=", 0), 0u) << error.hint();
}

TEST_F(SlurmReadinessTest, SlurmConfThatCannotBeRead) {
  working_cluster();
  ::setenv("SLURM_CONF", dir_.c_str(), 1);  // a folder: unreadable as a file, even for root
  const Error error = refusal(slurm());
  EXPECT_EQ(error.code(), ErrorCode::kConfig);
  EXPECT_EQ(error.message(), "--executor slurm: the Slurm configuration SLURM_CONF=" +
                                 dir_.string() + " cannot be read (a directory)");
}

TEST_F(SlurmReadinessTest, ConfigurationSbatchCannotUse) {
  working_cluster();
  command("sbatch", "echo 'sbatch: error: Parse error in file " + conf_.string() +
                        " line 1: \"ClusterName\"' >&2\nexit 1");
  const Error error = refusal(slurm());
  EXPECT_EQ(error.code(), ErrorCode::kConfig);
  EXPECT_EQ(error.message(), "--executor slurm: sbatch cannot use the Slurm configuration " +
                                 conf_.string() + ": sbatch: error: Parse error in file " +
                                 conf_.string() + " line 1: \"ClusterName\"");
}

TEST_F(SlurmReadinessTest, ControllerThatDoesNotAnswer) {
  working_cluster();
  command("scontrol", "echo 'Slurmctld(primary) at fakehost is DOWN'\nexit 1");
  const Error error = refusal(slurm());
  EXPECT_EQ(error.code(), ErrorCode::kConfig);
  EXPECT_EQ(error.message(),
            "--executor slurm: the Slurm controller does not answer (scontrol ping: "
            "Slurmctld(primary) at fakehost is DOWN)");
  EXPECT_NE(
      error.hint().find("start slurmctld on the host SlurmctldHost names in " + conf_.string()),
      std::string::npos)
      << error.hint();
}

TEST_F(SlurmReadinessTest, NoSuchPartition) {
  working_cluster();
  const Error error = refusal(slurm("gpu"));
  EXPECT_EQ(error.code(), ErrorCode::kUsage);
  EXPECT_EQ(error.message(),
            "--executor slurm: no partition 'gpu' on this cluster (it has: debug, batch)");
  EXPECT_NE(error.hint().find("--partition"), std::string::npos) << error.hint();
}

TEST_F(SlurmReadinessTest, ReadyClusterPassesEveryCheck) {
  working_cluster();
  EXPECT_NO_THROW(check_slurm_ready(slurm("batch")));
  EXPECT_NO_THROW(check_slurm_ready(slurm()));
}

}  // namespace
}  // namespace loupe::gate
