// The classifiers of json_blocks.hpp: the same masks from AVX2, SSE2 and portable code.
#include "trace/import/json_blocks.hpp"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace loupe::trace {
namespace {

// Eight bytes at a time: each flagged byte's high bit set, then gathered into one bit per byte.
constexpr uint64_t kOnes = 0x0101010101010101ull;
constexpr uint64_t kHighs = 0x8080808080808080ull;

// Exact per byte (no borrow crosses bytes): the high bit of each byte equal to `byte`.
uint64_t high_bits_equal(uint64_t word, uint8_t byte) {
  const uint64_t diff = word ^ (kOnes * byte);
  // A byte is zero iff neither its low seven bits nor its high bit are set.
  return ~(((diff & ~kHighs) + ~kHighs) | diff) & kHighs;
}
// The high bit of each byte below 0x20.
uint64_t high_bits_below_space(uint64_t word) {
  // Bits 5-7 all clear: the byte is below 0x20.
  const uint64_t upper = word & (kOnes * 0xE0);
  return ~(((upper & ~kHighs) + ~kHighs) | upper) & kHighs;
}
// Gathers the high bit of each of the eight bytes into eight bits, byte 0 lowest.
uint64_t gather_high_bits(uint64_t highs) { return ((highs >> 7) * 0x0102040810204080ull) >> 56; }

void classify_portable(const char* block, JsonBlockMasks& masks) {
  masks = {};
  for (int word_index = 0; word_index < 8; ++word_index) {
    uint64_t word = 0;
    std::memcpy(&word, block + 8 * word_index, 8);
    // Setting bit 5 folds '[' into '{' and ']' into '}' (and no other byte into either).
    const uint64_t folded = word | (kOnes * 0x20);
    const int shift = 8 * word_index;
    masks.quote |= gather_high_bits(high_bits_equal(word, '"')) << shift;
    masks.backslash |= gather_high_bits(high_bits_equal(word, '\\')) << shift;
    masks.open |= gather_high_bits(high_bits_equal(folded, '{')) << shift;
    masks.close |= gather_high_bits(high_bits_equal(folded, '}')) << shift;
    masks.control |= gather_high_bits(high_bits_below_space(word)) << shift;
  }
}

void structure_portable(const char* block, JsonBlockMasks& masks) {
  masks.comma = masks.colon = masks.space = masks.digit = masks.zero = 0;
  for (int word_index = 0; word_index < 8; ++word_index) {
    uint64_t word = 0;
    std::memcpy(&word, block + 8 * word_index, 8);
    const int shift = 8 * word_index;
    masks.comma |= gather_high_bits(high_bits_equal(word, ',')) << shift;
    masks.colon |= gather_high_bits(high_bits_equal(word, ':')) << shift;
    masks.space |= gather_high_bits(high_bits_equal(word, ' ') | high_bits_equal(word, '\t') |
                                    high_bits_equal(word, '\n') | high_bits_equal(word, '\r'))
                   << shift;
    const uint64_t zero = high_bits_equal(word, '0');
    masks.zero |= gather_high_bits(zero) << shift;
    uint64_t digit = 0;
    for (uint8_t value = '0'; value <= '9'; ++value) digit |= high_bits_equal(word, value);
    masks.digit |= gather_high_bits(digit) << shift;
  }
}

#if defined(__x86_64__)

void classify_sse2(const char* block, JsonBlockMasks& masks) {
  masks = {};
  const __m128i quote = _mm_set1_epi8('"');
  const __m128i backslash = _mm_set1_epi8('\\');
  const __m128i open = _mm_set1_epi8('{');
  const __m128i close = _mm_set1_epi8('}');
  const __m128i fold = _mm_set1_epi8(0x20);
  const __m128i below_space = _mm_set1_epi8(0x1F);
  for (int part = 0; part < 4; ++part) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * part));
    const __m128i folded = _mm_or_si128(bytes, fold);
    auto bits = [part](__m128i flags) {
      return static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(flags))) << (16 * part);
    };
    masks.quote |= bits(_mm_cmpeq_epi8(bytes, quote));
    masks.backslash |= bits(_mm_cmpeq_epi8(bytes, backslash));
    masks.open |= bits(_mm_cmpeq_epi8(folded, open));
    masks.close |= bits(_mm_cmpeq_epi8(folded, close));
    // Unsigned below 0x20: the byte equals its minimum with 0x1F.
    masks.control |= bits(_mm_cmpeq_epi8(_mm_min_epu8(bytes, below_space), bytes));
  }
}

