// Chrome trace event JSON and Kineto import: the format's corner cases and every repair stat.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "loupe/error.hpp"
#include "trace/import/import.hpp"
#include "trace/import/json_check.hpp"

namespace loupe::trace {
namespace {

Model load_text(std::string text) {
  Model model;
  ModelBuilder builder(model);
  import_chrome_json(text, "test.json", builder, 0);
  builder.finish();
  return model;
}

std::vector<std::string> names(const Model& model) {
  std::vector<std::string> out;
  for (SliceId id = 0; id < model.slices.size(); ++id) out.emplace_back(model.slice_name(id));
  return out;
}

TEST(ChromeJsonImport, ArrayFormWithFractionalMicroseconds) {
  const Model model = load_text(
      R"([{"ph":"X","name":"a","pid":1,"tid":2,"ts":1.5,"dur":2.25},
          {"ph":"X","name":"b","pid":1,"tid":2,"ts":1234567890123.456,"dur":0.001}])");
  ASSERT_EQ(model.slices.size(), 2u);
  EXPECT_EQ(model.slices.start_ns[0], 1500);
  EXPECT_EQ(model.slices.end_ns[0], 3750);
  // Large epoch-like timestamps keep ns precision (no trip through a double).
  EXPECT_EQ(model.slices.start_ns[1], 1234567890123456);
  EXPECT_EQ(model.slices.end_ns[1], 1234567890123457);
  EXPECT_TRUE(model.stats.all_zero());
  EXPECT_EQ(model.files[0].format, "chrome-json");
}

TEST(ChromeJsonImport, TheRetainedParserServesImportAfterImportAndAfterAFailure) {
  // A large document grows the thread's parser; a smaller one reuses it; a failed one leaves
  // it usable; releasing it costs only the next allocation.
  std::string large = "[";
  for (int index = 0; index < 2000; ++index) {
    large += std::string(index ? "," : "") + R"({"ph":"X","name":"n)" + std::to_string(index) +
             R"(","pid":1,"tid":1,"ts":)" + std::to_string(index * 10) + R"(,"dur":5})";
  }
  large += "]";
  EXPECT_EQ(load_text(large).slices.size(), 2000u);
  const std::string small = R"([{"ph":"X","name":"only","pid":1,"tid":1,"ts":1,"dur":1}])";
  EXPECT_EQ(names(load_text(small)), std::vector<std::string>{"only"});
  EXPECT_THROW(load_text(R"({"traceEvents": 7})"), Error);
  EXPECT_EQ(names(load_text(small)), std::vector<std::string>{"only"});
  release_import_buffers();
  EXPECT_EQ(load_text(large).slices.size(), 2000u);
  EXPECT_EQ(names(load_text(small)), std::vector<std::string>{"only"});
}

TEST(ChromeJsonImport, ObjectFormBeginEndNestingUnsortedAndMetadata) {
  const Model model = load_text(R"({"displayTimeUnit":"ns","traceEvents":[
      {"ph":"E","pid":"p","tid":"worker","ts":30},
      {"ph":"B","name":"outer","cat":"c1,c2","pid":"p","tid":"worker","ts":10},
      {"ph":"B","name":"inner","pid":"p","tid":"worker","ts":12},
      {"ph":"E","pid":"p","tid":"worker","ts":20},
      {"ph":"M","name":"thread_name","pid":"p","tid":"worker","args":{"name":"Worker Thread"}},
      {"ph":"M","name":"process_name","pid":"p","args":{"name":"engine"}},
      {"ph":"i","name":"tick","pid":"p","tid":"worker","ts":15,"s":"t"},
      {"ph":"C","name":"mem","pid":"p","ts":5,"args":{"used":1.5,"free":2}}],
      "otherKey":{"nested":[1,2,3]}})");
  EXPECT_EQ(names(model), (std::vector<std::string>{"outer", "inner"}));
  EXPECT_EQ(model.slices.start_ns[0], 10000);
  EXPECT_EQ(model.slices.end_ns[0], 30000);
  EXPECT_EQ(model.slices.depth[1], 1u);
  EXPECT_EQ(model.slices.parent[1], 0u);
  EXPECT_EQ(model.strings.get(model.slices.category[0]), "c1,c2");
  const Track& worker = model.tracks[model.slices.track[0]];
  EXPECT_EQ(worker.name, "Worker Thread");
  EXPECT_EQ(worker.process_name, "engine");
  EXPECT_EQ(worker.pid, "p");
  EXPECT_EQ(worker.tid, "worker");
  ASSERT_EQ(model.instants.size(), 1u);
  EXPECT_EQ(model.instants.ts_ns[0], 15000);
  ASSERT_EQ(model.counters.size(), 2u);
  EXPECT_EQ(model.tracks[model.counters.track[0]].name, "mem.used");
  EXPECT_EQ(model.counters.value[0], 1.5);
  EXPECT_EQ(model.tracks[model.counters.track[1]].name, "mem.free");
  EXPECT_TRUE(model.stats.all_zero());
}

