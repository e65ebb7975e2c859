#include "subject/guards.hpp"

#include <cstring>

namespace loupe::subject {
namespace {

// The poison bytes of one element (little-endian), `size` = dtype_size.
uint64_t poison_bits(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 0x7FC0DEADu;
    case DType::kF64:
      return 0x7FF8DEADDEADDEADull;
    case DType::kF16:
      return 0x7E5Au;
    case DType::kBF16:
      return 0x7FDAu;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return 0x7Fu;
    default:
      return ~uint64_t{0};
  }
}

}  // namespace

void fill_poison(Tensor& tensor) {
  const size_t element_size = dtype_size(tensor.dtype());
  const uint64_t bits = poison_bits(tensor.dtype());
  std::byte* data = tensor.mutable_bytes();
  const int64_t count = tensor.numel();
  for (int64_t index = 0; index < count; ++index) {
    std::memcpy(data + static_cast<size_t>(index) * element_size, &bits, element_size);
  }
}

int64_t count_poison(const Tensor& tensor) {
  const size_t element_size = dtype_size(tensor.dtype());
  const uint64_t bits = poison_bits(tensor.dtype());
  const std::byte* data = tensor.bytes();
  const int64_t count = tensor.numel();
  int64_t poisoned = 0;
  for (int64_t index = 0; index < count; ++index) {
    uint64_t element = 0;
    std::memcpy(&element, data + static_cast<size_t>(index) * element_size, element_size);
    const uint64_t mask =
        element_size >= 8 ? ~uint64_t{0} : ((uint64_t{1} << (8 * element_size)) - 1);
    if (element == (bits & mask)) ++poisoned;
  }
  return poisoned;
}

uint64_t checksum_bytes(const std::byte* data, size_t size) {
  constexpr uint64_t kPrime = 0x100000001B3ull;
  uint64_t hash = 0xCBF29CE484222325ull;
  size_t offset = 0;
  for (; offset + 8 <= size; offset += 8) {
    uint64_t word = 0;
    std::memcpy(&word, data + offset, 8);
    hash = (hash ^ word) * kPrime;
  }
  for (; offset < size; ++offset) {
    hash = (hash ^ static_cast<uint64_t>(data[offset])) * kPrime;
  }
  return hash ^ size;
}

bool ranges_overlap(const void* a, size_t a_size, const void* b, size_t b_size) {
  if (a == nullptr || b == nullptr || a_size == 0 || b_size == 0) return false;
  const auto a_begin = reinterpret_cast<uintptr_t>(a);
  const auto b_begin = reinterpret_cast<uintptr_t>(b);
  return a_begin < b_begin + b_size && b_begin < a_begin + a_size;
}

}  // namespace loupe::subject
