// The cascade on synthetic probe results: stop at the first failing layer vs run all, --only,
// subject failures, interruption, --set overrides and the subject command.
#include "gate/cascade.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/trust.hpp"

namespace loupe::gate {
namespace {

std::string objective_text(const std::string& cascade) {
  return "name = \"cascade\"\ncascade = \"" + cascade + R"("
[subject]
command = ["subject", "probe"]
working_dir = "sub"
environment = { OMP_NUM_THREADS = "1" }

[[check]]
probe = "cp_vs_nocp"
params = { T = [1024, 4096] }

[[bench]]
probe = "decode"
variants = ["tiled", "merged"]
params = { batch = 32 }

[[scenario]]
name = "prefill"
probe = "serve"
params = { mode = "prefill" }
repeats = 3

[[scenario]]
name = "transfer"
probe = "serve"
params = { mode = "transfer" }
repeats = 2

[[gate]]
name = "drift"
expr = "check.cp_vs_nocp.rms_ratio <= 2e-6"

[[gate]]
name = "merged_not_slower"
expr = "decode[merged] not SLOWER than decode[tiled]"

[[gate]]
name = "prefill_wall"
expr = "scenario.prefill.wall_s <= 1"
)";
}

// A subject whose check drifts by `drift`; every bench and scenario point passes.
struct FakeSubject {
  double drift = 0;
  std::vector<std::string> calls;

  PointRunner runner() {
    return [this](const PlanTask& task, const ProbeEntry&, int64_t repeat) {
      calls.push_back(task.entry + ":" + params_to_string(task.params) + ":" +
                      std::to_string(repeat));
      PointResult point;
      point.layer = task.layer;
      point.entry = task.entry;
      point.probe = task.probe;
      point.params = task.params;
      point.repeat = repeat;
      point.verdict = Verdict::kPass;
      if (task.layer == Layer::kCheck) {
        point.metrics = {{"", "rms_ratio", drift}};
        if (drift > 2e-6) point.verdict = Verdict::kFail;
      } else if (task.layer == Layer::kBench) {
        bench::Comparison comparison;
        comparison.ratio = 0.5;
        comparison.ci = {0.45, 0.55};
        comparison.verdict = bench::AbVerdict::kFaster;
        comparison.p_value = 0.001;
        point.comparisons.push_back({"tiled", "merged", comparison});
      } else {
        point.metrics = {{"", "wall_s", 0.1}};
      }
      return point;
    };
  }
};

class CascadeTest : public ::testing::Test {
 protected:
  CascadeResult run(const std::string& cascade, double drift, CascadeOptions options = {}) {
    objective_ = parse_objective(objective_text(cascade), "dir/cascade.toml");
    plan_ = make_plan(objective_, Configuration{});
    subject_.drift = drift;
    return run_cascade(objective_, plan_, options, subject_.runner());
  }
  static std::map<std::string, GateVerdict> verdicts(const CascadeResult& result) {
    std::map<std::string, GateVerdict> out;
    for (const auto& gate : result.gates) out[gate.name] = gate.verdict;
    return out;
  }

