#include "loupe/tensor.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "core/float_formats.hpp"
#include "loupe/error.hpp"

namespace loupe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Runs `action` and returns the loupe::Error it throws; fails the test if it throws nothing.
template <class Action>
Error error_from(Action action) {
  try {
    action();
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "expected a loupe::Error";
  return Error(ErrorCode::kInternal, "no error thrown");
}

// --- float formats: known bit patterns -----------------------------------------------------------

TEST(FloatFormats, DecodesKnownBFloat16Patterns) {
  EXPECT_EQ(decode_mini_float(0x3F80, kBFloat16Format), 1.0);
  EXPECT_EQ(decode_mini_float(0xC000, kBFloat16Format), -2.0);
  EXPECT_EQ(decode_mini_float(0x7F80, kBFloat16Format), kInf);
  EXPECT_EQ(decode_mini_float(0xFF80, kBFloat16Format), -kInf);
  EXPECT_TRUE(std::isnan(decode_mini_float(0x7FC0, kBFloat16Format)));
  EXPECT_EQ(decode_mini_float(0x0001, kBFloat16Format), std::ldexp(1.0, -133));
  EXPECT_EQ(decode_mini_float(0x7F7F, kBFloat16Format), mini_float_max(kBFloat16Format));
  EXPECT_EQ(mini_float_max(kBFloat16Format), 3.3895313892515355e38);
  EXPECT_TRUE(std::signbit(decode_mini_float(0x8000, kBFloat16Format)));
}

TEST(FloatFormats, DecodesKnownHalfPatterns) {
  EXPECT_EQ(decode_mini_float(0x3C00, kHalfFormat), 1.0);
  EXPECT_EQ(decode_mini_float(0x7C00, kHalfFormat), kInf);
  EXPECT_EQ(decode_mini_float(0xFC00, kHalfFormat), -kInf);
  EXPECT_TRUE(std::isnan(decode_mini_float(0x7E00, kHalfFormat)));
  EXPECT_TRUE(std::isnan(decode_mini_float(0x7C01, kHalfFormat)));
  EXPECT_EQ(decode_mini_float(0x7BFF, kHalfFormat), 65504.0);
  EXPECT_EQ(decode_mini_float(0x0001, kHalfFormat), std::ldexp(1.0, -24));
  EXPECT_EQ(decode_mini_float(0x0400, kHalfFormat), std::ldexp(1.0, -14));
  EXPECT_EQ(decode_mini_float(0x3555, kHalfFormat), 0.333251953125);
  EXPECT_EQ(half_to_float(0xC000), -2.0f);
}

TEST(FloatFormats, DecodesKnownE4M3FNPatterns) {
  EXPECT_TRUE(std::isnan(decode_mini_float(0x7F, kE4M3FNFormat)));
  EXPECT_TRUE(std::isnan(decode_mini_float(0xFF, kE4M3FNFormat)));
  EXPECT_EQ(decode_mini_float(0x7E, kE4M3FNFormat), 448.0);  // all-ones exponent is a number
  EXPECT_EQ(decode_mini_float(0x78, kE4M3FNFormat), 256.0);
  EXPECT_EQ(decode_mini_float(0xFE, kE4M3FNFormat), -448.0);
  EXPECT_EQ(decode_mini_float(0x38, kE4M3FNFormat), 1.0);
  EXPECT_EQ(decode_mini_float(0x01, kE4M3FNFormat), std::ldexp(1.0, -9));
  EXPECT_EQ(decode_mini_float(0x08, kE4M3FNFormat), std::ldexp(1.0, -6));
  EXPECT_EQ(mini_float_max(kE4M3FNFormat), 448.0);
}

TEST(FloatFormats, DecodesKnownE5M2Patterns) {
  EXPECT_EQ(decode_mini_float(0x7C, kE5M2Format), kInf);
  EXPECT_EQ(decode_mini_float(0xFC, kE5M2Format), -kInf);
  EXPECT_TRUE(std::isnan(decode_mini_float(0x7E, kE5M2Format)));
  EXPECT_TRUE(std::isnan(decode_mini_float(0x7D, kE5M2Format)));
  EXPECT_EQ(decode_mini_float(0x7B, kE5M2Format), 57344.0);
  EXPECT_EQ(decode_mini_float(0x3C, kE5M2Format), 1.0);
  EXPECT_EQ(decode_mini_float(0x01, kE5M2Format), std::ldexp(1.0, -16));
  EXPECT_EQ(mini_float_max(kE5M2Format), 57344.0);
}

// Every non-NaN pattern decodes and re-encodes to itself; NaNs stay NaN with their sign.
void expect_every_pattern_round_trips(const MiniFloatFormat& format, uint32_t pattern_count) {
  for (uint32_t bits = 0; bits < pattern_count; ++bits) {
    const double value = decode_mini_float(bits, format);
    const uint32_t encoded = encode_mini_float(value, format);
    if (std::isnan(value)) {
      ASSERT_TRUE(std::isnan(decode_mini_float(encoded, format))) << bits;
      ASSERT_EQ(std::signbit(decode_mini_float(encoded, format)), std::signbit(value)) << bits;
    } else {
      ASSERT_EQ(encoded, bits) << "pattern " << bits << " value " << value;
    }
  }
}

TEST(FloatFormats, EveryPatternRoundTrips) {
  expect_every_pattern_round_trips(kHalfFormat, 1u << 16);
  expect_every_pattern_round_trips(kBFloat16Format, 1u << 16);
  expect_every_pattern_round_trips(kE4M3FNFormat, 1u << 8);
  expect_every_pattern_round_trips(kE5M2Format, 1u << 8);
}

TEST(FloatFormats, RoundsToNearestEven) {
  // f16: ulp at 1 is 2^-10; the midpoint 1 + 2^-11 goes to the even 1.0, 1 + 3*2^-11 up.
  EXPECT_EQ(float_to_half(1.0 + std::ldexp(1.0, -11)), 0x3C00);
  EXPECT_EQ(float_to_half(1.0 + 3 * std::ldexp(1.0, -11)), 0x3C02);
  EXPECT_EQ(float_to_half(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30)), 0x3C01);
  EXPECT_EQ(float_to_half(65519.0), 0x7BFF);
  EXPECT_EQ(float_to_half(65520.0), 0x7C00);  // the midpoint to 65536 overflows to inf
  EXPECT_EQ(float_to_half(-1e6), 0xFC00);
  // Subnormals: 2^-25 is half a unit and ties to 0; 3*2^-26 rounds up to one unit.
  EXPECT_EQ(float_to_half(std::ldexp(1.0, -25)), 0x0000);
  EXPECT_EQ(float_to_half(-std::ldexp(1.0, -25)), 0x8000);
  EXPECT_EQ(float_to_half(3 * std::ldexp(1.0, -26)), 0x0001);
  EXPECT_EQ(float_to_half(3 * std::ldexp(1.0, -25)), 0x0002);  // 1.5 units ties to 2
  EXPECT_EQ(float_to_half(std::ldexp(1.0, -14) - std::ldexp(1.0, -26)), 0x0400);  // carries up
  // bf16: ulp at 1 is 2^-7.
  EXPECT_EQ(float_to_bfloat16(1.0 + std::ldexp(1.0, -8)), 0x3F80);
  EXPECT_EQ(float_to_bfloat16(1.0 + 3 * std::ldexp(1.0, -8)), 0x3F82);
  EXPECT_EQ(float_to_bfloat16(3.0e38), 0x7F62);
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to inf
  // e4m3fn: 448 is the largest; 464 is the midpoint to the NaN slot and ties down to 448.
  EXPECT_EQ(float_to_e4m3fn(464.0), 0x7E);
  EXPECT_EQ(float_to_e4m3fn(465.0), 0x7F);
  EXPECT_EQ(float_to_e4m3fn(-500.0), 0xFF);
  EXPECT_EQ(float_to_e4m3fn(kInf), 0x7F);  // no infinity: NaN
  EXPECT_EQ(float_to_e4m3fn(-kInf), 0xFF);
  EXPECT_EQ(float_to_e4m3fn(std::ldexp(1.0, -10)), 0x00);  // half of the smallest subnormal
  EXPECT_EQ(float_to_e4m3fn(0.3), 0x2A);                   // 0.3 -> 0.3125 = 1.25 * 2^-2
  // e5m2: 61440 is the midpoint between 57344 and 65536 and ties (to even) up to inf.
  EXPECT_EQ(float_to_e5m2(61439.0), 0x7B);
  EXPECT_EQ(float_to_e5m2(61440.0), 0x7C);
  EXPECT_EQ(float_to_e5m2(-kInf), 0xFC);
  EXPECT_EQ(float_to_e5m2(-0.0), 0x80);
  EXPECT_EQ(float_to_e5m2(kNaN) & 0x7F, 0x7E);
}

