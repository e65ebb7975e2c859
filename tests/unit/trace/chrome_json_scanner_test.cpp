// The Chrome importer's two readers of an event — the byte scanner for ordinary events and the
// On-Demand fallback for events with escaped strings — must agree on every field rule. Each case
// is imported twice: as written (scanner) and with its category spelled with an escape, which
// sends the event to the fallback and leaves its meaning unchanged.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trace/import/import.hpp"

namespace loupe::trace {
namespace {

Model load_events(const std::vector<std::string>& events) {
  std::string text = "{\"traceEvents\":[\n";
  for (size_t index = 0; index < events.size(); ++index) {
    text += events[index];
    text += index + 1 == events.size() ? "\n" : ",\n";
  }
  text += "]}";
  Model model;
  ModelBuilder builder(model);
  import_chrome_json(text, "scanner.json", builder, 0);
  builder.finish();
  return model;
}

// The category "user" becomes "us\u0065r": the same string, read by the fallback.
std::vector<std::string> escaped(std::vector<std::string> events) {
  for (std::string& event : events) {
    const size_t at = event.find("\"user\"");
    EXPECT_NE(at, std::string::npos) << event;
    if (at != std::string::npos) event.replace(at, 6, "\"us\\u0065r\"");
  }
  return events;
}

// Everything the analyses read, one line per row.
std::vector<std::string> describe(const Model& model) {
  std::vector<std::string> lines;
  for (TrackId id = 0; id < model.tracks.size(); ++id) {
    const Track& track = model.tracks[id];
    lines.push_back("track " + std::string(track_kind_name(track.kind)) + " " + track.name + " " +
                    track.pid + "/" + track.tid + " " + track.process_name);
  }
  const SliceTable& slices = model.slices;
  for (SliceId id = 0; id < slices.size(); ++id) {
    lines.push_back("slice " + std::to_string(slices.track[id]) + " " +
                    std::to_string(slices.start_ns[id]) + " " + std::to_string(slices.end_ns[id]) +
                    " " + std::string(model.slice_name(id)) + " " +
                    std::string(model.strings.get(slices.category[id])) + " d" +
                    std::to_string(slices.depth[id]) + " p" + std::to_string(slices.parent[id]));
  }
  for (size_t row = 0; row < model.instants.size(); ++row) {
    lines.push_back("instant " + std::to_string(model.instants.track[row]) + " " +
                    std::to_string(model.instants.ts_ns[row]) + " " +
                    std::string(model.strings.get(model.instants.name[row])));
  }
  for (size_t row = 0; row < model.counters.size(); ++row) {
    lines.push_back("counter " + std::to_string(model.counters.track[row]) + " " +
                    std::to_string(model.counters.ts_ns[row]) + " " +
                    std::to_string(model.counters.value[row]));
  }
  for (size_t row = 0; row < model.flows.size(); ++row) {
    lines.push_back("flow " + std::to_string(model.flows.from_slice[row]) + " -> " +
                    std::to_string(model.flows.to_slice[row]) + " " +
                    std::to_string(model.flows.from_ns[row]) + " " +
                    std::to_string(model.flows.to_ns[row]));
  }
  for (size_t stat = 0; stat < static_cast<size_t>(Stat::kCount); ++stat) {
    const int64_t count = model.stats.count(static_cast<Stat>(stat));
    if (count != 0) {
      lines.push_back("stat " + std::string(stat_info(static_cast<Stat>(stat)).name) + " " +
                      std::to_string(count));
    }
  }
  lines.push_back("events " + std::to_string(model.files[0].events));
  return lines;
}

void expect_readers_agree(const std::vector<std::string>& events) {
  const std::vector<std::string> scanned = describe(load_events(events));
  const std::vector<std::string> fallback = describe(load_events(escaped(events)));
  EXPECT_EQ(scanned, fallback);
}

TEST(ChromeJsonScanner, AgreesWithOnDemandOnOrdinaryEvents) {
  const std::vector<std::string> events = {
      R"({"ph":"X","cat":"user","name":"outer","pid":1,"tid":2,"ts":1.5,"dur":10})",
      R"({ "ph" : "X" , "cat" : "user" , "name" : "inner" , "pid" : 1 , "tid" : 2 ,)"
      R"( "ts" : 2.0005 , "dur" : 1e0 })",
      R"({"ph":"B","cat":"user","name":"b","pid":"p","tid":"t","ts":"3.25"})",
      R"({"ph":"E","cat":"user","pid":"p","tid":"t","ts":4})",
      R"({"ph":"i","cat":"user","name":"tick","s":"t","pid":1,"tid":2,"ts":5.000})",
      R"({"ph":"s","cat":"user","name":"f","id":18446744073709551616,"pid":1,"tid":2,"ts":3})",
      R"({"ph":"f","cat":"user","name":"f","id":18446744073709551616,"pid":1,"tid":3,)"
      R"("ts":4,"bp":"e"})",
      R"({"ph":"X","cat":"user","name":"gpu","pid":0,"tid":7,"ts":4,"dur":2})",
      R"({"ph":"C","cat":"user","name":"queue","pid":1,"ts":1,"args":{"depth":3,"b":2.5}})",
      R"({"ph":"M","cat":"user","name":"thread_name","pid":1,"tid":2,"args":{"name":"main "}})"};
  expect_readers_agree(events);
  // The scanner did read these: no event was dropped, the flow matched, the counter has 2 series.
  const Model model = load_events(events);
  EXPECT_EQ(model.slices.size(), 4u);
  EXPECT_EQ(model.flows.size(), 1u);
  EXPECT_EQ(model.counters.size(), 2u);
  EXPECT_EQ(model.stats.count(Stat::trace_json_id_beyond_int64), 2);
  EXPECT_EQ(model.slices.start_ns[1], 2001);  // 2.0005 us rounds half up to 2001 ns
}

TEST(ChromeJsonScanner, AgreesWithOnDemandOnNestedArgsAndUnknownKeys) {
  expect_readers_agree(
      {R"({"ph":"X","cat":"user","name":"k","pid":0,"tid":7,"ts":1,"dur":2,)"
       R"("args":{"grid":[1,[2,{"x":"}]"}],3],"s":"a\"{b","e":{}},"extra":[{"ph":"B"}]})",
       R"({"odd\"key":1,"ph":"X","cat":"user","name":"k2","pid":0,"tid":7,"ts":4,"dur":1,)"
       R"("more":{"ts":"not this"},"flag":true,"none":null})",
       R"({"ph":"X","cat":"user","name":"w","pid":0,"tid":7,"ts":	6	,"dur":)"
       "\r\n"
       R"(1})"});
}

