// The Tensor class, dtype facts and element conversions. File formats: npy.cpp, safetensors.cpp.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/float_formats.hpp"
#include "loupe/error.hpp"
#include "loupe/tensor.hpp"

namespace loupe {

static_assert(std::endian::native == std::endian::little,
              "loupe stores tensors little-endian in memory and assumes a little-endian host");

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return "bool";
    case DType::kI8:
      return "int8";
    case DType::kI16:
      return "int16";
    case DType::kI32:
      return "int32";
    case DType::kI64:
      return "int64";
    case DType::kU8:
      return "uint8";
    case DType::kU16:
      return "uint16";
    case DType::kU32:
      return "uint32";
    case DType::kU64:
      return "uint64";
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF32:
      return "float32";
    case DType::kF64:
      return "float64";
    case DType::kF8E4M3:
      return "float8_e4m3fn";
    case DType::kF8E5M2:
      return "float8_e5m2";
  }
  return "unknown";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType dtype : kAllDTypes) {
    if (dtype_name(dtype) == name) return dtype;
  }
  return std::nullopt;
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kBool:
    case DType::kI8:
    case DType::kU8:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return 1;
    case DType::kI16:
    case DType::kU16:
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI32:
    case DType::kU32:
    case DType::kF32:
      return 4;
    case DType::kI64:
    case DType::kU64:
    case DType::kF64:
      return 8;
  }
  return 1;
}

bool dtype_is_floating(DType dtype) { return dtype_mantissa_bits(dtype) != 0; }

int dtype_mantissa_bits(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return 11;
    case DType::kBF16:
      return 8;
    case DType::kF32:
      return 24;
    case DType::kF64:
      return 53;
    case DType::kF8E4M3:
      return 4;
    case DType::kF8E5M2:
      return 3;
    default:
      return 0;
  }
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    if (axis > 0) text += ", ";
    text += std::to_string(shape[axis]);
  }
  if (shape.size() == 1) text += ",";
  return text + ")";
}

namespace {

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t extent : shape) {
    if (extent < 0) {
      throw Error(ErrorCode::kInternal, "tensor shape " + shape_to_string(shape) +
                                            " has a negative extent; extents must be >= 0");
    }
    if (extent != 0 && count > std::numeric_limits<int64_t>::max() / extent) {
      throw Error(ErrorCode::kInternal,
                  "tensor shape " + shape_to_string(shape) + " overflows a 64-bit element count");
    }
    count *= extent;
  }
  return count;
}

// One element, widened without loss: integers stay integers so int64/uint64 keep every bit.
struct Scalar {
  enum class Kind { kFloat, kSigned, kUnsigned } kind;
  double floating = 0;
  int64_t signed_value = 0;
  uint64_t unsigned_value = 0;

  double as_double() const {
    switch (kind) {
      case Kind::kFloat:
        return floating;
      case Kind::kSigned:
        return static_cast<double>(signed_value);
      case Kind::kUnsigned:
        return static_cast<double>(unsigned_value);
    }
    return floating;
  }
};

template <class T>
T load_raw(const std::byte* address) {
  T value;
  std::memcpy(&value, address, sizeof(T));
  return value;
}

template <class T>
void store_raw(std::byte* address, T value) {
  std::memcpy(address, &value, sizeof(T));
}