  Objective objective_;
  Plan plan_;
  FakeSubject subject_;
};

TEST_F(CascadeTest, EveryLayerRunsWhenEveryGatePasses) {
  const auto result = run("stop-at-first-failure", 1e-7);
  EXPECT_EQ(subject_.calls.size(), 8u);  // 2 checks, 1 bench, scenarios: 3 + 2 repeats
  EXPECT_EQ(verdicts(result),
            (std::map<std::string, GateVerdict>{{"drift", GateVerdict::kPass},
                                                {"merged_not_slower", GateVerdict::kPass},
                                                {"prefill_wall", GateVerdict::kPass}}));
  EXPECT_EQ(cascade_verdict(result), Verdict::kPass);
  EXPECT_EQ(cascade_exit_code(result), 0);
  ASSERT_EQ(result.layers.size(), 3u);
  for (const auto& layer : result.layers) EXPECT_EQ(layer.status, LayerStatus::kPassed);
}

TEST_F(CascadeTest, EachGateIsAnnouncedTheMomentItsEntriesHaveRun) {
  // The check gate is announced after the last check point and before any bench point runs.
  std::vector<std::string> log;
  CascadeOptions options;
  options.gate_decided = [&](const GateResult& gate) {
    log.push_back("gate " + gate.name + " " + std::string(gate_verdict_name(gate.verdict)) +
                  " after " + std::to_string(subject_.calls.size()) + " points");
  };
  run("stop", 1e-7, options);
  EXPECT_EQ(log, (std::vector<std::string>{"gate drift pass after 2 points",
                                           "gate merged_not_slower pass after 3 points",
                                           "gate prefill_wall pass after 8 points"}));
}

TEST_F(CascadeTest, OneFailingPointDecidesACheckGateBeforeTheEntrysOtherPointsRun) {
  // "every point within the bound" is false after the first point breaks it: the gate is
  // announced then, while the check's second point (T=4096) still has to run. The layer still
  // runs that point, the recorded gate holds both, and the cascade stops after the layer.
  std::vector<std::string> log;
  std::string announced;
  CascadeOptions options;
  options.gate_decided = [&](const GateResult& gate) {
    log.push_back("gate " + gate.name + " " + std::string(gate_verdict_name(gate.verdict)) +
                  " after " + std::to_string(subject_.calls.size()) + " points");
    if (gate.name == "drift") announced = gate.rule;
  };
  const auto result = run("stop", 1e-2, options);
  EXPECT_EQ(log, (std::vector<std::string>{"gate drift fail after 1 points",
                                           "gate merged_not_slower not-run after 2 points",
                                           "gate prefill_wall not-run after 2 points"}));
  EXPECT_EQ(announced,
            "fail: the largest check.cp_vs_nocp.rms_ratio over 1 value(s) is 0.01 at T=1024, "
            "not <= 2.00e-06 (decided at the first point that broke it; 1 more point(s) still to "
            "run)");
  EXPECT_EQ(result.gates[0].verdict, GateVerdict::kFail);
  EXPECT_EQ(result.gates[0].rule,
            "fail: the largest check.cp_vs_nocp.rms_ratio over 2 value(s) is 0.01 at T=1024, "
            "not <= 2.00e-06");
  EXPECT_EQ(subject_.calls.size(), 2u);
  EXPECT_EQ(cascade_exit_code(result), 1);
}

TEST_F(CascadeTest, GatesAgainstTheBaselineAreNotRunWithoutOne) {
  objective_ = parse_objective(objective_text("all") + R"(
[[gate]]
name = "drift_vs_baseline"
expr = "check.cp_vs_nocp.rms_ratio / baseline <= 1.2"
)",
                               "dir/cascade.toml");
  plan_ = make_plan(objective_, Configuration{});
  subject_.drift = 1e-7;
  const auto result = run_cascade(objective_, plan_, {}, subject_.runner());
  EXPECT_EQ(verdicts(result).at("drift_vs_baseline"), GateVerdict::kNotRun);
  EXPECT_EQ(result.gates[3].rule.substr(0, 21), "not run: no baseline:");
  EXPECT_EQ(cascade_exit_code(result), 0);
}

