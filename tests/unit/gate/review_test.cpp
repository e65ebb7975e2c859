#include "gate/review.hpp"

#include <gtest/gtest.h>

namespace loupe::gate {
namespace {

TEST(GlobTest, StarStaysInOneFolderDoubleStarCrossesFolders) {
  EXPECT_TRUE(glob_matches("examples/kda/*.toml", "examples/kda/loupe.toml"));
  EXPECT_FALSE(glob_matches("examples/kda/*.toml", "examples/kda/old/loupe.toml"));
  EXPECT_FALSE(glob_matches("examples/kda/*.toml", "examples/kda/loupe.tomlx"));
  EXPECT_TRUE(glob_matches("kda/kernels/**", "kda/kernels/cpu/decode.cpp"));
  EXPECT_TRUE(glob_matches("kda/kernels/**", "kda/kernels/"));
  EXPECT_FALSE(glob_matches("kda/kernels/**", "kda/kernels"));
  EXPECT_FALSE(glob_matches("kda/kernels/**", "kda/math/blas.cpp"));
  EXPECT_TRUE(glob_matches("**/CMakeLists.txt", "CMakeLists.txt"));
  EXPECT_TRUE(glob_matches("**/CMakeLists.txt", "src/gate/CMakeLists.txt"));
  EXPECT_FALSE(glob_matches("**/CMakeLists.txt", "src/gate/XCMakeLists.txt"));
  EXPECT_TRUE(glob_matches("kda/**/precision.?pp", "kda/math/precision.hpp"));
  EXPECT_FALSE(glob_matches("kda/?ath/x", "kda//ath/x"));
  EXPECT_TRUE(glob_matches("README.md", "README.md"));
  EXPECT_FALSE(glob_matches("README.md", "docs/README.md"));
  EXPECT_TRUE(glob_matches("*", "anything"));
  EXPECT_FALSE(glob_matches("*", "a/b"));
}

TEST(ReviewTest, TriggersNameTheCategoryAndWhatTouchedIt) {
  Objective objective;
  objective.review = {{"numerics", {"kda/math/**", "kda/kernels/**"}, {"precision", "shards"}},
                      {"concurrency", {"kda/serve/**"}, {"dispatch_lock"}}};
  const auto triggers = review_triggers(
      objective, {"kda/kernels/cpu/decode.cpp", "README.md", "kda/serve/server.cpp"},
      {"precision", "decode_kernel"});
  EXPECT_EQ(triggers, (std::vector<ReviewTrigger>{
                          {"numerics", "path kda/kernels/cpu/decode.cpp matches kda/kernels/**"},
                          {"numerics", "parameter precision changed"},
                          {"concurrency", "path kda/serve/server.cpp matches kda/serve/**"}}));
  EXPECT_TRUE(review_triggers(objective, {"docs/objective.md"}, {"decode_kernel"}).empty());
}

}  // namespace
}  // namespace loupe::gate
