// trace/record/binary_format.hpp — loupe's binary trace format (docs/formats.md, "Trace format").
//
// Little-endian, written by the recorder (record.cpp) and read by import/binary_import.cpp:
//   FileHeader (72 bytes, magic "LOUPETRC", version)
//   string_count × { u32 length, bytes }                names, index = NameId
//   lock_count   × { u32 lock_id, u32 name_id, u32 flags (1 = shared) }
//   thread_count × { ThreadHeader, event_count × RawEvent (32 bytes each, oldest first) }
// Timestamps are CLOCK_MONOTONIC nanoseconds, so files of one host share a clock domain.
// Thread-safety: plain data.
#pragma once

#include <cstdint>

namespace loupe::trace::format {

inline constexpr char kMagic[8] = {'L', 'O', 'U', 'P', 'E', 'T', 'R', 'C'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kNoName = 0xFFFFFFFFu;

enum class ClockDomain : uint32_t { kMonotonic = 1 };
enum class Timer : uint32_t { kTsc = 1, kSteadyClock = 2 };

enum class EventKind : uint8_t {
  kZoneBegin = 1,  // name
  kZoneEnd = 2,    // closes the innermost open zone of the thread
  kInstant = 3,    // name
  kCounter = 4,    // name, a = the value's double bits
  kFlowBegin = 5,  // name, a = flow id
  kFlowEnd = 6,    // name, a = flow id
  kLock = 7,       // sub = LockEvent (wait, obtain, release and their shared forms), a = lock id
};

struct RawEvent {
  uint64_t ts;  // ticks while recording; CLOCK_MONOTONIC ns in the file
  uint32_t name;
  uint8_t kind;
  uint8_t sub;
  uint16_t reserved;
  uint64_t a;
  uint64_t b;
};
static_assert(sizeof(RawEvent) == 32, "events are 32 bytes");

#pragma pack(push, 1)
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_size;
  uint32_t clock_domain;
  uint32_t timer;
  int64_t start_ns;
  int64_t end_ns;
  int64_t wall_start_unix_ns;
  uint32_t pid;
  uint32_t thread_count;
  uint32_t string_count;
  uint32_t lock_count;
  uint64_t dropped_total;
};
struct ThreadHeader {
  uint32_t tid;      // loupe's sequential thread number, from 1
  uint32_t name_id;  // kNoName when the thread was not named
  uint64_t os_tid;
  uint64_t event_count;
  uint64_t dropped;
};
#pragma pack(pop)
static_assert(sizeof(FileHeader) == 72, "the header is 72 bytes");
static_assert(sizeof(ThreadHeader) == 32, "a thread header is 32 bytes");

}  // namespace loupe::trace::format
