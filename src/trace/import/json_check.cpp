// The byte reader of json_check.hpp: a state machine over the text, one byte at a time.
#include "trace/import/json_check.hpp"

#include <cstdio>

namespace loupe::trace {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_hex(char c) { return json_is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

std::string describe(std::string_view text, size_t at) {
  if (at >= text.size()) return "the end of the text";
  const auto byte = static_cast<unsigned char>(text[at]);
  if (byte >= 0x20 && byte < 0x7F) return std::string("'") + static_cast<char>(byte) + "'";
  char hex[16];
  std::snprintf(hex, sizeof hex, "byte 0x%02X", byte);
  return hex;
}

// What may come next.
enum class Expect { kValue, kValueOrClose, kKeyOrClose, kKey, kColon, kAfterValue };

}  // namespace

bool check_json_value(std::string_view text, JsonFault& fault) {
  std::string open;  // the open brackets, innermost last
  Expect expect = Expect::kValue;
  size_t at = 0;
  const size_t size = text.size();
  auto fail = [&](size_t where, const std::string& what) {
    fault.at = where;
    fault.expected = what + ", found " + describe(text, where);
    return false;
  };
  // At an opening quote: moves past the closing one.
  auto string = [&]() {
    for (++at; at < size; ++at) {
      const auto byte = static_cast<unsigned char>(text[at]);
      if (byte == '"') {
        ++at;
        return true;
      }
      if (byte < 0x20) return fail(at, "expected a string's text or its closing quote");
      if (byte == '\\') {
        ++at;
        if (at == size) break;
        const char escaped = text[at];
        if (escaped == 'u') {
          for (int digit = 0; digit < 4; ++digit) {
            if (at + 1 >= size || !is_hex(text[at + 1])) {
              return fail(at + 1, "expected four hex digits after \\u");
            }
            ++at;
          }
        } else if (std::string_view("\"\\/bfnrt").find(escaped) == std::string_view::npos) {
          return fail(at, "expected an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u)");
        }
      }
    }
    return fail(size, "expected a string's closing quote");
  };
  while (true) {
    while (at < size && is_space(text[at])) ++at;
    const char c = at < size ? text[at] : '\0';
    const char inner = open.empty() ? '\0' : open.back();
    switch (expect) {
      case Expect::kAfterValue:
        if (at == size && open.empty()) return true;
        if (open.empty()) return fail(at, "expected the end of the value");
        if (c == ',') {
          expect = inner == '{' ? Expect::kKey : Expect::kValue;
          ++at;
        } else if (c == (inner == '{' ? '}' : ']')) {
          open.pop_back();
          ++at;
        } else {
          return fail(at, inner == '{' ? "expected ',' or '}' after a member's value"
                                       : "expected ',' or ']' after an element");
        }
        continue;
      case Expect::kColon:
        if (c != ':' || at == size) return fail(at, "expected ':' after a key");
        ++at;
        expect = Expect::kValue;
        continue;
      case Expect::kKey:
      case Expect::kKeyOrClose:
        if (c == '}' && at < size && expect == Expect::kKeyOrClose) {
          open.pop_back();
          ++at;
          expect = Expect::kAfterValue;
          continue;
        }
        if (c != '"' || at == size) {
          return fail(at, expect == Expect::kKey ? "expected a key string after ','"
                                                 : "expected a key string or '}'");
        }
        if (!string()) return false;
        expect = Expect::kColon;
        continue;
      case Expect::kValue:
      case Expect::kValueOrClose:
        break;
    }
    if (at == size) return fail(at, "expected a value");
    if (c == ']' && expect == Expect::kValueOrClose) {
      open.pop_back();
      ++at;
      expect = Expect::kAfterValue;
    } else if (c == '{' || c == '[') {
      open.push_back(c);
      ++at;
      expect = c == '{' ? Expect::kKeyOrClose : Expect::kValueOrClose;
    } else if (c == '"') {
      if (!string()) return false;
      expect = Expect::kAfterValue;
    } else {
      const size_t length = json_scalar_length(text.substr(at));
      if (length == 0) {
        return fail(
            at, expect == Expect::kValueOrClose ? "expected a value or ']'" : "expected a value");
      }
      at += length;
      expect = Expect::kAfterValue;
    }
  }
}

}  // namespace loupe::trace