TEST(ChromeJsonImport, FlowsBindToEnclosingOrNextSlice) {
  const Model model = load_text(R"([
      {"ph":"X","name":"launch","pid":1,"tid":1,"ts":0,"dur":10},
      {"ph":"s","name":"f","cat":"ac2g","id":5,"pid":1,"tid":1,"ts":2},
      {"ph":"X","name":"kernel","pid":1,"tid":2,"ts":20,"dur":10},
      {"ph":"f","name":"f","cat":"ac2g","id":5,"pid":1,"tid":2,"ts":15},
      {"ph":"s","name":"g","cat":"x","id":"0x6","pid":1,"tid":1,"ts":3},
      {"ph":"f","name":"g","cat":"x","id":"0x6","pid":1,"tid":2,"ts":25,"bp":"e"}])");
  ASSERT_EQ(model.flows.size(), 2u);
  // f without bp:e binds to the next slice that begins on its thread.
  EXPECT_EQ(model.slice_name(model.flows.from_slice[0]), "launch");
  EXPECT_EQ(model.slice_name(model.flows.to_slice[0]), "kernel");
  // bp:e binds to the enclosing slice.
  EXPECT_EQ(model.slice_name(model.flows.to_slice[1]), "kernel");
  EXPECT_TRUE(model.stats.all_zero());
}

TEST(ChromeJsonImport, OverlappingCompleteEventsKeepTheirTimeOnAnOverlapLane) {
  const Model model = load_text(R"([
      {"ph":"X","name":"a","pid":1,"tid":1,"ts":0,"dur":10},
      {"ph":"X","name":"b","pid":1,"tid":1,"ts":5,"dur":10}])");
  ASSERT_EQ(model.slices.size(), 2u);
  EXPECT_EQ(model.slices.end_ns[1], 15000);
  EXPECT_EQ(model.slices.parent[1], kNoSlice);
  EXPECT_EQ(model.tracks[model.slices.track[1]].lane, Lane::kOverlap);
  EXPECT_EQ(model.tracks[model.slices.track[1]].main, model.slices.track[0]);
  EXPECT_EQ(model.stats.count(Stat::trace_slice_overlap_lane), 1);
}

TEST(ChromeJsonImport, IdsBeyondInt64AreKeptAsText) {
  const Model model = load_text(R"([
      {"ph":"X","name":"a","pid":1,"tid":1,"ts":0,"dur":10},
      {"ph":"s","name":"f","id":123456789012345678901234567890,"pid":1,"tid":1,"ts":1},
      {"ph":"X","name":"b","pid":1,"tid":2,"ts":0,"dur":10},
      {"ph":"f","name":"f","id":123456789012345678901234567890,"pid":1,"tid":2,"ts":2,"bp":"e"}])");
  EXPECT_EQ(model.stats.count(Stat::trace_json_id_beyond_int64), 2);
  EXPECT_EQ(model.flows.size(), 1u);
}

TEST(ChromeJsonImport, InvalidUtf8IsReplacedAndCounted) {
  std::string text = R"([{"ph":"X","name":"bad)";
  text += '\xff';
  text += R"(name","pid":1,"tid":1,"ts":0,"dur":1}])";
  const Model model = load_text(text);
  EXPECT_EQ(names(model), (std::vector<std::string>{"bad?name"}));
  EXPECT_EQ(model.stats.count(Stat::trace_json_invalid_utf8), 1);
}

