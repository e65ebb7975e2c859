// tests/unit/kda_cuda/gpu_harness_test.cpp — runs `kda_gpu --check` (every CUDA kernel against the
// fp64 reference) where kda_gpu was built; skips, saying why, without nvcc or without a GPU.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

TEST(GpuHarnessTest, EveryKernelMatchesTheFp64Reference) {
#ifndef KDA_GPU_EXECUTABLE
  GTEST_SKIP() << "kda_gpu not built: no CUDA compiler at configure time";
#else
  const std::string json = testing::TempDir() + "kda_gpu_check.json";
  const std::string command =
      (std::getenv("KDA_GPU_EXECUTABLE") ? std::string(std::getenv("KDA_GPU_EXECUTABLE"))
                                         : std::string(KDA_GPU_EXECUTABLE)) +
      " --check --json " + json + " > " + json + ".txt 2>&1";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << command;
  const int code = WEXITSTATUS(status);
  if (code == 4) GTEST_SKIP() << "no usable CUDA device (none, or not sm_90): kda_gpu exit 4";
  EXPECT_EQ(code, 0) << "kda_gpu --check failed; its output is in " << json << ".txt";
#endif
}

}  // namespace
