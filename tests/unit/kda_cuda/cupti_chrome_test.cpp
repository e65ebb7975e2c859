// tests/unit/kda_cuda/cupti_chrome_test.cpp — the Chrome trace src/trace/cupti writes from CUPTI
// activity reads back through src/trace/import as GPU-stream tracks with flows from the launching
// thread. Synthetic records: no GPU needed (built where CUPTI was found).
#include <gtest/gtest.h>

#ifdef LOUPE_CUPTI_TESTS
#include <fstream>
#include <string>

#include "trace/cupti/cupti_tracer.hpp"
#include "trace/import/import.hpp"
#include "trace/model/model.hpp"

namespace loupe::trace::cupti {
namespace {

detail::Activity decode_step_activity() {
  detail::Activity activity;
  // A launch, a copy and a device sync from thread 17 of process 4242; the GPU work on stream 7.
  activity.api.push_back({4242, 17, 211, 1'000, 3'000, 5});
  activity.api.push_back({4242, 17, 41, 9'500, 9'800, 6});
  activity.api.push_back({4242, 17, 165, 13'000, 20'000, 7});
  detail::GpuRecord kernel;
  kernel.kind = detail::GpuKind::kKernel;
  kernel.stream = 7;
  kernel.start = 5'000;
  kernel.end = 9'000;
  kernel.correlation = 5;
  kernel.name = "merged_v_decode<\"q\\k\">";
  kernel.grid[0] = 64, kernel.grid[1] = 32, kernel.grid[2] = 1;
  kernel.block[0] = 256, kernel.block[1] = kernel.block[2] = 1;
  kernel.registers = 113;
  activity.gpu.push_back(kernel);
  detail::GpuRecord copy;
  copy.kind = detail::GpuKind::kMemcpy;
  copy.stream = 7;
  copy.start = 10'000;
  copy.end = 12'000;
  copy.correlation = 6;
  copy.bytes = 4096;
  copy.name = "Memcpy DtoH";
  activity.gpu.push_back(copy);
  activity.sync.push_back({4, 0, 13'100, 19'900, 7});
  activity.counts.kernels = 1;
  activity.counts.memcpys = 1;
  activity.counts.synchronizations = 1;
  activity.counts.runtime_calls = 3;
  return activity;
}

std::string name_of(uint32_t callback) {
  switch (callback) {
    case 211:
      return "cudaLaunchKernel";
    case 41:
      return "cudaMemcpyAsync";
    default:
      return "cudaDeviceSynchronize";
  }
}

Model load(const detail::Activity& activity, const std::string& file) {
  const std::string path = testing::TempDir() + file;
  std::ofstream(path) << detail::chrome_trace(activity, name_of);
  return load_traces({path});
}

TEST(CuptiChromeTraceTest, GpuWorkLandsOnAStreamTrackWithFlowsFromTheLaunchingThread) {
  const Model model = load(decode_step_activity(), "cupti_decode_step.json");
  int gpu_tracks = 0;
  TrackId stream = 0, thread = 0;
  for (TrackId id = 0; id < model.tracks.size(); ++id) {
    if (model.tracks[id].kind == TrackKind::kGpuStream) ++gpu_tracks, stream = id;
    if (model.tracks[id].kind == TrackKind::kThread && model.tracks[id].tid == "17") thread = id;
  }
  ASSERT_EQ(gpu_tracks, 1);
  EXPECT_EQ(model.tracks[stream].name, "stream 7");
  EXPECT_EQ(model.tracks[stream].process_name, "GPU 0");
  EXPECT_EQ(model.tracks[thread].pid, "4242");

  std::vector<std::string> on_stream, on_thread;
  for (SliceId id = 0; id < model.slices.name.size(); ++id) {
    const std::string name(model.slice_name(id));
    if (model.slices.track[id] == stream) on_stream.push_back(name);
    if (model.slices.track[id] == thread) on_thread.push_back(name);
  }
  EXPECT_EQ(on_stream, (std::vector<std::string>{"merged_v_decode<\"q\\k\">", "Memcpy DtoH"}));
  EXPECT_EQ(on_thread, (std::vector<std::string>{"cudaLaunchKernel", "cudaMemcpyAsync",
                                                 "cudaDeviceSynchronize", "cuda sync: device"}));

  ASSERT_EQ(model.flows.name.size(), 2u);
  for (size_t flow = 0; flow < 2; ++flow) {
    EXPECT_EQ(model.flows.from_track[flow], thread);
    EXPECT_EQ(model.flows.to_track[flow], stream);
  }
  EXPECT_EQ(model.slice_name(model.flows.from_slice[0]), "cudaLaunchKernel");
  EXPECT_EQ(model.slice_name(model.flows.to_slice[0]), "merged_v_decode<\"q\\k\">");
  EXPECT_EQ(model.slices.start_ns[model.flows.to_slice[0]], 5'000);
  EXPECT_EQ(model.slices.end_ns[model.flows.to_slice[0]], 9'000);
}

TEST(CuptiChromeTraceTest, SynchronisationNestsInTheRuntimeCallThatWaited) {
  const Model model = load(decode_step_activity(), "cupti_sync.json");
  for (SliceId id = 0; id < model.slices.name.size(); ++id) {
    if (model.slice_name(id) != "cuda sync: device") continue;
    EXPECT_EQ(model.slices.depth[id], 1u);
    EXPECT_EQ(model.slice_name(model.slices.parent[id]), "cudaDeviceSynchronize");
    return;
  }
  FAIL() << "no 'cuda sync: device' slice";
}

TEST(CuptiChromeTraceTest, WorkWithoutARecordedLaunchHasNoFlow) {
  detail::Activity activity = decode_step_activity();
  activity.api.erase(activity.api.begin());  // the launch was not recorded (tracing began later)
  const Model model = load(activity, "cupti_no_launch.json");
  ASSERT_EQ(model.flows.name.size(), 1u);
  EXPECT_EQ(model.slice_name(model.flows.to_slice[0]), "Memcpy DtoH");
}

}  // namespace
}  // namespace loupe::trace::cupti
#else
TEST(CuptiChromeTraceTest, Skipped) {
  GTEST_SKIP() << "loupe_cupti not built: no CUDA toolkit with CUPTI at configure time";
}
#endif
