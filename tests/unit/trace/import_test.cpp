// load_traces: format detection, several files merged into one model, and the alignment report.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "loupe/error.hpp"
#include "trace/import/import.hpp"

namespace loupe::trace {
namespace {

namespace fs = std::filesystem;
const fs::path kGolden = LOUPE_TRACE_GOLDEN_DIR;

TEST(Import, FilesOfOneClockDomainMergeUnshifted) {
  const std::string binary = (kGolden / "locks_binary" / "input.loupetrace").string();
  const Model model = load_traces({binary, binary});
  ASSERT_EQ(model.files.size(), 2u);
  EXPECT_EQ(model.alignment, "2 files share the clock domain 'monotonic'; merged without shifting");
  EXPECT_EQ(model.slices.size(), 8u);
  // Each file keeps its own tracks (file index is part of the track key).
  EXPECT_EQ(model.tracks.size(), 6u);
  EXPECT_EQ(model.start_ns, 1000);
}

TEST(Import, FilesOfDifferentDomainsAreReportedUnaligned) {
  const Model model = load_traces({(kGolden / "locks_binary" / "input.loupetrace").string(),
                                   (kGolden / "diff_chrome" / "a.json").string()});
  EXPECT_EQ(model.alignment,
            "not aligned: the files' clock domains differ or are unknown (monotonic, unknown); "
            "timestamps used as written");
  EXPECT_EQ(model.files[1].format, "chrome-json");
}

TEST(Import, UnknownContentAndMissingFilesAreInputErrors) {
  const fs::path path =
      fs::temp_directory_path() / ("loupe_import_test_" + std::to_string(::getpid()));
  std::ofstream(path) << "hello";
  try {
    load_traces({path.string()});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_NE(error.message().find("neither a loupe binary trace"), std::string::npos);
  }
  std::ofstream(path, std::ios::binary) << std::string("\x1f\x8b\x08\x00garbage", 11);
  EXPECT_THROW(load_traces({path.string()}), Error);
  fs::remove(path);
  EXPECT_THROW(load_traces({"/nonexistent/trace.json"}), Error);
  EXPECT_THROW(load_traces({}), Error);
}

}  // namespace
}  // namespace loupe::trace