#ifdef __FLT16_MAX__
// The compiler's _Float16 conversion is correctly rounded: a second, independent implementation.
TEST(FloatFormats, HalfEncodingMatchesCompilerFloat16) {
  // A stride through every float32 bit pattern, plus every pattern near the half range.
  auto check = [](uint32_t float_bits) {
    const float value = std::bit_cast<float>(float_bits);
    const auto expected = std::bit_cast<uint16_t>(static_cast<_Float16>(value));
    const uint16_t actual = float_to_half(value);
    if (std::isnan(value)) {
      ASSERT_TRUE(std::isnan(half_to_float(actual))) << float_bits;
    } else {
      ASSERT_EQ(actual, expected) << "float bits " << float_bits << " value " << value;
    }
  };
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFu; bits += 9973) check(static_cast<uint32_t>(bits));
  for (uint32_t bits = 0x33000000u; bits < 0x33000000u + 200000u; ++bits) check(bits);  // 2^-25
  for (uint32_t bits = 0x477FE000u - 100000u; bits < 0x477FE000u + 100000u; ++bits) check(bits);
}
#endif

// --- dtype facts --------------------------------------------------------------------------------

TEST(DTypeFacts, NamesSizesAndMantissaBits) {
  struct Row {
    DType dtype;
    const char* name;
    size_t size;
    int mantissa_bits;
  };
  const Row rows[] = {
      {DType::kBool, "bool", 1, 0},          {DType::kI8, "int8", 1, 0},
      {DType::kI16, "int16", 2, 0},          {DType::kI32, "int32", 4, 0},
      {DType::kI64, "int64", 8, 0},          {DType::kU8, "uint8", 1, 0},
      {DType::kU16, "uint16", 2, 0},         {DType::kU32, "uint32", 4, 0},
      {DType::kU64, "uint64", 8, 0},         {DType::kF16, "float16", 2, 11},
      {DType::kBF16, "bfloat16", 2, 8},      {DType::kF32, "float32", 4, 24},
      {DType::kF64, "float64", 8, 53},       {DType::kF8E4M3, "float8_e4m3fn", 1, 4},
      {DType::kF8E5M2, "float8_e5m2", 1, 3},
  };
  ASSERT_EQ(std::size(rows), std::size(kAllDTypes));
  for (const Row& row : rows) {
    EXPECT_EQ(dtype_name(row.dtype), row.name);
    EXPECT_EQ(dtype_size(row.dtype), row.size) << row.name;
    EXPECT_EQ(dtype_mantissa_bits(row.dtype), row.mantissa_bits) << row.name;
    EXPECT_EQ(dtype_is_floating(row.dtype), row.mantissa_bits > 0) << row.name;
    EXPECT_EQ(dtype_from_name(row.name), row.dtype);
  }
  EXPECT_EQ(dtype_from_name("float"), std::nullopt);
  EXPECT_EQ(dtype_of<float>(), DType::kF32);
  EXPECT_EQ(dtype_of<bool>(), DType::kBool);
}

