#include "gate/objective.hpp"

#include "gate/executor.hpp"
#include "gate/gate_eval.hpp"
#include "gate/plan.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace loupe::gate {
namespace {

const std::filesystem::path kSourceDir = LOUPE_SOURCE_DIR;

// Lines 1-6: a valid objective the cases below extend from line 7 on.
const std::string kBase = R"([subject]
command = "build/bin/kda probe"

[[check]]
probe = "cp_vs_nocp"
params = { T = [1024, 4096], shards = 8 }
)";

std::string config_error(const std::string& text) {
  try {
    parse_objective(text, "obj.toml");
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kConfig);
    EXPECT_EQ(error.hint(), "docs/objective.md documents every key");
    return error.message();
  }
  return "no error";
}

TEST(ObjectiveTest, TheDemoObjectiveParses) {
  const Objective objective = parse_objective_file(kSourceDir / "examples/kda/loupe.toml");
  EXPECT_EQ(objective.name, "kda");
  // Stop at the first failing layer; `make demo` passes --all to show every one.
  EXPECT_EQ(objective.cascade, CascadeMode::kStopAtFirstFailure);
  SubjectSpec subject;
  subject.command = {"build/bin/kda", "probe"};
  subject.working_dir = (kSourceDir / "examples/kda/../..").lexically_normal();
  subject.environment = {{"OMP_NUM_THREADS", "1"}};
  subject.timeout_s = 300;
  EXPECT_EQ(objective.subject, subject);

  // Cheapest first; the cheapest again on more seeds, last.
  ASSERT_EQ(objective.checks.size(), 12u);
  EXPECT_EQ(objective.checks[11].name, "decode_recurrence_seeds");
  EXPECT_EQ(objective.checks[11].seed, std::optional<uint64_t>(8));
  EXPECT_EQ(objective.checks[11].seeds, 4);
  EXPECT_EQ(objective.checks[0].probe, "decode_vs_recurrence");
  EXPECT_EQ(objective.checks[1].probe, "decode_tiled_vs_merged");
  EXPECT_EQ(objective.checks[2].probe, "disaggregated_vs_colocated");
  EXPECT_EQ(objective.checks[3].probe, "transfer_verifier");
  EXPECT_EQ(objective.checks[4].probe, "w8a8_vs_fp32");
  EXPECT_EQ(
      objective.checks[4].params,
      (std::vector<ParamAxis>{{"weights", {std::string("outlier_channels"), std::string("iid")}}}));
  EXPECT_EQ(objective.checks[5].name, "state_cache");
  EXPECT_EQ(objective.checks[6].name, "decode_prefill");
  EXPECT_EQ(objective.checks[6].probe, "decode_vs_prefill");
  EXPECT_EQ(objective.checks[7].name, "replay");
  EXPECT_EQ(objective.checks[8].probe, "chunk_vs_recurrent");
  const ProbeEntry& cp = objective.checks[9];
  EXPECT_EQ(cp.name, "cp_vs_nocp");
  EXPECT_EQ(cp.probe, "cp_vs_nocp");
  EXPECT_EQ(cp.layer, Layer::kCheck);
  // Declaration order survives (toml++ itself sorts keys).
  std::vector<ParamAxis> params = {{"T", {int64_t{4096}, int64_t{16384}}},
                                   {"shards", {int64_t{8}}},
                                   {"precision", {std::string("ieee")}},
                                   {"decay", {std::string("slow")}}};
  EXPECT_EQ(cp.params, params);
  EXPECT_EQ(cp.tolerances, (std::vector<std::pair<std::string, double>>{{"rms_ratio", 2e-6}}));
  EXPECT_EQ(cp.seed, 7u);
  EXPECT_EQ(objective.checks[10].name, "cp_control");

  ASSERT_EQ(objective.benches.size(), 4u);
  // Cheapest first: the prefill benches, the model's decode step, then decode (its batch-128
  // rounds are the dearest).
  EXPECT_EQ(objective.benches[0].probe, "chunk_prefill");
  EXPECT_EQ(objective.benches[1].probe, "cp_prefill");
  EXPECT_EQ(objective.benches[1].budget_s, 8.0);
  EXPECT_EQ(objective.benches[1].threshold, 0.05);
  EXPECT_EQ(objective.benches[2].probe, "model_decode");
  EXPECT_EQ(objective.benches[2].budget_s, 4.0);
  EXPECT_EQ(objective.benches[3].probe, "decode");
  EXPECT_EQ(objective.benches[3].variants, (std::vector<std::string>{"tiled", "merged"}));
  EXPECT_EQ(objective.benches[3].threshold, 0.05);
  EXPECT_EQ(objective.benches[3].budget_s, 12.0);
  EXPECT_EQ(objective.benches[3].precision, 0.02);
  ASSERT_EQ(objective.scenarios.size(), 4u);
  EXPECT_EQ(objective.scenarios[1].name, "prefill_transfer");
  EXPECT_EQ(objective.scenarios[1].repeats, 25);

  ASSERT_EQ(objective.gates.size(), 39u);
  EXPECT_EQ(objective.gates[0].name, "cp_matches_single_device");
  EXPECT_EQ(gate_expression_to_string(objective.gates[0].expression),
            "check.cp_vs_nocp.rms_ratio <= 2e-06");
  EXPECT_EQ(objective.gates[6].name, "transfer_verifier_rejects_tampering");
  EXPECT_EQ(objective.gates[8].name, "w8a8_within_tolerance");
  EXPECT_EQ(gate_layer(objective.gates[9].expression), Layer::kBench);
  EXPECT_EQ(gate_layer(objective.gates[10].expression), Layer::kScenario);
  EXPECT_EQ(objective.gates[10].confidence, 0.95);
  EXPECT_EQ(objective.gates[12].name, "prefill_lock_wait_share_within_20pct");
  EXPECT_FALSE(is_baseline_gate(objective.gates[12].expression));
  EXPECT_EQ(objective.gates[13].name, "layer_queue_blocked_residence_within_2ms");
  EXPECT_EQ(gate_expression_to_string(objective.gates[13].expression),
            "median(scenario.prefill_transfer.layer_queue_blocked_residence_s) <= 0.002");
  EXPECT_FALSE(is_baseline_gate(objective.gates[13].expression));
  EXPECT_EQ(objective.gates[14].name, "transfer_tail_within_2_5ms");
  EXPECT_EQ(objective.gates[15].name, "lock_handoff_one_switch_per_handoff");
  EXPECT_FALSE(is_baseline_gate(objective.gates[15].expression));
  // Every gate after the within-build ones compares with the baseline.
  EXPECT_EQ(objective.gates[16].name, "decode_matches_recurrence");
  EXPECT_EQ(objective.gates[17].name, "decode_matches_recurrence_on_more_seeds");
  EXPECT_EQ(objective.gates[18].name, "decode_matches_prefill");
  for (size_t index = 19; index < objective.gates.size(); ++index) {
    EXPECT_TRUE(is_baseline_gate(objective.gates[index].expression)) << objective.gates[index].name;
  }
  EXPECT_EQ(objective.gates[31].name, "model_decode_not_slower_than_baseline");
  EXPECT_EQ(
      gate_expression_to_string(objective.gates[35].expression),
      "scenario.prefill_transfer.kv_transfer_interpreter_lock_median_hold_s / baseline <= 1.5");
  // Every kda probe but the GPU and multi-rank ones is gated.
  EXPECT_EQ(objective.coverage_ungated.size(), 9u);  // tp_ranks_vs_notp too (9d4d780)

  ASSERT_EQ(objective.deployment_keys.size(), 6u);
  const DeploymentKey& cache = objective.deployment_keys[2];
  EXPECT_EQ(cache.key, "cache");
  EXPECT_EQ(cache.implies[0].param, "cache");
  EXPECT_EQ(cache.default_value, std::nullopt);
  // A switch: w8a8=on adds the w8a8 check, off (the default) leaves it out.
  const DeploymentKey& w8a8 = objective.deployment_keys[3];
  EXPECT_EQ(w8a8.key, "w8a8");
  EXPECT_EQ(w8a8.default_value, Value(std::string("off")));
  ASSERT_EQ(w8a8.implies.size(), 2u);
  EXPECT_EQ(w8a8.implies[0].probe, "w8a8_vs_fp32");
  EXPECT_FALSE(w8a8.implies[0].param.has_value());
  EXPECT_EQ(w8a8.implies[0].run,
            (std::vector<std::pair<std::string, bool>>{{"on", true}, {"off", false}}));
  // ... and sets the served model's decode bench to W8A8 or fp32.
  EXPECT_EQ(w8a8.implies[1].probe, "model_decode");
  EXPECT_EQ(w8a8.implies[1].param, "w8a8");
  EXPECT_EQ(w8a8.implies[1].map,
            (std::vector<std::pair<std::string, Value>>{{"on", true}, {"off", false}}));
  const DeploymentKey& lock = objective.deployment_keys[4];
  EXPECT_EQ(lock.key, "dispatch_lock");
  ASSERT_EQ(lock.implies.size(), 1u);
  EXPECT_EQ(lock.implies[0].param, "dispatch_holds_lock");
  EXPECT_EQ(lock.implies[0].map,
            (std::vector<std::pair<std::string, Value>>{{"held", true}, {"released", false}}));
  EXPECT_FALSE(objective.deployment_keys[5].implies[0].param.has_value());
  EXPECT_TRUE(objective.deployment_keys[5].implies[0].run.empty());

  ASSERT_EQ(objective.deployments.size(), 2u);
  EXPECT_EQ(objective.deployments[0].name, "incident");
  EXPECT_EQ(objective.deployments[0].settings,
            (std::vector<std::pair<std::string, Value>>{{"precision", std::string("tf32_rz")},
                                                        {"dispatch_lock", std::string("held")},
                                                        {"decode_kernel", std::string("tiled")},
                                                        {"cache", std::string("int8")},
                                                        {"w8a8", std::string("on")}}));
  ASSERT_EQ(objective.review.size(), 3u);
  EXPECT_EQ(objective.review[0].name, "numerics");
  EXPECT_EQ(objective.review[0].paths, (std::vector<std::string>{"kda/math/**", "kda/kernels/**"}));
  EXPECT_EQ(objective.review[2].name, "production-risk");
}

