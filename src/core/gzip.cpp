#include "core/gzip.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <optional>

#include "core/process.hpp"
#include "loupe/error.hpp"

namespace loupe {
namespace {

// simdjson reads up to 64 bytes past its input (src/trace/import reserves as much).
constexpr size_t kInflatedSlack = 64;

std::mutex limits_mutex;
std::optional<DecompressionLimits> configured_limits;

std::string size_text(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 30) && bytes % (uint64_t{1} << 30) == 0) {
    return std::to_string(bytes >> 30) + " GiB";
  }
  if (bytes >= (uint64_t{1} << 20) && bytes % (uint64_t{1} << 20) == 0) {
    return std::to_string(bytes >> 20) + " MiB";
  }
  return std::to_string(bytes) + " bytes";
}

DecompressionLimits limits_from_environment() {
  DecompressionLimits limits;
  if (const char* bytes = std::getenv("LOUPE_MAX_INFLATED"); bytes != nullptr && *bytes != '\0') {
    limits.max_bytes = parse_byte_size("LOUPE_MAX_INFLATED", bytes);
  }
  if (const char* ratio = std::getenv("LOUPE_MAX_INFLATE_RATIO");
      ratio != nullptr && *ratio != '\0') {
    limits.max_ratio = parse_inflate_ratio(ratio, "LOUPE_MAX_INFLATE_RATIO");
  }
  return limits;
}

}  // namespace

uint64_t parse_inflate_ratio(std::string_view text, std::string_view what) {
  uint64_t value = 0;
  bool valid = !text.empty() && text.size() <= 12;
  for (const char c : text) {
    if (c < '0' || c > '9') valid = false;
    if (valid) value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  if (!valid || value == 0) {
    throw Error(ErrorCode::kUsage, std::string(what) +
                                       ": expected a positive integer ratio such as 100, found '" +
                                       std::string(text) + "'");
  }
  return value;
}

DecompressionLimits decompression_limits() {
  const std::lock_guard<std::mutex> lock(limits_mutex);
  if (!configured_limits) configured_limits = limits_from_environment();
  return *configured_limits;
}

void set_decompression_limits(const DecompressionLimits& limits) {
  const std::lock_guard<std::mutex> lock(limits_mutex);
  configured_limits = limits;
}

bool is_gzip(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

uint64_t inflate_allowance(uint64_t compressed_size, const DecompressionLimits& limits) {
  const uint64_t ratio_allowance =
      std::max<uint64_t>(kRatioFloorBytes, compressed_size > UINT64_MAX / limits.max_ratio
                                               ? UINT64_MAX
                                               : compressed_size * limits.max_ratio);
  return std::min(limits.max_bytes, ratio_allowance);
}

Error inflate_cap_error(const std::string& source, uint64_t compressed_size,
                        const DecompressionLimits& limits, const std::string& where) {
  const bool ratio_binds = inflate_allowance(compressed_size, limits) < limits.max_bytes;
  const std::string cap =
      ratio_binds ? "the ratio cap (" + std::to_string(limits.max_ratio) +
                        " times its compressed size of " + std::to_string(compressed_size) +
                        " bytes, past the first " + size_text(kRatioFloorBytes) + ")"
                  : "the absolute cap of " + size_text(limits.max_bytes);
  return Error(ErrorCode::kInput, source + ": inflates past " + cap + "; stopped " + where,
               ratio_binds ? "if the file is trusted, raise the cap with --max-inflate-ratio N "
                             "(or LOUPE_MAX_INFLATE_RATIO=N)"
                           : "if the file is trusted, raise the cap with --max-inflated SIZE "
                             "(or LOUPE_MAX_INFLATED=SIZE), e.g. 32G");
}

std::string inflate_gzip(std::string_view compressed, const std::string& source,
                         TruncatedGzip truncated, const DecompressionLimits& limits) {
  // The output may grow to the smaller of the two caps; one byte more proves a cap was passed.
  const uint64_t allowed = inflate_allowance(compressed.size(), limits);

  z_stream stream{};
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) {
    throw Error(ErrorCode::kInternal, source + ": zlib could not start inflating");
  }
  struct End {
    z_stream* stream;
    ~End() { inflateEnd(stream); }
  } end{&stream};

  const unsigned char* next = reinterpret_cast<const unsigned char*>(compressed.data());
  size_t remaining = compressed.size();
  // Grown geometrically from what actually came out, never from the size the trailer claims.
  // malloc/realloc rather than std::string: no zero-filling, and glibc moves large blocks by
  // remapping pages instead of copying them (a bomb's cost is the output it writes).
  struct Free {
    void operator()(char* bytes) const { std::free(bytes); }
  };
  size_t capacity = static_cast<size_t>(
      std::min<uint64_t>(allowed + 1, std::max<size_t>(compressed.size() * 4, 1 << 16)));
  std::unique_ptr<char, Free> out(static_cast<char*>(std::malloc(capacity)));
  if (!out) throw std::bad_alloc();
  uint64_t produced = 0;
  while (true) {
    if (produced == capacity) {
      capacity = static_cast<size_t>(std::min<uint64_t>(allowed + 1, capacity * uint64_t{2}));
      char* grown = static_cast<char*>(std::realloc(out.get(), capacity));
      if (grown == nullptr) throw std::bad_alloc();
      static_cast<void>(out.release());
      out.reset(grown);
    }
    constexpr size_t kMaxChunk = size_t{1} << 30;  // zlib counts in 32-bit uInt
    const size_t in_chunk = std::min(remaining, kMaxChunk);
    const size_t out_chunk = std::min<size_t>(capacity - produced, kMaxChunk);
    stream.next_in = const_cast<Bytef*>(next);
    stream.avail_in = static_cast<uInt>(in_chunk);
    stream.next_out = reinterpret_cast<Bytef*>(out.get() + produced);
    stream.avail_out = static_cast<uInt>(out_chunk);
    const int status = inflate(&stream, Z_NO_FLUSH);
    const size_t consumed = in_chunk - stream.avail_in;
    next += consumed;
    remaining -= consumed;
    produced += out_chunk - stream.avail_out;
    if (produced > allowed) {
      throw inflate_cap_error(
          source, compressed.size(), limits,
          "at compressed byte " + std::to_string(compressed.size() - remaining));
    }
    if (status == Z_STREAM_END) {
      if (remaining == 0) break;
      inflateReset(&stream);  // another member follows
      continue;
    }
    if (status == Z_OK) continue;
    if (status == Z_BUF_ERROR) {
      if (produced == capacity) continue;                   // out of room: grow and go on
      if (stream.avail_in == 0 && remaining > 0) continue;  // the next chunk of input
      if (remaining == 0) {
        if (truncated == TruncatedGzip::kKeep) break;
        throw Error(ErrorCode::kInput,
                    source + ": the gzip stream ends early at compressed byte " +
                        std::to_string(compressed.size()),
                    "check the file with `gzip -t`");
      }
    }
    throw Error(ErrorCode::kInput,
                source + ": corrupt gzip data at compressed byte " +
                    std::to_string(compressed.size() - remaining) + " (zlib status " +
                    std::to_string(status) + ")",
                "check the file with `gzip -t`");
  }
  // Room past the end for readers that read ahead (simdjson's padding) without another copy.
  std::string text;
  text.reserve(static_cast<size_t>(produced) + kInflatedSlack);
  text.append(out.get(), static_cast<size_t>(produced));
  return text;
}

}  // namespace loupe
