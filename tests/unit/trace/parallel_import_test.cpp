// load_traces of several files parses them on worker threads, each into a model of its own, and
// appends those in the files' order as they finish (ModelBuilder::append): the result must be the
// model of a serial import (threads = 1: one builder, one file after the other), column for
// column, whatever the number of workers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
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

// A JSON text of `events` Kineto-shaped events (launches, kernels, flows, begin/end pairs,
// counters, metadata) with the defects real files carry spread through it: names with escapes
// (read by the On-Demand fallback), raw control characters and invalid UTF-8 in strings.
std::string large_chrome_text(int events) {
  std::string text = "{\"schemaVersion\":1,\"traceEvents\":[\n";
  text += R"({"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"main"}})";
  for (int index = 0; index < events; ++index) {
    const std::string ts = std::to_string(index * 10) + "." + std::to_string(index % 1000);
    std::string name = "op_" + std::to_string(index % 97);
    if (index % 1009 == 0) name += "\\\"quoted\\\"";
    if (index % 4001 == 0) name += '\x01';
    if (index % 7001 == 0) name += '\xff';
    text += ",\n";
    switch (index % 5) {
      case 0:
        text += R"({"ph":"X","cat":"cuda_runtime","name":")" + name + R"(","pid":1,"tid":1,"ts":)" +
                ts + R"(,"dur":3.5,"args":{"correlation":)" + std::to_string(index) + "}}";
        break;
      case 1:
        text += R"({"ph":"X","cat":"kernel","name":")" + name + R"(","pid":0,"tid":7,"ts":)" + ts +
                R"(,"dur":5.25,"args":{"correlation":)" + std::to_string(index - 1) +
                R"(,"grid":[132,1,1]}})";
        break;
      case 2:
        text += R"({"ph":"s","cat":"ac2g","name":"ac2g","id":)" + std::to_string(index) +
                R"(,"pid":1,"tid":1,"ts":)" + ts + "},\n" +
                R"({"ph":"f","cat":"ac2g","name":"ac2g","id":)" + std::to_string(index) +
                R"(,"pid":0,"tid":7,"ts":)" + ts + R"(,"bp":"e"})";
        break;
      case 3:
        text += R"({"ph":"B","name":")" + name + R"(","pid":1,"tid":2,"ts":)" + ts + "},\n" +
                R"({"ph":"E","pid":1,"tid":2,"ts":)" + ts + "5}";
        break;
      default:
        text += R"({"ph":"C","name":"memory","pid":1,"tid":1,"ts":)" + ts +
                R"(,"args":{"allocated":)" + std::to_string(index % 13) + "}}";
        break;
    }
  }
  text += "\n],\"baseTimeNanoseconds\":1000}\n";
  return text;
}

std::string write_text(const std::string& file_name, const std::string& text) {
  const fs::path path = fs::temp_directory_path() /
                        ("loupe-pipeline-" + std::to_string(::getpid()) + "-" + file_name);
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

// The message of the Error a load throws; fails the test when it throws none.
std::string load_error(const std::string& path) {
  try {
    (void)load_traces({path});
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    return error.message();
  }
  ADD_FAILURE() << "expected an input error";
  return {};
}

TEST(ParallelImport, ALargeFileSplitOnOneThreadAndAppliedOnAnotherGivesTheOneThreadModel) {
  // Over 8 MiB: the file is split and scanned on a thread of its own while load_traces' thread
  // applies the events; the same text from memory is read on one thread.
  std::string text = large_chrome_text(90000);
  ASSERT_GT(text.size(), size_t{9} << 20);
  const std::string path = write_text("large.json", text);
  const Model piped = load_traces({path});
  Model serial;
  {
    ModelBuilder builder(serial);
    import_chrome_json(text, path, builder, 0);
    builder.finish();
  }
  fs::remove(path);
  ASSERT_EQ(piped.strings.size(), serial.strings.size());
  for (StringId id = 0; id < serial.strings.size(); ++id) {
    EXPECT_EQ(piped.strings.get(id), serial.strings.get(id)) << id;
  }
  ASSERT_EQ(piped.tracks.size(), serial.tracks.size());
  EXPECT_EQ(serial.slices.size(), 90000u / 5 * 3);  // launches, kernels, begin/end pairs
  EXPECT_EQ(piped.slices.start_ns, serial.slices.start_ns);
  EXPECT_EQ(piped.slices.end_ns, serial.slices.end_ns);
  EXPECT_EQ(piped.slices.track, serial.slices.track);
  EXPECT_EQ(piped.slices.name, serial.slices.name);
  EXPECT_EQ(piped.counters.ts_ns, serial.counters.ts_ns);
  EXPECT_EQ(piped.counters.value, serial.counters.value);
  EXPECT_EQ(piped.flows.from_slice, serial.flows.from_slice);
  EXPECT_EQ(piped.flows.to_slice, serial.flows.to_slice);
  // ac2g flows, and a flow from each launch to its kernel by correlation id (0 is not an id).
  EXPECT_EQ(serial.flows.size(), 90000u / 5 * 2 - 1);
  EXPECT_EQ(piped.files[0].offset_ns, 1000);
  for (const Stat stat : {Stat::trace_json_control_character, Stat::trace_json_invalid_utf8,
                          Stat::trace_json_event_malformed, Stat::trace_flow_unmatched}) {
    EXPECT_EQ(piped.stats.count(stat), serial.stats.count(stat)) << static_cast<int>(stat);
  }
  // The defects of the events that carry a name (phases X and B: index % 5 in {0, 1, 3}).
  EXPECT_EQ(serial.stats.count(Stat::trace_json_control_character), 14);
  EXPECT_EQ(serial.stats.count(Stat::trace_json_invalid_utf8), 8);
  // Names with escapes were read by the On-Demand fallback, unescaped.
  bool unescaped = false;
  for (StringId id = 0; id < serial.strings.size(); ++id) {
    unescaped |= serial.strings.get(id) == "op_0\"quoted\" ?";
  }
  EXPECT_TRUE(unescaped);
}

TEST(ParallelImport, ALargeFileBrokenLateIsRefusedAtTheOffsetOfTheBreak) {
  std::string text = large_chrome_text(90000);
  // An event without the ':' after a key: the scanner leaves it to the On-Demand reader, which
  // refuses it.
  const size_t event = text.rfind("{\"ph\":\"X\"", text.size() - 1000);
  ASSERT_NE(event, std::string::npos);
  std::string no_colon = text;
  no_colon[event + 5] = ' ';
  const std::string colon_path = write_text("colon.json", no_colon);
  std::string message = load_error(colon_path);
  fs::remove(colon_path);
  EXPECT_NE(message.find("offset " + std::to_string(event) + ":"), std::string::npos) << message;
  // A bracket that closes what it did not open.
  std::string mismatched = text;
  const size_t close = text.find('}', event);
  mismatched[close] = ']';
  const std::string bracket_path = write_text("bracket.json", mismatched);
  message = load_error(bracket_path);
  fs::remove(bracket_path);
  EXPECT_NE(message.find("offset " + std::to_string(close) + ": ']' closes a '{'"),
            std::string::npos)
      << message;
  // Cut mid-event: every complete event is read and the cut is counted.
  const std::string cut_path = write_text("cut.json", text.substr(0, event + 20));
  const Model cut = load_traces({cut_path});
  fs::remove(cut_path);
  EXPECT_EQ(cut.stats.count(Stat::trace_json_truncated), 1);
  EXPECT_GT(cut.slices.size(), 90000u / 5 * 3 - 10);
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
