// .npy reading and writing (numpy's format, versions 1.0, 2.0 and 3.0).
//
// Layout: "\x93NUMPY", major, minor, header length (uint16 LE for 1.0, uint32 LE for 2.0/3.0),
// then a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), } padded
// with spaces and a newline, then the raw elements.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.hpp"
#include "core/tensor_file_bytes.hpp"
#include "loupe/error.hpp"
#include "loupe/tensor.hpp"

namespace loupe {

namespace {

constexpr std::string_view kMagic("\x93NUMPY", 6);
// Files above this size, native and in C order, are handed out as views of their mapping.
constexpr size_t kMapThresholdBytes = size_t{1} << 20;

// Printable form of raw bytes for messages: ASCII as is, anything else as \xNN.
std::string escape_bytes(const std::byte* data, size_t size) {
  std::string text;
  for (size_t index = 0; index < size; ++index) {
    const auto byte = static_cast<unsigned char>(data[index]);
    if (byte >= 0x20 && byte < 0x7f && byte != '\\') {
      text += static_cast<char>(byte);
    } else {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\x%02x", byte);
      text += buffer;
    }
  }
  return text;
}

Error input_error(const std::string& file, const std::string& what, std::string hint = {}) {
  return Error(ErrorCode::kInput, file + ": " + what, std::move(hint));
}

// A value of the Python literal subset that .npy headers use.
struct PyValue {
  enum class Kind { kString, kBool, kInt, kNone, kTuple, kList, kDict } kind = Kind::kNone;
  std::string text;  // kString
  bool boolean = false;
  int64_t integer = 0;
  std::vector<PyValue> items;  // kTuple, kList (kDict values are not kept: never needed nested)
};

// Recursive-descent parser of the header dict; positions in messages are file byte offsets.
class HeaderParser {
 public:
  HeaderParser(const std::string& file, std::string_view text, size_t file_offset)
      : file_(file), text_(text), file_offset_(file_offset) {}

  std::map<std::string, PyValue> parse_dict() {
    skip_space();
    expect('{', "'{' opening the header dict");
    std::map<std::string, PyValue> entries;
    while (true) {
      skip_space();
      if (peek() == '}') {
        ++position_;
        break;
      }
      const size_t key_offset = offset();
      if (peek() != '\'' && peek() != '"') fail("a quoted key or '}'");
      std::string key = parse_string();
      skip_space();
      expect(':', "':' after key '" + key + "'");
      PyValue value = parse_value();
      if (!entries.emplace(key, std::move(value)).second) {
        throw input_error(file_, "header at offset " + std::to_string(key_offset) +
                                     ": duplicate key '" + key + "'");
      }
      skip_space();
      if (peek() == ',') {
        ++position_;
        continue;
      }
      expect('}', "',' or '}' after the value of '" + key + "'");
      break;
    }
    skip_space();
    if (position_ != text_.size()) fail("only spaces and a newline after the header dict");
    return entries;
  }

 private:
  size_t offset() const { return file_offset_ + position_; }
  char peek() const { return position_ < text_.size() ? text_[position_] : '\0'; }

  std::string found() const {
    if (position_ >= text_.size()) return "the end of the header";
    return "'" + escape_bytes(reinterpret_cast<const std::byte*>(text_.data() + position_), 1) +
           "'";
  }

  [[noreturn]] void fail(const std::string& expected) const {
    throw input_error(file_, "header at offset " + std::to_string(offset()) + ": expected " +
                                 expected + ", found " + found());
  }

  void expect(char c, const std::string& expected) {
    if (peek() != c) fail(expected);
    ++position_;
  }

  void skip_space() {
    while (position_ < text_.size() && (text_[position_] == ' ' || text_[position_] == '\t' ||
                                        text_[position_] == '\n' || text_[position_] == '\r')) {
      ++position_;
    }
  }

