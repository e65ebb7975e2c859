// Inputs the trace fuzzers (fuzz/trace_binary_fuzz, fuzz/chrome_gzip_fuzz) crashed on, read the way
// `loupe trace` reads a file. Each must be refused with Error(kInput) naming the file and the
// field.
#include <gtest/gtest.h>

#include <string>

#include "loupe/error.hpp"
#include "trace/import/import.hpp"

namespace loupe::trace {
namespace {

struct Case {
  const char* file;
  const char* expected;  // a phrase of the message: the field that was wrong
};

class TraceImportFuzzRegression : public ::testing::TestWithParam<Case> {};

TEST_P(TraceImportFuzzRegression, IsRefusedWithAnInputError) {
  const std::string path = std::string(LOUPE_FUZZ_FIXTURES) + "/" + GetParam().file;
  try {
    (void)load_traces({path});
    FAIL() << path << " was read without an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput) << error.what();
    const std::string message = error.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(GetParam().expected), std::string::npos) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Found, TraceImportFuzzRegression,
    ::testing::Values(
        // string_count 2^32-1 and nothing after the header: 16 GiB were allocated for the names.
        Case{"trace_string_count_huge.loupetrace", "string_count at offset 56"},
        // The same inside a gzip member, as chrome_gzip_fuzz found it.
        Case{"chrome_gzip_oom_string_count.loupetrace.gz", "string_count at offset 56"},
        // event_count 2^59+1: times 32 bytes wraps to 32 and passed the byte check; the reader
        // then reserved 2^58 slices.
        Case{"trace_event_count_wraps.loupetrace", "events for thread 1"}));

}  // namespace
}  // namespace loupe::trace
