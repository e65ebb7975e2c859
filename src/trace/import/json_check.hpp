// trace/import/json_check.hpp — is a text one well-formed JSON value, and if not, where and why.
//
// The streaming reader skips what it does not read (an event's `args`, keys it does not know) by
// its brackets and strings; the scanner checks those values' structure as it skips them, 64 bytes
// at a time (chrome_json_import.cpp, EventScanner), and declines what it cannot take. This byte
// reader is the reference and the slow path: it checks an event the scanner declined, and a value
// whose bytes the scanner did not read as masks, and says where the first fault lies and what
// was expected there, for the error that names the file and the offset.
//
// The grammar is RFC 8259's, with three additions: NaN, Infinity and -Infinity (written by
// Python's json module and other trace writers) are numbers.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace loupe::trace {

struct JsonFault {
  size_t at = 0;         // offset of the first byte that breaks the grammar (the text's size: cut)
  std::string expected;  // "expected ',' or '}' after a member's value, found ','"
};

// True when `text` is one JSON value with optional whitespace around it; otherwise fills `fault`.
bool check_json_value(std::string_view text, JsonFault& fault);

inline bool json_is_digit(char c) { return c >= '0' && c <= '9'; }

// The length of the number or literal (true, false, null, NaN, Infinity, -Infinity) at the start
// of `text`, 0 when none starts there. The caller checks what follows it. (Inline: the scanner
// reads its numbers with it.)
inline size_t json_scalar_length(std::string_view text) {
  if (text.empty()) return 0;
  const char first = text[0];
  if (!json_is_digit(first) && !(first == '-' && text.size() > 1 && json_is_digit(text[1]))) {
    for (const std::string_view literal :
         {"true", "false", "null", "NaN", "Infinity", "-Infinity"}) {
      if (text.substr(0, literal.size()) == literal) return literal.size();
    }
    return 0;
  }
  size_t at = 0;
  const size_t size = text.size();
  if (at < size && text[at] == '-') ++at;
  if (at < size && text[at] == '0') {
    ++at;
  } else if (at < size && text[at] >= '1' && text[at] <= '9') {
    while (at < size && json_is_digit(text[at])) ++at;
  } else {
    return 0;
  }
  if (at < size && text[at] == '.') {
    ++at;
    if (at == size || !json_is_digit(text[at])) return 0;
    while (at < size && json_is_digit(text[at])) ++at;
  }
  if (at < size && (text[at] == 'e' || text[at] == 'E')) {
    ++at;
    if (at < size && (text[at] == '+' || text[at] == '-')) ++at;
    if (at == size || !json_is_digit(text[at])) return 0;
    while (at < size && json_is_digit(text[at])) ++at;
  }
  return at;
}

}  // namespace loupe::trace
