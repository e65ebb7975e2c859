// ModelBuilder: nesting, repairs, lock spans and the track index.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "trace/model/model.hpp"

namespace loupe::trace {
namespace {

TEST(Model, FinishNestsSlicesPerTrackAndComputesTheRange) {
  Model model;
  ModelBuilder builder(model);
  const TrackId track = builder.track(0, TrackKind::kThread, "1", "1");
  const TrackId other = builder.track(0, TrackKind::kThread, "1", "2");
  EXPECT_EQ(builder.track(0, TrackKind::kThread, "1", "1"), track);
  builder.add_slice(track, 20, 30, builder.intern("child2"), 0);
  builder.add_slice(track, 0, 100, builder.intern("root"), 0);
  builder.add_slice(track, 10, 20, builder.intern("child1"), 0);
  builder.add_slice(track, 12, 15, builder.intern("grandchild"), 0);
  builder.add_slice(other, 5, 6, builder.intern("elsewhere"), 0);
  builder.finish();
  std::vector<std::string> names;
  for (SliceId id = 0; id < model.slices.size(); ++id) names.emplace_back(model.slice_name(id));
  EXPECT_EQ(names,
            (std::vector<std::string>{"root", "child1", "grandchild", "child2", "elsewhere"}));
  EXPECT_EQ(model.slices.depth, (std::vector<uint32_t>{0, 1, 2, 1, 0}));
  EXPECT_EQ(model.slices.parent, (std::vector<SliceId>{kNoSlice, 0, 1, 0, kNoSlice}));
  EXPECT_EQ(model.start_ns, 0);
  EXPECT_EQ(model.end_ns, 100);
  EXPECT_TRUE(model.stats.all_zero());

  const TrackIndex index(model);
  EXPECT_EQ(index.innermost_at(track, 13), 2u);
  EXPECT_EQ(index.innermost_at(track, 16), 1u);
  EXPECT_EQ(index.innermost_at(track, 25), 3u);
  EXPECT_EQ(index.innermost_at(track, 50), 0u);
  EXPECT_EQ(index.innermost_at(track, 100), kNoSlice);
  EXPECT_EQ(index.next_starting_at_or_after(track, 11), 2u);
  EXPECT_EQ(index.next_starting_at_or_after(track, 21), kNoSlice);
}

// The bulk path (whole columns, moved into an empty table) holds what add_slice holds row by row,
// args column included, before and after rows added one by one.
TEST(Model, AddSlicesHoldsWhatAddSliceHoldsRowByRow) {
  auto build = [](bool bulk) {
    Model model;
    ModelBuilder builder(model);
    const TrackId track = builder.track(0, TrackKind::kThread, "1", "1");
    const StringId name = builder.intern("a");
    model.args_text = "{\"k\":1}{\"k\":2}";
    const std::vector<int64_t> start = {0, 10, 2};
    const std::vector<int64_t> end = {20, 12, 5};
    const std::vector<uint64_t> args = {0, uint64_t{0} << 24 | 7, uint64_t{7} << 24 | 7};
    for (int round = 0; round < 2; ++round) {
      if (bulk) {
        builder.add_slices(std::vector<int64_t>(start), std::vector<int64_t>(end),
                           std::vector<TrackId>(3, track), std::vector<StringId>(3, name),
                           std::vector<StringId>(3, 0),
                           round == 0 ? std::vector<uint64_t>(args) : std::vector<uint64_t>());
      } else {
        for (size_t row = 0; row < 3; ++row) {
          const uint64_t packed = round == 0 ? args[row] : 0;
          builder.add_slice(track, start[row], end[row], name, 0, packed >> 24, packed & 0xFFFFFF);
        }
      }
      builder.add_slice(track, 30, 31, name, 0);
    }
    builder.finish();
    std::vector<std::string> rows;
    for (SliceId id = 0; id < model.slices.size(); ++id) {
      rows.push_back(std::to_string(model.slices.start_ns[id]) + "-" +
                     std::to_string(model.slices.end_ns[id]) + " d" +
                     std::to_string(model.slices.depth[id]) + " " +
                     std::string(model.slice_args(id)));
    }
    return rows;
  };
  const std::vector<std::string> bulk = build(true);
  EXPECT_EQ(bulk, build(false));
  // Equal slices nest, the earlier row outside.
  EXPECT_EQ(bulk, (std::vector<std::string>{"0-20 d0 ", "0-20 d1 ", "2-5 d2 {\"k\":2}", "2-5 d3 ",
                                            "10-12 d2 {\"k\":1}", "10-12 d3 ", "30-31 d0 ",
                                            "30-31 d1 "}));
}

TEST(Model, PartialOverlapMovesWholeToAnOverlapLane) {
  Model model;
  ModelBuilder builder(model);
  const TrackId track = builder.track(0, TrackKind::kThread, "1", "1");
  builder.add_slice(track, 0, 10, builder.intern("a"), 0);
  builder.add_slice(track, 5, 15, builder.intern("b"), 0);
  builder.add_slice(track, 6, 8, builder.intern("c"), 0);  // inside a and b: stays under a
  builder.finish();
  ASSERT_EQ(model.slices.size(), 3u);
  // Rows are ordered by track: a and c on the thread, then b on its overlap lane.
  EXPECT_EQ(model.slice_name(2), "b");
  EXPECT_EQ(model.slices.start_ns[2], 5);
  EXPECT_EQ(model.slices.end_ns[2], 15);
  EXPECT_EQ(model.slices.parent[2], kNoSlice);
  EXPECT_EQ(model.slices.parent[1], 0u);
  EXPECT_EQ(model.track_label(model.slices.track[2]), "thread [overlap 1] (1/1)");
  EXPECT_EQ(model.stats.count(Stat::trace_slice_overlap_lane), 1);
}

// Rows nest in two ranges split at a track's first row (side by side past 200,000 rows); the rows
// that move do so after, in row order, so the lanes are made in the order one pass makes them:
// thread 1's lane before thread 2's before thread 3's, and a lane's own lane after them all.
TEST(Model, OverlapLanesAreMadeInRowOrderAcrossTheNestingRanges) {
  Model model;
  ModelBuilder builder(model);
  const TrackId first = builder.track(0, TrackKind::kThread, "1", "1");
  const TrackId second = builder.track(0, TrackKind::kThread, "1", "2");
  const TrackId third = builder.track(0, TrackKind::kThread, "1", "3");
  for (const TrackId track : {third, second, first}) {
    builder.add_slice(track, 0, 10, builder.intern("a"), 0);
    builder.add_slice(track, 5, 15, builder.intern("b"), 0);  // moves to overlap 1
  }
  builder.add_slice(second, 1, 9, builder.intern("c"), 0);
  builder.add_slice(second, 6, 12, builder.intern("d"), 0);  // overlaps c: overlap 1
  builder.add_slice(second, 7, 14, builder.intern("e"), 0);  // then overlaps d there: overlap 2
  builder.finish();
  ASSERT_EQ(model.tracks.size(), 7u);
  std::vector<std::string> labels;
  for (TrackId track = 3; track < model.tracks.size(); ++track)
    labels.push_back(model.track_label(track));
  EXPECT_EQ(labels,
            (std::vector<std::string>{"thread [overlap 1] (1/1)", "thread [overlap 1] (1/2)",
                                      "thread [overlap 1] (1/3)", "thread [overlap 2] (1/2)"}));
  std::vector<std::string> rows;
  for (SliceId id = 0; id < model.slices.size(); ++id) {
    rows.push_back(std::to_string(model.slices.track[id]) + std::string(model.slice_name(id)));
  }
  EXPECT_EQ(rows, (std::vector<std::string>{"0a", "1a", "1c", "2a", "3b", "4b", "4d", "5b", "6e"}));
  EXPECT_EQ(model.stats.count(Stat::trace_slice_overlap_lane), 6);  // e moved twice
}

TEST(Model, LockSpansPairWaitsObtainsAndReleasesAndCountTheRest) {
  Model model;
  ModelBuilder builder(model);
  const TrackId lock = builder.track(0, TrackKind::kLock, "1", "0");
  const TrackId holder = builder.track(0, TrackKind::kThread, "1", "1");
  const TrackId waiter = builder.track(0, TrackKind::kThread, "1", "2");
  builder.add_lock_event(lock, holder, 0, LockEventKind::kObtain, false);
  builder.add_lock_event(lock, waiter, 5, LockEventKind::kWait, false);
  builder.add_lock_event(lock, holder, 10, LockEventKind::kRelease, false);
  builder.add_lock_event(lock, waiter, 10, LockEventKind::kObtain, false);
  builder.add_lock_event(lock, waiter, 12, LockEventKind::kRelease, false);
  builder.add_lock_event(lock, waiter, 14, LockEventKind::kRelease, false);  // unmatched
  builder.add_lock_event(lock, holder, 20, LockEventKind::kObtain, false);   // never released
  builder.finish();
  StatsRegistry stats;
  const std::vector<LockSpan> spans = derive_lock_spans(model, stats);
  ASSERT_EQ(spans.size(), 4u);
  EXPECT_TRUE(spans[0].hold);
  EXPECT_EQ(spans[0].thread, holder);
  EXPECT_EQ(spans[0].end_ns, 10);
  EXPECT_FALSE(spans[1].hold);
  EXPECT_EQ(spans[1].thread, waiter);
  EXPECT_EQ(spans[1].start_ns, 5);
  EXPECT_EQ(spans[1].end_ns, 10);
  EXPECT_TRUE(spans[2].hold);
  EXPECT_EQ(spans[2].start_ns, 10);
  EXPECT_EQ(spans[2].end_ns, 12);
  EXPECT_EQ(spans[3].start_ns, 20);
  EXPECT_EQ(spans[3].end_ns, 20);  // closed at the end of the trace
  EXPECT_EQ(stats.count(Stat::trace_lock_event_unmatched), 2);
}

}  // namespace
}  // namespace loupe::trace

