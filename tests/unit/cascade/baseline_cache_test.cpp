// The baseline cache (gate/baseline_cache.hpp): a stored check point comes back exactly with the
// run that stored it; a changed program byte changes the build's identity and a changed parameter
// the key (each a miss); a script is not identified; a corrupt entry is a miss with a warning and
// is replaced by the next store; the run's lines and JSON say which points came from which run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gate/baseline_cache.hpp"
#include "gate/cascade.hpp"
#include "loupe/error.hpp"
#include "probe/runner.hpp"
#include "support/scratch_dir.hpp"

namespace loupe::gate {
namespace {

namespace fs = std::filesystem;
using test_support::ScratchDir;

PointResult check_point() {
  PointResult point;
  point.layer = Layer::kCheck;
  point.entry = "chunk";
  point.probe = "chunk_vs_recurrence";
  point.params = {{"T", Value{int64_t{500}}}, {"dtype", Value{std::string("f32")}}};
  point.repeat = 0;
  point.seed = 7;
  point.verdict = Verdict::kPass;
  point.metrics = {{"", "rms_ratio", 7.67e-07}, {"", "max_abs", 0.0}};
  Finding finding;
  finding.id = "check.chunk_vs_recurrence.pass";
  finding.layer = Layer::kCheck;
  finding.severity = Severity::kInfo;
  finding.claim = "the chunk kernel matches the recurrence";
  finding.reproduce = "loupe probe run chunk_vs_recurrence --seed 7 -- kda probe";
  point.findings = {finding};
  point.observation_dir = "/home/runs/r1/baseline/chunk_vs_recurrence/T=500,dtype=f32";
  point.reproduce = "loupe probe run chunk_vs_recurrence --set T=500 --seed 7 -- kda probe";
  point.wall_s = 7.25;
  return point;
}

probe::RunRequest request_of(const std::string& t_value) {
  probe::RunRequest request;
  request.probe = "chunk_vs_recurrence";
  request.sets = {"T=" + t_value, "dtype=f32"};
  request.seed = 7;
  request.subject_command = {"env", "OMP_NUM_THREADS=1", "/builds/base/kda", "probe"};
  request.analyze.tolerances = {"rms_ratio=2e-06"};
  return request;
}

TEST(BaselineCacheTest, AStoredCheckPointComesBackExactlyWithTheRunThatStoredIt) {
  ScratchDir dir("baseline-cache-hit");
  BaselineCache first(dir.path() / "baseline-cache", "build-a", "r20261207-060000-aaaa");
  const std::string key = first.key(describe_request(request_of("500"), 0));
  EXPECT_FALSE(first.find(key).has_value());
  first.store(key, check_point());
  EXPECT_EQ(first.stored(), 1u);
  EXPECT_TRUE(fs::exists(dir.path() / "baseline-cache" / (key + ".json")));

  // A later run against the same build.
  BaselineCache second(dir.path() / "baseline-cache", "build-a", "r20261207-061000-bbbb");
  ASSERT_EQ(second.key(describe_request(request_of("500"), 0)), key);
  const std::optional<CachedPoint> cached = second.find(key);
  ASSERT_TRUE(cached.has_value());
  EXPECT_EQ(cached->run, "r20261207-060000-aaaa");
  const PointResult expected = check_point();
  EXPECT_EQ(cached->point.layer, expected.layer);
  EXPECT_EQ(cached->point.entry, expected.entry);
  EXPECT_EQ(cached->point.probe, expected.probe);
  EXPECT_EQ(cached->point.params, expected.params);
  EXPECT_EQ(cached->point.seed, 7u);
  EXPECT_EQ(cached->point.verdict, Verdict::kPass);
  EXPECT_EQ(cached->point.metrics, expected.metrics);
  EXPECT_EQ(cached->point.findings, expected.findings);
  EXPECT_EQ(cached->point.observation_dir, expected.observation_dir);
  EXPECT_EQ(cached->point.reproduce, expected.reproduce);
  EXPECT_EQ(cached->point.wall_s, 7.25);
  EXPECT_TRUE(second.warnings().empty());
}

TEST(BaselineCacheTest, AnotherBuildAParameterASeedOrARepeatIsAnotherKey) {
  BaselineCache cache("/nonexistent/baseline-cache", "build-a", "r1");
  BaselineCache other_build("/nonexistent/baseline-cache", "build-b", "r1");
  const std::string key = cache.key(describe_request(request_of("500"), 0));
  EXPECT_EQ(key.size(), 64u);
  EXPECT_NE(other_build.key(describe_request(request_of("500"), 0)), key);
  EXPECT_NE(cache.key(describe_request(request_of("512"), 0)), key);
  EXPECT_NE(cache.key(describe_request(request_of("500"), 1)), key);
  probe::RunRequest seed_8 = request_of("500");
  seed_8.seed = 8;
  EXPECT_NE(cache.key(describe_request(seed_8, 0)), key);
  probe::RunRequest other_environment = request_of("500");
  other_environment.subject_command[1] = "OMP_NUM_THREADS=2";
  EXPECT_NE(cache.key(describe_request(other_environment, 0)), key);
  probe::RunRequest other_tolerance = request_of("500");
  other_tolerance.analyze.tolerances = {"rms_ratio=1e-06"};
  EXPECT_NE(cache.key(describe_request(other_tolerance, 0)), key);
  // What differs from run to run is not in it: folders, the hidden-run secret, the memory limit.
  probe::RunRequest next_run = request_of("500");
  next_run.run_id = "r2/baseline/.staging";
  next_run.home = "/elsewhere";
  next_run.hidden_secret = 12345;
  next_run.memory_limit_bytes = 1 << 30;
  EXPECT_EQ(cache.key(describe_request(next_run, 0)), key);
}

TEST(BaselineCacheTest, AChangedProgramByteIsAnotherBuild) {
  ScratchDir dir("baseline-cache-bytes");
  // An ELF executable of this build (this test's own), copied so that a byte can change.
  const fs::path program = dir.path() / "kda";
  fs::copy_file(fs::read_symlink("/proc/self/exe"), program);
  SubjectSpec subject;
  subject.command = {program.string(), "probe"};
  const BuildIdentity before = identify_build(subject, {});
  EXPECT_EQ(before.program, program);
  ASSERT_FALSE(before.files.empty());
  EXPECT_EQ(before.files.front().first, program);
  EXPECT_EQ(before.hash.size(), 64u);
  EXPECT_EQ(identify_build(subject, {}).hash, before.hash);
  // The same bytes elsewhere are the same build (the path is in each request's command line).
  const fs::path elsewhere = dir.path() / "elsewhere-kda";
  fs::copy_file(program, elsewhere);
  SubjectSpec moved;
  moved.command = {elsewhere.string(), "probe"};
  EXPECT_EQ(identify_build(moved, {}).hash, before.hash);
  {
    std::ofstream out(program, std::ios::binary | std::ios::app);
    out << '\0';
  }
  const BuildIdentity after = identify_build(subject, {});
  EXPECT_NE(after.hash, before.hash);
  EXPECT_NE(after.files.front().second, before.files.front().second);
  // The same libraries (ldd) either way; the loupe that analyses is part of the identity too.
  EXPECT_EQ(after.files.size(), before.files.size());
  EXPECT_NE(identify_build(subject, fs::read_symlink("/proc/self/exe")).hash, after.hash);
}

TEST(BaselineCacheTest, AScriptIsNotIdentifiedItsImportsAreUnknown) {
  ScratchDir dir("baseline-cache-script");
  const fs::path script = dir.path() / "subject.py";
  {
    std::ofstream out(script);
    out << "#!/usr/bin/env python3\nimport loupe\n";
  }
  SubjectSpec subject;
  subject.command = {script.string(), "probe"};
  try {
    identify_build(subject, {});
    FAIL() << "a script was identified";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_EQ(error.message(), "the baseline's program " + script.string() +
                                   " is not an ELF executable: what a script loads is not "
                                   "known, so its check results are not cached");
  }
  // An interpreter (an ELF program) with the script as an argument: the same.
  SubjectSpec interpreted;
  interpreted.command = {fs::read_symlink("/proc/self/exe").string(), script.string(), "probe"};
  try {
    identify_build(interpreted, {});
    FAIL() << "an interpreter's script was identified";
  } catch (const Error& error) {
    EXPECT_EQ(error.message(), "the baseline's command names a file beside its program (" +
                                   script.string() +
                                   "): what that file loads is not known, so its check results "
                                   "are not cached");
  }
  SubjectSpec missing;
  missing.command = {"loupe-no-such-program-anywhere", "probe"};
  EXPECT_THROW(identify_build(missing, {}), Error);
}

TEST(BaselineCacheTest, ACorruptEntryIsAMissWithAWarningAndTheNextStoreReplacesIt) {
  ScratchDir dir("baseline-cache-corrupt");
  const fs::path cache_dir = dir.path() / "baseline-cache";
  BaselineCache cache(cache_dir, "build-a", "r1");
  const std::string key = cache.key(describe_request(request_of("500"), 0));
  cache.store(key, check_point());
  const fs::path file = cache_dir / (key + ".json");
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << "{\"format\": 1, \"key\": \"" << key << "\", \"run\": \"r1\", \"point\": {\"layer\"";
  }
  BaselineCache next(cache_dir, "build-a", "r2");
  EXPECT_FALSE(next.find(key).has_value());
  ASSERT_EQ(next.warnings().size(), 1u);
  EXPECT_EQ(next.warnings()[0], "baseline cache: " + file.string() +
                                    " is not valid JSON; a miss (the point runs and its result "
                                    "replaces the entry)");
  // Valid JSON, a field missing.
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << "{\"format\": 1, \"key\": \"" << key << "\", \"run\": \"r1\", \"point\": {}}";
  }
  EXPECT_FALSE(next.find(key).has_value());
  ASSERT_EQ(next.warnings().size(), 2u);
  EXPECT_EQ(next.warnings()[1], "baseline cache: " + file.string() +
                                    " no field 'layer'; a miss (the point runs and its result "
                                    "replaces the entry)");
  // Another key's entry under this key's name.
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << "{\"format\": 1, \"key\": \"0000\", \"run\": \"r1\", \"point\": {}}";
  }
  EXPECT_FALSE(next.find(key).has_value());
  ASSERT_EQ(next.warnings().size(), 3u);
  EXPECT_NE(next.warnings()[2].find(" holds another key's point; a miss"), std::string::npos);
  next.store(key, check_point());
  const std::optional<CachedPoint> cached = next.find(key);
  ASSERT_TRUE(cached.has_value());
  EXPECT_EQ(cached->run, "r2");
  EXPECT_EQ(next.warnings().size(), 3u);
}