  std::string parse_string() {
    const char quote = text_[position_++];
    std::string value;
    while (position_ < text_.size() && text_[position_] != quote) {
      if (text_[position_] == '\\') fail("a string without escapes");
      value += text_[position_++];
    }
    if (position_ >= text_.size()) fail(std::string("a closing ") + quote);
    ++position_;
    return value;
  }

  PyValue parse_value() {
    skip_space();
    PyValue value;
    const char c = peek();
    if (c == '\'' || c == '"') {
      value.kind = PyValue::Kind::kString;
      value.text = parse_string();
    } else if (c == '(' || c == '[') {
      // A shape is one tuple; anything nested deeper is not a header numpy writes, and an
      // unbounded descent would overflow the stack (a header of 50,000 '(' did).
      if (depth_ == kMaxHeaderNesting) {
        fail("at most " + std::to_string(kMaxHeaderNesting) +
             " nested tuples or lists (a header value nests one tuple)");
      }
      ++depth_;
      value.kind = c == '(' ? PyValue::Kind::kTuple : PyValue::Kind::kList;
      const char close = c == '(' ? ')' : ']';
      ++position_;
      while (true) {
        skip_space();
        if (peek() == close) {
          ++position_;
          break;
        }
        value.items.push_back(parse_value());
        skip_space();
        if (peek() == ',') {
          ++position_;
          continue;
        }
        expect(close, std::string("',' or '") + close + "'");
        break;
      }
      --depth_;
    } else if (c == '{') {
      fail("a string, True, False, an integer or a tuple (nested dicts are structured dtypes)");
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      value.kind = PyValue::Kind::kInt;
      const bool negative = c == '-';
      if (negative) ++position_;
      if (!(peek() >= '0' && peek() <= '9')) fail("a digit");
      uint64_t magnitude = 0;
      while (peek() >= '0' && peek() <= '9') {
        const uint64_t digit = static_cast<uint64_t>(peek() - '0');
        if (magnitude > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - digit) / 10) {
          fail("an integer that fits in 64 bits");
        }
        magnitude = magnitude * 10 + digit;
        ++position_;
      }
      if (peek() == 'L') ++position_;  // Python 2 long suffix, written by old numpy
      value.integer = negative ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
    } else {
      for (std::string_view word : {"True", "False", "None"}) {
        if (text_.substr(position_, word.size()) == word) {
          position_ += word.size();
          value.kind = word == "None" ? PyValue::Kind::kNone : PyValue::Kind::kBool;
          value.boolean = word == "True";
          return value;
        }
      }
      fail("a string, True, False, an integer or a tuple");
    }
    return value;
  }

  static constexpr size_t kMaxHeaderNesting = 8;

  const std::string& file_;
  std::string_view text_;
  size_t file_offset_;
  size_t position_ = 0;
  size_t depth_ = 0;  // tuples and lists open at position_
};

struct NpyDescr {
  DType dtype;
  bool big_endian;
};

NpyDescr parse_descr(const std::string& file, const std::string& descr) {
  constexpr std::string_view kSupported =
      "'<f2' '<f4' '<f8' '|i1' '<i2' '<i4' '<i8' '|u1' '<u2' '<u4' '<u8' '|b1' (or '>' for "
      "big-endian)";
  auto unsupported = [&](const std::string& why) {
    return input_error(file,
                       "header field 'descr': unsupported dtype '" + descr + "'" + why +
                           "; expected one of " + std::string(kSupported),
                       "convert the array with numpy (a.astype(np.float32)) before saving");
  };
  if (descr.size() < 2) throw unsupported("");
  const char order = descr[0];
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    throw unsupported(" (no byte order character '<', '>', '|' or '=')");
  }
  const std::string code = descr.substr(1);
  static const std::map<std::string, DType> kCodes = {
      {"f2", DType::kF16}, {"f4", DType::kF32}, {"f8", DType::kF64}, {"i1", DType::kI8},
      {"i2", DType::kI16}, {"i4", DType::kI32}, {"i8", DType::kI64}, {"u1", DType::kU8},
      {"u2", DType::kU16}, {"u4", DType::kU32}, {"u8", DType::kU64}, {"b1", DType::kBool}};
  const auto found = kCodes.find(code);
  if (found == kCodes.end()) {
    const char kind = code.empty() ? '\0' : code[0];
    std::string why = kind == 'c'                  ? " (complex)"
                      : kind == 'O'                ? " (Python objects)"
                      : kind == 'U' || kind == 'S' ? " (strings)"
                      : kind == 'V'                ? " (raw or structured records)"
                      : kind == 'M' || kind == 'm' ? " (dates)"
                                                   : "";
    throw unsupported(why);
  }
  const DType dtype = found->second;
  if (order == '|' && dtype_size(dtype) != 1) {
    throw unsupported(" (a multi-byte type needs byte order '<' or '>', not '|')");
  }
  return {dtype, order == '>' && dtype_size(dtype) > 1};
}

