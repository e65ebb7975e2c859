// Inputs safetensors_fuzz crashed on, read through loupe::read_safetensors. Each must be refused
// with Error(kInput) naming the file and what was wrong.
#include <gtest/gtest.h>

#include <string>

#include "loupe/error.hpp"
#include "loupe/tensor.hpp"

namespace loupe {
namespace {

TEST(SafetensorsFuzzRegression, NumberBeyondDoubleRangeInTheHeaderIsAnInputError) {
  // {"a":1844674555551615e4073709555...}: nlohmann throws out_of_range 406 (not parse_error) for
  // a number that overflows a double; it escaped the reader as an uncaught exception.
  const std::string path =
      std::string(LOUPE_FUZZ_FIXTURES) + "/safetensors_number_overflow.safetensors";
  try {
    (void)read_safetensors(path);
    FAIL() << path << " was read without an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    const std::string message = error.message();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("invalid JSON header (bytes 8 to 116)"), std::string::npos) << message;
    EXPECT_NE(message.find("number overflow"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace loupe
