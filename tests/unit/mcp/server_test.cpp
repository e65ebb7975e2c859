// The protocol layer of `loupe mcp` through Server::handle_line (tools run inline): version
// negotiation, the JSON-RPC errors, notifications, tools/list and tools/call results.
#include "mcp/server.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "loupe/tensor.hpp"
#include "mcp/access.hpp"

namespace loupe::mcp {
namespace {

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    home_ = std::filesystem::temp_directory_path() /
            ("loupe_mcp_server_test_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(home_);
    ServerSettings settings;
    settings.home = home_;
    settings.cwd = home_.parent_path();
    server_ = std::make_unique<Server>(settings);
  }
  void TearDown() override { std::filesystem::remove_all(home_); }

  // The one message a request line produces.
  Json one(const std::string& line) {
    const auto out = server_->handle_line(line);
    EXPECT_EQ(out.size(), 1u) << line;
    return out.empty() ? Json() : Json::parse(out.front());
  }
  Json call(const std::string& tool, const Json& arguments) {
    Json request = {{"jsonrpc", "2.0"},
                    {"id", 9},
                    {"method", "tools/call"},
                    {"params", {{"name", tool}, {"arguments", arguments}}}};
    return one(request.dump());
  }

  std::filesystem::path home_;
  std::unique_ptr<Server> server_;
};

TEST_F(ServerTest, InitializeEchoesEveryKnownProtocolVersion) {
  for (const auto& version : protocol_versions()) {
    const Json response = one(R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":)"
                              R"({"protocolVersion":")" +
                              version + R"(","capabilities":{},"clientInfo":{"name":"t"}}})");
    EXPECT_EQ(response["result"]["protocolVersion"], version);
    EXPECT_EQ(response["result"]["capabilities"], Json({{"tools", {{"listChanged", false}}}}));
    EXPECT_EQ(response["result"]["serverInfo"]["name"], "loupe");
  }
  EXPECT_EQ(protocol_versions(),
            (std::vector<std::string>{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}));
}

TEST_F(ServerTest, InitializeAnswersTheLatestVersionToAnUnknownOne) {
  const Json response = one(
      R"({"jsonrpc":"2.0","id":"a","method":"initialize","params":{"protocolVersion":"2099-01-01"}})");
  EXPECT_EQ(response["id"], "a");
  EXPECT_EQ(response["result"]["protocolVersion"], "2025-11-25");
}

TEST_F(ServerTest, InitializeWithoutAProtocolVersionIsInvalidParams) {
  const Json response = one(R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{}})");
  EXPECT_EQ(response["error"]["code"], -32602);
}

TEST_F(ServerTest, PingAnswersAnEmptyObject) {
  EXPECT_EQ(one(R"({"jsonrpc":"2.0","id":7,"method":"ping"})"),
            Json({{"jsonrpc", "2.0"}, {"id", 7}, {"result", Json::object()}}));
}

TEST_F(ServerTest, ParseErrorHasANullId) {
  const Json response = one("{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": ");
  EXPECT_EQ(response["id"], nullptr);
  EXPECT_EQ(response["error"]["code"], -32700);
}

TEST_F(ServerTest, ANumberBeyondDoubleIsAParseErrorNotACrash) {
  // Once an uncaught nlohmann out_of_range (fuzz/mcp_fuzz).
  const Json response = one(R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":1e400}})");
  EXPECT_EQ(response["id"], nullptr);
  EXPECT_EQ(response["error"]["code"], -32700);
}

TEST_F(ServerTest, InvalidRequests) {
  EXPECT_EQ(one("[1, 2]")["error"]["code"], -32600);                                // a batch
  EXPECT_EQ(one("42")["error"]["code"], -32600);                                    // not an object
  EXPECT_EQ(one(R"({"id":1,"method":"ping"})")["error"]["code"], -32600);           // no jsonrpc
  EXPECT_EQ(one(R"({"jsonrpc":"2.0","id":true,"method":"ping"})")["id"], nullptr);  // bad id
  EXPECT_EQ(one(R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})")["error"]["code"], -32600);
  EXPECT_EQ(one(R"({"jsonrpc":"2.0","id":1})")["error"]["code"], -32600);  // no method
  EXPECT_EQ(one(R"({"jsonrpc":"2.0","id":1,"method":3})")["error"]["code"], -32600);
}

TEST_F(ServerTest, UnknownMethodIsMethodNotFound) {
  const Json response = one(R"({"jsonrpc":"2.0","id":3,"method":"server/discover"})");
  EXPECT_EQ(response["id"], 3);
  EXPECT_EQ(response["error"]["code"], -32601);
  EXPECT_EQ(response["error"]["message"], "Method not found: server/discover");
}

TEST_F(ServerTest, NotificationsAndClientResponsesAreNeverAnswered) {
  EXPECT_TRUE(
      server_->handle_line(R"({"jsonrpc":"2.0","method":"notifications/initialized"})").empty());
  EXPECT_TRUE(server_
                  ->handle_line(R"({"jsonrpc":"2.0","method":"notifications/cancelled",)"
                                R"("params":{"requestId":99,"reason":"gone"}})")
                  .empty());
  EXPECT_TRUE(server_->handle_line(R"({"jsonrpc":"2.0","method":"no/such/notification"})").empty());
  EXPECT_TRUE(server_->handle_line(R"({"jsonrpc":"2.0","id":5,"result":{}})").empty());
  EXPECT_TRUE(server_->handle_line("").empty());
}

TEST_F(ServerTest, ParamsThatAreNotAnObjectAreInvalidParams) {
  EXPECT_EQ(one(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]})")["error"]["code"],
            -32602);
  EXPECT_EQ(one(R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}})")["error"]["code"],
            -32602);
}

