#include "gate/plan.hpp"

#include <gtest/gtest.h>

#include <functional>

#include "core/json.hpp"

namespace loupe::gate {
namespace {

const std::filesystem::path kSmoke =
    std::filesystem::path(LOUPE_SOURCE_DIR) / "examples/kda/smoke.toml";

std::string usage_error(const Objective& objective, const std::string& spec) {
  try {
    make_plan(objective, resolve_configuration(objective, spec));
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    return error.message();
  }
  return "no error";
}

TEST(PlanTest, IncidentConfigurationOfTheSmokeObjective) {
  const Objective objective = parse_objective_file(kSmoke);
  const Configuration configuration = resolve_configuration(objective, "incident");
  EXPECT_EQ(configuration.name, "incident");
  EXPECT_EQ(configuration.settings,
            (std::vector<Setting>{{"precision", std::string("tf32_rz")},
                                  {"dispatch_lock", std::string("held")},
                                  {"decode_kernel", std::string("tiled")}}));
  const Plan plan = make_plan(objective, configuration);
  EXPECT_EQ(configured_variant(plan, "decode"), "tiled");
  EXPECT_EQ(configured_variant(plan, "serve"), std::nullopt);
  EXPECT_EQ(render_plan(plan, objective, 50),
            "plan for " + kSmoke.string() +
                ", configuration incident (precision=tf32_rz, dispatch_lock=held, "
                "decode_kernel=tiled): 6 tasks\n"
                "  check     cp_vs_nocp            cp_vs_nocp              "
                "T=2048,shards=4,precision=tf32_rz*,decay=slow\n"
                "  check     cp_control            cp_vs_nocp              "
                "T=2048,shards=4,precision=tf32_rz*,decay=fast\n"
                "  check     decode_kernels_agree  decode_tiled_vs_merged  (defaults)\n"
                "  bench     decode                decode                  batch=32,H=4\n"
                "  scenario  prefill               serve                   "
                "mode=prefill,dispatch_holds_lock=true*,layers=4,requests=2,prompt_len=32  x3\n"
                "  scenario  prefill_transfer      serve                   "
                "mode=prefill+transfer,dispatch_holds_lock=true*,layers=4,requests=2,prompt_len="
                "32  x3\n"
                "bench decode: decode[configured] is tiled\n"
                "* set by the configuration\n");
}

TEST(PlanTest, FixedConfigurationOfTheSmokeObjective) {
  const Objective objective = parse_objective_file(kSmoke);
  const Plan plan = make_plan(objective, resolve_configuration(objective, "fixed"));
  ASSERT_EQ(plan.tasks.size(), 6u);
  PlanTask first{Layer::kCheck,
                 "cp_vs_nocp",
                 "cp_vs_nocp",
                 {{"T", int64_t{2048}},
                  {"shards", int64_t{4}},
                  {"precision", std::string("tf32x3")},
                  {"decay", std::string("slow")}},
                 {"precision"},
                 1};
  EXPECT_EQ(plan.tasks[0], first);
  PlanTask transfer{Layer::kScenario,
                    "prefill_transfer",
                    "serve",
                    {{"mode", std::string("prefill+transfer")},
                     {"dispatch_holds_lock", false},
                     {"layers", int64_t{4}},
                     {"requests", int64_t{2}},
                     {"prompt_len", int64_t{32}}},
                    {"dispatch_holds_lock"},
                    3};
  EXPECT_EQ(plan.tasks[5], transfer);
  EXPECT_EQ(configured_variant(plan, "decode"), "merged");
  EXPECT_EQ(plan_to_json(plan, objective)["tasks"][5].dump(),
            R"({"layer":"scenario","entry":"prefill_transfer","probe":"serve","params":{"mode":)"
            R"("prefill+transfer","dispatch_holds_lock":false,"layers":4,"requests":2,)"
            R"("prompt_len":32},"configured":["dispatch_holds_lock"],"repeats":3})");
  const Json json = plan_to_json(plan, objective);
  EXPECT_EQ(json["configuration"].dump(),
            R"({"name":"fixed","settings":{"precision":"tf32x3","dispatch_lock":"released",)"
            R"("decode_kernel":"merged"}})");
  EXPECT_EQ(json["configured_variants"].dump(), R"({"decode":"merged"})");
}

TEST(PlanTest, AdHocSettingsOverrideANamedConfigurationAndAddParameters) {
  const Objective objective = parse_objective_file(kSmoke);
  const Configuration configuration =
      resolve_configuration(objective, "incident, precision=ieee, shards=8");
  EXPECT_EQ(configuration.settings, (std::vector<Setting>{{"precision", std::string("ieee")},
                                                          {"dispatch_lock", std::string("held")},
                                                          {"decode_kernel", std::string("tiled")},
                                                          {"shards", int64_t{8}}}));
  const Plan plan = make_plan(objective, configuration);
  EXPECT_EQ(plan.tasks[0].params, (Params{{"T", int64_t{2048}},
                                          {"shards", int64_t{8}},
                                          {"precision", std::string("ieee")},
                                          {"decay", std::string("slow")}}));
  EXPECT_EQ(plan.tasks[0].configured, (std::vector<std::string>{"precision", "shards"}));
}

TEST(PlanTest, NoConfigurationRunsTheFilesOwnPoints) {
  const Objective objective = parse_objective_file(kSmoke);
  const Plan plan = make_plan(objective, resolve_configuration(objective, ""));
  ASSERT_EQ(plan.tasks.size(), 6u);
  EXPECT_TRUE(plan.tasks[0].configured.empty());
  EXPECT_EQ(configured_variant(plan, "decode"), std::nullopt);
  const std::string text = render_plan(plan, objective, 2);
  EXPECT_EQ(text, "plan for " + kSmoke.string() +
                      ", no configuration (the file's own points): 6 tasks\n"
                      "  check     cp_vs_nocp            cp_vs_nocp              "
                      "T=2048,shards=4,precision=ieee,decay=slow\n"
                      "  check     cp_control            cp_vs_nocp              "
                      "T=2048,shards=4,precision=ieee,decay=fast\n"
                      "  ... 4 more tasks (--json lists them all)\n");
}

TEST(PlanTest, ASweptParameterFixedByTheConfigurationRunsOnce) {
  const Objective objective = parse_objective(R"([subject]
command = "kda"
[[check]]
probe = "cp_vs_nocp"
params = { T = [1024, 4096], precision = ["ieee", "tf32_rz", "tf32x3"] }
[[deployment_key]]
key = "precision"
implies = [{ probe = "cp_vs_nocp", param = "precision" }]
)",
                                              "obj.toml");
  EXPECT_EQ(make_plan(objective, {}).tasks.size(), 6u);
  const Plan plan = make_plan(objective, resolve_configuration(objective, "precision=tf32x3"));
  ASSERT_EQ(plan.tasks.size(), 2u);
  EXPECT_EQ(plan.tasks[1].params,
            (Params{{"T", int64_t{4096}}, {"precision", std::string("tf32x3")}}));
  EXPECT_EQ(render_plan(plan, objective, 50),
            "plan for obj.toml, configuration precision=tf32x3: 2 tasks\n"
            "  check     cp_vs_nocp  cp_vs_nocp  T=1024,precision=tf32x3*\n"
            "  check     cp_vs_nocp  cp_vs_nocp  T=4096,precision=tf32x3*\n"
            "* set by the configuration\n");
}

TEST(PlanTest, ValuesAreTypedFromTheirText) {
  const Objective objective = parse_objective(R"([subject]
command = "kda"
[[check]]
probe = "p"
[[deployment_key]]
key = "k"
implies = [{ probe = "p", param = "x" }]
)",
                                              "obj.toml");
  auto value_of = [&](const std::string& text) {
    return resolve_configuration(objective, "k=" + text).settings.at(0).value;
  };
  EXPECT_EQ(value_of("8"), Value(int64_t{8}));
  EXPECT_EQ(value_of("0.5"), Value(0.5));
  EXPECT_EQ(value_of("true"), Value(true));
  EXPECT_EQ(value_of("int8"), Value(std::string("int8")));
}

