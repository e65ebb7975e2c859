// loupe/trace.hpp — in-process trace recording: zones, instants, counters, flows, thread names
// and traced mutexes, written to loupe's binary trace format (docs/formats.md, "Trace format").
//
// Recording is off until enabled, by the environment (LOUPE_TRACE=path: recording starts before
// main and the file is written at exit) or by loupe::trace::start(). When off, a macro costs one
// relaxed load and a branch; when the build sets LOUPE_INSTRUMENT=0 the macros expand to nothing.
//
// Each thread records into its own buffer (no lock, no allocation on the hot path; the buffer is
// reserved on the thread's first event). Events are 32 bytes; timestamps come from the calibrated
// TSC where it is invariant, else from the steady clock, and are written as CLOCK_MONOTONIC ns.
// Memory is bounded per thread (Options::events_per_thread): when a buffer is full it either stops
// recording (kStopWhenFull) or overwrites its oldest events (kRing, a flight recorder); either
// way the number of dropped events is written into the file.
//
// Thread-safety: every recording function may be called from any thread. start() and stop() are
// serialised internally. REQUIRES: no thread is still recording when stop() runs, else events
// recorded during stop() may be missing from the file (they are never torn).
// Ownership: buffers live until process exit, so threads that ended before stop() are written.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>

#ifndef LOUPE_INSTRUMENT
#define LOUPE_INSTRUMENT 1
#endif

namespace loupe::trace {

enum class BufferMode : uint8_t { kStopWhenFull, kRing };

struct Options {
  uint64_t events_per_thread = 1u << 22;  // 4 Mi events = 128 MiB of address space per thread
  BufferMode mode = BufferMode::kStopWhenFull;
};

// Starts recording into `path` (written by stop()). Returns false when a session is already on.
// Options may also come from the environment: LOUPE_TRACE_EVENTS_PER_THREAD, LOUPE_TRACE_MODE=ring.
bool start(const std::string& path, const Options& options = {});
// Stops recording and writes the file. Throws loupe::Error(kInput) when the file cannot be written.
// Returns the number of events written; 0 when no session was on.
uint64_t stop();

namespace detail {
extern std::atomic<bool> g_enabled;
}  // namespace detail

inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }

// A name interned once; ids are stable for the process lifetime.
using NameId = uint32_t;
NameId intern(std::string_view name);

// Low-level recording calls; the macros and classes below are the usual way in.
void zone_begin(NameId name);
void zone_end();
void instant(NameId name);
void counter(NameId name, double value);
// Flows connect work across threads: the begin binds to the zone open on the calling thread, the
// end to the zone open on the thread that ends it. `id` must be unique among open flows.
void flow_begin(NameId name, uint64_t id);
void flow_end(NameId name, uint64_t id);
// Names the calling thread in the trace (may be called before or during recording).
void set_thread_name(std::string_view name);

// Counts of the current (or last) session, for tests and reports.
struct SessionCounts {
  uint64_t recorded = 0;
  uint64_t dropped = 0;
};
SessionCounts session_counts();

// A scoped zone: begins at construction, ends at destruction. Records nothing when recording was
// off at construction.
class Zone {
 public:
  explicit Zone(NameId name) : active_(enabled()) {
    if (active_) zone_begin(name);
  }
  // Dynamic names: interned through a per-thread cache (a lock only the first time a thread sees
  // a name).
  explicit Zone(std::string_view name) : active_(enabled()) {
    if (active_) zone_begin(intern_cached(name));
  }
  ~Zone() {
    if (active_) zone_end();
  }
  Zone(const Zone&) = delete;
  Zone& operator=(const Zone&) = delete;

  static NameId intern_cached(std::string_view name);

 private:
  bool active_;
};

namespace detail {
// Lock recording is compiled out with the macros: the traced mutexes are then plain mutexes.
constexpr bool kLockRecordingCompiledIn = LOUPE_INSTRUMENT != 0;
inline bool lock_recording() { return kLockRecordingCompiledIn && enabled(); }
enum class LockEvent : uint8_t {
  kWait,
  kObtain,
  kRelease,
  kWaitShared,
  kObtainShared,
  kReleaseShared
};
uint32_t register_lock(std::string_view name, bool shared);
void lock_event(uint32_t lock_id, LockEvent event);
}  // namespace detail

// A drop-in std::mutex that records wait-begin (only when the lock is contended), obtain and
// release with the recording thread as holder. No cap on the number of threads per lock.
class TracedMutex {
 public:
  explicit TracedMutex(std::string_view name = "mutex")
      : id_(detail::kLockRecordingCompiledIn ? detail::register_lock(name, false) : 0) {}
  TracedMutex(const TracedMutex&) = delete;
  TracedMutex& operator=(const TracedMutex&) = delete;

  void lock() {
    if (!detail::lock_recording()) return mutex_.lock();
    if (!mutex_.try_lock()) {
      detail::lock_event(id_, detail::LockEvent::kWait);
      mutex_.lock();
    }
    detail::lock_event(id_, detail::LockEvent::kObtain);
  }
  bool try_lock() {
    if (!mutex_.try_lock()) return false;
    if (detail::lock_recording()) detail::lock_event(id_, detail::LockEvent::kObtain);
    return true;
  }
  void unlock() {
    // The release is stamped before the unlock so it never follows the next holder's obtain.
    if (detail::lock_recording()) detail::lock_event(id_, detail::LockEvent::kRelease);
    mutex_.unlock();
  }
  uint32_t id() const { return id_; }

