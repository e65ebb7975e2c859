// core/gzip.hpp — inflating gzip input under the decompression caps (docs/security.md,
// "Decompression caps").
//
// A small file may inflate to far more than memory holds: a 1.5 MB gzip of zeros is 1.5 GiB. Every
// gzip loupe reads (trace files, ncu CSV exports) is inflated here, in chunks, and stops as soon
// as the output passes either cap:
// - the absolute cap: at most `max_bytes` of output (default 8 GiB: the inflated text and the model
//   built from it must both fit a 24 GiB machine);
// - the ratio cap: past kRatioFloorBytes (32 MiB) of output, at most `max_ratio` times the
//   compressed size (default 50; real Kineto traces inflate 12-15 times, a gzip bomb ~1,000).
// Past either: Error(kInput) naming the file, the cap, and how to raise it (`--max-inflated`,
// `--max-inflate-ratio`, or LOUPE_MAX_INFLATED / LOUPE_MAX_INFLATE_RATIO). The output is never
// allocated up front from the header's claimed size (ISIZE), which a file may lie about.
// Thread-safety: the limits are process-wide; set them before work starts (the CLI does, from
// its flags) and read them from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "loupe/error.hpp"

namespace loupe {

inline constexpr uint64_t kDefaultMaxInflatedBytes = uint64_t{8} << 30;
inline constexpr uint64_t kDefaultMaxInflateRatio = 50;
inline constexpr uint64_t kRatioFloorBytes = uint64_t{32} << 20;

struct DecompressionLimits {
  uint64_t max_bytes = kDefaultMaxInflatedBytes;
  uint64_t max_ratio = kDefaultMaxInflateRatio;
};

// The process-wide limits: the defaults, overridden by LOUPE_MAX_INFLATED (a size: 512M, 16G,
// a bare number of bytes) and LOUPE_MAX_INFLATE_RATIO (a positive integer) when they are set,
// then by set_decompression_limits. A malformed variable throws Error(kUsage) naming it.
DecompressionLimits decompression_limits();
void set_decompression_limits(const DecompressionLimits& limits);

// A positive integer of at most 12 digits. Throws Error(kUsage) "WHAT: expected a positive
// integer ratio such as 100, found 'TEXT'".
uint64_t parse_inflate_ratio(std::string_view text, std::string_view what);

// Whether `bytes` starts with the gzip magic (1f 8b).
bool is_gzip(std::string_view bytes);

// What to do with a stream that ends before its last member does.
enum class TruncatedGzip {
  kKeep,  // return what inflated (a reader that repairs truncated text and counts it)
  kError  // Error(kInput) naming the file and the compressed offset
};

// The most output `compressed_size` bytes may inflate to: the smaller of the two caps.
uint64_t inflate_allowance(uint64_t compressed_size, const DecompressionLimits& limits);
// Error(kInput) "SOURCE: inflates past the CAP ...; stopped WHERE" with the hint that raises the
// binding cap. For readers that inflate through another program (ncu --import).
Error inflate_cap_error(const std::string& source, uint64_t compressed_size,
                        const DecompressionLimits& limits, const std::string& where);

// Inflates every member of `compressed` (concatenated members are read one after another).
// Throws Error(kInput) "SOURCE: ..." on corrupt data and past either cap.
std::string inflate_gzip(std::string_view compressed, const std::string& source,
                         TruncatedGzip truncated,
                         const DecompressionLimits& limits = decompression_limits());

}  // namespace loupe
