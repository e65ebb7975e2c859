// loupe/tensor.hpp — a dense tensor and its file formats (.npy, .safetensors).
//
// A Tensor is an n-dimensional array of one dtype in C (row-major) order, little-endian in memory.
// Its storage is shared and immutable once built: copies share it, and a tensor read from a large
// file may be a view of a memory-mapped region that stays mapped while any copy lives.
// Thread-safety: const methods are safe from any thread; a Tensor being filled through
// mutable_data() belongs to one thread until it is shared.
//
// Readers throw loupe::Error(kInput) naming the file, the byte offset or field, what was found and
// what was expected. Conversions keep NaN and Inf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace loupe {

enum class DType : uint8_t {
  kBool,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kU16,
  kU32,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kF8E4M3,  // OCP FP8 E4M3FN: no infinities, 0x7F/0xFF are NaN
  kF8E5M2,
};

inline constexpr DType kAllDTypes[] = {DType::kBool, DType::kI8,     DType::kI16,   DType::kI32,
                                       DType::kI64,  DType::kU8,     DType::kU16,   DType::kU32,
                                       DType::kU64,  DType::kF16,    DType::kBF16,  DType::kF32,
                                       DType::kF64,  DType::kF8E4M3, DType::kF8E5M2};

// "bool", "int8", ..., "float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2".
std::string_view dtype_name(DType dtype);
// The inverse of dtype_name; nullopt for any other text.
std::optional<DType> dtype_from_name(std::string_view name);
size_t dtype_size(DType dtype);
bool dtype_is_floating(DType dtype);
// Bits of significand precision including the implicit bit (f32: 24, bf16: 8); 0 for non-floats.
int dtype_mantissa_bits(DType dtype);

// The DType of a C++ element type, for the types that name exactly one dtype.
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kF32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kF64;
}
template <>
constexpr DType dtype_of<int8_t>() {
  return DType::kI8;
}
template <>
constexpr DType dtype_of<int16_t>() {
  return DType::kI16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::kI64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::kU8;
}
template <>
constexpr DType dtype_of<uint32_t>() {
  return DType::kU32;
}
template <>
constexpr DType dtype_of<uint64_t>() {
  return DType::kU64;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::kBool;
}

// Python tuple notation, as numpy prints shapes: "()", "(3,)", "(4, 8)".
std::string shape_to_string(const std::vector<int64_t>& shape);

class Tensor {
 public:
  // The empty tensor: no shape, no data, numel() == 0, empty() is true.
  Tensor() = default;

  // A new zero-filled tensor that owns its storage.
  Tensor(DType dtype, std::vector<int64_t> shape);

  // A view of `data` (C order, little-endian) kept alive by `owner` (a mapping, a buffer).
  Tensor(DType dtype, std::vector<int64_t> shape, std::shared_ptr<const void> owner,
         const std::byte* data);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool empty() const { return data_ == nullptr && numel() == 0; }

  const std::byte* bytes() const { return data_; }
  // REQUIRES: the tensor owns its storage (built with the zero-filling constructor).
  std::byte* mutable_bytes();

  // Typed access; throws Error(kInternal) when T does not match the dtype.
  template <class T>
  std::span<const T> data() const {
    check_element_type(dtype_of<T>());
    return {reinterpret_cast<const T*>(data_), static_cast<size_t>(numel())};
  }
  template <class T>
  std::span<T> mutable_data() {
    check_element_type(dtype_of<T>());
    return {reinterpret_cast<T*>(mutable_bytes()), static_cast<size_t>(numel())};
  }

  // One element widened to double (bf16, f16 and fp8 decoded exactly; NaN and Inf kept; 64-bit
  // integers beyond 2^53 rounded). Throws Error(kInternal) when flat_index is out of range.
  double element_as_double(int64_t flat_index) const;

  // A copy with every element converted to `dtype` (float → narrower float rounds to nearest even).
  // Floats keep NaN, Inf and the sign of zero; e4m3fn has no infinity, so ±Inf and overflow
  // become NaN there. Integer targets saturate at their range, truncate fractions toward zero and
  // take NaN as 0; bool is "nonzero" (NaN is true). Integer to integer keeps all 64 bits.
  Tensor converted(DType dtype) const;

  // Axis names (e.g. {"B","T","H","V"}); empty when unknown. Not stored by .npy.
  std::vector<std::string> axes;

 private:
  void check_element_type(DType requested) const;

  DType dtype_ = DType::kF32;
  std::vector<int64_t> shape_;
  std::shared_ptr<const void> owner_;
  const std::byte* data_ = nullptr;
  bool owns_mutable_ = false;
};

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// .npy format versions 1.0, 2.0 and 3.0; every dtype above except bfloat16 and fp8 (which .npy
// cannot name); either byte order; C order, and Fortran order on read (converted to C order).
// Native little-endian C-order files above 1 MiB are memory-mapped, not copied.
Tensor read_npy(const std::filesystem::path& path);
// Writes version 1.0 (2.0 when the header needs it), little-endian, C order.
// bfloat16 and fp8 tensors are refused with Error(kInput): .npy has no name for them.
void write_npy(const std::filesystem::path& path, const Tensor& tensor);

// .safetensors: every tensor in the file, in the order of their data offsets (the order written).
std::vector<NamedTensor> read_safetensors(const std::filesystem::path& path);
void write_safetensors(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors);
// The same with a "__metadata__" object of string keys and values (loupe's keys: docs/formats.md,
// e.g. loupe.dims, loupe.parallel, loupe.rank.<group>, loupe.step).
void write_safetensors(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);
// The "__metadata__" of a .safetensors file; empty when the header has none. Reads the header
// only; throws Error(kInput) as read_safetensors does for an unreadable header.
std::map<std::string, std::string> read_safetensors_metadata(const std::filesystem::path& path);

}  // namespace loupe
