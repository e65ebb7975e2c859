// Reader of Chrome trace event JSON and PyTorch profiler (Kineto) traces, with simdjson On-Demand.
//
// Events are gathered into local tables and committed to the builder only when the whole file was
// read, so a file that needs repair (invalid UTF-8, raw control characters, a truncated tail) is
// repaired and read again from a clean slate.
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <unordered_map>

#include "loupe/error.hpp"
#include "trace/import/import.hpp"

namespace loupe::trace {
namespace {

namespace od = simdjson::ondemand;

// Microseconds written as text (integer, fraction, or exponent form) to integer nanoseconds,
// without passing large epoch timestamps through a double when there is no exponent.
bool parse_us_to_ns(std::string_view text, int64_t& out) {
  while (!text.empty() && (text.back() == ' ' || text.back() == '\n' || text.back() == '\r' ||
                           text.back() == '\t')) {
    text.remove_suffix(1);
  }
  if (text.empty()) return false;
  if (text.find_first_of("eE") != std::string_view::npos) {
    std::string copy(text);
    char* end = nullptr;
    const double value = std::strtod(copy.c_str(), &end);
    if (end == copy.c_str() || !std::isfinite(value)) return false;
    out = std::llround(value * 1000.0);
    return true;
  }
  bool negative = false;
  size_t pos = 0;
  if (text[0] == '-') {
    negative = true;
    pos = 1;
  }
  int64_t whole = 0;
  size_t digits = 0;
  for (; pos < text.size() && text[pos] >= '0' && text[pos] <= '9'; ++pos, ++digits) {
    if (whole > (INT64_MAX / 1000 - 9) / 10) return false;
    whole = whole * 10 + (text[pos] - '0');
  }
  int64_t fraction_ns = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int scale = 100;
    int64_t rest_digit = -1;
    for (; pos < text.size() && text[pos] >= '0' && text[pos] <= '9'; ++pos, ++digits) {
      if (scale >= 1) {
        fraction_ns += (text[pos] - '0') * scale;
        scale /= 10;
      } else if (rest_digit < 0) {
        rest_digit = text[pos] - '0';
      }
    }
    if (rest_digit >= 5) ++fraction_ns;
  }
  if (digits == 0 || pos != text.size()) return false;
  out = whole * 1000 + fraction_ns;
  if (negative) out = -out;
  return true;
}

struct LocalSlice {
  TrackId track;
  int64_t start;
  int64_t end;
  StringId name;
  StringId category;
};
struct BeginEnd {
  int64_t ts;
  uint64_t order;
  bool begin;
  StringId name;
  StringId category;
};
constexpr uint64_t kTextId = 1ull << 63;
struct FlowPoint {
  uint64_t id;  // the number when it fits 63 bits, else kTextId | the text's id in flow_ids_
  StringId category;
  char phase;
  bool bind_enclosing;
  int64_t ts;
  uint64_t order;
  TrackId track;
  StringId name;
};
struct LocalInstant {
  TrackId track;
  int64_t ts;
  StringId name;
};
struct LocalCounter {
  TrackId track;
  int64_t ts;
  double value;
};

struct ParseFailure {
  simdjson::error_code code;
  size_t offset;
};

enum class Key { kOther, kPh, kTs, kDur, kName, kCat, kPid, kTid, kId, kBp, kArgs };

// Classifies an event's key from its raw text (up to the closing quote) without unescaping:
// the keys loupe reads never contain escapes.
Key classify_key(const char* raw) {
  auto is = [raw](const char* word, size_t length) {
    return std::memcmp(raw, word, length) == 0 && raw[length] == '"';
  };
  switch (raw[0]) {
    case 'p':
      if (is("ph", 2)) return Key::kPh;
      if (is("pid", 3)) return Key::kPid;
      return Key::kOther;
    case 't':
      if (is("ts", 2)) return Key::kTs;
      if (is("tid", 3)) return Key::kTid;
      return Key::kOther;
    case 'd':
      return is("dur", 3) ? Key::kDur : Key::kOther;
    case 'n':
      return is("name", 4) ? Key::kName : Key::kOther;
    case 'c':
      return is("cat", 3) ? Key::kCat : Key::kOther;
    case 'i':
      return is("id", 2) ? Key::kId : Key::kOther;
    case 'b':
      return is("bp", 2) ? Key::kBp : Key::kOther;
    case 'a':
      return is("args", 4) ? Key::kArgs : Key::kOther;
    default:
      return Key::kOther;
  }
}

bool is_gpu_category(std::string_view category) {
  return category == "kernel" || category == "gpu_memcpy" || category == "gpu_memset" ||
         category == "gpu_user_annotation" || category == "Kernel" || category == "Memcpy" ||
         category == "Memset";
}

class ChromeReader {
 public:
  ChromeReader(const std::string& name, ModelBuilder& builder, uint32_t file_index)
      : name_(name), builder_(builder), file_index_(file_index) {}

