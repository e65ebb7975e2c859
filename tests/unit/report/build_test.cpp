// build_model on a synthetic ledger record whose observations are real files: a failing check
// with tensors whose error grows along T, a scenario with a hand-written loupe binary trace in
// which one thread waits on a lock another holds, bench A/B findings, and a missing observation.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "gate/gate_eval.hpp"
#include "loupe/tensor.hpp"
#include "report/model.hpp"
#include "trace/record/binary_format.hpp"

namespace loupe::report {
namespace {

namespace fs = std::filesystem;

class BuildModel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("loupe_report_build_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static void write_json(const fs::path& file, const Json& json) {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << json.dump(2);
  }

  // A check point whose candidate drifts: error proportional to the position along T.
  fs::path write_check_observation() {
    const fs::path point = dir_ / "cp_vs_nocp" / "T=64,shards=2";
    fs::create_directories(point / "candidate_first");
    constexpr int64_t kT = 64, kH = 2;
    Tensor reference(DType::kF32, {kT, kH}), candidate(DType::kF32, {kT, kH});
    auto reference_values = reference.mutable_data<float>();
    auto candidate_values = candidate.mutable_data<float>();
    for (int64_t t = 0; t < kT; ++t) {
      for (int64_t h = 0; h < kH; ++h) {
        const size_t index = static_cast<size_t>(t * kH + h);
        reference_values[index] = 1.0f + 0.25f * static_cast<float>((t + h) % 5);
        candidate_values[index] = reference_values[index] + 1e-3f * static_cast<float>(t + 1);
      }
    }
    write_npy(point / "candidate_first" / "reference.o.npy", reference);
    write_npy(point / "candidate_first" / "candidate.o.npy", candidate);
    write_json(
        point / "observation.json",
        {{"loupe_observation", 1},
         {"probe", "cp_vs_nocp"},
         {"kind", "check"},
         {"params", {{"T", 64}, {"shards", 2}}},
         {"verdict", "fail"},
         {"check",
          {{"outputs",
            Json::array({{{"name", "o"},
                          {"axes", {"T", "H"}},
                          {"profile_axis", "T"},
                          {"tolerances", Json::array({{{"metric", "rms_ratio"},
                                                       {"bound", 1e-6},
                                                       {"relative_to_oracle", false}}})}}})},
           {"runs", Json::array({{{"pass", "candidate_first"},
                                  {"path", "candidate"},
                                  {"outputs", {{"o", "candidate_first/candidate.o.npy"}}}},
                                 {{"pass", "candidate_first"},
                                  {"path", "reference"},
                                  {"outputs", {{"o", "candidate_first/reference.o.npy"}}}}})}}}});
    return point;
  }

  // prefill holds `interpreter` inside `dispatch` from 1,100 to 5,000 ns; transfer waits for it
  // from 1,300 ns and obtains it at 5,050 ns.
  static void write_trace(const fs::path& file) {
    using namespace trace::format;
    std::string bytes;
    auto put = [&bytes](const void* data, size_t size) {
      bytes.append(static_cast<const char*>(data), size);
    };
    const std::vector<std::string> strings = {"prefill", "transfer", "interpreter", "dispatch",
                                              "kv_transfer"};
    FileHeader header{};
    std::memcpy(header.magic, kMagic, sizeof(kMagic));
    header.version = kVersion;
    header.header_size = sizeof(FileHeader);
    header.clock_domain = static_cast<uint32_t>(ClockDomain::kMonotonic);
    header.timer = static_cast<uint32_t>(Timer::kSteadyClock);
    header.start_ns = 1000;
    header.end_ns = 5300;
    header.pid = 42;
    header.thread_count = 2;
    header.string_count = static_cast<uint32_t>(strings.size());
    header.lock_count = 1;
    put(&header, sizeof(header));
    for (const auto& text : strings) {
      const uint32_t length = static_cast<uint32_t>(text.size());
      put(&length, sizeof(length));
      put(text.data(), text.size());
    }
    const uint32_t lock[3] = {1, 2, 0};
    put(lock, sizeof(lock));
    auto thread = [&](uint32_t tid, uint32_t name, const std::vector<RawEvent>& events) {
      ThreadHeader thread_header{tid, name, 100 + tid, events.size(), 0};
      put(&thread_header, sizeof(thread_header));
      for (const auto& event : events) put(&event, sizeof(event));
    };
    const auto zone_begin = static_cast<uint8_t>(EventKind::kZoneBegin);
    const auto zone_end = static_cast<uint8_t>(EventKind::kZoneEnd);
    const auto lock_event = static_cast<uint8_t>(EventKind::kLock);
    thread(1, 0,
           {{1000, 3, zone_begin, 0, 0, 0, 0},
            {1100, 0, lock_event, 1, 0, 1, 0},
            {5000, 0, lock_event, 2, 0, 1, 0},
            {5100, 0, zone_end, 0, 0, 0, 0}});
    thread(2, 1,
           {{1200, 4, zone_begin, 0, 0, 0, 0},
            {1300, 0, lock_event, 0, 0, 1, 0},
            {5050, 0, lock_event, 1, 0, 1, 0},
            {5200, 0, lock_event, 2, 0, 1, 0},
            {5300, 0, zone_end, 0, 0, 0, 0}});
    std::ofstream(file, std::ios::binary) << bytes;
  }