// The scanner skips a long args object 64 bytes at a time as masks until a block holds a
// backslash: quoted brackets, an escaped quote and the object's end land at every offset of a
// block, and the fields after the object are still read.
TEST(ChromeJsonScanner, AgreesWithOnDemandOnLongArgsAtEveryBlockOffset) {
  std::vector<std::string> events;
  for (int pad = 0; pad < 130; ++pad) {
    const std::string filler(static_cast<size_t>(pad), 'a');
    events.push_back(R"({"ph":"X","cat":"user","args":{"a":")" + filler +
                     R"(]}{[","b":[{"c":"}"},[1,2]],"d":{"e":"x\"}]"}},"name":"n)" +
                     std::to_string(pad) + R"(","pid":1,"tid":2,"ts":)" + std::to_string(pad) +
                     R"(,"dur":1})");
  }
  expect_readers_agree(events);
  const Model model = load_events(events);
  ASSERT_EQ(model.slices.size(), 130u);
  for (SliceId id = 0; id < model.slices.size(); ++id) {
    EXPECT_EQ(model.slice_name(id), "n" + std::to_string(model.slices.start_ns[id] / 1000));
  }
}

TEST(ChromeJsonScanner, AgreesWithOnDemandOnIllTypedAndRepeatedFields) {
  expect_readers_agree(
      {R"({"ph":"X","cat":"user","name":5,"pid":1,"tid":2,"ts":1,"dur":1})",
       R"({"ph":"X","cat":"user","name":"t","pid":1,"tid":2,"ts":true,"dur":1})",
       R"({"ph":"X","cat":"user","name":"n","pid":[1],"tid":2,"ts":1,"dur":1})",
       R"({"ph":"X","cat":"user","name":"late","pid":1,"tid":2,"ts":"x","ts":7,"dur":1})",
       R"({"ph":"X","cat":"user","name":"first","name":"second","pid":1,"tid":2,"ts":9,"dur":1})",
       R"({"ph":"XX","cat":"user","name":"p","pid":1,"tid":2,"ts":1})",
       R"({"ph":"s","cat":"user","name":"f","id":{"a":1},"pid":1,"tid":2,"ts":1})",
       R"({"ph":"X","cat":"user","name":"neg","pid":1,"tid":2,"ts":1,"dur":-1})",
       R"({"ph":"b","cat":"user","name":"async","id":1,"pid":1,"tid":2,"ts":1})",
       R"({"cat":"user"})",
       // The scanner reads "ts" and "dur" late (resolve_times): a repeat still decides by the
       // last one, and an earlier bad one still marks the event.
       R"({"ph":"X","cat":"user","name":"obj","pid":1,"tid":2,"ts":7,"ts":{},"dur":1})",
       R"({"ph":"X","cat":"user","name":"twice","pid":1,"tid":2,"ts":3,"dur":1,"dur":"2.5"})",
       R"({"ph":"X","cat":"user","name":"bad","pid":1,"tid":2,"ts":4,"dur":"y","dur":2})"});
  const Model times = load_events(
      {R"({"ph":"X","cat":"user","name":"twice","pid":1,"tid":2,"ts":3,"dur":1,"dur":"2.5"})"});
  ASSERT_EQ(times.slices.size(), 1u);
  EXPECT_EQ(times.slices.start_ns[0], 3000);
  EXPECT_EQ(times.slices.end_ns[0], 5500);
  const Model model = load_events({R"({"ph":"X","cat":"user","name":"first","name":"second",)"
                                   R"("pid":1,"tid":2,"ts":9,"dur":1})"});
  ASSERT_EQ(model.slices.size(), 1u);
  EXPECT_EQ(model.slice_name(0), "second");
}

}  // namespace
}  // namespace loupe::trace
