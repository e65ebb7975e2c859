#include "core/stats_registry.hpp"

namespace loupe {
namespace {

constexpr std::array<StatInfo, static_cast<size_t>(Stat::kCount)> kStatInfos = {{
#define LOUPE_STAT_INFO(name, severity, description) {#name, StatSeverity::severity, description},
    LOUPE_STATS_LIST(LOUPE_STAT_INFO)
#undef LOUPE_STAT_INFO
}};

}  // namespace

const StatInfo& stat_info(Stat stat) { return kStatInfos[static_cast<size_t>(stat)]; }

std::string_view stat_severity_name(StatSeverity severity) {
  switch (severity) {
    case StatSeverity::kInfo:
      return "info";
    case StatSeverity::kDataLoss:
      return "data_loss";
    case StatSeverity::kError:
      return "error";
  }
  return "error";
}

void StatsRegistry::merge(const StatsRegistry& other) {
  for (size_t index = 0; index < counts_.size(); ++index) counts_[index] += other.counts_[index];
}

bool StatsRegistry::all_zero() const {
  for (int64_t count : counts_) {
    if (count != 0) return false;
  }
  return true;
}

}  // namespace loupe
