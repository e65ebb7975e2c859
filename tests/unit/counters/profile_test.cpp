// parse_ncu_csv (src/counters/profile.hpp) on HAND-MADE exports (samples.hpp): both pages, the
// merge, every stat and every error.
#include "counters/profile.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "loupe/error.hpp"
#include "unit/counters/samples.hpp"

namespace loupe::counters {
namespace {

using namespace samples;

const std::string kKernel = "void merged_v_decode<128>(const float *, float *, int)";

Profile parse(const std::string& text, StatsRegistry& stats, const std::string& name = "t.csv") {
  Profile profile;
  parse_ncu_csv(text, name, profile, stats);
  return profile;
}

std::string error_of(const std::string& text, const std::string& name = "bad.csv") {
  StatsRegistry stats;
  try {
    parse(text, stats, name);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    return error.message();
  }
  return "no error";
}

TEST(ParseNcuCsv, DetailsPageValuesAreNormalised) {
  StatsRegistry stats;
  const Profile profile = parse(kDetailsHeader + launch_rows(0, kKernel), stats);
  ASSERT_EQ(profile.launches.size(), 1u);
  const Launch& launch = profile.launches[0];
  EXPECT_TRUE(profile.has_details);
  EXPECT_FALSE(profile.has_raw);
  EXPECT_EQ(launch.id, 0);
  EXPECT_EQ(launch.kernel, kKernel);
  EXPECT_EQ(launch.block, "(128, 1, 1)");
  EXPECT_EQ(launch.grid, "(64, 16, 1)");
  EXPECT_EQ(launch.compute_capability, "9.0");
  EXPECT_EQ(launch.process, "4242 kda_gpu");
  EXPECT_EQ(launch.file, "t.csv:2");
  const auto duration = profile.find(launch, "GPU Speed Of Light Throughput", "Duration");
  ASSERT_TRUE(duration.has_value());
  EXPECT_EQ(duration->unit, "ns");
  EXPECT_DOUBLE_EQ(duration->value, 542110);
  const auto cycles = profile.find(launch, "GPU Speed Of Light Throughput", "Elapsed Cycles");
  EXPECT_DOUBLE_EQ(cycles->value, 1021400);
  const auto frequency = profile.find(launch, "GPU Speed Of Light Throughput", "DRAM Frequency");
  EXPECT_EQ(frequency->unit, "hz");
  EXPECT_DOUBLE_EQ(frequency->value, 2.62e9);
  const auto bandwidth = profile.find(launch, "Memory Workload Analysis", "Memory Throughput");
  EXPECT_EQ(bandwidth->unit, "byte/s");
  EXPECT_DOUBLE_EQ(bandwidth->value, 3.96e12);
  // The same metric name in another section is another metric.
  EXPECT_EQ(profile.find(launch, "GPU Speed Of Light Throughput", "Memory Throughput")->unit, "%");
  const auto cache = profile.find(launch, "Launch Statistics", "Function Cache Configuration");
  EXPECT_TRUE(std::isnan(cache->value));
  EXPECT_EQ(cache->text, "CachePreferNone");
  EXPECT_TRUE(stats.all_zero());
}

TEST(ParseNcuCsv, RuleRowsKeepTheAdviceAndTheSpeedup) {
  StatsRegistry stats;
  const Profile profile = parse(
      kDetailsHeader + metric_row(0, kKernel, "Occupancy", "Achieved Occupancy", "%", "23.5") +
          rule_row(0, kKernel, "Occupancy", "AchievedOccupancy", "OPT",
                   "The difference between calculated theoretical (50.0%) and measured "
                   "achieved occupancy (23.5%) can be the result of warp scheduling "
                   "overheads.",
                   "local", "53.00") +
          rule_row(0, kKernel, "SpeedOfLight", "SOLBottleneck", "INF",
                   "Memory is more heavily utilized than Compute.", "", ""),
      stats);
  const Launch& launch = profile.launches.at(0);
  ASSERT_EQ(launch.rules.size(), 2u);
  EXPECT_EQ(launch.rules[0].section, "Occupancy");
  EXPECT_EQ(launch.rules[0].name, "AchievedOccupancy");
  EXPECT_EQ(launch.rules[0].type, "OPT");
  EXPECT_EQ(launch.rules[0].speedup_type, "local");
  EXPECT_DOUBLE_EQ(launch.rules[0].speedup_pct, 53.0);
  EXPECT_TRUE(std::isnan(launch.rules[1].speedup_pct));
  EXPECT_EQ(launch.metrics.size(), 1u);  // rule rows add no metric
}

TEST(ParseNcuCsv, PreambleAndForeignLinesAreSkippedAndCounted) {
  StatsRegistry stats;
  const std::string text =
      "==PROF== Connected to process 4242 (/work/build/bin/kda_gpu)\n"
      "==WARNING== Backing up device memory in system memory.\n"
      "decode: 128 tokens\n" +
      kDetailsHeader + metric_row(0, kKernel, "Occupancy", "Achieved Occupancy", "%", "23.5") +
      "==PROF== Disconnected from process 4242\n" + "done\n";
  const Profile profile = parse(text, stats);
  EXPECT_EQ(profile.launches.size(), 1u);
  EXPECT_EQ(stats.count(Stat::counters_preamble_line), 3);
  EXPECT_EQ(stats.count(Stat::counters_foreign_line), 2);
}

TEST(ParseNcuCsv, MalformedRowsAreDroppedAndCounted) {
  StatsRegistry stats;
  const std::string good = metric_row(0, kKernel, "Occupancy", "Achieved Occupancy", "%", "23.5");
  std::string bad_id = metric_row(1, kKernel, "Occupancy", "Achieved Occupancy", "%", "20");
  bad_id.replace(0, 3, "\"x\"");
  const std::string short_row = "\"2\",\"4242\",\"kda_gpu\"\n";
  const Profile profile = parse(kDetailsHeader + good + bad_id + short_row, stats);
  EXPECT_EQ(profile.launches.size(), 1u);
  EXPECT_EQ(stats.count(Stat::counters_row_malformed), 2);
}

TEST(ParseNcuCsv, RowsWithoutTheRuleColumnsLoseNothing) {
  // Older ncu ends each row after "Metric Value".
  StatsRegistry stats;
  const std::string header =
      "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\","
      "\"Stream\",\"Section Name\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n";
  const std::string row =
      "\"0\",\"1\",\"p\",\"h\",\"k\",\"1\",\"7\",\"Occupancy\","
      "\"Achieved Occupancy\",\"%\",\"23.5\"\n";
  const Profile profile = parse(header + row, stats);
  ASSERT_EQ(profile.launches.size(), 1u);
  EXPECT_DOUBLE_EQ(profile.find(profile.launches[0], "Occupancy", "Achieved Occupancy")->value,
                   23.5);
  EXPECT_EQ(profile.launches[0].block, "");
  EXPECT_TRUE(stats.all_zero());
}

TEST(ParseNcuCsv, ValueStatsMissingNotANumberUnknownUnit) {
  StatsRegistry stats;
  const Profile profile = parse(kDetailsHeader + metric_row(0, kKernel, "S", "a", "%", "n/a") +
                                    metric_row(0, kKernel, "S", "b", "%", "") +
                                    metric_row(0, kKernel, "S", "c", "byte", "lots") +
                                    metric_row(0, kKernel, "S", "d", "furlong", "3"),
                                stats);
  const Launch& launch = profile.launches.at(0);
  EXPECT_EQ(profile.find(launch, "S", "a"), std::nullopt);
  EXPECT_EQ(profile.find(launch, "S", "b"), std::nullopt);
  EXPECT_EQ(profile.find(launch, "S", "c")->text, "lots");
  EXPECT_EQ(profile.find(launch, "S", "d")->unit, "furlong");
  EXPECT_DOUBLE_EQ(profile.find(launch, "S", "d")->value, 3);
  EXPECT_EQ(stats.count(Stat::counters_value_missing), 2);
  EXPECT_EQ(stats.count(Stat::counters_value_not_number), 1);
  EXPECT_EQ(stats.count(Stat::counters_unit_unknown), 1);
}

TEST(ParseNcuCsv, RepeatedHeaderIsSkippedAndCounted) {
  StatsRegistry stats;
  const Profile profile = parse(kDetailsHeader + metric_row(0, kKernel, "S", "a", "%", "1") +
                                    kDetailsHeader + metric_row(1, kKernel, "S", "a", "%", "2"),
                                stats);
  EXPECT_EQ(profile.launches.size(), 2u);
  EXPECT_EQ(stats.count(Stat::counters_header_repeated), 1);
}

TEST(ParseNcuCsv, UnquotedExportStillReads) {
  StatsRegistry stats;
  const std::string text =
      "ID,Process ID,Process Name,Host Name,Kernel Name,Context,Stream,Block Size,Grid Size,"
      "Device,CC,Section Name,Metric Name,Metric Unit,Metric Value\n"
      "0,1,p,h,merged,1,7,128,64,0,9.0,Occupancy,Achieved Occupancy,%,23.5\n";
  const Profile profile = parse(text, stats);
  ASSERT_EQ(profile.launches.size(), 1u);
  EXPECT_EQ(profile.launches[0].kernel, "merged");
}

TEST(ParseNcuCsv, RawPageColumnsWithUnitsRow) {
  StatsRegistry stats;
  const Profile profile =
      parse(raw_page({"dram__bytes_read.sum", "gpu__time_duration.sum", "launch__grid_size",
                      "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"},
                     {"Mbyte", "usecond", "", "ratio"},
                     {{kKernel, {"3,210.5", "542.11", "1,024", "4.1"}},
                      {kKernel, {"3,208.0", "541.00", "1,024", "n/a"}}}),
            stats);
  EXPECT_TRUE(profile.has_raw);
  ASSERT_EQ(profile.launches.size(), 2u);
  const Launch& first = profile.launches[0];
  EXPECT_DOUBLE_EQ(profile.find(first, "", "dram__bytes_read.sum")->value, 3210.5e6);
  EXPECT_EQ(profile.find(first, "", "dram__bytes_read.sum")->unit, "byte");
  EXPECT_DOUBLE_EQ(profile.find(first, "", "gpu__time_duration.sum")->value, 542110);
  EXPECT_DOUBLE_EQ(profile.find(first, "", "launch__grid_size")->value, 1024);
  EXPECT_EQ(first.file, "t.csv:3");
  EXPECT_EQ(
      profile.find(profile.launches[1], "",
                   "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"),
      std::nullopt);
  EXPECT_EQ(stats.count(Stat::counters_value_missing), 1);
}

TEST(ParseNcuCsv, DetailsAndRawMergeOnTheLaunchId) {
  StatsRegistry stats;
  Profile profile;
  parse_ncu_csv(kDetailsHeader + launch_rows(0, kKernel), "details.csv", profile, stats);
  parse_ncu_csv(raw_page({"dram__bytes_read.sum"}, {"Gbyte"}, {{kKernel, {"3.2"}}}), "raw.csv",
                profile, stats);
  ASSERT_EQ(profile.launches.size(), 1u);
  EXPECT_TRUE(profile.has_details);
  EXPECT_TRUE(profile.has_raw);
  EXPECT_DOUBLE_EQ(profile.find(profile.launches[0], "", "dram__bytes_read.sum")->value, 3.2e9);
  EXPECT_NE(profile.find(profile.launches[0], "Occupancy", "Achieved Occupancy"), std::nullopt);
  EXPECT_EQ(profile.files, (std::vector<std::string>{"details.csv", "raw.csv"}));
}

TEST(ParseNcuCsv, OneIdWithTwoKernelNamesIsAConflict) {
  StatsRegistry stats;
  Profile profile;
  parse_ncu_csv(kDetailsHeader + metric_row(0, kKernel, "S", "a", "%", "1"), "a.csv", profile,
                stats);
  parse_ncu_csv(kDetailsHeader + metric_row(0, "other_kernel", "S", "a", "%", "1"), "b.csv",
                profile, stats);
  ASSERT_EQ(profile.launches.size(), 1u);
  EXPECT_EQ(profile.launches[0].kernel, kKernel);
  EXPECT_EQ(stats.count(Stat::counters_launch_conflict), 1);
}

TEST(ParseNcuCsv, NoHeaderIsAnErrorThatQuotesNcu) {
  EXPECT_EQ(error_of("==PROF== Connected to process 1\n"
                     "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access "
                     "NVIDIA GPU Performance Counters\n"),
            "bad.csv: no ncu CSV header (a row starting with \"ID\") in 2 line(s); ncu said: "
            "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
            "Performance Counters");
  EXPECT_EQ(error_of(""), "bad.csv: no ncu CSV header (a row starting with \"ID\") in 0 line(s)");
}

TEST(ParseNcuCsv, HeaderWithoutRowsIsAnError) {
  EXPECT_EQ(error_of(kDetailsHeader),
            "bad.csv: the ncu CSV header is there but no launch row follows");
}

TEST(ParseNcuCsv, HeaderWithoutKernelNameIsAnError) {
  EXPECT_EQ(error_of("\"ID\",\"Metric Name\"\n\"0\",\"x\"\n"),
            "bad.csv:1: the ncu header has no \"Kernel Name\" column");
}

TEST(ParseNcuCsv, DetailsHeaderMissingAColumnIsAnError) {
  EXPECT_EQ(error_of("\"ID\",\"Kernel Name\",\"Metric Name\",\"Metric Value\"\n"),
            "bad.csv:1: a details-page header without the \"Section Name\" column");
}

TEST(ParseNcuCsv, RawPageWithoutUnitsRowIsAnError) {
  EXPECT_EQ(error_of(kRawLaunchColumns + ",\"x\"\n" +
                     launch_prefix(0, kKernel, "(1, 1, 1)", "(1, 1, 1)") + "\"5\"\n"),
            "bad.csv:2: expected the units row of a --page raw export (its ID field empty, 12 "
            "fields), found 12 field(s) starting '0'");
}

TEST(ParseNcuCsv, BrokenQuotingIsAnErrorWithLineAndColumn) {
  EXPECT_EQ(error_of(kDetailsHeader + "\"0\",\"4242\",\"kda\"x\n"),
            "bad.csv:2:17: expected ',' or the end of the line after the closing quote, found 'x'");
}

}  // namespace
}  // namespace loupe::counters