TEST_F(CascadeTest, CheckMetricAgainstTheBaselineBuildOnTheSameSeeds) {
  objective_ = parse_objective(objective_text("all") + R"(
[[gate]]
name = "drift_vs_baseline"
expr = "check.cp_vs_nocp.rms_ratio / baseline <= 1.2"
)",
                               "dir/cascade.toml");
  plan_ = make_plan(objective_, Configuration{});
  subject_.drift = 3e-7;  // within the absolute bound, 3x the baseline's
  std::vector<std::optional<uint64_t>> baseline_seeds;
  CascadeOptions options;
  BaselineSource baseline;
  baseline.label = "build old";
  baseline.run = [&](const PlanTask& task, const ProbeEntry&, int64_t repeat,
                     std::optional<uint64_t> seed) -> std::optional<PointResult> {
    baseline_seeds.push_back(seed);
    PointResult point;
    point.layer = task.layer;
    point.entry = task.entry;
    point.params = task.params;
    point.repeat = repeat;
    point.metrics = {{"", "rms_ratio", 1e-7}, {"", "wall_s", 0.1}};
    return point;
  };
  options.baseline = baseline;
  const auto result = run_cascade(objective_, plan_, options, subject_.runner());
  EXPECT_EQ(verdicts(result).at("drift"), GateVerdict::kPass);
  EXPECT_EQ(verdicts(result).at("drift_vs_baseline"), GateVerdict::kFail);
  EXPECT_EQ(result.gates[3].rule,
            "fail: check.cp_vs_nocp.rms_ratio / baseline is not <= 1.2: the largest ratio is "
            "worst over worst at T=1024 over 1 seed(s): 3.00e-07 vs the baseline's 1.00e-07 (x3)");
  // The points a gate reads against the baseline: the two check points, not the bench's or the
  // scenarios' (no gate compares them with the baseline).
  EXPECT_EQ(result.baseline_points.size(), 2u);
  EXPECT_EQ(result.baseline_skipped.size(), 6u);
  EXPECT_EQ(result.baseline_label, "build old");
  // The candidate's recorded seed (0 in the fake) is passed to the baseline.
  ASSERT_FALSE(baseline_seeds.empty());
  EXPECT_EQ(baseline_seeds[0], std::optional<uint64_t>(0));
}

TEST_F(CascadeTest, BenchNotSlowerThanTheBaselineComparesTheSamples) {
  objective_ = parse_objective(objective_text("all") + R"(
[[gate]]
name = "decode_vs_baseline"
expr = "decode not SLOWER than baseline"
)",
                               "dir/cascade.toml");
  plan_ = make_plan(objective_, Configuration{});
  auto samples = [](double centre) {
    std::vector<double> out;
    for (int index = 0; index < 30; ++index) out.push_back(centre * (1 + 0.001 * (index % 7)));
    return out;
  };
  PointRunner candidate = [&](const PlanTask& task, const ProbeEntry&, int64_t repeat) {
    PointResult point;
    point.layer = task.layer;
    point.entry = task.entry;
    point.params = task.params;
    point.repeat = repeat;
    point.verdict = Verdict::kPass;
    if (task.layer == Layer::kBench) {
      point.samples = {{"tiled", samples(2.0)}, {"merged", samples(1.5)}};  // merged 1.5x slower
    }
    return point;
  };
  CascadeOptions options;
  BaselineSource baseline;
  baseline.interleave = true;
  baseline.run = [&](const PlanTask& task, const ProbeEntry&, int64_t repeat,
                     std::optional<uint64_t>) -> std::optional<PointResult> {
    PointResult point;
    point.layer = task.layer;
    point.entry = task.entry;
    point.params = task.params;
    point.repeat = repeat;
    if (task.layer == Layer::kBench) {
      point.samples = {{"tiled", samples(2.0)}, {"merged", samples(1.0)}};
    }
    return point;
  };
  options.baseline = baseline;
  const auto result = run_cascade(objective_, plan_, options, candidate);
  EXPECT_EQ(verdicts(result).at("decode_vs_baseline"), GateVerdict::kFail);
  EXPECT_NE(result.gates[3].rule.find("merged against the baseline's = 1.5"), std::string::npos)
      << result.gates[3].rule;
}

TEST_F(CascadeTest, RepeatsAreInterleavedAcrossTheLayersTasks) {
  CascadeOptions options;
  options.only = Layer::kScenario;
  run("all", 1e-7, options);
  EXPECT_EQ(subject_.calls,
            (std::vector<std::string>{"prefill:mode=prefill:0", "transfer:mode=transfer:0",
                                      "prefill:mode=prefill:1", "transfer:mode=transfer:1",
                                      "prefill:mode=prefill:2"}));
}

