// The clause a bench comparison gains from its counters pass (probe/counters_pass.hpp).
#include <gtest/gtest.h>

#include "probe/counters_pass.hpp"

namespace loupe::probe {
namespace {

TEST(CountersClause, FasterAndNearThePeakSaysLittleLeftToGain) {
  EXPECT_EQ(counters_clause({"DRAM", 93.1, "DRAM"}, "merged_v_decode", bench::AbVerdict::kFaster,
                            "merged"),
            ", and now DRAM-bound at 93.1 % of peak (merged_v_decode, ncu): little left to gain");
}

TEST(CountersClause, FasterBelowEightyFivePercentLeavesRoom) {
  EXPECT_EQ(counters_clause({"L2", 71.25, "L2"}, "k", bench::AbVerdict::kFaster, "b"),
            ", and now L2-bound at 71.2 % of peak (k, ncu): room left before that limit");
}

TEST(CountersClause, OtherVerdictsNameTheVariant) {
  EXPECT_EQ(counters_clause({"SM", 88.0, "SM"}, "k", bench::AbVerdict::kSlower, "double"),
            "; double is SM-bound at 88.0 % of peak (k, ncu): little left to gain");
}

TEST(CountersClause, LatencyBoundNamesTheHighestUnit) {
  EXPECT_EQ(counters_clause({"latency", 40.0, "DRAM"}, "tiled", bench::AbVerdict::kSame, "t"),
            "; t is latency-bound (tiled, ncu: no unit reaches 60.0 % of its peak, highest DRAM "
            "40.0 %): more independent work in flight is the lever");
}

}  // namespace
}  // namespace loupe::probe