void byte_swap_elements(std::byte* data, size_t count, size_t element_size) {
  if (element_size == 1) return;
  for (size_t index = 0; index < count; ++index) {
    std::reverse(data + index * element_size, data + (index + 1) * element_size);
  }
}

// Copies Fortran-ordered (first axis fastest) elements into C order.
void fortran_to_c_order(const std::byte* source, std::byte* destination,
                        const std::vector<int64_t>& shape, size_t element_size) {
  const size_t rank = shape.size();
  std::vector<int64_t> c_strides(rank, 1);
  for (size_t axis = rank; axis-- > 1;) c_strides[axis - 1] = c_strides[axis] * shape[axis];
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  std::vector<int64_t> index(rank, 0);
  int64_t destination_element = 0;
  for (int64_t source_element = 0; source_element < count; ++source_element) {
    std::memcpy(destination + static_cast<size_t>(destination_element) * element_size,
                source + static_cast<size_t>(source_element) * element_size, element_size);
    for (size_t axis = 0; axis < rank; ++axis) {
      destination_element += c_strides[axis];
      if (++index[axis] < shape[axis]) break;
      destination_element -= c_strides[axis] * shape[axis];
      index[axis] = 0;
    }
  }
}

uint64_t read_le(const std::byte* data, size_t size) {
  uint64_t value = 0;
  for (size_t index = size; index-- > 0;) {
    value = (value << 8) | static_cast<uint64_t>(data[index]);
  }
  return value;
}

std::string npy_descr(const std::string& file, DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return "|b1";
    case DType::kI8:
      return "|i1";
    case DType::kI16:
      return "<i2";
    case DType::kI32:
      return "<i4";
    case DType::kI64:
      return "<i8";
    case DType::kU8:
      return "|u1";
    case DType::kU16:
      return "<u2";
    case DType::kU32:
      return "<u4";
    case DType::kU64:
      return "<u8";
    case DType::kF16:
      return "<f2";
    case DType::kF32:
      return "<f4";
    case DType::kF64:
      return "<f8";
    case DType::kBF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      break;
  }
  throw input_error(file,
                    "cannot write a " + std::string(dtype_name(dtype)) +
                        " tensor: .npy has no dtype for " + std::string(dtype_name(dtype)),
                    "write .safetensors instead, or convert the tensor (converted(DType::kF32))");
}

}  // namespace

