// core/gzip.hpp: gzip input inflated under an absolute and a ratio cap (issue 34).
#include "core/gzip.hpp"
#include "core/process.hpp"

#include <zlib.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace loupe {
namespace {

// One gzip member of `text`, level 9.
std::string gzip(const std::string& text) {
  z_stream stream{};
  EXPECT_EQ(deflateInit2(&stream, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&stream, text.size()) + 64, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&stream, Z_FINISH), Z_STREAM_END);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

std::string inflate_error(const std::string& bytes, const DecompressionLimits& limits,
                          TruncatedGzip truncated = TruncatedGzip::kError) {
  try {
    inflate_gzip(bytes, "t.json.gz", truncated, limits);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    return error.message() + " | " + error.hint();
  }
  return "accepted";
}

TEST(Gzip, InflatesConcatenatedMembers) {
  const std::string bytes = gzip("[{\"a\":1},") + gzip("{\"b\":2}]");
  EXPECT_EQ(inflate_gzip(bytes, "t.json.gz", TruncatedGzip::kError), "[{\"a\":1},{\"b\":2}]");
}

TEST(Gzip, TruncatedStreamIsKeptOrRefusedAsAsked) {
  const std::string text(100000, 'x');
  const std::string whole = gzip(text);
  const std::string cut = whole.substr(0, whole.size() - 12);
  const std::string kept = inflate_gzip(cut, "t.json.gz", TruncatedGzip::kKeep);
  EXPECT_LE(kept.size(), text.size());
  EXPECT_EQ(kept, text.substr(0, kept.size()));
  EXPECT_EQ(inflate_error(cut, {}), "t.json.gz: the gzip stream ends early at compressed byte " +
                                        std::to_string(cut.size()) +
                                        " | check the file with `gzip -t`");
}

TEST(Gzip, CorruptDataNamesTheOffset) {
  std::string bytes = gzip(std::string(4096, 'y'));
  bytes[12] = static_cast<char>(0xff);
  bytes[13] = static_cast<char>(0xff);
  EXPECT_NE(inflate_error(bytes, {}).find("t.json.gz: corrupt gzip data at compressed byte "),
            std::string::npos);
}

// Issue 34: a gzip bomb stops at the ratio cap while streaming, naming the file, the cap and how
// to raise it; the same input within a raised cap inflates.
TEST(Gzip, Issue34BombStopsAtTheRatioCap) {
  // 80 members of 1 MiB of zeros: 80 MiB from ~80 KB.
  const std::string member = gzip(std::string(size_t{1} << 20, '\0'));
  std::string bomb;
  for (int index = 0; index < 80; ++index) bomb += member;
  const std::string error = inflate_error(bomb, {});
  const std::string stated =
      "t.json.gz: inflates past the ratio cap (50 times its compressed size "
      "of " +
      std::to_string(bomb.size()) + " bytes, past the first 32 MiB); stopped at compressed byte ";
  EXPECT_EQ(error.substr(0, stated.size()), stated);
  EXPECT_EQ(error.substr(error.find(" | ")),
            " | if the file is trusted, raise the cap with --max-inflate-ratio N (or "
            "LOUPE_MAX_INFLATE_RATIO=N)");
  EXPECT_EQ(
      inflate_gzip(bomb, "t.json.gz", TruncatedGzip::kError, {uint64_t{1} << 30, 100000}).size(),
      size_t{80} << 20);
}

TEST(Gzip, Issue34AbsoluteCapBindsBelowTheRatio) {
  const std::string text(size_t{3} << 20, 'z');
  EXPECT_EQ(inflate_error(gzip(text), {size_t{1} << 20, 100}).substr(0, 75),
            "t.json.gz: inflates past the absolute cap of 1 MiB; stopped at compressed b");
  EXPECT_NE(inflate_error(gzip(text), {size_t{1} << 20, 100})
                .find("raise the cap with --max-inflated SIZE (or LOUPE_MAX_INFLATED=SIZE)"),
            std::string::npos);
}

// A trailer whose ISIZE claims 4 GiB: nothing is allocated from it, and the data decides.
TEST(Gzip, Issue34LyingSizeInTheTrailerIsNotTrusted) {
  std::string bytes = gzip("{\"traceEvents\":[]}");
  const uint32_t claimed = 0xffffffffu;
  std::memcpy(bytes.data() + bytes.size() - 4, &claimed, 4);
  EXPECT_NE(inflate_error(bytes, {}).find("t.json.gz: corrupt gzip data at compressed byte "),
            std::string::npos);
}

TEST(Gzip, SizesAndRatiosParse) {
  EXPECT_EQ(parse_byte_size("--max-inflated", "16G"), uint64_t{16} << 30);
  EXPECT_EQ(parse_byte_size("--max-inflated", "512MiB"), uint64_t{512} << 20);
  EXPECT_EQ(parse_byte_size("--max-inflated", "4096"), 4096u);
  EXPECT_EQ(parse_inflate_ratio("250", "--max-inflate-ratio"), 250u);
  try {
    parse_byte_size("--max-inflated", "lots");
    ADD_FAILURE();
  } catch (const Error& error) {
    EXPECT_EQ(error.message(),
              "--max-inflated 'lots': expected a size in bytes such as 512M, 2G or 1048576");
  }
  EXPECT_THROW(parse_inflate_ratio("0", "--max-inflate-ratio"), Error);
}

}  // namespace
}  // namespace loupe
