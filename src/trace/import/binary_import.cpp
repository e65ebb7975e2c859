// Reader of loupe's binary trace format (trace/record/binary_format.hpp).
#include <cstring>
#include <map>
#include <unordered_map>

#include "loupe/error.hpp"
#include "loupe/trace.hpp"
#include "trace/import/import.hpp"
#include "trace/record/binary_format.hpp"

namespace loupe::trace {
namespace {

class Cursor {
 public:
  Cursor(std::string_view bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  template <typename T>
  T read(const char* what) {
    T value;
    need(sizeof(T), what);
    std::memcpy(&value, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }
  std::string_view read_bytes(size_t size, const char* what) {
    need(size, what);
    std::string_view view = bytes_.substr(offset_, size);
    offset_ += size;
    return view;
  }
  const char* here() const { return bytes_.data() + offset_; }
  void need(size_t size, const char* what) const {
    if (bytes_.size() - offset_ < size) {
      throw Error(ErrorCode::kInput,
                  "trace file '" + name_ + "' ends at offset " + std::to_string(bytes_.size()) +
                      " while reading " + what + " (" + std::to_string(size) +
                      " bytes expected at offset " + std::to_string(offset_) + ")",
                  "the file is truncated; was the recording process killed before stop()?");
    }
  }
  void skip(size_t size, const char* what) {
    need(size, what);
    offset_ += size;
  }
  size_t offset() const { return offset_; }

 private:
  std::string_view bytes_;
  const std::string& name_;
  size_t offset_ = 0;
};

struct FlowSide {
  TrackId track;
  int64_t ts;
  StringId name;
};

}  // namespace

void import_loupe_binary(std::string_view bytes, const std::string& name, ModelBuilder& builder,
                         uint32_t file_index) {
  using format::EventKind;
  Cursor cursor(bytes, name);
  const auto header = cursor.read<format::FileHeader>("the file header");
  if (std::memcmp(header.magic, format::kMagic, sizeof(header.magic)) != 0) {
    throw Error(ErrorCode::kInput,
                "trace file '" + name + "' does not start with the magic 'LOUPETRC' at offset 0",
                "is this a loupe binary trace?");
  }
  if (header.version != format::kVersion) {
    throw Error(ErrorCode::kInput,
                "trace file '" + name + "' has format version " + std::to_string(header.version) +
                    " at offset 8; this loupe reads version " + std::to_string(format::kVersion),
                "re-record the trace with this loupe, or read it with the loupe that wrote it");
  }
  if (header.header_size < sizeof(format::FileHeader)) {
    throw Error(ErrorCode::kInput, "trace file '" + name + "' declares a header of " +
                                       std::to_string(header.header_size) +
                                       " bytes at offset 12; at least 72 expected");
  }
  cursor.skip(header.header_size - sizeof(format::FileHeader), "the header's extension");
  Model& model = builder.model();

  // Each string takes at least its 4-byte length, so a count the rest of the file cannot hold is
  // refused before anything is allocated for it (fuzzing found a 16 GiB allocation here).
  if (header.string_count > (bytes.size() - cursor.offset()) / sizeof(uint32_t)) {
    throw Error(ErrorCode::kInput,
                "trace file '" + name + "' declares " + std::to_string(header.string_count) +
                    " strings (header field string_count at offset 56), but only " +
                    std::to_string(bytes.size() - cursor.offset()) + " bytes follow the header",
                "the file is truncated or not a loupe binary trace");
  }
  std::vector<StringId> names(header.string_count);
  for (uint32_t index = 0; index < header.string_count; ++index) {
    const auto length = cursor.read<uint32_t>("a string length");
    names[index] = builder.intern(cursor.read_bytes(length, "a string"));
  }
  auto name_of = [&](uint32_t id) -> std::string_view {
    if (id >= names.size()) {
      throw Error(ErrorCode::kInput, "trace file '" + name + "' names string " +
                                         std::to_string(id) + " near offset " +
                                         std::to_string(cursor.offset()) + "; only " +
                                         std::to_string(names.size()) + " strings exist");
    }
    return model.strings.get(names[id]);
  };
  auto name_id = [&](uint32_t id) -> StringId {
    if (id >= names.size()) name_of(id);  // throws, naming the offset
    return names[id];
  };
  const std::string pid = std::to_string(header.pid);
  std::unordered_map<uint64_t, TrackId> lock_tracks;
  for (uint32_t index = 0; index < header.lock_count; ++index) {
    const auto lock_id = cursor.read<uint32_t>("a lock id");
    const auto lock_name = cursor.read<uint32_t>("a lock name");
    const auto flags = cursor.read<uint32_t>("lock flags");
    const TrackId track = builder.track(file_index, TrackKind::kLock, pid, std::to_string(lock_id));
    builder.track_info(track).name = std::string(name_of(lock_name));
    builder.track_info(track).shared_lock = (flags & 1u) != 0;
    lock_tracks[lock_id] = track;
  }

  FileInfo info;
  info.path = name;
  info.format = "loupe-binary";
  info.clock_domain = "monotonic";
  info.dropped_by_recorder = header.dropped_total;
  if (header.dropped_total != 0) {
    model.stats.add(Stat::trace_recorder_dropped, static_cast<int64_t>(header.dropped_total));
  }

  std::map<uint64_t, FlowSide> flow_begins;
  std::map<uint64_t, FlowSide> flow_ends;
  // Slices are added at their begin, in start order, and ended later: rows come out sorted.
  std::vector<SliceId> open;
  const StringId zone_category = builder.intern("zone");
  for (uint32_t thread_index = 0; thread_index < header.thread_count; ++thread_index) {
    const auto thread = cursor.read<format::ThreadHeader>("a thread header");
    const TrackId track =
        builder.track(file_index, TrackKind::kThread, pid, std::to_string(thread.os_tid));
    Track& track_info = builder.track_info(track);
    track_info.name = thread.name_id == format::kNoName ? "thread " + std::to_string(thread.tid)
                                                        : std::string(name_of(thread.name_id));
    track_info.process_name = "pid " + pid;
    // Compared as a count: event_count * 32 can wrap around 64 bits and pass a byte check.
    const uint64_t events_left = (bytes.size() - cursor.offset()) / sizeof(format::RawEvent);
    if (thread.event_count > events_left) {
      throw Error(ErrorCode::kInput,
                  "trace file '" + name + "' declares " + std::to_string(thread.event_count) +
                      " events for thread " + std::to_string(thread.tid) +
                      " (thread header ending at offset " + std::to_string(cursor.offset()) +
                      "), but the rest of the file holds " + std::to_string(events_left),
                  "the file is truncated; was the recording process killed before stop()?");
    }
    open.clear();
    builder.reserve_slices(thread.event_count / 2);
    int64_t last_ts = header.start_ns;
    for (uint64_t event_index = 0; event_index < thread.event_count; ++event_index) {
      format::RawEvent event;
      std::memcpy(&event, cursor.here(), sizeof(event));
      cursor.skip(sizeof(event), "an event");
      const auto ts = static_cast<int64_t>(event.ts);
      last_ts = std::max(last_ts, ts);
      switch (static_cast<EventKind>(event.kind)) {
        case EventKind::kZoneBegin:
          open.push_back(builder.add_slice(track, ts, ts, name_id(event.name), zone_category));
          break;
        case EventKind::kZoneEnd:
          if (open.empty()) {
            model.stats.add(Stat::trace_zone_end_unmatched);
          } else {
            builder.set_slice_end(open.back(), ts);
            open.pop_back();
          }
          break;
        case EventKind::kInstant:
          builder.add_instant(track, ts, name_id(event.name));
          break;
        case EventKind::kCounter: {
          double value = 0;
          std::memcpy(&value, &event.a, sizeof(value));
          const TrackId series =
              builder.track(file_index, TrackKind::kCounter, pid, name_of(event.name));
          builder.track_info(series).name = std::string(name_of(event.name));
          builder.add_counter(series, ts, value);
          break;
        }
        case EventKind::kFlowBegin:
          flow_begins[event.a] = {track, ts, name_id(event.name)};
          break;
        case EventKind::kFlowEnd:
          flow_ends[event.a] = {track, ts, name_id(event.name)};
          break;
        case EventKind::kLock: {
          auto lock = lock_tracks.find(event.a);
          if (lock == lock_tracks.end()) {
            throw Error(ErrorCode::kInput, "trace file '" + name + "' has a lock event for lock " +
                                               std::to_string(event.a) + " at offset " +
                                               std::to_string(cursor.offset() - sizeof(event)) +
                                               "; the lock table holds " +
                                               std::to_string(lock_tracks.size()) + " locks");
          }
          const auto sub = static_cast<detail::LockEvent>(event.sub);
          LockEventKind kind = LockEventKind::kWait;
          bool shared = false;
          switch (sub) {
            case detail::LockEvent::kWaitShared:
              shared = true;
              [[fallthrough]];
            case detail::LockEvent::kWait:
              kind = LockEventKind::kWait;
              break;
            case detail::LockEvent::kObtainShared:
              shared = true;
              [[fallthrough]];
            case detail::LockEvent::kObtain:
              kind = LockEventKind::kObtain;
              break;
            case detail::LockEvent::kReleaseShared:
              shared = true;
              [[fallthrough]];
            case detail::LockEvent::kRelease:
              kind = LockEventKind::kRelease;
              break;
          }
          builder.add_lock_event(lock->second, track, ts, kind, shared);
          break;
        }
        default:
          throw Error(ErrorCode::kInput, "trace file '" + name + "' has event kind " +
                                             std::to_string(event.kind) + " at offset " +
                                             std::to_string(cursor.offset() - sizeof(event)) +
                                             "; kinds 1..7 expected");
      }
      ++info.events;
    }
    // Zones still open when recording stopped end at the thread's last event.
    while (!open.empty()) {
      builder.set_slice_end(open.back(), last_ts);
      open.pop_back();
      model.stats.add(Stat::trace_zone_unclosed);
    }
  }
  for (const auto& [id, begin] : flow_begins) {
    auto end = flow_ends.find(id);
    if (end == flow_ends.end()) {
      model.stats.add(Stat::trace_flow_unmatched);
      continue;
    }
    builder.add_flow(begin.name, begin.track, begin.ts, end->second.track, end->second.ts, false);
    flow_ends.erase(end);
  }
  if (!flow_ends.empty()) {
    model.stats.add(Stat::trace_flow_unmatched, static_cast<int64_t>(flow_ends.size()));
  }
  model.files.push_back(std::move(info));
}

}  // namespace loupe::trace