TEST_F(CascadeTest, StopsAtTheFirstFailingLayer) {
  const auto result = run("stop-at-first-failure", 1e-2);
  EXPECT_EQ(subject_.calls,
            (std::vector<std::string>{"cp_vs_nocp:T=1024:0", "cp_vs_nocp:T=4096:0"}));
  EXPECT_EQ(verdicts(result),
            (std::map<std::string, GateVerdict>{{"drift", GateVerdict::kFail},
                                                {"merged_not_slower", GateVerdict::kNotRun},
                                                {"prefill_wall", GateVerdict::kNotRun}}));
  EXPECT_EQ(result.gates[1].rule,
            "not run: the cascade stopped after the check layer failed (gate drift); --all runs "
            "every layer");
  EXPECT_EQ(result.layers[0].status, LayerStatus::kFailed);
  EXPECT_EQ(result.layers[1].status, LayerStatus::kNotReached);
  EXPECT_EQ(result.layers[2].status, LayerStatus::kNotReached);
  EXPECT_EQ(cascade_verdict(result), Verdict::kFail);
  EXPECT_EQ(cascade_exit_code(result), 1);
}

TEST_F(CascadeTest, AllRunsEveryLayerAfterAFailure) {
  CascadeOptions options;
  options.all = true;
  const auto result = run("stop-at-first-failure", 1e-2, options);
  EXPECT_EQ(subject_.calls.size(), 8u);
  EXPECT_EQ(verdicts(result),
            (std::map<std::string, GateVerdict>{{"drift", GateVerdict::kFail},
                                                {"merged_not_slower", GateVerdict::kPass},
                                                {"prefill_wall", GateVerdict::kPass}}));
}

TEST_F(CascadeTest, ObjectiveCascadeAllRunsEveryLayer) {
  const auto result = run("all", 1e-2);
  EXPECT_EQ(subject_.calls.size(), 8u);
  EXPECT_EQ(verdicts(result).at("prefill_wall"), GateVerdict::kPass);
}

TEST_F(CascadeTest, OnlyRunsOneLayer) {
  CascadeOptions options;
  options.only = Layer::kBench;
  const auto result = run("stop-at-first-failure", 1e-2, options);
  EXPECT_EQ(subject_.calls, (std::vector<std::string>{"decode:batch=32:0"}));
  EXPECT_EQ(verdicts(result),
            (std::map<std::string, GateVerdict>{{"drift", GateVerdict::kNotRun},
                                                {"merged_not_slower", GateVerdict::kPass},
                                                {"prefill_wall", GateVerdict::kNotRun}}));
  EXPECT_EQ(result.gates[0].rule, "not run: --only bench left the check layer out");
  EXPECT_EQ(cascade_verdict(result), Verdict::kPass);  // over the gates that ran
  EXPECT_EQ(cascade_exit_code(result), 0);
}

TEST_F(CascadeTest, SubjectFailureStopsTheCascade) {
  objective_ = parse_objective(objective_text("all"), "dir/cascade.toml");
  plan_ = make_plan(objective_, Configuration{});
  int calls = 0;
  const PointRunner failing = [&calls](const PlanTask& task, const ProbeEntry&, int64_t) {
    if (++calls == 2) throw Error(ErrorCode::kSubject, "the subject killed by signal 11");
    PointResult point;
    point.layer = task.layer;
    point.entry = task.entry;
    point.params = task.params;
    point.verdict = Verdict::kPass;
    point.metrics = {{"", "rms_ratio", 0.0}};
    return point;
  };
  const auto result = run_cascade(objective_, plan_, {}, failing);
  ASSERT_TRUE(result.error.has_value());
  EXPECT_EQ(result.error->code(), ErrorCode::kSubject);
  EXPECT_EQ(result.points.size(), 1u);
  for (const auto& gate : result.gates) EXPECT_EQ(gate.verdict, GateVerdict::kNotRun);
  EXPECT_EQ(result.gates[0].rule,
            "not run: the subject failed at cp_vs_nocp T=4096: the subject killed by signal 11");
}

TEST_F(CascadeTest, InterruptionStopsBeforeTheNextPoint) {
  std::atomic<bool> interrupted{false};
  CascadeOptions options;
  options.interrupted = &interrupted;
  options.progress = [&interrupted](const Progress& progress) {
    if (progress.index == 1) interrupted.store(true);
  };
  const auto result = run("all", 1e-7, options);
  EXPECT_TRUE(result.interrupted);
  EXPECT_EQ(subject_.calls.size(), 1u);
  for (const auto& gate : result.gates) EXPECT_EQ(gate.verdict, GateVerdict::kNotRun);
}

