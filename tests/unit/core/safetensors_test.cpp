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

class SafetensorsTest : public ScratchDirTest {
 protected:
  // A .safetensors file: the length of `header` (verbatim JSON), the header, then `data`.
  fs::path write_file(const std::string& name, const std::string& header,
                      const std::string& data) const {
    std::string bytes;
    for (size_t byte = 0; byte < 8; ++byte) {
      bytes += static_cast<char>((header.size() >> (8 * byte)) & 0xff);
    }
    return write_bytes(name, bytes + header + data);
  }

  std::string read_error(const fs::path& file) const {
    try {
      read_safetensors(file);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInput);
      return error.message();
    }
    ADD_FAILURE() << "reading " << file << " did not throw";
    return {};
  }
};

std::string tensor_bytes(const Tensor& tensor) {
  return std::string(reinterpret_cast<const char*>(tensor.bytes()), tensor.nbytes());
}

Tensor patterned(DType dtype, std::vector<int64_t> shape, int seed) {
  Tensor tensor(dtype, std::move(shape));
  std::byte* bytes = tensor.mutable_bytes();
  for (size_t index = 0; index < tensor.nbytes(); ++index) {
    bytes[index] = dtype == DType::kBool ? static_cast<std::byte>((index + seed) % 2)
                                         : static_cast<std::byte>((index * 29 + seed) & 0xff);
  }
  return tensor;
}

TEST_F(SafetensorsTest, EveryDTypeRoundTripsInOneFile) {
  std::vector<NamedTensor> tensors;
  int seed = 0;
  for (DType dtype : kAllDTypes) {
    tensors.push_back({"t_" + std::string(dtype_name(dtype)), patterned(dtype, {3, 5}, seed++)});
  }
  tensors.push_back({"scalar", patterned(DType::kF64, {}, 1)});
  tensors.push_back({"nothing", Tensor(DType::kF32, {0, 4})});
  write_safetensors(path("all.safetensors"), tensors);
  const std::vector<NamedTensor> loaded = read_safetensors(path("all.safetensors"));
  ASSERT_EQ(loaded.size(), tensors.size());
  for (size_t index = 0; index < tensors.size(); ++index) {
    EXPECT_EQ(loaded[index].name, tensors[index].name);
    EXPECT_EQ(loaded[index].tensor.dtype(), tensors[index].tensor.dtype()) << tensors[index].name;
    EXPECT_EQ(loaded[index].tensor.shape(), tensors[index].tensor.shape()) << tensors[index].name;
    EXPECT_EQ(tensor_bytes(loaded[index].tensor), tensor_bytes(tensors[index].tensor))
        << tensors[index].name;
  }
}

TEST_F(SafetensorsTest, WritesTheReferenceLayout) {
  Tensor tensor(DType::kF32, {2});
  tensor.mutable_data<float>()[0] = 1.0f;
  write_safetensors(path("a.safetensors"), {{"a", tensor}});
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_EQ(header.size(), 54u);
  std::string expected("\x38\0\0\0\0\0\0\0", 8);  // padded to 56
  expected += header + "  ";
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\x00", 8);
  EXPECT_EQ(read_bytes(path("a.safetensors")), expected);
}

TEST_F(SafetensorsTest, ReturnsTensorsInDataOffsetOrderAndAcceptsMetadata) {
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("second":{"dtype":"I16","shape":[1],"data_offsets":[4,6]},)"
                             R"("first":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                             R"("third":{"dtype":"BF16","shape":[2],"data_offsets":[6,10]}})";
  std::string data;
  const float first = -2.0f;
  const int16_t second = 300;
  data.append(reinterpret_cast<const char*>(&first), 4);
  data.append(reinterpret_cast<const char*>(&second), 2);
  data += std::string("\x80\x3f\x80\xff", 4);  // bf16 1.0, -inf
  const std::vector<NamedTensor> tensors =
      read_safetensors(write_file("ordered.safetensors", header, data));
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0].name, "first");
  EXPECT_EQ(tensors[0].tensor.rank(), 0);
  EXPECT_EQ(tensors[0].tensor.data<float>()[0], -2.0f);
  EXPECT_EQ(tensors[1].name, "second");
  EXPECT_EQ(tensors[1].tensor.data<int16_t>()[0], 300);
  EXPECT_EQ(tensors[2].name, "third");
  EXPECT_EQ(tensors[2].tensor.element_as_double(0), 1.0);
  EXPECT_EQ(tensors[2].tensor.element_as_double(1), -std::numeric_limits<double>::infinity());
}

