// A synthetic report model shared by the renderer tests: three gates (fail, pass, not-run), two
// shown findings of five, one plot of each kind, a note, a cap and a repaired-input count.
#pragma once

#include "report/model.hpp"

namespace loupe::report::testing_fixture {

inline Model synthetic_model() {
  Model model;
  Header& header = model.header;
  header.run_id = "r20261130-070000-abcd";
  header.title = "kda-smoke";
  header.objective_path = "/repo/examples/kda/smoke.toml";
  header.configuration = "incident precision=tf32_rz";
  header.status = "completed";
  header.started_at = "2026-11-30T07:00:00Z";
  header.ended_at = "2026-11-30T07:00:13Z";
  header.git = "0123456789ab";
  header.points = 5;
  header.wall_s = 12.5;
  header.verdict = Verdict::kFail;
  header.ledger_file = "/tmp/ledger.sqlite";

  model.gates = {
      {"cp_matches_single_device", Layer::kCheck, GateVerdict::kFail, "0.0031 <= 2e-06 n=1",
       "fail: the worst value 0.0031 at T=2048,shards=4, not <= 2e-06"},
      {"decode_kernel_not_slower", Layer::kBench, GateVerdict::kPass,
       "1.01 [0.98, 1.03] (t 0.05) n=1", "pass: not SLOWER holds at every selected point (1)"},
      {"a_gate_with_a_very_long_name_that_does_not_fit", std::nullopt, GateVerdict::kNotRun, "-",
       "not run: the cascade stopped"},
  };

  Finding drift;
  drift.id = "check.cp_vs_nocp.drift";
  drift.layer = Layer::kCheck;
  drift.severity = Severity::kFail;
  drift.claim = "error grows along T <x> | *y*";
  drift.where.probe = "cp_vs_nocp";
  drift.where.path = "candidate.o";
  drift.where.params = {{"T", int64_t{2048}}, {"shards", int64_t{4}}};
  drift.where.coords = {{"T", 2047}};
  drift.evidence.metrics = {{"rms_ratio", 0.0031}};
  drift.evidence.files = {"/home/runs/r/cp_vs_nocp/T=2048,shards=4/observation.json"};
  drift.next = "rerun with precision=tf32x3";
  drift.reproduce = "loupe probe run cp_vs_nocp --seed 7 -- kda probe";
  Finding oracle = drift;
  oracle.id = "check.cp_vs_nocp.oracle";
  oracle.severity = Severity::kWarn;
  oracle.claim = "worse than the reference";
  oracle.next.clear();
  model.findings = {drift, oracle};
  model.findings_total = 5;

  ProfilePlot profile;
  profile.probe = "cp_vs_nocp";
  profile.point = "T=2048,shards=4";
  profile.output = "o";
  profile.axis = "T";
  profile.axis_length = 2048;
  for (int64_t bucket = 0; bucket < 8; ++bucket) {
    profile.bucket_ranges.emplace_back(bucket * 256, (bucket + 1) * 256);
    profile.values.push_back(0.001 * static_cast<double>(bucket + 1));
  }
  profile.shape = "growing";
  profile.sentence = "growing: x8 from the first to the last quarter";
  profile.rms_ratio_bound = 2e-6;
  profile.observation = "/home/runs/r/cp_vs_nocp/T=2048,shards=4";
  model.profiles = {profile};
  model.profiles_omitted = 2;

  SweepPlot sweep;
  sweep.probe = "decode";
  sweep.comparison = "merged vs tiled";
  sweep.threshold = 0.05;
  sweep.points = {{"batch=32", 1.01, 0.98, 1.03, "same"}, {"batch=64", 1.4, 1.3, 1.5, "slower"}};
  model.sweeps = {sweep};

  TimelinePlot timeline;
  timeline.probe = "serve";
  timeline.point = "mode=prefill+transfer";
  timeline.trace_file = "/home/runs/r/serve/x/trace.loupetrace";
  timeline.duration_ns = 10'000'000;
  TimelineRow waiter;
  waiter.thread = "transfer";
  waiter.zones = {{0, 9'000'000, 0, "kv_transfer"}};
  waiter.intervals = {{IntervalKind::kWait, 1'000'000, 6'000'000, "interpreter", true}};
  TimelineRow holder;
  holder.thread = "prefill <main>";
  holder.zones = {{0, 7'000'000, 0, "dispatch"}, {500'000, 6'500'000, 1, "moe & experts"}};
  holder.intervals = {{IntervalKind::kHold, 500'000, 6'200'000, "interpreter", true}};
  holder.omitted = 3;
  timeline.rows = {waiter, holder};
  timeline.caption = "transfer waited on interpreter 1 time(s)";
  model.timelines = {timeline};

  model.notes = {"1 of 5 observation(s) could not be read"};
  model.stats.add(Stat::trace_zone_unclosed, 4);
  return model;
}

}  // namespace loupe::report::testing_fixture