  fs::path write_scenario_observation() {
    const fs::path point = dir_ / "serve" / "mode=prefill+transfer";
    fs::create_directories(point);
    write_trace(point / "trace.loupetrace");
    write_json(point / "observation.json",
               {{"loupe_observation", 1},
                {"probe", "serve"},
                {"kind", "scenario"},
                {"params", {{"mode", "prefill+transfer"}, {"layers", 4}}},
                {"verdict", "pass"},
                {"scenario", {{"metrics", {{"wall_s", 0.5}}}, {"traces", {"trace.loupetrace"}}}}});
    return point;
  }

  static Finding finding(const std::string& id, Layer layer, Severity severity) {
    Finding out;
    out.id = id;
    out.layer = layer;
    out.severity = severity;
    out.claim = id + " claim";
    return out;
  }

  static Finding bench_finding(int64_t batch, double ratio, const std::string& verdict) {
    Finding out = finding("bench.decode." + verdict, Layer::kBench,
                          verdict == "slower" ? Severity::kWarn : Severity::kInfo);
    out.where.probe = "decode";
    out.where.path = "merged vs tiled";
    out.where.params = {{"batch", batch}};
    out.evidence.metrics = {{"ratio", ratio},
                            {"ci_low", ratio - 0.02},
                            {"ci_high", ratio + 0.02},
                            {"threshold", 0.05},
                            {"n_a", 30},
                            {"n_b", 30}};
    return out;
  }

  ledger::RunRecord record() {
    ledger::RunRecord run;
    run.id = "r20261130-070000-abcd";
    run.started_at = "2026-11-30T07:00:00Z";
    run.ended_at = "2026-11-30T07:00:13Z";
    run.status = ledger::RunStatus::kCompleted;
    run.objective_path = "/repo/examples/kda/smoke.toml";
    run.git.commit = "0123456789abcdef0123";
    run.git.dirty = true;
    run.config_json =
        R"({"name":"incident","settings":{"precision":"tf32_rz","dispatch_lock":"held"},"all":true})";
    run.gates = {
        {"cp_matches_single_device", GateVerdict::kFail,
         R"({"n":1,"estimate":0.0031,"interval":null,"bound":2e-06,"comparison":"<=","confidence":null,"seed":null,"point":{}})",
         "fail: the worst value 0.0031"},
        {"transfer_overhead", GateVerdict::kFail,
         R"({"n":3,"n_baseline":3,"estimate":1.9,"interval":[1.8,2.0],"bound":1.05,"comparison":"<=","confidence":0.95,"seed":1,"point":{}})",
         "fail: the interval lies above"},
        {"decode_kernels_agree", GateVerdict::kNotRun, "{}", "not run: stopped"},
    };
    Finding trace_finding = finding("trace.diff.lock_wait", Layer::kTrace, Severity::kInfo);
    trace_finding.where.probe = "serve";
    trace_finding.where.params = {{"mode", "prefill+transfer"}};
    run.findings = {trace_finding,
                    finding("check.cp_vs_nocp.drift", Layer::kCheck, Severity::kFail),
                    finding("check.cp_vs_nocp.match", Layer::kCheck, Severity::kInfo),
                    bench_finding(32, 1.0, "same"),
                    bench_finding(64, 1.4, "slower"),
                    finding("check.cp_vs_nocp.oracle", Layer::kCheck, Severity::kWarn)};
    run.observations = {write_check_observation().string(), write_scenario_observation().string(),
                        (dir_ / "gone" / "default").string()};
    return run;
  }

