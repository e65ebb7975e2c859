// .safetensors reading and writing.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// then the data buffer; offsets are relative to its start. As in the reference implementation,
// the tensors must tile the buffer exactly: no overlap, no gap, nothing after the last one.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "core/json.hpp"
#include "core/limits.hpp"
#include "core/mapped_file.hpp"
#include "core/tensor_file_bytes.hpp"
#include "loupe/error.hpp"
#include "loupe/tensor.hpp"

namespace loupe {

namespace {

// Files above this size hand out views of their mapping instead of copies.
constexpr size_t kSafetensorsMapThresholdBytes = size_t{1} << 20;

struct SafetensorsDType {
  std::string_view name;
  DType dtype;
};

constexpr SafetensorsDType kDTypes[] = {
    {"BOOL", DType::kBool},      {"U8", DType::kU8},          {"I8", DType::kI8},
    {"F8_E5M2", DType::kF8E5M2}, {"F8_E4M3", DType::kF8E4M3}, {"I16", DType::kI16},
    {"U16", DType::kU16},        {"F16", DType::kF16},        {"BF16", DType::kBF16},
    {"I32", DType::kI32},        {"U32", DType::kU32},        {"F32", DType::kF32},
    {"F64", DType::kF64},        {"I64", DType::kI64},        {"U64", DType::kU64}};

std::string_view safetensors_dtype_name(DType dtype) {
  for (const SafetensorsDType& entry : kDTypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  return "?";
}

Error safetensors_input_error(const std::string& file, const std::string& what,
                              std::string hint = {}) {
  return Error(ErrorCode::kInput, file + ": " + what, std::move(hint));
}

uint64_t read_le64(const std::byte* data) {
  uint64_t value = 0;
  for (size_t index = 8; index-- > 0;) value = (value << 8) | static_cast<uint64_t>(data[index]);
  return value;
}

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

std::string offsets_text(const Entry& entry) {
  return "[" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) + "]";
}

uint64_t nonnegative_integer(const std::string& file, const std::string& where, const Json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value.get<int64_t>());
  }
  throw safetensors_input_error(file,
                                where + ": expected a non-negative integer, found " + value.dump());
}

Entry parse_entry(const std::string& file, const std::string& name, const Json& value) {
  const std::string where = "header, tensor '" + name + "'";
  if (!value.is_object()) {
    throw safetensors_input_error(file,
                                  where +
                                      ": expected an object with dtype, shape and data_offsets, "
                                      "found " +
                                      std::string(value.type_name()));
  }
  Entry entry{name, DType::kF32, {}, 0, 0};
  const auto dtype_field = value.find("dtype");
  if (dtype_field == value.end() || !dtype_field->is_string()) {
    throw safetensors_input_error(file, where + ": field 'dtype' is missing or not a string");
  }
  const std::string dtype_text = dtype_field->get<std::string>();
  const auto known = std::find_if(std::begin(kDTypes), std::end(kDTypes),
                                  [&](const SafetensorsDType& d) { return d.name == dtype_text; });
  if (known == std::end(kDTypes)) {
    std::string names;
    for (const SafetensorsDType& d : kDTypes)
      names += (names.empty() ? "" : " ") + std::string(d.name);
    throw safetensors_input_error(
        file, where + ": unknown dtype \"" + dtype_text + "\"; expected one of " + names);
  }
  entry.dtype = known->dtype;
  const auto shape_field = value.find("shape");
  if (shape_field == value.end() || !shape_field->is_array()) {
    throw safetensors_input_error(file, where + ": field 'shape' is missing or not an array");
  }
  uint64_t count = 1;
  for (const Json& extent : *shape_field) {
    const uint64_t size = nonnegative_integer(file, where + ", field 'shape'", extent);
    if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (size != 0 && count > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) /
                                  dtype_size(entry.dtype) / size)) {
      throw safetensors_input_error(
          file, where + ": shape " + shape_field->dump() + " holds more bytes than a 64-bit size");
    }
    count *= size;
    entry.shape.push_back(static_cast<int64_t>(size));
  }
  const auto offsets_field = value.find("data_offsets");
  if (offsets_field == value.end() || !offsets_field->is_array() || offsets_field->size() != 2) {
    throw safetensors_input_error(file,
                                  where + ": field 'data_offsets' is missing or not [begin, end]");
  }
  entry.begin = nonnegative_integer(file, where + ", field 'data_offsets'", (*offsets_field)[0]);
  entry.end = nonnegative_integer(file, where + ", field 'data_offsets'", (*offsets_field)[1]);
  if (entry.end < entry.begin) {
    throw safetensors_input_error(
        file, where + ": data_offsets " + offsets_text(entry) + " end before they begin");
  }
  const uint64_t expected_bytes = count * dtype_size(entry.dtype);
  if (entry.end - entry.begin != expected_bytes) {
    throw safetensors_input_error(file, where + ": data_offsets " + offsets_text(entry) + " span " +
                                            std::to_string(entry.end - entry.begin) +
                                            " bytes, but shape " + shape_to_string(entry.shape) +
                                            " " + std::string(dtype_name(entry.dtype)) + " needs " +
                                            std::to_string(expected_bytes));
  }
  return entry;
}

