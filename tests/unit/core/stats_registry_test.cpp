#include "core/stats_registry.hpp"

#include <gtest/gtest.h>

namespace loupe {
namespace {

TEST(StatsRegistry, CountsAndMerges) {
  StatsRegistry a;
  StatsRegistry b;
  EXPECT_TRUE(a.all_zero());
  a.add(Stat::diff_file_not_tensor);
  b.add(Stat::diff_file_not_tensor, 3);
  a.merge(b);
  EXPECT_EQ(a.count(Stat::diff_file_not_tensor), 4);
  EXPECT_FALSE(a.all_zero());
}

TEST(StatsRegistry, EveryStatHasNameAndDescription) {
  for (size_t index = 0; index < static_cast<size_t>(Stat::kCount); ++index) {
    const StatInfo& info = stat_info(static_cast<Stat>(index));
    EXPECT_FALSE(info.name.empty());
    EXPECT_FALSE(info.description.empty());
  }
  EXPECT_EQ(stat_info(Stat::diff_tensor_only_in_b).name, "diff_tensor_only_in_b");
}

}  // namespace
}  // namespace loupe
