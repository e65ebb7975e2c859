// fuzz/fuzz_input.hpp — hands a fuzzer's bytes to readers that take a path.
//
// The tensor readers open files (and memory-map large ones), so each input is written to an
// anonymous in-memory file (memfd) and read back through /proc/self/fd/N: the readers run the
// same code as on disk and nothing is left behind when a target crashes.
// Thread-safety: one ScratchFile per thread.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace loupe::fuzz {

class ScratchFile {
 public:
  ScratchFile(const uint8_t* data, size_t size) {
    descriptor_ = ::memfd_create("loupe_fuzz_input", 0);
    if (descriptor_ < 0) std::abort();  // the harness cannot run at all: not a finding
    size_t written = 0;
    while (written < size) {
      const ssize_t got = ::write(descriptor_, data + written, size - written);
      if (got <= 0) std::abort();
      written += static_cast<size_t>(got);
    }
    path_ = "/proc/self/fd/" + std::to_string(descriptor_);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  ~ScratchFile() { ::close(descriptor_); }

  const std::string& path() const { return path_; }

 private:
  int descriptor_ = -1;
  std::string path_;
};

}  // namespace loupe::fuzz
