// core/sha256.hpp — SHA-256 of bytes, as 64 lowercase hex digits.
// Thread-safety: a pure function.
#pragma once

#include <string>
#include <string_view>

namespace loupe {

std::string sha256_hex(std::string_view bytes);

}  // namespace loupe