  // Returns false with `failure` set when simdjson reports a structural problem.
  bool read(simdjson::padded_string_view padded, StatsRegistry& stats, ParseFailure& failure);
  void commit(StatsRegistry& stats);
  bool kineto() const { return kineto_; }
  bool has_base_time() const { return has_base_time_; }
  int64_t offset() const { return has_base_time_ ? base_time_ns_ : 0; }
  uint64_t events() const { return events_; }

 private:
  TrackId track_for(std::string_view pid, std::string_view tid);
  // Returns an error only for structural problems; bad fields drop the event and count it.
  simdjson::error_code read_event(od::object event, StatsRegistry& stats);
  bool read_events(od::array events, StatsRegistry& stats, simdjson::error_code& error);
  std::string_view id_text(od::value value, StatsRegistry& stats, bool& ok);

  const std::string& name_;
  ModelBuilder& builder_;
  uint32_t file_index_;
  const char* base_ = nullptr;
  bool kineto_ = false;
  bool has_base_time_ = false;
  int64_t base_time_ns_ = 0;
  uint64_t events_ = 0;
  uint64_t order_ = 0;
  std::string key_;
  std::unordered_map<std::string, TrackId> tracks_;
  std::vector<LocalSlice> slices_;
  std::map<TrackId, std::vector<BeginEnd>> begin_ends_;
  std::vector<FlowPoint> flows_;
  StringPool flow_ids_;
  std::vector<LocalInstant> instants_;
  std::vector<LocalCounter> counters_;
  std::map<std::string, std::string> process_names_;
  std::map<TrackId, std::string> thread_names_;
  std::vector<TrackId> gpu_tracks_;
  std::unordered_map<TrackId, int64_t> last_ts_;
};

TrackId ChromeReader::track_for(std::string_view pid, std::string_view tid) {
  key_.assign(pid);
  key_ += '\x1f';
  key_ += tid;
  auto found = tracks_.find(key_);
  if (found != tracks_.end()) return found->second;
  const TrackId track = builder_.track(file_index_, TrackKind::kThread, pid, tid);
  tracks_.emplace(key_, track);
  return track;
}

// Ids may be numbers beyond int64 or strings; the text is the key either way.
std::string_view ChromeReader::id_text(od::value value, StatsRegistry& stats, bool& ok) {
  od::json_type type;
  if (value.type().get(type)) {
    ok = false;
    return {};
  }
  if (type == od::json_type::string) {
    std::string_view text;
    ok = !value.get_string().get(text);
    return text;
  }
  if (type == od::json_type::number) {
    std::string_view token = value.raw_json_token();
    while (!token.empty() && (token.back() == ' ' || token.back() == '\n')) token.remove_suffix(1);
    int64_t as_int = 0;
    auto [end, code] = std::from_chars(token.data(), token.data() + token.size(), as_int);
    if (code != std::errc() || end != token.data() + token.size()) {
      stats.add(Stat::trace_json_id_beyond_int64);
    }
    ok = true;
    return token;
  }
  ok = false;
  return {};
}

simdjson::error_code ChromeReader::read_event(od::object event, StatsRegistry& stats) {
  std::string_view name, category, phase, pid = "0", tid = "0", id, bind_point, args_raw;
  int64_t ts = 0, dur = 0;
  bool has_ts = false, has_dur = false, malformed = false, has_id = false;
  std::string id_holder;
  for (auto field : event) {
    od::raw_json_string key;
    if (auto error = field.key().get(key)) return error;
    od::value value = field.value();
    auto read_time = [&](int64_t& out) {
      od::json_type type;
      if (value.type().get(type)) return false;
      if (type == od::json_type::number) return parse_us_to_ns(value.raw_json_token(), out);
      std::string_view text;
      if (type == od::json_type::string && !value.get_string().get(text)) {
        return parse_us_to_ns(text, out);
      }
      return false;
    };
    auto read_id_like = [&](std::string_view& out) {
      od::json_type type;
      if (value.type().get(type)) return false;
      if (type == od::json_type::string) return !value.get_string().get(out);
      if (type == od::json_type::number) {
        out = value.raw_json_token();
        while (!out.empty() && (out.back() == ' ' || out.back() == '\n')) out.remove_suffix(1);
        return true;
      }
      return false;
    };
    switch (classify_key(key.raw())) {
      case Key::kPh:
        if (value.get_string().get(phase)) malformed = true;
        break;
      case Key::kTs:
        has_ts = read_time(ts);
        if (!has_ts) malformed = true;
        break;
      case Key::kDur:
        has_dur = read_time(dur);
        if (!has_dur) malformed = true;
        break;
      case Key::kName:
        if (value.get_string().get(name)) malformed = true;
        break;
      case Key::kCat:
        if (value.get_string().get(category)) malformed = true;
        break;
      case Key::kPid:
        if (!read_id_like(pid)) malformed = true;
        break;
      case Key::kTid:
        if (!read_id_like(tid)) malformed = true;
        break;
      case Key::kId: {
        bool ok = false;
        id = id_text(value, stats, ok);
        has_id = ok;
        if (!ok) malformed = true;
        break;
      }
      case Key::kBp:
        if (value.get_string().get(bind_point)) malformed = true;
        break;
      case Key::kArgs: {
        od::object args;
        if (!value.get_object().get(args)) {
          if (args.raw_json().get(args_raw)) malformed = true;
        }
        break;
      }
      case Key::kOther:
        break;
    }
  }
  ++events_;
  if (phase.size() != 1) {
    stats.add(Stat::trace_json_event_malformed);
    return simdjson::SUCCESS;
  }
  const char ph = phase[0];
  if (malformed || (!has_ts && ph != 'M')) {
    stats.add(Stat::trace_json_event_malformed);
    return simdjson::SUCCESS;
  }
  const TrackId track = track_for(pid, tid);
  const StringId name_id = builder_.intern(name);
  const StringId category_id = builder_.intern(category);
  if (is_gpu_category(category)) gpu_tracks_.push_back(track);
  auto note_ts = [&](int64_t value) {
    auto [it, inserted] = last_ts_.try_emplace(track, value);
    if (!inserted && it->second < value) it->second = value;
  };
  switch (ph) {
    case 'X':
      if (!has_dur || dur < 0) {
        stats.add(Stat::trace_json_event_malformed);
        return simdjson::SUCCESS;
      }
      slices_.push_back({track, ts, ts + dur, name_id, category_id});
      note_ts(ts + dur);
      return simdjson::SUCCESS;
    case 'B':
    case 'E':
      begin_ends_[track].push_back({ts, order_++, ph == 'B', name_id, category_id});
      note_ts(ts);
      return simdjson::SUCCESS;
    case 'i':
    case 'I':
      instants_.push_back({track, ts, name_id});
      return simdjson::SUCCESS;
    case 'C': {
      if (args_raw.empty()) {
        stats.add(Stat::trace_json_event_malformed);
        return simdjson::SUCCESS;
      }
      simdjson::padded_string padded(args_raw);
      od::parser parser;
      od::document doc;
      od::object args;
      if (parser.iterate(padded).get(doc) || doc.get_object().get(args)) {
        stats.add(Stat::trace_json_event_malformed);
        return simdjson::SUCCESS;
      }
      for (auto field : args) {
        std::string_view series;
        double value = 0;
        if (field.unescaped_key().get(series) || field.value().get_double().get(value)) {
          stats.add(Stat::trace_json_event_malformed);
          continue;
        }
        std::string series_name = std::string(name) + "." + std::string(series);
        const TrackId counter_track =
            builder_.track(file_index_, TrackKind::kCounter, pid, series_name);
        builder_.track_info(counter_track).name = series_name;
        counters_.push_back({counter_track, ts, value});
      }
      return simdjson::SUCCESS;
    }
    case 's':
    case 't':
    case 'f': {
      if (!has_id) {
        stats.add(Stat::trace_json_event_malformed);
        return simdjson::SUCCESS;
      }
      uint64_t numeric = 0;
      auto [end, code] = std::from_chars(id.data(), id.data() + id.size(), numeric);
      const bool fits = code == std::errc() && end == id.data() + id.size() && numeric < kTextId;
      const uint64_t key = fits ? numeric : kTextId | flow_ids_.intern(id);
      flows_.push_back({key, category_id, ph, bind_point == "e", ts, order_++, track, name_id});
      return simdjson::SUCCESS;
    }
    case 'M': {
      std::string value;
      if (!args_raw.empty()) {
        simdjson::padded_string padded(args_raw);
        od::parser parser;
        od::document doc;
        std::string_view text;
        if (!parser.iterate(padded).get(doc) && !doc["name"].get_string().get(text)) {
          value = std::string(text);
        }
      }
      // Kineto pads some names ("stream 7 "); names are compared, so trim them.
      while (!value.empty() && value.back() == ' ') value.pop_back();
      if (name == "thread_name") {
        thread_names_[track] = value;
      } else if (name == "process_name") {
        process_names_[std::string(pid)] = value;
      }
      return simdjson::SUCCESS;
    }
    default:
      stats.add(Stat::trace_json_phase_unsupported);
      return simdjson::SUCCESS;
  }
}

bool ChromeReader::read_events(od::array events, StatsRegistry& stats,
                               simdjson::error_code& error) {
  for (auto element : events) {
    od::object event;
    if ((error = element.get_object().get(event))) {
      if (error == simdjson::INCORRECT_TYPE) {
        stats.add(Stat::trace_json_event_malformed);
        error = simdjson::SUCCESS;
        continue;
      }
      return false;
    }
    if ((error = read_event(event, stats))) return false;
  }
  return true;
}

bool ChromeReader::read(simdjson::padded_string_view padded, StatsRegistry& stats,
                        ParseFailure& failure) {
  base_ = padded.data();
  od::parser parser;
  od::document doc;
  simdjson::error_code error = parser.iterate(padded).get(doc);
  if (error) {
    // The document never started: no location to report beyond the start.
    failure = {error, 0};
    return false;
  }
  auto fail = [&](simdjson::error_code code) {
    failure.code = code;
    const char* location = nullptr;
    failure.offset = doc.current_location().get(location) ? padded.size() : location - base_;
    return false;
  };
  od::json_type type;
  if ((error = doc.type().get(type))) return fail(error);
  if (type == od::json_type::array) {
    od::array events;
    if ((error = doc.get_array().get(events))) return fail(error);
    if (!read_events(events, stats, error)) return fail(error);
  } else {
    od::object top;
    if ((error = doc.get_object().get(top))) return fail(error);
    for (auto field : top) {
      std::string_view key;
      if ((error = field.unescaped_key().get(key))) return fail(error);
      if (key == "traceEvents") {
        od::array events;
        if ((error = field.value().get_array().get(events))) return fail(error);
        if (!read_events(events, stats, error)) return fail(error);
      } else if (key == "baseTimeNanoseconds") {
        int64_t base = 0;
        if (!field.value().get_int64().get(base)) {
          base_time_ns_ = base;
          has_base_time_ = true;
        }
        kineto_ = true;
      } else if (key == "schemaVersion" || key == "deviceProperties" || key == "distributedInfo") {
        kineto_ = true;
      }
    }
  }
  return true;
}

void ChromeReader::commit(StatsRegistry& stats) {
  const int64_t offset = has_base_time_ ? base_time_ns_ : 0;
  for (const LocalSlice& slice : slices_) {
    builder_.add_slice(slice.track, slice.start + offset, slice.end + offset, slice.name,
                       slice.category);
  }
  for (auto& [track, list] : begin_ends_) {
    std::stable_sort(list.begin(), list.end(), [](const BeginEnd& left, const BeginEnd& right) {
      return left.ts < right.ts;
    });
    std::vector<const BeginEnd*> open;
    for (const BeginEnd& event : list) {
      if (event.begin) {
        open.push_back(&event);
      } else if (open.empty()) {
        stats.add(Stat::trace_zone_end_unmatched);
      } else {
        const BeginEnd* begin = open.back();
        open.pop_back();
        builder_.add_slice(track, begin->ts + offset, event.ts + offset, begin->name,
                           begin->category);
      }
    }
    const int64_t last = last_ts_[track];
    for (const BeginEnd* begin : open) {
      builder_.add_slice(track, begin->ts + offset, std::max(last, begin->ts) + offset, begin->name,
                         begin->category);
      stats.add(Stat::trace_zone_unclosed);
    }
  }
  for (const LocalInstant& instant : instants_) {
    builder_.add_instant(instant.track, instant.ts + offset, instant.name);
  }
  for (const LocalCounter& counter : counters_) {
    builder_.add_counter(counter.track, counter.ts + offset, counter.value);
  }
  std::stable_sort(flows_.begin(), flows_.end(), [](const FlowPoint& left, const FlowPoint& right) {
    if (left.id != right.id) return left.id < right.id;
    if (left.category != right.category) return left.category < right.category;
    if (left.name != right.name) return left.name < right.name;
    if (left.ts != right.ts) return left.ts < right.ts;
    return left.order < right.order;
  });
  const FlowPoint* open_flow = nullptr;
  for (size_t index = 0; index < flows_.size(); ++index) {
    const FlowPoint& point = flows_[index];
    if (open_flow != nullptr &&
        (open_flow->id != point.id || open_flow->category != point.category ||
         open_flow->name != point.name)) {
      stats.add(Stat::trace_flow_unmatched);
      open_flow = nullptr;
    }
    if (point.phase == 's') {
      if (open_flow != nullptr) stats.add(Stat::trace_flow_unmatched);
      open_flow = &point;
      continue;
    }
    if (open_flow == nullptr) {
      stats.add(Stat::trace_flow_unmatched);
      continue;
    }
    // "f" binds to the next slice on its thread unless "bp":"e"; "t" is a step inside a slice.
    const bool bind_next = point.phase == 'f' && !point.bind_enclosing;
    builder_.add_flow(open_flow->name, open_flow->track, open_flow->ts + offset, point.track,
                      point.ts + offset, bind_next);
    open_flow = point.phase == 't' ? &point : nullptr;
  }
  if (open_flow != nullptr) stats.add(Stat::trace_flow_unmatched);

  std::sort(gpu_tracks_.begin(), gpu_tracks_.end());
  gpu_tracks_.erase(std::unique(gpu_tracks_.begin(), gpu_tracks_.end()), gpu_tracks_.end());
  for (TrackId track : gpu_tracks_) builder_.track_info(track).kind = TrackKind::kGpuStream;
  for (const auto& [key, track] : tracks_) {
    Track& info = builder_.track_info(track);
    auto thread_name = thread_names_.find(track);
    if (thread_name != thread_names_.end() && !thread_name->second.empty()) {
      info.name = thread_name->second;
    } else if (info.name.empty()) {
      info.name = (info.kind == TrackKind::kGpuStream ? "stream " : "thread ") + info.tid;
    }
    auto process = process_names_.find(info.pid);
    if (process != process_names_.end()) info.process_name = process->second;
  }
}

// One pass that makes a broken file parseable: invalid UTF-8 bytes become '?', raw control
// characters inside strings become ' ', and a truncated tail is cut after the last complete
// array element, with the open brackets closed.
void repair(std::string& text, StatsRegistry& stats) {
  std::string stack;
  std::string stack_at_cut;
  size_t cut = std::string::npos;
  bool in_string = false;
  bool escaped = false;
  const size_t size = text.size();
  for (size_t pos = 0; pos < size; ++pos) {
    auto byte = static_cast<unsigned char>(text[pos]);
    if (byte >= 0x80) {
      size_t length = byte >= 0xF0 && byte <= 0xF4   ? 4
                      : byte >= 0xE0 && byte <= 0xEF ? 3
                      : byte >= 0xC2 && byte <= 0xDF ? 2
                                                     : 0;
      bool valid = length != 0 && pos + length <= size;
      for (size_t next = 1; valid && next < length; ++next) {
        valid = (static_cast<unsigned char>(text[pos + next]) & 0xC0) == 0x80;
      }
      if (valid && length == 3) {
        const auto second = static_cast<unsigned char>(text[pos + 1]);
        if ((byte == 0xE0 && second < 0xA0) || (byte == 0xED && second >= 0xA0)) valid = false;
      }
      if (valid && length == 4) {
        const auto second = static_cast<unsigned char>(text[pos + 1]);
        if ((byte == 0xF0 && second < 0x90) || (byte == 0xF4 && second >= 0x90)) valid = false;
      }
      if (!valid) {
        text[pos] = '?';
        stats.add(Stat::trace_json_invalid_utf8);
      } else {
        pos += length - 1;
      }
      escaped = false;
      continue;
    }
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (byte == '\\') {
        escaped = true;
      } else if (byte == '"') {
        in_string = false;
      } else if (byte < 0x20) {
        text[pos] = ' ';
        stats.add(Stat::trace_json_control_character);
      }
      continue;
    }
    switch (byte) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        stack.push_back(static_cast<char>(byte));
        break;
      case ']':
      case '}':
        if (!stack.empty()) stack.pop_back();
        if (!stack.empty() && stack.back() == '[') {
          cut = pos + 1;
          stack_at_cut = stack;
        }
        break;
      default:
        break;
    }
  }
  if (stack.empty() && !in_string) return;
  stats.add(Stat::trace_json_truncated);
  if (cut == std::string::npos) {
    // Not even one complete element: keep the opening brackets only.
    const size_t first = text.find_first_of("[{");
    if (first == std::string::npos) return;
    stack_at_cut = std::string(1, text[first]);
    cut = first + 1;
    if (text[first] == '{') {
      text = "{}";
      return;
    }
  }
  text.resize(cut);
  for (auto bracket = stack_at_cut.rbegin(); bracket != stack_at_cut.rend(); ++bracket) {
    text += *bracket == '[' ? ']' : '}';
  }
}

}  // namespace

