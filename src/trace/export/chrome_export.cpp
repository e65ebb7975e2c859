#include "trace/export/chrome_export.hpp"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>

#include "loupe/error.hpp"

namespace loupe::trace {
namespace {

void append_escaped(std::string& out, std::string_view text) {
  out += '"';
  for (char raw : text) {
    const auto byte = static_cast<unsigned char>(raw);
    switch (byte) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (byte < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", byte);
          out += buffer;
        } else {
          out += raw;
        }
    }
  }
  out += '"';
}

// Microseconds with three decimals: exact for integer nanoseconds.
void append_us(std::string& out, int64_t ns) {
  char buffer[32];
  const bool negative = ns < 0;
  const uint64_t magnitude = negative ? static_cast<uint64_t>(-ns) : static_cast<uint64_t>(ns);
  std::snprintf(buffer, sizeof(buffer), "%s%" PRIu64 ".%03" PRIu64, negative ? "-" : "",
                magnitude / 1000, magnitude % 1000);
  out += buffer;
}

bool parse_int(const std::string& text, int64_t& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  out = value;
  return true;
}

}  // namespace

void write_chrome_json(const Model& model, std::ostream& out) {
  // One file keeps its numeric pids and tids (and its own time base), so Perfetto shows a Kineto
  // trace as it showed the original and lanes of a thread share its tid again; text ids ("Spans",
  // "PyTorch Profiler") and locks get numbers above the file's own. Several files are numbered
  // throughout, since their ids collide.
  std::vector<int64_t> track_pid(model.tracks.size()), track_tid(model.tracks.size());
  const bool keep_ids = model.files.size() <= 1;
  std::vector<uint8_t> pid_kept(model.tracks.size(), 0), tid_kept(model.tracks.size(), 0);
  int64_t next_pid = 0, next_tid = 0;
  if (keep_ids) {
    for (TrackId id = 0; id < model.tracks.size(); ++id) {
      const Track& track = model.tracks[id];
      pid_kept[id] = parse_int(track.pid, track_pid[id]);
      tid_kept[id] = track.kind != TrackKind::kLock && track.kind != TrackKind::kCounter &&
                     parse_int(track.tid, track_tid[id]);
      if (pid_kept[id]) next_pid = std::max(next_pid, track_pid[id] + 1);
      if (tid_kept[id]) next_tid = std::max(next_tid, track_tid[id] + 1);
    }
  }
  std::map<std::pair<uint32_t, std::string>, int64_t> pids;
  std::map<TrackId, int64_t> tids;
  for (TrackId id = 0; id < model.tracks.size(); ++id) {
    const Track& track = model.tracks[id];
    if (!pid_kept[id]) {
      auto [it, inserted] = pids.try_emplace({track.file_index, track.pid}, next_pid);
      if (inserted) ++next_pid;
      track_pid[id] = it->second;
    }
    if (!tid_kept[id]) {
      const TrackId main = track.main == kNoTrack ? id : track.main;
      auto [it, inserted] = tids.try_emplace(main, next_tid + 1);
      if (inserted) ++next_tid;
      track_tid[id] = it->second;
    }
  }
  const int64_t time_base = keep_ids && model.files.size() == 1 ? model.files.front().offset_ns : 0;
  std::string text = "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  bool first = true;
  auto begin_event = [&]() {
    if (!first) text += ",\n";
    first = false;
  };
  auto pid_tid = [&](TrackId id) {
    text +=
        "\"pid\":" + std::to_string(track_pid[id]) + ",\"tid\":" + std::to_string(track_tid[id]);
  };
  auto append_time = [&](int64_t ns) { append_us(text, ns - time_base); };
  std::map<int64_t, std::string> process_names;
  for (TrackId id = 0; id < model.tracks.size(); ++id) {
    const Track& track = model.tracks[id];
    if (track.kind == TrackKind::kCounter || track.lane != Lane::kMain) continue;
    std::string name = track.kind == TrackKind::kLock ? "lock " + track.name : track.name;
    begin_event();
    text += "{\"ph\":\"M\",\"name\":\"thread_name\",";
    pid_tid(id);
    text += ",\"args\":{\"name\":";
    append_escaped(text, name);
    text += "}}";
    process_names.try_emplace(track_pid[id],
                              track.process_name.empty() ? "pid " + track.pid : track.process_name);
  }
  for (const auto& [pid, name] : process_names) {
    begin_event();
    text += "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(pid) +
            ",\"tid\":0,\"args\":{\"name\":";
    append_escaped(text, name);
    text += "}}";
  }
  const SliceTable& slices = model.slices;
  for (SliceId id = 0; id < slices.size(); ++id) {
    begin_event();
    text += "{\"ph\":\"X\",\"name\":";
    append_escaped(text, model.strings.get(slices.name[id]));
    text += ",\"cat\":";
    append_escaped(text, model.strings.get(slices.category[id]));
    text += ",\"ts\":";
    append_time(slices.start_ns[id]);
    text += ",\"dur\":";
    append_us(text, slices.end_ns[id] - slices.start_ns[id]);
    text += ',';
    pid_tid(slices.track[id]);
    // The event's own args (Kineto's correlation, grid, stream, ...) plus the id findings cite.
    const std::string_view args = model.slice_args(id);
    if (args.size() > 2 && args.front() == '{' && args.back() == '}') {
      text += ",\"args\":";
      text.append(args.substr(0, args.size() - 1));
      text += ",\"loupe_id\":" + std::to_string(id) + "}}";
    } else {
      text += ",\"args\":{\"loupe_id\":" + std::to_string(id) + "}}";
    }
    if (text.size() > (1 << 20)) {
      out << text;
      text.clear();
    }
  }
  for (size_t row = 0; row < model.instants.size(); ++row) {
    begin_event();
    text += "{\"ph\":\"i\",\"s\":\"t\",\"name\":";
    append_escaped(text, model.strings.get(model.instants.name[row]));
    text += ",\"ts\":";
    append_time(model.instants.ts_ns[row]);
    text += ',';
    pid_tid(model.instants.track[row]);
    text += '}';
  }
  for (size_t row = 0; row < model.counters.size(); ++row) {
    const TrackId track = model.counters.track[row];
    begin_event();
    text += "{\"ph\":\"C\",\"name\":";
    append_escaped(text, model.tracks[track].name);
    text += ",\"ts\":";
    append_time(model.counters.ts_ns[row]);
    text += ",\"pid\":" + std::to_string(track_pid[track]) + ",\"tid\":0,\"args\":{\"value\":";
    const double value = model.counters.value[row];
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%.17g", std::isfinite(value) ? value : 0.0);
    text += buffer;
    text += "}}";
  }
  for (size_t row = 0; row < model.flows.size(); ++row) {
    for (int side = 0; side < 2; ++side) {
      begin_event();
      text += side == 0 ? "{\"ph\":\"s\"," : "{\"ph\":\"f\",\"bp\":\"e\",";
      text += "\"cat\":\"flow\",\"id\":" + std::to_string(row + 1) + ",\"name\":";
      append_escaped(text, model.strings.get(model.flows.name[row]));
      text += ",\"ts\":";
      append_time(side == 0 ? model.flows.from_ns[row] : model.flows.to_ns[row]);
      text += ',';
      pid_tid(side == 0 ? model.flows.from_track[row] : model.flows.to_track[row]);
      text += '}';
    }
  }
  StatsRegistry ignored;
  for (const LockSpan& span : derive_lock_spans(model, ignored)) {
    begin_event();
    const std::string& lock_name = model.tracks[span.lock].name;
    const std::string& thread_name = model.tracks[span.thread].name;
    text += "{\"ph\":\"X\",\"name\":";
    append_escaped(text, span.hold ? "held by " + thread_name : "wait " + lock_name);
    text += span.hold ? ",\"cat\":\"lock_held\",\"ts\":" : ",\"cat\":\"lock_wait\",\"ts\":";
    append_time(span.start_ns);
    text += ",\"dur\":";
    append_us(text, span.end_ns - span.start_ns);
    text += ',';
    pid_tid(span.hold ? span.lock : span.thread);
    text += '}';
  }
  text += "\n]}\n";
  out << text;
}

void export_chrome_json(const Model& model, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  if (!out) {
    throw Error(ErrorCode::kInput, "cannot open '" + path + "' for writing the Chrome JSON trace",
                "check that the directory exists and is writable");
  }
  write_chrome_json(model, out);
  out.close();
  if (!out) throw Error(ErrorCode::kInput, "cannot write '" + path + "' (disk full?)");
}

}  // namespace loupe::trace
