// The critical path of one iteration (critical_path.cpp) on the seeded fixtures critical_*.json.gz
// of tests/fixtures/kineto/synthetic: three ProfilerSteps of four launched kernels each, with fixed
// durations (make_synthetic_traces.py, critical_step), so each path is worked out by hand below.
// Times in µs of step 1 (the median of the two after the warm-up step 0), from its start s.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "trace/analyze/analyze.hpp"
#include "trace/import/import.hpp"

namespace loupe::trace {
namespace {

namespace fs = std::filesystem;
const fs::path kSynthetic = fs::path(LOUPE_KINETO_FIXTURE_DIR) / "synthetic";
constexpr int64_t kUs = 1000;

using Kind = CriticalPath::Kind;

CriticalPath path_of(const std::string& name, const std::string& iteration = "") {
  const Model model = load_traces({(kSynthetic / name).string()});
  const Warmup warmup = classify_warmup(model);
  return compute_critical_path(model, warmup, find_gpu_ops(model), iteration);
}

// (kind, name) -> µs on the path.
std::map<std::pair<Kind, std::string>, int64_t> items_of(const CriticalPath& path) {
  std::map<std::pair<Kind, std::string>, int64_t> items;
  for (const CriticalPath::Item& item : path.items) {
    EXPECT_EQ(item.ns % kUs, 0) << item.name;
    items[{item.kind, item.name}] = item.ns / kUs;
  }
  return items;
}

int64_t kind_us(const CriticalPath& path, Kind kind) {
  return path.kind_ns[static_cast<size_t>(kind)] / kUs;
}

// The segments tile the span: each begins where the one before ended.
void expect_tiled(const CriticalPath& path) {
  ASSERT_FALSE(path.segments.empty());
  EXPECT_EQ(path.segments.front().interval.first, path.span.first);
  EXPECT_EQ(path.segments.back().interval.second, path.span.second);
  for (size_t at = 1; at < path.segments.size(); ++at) {
    EXPECT_EQ(path.segments[at].interval.first, path.segments[at - 1].interval.second) << at;
  }
}

// 50 µs ops, 10 µs kernels: each kernel starts 5 µs after its launch returns. Back from the step's
// end (s+220): 3 µs of the step after the final sync, its last 2 µs after kernel_3 ended (s+215),
// kernel_3 (10), launch latency (5), then the thread's work back to s: four ops of 45 µs and four
// launch calls of 5.
TEST(CriticalPath, ACpuBoundStepIsItsThreadsWork) {
  const CriticalPath path = path_of("critical_cpu_bound.json.gz");
  ASSERT_TRUE(path.present);
  EXPECT_EQ(path.iterations, 3u);
  EXPECT_EQ(path.steady_iterations, 2u);
  EXPECT_EQ((path.span.second - path.span.first) / kUs, 220);
  expect_tiled(path);
  EXPECT_EQ(kind_us(path, Kind::kCpu), 205);
  EXPECT_EQ(kind_us(path, Kind::kGpu), 10);
  EXPECT_EQ(kind_us(path, Kind::kLaunch), 5);
  EXPECT_EQ(kind_us(path, Kind::kWait), 0);
  EXPECT_EQ(kind_us(path, Kind::kUntraced), 0);
  const std::map<std::pair<Kind, std::string>, int64_t> expected{
      {{Kind::kCpu, "aten::op0"}, 45},        {{Kind::kCpu, "aten::op1"}, 45},
      {{Kind::kCpu, "aten::op2"}, 45},        {{Kind::kCpu, "aten::op3"}, 45},
      {{Kind::kCpu, "cudaLaunchKernel"}, 20}, {{Kind::kCpu, "cudaStreamSynchronize"}, 2},
      {{Kind::kCpu, "ProfilerStep#1"}, 3},    {{Kind::kGpu, "kernel_3"}, 10},
      {{Kind::kLaunch, "launch latency"}, 5}};
  EXPECT_EQ(items_of(path), expected);
}

// 20 µs ops, 100 µs kernels: the kernels queue on stream 7 back to back. Back from s+430: the step
// (3) and the final sync (2) after kernel_3, the four kernels (400), kernel_0's launch latency (5),
// and op0 with its launch call (15 + 5) from s.
TEST(CriticalPath, AGpuBoundStepIsItsKernels) {
  const CriticalPath path = path_of("critical_gpu_bound.json.gz");
  ASSERT_TRUE(path.present);
  EXPECT_EQ((path.span.second - path.span.first) / kUs, 430);
  expect_tiled(path);
  EXPECT_EQ(kind_us(path, Kind::kGpu), 400);
  EXPECT_EQ(kind_us(path, Kind::kCpu), 25);
  EXPECT_EQ(kind_us(path, Kind::kLaunch), 5);
  const std::map<std::pair<Kind, std::string>, int64_t> expected{
      {{Kind::kGpu, "kernel_0"}, 100},
      {{Kind::kGpu, "kernel_1"}, 100},
      {{Kind::kGpu, "kernel_2"}, 100},
      {{Kind::kGpu, "kernel_3"}, 100},
      {{Kind::kCpu, "aten::op0"}, 15},
      {{Kind::kCpu, "cudaLaunchKernel"}, 5},
      {{Kind::kCpu, "cudaStreamSynchronize"}, 2},
      {{Kind::kCpu, "ProfilerStep#1"}, 3},
      {{Kind::kLaunch, "launch latency"}, 5}};
  EXPECT_EQ(items_of(path), expected);
  EXPECT_EQ(path.items.front().kind, Kind::kGpu);
}

// 30 µs ops, 60 µs kernels, and an aten::item after op1 whose cudaStreamSynchronize returns 2 µs
// after kernel_1 (s+155): the host cannot launch kernel_2 before it, so the path runs kernel_3,
// kernel_2 (60 each, back to back), kernel_2's launch latency (5), op2 and its launch (25 + 5), the
// item's tail (sync 2, item 1), kernel_1 and kernel_0 (60 each, queued), kernel_0's launch
// latency (5), op0 and its launch (25 + 5); and the final sync (2) and the step (3) at the end.
TEST(CriticalPath, ASynchronisationSerialisesTheHostAndTheGpu) {
  const CriticalPath path = path_of("critical_sync.json.gz");
  ASSERT_TRUE(path.present);
  EXPECT_EQ((path.span.second - path.span.first) / kUs, 318);
  expect_tiled(path);
  EXPECT_EQ(kind_us(path, Kind::kGpu), 240);
  EXPECT_EQ(kind_us(path, Kind::kLaunch), 10);
  EXPECT_EQ(kind_us(path, Kind::kCpu), 68);
  const std::map<std::pair<Kind, std::string>, int64_t> expected{
      {{Kind::kGpu, "kernel_0"}, 60},         {{Kind::kGpu, "kernel_1"}, 60},
      {{Kind::kGpu, "kernel_2"}, 60},         {{Kind::kGpu, "kernel_3"}, 60},
      {{Kind::kCpu, "aten::op0"}, 25},        {{Kind::kCpu, "aten::op2"}, 25},
      {{Kind::kCpu, "cudaLaunchKernel"}, 10}, {{Kind::kCpu, "cudaStreamSynchronize"}, 4},
      {{Kind::kCpu, "aten::item"}, 1},        {{Kind::kCpu, "ProfilerStep#1"}, 3},
      {{Kind::kLaunch, "launch latency"}, 10}};
  EXPECT_EQ(items_of(path), expected);
}

// A cudaMemcpyAsync to pageable memory returns only after its copy: a wait for the GPU. Back from
// the step's end (s+165): the step (5), aten::op1 (20), aten::copy_ (2) and the call's return (3)
// after the copy ended at s+135; the copy (10), which began when kernel_0 ended — not when its
// call began (s+21), nor when the call returned (s+138, after the copy had started); kernel_0
// (100), its launch latency (5), op0 and its launch (15 + 5) from s.
TEST(CriticalPath, ABlockingCopyWaitsForTheKernelBeforeIt) {
  const CriticalPath path = path_of("critical_blocking_copy.json.gz");
  ASSERT_TRUE(path.present);
  EXPECT_EQ((path.span.second - path.span.first) / kUs, 165);
  expect_tiled(path);
  EXPECT_EQ(kind_us(path, Kind::kGpu), 110);
  EXPECT_EQ(kind_us(path, Kind::kLaunch), 5);
  EXPECT_EQ(kind_us(path, Kind::kCpu), 50);
  const std::map<std::pair<Kind, std::string>, int64_t> expected{
      {{Kind::kGpu, "kernel_0"}, 100},       {{Kind::kGpu, "Memcpy DtoH (Device -> Pageable)"}, 10},
      {{Kind::kCpu, "aten::op0"}, 15},       {{Kind::kCpu, "cudaLaunchKernel"}, 5},
      {{Kind::kCpu, "cudaMemcpyAsync"}, 3},  {{Kind::kCpu, "aten::copy_"}, 2},
      {{Kind::kCpu, "aten::op1"}, 20},       {{Kind::kCpu, "ProfilerStep#1"}, 5},
      {{Kind::kLaunch, "launch latency"}, 5}};
  EXPECT_EQ(items_of(path), expected);
}

// kernel_1, launched by the helper thread, ends last (s+125): kernel_1 (20), its launch latency
// (5), the helper's launch call (5) and MulBackward0 (45) back to s+50, where the helper has
// nothing open — it waited for the main thread, which takes the path: wait_backward (10), op0's
// launch (5) and op0 (35) from s.
TEST(CriticalPath, AnIdleHelperThreadHandsThePathToTheIterationsThread) {
  const CriticalPath path = path_of("critical_two_threads.json.gz");
  ASSERT_TRUE(path.present);
  EXPECT_EQ((path.span.second - path.span.first) / kUs, 125);
  expect_tiled(path);
  EXPECT_EQ(kind_us(path, Kind::kGpu), 20);
  EXPECT_EQ(kind_us(path, Kind::kLaunch), 5);
  EXPECT_EQ(kind_us(path, Kind::kCpu), 100);
  EXPECT_EQ(kind_us(path, Kind::kUntraced), 0);
  const std::map<std::pair<Kind, std::string>, int64_t> expected{
      {{Kind::kGpu, "kernel_1"}, 20},         {{Kind::kLaunch, "launch latency"}, 5},
      {{Kind::kCpu, "cudaLaunchKernel"}, 10}, {{Kind::kCpu, "MulBackward0"}, 45},
      {{Kind::kCpu, "wait_backward"}, 10},    {{Kind::kCpu, "aten::op0"}, 35}};
  EXPECT_EQ(items_of(path), expected);
}

// Ranges named by --iteration instead of ProfilerStep: here the ops themselves, on one thread.
TEST(CriticalPath, IterationsCanBeNamedByAPattern) {
  const CriticalPath path = path_of("critical_cpu_bound.json.gz", "^aten::op1$");
  ASSERT_TRUE(path.present);
  EXPECT_EQ(path.iterations, 3u);
  EXPECT_EQ(path.source, "^aten::op1$");
  // op1 (50 µs) launched kernel_1, which ends 15 µs after op1: the path ends on it.
  EXPECT_EQ((path.span.second - path.span.first) / kUs, 65);
  expect_tiled(path);
  EXPECT_EQ(kind_us(path, Kind::kGpu), 10);
  EXPECT_EQ(kind_us(path, Kind::kLaunch), 5);
  EXPECT_EQ(kind_us(path, Kind::kCpu), 50);
  EXPECT_THROW(path_of("critical_cpu_bound.json.gz", "(unclosed"), Error);
}

// Without ProfilerStep ranges or a pattern there is no iteration to walk.
TEST(CriticalPath, NoIterationNoPath) {
  const Model model = load_traces({(kSynthetic / "missing_rank0.json.gz").string()});
  const Warmup warmup = classify_warmup(model);
  ASSERT_TRUE(warmup.steps.empty());
  EXPECT_FALSE(compute_critical_path(model, warmup, find_gpu_ops(model), "").present);
}

// The analysis reports it as one bounded finding with its table in data.critical_path.
TEST(CriticalPath, AnalyzeReportsOneFindingAndATable) {
  AnalyzeRequest request;
  request.detail = true;
  const Envelope envelope =
      analyze(load_traces({(kSynthetic / "critical_sync.json.gz").string()}), request);
  const Finding* finding = nullptr;
  for (const Finding& candidate : envelope.findings) {
    if (candidate.id == "trace.critical_path.iteration") finding = &candidate;
  }
  ASSERT_NE(finding, nullptr);
  EXPECT_NE(finding->claim.find("critical path of ProfilerStep#1 (the median of 2 after the first"),
            std::string::npos)
      << finding->claim;
  const Json& data = envelope.data["critical_path"];
  EXPECT_EQ(data["span_ns"], 318 * kUs);
  EXPECT_EQ(data["kinds"]["gpu_ns"], 240 * kUs);
  EXPECT_EQ(data["items"].size(), 11u);
  EXPECT_EQ(data["segment_count"], data["segments"].size());
}

}  // namespace
}  // namespace loupe::trace