TEST(DTypeFacts, ShapeToStringUsesPythonTupleNotation) {
  EXPECT_EQ(shape_to_string({}), "()");
  EXPECT_EQ(shape_to_string({3}), "(3,)");
  EXPECT_EQ(shape_to_string({4, 8}), "(4, 8)");
  EXPECT_EQ(shape_to_string({2, 0, 5}), "(2, 0, 5)");
}

// --- Tensor
// ---------------------------------------------------------------------------------------

TEST(Tensor, DefaultTensorIsEmpty) {
  Tensor tensor;
  EXPECT_TRUE(tensor.empty());
  EXPECT_EQ(tensor.numel(), 0);
  EXPECT_EQ(tensor.nbytes(), 0u);
  EXPECT_EQ(tensor.rank(), 0);
  EXPECT_EQ(tensor.bytes(), nullptr);
  EXPECT_TRUE(tensor.converted(DType::kF64).empty());
}

TEST(Tensor, ZeroDimensionalTensorHoldsOneElement) {
  Tensor scalar(DType::kF64, {});
  EXPECT_FALSE(scalar.empty());
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.nbytes(), 8u);
  EXPECT_EQ(scalar.element_as_double(0), 0.0);
  scalar.mutable_data<double>()[0] = 2.5;
  EXPECT_EQ(scalar.data<double>()[0], 2.5);
}

