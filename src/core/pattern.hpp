// core/pattern.hpp — the one engine for every pattern a user, an objective or an MCP client
// supplies (trace selectors, kernel filters, objective kernel rules), and for loupe's own fixed
// patterns over input text.
//
// Patterns are RE2 syntax (https://github.com/google/re2/wiki/Syntax): the ECMAScript/Perl
// forms loupe documents (classes, \d \w \s \b, anchors, alternation, greedy and lazy
// repetition, (?i)) keep their meaning; backreferences and lookaround do not exist. Matching
// never recurses per character and costs at most (text length × program size): RE2's DFA is
// linear in the text, and where a pattern's automaton outgrows its memory RE2 falls back to
// simulating the program over the text. So the program is what loupe bounds: a pattern longer
// than kMaxPatternLength characters or compiling to more than kMaxPatternProgramSize
// instructions is refused (a 200,000-character name against the costliest accepted pattern takes
// about 2 s on this machine; docs/reliability.md). Real selectors and kernel filters compile
// to tens of instructions.
// Thread-safety: a compiled Pattern is immutable; copies share it and may match concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loupe/error.hpp"

namespace re2 {
class RE2;
}

namespace loupe {

inline constexpr size_t kMaxPatternLength = 4096;
inline constexpr int kMaxPatternProgramSize = 512;
// RE2's memory for the program and its DFA cache, per pattern.
inline constexpr int64_t kMaxPatternMemoryBytes = int64_t{8} << 20;

class Pattern {
 public:
  // Compiles `pattern`. On failure throws Error(code) "WHAT 'PATTERN' is not a valid pattern:
  // REASON" (a long pattern is shown by its start and its length) with a hint on the syntax.
  // `what` names where the pattern came from: "--kernel", "selector 'x=name:(a'",
  // "objective.toml: probes.decode.counters.kernel".
  static Pattern compile(std::string_view pattern, std::string_view what,
                         ErrorCode code = ErrorCode::kUsage, bool case_insensitive = false);

  // Whether the pattern matches somewhere in `text` (anchor with ^ and $ for all of it).
  bool search(std::string_view text) const;
  // Whether it matches somewhere, filling `groups` with the capture groups of the leftmost match
  // (groups[0] the whole match, then each group; an unmatched group is empty).
  bool search(std::string_view text, std::vector<std::string_view>& groups) const;
  // Whether it matches all of `text`.
  bool full_match(std::string_view text) const;

  const std::string& text() const;

 private:
  explicit Pattern(std::shared_ptr<const re2::RE2> compiled);
  std::shared_ptr<const re2::RE2> compiled_;
};

// How a pattern appears in a message: whole up to 200 characters, else its first 80 characters
// and its length.
std::string quoted_pattern(std::string_view pattern);

}  // namespace loupe
