#include "core/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "loupe/error.hpp"

namespace loupe {

namespace {

// Closes the descriptor on every path out of open(); the mapping does not need it.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::filesystem::path& path) {
  const std::string name = path.string();
  FileDescriptor fd(::open(name.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int error = errno;
    throw Error(
        ErrorCode::kInput, name + ": cannot open: " + std::strerror(error),
        error == ENOENT ? "check the path; it is read relative to the current directory" : "");
  }
  struct stat status {};
  if (::fstat(fd.get(), &status) != 0) {
    throw Error(ErrorCode::kInput, name + ": cannot stat: " + std::strerror(errno));
  }
  if (!S_ISREG(status.st_mode)) {
    throw Error(ErrorCode::kInput, name + ": not a regular file (expected a tensor file)");
  }
  const size_t size = static_cast<size_t>(status.st_size);
  if (size == 0) return std::shared_ptr<const MappedFile>(new MappedFile(nullptr, 0));
  void* address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (address == MAP_FAILED) {
    throw Error(ErrorCode::kInput,
                name + ": cannot map " + std::to_string(size) + " bytes: " + std::strerror(errno));
  }
  return std::shared_ptr<const MappedFile>(
      new MappedFile(static_cast<const std::byte*>(address), size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace loupe