TEST(Tensor, ZeroSizeShapeHasNoElements) {
  Tensor tensor(DType::kI32, {2, 0, 3});
  EXPECT_TRUE(tensor.empty());
  EXPECT_EQ(tensor.numel(), 0);
  EXPECT_EQ(tensor.rank(), 3);
  EXPECT_EQ(tensor.data<int32_t>().size(), 0u);
  Tensor converted = tensor.converted(DType::kF16);
  EXPECT_EQ(converted.shape(), (std::vector<int64_t>{2, 0, 3}));
  EXPECT_EQ(converted.dtype(), DType::kF16);
}

TEST(Tensor, NewTensorIsZeroFilledAndCopiesShareStorage) {
  Tensor tensor(DType::kI32, {2, 3});
  for (int32_t value : tensor.data<int32_t>()) EXPECT_EQ(value, 0);
  Tensor copy = tensor;
  tensor.mutable_data<int32_t>()[4] = 7;
  EXPECT_EQ(copy.data<int32_t>()[4], 7);
  EXPECT_EQ(copy.bytes(), tensor.bytes());
}

TEST(Tensor, TypedAccessChecksTheDType) {
  Tensor tensor(DType::kF32, {4});
  Error error = error_from([&] { (void)tensor.data<double>(); });
  EXPECT_EQ(error.code(), ErrorCode::kInternal);
  EXPECT_EQ(error.message(), "tensor of dtype float32 accessed as float64");
}

TEST(Tensor, ViewsAreReadOnlyAndKeepTheirOwnerAlive) {
  auto buffer = std::make_shared<std::vector<float>>(std::vector<float>{1.5f, -2.0f});
  Tensor view(DType::kF32, {2}, std::shared_ptr<const void>(buffer, buffer->data()),
              reinterpret_cast<const std::byte*>(buffer->data()));
  std::weak_ptr<std::vector<float>> watch = buffer;
  buffer.reset();
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(view.data<float>()[1], -2.0f);
  Error error = error_from([&] { (void)view.mutable_bytes(); });
  EXPECT_EQ(error.code(), ErrorCode::kInternal);
  view = Tensor();
  EXPECT_TRUE(watch.expired());
}

TEST(Tensor, NegativeExtentIsRefused) {
  Error error = error_from([] { Tensor tensor(DType::kF32, {3, -1}); });
  EXPECT_EQ(error.code(), ErrorCode::kInternal);
  EXPECT_NE(error.message().find("(3, -1)"), std::string::npos);
}

