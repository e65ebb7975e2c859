// `loupe counters` end to end on HAND-MADE exports (tests/unit/counters/samples.hpp): text and
// JSON output, exit 2 for malformed input and for a missing ncu, `-- CMD` and .ncu-rep through a
// stand-in ncu (this machine has no GPU and no ncu), diff, --record and the report's chart.
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "support/cli_run.hpp"
#include "support/scratch_dir.hpp"
#include "unit/counters/samples.hpp"

namespace loupe {
namespace {

namespace fs = std::filesystem;
using namespace counters::samples;
using test_support::run_cli;
using test_support::run_loupe;

const std::string kTiled = "void kda::cuda::tiled_v_decode<32>(const float *, float *, int)";
const std::string kMerged = "void kda::cuda::merged_v_decode<128>(const float *, float *, int)";

class CountersCli : public ::testing::Test {
 protected:
  CountersCli() : dir_("counters-cli") {
    Shape tiled;
    tiled.duration = "610";
    tiled.dram = "40.00";
    tiled.l2 = "30";
    tiled.l1 = "35";
    tiled.sm = "45";
    tiled.ipc = "0.90";
    details_ = dir_.path() / "both.csv";
    std::ofstream(details_) << "==PROF== Connected to process 4242 (build/bin/kda_gpu)\n"
                            << kDetailsHeader << launch_rows(0, kTiled, tiled)
                            << launch_rows(1, kMerged)
                            << "==PROF== Disconnected from process 4242\n";
  }

  // A stand-in ncu on PATH's place: logs argv; --export writes the report; --import prints a page.
  fs::path fake_ncu() {
    const fs::path script = dir_.path() / "ncu";
    std::ofstream out(script);
    out << "#!/bin/sh\necho \"$@\" >> '" << (dir_.path() / "argv.log").string() << "'\n"
        << "page=''; export=''\nwhile [ $# -gt 0 ]; do case \"$1\" in --page) page=\"$2\"; shift "
           ";; --export) export=\"$2\"; shift ;; esac; shift; done\n"
        << "if [ -n \"$export\" ]; then : > \"$export.ncu-rep\"; exit 0; fi\n"
        << "if [ \"$page\" = details ]; then cat '" << details_.string() << "'; else cat '"
        << (dir_.path() / "raw.csv").string() << "'; fi\n";
    out.close();
    ::chmod(script.c_str(), 0755);
    std::ofstream(dir_.path() / "raw.csv")
        << raw_page({"dram__bytes_read.sum", "dram__bytes_write.sum"}, {"Gbyte", "Mbyte"},
                    {{kTiled, {"2.1", "4"}}, {kMerged, {"2.1", "4"}}});
    return script;
  }

