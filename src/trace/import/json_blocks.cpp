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

// Both halves' flags, one bit per byte. (A lambda would not inherit the target attribute.)
__attribute__((target("avx2"))) inline uint64_t avx2_bits(__m256i low_flags, __m256i high_flags) {
  return static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(low_flags))) |
         static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(high_flags))) << 32;
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

bool cpu_has_avx2() {
  // Needed before __builtin_cpu_supports when this runs from a static initialiser.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
}

#endif

}  // namespace

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