 private:
  std::mutex mutex_;
  uint32_t id_;
};

// A drop-in std::shared_mutex with the same recording; shared holders are recorded as such.
class TracedSharedMutex {
 public:
  explicit TracedSharedMutex(std::string_view name = "shared_mutex")
      : id_(detail::kLockRecordingCompiledIn ? detail::register_lock(name, true) : 0) {}
  TracedSharedMutex(const TracedSharedMutex&) = delete;
  TracedSharedMutex& operator=(const TracedSharedMutex&) = delete;

  void lock() {
    if (!detail::lock_recording()) return mutex_.lock();
    if (!mutex_.try_lock()) {
      detail::lock_event(id_, detail::LockEvent::kWait);
      mutex_.lock();
    }
    detail::lock_event(id_, detail::LockEvent::kObtain);
  }
  bool try_lock() {
    if (!mutex_.try_lock()) return false;
    if (detail::lock_recording()) detail::lock_event(id_, detail::LockEvent::kObtain);
    return true;
  }
  void unlock() {
    if (detail::lock_recording()) detail::lock_event(id_, detail::LockEvent::kRelease);
    mutex_.unlock();
  }
  void lock_shared() {
    if (!detail::lock_recording()) return mutex_.lock_shared();
    if (!mutex_.try_lock_shared()) {
      detail::lock_event(id_, detail::LockEvent::kWaitShared);
      mutex_.lock_shared();
    }
    detail::lock_event(id_, detail::LockEvent::kObtainShared);
  }
  bool try_lock_shared() {
    if (!mutex_.try_lock_shared()) return false;
    if (detail::lock_recording()) detail::lock_event(id_, detail::LockEvent::kObtainShared);
    return true;
  }
  void unlock_shared() {
    if (detail::lock_recording()) detail::lock_event(id_, detail::LockEvent::kReleaseShared);
    mutex_.unlock_shared();
  }
  uint32_t id() const { return id_; }

 private:
  std::shared_mutex mutex_;
  uint32_t id_;
};

}  // namespace loupe::trace

#define LOUPE_TRACE_CONCAT_INNER(a, b) a##b
#define LOUPE_TRACE_CONCAT(a, b) LOUPE_TRACE_CONCAT_INNER(a, b)

#if LOUPE_INSTRUMENT
// A zone with a literal name, interned once per call site; ends at the end of the scope.
#define LOUPE_ZONE(name)                                                                  \
  const ::loupe::trace::Zone LOUPE_TRACE_CONCAT(loupe_zone_, __LINE__) {                  \
    [] {                                                                                  \
      static const ::loupe::trace::NameId loupe_zone_name = ::loupe::trace::intern(name); \
      return loupe_zone_name;                                                             \
    }()                                                                                   \
  }
// A zone whose name is computed at run time (anything convertible to std::string_view).
#define LOUPE_ZONE_DYNAMIC(name_view)                                    \
  const ::loupe::trace::Zone LOUPE_TRACE_CONCAT(loupe_zone_, __LINE__) { \
    std::string_view(name_view)                                          \
  }
#define LOUPE_INSTANT(name)                                                                  \
  do {                                                                                       \
    if (::loupe::trace::enabled()) {                                                         \
      static const ::loupe::trace::NameId loupe_instant_name = ::loupe::trace::intern(name); \
      ::loupe::trace::instant(loupe_instant_name);                                           \
    }                                                                                        \
  } while (0)
#define LOUPE_COUNTER(name, value)                                                           \
  do {                                                                                       \
    if (::loupe::trace::enabled()) {                                                         \
      static const ::loupe::trace::NameId loupe_counter_name = ::loupe::trace::intern(name); \
      ::loupe::trace::counter(loupe_counter_name, static_cast<double>(value));               \
    }                                                                                        \
  } while (0)
#define LOUPE_FLOW_BEGIN(name, id)                                                        \
  do {                                                                                    \
    if (::loupe::trace::enabled()) {                                                      \
      static const ::loupe::trace::NameId loupe_flow_name = ::loupe::trace::intern(name); \
      ::loupe::trace::flow_begin(loupe_flow_name, static_cast<uint64_t>(id));             \
    }                                                                                     \
  } while (0)
#define LOUPE_FLOW_END(name, id)                                                          \
  do {                                                                                    \
    if (::loupe::trace::enabled()) {                                                      \
      static const ::loupe::trace::NameId loupe_flow_name = ::loupe::trace::intern(name); \
      ::loupe::trace::flow_end(loupe_flow_name, static_cast<uint64_t>(id));               \
    }                                                                                     \
  } while (0)
#define LOUPE_THREAD_NAME(name) ::loupe::trace::set_thread_name(name)
#else
#define LOUPE_ZONE(name) static_cast<void>(0)
#define LOUPE_ZONE_DYNAMIC(name_view) static_cast<void>(0)
#define LOUPE_INSTANT(name) static_cast<void>(0)
#define LOUPE_COUNTER(name, value) static_cast<void>(0)
#define LOUPE_FLOW_BEGIN(name, id) static_cast<void>(0)
#define LOUPE_FLOW_END(name, id) static_cast<void>(0)
#define LOUPE_THREAD_NAME(name) static_cast<void>(0)
#endif
