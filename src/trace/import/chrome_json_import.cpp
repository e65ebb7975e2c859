// Reader of Chrome trace event JSON and PyTorch profiler (Kineto) traces, streamed.
//
// The text is read in pieces of a few MiB (a file through read(2), never mapped whole). An event
// object is read where it lies by a scanner that finds its end as it reads its fields (below);
// for anything else, and for an event the scanner declines, a splitter finds the value's extent:
// strings and escapes tracked, brackets matched by kind, 64 bytes at a time as bit masks
// (json_blocks.hpp) where a block holds no escape. Each piece is checked for UTF-8 as it arrives
// (simdjson's validator); invalid bytes become
// '?', raw control characters inside strings ' ', and a tail cut mid-value is dropped, each counted
// — the repairs happen as the text streams by, so a broken file costs no second pass and no copy.
// Memory is the window, not the file: peak resident memory is the model plus a few MiB.
//
// The scanner reads an event's fields once, in document order: keys are matched on their raw bytes,
// strings without escapes are views of the window and numbers their raw tokens, so an ordinary
// event costs no copy, no unescaping and no allocation. An event the scanner does not take (an
// escaped string in a field loupe reads, an unexpected byte) is read again by simdjson On-Demand
// from its own text; both paths feed one field setter, so they agree. Top-level values other than
// the events (distributedInfo, baseTimeNanoseconds) are read by On-Demand from their own text too.
//
// A text of 8 MiB or more is read in parts, each on a thread of its own by a reader of its own
// (read_in_parts): a part starts where an event most likely starts, the part before it stops there
// only if an element of the event list does start there, and the parts' rows are appended in the
// text's order with their string and track ids mapped, so the model is the one-thread import's.
// Where no such start is found, the text is read and scanned on a thread of its own while the
// calling thread applies the events (EventPipeline); the On-Demand fallback and everything that
// touches the builder stay on the calling thread.
//
// Events are gathered into local tables and committed to the builder only when the whole text was
// read; a text that cannot be read at all throws before anything is committed. The complete
// events' slices are gathered as the model's columns, which the builder then takes whole.
#include <fcntl.h>
#include <simdjson.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "loupe/error.hpp"
#include "trace/import/import.hpp"
#include "trace/import/json_blocks.hpp"
#include "trace/import/json_check.hpp"

