// Running ncu (src/counters/ncu.hpp): the command lines loupe builds, the error when there is no
// ncu, and the whole profile → import path through a stand-in ncu (a shell script that logs its
// argv and prints HAND-MADE pages): this machine has no GPU and no ncu.
#include "counters/ncu.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "loupe/error.hpp"
#include "support/scratch_dir.hpp"
#include "unit/counters/samples.hpp"

namespace loupe::counters {
namespace {

namespace fs = std::filesystem;

class EnvGuard {
 public:
  EnvGuard(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~EnvGuard() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(NcuArgv, CuratedSectionsFiltersAndExport) {
  ProfileRequest request;
  request.command = {"build/bin/kda_gpu", "--time", "--quick"};
  request.kernel_regex = "decode";
  request.launch_skip = 3;
  request.launch_count = 5;
  request.sets = {"full"};
  request.report = "/tmp/h/counters/r1";
  EXPECT_EQ(profile_argv("/usr/local/cuda/bin/ncu", request),
            (std::vector<std::string>{
                "/usr/local/cuda/bin/ncu",
                "--section",
                "SpeedOfLight",
                "--section",
                "MemoryWorkloadAnalysis",
                "--section",
                "ComputeWorkloadAnalysis",
                "--section",
                "Occupancy",
                "--section",
                "LaunchStats",
                "--section",
                "WarpStateStats",
                "--metrics",
                "dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum,"
                "smsp__inst_executed_op_global_ld.sum,smsp__inst_executed_op_global_st.sum,"
                "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,"
                "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,gpu__time_duration.sum",
                "--set",
                "full",
                "--kernel-name",
                "regex:decode",
                "--launch-skip",
                "3",
                "--launch-count",
                "5",
                "--export",
                "/tmp/h/counters/r1",
                "--force-overwrite",
                "build/bin/kda_gpu",
                "--time",
                "--quick"}));
  ProfileRequest plain;
  plain.command = {"./a.out"};
  plain.report = "r";
  EXPECT_EQ(profile_argv("ncu", plain).size(), 1u + 12u + 2u + 3u + 1u);
  EXPECT_EQ(import_argv("ncu", "r.ncu-rep", "raw"),
            (std::vector<std::string>{"ncu", "--import", "r.ncu-rep", "--csv", "--page", "raw"}));
}

TEST(FindNcu, AbsentIsAUsageErrorSayingWhatToDo) {
  test_support::ScratchDir dir("counters-no-ncu");
  EnvGuard path("PATH", dir.path().string());
  EnvGuard configured("LOUPE_NCU", "");
  try {
    find_ncu();
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(), "ncu (Nsight Compute) is not on PATH, and LOUPE_NCU is not set");
    EXPECT_NE(error.hint().find("loupe counters FILE.csv"), std::string::npos);
  }
}

TEST(FindNcu, ConfiguredPathMustBeExecutable) {
  EnvGuard configured("LOUPE_NCU", "/nonexistent/ncu");
  try {
    find_ncu();
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.message(), "LOUPE_NCU=/nonexistent/ncu is not an executable file");
  }
}

// A stand-in ncu: logs its argv; with --export it writes the report file, with --import it prints
// the page named after --page.
fs::path write_fake_ncu(const fs::path& dir) {
  const fs::path script = dir / "ncu";
  std::ofstream out(script);
  out << "#!/bin/sh\n"
         "echo \"$@\" >> \""
      << (dir / "argv.log").string()
      << "\"\n"
         "page=''; export=''; import=''\n"
         "while [ $# -gt 0 ]; do\n"
         "  case \"$1\" in\n"
         "    --page) page=\"$2\"; shift ;;\n"
         "    --export) export=\"$2\"; shift ;;\n"
         "    --import) import=\"$2\"; shift ;;\n"
         "  esac; shift\n"
         "done\n"
         "if [ -n \"$export\" ]; then echo '==PROF== Disconnected'; : > \"$export.ncu-rep\"; "
         "exit 0; fi\n"
         "cat \""
      << dir.string() << "/$page.csv\"\n";
  out.close();
  ::chmod(script.c_str(), 0755);
  std::ofstream(dir / "details.csv")
      << samples::kDetailsHeader << samples::launch_rows(0, "merged_v_decode(int)");
  std::ofstream(dir / "raw.csv") << samples::raw_page({"dram__bytes_read.sum"}, {"Gbyte"},
                                                      {{"merged_v_decode(int)", {"2.1"}}});
  return script;
}

TEST(ProfileCommand, ProfilesOnceThenImportsBothPages) {
  test_support::ScratchDir dir("counters-fake-ncu");
  const fs::path ncu = write_fake_ncu(dir.path());
  ProfileRequest request;
  request.command = {"./decode", "--quick"};
  request.kernel_regex = "merged";
  request.report = dir.path() / "home" / "counters" / "r1";
  const fs::path report = profile_command(ncu, request);
  EXPECT_EQ(report, dir.path() / "home" / "counters" / "r1.ncu-rep");
  const Pages pages = import_report(ncu, report);
  EXPECT_EQ(pages.details.substr(0, 6), "\"ID\",\"");
  EXPECT_NE(pages.raw.find("dram__bytes_read.sum"), std::string::npos);
  std::ifstream log(dir.path() / "argv.log");
  std::stringstream lines;
  lines << log.rdbuf();
  const std::string r = request.report.string();
  std::string metrics;
  for (std::string_view metric : kExtraMetrics)
    metrics += (metrics.empty() ? "" : ",") + std::string(metric);
  EXPECT_EQ(lines.str(),
            "--section SpeedOfLight --section MemoryWorkloadAnalysis --section "
            "ComputeWorkloadAnalysis --section Occupancy --section LaunchStats --section "
            "WarpStateStats --metrics " +
                metrics + " --kernel-name regex:merged --export " + r +
                " --force-overwrite ./decode --quick\n--import " + r +
                ".ncu-rep --csv --page details\n--import " + r + ".ncu-rep --csv --page raw\n");
}

TEST(ProfileCommand, NcuFailureIsASubjectErrorQuotingNcu) {
  test_support::ScratchDir dir("counters-failing-ncu");
  const fs::path script = dir.path() / "ncu";
  std::ofstream(script) << "#!/bin/sh\necho '==ERROR== ERR_NVGPUCTRPERM - no permission'\nexit 1\n";
  ::chmod(script.c_str(), 0755);
  ProfileRequest request;
  request.command = {"./decode"};
  request.report = dir.path() / "r";
  try {
    profile_command(script, request);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kSubject);
    EXPECT_EQ(error.message(),
              "profiling ./decode: ncu exited with status 1; it said:\n==ERROR== "
              "ERR_NVGPUCTRPERM - no permission\n");
  }
}

TEST(ProfileCommand, NoReportWrittenIsAnError) {
  test_support::ScratchDir dir("counters-silent-ncu");
  const fs::path script = dir.path() / "ncu";
  std::ofstream(script) << "#!/bin/sh\nexit 0\n";
  ::chmod(script.c_str(), 0755);
  ProfileRequest request;
  request.command = {"./decode"};
  request.report = dir.path() / "r";
  try {
    profile_command(script, request);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kSubject);
    EXPECT_NE(error.message().find("wrote no report"), std::string::npos);
  }
}

}  // namespace
}  // namespace loupe::counters
