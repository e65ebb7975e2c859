#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "loupe/error.hpp"
#include "loupe/tensor.hpp"
#include "scratch_dir_test.hpp"

namespace loupe {
namespace {

namespace fs = std::filesystem;

class NpyTest : public ScratchDirTest {
 protected:
  // A .npy file with the given version and header text (used verbatim) followed by `data`.
  fs::path write_npy_file(const std::string& name, int major, const std::string& header,
                          const std::string& data) const {
    std::string bytes("\x93NUMPY", 6);
    bytes += static_cast<char>(major);
    bytes += '\0';
    const size_t length_size = major == 1 ? 2 : 4;
    for (size_t byte = 0; byte < length_size; ++byte) {
      bytes += static_cast<char>((header.size() >> (8 * byte)) & 0xff);
    }
    return write_bytes(name, bytes + header + data);
  }

  // The message of the loupe::Error(kInput) that reading `file` throws.
  std::string read_error(const fs::path& file) const {
    try {
      read_npy(file);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInput);
      return error.message();
    }
    ADD_FAILURE() << "reading " << file << " did not throw";
    return {};
  }
};

template <class T>
std::string raw(std::initializer_list<T> values) {
  std::string bytes;
  for (T value : values) bytes.append(reinterpret_cast<const char*>(&value), sizeof(T));
  return bytes;
}

// Each element's bytes reversed: the big-endian form of `raw`.
template <class T>
std::string raw_big_endian(std::initializer_list<T> values) {
  std::string bytes;
  for (T value : values) {
    std::string element(reinterpret_cast<const char*>(&value), sizeof(T));
    bytes.append(element.rbegin(), element.rend());
  }
  return bytes;
}

std::string tensor_bytes(const Tensor& tensor) {
  return std::string(reinterpret_cast<const char*>(tensor.bytes()), tensor.nbytes());
}

// A tensor whose bytes run through every byte value (so any byte mix-up shows).
Tensor patterned(DType dtype, std::vector<int64_t> shape) {
  Tensor tensor(dtype, std::move(shape));
  std::byte* bytes = tensor.mutable_bytes();
  for (size_t index = 0; index < tensor.nbytes(); ++index) {
    bytes[index] = static_cast<std::byte>((index * 37 + 11) & 0xff);
  }
  if (dtype == DType::kBool) {
    for (size_t index = 0; index < tensor.nbytes(); ++index) {
      bytes[index] = static_cast<std::byte>(index % 3 == 0);
    }
  }
  return tensor;
}

TEST_F(NpyTest, EveryNpyDTypeRoundTripsByteForByte) {
  for (DType dtype : kAllDTypes) {
    if (dtype == DType::kBF16 || dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2) continue;
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{}, {0}, {7}, {2, 3, 5}, {3, 0, 2}}) {
      const Tensor original = patterned(dtype, shape);
      const fs::path file = path(std::string(dtype_name(dtype)) + ".npy");
      write_npy(file, original);
      const Tensor loaded = read_npy(file);
      EXPECT_EQ(loaded.dtype(), dtype) << dtype_name(dtype);
      EXPECT_EQ(loaded.shape(), shape) << dtype_name(dtype) << shape_to_string(shape);
      EXPECT_EQ(tensor_bytes(loaded), tensor_bytes(original))
          << dtype_name(dtype) << shape_to_string(shape);
    }
  }
}

TEST_F(NpyTest, WritesNumpysVersion1LayoutAlignedTo64Bytes) {
  Tensor tensor(DType::kF32, {2, 3});
  write_npy(path("a.npy"), tensor);
  const std::string bytes = read_bytes(path("a.npy"));
  const std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  std::string expected("\x93NUMPY\x01\x00\x76\x00", 10);
  expected += header + std::string(128 - 10 - header.size() - 1, ' ') + "\n";
  expected += std::string(24, '\0');
  EXPECT_EQ(bytes, expected);
}