void structure_sse2(const char* block, JsonBlockMasks& masks) {
  masks.comma = masks.colon = masks.space = masks.digit = masks.zero = 0;
  const __m128i comma = _mm_set1_epi8(',');
  const __m128i colon = _mm_set1_epi8(':');
  const __m128i space = _mm_set1_epi8(' ');
  const __m128i tab = _mm_set1_epi8('\t');
  const __m128i newline = _mm_set1_epi8('\n');
  const __m128i ret = _mm_set1_epi8('\r');
  const __m128i zero = _mm_set1_epi8('0');
  const __m128i nine = _mm_set1_epi8(9);
  for (int part = 0; part < 4; ++part) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16 * part));
    auto bits = [part](__m128i flags) {
      return static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(flags))) << (16 * part);
    };
    masks.comma |= bits(_mm_cmpeq_epi8(bytes, comma));
    masks.colon |= bits(_mm_cmpeq_epi8(bytes, colon));
    masks.space |= bits(
        _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(bytes, space), _mm_cmpeq_epi8(bytes, tab)),
                     _mm_or_si128(_mm_cmpeq_epi8(bytes, newline), _mm_cmpeq_epi8(bytes, ret))));
    masks.zero |= bits(_mm_cmpeq_epi8(bytes, zero));
    // Unsigned byte - '0' at most 9.
    const __m128i offset = _mm_sub_epi8(bytes, zero);
    masks.digit |= bits(_mm_cmpeq_epi8(_mm_min_epu8(offset, nine), offset));
  }
}

// Both halves' flags, one bit per byte. (A lambda would not inherit the target attribute.)
__attribute__((target("avx2"))) inline uint64_t avx2_bits(__m256i low_flags, __m256i high_flags) {
  return static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(low_flags))) |
         static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(high_flags))) << 32;
}

// JSON whitespace: ' ', or '\t' (9), '\n' (10), '\r' (13), looked up on the low nibble; every
// other entry is 0x80, which no byte below 0x80 equals (vpshufb gives 0 for the bytes above).
__attribute__((target("avx2"))) inline __m256i avx2_whitespace(__m256i bytes) {
  const __m256i table = _mm256_setr_epi8(
      -128, -128, -128, -128, -128, -128, -128, -128, -128, 9, 10, -128, -128, 13, -128, -128, -128,
      -128, -128, -128, -128, -128, -128, -128, -128, 9, 10, -128, -128, 13, -128, -128);
  return _mm256_or_si256(_mm256_cmpeq_epi8(bytes, _mm256_set1_epi8(' ')),
                         _mm256_cmpeq_epi8(_mm256_shuffle_epi8(table, bytes), bytes));
}

