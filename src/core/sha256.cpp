// SHA-256 (FIPS 180-4), used to seal observation files (subject runtime) and for provenance
// (ledger).
#include "core/sha256.hpp"

#include <array>
#include <cstdint>

namespace loupe {
namespace {

constexpr std::array<uint32_t, 64> kRoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t rotate_right(uint32_t value, int bits) { return (value >> bits) | (value << (32 - bits)); }

void compress(std::array<uint32_t, 8>& state, const unsigned char* block) {
  std::array<uint32_t, 64> schedule{};
  for (int word = 0; word < 16; ++word) {
    schedule[word] = (uint32_t{block[4 * word]} << 24) | (uint32_t{block[4 * word + 1]} << 16) |
                     (uint32_t{block[4 * word + 2]} << 8) | uint32_t{block[4 * word + 3]};
  }
  for (int word = 16; word < 64; ++word) {
    const uint32_t s0 = rotate_right(schedule[word - 15], 7) ^
                        rotate_right(schedule[word - 15], 18) ^ (schedule[word - 15] >> 3);
    const uint32_t s1 = rotate_right(schedule[word - 2], 17) ^
                        rotate_right(schedule[word - 2], 19) ^ (schedule[word - 2] >> 10);
    schedule[word] = schedule[word - 16] + s0 + schedule[word - 7] + s1;
  }
  auto [a, b, c, d, e, f, g, h] = state;
  for (int round = 0; round < 64; ++round) {
    const uint32_t sum1 = rotate_right(e, 6) ^ rotate_right(e, 11) ^ rotate_right(e, 25);
    const uint32_t choose = (e & f) ^ (~e & g);
    const uint32_t temp1 = h + sum1 + choose + kRoundConstants[round] + schedule[round];
    const uint32_t sum0 = rotate_right(a, 2) ^ rotate_right(a, 13) ^ rotate_right(a, 22);
    const uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t temp2 = sum0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + temp1;
    d = c;
    c = b;
    b = a;
    a = temp1 + temp2;
  }
  const std::array<uint32_t, 8> added = {a, b, c, d, e, f, g, h};
  for (int index = 0; index < 8; ++index) state[index] += added[index];
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  std::array<uint32_t, 8> state = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t offset = 0;
  for (; offset + 64 <= bytes.size(); offset += 64) compress(state, data + offset);
  // The tail, the 0x80 marker and the big-endian bit length fill one or two final blocks.
  std::array<unsigned char, 128> tail{};
  const size_t rest = bytes.size() - offset;
  for (size_t index = 0; index < rest; ++index) tail[index] = data[offset + index];
  tail[rest] = 0x80;
  const size_t tail_size = rest + 1 + 8 <= 64 ? 64 : 128;
  const uint64_t bit_length = static_cast<uint64_t>(bytes.size()) * 8;
  for (int byte = 0; byte < 8; ++byte) {
    tail[tail_size - 1 - byte] = static_cast<unsigned char>(bit_length >> (8 * byte));
  }
  for (size_t block = 0; block < tail_size; block += 64) compress(state, tail.data() + block);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(64);
  for (uint32_t word : state) {
    for (int shift = 28; shift >= 0; shift -= 4) hex += kHex[(word >> shift) & 0xF];
  }
  return hex;
}

}  // namespace loupe