TEST_F(CascadeTest, ExecutorHooksSeeEveryPointWithTheRecordedBaselinesSeeds) {
  // An executor that submits a layer at once (Slurm) learns its points from layer_begin: with a
  // recorded baseline, they already carry the baseline's seeds, and the runner is asked for
  // exactly those points, in that order, with the same entries.
  objective_ = parse_objective(objective_text("all"), "dir/cascade.toml");
  plan_ = make_plan(objective_, Configuration{});
  std::vector<std::string> log;
  auto describe = [](const PointRef& ref) {
    return ref.task->entry + ":" + std::to_string(ref.repeat) +
           ":seed=" + (ref.entry->seed ? std::to_string(*ref.entry->seed) : std::string("none"));
  };
  std::vector<const ProbeEntry*> announced, asked;
  CascadeOptions options;
  options.layer_begin = [&](Layer layer, const std::vector<PointRef>& points) {
    std::string line = "begin " + std::string(layer_name(layer));
    for (const auto& ref : points) {
      line += " " + describe(ref);
      announced.push_back(ref.entry);
    }
    log.push_back(line);
  };
  options.layer_end = [&](Layer layer, bool stopped) {
    log.push_back("end " + std::string(layer_name(layer)) + (stopped ? " stopped" : ""));
  };
  BaselineSource baseline;
  baseline.seed_of = [](const PlanTask& task, int64_t repeat) -> std::optional<uint64_t> {
    if (task.layer != Layer::kCheck) return std::nullopt;
    return 40 + static_cast<uint64_t>(repeat) + (params_to_string(task.params) == "T=4096");
  };
  baseline.run = [](const PlanTask& task, const ProbeEntry&, int64_t repeat,
                    std::optional<uint64_t>) -> std::optional<PointResult> {
    PointResult point;
    point.layer = task.layer;
    point.entry = task.entry;
    point.params = task.params;
    point.repeat = repeat;
    point.metrics = {{"", "rms_ratio", 1e-7}, {"", "wall_s", 0.1}};
    return point;
  };
  options.baseline = baseline;
  PointRunner inner = subject_.runner();
  const PointRunner runner = [&](const PlanTask& task, const ProbeEntry& entry, int64_t repeat) {
    asked.push_back(&entry);
    log.push_back("run " + describe(PointRef{&task, &entry, repeat}));
    return inner(task, entry, repeat);
  };
  subject_.drift = 1e-7;
  const auto result = run_cascade(objective_, plan_, options, runner);
  EXPECT_EQ(log,
            (std::vector<std::string>{
                "begin check cp_vs_nocp:0:seed=40 cp_vs_nocp:0:seed=41", "run cp_vs_nocp:0:seed=40",
                "run cp_vs_nocp:0:seed=41", "end check", "begin bench decode:0:seed=none",
                "run decode:0:seed=none", "end bench",
                "begin scenario prefill:0:seed=none transfer:0:seed=none "
                "prefill:1:seed=none transfer:1:seed=none prefill:2:seed=none",
                "run prefill:0:seed=none", "run transfer:0:seed=none", "run prefill:1:seed=none",
                "run transfer:1:seed=none", "run prefill:2:seed=none", "end scenario"}));
  EXPECT_EQ(announced, asked);
  // No gate reads the baseline's values: the candidate takes its seeds, nothing more.
  EXPECT_EQ(result.baseline_points.size(), 0u);
  EXPECT_EQ(cascade_verdict(result), Verdict::kPass);
}

TEST_F(CascadeTest, AnInterruptedLayerEndsStoppedForTheExecutor) {
  std::atomic<bool> interrupted{false};
  std::vector<std::string> ends;
  CascadeOptions options;
  options.interrupted = &interrupted;
  options.progress = [&interrupted](const Progress& progress) {
    if (progress.index == 1) interrupted.store(true);
  };
  options.layer_begin = [&](Layer layer, const std::vector<PointRef>& points) {
    ends.push_back("begin " + std::string(layer_name(layer)) + " " + std::to_string(points.size()));
  };
  options.layer_end = [&](Layer layer, bool stopped) {
    ends.push_back("end " + std::string(layer_name(layer)) + (stopped ? " stopped" : ""));
  };
  run("all", 1e-7, options);
  EXPECT_EQ(ends, (std::vector<std::string>{"begin check 2", "end check stopped"}));
}

