// Parameter points from `--set` texts: typing, allowed sets, hidden points, error messages.
#include <gtest/gtest.h>

#include "subject/runtime.hpp"

namespace loupe::subject {
namespace {

detail::ProbeDefinition probe_with_params() {
  detail::ProbeDefinition probe;
  probe.name = "cp_vs_nocp";
  probe.params = {{"T", Value(int64_t{16384}), {Value(int64_t{1024}), Value(int64_t{16384})}, ""},
                  {"scale", Value(0.5), {}, ""},
                  {"precision",
                   Value(std::string("ieee")),
                   {Value(std::string("ieee")), Value(std::string("tf32_rz"))},
                   ""},
                  {"l2norm", Value(true), {}, ""}};
  return probe;
}

std::string usage_message(const detail::ProbeDefinition& probe, std::vector<std::string> sets) {
  try {
    resolve_point(probe, sets, nullptr);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    return error.message();
  }
  return "no error";
}

TEST(ResolvePoint, UnsetParametersTakeTheirDefaultsInDeclarationOrder) {
  const Params point = resolve_point(probe_with_params(), {}, nullptr);
  EXPECT_EQ(params_to_string(point), "T=16384,scale=0.5,precision=ieee,l2norm=true");
}

TEST(ResolvePoint, SetValuesAreParsedAsTheDefaultsType) {
  const Params point = resolve_point(
      probe_with_params(), {"precision=tf32_rz", "T=1024", "scale=2e-3", "l2norm=false"}, nullptr);
  EXPECT_EQ(point[0].second, Value(int64_t{1024}));
  EXPECT_EQ(point[1].second, Value(2e-3));
  EXPECT_EQ(point[2].second, Value(std::string("tf32_rz")));
  EXPECT_EQ(point[3].second, Value(false));
}

// A hidden range with a step accepts low, low + step, ... up to high outside the allowed set, and
// nothing between (kda's cp_ranks_vs_nocp: lengths that are multiples of 4096).
TEST(ResolvePoint, AHiddenRangeWithAStepAcceptsOnlyItsSteps) {
  auto probe = probe_with_params();
  probe.hidden_ranges.push_back({"T", 8192, 12288, 4096});
  EXPECT_EQ(resolve_point(probe, {"T=8192"}, nullptr)[0].second, Value(int64_t{8192}));
  EXPECT_EQ(resolve_point(probe, {"T=12288"}, nullptr)[0].second, Value(int64_t{12288}));
  EXPECT_EQ(usage_message(probe, {"T=9000"}),
            "probe 'cp_vs_nocp': parameter 'T' = 9000 is not an allowed value; allowed: 1024, "
            "16384");
  EXPECT_NE(usage_message(probe, {"T=16385"}).find("is not an allowed value"), std::string::npos);
}

TEST(ResolvePoint, ErrorsNameTheParameterAndTheValidChoices) {
  const auto probe = probe_with_params();
  EXPECT_EQ(usage_message(probe, {"T=4096"}),
            "probe 'cp_vs_nocp': parameter 'T' = 4096 is not an allowed value; allowed: 1024, "
            "16384");
  EXPECT_EQ(usage_message(probe, {"T=4k"}),
            "probe 'cp_vs_nocp': parameter 'T' is int, got '4k'; allowed: 1024, 16384");
  EXPECT_EQ(usage_message(probe, {"scale=half"}),
            "probe 'cp_vs_nocp': parameter 'scale' is float, got 'half'");
  EXPECT_EQ(usage_message(probe, {"l2norm=yes"}),
            "probe 'cp_vs_nocp': parameter 'l2norm' is bool, got 'yes'");
  EXPECT_EQ(usage_message(probe, {"shards=8"}),
            "probe 'cp_vs_nocp' has no parameter 'shards'; its parameters are: T (int), scale "
            "(float), precision (string), l2norm (bool)");
  EXPECT_EQ(usage_message(probe, {"T"}), "--set 'T': expected NAME=VALUE");
}

TEST(ResolvePoint, HiddenPointsOverrideAndMayLeaveTheAllowedSet) {
  const Params hidden = {{"T", Value(int64_t{777})}};
  const Params point = resolve_point(probe_with_params(), {"T=1024"}, &hidden);
  EXPECT_EQ(point[0].second, Value(int64_t{777}));
}

TEST(ResolvePoint, HiddenPointOfTheWrongTypeIsAProbeBug) {
  const Params hidden = {{"T", Value(std::string("big"))}};
  try {
    resolve_point(probe_with_params(), {}, &hidden);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInternal);
  }
}

TEST(DeriveSeed, IsDeterministicAndSeparatesStreams) {
  EXPECT_EQ(derive_seed(7, 1), derive_seed(7, 1));
  EXPECT_NE(derive_seed(7, 1), derive_seed(7, 2));
  EXPECT_NE(derive_seed(7, 1), derive_seed(8, 1));
}

}  // namespace
}  // namespace loupe::subject