// The JSON header of a mapped .safetensors file (validated as an object), and its length.
struct Header {
  Json json;
  uint64_t length = 0;
};

Header parse_header(const std::string& file, const MappedFile& mapping) {
  const std::byte* bytes = mapping.data();
  const size_t size = mapping.size();
  if (size == 0) {
    throw safetensors_input_error(
        file,
        "empty file (expected a .safetensors file: an 8-byte header length, then "
        "a JSON header)");
  }
  if (size < 8) {
    throw safetensors_input_error(
        file, "truncated: the header length at offset 0 needs 8 bytes, file holds " +
                  std::to_string(size));
  }
  const uint64_t header_length = read_le64(bytes);
  if (header_length > size - 8) {
    throw safetensors_input_error(file,
                                  "header length " + std::to_string(header_length) +
                                      " (at offset 0) runs past the end of the file: only " +
                                      std::to_string(size - 8) + " bytes follow it",
                                  "is this a .safetensors file?");
  }
  const char* header_begin = reinterpret_cast<const char*>(bytes + 8);
  Json header;
  // nlohmann keeps one of two equal keys silently; a tensor listed twice is an error.
  std::set<std::string> names_seen;
  const auto refuse_duplicate_names = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key &&
        !names_seen.insert(parsed.get<std::string>()).second) {
      throw safetensors_input_error(
          file, "header at offset 8: tensor '" + parsed.get<std::string>() + "' is listed twice");
    }
    return true;
  };
  // A header nests three levels; a deeply nested one would overflow nlohmann's recursion.
  check_json_nesting(std::string_view(header_begin, header_length), file + ": header at offset 8",
                     kMaxJsonDepth);
  try {
    header = Json::parse(header_begin, header_begin + header_length, refuse_duplicate_names);
  } catch (const Json::parse_error& error) {
    throw safetensors_input_error(
        file, "invalid JSON header (bytes 8 to " + std::to_string(8 + header_length) +
                  "), near offset " + std::to_string(8 + (error.byte > 0 ? error.byte - 1 : 0)) +
                  ": " + json_error_text(error));
  } catch (const Json::exception& error) {
    // Not only syntax: a number beyond double's range (1e400) is out_of_range 406 (fuzzing found
    // it escaping as an uncaught exception).
    throw safetensors_input_error(file, "invalid JSON header (bytes 8 to " +
                                            std::to_string(8 + header_length) +
                                            "): " + json_error_text(error));
  }
  if (!header.is_object()) {
    throw safetensors_input_error(file, "header at offset 8: expected a JSON object, found " +
                                            std::string(header.type_name()));
  }
  return {std::move(header), header_length};
}

}  // namespace

std::vector<NamedTensor> read_safetensors(const std::filesystem::path& path) {
  const std::string file = path.string();
  const std::shared_ptr<const MappedFile> mapping = MappedFile::open(path);
  const std::byte* bytes = mapping->data();
  const size_t size = mapping->size();
  Header parsed = parse_header(file, *mapping);
  const Json& header = parsed.json;
  const uint64_t header_length = parsed.length;

  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) {
        throw safetensors_input_error(file,
                                      "header field '__metadata__': expected an object of strings");
      }
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) {
          throw safetensors_input_error(file, "header field '__metadata__', key '" + key +
                                                  "': expected a string, found " + text.dump());
        }
      }
      continue;
    }
    entries.push_back(parse_entry(file, name, value));
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });

  const size_t data_offset = 8 + header_length;
  const uint64_t buffer_size = size - data_offset;
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    if (entry.end > buffer_size) {
      throw safetensors_input_error(
          file, "tensor '" + entry.name + "': data_offsets " + offsets_text(entry) +
                    " run past the data buffer of " + std::to_string(buffer_size) +
                    " bytes (file offset " + std::to_string(data_offset) + " to " +
                    std::to_string(size) + ")");
    }
    if (entry.begin < covered) {
      throw safetensors_input_error(file, "tensors '" + previous->name + "' " +
                                              offsets_text(*previous) + " and '" + entry.name +
                                              "' " + offsets_text(entry) + " overlap");
    }
    if (entry.begin > covered) {
      throw safetensors_input_error(file, "gap of " + std::to_string(entry.begin - covered) +
                                              " bytes in the data buffer before tensor '" +
                                              entry.name + "' " + offsets_text(entry) +
                                              "; expected the tensors to follow each other");
    }
    covered = entry.end;
    previous = &entry;
  }
  if (covered != buffer_size) {
    throw safetensors_input_error(
        file, std::to_string(buffer_size - covered) +
                  " extra trailing bytes after the last tensor: the data buffer "
                  "holds " +
                  std::to_string(buffer_size) + " bytes from offset " +
                  std::to_string(data_offset) + ", the tensors cover " + std::to_string(covered));
  }

  std::vector<NamedTensor> tensors;
  tensors.reserve(entries.size());
  for (const Entry& entry : entries) {
    const std::byte* data = bytes + data_offset + entry.begin;
    const size_t element_size = dtype_size(entry.dtype);
    const size_t byte_count = entry.end - entry.begin;
    NamedTensor named{entry.name, {}};
    if (byte_count > 0 && size > kSafetensorsMapThresholdBytes &&
        reinterpret_cast<uintptr_t>(data) % element_size == 0) {
      named.tensor = Tensor(entry.dtype, entry.shape, mapping, data);
    } else {
      named.tensor = Tensor(entry.dtype, entry.shape);
      if (byte_count > 0) std::memcpy(named.tensor.mutable_bytes(), data, byte_count);
    }
    tensors.push_back(std::move(named));
  }
  return tensors;
}