  fs::path dir_;
};

TEST_F(BuildModel, HeaderGatesAndFindings) {
  BuildOptions options;
  options.gate_layers = {{"cp_matches_single_device", Layer::kCheck},
                         {"transfer_overhead", Layer::kScenario}};
  options.ledger_file = "/tmp/ledger.sqlite";
  options.limits.findings = 3;
  const Model model = build_model(record(), options);

  EXPECT_EQ(model.header.run_id, "r20261130-070000-abcd");
  EXPECT_EQ(model.header.title, "smoke.toml");
  EXPECT_EQ(model.header.configuration, "incident precision=tf32_rz dispatch_lock=held");
  EXPECT_EQ(model.header.status, "completed");
  EXPECT_EQ(model.header.git, "0123456789ab (dirty)");
  EXPECT_EQ(model.header.points, 3u);
  ASSERT_TRUE(model.header.wall_s.has_value());
  EXPECT_EQ(*model.header.wall_s, 13.0);
  EXPECT_EQ(model.header.verdict, Verdict::kFail);

  ASSERT_EQ(model.gates.size(), 3u);
  EXPECT_EQ(model.gates[0].layer, Layer::kCheck);
  EXPECT_EQ(model.gates[0].key_statistic, "0.0031 <= 2.00e-06 n=1");
  EXPECT_EQ(model.gates[1].layer, Layer::kScenario);
  EXPECT_EQ(model.gates[1].key_statistic, "1.9 [1.8, 2] <= 1.05 n=3");
  EXPECT_FALSE(model.gates[2].layer.has_value());
  EXPECT_EQ(model.gates[2].key_statistic, "-");
  EXPECT_EQ(model.gates[2].rule, "not run: stopped");

  // Fail and warn findings and the trace explanation, in ledger order, capped at 3 of 4.
  ASSERT_EQ(model.findings.size(), 3u);
  EXPECT_EQ(model.findings[0].id, "trace.diff.lock_wait");
  EXPECT_EQ(model.findings[1].id, "check.cp_vs_nocp.drift");
  EXPECT_EQ(model.findings[2].id, "bench.decode.slower");
  EXPECT_EQ(model.findings_total, 4u);
}

TEST_F(BuildModel, PlotsFromObservationFiles) {
  const Model model = build_model(record(), BuildOptions{});

  ASSERT_EQ(model.profiles.size(), 1u);
  const ProfilePlot& profile = model.profiles[0];
  EXPECT_EQ(profile.probe, "cp_vs_nocp");
  EXPECT_EQ(profile.point, "T=64,shards=2");
  EXPECT_EQ(profile.output, "o");
  EXPECT_EQ(profile.axis, "T");
  EXPECT_EQ(profile.axis_length, 64);
  ASSERT_EQ(profile.values.size(), 64u);
  EXPECT_EQ(profile.bucket_ranges.front(), (std::pair<int64_t, int64_t>{0, 1}));
  EXPECT_EQ(profile.shape, "growing");
  EXPECT_LT(profile.values.front(), profile.values.back());
  ASSERT_TRUE(profile.rms_ratio_bound.has_value());
  EXPECT_EQ(*profile.rms_ratio_bound, 1e-6);

  ASSERT_EQ(model.sweeps.size(), 1u);
  const SweepPlot& sweep = model.sweeps[0];
  EXPECT_EQ(sweep.probe, "decode");
  EXPECT_EQ(sweep.comparison, "merged / tiled");  // no gate compares them: the bench's B/A
  EXPECT_EQ(sweep.threshold, 0.05);
  ASSERT_EQ(sweep.points.size(), 2u);
  EXPECT_EQ(sweep.points[0].point, "batch=32");
  EXPECT_EQ(sweep.points[0].verdict, "same");
  EXPECT_EQ(sweep.points[1].point, "batch=64");
  EXPECT_EQ(sweep.points[1].ratio, 1.4);
  EXPECT_DOUBLE_EQ(sweep.points[1].ci_low, 1.38);
  EXPECT_EQ(sweep.points[1].verdict, "slower");

  ASSERT_EQ(model.timelines.size(), 1u);
  const TimelinePlot& timeline = model.timelines[0];
  EXPECT_EQ(timeline.probe, "serve");
  EXPECT_EQ(timeline.point, "mode=prefill+transfer,layers=4");
  EXPECT_EQ(timeline.duration_ns, 4300);
  ASSERT_EQ(timeline.rows.size(), 2u);
  // The waiter first, then the holder.
  EXPECT_EQ(timeline.rows[0].thread, "transfer");
  EXPECT_EQ(timeline.rows[1].thread, "prefill");
  ASSERT_EQ(timeline.rows[0].zones.size(), 1u);
  EXPECT_EQ(timeline.rows[0].zones[0].name, "kv_transfer");
  EXPECT_EQ(timeline.rows[0].zones[0].start_ns, 200);
  ASSERT_EQ(timeline.rows[0].intervals.size(), 2u);
  EXPECT_EQ(timeline.rows[0].intervals[0].kind, IntervalKind::kWait);
  EXPECT_EQ(timeline.rows[0].intervals[0].start_ns, 300);
  EXPECT_EQ(timeline.rows[0].intervals[0].end_ns, 4050);
  EXPECT_TRUE(timeline.rows[0].intervals[0].highlighted);
  EXPECT_EQ(timeline.rows[0].intervals[1].kind, IntervalKind::kHold);
  EXPECT_FALSE(timeline.rows[0].intervals[1].highlighted);
  ASSERT_EQ(timeline.rows[1].intervals.size(), 1u);
  EXPECT_EQ(timeline.rows[1].intervals[0].kind, IntervalKind::kHold);
  EXPECT_EQ(timeline.rows[1].intervals[0].start_ns, 100);
  EXPECT_EQ(timeline.rows[1].intervals[0].end_ns, 4000);
  EXPECT_TRUE(timeline.rows[1].intervals[0].highlighted);
  EXPECT_EQ(timeline.caption,
            "transfer waited on interpreter 1 time(s) for 3.75 us in all (longest 3.75 us); "
            "prefill held it for 3.7 us of that, mostly in dispatch");

  // The missing observation is said, not skipped.
  ASSERT_EQ(model.notes.size(), 1u);
  EXPECT_NE(model.notes[0].find("1 of 3 observation(s) could not be read"), std::string::npos)
      << model.notes[0];
  EXPECT_NE(model.notes[0].find("gone/default/observation.json"), std::string::npos);
}

// Issue 19: the plot showed merged/tiled = 0.45 while the gate said tiled/merged = 2.22, failing
// points were not marked, and the x axis read batch=32, 128, 1.
TEST_F(BuildModel, SweepsFollowTheGatesDirectionInNaturalOrder) {
  ledger::RunRecord run = record();
  run.findings.push_back(bench_finding(128, 1.5, "slower"));
  run.findings.push_back(bench_finding(8, 0.9, "faster"));
  run.gates.push_back(
      {"decode_kernel_not_slower", GateVerdict::kFail,
       R"({"n":3,"estimate":0.714,"interval":[0.704,0.725],"bound":0.05,"comparison":"not FASTER than","confidence":0.95,"seed":1,"point":{}})",
       "fail: tiled not FASTER than merged where batch >= 32 is contradicted: at batch=64 "
       "tiled/merged = 0.714 [0.704, 0.725] is FASTER (t 0.05)"});
  const Model model = build_model(run, BuildOptions{});
  ASSERT_EQ(model.sweeps.size(), 1u);
  const SweepPlot& sweep = model.sweeps[0];
  EXPECT_EQ(sweep.comparison, "tiled / merged");
  EXPECT_EQ(sweep.gate, "decode_kernel_not_slower");
  std::vector<std::string> order;
  for (const auto& point : sweep.points) order.push_back(point.point);
  EXPECT_EQ(order, (std::vector<std::string>{"batch=8", "batch=32", "batch=64", "batch=128"}));
  EXPECT_DOUBLE_EQ(sweep.points[2].ratio, 1 / 1.4);
  EXPECT_DOUBLE_EQ(sweep.points[2].ci_low, 1 / 1.42);
  EXPECT_DOUBLE_EQ(sweep.points[2].ci_high, 1 / 1.38);
  EXPECT_EQ(sweep.points[2].verdict, "faster");
  EXPECT_EQ(sweep.points[0].verdict, "slower");
  std::vector<bool> failing;
  for (const auto& point : sweep.points) failing.push_back(point.failing);
  EXPECT_EQ(failing, (std::vector<bool>{false, false, true, true}));
  // The finding shown says it the same way round.
  const auto shown =
      std::find_if(model.findings.begin(), model.findings.end(), [](const Finding& f) {
        return f.layer == Layer::kBench && f.where.params == Params{{"batch", int64_t{64}}};
      });
  ASSERT_NE(shown, model.findings.end());
  EXPECT_EQ(shown->id, "bench.decode.faster");
  EXPECT_EQ(shown->where.path, "tiled vs merged");
  EXPECT_EQ(shown->claim.rfind("tiled is 28.6% faster than merged (ratio of medians tiled/merged "
                               "0.7143, 95% CI [0.7042, 0.7246], n = 30/30",
                               0),
            0u)
      << shown->claim;
}

TEST_F(BuildModel, CapsAreCountedAndPlotsCanBeSkipped) {
  BuildOptions options;
  options.limits.sweep_points = 1;
  options.limits.timeline_rows = 1;
  options.limits.profiles = 0;
  const Model capped = build_model(record(), options);
  ASSERT_EQ(capped.sweeps.size(), 1u);
  EXPECT_EQ(capped.sweeps[0].points.size(), 1u);
  EXPECT_EQ(capped.sweeps[0].points_omitted, 1u);
  EXPECT_EQ(capped.profiles.size(), 0u);
  EXPECT_EQ(capped.profiles_omitted, 1u);
  ASSERT_EQ(capped.timelines.size(), 1u);
  EXPECT_EQ(capped.timelines[0].rows.size(), 1u);
  EXPECT_EQ(capped.timelines[0].rows_omitted, 1u);

  options = BuildOptions{};
  options.plots = false;
  const Model plain = build_model(record(), options);
  EXPECT_TRUE(plain.profiles.empty());
  EXPECT_TRUE(plain.timelines.empty());
  EXPECT_TRUE(plain.notes.empty());
  EXPECT_EQ(plain.sweeps.size(), 1u);  // from the ledger's findings alone
}

TEST_F(BuildModel, DamagedGateStatisticsNameTheGate) {
  ledger::RunRecord run = record();
  run.gates[0].statistics_json = "[1, 2";
  try {
    build_model(run, BuildOptions{});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_NE(error.message().find("gate 'cp_matches_single_device'"), std::string::npos)
        << error.message();
  }
}

// The report's key statistic, read back from the recorded JSON, is the cascade's own text.
TEST(KeyStatistic, SameAsTheGateLayers) {
  std::vector<gate::GateResult> gates(4);
  gates[0].verdict = GateVerdict::kFail;
  gates[0].statistics.n = 1;
  gates[0].statistics.estimate = 2.1e-5;
  gates[0].statistics.bound = 2e-6;
  gates[0].statistics.comparison = "<=";
  gates[1].verdict = GateVerdict::kPass;
  gates[1].statistics.n = 12;
  gates[1].statistics.n_baseline = 12;
  gates[1].statistics.estimate = 1.94;
  gates[1].statistics.interval = Interval{1.9, 1.99};
  gates[1].statistics.bound = 1.05;
  gates[1].statistics.comparison = "<=";
  gates[2].verdict = GateVerdict::kInconclusive;
  gates[2].statistics.n = 2;
  gates[2].statistics.estimate = 1.01;
  gates[2].statistics.interval = Interval{0.97, 1.06};
  gates[2].statistics.bound = 0.05;
  gates[2].statistics.comparison = "not SLOWER than";
  gates[3].verdict = GateVerdict::kPass;
  gates[3].statistics.n = 3;
  gates[3].statistics.comparison = "passes";
  for (const auto& gate : gates) {
    EXPECT_EQ(
        key_statistic("g", gate.verdict, gate::gate_statistics_to_json(gate.statistics).dump()),
        gate::key_statistic(gate));
  }
  EXPECT_EQ(key_statistic("g", GateVerdict::kNotRun, "{}"), "-");
}

}  // namespace
}  // namespace loupe::report

namespace loupe::report {
namespace {

// Issue 17: an imported run says so in every report (its evidence was not produced here).
TEST_F(BuildModel, AnImportedRunSaysWhereItCameFrom) {
  ledger::RunRecord run = record();
  const Model local = build_model(run, BuildOptions{});
  EXPECT_EQ(local.header.status, "completed");
  run.imported =
      ledger::ImportOrigin{"/tmp/ci-export.json", std::string(64, 'c'), "2026-12-01T00:00:00Z"};
  const Model imported = build_model(run, BuildOptions{});
  EXPECT_EQ(imported.header.status, "completed (imported)");
  ASSERT_FALSE(imported.notes.empty());
  EXPECT_EQ(imported.notes.front(),
            "imported from /tmp/ci-export.json (export sha256 cccccccccccc) at "
            "2026-12-01T00:00:00Z: its evidence was not produced by this ledger's loupe");
}

}  // namespace
}  // namespace loupe::report
