// Serialised tensors and futex waits for the bench channel (see bench_channel.hpp).
#include "subject/bench_channel.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <ctime>

#include "loupe/error.hpp"

namespace loupe::subject {
namespace {

class Writer {
 public:
  Writer(std::byte* area, size_t capacity) : area_(area), capacity_(capacity) {}
  void bytes(const void* data, size_t size) {
    if (used_ + size > capacity_) {
      throw Error(ErrorCode::kSubject, "a bench's outputs need more than " +
                                           std::to_string(capacity_) +
                                           " bytes, the most a variant's child can hand back");
    }
    std::memcpy(area_ + used_, data, size);
    used_ += size;
  }
  template <class T>
  void value(T item) {
    bytes(&item, sizeof item);
  }
  size_t used() const { return used_; }

 private:
  std::byte* area_;
  size_t capacity_;
  size_t used_ = 0;
};

class Reader {
 public:
  Reader(const std::byte* area, size_t size) : area_(area), size_(size) {}
  void bytes(void* data, size_t size) {
    if (used_ + size > size_) {
      throw Error(ErrorCode::kSubject, "a variant's child handed back truncated outputs");
    }
    std::memcpy(data, area_ + used_, size);
    used_ += size;
  }
  template <class T>
  T value() {
    T item{};
    bytes(&item, sizeof item);
    return item;
  }

 private:
  const std::byte* area_;
  size_t size_;
  size_t used_ = 0;
};

}  // namespace

size_t write_tensors(const std::vector<NamedTensor>& tensors, std::byte* area, size_t capacity) {
  Writer writer(area, capacity);
  writer.value<uint64_t>(tensors.size());
  for (const auto& named : tensors) {
    writer.value<uint64_t>(named.name.size());
    writer.bytes(named.name.data(), named.name.size());
    writer.value<uint32_t>(static_cast<uint32_t>(named.tensor.dtype()));
    writer.value<uint64_t>(named.tensor.shape().size());
    for (int64_t extent : named.tensor.shape()) writer.value<int64_t>(extent);
    writer.value<uint64_t>(named.tensor.nbytes());
    writer.bytes(named.tensor.bytes(), named.tensor.nbytes());
  }
  return writer.used();
}

std::vector<NamedTensor> read_tensors(const std::byte* area, size_t size) {
  Reader reader(area, size);
  std::vector<NamedTensor> tensors;
  const auto count = reader.value<uint64_t>();
  if (count > 4096) throw Error(ErrorCode::kSubject, "a variant's child handed back garbage");
  for (uint64_t index = 0; index < count; ++index) {
    std::string name(reader.value<uint64_t>() & 0xFFFF, '\0');
    reader.bytes(name.data(), name.size());
    const auto dtype = static_cast<DType>(reader.value<uint32_t>());
    std::vector<int64_t> shape(reader.value<uint64_t>() & 0xFF);
    for (auto& extent : shape) extent = reader.value<int64_t>();
    Tensor tensor(dtype, shape);
    if (reader.value<uint64_t>() != tensor.nbytes()) {
      throw Error(ErrorCode::kSubject, "a variant's child handed back output '" + name +
                                           "' whose size does not match its shape");
    }
    reader.bytes(tensor.mutable_bytes(), tensor.nbytes());
    tensors.push_back({std::move(name), std::move(tensor)});
  }
  return tensors;
}

void futex_wait(std::atomic<uint32_t>& word, uint32_t value, double timeout_s) {
  timespec timeout{};
  timespec* limit = nullptr;
  if (timeout_s > 0) {
    timeout.tv_sec = static_cast<time_t>(timeout_s);
    timeout.tv_nsec = static_cast<long>((timeout_s - std::floor(timeout_s)) * 1e9);
    limit = &timeout;
  }
  // Not FUTEX_PRIVATE: the word lives in a mapping shared between processes.
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, value, limit, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

}  // namespace loupe::subject