TEST(ChromeJsonImport, ControlCharactersAreReplacedAndCounted) {
  std::string text = R"([{"ph":"X","name":"tab)";
  text += '\x01';
  text += R"(here","pid":1,"tid":1,"ts":0,"dur":1}])";
  const Model model = load_text(text);
  EXPECT_EQ(names(model), (std::vector<std::string>{"tab here"}));
  EXPECT_EQ(model.stats.count(Stat::trace_json_control_character), 1);
}

// The splitter reads 64-byte blocks as masks and leaves blocks with a backslash or a control
// character inside a string to its byte loop: each lands at every offset of a block here, next to
// brackets inside strings, and every event still reads the same.
TEST(ChromeJsonImport, EscapesControlCharactersAndQuotedBracketsAtEveryBlockOffset) {
  std::string text = "[";
  std::vector<std::string> expected;
  for (int pad = 0; pad < 140; ++pad) {
    const std::string filler(static_cast<size_t>(pad), 'a');
    if (pad > 0) text += ",\n";
    text += R"({"ph":"X","name":")" + filler + R"(q\"\\z)";
    text += '\x01';
    text += R"(}]","pid":1,"tid":1,"ts":)" + std::to_string(pad) +
            R"(,"dur":1,"args":{"k":[1,{"s":"]}[{"}],"e":"\"{"}})";
    expected.push_back(filler + "q\"\\z }]");
  }
  text += "]";
  const Model model = load_text(text);
  EXPECT_EQ(names(model), expected);
  EXPECT_EQ(model.stats.count(Stat::trace_json_control_character), 140);
  EXPECT_EQ(model.stats.count(Stat::trace_json_event_malformed), 0);
}

// The scanner reads an event where it lies and skips a long string 64 bytes at a time; a raw
// control character anywhere in a long name (no backslash beside it) must still reach the
// splitter, which repairs and counts it, and the events around it must read the same.
TEST(ChromeJsonImport, AControlCharacterAnywhereInALongNameIsRepaired) {
  std::string text = "[";
  std::vector<std::string> expected;
  for (int at = 0; at < 150; ++at) {
    std::string name(150, 'n');
    name[static_cast<size_t>(at)] = '\x02';
    text += R"({"ph":"X","name":")" + name + R"(","pid":1,"tid":1,"ts":)" + std::to_string(2 * at) +
            R"(,"dur":1},{"ph":"X","name":"plain","pid":1,"tid":1,"ts":)" +
            std::to_string(2 * at + 1) + R"(,"dur":1},)";
    name[static_cast<size_t>(at)] = ' ';
    expected.push_back(name);
    expected.push_back("plain");
  }
  text.back() = ']';
  const Model model = load_text(text);
  EXPECT_EQ(names(model), expected);
  EXPECT_EQ(model.stats.count(Stat::trace_json_control_character), 150);
  EXPECT_EQ(model.stats.count(Stat::trace_json_event_malformed), 0);
}

// Reading an event in place, the scanner takes a number's token up to a ',' '}' ']' or space; a
// quote or an opening bracket inside it is where the splitter sees a string or a nested value
// begin, so the event must go to the splitter, which names the broken bracket.
TEST(ChromeJsonImport, ABracketInsideANumberIsReadAsTheSplitterReadsIt) {
  for (const std::string bracket : {"[", "{"}) {
    const std::string text = R"([{"ph":"X","name":"a","pid":1,"tid":1,"ts":0,"dur":1)" + bracket +
                             R"(,"x":2)" + (bracket == "[" ? "}" : "]") + "]";
    const size_t offset = text.size() - 2;
    try {
      load_text(text);
      FAIL() << "expected an error for " << text;
    } catch (const Error& error) {
      EXPECT_NE(error.message().find("offset " + std::to_string(offset) + ": '" +
                                     text.substr(offset, 1) + "' closes a '" + bracket + "'"),
                std::string::npos)
          << error.message();
    }
  }
}

