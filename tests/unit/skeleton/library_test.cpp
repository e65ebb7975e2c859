#include "skeleton/library.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "core/json.hpp"
#include "loupe/error.hpp"
#include "support/scratch_dir.hpp"

namespace loupe::skeleton {
namespace {

const std::filesystem::path kSourceDir = LOUPE_SOURCE_DIR;

class ScratchDir : public test_support::ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) : test_support::ScratchDir("skeleton-" + name) {}
};

const char* const kValid = R"(id = "demo"
title = "A demo move"
applies_when = 'finding("check.x.mismatch", fail)'
[transformation]
summary = "change it"
code = [{ path = "kda/math/precision.cpp", symbol = "precision_gemm" }]
[constraints]
registers = "none"
shared_memory = "none"
parallelism = "none"
precision = "none"
[validation]
probes = ["cp_vs_nocp"]
how = "run it"
[evidence]
strength = "measured"
[[evidence.items]]
source = "here"
claim = "it works"
)";

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

std::string load_error(const std::string& text) {
  try {
    parse_skeleton(text, "lib/demo.toml");
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kConfig);
    return error.message();
  }
  return "no error";
}

// Every shipped skeleton loads: a broken skeleton file fails the test suite.
TEST(LibraryTest, EveryShippedSkeletonLoadsAndPointsAtRealCode) {
  const auto library = load_library(kSourceDir / "skeletons");
  ASSERT_GE(library.size(), 10u);
  std::set<std::string> ids;
  for (const auto& skeleton : library) {
    SCOPED_TRACE(skeleton.file.string());
    EXPECT_TRUE(ids.insert(skeleton.id).second);
    EXPECT_FALSE(skeleton.evidence.empty());
    EXPECT_FALSE(skeleton.code.empty());
    for (const auto& pointer : skeleton.code) {
      const auto path = kSourceDir / pointer.path;
      EXPECT_TRUE(std::filesystem::is_regular_file(path)) << pointer.path;
      if (pointer.symbol.empty() || !std::filesystem::is_regular_file(path)) continue;
      std::ifstream in(path);
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      const size_t colon = pointer.symbol.rfind("::");
      const std::string last =
          colon == std::string::npos ? pointer.symbol : pointer.symbol.substr(colon + 2);
      EXPECT_NE(text.find(last), std::string::npos) << pointer.path << " has no " << last;
    }
    // The expression survives a round trip through its normal form.
    const std::string normal = condition_to_string(skeleton.condition);
    EXPECT_EQ(condition_to_string(parse_condition(normal)), normal);
  }
  for (const char* id :
       {"tf32x3-affine-merge", "exact-near-identity-chain", "merged-v-decode",
        "release-lock-around-blocking-wait", "bookkeeping-off-contended-lock",
        "overlap-layer-transfer", "replay-decode", "state-in-registers-across-tokens",
        "chunk-size-vs-solve-precision", "cold-cache-measurement"}) {
    EXPECT_NE(find_skeleton(library, id), nullptr) << id;
  }
}

TEST(LibraryTest, ParsesEveryField) {
  const Skeleton skeleton = parse_skeleton(kValid, "lib/demo.toml");
  EXPECT_EQ(skeleton.id, "demo");
  EXPECT_EQ(skeleton.title, "A demo move");
  EXPECT_EQ(skeleton.applies_when, "finding(\"check.x.mismatch\", fail)");
  EXPECT_EQ(skeleton.applies_when_line, 3);
  EXPECT_EQ(skeleton.code,
            (std::vector<CodePointer>{{"kda/math/precision.cpp", "precision_gemm"}}));
  EXPECT_EQ(skeleton.validation.probes, std::vector<std::string>{"cp_vs_nocp"});
  EXPECT_EQ(skeleton.strength, EvidenceStrength::kMeasured);
  EXPECT_EQ(skeleton.evidence, (std::vector<EvidenceItem>{{"here", "it works"}}));
  EXPECT_EQ(skeleton.file, "lib/demo.toml");
}