Scalar load_scalar(DType dtype, const std::byte* address) {
  using Kind = Scalar::Kind;
  switch (dtype) {
    case DType::kBool:
      return {Kind::kUnsigned, 0, 0, load_raw<uint8_t>(address) != 0 ? 1u : 0u};
    case DType::kI8:
      return {Kind::kSigned, 0, load_raw<int8_t>(address), 0};
    case DType::kI16:
      return {Kind::kSigned, 0, load_raw<int16_t>(address), 0};
    case DType::kI32:
      return {Kind::kSigned, 0, load_raw<int32_t>(address), 0};
    case DType::kI64:
      return {Kind::kSigned, 0, load_raw<int64_t>(address), 0};
    case DType::kU8:
      return {Kind::kUnsigned, 0, 0, load_raw<uint8_t>(address)};
    case DType::kU16:
      return {Kind::kUnsigned, 0, 0, load_raw<uint16_t>(address)};
    case DType::kU32:
      return {Kind::kUnsigned, 0, 0, load_raw<uint32_t>(address)};
    case DType::kU64:
      return {Kind::kUnsigned, 0, 0, load_raw<uint64_t>(address)};
    case DType::kF16:
      return {Kind::kFloat, decode_mini_float(load_raw<uint16_t>(address), kHalfFormat), 0, 0};
    case DType::kBF16:
      // bfloat16 is the top half of a float32.
      return {Kind::kFloat,
              std::bit_cast<float>(static_cast<uint32_t>(load_raw<uint16_t>(address)) << 16), 0, 0};
    case DType::kF32:
      return {Kind::kFloat, load_raw<float>(address), 0, 0};
    case DType::kF64:
      return {Kind::kFloat, load_raw<double>(address), 0, 0};
    case DType::kF8E4M3:
      return {Kind::kFloat, decode_mini_float(load_raw<uint8_t>(address), kE4M3FNFormat), 0, 0};
    case DType::kF8E5M2:
      return {Kind::kFloat, decode_mini_float(load_raw<uint8_t>(address), kE5M2Format), 0, 0};
  }
  return {Kind::kFloat, 0, 0, 0};
}

// Integer targets saturate; NaN becomes 0 and fractions truncate toward zero (as a C cast would,
// without its undefined behaviour out of range).
template <class T>
T to_integer(const Scalar& scalar) {
  using Limits = std::numeric_limits<T>;
  switch (scalar.kind) {
    case Scalar::Kind::kFloat: {
      const double value = std::trunc(scalar.floating);
      if (std::isnan(value)) return 0;
      // Compare in double: min() is exact; max()+1 is a power of two, so also exact.
      if (value < static_cast<double>(Limits::min())) return Limits::min();
      if (value >= std::ldexp(1.0, Limits::digits)) return Limits::max();
      return static_cast<T>(value);
    }
    case Scalar::Kind::kSigned:
      if (scalar.signed_value < 0) {
        if constexpr (!Limits::is_signed) return 0;
        if (scalar.signed_value < static_cast<int64_t>(Limits::min())) return Limits::min();
        return static_cast<T>(scalar.signed_value);
      }
      if (static_cast<uint64_t>(scalar.signed_value) > static_cast<uint64_t>(Limits::max())) {
        return Limits::max();
      }
      return static_cast<T>(scalar.signed_value);
    case Scalar::Kind::kUnsigned:
      if (scalar.unsigned_value > static_cast<uint64_t>(Limits::max())) return Limits::max();
      return static_cast<T>(scalar.unsigned_value);
  }
  return 0;
}

// float32 from an integer or a double, rounded once (to nearest even).
float to_float32(const Scalar& scalar) {
  switch (scalar.kind) {
    case Scalar::Kind::kFloat:
      return static_cast<float>(scalar.floating);
    case Scalar::Kind::kSigned:
      return static_cast<float>(scalar.signed_value);
    case Scalar::Kind::kUnsigned:
      return static_cast<float>(scalar.unsigned_value);
  }
  return 0;
}