// A bracket closing the wrong kind is found wherever it falls in a block, at its exact offset.
TEST(ChromeJsonImport, AMismatchedBracketIsReportedAtItsOffsetAtEveryBlockOffset) {
  for (int pad = 0; pad < 70; ++pad) {
    const std::string text = R"([{"ph":"X","name":")" + std::string(static_cast<size_t>(pad), 'a') +
                             R"(","pid":1,"tid":1,"ts":0,"dur":1,"args":{"a":[1}}])";
    const size_t offset = text.find("[1}") + 2;
    try {
      load_text(text);
      FAIL() << "expected an error at pad " << pad;
    } catch (const Error& error) {
      EXPECT_NE(error.message().find("offset " + std::to_string(offset) + ": '}' closes a '['"),
                std::string::npos)
          << error.message();
    }
  }
}

// A fault inside an event's args (which loupe skips, not reads) is refused at its exact offset
// with what was expected there, wherever it falls in a 64-byte block: in long args read as
// masks, in short ones, and in an event the scanner leaves to the fallback (an escaped name).
TEST(ChromeJsonImport, AFaultInsideArgsIsRefusedAtItsOffsetAtEveryBlockOffset) {
  struct Fault {
    std::string args;      // with a '|' where the fault lies (removed)
    std::string expected;  // the error's text after the offset
  };
  const std::vector<Fault> faults = {
      {R"({"a": 1,|)" + std::string(1, '\0') + R"( "b": 2})",
       "expected a key string after ',', found byte 0x00"},
      {R"({"a": 12|)" + std::string(1, '\0') + R"(, "b": 2})",
       "expected ',' or '}' after a member's value, found byte 0x00"},
      {R"({"a": 1,|, "b": 2})", "expected a key string after ',', found ','"},
      {R"({"a": [1, 2,|], "b": 2})", "expected a value, found ']'"},
      {R"({"a": 1, |})", "expected a key string after ',', found '}'"},
      {R"({"a": [|, 1]})", "expected a value or ']', found ','"},
      {R"({"a": 1 |"b": 2})", "expected ',' or '}' after a member's value, found '\"'"},
      {R"({"a": [1|: 2]})", "expected ',' or ']' after an element, found ':'"},
      {R"({"a" |1})", "expected ':' after a key, found '1'"},
      {R"({"a":|: 1})", "expected a value, found ':'"},
      {R"({"a": {|1: 2}})", "expected a key string or '}', found '1'"},
      {R"({"a": 0|1})", "expected ',' or '}' after a member's value, found '1'"},
      {R"({"a": |tru})", "expected a value, found 't'"},
      {R"({"a": |1.e5})", "expected a value, found '1'"},
      {R"({"a": |-})", "expected a value, found '-'"},
      {R"({"a": "x"|"y"})", "expected ',' or '}' after a member's value, found '\"'"},
      {R"({"a": [[1]|[2]]})", "expected ',' or ']' after an element, found '['"},
      {R"({"a": "x\|q"})", R"(expected an escape (\" \\ \/ \b \f \n \r \t \u), found 'q')"},
  };
  const std::string long_prefix =
      R"("External id": 12, "Input Dims": [[4096, 4096], [4096]], "Input type": ["float", "float"], )";
  const std::string after =
      R"({"ph":"X","name":"next","pid":1,"tid":1,"ts":9,"dur":1,"args":{"External id": 13, "Sequence number": 0}})";
  for (const Fault& fault : faults) {
    for (const bool long_args : {true, false}) {
      for (const bool escaped_name : {false, true}) {
        for (int pad = 0; pad < 66; ++pad) {
          std::string args = fault.args;
          const size_t mark = args.find('|');
          args.erase(mark, 1);
          size_t fault_at = mark;
          if (long_args) {
            args.insert(1, long_prefix);
            fault_at += long_prefix.size();
          }
          const std::string head = R"([{"ph":"X","name":")" + std::string(pad, 'a') +
                                   (escaped_name ? "\\u0062" : "b") +
                                   R"(","pid":1,"tid":1,"ts":0,"dur":1,"args":)";
          const std::string text = head + args + "}," + after + "]";
          const size_t offset = head.size() + fault_at;
          const std::string where = "args " + args + (long_args ? " long" : "") +
                                    (escaped_name ? " escaped" : "") + " pad " +
                                    std::to_string(pad);
          try {
            load_text(text);
            ADD_FAILURE() << "read as valid: " << where;
          } catch (const Error& error) {
            EXPECT_EQ(error.code(), ErrorCode::kInput);
            EXPECT_NE(
                error.message().find("offset " + std::to_string(offset) + ": " + fault.expected),
                std::string::npos)
                << error.message() << " (" << where << ")";
            EXPECT_EQ(error.hint().rfind("the file is not JSON", 0), 0u) << error.hint();
          }
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

// What the structure check must let through: every kind of value JSON has, nested, empty, with
// any whitespace, numbers in every form (and NaN, Infinity, as Python writes them), wherever each
// falls in a block; the args are kept byte for byte.
TEST(ChromeJsonImport, WellFormedArgsOfEveryShapePassAtEveryBlockOffset) {
  const std::string args =
      "{\"a\": -0.5e+10, \"b\" :[true,false,null,[],{},[[]],{\"c\":{}}],\t\"d\":\"x\\\"y\","
      "\n\"e\": 0, \"f\":[0,10,-1,0.25,1E3,-0e-0], \"g\": NaN, \"h\": -Infinity, \"i\": Infinity,"
      "\r\n \"j\": \"" +
      std::string(90, 'z') +
      "\", \"k\": 12345678901234567890123, \"\": \"\","
      " \"l\" : [ 1 , { \"m\" : [ ] } ] }";
  for (const bool escaped_name : {false, true}) {
    for (int pad = 0; pad < 66; ++pad) {
      std::string text = R"([{"ph":"X","name":")" + std::string(pad, 'a') +
                         (escaped_name ? "\\u0062" : "b") +
                         R"(","pid":1,"tid":1,"ts":0,"dur":1,"args":)" + args +
                         R"(},{"ph":"X","name":"c","pid":1,"tid":1,"ts":5,"dur":1}])";
      Model model;
      ModelBuilder builder(model);
      builder.keep_args(true);
      import_chrome_json(text, "test.json", builder, 0);
      builder.finish();
      ASSERT_EQ(model.slices.size(), 2u) << pad;
      EXPECT_EQ(model.slice_args(0), args) << pad;
      EXPECT_TRUE(model.stats.all_zero()) << pad;
    }
  }
}

// The structure check read as masks against the byte reader (json_check.hpp), on args mutated at
// random (a byte inserted, deleted or replaced from JSON's structural bytes and a few others):
// the file is refused exactly when the byte reader finds a fault in the args, at every alignment.
TEST(ChromeJsonImport, MutatedArgsAreRefusedExactlyWhenTheByteReaderFindsAFault) {
  const std::string base =
      R"({"External id": 120, "Input Dims": [[64, 1024], [1024], []], "Input type": ["float", "c10::BFloat16"], "blocks per SM": 0.0125, "grid": [1, -2, 3e4], "flag": true, "none": null, "nested": {"k": [{}, {"x": "y"}], "z": 0}})";
  // (No control bytes: inside a string they are repaired and counted, not refused.)
  const std::string alphabet = "{}[],:\" 01-.eEtrufalsnx";
  std::mt19937 random(3507);  // seeded: the same mutations every run
  size_t refused = 0, read = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string args = base;
    const size_t at = 1 + random() % (args.size() - 2);
    const char byte = alphabet[random() % alphabet.size()];
    switch (random() % 3) {
      case 0:
        args.insert(at, 1, byte);
        break;
      case 1:
        args.erase(at, 1);
        break;
      default:
        args[at] = byte;
        break;
    }
    const int pad = static_cast<int>(random() % 64);
    const std::string text =
        R"([{"ph":"X","name":")" + std::string(pad, 'a') +
        R"(","pid":1,"tid":1,"ts":0,"dur":1,"args":)" + args +
        R"(},{"ph":"X","name":"b","pid":1,"tid":1,"ts":5,"dur":1,"args":{"External id": 7}},)" +
        R"({"ph":"X","name":"c","pid":1,"tid":1,"ts":9,"dur":1}])";
    JsonFault fault;
    const bool valid = check_json_value(args, fault);
    bool threw = false;
    try {
      load_text(text);
    } catch (const Error& error) {
      threw = true;
      EXPECT_EQ(error.code(), ErrorCode::kInput);
    }
    EXPECT_EQ(threw, !valid) << "args " << args << " pad " << pad << ": "
                             << (valid ? "" : fault.expected);
    (threw ? refused : read) += 1;
    if (::testing::Test::HasFailure()) return;
  }
  // Both outcomes were exercised.
  EXPECT_GT(refused, 1000u);
  EXPECT_GT(read, 300u);
}

