// core/mapped_file.hpp — a read-only memory mapping of a whole file.
//
// Readers of tensor files map the file once, parse it in place, and either copy what they need
// (small files, byte-swapped or transposed data) or hand out views that keep the mapping alive
// through a shared_ptr (large native files). The mapping is private and read-only; a file that
// another process truncates while mapped raises SIGBUS on access, as with any mmap.
// Thread-safety: immutable after open(); share freely.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>

namespace loupe {

class MappedFile {
 public:
  // Throws Error(kInput) naming the path when it cannot be opened, is not a regular file, or
  // cannot be mapped. An empty file maps to data() == nullptr, size() == 0.
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile(const std::byte* data, size_t size) : data_(data), size_(size) {}

  const std::byte* data_;
  size_t size_;
};

}  // namespace loupe