TEST(ObjectiveTest, TheSmokeObjectiveParses) {
  const Objective objective = parse_objective_file(kSourceDir / "examples/kda/smoke.toml");
  EXPECT_EQ(objective.name, "kda-smoke");
  EXPECT_EQ(objective.checks.size(), 3u);
  EXPECT_EQ(objective.benches.size(), 1u);
  EXPECT_EQ(objective.scenarios.size(), 2u);
  EXPECT_EQ(objective.gates.size(), 5u);
  EXPECT_NE(objective.find_deployment("fixed"), nullptr);
}

TEST(ObjectiveTest, TheMultiRankObjectiveParsesItsLauncher) {
  const Objective objective = parse_objective_file(kSourceDir / "examples/kda/multirank.toml");
  EXPECT_EQ(objective.subject.launch,
            (std::vector<std::string>{"mpirun", "-n", "{ranks}", "--oversubscribe",
                                      "--allow-run-as-root"}));
  // CP at tf32x3 and tf32_rz, and TP; a gate on each.
  EXPECT_EQ(objective.checks.size(), 3u);
  EXPECT_EQ(objective.gates.size(), 3u);
  EXPECT_EQ(objective.checks[2].probe, "tp_ranks_vs_notp");
}

TEST(ObjectiveTest, DefaultsAndAStringCommand) {
  const Objective objective = parse_objective(kBase, "dir/obj.toml");
  EXPECT_EQ(objective.cascade, CascadeMode::kStopAtFirstFailure);
  EXPECT_EQ(objective.subject.command, (std::vector<std::string>{"build/bin/kda", "probe"}));
  EXPECT_FALSE(objective.subject.working_dir.has_value());
  EXPECT_EQ(objective.subject.timeout_s, 600);
  EXPECT_TRUE(objective.subject.launch.empty());
  EXPECT_EQ(objective.checks[0].repeats, 1);
  EXPECT_FALSE(objective.checks[0].seed.has_value());
  EXPECT_EQ(objective.checks[0].line, 4);
  EXPECT_EQ(objective.file, "dir/obj.toml");
}

// [build] lets `loupe bisect` (and its MCP tool, which takes no shell command from a client)
// build each commit from what the objective says.
TEST(ObjectiveTest, BuildTableSaysHowACheckoutIsBuilt) {
  EXPECT_FALSE(parse_objective(kBase, "obj.toml").build.has_value());
  const Objective objective =
      parse_objective(kBase +
                          "[build]\ncommand = \"make -j2 subject\"\nsubject_from = \"tools/sub\"\n"
                          "timeout_s = 90\n",
                      "obj.toml");
  ASSERT_TRUE(objective.build.has_value());
  EXPECT_EQ(objective.build->command, "make -j2 subject");
  EXPECT_EQ(objective.build->subject_from, "tools/sub");
  EXPECT_EQ(objective.build->timeout_s, 90);
  EXPECT_EQ(parse_objective(kBase + "[build]\ncommand = \"make\"\n", "obj.toml").build->timeout_s,
            3600);
}

