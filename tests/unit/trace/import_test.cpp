// load_traces: format detection, several files merged into one model, and the alignment report.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

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
  EXPECT_TRUE(model.one_clock);
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
  EXPECT_FALSE(model.one_clock);
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

// A trace read through a pipe (`loupe trace analyze /dev/stdin` fed by one): its bytes come once,
// so sniffing its head must not take them from the reader. Plain and gzip, through a FIFO fed by
// a thread; the model is the one the file gives.
TEST(Import, ATraceThroughAPipeGivesTheModelOfItsFile) {
  for (const std::string name : {"kineto_gpu_default/input.json", "gzip"}) {
    SCOPED_TRACE(name);
    const std::string file = name == "gzip"
                                 ? std::string(LOUPE_KINETO_FIXTURE_DIR) + "/ddp_nccl.json.gz"
                                 : (kGolden / name).string();
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 4096u);  // more than the head a sniff would read
    const fs::path fifo =
        fs::temp_directory_path() / ("loupe_import_fifo_" + std::to_string(::getpid()));
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::thread writer([&] { std::ofstream(fifo, std::ios::binary) << bytes; });
    Model piped;
    std::string error;
    try {
      piped = load_traces({fifo.string()});
    } catch (const Error& caught) {
      error = caught.message();
    }
    writer.join();
    fs::remove(fifo);
    EXPECT_EQ(error, "");
    const Model direct = load_traces({file});
    EXPECT_GT(direct.slices.size(), 0u);
    EXPECT_EQ(piped.slices.start_ns, direct.slices.start_ns);
    EXPECT_EQ(piped.slices.name, direct.slices.name);
    EXPECT_EQ(piped.flows.to_slice, direct.flows.to_slice);
    EXPECT_EQ(piped.tracks.size(), direct.tracks.size());
  }
}

}  // namespace
}  // namespace loupe::trace
