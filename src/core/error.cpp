#include "loupe/error.hpp"

namespace loupe {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kUsage:
      return "usage";
    case ErrorCode::kConfig:
      return "config";
    case ErrorCode::kInput:
      return "input";
    case ErrorCode::kSubject:
      return "subject";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "internal";
}

int exit_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kUsage:
    case ErrorCode::kConfig:
    case ErrorCode::kInput:
      return 2;
    case ErrorCode::kSubject:
    case ErrorCode::kInternal:
      return 3;
  }
  return 3;
}

}  // namespace loupe
