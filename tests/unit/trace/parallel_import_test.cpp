// load_traces of several files parses them on worker threads, each into a model of its own, and
// appends those in the files' order as they finish (ModelBuilder::append): the result must be the
// model of a serial import (threads = 1: one builder, one file after the other), column for
// column, whatever the number of workers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "loupe/error.hpp"
#include "trace/import/import.hpp"

namespace loupe::trace {
namespace {

namespace fs = std::filesystem;
const fs::path kGolden = LOUPE_TRACE_GOLDEN_DIR;

// `complete`: the inputs hold flows and lock events, so those columns are compared non-empty.
void expect_same_model(const Model& parallel, const Model& serial, bool complete = true);

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

TEST(ParallelImport, ALargeFileReadInPartsOnThreadsOfTheirOwnGivesTheOneThreadModel) {
  // Over 8 MiB: the file is read in parts, each on a thread of its own, cut where an event
  // likely starts; the same text from memory is read by one reader on the calling thread.
  std::string text = large_chrome_text(90000);
  ASSERT_GT(text.size(), size_t{9} << 20);
  const std::string path = write_text("large.json", text);
  Model piped;
  size_t parts = 0;
  {
    ModelBuilder builder(piped);
    JsonReadOptions options;
    options.threads = 2;
    options.parts_joined = &parts;
    import_chrome_json_file(path, builder, 0, options);
    builder.finish();
  }
  EXPECT_EQ(parts, 2u);
  Model serial;
  {
    ModelBuilder builder(serial);
    JsonReadOptions options;
    options.threads = 1;
    import_chrome_json(text, path, builder, 0, options);
    builder.finish();
  }
  expect_same_model(piped, serial, /*complete=*/false);
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
  // An event without the ':' after a key: the scanner leaves it to the fallback, whose structure
  // check names the byte where the ':' was expected and the event it lies in.
  const size_t event = text.rfind("{\"ph\":\"X\"", text.size() - 1000);
  ASSERT_NE(event, std::string::npos);
  std::string no_colon = text;
  no_colon[event + 5] = ' ';
  const std::string colon_path = write_text("colon.json", no_colon);
  std::string message = load_error(colon_path);
  fs::remove(colon_path);
  EXPECT_NE(message.find("offset " + std::to_string(event + 6) +
                         ": expected ':' after a key, found '\"' (in the event at offset " +
                         std::to_string(event) + ")"),
            std::string::npos)
      << message;
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

void expect_same_model(const Model& parallel, const Model& serial, bool complete) {
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
  EXPECT_TRUE(!complete || serial.slices.size() > 0);
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
  EXPECT_TRUE(!complete || serial.flows.size() > 0);
  EXPECT_EQ(parallel.flows.name, serial.flows.name);
  EXPECT_EQ(parallel.flows.from_slice, serial.flows.from_slice);
  EXPECT_EQ(parallel.flows.to_slice, serial.flows.to_slice);
  EXPECT_EQ(parallel.flows.from_track, serial.flows.from_track);
  EXPECT_EQ(parallel.flows.to_track, serial.flows.to_track);
  EXPECT_TRUE(!complete || serial.lock_events.size() > 0);
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

// A small Kineto-shaped text with what a cut between parts must survive: events whose strings
// hold '{', '}', ',' and escaped quotes (a fake event inside a name), an args object holding an
// array of event-like objects, arrays of objects before the event list, a non-object element,
// begin/end pairs, flows and launch/kernel pairs spanning the text, metadata naming a thread
// after its first event, a text flow id, lanes, counters, raw control characters and invalid
// UTF-8, and members after the list. `element_starts` receives the offset of every element of
// the event list.
std::string awkward_text(std::vector<uint64_t>& element_starts, bool object_form = true) {
  std::string text;
  if (object_form) {
    text =
        "{\"schemaVersion\": 1, \"deviceProperties\": [{\"id\": 0, \"name\": \"H100\"}, "
        "{\"id\": 1}],\n \"traceEvents\": [\n";
  } else {
    text = "[\n";
  }
  const std::vector<std::string> events = {
      R"({"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":1,"dur":50})",
      R"({"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":2,"dur":3,"args":{"correlation":7}})",
      R"({"ph":"X","cat":"cpu_op","name":"x}, {\"ph\":\"X\",\"name\":\"fake\"}, {\"a\":[1,{}]},","pid":1,"tid":1,"ts":6,"dur":4})",
      R"({"ph":"B","name":"step","pid":1,"tid":2,"ts":3})",
      R"({"ph":"s","cat":"ac2g","name":"ac2g","id":"text-id","pid":1,"tid":1,"ts":2})",
      R"({"ph":"X","cat":"python_function","name":"forward","pid":1,"tid":1,"ts":1,"dur":60})",
      "42",
      R"({"ph":"X","cat":"cpu_op","name":"nested","pid":1,"tid":1,"ts":12,"dur":2,"args":{"list":[{"ph":"X","ts":1}, {"ph":"i","ts":2}],"s":"}, {"}})",
      R"({"ph":"C","name":"memory","pid":1,"tid":1,"ts":13,"args":{"allocated":5}})",
      R"({"ph":"X","cat":"cpu_op","name":"ctrl)"
      "\x01"
      R"(name","pid":1,"tid":1,"ts":15,"dur":1})",
      R"({"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":20,"dur":10,"args":{"correlation":7}})",
      R"({"ph":"f","cat":"ac2g","name":"ac2g","id":"text-id","pid":0,"tid":7,"ts":20,"bp":"e"})",
      R"({"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"main thread"}})",
      R"({"ph":"X","cat":"cpu_op","name":"bad)"
      "\xff"
      R"(utf8","pid":1,"tid":3,"ts":21,"dur":2})",
      R"({"ph":"E","pid":1,"tid":2,"ts":40})",
      R"({"ph":"i","name":"mark","pid":1,"tid":2,"ts":41,"s":"t"})",
      R"({"ph":"X","cat":"gpu_user_annotation","name":"region","pid":0,"tid":7,"ts":19,"dur":12})",
      R"({"ph":"M","name":"process_name","pid":0,"args":{"name":"GPU 0"}})",
      R"({"ph":"X","cat":"cpu_op","name":"tail","pid":1,"tid":4,"ts":50,"dur":5})",
  };
  for (size_t index = 0; index < events.size(); ++index) {
    if (index > 0) text += index % 3 == 0 ? ",\n  " : ",";
    element_starts.push_back(text.size());
    text += events[index];
  }
  text += object_form ? "\n],\n\"baseTimeNanoseconds\": 1000, \"distributedInfo\": {\"rank\": 3, "
                        "\"world_size\": 8}}\n"
                      : "\n]\n";
  return text;
}