TEST_F(SafetensorsTest, KeepsNaNAndInfinityInFp8AndHalfFormats) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  Tensor source(DType::kF64, {4});
  auto values = source.mutable_data<double>();
  values[0] = std::numeric_limits<double>::quiet_NaN();
  values[1] = kInf;
  values[2] = -kInf;
  values[3] = 0.375;
  std::vector<NamedTensor> tensors;
  for (DType dtype : {DType::kF16, DType::kBF16, DType::kF8E5M2, DType::kF8E4M3}) {
    tensors.push_back({std::string(dtype_name(dtype)), source.converted(dtype)});
  }
  write_safetensors(path("special.safetensors"), tensors);
  for (const NamedTensor& named : read_safetensors(path("special.safetensors"))) {
    EXPECT_TRUE(std::isnan(named.tensor.element_as_double(0))) << named.name;
    if (named.tensor.dtype() == DType::kF8E4M3) {
      EXPECT_TRUE(std::isnan(named.tensor.element_as_double(1)));  // no infinity in e4m3fn
    } else {
      EXPECT_EQ(named.tensor.element_as_double(1), kInf) << named.name;
      EXPECT_EQ(named.tensor.element_as_double(2), -kInf) << named.name;
    }
    EXPECT_EQ(named.tensor.element_as_double(3), 0.375) << named.name;
  }
}

TEST_F(SafetensorsTest, LargeFilesAreMappedAndOutliveTheFile) {
  Tensor big(DType::kBF16, {1024, 1024});  // 2 MiB
  auto bytes = big.mutable_bytes();
  for (size_t index = 0; index < big.nbytes(); ++index) {
    bytes[index] = static_cast<std::byte>(index % 251);
  }
  write_safetensors(path("big.safetensors"), {{"big", big}, {"small", Tensor(DType::kU8, {3})}});
  std::vector<NamedTensor> loaded = read_safetensors(path("big.safetensors"));
  fs::remove(path("big.safetensors"));
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_THROW(loaded[0].tensor.mutable_bytes(), Error);  // a view of the mapping
  const Tensor kept = loaded[0].tensor;
  loaded.clear();
  EXPECT_EQ(tensor_bytes(kept), tensor_bytes(big));
  // A tensor whose data is not aligned to its element size (after 3 bytes) is copied instead.
  write_safetensors(path("odd.safetensors"), {{"small", Tensor(DType::kU8, {3})}, {"big", big}});
  std::vector<NamedTensor> odd = read_safetensors(path("odd.safetensors"));
  EXPECT_NO_THROW(odd[1].tensor.mutable_bytes());
  EXPECT_EQ(tensor_bytes(odd[1].tensor), tensor_bytes(big));
  // Small files are copied.
  write_safetensors(path("small.safetensors"), {{"x", Tensor(DType::kF32, {2})}});
  EXPECT_NO_THROW(read_safetensors(path("small.safetensors"))[0].tensor.mutable_bytes());
}

TEST_F(SafetensorsTest, WriteRefusesDuplicateAndReservedNames) {
  const Tensor tensor(DType::kF32, {1});
  try {
    write_safetensors(path("dup.safetensors"), {{"w", tensor}, {"w", tensor}});
    ADD_FAILURE();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_EQ(error.message(),
              path("dup.safetensors").string() + ": cannot write two tensors named 'w'");
  }
  EXPECT_THROW(write_safetensors(path("m.safetensors"), {{"__metadata__", tensor}}), Error);
  EXPECT_THROW(write_safetensors(path("e.safetensors"), {{"e", Tensor()}}), Error);
  try {
    write_safetensors(path("utf8.safetensors"), {{"bad\xff", tensor}});
    ADD_FAILURE();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_EQ(error.hint(), "tensor names must be valid UTF-8");
  }
}

// --- malformed input ---------------------------------------------------------------------------

TEST_F(SafetensorsTest, MissingEmptyAndShortFiles) {
  EXPECT_EQ(read_error(path("absent.safetensors")),
            path("absent.safetensors").string() + ": cannot open: No such file or directory");
  const fs::path empty = write_bytes("empty.safetensors", "");
  EXPECT_EQ(read_error(empty), empty.string() +
                                   ": empty file (expected a .safetensors file: an 8-byte header "
                                   "length, then a JSON header)");
  const fs::path short_file = write_bytes("short.safetensors", "abc");
  EXPECT_EQ(read_error(short_file),
            short_file.string() +
                ": truncated: the header length at offset 0 needs 8 bytes, file holds 3");
}

TEST_F(SafetensorsTest, HeaderLengthBeyondTheFile) {
  std::string bytes("\x00\x10\x00\x00\x00\x00\x00\x00{}", 10);
  const fs::path file = write_bytes("long.safetensors", bytes);
  EXPECT_EQ(read_error(file), file.string() +
                                  ": header length 4096 (at offset 0) runs past the end of the "
                                  "file: only 2 bytes follow it");
  const fs::path huge = write_bytes("huge.safetensors", std::string(8, '\xff') + "{}");
  EXPECT_NE(read_error(huge).find("header length 18446744073709551615"), std::string::npos);
}

TEST_F(SafetensorsTest, InvalidJson) {
  const fs::path file = write_file("bad.safetensors", R"({"a": {"dtype": "F32",,}})", "");
  const std::string message = read_error(file);
  EXPECT_EQ(
      message.rfind(file.string() + ": invalid JSON header (bytes 8 to 33), near offset 30: ", 0),
      0u)
      << message;
  const fs::path array = write_file("array.safetensors", "[1, 2]", "");
  EXPECT_EQ(read_error(array),
            array.string() + ": header at offset 8: expected a JSON object, found array");
}

