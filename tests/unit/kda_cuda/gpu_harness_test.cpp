// tests/unit/kda_cuda/gpu_harness_test.cpp — runs `kda_gpu --check` (every CUDA kernel against the
// fp64 reference) and `kda_gpu --prefill --quick` (the chunked prefill, its context-parallel pass,
// a partial last chunk and a packed varlen batch against the fp64 recurrence; issue 36) where
// kda_gpu was built; skips, saying why, without nvcc or without a GPU.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

#ifdef KDA_GPU_EXECUTABLE
// kda_gpu's exit code for `flags`, its output kept beside the JSON file `name`; -1 when it did
// not exit normally.
int run_kda_gpu(const std::string& flags, const std::string& name, std::string& output) {
  const std::string json = testing::TempDir() + name;
  output = json + ".txt";
  const std::string command =
      (std::getenv("KDA_GPU_EXECUTABLE") ? std::string(std::getenv("KDA_GPU_EXECUTABLE"))
                                         : std::string(KDA_GPU_EXECUTABLE)) +
      " " + flags + " --json " + json + " > " + output + " 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
#endif

TEST(GpuHarnessTest, EveryKernelMatchesTheFp64Reference) {
#ifndef KDA_GPU_EXECUTABLE
  GTEST_SKIP() << "kda_gpu not built: no CUDA compiler at configure time";
#else
  std::string output;
  const int code = run_kda_gpu("--check", "kda_gpu_check.json", output);
  if (code == 4) GTEST_SKIP() << "no usable CUDA device (none, or not sm_90): kda_gpu exit 4";
  EXPECT_EQ(code, 0) << "kda_gpu --check failed; its output is in " << output;
#endif
}

// Issue 36: the context-parallel pass (4096 tokens, H = 4, 4 shards), T = 1000 and the packed
// varlen batch [300, 57, 512, 171] each within the bf16 floor of the fp64 recurrence.
TEST(GpuHarnessTest, PrefillWithContextParallelismTailsAndVarlenMatchesTheFp64Recurrence) {
#ifndef KDA_GPU_EXECUTABLE
  GTEST_SKIP() << "kda_gpu not built: no CUDA compiler at configure time";
#else
  std::string output;
  const int code = run_kda_gpu("--prefill --quick", "kda_gpu_prefill.json", output);
  if (code == 4) GTEST_SKIP() << "no usable CUDA device (none, or not sm_90): kda_gpu exit 4";
  EXPECT_EQ(code, 0) << "kda_gpu --prefill --quick failed; its output is in " << output;
#endif
}

}  // namespace
