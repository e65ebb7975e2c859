// Building blocks of the analyses: interval algebra, selectors, breakdown, overlap, gaps, diff.
#include <gtest/gtest.h>

#include "loupe/error.hpp"
#include "trace/analyze/analyze.hpp"

namespace loupe::trace {
namespace {

TEST(Intervals, UnionIntersectAndLength) {
  const auto merged = union_of({{5, 10}, {0, 3}, {2, 4}, {10, 12}, {7, 7}});
  EXPECT_EQ(merged, (std::vector<Interval>{{0, 4}, {5, 12}}));
  EXPECT_EQ(total_length(merged), 11);
  EXPECT_EQ(intersect(merged, {{3, 6}, {11, 20}}),
            (std::vector<Interval>{{3, 4}, {5, 6}, {11, 12}}));
  EXPECT_EQ(format_duration(1500), "1.5 us");
  EXPECT_EQ(format_duration(2'500'000), "2.5 ms");
  EXPECT_EQ(format_duration(999), "999 ns");
}

Model sample_model() {
  Model model;
  ModelBuilder builder(model);
  const TrackId main = builder.track(0, TrackKind::kThread, "1", "10");
  builder.track_info(main).name = "main";
  const TrackId stream = builder.track(0, TrackKind::kGpuStream, "0", "7");
  builder.track_info(stream).name = "stream 7";
  const StringId kernel = builder.intern("kernel");
  builder.add_slice(main, 0, 100, builder.intern("step"), builder.intern("user"));
  builder.add_slice(main, 10, 20, builder.intern("launch"), builder.intern("cuda_runtime"));
  builder.add_slice(main, 50, 60, builder.intern("launch"), builder.intern("cuda_runtime"));
  builder.add_slice(main, 30, 90, builder.intern("sync"), 0);
  builder.add_slice(stream, 20, 40, builder.intern("gemm"), kernel);
  builder.add_slice(stream, 70, 80, builder.intern("nccl_send"), builder.intern("kernel,comm"));
  builder.add_flow(builder.intern("ac2g"), main, 15, stream, 20, false);
  builder.add_flow(builder.intern("ac2g"), main, 55, stream, 70, false);
  builder.finish();
  return model;
}

TEST(Selector, TermsMatchNameCategoryAndTracks) {
  const Model model = sample_model();
  auto count = [&](const std::string& text) {
    const auto selected = Selector(text).select(model);
    return std::count(selected.begin(), selected.end(), 1);
  };
  EXPECT_EQ(count("launch"), 2);
  EXPECT_EQ(count("name:^s"), 2);  // step, sync
  EXPECT_EQ(count("cat:kernel"), 2);
  EXPECT_EQ(count("cat:comm"), 1);
  EXPECT_EQ(count("thread:main"), 4);
  EXPECT_EQ(count("thread:10&name:launch"), 2);
  EXPECT_EQ(count("stream:7&cat:kernel&name:gemm"), 1);
  EXPECT_EQ(count("kind:gpu_stream"), 2);
  EXPECT_EQ(count("track:stream 7"), 2);
  EXPECT_THROW(Selector("name:(("), Error);
  EXPECT_THROW(Selector("kind:cpu"), Error);
  EXPECT_THROW(Selector("a&&b"), Error);
  EXPECT_THROW(parse_class("noequals"), Error);
  EXPECT_EQ(parse_class("x=name:a=b").selector, "name:a=b");
}

TEST(Breakdown, CountTotalAndSelfTime) {
  const Model model = sample_model();
  const Breakdown breakdown = compute_breakdown(model);
  std::map<std::string, BreakdownRow> rows;
  for (const BreakdownRow& row : breakdown.rows)
    rows[std::string(model.strings.get(row.name))] = row;
  EXPECT_EQ(rows["step"].total_ns, 100);
  EXPECT_EQ(rows["step"].self_ns, 30);  // 100 - launch 10 - sync 60 (launch@50 nests in sync)
  EXPECT_EQ(rows["sync"].self_ns, 50);
  EXPECT_EQ(rows["launch"].count, 2u);
  EXPECT_EQ(rows["launch"].total_ns, 20);
  EXPECT_EQ(breakdown.busy_ns.at(0), 100);
  EXPECT_EQ(breakdown.busy_ns.at(1), 30);
}

TEST(Overlap, OverallAndPerWindow) {
  const Model model = sample_model();
  const Selector kernels("cat:kernel"), sync("name:^sync$"), step("name:^step$");
  const Overlap overlap = compute_overlap(model, kernels, sync, "kernels", "sync", &step, "step");
  EXPECT_EQ(overlap.a_ns, 30);
  EXPECT_EQ(overlap.b_ns, 60);
  EXPECT_EQ(overlap.both_ns, 20);  // [30,40) and [70,80)
  ASSERT_EQ(overlap.windows.size(), 1u);
  EXPECT_EQ(overlap.windows[0].both_ns, 20);
}

TEST(Gaps, IdleStreamIsAttributedToTheFeedingThread) {
  const Model model = sample_model();
  const std::vector<TrackGaps> gaps = compute_gaps(model, 25);
  ASSERT_EQ(gaps.size(), 1u);  // GPU streams only, because the trace has one
  EXPECT_EQ(model.tracks[gaps[0].track].name, "stream 7");
  EXPECT_EQ(model.tracks[gaps[0].feeder].name, "main");
  ASSERT_EQ(gaps[0].gaps.size(), 1u);
  EXPECT_EQ(gaps[0].gaps[0].interval, (Interval{40, 70}));
  EXPECT_EQ(gaps[0].idle_ns, 30);
  // Meanwhile main was in sync [40,50) and [60,70), launch [50,60).
  ASSERT_EQ(gaps[0].feeder_zones.size(), 2u);
  EXPECT_EQ(gaps[0].feeder_zones[0], (std::pair<std::string, int64_t>{"sync", 20}));
  EXPECT_EQ(gaps[0].feeder_zones[1], (std::pair<std::string, int64_t>{"launch", 10}));
}

TEST(Analyze, OutputIsBoundedAndAnnounced) {
  const Model model = sample_model();
  AnalyzeRequest request;
  request.top = 2;
  request.gap_threshold_ns = 25;
  const Envelope envelope = analyze(model, request);
  EXPECT_EQ(envelope.findings.size(), 2u);
  EXPECT_TRUE(envelope.truncated);
  // GPU time compute does not hide, then the stream's idle time with its cause.
  EXPECT_EQ(envelope.findings[0].id, "trace.gpu.comm_exposed");
  EXPECT_EQ(envelope.findings[1].id, "trace.gpu.idle");
  request.detail = true;
  const Envelope detailed = analyze(model, request);
  EXPECT_FALSE(detailed.truncated);
  // comm_exposed, idle, launch, gpu.time and three breakdown rows.
  EXPECT_EQ(detailed.findings.size(), 7u);
  AnalyzeRequest undefined;
  undefined.overlap = std::make_pair("a", "b");
  EXPECT_THROW(analyze(model, undefined), Error);
}

TEST(Diff, IdenticalTracesHaveOnlyTheSpanFinding) {
  const Model a = sample_model();
  const Model b = sample_model();
  const Envelope envelope = diff(a, b, AnalyzeRequest{});
  ASSERT_EQ(envelope.findings.size(), 1u);
  EXPECT_EQ(envelope.findings[0].id, "trace.diff.span");
}

}  // namespace
}  // namespace loupe::trace