TEST(PlanTest, ConfigurationMistakesAreUsageErrors) {
  const Objective objective = parse_objective_file(kSmoke);
  const std::string file = kSmoke.string();
  EXPECT_EQ(
      usage_error(objective, "production"),
      "--config: no [[deployment]] named 'production' in " + file + "; named: incident, fixed");
  EXPECT_EQ(usage_error(objective, "cache=int8"),
            "--config: " + file +
                " declares no deployment key 'cache'; keys: shards, precision, dispatch_lock, "
                "decode_kernel");
  EXPECT_EQ(usage_error(objective, "precision=fp8"),
            "--config: precision=fp8: expected one of ieee, bf16, tf32_rz, tf32_rne, tf32x3");
  EXPECT_EQ(usage_error(objective, "shards="), "--config: shards= has no value");
  EXPECT_EQ(usage_error(objective, "shards=8,incident"),
            "--config: 'incident' is not KEY=VALUE; a configuration name may only come first");
}

const std::filesystem::path kDemo =
    std::filesystem::path(LOUPE_SOURCE_DIR) / "examples/kda/loupe.toml";

// `loupe plan examples/kda/loupe.toml --config shards=8,cache=int8`: the exact checks and points
// the deployment setting implies. shards reaches both cp_vs_nocp entries, cache replaces the
// state_cache sweep by its one value, and w8a8 takes its default (off), which leaves the w8a8
// check out.
TEST(PlanTest, DemoObjectiveShardsAndCacheSettings) {
  const Objective objective = parse_objective_file(kDemo);
  const Plan plan = make_plan(objective, resolve_configuration(objective, "shards=8,cache=int8"));
  EXPECT_EQ(plan.defaults, (std::vector<Setting>{{"w8a8", std::string("off")}}));
  EXPECT_EQ(plan.left_out,
            (std::vector<LeftOutEntry>{{Layer::kCheck, "w8a8", "w8a8_vs_fp32", "w8a8=off"}}));
  EXPECT_EQ(
      render_plan(plan, objective, 50),
      "plan for " + kDemo.string() +
          ", configuration shards=8, cache=int8; by default w8a8=off: 28 tasks\n"
          "  check     decode_recurrence        decode_vs_recurrence        "
          "variant=merged,steps=37,K=96,V=80\n"
          "  check     decode_recurrence        decode_vs_recurrence        "
          "variant=merged,steps=37,K=64,V=136\n"
          "  check     decode_recurrence        decode_vs_recurrence        "
          "variant=tiled,steps=37,K=96,V=80\n"
          "  check     decode_recurrence        decode_vs_recurrence        "
          "variant=tiled,steps=37,K=64,V=136\n"
          "  check     decode_kernels_agree     decode_tiled_vs_merged      batch=4,H=8\n"
          "  check     disaggregated_integrity  disaggregated_vs_colocated  (defaults)\n"
          "  check     transfer_verifier        transfer_verifier           (defaults)\n"
          "  check     state_cache              state_cache_vs_fp32         cache=int8*\n"
          "  check     decode_prefill           decode_vs_prefill           (defaults)\n"
          "  check     replay                   replay_vs_decode            L=4,steps=37\n"
          "  check     replay                   replay_vs_decode            L=8,steps=37\n"
          "  check     chunk                    chunk_vs_recurrent          T=500,K=128,V=128\n"
          "  check     chunk                    chunk_vs_recurrent          T=500,K=64,V=136\n"
          "  check     cp_vs_nocp               cp_vs_nocp                  "
          "T=4096,shards=8*,precision=ieee,decay=slow\n"
          "  check     cp_vs_nocp               cp_vs_nocp                  "
          "T=16384,shards=8*,precision=ieee,decay=slow\n"
          "  check     cp_control               cp_vs_nocp                  "
          "T=4096,shards=8*,precision=ieee,decay=fast\n"
          "  check     decode_recurrence_seeds  decode_vs_recurrence        variant=merged  x4\n"
          "  check     decode_recurrence_seeds  decode_vs_recurrence        variant=tiled  x4\n"
          "  bench     chunk_prefill            chunk_prefill               T=4096,H=2\n"
          "  bench     cp_prefill               cp_prefill                  "
          "T=8192,shards=8,threads=2\n"
          "  bench     model_decode             model_decode                "
          "layers=4,requests=16,prompt_len=16,w8a8=false*,cache=int8*\n"
          "  bench     decode                   decode                      batch=1,H=16\n"
          "  bench     decode                   decode                      batch=32,H=16\n"
          "  bench     decode                   decode                      batch=128,H=16\n"
          "  scenario  prefill                  serve                       "
          "mode=prefill,dispatch_holds_lock=false,layers=12,requests=2,prompt_len=32  x25\n"
          "  scenario  prefill_transfer         serve                       "
          "mode=prefill+transfer,dispatch_holds_lock=false,layers=12,requests=2,prompt_len=32  "
          "x25\n"
          "  scenario  disaggregated            serve                       "
          "mode=disaggregated,dispatch_holds_lock=false,layers=12,requests=2,prompt_len=32  x7\n"
          "  scenario  lock_handoff             lock_handoff                handoffs=8,hold_ms=40  "
          "x5\n"
          "left out: check w8a8 (w8a8_vs_fp32), by w8a8=off\n"
          "* set by the configuration\n"
          "components (covers):\n"
          "  decode_prep: check decode_recurrence, check decode_kernels_agree, check replay, check "
          "decode_recurrence_seeds, bench decode (with 2 other component(s): no entry runs it "
          "alone); also run by check disaggregated_integrity, check state_cache, check "
          "decode_prefill, bench model_decode, scenario disaggregated\n"
          "  decode_merged: check decode_recurrence, check decode_kernels_agree, check replay, "
          "check decode_recurrence_seeds, bench decode (with 2 other component(s): no entry runs "
          "it alone); also run by check disaggregated_integrity, check state_cache, check "
          "decode_prefill, bench model_decode, scenario disaggregated\n"
          "  decode_tiled: check decode_recurrence, check decode_kernels_agree, check "
          "decode_recurrence_seeds, bench decode (with 2 other component(s): no entry runs it "
          "alone)\n"
          "  replay: check replay (with 2 other component(s): no entry runs it alone)\n"
          "  chunk_kernel: check chunk, bench chunk_prefill; also run by check "
          "disaggregated_integrity, check state_cache, check decode_prefill, check cp_vs_nocp, "
          "check cp_control, bench cp_prefill, scenario prefill, scenario prefill_transfer, "
          "scenario disaggregated\n"
          "  cp_merge: check cp_vs_nocp, check cp_control, bench cp_prefill (with 1 other "
          "component(s): no entry runs it alone)\n"
          "  model: check decode_prefill, scenario prefill (with 3 other component(s): no entry "
          "runs it alone); also run by check disaggregated_integrity, check state_cache, bench "
          "model_decode, scenario prefill_transfer, scenario disaggregated\n"
          "  w8a8_linear: bench model_decode (with 4 other component(s): no entry runs it alone)\n"
          "  state_cache: check state_cache, bench model_decode (with 4 other component(s): no "
          "entry runs it alone)\n"
          "  transfer_digest: check transfer_verifier; also run by check disaggregated_integrity, "
          "scenario prefill_transfer, scenario disaggregated\n"
          "  server: scenario prefill (with 3 other component(s): no entry runs it alone); also "
          "run by check disaggregated_integrity, scenario prefill_transfer, scenario "
          "disaggregated\n"
          "  interpreter_lock: scenario lock_handoff; also run by check disaggregated_integrity, "
          "scenario prefill, scenario prefill_transfer, scenario disaggregated\n"
          "  untimed (no planned bench or scenario covers them: a slowdown there passes every "
          "gate): replay\n"
          "structures (docs/structures.md):\n"
          "  check decode_recurrence: k_ne_v, v_above_k; never sees outlier_channels, heavy_tails, "
          "long_history, fast_gates, ragged_tail\n"
          "  check decode_kernels_agree: none; never sees outlier_channels, heavy_tails, "
          "long_history, fast_gates, k_ne_v, ragged_tail, v_above_k\n"
          "  check disaggregated_integrity: none; never sees outlier_channels, heavy_tails, "
          "long_history, fast_gates, k_ne_v, ragged_tail, v_above_k\n"
          "  check transfer_verifier: none; never sees outlier_channels, heavy_tails, "
          "long_history, fast_gates, k_ne_v, ragged_tail, v_above_k\n"
          "  check state_cache: none; never sees outlier_channels, heavy_tails, long_history, "
          "fast_gates, k_ne_v, ragged_tail, v_above_k\n"
          "  check decode_prefill: ragged_tail; never sees outlier_channels, heavy_tails, "
          "long_history, fast_gates, k_ne_v, v_above_k\n"
          "  check replay: none; never sees outlier_channels, heavy_tails, long_history, "
          "fast_gates, k_ne_v, ragged_tail, v_above_k\n"
          "  check chunk: fast_gates, k_ne_v, ragged_tail, v_above_k; never sees outlier_channels, "
          "heavy_tails, long_history\n"
          "  check cp_vs_nocp: long_history; never sees outlier_channels, heavy_tails, fast_gates, "
          "k_ne_v, ragged_tail, v_above_k\n"
          "  check cp_control: fast_gates; never sees outlier_channels, heavy_tails, long_history, "
          "k_ne_v, ragged_tail, v_above_k\n"
          "  check decode_recurrence_seeds: k_ne_v; never sees outlier_channels, heavy_tails, "
          "long_history, fast_gates, ragged_tail, v_above_k\n");
  const Json json = plan_to_json(plan, objective);
  EXPECT_EQ(json["defaults"].dump(), R"({"w8a8":"off"})");
  EXPECT_EQ(json["left_out"].dump(),
            R"([{"layer":"check","entry":"w8a8","probe":"w8a8_vs_fp32","reason":"w8a8=off"}])");
}

