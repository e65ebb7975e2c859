#include "core/home.hpp"

#include <chrono>
#include <ctime>
#include <random>

namespace loupe {

std::filesystem::path resolve_home(const std::optional<std::filesystem::path>& override_dir,
                                   const std::filesystem::path& working_dir) {
  if (override_dir) return *override_dir;
  std::error_code ignored;
  for (auto dir = std::filesystem::absolute(working_dir, ignored); !dir.empty();
       dir = dir.parent_path()) {
    if (std::filesystem::exists(dir / ".git", ignored)) return dir / ".loupe";
    if (dir == dir.root_path()) break;
  }
  return working_dir / ".loupe";
}

std::string new_run_id() {
  auto now = std::chrono::system_clock::now();
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "r%Y%m%d-%H%M%S", &utc);
  std::random_device device;
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "-%04x", static_cast<unsigned>(device() & 0xFFFF));
  return std::string(stamp) + suffix;
}

std::filesystem::path run_dir(const std::filesystem::path& home, const std::string& run_id) {
  return home / "runs" / run_id;
}

std::filesystem::path observation_dir(const std::filesystem::path& home, const std::string& run_id,
                                      const std::string& probe, const Params& params) {
  std::string point = params.empty() ? "default" : params_to_string(params);
  for (char& c : point) {
    bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '_' || c == '.' || c == ',' || c == '=' || c == '+' || c == '-';
    if (!allowed) c = '_';
  }
  return run_dir(home, run_id) / probe / point;
}

}  // namespace loupe
