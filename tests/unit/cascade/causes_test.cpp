// The cause before the symptom: [components] and `covers` parsed and validated, the failing gates
// ranked most specific first, and the cascade running a failing composite check's components
// next and announcing the cause before the symptom (issue 39).
#include "gate/causes.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "gate/cascade.hpp"

namespace loupe::gate {
namespace {

// Three checks, cheapest first: a model check that runs the chunk kernel (composite), a decode
// check, and the chunk kernel's own check.
const std::string kObjective = R"(name = "causes"
[subject]
command = ["subject", "probe"]

[components]
chunk_kernel = "the chunked prefill"
linear = "the W8A8 linear layers"
model = "the layers around the kernels"
decode_kernel = "the decode kernel"

[[check]]
name = "w8a8"
probe = "w8a8_vs_fp32"
covers = ["linear", "model", "chunk_kernel"]

[[check]]
name = "decode"
probe = "decode_vs_recurrence"
covers = ["decode_kernel"]

[[check]]
name = "chunk"
probe = "chunk_vs_recurrent"
covers = ["chunk_kernel"]

[[check]]
name = "plain"
probe = "replay_vs_decode"

[[gate]]
name = "w8a8_ok"
expr = "check.w8a8 passes"

[[gate]]
name = "decode_ok"
expr = "check.decode passes"

[[gate]]
name = "chunk_ok"
expr = "check.chunk passes"

[[gate]]
name = "plain_ok"
expr = "check.plain passes"
)";

std::string config_error(const std::string& text) {
  try {
    parse_objective(text, "obj.toml");
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kConfig);
    return error.message();
  }
  return "no error";
}

GateResult gate_with(const std::string& name, GateVerdict verdict) {
  GateResult gate;
  gate.name = name;
  gate.verdict = verdict;
  return gate;
}

TEST(CoversTest, ComponentsAndCoversAreRead) {
  const Objective objective = parse_objective(kObjective, "obj.toml");
  ASSERT_EQ(objective.components.size(), 4u);
  EXPECT_EQ(objective.components[0], (Component{"chunk_kernel", "the chunked prefill", 6}));
  EXPECT_EQ(objective.checks[0].covers,
            (std::vector<std::string>{"linear", "model", "chunk_kernel"}));
  EXPECT_TRUE(objective.checks[3].covers.empty());
  EXPECT_EQ(gate_covers(objective, objective.gates[0]),
            (std::vector<std::string>{"chunk_kernel", "linear", "model"}));
  EXPECT_TRUE(gate_covers(objective, objective.gates[3]).empty());
}

TEST(CoversTest, AnUnknownComponentNamesTheFileLineAndTheDeclaredOnes) {
  std::string text = kObjective;
  text.replace(text.find("covers = [\"decode_kernel\"]"), 26, "covers = [\"decode_kernal\"]");
  EXPECT_EQ(config_error(text),
            "obj.toml:19: check[1].covers[0]: expected a component declared in [components] "
            "(chunk_kernel, linear, model, decode_kernel), found 'decode_kernal'");
}

TEST(CoversTest, CoversWithoutComponentsSaysTheFileDeclaresNone) {
  EXPECT_EQ(
      config_error("[subject]\ncommand = \"s\"\n[[check]]\nprobe = \"p\"\ncovers = [\"x\"]\n"),
      "obj.toml:5: check[0].covers[0]: expected a component declared in [components] "
      "(the file declares none), found 'x'");
}

TEST(CoversTest, ACheckCoveringNothingIsAnError) {
  EXPECT_EQ(config_error("[subject]\ncommand = \"s\"\n[components]\na = \"A\"\n[[check]]\nprobe = "
                         "\"p\"\ncovers = []\n"),
            "obj.toml:7: check[0].covers: expected at least one component the probe runs (a "
            "check that covers nothing explains no failure; leave covers out instead), found []");
}

TEST(CoversTest, AComponentListedTwiceAndAnEmptyDescriptionAreErrors) {
  EXPECT_EQ(config_error("[subject]\ncommand = \"s\"\n[components]\na = \"A\"\n[[check]]\nprobe = "
                         "\"p\"\ncovers = [\"a\", \"a\"]\n"),
            "obj.toml:7: check[0].covers[1]: 'a' is listed twice");
  EXPECT_EQ(config_error("[subject]\ncommand = \"s\"\n[components]\na = \"\"\n[[check]]\nprobe = "
                         "\"p\"\n"),
            "obj.toml:4: components.a: expected what component 'a' is (the code it names), "
            "found ''");
}

