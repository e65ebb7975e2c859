#include "ledger/exchange.hpp"

#include <gtest/gtest.h>

#include "test_support.hpp"

namespace loupe::ledger {
namespace {

using testing::make_finding;
using testing::make_run;
using testing::ScratchDir;

std::string import_error(const std::string& text) {
  try {
    import_run(text, "run.json");
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    return error.message();
  }
  return "no error";
}

TEST(ExchangeTest, ExportThenImportIsTheIdentity) {
  const RunRecord run = make_run("r1", "2026-11-30T04:00:00Z");
  const std::string exported = export_run(run);
  const RunRecord imported = import_run(exported, "r1.json");
  EXPECT_EQ(imported, run);
  EXPECT_EQ(export_run(imported), exported);
}

TEST(ExchangeTest, ExportThroughTheLedgerAndBackIntoAnotherLedger) {
  ScratchDir dir("exchange");
  const RunRecord run = make_run("r1", "2026-11-30T04:00:00Z");
  std::string exported;
  {
    Ledger source = Ledger::open(dir.path() / "a.sqlite");
    source.insert_run(run);
    exported = export_run(source.get_run("r1"));
  }
  Ledger target = Ledger::open(dir.path() / "b.sqlite");
  target.insert_run(import_run(exported, "r1.json"));
  EXPECT_EQ(target.get_run("r1"), run);
}

TEST(ExchangeTest, ExportDocumentShape) {
  RunRecord run;
  run.id = "r7";
  run.started_at = "s";
  run.status = RunStatus::kInterrupted;
  run.objective_path = "o.toml";
  run.objective_hash = "h";
  run.environment_json = R"({"cpu":"x"})";
  run.gates = {{"g", GateVerdict::kNotRun, "{}", "the run was interrupted"}};
  run.observations = {"a/b"};
  EXPECT_EQ(export_run(run), R"({
  "loupe_ledger_export": 1,
  "run": {
    "id": "r7",
    "status": "interrupted",
    "started_at": "s",
    "ended_at": null,
    "objective": {
      "path": "o.toml",
      "hash": "h"
    },
    "git": {
      "commit": "",
      "dirty": false,
      "diff_hash": "",
      "dirty_paths": []
    },
    "environment": {
      "cpu": "x"
    },
    "config": {},
    "gates": [
      {
        "name": "g",
        "verdict": "not-run",
        "statistics": {},
        "rule": "the run was interrupted"
      }
    ],
    "findings": [],
    "observations": [
      "a/b"
    ]
  }
}
)");
}

TEST(ExchangeTest, ImportNamesTheFieldThatIsWrong) {
  const std::string good = export_run(make_run("r1", "t"));
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  EXPECT_EQ(import_error("{"),
            "run.json: not JSON: line 1, column 2: syntax error while parsing object key - "
            "unexpected end of input; expected string literal");
  EXPECT_EQ(import_error("{}"), "run.json: field 'loupe_ledger_export': missing");
  EXPECT_EQ(import_error(replaced("\"loupe_ledger_export\": 1", "\"loupe_ledger_export\": 2")),
            "run.json: field 'loupe_ledger_export': expected 1, found 2");
  EXPECT_EQ(import_error(replaced("\"status\": \"completed\"", "\"status\": \"done\"")),
            "run.json: field 'run.status': unknown run status 'done'; expected one of "
            "in-progress, completed, interrupted, failed");
  EXPECT_EQ(import_error(replaced("\"status\": \"completed\"", "\"status\": \"in-progress\"")),
            "run.json: field 'run.status': an in-progress run cannot be imported; export it once "
            "it ended");
  EXPECT_EQ(import_error(replaced("\"dirty\": true", "\"dirty\": 1")),
            "run.json: field 'run.git.dirty': expected true or false, found number");
  EXPECT_EQ(import_error(replaced("\"verdict\": \"pass\"", "\"verdict\": \"ok\"")),
            "run.json: field 'run.gates[1].verdict': unknown gate verdict 'ok'; expected one of "
            "pass, fail, inconclusive, not-run");
  EXPECT_EQ(import_error(replaced("\"statistics\": {\n          \"n\": 30\n        }",
                                  "\"statistics\": []")),
            "run.json: field 'run.gates[1].statistics': expected an object, found array");
  EXPECT_EQ(import_error(replaced("\"claim\":", "\"claims\":")),
            "run.json: field 'run.findings[0]': missing field 'claim'");
  EXPECT_EQ(import_error(replaced("\"environment\": {", "\"environment\": 3, \"x\": {")),
            "run.json: field 'run.x': unknown field; expected one of id, status, started_at, "
            "ended_at, objective, git, environment, config, gates, findings, observations");
  EXPECT_EQ(import_error(replaced("\"environment\": {", "\"environment\": 3, \"unused\": {")),
            "run.json: field 'run.unused': unknown field; expected one of id, status, started_at, "
            "ended_at, objective, git, environment, config, gates, findings, observations");
  EXPECT_EQ(import_error(replaced("\"objective\": {\n      \"path\"",
                                  "\"objective\": {\n      "
                                  "\"file\"")),
            "run.json: field 'run.objective.file': unknown field; expected one of path, hash");
}

TEST(ExchangeTest, RunVerdictFollowsTheGates) {
  RunRecord run = make_run("r1", "t");
  EXPECT_EQ(run_verdict(run), Verdict::kFail);
  run.gates[0].verdict = GateVerdict::kPass;
  EXPECT_EQ(run_verdict(run), Verdict::kPass);
  run.gates[1].verdict = GateVerdict::kNotRun;
  EXPECT_EQ(run_verdict(run), Verdict::kInconclusive);
  run.gates.clear();
  EXPECT_EQ(run_verdict(run), Verdict::kNone);
}

// The demo's story: the incident run fails gates the fixed run passes.
TEST(ExchangeTest, CompareSaysWhichGatesFlippedAndWhichFindingsChanged) {
  RunRecord incident = make_run("r-incident", "t0");
  RunRecord fixed = make_run("r-fixed", "t1");
  incident.gates = {{"cp_drift", GateVerdict::kFail, "{}", ""},
                    {"decode_speed", GateVerdict::kFail, "{}", ""},
                    {"control", GateVerdict::kPass, "{}", ""},
                    {"old_gate", GateVerdict::kPass, "{}", ""}};
  fixed.gates = {{"cp_drift", GateVerdict::kPass, "{}", ""},
                 {"decode_speed", GateVerdict::kPass, "{}", ""},
                 {"control", GateVerdict::kPass, "{}", ""},
                 {"new_gate", GateVerdict::kInconclusive, "{}", ""}};
  fixed.findings = {make_finding("check.cp_vs_nocp.drift", Severity::kInfo, "within tolerance",
                                 {{"T", int64_t{4096}}, {"shards", int64_t{8}}}),
                    make_finding("bench.decode.verdict", Severity::kInfo, "merged FASTER", {})};
  incident.findings.push_back(
      make_finding("scenario.serve.lock_wait", Severity::kFail, "dispatch holds the lock", {}));
  fixed.environment_json = R"({"host":{"cpu":"arm"},"build":"release","gpu":"none"})";
  fixed.objective_hash = "cd34";

  const RunComparison comparison = compare_runs(incident, fixed);
  EXPECT_EQ(render_comparison(comparison, 20),
            "compare r-incident -> r-fixed\n"
            "gates: 4 changed, 1 unchanged\n"
            "  ! cp_drift      fail         -> pass\n"
            "  ! decode_speed  fail         -> pass\n"
            "    control       pass         -> pass\n"
            "  ! old_gate      pass         -> -\n"
            "  ! new_gate      -            -> inconclusive\n"
            "findings: 1 appeared, 1 disappeared\n"
            "  + bench.decode.verdict (info): merged FASTER\n"
            "  - scenario.serve.lock_wait (fail): dispatch holds the lock\n"
            "note: the two runs used different objective files (content hashes differ)\n"
            "warning: the environment fingerprints differ (host.cpu, gpu): differences may come "
            "from the machine, not the change\n");

  const Json json = comparison_to_json(comparison);
  EXPECT_EQ(json["gates"][0].dump(), R"({"name":"cp_drift","a":"fail","b":"pass","changed":true})");
  EXPECT_EQ(json["gates"][4].dump(),
            R"({"name":"new_gate","a":null,"b":"inconclusive","changed":true})");
  EXPECT_EQ(json["findings"]["appeared"][0]["id"], "bench.decode.verdict");
  EXPECT_EQ(json["environment"].dump(), R"({"differs":true,"keys":["host.cpu","gpu"]})");
}

TEST(ExchangeTest, CompareOfIdenticalEnvironmentsHasNoWarningAndBoundsFindings) {
  RunRecord a = make_run("a", "t0");
  RunRecord b = make_run("b", "t1");
  a.findings.clear();
  for (int index = 0; index < 3; ++index) {
    b.findings.push_back(
        make_finding("check.x.y", Severity::kWarn, "claim", {{"T", int64_t{index}}}));
  }
  EXPECT_EQ(render_comparison(compare_runs(a, b), 2),
            "compare a -> b\n"
            "gates: 0 changed, 2 unchanged\n"
            "    cp_drift      fail         -> fail\n"
            "    decode_speed  pass         -> pass\n"
            "findings: 4 appeared, 0 disappeared\n"
            "  + check.cp_vs_nocp.drift@T=4096,shards=8 (fail): CP state differs from non-CP by "
            "rms ratio 4.0e-3\n"
            "  + check.x.y@T=0 (warn): claim\n"
            "  ... 2 more (--json lists them all)\n");
}

TEST(ExchangeTest, ListAndShowRenderings) {
  ScratchDir dir("render");
  Ledger ledger = Ledger::open(dir.path() / "ledger.sqlite");
  ledger.insert_run(make_run("r1", "2026-11-30T04:00:00Z"));
  ledger.insert_run(make_run("r2", "2026-11-30T04:05:00Z"));
  ledger.insert_run(make_run("r3", "2026-11-30T04:10:00Z"));
  const auto page = ledger.list_runs(2, 0);
  EXPECT_EQ(render_run_list(page, ledger.count_runs(), 0, "L"),
            "runs 1-2 of 3 in L (newest first)\n"
            "  r3  completed    2026-11-30T04:10:00Z  gates 1 pass, 1 fail, 0 inconclusive, 0 "
            "not-run  findings 1  examples/kda/smoke.toml\n"
            "  r2  completed    2026-11-30T04:05:00Z  gates 1 pass, 1 fail, 0 inconclusive, 0 "
            "not-run  findings 1  examples/kda/smoke.toml\n"
            "1 more: loupe ledger list --offset 2\n");
  EXPECT_EQ(run_list_to_json(page, 3, 0)["next_offset"], 2);
  EXPECT_EQ(render_run_list({}, 0, 0, "L"), "no runs in L; `loupe run OBJECTIVE` records one\n");
  EXPECT_EQ(render_run_list({}, 3, 5, "L"), "no runs at offset 5; L holds 3 (try --offset 0)\n");

  EXPECT_EQ(render_run(ledger.get_run("r1"), 20),
            "run r1  completed  started 2026-11-30T04:00:00Z, ended 2026-11-30T05:00:00Z\n"
            "objective examples/kda/smoke.toml (sha256 ab12)\n"
            "git 0123456789ab dirty (diff sha256 d1ff)\n"
            "config {\"name\":\"incident\"}\n"
            "gates: 1 pass, 1 fail, 0 inconclusive, 0 not-run\n"
            "  fail         cp_drift      rms_ratio 4.0e-3 > 2e-6 at T=4096\n"
            "  pass         decode_speed  merged not SLOWER than tiled\n"
            "findings: 1\n"
            "  * check.cp_vs_nocp.drift@T=4096,shards=8 (fail): CP state differs from non-CP by "
            "rms ratio 4.0e-3\n"
            "observations: 1 (first .loupe/runs/r1/cp_vs_nocp/T=4096,shards=8)\n");
}

}  // namespace
}  // namespace loupe::ledger