TEST_F(NpyTest, WritesVersion2WhenTheHeaderExceeds65535Bytes) {
  // 25000 axes of extent 1 print as "(1, 1, ..., 1)": about 75000 header bytes.
  Tensor tensor(DType::kI16, std::vector<int64_t>(25000, 1));
  tensor.mutable_data<int16_t>()[0] = -2;
  write_npy(path("wide.npy"), tensor);
  const std::string bytes = read_bytes(path("wide.npy"));
  EXPECT_EQ(bytes[6], '\x02');
  EXPECT_EQ((bytes.size() - 2) % 64, 0u);  // data (2 bytes) starts on a 64-byte boundary
  const Tensor loaded = read_npy(path("wide.npy"));
  EXPECT_EQ(loaded.rank(), 25000);
  EXPECT_EQ(loaded.data<int16_t>()[0], -2);
}

TEST_F(NpyTest, ReadsVersion2And3Headers) {
  const std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }\n";
  const Tensor v2 = read_npy(write_npy_file("v2.npy", 2, header, raw<int32_t>({5, -6})));
  EXPECT_EQ(v2.data<int32_t>()[1], -6);
  const Tensor v3 = read_npy(write_npy_file("v3.npy", 3, header, raw<int32_t>({7, 8})));
  EXPECT_EQ(v3.data<int32_t>()[0], 7);
}

TEST_F(NpyTest, ParsesHeaderVariants) {
  const std::string data = raw<float>({1.0f, 2.0f, 3.0f});
  for (const std::string& header : {
           std::string("{'shape': (3,), 'fortran_order': False, 'descr': '<f4'}"),
           std::string(
               "{ \"descr\" : \"<f4\" , \"fortran_order\" : False , \"shape\" : ( 3 , ) , }"),
           std::string("{'descr':'<f4','fortran_order':False,'shape':(3L,),}   \n"),
           std::string("{'fortran_order': True, 'descr': '=f4', 'shape': (3,)}\n"),
       }) {
    const Tensor tensor = read_npy(write_npy_file("variant.npy", 1, header, data));
    EXPECT_EQ(tensor.shape(), (std::vector<int64_t>{3})) << header;
    EXPECT_EQ(tensor.data<float>()[2], 3.0f) << header;
  }
}

TEST_F(NpyTest, ConvertsBigEndianToNative) {
  const Tensor f4 = read_npy(
      write_npy_file("f4.npy", 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
                     raw_big_endian<float>({1.0f, -0.5f})));
  EXPECT_EQ(f4.data<float>()[0], 1.0f);
  EXPECT_EQ(f4.data<float>()[1], -0.5f);
  const Tensor f8 = read_npy(
      write_npy_file("f8.npy", 1, "{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }",
                     raw_big_endian<double>({-0.1})));
  EXPECT_EQ(f8.data<double>()[0], -0.1);
  const Tensor f2 = read_npy(
      write_npy_file("f2.npy", 1, "{'descr': '>f2', 'fortran_order': False, 'shape': (1,), }",
                     std::string("\x3C\x00", 2)));
  EXPECT_EQ(f2.element_as_double(0), 1.0);
  const Tensor i2 = read_npy(
      write_npy_file("i2.npy", 1, "{'descr': '>i2', 'fortran_order': False, 'shape': (2,), }",
                     raw_big_endian<int16_t>({-300, 2})));
  EXPECT_EQ(i2.data<int16_t>()[0], -300);
  const Tensor u8 = read_npy(
      write_npy_file("u8.npy", 1, "{'descr': '>u8', 'fortran_order': False, 'shape': (1,), }",
                     raw_big_endian<uint64_t>({0x0102030405060708ull})));
  EXPECT_EQ(u8.data<uint64_t>()[0], 0x0102030405060708ull);
  const Tensor i1 = read_npy(write_npy_file(
      "i1.npy", 1, "{'descr': '|i1', 'fortran_order': False, 'shape': (1,), }", "\xff"));
  EXPECT_EQ(i1.data<int8_t>()[0], -1);
}