TEST_F(ServerTest, UnknownToolIsInvalidParams) {
  const Json response = call("no_such_tool", Json::object());
  EXPECT_EQ(response["error"]["code"], -32602);
  EXPECT_EQ(response["error"]["message"].get<std::string>().rfind("Unknown tool: no_such_tool", 0),
            0u);
}

TEST_F(ServerTest, ToolsListHasFlatSchemasAndHonestAnnotations) {
  const Json response = one(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})");
  const Json& tools = response["result"]["tools"];
  ASSERT_EQ(tools.size(), all_tools().size());
  const std::regex name_pattern("[a-z0-9_]{1,64}");
  for (const auto& tool : tools) {
    const std::string name = tool["name"];
    EXPECT_TRUE(std::regex_match(name, name_pattern)) << name;
    EXPECT_EQ(tool["inputSchema"]["type"], "object") << name;
    EXPECT_EQ(tool["inputSchema"]["additionalProperties"], false) << name;
    for (const auto& property : tool["inputSchema"]["properties"].items()) {
      EXPECT_NE(property.value()["type"], "object") << name << "." << property.key();
    }
    EXPECT_FALSE(tool.contains("outputSchema")) << name;  // the envelope: docs/formats.md
    // Every hint is stated where MCP gives it meaning: destructiveHint and idempotentHint only
    // when readOnlyHint is false (a read-only tool is neither destructive nor has effects).
    const Json& hints = tool["annotations"];
    ASSERT_TRUE(hints["readOnlyHint"].is_boolean()) << name;
    EXPECT_EQ(hints["openWorldHint"], false) << name;  // subjects run locally
    if (hints["readOnlyHint"] == true) {
      EXPECT_FALSE(hints.contains("destructiveHint")) << name;
      EXPECT_FALSE(hints.contains("idempotentHint")) << name;
    } else {
      EXPECT_TRUE(hints["destructiveHint"].is_boolean()) << name;
      EXPECT_TRUE(hints["idempotentHint"].is_boolean()) << name;
    }
  }
}

// Issue 19: tools/list was 31 k characters (~7.7 k tokens) that every agent session paid for.
TEST_F(ServerTest, ToolsListFitsItsBudget) {
  const std::string line = dump_compact(one(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})"));
  EXPECT_LE(line.size(), 12000u);
  // Terse, not stripped: enums and ranges stay in the schemas.
  const Json tools = Json::parse(line)["result"]["tools"];
  bool has_enum = false, has_range = false;
  for (const auto& tool : tools) {
    for (const auto& property : tool["inputSchema"]["properties"].items()) {
      has_enum = has_enum || property.value().contains("enum");
      has_range = has_range || property.value().contains("minimum");
    }
  }
  EXPECT_TRUE(has_enum);
  EXPECT_TRUE(has_range);
}