__attribute__((target("avx2"))) void classify_avx2(const char* block, JsonBlockMasks& masks) {
  const __m256i quote = _mm256_set1_epi8('"');
  const __m256i backslash = _mm256_set1_epi8('\\');
  const __m256i open = _mm256_set1_epi8('{');
  const __m256i close = _mm256_set1_epi8('}');
  const __m256i fold = _mm256_set1_epi8(0x20);
  const __m256i below_space = _mm256_set1_epi8(0x1F);
  const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block));
  const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 32));
  const __m256i low_folded = _mm256_or_si256(low, fold);
  const __m256i high_folded = _mm256_or_si256(high, fold);
  const auto bits = avx2_bits;
  masks.quote = bits(_mm256_cmpeq_epi8(low, quote), _mm256_cmpeq_epi8(high, quote));
  masks.backslash = bits(_mm256_cmpeq_epi8(low, backslash), _mm256_cmpeq_epi8(high, backslash));
  masks.open = bits(_mm256_cmpeq_epi8(low_folded, open), _mm256_cmpeq_epi8(high_folded, open));
  masks.close = bits(_mm256_cmpeq_epi8(low_folded, close), _mm256_cmpeq_epi8(high_folded, close));
  masks.control = bits(_mm256_cmpeq_epi8(_mm256_min_epu8(low, below_space), low),
                       _mm256_cmpeq_epi8(_mm256_min_epu8(high, below_space), high));
}

__attribute__((target("avx2"))) void structure_avx2(const char* block, JsonBlockMasks& masks) {
  const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block));
  const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 32));
  const auto bits = avx2_bits;
  const __m256i comma = _mm256_set1_epi8(',');
  const __m256i colon = _mm256_set1_epi8(':');
  masks.comma = bits(_mm256_cmpeq_epi8(low, comma), _mm256_cmpeq_epi8(high, comma));
  masks.colon = bits(_mm256_cmpeq_epi8(low, colon), _mm256_cmpeq_epi8(high, colon));
  masks.space = bits(avx2_whitespace(low), avx2_whitespace(high));
  const __m256i zero = _mm256_set1_epi8('0');
  const __m256i nine = _mm256_set1_epi8(9);
  masks.zero = bits(_mm256_cmpeq_epi8(low, zero), _mm256_cmpeq_epi8(high, zero));
  const __m256i low_offset = _mm256_sub_epi8(low, zero);
  const __m256i high_offset = _mm256_sub_epi8(high, zero);
  masks.digit = bits(_mm256_cmpeq_epi8(_mm256_min_epu8(low_offset, nine), low_offset),
                     _mm256_cmpeq_epi8(_mm256_min_epu8(high_offset, nine), high_offset));
}

bool cpu_has_avx2() {
  // Needed before __builtin_cpu_supports when this runs from a static initialiser.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
}

#endif

}  // namespace

// The classifiers that also give the structure masks: the plain one, then the rest.
void value_portable(const char* block, JsonBlockMasks& masks) {
  classify_portable(block, masks);
  structure_portable(block, masks);
}
#if defined(__x86_64__)
void value_sse2(const char* block, JsonBlockMasks& masks) {
  classify_sse2(block, masks);
  structure_sse2(block, masks);
}
__attribute__((target("avx2"))) void value_avx2(const char* block, JsonBlockMasks& masks) {
  classify_avx2(block, masks);
  structure_avx2(block, masks);
}
#endif

std::vector<std::pair<std::string_view, JsonBlockClassifier>> json_value_classifiers() {
  std::vector<std::pair<std::string_view, JsonBlockClassifier>> found;
#if defined(__x86_64__)
  if (cpu_has_avx2()) found.emplace_back("avx2", &value_avx2);
  found.emplace_back("sse2", &value_sse2);
#endif
  found.emplace_back("portable", &value_portable);
  return found;
}

JsonBlockClassifier json_value_classifier() {
  static const JsonBlockClassifier chosen = json_value_classifiers().front().second;
  return chosen;
}

std::vector<std::pair<std::string_view, JsonBlockClassifier>> json_block_classifiers() {
  std::vector<std::pair<std::string_view, JsonBlockClassifier>> found;
#if defined(__x86_64__)
  if (cpu_has_avx2()) found.emplace_back("avx2", &classify_avx2);
  found.emplace_back("sse2", &classify_sse2);
#endif
  found.emplace_back("portable", &classify_portable);
  return found;
}

JsonBlockClassifier json_block_classifier() {
  static const JsonBlockClassifier chosen = json_block_classifiers().front().second;
  return chosen;
}

}  // namespace loupe::trace