TEST(PlanTest, SwitchOnAddsTheW8a8CheckAndOverridesTheDefault) {
  const Objective objective = parse_objective_file(kDemo);
  const Plan plan = make_plan(objective, resolve_configuration(objective, "fixed,w8a8=on"));
  EXPECT_TRUE(plan.defaults.empty());
  EXPECT_TRUE(plan.left_out.empty());
  std::vector<std::string> checks;
  for (const auto& task : plan.tasks) {
    if (task.layer == Layer::kCheck)
      checks.push_back(task.entry + " " + params_to_string(task.params));
  }
  EXPECT_EQ(checks,
            (std::vector<std::string>{"decode_recurrence variant=merged,steps=37,K=96,V=80",
                                      "decode_recurrence variant=merged,steps=37,K=64,V=136",
                                      "decode_recurrence variant=tiled,steps=37,K=96,V=80",
                                      "decode_recurrence variant=tiled,steps=37,K=64,V=136",
                                      "decode_kernels_agree batch=4,H=8",
                                      "disaggregated_integrity ",
                                      "transfer_verifier ",
                                      "w8a8 weights=outlier_channels",
                                      "w8a8 weights=iid",
                                      "state_cache cache=int8",
                                      "decode_prefill ",
                                      "replay L=4,steps=37",
                                      "replay L=8,steps=37",
                                      "chunk T=500,K=128,V=128",
                                      "chunk T=500,K=64,V=136",
                                      "cp_vs_nocp T=4096,shards=8,precision=tf32x3,decay=slow",
                                      "cp_vs_nocp T=16384,shards=8,precision=tf32x3,decay=slow",
                                      "cp_control T=4096,shards=8,precision=tf32x3,decay=fast",
                                      "decode_recurrence_seeds variant=merged",
                                      "decode_recurrence_seeds variant=tiled"}));
  EXPECT_EQ(usage_error(objective, "w8a8=maybe"), "--config: w8a8=maybe: expected one of on, off");
}

}  // namespace
}  // namespace loupe::gate