TEST(ChromeJsonImport, TruncatedTailKeepsCompleteEvents) {
  const Model model = load_text(R"({"traceEvents":[
      {"ph":"X","name":"a","pid":1,"tid":1,"ts":0,"dur":1},
      {"ph":"X","name":"b","pid":1,"tid":1,"ts":2,"dur":1},
      {"ph":"X","name":"c","pid":1,"tid":1,"ts":4,"du)");
  EXPECT_EQ(names(model), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(model.stats.count(Stat::trace_json_truncated), 1);
}

// Issue 35, malformed versions of held-out traces: a quote out of place mid-file ("ph": :X)
// turns the rest of the file into one unterminated value. That is refused at the event's offset,
// not read as a file cut short (which dropped every later event with only a data-loss count) —
// in a small file (the value spans several events) and a large one (over 1 MiB).
TEST(ChromeJsonImport, EventNeverClosedBeforeTheEndIsRefusedNotTruncated) {
  for (const int events : {100, 8000}) {
    SCOPED_TRACE(events);
    std::string text = R"({"traceEvents":[)";
    std::string broken_at;
    for (int event = 0; event < events; ++event) {
      if (event == 10) broken_at = std::to_string(text.size() + 1);  // past the comma
      text += std::string(event ? "," : "") + R"({"ph":)" + (event == 10 ? ":X" : "\"X") +
              R"(","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":)" +
              std::to_string(event * 10) +
              R"(,"dur":5,"args":{"External id":12,"Input Dims":[[4096,4096],[4096,4096]]}})";
    }
    text += "]}";
    try {
      load_text(text);
      FAIL() << "read as valid";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInput);
      EXPECT_NE(error.message().find("offset " + broken_at), std::string::npos) << error.message();
      EXPECT_NE(error.message().find("not closed"), std::string::npos) << error.message();
    }
    // The same file, repaired and cut inside its last event, is read with the cut counted.
    std::string cut = text.substr(0, text.size() - 40);
    cut.replace(std::stoul(broken_at), 8, R"({"ph":"X)");
    const Model model = load_text(cut);
    EXPECT_EQ(model.stats.count(Stat::trace_json_truncated), 1);
    EXPECT_EQ(model.slices.size(), static_cast<size_t>(events - 1));
  }
}

