#include "gate/review.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace loupe::gate {
namespace {

enum class GlobToken : uint8_t { kLiteral, kAnyChar, kSegment, kAnything, kFolders };

}  // namespace

// Simulates the glob as an automaton over its tokens: the set of tokens reached so far advances
// one path character at a time, so matching costs (pattern length × path length) whatever the
// pattern (a recursive matcher took time exponential in the number of stars).
bool glob_matches(std::string_view pattern, std::string_view path) {
  std::vector<GlobToken> tokens;
  std::vector<char> literals;
  for (size_t at = 0; at < pattern.size();) {
    if (pattern.substr(at, 3) == "**/") {
      tokens.push_back(GlobToken::kFolders);  // zero or more whole folders: (anything/)?
      at += 3;
    } else if (pattern.substr(at, 2) == "**") {
      tokens.push_back(GlobToken::kAnything);
      at += 2;
    } else if (pattern[at] == '*') {
      tokens.push_back(GlobToken::kSegment);
      at += 1;
    } else if (pattern[at] == '?') {
      tokens.push_back(GlobToken::kAnyChar);
      at += 1;
    } else {
      tokens.push_back(GlobToken::kLiteral);
      at += 1;
    }
    literals.push_back(pattern[at - 1]);
  }
  const size_t end = tokens.size();
  std::vector<uint8_t> active(end + 1, 0);
  std::vector<uint8_t> next(end + 1, 0);
  // Adds `index` and every token after it that can match nothing (2: added with that closure;
  // 1: added alone, for `**/` staying inside a folder, where the next token may not start yet).
  auto reach = [&](std::vector<uint8_t>& set, size_t index) {
    while (index <= end && set[index] != 2) {
      set[index] = 2;
      if (index == end || tokens[index] == GlobToken::kLiteral ||
          tokens[index] == GlobToken::kAnyChar) {
        break;
      }
      ++index;
    }
  };
  reach(active, 0);
  for (const char c : path) {
    std::fill(next.begin(), next.end(), 0);
    bool any = false;
    for (size_t index = 0; index < end; ++index) {
      if (!active[index]) continue;
      switch (tokens[index]) {
        case GlobToken::kLiteral:
          if (c == literals[index]) reach(next, index + 1);
          break;
        case GlobToken::kAnyChar:
          if (c != '/') reach(next, index + 1);
          break;
        case GlobToken::kSegment:
          if (c != '/') reach(next, index);
          break;
        case GlobToken::kAnything:
          reach(next, index);
          break;
        case GlobToken::kFolders:
          if (next[index] == 0) next[index] = 1;
          if (c == '/') reach(next, index + 1);
          break;
      }
    }
    active.swap(next);
    for (const uint8_t state : active) any = any || state;
    if (!any) return false;
  }
  return active[end] != 0;
}

std::vector<ReviewTrigger> review_triggers(const Objective& objective,
                                           const std::vector<std::string>& changed_paths,
                                           const std::vector<std::string>& changed_params) {
  std::vector<ReviewTrigger> triggers;
  for (const auto& category : objective.review) {
    for (const auto& path : changed_paths) {
      for (const auto& pattern : category.paths) {
        if (glob_matches(pattern, path)) {
          triggers.push_back({category.name, "path " + path + " matches " + pattern});
          break;  // one reason per path is enough
        }
      }
    }
    for (const auto& param : changed_params) {
      if (std::find(category.params.begin(), category.params.end(), param) !=
          category.params.end()) {
        triggers.push_back({category.name, "parameter " + param + " changed"});
      }
    }
  }
  return triggers;
}

}  // namespace loupe::gate
