// Issue 34 through the MCP server's stdio loop (Server::serve, the code `loupe mcp` runs): a
// message past the size bound, a call past its time bound, patterns that crashed or stalled a
// backtracking engine, a gzip bomb and JSON nested 100,000 deep. Each is answered (a JSON-RPC
// error, or a tool result) and the server answers the request after it.
#include <zlib.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mcp/server.hpp"

namespace loupe::mcp {
namespace {

namespace fs = std::filesystem;

const std::string kPing = R"({"jsonrpc":"2.0","id":"after","method":"ping"})";

std::string call_line(const std::string& tool, const Json& arguments) {
  const Json request = {{"jsonrpc", "2.0"},
                        {"id", 1},
                        {"method", "tools/call"},
                        {"params", {{"name", tool}, {"arguments", arguments}}}};
  return request.dump();
}

// A Chrome trace: one 200,000-character event name of 'a's, and events named "b" and "c".
std::string long_name_trace() {
  return R"({"traceEvents":[{"ph":"X","pid":1,"tid":1,"ts":0,"dur":100,"name":")" +
         std::string(200000, 'a') +
         R"("},{"ph":"X","pid":1,"tid":1,"ts":10,"dur":20,"name":"b"},)"
         R"({"ph":"X","pid":1,"tid":2,"ts":0,"dur":50,"name":"c"}]})";
}

// Concatenated gzip members of 1 MiB of zeros each: `members` MiB inflated, ~1 KB per member.
std::string gzip_bomb(size_t members) {
  const std::string zeros(size_t{1} << 20, '\0');
  z_stream stream{};
  deflateInit2(&stream, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY);
  std::string member(deflateBound(&stream, zeros.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(zeros.data()));
  stream.avail_in = static_cast<uInt>(zeros.size());
  stream.next_out = reinterpret_cast<Bytef*>(member.data());
  stream.avail_out = static_cast<uInt>(member.size());
  deflate(&stream, Z_FINISH);
  member.resize(stream.total_out);
  deflateEnd(&stream);
  std::string bomb;
  for (size_t index = 0; index < members; ++index) bomb += member;
  return bomb;
}

class HostileMcpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("loupe_mcp_hostile_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    settings_.home = dir_ / "home";
    settings_.cwd = dir_;
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
  }

  // Serves `lines` to EOF and returns every message written, parsed.
  std::vector<Json> serve(const std::vector<std::string>& lines) {
    std::string input;
    for (const auto& line : lines) input += line + "\n";
    std::istringstream in(input);
    std::vector<Json> out;
    Server server(settings_);
    EXPECT_EQ(server.serve(in, [&out](std::string_view line) { out.push_back(Json::parse(line)); }),
              0);
    return out;
  }

  // The message answering `id`; fails when there is not exactly one.
  static Json answer(const std::vector<Json>& out, const Json& id) {
    std::vector<Json> found;
    for (const Json& message : out) {
      if (message.contains("id") && message["id"] == id) found.push_back(message);
    }
    EXPECT_EQ(found.size(), 1u) << "answers to " << id.dump();
    return found.empty() ? Json() : found.front();
  }

  fs::path dir_;
  ServerSettings settings_;
};

TEST_F(HostileMcpTest, Issue34MessagePastTheSizeBoundIsAnErrorAndTheServerGoesOn) {
  settings_.max_message_bytes = size_t{1} << 20;
  const auto out = serve({std::string((size_t{1} << 20) + 1, ' ') + "{}", kPing});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["id"], nullptr);
  EXPECT_EQ(out[0]["error"]["code"], -32600);
  EXPECT_EQ(out[0]["error"]["message"],
            "Invalid Request: a message exceeds the maximum message size of 1048576 bytes; the "
            "rest of its line is skipped (loupe mcp --max-message-size BYTES raises the limit)");
  EXPECT_EQ(out[1], Json::parse(R"({"jsonrpc":"2.0","id":"after","result":{}})"));
}

// Past the default bound (a 100 MB line through `loupe mcp` itself: docs/reliability.md).
TEST_F(HostileMcpTest, Issue34LinePastTheDefaultBound) {
  const auto out = serve({"[" + std::string(size_t{32} << 20, '1') + "]", kPing});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["error"]["code"], -32600);
  EXPECT_NE(out[0]["error"]["message"].get<std::string>().find(
                "a message exceeds the maximum message size of 16777216 bytes"),
            std::string::npos);
  EXPECT_EQ(out[1]["id"], "after");
}