TEST(LibraryTest, MistakesNameTheFileTheLineTheKeyAndWhatWasExpected) {
  const std::string good = kValid;
  EXPECT_EQ(load_error(replaced(good, "applies_when = 'finding(\"check.x.mismatch\", fail)'",
                                "applies_when = 'finding(\"check.x.mismatch\", fail) and'")),
            "lib/demo.toml:3: applies_when: at column 38: expected finding(...), param(...), "
            "'not' or '(', found the end in 'finding(\"check.x.mismatch\", fail) and'");
  EXPECT_EQ(load_error(replaced(good, "title = \"A demo move\"\n", "titel = \"A demo move\"\n")),
            "lib/demo.toml:2: titel: unknown key; expected one of id, title, tags, applies_when, "
            "transformation, constraints, validation, evidence");
  EXPECT_EQ(load_error(replaced(good, "strength = \"measured\"", "strength = \"certain\"")),
            "lib/demo.toml:16: evidence.strength: expected one of fixed-upstream, published, "
            "measured, reasoned, found 'certain'");
  EXPECT_EQ(load_error(replaced(good, "id = \"demo\"", "id = \"other\"")),
            "lib/demo.toml:1: id: expected 'demo' (the file's name), found 'other'");
  EXPECT_EQ(load_error(replaced(good, "id = \"demo\"", "id = \"Demo_1\"")),
            "lib/demo.toml:1: id: expected lowercase letters, digits and '-', found 'Demo_1'");
  EXPECT_EQ(load_error(replaced(good, "registers = \"none\"\n", "")),
            "lib/demo.toml:7: constraints.registers: missing; this key is required");
  EXPECT_EQ(load_error(replaced(good, "probes = [\"cp_vs_nocp\"]", "probes = \"cp_vs_nocp\"")),
            "lib/demo.toml:13: validation.probes: expected an array, found a string");
  EXPECT_EQ(load_error(replaced(good, "probes = [\"cp_vs_nocp\"]\n", "")),
            "lib/demo.toml:12: validation: expected at least one of probes and gates");
  EXPECT_EQ(load_error(replaced(good, "summary = \"change it\"", "summary = \"  \"")),
            "lib/demo.toml:5: transformation.summary: expected a non-empty string");
  EXPECT_EQ(load_error(replaced(good, "symbol = \"precision_gemm\"", "symbl = \"x\"")),
            "lib/demo.toml:6: transformation.code[0].symbl: unknown key; expected one of path, "
            "symbol");
  EXPECT_EQ(load_error(replaced(good, "title = \"A demo move\"", "title = ")),
            "lib/demo.toml:2:9: TOML syntax: Error while parsing key-value pair: expected value, "
            "saw '\\n'");
}

TEST(LibraryTest, LoadLibraryRefusesDuplicateIdsAndUnreadableFolders) {
  ScratchDir dir("duplicates");
  std::ofstream(dir.path() / "demo.toml") << kValid;
  std::ofstream(dir.path() / "notes.md") << "not a skeleton";
  EXPECT_EQ(load_library(dir.path()).size(), 1u);
  std::filesystem::create_directories(dir.path() / "nested");
  EXPECT_EQ(load_library(dir.path()).size(), 1u);
  try {
    load_library(dir.path() / "missing");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_EQ(error.message().rfind("skeleton library " + (dir.path() / "missing").string() +
                                        ": cannot read the folder: ",
                                    0),
              0u);
  }
}

TEST(LibraryTest, DefaultLibraryDirHonoursTheEnvironment) {
  ::setenv("LOUPE_SKELETONS", "/somewhere/skeletons", 1);
  EXPECT_EQ(default_library_dir(), "/somewhere/skeletons");
  ::unsetenv("LOUPE_SKELETONS");
  // Without it: beside the executable (build/<dir>/bin/../../skeletons), else the source tree.
  EXPECT_TRUE(std::filesystem::is_directory(default_library_dir()));
  EXPECT_EQ(std::filesystem::weakly_canonical(default_library_dir()),
            std::filesystem::weakly_canonical(kSourceDir / "skeletons"));
}

Finding make_finding(std::string id, Severity severity,
                     std::vector<std::pair<std::string, double>> metrics, Params params) {
  Finding finding;
  finding.layer = parse_layer(id.substr(0, id.find('.')));  // as the producers set it
  finding.id = std::move(id);
  finding.severity = severity;
  finding.evidence.metrics = std::move(metrics);
  finding.where.params = std::move(params);
  return finding;
}

// The findings `loupe run examples/kda/smoke.toml --config incident` records (ids, severities,
// metrics and points as of 2026-11-30), and those of --config fixed.
ledger::RunRecord incident_like_run() {
  const Params cp = {{"T", int64_t{2048}},
                     {"shards", int64_t{4}},
                     {"precision", std::string("tf32_rz")},
                     {"decay", std::string("slow")}};
  const Params serve = {{"mode", std::string("prefill+transfer")}, {"dispatch_holds_lock", true}};
  ledger::RunRecord run;
  run.id = "incident";
  run.config_json =
      R"({"name":"incident","settings":{"precision":"tf32_rz","dispatch_lock":"held","decode_kernel":"tiled"}})";
  run.findings = {
      make_finding("check.cp_vs_nocp.mismatch", Severity::kFail, {{"rms_ratio", 2.14e-3}}, cp),
      make_finding("bench.decode.slower", Severity::kWarn,
                   {{"ratio", 6.85}, {"median_b_s", 6.4e-3}},
                   {{"batch", int64_t{32}}, {"H", int64_t{4}}}),
      make_finding("trace.diff.span", Severity::kInfo, {{"a_span_ns", 5.5e7}}, serve),
      make_finding("trace.diff.locks", Severity::kWarn, {{"delta_ns", 4.32e7}}, serve),
      make_finding("trace.diff.breakdown", Severity::kWarn, {{"delta_ns", 7.37e7}}, serve),
      make_finding("check.cp_vs_nocp.drift", Severity::kWarn, {{"rms_ratio", 2.14e-3}}, cp),
      make_finding("check.cp_vs_nocp.oracle", Severity::kWarn, {{"oracle_ratio", 3570}}, cp),
  };
  return run;
}