void import_chrome_json(std::string& text, const std::string& name, ModelBuilder& builder,
                        uint32_t file_index) {
  Model& model = builder.model();
  StatsRegistry stats;
  ParseFailure failure{};
  bool repaired = false;
  auto reader = std::make_unique<ChromeReader>(name, builder, file_index);
  if (!simdjson::validate_utf8(text.data(), text.size())) {
    repair(text, stats);
    repaired = true;
  }
  // Reads in place: the text's capacity holds simdjson's padding (read_trace_bytes reserves it).
  auto padded_view = [&text]() {
    if (text.capacity() < text.size() + simdjson::SIMDJSON_PADDING) {
      text.reserve(text.size() + simdjson::SIMDJSON_PADDING);
    }
    return simdjson::padded_string_view(text.data(), text.size(), text.capacity());
  };
  if (!reader->read(padded_view(), stats, failure)) {
    if (repaired) {
      throw Error(ErrorCode::kInput,
                  "cannot read JSON trace '" + name +
                      "': " + simdjson::error_message(failure.code) + " near offset " +
                      std::to_string(failure.offset),
                  "the file is not JSON; loupe repairs invalid UTF-8, control characters and "
                  "a truncated tail only");
    }
    // Start again from a clean slate on the repaired text.
    stats = StatsRegistry();
    repair(text, stats);
    reader = std::make_unique<ChromeReader>(name, builder, file_index);
    if (!reader->read(padded_view(), stats, failure)) {
      throw Error(ErrorCode::kInput,
                  "cannot read JSON trace '" + name +
                      "': " + simdjson::error_message(failure.code) + " near offset " +
                      std::to_string(failure.offset),
                  "the file is not a Chrome trace; expected [events...] or {\"traceEvents\": "
                  "[...]}");
    }
  }
  reader->commit(stats);
  model.stats.merge(stats);
  FileInfo info;
  info.path = name;
  info.format = reader->kineto() ? "kineto" : "chrome-json";
  info.clock_domain = reader->has_base_time() ? "kineto-base" : "unknown";
  info.offset_ns = reader->offset();
  info.events = reader->events();
  model.files.push_back(std::move(info));
}

}  // namespace loupe::trace
