// subject/guards.hpp — the measurements the check guards make next to the candidate.
//
// These functions only observe (a poison pattern, a checksum, an address overlap); what the
// observations mean is decided by loupe from the observation file (src/probe).
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>

#include "loupe/tensor.hpp"

namespace loupe::subject {

// Fills every element with the poison pattern of its dtype: a quiet NaN with a payload no
// arithmetic produces (float32 0x7FC0DEAD, float64 0x7FF8DEADDEADDEAD, float16 0x7E5A,
// bfloat16 0x7FDA, fp8 0x7F) or, for integers and bool, every bit set.
// REQUIRES: the tensor owns its storage.
void fill_poison(Tensor& tensor);

// How many elements still hold the poison pattern bit for bit.
int64_t count_poison(const Tensor& tensor);

// A 64-bit checksum of the bytes (FNV-1a over 8-byte words, then the tail).
uint64_t checksum_bytes(const std::byte* data, size_t size);
inline uint64_t checksum(const Tensor& tensor) {
  return checksum_bytes(tensor.bytes(), tensor.nbytes());
}

// True when [a, a + a_size) and [b, b + b_size) share a byte.
bool ranges_overlap(const void* a, size_t a_size, const void* b, size_t b_size);

}  // namespace loupe::subject
