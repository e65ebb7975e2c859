#include "check/dims.hpp"

#include <gtest/gtest.h>

#include "loupe/error.hpp"

namespace loupe::check {
namespace {

// The message of the error parse_dims throws for `text`.
std::string dims_error(const std::string& text) {
  try {
    parse_dims(text, "--dims");
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    return error.message();
  }
  ADD_FAILURE() << "no error for '" << text << "'";
  return {};
}

std::string parallel_error(const std::string& text) {
  try {
    parse_parallel(text, "--parallel");
  } catch (const Error& error) {
    return error.message();
  }
  ADD_FAILURE() << "no error for '" << text << "'";
  return {};
}

TEST(DimsSpec, PlainNamesHaveNoGroup) {
  const DimsSpec spec = parse_dims("b t h d", "--dims");
  ASSERT_EQ(spec.axes.size(), 4u);
  EXPECT_EQ(spec.names(), (std::vector<std::string>{"b", "t", "h", "d"}));
  for (const DimAxis& axis : spec.axes) {
    EXPECT_FALSE(axis.group.has_value());
    EXPECT_FALSE(axis.partial);
    EXPECT_EQ(axis.order, ShardOrder::kNatural);
  }
}

TEST(DimsSpec, EveryModifier) {
  const DimsSpec spec = parse_dims("b  t(cp,zigzag) h(tp) e(ep,natural) s_2(sp) r(dp)", "--dims");
  ASSERT_EQ(spec.axes.size(), 6u);
  EXPECT_EQ(spec.axes[1].group, ParallelAxis::kCp);
  EXPECT_EQ(spec.axes[1].order, ShardOrder::kZigzag);
  EXPECT_EQ(spec.axes[2].group, ParallelAxis::kTp);
  EXPECT_EQ(spec.axes[3].group, ParallelAxis::kEp);
  EXPECT_EQ(spec.axes[3].order, ShardOrder::kNatural);
  EXPECT_EQ(spec.axes[4].name, "s_2");
  EXPECT_EQ(spec.axes[4].group, ParallelAxis::kSp);
  EXPECT_EQ(spec.axes[5].group, ParallelAxis::kDp);
  // Modifiers in any order.
  const DimsSpec reordered = parse_dims("t(zigzag,cp)", "--dims");
  EXPECT_EQ(reordered.axes[0].group, ParallelAxis::kCp);
  EXPECT_EQ(reordered.axes[0].order, ShardOrder::kZigzag);
}

TEST(DimsSpec, PartialSum) {
  const DimsSpec spec = parse_dims("b t d(tp,partial)", "--dims");
  EXPECT_TRUE(spec.axes[2].partial);
  EXPECT_EQ(spec.axes[2].group, ParallelAxis::kTp);
  EXPECT_EQ(spec.axis_of(ParallelAxis::kTp), &spec.axes[2]);
  EXPECT_EQ(spec.axis_of(ParallelAxis::kCp), nullptr);
}

TEST(DimsSpec, ErrorsNameTheTokenPositionAndWhatWasExpected) {
  EXPECT_EQ(dims_error("b t(cp,zigag) d"),
            "--dims 'b t(cp,zigag) d': token 2 't(cp,zigag)': modifier 2 'zigag' is unknown; "
            "expected tp, cp, ep, sp, dp, natural, zigzag or partial");
  EXPECT_EQ(dims_error("b t(cp d"),
            "--dims 'b t(cp d': token 2 't(cp d': expected ')' to close the modifiers at the end "
            "of the token");
  EXPECT_EQ(
      dims_error("b 2t"),
      "--dims 'b 2t': token 2 '2t': expected an axis name (a letter or '_' first), found '2'");
  EXPECT_EQ(dims_error("b t-x"),
            "--dims 'b t-x': token 2 't-x': expected '(' or the end of the token after the name "
            "'t', found '-'");
  EXPECT_EQ(dims_error("t()"),
            "--dims 't()': token 1 't()': modifier 1 is empty; expected tp, cp, ep, sp, dp, "
            "natural, zigzag or partial");
  EXPECT_EQ(dims_error("t(cp,)"),
            "--dims 't(cp,)': token 1 't(cp,)': modifier 2 is empty; expected tp, cp, ep, sp, "
            "dp, natural, zigzag or partial");
  EXPECT_EQ(dims_error("t(cp,tp)"),
            "--dims 't(cp,tp)': token 1 't(cp,tp)': modifier 2 'tp': the axis already names "
            "group 'cp'; expected one group per axis");
  EXPECT_EQ(dims_error("t(cp,zigzag,natural)"),
            "--dims 't(cp,zigzag,natural)': token 1 't(cp,zigzag,natural)': modifier 3 "
            "'natural': the order is already given; expected one of natural, zigzag");
  EXPECT_EQ(dims_error("d(tp,partial,partial)"),
            "--dims 'd(tp,partial,partial)': token 1 'd(tp,partial,partial)': modifier 3 "
            "'partial' is given twice");
  EXPECT_EQ(dims_error("b t(zigzag)"),
            "--dims 'b t(zigzag)': token 2 't(zigzag)': 'zigzag' needs a parallel group on the "
            "same axis, e.g. t(cp,zigzag)");
  EXPECT_EQ(dims_error("b d(partial)"),
            "--dims 'b d(partial)': token 2 'd(partial)': 'partial' needs a parallel group on the "
            "same axis, e.g. d(tp,partial)");
  EXPECT_EQ(dims_error("t(cp,zigzag,partial)"),
            "--dims 't(cp,zigzag,partial)': token 1 't(cp,zigzag,partial)': 'partial' and "
            "'zigzag' exclude each other: a partial sum is not cut into chunks");
  EXPECT_EQ(dims_error("b t b"),
            "--dims 'b t b': token 3 'b': the axis name 'b' is already used; expected one name "
            "per axis");
  EXPECT_EQ(dims_error("h(tp) d(tp,partial)"),
            "--dims 'h(tp) d(tp,partial)': token 2 'd(tp,partial)': group 'tp' already shards "
            "or sums axis 'h'; expected each group on at most one axis");
  EXPECT_EQ(dims_error("   "), "--dims '   ': no axis; expected one token per axis");
}

TEST(DimsSpec, MetadataErrorsAreInputErrors) {
  try {
    parse_dims("t(xp)", "rank-0/o.safetensors: metadata loupe.dims", ErrorCode::kInput);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_NE(error.message().find("rank-0/o.safetensors: metadata loupe.dims 't(xp)'"),
              std::string::npos);
  }
}

TEST(ParallelConfig, RankLayoutFirstGroupVariesFastest) {
  const ParallelConfig config = parse_parallel("tp=2,cp=4", "--parallel");
  EXPECT_EQ(config.world_size(), 8);
  EXPECT_EQ(config.size_of(ParallelAxis::kTp), 2);
  EXPECT_EQ(config.size_of(ParallelAxis::kCp), 4);
  EXPECT_EQ(config.size_of(ParallelAxis::kEp), 1);
  EXPECT_EQ(config.coords_of(0), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(config.coords_of(1), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(config.coords_of(2), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(config.coords_of(7), (std::vector<int64_t>{1, 3}));
  for (int64_t rank = 0; rank < 8; ++rank) EXPECT_EQ(config.rank_of(config.coords_of(rank)), rank);
  EXPECT_EQ(config.to_string(), "tp=2,cp=4");
  EXPECT_EQ(parse_parallel("cp=4,tp=2", "--parallel").coords_of(1),
            (std::vector<int64_t>{1, 0}));  // now cp varies fastest
}

TEST(ParallelConfig, ErrorsNameTheItem) {
  EXPECT_EQ(parallel_error("tp=2,xp=4"),
            "--parallel 'tp=2,xp=4': item 2 'xp=4': unknown group 'xp'; expected tp, cp, ep, sp "
            "or dp");
  EXPECT_EQ(parallel_error("tp=2,tp=4"),
            "--parallel 'tp=2,tp=4': item 2 'tp=4': group 'tp' is given twice");
  EXPECT_EQ(parallel_error("tp"), "--parallel 'tp': item 1 'tp': expected GROUP=SIZE");
  EXPECT_EQ(parallel_error("tp=0"),
            "--parallel 'tp=0': item 1 'tp=0': size '0': expected a whole number from 1 to "
            "999999999");
  EXPECT_EQ(parallel_error("cp=-2"),
            "--parallel 'cp=-2': item 1 'cp=-2': size '-2': expected a whole number from 1 to "
            "999999999");
  EXPECT_EQ(parallel_error(""), "--parallel '': item 1 '': expected GROUP=SIZE");
}

}  // namespace
}  // namespace loupe::check