namespace loupe::trace {
namespace {

namespace od = simdjson::ondemand;

bool is_json_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// The window's piece: large enough that a read(2) and the UTF-8 check of each piece cost little
// per byte, small enough to stay out of the peak resident memory.
constexpr size_t kPieceBytes = size_t{4} << 20;
// Texts from this size on are split and scanned on a thread of their own while the calling thread
// applies the events; smaller ones are not worth a thread.
constexpr size_t kPipelineBytes = size_t{8} << 20;
// The pipeline's windows are smaller: three of them, with their events, are in flight at once.
constexpr size_t kPipelinePieceBytes = size_t{1} << 20;
// A part appends its slices on a thread of its own from this many rows.
constexpr size_t kTwoThreadAppendRows = 16'384;
// A text of kPipelineBytes or more is read in parts, each on a thread of its own (read_in_parts):
// one per core, at most kMostParts, each of kPartBytes or more.
constexpr uint64_t kMostParts = 8;
constexpr uint64_t kPartBytes = uint64_t{4} << 20;

// One window buffer per thread, kept between imports: its pages stay mapped, so the next file —
// the second of `trace diff`, another rank, the MCP server's next request — skips their page
// faults. A buffer grown past two pieces (a value larger than a piece) is freed after its import.
std::string& window_storage() {
  thread_local std::string storage;
  return storage;
}

// Bytes that end a number or literal token: JSON whitespace, ',', '}' and ']'.
constexpr std::array<bool, 256> kTokenEnd = [] {
  std::array<bool, 256> table{};
  for (const char c : {' ', '\n', '\r', '\t', ',', '}', ']'}) {
    table[static_cast<unsigned char>(c)] = true;
  }
  return table;
}();

std::string_view trim_json_space(std::string_view text) {
  while (!text.empty() && is_json_space(text.back())) text.remove_suffix(1);
  return text;
}

bool parse_exponent_us_to_ns(std::string_view text, int64_t& out) {
  std::string copy(text);
  char* end = nullptr;
  const double value = std::strtod(copy.c_str(), &end);
  if (end == copy.c_str() || !std::isfinite(value)) return false;
  out = std::llround(value * 1000.0);
  return true;
}

// Microseconds written as text (integer, fraction, or exponent form) to integer nanoseconds,
// without passing large epoch timestamps through a double when there is no exponent. Digits past
// the nanosecond round half up on the first of them.
bool parse_us_to_ns(std::string_view text, int64_t& out) {
  text = trim_json_space(text);
  if (text.empty()) return false;
  // Anything but [-]digits[.digits] is read by strtod when it has an exponent, else rejected.
  auto not_plain = [&text, &out] {
    return text.find_first_of("eE") != std::string_view::npos && parse_exponent_us_to_ns(text, out);
  };
  const char* pos = text.data();
  const char* const end = pos + text.size();
  const bool negative = *pos == '-';
  if (negative) ++pos;
  int64_t whole = 0;
  const char* const whole_begin = pos;
  for (; pos < end && static_cast<unsigned>(*pos - '0') < 10; ++pos) {
    if (whole > (INT64_MAX / 1000 - 9) / 10) return not_plain();
    whole = whole * 10 + (*pos - '0');
  }
  size_t digits = static_cast<size_t>(pos - whole_begin);
  int64_t fraction_ns = 0;
  if (pos < end && *pos == '.') {
    ++pos;
    const char* const fraction_begin = pos;
    int scale = 100;
    for (; pos < end && static_cast<unsigned>(*pos - '0') < 10 && scale >= 1; ++pos) {
      fraction_ns += (*pos - '0') * scale;
      scale /= 10;
    }
    if (pos < end && static_cast<unsigned>(*pos - '0') < 10) {
      if (*pos >= '5') ++fraction_ns;
      while (pos < end && static_cast<unsigned>(*pos - '0') < 10) ++pos;
    }
    digits += static_cast<size_t>(pos - fraction_begin);
  }
  if (digits == 0 || pos != end) return not_plain();
  out = whole * 1000 + fraction_ns;
  if (negative) out = -out;
  return true;
}

// The complete (X) events' slices, column by column as the model holds them, so the builder takes
// the columns whole (ModelBuilder::add_slices) instead of a copy row by row.
struct LocalSlices {
  std::vector<int64_t> start;
  std::vector<int64_t> end;
  std::vector<TrackId> track;
  std::vector<StringId> name;
  std::vector<StringId> category;
  std::vector<uint64_t> args;  // offset into the reader's args text << 24 | size; empty unless kept
  size_t size() const { return start.size(); }
  void reserve(size_t count) {
    start.reserve(count);
    end.reserve(count);
    track.reserve(count);
    name.reserve(count);
    category.reserve(count);
  }
};
// A flow from a runtime call to a GPU op tied by their correlation id, in the file's clock.
struct CorrelationFlow {
  TrackId from_track;
  int64_t from_ns;
  TrackId to_track;
  int64_t to_ns;
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
// The order flows are paired in. `order` is unique, so the order is total and an unstable sort
// gives the stable one's result.
bool flow_before(const FlowPoint& left, const FlowPoint& right) {
  if (left.id != right.id) return left.id < right.id;
  if (left.category != right.category) return left.category < right.category;
  if (left.name != right.name) return left.name < right.name;
  if (left.ts != right.ts) return left.ts < right.ts;
  return left.order < right.order;
}
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

enum class Key { kOther, kPh, kTs, kDur, kName, kCat, kPid, kTid, kId, kBp, kArgs };

// Classifies an event's key from its raw text (up to the closing quote) without unescaping:
// the keys loupe reads never contain escapes.
inline Key classify_key(const char* raw) {
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

// The length of a key classify_key matched; kLongestKey is the longest.
constexpr ptrdiff_t kLongestKey = 4;
inline size_t key_size(Key key) {
  switch (key) {
    case Key::kPh:
    case Key::kTs:
    case Key::kId:
    case Key::kBp:
      return 2;
    case Key::kName:
    case Key::kArgs:
      return 4;
    default:
      return 3;  // pid, tid, dur, cat
  }
}

bool is_gpu_category(std::string_view category) {
  return category == "kernel" || category == "gpu_memcpy" || category == "gpu_memset" ||
         category == "gpu_user_annotation" || category == "Kernel" || category == "Memcpy" ||
         category == "Memset";
}

// What a category means for where its slices go, cached per category id.
constexpr int8_t kCategoryGpu = 1;         // the track is a GPU stream
constexpr int8_t kCategoryPython = 2;      // Python-stack events: the thread's python lane
constexpr int8_t kCategoryAnnotation = 4;  // ranges projected onto a stream: its annotation lane
constexpr int8_t kCategoryRuntime = 8;     // CUDA runtime or driver calls: they launch GPU work
int8_t category_class(std::string_view category) {
  int8_t bits = is_gpu_category(category) ? kCategoryGpu : 0;
  if (category == "python_function") bits |= kCategoryPython;
  if (category == "gpu_user_annotation") bits |= kCategoryAnnotation;
  if (category == "cuda_runtime" || category == "cuda_driver") bits |= kCategoryRuntime;
  return bits;
}

// Kineto's "correlation" argument (a positive integer) in an args object's text; 0 when absent.
// A plain scan: the args of runtime calls and GPU ops are short, and parsing them whole for one
// number would cost more than the rest of the event.
uint64_t correlation_of(std::string_view args) {
  constexpr std::string_view kKey = "\"correlation\"";
  size_t at = args.find(kKey);
  if (at == std::string_view::npos) return 0;
  at += kKey.size();
  while (at < args.size() && (args[at] == ' ' || args[at] == '\t' || args[at] == '\n' ||
                              args[at] == '\r' || args[at] == ':')) {
    ++at;
  }
  uint64_t value = 0;
  size_t digits = 0;
  for (; at < args.size() && args[at] >= '0' && args[at] <= '9' && digits < 18; ++at, ++digits) {
    value = value * 10 + static_cast<uint64_t>(args[at] - '0');
  }
  return digits == 0 ? 0 : value;
}

// The fields of one event loupe reads. Views point into the input or, for an event read by the
// On-Demand fallback, into that parse; they live until the event is applied.
struct EventFields {
  std::string_view name, category, phase, pid = "0", tid = "0", id, bind_point, args_raw;
  int64_t ts = 0, dur = 0;
  bool has_ts = false, has_dur = false, malformed = false, has_id = false;
  int64_t ids_beyond_int64 = 0;
  // The scanner leaves "ts" and "dur" as their tokens (resolve_times() reads them): the thread
  // that splits a large file then does less, the one that applies the events a little more.
  std::string_view ts_token, dur_token;
  bool ts_deferred = false, dur_deferred = false;
};

enum class ValueKind : uint8_t { kString, kNumber, kObject, kOther };

// Sets one field from its value: a string's unescaped text, a number's token without trailing
// whitespace, an object's raw text. Both readers call this, so they agree on every rule: a field
// of the wrong type marks the event malformed, and a repeated key overwrites the earlier one.
inline void set_field(EventFields& fields, Key key, ValueKind kind, std::string_view text) {
  switch (key) {
    case Key::kPh:
      if (kind == ValueKind::kString) {
        fields.phase = text;
      } else {
        fields.malformed = true;
      }
      break;
    case Key::kTs:
    case Key::kDur: {
      int64_t& out = key == Key::kTs ? fields.ts : fields.dur;
      bool& has = key == Key::kTs ? fields.has_ts : fields.has_dur;
      has = (kind == ValueKind::kString || kind == ValueKind::kNumber) && parse_us_to_ns(text, out);
      if (!has) fields.malformed = true;
      break;
    }
    case Key::kName:
    case Key::kCat:
    case Key::kBp: {
      std::string_view& out = key == Key::kName  ? fields.name
                              : key == Key::kCat ? fields.category
                                                 : fields.bind_point;
      if (kind == ValueKind::kString) {
        out = text;
      } else {
        fields.malformed = true;
      }
      break;
    }
    case Key::kPid:
    case Key::kTid:
      if (kind == ValueKind::kString || kind == ValueKind::kNumber) {
        (key == Key::kPid ? fields.pid : fields.tid) = text;
      } else {
        fields.malformed = true;
      }
      break;
    case Key::kId:
      // Ids may be numbers beyond int64 or strings; the text is the key either way.
      fields.has_id = kind == ValueKind::kString || kind == ValueKind::kNumber;
      fields.id = fields.has_id ? text : std::string_view();
      if (kind == ValueKind::kNumber) {
        int64_t as_int = 0;
        auto [end, code] = std::from_chars(text.data(), text.data() + text.size(), as_int);
        if (code != std::errc() || end != text.data() + text.size()) ++fields.ids_beyond_int64;
      }
      if (!fields.has_id) fields.malformed = true;
      break;
    case Key::kArgs:
      if (kind == ValueKind::kObject) fields.args_raw = text;
      break;
    case Key::kOther:
      break;
  }
}

// "ts" or "dur" from the token the scanner left, as set_field reads it.
inline void resolve_time(EventFields& fields, Key key) {
  bool& deferred = key == Key::kTs ? fields.ts_deferred : fields.dur_deferred;
  if (!deferred) return;
  deferred = false;
  set_field(fields, key, ValueKind::kNumber, key == Key::kTs ? fields.ts_token : fields.dur_token);
}
inline void resolve_times(EventFields& fields) {
  resolve_time(fields, Key::kTs);
  resolve_time(fields, Key::kDur);
}

// Bytes of a number or literal as the structure check sees them outside strings: every byte
// from ' ' up but whitespace, quotes and the structural , : { } [ ].
constexpr std::array<bool, 256> kScalarByte = [] {
  std::array<bool, 256> table{};
  for (int byte = 0x21; byte < 256; ++byte) table[byte] = true;
  for (const char c : {'"', ',', ':', '{', '}', '[', ']'})
    table[static_cast<unsigned char>(c)] = false;
  return table;
}();

// The scanner over one event's text, from its '{' on, in the window that holds it. It finds the
// event's end itself: `end` may lie anywhere past it (the end of the window's checked bytes), and
// event_end() is then just past the closing '}'. Returns false when it cannot take the event —
// an escaped string in a field loupe reads, a byte out of place, a raw control character inside
// a string (the splitter repairs those), a bracket closed by the other kind (the splitter names
// that error), nesting deeper than 64, or the end of the bytes — and the event is then split
// and read the long way (JsonStream::value, and On-Demand when the scanner still declines). It
// never reads outside [begin, end).
class EventScanner {
 public:
  // `in_place`: the text is the window from the event's '{' on, not an extent the splitter found.
  EventScanner(const char* begin, const char* end, bool in_place = false)
      : pos_(begin), end_(end), in_place_(in_place) {}

  // After scan() returned true: just past the event's closing '}'.
  const char* event_end() const { return pos_ + 1; }

  bool scan(EventFields& fields) {
    if (pos_ == end_ || *pos_ != '{') return false;
    ++pos_;
    skip_space();
    if (pos_ < end_ && *pos_ == '}') return true;
    while (true) {
      skip_space();
      if (pos_ == end_ || *pos_ != '"') return false;
      const char* key_text = pos_ + 1;
      // A key loupe reads is matched with its closing quote in place (a Kineto event has no
      // other keys outside its args); any other is skipped as a string.
      Key key = end_ - key_text > kLongestKey ? classify_key(key_text) : Key::kOther;
      if (key != Key::kOther) {
        pos_ = key_text + key_size(key) + 1;
      } else {
        bool key_escaped = false;
        if (!skip_string(key_escaped)) return false;
        // An escaped key never equals a plain key loupe reads, as with On-Demand's raw match.
        if (!key_escaped) key = classify_key(key_text);
      }
      skip_space();
      if (pos_ == end_ || *pos_ != ':') return false;
      ++pos_;
      skip_space();
      if (pos_ == end_) return false;
      const char* value_begin = pos_;
      const char first = *pos_;
      ValueKind kind = ValueKind::kOther;
      std::string_view text;
      if (first == '"') {
        bool escaped = false;
        if (!skip_string(escaped)) return false;
        // Unescaping is left to simdjson: the fallback reads this event. A value loupe skips is
        // only checked (its escapes).
        if (escaped && key != Key::kOther) return false;
        JsonFault fault;
        if (escaped &&
            !check_json_value(std::string_view(value_begin, pos_ - value_begin), fault)) {
          return false;
        }
        kind = ValueKind::kString;
        text = std::string_view(value_begin + 1, static_cast<size_t>(pos_ - value_begin - 2));
      } else if (first == '{' || first == '[') {
        if (!skip_nested()) return false;
        kind = first == '{' ? ValueKind::kObject : ValueKind::kOther;
        text = std::string_view(value_begin, static_cast<size_t>(pos_ - value_begin));
      } else {
        if (!skip_token()) return false;
        text = std::string_view(value_begin, static_cast<size_t>(pos_ - value_begin));
        // A value loupe skips is checked here; the fields it reads are checked as they are read.
        if (key == Key::kOther && json_scalar_length(text) != text.size()) return false;
        kind = first == '-' || static_cast<unsigned>(first - '0') < 10 ? ValueKind::kNumber
                                                                       : ValueKind::kOther;
      }
      if (key == Key::kTs || key == Key::kDur) {
        // A repeated key: the earlier token's outcome first (a bad one marks the event).
        resolve_time(fields, key);
        if (kind == ValueKind::kNumber || kind == ValueKind::kString) {
          (key == Key::kTs ? fields.ts_token : fields.dur_token) = text;
          (key == Key::kTs ? fields.ts_deferred : fields.dur_deferred) = true;
        } else {
          set_field(fields, key, kind, text);
        }
      } else if (key != Key::kOther) {
        set_field(fields, key, kind, text);
      }
      skip_space();
      if (pos_ == end_) return false;
      if (*pos_ == '}') return true;
      if (*pos_ != ',') return false;
      ++pos_;
    }
  }

 private:
  void skip_space() {
    while (pos_ < end_ && is_json_space(*pos_)) ++pos_;
  }
  // Moves to the end of a number or literal token (kTokenEnd), a word at a time: commas,
  // closing brackets and bytes up to ' ' are flagged, and a flagged control byte that does not
  // end a token is stepped over.
  // Reading in place, a token holding a quote or an opening bracket declines the event: the
  // splitter would read that byte as the start of a string or a nested value and find another
  // extent (or an error) for the event.
  bool skip_token() {
    const char* pos = pos_;
    while (end_ - pos >= 8) {
      uint64_t word = 0;
      std::memcpy(&word, pos, 8);
      const uint64_t folded = word | (kOnes * 0x20);  // '[' as '{'
      const uint64_t hits = bytes_equal(word, ',') | bytes_equal(word, '}') |
                            bytes_equal(word, ']') | ((word - kOnes * 0x21) & ~word & kHighs) |
                            bytes_equal(word, '"') | bytes_equal(folded, '{');
      if (hits == 0) {
        pos += 8;
        continue;
      }
      pos += __builtin_ctzll(hits) / 8;
      const char c = *pos;
      if (kTokenEnd[static_cast<unsigned char>(c)]) {
        pos_ = pos;
        return true;
      }
      if (in_place_ && (c == '"' || c == '{' || c == '[')) return false;
      ++pos;
    }
    for (; pos < end_ && !kTokenEnd[static_cast<unsigned char>(*pos)]; ++pos) {
      if (in_place_ && (*pos == '"' || *pos == '{' || *pos == '[')) return false;
    }
    pos_ = pos;
    return true;
  }
  // Eight bytes at a time (SWAR): a word's lowest byte equal to `pattern`'s, if any, is flagged
  // first, so counting trailing zeros finds the earliest match.
  static constexpr uint64_t kOnes = 0x0101010101010101ull;
  static constexpr uint64_t kHighs = 0x8080808080808080ull;
  static uint64_t bytes_equal(uint64_t word, char byte) {
    const uint64_t diff = word ^ (kOnes * static_cast<uint8_t>(byte));
    return (diff - kOnes) & ~diff & kHighs;
  }
  // Moves to the first byte of [pos_, end_) for which `special` flags a match, a word at a time;
  // the caller examines the bytes of a shorter tail one by one.
  // (A local copy of the position: a store through `pos_` at each step would be kept, since the
  // bytes read may alias it.)
  template <typename Special>
  void skip_plain_words(Special special) {
    const char* pos = pos_;
    while (end_ - pos >= 8) {
      uint64_t word = 0;
      std::memcpy(&word, pos, 8);
      const uint64_t hits = special(word);
      if (hits != 0) {
        pos_ = pos + __builtin_ctzll(hits) / 8;
        return;
      }
      pos += 8;
    }
    pos_ = pos;
  }
  // At an opening quote; moves past the closing one.
  bool skip_string(bool& escaped) {
    ++pos_;
    return skip_string_rest(escaped);
  }
  // Bytes below 0x20 (exact for the lowest flagged byte).
  static uint64_t bytes_below_space(uint64_t word) {
    return (word - kOnes * 0x20) & ~word & kHighs;
  }
  // Inside a string, not just after a backslash; moves past its closing quote. False at a raw
  // control character: the splitter repairs it.
  bool skip_string_rest(bool& escaped) {
    // A string longer than a word (a kernel's name) is read 64 bytes at a time as masks.
    if (end_ - pos_ >= 72) {
      uint64_t word = 0;
      std::memcpy(&word, pos_, 8);
      if ((bytes_equal(word, '"') | bytes_equal(word, '\\') | bytes_below_space(word)) == 0) {
        pos_ += 8;
        while (end_ - pos_ >= 64) {
          JsonBlockMasks masks;
          classify_block_(pos_, masks);
          const uint64_t hits = masks.quote | masks.backslash | masks.control;
          if (hits != 0) {
            pos_ += __builtin_ctzll(hits);
            break;
          }
          pos_ += 64;
        }
      }
    }
    while (true) {
      skip_plain_words([](uint64_t word) {
        return bytes_equal(word, '"') | bytes_equal(word, '\\') | bytes_below_space(word);
      });
      if (pos_ >= end_) return false;
      const char c = *pos_;
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c == '\\') {
        escaped = true;
        ++pos_;
        if (pos_ < end_ && static_cast<unsigned char>(*pos_) < 0x20) return false;
      }
      ++pos_;
    }
  }
  // The open brackets of a nested value, innermost in bit 0: 1 for '{', 0 for '['. A closing
  // bracket of the other kind, or nesting deeper than 64, declines the event.
  struct BracketStack {
    uint64_t kinds = 0;
    int depth = 0;
    bool open(char c) {
      if (depth == 64) return false;
      kinds = kinds << 1 | (c == '{' ? 1 : 0);
      ++depth;
      return true;
    }
    // False on a mismatch; `closed` says whether the outermost bracket closed.
    bool close(char c, bool& closed) {
      if ((kinds & 1) != (c == '}' ? 1u : 0u)) return false;
      kinds >>= 1;
      closed = --depth == 0;
      return true;
    }
  };
  // The structure of a nested value checked from a block's masks as its brackets are visited:
  // what may follow each token (a key only ':', a value ',' or a closing bracket, ':' and ','
  // a value, '{' a key or '}', ...; ':' only in an object) as bit operations over the block, and
  // numbers and literals read one by one only where one holds a byte other than a digit, starts
  // with '0' or runs on into the next block. Kineto's args are mostly plain integers and strings.
  // The next token after each bit of `from` is found by adding: a carry from the bit after it runs
  // through the bytes that start no token and stops on the first that does.
  struct StructureCheck {
    bool object = false;         // the innermost open bracket at the block's end is '{'
    bool scalar_at_end = false;  // the block ended inside a number or literal
    // A token still to be found in the next block: the next after a key, after a value, ...
    uint64_t after_brace_or_comma = 0, key_end = 0, after_key = 0, after_value = 0,
             after_separator = 0, after_bracket = 0;
  };
  static uint64_t next_token(uint64_t from, uint64_t gaps, uint64_t tokens, uint64_t& carry) {
    uint64_t sum = 0;
    const bool overflow = __builtin_add_overflow((from << 1) | carry, gaps, &sum);
    carry = (from >> 63) | (overflow ? 1 : 0);
    return sum & tokens;
  }
  // Checks the bytes of `valid` in the block at pos_; false where the value breaks the grammar.
  // `object`: bytes inside an object (not an array), `braces`: the '{' among the open brackets.
  bool check_block(const JsonBlockMasks& masks, uint64_t inside, uint64_t object, uint64_t braces,
                   uint64_t valid, StructureCheck& check) {
    const uint64_t opening_quote = masks.quote & inside;
    const uint64_t closing_quote = masks.quote & ~inside;
    const uint64_t outside = ~(inside | masks.quote);
    const uint64_t open = masks.open & outside, close = masks.close & outside;
    const uint64_t comma = masks.comma & outside, colon = masks.colon & outside;
    const uint64_t operators = open | close | comma | colon;
    const uint64_t scalar = outside & ~masks.space & ~masks.control & ~operators;
    uint64_t bad = (masks.control & outside & ~masks.space) | (colon & ~object);
    const uint64_t scalar_start = scalar & ~((scalar << 1) | (check.scalar_at_end ? 1 : 0));
    // A number or literal cut by the block's end ended there when bit 0 is no part of it: the
    // token after it is looked for from bit 0.
    if (check.scalar_at_end && (scalar & 1) == 0) check.after_value |= 1;
    const uint64_t scalar_end = scalar & ~(scalar >> 1) & ~(uint64_t{1} << 63);
    const uint64_t tokens = operators | opening_quote | scalar_start;
    const uint64_t gaps = ~tokens;
    const uint64_t values = opening_quote | scalar_start | open;
    // After '{' or an object's ',': a key, or '}' (after ',' that is caught below: a ',' is
    // followed by a value, and a key string is one).
    const uint64_t after_brace_or_comma =
        next_token((open & braces) | (comma & object), gaps, tokens, check.after_brace_or_comma);
    bad |= after_brace_or_comma & ~(opening_quote | close);
    // A key ends at the next quote; after it only ':'.
    const uint64_t key_starts = after_brace_or_comma & opening_quote;
    const uint64_t key_ends = next_token(key_starts, ~masks.quote, masks.quote, check.key_end);
    bad |= next_token(key_ends, gaps, tokens, check.after_key) & ~colon;
    const uint64_t value_ends = (closing_quote & ~key_ends) | scalar_end | close;
    bad |= next_token(value_ends, gaps, tokens, check.after_value) & ~(comma | close);
    bad |= next_token(colon | comma, gaps, tokens, check.after_separator) & ~values;
    bad |= next_token(open & ~braces, gaps, tokens, check.after_bracket) & ~(values | close);
    if ((bad & valid) != 0) return false;
    // Numbers and literals: a run of digits that does not start with '0' is an integer; any other
    // run (a sign, a fraction, an exponent, a literal, a leading '0' with more after it, one that
    // runs on into the next block) is read from its start.
    uint64_t read = scalar_start & masks.zero & (scalar >> 1);
    for (uint64_t odd = scalar & ~masks.digit & valid; odd != 0;) {
      const int at = __builtin_ctzll(odd);
      const uint64_t upto = at == 63 ? ~uint64_t{0} : (uint64_t{2} << at) - 1;
      const uint64_t beyond = ~scalar & ~upto;  // the bytes after `at` that end its run
      odd &= beyond == 0 ? 0 : ~((beyond & (~beyond + 1)) - 1);
      const uint64_t starts = scalar_start & upto;
      if (starts != 0) read |= uint64_t{1} << (63 - __builtin_clzll(starts));
      // (none: the run began in an earlier block, which read it whole)
    }
    if ((scalar >> 63) != 0 && scalar_start != 0) {
      read |= uint64_t{1} << (63 - __builtin_clzll(scalar_start));
    }
    check.scalar_at_end = (scalar >> 63) != 0;
    for (read &= valid; read != 0; read &= read - 1) {
      const char* const token = pos_ + __builtin_ctzll(read);
      const size_t length = json_scalar_length(std::string_view(token, end_ - token));
      if (length == 0 || end_ - token == static_cast<ptrdiff_t>(length) ||
          kScalarByte[static_cast<unsigned char>(token[length])]) {
        return false;
      }
    }
    return true;
  }
  // At an opening bracket; moves past its partner. The splitter has matched brackets by kind, so
  // counting them is enough. A value long enough (Kineto's args objects) is read 64 bytes at a
  // time as masks, as the splitter reads it, until a block holds a backslash; its structure is
  // checked there (check_block), and anywhere else by the byte reader (check_json_value) once
  // its end is found.
  bool skip_nested() {
    const char* const begin = pos_;
    BracketStack stack;
    StructureCheck check;
    bool in_string = false;
    while (end_ - pos_ >= 64) {
      JsonBlockMasks masks;
      classify_value_(pos_, masks);
      if (masks.backslash != 0) break;
      const uint64_t inside = prefix_xor(masks.quote) ^ (in_string ? ~uint64_t{0} : 0);
      if ((masks.control & inside) != 0) return false;
      uint64_t object = check.object ? ~uint64_t{0} : 0;
      uint64_t braces = 0;
      for (uint64_t brackets = (masks.open | masks.close) & ~inside; brackets != 0;
           brackets &= brackets - 1) {
        const int at = __builtin_ctzll(brackets);
        bool closed = false;
        if (((masks.open >> at) & 1) != 0) {
          if (!stack.open(pos_[at])) return false;
          braces |= (stack.kinds & 1) << at;
        } else if (!stack.close(pos_[at], closed)) {
          return false;
        } else if (closed) {
          const uint64_t valid = at == 63 ? ~uint64_t{0} : (uint64_t{2} << at) - 1;
          if (!check_block(masks, inside, object, braces, valid, check)) return false;
          pos_ += at + 1;
          return true;
        }
        // From this bracket on, the innermost open one is of this kind.
        const uint64_t from_here = ~uint64_t{0} << at;
        object = (stack.kinds & 1) != 0 ? object | from_here : object & ~from_here;
      }
      if (!check_block(masks, inside, object, braces, ~uint64_t{0}, check)) return false;
      check.object = (object >> 63) != 0;
      in_string = (inside >> 63) != 0;
      pos_ += 64;
    }
    if (!skip_nested_bytes(stack, in_string)) return false;
    JsonFault fault;
    return check_json_value(std::string_view(begin, static_cast<size_t>(pos_ - begin)), fault);
  }
  // The rest of skip_nested, a byte at a time.
  bool skip_nested_bytes(BracketStack& stack, bool in_string) {
    if (in_string) {
      bool escaped = false;
      if (!skip_string_rest(escaped)) return false;
    }
    while (true) {
      // Setting bit 5 folds '[' into '{' and ']' into '}' (and no other byte into either).
      skip_plain_words([](uint64_t word) {
        const uint64_t folded = word | (kOnes * 0x20);
        return bytes_equal(word, '"') | bytes_equal(folded, '{') | bytes_equal(folded, '}');
      });
      if (pos_ >= end_) return false;
      const char c = *pos_;
      if (c == '"') {
        bool escaped = false;
        if (!skip_string(escaped)) return false;
        continue;
      }
      bool closed = false;
      if (c == '{' || c == '[') {
        if (!stack.open(c)) return false;
      } else if (c == '}' || c == ']') {
        if (!stack.close(c, closed)) return false;
        if (closed) {
          ++pos_;
          return true;
        }
      }
      ++pos_;
    }
  }

  const char* pos_;
  const char* end_;
  const bool in_place_;
  const JsonBlockClassifier classify_block_ = json_block_classifier();
  const JsonBlockClassifier classify_value_ = json_value_classifier();
};

// The same fields through On-Demand, for the events the scanner leaves: escaped strings are
// unescaped into the parser's buffer.
simdjson::error_code read_fields(od::object event, EventFields& fields) {
  for (auto field : event) {
    od::raw_json_string raw_key;
    if (auto error = field.key().get(raw_key)) return error;
    const Key key = classify_key(raw_key.raw());
    if (key == Key::kOther) continue;
    od::value value;
    if (auto error = field.value().get(value)) return error;
    od::json_type type;
    if (value.type().get(type)) {
      set_field(fields, key, ValueKind::kOther, {});
      continue;
    }
    switch (type) {
      case od::json_type::string: {
        std::string_view text;
        if (value.get_string().get(text)) {
          set_field(fields, key, ValueKind::kOther, {});
        } else {
          set_field(fields, key, ValueKind::kString, text);
        }
        break;
      }
      case od::json_type::number:
        set_field(fields, key, ValueKind::kNumber, trim_json_space(value.raw_json_token()));
        break;
      case od::json_type::object: {
        od::object object;
        std::string_view raw;
        if (value.get_object().get(object) || object.raw_json().get(raw)) {
          fields.malformed = true;
        } else {
          set_field(fields, key, ValueKind::kObject, raw);
        }
        break;
      }
      default:
        set_field(fields, key, ValueKind::kOther, {});
        break;
    }
  }
  return simdjson::SUCCESS;
}

// The bytes of a JSON text, in pieces.
class TextSource {
 public:
  virtual ~TextSource() = default;
  // Copies up to `capacity` further bytes to `out`; returns 0 at the end. Throws Error(kInput).
  virtual size_t read(char* out, size_t capacity) = 0;
  // The text's size when known (to size the window and the tables), else 0.
  virtual uint64_t size_hint() const = 0;
  // Up to `capacity` bytes from `offset` (this source's position unmoved); how many were copied.
  virtual size_t read_at(uint64_t offset, char* out, size_t capacity) const = 0;
  // Another source over the same text from `offset` on; null when the text cannot be read from an
  // offset (a pipe).
  virtual std::unique_ptr<TextSource> open_at(uint64_t offset) const = 0;
};

class MemorySource final : public TextSource {
 public:
  explicit MemorySource(std::string_view text, uint64_t offset = 0)
      : text_(text), at_(std::min<size_t>(offset, text.size())) {}
  size_t read(char* out, size_t capacity) override {
    const size_t count = std::min(capacity, text_.size() - at_);
    std::memcpy(out, text_.data() + at_, count);
    at_ += count;
    return count;
  }
  uint64_t size_hint() const override { return text_.size(); }
  size_t read_at(uint64_t offset, char* out, size_t capacity) const override {
    if (offset >= text_.size()) return 0;
    const size_t count = std::min<size_t>(capacity, text_.size() - offset);
    std::memcpy(out, text_.data() + offset, count);
    return count;
  }
  std::unique_ptr<TextSource> open_at(uint64_t offset) const override {
    return std::make_unique<MemorySource>(text_, offset);
  }