TEST(BaselineCacheTest, BenchAndScenarioPointsAreNeverStored) {
  ScratchDir dir("baseline-cache-bench");
  BaselineCache cache(dir.path() / "baseline-cache", "build-a", "r1");
  PointResult bench = check_point();
  bench.layer = Layer::kBench;
  const std::string key = cache.key(describe_request(request_of("500"), 0));
  cache.store(key, bench);
  EXPECT_EQ(cache.stored(), 0u);
  EXPECT_FALSE(cache.find(key).has_value());
  EXPECT_TRUE(cache.warnings().empty());
}

CascadeResult result_with_hits() {
  CascadeResult result;
  result.baseline_label = "build /builds/base/kda";
  BaselineCacheLog log;
  log.enabled = true;
  log.dir = "/home/baseline-cache";
  log.stored = 1;
  result.baseline_cache = log;
  PointResult hit_a = check_point();
  hit_a.cached_from_run = "r20261207-060000-aaaa";
  PointResult hit_b = check_point();
  hit_b.entry = "replay";
  hit_b.params = {{"L", Value{int64_t{4}}}};
  hit_b.cached_from_run = "r20261207-060000-aaaa";
  PointResult hit_c = hit_b;
  hit_c.params = {{"L", Value{int64_t{8}}}};
  PointResult ran = check_point();
  ran.entry = "cp_control";
  result.baseline_points = {hit_a, hit_b, hit_c, ran};
  return result;
}