TEST(CoversTest, ThePlanSaysWhichEntryEachComponentIsTracedTo) {
  const Objective objective = parse_objective(kObjective, "obj.toml");
  const Plan plan = make_plan(objective, Configuration{});
  EXPECT_EQ(render_plan(plan, objective, 50),
            "plan for obj.toml, no configuration (the file's own points): 4 tasks\n"
            "  check     w8a8    w8a8_vs_fp32          (defaults)\n"
            "  check     decode  decode_vs_recurrence  (defaults)\n"
            "  check     chunk   chunk_vs_recurrent    (defaults)\n"
            "  check     plain   replay_vs_decode      (defaults)\n"
            "components (covers):\n"
            "  chunk_kernel: check chunk; also run by check w8a8\n"
            "  linear: check w8a8 (with 2 other component(s): no entry runs it alone)\n"
            "  model: check w8a8 (with 2 other component(s): no entry runs it alone)\n"
            "  decode_kernel: check decode\n"
            "  without covers: check plain\n"
            "  untimed (no planned bench or scenario covers them: a slowdown there passes every "
            "gate): chunk_kernel, linear, model, decode_kernel\n");
  EXPECT_EQ(plan_to_json(plan, objective)["components"][0].dump(),
            R"({"name":"chunk_kernel","description":"the chunked prefill","most_specific":)"
            R"(["check chunk"],"most_specific_covers":1,"also":["check w8a8"],"timed_by":[]})");
  EXPECT_EQ(plan_to_json(plan, objective)["without_covers"].dump(), R"(["check plain"])");
}

// A slowdown is seen only by what times a component: the plan names, per component, the benches
// and scenarios that cover it, and the components none covers (checks do not count: they compare
// results, not time).
TEST(CoversTest, ThePlanNamesTheComponentsNoBenchOrScenarioTimes) {
  const std::string text = kObjective + R"(
[[bench]]
name = "prefill_speed"
probe = "chunk_prefill"
covers = ["chunk_kernel"]

[[scenario]]
name = "serve"
probe = "serve"
covers = ["model", "chunk_kernel"]

[[gate]]
name = "prefill_not_slower"
expr = "prefill_speed not SLOWER than baseline"
)";
  const Objective objective = parse_objective(text, "obj.toml");
  const Plan plan = make_plan(objective, Configuration{});
  const std::string rendered = render_plan(plan, objective, 50);
  EXPECT_NE(rendered.find("  untimed (no planned bench or scenario covers them: a slowdown there "
                          "passes every gate): linear, decode_kernel\n"),
            std::string::npos)
      << rendered;
  const auto json = plan_to_json(plan, objective);
  EXPECT_EQ(json["components"][0]["timed_by"].dump(),
            R"(["bench prefill_speed","scenario serve"])");
  EXPECT_EQ(json["components"][2]["timed_by"].dump(), R"(["scenario serve"])");
  EXPECT_EQ(json["untimed"].dump(), R"(["linear","decode_kernel"])");
}

TEST(ExplainFailuresTest, TheMostSpecificFailingGateLeadsAndTheCompositeFollowsFromIt) {
  const Objective objective = parse_objective(kObjective, "obj.toml");
  const CauseReport report = explain_failures(
      objective,
      {gate_with("w8a8_ok", GateVerdict::kFail), gate_with("decode_ok", GateVerdict::kPass),
       gate_with("chunk_ok", GateVerdict::kFail), gate_with("plain_ok", GateVerdict::kFail)});
  // plain_ok's entry declares no components: a cause of its own, after every covered one.
  EXPECT_EQ(report.causes, (std::vector<std::string>{"chunk_ok", "plain_ok"}));
  ASSERT_EQ(report.follows.size(), 1u);
  EXPECT_EQ(report.follows[0].gate, "w8a8_ok");
  EXPECT_EQ(report.follows[0].cause, "chunk_ok");
  EXPECT_EQ(report.follows[0].entry, "w8a8");
  EXPECT_EQ(report.follows[0].via, (std::vector<std::string>{"chunk_kernel"}));
  EXPECT_EQ(report.follows[0].sentence,
            "w8a8_ok fails because check w8a8 runs chunk_kernel, which fails chunk_ok");
  EXPECT_EQ(cause_lines(report, objective),
            (std::vector<std::string>{
                "lead: chunk_ok (covers chunk_kernel)",
                "also: plain_ok (its components are not "
                "declared)",
                "w8a8_ok fails because check w8a8 runs chunk_kernel, which fails chunk_ok"}));
  EXPECT_EQ(cause_report_to_json(report, objective).dump(),
            R"({"lead":"chunk_ok","causes":[{"gate":"chunk_ok","covers":["chunk_kernel"]},)"
            R"({"gate":"plain_ok","covers":[]}],"follows":[{"gate":"w8a8_ok","cause":"chunk_ok",)"
            R"("entry":"w8a8","via":["chunk_kernel"],"sentence":"w8a8_ok fails because check )"
            R"(w8a8 runs chunk_kernel, which fails chunk_ok"}]})");
}

