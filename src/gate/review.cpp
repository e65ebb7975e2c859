#include "gate/review.hpp"

#include <algorithm>

namespace loupe::gate {
namespace {

bool match_from(std::string_view pattern, std::string_view path) {
  while (!pattern.empty()) {
    if (pattern.substr(0, 3) == "**/") {
      // Zero or more whole folders: try here, then after each '/'.
      const std::string_view rest = pattern.substr(3);
      if (match_from(rest, path)) return true;
      for (size_t at = 0; at < path.size(); ++at) {
        if (path[at] == '/' && match_from(rest, path.substr(at + 1))) return true;
      }
      return false;
    }
    if (pattern.substr(0, 2) == "**") {
      const std::string_view rest = pattern.substr(2);
      for (size_t at = 0; at <= path.size(); ++at) {
        if (match_from(rest, path.substr(at))) return true;
      }
      return false;
    }
    if (pattern[0] == '*') {
      const std::string_view rest = pattern.substr(1);
      for (size_t at = 0; at <= path.size(); ++at) {
        if (match_from(rest, path.substr(at))) return true;
        if (at < path.size() && path[at] == '/') break;
      }
      return false;
    }
    if (path.empty()) return false;
    if (pattern[0] == '?') {
      if (path[0] == '/') return false;
    } else if (pattern[0] != path[0]) {
      return false;
    }
    pattern.remove_prefix(1);
    path.remove_prefix(1);
  }
  return path.empty();
}

}  // namespace

bool glob_matches(std::string_view pattern, std::string_view path) {
  return match_from(pattern, path);
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