TEST(ObjectiveTest, BuildTableMistakesNameTheKey) {
  EXPECT_EQ(config_error(kBase + "[build]\nsubject_from = \"x\"\n"),
            "obj.toml:7: build.command: missing; this key is required");
  EXPECT_EQ(config_error(kBase + "[build]\ncommand = \"  \"\n"),
            "obj.toml:8: build.command: expected a non-empty string");
  EXPECT_EQ(config_error(kBase + "[build]\ncommand = \"make\"\nsubject_from = \"../up\"\n"),
            "obj.toml:9: build.subject_from: expected a folder relative to the repository root, "
            "without '..', found '../up'");
  EXPECT_EQ(config_error(kBase + "[build]\ncommand = \"make\"\ntimeout_s = 0\n"),
            "obj.toml:9: build.timeout_s: expected a number of seconds above 0, found 0");
  EXPECT_EQ(config_error(kBase + "[build]\ncommand = \"make\"\ncmd = \"x\"\n"),
            "obj.toml:9: build.cmd: unknown key; expected one of command, subject_from, timeout_s");
}

TEST(ObjectiveTest, PointsAreTheProductOfParamsTimesTheZippedRows) {
  const Objective objective = parse_objective(kBase + R"([[bench]]
probe = "decode"
params = { H = [16, 64], fast = true }
zip = { batch = [1, 32], note = ["small", "large"] }
)",
                                              "obj.toml");
  const std::vector<Params> points = expand_points(objective.benches[0]);
  auto point = [](int64_t h, int64_t batch, const char* note) {
    return Params{{"H", h}, {"fast", true}, {"batch", batch}, {"note", std::string(note)}};
  };
  EXPECT_EQ(points, (std::vector<Params>{point(16, 1, "small"), point(16, 32, "large"),
                                         point(64, 1, "small"), point(64, 32, "large")}));
  EXPECT_EQ(expand_points(objective.checks[0]),
            (std::vector<Params>{{{"T", int64_t{1024}}, {"shards", int64_t{8}}},
                                 {{"T", int64_t{4096}}, {"shards", int64_t{8}}}}));
  ProbeEntry empty;
  EXPECT_EQ(expand_points(empty), (std::vector<Params>{Params{}}));
}

TEST(ObjectiveTest, UnreadableFileIsAnInputError) {
  try {
    parse_objective_file("/nonexistent/objective.toml");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_EQ(error.message(), "/nonexistent/objective.toml: cannot read the objective file");
  }
}

TEST(ObjectiveErrorsTest, SyntaxAndTopLevel) {
  EXPECT_EQ(config_error(kBase + "cascade = \n"),
            "obj.toml:7:11: TOML syntax: Error while parsing key-value pair: expected value, saw "
            "'\\n'");
  // Top-level keys come before the first table; after it they belong to that table.
  EXPECT_EQ(config_error("bogus = 1\n" + kBase),
            "obj.toml:1: bogus: unknown key; expected one of name, description, cascade, subject, "
            "check, bench, scenario, gate, deployment_key, deployment, review, coverage, "
            "executor, build, components");
  EXPECT_EQ(config_error(kBase + "bogus = 1\n"),
            "obj.toml:7: check[0].bogus: unknown key; expected one of probe, name, description, "
            "params, zip, repeats, seed, covers, structures, tolerances, seeds, rules");
  EXPECT_EQ(config_error("cascade = \"some\"\n" + kBase),
            "obj.toml:1: cascade: expected \"stop\" (or \"stop-at-first-failure\") or \"all\", "
            "found \"some\"");
  EXPECT_EQ(config_error("name = 3\n" + kBase),
            "obj.toml:1: name: expected a string, found an integer");
  EXPECT_EQ(config_error("name = \"x\"\n[[check]]\nprobe = \"p\"\n"),
            "obj.toml:1: subject: missing; this key is required");
  EXPECT_EQ(config_error("[subject]\ncommand = \"kda\"\n"),
            "obj.toml:1: check: expected at least one [[check]], [[bench]] or [[scenario]]");
  EXPECT_EQ(config_error("check = 1\n" + kBase),
            "obj.toml:5:1: TOML syntax: Error while parsing table header: cannot redefine "
            "existing integer 'check' as array-of-tables");
  EXPECT_EQ(config_error("scenario = { probe = \"s\" }\n" + kBase),
            "obj.toml:1: scenario: expected an array of tables ([[scenario]]), found a table");
}

TEST(ObjectiveErrorsTest, Subject) {
  EXPECT_EQ(config_error("[subject]\ncommand = 3\n[[check]]\nprobe = \"p\"\n"),
            "obj.toml:2: subject.command: expected a string or an array of strings, found an "
            "integer");
  EXPECT_EQ(config_error("[subject]\ncommand = [\"kda\", 2]\n[[check]]\nprobe = \"p\"\n"),
            "obj.toml:2: subject.command[1]: expected a string, found an integer");
  EXPECT_EQ(config_error("[subject]\ncommand = \"  \"\n[[check]]\nprobe = \"p\"\n"),
            "obj.toml:2: subject.command: expected the subject's command line, found nothing");
  EXPECT_EQ(config_error("[subject]\ncommand = \"kda\"\ntimeout_s = 0\n[[check]]\nprobe = \"p\"\n"),
            "obj.toml:3: subject.timeout_s: expected a number of seconds above 0, found 0");
  EXPECT_EQ(config_error("[subject]\ncommand = \"kda\"\nenvironment = { A = 1 }\n[[check]]\n"
                         "probe = \"p\"\n"),
            "obj.toml:3: subject.environment.A: expected a string, found an integer");
  EXPECT_EQ(config_error("[subject]\ncommand = \"kda\"\ncwd = \".\"\n[[check]]\nprobe = \"p\"\n"),
            "obj.toml:3: subject.cwd: unknown key; expected one of command, working_dir, "
            "environment, env, timeout_s, launch");
  // issue 22: a launcher for checks across ranks, a string split at spaces or an array.
  EXPECT_EQ(config_error("[subject]\ncommand = \"kda\"\nlaunch = 4\n[[check]]\nprobe = \"p\"\n"),
            "obj.toml:3: subject.launch: expected a string or an array of strings, found an "
            "integer");
  EXPECT_EQ(
      config_error("[subject]\ncommand = \"kda\"\nlaunch = \" \"\n[[check]]\nprobe = \"p\"\n"),
      "obj.toml:3: subject.launch: expected a launcher's command line (\"mpirun -n "
      "{ranks}\"), found nothing");
  // issue 17: variables passed on from loupe's environment are names or prefixes ending in '*'.
  EXPECT_EQ(config_error("[subject]\ncommand = \"kda\"\nenv = [\"HF_*\", \"1BAD\"]\n[[check]]\n"
                         "probe = \"p\"\n"),
            "obj.toml:3: subject.env[1]: expected a variable name (letters, digits, '_'), or a "
            "prefix ending in '*', found '1BAD'");
  EXPECT_EQ(parse_objective("[subject]\ncommand = \"kda\"\nenv = [\"HF_HOME\", \"TRITON_*\"]\n"
                            "[[check]]\nprobe = \"p\"\n",
                            "obj.toml")
                .subject.pass_env,
            (std::vector<std::string>{"HF_HOME", "TRITON_*"}));
  EXPECT_EQ(config_error("[subject]\ncommand = \"kda\"\n[[check]]\nprobe = \"../x\"\n"),
            "obj.toml:4: check[0].probe: expected a probe name of 1 to 128 characters of A-Z a-z "
            "0-9 _ -, the first a letter, digit or _, found '../x'");
}