TEST_F(ServerTest, NoToolCanApproveADecision) {
  for (const auto& tool : all_tools()) {
    EXPECT_EQ(tool.name.find("approve"), std::string::npos) << tool.name;
    EXPECT_EQ(tool.name.find("review"), std::string::npos) << tool.name;
    for (const auto& param : tool.params) {
      EXPECT_EQ(param.name.find("approve"), std::string::npos) << tool.name;
      for (const auto& value : param.allowed) {
        EXPECT_NE(value, "approve") << tool.name << "." << param.name;
      }
    }
  }
  // The one tool that records decisions takes only the three an agent may make.
  const auto decide = std::find_if(all_tools().begin(), all_tools().end(), [](const Tool& tool) {
    return tool.name == "decide_hypothesis";
  });
  ASSERT_NE(decide, all_tools().end());
  const auto decision = std::find_if(decide->params.begin(), decide->params.end(),
                                     [](const Param& param) { return param.name == "decision"; });
  ASSERT_NE(decision, decide->params.end());
  EXPECT_EQ(decision->allowed, (std::vector<std::string>{"retain", "revise", "reject"}));
}

TEST_F(ServerTest, CallResultCarriesTheSameJsonAsTextAndStructuredContent) {
  const Json response = call("list_runs", Json::object());
  const Json& result = response["result"];
  EXPECT_EQ(result["isError"], false);
  ASSERT_EQ(result["content"].size(), 1u);
  EXPECT_EQ(result["content"][0]["type"], "text");
  EXPECT_EQ(Json::parse(result["content"][0]["text"].get<std::string>()),
            result["structuredContent"]);
  EXPECT_EQ(result["structuredContent"]["kind"], "ledger.list");
  EXPECT_EQ(result["structuredContent"]["data"]["total"], 0);
  EXPECT_FALSE(std::filesystem::exists(home_ / "ledger.sqlite"));  // reading creates nothing
}

TEST_F(ServerTest, BadArgumentsAreToolErrorsNamingTheAcceptedValues) {
  const Json wrong_enum = call("run_objective", {{"objective", "x.toml"}, {"only", "gpu"}});
  EXPECT_EQ(wrong_enum["result"]["isError"], true);
  const Json& error = wrong_enum["result"]["structuredContent"]["error"];
  EXPECT_EQ(error["code"], "usage");
  EXPECT_EQ(error["message"],
            "run_objective: argument 'only' is \"gpu\", not one of the accepted "
            "values");
  EXPECT_EQ(error["hint"], "only takes string, one of: check, bench, scenario");

  const Json unknown = call("list_runs", {{"limits", 3}});
  EXPECT_EQ(unknown["result"]["structuredContent"]["error"]["message"],
            "list_runs: unknown argument 'limits'");
  EXPECT_EQ(unknown["result"]["structuredContent"]["error"]["hint"],
            "accepted arguments: home, ledger, limit, offset");

  const Json missing = call("diff_tensors", {{"a", "x.npy"}});
  EXPECT_EQ(missing["result"]["structuredContent"]["error"]["message"],
            "diff_tensors: missing required argument 'b'");

  const Json wrong_type = call("list_runs", {{"limit", "ten"}});
  EXPECT_EQ(wrong_type["result"]["structuredContent"]["error"]["message"],
            "list_runs: argument 'limit' is string \"ten\", expected integer");

  const Json out_of_range = call("list_runs", {{"limit", 0}});
  EXPECT_EQ(out_of_range["result"]["structuredContent"]["error"]["hint"],
            "limit takes integer in [1, 100]");

  const Json not_object = call("list_runs", Json::array({1}));
  EXPECT_EQ(not_object["result"]["structuredContent"]["error"]["message"],
            "list_runs: arguments must be an object, got array");
}

TEST_F(ServerTest, AMissingInputFileIsAToolErrorNamingIt) {
  const Json response = call("diff_tensors", {{"a", (home_ / "missing_a.npy").string()},
                                              {"b", (home_ / "missing_b.npy").string()}});
  EXPECT_EQ(response["result"]["isError"], true);
  const std::string message = response["result"]["structuredContent"]["error"]["message"];
  EXPECT_NE(message.find("missing_a.npy"), std::string::npos) << message;
}