TEST_F(NpyTest, TransposesFortranOrderToCOrder) {
  // C order [[0, 1, 2], [3, 4, 5]] stored column by column.
  const Tensor matrix = read_npy(
      write_npy_file("f.npy", 1, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }",
                     raw<int32_t>({0, 3, 1, 4, 2, 5})));
  const auto values = matrix.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(values.begin(), values.end()),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));

  // Shape (2, 3, 4): element (i, j, k) = 100 i + 10 j + k sits at Fortran index i + 2 j + 6 k.
  std::string fortran_data;
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < 3; ++j) {
      for (int i = 0; i < 2; ++i) {
        // Big-endian as well, to check transposition and byte order together.
        fortran_data += raw_big_endian<int16_t>({static_cast<int16_t>(100 * i + 10 * j + k)});
      }
    }
  }
  const Tensor cube = read_npy(
      write_npy_file("cube.npy", 1, "{'descr': '>i2', 'fortran_order': True, 'shape': (2, 3, 4), }",
                     fortran_data));
  ASSERT_EQ(cube.shape(), (std::vector<int64_t>{2, 3, 4}));
  const auto cube_values = cube.data<int16_t>();
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      for (int k = 0; k < 4; ++k) {
        EXPECT_EQ(cube_values[i * 12 + j * 4 + k], 100 * i + 10 * j + k);
      }
    }
  }
}

TEST_F(NpyTest, ReadsZeroDimensionalAndEmptyArrays) {
  const Tensor scalar = read_npy(
      write_npy_file("scalar.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
                     raw<double>({2.5})));
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.data<double>()[0], 2.5);
  const Tensor empty = read_npy(write_npy_file(
      "empty.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4, 0), }", ""));
  EXPECT_EQ(empty.shape(), (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(empty.numel(), 0);
}

TEST_F(NpyTest, KeepsNaNAndInfinity) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  Tensor tensor(DType::kF64, {4});
  auto values = tensor.mutable_data<double>();
  values[0] = std::numeric_limits<double>::quiet_NaN();
  values[1] = kInf;
  values[2] = -kInf;
  values[3] = -0.0;
  for (DType dtype : {DType::kF16, DType::kF32, DType::kF64}) {
    write_npy(path("special.npy"), tensor.converted(dtype));
    const Tensor loaded = read_npy(path("special.npy"));
    EXPECT_TRUE(std::isnan(loaded.element_as_double(0))) << dtype_name(dtype);
    EXPECT_EQ(loaded.element_as_double(1), kInf) << dtype_name(dtype);
    EXPECT_EQ(loaded.element_as_double(2), -kInf) << dtype_name(dtype);
    EXPECT_TRUE(std::signbit(loaded.element_as_double(3))) << dtype_name(dtype);
  }
}

TEST_F(NpyTest, LargeNativeFilesAreMappedAndOutliveTheFile) {
  Tensor big(DType::kF32, {512, 1024});  // 2 MiB
  auto values = big.mutable_data<float>();
  for (size_t index = 0; index < values.size(); ++index) values[index] = static_cast<float>(index);
  write_npy(path("big.npy"), big);
  Tensor loaded = read_npy(path("big.npy"));
  // A view of the mapping, not a copy: it cannot be written.
  EXPECT_THROW(loaded.mutable_bytes(), Error);
  fs::remove(path("big.npy"));
  const Tensor copy = loaded;
  loaded = Tensor();
  EXPECT_EQ(copy.data<float>()[524287], 524287.0f);
  EXPECT_EQ(tensor_bytes(copy), tensor_bytes(big));
  // Small files are copied into owned storage.
  write_npy(path("small.npy"), Tensor(DType::kF32, {4}));
  EXPECT_NO_THROW(read_npy(path("small.npy")).mutable_bytes());
}

TEST_F(NpyTest, RefusesToWriteBFloat16AndFp8) {
  for (DType dtype : {DType::kBF16, DType::kF8E4M3, DType::kF8E5M2}) {
    try {
      write_npy(path("x.npy"), Tensor(dtype, {2}));
      ADD_FAILURE() << dtype_name(dtype);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInput);
      EXPECT_EQ(error.message(),
                path("x.npy").string() + ": cannot write a " + std::string(dtype_name(dtype)) +
                    " tensor: .npy has no dtype for " + std::string(dtype_name(dtype)));
    }
  }
  EXPECT_THROW(write_npy(path("x.npy"), Tensor()), Error);
}

// --- malformed input ---------------------------------------------------------------------------

TEST_F(NpyTest, MissingFile) {
  EXPECT_EQ(read_error(path("absent.npy")),
            path("absent.npy").string() + ": cannot open: No such file or directory");
}

TEST_F(NpyTest, EmptyFile) {
  const fs::path file = write_bytes("empty.npy", "");
  EXPECT_EQ(read_error(file),
            file.string() + ": empty file (expected a .npy file starting with \"\\x93NUMPY\")");
}