TEST(ObjectiveErrorsTest, ProbeEntries) {
  EXPECT_EQ(config_error(kBase + "[[check]]\nprobe = \"x\"\nprams = {}\n"),
            "obj.toml:9: check[1].prams: unknown key; expected one of probe, name, description, "
            "params, zip, repeats, seed, covers, structures, tolerances, seeds, rules");
  EXPECT_EQ(config_error(kBase + "[[bench]]\nprobe = \"x\"\ntolerances = {}\n"),
            "obj.toml:9: bench[0].tolerances: unknown key; expected one of probe, name, "
            "description, params, zip, repeats, seed, covers, structures, variants, threshold, "
            "budget_s, precision, "
            "counters");
  EXPECT_EQ(
      config_error(kBase + "[[check]]\nprobe = \"x\"\nbudget_s = 5\n"),
      "obj.toml:9: check[1].budget_s: unknown key; expected one of probe, name, "
      "description, params, zip, repeats, seed, covers, structures, tolerances, seeds, rules");
  EXPECT_EQ(config_error(kBase + "[[check]]\nname = \"x\"\n"),
            "obj.toml:7: check[1].probe: missing; this key is required");
  EXPECT_EQ(config_error(kBase + "[[check]]\nprobe = \"cp-vs\"\n"),
            "obj.toml:8: check[1].probe: expected a name of letters, digits and '_' (gates refer "
            "to it), found 'cp-vs'; add name = \"...\"");
  EXPECT_EQ(config_error(kBase + "[[check]]\nprobe = \"cp_vs_nocp\"\n"),
            "obj.toml:7: check[1].name: 'cp_vs_nocp' already names check[0] (line 4); give each "
            "entry its own name");
  EXPECT_EQ(config_error(kBase + "[[check]]\nprobe = \"x\"\nparams = { T = { a = 1 } }\n"),
            "obj.toml:9: check[1].params.T: expected an integer, a float, a string or a boolean, "
            "found a table");
  EXPECT_EQ(config_error(kBase + "[[check]]\nprobe = \"x\"\nparams = { T = [] }\n"),
            "obj.toml:9: check[1].params.T: expected at least one value, found an empty list");
  EXPECT_EQ(config_error(kBase + "[[check]]\nprobe = \"x\"\nparams = { T = [1, [2]] }\n"),
            "obj.toml:9: check[1].params.T[1]: expected an integer, a float, a string or a "
            "boolean, found an array");
  EXPECT_EQ(config_error(kBase + "[[check]]\nprobe = \"x\"\nzip = { T = [1, 2], S = [1] }\n"),
            "obj.toml:9: check[1].zip.S: expected 2 values (as many as check[1].zip.T), found 1");
  EXPECT_EQ(config_error(kBase + "[[check]]\nprobe = \"x\"\nzip = { T = 1 }\n"),
            "obj.toml:9: check[1].zip.T: expected a list of values (zipped lists step together), "
            "found an integer");
  EXPECT_EQ(config_error(kBase + "[[check]]\nprobe = \"x\"\nparams = { T = 1 }\nzip = { T = [1] "
                                 "}\n"),
            "obj.toml:10: check[1].zip.T: 'T' is already swept in check[1].params; a parameter "
            "is either in params or in zip");
  EXPECT_EQ(config_error(kBase + "[[check]]\nprobe = \"x\"\nrepeats = 0\n"),
            "obj.toml:9: check[1].repeats: expected 1 to 10000 (the cap on subject runs per run), "
            "found 0");
  EXPECT_EQ(config_error(kBase + "[[check]]\nprobe = \"x\"\nrepeats = 1.5\n"),
            "obj.toml:9: check[1].repeats: expected an integer, found a float");
  EXPECT_EQ(config_error(kBase + "[[check]]\nprobe = \"x\"\nseed = -1\n"),
            "obj.toml:9: check[1].seed: expected 0 or more, found -1");
  EXPECT_EQ(config_error(kBase + "[[check]]\nprobe = \"x\"\ntolerances = { rms_ratio = -1.0 }\n"),
            "obj.toml:9: check[1].tolerances.rms_ratio: expected a bound of 0 or more, found -1");
  EXPECT_EQ(config_error(kBase + "[[bench]]\nprobe = \"x\"\nthreshold = 5\n"),
            "obj.toml:9: bench[0].threshold: expected a fraction between 0 and 1 (0.05 is 5 %), "
            "found 5");
  EXPECT_EQ(config_error(kBase + "[[bench]]\nprobe = \"x\"\nvariants = [\"a\"]\n"),
            "obj.toml:9: bench[0].variants: expected at least two variant names (a verdict "
            "compares two), found 1");
  EXPECT_EQ(config_error(kBase + "[[bench]]\nprobe = \"x\"\nvariants = [\"a\", \"any\"]\n"),
            "obj.toml:9: bench[0].variants[1]: expected a variant name of letters, digits and '_' "
            "other than 'configured' and 'any', found 'any'");
  EXPECT_EQ(config_error(kBase + "[[bench]]\nprobe = \"x\"\nvariants = [\"a\", \"a\"]\n"),
            "obj.toml:9: bench[0].variants[1]: 'a' is listed twice");
  EXPECT_EQ(config_error(kBase + "[[bench]]\nprobe = \"x\"\nbudget_s = 0\n"),
            "obj.toml:9: bench[0].budget_s: expected seconds of sampling per point, above 0 and "
            "at most 3600, found 0");
  EXPECT_EQ(config_error(kBase + "[[bench]]\nprobe = \"x\"\nbudget_s = \"8 s\"\n"),
            "obj.toml:9: bench[0].budget_s: expected a number, found a string");
  EXPECT_EQ(config_error(kBase + "[[bench]]\nprobe = \"x\"\nprecision = 1.5\n"),
            "obj.toml:9: bench[0].precision: expected a relative half-width between 0 and 1 "
            "(0.01 is 1 %), found 1.5");
}