 private:
  std::string_view text_;
  size_t at_ = 0;
};

// A file read front to back with read(2): the page cache holds what was read, not this process.
class FileSource final : public TextSource {
 public:
  explicit FileSource(const std::string& path, uint64_t offset = 0) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      throw Error(ErrorCode::kInput,
                  "cannot open trace file '" + path + "': " + std::strerror(errno),
                  "check the path; traces are loupe binary (.loupetrace) or Chrome/Kineto JSON");
    }
    struct stat status {};
    if (::fstat(fd_, &status) == 0 && S_ISREG(status.st_mode)) {
      size_ = static_cast<uint64_t>(status.st_size);
      ::posix_fadvise(fd_, static_cast<off_t>(offset), 0, POSIX_FADV_SEQUENTIAL);
      if (offset != 0 && ::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) fail("seek");
    }
  }
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;
  ~FileSource() override { ::close(fd_); }

  size_t read(char* out, size_t capacity) override {
    while (true) {
      const ssize_t got = ::read(fd_, out, capacity);
      if (got >= 0) return static_cast<size_t>(got);
      if (errno != EINTR) fail("read");
    }
  }
  uint64_t size_hint() const override { return size_; }
  size_t read_at(uint64_t offset, char* out, size_t capacity) const override {
    size_t done = 0;
    while (done < capacity) {
      const ssize_t got =
          ::pread(fd_, out + done, capacity - done, static_cast<off_t>(offset + done));
      if (got == 0) break;
      if (got < 0) {
        if (errno == EINTR) continue;
        fail("read");
      }
      done += static_cast<size_t>(got);
    }
    return done;
  }
  // Only a regular file is read from an offset: a pipe's bytes come once.
  std::unique_ptr<TextSource> open_at(uint64_t offset) const override {
    if (size_ == 0) return nullptr;
    return std::make_unique<FileSource>(path_, offset);
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    throw Error(ErrorCode::kInput, std::string("cannot ") + what + " trace file '" + path_ +
                                       "': " + std::strerror(errno));
  }

  const std::string& path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Replaces each byte of [text, text + size) that does not belong to a valid UTF-8 sequence with
// '?', calling `repaired(position)` for each. REQUIRES: no sequence continues past `size` unless
// the text ends there.
template <typename Repaired>
void repair_utf8(char* text, size_t size, Repaired&& repaired) {
  for (size_t pos = 0; pos < size; ++pos) {
    const auto byte = static_cast<unsigned char>(text[pos]);
    if (byte < 0x80) continue;
    const size_t length = byte >= 0xF0 && byte <= 0xF4   ? 4
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
      repaired(pos);
    } else {
      pos += length - 1;
    }
  }
}

// SWAR helpers: eight bytes at a time, the lowest flagged byte is the earliest match.
constexpr uint64_t kOnes = 0x0101010101010101ull;
constexpr uint64_t kHighs = 0x8080808080808080ull;
inline uint64_t bytes_equal(uint64_t word, char byte) {
  const uint64_t diff = word ^ (kOnes * static_cast<uint8_t>(byte));
  return (diff - kOnes) & ~diff & kHighs;
}
// Bytes below 0x20 (exact for the lowest flagged byte).
inline uint64_t bytes_below_space(uint64_t word) { return (word - kOnes * 0x20) & ~word & kHighs; }

// An event found by the thread that reads the text: its fields when the scanner took it, else
// only its text, for the On-Demand reader on the thread that applies it.
struct ScannedEvent {
  EventFields fields;
  std::string_view raw;
  uint64_t offset = 0;
  bool scanned = false;
};

// A window and the events found in it; the events point into the window.
struct Batch {
  std::string window;
  std::vector<ScannedEvent> events;
  std::exception_ptr error;  // the splitting thread's, after these events
  bool last = false;
};

// Hands windows of split and scanned events from the thread that reads the text (the producer) to
// the thread that applies them to the model (the consumer), in order, through a few batches that
// go round: reading, splitting and scanning overlap with applying, and memory stays a few windows.
class EventPipeline {
 public:
  struct Cancelled {};

  explicit EventPipeline(size_t piece) {
    for (Batch& batch : batches_) {
      batch.window.resize(piece);
      free_.push_back(&batch);
    }
    producing_ = take_free();
  }

