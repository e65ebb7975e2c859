#include <algorithm>
#include <stdexcept>
#include <string>

#include "loupe/error.hpp"
#include "trace/analyze/analyze.hpp"

namespace loupe::trace {

Selector::Selector(const std::string& text) : text_(text) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('&', start);
    if (end == std::string::npos) end = text.size();
    const std::string term_text = text.substr(start, end - start);
    start = end + 1;
    if (term_text.empty()) {
      throw Error(ErrorCode::kUsage, "selector '" + text + "' has an empty term",
                  "terms are joined by '&': name:REGEX, cat:C, thread:X, stream:X, track:X, "
                  "kind:thread|gpu_stream");
    }
    Term term{Term::Kind::kName, term_text, std::nullopt};
    const size_t colon = term_text.find(':');
    const std::string prefix = colon == std::string::npos ? "" : term_text.substr(0, colon);
    const std::string value = colon == std::string::npos ? term_text : term_text.substr(colon + 1);
    if (prefix == "name" || prefix.empty() ||
        (prefix != "cat" && prefix != "thread" && prefix != "stream" && prefix != "track" &&
         prefix != "kind")) {
      // An unknown prefix is part of a name regex ("ns::op" names contain colons).
      term.kind = Term::Kind::kName;
      term.value = prefix == "name" ? value : term_text;
      term.pattern.emplace(
          Pattern::compile(term.value, "selector " + quoted_pattern(text) + ": name pattern"));
    } else {
      term.value = value;
      if (prefix == "cat") term.kind = Term::Kind::kCategory;
      if (prefix == "thread") term.kind = Term::Kind::kThread;
      if (prefix == "stream") term.kind = Term::Kind::kStream;
      if (prefix == "track") term.kind = Term::Kind::kTrack;
      if (prefix == "kind") {
        term.kind = Term::Kind::kTrackKind;
        if (value != "thread" && value != "gpu_stream") {
          throw Error(ErrorCode::kUsage,
                      "selector '" + text + "': kind '" + value + "' is not a track kind",
                      "use kind:thread or kind:gpu_stream");
        }
      }
    }
    terms_.push_back(std::move(term));
  }
}

bool Selector::track_matches(const Model& model, TrackId track_id) const {
  const Track& track = model.tracks[track_id];
  for (const Term& term : terms_) {
    switch (term.kind) {
      case Term::Kind::kThread:
        if (track.kind != TrackKind::kThread ||
            (track.name != term.value && track.tid != term.value)) {
          return false;
        }
        break;
      case Term::Kind::kStream:
        if (track.kind != TrackKind::kGpuStream ||
            (track.name != term.value && track.tid != term.value)) {
          return false;
        }
        break;
      case Term::Kind::kTrack:
        if (track.name != term.value && track.tid != term.value) return false;
        break;
      case Term::Kind::kTrackKind:
        if (track_kind_name(track.kind) != term.value) return false;
        break;
      default:
        break;
    }
  }
  return true;
}

std::vector<uint8_t> Selector::select(const Model& model) const {
  // Name patterns and categories are evaluated once per distinct string, tracks once per track.
  std::vector<int8_t> name_match(model.strings.size(), -1);
  std::vector<int8_t> category_match(model.strings.size(), -1);
  std::vector<int8_t> track_match(model.tracks.size(), -1);
  auto names_ok = [&](StringId name) {
    int8_t& cached = name_match[name];
    if (cached < 0) {
      cached = 1;
      const std::string_view text = model.strings.get(name);
      for (const Term& term : terms_) {
        if (term.kind == Term::Kind::kName && !term.pattern->search(text)) cached = 0;
      }
    }
    return cached == 1;
  };
  auto categories_ok = [&](StringId category) {
    int8_t& cached = category_match[category];
    if (cached < 0) {
      cached = 1;
      const std::string_view text = model.strings.get(category);
      for (const Term& term : terms_) {
        if (term.kind != Term::Kind::kCategory) continue;
        bool found = false;
        size_t start = 0;
        while (start <= text.size() && !found) {
          size_t end = text.find(',', start);
          if (end == std::string_view::npos) end = text.size();
          found = text.substr(start, end - start) == term.value;
          start = end + 1;
        }
        if (!found) cached = 0;
      }
    }
    return cached == 1;
  };
  const SliceTable& slices = model.slices;
  std::vector<uint8_t> selected(slices.size(), 0);
  for (SliceId id = 0; id < slices.size(); ++id) {
    int8_t& track_ok = track_match[slices.track[id]];
    if (track_ok < 0) track_ok = track_matches(model, slices.track[id]) ? 1 : 0;
    selected[id] = track_ok == 1 && names_ok(slices.name[id]) && categories_ok(slices.category[id]);
  }
  return selected;
}

int64_t parse_duration_ns(std::string_view input, const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  double scale = 0;
  if (unit.empty() || unit == "ns") scale = 1;
  if (unit == "us") scale = 1e3;
  if (unit == "ms") scale = 1e6;
  if (unit == "s") scale = 1e9;
  if (used == 0 || scale == 0 || value < 0) {
    throw Error(ErrorCode::kUsage, std::string(input) + " '" + text + "' is not a duration",
                "write a number with a unit: 500ns, 100us, 2ms, 1s");
  }
  return static_cast<int64_t>(value * scale);
}

ClassDef parse_class(const std::string& text) {
  const size_t equals = text.find('=');
  if (equals == std::string::npos || equals == 0 || equals + 1 == text.size()) {
    throw Error(
        ErrorCode::kUsage, "--class '" + text + "' is not NAME=SELECTOR",
        "e.g. --class dispatch=name:^moe_dispatch$ --class xfer='name:kv_transfer&thread:xfer'");
  }
  ClassDef result{text.substr(0, equals), text.substr(equals + 1)};
  Selector check(result.selector);  // throws on a malformed selector
  return result;
}

}  // namespace loupe::trace
