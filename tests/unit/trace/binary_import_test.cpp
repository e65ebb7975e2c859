// The binary reader rejects files it cannot read with errors that name the file and the offset.
#include <gtest/gtest.h>

#include <cstring>

#include "loupe/error.hpp"
#include "trace/import/import.hpp"
#include "trace/record/binary_format.hpp"

namespace loupe::trace {
namespace {

std::string header_bytes(uint32_t version, uint32_t threads, uint32_t strings) {
  format::FileHeader header{};
  std::memcpy(header.magic, format::kMagic, sizeof(header.magic));
  header.version = version;
  header.header_size = sizeof(header);
  header.clock_domain = 1;
  header.timer = 2;
  header.thread_count = threads;
  header.string_count = strings;
  return std::string(reinterpret_cast<const char*>(&header), sizeof(header));
}

std::string error_of(const std::string& bytes) {
  Model model;
  ModelBuilder builder(model);
  try {
    import_loupe_binary(bytes, "t.loupetrace", builder, 0);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    return error.message();
  }
  return "";
}

TEST(BinaryImport, WrongMagicVersionAndTruncationAreInputErrors) {
  std::string bad_magic = header_bytes(1, 0, 0);
  bad_magic[0] = 'X';
  EXPECT_NE(error_of(bad_magic).find("magic"), std::string::npos);
  EXPECT_NE(error_of(header_bytes(99, 0, 0)).find("version 99"), std::string::npos);
  EXPECT_NE(error_of(header_bytes(1, 0, 0).substr(0, 20)).find("offset"), std::string::npos);
  // One thread declared, no thread header follows.
  const std::string truncated = error_of(header_bytes(1, 1, 0));
  EXPECT_NE(truncated.find("t.loupetrace"), std::string::npos) << truncated;
  EXPECT_NE(truncated.find("thread header"), std::string::npos) << truncated;
}

TEST(BinaryImport, UnmatchedZoneEndsAndUnclosedZonesAreRepaired) {
  std::string bytes = header_bytes(1, 1, 1);
  const uint32_t length = 4;
  bytes.append(reinterpret_cast<const char*>(&length), 4);
  bytes += "zone";
  format::ThreadHeader thread{1, format::kNoName, 77, 3, 0};
  bytes.append(reinterpret_cast<const char*>(&thread), sizeof(thread));
  const format::RawEvent events[3] = {
      {10, format::kNoName, static_cast<uint8_t>(format::EventKind::kZoneEnd), 0, 0, 0, 0},
      {20, 0, static_cast<uint8_t>(format::EventKind::kZoneBegin), 0, 0, 0, 0},
      {30, 0, static_cast<uint8_t>(format::EventKind::kInstant), 0, 0, 0, 0}};
  bytes.append(reinterpret_cast<const char*>(events), sizeof(events));
  Model model;
  ModelBuilder builder(model);
  import_loupe_binary(bytes, "t.loupetrace", builder, 0);
  builder.finish();
  EXPECT_EQ(model.stats.count(Stat::trace_zone_end_unmatched), 1);
  EXPECT_EQ(model.stats.count(Stat::trace_zone_unclosed), 1);
  ASSERT_EQ(model.slices.size(), 1u);
  EXPECT_EQ(model.slices.start_ns[0], 20);
  EXPECT_EQ(model.slices.end_ns[0], 30);
  EXPECT_EQ(model.tracks[model.slices.track[0]].name, "thread 1");
}

TEST(BinaryImport, FlowWithoutItsEndIsCounted) {
  std::string bytes = header_bytes(1, 1, 1);
  const uint32_t length = 1;
  bytes.append(reinterpret_cast<const char*>(&length), 4);
  bytes += "f";
  format::ThreadHeader thread{1, 0, 77, 1, 0};
  bytes.append(reinterpret_cast<const char*>(&thread), sizeof(thread));
  const format::RawEvent event = {5, 0, static_cast<uint8_t>(format::EventKind::kFlowBegin), 0, 0,
                                  9, 0};
  bytes.append(reinterpret_cast<const char*>(&event), sizeof(event));
  Model model;
  ModelBuilder builder(model);
  import_loupe_binary(bytes, "t.loupetrace", builder, 0);
  builder.finish();
  EXPECT_EQ(model.stats.count(Stat::trace_flow_unmatched), 1);
  EXPECT_EQ(model.flows.size(), 0u);
}

}  // namespace
}  // namespace loupe::trace
