// The block classifiers behind the JSON splitter (json_blocks.hpp): every classifier this CPU runs
// gives the masks a byte-by-byte reading gives, for every byte value at every position.
#include "trace/import/json_blocks.hpp"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <string>
#include <tuple>

namespace loupe::trace {
namespace {

JsonBlockMasks reference_masks(const char* block) {
  JsonBlockMasks masks;
  for (int at = 0; at < 64; ++at) {
    const auto byte = static_cast<unsigned char>(block[at]);
    const uint64_t bit = uint64_t{1} << at;
    if (byte == '"') masks.quote |= bit;
    if (byte == '\\') masks.backslash |= bit;
    if (byte == '{' || byte == '[') masks.open |= bit;
    if (byte == '}' || byte == ']') masks.close |= bit;
    if (byte < 0x20) masks.control |= bit;
    if (byte == ',') masks.comma |= bit;
    if (byte == ':') masks.colon |= bit;
    if (byte == ' ' || byte == '\t' || byte == '\n' || byte == '\r') masks.space |= bit;
    if (byte >= '0' && byte <= '9') masks.digit |= bit;
    if (byte == '0') masks.zero |= bit;
  }
  return masks;
}

// `structure`: a value classifier's, whose structure masks are compared too.
void expect_same(const JsonBlockMasks& got, const JsonBlockMasks& want, std::string_view name,
                 const std::string& what, bool structure) {
  EXPECT_EQ(got.quote, want.quote) << name << " quote, " << what;
  EXPECT_EQ(got.backslash, want.backslash) << name << " backslash, " << what;
  EXPECT_EQ(got.open, want.open) << name << " open, " << what;
  EXPECT_EQ(got.close, want.close) << name << " close, " << what;
  EXPECT_EQ(got.control, want.control) << name << " control, " << what;
  if (!structure) return;
  EXPECT_EQ(got.comma, want.comma) << name << " comma, " << what;
  EXPECT_EQ(got.colon, want.colon) << name << " colon, " << what;
  EXPECT_EQ(got.space, want.space) << name << " space, " << what;
  EXPECT_EQ(got.digit, want.digit) << name << " digit, " << what;
  EXPECT_EQ(got.zero, want.zero) << name << " zero, " << what;
}

// Both families, the value classifiers marked (their structure masks are compared too).
std::vector<std::tuple<std::string, JsonBlockClassifier, bool>> all_classifiers() {
  std::vector<std::tuple<std::string, JsonBlockClassifier, bool>> all;
  for (const auto& [name, classify] : json_block_classifiers()) {
    all.emplace_back(std::string(name), classify, false);
  }
  for (const auto& [name, classify] : json_value_classifiers()) {
    all.emplace_back(std::string(name) + " (value)", classify, true);
  }
  return all;
}

TEST(JsonBlocks, TheChosenClassifierIsTheFirstAndThePortableOneIsAlwaysThere) {
  const auto classifiers = json_block_classifiers();
  ASSERT_FALSE(classifiers.empty());
  EXPECT_EQ(json_block_classifier(), classifiers.front().second);
  EXPECT_EQ(json_value_classifier(), json_value_classifiers().front().second);
  EXPECT_EQ(json_value_classifiers().back().first, "portable");
  EXPECT_EQ(classifiers.back().first, "portable");
#if defined(__x86_64__)
  EXPECT_GE(classifiers.size(), 2u);  // SSE2 is part of x86-64
#endif
}

TEST(JsonBlocks, EveryByteValueAtEveryPositionIsClassifiedAsByteByByte) {
  for (const auto& [name, classify, structure] : all_classifiers()) {
    for (int value = 0; value < 256; ++value) {
      for (int position = 0; position < 64; ++position) {
        std::array<char, 64> block;
        block.fill('a');
        block[position] = static_cast<char>(value);
        JsonBlockMasks got;
        classify(block.data(), got);
        expect_same(got, reference_masks(block.data()), name,
                    "byte " + std::to_string(value) + " at " + std::to_string(position), structure);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(JsonBlocks, BlocksDenseInSpecialBytesAreClassifiedAsByteByByte) {
  // Drawn mostly from the bytes the masks flag and their neighbours under the bracket fold.
  // (Sized: it holds a NUL.)
  const char kAlphabet[] =
      "\"\\{}[]\x01\x1f\x20\n\t;=:,a{}\x7f\x80\xff\x5b\x7b\x5d\x7d\x3b\x1b\r\x19\x2f"
      "09\x3a\xb0\x00";
  const std::string alphabet(kAlphabet, sizeof kAlphabet);  // the terminating NUL included
  std::mt19937 random(35);                                  // seeded: the same blocks every run
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  std::uniform_int_distribution<int> any_byte(0, 255);
  for (int round = 0; round < 2000; ++round) {
    std::array<char, 64> block;
    for (char& byte : block) {
      byte = round % 4 == 0 ? static_cast<char>(any_byte(random)) : alphabet[pick(random)];
    }
    const JsonBlockMasks want = reference_masks(block.data());
    for (const auto& [name, classify, structure] : all_classifiers()) {
      JsonBlockMasks got;
      classify(block.data(), got);
      expect_same(got, want, name, "round " + std::to_string(round), structure);
    }
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(JsonBlocks, PrefixXorMarksTheBytesFromEachOpeningQuoteToItsClosingOne) {
  // "ab"xyz"c": quotes at 0, 3, 7 and 9; inside are 0-2 and 7-8.
  const uint64_t quotes = (1u << 0) | (1u << 3) | (1u << 7) | (1u << 9);
  EXPECT_EQ(prefix_xor(quotes), uint64_t{0b1'1000'0111});
  std::mt19937_64 random(7);
  for (int round = 0; round < 1000; ++round) {
    const uint64_t bits = random();
    uint64_t want = 0;
    bool parity = false;
    for (int at = 0; at < 64; ++at) {
      parity ^= ((bits >> at) & 1) != 0;
      if (parity) want |= uint64_t{1} << at;
    }
    ASSERT_EQ(prefix_xor(bits), want) << bits;
  }
}

}  // namespace
}  // namespace loupe::trace