TEST(ObjectiveTest, BenchBudgetAndPrecision) {
  const Objective objective = parse_objective(
      kBase + "[[bench]]\nprobe = \"decode\"\nbudget_s = 8\nprecision = 0.005\n", "obj.toml");
  ASSERT_EQ(objective.benches.size(), 1u);
  EXPECT_EQ(objective.benches[0].budget_s, 8.0);
  EXPECT_EQ(objective.benches[0].precision, 0.005);
  EXPECT_EQ(objective.checks[0].budget_s, std::nullopt);
}

// Issue 24: a bench entry asks for the counters pass the CLI's --counters/--counters-launches give.
TEST(ObjectiveTest, BenchCountersReachTheRunRequest) {
  const Objective objective =
      parse_objective(kBase +
                          "[[bench]]\nprobe = \"decode_gpu\"\n"
                          "counters = { kernel = \"merged_v_decode\", launches = 3 }\n",
                      "obj.toml");
  ASSERT_EQ(objective.benches.size(), 1u);
  ASSERT_TRUE(objective.benches[0].counters.has_value());
  EXPECT_EQ(objective.benches[0].counters->kernel, "merged_v_decode");
  EXPECT_EQ(objective.benches[0].counters->launches, 3);
  EXPECT_FALSE(objective.checks[0].counters.has_value());

  PlanTask task;
  task.layer = Layer::kBench;
  task.entry = task.probe = "decode_gpu";
  const probe::RunRequest request = point_run_request(objective, "/tmp/home", "run/.staging", 0,
                                                      task, objective.benches[0], 0, "run");
  ASSERT_TRUE(request.counters.has_value());
  EXPECT_EQ(request.counters->kernel_regex, "merged_v_decode");
  EXPECT_EQ(request.counters->launches, 3);
  // launches defaults to one untimed call; an entry without counters runs no pass.
  const Objective plain =
      parse_objective(kBase +
                          "[[bench]]\nprobe = \"decode_gpu\"\ncounters = { kernel = \"decode\" }\n"
                          "[[bench]]\nprobe = \"other\"\n",
                      "obj.toml");
  EXPECT_EQ(plain.benches[0].counters->launches, 1);
  task.entry = task.probe = "other";
  EXPECT_FALSE(
      point_run_request(plain, "/tmp/home", "run/.staging", 0, task, plain.benches[1], 0, "run")
          .counters);
}

// Issues 36/38: a bench's `variants` are the only ones its subject runs, in that order; a check
// asks for none.
TEST(ObjectiveTest, BenchVariantsReachTheRunRequestInTheirOrder) {
  const Objective objective = parse_objective(
      kBase + "[[bench]]\nprobe = \"chunk_gpu\"\nvariants = [\"tf32\", \"intra\", \"state\"]\n",
      "obj.toml");
  PlanTask task;
  task.layer = Layer::kBench;
  task.entry = task.probe = "chunk_gpu";
  const probe::RunRequest request = point_run_request(objective, "/tmp/home", "run/.staging", 0,
                                                      task, objective.benches[0], 0, "run");
  EXPECT_EQ(request.variants, (std::vector<std::string>{"tf32", "intra", "state"}));
  task.layer = Layer::kCheck;
  task.entry = task.probe = "cp_vs_nocp";
  EXPECT_TRUE(point_run_request(objective, "/tmp/home", "run/.staging", 0, task,
                                objective.checks[0], 0, "run")
                  .variants.empty());
}

// Issue 37: a check names threshold rules (a file beside the objective, or inline); each output
// is decided by the first rule matching its name, and the point request carries them.
TEST(ObjectiveTest, CheckRulesInlineAndFromAFileReachTheRunRequest) {
  const Objective inline_rules = parse_objective(
      kBase +
          "rules = [{ name = \"state\", match = '^state$', when = [\"rel <= 0.0085\"] },\n"
          "         { match = '.*', when = [\"max_abs <= 1e-2\", \"cosine >= 0.999\"] }]\n",
      "dir/obj.toml");
  ASSERT_TRUE(inline_rules.checks[0].rules.has_value());
  const check::RuleSet& rules = *inline_rules.checks[0].rules;
  EXPECT_EQ(rules.origin, "dir/obj.toml");
  ASSERT_EQ(rules.rules.size(), 2u);
  EXPECT_EQ(rules.rules[0].name, "state");
  EXPECT_EQ(rules.rules[0].match, "^state$");
  EXPECT_EQ(rules.rules[0].line, 7);
  EXPECT_EQ(rules.rules[1].name, "rule 2");
  EXPECT_EQ(rules.rules[1].when_text,
            (std::vector<std::string>{"max_abs <= 1e-2", "cosine >= 0.999"}));
  ASSERT_EQ(rules.rules[1].when.size(), 2u);
  EXPECT_EQ(rules.rules[1].when[1].op, check::ComparisonOp::kGreaterEqual);
  EXPECT_EQ(rules.rules[1].when[1].limit, 0.999);

  PlanTask task;
  task.layer = Layer::kCheck;
  task.entry = task.probe = "cp_vs_nocp";
  task.params = {{"T", Value(int64_t{1024})}, {"shards", Value(int64_t{8})}};
  const probe::RunRequest request = point_run_request(inline_rules, "/tmp/home", "run/.staging", 0,
                                                      task, inline_rules.checks[0], 0, "run");
  EXPECT_EQ(request.analyze.rules, inline_rules.checks[0].rules);
  // What a Slurm task reads back is the same rule set.
  EXPECT_EQ(probe::rules_from_json(probe::rules_to_json(rules)), rules);

  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("loupe_objective_rules_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream out(dir / "rules.toml");
    out << "[[rule]]\nname = \"all\"\nmatch = '.*'\nwhen = [\"rms_ratio <= 1e-5\"]\n";
  }
  const Objective from_file = parse_objective(kBase + "rules = \"rules.toml\"\n", dir / "obj.toml");
  ASSERT_TRUE(from_file.checks[0].rules.has_value());
  EXPECT_EQ(from_file.checks[0].rules->origin, (dir / "rules.toml").string());
  ASSERT_EQ(from_file.checks[0].rules->rules.size(), 1u);
  EXPECT_EQ(from_file.checks[0].rules->rules[0].name, "all");
  EXPECT_EQ(from_file.checks[0].rules->rules[0].line, 1);
  {
    std::ofstream out(dir / "bad.toml");
    out << "[[rule]]\nmatch = '.*'\nwhen = [\"rel <== 1\"]\n";
  }
  try {
    parse_objective(kBase + "rules = \"bad.toml\"\n", dir / "obj.toml");
    ADD_FAILURE() << "a bad rules file parsed";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kConfig);
    EXPECT_EQ(error.message(), (dir / "bad.toml").string() +
                                   ":3: rule[0].when: predicate 'rel <== 1' at character 7: "
                                   "expected a number");
  }
  std::filesystem::remove_all(dir);
}