TEST(Tensor, ElementAsDoubleDecodesEveryDType) {
  auto single = [](DType dtype, const void* raw) {
    Tensor tensor(dtype, {1});
    std::memcpy(tensor.mutable_bytes(), raw, dtype_size(dtype));
    return tensor.element_as_double(0);
  };
  const uint8_t true_byte = 1;
  const int8_t i8 = -128;
  const int16_t i16 = -300;
  const int32_t i32 = -70000;
  const int64_t i64 = int64_t{1} << 52;
  const uint8_t u8 = 255;
  const uint16_t u16 = 65535;
  const uint32_t u32 = 4000000000u;
  const uint64_t u64 = uint64_t{1} << 63;
  const uint16_t f16 = 0x3555, bf16 = 0xC040;
  const float f32 = 0.1f;
  const double f64 = -0.1;
  const uint8_t e4m3 = 0x7E, e5m2 = 0xFC;
  EXPECT_EQ(single(DType::kBool, &true_byte), 1.0);
  EXPECT_EQ(single(DType::kI8, &i8), -128.0);
  EXPECT_EQ(single(DType::kI16, &i16), -300.0);
  EXPECT_EQ(single(DType::kI32, &i32), -70000.0);
  EXPECT_EQ(single(DType::kI64, &i64), 4503599627370496.0);
  EXPECT_EQ(single(DType::kU8, &u8), 255.0);
  EXPECT_EQ(single(DType::kU16, &u16), 65535.0);
  EXPECT_EQ(single(DType::kU32, &u32), 4000000000.0);
  EXPECT_EQ(single(DType::kU64, &u64), 9223372036854775808.0);
  EXPECT_EQ(single(DType::kF16, &f16), 0.333251953125);
  EXPECT_EQ(single(DType::kBF16, &bf16), -3.0);
  EXPECT_EQ(single(DType::kF32, &f32), static_cast<double>(0.1f));
  EXPECT_EQ(single(DType::kF64, &f64), -0.1);
  EXPECT_EQ(single(DType::kF8E4M3, &e4m3), 448.0);
  EXPECT_EQ(single(DType::kF8E5M2, &e5m2), -kInf);
}

TEST(Tensor, ElementIndexOutOfRangeIsAnError) {
  Tensor tensor(DType::kF32, {3});
  Error error = error_from([&] { (void)tensor.element_as_double(3); });
  EXPECT_EQ(error.code(), ErrorCode::kInternal);
  EXPECT_EQ(error.message(), "element index 3 out of range for a tensor of 3 elements");
  EXPECT_THROW((void)tensor.element_as_double(-1), Error);
}

Tensor float64_tensor(const std::vector<double>& values) {
  Tensor tensor(DType::kF64, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), tensor.mutable_data<double>().begin());
  return tensor;
}

TEST(TensorConverted, KeepsNaNAndInfinityInEveryFloatFormat) {
  const Tensor source = float64_tensor({kNaN, kInf, -kInf, -0.0, 1.0});
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF32, DType::kF64, DType::kF8E5M2}) {
    const Tensor converted = source.converted(dtype);
    EXPECT_EQ(converted.dtype(), dtype);
    EXPECT_TRUE(std::isnan(converted.element_as_double(0))) << dtype_name(dtype);
    EXPECT_EQ(converted.element_as_double(1), kInf) << dtype_name(dtype);
    EXPECT_EQ(converted.element_as_double(2), -kInf) << dtype_name(dtype);
    EXPECT_TRUE(std::signbit(converted.element_as_double(3))) << dtype_name(dtype);
    EXPECT_EQ(converted.element_as_double(4), 1.0) << dtype_name(dtype);
  }
  // e4m3fn has no infinity: both infinities become NaN, keeping their sign.
  const Tensor e4m3 = source.converted(DType::kF8E4M3);
  EXPECT_EQ(std::to_integer<int>(e4m3.bytes()[1]), 0x7F);
  EXPECT_EQ(std::to_integer<int>(e4m3.bytes()[2]), 0xFF);
}