std::map<std::string, std::string> read_safetensors_metadata(const std::filesystem::path& path) {
  const std::string file = path.string();
  const std::shared_ptr<const MappedFile> mapping = MappedFile::open(path);
  const Header parsed = parse_header(file, *mapping);
  std::map<std::string, std::string> metadata;
  const auto found = parsed.json.find("__metadata__");
  if (found == parsed.json.end()) return metadata;
  if (!found->is_object()) {
    throw safetensors_input_error(file,
                                  "header field '__metadata__': expected an object of strings");
  }
  for (const auto& [key, text] : found->items()) {
    if (!text.is_string()) {
      throw safetensors_input_error(file, "header field '__metadata__', key '" + key +
                                              "': expected a string, found " + text.dump());
    }
    metadata[key] = text.get<std::string>();
  }
  return metadata;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors) {
  write_safetensors(path, tensors, {});
}

std::string safetensors_head(const std::string& file, const std::vector<NamedTensor>& tensors,
                             const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json object = Json::object();
    for (const auto& [key, value] : metadata) object[key] = value;
    header["__metadata__"] = std::move(object);
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const NamedTensor& named : tensors) {
    if (named.name == "__metadata__") {
      throw safetensors_input_error(
          file, "cannot write a tensor named '__metadata__': the name is reserved");
    }
    if (!names.insert(named.name).second) {
      throw safetensors_input_error(file, "cannot write two tensors named '" + named.name + "'");
    }
    if (named.tensor.rank() == 0 && named.tensor.bytes() == nullptr) {
      throw safetensors_input_error(
          file, "cannot write tensor '" + named.name +
                    "': it is the empty (default-constructed) tensor, with no shape");
    }
    Json entry = Json::object();
    entry["dtype"] = safetensors_dtype_name(named.tensor.dtype());
    entry["shape"] = named.tensor.shape();
    entry["data_offsets"] = Json::array({offset, offset + named.tensor.nbytes()});
    header[named.name] = std::move(entry);
    offset += named.tensor.nbytes();
  }
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const Json::exception& error) {
    throw safetensors_input_error(file,
                                  std::string("cannot write the header: ") + json_error_text(error),
                                  "tensor names must be valid UTF-8");
  }
  // Padding with spaces to a multiple of 8 keeps the data buffer 8-byte aligned in the file.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  std::string head(8, '\0');
  for (size_t byte = 0; byte < 8; ++byte) {
    head[byte] = static_cast<char>((header_text.size() >> (8 * byte)) & 0xff);
  }
  return head + header_text;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string file = path.string();
  const std::string head = safetensors_head(file, tensors, metadata);
  std::FILE* stream = std::fopen(file.c_str(), "wb");
  if (stream == nullptr) {
    throw safetensors_input_error(file,
                                  std::string("cannot open for writing: ") + std::strerror(errno));
  }
  bool ok = std::fwrite(head.data(), 1, head.size(), stream) == head.size();
  for (const NamedTensor& named : tensors) {
    if (!ok) break;
    const size_t byte_count = named.tensor.nbytes();
    if (byte_count > 0) ok = std::fwrite(named.tensor.bytes(), 1, byte_count, stream) == byte_count;
  }
  const int write_errno = errno;
  if (std::fclose(stream) != 0) ok = false;
  if (!ok)
    throw safetensors_input_error(file, std::string("write failed: ") + std::strerror(write_errno));
}

}  // namespace loupe
