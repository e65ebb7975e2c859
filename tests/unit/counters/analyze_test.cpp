// Findings and comparisons (src/counters/analyze.hpp) on HAND-MADE exports (samples.hpp).
#include "counters/analyze.hpp"

#include <gtest/gtest.h>

#include "loupe/error.hpp"
#include "unit/counters/samples.hpp"

namespace loupe::counters {
namespace {

using namespace samples;

const std::string kMerged = "void kda::cuda::merged_v_decode<128>(const float *, float *, int)";
const std::string kTiled = "void kda::cuda::tiled_v_decode<32>(const float *, float *, int)";

Profile profile_of(const std::string& text) {
  StatsRegistry stats;
  Profile profile;
  parse_ncu_csv(text, "t.csv", profile, stats);
  return profile;
}

const Finding* find(const std::vector<Finding>& findings, const std::string& id) {
  for (const Finding& finding : findings) {
    if (finding.id == id) return &finding;
  }
  return nullptr;
}

double metric(const Finding& finding, const std::string& name) {
  for (const auto& [key, value] : finding.evidence.metrics) {
    if (key == name) return value;
  }
  ADD_FAILURE() << "no metric " << name << " in " << finding.id;
  return 0;
}

TEST(ShortName, FunctionNameWithoutScopeTemplateOrParameters) {
  const Profile profile = profile_of(kDetailsHeader + launch_rows(0, kMerged) +
                                     launch_rows(1, "_Z14tiled_v_decodePKfPfi") +
                                     launch_rows(2, "void (anonymous namespace)::fill(int)"));
  const auto groups = group_launches(profile);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].short_name, "merged_v_decode");
  EXPECT_EQ(groups[1].short_name, "tiled_v_decode");  // demangled from _Z...
  EXPECT_EQ(groups[2].short_name, "fill");
}

TEST(Group, MediansOverLaunchesOfOneConfiguration) {
  Shape fast, slow;
  fast.duration = "500";
  slow.duration = "700";
  Shape middle;
  middle.duration = "540";
  const Profile profile =
      profile_of(kDetailsHeader + launch_rows(0, kMerged, fast) + launch_rows(1, kMerged, slow) +
                 launch_rows(2, kMerged, middle));
  const auto groups = group_launches(profile);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].launches.size(), 3u);
  EXPECT_DOUBLE_EQ(*groups[0].get(Quantity::kDurationNs), 540e3);
  // No instruction counter: IPC per SM × elapsed cycles × SMs.
  EXPECT_TRUE(groups[0].instructions_derived);
  EXPECT_DOUBLE_EQ(*groups[0].get(Quantity::kInstructions), 0.52 * 1021400 * 132);
}

TEST(Group, AnotherGridIsAnotherGroupWithItsOwnId) {
  std::string text = kDetailsHeader + launch_rows(0, kMerged);
  text += metric_row(1, kMerged, "GPU Speed Of Light Throughput", "DRAM Throughput", "%", "50",
                     "(128, 1, 1)", "(8, 16, 1)");
  const auto groups = group_launches(profile_of(text));
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].short_name, "merged_v_decode_g64x16x1");
  EXPECT_EQ(groups[1].short_name, "merged_v_decode_g8x16x1");
}

TEST(Group, FilterSearchesTheLaunchConfigurationToo) {
  std::string text = kDetailsHeader + launch_rows(0, kMerged);
  text += metric_row(1, kMerged, "GPU Speed Of Light Throughput", "DRAM Throughput", "%", "50",
                     "(128, 1, 1)", "(8, 16, 1)");
  const Profile profile = profile_of(text);
  EXPECT_EQ(group_launches(profile, Pattern::compile("merged", "-")).size(), 2u);
  const auto groups = group_launches(profile, Pattern::compile("merged.*grid .8, 16", "-"));
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].grid, "(8, 16, 1)");
}

TEST(Findings, DramBoundKernel) {
  AnalyzeOptions options;
  options.reproduce = "loupe counters t.csv";
  const Analysis analysis = analyze(profile_of(kDetailsHeader + launch_rows(0, kMerged)), options);
  const Finding* bound = find(analysis.findings, "counters.merged_v_decode.bound");
  ASSERT_NE(bound, nullptr);
  EXPECT_EQ(bound->layer, Layer::kCounters);
  EXPECT_EQ(bound->severity, Severity::kInfo);
  EXPECT_EQ(bound->claim,
            "merged_v_decode block (128, 1, 1) grid (64, 16, 1) is DRAM-bound at 93.1 % of peak "
            "(little left to gain at this traffic); DRAM 93.1 %, L2 41.0 %, L1 22.3 %, SM 18.0 %; "
            "542.1 us per launch (1 launch)");
  EXPECT_DOUBLE_EQ(metric(*bound, "bound_pct"), 93.1);
  EXPECT_EQ(bound->where.path, kMerged);
  EXPECT_EQ(bound->reproduce, "loupe counters t.csv");
  EXPECT_EQ(bound->evidence.files, (std::vector<std::string>{"t.csv:2"}));
}