TEST(ChromeJsonImport, MalformedAndUnsupportedEventsAreCounted) {
  const Model model = load_text(R"([
      {"ph":"X","name":"no_ts","pid":1,"tid":1,"dur":1},
      {"ph":"X","name":"no_dur","pid":1,"tid":1,"ts":1},
      {"ph":"X","name":"bad_ts","pid":1,"tid":1,"ts":true,"dur":1},
      {"name":"no_ph","pid":1,"tid":1,"ts":1},
      42,
      {"ph":"b","name":"async","cat":"a","id":1,"pid":1,"tid":1,"ts":1},
      {"ph":"X","name":"ok","pid":1,"tid":1,"ts":1,"dur":1}])");
  EXPECT_EQ(names(model), (std::vector<std::string>{"ok"}));
  EXPECT_EQ(model.stats.count(Stat::trace_json_event_malformed), 5);
  EXPECT_EQ(model.stats.count(Stat::trace_json_phase_unsupported), 1);
}

TEST(ChromeJsonImport, UnmatchedEndsUnclosedBeginsAndLonelyFlowsAreCounted) {
  const Model model = load_text(R"([
      {"ph":"E","pid":1,"tid":1,"ts":1},
      {"ph":"B","name":"open","pid":1,"tid":1,"ts":2},
      {"ph":"X","name":"last","pid":1,"tid":1,"ts":3,"dur":4},
      {"ph":"s","name":"f","id":9,"pid":1,"tid":1,"ts":3}])");
  EXPECT_EQ(model.stats.count(Stat::trace_zone_end_unmatched), 1);
  EXPECT_EQ(model.stats.count(Stat::trace_zone_unclosed), 1);
  EXPECT_EQ(model.stats.count(Stat::trace_flow_unmatched), 1);
  // The unclosed begin ends at the track's last timestamp.
  ASSERT_EQ(model.slices.size(), 2u);
  EXPECT_EQ(model.slice_name(0), "open");
  EXPECT_EQ(model.slices.end_ns[0], 7000);
}

