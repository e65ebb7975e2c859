// `structures = [...]` on an entry: names from include/loupe/structure.hpp, validated, and
// `loupe plan` naming the structures a check never sees (issue 39).
#include <gtest/gtest.h>

#include "core/json.hpp"
#include "gate/objective.hpp"
#include "gate/plan.hpp"

namespace loupe::gate {
namespace {

const std::string kObjective = R"([subject]
command = "s"

[[check]]
name = "w8a8"
probe = "w8a8_vs_fp32"
structures = ["outlier_channels", "heavy_tails"]

[[check]]
name = "chunk"
probe = "chunk_vs_recurrent"
structures = []

[[check]]
name = "plain"
probe = "replay_vs_decode"
)";

std::string config_error(const std::string& text) {
  try {
    parse_objective(text, "obj.toml");
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kConfig);
    return error.message();
  }
  return "no error";
}

TEST(StructuresTest, ThePlanNamesWhatEachCheckNeverSees) {
  const Objective objective = parse_objective(kObjective, "obj.toml");
  EXPECT_EQ(objective.checks[0].structures,
            (std::vector<std::string>{"outlier_channels", "heavy_tails"}));
  const Plan plan = make_plan(objective, Configuration{});
  EXPECT_EQ(
      render_plan(plan, objective, 50),
      "plan for obj.toml, no configuration (the file's own points): 3 tasks\n"
      "  check     w8a8   w8a8_vs_fp32        (defaults)\n"
      "  check     chunk  chunk_vs_recurrent  (defaults)\n"
      "  check     plain  replay_vs_decode    (defaults)\n"
      "structures (docs/structures.md):\n"
      "  check w8a8: outlier_channels, heavy_tails; never sees long_history, fast_gates, "
      "k_ne_v, ragged_tail, v_above_k\n"
      "  check chunk: none; never sees outlier_channels, heavy_tails, long_history, fast_gates, "
      "k_ne_v, ragged_tail, v_above_k\n"
      "  check plain: none; never sees outlier_channels, heavy_tails, long_history, fast_gates, "
      "k_ne_v, ragged_tail, v_above_k\n");
  EXPECT_EQ(plan_to_json(plan, objective)["structures"][0].dump(),
            R"({"entry":"w8a8","declared":true,"sees":["outlier_channels","heavy_tails"],)"
            R"("never_sees":["long_history","fast_gates","k_ne_v","ragged_tail","v_above_k"]})");
}

TEST(StructuresTest, AnUnknownOrRepeatedStructureNamesTheFileAndLine) {
  std::string text = kObjective;
  text.replace(text.find("\"heavy_tails\""), 13, "\"heavy_tail\"");
  EXPECT_EQ(config_error(text),
            "obj.toml:7: check[0].structures[1]: expected one of the input structures "
            "outlier_channels, heavy_tails, long_history, fast_gates, k_ne_v, ragged_tail, "
            "v_above_k (docs/structures.md), found 'heavy_tail'");
  text = kObjective;
  text.replace(text.find("\"heavy_tails\""), 13, "\"outlier_channels\"");
  EXPECT_EQ(config_error(text),
            "obj.toml:7: check[0].structures[1]: 'outlier_channels' is listed twice");
}

}  // namespace
}  // namespace loupe::gate