TEST(ObjectiveErrorsTest, CheckRules) {
  EXPECT_EQ(config_error(kBase + "rules = \"missing.toml\"\n"),
            "obj.toml:7: check[0].rules: cannot read the rules file missing.toml; expected a TOML "
            "file of [[rule]] tables (docs/formats.md, \"Threshold rules\")");
  EXPECT_EQ(config_error(kBase + "rules = 3\n"),
            "obj.toml:7: check[0].rules: expected a rules file name or an array of rule tables, "
            "found an integer");
  EXPECT_EQ(config_error(kBase + "rules = []\n"),
            "obj.toml:7: check[0].rules: expected at least one rule ({ match = 'REGEX', when = "
            "[...] })");
  EXPECT_EQ(config_error(kBase + "rules = [{ match = 'x', when = [], limit = 1 }]\n"),
            "obj.toml:7: check[0].rules[0].limit: unknown key; expected one of name, match, when");
  EXPECT_EQ(config_error(kBase + "rules = [{ when = [\"rel <= 1\"] }]\n"),
            "obj.toml:7: check[0].rules[0].match: missing; this key is required");
  EXPECT_EQ(config_error(kBase + "tolerances = { rms_ratio = 1e-5 }\n"
                                 "rules = [{ match = 'x', when = [\"rel <= 1\"] }]\n"),
            "obj.toml:8: check[0].rules: rules replace the tolerances; give check[0].tolerances "
            "or rules, not both");
  EXPECT_EQ(
      config_error(kBase + "[[bench]]\nprobe = \"decode\"\nrules = \"r.toml\"\n"),
      "obj.toml:9: bench[0].rules: unknown key; expected one of probe, name, description, "
      "params, zip, repeats, seed, covers, structures, variants, threshold, budget_s, precision, "
      "counters");
  // A rule's own mistakes name the objective, the line and the rule (not the objective's hint).
  try {
    parse_objective(kBase + "rules = [{ match = 'x', when = [] }]\n", "obj.toml");
    ADD_FAILURE() << "an empty when parsed";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kConfig);
    EXPECT_EQ(error.message(),
              "obj.toml:7: check[0].rules[0]: expected at least one predicate, e.g. "
              "\"mismatch_frac <= 1\" to accept anything");
  }
  try {
    parse_objective(kBase + "rules = [{ match = 'x', when = [\"speed <= 1\"] }]\n", "obj.toml");
    ADD_FAILURE() << "an unknown metric parsed";
  } catch (const Error& error) {
    EXPECT_EQ(error.message(),
              "obj.toml:7: check[0].rules[0]: predicate 'speed <= 1' at character 1: expected a "
              "metric name, found 'speed'");
  }
}

TEST(ObjectiveErrorsTest, BenchCounters) {
  EXPECT_EQ(
      config_error(kBase + "[[check]]\nprobe = \"x\"\ncounters = { kernel = \"k\" }\n"),
      "obj.toml:9: check[1].counters: unknown key; expected one of probe, name, "
      "description, params, zip, repeats, seed, covers, structures, tolerances, seeds, rules");
  EXPECT_EQ(config_error(kBase + "[[bench]]\nprobe = \"x\"\ncounters = \"merged\"\n"),
            "obj.toml:9: bench[0].counters: expected a table, found a string");
  EXPECT_EQ(config_error(kBase + "[[bench]]\nprobe = \"x\"\ncounters = { launches = 2 }\n"),
            "obj.toml:9: bench[0].counters.kernel: missing; this key is required");
  EXPECT_EQ(config_error(kBase + "[[bench]]\nprobe = \"x\"\ncounters = { kernel = \"a(\" }\n"),
            "obj.toml:9: bench[0].counters.kernel: expected a pattern (RE2 syntax) of the "
            "kernel name (\"merged_v_decode\"), found 'a('");
  EXPECT_EQ(config_error(kBase + "[[bench]]\nprobe = \"x\"\ncounters = { kernel = \"\" }\n"),
            "obj.toml:9: bench[0].counters.kernel: expected a pattern (RE2 syntax) of the "
            "kernel name (\"merged_v_decode\"), found ''");
  EXPECT_EQ(config_error(kBase +
                         "[[bench]]\nprobe = \"x\"\ncounters = { kernel = \"k\", launches = 0 }\n"),
            "obj.toml:9: bench[0].counters.launches: expected 1 to 10000 untimed calls (ncu's "
            "--launch-count), found 0");
  EXPECT_EQ(config_error(kBase +
                         "[[bench]]\nprobe = \"x\"\ncounters = { kernel = \"k\", sections = 1 }\n"),
            "obj.toml:9: bench[0].counters.sections: unknown key; expected one of kernel, "
            "launches");
}

// Gates refer to what the file declares: lines 7-12 add a bench with variants.
const std::string kWithBench = kBase + R"([[bench]]
probe = "decode"
variants = ["tiled", "merged"]
params = { batch = [1, 32] }
[[gate]]
name = "g"
)";