  test_support::ScratchDir dir_;
  fs::path details_;
};

TEST_F(CountersCli, TextOutputNamesEachKernelsLimit) {
  const auto run = run_loupe({"counters", details_.string()});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(
      run.out.find("ncu: 2 launch(es) of 2 kernel configuration(s) from 1 file(s) (details page)"),
      std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("[warn] counters.tiled_v_decode.bound: tiled_v_decode block (128, 1, 1) "
                         "grid (64, 16, 1) is latency-bound"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("[info] counters.merged_v_decode.bound: merged_v_decode block (128, 1, 1) "
                         "grid (64, 16, 1) is DRAM-bound at 93.1 % of peak"),
            std::string::npos);
  EXPECT_NE(run.out.find("stats: counters_preamble_line = 2"), std::string::npos);
}

TEST_F(CountersCli, JsonEnvelope) {
  const auto run = run_loupe({"counters", details_.string(), "--kernel", "merged", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Json& envelope = run.envelope;
  EXPECT_EQ(envelope["kind"], "counters");
  EXPECT_EQ(envelope["verdict"], "none");
  EXPECT_EQ(envelope["data"]["kernels"].size(), 1u);
  EXPECT_EQ(envelope["data"]["kernels"][0]["name"], "merged_v_decode");
  EXPECT_EQ(envelope["findings"][0]["layer"], "counters");
  EXPECT_EQ(envelope["stats"]["counters_preamble_line"]["count"], 2);
  EXPECT_EQ(envelope["findings"][0]["reproduce"],
            "loupe counters " + details_.string() + " --kernel merged");
}

TEST_F(CountersCli, MalformedInputExitsTwoNamingFileLineAndColumn) {
  const fs::path bad = dir_.path() / "bad.csv";
  std::ofstream(bad) << kDetailsHeader << "\"0\",\"4242\",\"kda\"x\n";
  const auto run = run_loupe({"counters", bad.string()});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("loupe: " + bad.string() +
                         ":2:17: expected ',' or the end of the line after the closing quote"),
            std::string::npos)
      << run.err;
  const auto json = run_loupe({"counters", bad.string(), "--json"});
  EXPECT_EQ(json.exit_code, 2);
  EXPECT_EQ(json.envelope["error"]["code"], "input");
}

TEST_F(CountersCli, MissingFileExitsTwo) {
  const auto run = run_loupe({"counters", (dir_.path() / "none.csv").string()});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("none.csv: cannot open"), std::string::npos) << run.err;
}

TEST_F(CountersCli, CommandWithoutNcuExitsTwo) {
  ProcessSpec spec;
  spec.argv = {LOUPE_EXECUTABLE,    "counters", "--home", (dir_.path() / "home").string(), "--",
               "build/bin/kda_gpu", "--time",   "--quick"};
  spec.extra_env = {{"PATH", dir_.path().string()}, {"LOUPE_NCU", ""}};
  const auto run = run_cli(spec);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("loupe: ncu (Nsight Compute) is not on PATH, and LOUPE_NCU is not set"),
            std::string::npos)
      << run.err;
}

TEST_F(CountersCli, ReportWithoutNcuExitsTwo) {
  const fs::path report = dir_.path() / "r.ncu-rep";
  std::ofstream(report) << "binary";
  ProcessSpec spec;
  spec.argv = {LOUPE_EXECUTABLE, "counters", report.string()};
  spec.extra_env = {{"PATH", dir_.path().string()}, {"LOUPE_NCU", ""}};
  const auto run = run_cli(spec);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("ncu (Nsight Compute) is not on PATH"), std::string::npos) << run.err;
}

TEST_F(CountersCli, CommandRunsUnderNcuOnceAndReadsBothPages) {
  ProcessSpec spec;
  const fs::path home = dir_.path() / "home";
  spec.argv = {LOUPE_EXECUTABLE,    "counters", "--home",        home.string(),
               "--kernel",          "decode",   "--launch-skip", "2",
               "--launch-count",    "4",        "--json",        "--",
               "build/bin/kda_gpu", "--time",   "--quick"};
  spec.extra_env = {{"LOUPE_NCU", fake_ncu().string()}};
  const auto run = run_cli(spec);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.envelope["data"]["pages"]["raw"], true);
  EXPECT_EQ(run.envelope["data"]["launches"], 2);
  std::ifstream log(dir_.path() / "argv.log");
  std::string profile_line;
  std::getline(log, profile_line);
  EXPECT_NE(
      profile_line.find("--kernel-name regex:decode --launch-skip 2 --launch-count 4 --export " +
                        (home / "counters").string()),
      std::string::npos)
      << profile_line;
  EXPECT_NE(profile_line.find("--force-overwrite build/bin/kda_gpu --time --quick"),
            std::string::npos);
}

// Regression: without --launch-count ncu profiled every launch of kda_gpu and ran past 8 minutes.
TEST_F(CountersCli, CommandWithoutLaunchCountProfilesTheDefaultCap) {
  ProcessSpec spec;
  spec.argv = {LOUPE_EXECUTABLE, "counters", "--home",           (dir_.path() / "home").string(),
               "--json",         "--",       "build/bin/kda_gpu"};
  spec.extra_env = {{"LOUPE_NCU", fake_ncu().string()}};
  const auto run = run_cli(spec);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.envelope["data"]["launch_cap"],
            Json({{"count", 64}, {"default", true}, {"reached", false}}));
  std::ifstream log(dir_.path() / "argv.log");
  std::string profile_line;
  std::getline(log, profile_line);
  EXPECT_NE(profile_line.find("--launch-count 64 --export"), std::string::npos) << profile_line;
}