void store_scalar(DType dtype, std::byte* address, const Scalar& scalar) {
  switch (dtype) {
    case DType::kBool: {
      const bool nonzero = scalar.kind == Scalar::Kind::kFloat    ? scalar.floating != 0
                           : scalar.kind == Scalar::Kind::kSigned ? scalar.signed_value != 0
                                                                  : scalar.unsigned_value != 0;
      store_raw<uint8_t>(address, nonzero ? 1 : 0);
      return;
    }
    case DType::kI8:
      return store_raw(address, to_integer<int8_t>(scalar));
    case DType::kI16:
      return store_raw(address, to_integer<int16_t>(scalar));
    case DType::kI32:
      return store_raw(address, to_integer<int32_t>(scalar));
    case DType::kI64:
      return store_raw(address, to_integer<int64_t>(scalar));
    case DType::kU8:
      return store_raw(address, to_integer<uint8_t>(scalar));
    case DType::kU16:
      return store_raw(address, to_integer<uint16_t>(scalar));
    case DType::kU32:
      return store_raw(address, to_integer<uint32_t>(scalar));
    case DType::kU64:
      return store_raw(address, to_integer<uint64_t>(scalar));
    case DType::kF16:
      return store_raw(address,
                       static_cast<uint16_t>(encode_mini_float(scalar.as_double(), kHalfFormat)));
    case DType::kBF16:
      return store_raw(
          address, static_cast<uint16_t>(encode_mini_float(scalar.as_double(), kBFloat16Format)));
    case DType::kF32:
      return store_raw(address, to_float32(scalar));
    case DType::kF64:
      return store_raw(address, scalar.as_double());
    case DType::kF8E4M3:
      return store_raw(address,
                       static_cast<uint8_t>(encode_mini_float(scalar.as_double(), kE4M3FNFormat)));
    case DType::kF8E5M2:
      return store_raw(address,
                       static_cast<uint8_t>(encode_mini_float(scalar.as_double(), kE5M2Format)));
  }
}

}  // namespace

Tensor::Tensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  const size_t byte_count = static_cast<size_t>(shape_numel(shape_)) * dtype_size(dtype_);
  owns_mutable_ = true;
  if (byte_count == 0) return;  // no elements: no storage, data_ stays null
  std::shared_ptr<std::byte[]> storage(new std::byte[byte_count]());
  data_ = storage.get();
  owner_ = std::shared_ptr<const void>(storage, storage.get());
}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape, std::shared_ptr<const void> owner,
               const std::byte* data)
    : dtype_(dtype), shape_(std::move(shape)), owner_(std::move(owner)), data_(data) {
  const int64_t count = shape_numel(shape_);
  if (data_ == nullptr && count != 0 && !shape_.empty()) {
    throw Error(ErrorCode::kInternal,
                "tensor view of shape " + shape_to_string(shape_) + " built on null data");
  }
}

int64_t Tensor::numel() const {
  // A default-constructed tensor (rank 0, no data) holds nothing; a real 0-d tensor has data.
  if (shape_.empty() && data_ == nullptr) return 0;
  int64_t count = 1;
  for (int64_t extent : shape_) count *= extent;
  return count;
}

std::byte* Tensor::mutable_bytes() {
  if (!owns_mutable_) {
    throw Error(ErrorCode::kInternal,
                "mutable_bytes() on a tensor view (read from a file or built on foreign data)",
                "build the tensor with Tensor(dtype, shape) or use converted() to get a copy");
  }
  return const_cast<std::byte*>(data_);
}

void Tensor::check_element_type(DType requested) const {
  if (requested != dtype_) {
    throw Error(ErrorCode::kInternal, "tensor of dtype " + std::string(dtype_name(dtype_)) +
                                          " accessed as " + std::string(dtype_name(requested)));
  }
}

double Tensor::element_as_double(int64_t flat_index) const {
  const int64_t count = numel();
  if (flat_index < 0 || flat_index >= count) {
    throw Error(ErrorCode::kInternal, "element index " + std::to_string(flat_index) +
                                          " out of range for a tensor of " + std::to_string(count) +
                                          " elements");
  }
  const size_t element_size = dtype_size(dtype_);
  return load_scalar(dtype_, data_ + static_cast<size_t>(flat_index) * element_size).as_double();
}

Tensor Tensor::converted(DType dtype) const {
  if (shape_.empty() && data_ == nullptr) return Tensor();  // the default tensor stays default
  Tensor result(dtype, shape_);
  result.axes = axes;
  const int64_t count = numel();
  if (count == 0) return result;
  std::byte* destination = result.mutable_bytes();
  if (dtype == dtype_) {
    std::memcpy(destination, data_, nbytes());
    return result;
  }
  const size_t source_size = dtype_size(dtype_);
  const size_t destination_size = dtype_size(dtype);
  for (int64_t index = 0; index < count; ++index) {
    const Scalar scalar = load_scalar(dtype_, data_ + static_cast<size_t>(index) * source_size);
    store_scalar(dtype, destination + static_cast<size_t>(index) * destination_size, scalar);
  }
  return result;
}

}  // namespace loupe