// One door (issue 33): a cascade point asks for every guard, and its hidden run's secret is the
// same for both builds of a run (one scope) and differs across runs, points and repeats.
TEST(ObjectiveTest, PointRequestsKeepTheDoorsDefaults) {
  const Objective objective = parse_objective(kBase, "obj.toml");
  PlanTask task;
  task.layer = Layer::kCheck;
  task.entry = task.probe = "cp_vs_nocp";
  task.params = {{"T", Value(int64_t{1024})}, {"shards", Value(int64_t{8})}};
  const probe::RunRequest candidate = point_run_request(objective, "/tmp/home", "run/.staging", 0,
                                                        task, objective.checks[0], 0, "run");
  EXPECT_TRUE(candidate.sandbox);
  EXPECT_TRUE(candidate.add_hidden_point);
  EXPECT_FALSE(candidate.repeat.has_value());  // the runtime's default: asked and secret repeats
  ASSERT_TRUE(candidate.layer.has_value());
  EXPECT_EQ(*candidate.layer, Layer::kCheck);
  ASSERT_TRUE(candidate.hidden_secret.has_value());
  // The baseline build's request: another staging run, the same scope.
  const probe::RunRequest baseline = point_run_request(
      objective, "/tmp/home", "run/baseline/.staging", 0, task, objective.checks[0], 0, "run");
  EXPECT_EQ(baseline.hidden_secret, candidate.hidden_secret);
  EXPECT_NE(point_run_request(objective, "/tmp/home", "run/.staging", 0, task, objective.checks[0],
                              1, "run")
                .hidden_secret,
            candidate.hidden_secret);
  EXPECT_NE(point_run_request(objective, "/tmp/home", "other/.staging", 0, task,
                              objective.checks[0], 0, "other")
                .hidden_secret,
            candidate.hidden_secret);
  task.params = {{"T", Value(int64_t{4096})}, {"shards", Value(int64_t{8})}};
  EXPECT_NE(point_run_request(objective, "/tmp/home", "run/.staging", 0, task, objective.checks[0],
                              0, "run")
                .hidden_secret,
            candidate.hidden_secret);
}

TEST(ObjectiveErrorsTest, Gates) {
  EXPECT_EQ(config_error(kWithBench + "expr = \"check.cp_vs_nocp.rms_ratio <= \"\n"),
            "obj.toml:13: gate[0].expr: at column 31: expected a number, found the end in "
            "'check.cp_vs_nocp.rms_ratio <= '");
  EXPECT_EQ(config_error(kWithBench + "expr = \"check.cp.rms_ratio <= 1\"\n"),
            "obj.toml:13: gate[0].expr: no [[check]] is named 'cp'; check names: cp_vs_nocp");
  EXPECT_EQ(config_error(kWithBench + "expr = \"scenario.a.wall_s / scenario.b.wall_s <= 1\"\n"),
            "obj.toml:13: gate[0].expr: no [[scenario]] is named 'a'; scenario names: (none)");
  EXPECT_EQ(config_error(kWithBench + "expr = \"decode[fused] not SLOWER than decode[any]\"\n"),
            "obj.toml:13: gate[0].expr: bench 'decode' has no variant 'fused'; its variants: "
            "tiled, merged");
  EXPECT_EQ(
      config_error(kWithBench + "expr = \"decode[configured] not SLOWER than decode[any]\"\n"),
      "obj.toml:13: gate[0].expr: 'decode[configured]': no [[deployment_key]] implies the "
      "variant of probe 'decode' (an implies entry without param)");
  EXPECT_EQ(config_error(kWithBench +
                         "expr = \"decode[merged] not SLOWER than decode[tiled] where H >= 3\"\n"),
            "obj.toml:13: gate[0].expr: where: 'H' is not a parameter of bench 'decode'; its "
            "parameters: batch");
  EXPECT_EQ(config_error(kWithBench + "expr = \"check.cp_vs_nocp[a].rms_ratio <= 1\"\n"),
            "obj.toml:13: gate[0].expr: 'cp_vs_nocp[a]': only benches have variants");
  EXPECT_EQ(config_error(kWithBench + "expr = \"check.cp_vs_nocp passes\"\nconfidence = 95\n"),
            "obj.toml:14: gate[0].confidence: expected a level between 0 and 1 (0.95), found 95");
  EXPECT_EQ(config_error(kWithBench + "expr = \"check.cp_vs_nocp passes\"\nwhen = 1\n"),
            "obj.toml:14: gate[0].when: unknown key; expected one of name, expr, description, "
            "confidence");
  EXPECT_EQ(config_error(kWithBench + "expr = \"check.cp_vs_nocp passes\"\n[[gate]]\nname = "
                                      "\"g\"\nexpr = \"check.cp_vs_nocp passes\"\n"),
            "obj.toml:15: gate[1].name: 'g' names two gates (the other on line 13)");
  EXPECT_EQ(config_error(kWithBench + "description = \"no expression\"\n"),
            "obj.toml:11: gate[0].expr: missing; this key is required");
}

// Lines 7-10 add a bench; deployment cases follow from line 11.
const std::string kWithKeys = kBase + R"([[bench]]
probe = "decode"
variants = ["tiled", "merged"]
params = { batch = 32 }
)";

