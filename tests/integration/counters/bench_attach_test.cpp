// A bench's counters pass end to end (docs/counters.md, "Bench attachment"): `loupe probe run
// BENCH --counters REGEX` with a stand-in ncu (this machine has no GPU and no ncu) that logs its
// argv, RUNS the subject command it was given (the untimed pass) and prints hand-made pages.
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

const std::string kMerged = "void kda::cuda::merged_v_decode<128>(const float *, float *, int)";

Json read_json(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return Json::parse(text.str());
}

std::vector<std::string> lines_of(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

class BenchAttach : public ::testing::Test {
 protected:
  BenchAttach() : dir_("bench-attach") {}

  // DRAM bytes per launch on the raw page, as ncu prints them.
  fs::path fake_ncu(const std::string& read_kbytes, const std::string& write_bytes) {
    std::ofstream(dir_.path() / "details.csv")
        << kDetailsHeader << launch_rows(0, kMerged) << launch_rows(1, kMerged)
        << launch_rows(2, kMerged);
    std::ofstream(dir_.path() / "raw.csv")
        << raw_page({"dram__bytes_read.sum", "dram__bytes_write.sum"}, {"Kbyte", "byte"},
                    {{kMerged, {read_kbytes, write_bytes}},
                     {kMerged, {read_kbytes, write_bytes}},
                     {kMerged, {read_kbytes, write_bytes}}});
    const fs::path script = dir_.path() / "ncu";
    const std::string log = (dir_.path() / "argv.log").string();
    std::ofstream out(script);
    out << "#!/bin/sh\necho \"$@\" >> '" << log << "'\n"
        << "page=''; export=''\n"
        << "while [ $# -gt 0 ]; do case \"$1\" in --page) page=\"$2\"; shift ;;"
        << " --export) export=\"$2\"; shift ;; --force-overwrite) shift; break ;; esac; shift; "
           "done\n"
        << "if [ -n \"$export\" ]; then \"$@\" > '" << (dir_.path() / "pass.out").string()
        << "'; echo \"pass exit $?\" >> '" << log << "'; : > \"$export.ncu-rep\"; exit 0; fi\n"
        << "if [ \"$page\" = details ]; then cat '" << (dir_.path() / "details.csv").string()
        << "'; else cat '" << (dir_.path() / "raw.csv").string() << "'; fi\n";
    out.close();
    ::chmod(script.c_str(), 0755);
    return script;
  }

  test_support::CliRun probe_run(const std::string& ncu, std::vector<std::string> extra,
                                 const std::string& probe = "squares") {
    ProcessSpec spec;
    spec.argv = {LOUPE_EXECUTABLE, "probe",     "run",    probe,
                 "--set",          "size=4096", "--seed", "3",
                 "--budget",       "0.3",       "--home", (dir_.path() / "home").string(),
                 "--json"};
    spec.argv.insert(spec.argv.end(), extra.begin(), extra.end());
    spec.argv.insert(spec.argv.end(), {"--", BENCH_SUBJECT});
    spec.extra_env = {{"LOUPE_NCU", ncu}};
    spec.timeout = std::chrono::seconds(120);
    return run_cli(spec);
  }

  static const Json* finding(const Json& envelope, const std::string& id) {
    for (const auto& item : envelope.at("findings")) {
      if (item.at("id") == id) return &item;
    }
    return nullptr;
  }

  test_support::ScratchDir dir_;
};

TEST_F(BenchAttach, CountersPassRunsUnderNcuAfterTheVerdictAndAddsTheClause) {
  const fs::path ncu = fake_ncu("16.384", "0");
  const auto run = probe_run(ncu.string(), {"--counters", "merged", "--counters-launches", "3"});
  ASSERT_EQ(run.exit_code, 0) << run.err << run.out;
  const fs::path point =
      fs::path(run.envelope["data"]["observation"].get<std::string>()).parent_path();

  // ncu profiled one process: the subject's counters pass, with the kernel filter and the count.
  const auto log = lines_of(dir_.path() / "argv.log");
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[0],
            "--section SpeedOfLight --section MemoryWorkloadAnalysis --section "
            "ComputeWorkloadAnalysis --section Occupancy --section LaunchStats --section "
            "WarpStateStats --metrics "
            "dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum,"
            "smsp__inst_executed_op_global_ld.sum,smsp__inst_executed_op_global_st.sum,"
            "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,"
            "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,gpu__time_duration.sum "
            "--kernel-name regex:merged --launch-count 3 --export " +
                (point / "counters" / "report").string() + " --force-overwrite " + BENCH_SUBJECT +
                " run squares --set size=4096 --seed 3 --counters-pass 3 --counters-variant "
                "double --out " +
                (point / "counters" / "pass").string() + " --json");
  EXPECT_EQ(log[1], "pass exit 0");
  EXPECT_EQ(log[2], "--import " + (point / "counters" / "report.ncu-rep").string() +
                        " --csv --page details");
  EXPECT_EQ(log[3],
            "--import " + (point / "counters" / "report.ncu-rep").string() + " --csv --page raw");

  // The pass timed nothing and wrote no samples; the timed run was not the profiled one.
  const Json pass = read_json(point / "counters" / "pass" / "observation.json");
  EXPECT_EQ(pass["bench"]["counters_pass"], Json({{"calls", 3}, {"variants", {"double"}}}));
  EXPECT_EQ(pass["bench"]["samples_file"], "");
  EXPECT_EQ(pass["bench"]["stop_reason"], "counters_pass");
  EXPECT_EQ(pass["bench"]["sampling_s"], 0.0);
  EXPECT_EQ(pass["files"], Json::array());
  EXPECT_FALSE(fs::exists(point / "counters" / "pass" / "samples.json"));
  const Json timed = read_json(point / "observation.json");
  EXPECT_FALSE(timed["bench"].contains("counters_pass"));
  for (const auto& arg : timed["argv"]) EXPECT_NE(arg, "--counters-pass");
  EXPECT_GE(timed["bench"]["variants"].size(), 2u);
  EXPECT_TRUE(fs::exists(point / "samples.json"));

  // The comparison of double with base gains the clause; the kernel's findings join the point.
  const Json* comparison = nullptr;
  for (const char* verdict : {"slower", "faster", "same", "ambiguous"}) {
    if (!comparison) comparison = finding(run.envelope, std::string("bench.squares.") + verdict);
  }
  ASSERT_NE(comparison, nullptr) << run.out;
  const std::string claim = (*comparison)["claim"];
  const std::string clause =
      ((*comparison)["id"] == "bench.squares.faster" ? std::string(", and now ")
                                                     : std::string("; double is ")) +
      "DRAM-bound at 93.1 % of peak (merged_v_decode, ncu): little left to gain";
  ASSERT_GE(claim.size(), clause.size());
  EXPECT_EQ(claim.substr(claim.size() - clause.size()), clause);
  ASSERT_NE(finding(run.envelope, "counters.merged_v_decode.bound"), nullptr);
  EXPECT_EQ(finding(run.envelope, "bench.squares.guard.bytes_ratio"), nullptr);
  EXPECT_EQ(run.envelope["data"]["counters"]["measured_dram_bytes_per_call"], 16384.0);
  EXPECT_EQ(run.envelope["data"]["counters"]["bytes_ratio"], 1.0);
  // The observation keeps them too.
  bool recorded = false;
  for (const auto& item : timed["findings"]) recorded = recorded || item["claim"] == claim;
  EXPECT_TRUE(recorded);
}