TEST(ExplainFailuresTest, AGateNothingMoreSpecificExplainsIsItsOwnCause) {
  const Objective objective = parse_objective(kObjective, "obj.toml");
  // The decode check fails too, but its component is not one the model check runs.
  const CauseReport report =
      explain_failures(objective, {gate_with("w8a8_ok", GateVerdict::kFail),
                                   gate_with("decode_ok", GateVerdict::kFail),
                                   gate_with("chunk_ok", GateVerdict::kPass)});
  EXPECT_EQ(report.causes, (std::vector<std::string>{"decode_ok", "w8a8_ok"}));
  EXPECT_TRUE(report.follows.empty());
  EXPECT_TRUE(explain_failures(objective, {gate_with("w8a8_ok", GateVerdict::kPass)}).empty());
}

TEST(ExplainsTest, OnlyAStrictSubsetExplains) {
  EXPECT_TRUE(explains({"a"}, {"a", "b"}));
  EXPECT_FALSE(explains({"a", "b"}, {"a", "b"}));
  EXPECT_FALSE(explains({"a", "c"}, {"a", "b", "d"}));
  EXPECT_FALSE(explains({}, {"a"}));
}

// Checks fail as `failing` says; every point is recorded in `calls`.
struct Subject {
  std::set<std::string> failing;
  std::vector<std::string> calls;
  PointRunner runner() {
    return [this](const PlanTask& task, const ProbeEntry&, int64_t repeat) {
      calls.push_back(task.entry);
      PointResult point;
      point.layer = task.layer;
      point.entry = task.entry;
      point.probe = task.probe;
      point.params = task.params;
      point.repeat = repeat;
      point.verdict = failing.count(task.entry) ? Verdict::kFail : Verdict::kPass;
      return point;
    };
  }
};

struct Announced {
  std::vector<std::string> log;
  CascadeOptions options(const Subject& subject) {
    CascadeOptions options;
    options.gate_decided = [this, &subject](const GateResult& gate) {
      log.push_back(gate.name + " " + std::string(gate_verdict_name(gate.verdict)) + " after " +
                    std::to_string(subject.calls.size()) + ": " + gate.rule);
    };
    return options;
  }
};

TEST(CauseCascadeTest, AFailingCompositeRunsItsComponentCheckNextAndWaitsForItsVerdict) {
  const Objective objective = parse_objective(kObjective, "obj.toml");
  const Plan plan = make_plan(objective, Configuration{});
  Subject subject;
  subject.failing = {"w8a8", "chunk"};
  Announced announced;
  const CascadeResult result =
      run_cascade(objective, plan, announced.options(subject), subject.runner());
  // chunk, which the failing w8a8 covers more specifically, runs before decode.
  EXPECT_EQ(subject.calls, (std::vector<std::string>{"w8a8", "chunk", "decode", "plain"}));
  EXPECT_EQ(announced.log,
            (std::vector<std::string>{
                "chunk_ok fail after 2: fail: 1 of 1 point(s) of check chunk broke their "
                "tolerances; first the default point",
                "w8a8_ok fail after 2: fail: 1 of 1 point(s) of check w8a8 broke their "
                "tolerances; first the default point (follows from chunk_ok: it covers "
                "chunk_kernel)",
                "decode_ok pass after 3: pass: every one of 1 point(s) of check decode met its "
                "tolerances",
                "plain_ok pass after 4: pass: every one of 1 point(s) of check plain met its "
                "tolerances"}));
  EXPECT_EQ(result.causes.causes, (std::vector<std::string>{"chunk_ok"}));
  ASSERT_EQ(result.causes.follows.size(), 1u);
  EXPECT_EQ(result.gates[0].rule,
            "fail: 1 of 1 point(s) of check w8a8 broke their tolerances; first the default point "
            "(w8a8_ok fails because check w8a8 runs chunk_kernel, which fails chunk_ok)");
}

