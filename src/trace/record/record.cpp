// The recorder behind include/loupe/trace.hpp: per-thread buffers, the TSC clock and the writer
// of the binary format (binary_format.hpp). Links nothing but the standard library and core's
// Error.
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#define LOUPE_TRACE_HAS_TSC 1
#else
#define LOUPE_TRACE_HAS_TSC 0
#endif

#include "loupe/error.hpp"
#include "loupe/trace.hpp"
#include "trace/record/binary_format.hpp"

namespace loupe::trace {
namespace detail {
std::atomic<bool> g_enabled{false};
}  // namespace detail

namespace {

using format::EventKind;
using format::RawEvent;

int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

int64_t realtime_ns() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

bool tsc_is_invariant() {
#if LOUPE_TRACE_HAS_TSC
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0x80000000u, &eax, &ebx, &ecx, &edx) == 0 || eax < 0x80000007u) return false;
  if (__get_cpuid(0x80000007u, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx & (1u << 8)) != 0;
#else
  return false;
#endif
}

// Chosen once, before any recording: the TSC where it is invariant, the monotonic clock else.
const bool g_use_tsc = tsc_is_invariant() && std::getenv("LOUPE_TRACE_NO_TSC") == nullptr;

inline uint64_t now_ticks() {
#if LOUPE_TRACE_HAS_TSC
  if (g_use_tsc) return __rdtsc();
#endif
  return static_cast<uint64_t>(monotonic_ns());
}

struct ThreadBuffer {
  // The hot path reads only the first cache line: where to write, and how far it may go.
  RawEvent* slots = nullptr;  // events.get()
  uint64_t mask = 0;
  // Events the fast path (push) may record before handing over to push_slow: the capacity when
  // recording stops when full, no limit in a ring, 0 without a buffer or without the TSC.
  uint64_t fast_limit = 0;
  std::atomic<uint64_t> count{0};
  std::unique_ptr<RawEvent[]> events;
  uint64_t capacity = 0;  // a power of two, or 0 before the first session
  std::atomic<uint64_t> dropped{0};
  uint32_t tid = 0;
  uint64_t os_tid = 0;
  uint32_t name_id = format::kNoName;
};

struct LockInfo {
  uint32_t name_id;
  bool shared;
};

// Leaked on purpose: atexit handlers and late threads may use it during static destruction.
struct Registry {
  std::mutex mutex;
  std::vector<std::string> names;
  std::unordered_map<std::string, NameId> name_ids;
  std::vector<std::unique_ptr<ThreadBuffer>> threads;
  std::vector<LockInfo> locks;
  // Session state, guarded by mutex.
  std::string path;
  Options options;
  bool ring = false;
  int64_t start_ns = 0;
  int64_t wall_start_ns = 0;
  uint64_t start_ticks = 0;
  SessionCounts last_counts;
};

Registry& registry() {
  static Registry* instance = new Registry();
  return *instance;
}

// Read on the hot path; written only by start() while no session is on.
bool g_ring = false;

uint64_t round_up_power_of_two(uint64_t value) {
  uint64_t power = 1;
  while (power < value) power <<= 1;
  return power;
}

// REQUIRES: g_ring set for the session.
void allocate(ThreadBuffer& buffer, uint64_t capacity) {
  if (buffer.capacity != capacity) {
    // new[] of a trivial type leaves pages untouched, so unused budget costs address space only.
    buffer.events.reset(new RawEvent[capacity]);
    buffer.slots = buffer.events.get();
    buffer.capacity = capacity;
    buffer.mask = capacity - 1;
  }
  buffer.fast_limit = !g_use_tsc || capacity == 0 ? 0 : (g_ring ? UINT64_MAX : capacity);
  buffer.count.store(0, std::memory_order_relaxed);
  buffer.dropped.store(0, std::memory_order_relaxed);
}

// Initial-exec: one %fs-relative load even when this library ends up in a shared object.
[[gnu::tls_model("initial-exec")]] thread_local ThreadBuffer* t_buffer = nullptr;

ThreadBuffer* attach_thread() {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  auto buffer = std::make_unique<ThreadBuffer>();
  buffer->tid = static_cast<uint32_t>(reg.threads.size() + 1);
  buffer->os_tid = static_cast<uint64_t>(syscall(SYS_gettid));
  if (detail::g_enabled.load(std::memory_order_relaxed)) {
    allocate(*buffer, round_up_power_of_two(reg.options.events_per_thread));
  }
  t_buffer = buffer.get();
  reg.threads.push_back(std::move(buffer));
  return t_buffer;
}

inline void write_event(ThreadBuffer& buffer, uint64_t index, uint64_t ticks, EventKind kind,
                        uint8_t sub, NameId name, uint64_t a) {
  RawEvent& event = buffer.slots[index & buffer.mask];
  event.ts = ticks;
  event.name = name;
  event.kind = static_cast<uint8_t>(kind);
  event.sub = sub;
  event.reserved = 0;
  event.a = a;
  event.b = 0;
  buffer.count.store(index + 1, std::memory_order_release);
}

// Everything push() leaves: the thread's first event, a full buffer, no buffer, the steady clock.
[[gnu::noinline, gnu::cold]] void push_slow(EventKind kind, uint8_t sub, NameId name, uint64_t a) {
  ThreadBuffer* buffer = t_buffer;
  if (buffer == nullptr) buffer = attach_thread();
  const uint64_t index = buffer->count.load(std::memory_order_relaxed);
  if (index >= buffer->capacity && !g_ring) {
    buffer->dropped.store(buffer->dropped.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
    return;
  }
  if (buffer->capacity == 0) return;
  write_event(*buffer, index, now_ticks(), kind, sub, name, a);
}

// The hot path: one thread-local load, one compare, the TSC and a 32-byte store. With no callee
// register to save (the rest is a tail call), it adds little to the clock read on top of it.
inline void push(EventKind kind, uint8_t sub, NameId name, uint64_t a) {
#if LOUPE_TRACE_HAS_TSC
  ThreadBuffer* buffer = t_buffer;
  if (buffer != nullptr) [[likely]] {
    const uint64_t index = buffer->count.load(std::memory_order_relaxed);
    if (index < buffer->fast_limit) [[likely]] {
      write_event(*buffer, index, __rdtsc(), kind, sub, name, a);
      return;
    }
  }
#endif
  push_slow(kind, sub, name, a);
}

NameId intern_locked(Registry& reg, std::string_view name) {
  auto found = reg.name_ids.find(std::string(name));
  if (found != reg.name_ids.end()) return found->second;
  const auto id = static_cast<NameId>(reg.names.size());
  reg.names.emplace_back(name);
  reg.name_ids.emplace(std::string(name), id);
  return id;
}

class FileWriter {
 public:
  explicit FileWriter(const std::string& path)
      : path_(path), file_(std::fopen(path.c_str(), "wb")) {
    if (file_ == nullptr) {
      throw Error(ErrorCode::kInput, "cannot open trace file '" + path + "' for writing",
                  "check that the directory exists and is writable (LOUPE_TRACE=path)");
    }
  }
  ~FileWriter() {
    if (file_ != nullptr) std::fclose(file_);
  }
  void write(const void* data, size_t size) {
    if (size != 0 && std::fwrite(data, 1, size, file_) != size) {
      throw Error(ErrorCode::kInput, "cannot write trace file '" + path_ + "' (disk full?)");
    }
  }
  void close() {
    const int status = std::fclose(file_);
    file_ = nullptr;
    if (status != 0) throw Error(ErrorCode::kInput, "cannot close trace file '" + path_ + "'");
  }

 private:
  std::string path_;
  FILE* file_;
};

template <typename T>
void write_value(FileWriter& writer, const T& value) {
  writer.write(&value, sizeof(value));
}

void stop_at_exit() {
  try {
    stop();
  } catch (const Error& error) {
    std::fprintf(stderr, "loupe trace: %s\n", error.message().c_str());
  }
}

// LOUPE_TRACE=path starts a session before main and writes the file at exit.
const bool g_started_from_environment = [] {
  const char* path = std::getenv("LOUPE_TRACE");
  if (path == nullptr || *path == '\0') return false;
  if (!start(path)) return false;
  std::atexit(stop_at_exit);
  return true;
}();

}  // namespace

bool start(const std::string& path, const Options& requested) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  if (detail::g_enabled.load(std::memory_order_relaxed)) return false;
  Options options = requested;
  if (const char* events = std::getenv("LOUPE_TRACE_EVENTS_PER_THREAD")) {
    options.events_per_thread = std::strtoull(events, nullptr, 10);
  }
  if (const char* mode = std::getenv("LOUPE_TRACE_MODE")) {
    if (std::string_view(mode) == "ring") options.mode = BufferMode::kRing;
  }
  if (options.events_per_thread == 0) options.events_per_thread = 1;
  const uint64_t capacity = round_up_power_of_two(options.events_per_thread);
  g_ring = options.mode == BufferMode::kRing;
  for (auto& buffer : reg.threads) allocate(*buffer, capacity);
  reg.path = path;
  reg.options = options;
  reg.options.events_per_thread = capacity;
  reg.start_ns = monotonic_ns();
  reg.start_ticks = now_ticks();
  reg.wall_start_ns = realtime_ns();
  detail::g_enabled.store(true, std::memory_order_release);
  return true;
}