TEST_F(NpyTest, BadMagic) {
  const fs::path file = write_bytes("bad.npy", std::string("PK\x03\x04\x14\x00\x00\x00", 8));
  EXPECT_EQ(read_error(file), file.string() +
                                  ": bad magic at offset 0: found \"PK\\x03\\x04\\x14\\x00\", "
                                  "expected \"\\x93NUMPY\" followed by a version");
  const fs::path no_version = write_bytes("no_version.npy", "\x93NUMPY\x01");
  EXPECT_EQ(read_error(no_version),
            no_version.string() +
                ": truncated header: the version at offset 6 needs 2 bytes, file holds 1");
  const fs::path short_file = write_bytes("short.npy", "\x93NUM");
  EXPECT_NE(read_error(short_file).find("bad magic at offset 0: found \"\\x93NUM\""),
            std::string::npos);
}

TEST_F(NpyTest, UnsupportedVersion) {
  const std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }";
  const fs::path file = write_npy_file("v4.npy", 4, header, raw<int32_t>({1}));
  EXPECT_EQ(read_error(file),
            file.string() + ": unsupported version 4.0 at offset 6; expected 1.0, 2.0 or 3.0");
  std::string minor = read_bytes(path("v4.npy"));
  minor[6] = 1;
  minor[7] = 1;
  EXPECT_NE(read_error(write_bytes("v11.npy", minor)).find("unsupported version 1.1"),
            std::string::npos);
}

TEST_F(NpyTest, HeaderLengthBeyondTheFile) {
  std::string bytes("\x93NUMPY\x01\x00\xff\x00{'descr'", 17);
  const fs::path file = write_bytes("long.npy", bytes);
  EXPECT_EQ(read_error(file), file.string() +
                                  ": header length 255 (at offset 8) runs past the end of the "
                                  "file: the header would end at byte 265, file holds 17 bytes");
  const fs::path cut = write_bytes("cut.npy", std::string("\x93NUMPY\x02\x00\x10\x00", 10));
  EXPECT_EQ(read_error(cut), cut.string() +
                                 ": truncated header: the header length at offset 8 needs 4 "
                                 "bytes, file holds 2");
}

TEST_F(NpyTest, HeaderNotADict) {
  const fs::path file = write_npy_file("list.npy", 1, "[1, 2]\n", "");
  EXPECT_EQ(
      read_error(file),
      file.string() + ": header at offset 10: expected '{' opening the header dict, found '['");
  const fs::path unclosed = write_npy_file("unclosed.npy", 1, "{'descr': '<f4', 'shape': (3,)", "");
  EXPECT_EQ(read_error(unclosed), unclosed.string() +
                                      ": header at offset 40: expected ',' or '}' after the "
                                      "value of 'shape', found the end of the header");
  const fs::path garbage = write_npy_file("garbage.npy", 1, "{'descr': <f4}", "");
  EXPECT_EQ(read_error(garbage),
            garbage.string() +
                ": header at offset 20: expected a string, True, False, an integer or a tuple, "
                "found '<'");
}

TEST_F(NpyTest, MissingAndUnexpectedKeys) {
  const fs::path missing =
      write_npy_file("missing.npy", 1, "{'descr': '<f4', 'fortran_order': False}", "");
  EXPECT_EQ(read_error(missing),
            missing.string() +
                ": header is missing key 'shape'; expected 'descr', 'fortran_order' and 'shape'");
  const fs::path extra = write_npy_file(
      "extra.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'x': 1}", "");
  EXPECT_NE(read_error(extra).find("header has unexpected key 'x'"), std::string::npos);
  const fs::path twice = write_npy_file(
      "twice.npy", 1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}", "");
  EXPECT_EQ(read_error(twice), twice.string() + ": header at offset 27: duplicate key 'descr'");
}