namespace loupe::trace {
namespace {

// finish() orders a track's rows by (start, longer first, file order) however they arrive: in long
// runs already in order (a thread's events written as two interleaved time ranges per window, a
// duplicate and an enclosing row among them, merged run by run) or one by one out of order (a
// track written backwards, sorted whole). The reference is a stable sort of the rows as added.
TEST(Model, FinishOrdersRowsArrivingInRunsOrOneByOne) {
  Model model;
  ModelBuilder builder(model);
  const TrackId runs = builder.track(0, TrackKind::kThread, "1", "1");
  const TrackId backwards = builder.track(0, TrackKind::kThread, "1", "2");
  struct Row {
    TrackId track;
    int64_t start, end;
  };
  std::vector<Row> rows;
  auto add = [&](TrackId track, int64_t start, int64_t end) {
    builder.add_slice(track, start, end, builder.intern("r" + std::to_string(rows.size())), 0);
    rows.push_back({track, start, end});
  };
  int64_t backwards_at = 1000;
  for (int64_t window = 0; window < 5; ++window) {
    const int64_t at = window * 1000;
    for (int64_t step = 0; step < 40; ++step) add(runs, at + step * 10, at + step * 10 + 5);
    add(backwards, backwards_at, backwards_at + 1);
    --backwards_at;
    for (int64_t step = 0; step < 40; ++step) {
      add(runs, at + step * 10 + 5, at + step * 10 + 10);
      if (step == 1) add(runs, at + 10, at + 15);  // the same as a row of the first range
      if (step == 2) add(runs, at + 20, at + 80);  // encloses rows of both ranges
      add(backwards, backwards_at, backwards_at + 1);
      --backwards_at;
    }
  }
  std::vector<size_t> expected(rows.size());
  for (size_t row = 0; row < rows.size(); ++row) expected[row] = row;
  std::stable_sort(expected.begin(), expected.end(), [&](size_t left, size_t right) {
    if (rows[left].track != rows[right].track) return rows[left].track < rows[right].track;
    if (rows[left].start != rows[right].start) return rows[left].start < rows[right].start;
    return rows[left].end > rows[right].end;
  });
  builder.finish();
  ASSERT_EQ(model.slices.size(), rows.size());
  EXPECT_EQ(model.stats.count(Stat::trace_slice_overlap_lane), 0);
  size_t mismatches = 0;
  for (SliceId id = 0; id < model.slices.size(); ++id) {
    const Row& row = rows[expected[id]];
    mismatches += model.slice_name(id) != "r" + std::to_string(expected[id]);
    mismatches += model.slices.track[id] != row.track || model.slices.start_ns[id] != row.start ||
                  model.slices.end_ns[id] != row.end;
  }
  EXPECT_EQ(mismatches, 0u);
  // Spot checks: the duplicate after its twin, the enclosing row before the row it starts with.
  EXPECT_EQ(model.slice_name(1), "r41");  // window 0: [0,5) then [5,10) from the second range
  EXPECT_EQ(model.slice_name(2), "r1");   // [10,15) as first added
  EXPECT_EQ(model.slice_name(3), "r44");  // its duplicate
  EXPECT_EQ(model.slice_name(5), "r47");  // [20,80) encloses [20,25)
  EXPECT_EQ(model.slice_name(6), "r2");
  EXPECT_EQ(model.slices.parent[6], 5u);
}

// `copies` repetitions, `period` ns apart, of: on a thread, a root with two children and a
// grandchild added children first; on a stream, two kernels; two flows from the thread's
// children to the kernels (one bound to the next slice). Rows arrive interleaved across tracks.
Model repeated_model(size_t copies, int64_t period) {
  Model model;
  ModelBuilder builder(model);
  const TrackId thread = builder.track(0, TrackKind::kThread, "1", "1");
  const TrackId stream = builder.track(0, TrackKind::kGpuStream, "0", "7");
  const StringId root = builder.intern("root"), child = builder.intern("child"),
                 grandchild = builder.intern("grandchild"), kernel = builder.intern("kernel"),
                 flow = builder.intern("ac2g");
  for (size_t copy = 0; copy < copies; ++copy) {
    const int64_t at = static_cast<int64_t>(copy) * period;
    builder.add_slice(thread, at + 20, at + 30, child, 0);
    builder.add_slice(stream, at + 40, at + 60, kernel, 0);
    builder.add_slice(thread, at + 0, at + 100, root, 0);
    builder.add_slice(thread, at + 10, at + 20, child, 0);
    builder.add_slice(thread, at + 12, at + 15, grandchild, 0);
    builder.add_slice(stream, at + 70, at + 90, kernel, 0);
    builder.add_flow(flow, thread, at + 13, stream, at + 45, false);
    builder.add_flow(flow, thread, at + 25, stream, at + 65, true);
  }
  builder.finish();
  return model;
}

// finish() sorts, permutes and binds flows on two threads past 200,000 rows: the large model
// must be the small one repeated, row for row.
TEST(Model, LargeModelIsTheSmallOneRepeated) {
  constexpr int64_t kPeriod = 1000;
  constexpr size_t kCopies = 50'000;  // 300,000 slices, 100,000 flows
  const Model small = repeated_model(1, kPeriod);
  const Model large = repeated_model(kCopies, kPeriod);
  ASSERT_EQ(small.slices.size(), 6u);
  ASSERT_EQ(large.slices.size(), 6 * kCopies);
  // Per track in the small model: its first row and row count (rows are grouped by track).
  const size_t thread_rows = 4, stream_rows = 2;
  ASSERT_EQ(small.slices.track[0], small.slices.track[thread_rows - 1]);
  auto large_row = [&](SliceId small_row, size_t copy) -> SliceId {
    if (small_row == kNoSlice) return kNoSlice;
    if (small_row < thread_rows) return static_cast<SliceId>(copy * thread_rows + small_row);
    return static_cast<SliceId>(kCopies * thread_rows + copy * stream_rows +
                                (small_row - thread_rows));
  };
  size_t mismatches = 0;
  for (size_t copy = 0; copy < kCopies; ++copy) {
    const int64_t shift = static_cast<int64_t>(copy) * kPeriod;
    for (SliceId row = 0; row < small.slices.size(); ++row) {
      const SliceId big = large_row(row, copy);
      mismatches += large.slices.start_ns[big] != small.slices.start_ns[row] + shift;
      mismatches += large.slices.end_ns[big] != small.slices.end_ns[row] + shift;
      mismatches += large.slice_name(big) != small.slice_name(row);
      mismatches += large.slices.depth[big] != small.slices.depth[row];
      mismatches += large.slices.parent[big] != large_row(small.slices.parent[row], copy);
    }
    for (size_t flow = 0; flow < small.flows.size(); ++flow) {
      const size_t big = copy * small.flows.size() + flow;
      mismatches += large.flows.from_slice[big] != large_row(small.flows.from_slice[flow], copy);
      mismatches += large.flows.to_slice[big] != large_row(small.flows.to_slice[flow], copy);
      mismatches += large.flows.from_ns[big] != small.flows.from_ns[flow] + shift;
    }
  }
  EXPECT_EQ(mismatches, 0u);
  // The small model itself, as nesting and binding say it must be.
  EXPECT_EQ(small.slices.depth, (std::vector<uint32_t>{0, 1, 2, 1, 0, 0}));
  EXPECT_EQ(small.flows.from_slice, (std::vector<SliceId>{2, 3}));  // grandchild, second child
  EXPECT_EQ(small.flows.to_slice, (std::vector<SliceId>{4, 5}));    // inside, next after
}

}  // namespace
}  // namespace loupe::trace