TEST(TensorConverted, NarrowsFloatsToNearestEven) {
  // 1 + 2^-24 is the float32 midpoint between 1 and 1 + 2^-23: ties to 1. 1 + 3*2^-24 goes up.
  const Tensor source =
      float64_tensor({1.0 + std::ldexp(1.0, -24), 1.0 + 3 * std::ldexp(1.0, -24), 0.1});
  const Tensor f32 = source.converted(DType::kF32);
  EXPECT_EQ(f32.data<float>()[0], 1.0f);
  EXPECT_EQ(f32.data<float>()[1], 1.0f + std::ldexp(1.0f, -22));
  EXPECT_EQ(f32.data<float>()[2], 0.1f);
  const Tensor bf16 = source.converted(DType::kBF16);
  uint16_t bits;
  std::memcpy(&bits, bf16.bytes() + 4, 2);
  EXPECT_EQ(bits, 0x3DCD);  // 0.1 = 0x3DCCCCCD as float32 rounds up in bfloat16
  // Converting directly from float64 rounds once: 1 + 2^-8 + 2^-30 is above the bf16 midpoint.
  const Tensor above_midpoint = float64_tensor({1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)});
  std::memcpy(&bits, above_midpoint.converted(DType::kBF16).bytes(), 2);
  EXPECT_EQ(bits, 0x3F81);
}

TEST(TensorConverted, IntegersSaturateAndTruncateTowardZero) {
  const Tensor source = float64_tensor({1e10, -1e10, kNaN, 2.7, -2.7, kInf});
  const Tensor i32 = source.converted(DType::kI32);
  EXPECT_EQ(i32.data<int32_t>()[0], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(i32.data<int32_t>()[1], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(i32.data<int32_t>()[2], 0);
  EXPECT_EQ(i32.data<int32_t>()[3], 2);
  EXPECT_EQ(i32.data<int32_t>()[4], -2);
  EXPECT_EQ(i32.data<int32_t>()[5], std::numeric_limits<int32_t>::max());
  const Tensor u8 = source.converted(DType::kU8);
  EXPECT_EQ(u8.data<uint8_t>()[0], 255);
  EXPECT_EQ(u8.data<uint8_t>()[1], 0);
  EXPECT_EQ(u8.data<uint8_t>()[4], 0);

  Tensor big(DType::kU64, {2});
  big.mutable_data<uint64_t>()[0] = std::numeric_limits<uint64_t>::max();
  big.mutable_data<uint64_t>()[1] = (uint64_t{1} << 53) + 1;
  EXPECT_EQ(big.converted(DType::kI8).data<int8_t>()[0], 127);
  EXPECT_EQ(big.converted(DType::kI64).data<int64_t>()[0], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(big.converted(DType::kI64).data<int64_t>()[1], (int64_t{1} << 53) + 1);  // exact
  Tensor negative(DType::kI64, {1});
  negative.mutable_data<int64_t>()[0] = -5;
  EXPECT_EQ(negative.converted(DType::kU32).data<uint32_t>()[0], 0u);
  EXPECT_EQ(negative.converted(DType::kI8).data<int8_t>()[0], -5);
  EXPECT_EQ(negative.converted(DType::kF16).element_as_double(0), -5.0);
}

TEST(TensorConverted, BoolIsNonZero) {
  const Tensor source = float64_tensor({0.0, -0.0, 0.5, kNaN});
  const Tensor flags = source.converted(DType::kBool);
  EXPECT_EQ(flags.data<bool>()[0], false);
  EXPECT_EQ(flags.data<bool>()[1], false);
  EXPECT_EQ(flags.data<bool>()[2], true);
  EXPECT_EQ(flags.data<bool>()[3], true);
  EXPECT_EQ(flags.converted(DType::kF32).data<float>()[2], 1.0f);
}

TEST(TensorConverted, IsAnIndependentCopyWithTheSameAxes) {
  Tensor source(DType::kF32, {2, 2});
  source.axes = {"H", "V"};
  source.mutable_data<float>()[3] = 4.0f;
  Tensor copy = source.converted(DType::kF32);
  source.mutable_data<float>()[3] = 5.0f;
  EXPECT_EQ(copy.data<float>()[3], 4.0f);
  EXPECT_EQ(copy.axes, (std::vector<std::string>{"H", "V"}));
  EXPECT_NE(copy.bytes(), source.bytes());
}

}  // namespace
}  // namespace loupe
