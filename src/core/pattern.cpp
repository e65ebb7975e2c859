#include "core/pattern.hpp"

#include <re2/re2.h>

namespace loupe {
namespace {

constexpr std::string_view kSyntaxHint =
    "patterns are RE2 syntax (docs/formats.md, \"Patterns\"): as ECMAScript, without "
    "backreferences (\\1) or lookaround ((?=...), (?!...))";

}  // namespace

std::string quoted_pattern(std::string_view pattern) {
  if (pattern.size() <= 200) return "'" + std::string(pattern) + "'";
  return "'" + std::string(pattern.substr(0, 80)) + "...' (" + std::to_string(pattern.size()) +
         " characters)";
}

Pattern::Pattern(std::shared_ptr<const re2::RE2> compiled) : compiled_(std::move(compiled)) {}

Pattern Pattern::compile(std::string_view pattern, std::string_view what, ErrorCode code,
                         bool case_insensitive) {
  if (pattern.size() > kMaxPatternLength) {
    throw Error(code,
                std::string(what) + " " + quoted_pattern(pattern) +
                    " is not a valid pattern: longer than " + std::to_string(kMaxPatternLength) +
                    " characters",
                std::string(kSyntaxHint));
  }
  RE2::Options options;
  options.set_log_errors(false);
  options.set_max_mem(kMaxPatternMemoryBytes);
  options.set_case_sensitive(!case_insensitive);
  auto compiled =
      std::make_shared<const re2::RE2>(re2::StringPiece(pattern.data(), pattern.size()), options);
  std::string reason;
  if (!compiled->ok()) {
    reason = compiled->error();
  } else if (compiled->ProgramSize() > kMaxPatternProgramSize) {
    reason = "it compiles to " + std::to_string(compiled->ProgramSize()) +
             " instructions, more than " + std::to_string(kMaxPatternProgramSize) +
             " (matching costs up to name length × program size)";
  }
  if (!reason.empty()) {
    throw Error(
        code,
        std::string(what) + " " + quoted_pattern(pattern) + " is not a valid pattern: " + reason,
        std::string(kSyntaxHint));
  }
  return Pattern(std::move(compiled));
}

bool Pattern::search(std::string_view text) const {
  return RE2::PartialMatch(re2::StringPiece(text.data(), text.size()), *compiled_);
}

bool Pattern::search(std::string_view text, std::vector<std::string_view>& groups) const {
  const int count = compiled_->NumberOfCapturingGroups() + 1;
  std::vector<re2::StringPiece> pieces(static_cast<size_t>(count));
  const re2::StringPiece input(text.data(), text.size());
  groups.clear();
  if (!compiled_->Match(input, 0, input.size(), RE2::UNANCHORED, pieces.data(), count)) {
    return false;
  }
  for (const re2::StringPiece& piece : pieces) {
    groups.emplace_back(piece.data() == nullptr ? std::string_view()
                                                : std::string_view(piece.data(), piece.size()));
  }
  return true;
}

bool Pattern::full_match(std::string_view text) const {
  return RE2::FullMatch(re2::StringPiece(text.data(), text.size()), *compiled_);
}

const std::string& Pattern::text() const { return compiled_->pattern(); }

}  // namespace loupe