TEST(BaselineCacheTest, TheRunSaysWhichBaselinePointsCameFromTheCacheAndFromWhichRun) {
  const CascadeResult result = result_with_hits();
  EXPECT_EQ(baseline_cache_lines(result),
            (std::vector<std::string>{
                "baseline cache: 3 check run(s) of the baseline build taken from the cache, "
                "stored by run r20261207-060000-aaaa: check chunk (1), check replay (2)",
                "baseline cache: 3 hit(s), 1 check run(s) of the baseline build run and stored in "
                "/home/baseline-cache (--no-baseline-cache runs them all)"}));
  EXPECT_EQ(baseline_cache_lines(result, 1)[0],
            "baseline cache: 3 check run(s) of the baseline build taken from the cache, stored "
            "by run r20261207-060000-aaaa: check chunk (1), and 1 more entries (--json lists "
            "them in data.baseline_cache)");
  const Json json = baseline_cache_to_json(result, 2);
  EXPECT_EQ(json.at("enabled"), true);
  EXPECT_TRUE(json.at("off_reason").is_null());
  EXPECT_EQ(json.at("hits"), 3);
  EXPECT_EQ(json.at("stored"), 1);
  EXPECT_EQ(json.at("truncated"), true);
  ASSERT_EQ(json.at("points").size(), 2u);
  EXPECT_EQ(json.at("points")[1].dump(),
            R"({"layer":"check","entry":"replay","params":{"L":4},"repeat":0,)"
            R"("run":"r20261207-060000-aaaa"})");
  EXPECT_EQ(json.at("warnings").size(), 0u);
}