TEST(Findings, LatencyBoundWhenNoUnitReachesSixtyPercent) {
  Shape shape;
  shape.dram = "35.20";
  shape.l2 = "20.00";
  shape.l1 = "12.00";
  shape.sm = "9.00";
  const Analysis analysis =
      analyze(profile_of(kDetailsHeader + launch_rows(0, kTiled, shape)), AnalyzeOptions{});
  const Finding* bound = find(analysis.findings, "counters.tiled_v_decode.bound");
  ASSERT_NE(bound, nullptr);
  EXPECT_EQ(bound->severity, Severity::kWarn);
  EXPECT_EQ(bound->claim,
            "tiled_v_decode block (128, 1, 1) grid (64, 16, 1) is latency-bound: no unit reaches "
            "60 % of its peak (highest DRAM 35.2 %); DRAM 35.2 %, L2 20.0 %, L1 12.0 %, SM 9.0 %; "
            "542.1 us per launch (1 launch)");
  // Warnings sort first.
  EXPECT_EQ(analysis.findings.front().severity, Severity::kWarn);
}

TEST(Findings, OccupancyGapAndWhatLimitsIt) {
  const Analysis analysis =
      analyze(profile_of(kDetailsHeader + launch_rows(0, kMerged)), AnalyzeOptions{});
  const Finding* occupancy = find(analysis.findings, "counters.merged_v_decode.occupancy");
  ASSERT_NE(occupancy, nullptr);
  EXPECT_EQ(occupancy->claim,
            "merged_v_decode block (128, 1, 1) grid (64, 16, 1): achieved occupancy 23.5 % of a "
            "theoretical 50.0 % (gap 26.5 points); the theoretical limit is 4 block(s) per SM, set "
            "by registers (128 registers per thread); the grid's 1024 blocks fill 1.94 wave(s) of "
            "528 block slots");
  EXPECT_DOUBLE_EQ(metric(*occupancy, "occupancy_gap_pct"), 26.5);
  // DRAM-bound: occupancy is information, not a warning.
  EXPECT_EQ(occupancy->severity, Severity::kInfo);
}

TEST(Findings, SharedMemoryLimitAndTooFewBlocks) {
  Shape shape;
  shape.dram = "30";
  shape.limit_shared = "2";
  shape.grid_blocks = "64";
  shape.achieved = "5.0";
  shape.theoretical = "25.0";
  const Analysis analysis =
      analyze(profile_of(kDetailsHeader + launch_rows(0, kTiled, shape)), AnalyzeOptions{});
  const Finding* occupancy = find(analysis.findings, "counters.tiled_v_decode.occupancy");
  ASSERT_NE(occupancy, nullptr);
  EXPECT_NE(occupancy->claim.find("set by shared memory;"), std::string::npos) << occupancy->claim;
  EXPECT_NE(occupancy->claim.find("the grid's 64 blocks fill 0.24 wave(s) of 264 block slots"),
            std::string::npos)
      << occupancy->claim;
  EXPECT_EQ(occupancy->severity, Severity::kWarn);  // latency-bound and far from theoretical
  EXPECT_EQ(occupancy->next.substr(0, 40), "the grid is too small to fill the GPU: s");
}

TEST(Findings, StallsFromTheRawPageTopThree) {
  const std::string prefix = "smsp__average_warps_issue_stalled_";
  const std::string suffix = "_per_issue_active.ratio";
  const Profile profile = profile_of(raw_page(
      {prefix + "long_scoreboard" + suffix, prefix + "wait" + suffix, prefix + "barrier" + suffix,
       prefix + "selected" + suffix, prefix + "math_pipe_throttle" + suffix,
       prefix + "long_scoreboard_not_issued" + suffix},
      {"", "", "", "", "", ""}, {{kTiled, {"6.0", "2.0", "1.0", "1.0", "1.0", "9"}}}));
  const Analysis analysis = analyze(profile, AnalyzeOptions{});
  const Finding* stalls = find(analysis.findings, "counters.tiled_v_decode.stalls");
  ASSERT_NE(stalls, nullptr);
  EXPECT_EQ(stalls->claim,
            "tiled_v_decode block (128, 1, 1) grid (64, 16, 1): warps stall mostly on "
            "long_scoreboard (6.00 cycles per issued instruction, 60 %), wait (2.00 cycles per "
            "issued instruction, 20 %), then barrier (1.00 cycles per issued instruction, 10 %)");
  EXPECT_DOUBLE_EQ(metric(*stalls, "stall_long_scoreboard"), 6.0);
  EXPECT_EQ(stalls->next.substr(0, 16), "long_scoreboard:");
}

