// trace/import/json_blocks.hpp — 64 bytes of JSON text at a time, classified into bit masks.
//
// The streaming reader's splitter finds where each event ends by following quotes and brackets.
// A byte loop stops at every quote — a Kineto event has twenty strings — and mispredicts a branch
// each time; classifying a whole 64-byte block into masks (bit i for byte i) lets it skip the
// strings with a prefix XOR and visit only the brackets outside them (simdjson's stage 1 does
// the same over a whole document).
//
// Three classifiers give identical masks: AVX2, SSE2 (x86-64's baseline) and a portable one;
// json_block_classifier() picks the fastest this CPU runs, once.
// Thread-safety: all functions are pure; the choice is made on first use, thread-safely.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace loupe::trace {

struct JsonBlockMasks {
  uint64_t quote = 0;      // '"'
  uint64_t backslash = 0;  // '\\'
  uint64_t open = 0;       // '{' or '['
  uint64_t close = 0;      // '}' or ']'
  uint64_t control = 0;    // bytes below 0x20
  // Only from json_value_classifier(), for checking a value's structure (the scanner's nested
  // values); json_block_classifier() leaves them as they were:
  uint64_t comma = 0;  // ','
  uint64_t colon = 0;  // ':'
  uint64_t space = 0;  // JSON whitespace: ' ', '\t', '\n', '\r'
  uint64_t digit = 0;  // '0' to '9'
  uint64_t zero = 0;   // '0'
};

// REQUIRES: 64 readable bytes at `block`.
using JsonBlockClassifier = void (*)(const char* block, JsonBlockMasks& masks);

// The fastest classifier this CPU runs.
JsonBlockClassifier json_block_classifier();
// Every classifier this CPU runs, by name ("avx2", "sse2", "portable"), fastest first.
std::vector<std::pair<std::string_view, JsonBlockClassifier>> json_block_classifiers();

// The same, also giving the structure masks (comma, colon, space, digit, zero): the fastest this
// CPU runs, and every one (as json_block_classifiers()).
JsonBlockClassifier json_value_classifier();
std::vector<std::pair<std::string_view, JsonBlockClassifier>> json_value_classifiers();

// Bit i of the result is the XOR of bits 0..i of `bits`: over the quote mask of a block without
// escapes, the bytes from each opening quote up to (not including) its closing quote.
inline uint64_t prefix_xor(uint64_t bits) {
  bits ^= bits << 1;
  bits ^= bits << 2;
  bits ^= bits << 4;
  bits ^= bits << 8;
  bits ^= bits << 16;
  bits ^= bits << 32;
  return bits;
}

}  // namespace loupe::trace
