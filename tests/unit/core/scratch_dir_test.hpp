// A test fixture with a fresh scratch directory per test, removed afterwards, and byte-level file
// helpers: what the tensor-format tests need to build well-formed and broken files by hand.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace loupe {

class ScratchDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    directory_ = std::filesystem::temp_directory_path() /
                 ("loupe_" + std::string(info->test_suite_name()) + "_" +
                  std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::remove_all(directory_);
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::filesystem::path path(const std::string& name) const { return directory_ / name; }

  std::filesystem::path write_bytes(const std::string& name, const std::string& bytes) const {
    // Removing first avoids rewriting through O_TRUNC, which ext4 flushes to disk on close.
    std::filesystem::remove(path(name));
    std::ofstream(path(name), std::ios::binary).write(bytes.data(), bytes.size());
    return path(name);
  }

  std::string read_bytes(const std::filesystem::path& file) const {
    std::ifstream stream(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(stream), {});
  }

 private:
  std::filesystem::path directory_;
};

}  // namespace loupe