// Three nested checks, the widest first: cache (cache, model, chunk_kernel) and prefill (model,
// chunk_kernel) both fail, both wait for chunk (chunk_kernel), which passes. The middle one is the
// cause: it is printed before the composite it explains, though the composite failed first.
TEST(CauseCascadeTest, TwoHeldFailingGatesGoOutCauseFirst) {
  const Objective objective = parse_objective(R"(name = "nested"
[subject]
command = ["subject", "probe"]
[components]
chunk_kernel = "the chunked prefill"
model = "the layers around the kernels"
cache = "the state cache"
[[check]]
name = "cache"
probe = "state_cache_vs_fp32"
covers = ["cache", "model", "chunk_kernel"]
[[check]]
name = "prefill"
probe = "decode_vs_prefill"
covers = ["model", "chunk_kernel"]
[[check]]
name = "chunk"
probe = "chunk_vs_recurrent"
covers = ["chunk_kernel"]
[[gate]]
name = "cache_ok"
expr = "check.cache passes"
[[gate]]
name = "prefill_ok"
expr = "check.prefill passes"
[[gate]]
name = "chunk_ok"
expr = "check.chunk passes"
)",
                                              "nested.toml");
  const Plan plan = make_plan(objective, Configuration{});
  Subject subject;
  subject.failing = {"cache", "prefill"};
  Announced announced;
  const CascadeResult result =
      run_cascade(objective, plan, announced.options(subject), subject.runner());
  EXPECT_EQ(subject.calls, (std::vector<std::string>{"cache", "prefill", "chunk"}));
  EXPECT_EQ(announced.log,
            (std::vector<std::string>{
                "chunk_ok pass after 3: pass: every one of 1 point(s) of check chunk met its "
                "tolerances",
                "prefill_ok fail after 3: fail: 1 of 1 point(s) of check prefill broke their "
                "tolerances; first the default point",
                "cache_ok fail after 3: fail: 1 of 1 point(s) of check cache broke their "
                "tolerances; first the default point (follows from prefill_ok: it covers "
                "chunk_kernel, model)"}));
  EXPECT_EQ(result.causes.causes, (std::vector<std::string>{"prefill_ok"}));
}

TEST(CauseCascadeTest, ACompositeWhoseComponentsPassIsAnnouncedAfterThemAsTheCause) {
  const Objective objective = parse_objective(kObjective, "obj.toml");
  const Plan plan = make_plan(objective, Configuration{});
  Subject subject;
  subject.failing = {"w8a8"};
  Announced announced;
  const CascadeResult result =
      run_cascade(objective, plan, announced.options(subject), subject.runner());
  EXPECT_EQ(subject.calls, (std::vector<std::string>{"w8a8", "chunk", "decode", "plain"}));
  ASSERT_EQ(announced.log.size(), 4u);
  EXPECT_EQ(announced.log[0],
            "chunk_ok pass after 2: pass: every one of 1 point(s) of check chunk met its "
            "tolerances");
  EXPECT_EQ(announced.log[1],
            "w8a8_ok fail after 2: fail: 1 of 1 point(s) of check w8a8 broke their tolerances; "
            "first the default point");
  EXPECT_EQ(result.causes.causes, (std::vector<std::string>{"w8a8_ok"}));
  EXPECT_TRUE(result.causes.follows.empty());
}

TEST(CauseCascadeTest, WithoutAFailureTheObjectivesOrderStands) {
  const Objective objective = parse_objective(kObjective, "obj.toml");
  const Plan plan = make_plan(objective, Configuration{});
  Subject subject;
  const CascadeResult result = run_cascade(objective, plan, {}, subject.runner());
  EXPECT_EQ(subject.calls, (std::vector<std::string>{"w8a8", "decode", "chunk", "plain"}));
  EXPECT_TRUE(result.causes.empty());
}

TEST(CauseCascadeTest, TopFindingsLeadWithTheCausesFinding) {
  CascadeResult result;
  for (const std::string name : {"w8a8_ok", "chunk_ok"}) {
    GateResult gate = gate_with(name, GateVerdict::kFail);
    Finding finding;
    finding.id = "check." + name + ".mismatch";
    finding.severity = Severity::kFail;
    gate.findings.push_back(finding);
    result.gates.push_back(gate);
  }
  result.causes.causes = {"chunk_ok"};
  bool truncated = true;
  const std::vector<Finding> top = top_findings(result, 5, &truncated);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].id, "check.chunk_ok.mismatch");
  EXPECT_EQ(top[1].id, "check.w8a8_ok.mismatch");
  EXPECT_FALSE(truncated);
}

}  // namespace
}  // namespace loupe::gate