namespace loupe::gate {
namespace {

// Issue 17: a 3,000 x 1,000 sweep kept `loupe plan` busy for over 100 s at 575 MB, and repeats =
// 9223372036854775807 was accepted. Both are refused by counting, before anything is expanded.
std::string sweep_objective(size_t first, size_t second, int64_t repeats) {
  auto list = [](size_t count) {
    std::string text = "[";
    for (size_t value = 0; value < count; ++value) {
      text += (value ? ", " : "") + std::to_string(value + 1);
    }
    return text + "]";
  };
  return "name = \"sweep\"\n[subject]\ncommand = [\"/bin/true\"]\n[[check]]\nprobe = \"p\"\n"
         "params = { T = " +
         list(first) + ", H = " + list(second) + " }\nrepeats = " + std::to_string(repeats) + "\n";
}

std::string config_error(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kConfig);
    return error.message();
  }
  return "no error";
}

TEST(PlanSizeTest, Issue17AThreeThousandByThousandSweepIsRefusedAtPlanTime) {
  const Objective objective = parse_objective(sweep_objective(3000, 1000, 1), "sweep.toml");
  EXPECT_EQ(config_error([&] { make_plan(objective, {}); }),
            "sweep.toml:4: check[0] 'p': 3000000 point(s) x 1 repeat(s) brings the run to "
            "3000000 subject runs; expected at most 10000 per run");
}

TEST(PlanSizeTest, PointsTimesRepeatsCountsAgainstTheCap) {
  const Objective fits = parse_objective(sweep_objective(100, 10, 10), "fits.toml");
  EXPECT_EQ(make_plan(fits, {}).tasks.size(), 1000u);
  const Objective over = parse_objective(sweep_objective(100, 10, 11), "over.toml");
  EXPECT_EQ(config_error([&] { make_plan(over, {}); }),
            "over.toml:4: check[0] 'p': 1000 point(s) x 11 repeat(s) brings the run to 11000 "
            "subject runs; expected at most 10000 per run");
}

TEST(PlanSizeTest, Issue17RepeatsBeyondTheCapAreRefusedWhenTheFileIsRead) {
  EXPECT_EQ(config_error(
                [&] { parse_objective(sweep_objective(1, 1, 9223372036854775807), "huge.toml"); }),
            "huge.toml:7: check[0].repeats: expected 1 to 10000 (the cap on subject runs per run), "
            "found 9223372036854775807");
}

}  // namespace
}  // namespace loupe::gate