TEST_F(BenchAttach, MeasuredBytesFarFromTheDeclaredWarn) {
  const fs::path ncu = fake_ncu("40.96", "0");
  const auto run = probe_run(ncu.string(), {"--counters", "merged"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Json* warn = finding(run.envelope, "bench.squares.guard.bytes_ratio");
  ASSERT_NE(warn, nullptr) << run.out;
  EXPECT_EQ((*warn)["severity"], "warn");
  EXPECT_EQ((*warn)["claim"],
            "variant double declares 16384 bytes per call but its kernels moved 40960 DRAM bytes "
            "per call (ncu): 2.5x the declared, beyond the ±25 % tolerance");
  EXPECT_NE(lines_of(dir_.path() / "argv.log")[0].find("--launch-count 1 --export"),
            std::string::npos);
}

TEST_F(BenchAttach, RefusedBeforeAnythingRuns) {
  const fs::path ncu = fake_ncu("16.384", "0");
  const auto scenario = probe_run(ncu.string(), {"--counters", "merged"}, "pipeline");
  EXPECT_EQ(scenario.exit_code, 2);
  EXPECT_NE(scenario.envelope["error"]["message"].get<std::string>().find(
                "--counters: probe 'pipeline' is not a bench; expected a bench"),
            std::string::npos)
      << scenario.out;
  const auto launches =
      probe_run(ncu.string(), {"--counters", "merged", "--counters-launches", "0"});
  EXPECT_EQ(launches.exit_code, 2);
  EXPECT_NE(launches.envelope["error"]["message"].get<std::string>().find(
                "--counters-launches 0: expected a count of calls from 1 to 10000"),
            std::string::npos)
      << launches.out;
  const auto regex = probe_run(ncu.string(), {"--counters", "merged("});
  EXPECT_EQ(regex.exit_code, 2);
  EXPECT_NE(regex.envelope["error"]["message"].get<std::string>().find(
                "--counters 'merged(' is not a valid pattern: missing ): merged("),
            std::string::npos)
      << regex.out;
  const auto no_ncu = probe_run("", {"--counters", "merged"});
  EXPECT_EQ(no_ncu.exit_code, 2);
  EXPECT_EQ(no_ncu.envelope["error"]["message"],
            "ncu (Nsight Compute) is not on PATH, and LOUPE_NCU is not set");
  EXPECT_FALSE(fs::exists(dir_.path() / "argv.log"));  // ncu never ran
}

TEST_F(BenchAttach, SubjectRefusesABadCountersPass) {
  const std::string out = (dir_.path() / "out").string();
  const auto zero =
      run_cli({BENCH_SUBJECT, "run", "squares", "--counters-pass", "0", "--out", out});
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.err.find("--counters-pass 0: expected a count of calls from 1 to 10000"),
            std::string::npos)
      << zero.err;
  const auto variant = run_cli({BENCH_SUBJECT, "run", "squares", "--counters-pass", "2",
                                "--counters-variant", "triple", "--out", out});
  EXPECT_EQ(variant.exit_code, 2);
  EXPECT_NE(variant.err.find("--counters-variant 'triple': bench 'squares' has no such variant; "
                             "the variants are: base, double"),
            std::string::npos)
      << variant.err;
  const auto alone =
      run_cli({BENCH_SUBJECT, "run", "squares", "--counters-variant", "base", "--out", out});
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("--counters-variant needs --counters-pass N"), std::string::npos);
}

}  // namespace
}  // namespace loupe