  // Producer: the batch being filled.
  Batch& producing() { return *producing_; }
  // Producer: publishes the batch being filled and returns the next (waiting for one).
  Batch& exchange() {
    publish(producing_);
    producing_ = take_free();
    return *producing_;
  }
  // Producer: publishes the last batch, with the error that ended the text, if any.
  void finish(std::exception_ptr error) {
    producing_->error = std::move(error);
    producing_->last = true;
    publish(producing_);
    producing_ = nullptr;
  }
  // Consumer: the next batch in order (waiting for it).
  Batch& next() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !ready_.empty(); });
    Batch* batch = ready_.front();
    ready_.pop_front();
    return *batch;
  }
  // Consumer: a batch applied; its window and event list are reused.
  void release(Batch& batch) {
    batch.events.clear();
    batch.error = nullptr;
    batch.last = false;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      free_.push_back(&batch);
    }
    changed_.notify_all();
  }
  // Consumer: stop the producer at its next exchange (it throws Cancelled).
  void cancel() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      cancelled_ = true;
    }
    changed_.notify_all();
  }

 private:
  void publish(Batch* batch) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      ready_.push_back(batch);
    }
    changed_.notify_all();
  }
  Batch* take_free() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return cancelled_ || !free_.empty(); });
    if (cancelled_) throw Cancelled{};
    Batch* batch = free_.front();
    free_.pop_front();
    return batch;
  }

  std::array<Batch, 3> batches_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch*> free_;
  std::deque<Batch*> ready_;
  Batch* producing_ = nullptr;
  bool cancelled_ = false;
};

// Thrown to a part of a text read by several threads that is no longer needed.
struct PartCancelled {};

constexpr const char* kNotJsonHint =
    "the file is not JSON; loupe repairs invalid UTF-8, control characters and a truncated tail "
    "only";
constexpr const char* kNotChromeHint =
    "the file is not a Chrome trace; expected [events...] or {\"traceEvents\": [...]}";

[[noreturn]] void fail_json(const std::string& name, uint64_t offset, const std::string& what,
                            bool invalid_utf8) {
  throw Error(
      ErrorCode::kInput,
      "cannot read JSON trace '" + name + "': offset " + std::to_string(offset) + ": " + what,
      invalid_utf8 ? kNotJsonHint : kNotChromeHint);
}

// A JSON text read through a window: values are found one after the other, each handed over as
// its extent in the window, valid until the next call. Everything in the window has been checked
// for UTF-8 (and repaired); strings are repaired of raw control characters as values are scanned.
// A value cut off by the end of the text reports truncation; a text that breaks JSON's structure
// throws Error(kInput) naming the file and the offset.
class JsonStream {
 public:
  // With a pipeline, the windows are its batches' (a full one is handed on, not compacted);
  // without, the thread's retained buffer.
  // `start`: the text offset of the source's first byte (a part of a text read by several threads
  // starts inside it).
  JsonStream(TextSource& source, const std::string& name, StatsRegistry& stats,
             EventPipeline* pipeline, uint64_t start = 0)
      : source_(source), name_(name), stats_(stats), pipeline_(pipeline), base_(start) {
    const uint64_t hint = source.size_hint();
    const size_t piece = pipeline != nullptr ? kPipelinePieceBytes : kPieceBytes;
    piece_ = hint != 0 && hint < piece ? static_cast<size_t>(hint) + 1 : piece;
    storage_ = pipeline != nullptr ? &pipeline->producing().window : &window_storage();
    if (storage_->size() < piece_) storage_->resize(piece_);
  }
  JsonStream(const JsonStream&) = delete;
  JsonStream& operator=(const JsonStream&) = delete;
  ~JsonStream() {
    if (pipeline_ == nullptr && storage_->size() > 2 * kPieceBytes) *storage_ = std::string();
  }

  // The next byte that is not JSON whitespace, not consumed; -1 at the end of the text.
  int peek() {
    while (true) {
      while (pos_ < checked_ && is_json_space((*storage_)[pos_])) ++pos_;
      if (pos_ < checked_) return static_cast<unsigned char>((*storage_)[pos_]);
      if (!more(pos_)) return -1;
    }
  }
  void advance() { ++pos_; }
  uint64_t offset() const { return base_ + pos_; }
  // The checked bytes from the current one on, valid until the next call that moves the window.
  std::string_view checked_rest() const {
    return std::string_view(storage_->data() + pos_, checked_ - pos_);
  }
  // Consumes `count` bytes of checked_rest().
  void skip(size_t count) { pos_ += count; }
  // The bytes read from `from` on, when the window still holds them (after value() returned
  // false, it holds the whole unterminated value); empty otherwise.
  std::string_view read_since(uint64_t from) const {
    if (from < base_ || from > base_ + pos_) return {};
    return std::string_view(storage_->data() + (from - base_), base_ + pos_ - from);
  }

  // The value at the current byte (peek() returned it): its text, consumed. Returns false when
  // the text ends inside it.
  bool value(std::string_view& text, uint64_t& offset);

  // `not_json`: the text breaks JSON's grammar there (the hint says so, not "not a trace").
  [[noreturn]] void fail(uint64_t offset, const std::string& what, bool not_json = false) const {
    fail_json(
        name_, offset, what,
        not_json || stats_.count(Stat::trace_json_invalid_utf8) != 0 || !repairs_aside_.empty());
  }

  // For a part of a text read by several threads: the next window throws PartCancelled once
  // `cancelled` is set, and the UTF-8 repairs at offsets from `aside_from` on are held aside,
  // not counted — the window reads ahead of where the part may end, and the part after it counts
  // its own bytes.
  void read_as_part(const std::atomic<bool>* cancelled, uint64_t aside_from) {
    cancelled_ = cancelled;
    repairs_aside_from_ = aside_from;
  }
  // The part ended at `end` (UINT64_MAX: at the end of the text): the repairs held aside before
  // it are its own.
  void count_repairs_before(uint64_t end) {
    for (const uint64_t offset : repairs_aside_) {
      if (offset < end) stats_.add(Stat::trace_json_invalid_utf8);
    }
    repairs_aside_.clear();
  }

 private:
  void repair_utf8_range(size_t from, size_t to) {
    if (simdjson::validate_utf8(storage_->data() + from, to - from)) return;
    repair_utf8(storage_->data() + from, to - from, [this, from](size_t pos) {
      const uint64_t offset = base_ + from + pos;
      if (offset >= repairs_aside_from_) {
        repairs_aside_.push_back(offset);
      } else {
        stats_.add(Stat::trace_json_invalid_utf8);
      }
    });
  }
  // Keeps the bytes from `keep` on (moved to the window's front; positions shift by `keep`) and
  // adds checked bytes. Returns false when the text has no more.
  bool more(size_t keep);

  TextSource& source_;
  const std::string& name_;
  StatsRegistry& stats_;
  EventPipeline* pipeline_;
  std::string* storage_ = nullptr;
  size_t piece_ = kPieceBytes;
  uint64_t base_ = 0;   // the text offset of storage_[0]
  size_t pos_ = 0;      // the next byte to read
  size_t checked_ = 0;  // bytes [0, checked_) are UTF-8-checked text
  size_t size_ = 0;     // bytes [0, size_) hold text
  bool source_done_ = false;
  std::string brackets_;  // the open brackets of the value being scanned
  const JsonBlockClassifier classify_block_ = json_block_classifier();
  const std::atomic<bool>* cancelled_ = nullptr;
  uint64_t repairs_aside_from_ = UINT64_MAX;
  std::vector<uint64_t> repairs_aside_;  // text offsets
};

bool JsonStream::more(size_t keep) {
  if (cancelled_ != nullptr && cancelled_->load(std::memory_order_relaxed)) throw PartCancelled{};
  if (pipeline_ != nullptr && !pipeline_->producing().events.empty()) {
    // The events found so far point into this window: hand it on with them and go on in the
    // next, which starts with the bytes still needed.
    const std::string& full = *storage_;
    storage_ = &pipeline_->exchange().window;
    if (storage_->size() < std::max(piece_, size_ - keep)) {
      storage_->resize(std::max(piece_, size_ - keep));
    }
    std::memcpy(storage_->data(), full.data() + keep, size_ - keep);
    size_ -= keep;
    checked_ -= keep;
    pos_ -= keep;
    base_ += keep;
  } else if (keep > 0) {
    std::memmove(storage_->data(), storage_->data() + keep, size_ - keep);
    size_ -= keep;
    checked_ -= keep;
    pos_ -= keep;
    base_ += keep;
  }
  while (true) {
    if (source_done_) {
      if (checked_ == size_) return false;
      repair_utf8_range(checked_, size_);
      checked_ = size_;
      return true;
    }
    if (storage_->size() - size_ < piece_) {
      storage_->resize(std::max(storage_->size() * 2, size_ + piece_));
    }
    const size_t got = source_.read(storage_->data() + size_, piece_);
    if (got == 0) {
      source_done_ = true;
      continue;
    }
    size_ += got;
    // Check up to the last ASCII byte: a sequence cut by the piece's end waits for its rest.
    size_t limit = size_;
    while (limit > checked_ && static_cast<unsigned char>((*storage_)[limit - 1]) >= 0x80) {
      --limit;
    }
    if (limit == checked_) continue;
    repair_utf8_range(checked_, limit);
    checked_ = limit;
    return true;
  }
}

// Bytes that end a number or literal: those that end a token, and those no token may hold.
constexpr std::array<bool, 256> kScalarEnd = [] {
  std::array<bool, 256> table{};
  for (const char c : {' ', '\n', '\r', '\t', ',', '}', ']', '"', '{', '[', ':'}) {
    table[static_cast<unsigned char>(c)] = true;
  }
  return table;
}();

bool JsonStream::value(std::string_view& text, uint64_t& offset) {
  size_t begin = pos_;
  auto refill = [&] {
    const size_t keep = begin;
    if (!more(keep)) return false;
    begin -= keep;
    return true;
  };
  auto done = [&] {
    text = std::string_view(storage_->data() + begin, pos_ - begin);
    offset = base_ + begin;
    return true;
  };
  const char first = (*storage_)[begin];
  if (first == ',' || first == ':' || first == ']' || first == '}') {
    fail(base_ + begin, std::string("expected a value, found '") + first + "'");
  }
  if (first != '"' && first != '{' && first != '[') {
    while (true) {
      while (pos_ < checked_ && !kScalarEnd[static_cast<unsigned char>((*storage_)[pos_])]) {
        ++pos_;
      }
      if (pos_ < checked_) return done();
      if (!refill()) return false;
    }
  }
  brackets_.clear();
  bool in_string = false;
  bool escaped = false;
  // A bracket outside a string: pushed, or popped when it closes the innermost open one.
  // Returns true when it closed the value.
  auto bracket = [this](char c, size_t at) {
    if (c == '{' || c == '[') {
      brackets_.push_back(c);
      return false;
    }
    const char open = c == '}' ? '{' : '[';
    if (brackets_.empty() || brackets_.back() != open) {
      fail(base_ + at,
           std::string("'") + c + "' closes " +
               (brackets_.empty() ? std::string("nothing")
                                  : "a '" + brackets_.substr(brackets_.size() - 1) + "'"));
    }
    brackets_.pop_back();
    return brackets_.empty();
  };
  // Blocks of 64 bytes are read as masks (json_blocks.hpp) while they hold no backslash and no
  // control character inside a string: then quotes simply alternate, and only the brackets
  // outside strings need a look. The byte loop below takes every other block, up to its end.
  const bool bracketed = first != '"';
  size_t bytes_until = 0;  // the byte loop's, from the block the masks declined
  while (true) {
    if (pos_ == checked_) {
      if (!refill()) return false;
      bytes_until = 0;
    }
    char* const data = storage_->data();
    if (bracketed && !escaped && pos_ >= bytes_until) {
      while (checked_ - pos_ >= 64) {
        JsonBlockMasks masks;
        classify_block_(data + pos_, masks);
        const uint64_t inside = prefix_xor(masks.quote) ^ (in_string ? ~uint64_t{0} : 0);
        if (masks.backslash != 0 || (masks.control & inside) != 0) {
          bytes_until = pos_ + 64;
          break;
        }
        for (uint64_t brackets = (masks.open | masks.close) & ~inside; brackets != 0;
             brackets &= brackets - 1) {
          const size_t at = pos_ + static_cast<size_t>(__builtin_ctzll(brackets));
          if (bracket(data[at], at)) {
            pos_ = at + 1;
            return done();
          }
        }
        in_string = (inside >> 63) != 0;
        pos_ += 64;
      }
      if (pos_ == checked_) continue;
    }
    if (in_string) {
      if (escaped) {
        escaped = false;
        ++pos_;
        continue;
      }
      while (checked_ - pos_ >= 8) {
        uint64_t word = 0;
        std::memcpy(&word, data + pos_, 8);
        const uint64_t hits =
            bytes_equal(word, '"') | bytes_equal(word, '\\') | bytes_below_space(word);
        if (hits != 0) {
          pos_ += static_cast<size_t>(__builtin_ctzll(hits) / 8);
          break;
        }
        pos_ += 8;
      }
      if (pos_ == checked_) continue;
      const auto c = static_cast<unsigned char>(data[pos_]);
      ++pos_;
      if (c == '"') {
        in_string = false;
        if (brackets_.empty()) return done();
      } else if (c == '\\') {
        escaped = true;
      } else if (c < 0x20) {
        data[pos_ - 1] = ' ';
        stats_.add(Stat::trace_json_control_character);
      }
      continue;
    }
    while (checked_ - pos_ >= 8) {
      uint64_t word = 0;
      std::memcpy(&word, data + pos_, 8);
      // Setting bit 5 folds '[' into '{' and ']' into '}' (and no other byte into either).
      const uint64_t folded = word | (kOnes * 0x20);
      const uint64_t hits =
          bytes_equal(word, '"') | bytes_equal(folded, '{') | bytes_equal(folded, '}');
      if (hits != 0) {
        pos_ += static_cast<size_t>(__builtin_ctzll(hits) / 8);
        break;
      }
      pos_ += 8;
    }
    if (pos_ == checked_) continue;
    const char c = data[pos_];
    ++pos_;
    if (c == '"') {
      in_string = true;
    } else if ((c == '{' || c == '[' || c == '}' || c == ']') && bracket(c, pos_ - 1)) {
      return done();
    }
  }
}

