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
    // 190: with issue 25's evidence.kind, kKeptFindings findings of 200 no longer fit 8,000.
    finding.claim = std::string(190, 'x');
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

TEST(BoundEnvelope, CutsTablesThenDataThenFindingsAndSaysSo) {
  const Json bounded = bound_envelope(big_envelope(100, 2000), 8000, "ask for less");
  EXPECT_LE(dump_compact(bounded).size(), 8000u);
  EXPECT_EQ(bounded["truncated"], true);
  EXPECT_FALSE(bounded["data"].contains("table"));
  const size_t kept = bounded["findings"].size();
  EXPECT_GE(kept, kKeptFindings);
  EXPECT_LT(kept, 100u);
  EXPECT_EQ(bounded["findings"][0]["id"], "check.sample.f0");  // the first ones stay
  const std::string note = bounded["data"]["truncation"];
  EXPECT_EQ(note, "tables in data shortened; data omitted; showing " + std::to_string(kept) +
                      " of 100 findings (answer limit 2000 tokens); ask for less");
}

// Issue 19: diff_tensors on a 12-layer dump answered "showing 0 of 5 findings" because the answer
// limit cut findings before data's per-tensor table.
TEST(BoundEnvelope, CutsOnlyDataWhenThatIsEnough) {
  const Json bounded = bound_envelope(big_envelope(5, 2000), 8000, "hint");
  EXPECT_LE(dump_compact(bounded).size(), 8000u);
  EXPECT_EQ(bounded["findings"].size(), 5u);
  EXPECT_LT(bounded["data"]["table"].size(), 2000u);
  EXPECT_GT(bounded["data"]["table"].size(), 0u);
  EXPECT_EQ(bounded["data"]["truncation"],
            "tables in data shortened (answer limit 2000 tokens); hint");
}

TEST(BoundEnvelope, NeverCutsTheTopFindings) {
  Json envelope = big_envelope(10, 2);
  for (auto& finding : envelope["findings"]) finding["claim"] = std::string(3000, 'z');
  const Json bounded = bound_envelope(envelope, 8000, "hint");
  EXPECT_EQ(bounded["findings"].size(), kKeptFindings);
  EXPECT_EQ(bounded["findings"][2]["id"], "check.sample.f2");
}

TEST(CheckArguments, AcceptsNaturalJsonForNameListsAndNameValues) {
  Tool tool;
  tool.name = "natural";
  tool.params = {{"axes", ParamType::kNameList, "axes"},
                 {"tolerances", ParamType::kNameValues, "bounds"}};
  const Json natural = {{"axes", {"B", "T", "H"}}, {"tolerances", {{"rms_ratio", 1e-3}}}};
  EXPECT_NO_THROW(check_arguments(tool, natural));
  EXPECT_EQ(names_argument(natural, "axes"), (std::vector<std::string>{"B", "T", "H"}));
  EXPECT_EQ(strings_argument(natural, "tolerances"), (std::vector<std::string>{"rms_ratio=0.001"}));
  const Json flat = {{"axes", "B,T,H"}, {"tolerances", {"rms_ratio=1e-3"}}};
  EXPECT_NO_THROW(check_arguments(tool, flat));
  EXPECT_EQ(names_argument(flat, "axes"), (std::vector<std::string>{"B", "T", "H"}));
  EXPECT_EQ(strings_argument(flat, "tolerances"), (std::vector<std::string>{"rms_ratio=1e-3"}));
  EXPECT_THROW(check_arguments(tool, {{"axes", 3}}), Error);
  EXPECT_THROW(check_arguments(tool, {{"tolerances", {{"rms_ratio", {1, 2}}}}}), Error);
  EXPECT_THROW(names_argument({{"axes", "B,,T"}}, "axes"), Error);
  const Json schema = input_schema(tool);
  EXPECT_EQ(schema["properties"]["axes"]["type"], Json::array({"array", "string"}));
  EXPECT_EQ(schema["properties"]["tolerances"]["type"], Json::array({"object", "array"}));
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