// `keep_args`: the slices' args objects kept (trace export, several files), re-based per part.
Model read_text(std::string text, const JsonReadOptions& options, bool keep_args = false) {
  Model model;
  ModelBuilder builder(model);
  builder.keep_args(keep_args);
  import_chrome_json(text, "parts.json", builder, 0, options);
  builder.finish();
  return model;
}

Model read_alone(const std::string& text, bool keep_args = false) {
  JsonReadOptions options;
  options.threads = 1;
  return read_text(text, options, keep_args);
}

// The parts the reader joins for `split_at`: one plus each offset where an element of the event
// list starts (the part reading there stops at it); any other offset is passed over.
size_t expected_parts(const std::vector<uint64_t>& split_at,
                      const std::vector<uint64_t>& element_starts) {
  size_t parts = 1;
  for (const uint64_t offset : split_at) {
    parts += std::count(element_starts.begin(), element_starts.end(), offset) > 0 ? 1 : 0;
  }
  return parts;
}

TEST(ParallelImport, APartCutAtAnyByteGivesTheOneThreadModel) {
  for (const bool object_form : {true, false}) {
    std::vector<uint64_t> element_starts;
    const std::string text = awkward_text(element_starts, object_form);
    // The object form keeps the args, the array form does not.
    const Model alone = read_alone(text, /*keep_args=*/object_form);
    ASSERT_EQ(alone.slices.size(), 11u);
    EXPECT_EQ(alone.args_text.empty(), !object_form);
    ASSERT_EQ(alone.files[0].rank, object_form ? 3 : -1);
    EXPECT_EQ(alone.stats.count(Stat::trace_json_invalid_utf8), 1);
    EXPECT_EQ(alone.stats.count(Stat::trace_json_event_malformed), 1);  // the 42
    size_t cut_at_elements = 0;
    for (uint64_t offset = 0; offset <= text.size(); ++offset) {
      SCOPED_TRACE(::testing::Message() << "object form " << object_form << ", cut at " << offset
                                        << ": ..." << text.substr(offset, 24));
      size_t parts = 0;
      JsonReadOptions options;
      options.split_at = {offset};
      options.parts_joined = &parts;
      expect_same_model(read_text(text, options, object_form), alone, /*complete=*/false);
      EXPECT_EQ(parts, expected_parts(options.split_at, element_starts));
      cut_at_elements += parts - 1;
    }
    // Every element is a place where a part starts (at the first, the part before reads none).
    EXPECT_EQ(cut_at_elements, element_starts.size());
  }
}

