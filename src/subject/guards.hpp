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

// Fills every element with poison drawn from `key` (a secret of the run) and the element's index:
// a NaN of either sign whose payload is random and never the one arithmetic produces (fp8
// e4m3, which has one NaN, gets that one), or, for integers and bool, every bit set (a random
// integer would be a value a path may legitimately write). Nothing but NaN-ness is shared from
// one run, or one element, to the next, so a path cannot recognise a pattern.
// REQUIRES: the tensor owns its storage.
void fill_poison(Tensor& tensor, uint64_t key);

// How many elements still hold their poison bit for bit.
int64_t count_poison(const Tensor& tensor, uint64_t key);

// A 64-bit checksum of the bytes (FNV-1a over 8-byte words, then the tail).
uint64_t checksum_bytes(const std::byte* data, size_t size);
inline uint64_t checksum(const Tensor& tensor) {
  return checksum_bytes(tensor.bytes(), tensor.nbytes());
}

// True when [a, a + a_size) and [b, b + b_size) share a byte.
bool ranges_overlap(const void* a, size_t a_size, const void* b, size_t b_size);

}  // namespace loupe::subject