uint64_t stop() {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  if (!detail::g_enabled.load(std::memory_order_relaxed)) return 0;
  detail::g_enabled.store(false, std::memory_order_release);

  // Calibrate ticks against CLOCK_MONOTONIC over the whole session (at least 2 ms).
  int64_t end_ns = monotonic_ns();
  uint64_t end_ticks = now_ticks();
  if (g_use_tsc) {
    while (end_ns - reg.start_ns < 2'000'000) {
      end_ns = monotonic_ns();
      end_ticks = now_ticks();
    }
  }
  const double ns_per_tick = g_use_tsc ? static_cast<double>(end_ns - reg.start_ns) /
                                             static_cast<double>(end_ticks - reg.start_ticks)
                                       : 1.0;
  auto to_ns = [&](uint64_t ticks) -> int64_t {
    if (!g_use_tsc) return static_cast<int64_t>(ticks);
    const auto delta = static_cast<double>(static_cast<int64_t>(ticks - reg.start_ticks));
    return reg.start_ns + static_cast<int64_t>(delta * ns_per_tick);
  };

  FileWriter writer(reg.path);
  format::FileHeader header{};
  std::memcpy(header.magic, format::kMagic, sizeof(header.magic));
  header.version = format::kVersion;
  header.header_size = sizeof(format::FileHeader);
  header.clock_domain = static_cast<uint32_t>(format::ClockDomain::kMonotonic);
  header.timer =
      static_cast<uint32_t>(g_use_tsc ? format::Timer::kTsc : format::Timer::kSteadyClock);
  header.start_ns = reg.start_ns;
  header.end_ns = end_ns;
  header.wall_start_unix_ns = reg.wall_start_ns;
  header.pid = static_cast<uint32_t>(getpid());
  header.thread_count = static_cast<uint32_t>(reg.threads.size());
  header.string_count = static_cast<uint32_t>(reg.names.size());
  header.lock_count = static_cast<uint32_t>(reg.locks.size());
  SessionCounts counts;
  for (const auto& buffer : reg.threads) {
    const uint64_t count = buffer->count.load(std::memory_order_acquire);
    const uint64_t kept = std::min(count, buffer->capacity);
    counts.recorded += kept;
    counts.dropped += buffer->dropped.load(std::memory_order_relaxed) + (count - kept);
  }
  header.dropped_total = counts.dropped;
  write_value(writer, header);
  for (const std::string& name : reg.names) {
    write_value(writer, static_cast<uint32_t>(name.size()));
    writer.write(name.data(), name.size());
  }
  for (size_t lock_index = 0; lock_index < reg.locks.size(); ++lock_index) {
    write_value(writer, static_cast<uint32_t>(lock_index));
    write_value(writer, reg.locks[lock_index].name_id);
    write_value(writer, static_cast<uint32_t>(reg.locks[lock_index].shared ? 1 : 0));
  }
  std::vector<RawEvent> chunk;
  for (const auto& buffer : reg.threads) {
    const uint64_t count = buffer->count.load(std::memory_order_acquire);
    const uint64_t kept = std::min(count, buffer->capacity);
    format::ThreadHeader thread{};
    thread.tid = buffer->tid;
    thread.name_id = buffer->name_id;
    thread.os_tid = buffer->os_tid;
    thread.event_count = kept;
    thread.dropped = buffer->dropped.load(std::memory_order_relaxed) + (count - kept);
    write_value(writer, thread);
    // In a ring the oldest kept event sits at count - kept.
    constexpr uint64_t kChunk = 1u << 14;
    for (uint64_t done = 0; done < kept; done += kChunk) {
      const uint64_t n = std::min(kChunk, kept - done);
      chunk.resize(n);
      for (uint64_t offset = 0; offset < n; ++offset) {
        RawEvent event = buffer->events[(count - kept + done + offset) & buffer->mask];
        event.ts = static_cast<uint64_t>(to_ns(event.ts));
        chunk[offset] = event;
      }
      writer.write(chunk.data(), n * sizeof(RawEvent));
    }
  }
  writer.close();
  reg.last_counts = counts;
  return counts.recorded;
}

