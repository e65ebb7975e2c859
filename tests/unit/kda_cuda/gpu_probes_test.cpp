// tests/unit/kda_cuda/gpu_probes_test.cpp — kda's GPU probes (kda/probes/gpu_probes.cu) through
// the subject interface: listed where kda was built with CUDA; without a device the bench point
// skips saying why and a check stops with a subject error; with one, loupe's verdicts pass.
#include <gtest/gtest.h>

#ifdef KDA_EXECUTABLE
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "loupe/bench.hpp"

namespace {

// The build's paths, or the environment's (a bundle carried to another machine moves them).
std::string executable(const char* variable, const char* built) {
  const char* moved = std::getenv(variable);
  return moved != nullptr && *moved != '\0' ? moved : built;
}
std::string kda() { return executable("KDA_EXECUTABLE", KDA_EXECUTABLE); }

struct Ran {
  int code = -1;
  std::string output;
};

Ran run(const std::string& command) {
  Ran ran;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen((command + " 2>&1").c_str(), "r"), pclose);
  char buffer[4096];
  size_t read = 0;
  while ((read = fread(buffer, 1, sizeof(buffer), pipe.get())) > 0) ran.output.append(buffer, read);
  const int status = pclose(pipe.release());
  ran.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return ran;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(GpuProbesTest, ListedWhereKdaWasBuiltWithCuda) {
#ifndef KDA_GPU_PROBES
  GTEST_SKIP() << "kda built without CUDA: the GPU probes are absent from `kda probe list`";
#else
  const Ran list = run(kda() + " probe list");
  ASSERT_EQ(list.code, 0) << list.output;
  for (const char* probe : {"decode_gpu_vs_cpu", "cp_merge_gpu", "decode_gpu"}) {
    EXPECT_NE(list.output.find(probe), std::string::npos) << probe << " not in\n" << list.output;
  }
#endif
}

TEST(GpuProbesTest, WithoutADeviceTheBenchSkipsAndTheCheckSaysWhy) {
#ifndef KDA_GPU_PROBES
  GTEST_SKIP() << "kda built without CUDA";
#else
  if (loupe::cuda_device_available()) GTEST_SKIP() << "a CUDA device is present";
  const std::string dir = testing::TempDir() + "decode_gpu_no_device";
  const Ran bench =
      run(kda() + " probe run decode_gpu --set batch=1 --set H=2 --seed 1 --out " + dir);
  ASSERT_EQ(bench.code, 0) << bench.output;
  EXPECT_NE(read_file(dir + "/observation.json").find("\"skipped\": \"no CUDA device\""),
            std::string::npos);
  const Ran check =
      run(kda() + " probe run decode_gpu_vs_cpu --set batch=2 --set H=1 --out " + dir + "2");
  EXPECT_EQ(check.code, 3) << check.output;
  EXPECT_NE(check.output.find("no CUDA device"), std::string::npos) << check.output;
#endif
}

#if defined(KDA_GPU_PROBES) && defined(LOUPE_EXECUTABLE)
class GpuProbesDeviceTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!loupe::cuda_device_available()) GTEST_SKIP() << "no CUDA device: GPU probes not run";
  }
  // `loupe probe run PROBE ARGS -- kda probe`: exit 0 iff loupe's verdict passes.
  Ran probe(const std::string& args) {
    return run(executable("LOUPE_EXECUTABLE", LOUPE_EXECUTABLE) + " probe run " + args +
               " --home " + testing::TempDir() + "loupe_home -- " + kda() + " probe");
  }
};

TEST_F(GpuProbesDeviceTest, BothDecodeKernelsMatchTheCpuDecode) {
  for (const char* kernel : {"tiled", "merged"}) {
    const Ran ran = probe(std::string("decode_gpu_vs_cpu --set kernel=") + kernel +
                          " --set batch=5 --set H=3 --set steps=3 --seed 3");
    EXPECT_EQ(ran.code, 0) << ran.output;
  }
}

TEST_F(GpuProbesDeviceTest, Fp32CpMergeHoldsAtShortT) {
  const Ran ran = probe("cp_merge_gpu --set T=4096 --set shards=4 --set precision=fp32 --seed 3");
  EXPECT_EQ(ran.code, 0) << ran.output;
}

TEST_F(GpuProbesDeviceTest, DecodeBenchIsTimedByCudaEvents) {
  const std::string dir = testing::TempDir() + "decode_gpu_device";
  const Ran bench = run(kda() +
                        " probe run decode_gpu --set batch=2 --set H=4 --budget 0.5 --seed 1 "
                        "--out " +
                        dir);
  ASSERT_EQ(bench.code, 0) << bench.output;
  const std::string observation = read_file(dir + "/observation.json");
  EXPECT_NE(observation.find("\"timer\": \"cuda_events\""), std::string::npos) << observation;
  EXPECT_NE(observation.find("\"sm_clock_source\""), std::string::npos);
  EXPECT_NE(read_file(dir + "/samples.json").find("\"sm_clock_mhz\""), std::string::npos);
}

// At batch 1 a decode call takes ~7 us and its accessor's copy of o from the device tens of
// microseconds (the H200 read 30-126 us for 16 KB): guard.deferred_output allows the device-to-host
// copy its timer measures beside the host copy, so the honest accessor raises no guard.
TEST_F(GpuProbesDeviceTest, BatchOneDecodeBenchRaisesNoGuard) {
  const Ran ran = probe(
      "decode_gpu --set batch=1 --set H=32 --set state=cold --set graph=false --budget 1 "
      "--seed 5");
  EXPECT_EQ(ran.code, 0) << ran.output;
  EXPECT_EQ(ran.output.find("deferred_output"), std::string::npos) << ran.output;
}
#endif

}  // namespace
#else
TEST(GpuProbesTest, Skipped) { GTEST_SKIP() << "kda not built"; }
#endif