class ChromeReader {
 public:
  ChromeReader(const std::string& name, ModelBuilder& builder, uint32_t file_index)
      : name_(name), builder_(builder), file_index_(file_index), keep_args_(builder.keeps_args()) {}

  // Reads the whole text; throws Error(kInput) when it breaks JSON's structure.
  void read(JsonStream& stream, uint64_t size_hint, StatsRegistry& stats);
  // A part of a text read by several threads: reads from an element of the event list (the
  // stream's first byte) to the end of the text, as read() would read on from that element.
  // `top_object`: the text is an object (its other members may follow the list).
  void read_part(JsonStream& stream, bool top_object, uint64_t size_hint, StatsRegistry& stats);
  // The offsets where later parts start, ascending: reading stops at the first of them where an
  // element of the event list starts (that part reads on from there).
  void stop_at(std::vector<uint64_t> starts) { stops_ = std::move(starts); }
  bool stopped() const { return stopped_; }
  uint64_t stopped_at() const { return stopped_at_; }
  // Takes what `later` read of the text after this reader's part, as though this reader had read
  // on: its strings and tracks found or added here in the order `later` added them, its rows
  // appended with their ids mapped, its begin/end and flow order numbers after this one's.
  void append(ChromeReader& later);
  // With a pipeline, read() hands each event to it, split and scanned, instead of applying it;
  // the consumer applies them with apply_scanned.
  void pipe_to(EventPipeline* pipeline) { pipeline_ = pipeline; }
  // An error only when the On-Demand reader finds the event's text broken.
  simdjson::error_code apply_scanned(ScannedEvent& event, StatsRegistry& stats) {
    if (!event.scanned) return read_event_fallback(event.raw, stats);
    apply_event(event.fields, stats);
    return simdjson::SUCCESS;
  }
  void commit(StatsRegistry& stats);
  // Sorts the flows from `from` on (flow_before), when they are not in order already: files that
  // number flows as they go (an "s" then its "f") are. A part sorts its own on its own thread,
  // and append() merges the runs.
  void sort_flows(size_t from = 0);
  // Flows from a runtime call to the GPU ops with its correlation id that no flow reaches;
  // nothing when no op is unreached or the file has no launch. REQUIRES: flows_ sorted.
  std::optional<std::vector<CorrelationFlow>> correlation_flows();
  bool kineto() const { return kineto_; }
  // The document is an object with no "traceEvents" key: some JSON, but not a trace.
  bool object_without_events() const { return top_object_ && !saw_trace_events_; }
  // The event list holds values but not one object: a list of numbers, not of events.
  bool list_without_events() const { return elements_ > 0 && objects_ == 0; }
  bool has_base_time() const { return has_base_time_; }
  int64_t offset() const { return has_base_time_ ? base_time_ns_ : 0; }
  uint64_t events() const { return events_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const std::vector<FileInfo::ProcessGroup>& process_groups() const { return process_groups_; }

 private:
  struct TrackState {
    bool gpu = false;
    bool seen = false;
    int64_t last_ts = 0;
    std::vector<BeginEnd> begin_ends;
  };
  struct CachedTrack {
    std::string pid;
    std::string tid;
    TrackId track = kNoTrack;
  };

  TrackId track_for(std::string_view pid, std::string_view tid);
  StringId intern(std::string_view text);
  // Return an error only for structural problems; bad fields drop the event and count it.
  simdjson::error_code read_event(std::string_view raw, StatsRegistry& stats);
  simdjson::error_code read_event_fallback(std::string_view raw, StatsRegistry& stats);

 public:
  // The error of an event at text offset `offset` that read_event or apply_scanned refused: the
  // offset of the fault in it and what was expected there, when the structure check found it.
  // Whether the structure check found the fault event_error names.
  bool faulted() const { return faulted_; }
  std::pair<uint64_t, std::string> event_error(uint64_t offset, simdjson::error_code code) const {
    if (faulted_)
      return {offset + fault_.at,
              fault_.expected + " (in the event at offset " + std::to_string(offset) + ")"};
    return {offset, std::string(simdjson::error_message(code)) + " in this event"};
  }

 private:
  // Resolves the scanner's deferred times first (resolve_times).
  void apply_event(EventFields& fields, StatsRegistry& stats);
  // An event object at the stream's current byte read by the scanner where it lies in the window,
  // its end found as it goes; false, with nothing consumed, when the scanner declines it (the
  // caller then splits it with JsonStream::value and reads it the long way).
  bool scan_in_place(JsonStream& stream, StatsRegistry& stats);
  // An element of the event list split as a whole value, then read; false when the text ends in it.
  bool read_element(JsonStream& stream, StatsRegistry& stats);
  // The event list, after its '['; false when the text ends inside it.
  bool read_events(JsonStream& stream, StatsRegistry& stats);
  // The top-level object's members, after its '{' (`after_value`: after a member's value); false
  // when the text ends inside it.
  bool read_members(JsonStream& stream, StatsRegistry& stats, bool after_value = false);
  // After the text's value: the truncation count, or the error of content after it.
  void end_read(JsonStream& stream, bool complete, StatsRegistry& stats);
  // At an element of the event list at `offset` at or past the next stop: whether it is one.
  bool reached_stop(uint64_t offset);
  // One member: its key, ':' and value (the event list read as such); false when the text ends
  // inside it.
  bool read_member_at(JsonStream& stream, StatsRegistry& stats, int next);
  void read_member(std::string_view key, std::string_view value);
  // distributedInfo.pg_config: [{"pg_name": "1", "backend_config": "cpu:gloo,cuda:gloo",
  // "ranks": [0, 1], ...}, ...]. An entry without a name is left out; a malformed list leaves
  // the groups read before it.
  void read_process_groups(od::value value);

  const std::string& name_;
  ModelBuilder& builder_;
  uint32_t file_index_;
  bool kineto_ = false;
  bool top_object_ = false;
  bool saw_trace_events_ = false;
  size_t elements_ = 0;  // of the event list
  size_t objects_ = 0;   // of those, objects
  bool has_base_time_ = false;
  int64_t base_time_ns_ = 0;
  int rank_ = -1, world_size_ = 0;
  bool rank_read_ = false, world_size_read_ = false;
  std::vector<FileInfo::ProcessGroup> process_groups_;  // distributedInfo.pg_config
  std::vector<uint64_t> stops_;                         // stop_at()
  size_t next_stop_ = 0;
  bool stopped_ = false;
  uint64_t stopped_at_ = 0;
  uint64_t events_ = 0;
  uint64_t order_ = 0;
  std::string key_;
  std::unordered_map<std::string, TrackId> tracks_;
  std::array<CachedTrack, 8> recent_tracks_;  // most events reuse a few tracks
  // Names and categories recur: a direct-mapped memo keyed by the length and the first and last
  // eight bytes finds most of them with one comparison and no hash of the whole text.
  struct RecentString {
    uint64_t head = 0;  // the first eight bytes (zero-padded)
    uint64_t tail = 0;  // the last eight bytes, for texts of eight bytes or more
    size_t size = 0;
    StringId id = 0;  // the empty string until a text lands here
  };
  std::array<RecentString, 1024> recent_strings_{};
  size_t recent_next_ = 0;
  LocalSlices slices_;
  std::vector<TrackState> track_state_;  // by TrackId
  std::vector<int8_t> category_class_;   // by StringId: -1 unknown, else kCategory* bits
  // Runtime calls and GPU ops with a correlation id, in file order: correlation << 1 | is GPU,
  // and the index in slices_. The ops no ac2g flow reaches (a CUDA graph's replay has one flow
  // for many kernels; some traces have none) are tied to their launch by it. 12 bytes an event.
  std::vector<uint64_t> correlation_keys_;
  std::vector<uint32_t> correlation_slices_;
  const bool keep_args_;                       // ModelBuilder::keep_args: for export only
  std::string args_;                           // the slices' args objects, back to back
  std::vector<std::array<TrackId, 2>> lanes_;  // by main track: its python and annotation lanes
  std::vector<FlowPoint> flows_;
  StringPool flow_ids_;
  std::vector<LocalInstant> instants_;
  std::vector<LocalCounter> counters_;
  std::map<std::string, std::string> process_names_;
  std::map<TrackId, std::string> thread_names_;
  od::parser fallback_parser_;
  JsonFault fault_;       // the structure check's finding on the event refused
  bool faulted_ = false;  // ... when it found one
  // For the top-level members, read on the splitting thread when a pipeline applies the events.
  od::parser member_parser_;
  EventPipeline* pipeline_ = nullptr;
  // For the args of counter and metadata events: their event's fields may still point into
  // fallback_parser_'s string buffer.
  od::parser args_parser_;
};

TrackId ChromeReader::track_for(std::string_view pid, std::string_view tid) {
  for (const CachedTrack& cached : recent_tracks_) {
    if (cached.track != kNoTrack && cached.pid == pid && cached.tid == tid) return cached.track;
  }
  key_.assign(pid);
  key_ += '\x1f';
  key_ += tid;
  TrackId track = kNoTrack;
  auto found = tracks_.find(key_);
  if (found != tracks_.end()) {
    track = found->second;
  } else {
    track = builder_.track(file_index_, TrackKind::kThread, pid, tid);
    tracks_.emplace(key_, track);
  }
  CachedTrack& slot = recent_tracks_[recent_next_];
  recent_next_ = (recent_next_ + 1) % recent_tracks_.size();
  slot.pid.assign(pid);
  slot.tid.assign(tid);
  slot.track = track;
  return track;
}

StringId ChromeReader::intern(std::string_view text) {
  uint64_t head = 0;
  uint64_t tail = 0;
  const size_t size = text.size();
  if (size >= 8) {
    std::memcpy(&head, text.data(), 8);
    std::memcpy(&tail, text.data() + size - 8, 8);
  } else if (size > 0) {
    std::memcpy(&head, text.data(), size);
  }
  const uint64_t key = (head ^ (tail * 0x9E3779B97F4A7C15ull) ^ size) * 0xBF58476D1CE4E5B9ull;
  RecentString& slot = recent_strings_[(key >> 54) & (recent_strings_.size() - 1)];
  // Head and tail cover texts of up to 16 bytes; longer ones compare their middle too.
  if (slot.size == size && slot.head == head && slot.tail == tail &&
      (size <= 16 || std::memcmp(builder_.model().strings.get(slot.id).data() + 8, text.data() + 8,
                                 size - 16) == 0)) {
    return slot.id;
  }
  slot = {head, tail, size, builder_.intern(text)};
  return slot.id;
}

simdjson::error_code ChromeReader::read_event(std::string_view raw, StatsRegistry& stats) {
  EventFields fields;
  EventScanner scanner(raw.data(), raw.data() + raw.size());
  if (!scanner.scan(fields)) return read_event_fallback(raw, stats);
  apply_event(fields, stats);
  return simdjson::SUCCESS;
}

simdjson::error_code ChromeReader::read_event_fallback(std::string_view raw, StatsRegistry& stats) {
  // On-Demand checks what it reads, not what it skips (args, keys loupe does not read): the
  // whole event is checked first, so a fault anywhere in it is named where it lies.
  if (!check_json_value(raw, fault_)) {
    faulted_ = true;
    return simdjson::TAPE_ERROR;
  }
  const simdjson::padded_string padded(raw);
  od::document doc;
  od::object event;
  EventFields fields;
  simdjson::error_code error = fallback_parser_.iterate(padded).get(doc);
  if (!error) error = doc.get_object().get(event);
  if (!error) error = read_fields(event, fields);
  if (error) return error;
  apply_event(fields, stats);
  return simdjson::SUCCESS;
}

void ChromeReader::apply_event(EventFields& fields, StatsRegistry& stats) {
  resolve_times(fields);
  const std::string_view name = fields.name, category = fields.category, phase = fields.phase;
  const std::string_view pid = fields.pid, tid = fields.tid, id = fields.id;
  const int64_t ts = fields.ts, dur = fields.dur;
  if (fields.ids_beyond_int64 != 0) {
    stats.add(Stat::trace_json_id_beyond_int64, fields.ids_beyond_int64);
  }
  ++events_;
  if (phase.size() != 1) {
    stats.add(Stat::trace_json_event_malformed);
    return;
  }
  const char ph = phase[0];
  if (fields.malformed || (!fields.has_ts && ph != 'M')) {
    stats.add(Stat::trace_json_event_malformed);
    return;
  }
  const TrackId track = track_for(pid, tid);
  const StringId name_id = intern(name);
  const StringId category_id = intern(category);
  if (category_id >= category_class_.size()) category_class_.resize(category_id + 1, -1);
  if (category_class_[category_id] < 0) category_class_[category_id] = category_class(category);
  const int8_t category_bits = category_class_[category_id];
  if (track >= track_state_.size()) track_state_.resize(track + 1);
  track_state_[track].gpu |= (category_bits & kCategoryGpu) != 0;
  // Slices of the lanes' categories go to a lane of the thread or stream (model.hpp, Lane).
  TrackId slice_track = track;
  if ((category_bits & (kCategoryPython | kCategoryAnnotation)) != 0 &&
      (ph == 'X' || ph == 'B' || ph == 'E')) {
    const bool python = (category_bits & kCategoryPython) != 0;
    if (track >= lanes_.size()) lanes_.resize(track + 1, {kNoTrack, kNoTrack});
    TrackId& cached = lanes_[track][python ? 0 : 1];
    if (cached == kNoTrack)
      cached = builder_.lane(track, python ? Lane::kPython : Lane::kAnnotation);
    slice_track = cached;
    if (slice_track >= track_state_.size()) track_state_.resize(slice_track + 1);
    track_state_[slice_track].gpu |= (category_bits & kCategoryGpu) != 0;
  }
  TrackState& state = track_state_[slice_track];
  auto note_ts = [&state](int64_t value) {
    if (!state.seen || state.last_ts < value) state.last_ts = value;
    state.seen = true;
  };
  switch (ph) {
    case 'X':
      if (!fields.has_dur || dur < 0) {
        stats.add(Stat::trace_json_event_malformed);
        return;
      }
      {
        // Kept for export (Perfetto shows them); an empty object is not worth a row.
        const std::string_view args = fields.args_raw;
        uint64_t packed = 0;
        if (keep_args_ && args.size() > 2 && args.size() < (size_t{1} << 24)) {
          packed = static_cast<uint64_t>(args_.size()) << 24 | args.size();
          args_.append(args);
        }
        if ((category_bits & (kCategoryGpu | kCategoryRuntime)) != 0 &&
            slices_.size() < UINT32_MAX) {
          const uint64_t correlation = correlation_of(args);
          if (correlation != 0) {
            correlation_keys_.push_back(correlation << 1 |
                                        ((category_bits & kCategoryGpu) != 0 ? 1 : 0));
            correlation_slices_.push_back(static_cast<uint32_t>(slices_.size()));
          }
        }
        slices_.start.push_back(ts);
        slices_.end.push_back(ts + dur);
        slices_.track.push_back(slice_track);
        slices_.name.push_back(name_id);
        slices_.category.push_back(category_id);
        if (keep_args_) slices_.args.push_back(packed);
      }
      note_ts(ts + dur);
      return;
    case 'B':
    case 'E':
      state.begin_ends.push_back({ts, order_++, ph == 'B', name_id, category_id});
      note_ts(ts);
      return;
    case 'i':
    case 'I':
      instants_.push_back({track, ts, name_id});
      return;
    case 'C': {
      if (fields.args_raw.empty()) {
        stats.add(Stat::trace_json_event_malformed);
        return;
      }
      simdjson::padded_string padded(fields.args_raw);
      od::document doc;
      od::object args;
      if (args_parser_.iterate(padded).get(doc) || doc.get_object().get(args)) {
        stats.add(Stat::trace_json_event_malformed);
        return;
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
      return;
    }
    case 's':
    case 't':
    case 'f': {
      if (!fields.has_id) {
        stats.add(Stat::trace_json_event_malformed);
        return;
      }
      uint64_t numeric = 0;
      auto [end, code] = std::from_chars(id.data(), id.data() + id.size(), numeric);
      const bool fits = code == std::errc() && end == id.data() + id.size() && numeric < kTextId;
      const uint64_t key = fits ? numeric : kTextId | flow_ids_.intern(id);
      flows_.push_back(
          {key, category_id, ph, fields.bind_point == "e", ts, order_++, track, name_id});
      return;
    }
    case 'M': {
      std::string value;
      if (!fields.args_raw.empty()) {
        simdjson::padded_string padded(fields.args_raw);
        od::document doc;
        std::string_view text;
        if (!args_parser_.iterate(padded).get(doc) && !doc["name"].get_string().get(text)) {
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
      return;
    }
    default:
      stats.add(Stat::trace_json_phase_unsupported);
      return;
  }
}

bool ChromeReader::scan_in_place(JsonStream& stream, StatsRegistry& stats) {
  const std::string_view rest = stream.checked_rest();
  EventScanner scanner(rest.data(), rest.data() + rest.size(), /*in_place=*/true);
  if (pipeline_ != nullptr) {
    std::vector<ScannedEvent>& events = pipeline_->producing().events;
    // Room for a window of Kineto's ~200-byte events; the list is reused batch after batch.
    if (events.capacity() == 0) events.reserve(kPipelinePieceBytes / 192);
    // Copied from a blank one: value-initialising the ~230 bytes in place compiles to a
    // `rep stos`, whose start-up cost per event showed in the reading thread's profile.
    static const ScannedEvent kBlank{};
    ScannedEvent& event = events.emplace_back(kBlank);
    if (!scanner.scan(event.fields)) {
      events.pop_back();
      return false;
    }
    event.raw = rest.substr(0, static_cast<size_t>(scanner.event_end() - rest.data()));
    event.offset = stream.offset();
    event.scanned = true;
  } else {
    EventFields fields;
    if (!scanner.scan(fields)) return false;
    apply_event(fields, stats);
  }
  ++elements_;
  ++objects_;
  stream.skip(static_cast<size_t>(scanner.event_end() - rest.data()));
  return true;
}

// The longest event a file cut mid-event can end inside: Kineto's largest (an op's args listing
// thousands of tensors) are tens of KiB.
constexpr uint64_t kLongestCutEventBytes = 1 << 20;

bool ChromeReader::read_events(JsonStream& stream, StatsRegistry& stats) {
  int next = stream.peek();
  if (next == ']') {
    stream.advance();
    return true;
  }
  while (next != -1) {
    if (next_stop_ < stops_.size() && stream.offset() >= stops_[next_stop_] &&
        reached_stop(stream.offset())) {
      return true;
    }
    // An event scanned where it lies needs nothing more here; anything else is taken as a value.
    const uint64_t element_start = stream.offset();
    if (!(next == '{' && scan_in_place(stream, stats)) && !read_element(stream, stats)) {
      // The input ended inside this element. A file cut mid-event ends inside one event; an
      // element that runs on over several ("ph" is every event's key) or further than any event
      // was never closed: a quote or a bracket out of place turned the rest of the file into one
      // value. That is malformed, not cut short, and reading it as a truncation would drop the
      // rest of the file with only a count.
      const std::string_view rest = stream.read_since(element_start);
      const size_t first_phase = rest.find("\"ph\"");
      const bool several_events = first_phase != std::string_view::npos &&
                                  rest.find("\"ph\"", first_phase + 4) != std::string_view::npos;
      if (several_events || stream.offset() - element_start > kLongestCutEventBytes) {
        stream.fail(element_start,
                    "an event that is not closed before the end of the input, " +
                        std::to_string(stream.offset() - element_start) +
                        " bytes on (a quote or bracket out of place; a file cut mid-event ends "
                        "within one event)");
      }
      return false;
    }
    next = stream.peek();
    if (next == ']') {
      stream.advance();
      return true;
    }
    if (next == -1) break;
    if (next != ',') stream.fail(stream.offset(), "expected ',' or ']' after an event");
    stream.advance();
    next = stream.peek();
  }
  return false;
}

// One element of the event array taken as a whole value: an event goes to the pipeline (split,
// then offered to the scanner once more) or is read at once; anything else is counted malformed.
// False when the input ended inside it.
bool ChromeReader::read_element(JsonStream& stream, StatsRegistry& stats) {
  std::string_view text;
  uint64_t at = 0;
  if (!stream.value(text, at)) return false;
  ++elements_;
  if (text.front() == '{' && pipeline_ != nullptr) {
    ++objects_;
    std::vector<ScannedEvent>& events = pipeline_->producing().events;
    // Room for a window of Kineto's ~200-byte events; the list is reused batch after batch.
    if (events.capacity() == 0) events.reserve(kPipelinePieceBytes / 192);
    ScannedEvent& event = events.emplace_back();
    event.raw = text;
    event.offset = at;
    // Declined in place (the window ended inside it, or it holds what the scanner leaves):
    // split, then offered to the scanner once more.
    EventScanner scanner(text.data(), text.data() + text.size());
    event.scanned = scanner.scan(event.fields);
  } else if (text.front() == '{') {
    ++objects_;
    if (const simdjson::error_code error = read_event(text, stats)) {
      const auto [offset, what] = event_error(at, error);
      stream.fail(offset, what, faulted());
    }
  } else {
    stats.add(Stat::trace_json_event_malformed);
  }
  return true;
}

bool ChromeReader::read_members(JsonStream& stream, StatsRegistry& stats, bool after_value) {
  int next = stream.peek();
  if (next == '}' && !after_value) {
    stream.advance();
    return true;
  }
  while (next != -1) {
    if (after_value) {
      after_value = false;
    } else if (!read_member_at(stream, stats, next)) {
      return false;
    } else if (stopped_) {
      return true;
    }
    next = stream.peek();
    if (next == '}') {
      stream.advance();
      return true;
    }
    if (next == -1) break;
    if (next != ',') stream.fail(stream.offset(), "expected ',' or '}' after a member");
    stream.advance();
    next = stream.peek();
  }
  return false;
}

bool ChromeReader::read_member_at(JsonStream& stream, StatsRegistry& stats, int next) {
  if (next != '"') stream.fail(stream.offset(), "expected a key string");
  std::string_view text;
  uint64_t at = 0;
  if (!stream.value(text, at)) return false;
  const std::string key(text.substr(1, text.size() - 2));
  next = stream.peek();
  if (next == -1) return false;
  if (next != ':') stream.fail(stream.offset(), "expected ':' after the key \"" + key + "\"");
  stream.advance();
  next = stream.peek();
  if (next == -1) return false;
  if (key == "traceEvents") {
    saw_trace_events_ = true;
    if (next != '[') stream.fail(stream.offset(), "\"traceEvents\" is not an array");
    stream.advance();
    return read_events(stream, stats);
  }
  if (!stream.value(text, at)) return false;
  read_member(key, text);
  return true;
}

bool ChromeReader::reached_stop(uint64_t offset) {
  while (next_stop_ < stops_.size() && stops_[next_stop_] < offset) ++next_stop_;
  if (next_stop_ == stops_.size() || stops_[next_stop_] != offset) return false;
  stopped_ = true;
  stopped_at_ = offset;
  return true;
}

void ChromeReader::read_member(std::string_view key, std::string_view value) {
  if (key == "baseTimeNanoseconds") {
    kineto_ = true;
    const simdjson::padded_string padded(value);
    od::document doc;
    int64_t base = 0;
    if (!member_parser_.iterate(padded).get(doc) && !doc.get_int64().get(base)) {
      base_time_ns_ = base;
      has_base_time_ = true;
    }
  } else if (key == "distributedInfo") {
    kineto_ = true;
    // {"rank": R, "world_size": W, ...}: the rank this file holds. Anything else in it is read by
    // nobody yet; a malformed one leaves the rank unknown.
    const simdjson::padded_string padded(value);
    od::document doc;
    od::object info;
    if (member_parser_.iterate(padded).get(doc) || doc.get_object().get(info)) return;
    for (auto member : info) {
      std::string_view member_key;
      if (member.unescaped_key().get(member_key)) break;
      int64_t number = 0;
      if (member_key == "rank" && !member.value().get_int64().get(number)) {
        rank_ = static_cast<int>(number);
        rank_read_ = true;
      } else if (member_key == "world_size" && !member.value().get_int64().get(number)) {
        world_size_ = static_cast<int>(number);
        world_size_read_ = true;
      } else if (od::value groups; member_key == "pg_config" && !member.value().get(groups)) {
        read_process_groups(groups);
      }
    }
  } else if (key == "schemaVersion" || key == "deviceProperties") {
    kineto_ = true;
  }
}

void ChromeReader::read_process_groups(od::value value) {
  od::array list;
  if (value.get_array().get(list)) return;
  for (auto element : list) {
    od::object entry;
    if (element.get_object().get(entry)) return;
    FileInfo::ProcessGroup group;
    for (auto field : entry) {
      std::string_view field_key, text;
      if (field.unescaped_key().get(field_key)) return;
      if (field_key == "pg_name" && !field.value().get_string().get(text)) {
        group.name = std::string(text);
      } else if (field_key == "backend_config" && !field.value().get_string().get(text)) {
        group.backend = std::string(text);
      } else if (field_key == "ranks") {
        od::array ranks;
        if (field.value().get_array().get(ranks)) return;
        for (auto member : ranks) {
          int64_t rank = 0;
          if (member.get_int64().get(rank)) return;
          group.ranks.push_back(static_cast<int>(rank));
        }
      }
    }
    if (!group.name.empty()) process_groups_.push_back(std::move(group));
  }
}

void ChromeReader::read(JsonStream& stream, uint64_t size_hint, StatsRegistry& stats) {
  // Room for the events of a typical file (Kineto writes ~220 bytes an event; dense files ~120)
  // so the tables grow without copies; untouched capacity costs address space only.
  slices_.reserve(size_hint / 128);
  flows_.reserve(size_hint / 256);
  const int first = stream.peek();
  bool complete = false;
  if (first == '[') {
    stream.advance();
    complete = read_events(stream, stats);
  } else if (first == '{') {
    top_object_ = true;
    stream.advance();
    complete = read_members(stream, stats);
  } else {
    stream.fail(first == -1 ? 0 : stream.offset(), "expected '[' or '{'");
  }
  end_read(stream, complete, stats);
}

void ChromeReader::read_part(JsonStream& stream, bool top_object, uint64_t size_hint,
                             StatsRegistry& stats) {
  slices_.reserve(size_hint / 128);
  flows_.reserve(size_hint / 256);
  top_object_ = top_object;
  saw_trace_events_ = top_object;
  bool complete = read_events(stream, stats);
  if (complete && !stopped_ && top_object) {
    complete = read_members(stream, stats, /*after_value=*/true);
  }
  end_read(stream, complete, stats);
}

void ChromeReader::end_read(JsonStream& stream, bool complete, StatsRegistry& stats) {
  if (stopped_) return;  // the next part reads on
  if (!complete) {
    stats.add(Stat::trace_json_truncated);
  } else if (stream.peek() != -1) {
    stream.fail(stream.offset(), "content after the end of the trace");
  }
}

void ChromeReader::append(ChromeReader& later) {
  Model& from = later.builder_.model();
  std::vector<StringId> strings(from.strings.size());
  for (StringId id = 0; id < strings.size(); ++id) {
    strings[id] = builder_.intern(from.strings.get(id));
  }
  // Tracks in the order `later` added them: a lane after its main track.
  std::vector<TrackId> tracks(from.tracks.size());
  for (TrackId id = 0; id < tracks.size(); ++id) {
    const Track& track = from.tracks[id];
    tracks[id] = track.lane == Lane::kMain
                     ? builder_.track(file_index_, track.kind, track.pid, track.tid)
                     : builder_.lane(tracks[track.main], track.lane, track.overlap_level);
    if (!track.name.empty()) builder_.track_info(tracks[id]).name = track.name;
  }
  for (const auto& [key, track] : later.tracks_) tracks_.emplace(key, tracks[track]);
  std::vector<uint64_t> flow_ids(later.flow_ids_.size());
  for (StringId id = 0; id < flow_ids.size(); ++id) {
    flow_ids[id] = flow_ids_.intern(later.flow_ids_.get(id));
  }

  const size_t slice_base = slices_.size();
  // The slices' columns (most of the bytes: their pages are new here) are copied on a thread of
  // their own while this one maps the rest; each side writes only its own members.
  auto append_slices = [this, &later, &tracks, &strings] {
    const LocalSlices& rows = later.slices_;
    slices_.start.insert(slices_.start.end(), rows.start.begin(), rows.start.end());
    slices_.end.insert(slices_.end.end(), rows.end.begin(), rows.end.end());
    for (const TrackId track : rows.track) slices_.track.push_back(tracks[track]);
    for (const StringId name : rows.name) slices_.name.push_back(strings[name]);
    for (const StringId category : rows.category) slices_.category.push_back(strings[category]);
    const uint64_t args_shift = static_cast<uint64_t>(args_.size()) << 24;
    for (const uint64_t packed : rows.args)
      slices_.args.push_back(packed != 0 ? packed + args_shift : 0);
    args_ += later.args_;
    later.slices_ = {};
    later.args_ = {};
  };
  std::thread slices_thread;
  std::exception_ptr slices_error;  // the thread's (out of memory), rethrown here
  if (later.slices_.size() >= kTwoThreadAppendRows) {
    try {
      slices_thread = std::thread([&append_slices, &slices_error] {
        try {
          append_slices();
        } catch (...) {
          slices_error = std::current_exception();
        }
      });
    } catch (const std::system_error&) {  // no thread to be had: here, below
    }
  }
  if (!slices_thread.joinable()) append_slices();
  // The thread is joined before this returns, on every path.
  struct Join {
    std::thread& thread;
    ~Join() {
      if (thread.joinable()) thread.join();
    }
  } join{slices_thread};
  correlation_keys_.insert(correlation_keys_.end(), later.correlation_keys_.begin(),
                           later.correlation_keys_.end());
  for (const uint32_t slice : later.correlation_slices_) {
    correlation_slices_.push_back(static_cast<uint32_t>(slice + slice_base));
  }

  for (TrackId id = 0; id < later.track_state_.size(); ++id) {
    const TrackState& part = later.track_state_[id];
    const TrackId track = tracks[id];
    if (track >= track_state_.size()) track_state_.resize(track + 1);
    TrackState& state = track_state_[track];
    state.gpu |= part.gpu;
    if (part.seen && (!state.seen || state.last_ts < part.last_ts)) state.last_ts = part.last_ts;
    state.seen |= part.seen;
    for (BeginEnd event : part.begin_ends) {
      event.order += order_;
      event.name = strings[event.name];
      event.category = strings[event.category];
      state.begin_ends.push_back(event);
    }
  }
  // Each part's flows sorted on its own thread; the runs are merged here (a part's run is sorted
  // again first if its ids, mapped, order it differently).
  sort_flows();
  const size_t flow_base = flows_.size();
  for (FlowPoint point : later.flows_) {
    if ((point.id & kTextId) != 0) point.id = kTextId | flow_ids[point.id & ~kTextId];
    point.category = strings[point.category];
    point.name = strings[point.name];
    point.track = tracks[point.track];
    point.order += order_;
    flows_.push_back(point);
  }
  later.flows_ = {};
  sort_flows(flow_base);
  std::inplace_merge(flows_.begin(), flows_.begin() + static_cast<ptrdiff_t>(flow_base),
                     flows_.end(), flow_before);
  for (const LocalInstant& instant : later.instants_) {
    instants_.push_back({tracks[instant.track], instant.ts, strings[instant.name]});
  }
  for (const LocalCounter& counter : later.counters_) {
    counters_.push_back({tracks[counter.track], counter.ts, counter.value});
  }
  // Later metadata overwrites earlier, as one reader reading on would.
  for (const auto& [pid, value] : later.process_names_) process_names_[pid] = value;
  for (const auto& [track, value] : later.thread_names_) thread_names_[tracks[track]] = value;

  order_ += later.order_;
  events_ += later.events_;
  elements_ += later.elements_;
  objects_ += later.objects_;
  kineto_ |= later.kineto_;
  if (later.has_base_time_) {
    has_base_time_ = true;
    base_time_ns_ = later.base_time_ns_;
  }
  if (later.rank_read_) {
    rank_ = later.rank_;
    rank_read_ = true;
  }
  if (later.world_size_read_) {
    world_size_ = later.world_size_;
    world_size_read_ = true;
  }
  if (!later.process_groups_.empty()) process_groups_ = std::move(later.process_groups_);
  if (slices_thread.joinable()) slices_thread.join();
  if (slices_error) std::rethrow_exception(slices_error);
}

std::optional<std::vector<CorrelationFlow>> ChromeReader::correlation_flows() {
  // flows_ is sorted by id first: an op is reached when a flow end with its correlation id
  // (Kineto's ac2g ids are the correlation ids) lands at its start on its track.
  std::vector<size_t> unreached;  // positions in correlation_keys_
  bool any_launch = false;
  // The ops' correlation ids mostly rise in file order: each search gallops on from where the
  // last one landed (a binary search of the whole list from the start when an id falls back),
  // which finds the same flow as a binary search of the whole list at a fraction of its misses.
  auto id_before = [](const FlowPoint& point, uint64_t id) { return point.id < id; };
  auto from = flows_.begin();
  uint64_t last_correlation = 0;
  for (size_t at = 0; at < correlation_keys_.size(); ++at) {
    if ((correlation_keys_[at] & 1) == 0) {
      any_launch = true;
      continue;
    }
    const uint64_t correlation = correlation_keys_[at] >> 1;
    const uint32_t op = correlation_slices_[at];
    if (correlation < last_correlation) from = flows_.begin();
    last_correlation = correlation;
    // Every flow before `from` has a smaller id; find a bound past the first that does not.
    ptrdiff_t step = 1;
    auto below = from;
    while (flows_.end() - below > step && below[step].id < correlation) {
      below += step;
      step *= 2;
    }
    const auto above = flows_.end() - below > step ? below + step + 1 : flows_.end();
    auto it = std::lower_bound(below, above, correlation, id_before);
    from = it;
    // Reached only by a flow that has a source: ROCm's Kineto writes both ends of a launch's
    // flow as "f" (no "s"), and such a flow binds nothing, so its ops take the correlation id.
    // The source must be of the landing end's category (other flows, fwdbwd, reuse the ids).
    const auto first_point = it;
    auto landing = flows_.end();
    for (; it != flows_.end() && it->id == correlation; ++it) {
      if (it->phase != 's' && it->track == slices_.track[op] && it->ts == slices_.start[op]) {
        landing = it;
        break;
      }
    }
    bool reached = false;
    for (it = first_point;
         landing != flows_.end() && it != flows_.end() && it->id == correlation && !reached; ++it) {
      reached = it->phase == 's' && it->category == landing->category;
    }
    if (!reached) unreached.push_back(at);
  }
  std::optional<std::vector<CorrelationFlow>> found;
  if (!unreached.empty() && any_launch) {
    found.emplace();
    std::unordered_map<uint64_t, uint32_t> launch;  // correlation -> the runtime call's slice
    for (size_t at : unreached) launch.emplace(correlation_keys_[at] >> 1, UINT32_MAX);
    for (size_t at = 0; at < correlation_keys_.size(); ++at) {
      if ((correlation_keys_[at] & 1) != 0) continue;
      const auto it = launch.find(correlation_keys_[at] >> 1);
      if (it != launch.end() && it->second == UINT32_MAX) it->second = correlation_slices_[at];
    }
    for (size_t at : unreached) {
      const uint32_t call = launch[correlation_keys_[at] >> 1];
      if (call == UINT32_MAX) continue;
      const uint32_t op = correlation_slices_[at];
      found->push_back(
          {slices_.track[call], slices_.start[call], slices_.track[op], slices_.start[op]});
    }
  }
  correlation_keys_ = {};
  correlation_slices_ = {};
  return found;
}

void ChromeReader::sort_flows(size_t from) {
  const auto begin = flows_.begin() + static_cast<ptrdiff_t>(from);
  if (!std::is_sorted(begin, flows_.end(), flow_before))
    std::sort(begin, flows_.end(), flow_before);
}

void ChromeReader::commit(StatsRegistry& stats) {
  const int64_t offset = has_base_time_ ? base_time_ns_ : 0;
  sort_flows();
  // Read before the slices' columns move to the builder; added after the file's own flows.
  const std::optional<std::vector<CorrelationFlow>> correlation = correlation_flows();
  std::string& args_text = builder_.model().args_text;
  const uint64_t args_base = args_text.size();
  if (args_text.empty()) {
    args_text = std::move(args_);
  } else {
    args_text += args_;
  }
  // The X events' slices: the file's clock shifted in place, then the columns handed over.
  if (offset != 0) {
    for (int64_t& start : slices_.start) start += offset;
    for (int64_t& end : slices_.end) end += offset;
  }
  if (args_base != 0) {
    for (uint64_t& args : slices_.args) {
      if (args != 0) args += args_base << 24;
    }
  }
  builder_.add_slices(std::move(slices_.start), std::move(slices_.end), std::move(slices_.track),
                      std::move(slices_.name), std::move(slices_.category),
                      std::move(slices_.args));
  slices_ = {};
  for (TrackId track = 0; track < track_state_.size(); ++track) {
    std::vector<BeginEnd>& list = track_state_[track].begin_ends;
    if (list.empty()) continue;
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
    const int64_t last = track_state_[track].last_ts;
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
  auto same_flow = [](const FlowPoint& left, const FlowPoint& right) {
    return left.id == right.id && left.category == right.category && left.name == right.name;
  };
  // At most one flow per point that is not an "s", and one per correlation flow.
  builder_.reserve_flows(flows_.size() + (correlation ? correlation->size() : 0));
  const FlowPoint* open_flow = nullptr;
  // The "s" of the flow whose "f" was bound last: Kineto ties every op of a CUDA graph's replay to
  // its cudaGraphLaunch with one flow id, one "s" and an "f" per op (a fan-out), so a further "f"
  // of the same flow binds to that "s" too.
  const FlowPoint* fan_source = nullptr;
  for (size_t index = 0; index < flows_.size(); ++index) {
    const FlowPoint& point = flows_[index];
    if (open_flow != nullptr && !same_flow(*open_flow, point)) {
      stats.add(Stat::trace_flow_unmatched);
      open_flow = nullptr;
    }
    if (point.phase == 's') {
      if (open_flow != nullptr) stats.add(Stat::trace_flow_unmatched);
      open_flow = &point;
      fan_source = nullptr;
      continue;
    }
    if (open_flow == nullptr && fan_source != nullptr && point.phase == 'f' &&
        same_flow(*fan_source, point)) {
      builder_.add_flow(fan_source->name, fan_source->track, fan_source->ts + offset, point.track,
                        point.ts + offset, !point.bind_enclosing);
      continue;
    }
    fan_source = nullptr;
    if (open_flow == nullptr) {
      stats.add(Stat::trace_flow_unmatched);
      continue;
    }
    // "f" binds to the next slice on its thread unless "bp":"e"; "t" is a step inside a slice.
    const bool bind_next = point.phase == 'f' && !point.bind_enclosing;
    builder_.add_flow(open_flow->name, open_flow->track, open_flow->ts + offset, point.track,
                      point.ts + offset, bind_next);
    if (point.phase == 'f' && open_flow->phase == 's') fan_source = open_flow;
    open_flow = point.phase == 't' ? &point : nullptr;
  }
  if (open_flow != nullptr) stats.add(Stat::trace_flow_unmatched);
  if (correlation) {
    const StringId name = intern("correlation");
    for (const CorrelationFlow& flow : *correlation) {
      builder_.add_flow(name, flow.from_track, flow.from_ns + offset, flow.to_track,
                        flow.to_ns + offset, /*bind_to_next=*/false);
    }
  }

  for (TrackId track = 0; track < track_state_.size(); ++track) {
    if (track_state_[track].gpu) builder_.track_info(track).kind = TrackKind::kGpuStream;
  }
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

}  // namespace

namespace {

// One import of a text streamed from `source`.
// Where an element of the event list most likely starts at or after `from`: a '{' after "},"
// (whitespace allowed around the ',') that opens an object the scanner reads as an event, with a
// ',' or ']' after it. A guess — the same bytes can lie inside a string or a nested array — that
// the part before it confirms by stopping there exactly; 0 when the next MiB holds none.
uint64_t guess_event_start(const TextSource& source, uint64_t from) {
  std::string block(size_t{1} << 20, '\0');
  block.resize(source.read_at(from, block.data(), block.size()));
  const char* const data = block.data();
  const char* const end = data + block.size();
  for (const char* open = data; open < end; ++open) {
    open = static_cast<const char*>(std::memchr(open, '{', static_cast<size_t>(end - open)));
    if (open == nullptr) break;
    const char* before = open;
    while (before > data && is_json_space(before[-1])) --before;
    if (before == data || *--before != ',') continue;
    while (before > data && is_json_space(before[-1])) --before;
    if (before == data || before[-1] != '}') continue;
    EventFields fields;
    EventScanner scanner(open, end, /*in_place=*/true);
    if (!scanner.scan(fields) || fields.phase.empty()) continue;
    const char* after = scanner.event_end();
    while (after < end && is_json_space(*after)) ++after;
    if (after < end && (*after == ',' || *after == ']')) {
      return from + static_cast<uint64_t>(open - data);
    }
  }
  return 0;
}

// The first byte of the text that is not whitespace ('{' or '[' for a trace); -1 when none in
// its first 4 KiB.
int first_byte(const TextSource& source) {
  std::array<char, 4096> head{};
  const size_t got = source.read_at(0, head.data(), head.size());
  for (size_t at = 0; at < got; ++at) {
    if (!is_json_space(head[at])) return static_cast<unsigned char>(head[at]);
  }
  return -1;
}

// A text read in parts, each on a thread of its own (the first on the calling thread) by a reader
// of its own over a builder of its own, appended in the text's order (ChromeReader::append) into
// `first`. `starts` are where the parts after the first begin: guesses, confirmed when the part
// before stops there exactly; a start passed over (it was not an element of the event list) drops
// its part, and the part before reads on. The result is the one-thread reader's, and so is the
// error: the first in the text's order. Returns how many parts were joined.
size_t read_in_parts(TextSource& source, const std::string& name, ChromeReader& first,
                     ModelBuilder& builder, uint32_t file_index, bool top_object,
                     const std::vector<uint64_t>& starts, StatsRegistry& stats) {
  struct Part {
    uint64_t start = 0;
    Model model;
    std::unique_ptr<ModelBuilder> builder;
    std::unique_ptr<ChromeReader> reader;
    StatsRegistry stats;
    std::exception_ptr error;
    std::atomic<bool> cancelled{false};
    std::thread thread;
    bool started = false;
  };
  const uint64_t size = source.size_hint();
  std::vector<std::unique_ptr<Part>> parts;
  for (const uint64_t start : starts) {
    auto part = std::make_unique<Part>();
    part->start = start;
    part->builder = std::make_unique<ModelBuilder>(part->model);
    part->builder->keep_args(builder.keeps_args());
    part->reader = std::make_unique<ChromeReader>(name, *part->builder, file_index);
    parts.push_back(std::move(part));
  }
  auto read_part = [&](Part& part, size_t index) {
    try {
      const std::vector<uint64_t> later(starts.begin() + static_cast<ptrdiff_t>(index) + 1,
                                        starts.end());
      const std::unique_ptr<TextSource> rest = source.open_at(part.start);
      JsonStream stream(*rest, name, part.stats, nullptr, part.start);
      stream.read_as_part(&part.cancelled, later.empty() ? UINT64_MAX : later.front());
      part.reader->stop_at(later);
      const uint64_t end = later.empty() ? size : later.front();
      part.reader->read_part(stream, top_object, end - part.start, part.stats);
      part.reader->sort_flows();
      stream.count_repairs_before(part.reader->stopped() ? part.reader->stopped_at() : UINT64_MAX);
    } catch (const PartCancelled&) {
    } catch (...) {
      part.error = std::current_exception();
    }
  };
  auto finish_all = [&parts] {
    for (const std::unique_ptr<Part>& part : parts) part->cancelled = true;
    for (const std::unique_ptr<Part>& part : parts) {
      if (part->thread.joinable()) part->thread.join();
    }
  };
  for (size_t index = 0; index < parts.size(); ++index) {
    try {
      parts[index]->thread = std::thread(read_part, std::ref(*parts[index]), index);
      parts[index]->started = true;
    } catch (const std::system_error&) {  // no thread to be had: read it here if it is needed
    }
  }
  // The part from the text's start, on this thread.
  size_t next = parts.size();
  size_t joined = 1;
  try {
    JsonStream stream(source, name, stats, nullptr);
    stream.read_as_part(nullptr, starts.front());
    first.stop_at(starts);
    first.read(stream, size, stats);
    stream.count_repairs_before(first.stopped() ? first.stopped_at() : UINT64_MAX);
    // Its own flows sorted before waiting for the next part, as each later part sorts its own on
    // its thread: a first part that ends first sorts while the next one still reads.
    first.sort_flows();
    if (first.stopped()) {
      next = static_cast<size_t>(
          std::lower_bound(starts.begin(), starts.end(), first.stopped_at()) - starts.begin());
    }
    for (size_t index = 0; index < next; ++index) parts[index]->cancelled = true;
    while (next < parts.size()) {
      Part& part = *parts[next];
      if (part.started) {
        part.thread.join();
      } else {
        read_part(part, next);
      }
      if (part.error) {
        // The one-thread reader's hint: it would have repaired the invalid UTF-8 before.
        try {
          std::rethrow_exception(part.error);
        } catch (const Error& error) {
          if (stats.count(Stat::trace_json_invalid_utf8) != 0 && error.hint() == kNotChromeHint) {
            throw Error(error.code(), error.message(), kNotJsonHint);
          }
          throw;
        }
      }
      first.append(*part.reader);
      stats.merge(part.stats);
      ++joined;
      const size_t after = part.reader->stopped()
                               ? static_cast<size_t>(std::lower_bound(starts.begin(), starts.end(),
                                                                      part.reader->stopped_at()) -
                                                     starts.begin())
                               : parts.size();
      part.reader.reset();
      part.builder.reset();
      part.model = Model();
      for (size_t index = next + 1; index < after; ++index) parts[index]->cancelled = true;
      next = after;
    }
  } catch (...) {
    finish_all();
    throw;
  }
  finish_all();
  return joined;
}

void import_stream(TextSource& source, const std::string& name, ModelBuilder& builder,
                   uint32_t file_index, const JsonReadOptions& options) {
  Model& model = builder.model();
  StatsRegistry stats;
  auto reader = std::make_unique<ChromeReader>(name, builder, file_index);
  const uint64_t size = source.size_hint();
  const unsigned threads =
      options.threads != 0 ? options.threads : std::thread::hardware_concurrency();
  // Parts only where the text can be read from an offset (not a pipe: its size is unknown).
  std::vector<uint64_t> starts;
  if (size != 0 && options.threads != 1) {
    for (const uint64_t start : options.split_at) {
      if (start > 0 && start < size) starts.push_back(start);
    }
    if (options.split_at.empty() && size >= kPipelineBytes && threads >= 2) {
      const uint64_t count = std::min<uint64_t>({threads, kMostParts, size / kPartBytes});
      for (uint64_t part = 1; part < count; ++part) {
        starts.push_back(guess_event_start(source, size / count * part));
      }
    }
    std::sort(starts.begin(), starts.end());
    starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
    if (!starts.empty() && starts.front() == 0) starts.erase(starts.begin());
  }
  const int top = starts.empty() ? -1 : first_byte(source);
  size_t parts_joined = 1;
  if (top == '{' || top == '[') {
    parts_joined =
        read_in_parts(source, name, *reader, builder, file_index, top == '{', starts, stats);
  } else if (size < kPipelineBytes || threads < 2) {
    JsonStream stream(source, name, stats, nullptr);
    reader->read(stream, size, stats);
  } else {
    // Two threads: this one applies the events the other reads, splits and scans.
    EventPipeline pipeline(kPipelinePieceBytes);
    reader->pipe_to(&pipeline);
    StatsRegistry split_stats;  // the producer's: repairs, non-object elements, truncation
    std::thread producer([&] {
      std::exception_ptr error;
      try {
        JsonStream stream(source, name, split_stats, &pipeline);
        reader->read(stream, size, split_stats);
      } catch (const EventPipeline::Cancelled&) {
        return;
      } catch (...) {
        error = std::current_exception();
      }
      pipeline.finish(std::move(error));
    });
    std::exception_ptr error;
    try {
      for (bool last = false; !last;) {
        Batch& batch = pipeline.next();
        for (ScannedEvent& event : batch.events) {
          if (const simdjson::error_code code = reader->apply_scanned(event, stats)) {
            pipeline.cancel();
            producer.join();
            const auto [offset, what] = reader->event_error(event.offset, code);
            fail_json(name, offset, what,
                      reader->faulted() || split_stats.count(Stat::trace_json_invalid_utf8) != 0);
          }
        }
        last = batch.last;
        error = batch.error;
        pipeline.release(batch);
      }
    } catch (...) {
      if (producer.joinable()) {
        pipeline.cancel();
        producer.join();
      }
      throw;
    }
    producer.join();
    if (error) std::rethrow_exception(error);
    stats.merge(split_stats);
  }
  // An object without "traceEvents" is some other JSON (a config, a metrics file): reading it as
  // an empty trace would answer every analysis with nothing. A truncated trace cut before its
  // events is still a trace whose events were lost, and says so through its stats.
  const bool no_events = reader->object_without_events() || reader->list_without_events();
  if (no_events && stats.count(Stat::trace_json_truncated) == 0) {
    throw Error(ErrorCode::kInput,
                "cannot read JSON trace '" + name + "': offset 0: " +
                    (reader->object_without_events()
                         ? "a JSON object without a \"traceEvents\" array"
                         : std::string("a list of values none of which is an event object")) +
                    "; expected a Chrome/Kineto trace, [events...] or {\"traceEvents\": [...]}",
                "pass a trace file: loupe binary (.loupetrace), Chrome trace event JSON or a "
                "PyTorch profiler (Kineto) export, optionally gzipped");
  }
  if (options.parts_joined != nullptr) *options.parts_joined = parts_joined;
  reader->commit(stats);
  model.stats.merge(stats);
  FileInfo info;
  info.path = name;
  info.format = reader->kineto() ? "kineto" : "chrome-json";
  info.clock_domain = reader->has_base_time() ? "kineto-base" : "unknown";
  info.offset_ns = reader->offset();
  info.events = reader->events();
  if (reader->rank() >= 0) {
    info.rank = reader->rank();
    info.rank_source = "distributedInfo";
    info.world_size = reader->world_size();
  }
  info.process_groups = reader->process_groups();
  model.files.push_back(std::move(info));
}

}  // namespace

void release_import_buffers() { window_storage() = std::string(); }

void import_chrome_json(std::string& text, const std::string& name, ModelBuilder& builder,
                        uint32_t file_index, const JsonReadOptions& options) {
  MemorySource source(text);
  import_stream(source, name, builder, file_index, options);
}

void import_chrome_json_file(const std::string& path, ModelBuilder& builder, uint32_t file_index,
                             const JsonReadOptions& options) {
  FileSource source(path);
  import_stream(source, path, builder, file_index, options);
}

}  // namespace loupe::trace