TEST(LibraryTest, MatchRanksTheThreeIncidentFixesFirstAndSaysWhy) {
  const auto library = load_library(kSourceDir / "skeletons");
  const auto matches = match_run(library, incident_like_run());
  ASSERT_GE(matches.size(), 3u);
  EXPECT_EQ(matches[0].skeleton_id, "tf32x3-affine-merge");
  // The decode finding is the gate's way round (issue 38): tiled SLOWER than merged, a warning
  // like the lock's; equal scores rank by id.
  EXPECT_EQ(matches[1].skeleton_id, "merged-v-decode");
  EXPECT_EQ(matches[2].skeleton_id, "release-lock-around-blocking-wait");
  EXPECT_DOUBLE_EQ(matches[0].score, 1.0 * (1.0 + 0.7 + 0.5));
  EXPECT_DOUBLE_EQ(matches[1].score, 1.0 * (0.5 + 0.7));
  EXPECT_DOUBLE_EQ(matches[2].score, 1.0 * (0.7 + 0.5));
  EXPECT_EQ(matches[0].reasons,
            (std::vector<std::string>{
                "finding check.cp_vs_nocp.mismatch (fail) at T=2048,shards=4,precision=tf32_rz,"
                "decay=slow: rms_ratio 0.00214 > 0.0001",
                "finding check.cp_vs_nocp.drift (warn) at T=2048,shards=4,precision=tf32_rz,"
                "decay=slow",
                "param precision = tf32_rz (deployment setting) in [\"tf32_rz\", \"tf32_rne\"]"}));
  EXPECT_EQ(matches[1].reasons,
            (std::vector<std::string>{
                "param decode_kernel = tiled (deployment setting) == \"tiled\"",
                "finding bench.decode.slower (warn) at batch=32,H=4: ratio 6.85 > 1.05"}));
  for (size_t index = 1; index < matches.size(); ++index) {
    EXPECT_GE(matches[index - 1].score, matches[index].score);
  }
  EXPECT_EQ(match_to_json(matches[1]).dump(),
            "{\"skeleton\":\"merged-v-decode\",\"score\":1.2,\"reasons\":[\"param decode_kernel = "
            "tiled (deployment setting) == \\\"tiled\\\"\",\"finding bench.decode.slower (warn) "
            "at batch=32,H=4: ratio 6.85 > 1.05\"],\"inferred\":[]}");
  // Issue 25: the lock skeleton's conditions rest on trace findings, which are inferred.
  EXPECT_TRUE(matches[0].inferred.empty());
  ASSERT_FALSE(matches[2].inferred.empty());
  for (const auto& reason : matches[2].inferred) {
    EXPECT_EQ(reason.rfind("finding trace.", 0), 0u) << reason;
  }
}

TEST(LibraryTest, NoIncidentFixMatchesTheFixedConfiguration) {
  const auto library = load_library(kSourceDir / "skeletons");
  ledger::RunRecord run;
  run.id = "fixed";
  run.config_json =
      R"({"name":"fixed","settings":{"precision":"tf32x3","dispatch_lock":"released","decode_kernel":"merged"}})";
  const Params serve = {{"mode", std::string("prefill+transfer")}, {"dispatch_holds_lock", false}};
  run.findings = {
      make_finding("trace.diff.gaps", Severity::kWarn, {{"delta_ns", 1.4e7}}, serve),
      make_finding("trace.diff.breakdown", Severity::kWarn, {{"delta_ns", 2.4e7}}, serve),
      make_finding("check.cp_vs_nocp.oracle", Severity::kWarn, {{"oracle_ratio", 1.15}},
                   {{"precision", std::string("tf32x3")}}),
  };
  std::vector<std::string> ids;
  for (const auto& match : match_run(library, run)) ids.push_back(match.skeleton_id);
  EXPECT_EQ(ids, std::vector<std::string>{"overlap-layer-transfer"});
}

TEST(LibraryTest, AnUnreadableRecordedConfigIsAnInputError) {
  ledger::RunRecord run;
  run.id = "r1";
  run.config_json = R"({"settings": [1]})";
  try {
    match_run({}, run);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_EQ(error.message(), "run r1: config.settings: expected an object, found array");
  }
}

TEST(LibraryTest, JsonFormsCarryTheDetailOnRequest) {
  const Skeleton skeleton = parse_skeleton(kValid, "lib/demo.toml");
  EXPECT_EQ(
      skeleton_to_json(skeleton, false).dump(),
      R"j({"id":"demo","title":"A demo move","applies_when":"finding(\"check.x.mismatch\", fail)","evidence_strength":"measured","file":"lib/demo.toml"})j");
  const Json detail = skeleton_to_json(skeleton, true);
  EXPECT_EQ(detail["transformation"]["code"][0]["symbol"], "precision_gemm");
  EXPECT_EQ(detail["constraints"]["precision"], "none");
  EXPECT_EQ(detail["validation"]["probes"], Json::array({"cp_vs_nocp"}));
  EXPECT_EQ(detail["evidence"]["weight"], 0.5);
  EXPECT_EQ(detail["evidence"]["items"][0]["claim"], "it works");
}

}  // namespace
}  // namespace loupe::skeleton