TEST_F(CascadeTest, ProgressCountsEveryPoint) {
  std::vector<std::pair<size_t, size_t>> seen;
  CascadeOptions options;
  options.progress = [&seen](const Progress& progress) {
    seen.emplace_back(progress.index, progress.total);
    EXPECT_GE(progress.remaining_s, 0.0);
  };
  run("all", 1e-7, options);
  EXPECT_EQ(seen, (std::vector<std::pair<size_t, size_t>>{
                      {1, 8}, {2, 8}, {3, 8}, {4, 8}, {5, 8}, {6, 8}, {7, 8}, {8, 8}}));
}

TEST_F(CascadeTest, OverridesSetParametersAndMergePoints) {
  objective_ = parse_objective(objective_text("all"), "dir/cascade.toml");
  plan_ = make_plan(objective_, Configuration{});
  apply_overrides(plan_, {"T=2048"});
  size_t checks = 0;
  for (const auto& task : plan_.tasks) {
    if (task.layer != Layer::kCheck) continue;
    ++checks;
    EXPECT_EQ(task.params, (Params{{"T", int64_t{2048}}}));
  }
  EXPECT_EQ(checks, 1u);  // T=1024 and T=4096 both became T=2048
  try {
    apply_overrides(plan_, {"nonesuch=1"});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(), "--set nonesuch=1: no task of the plan has parameter 'nonesuch'");
  }
  EXPECT_THROW(apply_overrides(plan_, {"T"}), Error);
}

TEST_F(CascadeTest, SubjectCommandCarriesWorkingDirectoryAndEnvironment) {
  objective_ = parse_objective(objective_text("all"), "/objectives/cascade.toml");
  EXPECT_EQ(subject_command(objective_.subject),
            (std::vector<std::string>{"env", "-C", "/objectives/sub", "OMP_NUM_THREADS=1",
                                      "subject", "probe"}));
}

TEST_F(CascadeTest, TopFindingsPutGateFindingsFirstWithoutDuplicates) {
  CascadeResult result;
  Finding gate_finding;
  gate_finding.id = "trace.diff.locks";
  gate_finding.severity = Severity::kWarn;
  Finding point_finding;
  point_finding.id = "check.cp_vs_nocp.drift";
  point_finding.severity = Severity::kFail;
  Finding info;
  info.id = "scenario.serve.metrics";
  GateResult gate;
  gate.verdict = GateVerdict::kFail;
  gate.findings = {gate_finding, point_finding};
  result.gates.push_back(gate);
  PointResult point;
  point.findings = {point_finding, info};
  result.points.push_back(point);
  bool truncated = true;
  const auto findings = top_findings(result, 5, &truncated);
  ASSERT_EQ(findings.size(), 2u);
  EXPECT_EQ(findings[0].id, "trace.diff.locks");
  EXPECT_EQ(findings[1].id, "check.cp_vs_nocp.drift");
  EXPECT_FALSE(truncated);
  top_findings(result, 1, &truncated);
  EXPECT_TRUE(truncated);
}

