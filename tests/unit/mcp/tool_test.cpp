// The helpers every tool shares: schemas, argument checks and bounded answers.
#include "mcp/tool.hpp"

#include <gtest/gtest.h>

namespace loupe::mcp {
namespace {

Tool sample_tool() {
  Tool tool;
  tool.name = "sample";
  tool.params = {{"path", ParamType::kString, "a file", true},
                 {"mode", ParamType::kString, "how", false, {"fast", "slow"}},
                 {"count", ParamType::kInteger, "how many", false, {}, 1.0, 10.0},
                 {"names", ParamType::kStringArray, "names"},
                 {"detail", ParamType::kBoolean, "more"}};
  return tool;
}

TEST(InputSchema, IsFlatWithRequiredAndNoAdditionalProperties) {
  const Json schema = input_schema(sample_tool());
  EXPECT_EQ(schema["type"], "object");
  EXPECT_EQ(schema["required"], Json::array({"path"}));
  EXPECT_EQ(schema["additionalProperties"], false);
  EXPECT_EQ(schema["properties"]["mode"]["enum"], Json::array({"fast", "slow"}));
  EXPECT_EQ(schema["properties"]["count"]["minimum"], 1.0);
  EXPECT_EQ(schema["properties"]["count"]["maximum"], 10.0);
  EXPECT_EQ(schema["properties"]["names"]["items"], Json({{"type", "string"}}));
}

TEST(CheckArguments, AcceptsWhatTheSchemaAccepts) {
  const Tool tool = sample_tool();
  EXPECT_NO_THROW(check_arguments(tool, {{"path", "a"}}));
  EXPECT_NO_THROW(check_arguments(
      tool, {{"path", "a"}, {"mode", "slow"}, {"count", 3.0}, {"names", {"x"}}, {"detail", true}}));
}

TEST(CheckArguments, RejectsNamingTheArgumentAndTheAcceptedValues) {
  const Tool tool = sample_tool();
  try {
    check_arguments(tool, {{"path", "a"}, {"count", 2.5}});
    FAIL() << "2.5 is not an integer";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(), "sample: argument 'count' is number 2.5, expected integer");
    EXPECT_EQ(error.hint(), "count takes integer in [1, 10]");
  }
  try {
    check_arguments(tool, {{"path", "a"}, {"names", {"x", 3}}});
    FAIL() << "an array holding a number";
  } catch (const Error& error) {
    EXPECT_EQ(error.hint(), "names takes array of strings");
  }
  try {
    check_arguments(tool, nullptr);
    FAIL() << "path is required";
  } catch (const Error& error) {
    EXPECT_EQ(error.message(), "sample: missing required argument 'path'");
    EXPECT_EQ(error.hint(),
              "path takes string; accepted arguments: path, mode, count, names, detail");
  }
}

Json big_envelope(size_t findings, size_t rows) {
  Envelope envelope;
  envelope.kind = "test";
  for (size_t index = 0; index < findings; ++index) {
    Finding finding;
    finding.id = "check.sample.f" + std::to_string(index);
    finding.claim = std::string(200, 'x');
    envelope.findings.push_back(finding);
  }
  Json table = Json::array();
  for (size_t index = 0; index < rows; ++index) table.push_back({{"row", index}, {"pad", "yyyy"}});
  envelope.data["table"] = table;
  return envelope_to_json(envelope);
}

TEST(BoundEnvelope, LeavesASmallAnswerAlone) {
  const Json envelope = big_envelope(2, 3);
  EXPECT_EQ(bound_envelope(envelope, kMaxBytes, "narrow"), envelope);
}

TEST(BoundEnvelope, CutsFindingsThenTablesAndSaysSo) {
  const Json bounded = bound_envelope(big_envelope(100, 2000), 8000, "ask for less");
  EXPECT_LE(dump_compact(bounded).size(), 8000u);
  EXPECT_EQ(bounded["truncated"], true);
  EXPECT_TRUE(bounded["findings"].empty());
  EXPECT_LT(bounded["data"]["table"].size(), 2000u);
  const std::string note = bounded["data"]["truncation"];
  EXPECT_EQ(note,
            "showing 0 of 100 findings; tables in data shortened (answer limit 2000 tokens); ask "
            "for less");
}

TEST(BoundEnvelope, CutsOnlyFindingsWhenThatIsEnough) {
  const Json bounded = bound_envelope(big_envelope(100, 2), 8000, "hint");
  EXPECT_LE(dump_compact(bounded).size(), 8000u);
  EXPECT_GT(bounded["findings"].size(), 0u);
  EXPECT_EQ(bounded["data"]["table"].size(), 2u);
  EXPECT_EQ(bounded["data"]["truncation"].get<std::string>().rfind("showing ", 0), 0u);
}

TEST(CallResult, IsErrorFollowsTheEnvelopesError) {
  const Json error = error_envelope("x", Error(ErrorCode::kInput, "bad file", "fix it"));
  const Json result = call_result(error);
  EXPECT_EQ(result["isError"], true);
  EXPECT_EQ(result["structuredContent"]["error"],
            Json({{"code", "input"}, {"message", "bad file"}, {"hint", "fix it"}}));
  EXPECT_EQ(result["content"][0]["text"], dump_compact(result["structuredContent"]));
  EXPECT_EQ(call_result(big_envelope(1, 1))["isError"], false);
}

TEST(CallResult, ReplacesInvalidUtf8InBothForms) {
  Json envelope = big_envelope(0, 0);
  envelope["data"]["name"] = std::string("bad\xff byte");
  const Json result = call_result(envelope);
  EXPECT_EQ(Json::parse(result["content"][0]["text"].get<std::string>()),
            result["structuredContent"]);
}

}  // namespace
}  // namespace loupe::mcp