TEST_F(ServerTest, CountersReadsTheRealDecodeExportsAndCompares) {
  const std::string fixtures = LOUPE_NCU_FIXTURES;
  // The fixtures sit outside this test's project root: allowed the way --allow-path allows.
  ServerSettings settings;
  settings.home = home_;
  settings.cwd = home_.parent_path();
  settings.access = std::make_shared<const AccessPolicy>(
      load_access_policy(settings.cwd, {home_, std::filesystem::path(fixtures)}));
  server_ = std::make_unique<Server>(settings);
  const Json details = fixtures + "/decode_details.csv.gz";
  const Json raw = fixtures + "/decode_raw.csv.gz";
  const Json one_kernel =
      call("counters", {{"files", Json::array({details, raw})}, {"kernel", "merged"}});
  const Json& envelope = one_kernel["result"]["structuredContent"];
  EXPECT_EQ(one_kernel["result"]["isError"], false) << envelope.dump();
  EXPECT_EQ(envelope["kind"], "counters");
  EXPECT_EQ(envelope["data"]["kernels"].size(), 1u);
  EXPECT_EQ(envelope["findings"][0]["id"], "counters.merged_v_decode_kernel.bound");
  EXPECT_FALSE(envelope["data"]["kernels"][0].contains("stalls"));  // concise
  const Json diff = call(
      "counters",
      {{"files", Json::array({details, raw})}, {"kernel", "tiled"}, {"compare_kernel", "merged"}});
  EXPECT_EQ(diff["result"]["structuredContent"]["kind"], "counters.diff");
  EXPECT_EQ(diff["result"]["structuredContent"]["findings"][0]["id"], "counters.diff.time");
  const Json missing = call("counters", {{"files", Json::array({fixtures + "/missing.csv"})}});
  EXPECT_EQ(missing["result"]["isError"], true);
  const Json outside = call("counters", {{"files", Json::array({"/etc/passwd"})}});
  EXPECT_EQ(outside["result"]["isError"], true);
}

TEST_F(ServerTest, DiffTensorsUnshardsRankDirectoriesByDimsAndNamesTheRank) {
  // B: t = 0..7 (one channel); A: the same cut zigzag over cp = 2 (rank 0 holds chunks 0 and 3,
  // rank 1 chunks 1 and 2), with rank 1's second chunk (t = 4, 5) wrong.
  namespace fs = std::filesystem;
  fs::create_directories(home_ / "ranks" / "rank-0");
  fs::create_directories(home_ / "ranks" / "rank-1");
  fs::create_directories(home_ / "single");
  auto tensor = [](std::vector<float> values) {
    Tensor out(DType::kF32, {static_cast<int64_t>(values.size()), 1});
    std::copy(values.begin(), values.end(), out.mutable_data<float>().begin());
    return out;
  };
  write_npy(home_ / "single" / "x.npy", tensor({0, 1, 2, 3, 4, 5, 6, 7}));
  write_npy(home_ / "ranks" / "rank-0" / "x.npy", tensor({0, 1, 6, 7}));
  write_npy(home_ / "ranks" / "rank-1" / "x.npy", tensor({2, 3, 9, 9}));
  const Json response = call("diff_tensors", {{"a", (home_ / "ranks").string()},
                                              {"b", (home_ / "single").string()},
                                              {"dims", Json::array({"t(cp,zigzag) d"})},
                                              {"parallel", "cp=2"},
                                              {"tolerances", Json::array({"rms_ratio=1e-6"})}});
  const Json& envelope = response["result"]["structuredContent"];
  EXPECT_EQ(envelope["verdict"], "fail");
  EXPECT_EQ(envelope["findings"][0]["id"], "check.diff.rank");
  EXPECT_EQ(envelope["findings"][0]["claim"],
            "'x.npy' (A unsharded from cp=2): CP rank 1 holds 100% of the squared error (fair "
            "share 50%): its second zigzag chunk, t in [4, 6); global rank 1");
}

TEST_F(ServerTest, ProgressTokenIsEchoedInNotificationsBeforeTheResponse) {
  // A run of an objective that cannot be read (inside the project root, so the path is admitted):
  // the planning notification, then the error.
  const auto out = server_->handle_line(
      R"({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"run_objective",)"
      R"("arguments":{"objective":")" +
      (home_ / "nonexistent_objective.toml").string() + R"("},"_meta":{"progressToken":"tok"}}})");
  ASSERT_EQ(out.size(), 2u);
  const Json progress = Json::parse(out[0]);
  EXPECT_EQ(progress["method"], "notifications/progress");
  EXPECT_EQ(progress["params"]["progressToken"], "tok");
  EXPECT_EQ(progress["params"]["progress"], 0);
  const Json response = Json::parse(out[1]);
  EXPECT_EQ(response["id"], 4);
  EXPECT_EQ(response["result"]["isError"], true);
}

}  // namespace
}  // namespace loupe::mcp
