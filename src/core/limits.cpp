#include "core/limits.hpp"

#include <algorithm>
#include <cstdio>

#include "loupe/error.hpp"

namespace loupe {
namespace {

std::string position_text(std::string_view text, size_t offset) {
  size_t line = 1;
  size_t line_start = 0;
  for (size_t index = 0; index < offset && index < text.size(); ++index) {
    if (text[index] == '\n') {
      ++line;
      line_start = index + 1;
    }
  }
  return "offset " + std::to_string(offset) + " (line " + std::to_string(line) + ", column " +
         std::to_string(offset - line_start + 1) + ")";
}

bool is_bare_key_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '+';
}

}  // namespace

void check_json_nesting(std::string_view text, std::string_view source, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t index = 0; index < text.size(); ++index) {
    const char c = text[index];
    if (in_string) {
      if (c == '\\') {
        ++index;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        throw Error(ErrorCode::kInput,
                    std::string(source) + ": " + position_text(text, index) +
                        ": JSON nested deeper than " + std::to_string(max_depth) +
                        " levels; expected at most " + std::to_string(max_depth) +
                        " nested arrays and objects",
                    "loupe refuses documents nested this deep before parsing them");
      }
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    }
  }
}

void check_toml_nesting(std::string_view text, std::string_view source) {
  auto fail = [&](size_t offset, const std::string& what) {
    size_t line = 1;
    size_t line_start = 0;
    for (size_t index = 0; index < offset && index < text.size(); ++index) {
      if (text[index] == '\n') {
        ++line;
        line_start = index + 1;
      }
    }
    throw Error(ErrorCode::kConfig,
                std::string(source) + ":" + std::to_string(line) + ":" +
                    std::to_string(offset - line_start + 1) + ": " + what,
                "loupe refuses TOML nested this deep before parsing it");
  };
  size_t depth = 0;
  // Dots in the current run of key parts: bare keys, quoted keys and spaces joined by '.'.
  size_t dots = 0;
  size_t index = 0;
  const size_t size = text.size();
  // Skips a string starting at `index` (a quote); returns the offset after it. Basic strings
  // take escapes; multi-line ones end at the first closing triple quote.
  auto skip_string = [&](size_t at) -> size_t {
    const char quote = text[at];
    const bool triple = at + 2 < size && text[at + 1] == quote && text[at + 2] == quote;
    size_t position = at + (triple ? 3 : 1);
    while (position < size) {
      const char c = text[position];
      if (quote == '"' && c == '\\') {
        position += 2;
        continue;
      }
      if (!triple && c == '\n') return position;  // unterminated: the parser will say so
      if (c == quote) {
        if (!triple) return position + 1;
        if (position + 2 < size && text[position + 1] == quote && text[position + 2] == quote) {
          position += 3;
          // A closing triple may be followed by one or two more quotes, part of the string.
          while (position < size && text[position] == quote) ++position;
          return position;
        }
      }
      ++position;
    }
    return size;
  };
  while (index < size) {
    const char c = text[index];
    if (c == '#') {
      while (index < size && text[index] != '\n') ++index;
      dots = 0;
      continue;
    }
    if (c == '"' || c == '\'') {
      index = skip_string(index);
      continue;  // a quoted key part keeps the run going
    }
    if (c == '.') {
      if (++dots >= kMaxTomlKeyParts) {
        fail(index, "a key with more than " + std::to_string(kMaxTomlKeyParts) +
                        " dotted parts; expected at most " + std::to_string(kMaxTomlKeyParts));
      }
      ++index;
      continue;
    }
    if (is_bare_key_char(c) || c == ' ' || c == '\t') {
      ++index;
      continue;
    }
    dots = 0;
    if (c == '[' || c == '{') {
      if (++depth > kMaxTomlDepth) {
        fail(index, "arrays and tables nested deeper than " + std::to_string(kMaxTomlDepth) +
                        " levels; expected at most " + std::to_string(kMaxTomlDepth));
      }
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    }
    ++index;
  }
}

bool is_probe_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxProbeNameLength) return false;
  auto word_char = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  };
  if (!word_char(name.front())) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return word_char(c) || c == '-'; });
}

void check_probe_name(std::string_view name, std::string_view where) {
  if (is_probe_name(name)) return;
  std::string shown;
  for (char c : name.substr(0, 80)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      shown += c;
    } else {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\x%02x", byte);
      shown += buffer;
    }
  }
  if (name.size() > 80) shown += "...";
  size_t bad = 0;
  while (bad < name.size() && bad < kMaxProbeNameLength) {
    const char c = name[bad];
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '_' || (c == '-' && bad > 0);
    if (!ok) break;
    ++bad;
  }
  const std::string position = name.empty() ? "it is empty"
                               : bad >= kMaxProbeNameLength
                                   ? "it is longer than " + std::to_string(kMaxProbeNameLength)
                                   : "character " + std::to_string(bad + 1) + " is not allowed";
  throw Error(ErrorCode::kUsage,
              std::string(where) + ": probe name '" + shown + "': " + position +
                  "; expected 1 to " + std::to_string(kMaxProbeNameLength) +
                  " characters of A-Z a-z 0-9 _ -, the first a letter, digit or _",
              "probe names become folder names under the home; `loupe probe list -- SUBJECT` "
              "shows the subject's probes");
}

std::filesystem::path resolved_path(const std::filesystem::path& path) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error);
  if (error) absolute = path;
  std::filesystem::path resolved = std::filesystem::weakly_canonical(absolute, error);
  if (error) return absolute.lexically_normal();
  return resolved;
}

bool is_within(const std::filesystem::path& path, const std::filesystem::path& root) {
  const std::filesystem::path resolved = resolved_path(path);
  const std::filesystem::path base = resolved_path(root);
  auto inner = resolved.begin();
  for (auto part = base.begin(); part != base.end(); ++part, ++inner) {
    if (part->empty()) continue;  // a trailing separator
    if (inner == resolved.end() || *inner != *part) return false;
  }
  return true;
}

const std::filesystem::path& check_under_home(const std::filesystem::path& path,
                                              const std::filesystem::path& home,
                                              std::string_view what) {
  if (is_within(path, home)) return path;
  throw Error(ErrorCode::kInput,
              std::string(what) + " " + path.string() + " resolves to " +
                  resolved_path(path).string() + ", outside the home " +
                  resolved_path(home).string() + "; expected a path under the home",
              "loupe writes only under its home (--home DIR); check the probe name and any "
              "symbolic link inside the home");
}

}  // namespace loupe