TEST(Findings, BytesAgainstDeclared) {
  const Profile profile = profile_of(
      raw_page({"dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum"},
               {"Gbyte", "Mbyte", "usecond"}, {{kMerged, {"2.10", "50", "542"}}}));
  AnalyzeOptions options;
  options.declared.push_back(parse_declared_bytes("merged=1G"));
  const Analysis analysis = analyze(profile, options);
  const Finding* bytes = find(analysis.findings, "counters.merged_v_decode.bytes");
  ASSERT_NE(bytes, nullptr);
  EXPECT_EQ(bytes->severity, Severity::kWarn);
  EXPECT_EQ(bytes->claim,
            "merged_v_decode block (128, 1, 1) grid (64, 16, 1) moves 2.15 GB per launch to and "
            "from DRAM (read 2.1 GB, write 50 MB), 3.97e+03 GB/s; 2.15x the 1 GB it must move: it "
            "re-reads or over-fetches");
  EXPECT_DOUBLE_EQ(metric(*bytes, "bytes_ratio"), 2.15);
}

TEST(Findings, BytesFromThroughputTimesDurationWithoutCounters) {
  const Analysis analysis =
      analyze(profile_of(kDetailsHeader + launch_rows(0, kMerged)), AnalyzeOptions{});
  const Finding* bytes = find(analysis.findings, "counters.merged_v_decode.bytes");
  ASSERT_NE(bytes, nullptr);
  EXPECT_DOUBLE_EQ(metric(*bytes, "dram_bytes"), 3.96e12 * 542110e-9);
  EXPECT_NE(bytes->claim.find("DRAM throughput × duration"), std::string::npos);
  EXPECT_EQ(bytes->severity, Severity::kInfo);
}

TEST(Findings, NcuAdviceQuotedLargestSpeedupFirst) {
  const std::string text =
      kDetailsHeader + metric_row(0, kTiled, "Occupancy", "Achieved Occupancy", "%", "20") +
      rule_row(0, kTiled, "SpeedOfLight", "SOLBottleneck", "INF", "Memory is busier.", "", "") +
      rule_row(0, kTiled, "Occupancy", "AchievedOccupancy", "OPT", "Raise occupancy.", "local",
               "12.5") +
      rule_row(0, kTiled, "MemoryWorkloadAnalysis", "MemoryL2Compression", "OPT",
               "Uncoalesced loads waste \"\"sectors\"\".", "global", "31.0");
  const Analysis analysis = analyze(profile_of(text), AnalyzeOptions{});
  const Finding* advice = find(analysis.findings, "counters.tiled_v_decode.advice");
  ASSERT_NE(advice, nullptr);
  EXPECT_EQ(advice->severity, Severity::kWarn);
  EXPECT_EQ(advice->claim,
            "tiled_v_decode block (128, 1, 1) grid (64, 16, 1): ncu MemoryL2Compression (OPT, "
            "estimated speedup 31.0 % global): \"Uncoalesced loads waste \"sectors\".\"; also "
            "AchievedOccupancy (OPT 12.5 %), SOLBottleneck (INF)");
  EXPECT_DOUBLE_EQ(metric(*advice, "rule_AchievedOccupancy_speedup_pct"), 12.5);
}

TEST(Analyze, KernelFilterThatMatchesNothingListsTheKernels) {
  AnalyzeOptions options;
  options.kernel_pattern = "nope";
  options.kernel_filter = Pattern::compile("nope", "--kernel");
  try {
    analyze(profile_of(kDetailsHeader + launch_rows(0, kMerged)), options);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(), "--kernel 'nope' matches none of the 1 kernel(s): " + kMerged);
  }
}