Tensor read_npy(const std::filesystem::path& path) {
  const std::string file = path.string();
  const std::shared_ptr<const MappedFile> mapping = MappedFile::open(path);
  const std::byte* bytes = mapping->data();
  const size_t size = mapping->size();
  if (size == 0) {
    throw input_error(file, "empty file (expected a .npy file starting with \"\\x93NUMPY\")");
  }
  const size_t magic_checked = std::min(size, kMagic.size());
  if (size < kMagic.size() || std::memcmp(bytes, kMagic.data(), magic_checked) != 0) {
    throw input_error(file,
                      "bad magic at offset 0: found \"" + escape_bytes(bytes, magic_checked) +
                          "\", expected \"\\x93NUMPY\" followed by a version",
                      "is this a .npy file? .npz archives and pickles are not read");
  }
  if (size < kMagic.size() + 2) {
    throw input_error(file, "truncated header: the version at offset 6 needs 2 bytes, file holds " +
                                std::to_string(size - kMagic.size()));
  }
  const int major = static_cast<int>(bytes[6]);
  const int minor = static_cast<int>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0) {
    throw input_error(file, "unsupported version " + std::to_string(major) + "." +
                                std::to_string(minor) + " at offset 6; expected 1.0, 2.0 or 3.0");
  }
  const size_t length_size = major == 1 ? 2 : 4;
  if (size < 8 + length_size) {
    throw input_error(file, "truncated header: the header length at offset 8 needs " +
                                std::to_string(length_size) + " bytes, file holds " +
                                std::to_string(size - 8));
  }
  const size_t header_length = read_le(bytes + 8, length_size);
  const size_t header_offset = 8 + length_size;
  if (header_length > size - header_offset) {
    throw input_error(file, "header length " + std::to_string(header_length) +
                                " (at offset 8) runs past the end of the file: the header would "
                                "end at byte " +
                                std::to_string(header_offset + header_length) + ", file holds " +
                                std::to_string(size) + " bytes");
  }
  const std::string_view header_text(reinterpret_cast<const char*>(bytes + header_offset),
                                     header_length);
  const std::map<std::string, PyValue> header =
      HeaderParser(file, header_text, header_offset).parse_dict();

  for (const auto& [key, value] : header) {
    if (key != "descr" && key != "fortran_order" && key != "shape") {
      throw input_error(file, "header has unexpected key '" + key +
                                  "'; expected exactly 'descr', 'fortran_order' and 'shape'");
    }
  }
  for (const char* key : {"descr", "fortran_order", "shape"}) {
    if (header.find(key) == header.end()) {
      throw input_error(file, std::string("header is missing key '") + key +
                                  "'; expected 'descr', 'fortran_order' and 'shape'");
    }
  }
  const PyValue& descr_value = header.at("descr");
  if (descr_value.kind != PyValue::Kind::kString) {
    throw input_error(file,
                      "header field 'descr': expected a dtype string such as '<f4'; a list or "
                      "dict describes a structured dtype, which is not supported");
  }
  const NpyDescr descr = parse_descr(file, descr_value.text);
  const PyValue& fortran_value = header.at("fortran_order");
  if (fortran_value.kind != PyValue::Kind::kBool) {
    throw input_error(file, "header field 'fortran_order': expected True or False");
  }
  const PyValue& shape_value = header.at("shape");
  if (shape_value.kind != PyValue::Kind::kTuple) {
    throw input_error(file, "header field 'shape': expected a tuple of integers such as (3,)");
  }
  std::vector<int64_t> shape;
  int64_t count = 1;
  const size_t element_size = dtype_size(descr.dtype);
  for (const PyValue& extent : shape_value.items) {
    if (extent.kind != PyValue::Kind::kInt || extent.integer < 0) {
      throw input_error(file,
                        "header field 'shape': expected non-negative integers, found " +
                            (extent.kind == PyValue::Kind::kInt ? std::to_string(extent.integer)
                                                                : std::string("a non-integer")));
    }
    shape.push_back(extent.integer);
    if (extent.integer != 0 && count > std::numeric_limits<int64_t>::max() /
                                           static_cast<int64_t>(element_size) / extent.integer) {
      throw input_error(file, "header field 'shape': " + shape_to_string(shape) +
                                  " holds more bytes than a 64-bit size");
    }
    count *= extent.integer;
  }
  // Every extent is multiplied in, so the loop above also bounds count * element_size.
  const size_t data_offset = header_offset + header_length;
  const size_t data_bytes = static_cast<size_t>(count) * element_size;
  const size_t available = size - data_offset;
  if (available != data_bytes) {
    const std::string declared = "header declares shape " + shape_to_string(shape) + " " +
                                 std::string(dtype_name(descr.dtype)) + " = " +
                                 std::to_string(data_bytes) + " bytes of data from offset " +
                                 std::to_string(data_offset) + ", file holds " +
                                 std::to_string(available);
    if (available < data_bytes) throw input_error(file, "truncated data: " + declared);
    throw input_error(file, std::to_string(available - data_bytes) +
                                " extra trailing bytes after the data: " + declared);
  }

  const bool fortran = fortran_value.boolean;
  if (count == 0) return Tensor(descr.dtype, shape);
  const std::byte* data = bytes + data_offset;
  // Fortran order is the same layout as C order when at most one extent exceeds 1.
  const bool layout_is_c =
      !fortran || std::count_if(shape.begin(), shape.end(), [](int64_t e) { return e > 1; }) <= 1;
  const bool aligned = reinterpret_cast<uintptr_t>(data) % element_size == 0;
  if (!descr.big_endian && layout_is_c && aligned && size > kMapThresholdBytes) {
    return Tensor(descr.dtype, shape, mapping, data);
  }
  Tensor tensor(descr.dtype, shape);
  std::byte* destination = tensor.mutable_bytes();
  if (layout_is_c) {
    std::memcpy(destination, data, data_bytes);
  } else {
    fortran_to_c_order(data, destination, shape, element_size);
  }
  if (descr.big_endian) byte_swap_elements(destination, static_cast<size_t>(count), element_size);
  return tensor;
}