TEST_F(SafetensorsTest, TensorListedTwice) {
  const fs::path file = write_file("twice.safetensors",
                                   R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                   R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                   "xy");
  EXPECT_EQ(read_error(file), file.string() + ": header at offset 8: tensor 'a' is listed twice");
  // The same key inside different tensors' objects is fine.
  const fs::path nested = write_file("nested.safetensors",
                                     R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                     R"("b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                     "xy");
  EXPECT_EQ(read_safetensors(nested).size(), 2u);
}

TEST_F(SafetensorsTest, BadEntries) {
  auto entry_error = [&](const std::string& entry, const std::string& data = "") {
    return read_error(write_file("e.safetensors", R"({"w": )" + entry + "}", data));
  };
  const std::string prefix = path("e.safetensors").string() + ": header, tensor 'w': ";
  EXPECT_EQ(entry_error("3"),
            prefix + "expected an object with dtype, shape and data_offsets, found number");
  EXPECT_EQ(entry_error(R"({"shape": [1], "data_offsets": [0, 4]})"),
            prefix + "field 'dtype' is missing or not a string");
  EXPECT_EQ(entry_error(R"({"dtype": "C64", "shape": [1], "data_offsets": [0, 8]})"),
            prefix +
                "unknown dtype \"C64\"; expected one of BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 "
                "BF16 I32 U32 F32 F64 I64 U64");
  EXPECT_EQ(entry_error(R"({"dtype": "F32", "data_offsets": [0, 4]})"),
            prefix + "field 'shape' is missing or not an array");
  EXPECT_EQ(entry_error(R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})"),
            path("e.safetensors").string() +
                ": header, tensor 'w', field 'shape': expected a non-negative integer, found -1");
  EXPECT_EQ(entry_error(R"({"dtype": "F32", "shape": [1], "data_offsets": [0]})"),
            prefix + "field 'data_offsets' is missing or not [begin, end]");
  EXPECT_EQ(entry_error(R"({"dtype": "F32", "shape": [1], "data_offsets": [4, 0]})"),
            prefix + "data_offsets [4, 0] end before they begin");
  EXPECT_EQ(entry_error(R"({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 12]})",
                        std::string(12, '\0')),
            prefix + "data_offsets [0, 12] span 12 bytes, but shape (2, 3) float32 needs 24");
  EXPECT_EQ(read_error(write_file("meta.safetensors", R"({"__metadata__": {"n": 1}})", "")),
            path("meta.safetensors").string() +
                ": header field '__metadata__', key 'n': expected a string, found 1");
}

TEST_F(SafetensorsTest, OffsetsOutOfRangeOverlappingOrLeavingGaps) {
  const std::string data(8, '\0');
  const fs::path out_of_range = write_file(
      "range.safetensors", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})", data);
  EXPECT_EQ(read_error(out_of_range),
            out_of_range.string() +
                ": tensor 'w': data_offsets [0, 12] run past the data buffer of 8 bytes (file "
                "offset 63 to 71)");
  const fs::path overlap = write_file("overlap.safetensors",
                                      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                      R"("b":{"dtype":"I32","shape":[1],"data_offsets":[4,8]}})",
                                      data);
  EXPECT_EQ(read_error(overlap), overlap.string() + ": tensors 'a' [0, 8] and 'b' [4, 8] overlap");
  const fs::path gap = write_file(
      "gap.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data);
  EXPECT_EQ(read_error(gap), gap.string() +
                                 ": gap of 4 bytes in the data buffer before tensor 'a' [4, 8]; "
                                 "expected the tensors to follow each other");
  const fs::path trailing = write_file(
      "trailing.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", data);
  EXPECT_EQ(read_error(trailing),
            trailing.string() +
                ": 4 extra trailing bytes after the last tensor: the data buffer holds 8 bytes "
                "from offset 62, the tensors cover 4");
}

// Every prefix of a valid file, and every header byte replaced by a few values, must either read
// or throw Error(kInput), never another exception (nlohmann's included).
TEST_F(SafetensorsTest, TruncatedOrCorruptedFilesOnlyEverThrowInputErrors) {
  write_safetensors(path("valid.safetensors"),
                    {{"a", Tensor(DType::kF32, {2})}, {"b", Tensor(DType::kBF16, {1, 3})}});
  const std::string valid = read_bytes(path("valid.safetensors"));
  auto read_outcome = [&](const std::string& bytes) {
    const fs::path file = write_bytes("mutated.safetensors", bytes);
    try {
      read_safetensors(file);
      return true;
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInput) << error.message();
      return false;
    }
  };
  for (size_t length = 0; length < valid.size(); ++length) {
    EXPECT_FALSE(read_outcome(valid.substr(0, length))) << "prefix of " << length << " bytes";
  }
  const size_t header_end = valid.size() - 14;
  for (size_t position = 0; position < header_end; ++position) {
    for (char replacement : {'\0', '\xff', ' ', '"', '[', '}', ',', '9', '-'}) {
      std::string corrupted = valid;
      corrupted[position] = replacement;
      read_outcome(corrupted);
    }
  }
}

}  // namespace
}  // namespace loupe