// A failing guard on a candidate's point fails the run though every gate passed, and leads the
// findings; a warn guard, a failing mismatch with its guard.precision and its hidden run failing
// too, and a baseline point's guard do not.
TEST_F(CascadeTest, AFailingGuardFailsTheRunWhateverTheGatesSay) {
  CascadeResult result;
  GateResult gate;
  gate.verdict = GateVerdict::kPass;
  result.gates.push_back(gate);
  Finding mismatch;
  mismatch.id = "check.cp_prefill_tf32.mismatch";  // a probe's own bound: gates judge it
  mismatch.severity = Severity::kFail;
  Finding precision;  // describes how the numbers are wrong: the gates judge the mismatch
  precision.id = "check.cp_prefill_tf32.guard.precision";
  precision.severity = Severity::kFail;
  Finding also;  // the shown point failed too: where else, not a reason to doubt the results
  also.id = "check.cp_prefill_tf32.guard.hidden_point";
  also.severity = Severity::kFail;
  also.claim = std::string(kHiddenAlsoFails) + " T=4096, drawn in secret";
  Finding warned;
  warned.id = "check.replay.guard.hidden_off";
  warned.severity = Severity::kWarn;
  Finding guard;
  guard.id = "check.replay.guard.hidden_point";
  guard.severity = Severity::kFail;
  guard.claim = "the candidate passes at the point(s) it was shown (N=256) but fails at the hidden";
  PointResult point;
  point.findings = {mismatch, precision, also, warned};
  result.points.push_back(point);
  PointResult baseline_point;
  baseline_point.findings = {guard};
  result.baseline_points.push_back(baseline_point);
  EXPECT_TRUE(failed_guards(result).empty());
  EXPECT_EQ(cascade_verdict(result), Verdict::kPass);
  EXPECT_EQ(cascade_exit_code(result), 0);

  result.points.push_back(baseline_point);
  ASSERT_EQ(failed_guards(result).size(), 1u);
  EXPECT_EQ(failed_guards(result)[0]->id, "check.replay.guard.hidden_point");
  EXPECT_EQ(cascade_verdict(result), Verdict::kFail);
  EXPECT_EQ(cascade_exit_code(result), 1);
  bool truncated = true;
  const auto findings = top_findings(result, 5, &truncated);
  ASSERT_FALSE(findings.empty());
  EXPECT_EQ(findings[0].id, "check.replay.guard.hidden_point");
}

// Two failing gates, the first with many findings: the second's lead finding is not crowded out.
TEST_F(CascadeTest, TopFindingsTakeTheFailingGatesInTurn) {
  CascadeResult result;
  auto finding = [](const std::string& id) {
    Finding out;
    out.id = id;
    out.severity = Severity::kFail;
    return out;
  };
  GateResult drift;
  drift.verdict = GateVerdict::kFail;
  drift.findings = {finding("check.a.mismatch"), finding("check.a.guard.precision"),
                    finding("check.a.drift")};
  GateResult passing;
  passing.verdict = GateVerdict::kPass;
  passing.findings = {finding("check.b.match")};
  GateResult locks;
  locks.verdict = GateVerdict::kFail;
  locks.findings = {finding("trace.diff.locks")};
  result.gates = {drift, passing, locks};
  bool truncated = false;
  const auto findings = top_findings(result, 3, &truncated);
  std::vector<std::string> ids;
  for (const auto& item : findings) ids.push_back(item.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"check.a.mismatch", "trace.diff.locks",
                                           "check.a.guard.precision"}));
  EXPECT_TRUE(truncated);
}

// A [[deployment_key]] switch leaves its probe's entries out of the plan: their gates are not-run
// (they neither pass nor fail the run) and the rest decide as usual.
TEST(CascadeSwitchTest, GatesOfEntriesASwitchLeftOutAreNotRun) {
  const Objective objective = parse_objective(R"([subject]
command = "subject"
[[check]]
probe = "cp_vs_nocp"
[[check]]
name = "w8a8"
probe = "w8a8_vs_fp32"
[[gate]]
name = "drift"
expr = "check.cp_vs_nocp.rms_ratio <= 2e-6"
[[gate]]
name = "w8a8_passes"
expr = "check.w8a8 passes"
[[deployment_key]]
key = "w8a8"
values = ["on", "off"]
default = "off"
implies = [{ probe = "w8a8_vs_fp32", run = { on = true, off = false } }]
)",
                                              "switch.toml");
  FakeSubject subject;
  subject.drift = 1e-7;

  const Plan off = make_plan(objective, Configuration{});
  const CascadeResult without = run_cascade(objective, off, {}, subject.runner());
  EXPECT_EQ(subject.calls, (std::vector<std::string>{"cp_vs_nocp::0"}));
  ASSERT_EQ(without.gates.size(), 2u);
  EXPECT_EQ(without.gates[0].verdict, GateVerdict::kPass);
  EXPECT_EQ(without.gates[1].verdict, GateVerdict::kNotRun);
  EXPECT_EQ(without.gates[1].rule, "not run: the configuration left out check w8a8 (w8a8=off)");
  EXPECT_EQ(cascade_verdict(without), Verdict::kPass);
  EXPECT_EQ(cascade_exit_code(without), 0);

  subject.calls.clear();
  const Plan on = make_plan(objective, resolve_configuration(objective, "w8a8=on"));
  const CascadeResult with = run_cascade(objective, on, {}, subject.runner());
  EXPECT_EQ(subject.calls, (std::vector<std::string>{"cp_vs_nocp::0", "w8a8::0"}));
  EXPECT_EQ(with.gates[1].verdict, GateVerdict::kPass);
}