TEST_F(NpyTest, BadOrUnsupportedDescr) {
  auto descr_error = [&](const std::string& descr) {
    return read_error(write_npy_file(
        "d.npy", 1, "{'descr': " + descr + ", 'fortran_order': False, 'shape': (1,)}", "\0\0\0\0"));
  };
  const std::string expected_list =
      "; expected one of '<f2' '<f4' '<f8' '|i1' '<i2' '<i4' '<i8' '|u1' '<u2' '<u4' '<u8' '|b1' "
      "(or '>' for big-endian)";
  EXPECT_EQ(descr_error("'<c8'"), path("d.npy").string() +
                                      ": header field 'descr': unsupported dtype '<c8' (complex)" +
                                      expected_list);
  EXPECT_NE(descr_error("'|O'").find("unsupported dtype '|O' (Python objects)"), std::string::npos);
  EXPECT_NE(descr_error("'<U4'").find("unsupported dtype '<U4' (strings)"), std::string::npos);
  EXPECT_NE(descr_error("'<f3'").find("unsupported dtype '<f3';"), std::string::npos);
  EXPECT_NE(descr_error("'f4'").find("unsupported dtype 'f4' (no byte order character"),
            std::string::npos);
  EXPECT_NE(descr_error("'|f4'").find("needs byte order '<' or '>', not '|'"), std::string::npos);
  EXPECT_NE(descr_error("[('a', '<f4')]").find("describes a structured dtype"), std::string::npos);
}

TEST_F(NpyTest, BadFortranOrderOrShape) {
  const fs::path fortran = write_npy_file(
      "fo.npy", 1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}", "\0\0\0\0");
  EXPECT_EQ(read_error(fortran),
            fortran.string() + ": header field 'fortran_order': expected True or False");
  const fs::path list = write_npy_file(
      "list.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': [1]}", "\0\0\0\0");
  EXPECT_EQ(read_error(list), list.string() +
                                  ": header field 'shape': expected a tuple of integers such as "
                                  "(3,)");
  const fs::path negative = write_npy_file(
      "neg.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1)}", "");
  EXPECT_EQ(read_error(negative), negative.string() +
                                      ": header field 'shape': expected non-negative integers, "
                                      "found -1");
  const fs::path huge = write_npy_file(
      "huge.npy", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
      "");
  EXPECT_NE(read_error(huge).find("holds more bytes than a 64-bit size"), std::string::npos);
}

TEST_F(NpyTest, TruncatedData) {
  write_npy(path("a.npy"), Tensor(DType::kF32, {4, 8}));
  const std::string bytes = read_bytes(path("a.npy"));
  ASSERT_EQ(bytes.size(), 128u + 128u);
  const fs::path file = write_bytes("a.npy", bytes.substr(0, 128 + 100));
  EXPECT_EQ(read_error(file),
            file.string() +
                ": truncated data: header declares shape (4, 8) float32 = 128 bytes of data "
                "from offset 128, file holds 100");
}

TEST_F(NpyTest, TrailingBytesAfterTheData) {
  write_npy(path("a.npy"), Tensor(DType::kF32, {4, 8}));
  const fs::path file = write_bytes("a.npy", read_bytes(path("a.npy")) + "xyz");
  EXPECT_EQ(read_error(file),
            file.string() +
                ": 3 extra trailing bytes after the data: header declares shape (4, 8) float32 = "
                "128 bytes of data from offset 128, file holds 131");
}

// Regression guard for the reader's bounds checks: every prefix of a valid file, and every header
// byte replaced by a few values, must either read or throw Error(kInput), never anything else.
TEST_F(NpyTest, TruncatedOrCorruptedFilesOnlyEverThrowInputErrors) {
  Tensor tensor(DType::kI16, {3, 2});
  write_npy(path("valid.npy"), tensor);
  const std::string valid = read_bytes(path("valid.npy"));
  auto read_outcome = [&](const std::string& bytes) {
    const fs::path file = write_bytes("mutated.npy", bytes);
    try {
      read_npy(file);
      return true;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInput) << error.message();
      return false;
    }
  };
  for (size_t length = 0; length < valid.size(); ++length) {
    EXPECT_FALSE(read_outcome(valid.substr(0, length))) << "prefix of " << length << " bytes";
  }
  for (size_t position = 0; position < 128; ++position) {
    for (char replacement : {'\0', '\xff', ' ', '\'', '(', '}', ',', '9', '-'}) {
      std::string corrupted = valid;
      corrupted[position] = replacement;
      read_outcome(corrupted);
    }
  }
}

}  // namespace
}  // namespace loupe