TEST(ParallelImport, SeveralCutsAnywhereGiveTheOneThreadModel) {
  std::vector<uint64_t> element_starts;
  const std::string text = awkward_text(element_starts);
  const Model alone = read_alone(text);
  // Three cuts: one at a byte, one a little after it, one at an element (several parts, some
  // cuts passed over by the part before, a part that stops at a later part's start).
  for (uint64_t offset = 0; offset < text.size(); offset += 23) {
    for (size_t index = offset % 2; index < element_starts.size(); index += 2) {
      const uint64_t element = element_starts[index];
      SCOPED_TRACE(::testing::Message()
                   << "cuts at " << offset << ", " << offset + 29 << ", " << element);
      size_t parts = 0;
      JsonReadOptions options;
      options.split_at = {offset, offset + 29, element};
      options.parts_joined = &parts;
      expect_same_model(read_text(text, options), alone, /*complete=*/false);
      std::vector<uint64_t> distinct = options.split_at;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      EXPECT_EQ(parts, expected_parts(distinct, element_starts));
    }
  }
}

// The error of a text read in parts, or the model; `message` empty when it read.
std::string read_error(const std::string& text, const JsonReadOptions& options, std::string* hint) {
  try {
    (void)read_text(text, options);
  } catch (const Error& error) {
    if (hint != nullptr) *hint = error.hint();
    return error.message();
  }
  return {};
}

TEST(ParallelImport, ABrokenOrCutTextReadInPartsFailsOrRepairsAsOneReaderDoes) {
  std::vector<uint64_t> element_starts;
  const std::string text = awkward_text(element_starts);
  // Broken late (no ':' after a key, after the invalid UTF-8: the hint says the file is not
  // JSON), broken early and late (the first break is the error), content after the end, and cut
  // mid-event (read with the cut counted).
  std::string late = text;
  late[element_starts[17] + 5] = ' ';
  std::string twice = late;
  twice[element_starts[3] + 5] = ' ';
  const std::string after_end = text + "{}";
  const std::string cut = text.substr(0, element_starts[15] + 9);
  for (const std::string* broken :
       {&std::as_const(late), &std::as_const(twice), &after_end, &cut}) {
    JsonReadOptions alone_options;
    alone_options.threads = 1;
    std::string alone_hint;
    const std::string alone_error = read_error(*broken, alone_options, &alone_hint);
    EXPECT_EQ(alone_error.empty(), broken == &cut);
    const Model alone = broken == &cut ? read_alone(*broken) : Model();
    for (uint64_t offset = 0; offset <= broken->size(); offset += 3) {
      SCOPED_TRACE(::testing::Message() << "cut at " << offset);
      JsonReadOptions options;
      options.split_at = {offset};
      std::string hint;
      EXPECT_EQ(read_error(*broken, options, &hint), alone_error);
      EXPECT_EQ(hint, alone_hint);
      if (broken == &cut) expect_same_model(read_text(*broken, options), alone, false);
    }
  }
}

TEST(ParallelImport, KinetoFixturesCutNearEveryObjectGiveTheOneThreadModel) {
  const fs::path fixtures = LOUPE_KINETO_FIXTURE_DIR;
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(fixtures)) {
    if (entry.path().extension() != ".gz") continue;
    ++files;
    const std::string text = read_trace_bytes(entry.path().string());
    const Model alone = read_alone(text);
    size_t joined = 0;
    // 12 places through the file; at each, cuts at the byte and at the next three '{' (an
    // event's or one inside its args).
    for (size_t place = 1; place < 12; ++place) {
      const uint64_t at = text.size() / 12 * place;
      std::vector<uint64_t> cuts = {at};
      for (size_t brace = text.find('{', at); brace != std::string::npos && cuts.size() < 4;
           brace = text.find('{', brace + 1)) {
        cuts.push_back(brace);
      }
      for (const uint64_t cut : cuts) {
        SCOPED_TRACE(entry.path().filename().string() + " cut at " + std::to_string(cut));
        size_t parts = 0;
        JsonReadOptions options;
        options.split_at = {cut};
        options.parts_joined = &parts;
        expect_same_model(read_text(text, options), alone, /*complete=*/false);
        joined += parts - 1;
      }
    }
    EXPECT_GT(joined, 0u) << entry.path();  // some cut fell where an event starts
  }
  EXPECT_GE(files, 11u);
}

}  // namespace
}  // namespace loupe::trace