std::string npy_head(const std::string& file, const Tensor& tensor) {
  const std::string descr = npy_descr(file, tensor.dtype());
  if (tensor.rank() == 0 && tensor.bytes() == nullptr) {
    throw Error(ErrorCode::kInput,
                file + ": cannot write the empty (default-constructed) tensor: it has no shape",
                "build it with Tensor(dtype, shape); a 0-d tensor has shape {}");
  }
  std::string header = "{'descr': '" + descr +
                       "', 'fortran_order': False, 'shape': " + shape_to_string(tensor.shape()) +
                       ", }";
  // numpy pads so that the data starts on a 64-byte boundary; the header ends with '\n'.
  size_t prefix = kMagic.size() + 2 + 2;
  size_t padded = (prefix + header.size() + 1 + 63) / 64 * 64 - prefix;
  int major = 1;
  if (padded > std::numeric_limits<uint16_t>::max()) {
    major = 2;
    prefix = kMagic.size() + 2 + 4;
    padded = (prefix + header.size() + 1 + 63) / 64 * 64 - prefix;
  }
  header.append(padded - header.size() - 1, ' ');
  header += '\n';

  std::string preamble(kMagic);
  preamble += static_cast<char>(major);
  preamble += '\0';
  for (size_t byte = 0; byte < (major == 1 ? 2u : 4u); ++byte) {
    preamble += static_cast<char>((padded >> (8 * byte)) & 0xff);
  }
  return preamble + header;
}

void write_npy(const std::filesystem::path& path, const Tensor& tensor) {
  const std::string file = path.string();
  const std::string head = npy_head(file, tensor);
  std::FILE* stream = std::fopen(file.c_str(), "wb");
  if (stream == nullptr) {
    throw input_error(file, std::string("cannot open for writing: ") + std::strerror(errno));
  }
  bool ok = std::fwrite(head.data(), 1, head.size(), stream) == head.size();
  if (ok && tensor.nbytes() > 0) {
    ok = std::fwrite(tensor.bytes(), 1, tensor.nbytes(), stream) == tensor.nbytes();
  }
  const int write_errno = errno;
  if (std::fclose(stream) != 0) ok = false;
  if (!ok) {
    throw input_error(file, std::string("write failed: ") + std::strerror(write_errno));
  }
}

}  // namespace loupe
