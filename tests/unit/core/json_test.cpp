#include "core/json.hpp"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace loupe {
namespace {

Finding sample_finding() {
  Finding finding;
  finding.id = "check.cp_vs_nocp.drift";
  finding.layer = Layer::kCheck;
  finding.severity = Severity::kFail;
  finding.claim = "CP state differs from non-CP by rms ratio 9.0e-2";
  finding.where.subject = "kda";
  finding.where.probe = "cp_vs_nocp";
  finding.where.path = "cp.merge";
  finding.where.params = {{"T", int64_t{65536}},
                          {"shards", int64_t{8}},
                          {"precision", std::string("tf32_rz")},
                          {"scale", 0.5},
                          {"fast", false}};
  finding.where.coords = {{"T", 49152}, {"H", 1}};
  finding.where.thread = "transfer";
  finding.where.interval_ns = std::make_pair(int64_t{10}, int64_t{250});
  finding.evidence.metrics = {{"rms_ratio", 0.09},
                              {"max_abs", std::numeric_limits<double>::infinity()}};
  finding.evidence.events = {{7, "moe_dispatch", "prefill", 100, 200}};
  finding.evidence.files = {".loupe/runs/r1/cp_vs_nocp/T=65536/observation.json"};
  finding.next = "rerun with precision=tf32x3";
  finding.reproduce = "loupe probe run cp_vs_nocp --seed 7 -- build/bin/kda probe";
  return finding;
}

TEST(FindingJson, RoundTripKeepsEveryFieldAndParameterOrder) {
  Finding finding = sample_finding();
  Json json = Json::parse(finding_to_json(finding).dump());
  EXPECT_EQ(finding_from_json(json), finding);
  // Parameter order is declaration order, not alphabetical.
  auto it = json["where"]["params"].begin();
  EXPECT_EQ(it.key(), "T");
  EXPECT_EQ(json["evidence"]["metrics"]["max_abs"], "inf");
}

// Issue 25: every finding says what kind of evidence it is; inferred ones name the experiment
// that would verify them. Documents from before the field read back with the layer's default.
TEST(FindingJson, EvidenceKindByLayerAndVerifyWithForInferred) {
  Finding check = sample_finding();
  Json json = finding_to_json(check);
  EXPECT_EQ(json["evidence"]["kind"], "measured");
  EXPECT_FALSE(json["evidence"].contains("verify_with"));

  Finding trace = sample_finding();
  trace.layer = Layer::kTrace;
  json = finding_to_json(trace);
  EXPECT_EQ(json["evidence"]["kind"], "inferred");
  EXPECT_FALSE(json["evidence"].contains("verify_with"));  // its `next` names the experiment
  EXPECT_EQ(verification_experiment(trace), "rerun with precision=tf32x3");
  trace.next.clear();
  json = finding_to_json(trace);
  EXPECT_EQ(json["evidence"]["verify_with"].get<std::string>().rfind("a controlled A/B", 0), 0u);
  EXPECT_EQ(verification_experiment(trace), json["evidence"]["verify_with"]);

  Finding verified = sample_finding();
  verified.evidence.kind = EvidenceKind::kVerified;
  json = Json::parse(finding_to_json(verified).dump());
  EXPECT_EQ(json["evidence"]["kind"], "verified");
  EXPECT_EQ(finding_from_json(json), verified);

  json = finding_to_json(check);
  json["evidence"].erase("kind");  // a document from before issue 25
  EXPECT_EQ(finding_from_json(json), check);
  json["evidence"]["kind"] = "guessed";
  EXPECT_THROW(finding_from_json(json), Error);
}

TEST(FindingJson, NanMetricRoundTripsAsString) {
  Finding finding = sample_finding();
  finding.evidence.metrics = {{"rms_ratio", std::numeric_limits<double>::quiet_NaN()}};
  Json json = finding_to_json(finding);
  EXPECT_EQ(json["evidence"]["metrics"]["rms_ratio"], "nan");
  Finding back = finding_from_json(json);
  EXPECT_TRUE(std::isnan(back.evidence.metrics[0].second));
}

TEST(FindingJson, MissingFieldNamesIt) {
  Json json = finding_to_json(sample_finding());
  json["where"].erase("probe");
  try {
    finding_from_json(json);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_EQ(error.message(), "missing field 'probe'");
  }
}

TEST(FindingJson, BadSeverityListsChoices) {
  Json json = finding_to_json(sample_finding());
  json["severity"] = "fatal";
  try {
    finding_from_json(json);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.message(), "severity 'fatal' is not one of: fail, warn, info");
  }
}

TEST(FindingJson, CountersLayerRoundTrips) {
  Finding finding = sample_finding();
  finding.layer = Layer::kCounters;
  Json json = finding_to_json(finding);
  EXPECT_EQ(json["layer"], "counters");
  EXPECT_EQ(finding_from_json(json), finding);
  json["layer"] = "kernel";
  try {
    finding_from_json(json);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.message(),
              "layer 'kernel' is not one of: check, bench, scenario, trace, counters");
  }
}

TEST(Envelope, HasTheDocumentedKeysInOrder) {
  Envelope envelope;
  envelope.kind = "diff";
  envelope.verdict = Verdict::kFail;
  envelope.findings.push_back(sample_finding());
  envelope.stats.add(Stat::diff_tensor_only_in_a, 2);
  Json json = Json::parse(render_envelope(envelope));
  std::vector<std::string> keys;
  for (auto it = json.begin(); it != json.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"loupe", "kind", "verdict", "findings", "data", "error",
                                            "truncated", "stats"}));
  EXPECT_EQ(json["loupe"], 1);
  EXPECT_EQ(json["verdict"], "fail");
  EXPECT_TRUE(json["error"].is_null());
  EXPECT_EQ(json["stats"]["diff_tensor_only_in_a"]["count"], 2);
  EXPECT_EQ(json["stats"]["diff_tensor_only_in_a"]["severity"], "info");
}

TEST(Envelope, ErrorCarriesCodeMessageHint) {
  Envelope envelope;
  envelope.kind = "diff";
  envelope.verdict = Verdict::kError;
  envelope.error = Error(ErrorCode::kInput, "a.npy: truncated", "re-dump the tensor");
  Json json = Json::parse(render_envelope(envelope));
  EXPECT_EQ(json["error"]["code"], "input");
  EXPECT_EQ(json["error"]["message"], "a.npy: truncated");
  EXPECT_EQ(json["error"]["hint"], "re-dump the tensor");
}

TEST(ExitCodes, FollowDesign) {
  EXPECT_EQ(exit_code(ErrorCode::kUsage), 2);
  EXPECT_EQ(exit_code(ErrorCode::kConfig), 2);
  EXPECT_EQ(exit_code(ErrorCode::kInput), 2);
  EXPECT_EQ(exit_code(ErrorCode::kSubject), 3);
}

TEST(Value, TextFormsAreShortestRoundTrip) {
  EXPECT_EQ(value_to_string(Value{0.1}), "0.1");
  EXPECT_EQ(value_to_string(Value{int64_t{16384}}), "16384");
  EXPECT_EQ(value_to_string(Value{true}), "true");
  EXPECT_EQ(params_to_string({{"T", int64_t{8}}, {"precision", std::string("tf32x3")}}),
            "T=8,precision=tf32x3");
}

}  // namespace
}  // namespace loupe
