// Shared helpers of the ledger tests: a scratch folder and small records.
#pragma once

#include <filesystem>
#include <string>

#include "ledger/ledger.hpp"
#include "support/scratch_dir.hpp"

namespace loupe::ledger::testing {

// A fresh folder under the system temp dir ("ledger-" names), removed when the test ends.
class ScratchDir : public test_support::ScratchDir {
 public:
  explicit ScratchDir(const std::string& name) : test_support::ScratchDir("ledger-" + name) {}
};

inline Finding make_finding(std::string id, Severity severity, std::string claim, Params params) {
  Finding finding;
  finding.id = std::move(id);
  finding.layer = Layer::kCheck;
  finding.severity = severity;
  finding.claim = std::move(claim);
  finding.where.subject = "kda";
  finding.where.probe = "cp_vs_nocp";
  finding.where.params = std::move(params);
  finding.evidence.metrics = {{"rms_ratio", 0.09}};
  finding.next = "rerun with precision=tf32x3";
  finding.reproduce = "loupe probe run cp_vs_nocp --set T=4096 --seed 7 -- build/bin/kda probe";
  return finding;
}

// A completed run with two gates, one finding and one observation.
inline RunRecord make_run(const std::string& id, const std::string& started_at) {
  RunRecord run;
  run.id = id;
  run.started_at = started_at;
  run.ended_at = "2026-11-30T05:00:00Z";
  run.status = RunStatus::kCompleted;
  run.objective_path = "examples/kda/smoke.toml";
  run.objective_hash = "ab12";
  run.git = {"0123456789abcdef", true, "d1ff", {"kda/math/precision.cpp"}};
  run.environment_json = R"({"host":{"cpu":"x86"},"build":"release"})";
  run.config_json = R"({"name":"incident"})";
  run.gates = {
      {"cp_drift", GateVerdict::kFail, R"({"n":2,"value":0.004,"limit":2e-06})",
       "rms_ratio 4.0e-3 > 2e-6 at T=4096"},
      {"decode_speed", GateVerdict::kPass, R"({"n":30})", "merged not SLOWER than tiled"},
  };
  run.findings = {make_finding("check.cp_vs_nocp.drift", Severity::kFail,
                               "CP state differs from non-CP by rms ratio 4.0e-3",
                               {{"T", int64_t{4096}}, {"shards", int64_t{8}}})};
  run.observations = {".loupe/runs/" + id + "/cp_vs_nocp/T=4096,shards=8"};
  return run;
}

}  // namespace loupe::ledger::testing
