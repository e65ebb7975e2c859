// Issue 34: inputs that crashed, stalled or exhausted `loupe` — a pattern on a 200,000-character
// name, a pattern that backtracks exponentially, a gzip bomb (also under a memory limit), and
// their neighbours (nested quantifiers, a megabyte pattern, deep groups, a lying ISIZE, a
// truncated gzip, concatenated members). Every one exits 0, 1 or 2 with a message naming the
// input; none is killed by a signal. The inputs are generated here, small on disk.
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/process.hpp"

namespace loupe {
namespace {

namespace fs = std::filesystem;

std::string gzip(const std::string& text) {
  z_stream stream{};
  deflateInit2(&stream, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&stream, text.size()) + 64, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

std::string event(const std::string& name, int tid, int ts, int dur) {
  return R"({"ph":"X","pid":1,"tid":)" + std::to_string(tid) + R"(,"ts":)" + std::to_string(ts) +
         R"(,"dur":)" + std::to_string(dur) + R"(,"name":")" + name + R"("})";
}

class HostileInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ =
        new fs::path(fs::temp_directory_path() / ("loupe_hostile_" + std::to_string(::getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    const fs::path& dir = *dir_;
    write(dir / "long_name.json", R"({"traceEvents":[)" +
                                      event(std::string(200000, 'a'), 1, 0, 100) + "," +
                                      event("b", 1, 10, 20) + "," + event("c", 2, 0, 50) + "]}");
    write(dir / "short_name.json", R"({"traceEvents":[)" +
                                       event(std::string(29, 'a') + "!", 1, 0, 100) + "," +
                                       event("b", 1, 10, 20) + "]}");
    // The issue's bomb: 1.5 GiB of zeros as 1,536 concatenated members of 1 MiB (~1.6 MB).
    const std::string member = gzip(std::string(size_t{1} << 20, '\0'));
    std::string bomb;
    for (int index = 0; index < 1536; ++index) bomb += member;
    write(dir / "bomb.json.gz", bomb);
    // One member whose trailer claims 4 GiB (ISIZE) over a small document.
    std::string lying = gzip(R"({"traceEvents":[)" + event("k", 1, 0, 5) + "]}");
    const uint32_t claimed = 0xffffffffu;
    std::memcpy(lying.data() + lying.size() - 4, &claimed, 4);
    write(dir / "lying.json.gz", lying);
    const std::string whole =
        gzip(R"({"traceEvents":[)" + event("k", 1, 0, 5) + "," + event("m", 1, 10, 5) + "]}");
    write(dir / "truncated.json.gz", whole.substr(0, whole.size() / 2));
    write(dir / "members.json.gz", gzip(R"({"traceEvents":[)" + event("k", 1, 0, 5) + ",") +
                                       gzip(event("m", 1, 10, 5) + "]}"));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static void write(const fs::path& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }

  // Runs loupe (through `sh -c` with `ulimit -v KB` when a limit is given).
  static ProcessResult loupe(const std::vector<std::string>& args, uint64_t memory_kb = 0,
                             std::vector<std::pair<std::string, std::string>> env = {}) {
    ProcessSpec spec;
    spec.extra_env = std::move(env);
    if (memory_kb != 0) {
      std::string command = "ulimit -v " + std::to_string(memory_kb) + " && exec \"$0\"";
      for (size_t index = 0; index < args.size(); ++index) {
        command += " \"$" + std::to_string(index + 1) + "\"";
      }
      spec.argv = {"/bin/sh", "-c", command, LOUPE_EXECUTABLE};
      spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    } else {
      spec.argv = {LOUPE_EXECUTABLE};
      spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    }
    spec.working_dir = *dir_;
    spec.timeout = std::chrono::seconds(60);  // a hang detector, not a timing assertion
    return run_process(spec);
  }

  static fs::path* dir_;
};

fs::path* HostileInputTest::dir_ = nullptr;

// SIGSEGV (exit 139) before: std::regex recursed once per character of the name.
TEST_F(HostileInputTest, Issue34AlternationStarOnALongNameAnswers) {
  const ProcessResult result =
      loupe({"trace", "analyze", "long_name.json", "--class", "x=name:(a|b)*c", "--class",
             "y=name:b", "--overlap", "x,y", "--json"});
  EXPECT_EQ(result.exit_code, 0) << result.describe() << "\n" << result.stderr_text;
  EXPECT_NE(result.stdout_text.find(R"("verdict":"none")"), std::string::npos)
      << result.stdout_text.substr(0, 2000);
}

// 6.4 s of CPU at 29 characters before, doubling with each added one.
TEST_F(HostileInputTest, Issue34NestedPlusOnANameThatFailsAtTheEndAnswers) {
  const std::string deep = "x=name:" + std::string(100, '(') + "a" + std::string(100, ')') + "+$";
  for (const std::string& pattern :
       {std::string("x=name:^(a+)+$"), std::string("x=name:(x+x+)+y"),
        std::string("x=name:((a*)*|b)*c"), std::string("x=name:(a|aa)+$"),
        std::string("x=name:(.*a){20}"), deep}) {
    const ProcessResult result =
        loupe({"trace", "analyze", "short_name.json", "long_name.json", "--class", pattern,
               "--class", "y=name:b", "--overlap", "x,y"});
    EXPECT_EQ(result.exit_code, 0) << pattern.substr(0, 40) << ": " << result.describe() << "\n"
                                   << result.stderr_text;
  }
}

TEST_F(HostileInputTest, Issue34PatternsThatDoNotCompileExitTwoNamingThem) {
  // A command-line argument holds at most 128 KiB (MAX_ARG_STRLEN): the megabyte pattern is
  // tests/unit/mcp/hostile_test.cpp's, through MCP.
  const std::string deep = std::string(1000, '(') + "a" + std::string(1000, ')');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"x=name:(a)\\1", "name pattern '(a)\\1' is not a valid pattern: invalid escape sequence"},
      {"x=name:a(?=b)", "name pattern 'a(?=b)' is not a valid pattern: invalid perl operator"},
      {"x=name:" + std::string(100000, 'a'),
       "' (100000 characters) is not a valid pattern: longer than 4096 characters"},
      {"x=name:[a-z]{600}", "name pattern '[a-z]{600}' is not a valid pattern: it compiles to "},
      {"x=name:" + deep, "instructions, more than 512 (matching costs up to name length"}};
  for (const auto& [selector, expected] : cases) {
    const ProcessResult result =
        loupe({"trace", "analyze", "short_name.json", "--class", selector});
    EXPECT_EQ(result.exit_code, 2) << result.describe();
    EXPECT_NE(result.stderr_text.find(expected), std::string::npos) << result.stderr_text;
  }
}

TEST_F(HostileInputTest, Issue34GzipBombExitsTwoNamingTheFileTheCapAndTheFlag) {
  const ProcessResult result = loupe({"trace", "analyze", "bomb.json.gz"});
  EXPECT_EQ(result.exit_code, 2) << result.describe();
  EXPECT_NE(result.stderr_text.find("bomb.json.gz: inflates past the ratio cap (50 times its "
                                    "compressed size of "),
            std::string::npos)
      << result.stderr_text;
  EXPECT_NE(result.stderr_text.find("--max-inflate-ratio N"), std::string::npos)
      << result.stderr_text;
}

TEST_F(HostileInputTest, Issue34AbsoluteCapFromTheFlagAndTheEnvironment) {
  const ProcessResult flag = loupe({"trace", "analyze", "bomb.json.gz", "--max-inflate-ratio",
                                    "100000", "--max-inflated", "96M"});
  EXPECT_EQ(flag.exit_code, 2) << flag.describe();
  EXPECT_NE(flag.stderr_text.find("bomb.json.gz: inflates past the absolute cap of 96 MiB"),
            std::string::npos)
      << flag.stderr_text;
  const ProcessResult bad = loupe({"trace", "analyze", "bomb.json.gz", "--max-inflated", "lots"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.stderr_text.find("--max-inflated 'lots': expected a size in bytes such as 512M"),
            std::string::npos)
      << bad.stderr_text;
}

// The environment sets the caps too, and `ledger import` (read whole) is held to the absolute one.
TEST_F(HostileInputTest, Issue34CapsFromTheEnvironmentHoldForLedgerImports) {
  write(*dir_ / "export.json", "{\"loupe_export\": " + std::string(4096, ' ') + "1}");
  const ProcessResult result = loupe({"ledger", "import", "export.json", "--home", "ledger_home"},
                                     0, {{"LOUPE_MAX_INFLATED", "1K"}});
  EXPECT_EQ(result.exit_code, 2) << result.describe();
  EXPECT_NE(result.stderr_text.find("export.json: 4115 bytes, past the absolute cap of 1024 bytes "
                                    "on input read whole"),
            std::string::npos)
      << result.stderr_text;
  EXPECT_FALSE(fs::exists(*dir_ / "ledger_home"));
  const ProcessResult bad =
      loupe({"trace", "analyze", "bomb.json.gz"}, 0, {{"LOUPE_MAX_INFLATE_RATIO", "many"}});
  EXPECT_EQ(bad.exit_code, 2) << bad.describe();
  EXPECT_NE(bad.stderr_text.find("LOUPE_MAX_INFLATE_RATIO: expected a positive integer ratio such "
                                 "as 100, found 'many'"),
            std::string::npos)
      << bad.stderr_text;
}

// Under a memory limit the bomb's allowance (raised past what the limit holds) ends in an
// allocation failure: exit 2 naming the input, not exit 3 "internal error: std::bad_alloc".
TEST_F(HostileInputTest, Issue34AllocationFailureExitsTwoNamingTheInput) {
  const ProcessResult result =
      loupe({"trace", "analyze", "bomb.json.gz", "--max-inflate-ratio", "100000"}, 1024 * 1024);
  EXPECT_EQ(result.exit_code, 2) << result.describe() << "\n" << result.stderr_text;
  EXPECT_NE(result.stderr_text.find("trace file 'bomb.json.gz' needs more memory than the process "
                                    "could allocate"),
            std::string::npos)
      << result.stderr_text;
}

TEST_F(HostileInputTest, Issue34LyingTruncatedAndConcatenatedGzip) {
  const ProcessResult lying = loupe({"trace", "analyze", "lying.json.gz"});
  EXPECT_EQ(lying.exit_code, 2) << lying.describe();
  EXPECT_NE(lying.stderr_text.find("lying.json.gz: corrupt gzip data at compressed byte "),
            std::string::npos)
      << lying.stderr_text;
  // Truncated gzip keeps what inflated; the JSON importer repairs the cut and counts it.
  const ProcessResult truncated = loupe({"trace", "analyze", "truncated.json.gz"});
  EXPECT_EQ(truncated.exit_code, 0) << truncated.describe();
  EXPECT_NE((truncated.stdout_text + truncated.stderr_text).find("trace_json_truncated = 1"),
            std::string::npos)
      << truncated.stdout_text << truncated.stderr_text;
  const ProcessResult members = loupe({"trace", "analyze", "members.json.gz", "--json"});
  EXPECT_EQ(members.exit_code, 0) << members.describe() << members.stderr_text;
}

}  // namespace
}  // namespace loupe