// Issue 19: reproduce lines carried `env -C /abs/path/of/the/repository`.
TEST(SubjectForReproduce, FoldersUnderTheProjectRootAreRelative) {
  const std::vector<std::string> at_root = {"env",           "-C",   "/repo", "OMP_NUM_THREADS=1",
                                            "build/bin/kda", "probe"};
  EXPECT_EQ(subject_for_reproduce(at_root, "/repo"),
            (std::vector<std::string>{"env", "OMP_NUM_THREADS=1", "build/bin/kda", "probe"}));
  EXPECT_EQ(subject_for_reproduce({"env", "-C", "/repo", "build/bin/kda", "probe"}, "/repo"),
            (std::vector<std::string>{"build/bin/kda", "probe"}));
  EXPECT_EQ(subject_for_reproduce({"env", "-C", "/repo/examples/py", "python3", "s.py"}, "/repo"),
            (std::vector<std::string>{"env", "-C", "examples/py", "python3", "s.py"}));
  const std::vector<std::string> outside = {"env", "-C", "/elsewhere", "kda", "probe"};
  EXPECT_EQ(subject_for_reproduce(outside, "/repo"), outside);
  const std::vector<std::string> plain = {"/abs/kda", "probe"};
  EXPECT_EQ(subject_for_reproduce(plain, "/repo"), plain);
}

}  // namespace
// tests/golden/trace/locks_binary: prefill holds "interpreter" 1100-9300 ns, transfer waits for
// it from 1500 ns and holds it 9300-9500; the trace spans 1000-9600 ns (the wait is 7800 / 8600).
TEST(LockHoldMetricsTest, EachLockAndEachHolderOfItFromTheTrace) {
  const std::string trace =
      std::string(LOUPE_SOURCE_DIR) + "/tests/golden/trace/locks_binary/input.loupetrace";
  std::vector<std::string> shown;
  for (const MetricValue& metric : lock_hold_metrics({trace})) {
    EXPECT_EQ(metric.variant, "");
    const bool count = metric.name.ends_with("_holds") || metric.name.ends_with("_waits");
    const bool share = metric.name.ends_with("_share");
    shown.push_back(metric.name + "=" +
                    (count   ? std::to_string(std::lround(metric.value))
                     : share ? (metric.value == 0
                                    ? "0"
                                    : std::to_string(std::lround(metric.value * 1000)) + "permille")
                             : std::to_string(std::lround(metric.value * 1e9)) + "ns"));
  }
  EXPECT_EQ(shown,
            (std::vector<std::string>{
                "interpreter_max_hold_s=8200ns", "prefill_interpreter_max_hold_s=8200ns",
                "prefill_interpreter_median_hold_s=8200ns",
                "prefill_interpreter_total_hold_s=8200ns", "prefill_interpreter_holds=1",
                "transfer_interpreter_max_hold_s=200ns", "transfer_interpreter_median_hold_s=200ns",
                "transfer_interpreter_total_hold_s=200ns", "transfer_interpreter_holds=1",
                "prefill_interpreter_wait_s=0ns", "prefill_interpreter_waits=0",
                "prefill_interpreter_wait_share=0", "transfer_interpreter_wait_s=7800ns",
                "transfer_interpreter_waits=1", "transfer_interpreter_wait_share=907permille"}));
  EXPECT_TRUE(lock_hold_metrics({"/nonexistent/trace.loupetrace"}).empty());
}

}  // namespace loupe::gate