TEST(BaselineCacheTest, TheFlagTurnsItOffAndTheRunSaysSo) {
  CascadeResult result = result_with_hits();
  for (PointResult& point : result.baseline_points) point.cached_from_run.clear();
  result.baseline_cache->enabled = false;
  result.baseline_cache->stored = 0;
  result.baseline_cache->off_reason = "--no-baseline-cache";
  EXPECT_EQ(baseline_cache_lines(result),
            (std::vector<std::string>{"baseline cache: off (--no-baseline-cache); the baseline "
                                      "build's check points ran"}));
  const Json json = baseline_cache_to_json(result);
  EXPECT_EQ(json.at("enabled"), false);
  EXPECT_EQ(json.at("off_reason"), "--no-baseline-cache");
  EXPECT_EQ(json.at("hits"), 0);
  // No baseline build, no cache: nothing to say.
  EXPECT_TRUE(baseline_cache_lines(CascadeResult{}).empty());
  EXPECT_TRUE(baseline_cache_to_json(CascadeResult{}).is_null());
}

TEST(BaselineCacheTest, ABuildBaselineWithTheFlagOffRunsEveryCheckAndSaysWhy) {
  Objective objective;
  objective.subject.command = {"/nonexistent/kda", "probe"};
  const BaselineSource off = build_baseline(objective, "/nonexistent/home", "r1",
                                            objective.subject.command, "build kda", 0, false);
  ASSERT_NE(off.cache_log, nullptr);
  EXPECT_FALSE(off.cache_log->enabled);
  EXPECT_EQ(off.cache_log->off_reason, "--no-baseline-cache");
  const BaselineSource on = build_baseline(objective, "/nonexistent/home", "r1",
                                           objective.subject.command, "build kda", 0, true);
  EXPECT_TRUE(on.cache_log->enabled);
  EXPECT_EQ(on.cache_log->dir, "/nonexistent/home/baseline-cache");
}

}  // namespace
}  // namespace loupe::gate
