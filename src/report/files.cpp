// Where a run's report lives, and writing it.
#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/home.hpp"
#include "report/model.hpp"

namespace loupe::report {

std::filesystem::path report_file(const std::filesystem::path& home, const std::string& run_id) {
  return run_dir(home, run_id) / "report.html";
}

void write_text_file(const std::filesystem::path& file, const std::string& text) {
  std::filesystem::path temporary = file;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) {
      throw Error(ErrorCode::kInput,
                  "cannot write the report to " + file.string() + ": " + std::strerror(errno),
                  "check that the folder exists and is writable");
    }
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) {
      throw Error(ErrorCode::kInput, "cannot write the report to " + file.string() +
                                         ": the write failed after " + std::to_string(text.size()) +
                                         " bytes were asked for");
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, file, error);
  if (error) {
    std::filesystem::remove(temporary, error);
    throw Error(ErrorCode::kInput,
                "cannot write the report to " + file.string() + ": " + error.message());
  }
}

}  // namespace loupe::report