TEST_F(CountersCli, ReachedLaunchCapIsSaid) {
  ProcessSpec spec;
  spec.argv = {LOUPE_EXECUTABLE, "counters", "--home", (dir_.path() / "home").string(),
               "--launch-count", "2",        "--",     "build/bin/kda_gpu"};
  spec.extra_env = {{"LOUPE_NCU", fake_ncu().string()}};
  const auto run = run_cli(spec);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("(ncu profiled the first 2 matching launches; --launch-skip N "
                         "--launch-count N choose others)"),
            std::string::npos)
      << run.out;
}

TEST_F(CountersCli, LaunchFiltersWithoutACommandAreAUsageError) {
  const auto run = run_loupe({"counters", details_.string(), "--launch-count", "3"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("they need a command after --"), std::string::npos) << run.err;
}

TEST_F(CountersCli, DiffOneFileTwoKernels) {
  const auto run = run_loupe({"counters", "diff", details_.string(), "--kernel-a", "tiled",
                              "--kernel-b", "merged", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.envelope["kind"], "counters.diff");
  EXPECT_EQ(run.envelope["findings"][0]["id"], "counters.diff.time");
  const std::string claim = run.envelope["findings"][0]["claim"];
  EXPECT_EQ(claim.substr(0, 79),
            "tiled_v_decode (A) takes 1.13x the time per launch of merged_v_decode (B) (610 ");
  // The details page alone: instructions derived from IPC × cycles × SMs (0.90 vs 0.52 IPC).
  EXPECT_NE(claim.find("it executes 1.73x the instructions"), std::string::npos) << claim;
  EXPECT_EQ(run.envelope["data"]["rows"][0]["metric"], "duration_ns");
}

TEST_F(CountersCli, DiffThatMatchesTwoKernelsListsThem) {
  const auto run = run_loupe({"counters", "diff", details_.string(), "--kernel-b", "merged"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("A: 2 kernel configurations match; the input holds: tiled_v_decode block "
                         "(128, 1, 1) grid (64, 16, 1); merged_v_decode"),
            std::string::npos)
      << run.err;
}

TEST_F(CountersCli, RecordThenReportDrawsTheSpeedOfLightChart) {
  const fs::path home = dir_.path() / "home";
  const auto run =
      run_loupe({"counters", details_.string(), "--record", "--home", home.string(), "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string run_id = run.envelope["data"]["run"];
  const auto show = run_loupe({"ledger", "show", run_id, "--home", home.string(), "--json"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const fs::path html = dir_.path() / "report.html";
  const auto report =
      run_loupe({"report", run_id, "--home", home.string(), "--html", html.string()});
  ASSERT_EQ(report.exit_code, 0) << report.err;
  std::ifstream in(html);
  std::stringstream page;
  page << in.rdbuf();
  EXPECT_NE(page.str().find("<h2>Kernel speed of light</h2>"), std::string::npos);
  EXPECT_NE(
      page.str().find("merged_v_decode block (128, 1, 1) grid (64, 16, 1): DRAM 93.1 % of peak"),
      std::string::npos);
  EXPECT_EQ(page.str().find("gate layers are unknown"), std::string::npos);
}

TEST_F(CountersCli, AttachAddsToARecordedRun) {
  const fs::path home = dir_.path() / "home";
  const auto first = run_loupe({"counters", details_.string(), "--kernel", "tiled", "--record",
                                "--home", home.string(), "--json"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string run_id = first.envelope["data"]["run"];
  const size_t before = first.envelope["findings"].size();
  const auto second = run_loupe({"counters", details_.string(), "--kernel", "merged", "--attach",
                                 run_id, "--home", home.string(), "--json"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const auto show = run_loupe({"ledger", "show", run_id, "--home", home.string(), "--json"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_EQ(show.envelope["findings"].size(), before + second.envelope["findings"].size());
}

}  // namespace
}  // namespace loupe
