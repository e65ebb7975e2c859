// tests/support/scratch_dir.hpp — a fresh folder under the system temp dir, removed when it goes
// out of scope: "<temp>/loupe-<name>-<pid>".
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace loupe::test_support {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              ("loupe-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace loupe::test_support
