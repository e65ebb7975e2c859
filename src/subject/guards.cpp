#include "subject/guards.hpp"

#include <cstring>

namespace loupe::subject {
namespace {

uint64_t mix(uint64_t value) {
  value += 0x9E3779B97F4A7C15ull;
  value = (value ^ (value >> 30)) * 0xBF58476D1CE4E5B9ull;
  value = (value ^ (value >> 27)) * 0x94D049BB133111EBull;
  return value ^ (value >> 31);
}

// The poison of element `index` (little-endian, dtype_size bytes used).
uint64_t poison_bits(DType dtype, uint64_t key, int64_t index) {
  const uint64_t random = mix(key ^ mix(static_cast<uint64_t>(index)));
  const uint64_t sign = random >> 63;
  // A payload of zero would be the default NaN that 0/0 produces: never use it.
  auto payload = [&](int bits) {
    const uint64_t value = random & ((uint64_t{1} << bits) - 1);
    return value == 0 ? uint64_t{1} : value;
  };
  switch (dtype) {
    case DType::kF32:
      return (sign << 31) | 0x7FC00000u | payload(22);
    case DType::kF64:
      return (sign << 63) | 0x7FF8000000000000ull | payload(51);
    case DType::kF16:
      return (sign << 15) | 0x7E00u | payload(9);
    case DType::kBF16:
      return (sign << 15) | 0x7FC0u | payload(6);
    case DType::kF8E4M3:
      return (sign << 7) | 0x7Fu;
    case DType::kF8E5M2:
      return (sign << 7) | 0x7Cu | (1 + random % 3);
    default:
      return ~uint64_t{0};
  }
}

}  // namespace

void fill_poison(Tensor& tensor, uint64_t key) {
  const size_t element_size = dtype_size(tensor.dtype());
  std::byte* data = tensor.mutable_bytes();
  const int64_t count = tensor.numel();
  for (int64_t index = 0; index < count; ++index) {
    const uint64_t bits = poison_bits(tensor.dtype(), key, index);
    std::memcpy(data + static_cast<size_t>(index) * element_size, &bits, element_size);
  }
}

int64_t count_poison(const Tensor& tensor, uint64_t key) {
  const size_t element_size = dtype_size(tensor.dtype());
  const std::byte* data = tensor.bytes();
  const int64_t count = tensor.numel();
  const uint64_t mask =
      element_size >= 8 ? ~uint64_t{0} : ((uint64_t{1} << (8 * element_size)) - 1);
  int64_t poisoned = 0;
  for (int64_t index = 0; index < count; ++index) {
    uint64_t element = 0;
    std::memcpy(&element, data + static_cast<size_t>(index) * element_size, element_size);
    if (element == (poison_bits(tensor.dtype(), key, index) & mask)) ++poisoned;
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