TEST_F(HostileMcpTest, Issue34JsonNestedHundredThousandDeepIsAParseError) {
  const auto out = serve({std::string(100000, '[') + std::string(100000, ']'), kPing});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["error"]["code"], -32700);
  EXPECT_EQ(out[1]["id"], "after");
}

TEST_F(HostileMcpTest, Issue34CallPastItsTimeBoundIsCancelledAndAnswered) {
  write("long_name.json", long_name_trace());
  settings_.time_bounds_s["analyze_trace"] = 1e-6;
  const auto out = serve({call_line("analyze_trace", {{"files", {"long_name.json"}}}), kPing});
  const Json timed_out = answer(out, 1);
  EXPECT_EQ(timed_out["error"]["code"], -32001);
  EXPECT_EQ(timed_out["error"]["message"],
            "Request timed out: analyze_trace ran past its time bound of 0.000001 s and was "
            "cancelled (loupe mcp --tool-timeout analyze_trace=SECONDS raises it)");
  EXPECT_EQ(answer(out, "after")["result"], Json::object());
}

// The issue's first two inputs: a pattern that recursed once per character of a 200,000-character
// name (SIGSEGV), and one that doubled its time with every character of a 29-character name.
TEST_F(HostileMcpTest, Issue34PatternsOnLongNamesAnswer) {
  write("long_name.json", long_name_trace());
  write("short_name.json",
        R"({"traceEvents":[{"ph":"X","pid":1,"tid":1,"ts":0,"dur":100,"name":")" +
            std::string(29, 'a') +
            R"(!"},{"ph":"X","pid":1,"tid":1,"ts":5,"dur":10,"name":"b"}]})");
  const auto out = serve({call_line("analyze_trace", {{"files", {"long_name.json"}},
                                                      {"classes", {"x=name:(a|b)*c", "y=name:b"}},
                                                      {"overlap", "x,y"}}),
                          call_line("analyze_trace", {{"files", {"short_name.json"}},
                                                      {"classes", {"x=name:^(a+)+$", "y=name:b"}},
                                                      {"overlap", "x,y"}}),
                          kPing});
  int results = 0;
  for (const Json& message : out) {
    if (message.contains("id") && message["id"] == 1) {
      ++results;
      EXPECT_EQ(message["result"]["isError"], false) << message.dump().substr(0, 2000);
    }
  }
  EXPECT_EQ(results, 2);
  EXPECT_EQ(answer(out, "after")["result"], Json::object());
}

TEST_F(HostileMcpTest, Issue34GzipBombIsAToolErrorNamingTheFileAndTheCap) {
  write("bomb.json.gz", gzip_bomb(1536));
  const auto out = serve({call_line("analyze_trace", {{"files", {"bomb.json.gz"}}}), kPing});
  const Json result = answer(out, 1)["result"];
  EXPECT_EQ(result["isError"], true);
  const std::string message = result["structuredContent"]["error"]["message"];
  EXPECT_NE(message.find("bomb.json.gz: inflates past the ratio cap (50 times its compressed "
                         "size of "),
            std::string::npos)
      << message;
  EXPECT_EQ(result["structuredContent"]["error"]["code"], "input");
  EXPECT_EQ(answer(out, "after")["result"], Json::object());
}

TEST_F(HostileMcpTest, Issue34MegabytePatternIsAToolErrorNotACompile) {
  write("long_name.json", long_name_trace());
  const auto out = serve(
      {call_line("analyze_trace", {{"files", {"long_name.json"}},
                                   {"classes", {"x=name:" + std::string(size_t{1} << 20, 'a')}}}),
       kPing});
  const Json result = answer(out, 1)["result"];
  EXPECT_EQ(result["isError"], true);
  EXPECT_NE(result["structuredContent"]["error"]["message"].get<std::string>().find(
                "' (1048576 characters) is not a valid pattern: longer than 4096 characters"),
            std::string::npos);
  EXPECT_EQ(answer(out, "after")["result"], Json::object());
}

TEST_F(HostileMcpTest, Issue34InvalidPatternIsAToolErrorNamingIt) {
  write("long_name.json", long_name_trace());
  const auto out = serve(
      {call_line("analyze_trace", {{"files", {"long_name.json"}}, {"classes", {"x=name:(a)\\1"}}}),
       kPing});
  const Json result = answer(out, 1)["result"];
  EXPECT_EQ(result["isError"], true);
  EXPECT_EQ(result["structuredContent"]["error"]["message"],
            "selector 'name:(a)\\1': name pattern '(a)\\1' is not a valid pattern: invalid escape "
            "sequence: \\1");
}

}  // namespace
}  // namespace loupe::mcp
