// load_traces of several files parses them on worker threads, each into a model of its own, and
// appends those in the files' order as they finish (ModelBuilder::append): the result must be the
// model of a serial import (threads = 1: one builder, one file after the other), column for
// column, whatever the number of workers.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "loupe/error.hpp"
#include "trace/import/import.hpp"

namespace loupe::trace {
namespace {

namespace fs = std::filesystem;
const fs::path kGolden = LOUPE_TRACE_GOLDEN_DIR;

void expect_same_model(const Model& parallel, const Model& serial);

TEST(ParallelImport, SeveralFilesGiveTheModelOfASerialImportColumnForColumn) {
  // Kineto with flows, GPU streams and args; Chrome corner cases (overlap lanes, instants,
  // counters); loupe binary traces with locks; one file twice.
  const std::vector<std::string> paths = {
      (kGolden / "kineto_gpu_default" / "input.json").string(),
      (kGolden / "chrome_corner_cases" / "input.json").string(),
      (kGolden / "locks_binary" / "input.loupetrace").string(),
      (kGolden / "kineto_overlap_gaps" / "input.json").string(),
      (kGolden / "diff_chrome" / "a.json").string(),
      (kGolden / "locks_binary" / "input.loupetrace").string(),
  };
  const Model serial = load_traces(paths, false, {}, /*threads=*/1);
  for (const unsigned threads : {2u, 3u, 8u}) {
    SCOPED_TRACE(threads);
    expect_same_model(load_traces(paths, false, {}, threads), serial);
  }
}

void expect_same_model(const Model& parallel, const Model& serial) {
  ASSERT_EQ(parallel.strings.size(), serial.strings.size());
  for (StringId id = 0; id < serial.strings.size(); ++id) {
    EXPECT_EQ(parallel.strings.get(id), serial.strings.get(id)) << id;
  }
  ASSERT_EQ(parallel.tracks.size(), serial.tracks.size());
  for (size_t id = 0; id < serial.tracks.size(); ++id) {
    const Track& a = parallel.tracks[id];
    const Track& b = serial.tracks[id];
    EXPECT_TRUE(a.kind == b.kind && a.name == b.name && a.process_name == b.process_name &&
                a.pid == b.pid && a.tid == b.tid && a.file_index == b.file_index &&
                a.lane == b.lane && a.overlap_level == b.overlap_level && a.main == b.main)
        << "track " << id << ": " << a.name << " vs " << b.name;
  }
  EXPECT_GT(serial.slices.size(), 0u);
  EXPECT_EQ(parallel.slices.start_ns, serial.slices.start_ns);
  EXPECT_EQ(parallel.slices.end_ns, serial.slices.end_ns);
  EXPECT_EQ(parallel.slices.track, serial.slices.track);
  EXPECT_EQ(parallel.slices.name, serial.slices.name);
  EXPECT_EQ(parallel.slices.category, serial.slices.category);
  EXPECT_EQ(parallel.slices.depth, serial.slices.depth);
  EXPECT_EQ(parallel.slices.parent, serial.slices.parent);
  EXPECT_EQ(parallel.slices.args, serial.slices.args);
  EXPECT_EQ(parallel.args_text, serial.args_text);
  EXPECT_EQ(parallel.instants.ts_ns, serial.instants.ts_ns);
  EXPECT_EQ(parallel.instants.track, serial.instants.track);
  EXPECT_EQ(parallel.instants.name, serial.instants.name);
  EXPECT_EQ(parallel.counters.ts_ns, serial.counters.ts_ns);
  EXPECT_EQ(parallel.counters.track, serial.counters.track);
  EXPECT_EQ(parallel.counters.value, serial.counters.value);
  EXPECT_GT(serial.flows.size(), 0u);
  EXPECT_EQ(parallel.flows.name, serial.flows.name);
  EXPECT_EQ(parallel.flows.from_slice, serial.flows.from_slice);
  EXPECT_EQ(parallel.flows.to_slice, serial.flows.to_slice);
  EXPECT_EQ(parallel.flows.from_track, serial.flows.from_track);
  EXPECT_EQ(parallel.flows.to_track, serial.flows.to_track);
  EXPECT_GT(serial.lock_events.size(), 0u);
  EXPECT_EQ(parallel.lock_events.ts_ns, serial.lock_events.ts_ns);
  EXPECT_EQ(parallel.lock_events.lock, serial.lock_events.lock);
  EXPECT_EQ(parallel.lock_events.thread, serial.lock_events.thread);
  EXPECT_EQ(parallel.lock_events.kind, serial.lock_events.kind);
  ASSERT_EQ(parallel.files.size(), serial.files.size());
  for (size_t index = 0; index < serial.files.size(); ++index) {
    const FileInfo& a = parallel.files[index];
    const FileInfo& b = serial.files[index];
    EXPECT_TRUE(a.path == b.path && a.format == b.format && a.clock_domain == b.clock_domain &&
                a.offset_ns == b.offset_ns && a.events == b.events && a.rank == b.rank &&
                a.rank_source == b.rank_source && a.world_size == b.world_size)
        << "file " << index << ": " << a.path;
  }
  EXPECT_EQ(parallel.alignment, serial.alignment);
  for (size_t stat = 0; stat < static_cast<size_t>(Stat::kCount); ++stat) {
    EXPECT_EQ(parallel.stats.count(static_cast<Stat>(stat)),
              serial.stats.count(static_cast<Stat>(stat)))
        << stat;
  }
  EXPECT_EQ(parallel.start_ns, serial.start_ns);
  EXPECT_EQ(parallel.end_ns, serial.end_ns);
}

// A bad file among good ones fails the load as a serial import would: the first bad file in the
// files' order, named.
TEST(ParallelImport, TheFirstBadFileInOrderIsTheError) {
  const std::string good = (kGolden / "diff_chrome" / "a.json").string();
  const std::string big = (kGolden / "kineto_gpu_default" / "input.json").string();
  for (const unsigned threads : {1u, 2u, 4u}) {
    SCOPED_TRACE(threads);
    try {
      load_traces({big, good, "/nonexistent/rank-2.json", good, "/nonexistent/rank-4.json", good},
                  false, {}, threads);
      FAIL() << "expected an error";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInput);
      EXPECT_EQ(error.message(), "cannot open trace file '/nonexistent/rank-2.json'");
    }
  }
}

}  // namespace
}  // namespace loupe::trace
