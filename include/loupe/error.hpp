// loupe/error.hpp — the one error type of loupe and of the subjects built on it.
//
// Thrown where a problem is detected; caught only at process and request boundaries (a subject's
// main, the loupe CLI's main, each MCP request), which render it and exit with exit_code().
// Thread-safety: a value type; copy freely.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace loupe {

// What went wrong, which decides the exit code (DESIGN.md, "Envelope, verdicts and exit codes").
enum class ErrorCode {
  kUsage,    // bad command line: unknown flag, probe or parameter; a value outside the allowed set
  kConfig,   // a configuration or objective file that says something invalid
  kInput,    // an input file that cannot be read or does not hold what was expected
  kSubject,  // the subject crashed, timed out, was killed or wrote nothing usable
  kInternal  // a broken invariant inside loupe itself
};

// "usage", "config", "input", "subject", "internal": the code as it appears in JSON.
std::string_view error_code_name(ErrorCode code);

// 2 for usage, config and input problems; 3 for subject failures and internal errors.
int exit_code(ErrorCode code);

class Error : public std::runtime_error {
 public:
  // `message` names the input, the position and what was expected; `hint` says what to try next.
  Error(ErrorCode code, std::string message, std::string hint = {})
      : std::runtime_error(message),
        code_(code),
        message_(std::move(message)),
        hint_(std::move(hint)) {}

  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& hint() const { return hint_; }

 private:
  ErrorCode code_;
  std::string message_;
  std::string hint_;
};

}  // namespace loupe
