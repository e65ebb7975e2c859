#include "gate/review.hpp"

#include <gtest/gtest.h>

#include <string>

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

// Issue 34: a recursive matcher took time exponential in the stars; an objective's glob against
// a long path must answer at once.
TEST(GlobTest, Issue34ManyStarsAgainstALongPathAnswer) {
  std::string stars;
  for (int index = 0; index < 40; ++index) stars += "*a";
  EXPECT_FALSE(glob_matches(stars + "*b", std::string(20000, 'a')));
  EXPECT_TRUE(glob_matches(stars + "*b", std::string(20000, 'a') + "b"));
  std::string folders;
  for (int index = 0; index < 40; ++index) folders += "**/x";
  EXPECT_FALSE(glob_matches(folders + "/y", std::string(20000, 'x')));
  EXPECT_TRUE(glob_matches("**/**/**/z", "a/b/c/d/z"));
  EXPECT_TRUE(glob_matches("a/**/**", "a/"));
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