TEST(Analyze, EveryRowDroppedIsAnInputError) {
  std::string row = metric_row(0, kMerged, "Occupancy", "Achieved Occupancy", "%", "20");
  row.replace(0, 3, "\"x\"");
  try {
    analyze(profile_of(kDetailsHeader + row), AnalyzeOptions{});
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_EQ(error.message(), "t.csv: no usable launch: every row was dropped");
  }
}

TEST(Analyze, BoundedOutputCountsWhatItLeftOut) {
  std::string text = kDetailsHeader;
  for (int id = 0; id < 10; ++id) text += launch_rows(id, "kernel_" + std::to_string(id) + "(int)");
  AnalyzeOptions options;
  options.max_findings = 5;
  const Analysis analysis = analyze(profile_of(text), options);
  EXPECT_EQ(analysis.findings.size(), 5u);
  EXPECT_EQ(analysis.findings_omitted, 25u);  // bound, occupancy, bytes for each of 10
}

TEST(Compare, LeadsWithTheWorkThatMovedWithTheTime) {
  const std::vector<std::string> metrics = {"gpu__time_duration.sum", "smsp__inst_executed.sum",
                                            "smsp__inst_executed_op_global_ld.sum",
                                            "dram__bytes_read.sum", "dram__bytes_write.sum"};
  const std::vector<std::string> units = {"usecond", "inst", "inst", "Gbyte", "Mbyte"};
  const Profile profile =
      profile_of(raw_page(metrics, units,
                          {{kTiled, {"610", "2,400,000", "300,000", "2.15", "4"}},
                           {kMerged, {"543", "1,500,000", "100,000", "2.14", "4"}}}));
  DiffSide a{"A", group_launches(profile, Pattern::compile("tiled", "--kernel-a")).at(0)};
  DiffSide b{"B", group_launches(profile, Pattern::compile("merged", "--kernel-b")).at(0)};
  const Comparison comparison = compare(a, b, "loupe counters diff t.csv");
  ASSERT_FALSE(comparison.findings.empty());
  const Finding& lead = comparison.findings.front();
  EXPECT_EQ(lead.id, "counters.diff.time");
  EXPECT_EQ(lead.claim,
            "tiled_v_decode (A) takes 1.12x the time per launch of merged_v_decode (B) (610 us vs "
            "543 us): it executes 3.00x the global load instructions and 1.60x the instructions "
            "(dram_bytes 1.00x)");
  EXPECT_EQ(comparison.findings[1].id, "counters.diff.global_load_instructions");
  EXPECT_EQ(comparison.findings[2].id, "counters.diff.instructions");
  EXPECT_EQ(comparison.rows.front().metric, "duration_ns");
  EXPECT_NE(lead.next.find("same DRAM traffic, more work per byte"), std::string::npos);
}

TEST(Compare, SameWorkPointsAtTheStalls) {
  const std::vector<std::string> metrics = {
      "gpu__time_duration.sum", "smsp__inst_executed.sum",
      "smsp__average_warp_latency_per_inst_issued.ratio",
      "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"};
  const Profile profile = profile_of(
      raw_page(metrics, {"usecond", "inst", "", ""},
               {{kTiled, {"700", "1,000", "12.5", "8"}}, {kMerged, {"500", "1,000", "8.0", "3"}}}));
  DiffSide a{"A", group_launches(profile, Pattern::compile("tiled", "-")).at(0)};
  DiffSide b{"B", group_launches(profile, Pattern::compile("merged", "-")).at(0)};
  const Comparison comparison = compare(a, b, "");
  EXPECT_EQ(comparison.findings.front().claim,
            "tiled_v_decode (A) takes 1.40x the time per launch of merged_v_decode (B) (700 us vs "
            "500 us): the same work (instructions 1.00x); its warps wait longer: 12.50 vs 8.00 "
            "cycles per issued instruction, top stall long_scoreboard");
}

TEST(ParseDeclaredBytes, SuffixesAndErrors) {
  EXPECT_DOUBLE_EQ(parse_declared_bytes("decode=3.2G").bytes, 3.2e9);
  EXPECT_DOUBLE_EQ(parse_declared_bytes("decode=2GiB").bytes, 2.0 * 1073741824.0);
  EXPECT_DOUBLE_EQ(parse_declared_bytes("a=b=1,024").bytes, 1024);
  EXPECT_EQ(parse_declared_bytes("a=b=1,024").pattern, "a=b");
  for (const char* bad : {"decode", "=5", "decode=", "decode=-1", "decode=lots", "(=5"}) {
    EXPECT_THROW(parse_declared_bytes(bad), Error) << bad;
  }
}

}  // namespace
}  // namespace loupe::counters