TEST(ObjectiveErrorsTest, DeploymentsAndReview) {
  EXPECT_EQ(config_error(kWithKeys + "[[deployment_key]]\nkey = \"x\"\nimplies = [{ probe = "
                                     "\"nope\", param = \"T\" }]\n"),
            "obj.toml:13: deployment_key[0].implies[0].probe: no [[check]], [[bench]] or "
            "[[scenario]] runs probe 'nope'; probes in this file: cp_vs_nocp, decode");
  EXPECT_EQ(config_error(kWithKeys + "[[deployment_key]]\nkey = \"x\"\nimplies = [{ probe = "
                                     "\"cp_vs_nocp\" }]\n"),
            "obj.toml:13: deployment_key[0].implies[0]: expected param = \"...\" (probe "
            "'cp_vs_nocp' is not a bench with variants, so there is no variant to select)");
  EXPECT_EQ(config_error(kWithKeys + "[[deployment_key]]\nkey = \"k\"\nvalues = [\"tiled\", "
                                     "\"fused\"]\nimplies = [{ probe = \"decode\" }]\n"),
            "obj.toml:14: deployment_key[0].implies[0]: the value 'fused' selects no variant of "
            "bench 'decode'; its variants: tiled, merged");
  EXPECT_EQ(config_error(kWithKeys + "[[deployment_key]]\nkey = \"lock\"\nvalues = [\"held\", "
                                     "\"released\"]\nimplies = [{ probe = \"cp_vs_nocp\", param = "
                                     "\"h\", map = { held = true } }]\n"),
            "obj.toml:14: deployment_key[0].implies[0].map: expected an entry for every value of "
            "deployment_key[0].values, missing 'released'");
  EXPECT_EQ(config_error(kWithKeys + "[[deployment_key]]\nkey = \"lock\"\nvalues = [\"held\"]\n"
                                     "implies = [{ probe = \"cp_vs_nocp\", param = \"h\", map = { "
                                     "held = true, open = false } }]\n"),
            "obj.toml:14: deployment_key[0].implies[0].map.open: 'open' is not one of "
            "deployment_key[0].values");
  EXPECT_EQ(config_error(kWithKeys + "[[deployment_key]]\nkey = \"x\"\n"),
            "obj.toml:11: deployment_key[0].implies: missing; this key is required");
  EXPECT_EQ(config_error(kWithKeys + "[[deployment_key]]\nkey = \"x\"\nimplies = \"T\"\n"),
            "obj.toml:13: deployment_key[0].implies: expected an array of tables ({ probe = "
            "\"...\", param = \"...\" }), found a string");
  EXPECT_EQ(config_error(kWithKeys + "[[deployment_key]]\nkey = \"x\"\nimplies = [{ probe = "
                                     "\"decode\", parm = \"T\" }]\n"),
            "obj.toml:13: deployment_key[0].implies[0].parm: unknown key; expected one of probe, "
            "param, map, run");
  // Switches and defaults.
  EXPECT_EQ(config_error(kWithKeys + "[[deployment_key]]\nkey = \"w\"\nvalues = [\"on\", "
                                     "\"off\"]\ndefault = \"maybe\"\nimplies = [{ probe = "
                                     "\"decode\", run = { on = true, off = false } }]\n"),
            "obj.toml:14: deployment_key[0].default: expected one of on, off, found 'maybe'");
  EXPECT_EQ(config_error(kWithKeys + "[[deployment_key]]\nkey = \"w\"\nvalues = [\"on\", "
                                     "\"off\"]\nimplies = [{ probe = \"decode\", run = { on = "
                                     "true } }]\n"),
            "obj.toml:14: deployment_key[0].implies[0].run: expected an entry for every value of "
            "deployment_key[0].values, missing 'off'");
  EXPECT_EQ(config_error(kWithKeys + "[[deployment_key]]\nkey = \"w\"\nimplies = [{ probe = "
                                     "\"decode\", run = { on = \"yes\" } }]\n"),
            "obj.toml:13: deployment_key[0].implies[0].run.on: expected true or false, found a "
            "string");
  EXPECT_EQ(config_error(kWithKeys + "[[deployment_key]]\nkey = \"w\"\nvalues = [\"on\"]\n"
                                     "implies = [{ probe = \"decode\", run = { on = true, of = "
                                     "false } }]\n"),
            "obj.toml:14: deployment_key[0].implies[0].run.of: 'of' is not one of "
            "deployment_key[0].values");
  EXPECT_EQ(config_error(kWithKeys + "[[deployment_key]]\nkey = \"w\"\nimplies = [{ probe = "
                                     "\"decode\", param = \"batch\", run = { on = true } }]\n"),
            "obj.toml:13: deployment_key[0].implies[0].run: expected either run = { VALUE = "
            "true|false, ... } or param/map, found both (a switch turns the probe's entries on or "
            "off; it sets no parameter)");
  EXPECT_EQ(config_error(kWithKeys + "[[deployment_key]]\nkey = \"w\"\nimplies = [{ probe = "
                                     "\"decode\", run = {} }]\n"),
            "obj.toml:13: deployment_key[0].implies[0].run: expected at least one VALUE = "
            "true|false, found none");

  const std::string keys = kWithKeys + R"([[deployment_key]]
key = "precision"
values = ["ieee", "tf32_rz"]
implies = [{ probe = "cp_vs_nocp", param = "precision" }]
)";  // lines 11-14
  EXPECT_EQ(config_error(keys + "[[deployment_key]]\nkey = \"precision\"\nimplies = [{ probe = "
                                "\"decode\" }]\n"),
            "obj.toml:15: deployment_key[1].key: 'precision' is declared twice");
  EXPECT_EQ(config_error(keys + "[[deployment_key]]\nkey = \"x\"\nimplies = []\n"),
            "obj.toml:17: deployment_key[1].implies: expected at least one { probe = \"...\", "
            "param = \"...\" }, found an empty array");
  EXPECT_EQ(config_error(keys + "[[deployment]]\nname = \"a\"\nsettings = { cache = \"int8\" "
                                "}\n"),
            "obj.toml:17: deployment[0].settings.cache: no [[deployment_key]] declares 'cache'; "
            "declared: precision");
  EXPECT_EQ(config_error(keys + "[[deployment]]\nname = \"a\"\nsettings = { precision = "
                                "\"fp8\" }\n"),
            "obj.toml:17: deployment[0].settings.precision: expected one of ieee, tf32_rz, found "
            "'fp8'");
  EXPECT_EQ(config_error(keys + "[[deployment]]\nname = \"a\"\n"),
            "obj.toml:15: deployment[0].settings: missing; this key is required");
  EXPECT_EQ(config_error(keys + "[[deployment]]\nname = \"a\"\nsettings = {}\n[[deployment]]\n"
                                "name = \"a\"\nsettings = {}\n"),
            "obj.toml:18: deployment[1].name: 'a' names two deployments");

  EXPECT_EQ(config_error(keys + "[review.style]\npaths = [\"*\"]\n"),
            "obj.toml:15: review.style: unknown key; expected one of numerics, concurrency, "
            "production-risk");
  EXPECT_EQ(config_error(keys + "[review.numerics]\nparams = [\"precision\", \"dtype\"]\n"),
            "obj.toml:15: review.numerics.params[1]: 'dtype' is neither a parameter of a probe in "
            "this file nor a deployment key");
  EXPECT_EQ(config_error(keys + "[review.numerics]\ndescription = \"x\"\n"),
            "obj.toml:15: review.numerics: expected paths = [...] or params = [...], found "
            "neither");
  EXPECT_EQ(config_error(keys + "[review.numerics]\npaths = \"kda/**\"\n"),
            "obj.toml:16: review.numerics.paths: expected an array, found a string");
}

TEST(ObjectiveTest, WhereMayNameAParameterADeploymentKeySets) {
  const Objective objective = parse_objective(kWithKeys + R"([[deployment_key]]
key = "precision"
implies = [{ probe = "cp_vs_nocp", param = "precision" }]
[[gate]]
name = "drift"
expr = "check.cp_vs_nocp.rms_ratio <= 1e-6 where precision == tf32x3"
[review.numerics]
params = ["precision", "T"]
paths = ["kda/math/**"]
)",
                                              "obj.toml");
  ASSERT_EQ(objective.gates.size(), 1u);
  EXPECT_EQ(std::get<MetricBound>(objective.gates[0].expression).where[0].param, "precision");
  EXPECT_EQ(objective.gates[0].line, 16);
  EXPECT_EQ(objective.review[0].params, (std::vector<std::string>{"precision", "T"}));
}

}  // namespace
}  // namespace loupe::gate
