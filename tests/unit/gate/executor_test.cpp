// The executor's settings: the objective's [executor] table and the command-line overrides.
// (The Slurm executor itself runs against a real cluster in tests/integration/slurm.)
#include "gate/executor.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace loupe::gate
