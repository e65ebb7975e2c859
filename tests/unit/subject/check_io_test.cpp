// What an input generator and a check path are handed: declarations, access, bound outputs.
#include <gtest/gtest.h>

#include "loupe/check.hpp"

namespace loupe {
namespace {

std::string internal_message(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInternal);
    return error.message();
  }
  return "no error";
}

TEST(CheckSetup, DeclaresInputsAndOutputsWithAxesAndTolerances) {
  const Point point({{"N", Value(int64_t{4})}});
  CheckSetup setup(point, 42);
  EXPECT_EQ(setup.seed(), 42u);
  std::span<float> x = setup.input<float>("x", {4, 2}, {"N", "D"});
  ASSERT_EQ(x.size(), 8u);
  x[0] = 3.0f;
  CheckOutput& y = setup.output<float>("y", {4}, {"N"}).along("N").tolerance("rms_ratio", 1e-6);
  y.tolerance_vs_oracle("max_abs", 2.0);
  ASSERT_EQ(setup.inputs().size(), 1u);
  EXPECT_EQ(setup.inputs()[0].tensor.data<float>()[0], 3.0f);
  EXPECT_EQ(setup.inputs()[0].tensor.axes, (std::vector<std::string>{"N", "D"}));
  const CheckOutput& declared = setup.outputs().front();
  EXPECT_EQ(declared.profile_axis, "N");
  ASSERT_EQ(declared.tolerances.size(), 2u);
  EXPECT_FALSE(declared.tolerances[0].relative_to_oracle);
  EXPECT_TRUE(declared.tolerances[1].relative_to_oracle);
  EXPECT_EQ(declared.tolerances[1].bound, 2.0);
}

TEST(CheckSetup, RejectsDuplicatesMismatchedAxesAndUnknownProfileAxes) {
  const Point point;
  CheckSetup setup(point, 1);
  setup.input<float>("x", {2});
  EXPECT_EQ(internal_message([&] { setup.input<float>("x", {2}); }), "input 'x' is declared twice");
  EXPECT_EQ(internal_message([&] {
              setup.output<float>("y", {2, 3}, {"T"});
            }),
            "output 'y' has 2 dimensions but 1 axis names");
  EXPECT_EQ(internal_message([&] { setup.output<float>("z", {2}, {"T"}).along("H"); }),
            "output 'z': profile axis 'H' is not one of its axes (T)");
}

TEST(CheckIo, GivesInputsOutputsAndRecordsBoundBuffers) {
  const Point point;
  std::vector<NamedTensor> inputs = {{"x", Tensor(DType::kF32, {3})}};
  std::vector<NamedTensor> outputs = {{"y", Tensor(DType::kF32, {3})}};
  CheckIo io(point, inputs, outputs);
  EXPECT_EQ(io.input<float>("x").size(), 3u);
  io.output<float>("y")[2] = 5.0f;
  EXPECT_EQ(outputs[0].tensor.data<float>()[2], 5.0f);
  EXPECT_EQ(io.bound(0), nullptr);
  static const float own[3] = {1, 2, 3};
  io.bind_output("y", own);
  EXPECT_EQ(io.bound(0), own);
}

TEST(CheckIo, NamesTheChoicesForUnknownNamesAndWrongTypes) {
  const Point point;
  std::vector<NamedTensor> inputs = {{"q", Tensor(DType::kF32, {1})},
                                     {"k", Tensor(DType::kF32, {1})}};
  std::vector<NamedTensor> outputs = {{"o", Tensor(DType::kF32, {1})}};
  CheckIo io(point, inputs, outputs);
  EXPECT_EQ(internal_message([&] { io.input_tensor("v"); }),
            "a check path asked for input 'v'; the inputs are: q, k");
  EXPECT_EQ(internal_message([&] { io.output_tensor("S"); }),
            "a check path asked for output 'S'; the outputs are: o");
  static const double wide[1] = {0};
  EXPECT_EQ(internal_message([&] { io.bind_output("o", wide); }),
            "bind_output('o') with float64 data; the output is float32");
}

TEST(Point, TypedGettersNameTheParameter) {
  const Point point({{"T", Value(int64_t{64})}, {"scale", Value(0.25)}});
  EXPECT_EQ(point.get_int("T"), 64);
  EXPECT_EQ(point.get_float("T"), 64.0);
  EXPECT_EQ(point.get_float("scale"), 0.25);
  EXPECT_TRUE(point.has("scale"));
  EXPECT_FALSE(point.has("H"));
  EXPECT_EQ(internal_message([&] { point.get_string("T"); }),
            "parameter 'T' is int, asked for as string");
  EXPECT_EQ(internal_message([&] { point.get_int("H"); }),
            "probe body asked for parameter 'H', which the probe does not declare (declared: T, "
            "scale)");
}

}  // namespace
}  // namespace loupe
