// core/limits.hpp — the bounds loupe puts on input before a library parser sees it, and the
// checks on names and paths it writes (docs/security.md, "What the CLI and the MCP server may
// reach").
//
// Library parsers (nlohmann-json, toml++) build and destroy documents recursively: a file nested
// 100,000 deep overflows the stack before they can say what is wrong. Every text loupe hands to
// them first goes through one of the scans below, which walk the bytes once, iteratively, and
// throw Error(kInput) naming the source, the position (byte offset, or line and column) and the
// limit. Probe names become directory names under the home, so they are checked against one
// character set; every directory loupe writes for a run is checked to resolve under the home.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace loupe {

// JSON documents loupe reads: MCP messages, ledger exports, safetensors headers, observations.
// Nothing loupe writes nests deeper than about 10.
inline constexpr size_t kMaxJsonDepth = 128;
// TOML files (objectives, skeletons, the project config): dotted key parts in one key or table
// header, and arrays or inline tables nested in one value.
inline constexpr size_t kMaxTomlKeyParts = 64;
inline constexpr size_t kMaxTomlDepth = 64;
// Probe names: 1 to 128 characters of [A-Za-z0-9_-], the first a letter, digit or '_'.
inline constexpr size_t kMaxProbeNameLength = 128;

// Throws Error(kInput) "SOURCE: offset N (line L, column C): JSON nested deeper than MAX levels
// ..." when an array or object opens below `max_depth` levels. Strings (with their escapes) are
// skipped; nothing else is validated (the parser does that afterwards).
void check_json_nesting(std::string_view text, std::string_view source,
                        size_t max_depth = kMaxJsonDepth);

// Throws Error(kConfig) "SOURCE:LINE:COLUMN: ..." when a key or table header has more than
// kMaxTomlKeyParts dotted parts, or arrays and inline tables nest deeper than kMaxTomlDepth.
// Strings (basic, literal, multi-line) and comments are skipped.
void check_toml_nesting(std::string_view text, std::string_view source);

// Whether `name` is a valid probe name (the character set above).
bool is_probe_name(std::string_view name);
// Throws Error(kUsage) "WHERE: probe name 'NAME' ...: expected 1 to 128 characters of
// [A-Za-z0-9_-] ..." when it is not.
void check_probe_name(std::string_view name, std::string_view where);

// `path` with symlinks followed as far as it exists (std::filesystem::weakly_canonical), made
// absolute first; never throws (falls back to the lexically normal absolute path).
std::filesystem::path resolved_path(const std::filesystem::path& path);
// Whether resolved_path(path) is `root` or inside it (root resolved the same way).
bool is_within(const std::filesystem::path& path, const std::filesystem::path& root);
// Throws Error(kInput) "WHAT PATH resolves to RESOLVED, outside the home HOME" unless `path` is
// within `home`. Returns `path` unchanged.
const std::filesystem::path& check_under_home(const std::filesystem::path& path,
                                              const std::filesystem::path& home,
                                              std::string_view what);

}  // namespace loupe