SessionCounts session_counts() {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  if (!detail::g_enabled.load(std::memory_order_relaxed)) return reg.last_counts;
  SessionCounts counts;
  for (const auto& buffer : reg.threads) {
    const uint64_t count = buffer->count.load(std::memory_order_acquire);
    const uint64_t kept = std::min(count, buffer->capacity);
    counts.recorded += kept;
    counts.dropped += buffer->dropped.load(std::memory_order_relaxed) + (count - kept);
  }
  return counts;
}

NameId intern(std::string_view name) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  return intern_locked(reg, name);
}

NameId Zone::intern_cached(std::string_view name) {
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
  };
  thread_local std::unordered_map<std::string, NameId, Hash, std::equal_to<>> cache;
  auto found = cache.find(name);
  if (found != cache.end()) return found->second;
  const NameId id = intern(name);
  cache.emplace(std::string(name), id);
  return id;
}

void zone_begin(NameId name) { push(EventKind::kZoneBegin, 0, name, 0); }
void zone_end() { push(EventKind::kZoneEnd, 0, format::kNoName, 0); }
void instant(NameId name) { push(EventKind::kInstant, 0, name, 0); }
void counter(NameId name, double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  push(EventKind::kCounter, 0, name, bits);
}
void flow_begin(NameId name, uint64_t id) { push(EventKind::kFlowBegin, 0, name, id); }
void flow_end(NameId name, uint64_t id) { push(EventKind::kFlowEnd, 0, name, id); }

void set_thread_name(std::string_view name) {
  ThreadBuffer* buffer = t_buffer;
  if (buffer == nullptr) buffer = attach_thread();
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  buffer->name_id = intern_locked(reg, name);
}

namespace detail {

uint32_t register_lock(std::string_view name, bool shared) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  reg.locks.push_back({intern_locked(reg, name), shared});
  return static_cast<uint32_t>(reg.locks.size() - 1);
}

void lock_event(uint32_t lock_id, LockEvent event) {
  push(EventKind::kLock, static_cast<uint8_t>(event), format::kNoName, lock_id);
}

}  // namespace detail
}  // namespace loupe::trace