TEST(ChromeJsonImport, NotJsonIsAnInputError) {
  std::string text = "[{\"ph\":\"X\",,,]";
  Model model;
  ModelBuilder builder(model);
  try {
    import_chrome_json(text, "broken.json", builder, 0);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_NE(error.message().find("broken.json"), std::string::npos) << error.message();
    EXPECT_NE(error.message().find("offset"), std::string::npos) << error.message();
  }
}

// A Kineto-shaped trace as the PyTorch profiler writes it: a CPU thread launching kernels on a
// GPU stream (pid = device, tid = stream) with ac2g flows, written gzip-compressed.
TEST(ChromeJsonImport, KinetoGzipWithCpuThreadGpuStreamAndAc2gFlows) {
  const std::string json = R"({"schemaVersion":1,"deviceProperties":[{"id":0,"name":"H200"}],
    "distributedInfo":{"rank":0,"world_size":1},"baseTimeNanoseconds":1000000000,
    "traceEvents":[
    {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":4242,"tid":4242,"ts":100,"dur":50},
    {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":4242,"tid":4242,"ts":110,"dur":10,
     "args":{"correlation":77}},
    {"ph":"s","cat":"ac2g","name":"ac2g","id":77,"pid":4242,"tid":4242,"ts":111},
    {"ph":"X","cat":"kernel","name":"sm90_gemm","pid":0,"tid":7,"ts":130,"dur":40,
     "args":{"correlation":77,"stream":7,"device":0,"grid":[1,2,1],"block":[128,1,1],
             "registers per thread":128}},
    {"ph":"f","cat":"ac2g","name":"ac2g","id":77,"pid":0,"tid":7,"ts":130,"bp":"e"},
    {"ph":"M","name":"thread_name","pid":4242,"tid":4242,"args":{"name":"python"}}]})";
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("loupe_kineto_" + std::to_string(::getpid()) + ".json.gz"))
                               .string();
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(gzwrite(file, json.data(), static_cast<unsigned>(json.size())),
            static_cast<int>(json.size()));
  gzclose(file);
  const Model model = load_traces({path});
  std::filesystem::remove(path);
  ASSERT_EQ(model.files.size(), 1u);
  EXPECT_EQ(model.files[0].format, "kineto");
  EXPECT_EQ(model.files[0].clock_domain, "kineto-base");
  EXPECT_EQ(model.files[0].offset_ns, 1000000000);
  TrackId gpu = kNoTrack, cpu = kNoTrack;
  for (TrackId id = 0; id < model.tracks.size(); ++id) {
    if (model.tracks[id].kind == TrackKind::kGpuStream) gpu = id;
    if (model.tracks[id].name == "python") cpu = id;
  }
  ASSERT_NE(gpu, kNoTrack);
  ASSERT_NE(cpu, kNoTrack);
  EXPECT_EQ(model.tracks[gpu].name, "stream 7");
  EXPECT_EQ(model.tracks[gpu].pid, "0");
  ASSERT_EQ(model.flows.size(), 1u);
  EXPECT_EQ(model.slice_name(model.flows.from_slice[0]), "cudaLaunchKernel");
  EXPECT_EQ(model.slice_name(model.flows.to_slice[0]), "sm90_gemm");
  EXPECT_EQ(model.flows.from_track[0], cpu);
  EXPECT_EQ(model.flows.to_track[0], gpu);
  EXPECT_EQ(model.start_ns, 1000000000 + 100000);
  EXPECT_TRUE(model.stats.all_zero());
}

}  // namespace
}  // namespace loupe::trace
