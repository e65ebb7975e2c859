#include "check/align.hpp"

#include <gtest/gtest.h>

#include "loupe/error.hpp"

namespace loupe::check {
namespace {

// (rows, tokens, width) float32 whose element is 1000·request + 10·token + channel, with
// `request_of_row` naming each row's request and `first_token` the token index of column 0.
Tensor padded_tokens(const std::vector<int64_t>& request_of_row, int64_t tokens, int64_t width,
                     int64_t first_token) {
  Tensor tensor(DType::kF32, {static_cast<int64_t>(request_of_row.size()), tokens, width});
  auto data = tensor.mutable_data<float>();
  for (size_t row = 0; row < request_of_row.size(); ++row) {
    for (int64_t token = 0; token < tokens; ++token) {
      for (int64_t channel = 0; channel < width; ++channel) {
        data[(row * tokens + token) * width + channel] =
            static_cast<float>(1000 * request_of_row[row] + 10 * (first_token + token) + channel);
      }
    }
  }
  return tensor;
}

std::vector<float> values(const Tensor& tensor) {
  const auto data = tensor.data<float>();
  return {data.begin(), data.end()};
}

std::string align_error(const std::vector<StepTensor>& steps,
                        const std::vector<std::string>& axes) {
  try {
    align_tokens(steps, axes, "o");
  } catch (const Error& error) {
    return error.message();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(AlignTokens, PrefillAndDecodeStepsConcatenateAlongT) {
  // One request: a prefill of 3 tokens, then 2 decode steps, given out of order with loupe.step.
  std::vector<StepTensor> steps = {{padded_tokens({0}, 1, 2, 4), 2, {}, {}, "step-2"},
                                   {padded_tokens({0}, 3, 2, 0), 0, {}, {}, "step-0"},
                                   {padded_tokens({0}, 1, 2, 3), 1, {}, {}, "step-1"}};
  const AlignedTokens aligned = align_tokens(steps, {"b", "t", "d"}, "o");
  EXPECT_EQ(aligned.layout, "concatenated");
  EXPECT_EQ(aligned.steps, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(aligned.tensor.shape(), (std::vector<int64_t>{1, 5, 2}));
  EXPECT_EQ(values(aligned.tensor), values(padded_tokens({0}, 5, 2, 0)));
  EXPECT_EQ(aligned.tensor.axes, (std::vector<std::string>{"b", "t", "d"}));
}

TEST(AlignTokens, FileOrderWhenNoStepIsNumbered) {
  std::vector<StepTensor> steps = {{padded_tokens({0, 1}, 2, 1, 0), {}, {}, {}, "a"},
                                   {padded_tokens({0, 1}, 1, 1, 2), {}, {}, {}, "b"}};
  const AlignedTokens aligned = align_tokens(steps, {"B", "T", "D"}, "o");
  EXPECT_EQ(values(aligned.tensor), values(padded_tokens({0, 1}, 3, 1, 0)));
}

TEST(AlignTokens, PaddedRequestsAreReorderedById) {
  // The prefill batched requests 5 and 2; the decode step batched them as 2 and 5.
  std::vector<StepTensor> steps = {
      {padded_tokens({5, 2}, 2, 1, 0), 0, std::vector<int64_t>{5, 2}, {}, "step-0"},
      {padded_tokens({2, 5}, 1, 1, 2), 1, std::vector<int64_t>{2, 5}, {}, "step-1"}};
  const AlignedTokens aligned = align_tokens(steps, {"b", "t", "d"}, "o");
  EXPECT_EQ(aligned.layout, "padded");
  EXPECT_EQ(aligned.request_ids, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(values(aligned.tensor), values(padded_tokens({2, 5}, 3, 1, 0)));
  // A single forward that batched them 5, 2 lines up with it.
  std::vector<StepTensor> single = {
      {padded_tokens({5, 2}, 3, 1, 0), {}, std::vector<int64_t>{5, 2}, {}, "forward"}};
  EXPECT_EQ(values(align_tokens(single, {"b", "t", "d"}, "o").tensor), values(aligned.tensor));
}

TEST(AlignTokens, PaddedWithLengthsBecomesPacked) {
  // Prefill: request 0 has 2 valid tokens of 3, request 1 all 3; then one decode token each.
  Tensor prefill = padded_tokens({0, 1}, 3, 1, 0);
  prefill.mutable_data<float>()[2] = -7;  // padding of request 0: never compared
  std::vector<StepTensor> steps = {
      {prefill, 0, std::vector<int64_t>{0, 1}, std::vector<int64_t>{2, 3}, "step-0"},
      {padded_tokens({1, 0}, 1, 1, 0), 1, std::vector<int64_t>{1, 0}, {}, "step-1"}};
  const AlignedTokens aligned = align_tokens(steps, {"b", "t", "d"}, "o");
  EXPECT_EQ(aligned.layout, "packed");
  EXPECT_EQ(aligned.tensor.shape(), (std::vector<int64_t>{7, 1}));
  EXPECT_EQ(aligned.tensor.axes, (std::vector<std::string>{"t", "d"}));
  EXPECT_EQ(aligned.request_begin, (std::vector<int64_t>{0, 3, 7}));
  // Request 0: its 2 valid prefill tokens, then row 1 of the decode step (rows follow
  // request_ids, so row 1 is request 0, whose tensor here holds 0); then request 1's 3 + 1.
  EXPECT_EQ(values(aligned.tensor), (std::vector<float>{0, 10, 0, 1000, 1010, 1020, 1000}));
}

TEST(AlignTokens, PackedPrefillAndDecodeStepsLineUpWithOnePackedForward) {
  // Two requests, ids 4 and 9, of 2 and 3 prompt tokens, then two decode steps.
  auto packed = [](const std::vector<std::pair<int64_t, std::pair<int64_t, int64_t>>>& pieces) {
    int64_t total = 0;
    for (const auto& piece : pieces) total += piece.second.second;
    Tensor tensor(DType::kF32, {total, 1});
    auto data = tensor.mutable_data<float>();
    int64_t position = 0;
    for (const auto& [request, range] : pieces) {
      for (int64_t token = 0; token < range.second; ++token) {
        data[position++] = static_cast<float>(1000 * request + 10 * (range.first + token));
      }
    }
    return tensor;
  };
  std::vector<StepTensor> engine = {
      {packed({{4, {0, 2}}, {9, {0, 3}}}), 0, std::vector<int64_t>{4, 9},
       std::vector<int64_t>{2, 3}, "step-0"},
      {packed({{9, {3, 1}}, {4, {2, 1}}}), 1, std::vector<int64_t>{9, 4}, {}, "step-1"},
      {packed({{4, {3, 1}}, {9, {4, 1}}}), 2, std::vector<int64_t>{4, 9}, {}, "step-2"}};
  std::vector<StepTensor> forward = {{packed({{9, {0, 5}}, {4, {0, 4}}}),
                                      {},
                                      std::vector<int64_t>{9, 4},
                                      std::vector<int64_t>{5, 4},
                                      "forward"}};
  const AlignedTokens left = align_tokens(engine, {"t", "d"}, "o");
  const AlignedTokens right = align_tokens(forward, {"t", "d"}, "o");
  EXPECT_EQ(left.layout, "packed");
  EXPECT_EQ(left.request_ids, (std::vector<int64_t>{4, 9}));
  EXPECT_EQ(left.request_begin, (std::vector<int64_t>{0, 4, 9}));
  EXPECT_EQ(values(left.tensor), values(right.tensor));
  EXPECT_EQ(values(left.tensor), values(packed({{4, {0, 4}}, {9, {0, 5}}})));
}

TEST(AttributeSteps, NamesTheEarliestStepPastToleranceAndItsToken) {
  // Two requests padded (b t d); request 1 goes wrong from step 2, request 0 only at step 3.
  std::vector<StepTensor> steps = {{padded_tokens({0, 1}, 4, 2, 0), 0, {}, {}, "step-0"},
                                   {padded_tokens({0, 1}, 1, 2, 4), 1, {}, {}, "step-1"},
                                   {padded_tokens({0, 1}, 1, 2, 5), 2, {}, {}, "step-2"},
                                   {padded_tokens({0, 1}, 1, 2, 6), 3, {}, {}, "step-3"}};
  const AlignedTokens aligned = align_tokens(steps, {"b", "t", "d"}, "o");
  EXPECT_EQ(aligned.rows, 2);
  EXPECT_EQ(aligned.token_step, (std::vector<int32_t>{0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 1, 2, 3}));
  Tensor candidate = aligned.tensor.converted(DType::kF32);
  auto data = candidate.mutable_data<float>();
  data[(0 * 7 + 6) * 2 + 0] += 3;  // row 0, t=6 (step 3)
  data[(1 * 7 + 5) * 2 + 1] += 4;  // row 1, t=5 (step 2)
  const StepAttribution attribution = attribute_steps(candidate, aligned.tensor, aligned, 1e-5, 0);
  ASSERT_TRUE(attribution.first_step.has_value());
  EXPECT_EQ(*attribution.first_step, 2u);
  EXPECT_EQ(attribution.first_row, 1);
  EXPECT_EQ(attribution.first_token, 5);
  EXPECT_EQ(attribution.mismatches, (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_DOUBLE_EQ(attribution.total_squared_error, 25.0);
  EXPECT_DOUBLE_EQ(attribution.share_from_first, 1.0);
  EXPECT_EQ(step_sentence(attribution, aligned),
            "the first token past tolerance is t=5 of row 1, from step 2 (3 of 4 steps; a "
            "decode step); that step and the ones after it hold 100% of the squared error; the "
            "steps before it are within tolerance");
  // Within tolerance: nothing to say.
  EXPECT_EQ(
      step_sentence(attribute_steps(aligned.tensor, aligned.tensor, aligned, 1e-5, 0), aligned),
      "");
}

TEST(AttributeSteps, PackedNamesTheRequestAndItsToken) {
  Tensor prefill(DType::kF32, {5, 1});
  Tensor decode(DType::kF32, {2, 1});
  std::vector<StepTensor> steps = {
      {prefill, 0, std::vector<int64_t>{3, 8}, std::vector<int64_t>{2, 3}, "step-0"},
      {decode, 1, std::vector<int64_t>{8, 3}, {}, "step-1"}};
  const AlignedTokens aligned = align_tokens(steps, {"t", "d"}, "o");
  EXPECT_EQ(aligned.token_step, (std::vector<int32_t>{0, 0, 1, 0, 0, 0, 1}));
  Tensor candidate = aligned.tensor.converted(DType::kF32);
  candidate.mutable_data<float>()[6] = 1;  // request 8's decode token (its 4th token)
  const StepAttribution attribution = attribute_steps(candidate, aligned.tensor, aligned, 1e-5, 0);
  EXPECT_EQ(step_sentence(attribution, aligned),
            "the first token past tolerance is t=6 (request 8, its token 3), from step 1 (2 of 2 "
            "steps; a decode step); it holds 100% of the squared error; the steps before it are "
            "within tolerance");
}

TEST(AlignTokens, ErrorsNameTheStepAndWhatWasExpected) {
  const Tensor two = padded_tokens({0}, 2, 1, 0);
  EXPECT_EQ(align_error({{two, {}, {}, {}, "x"}}, {"b", "h", "d"}),
            "'o': aligning tokens needs an axis named t (or T, s, S); the axes are 'b h d'");
  EXPECT_EQ(align_error({{two, {}, {}, {}, "x"}}, {"d", "b", "t"}),
            "'o': the token axis 't' is axis 2; expected it first (packed t ...) or second after "
            "a batch axis b (padded b t ...)");
  EXPECT_EQ(align_error({{two, 0, {}, {}, "step-0"}, {two, {}, {}, {}, "step-1"}}, {"b", "t", "d"}),
            "'o': step-1 has no loupe.step, but other steps have one; expected all or none");
  EXPECT_EQ(align_error({{two, 1, {}, {}, "a"}, {two, 1, {}, {}, "b"}}, {"b", "t", "d"}),
            "'o': a and b are both step 1");
  EXPECT_EQ(align_error({{two, {}, {}, {}, "a"}, {padded_tokens({0}, 1, 2, 0), {}, {}, {}, "b"}},
                        {"b", "t", "d"}),
            "'o': b: axis 'd' has extent 2, the first step has 1; only t and b may differ");
  EXPECT_EQ(align_error({{two, {}, {}, {}, "a"}, {two.converted(DType::kF64), {}, {}, {}, "b"}},
                        {"b", "t", "d"}),
            "'o': b is float64, the first step is float32");
  EXPECT_EQ(align_error({{two, {}, {}, {}, "a"}, {padded_tokens({0, 1}, 1, 1, 0), {}, {}, {}, "b"}},
                        {"b", "t", "d"}),
            "'o': b: axis 'b' has extent 2, the first step has 1; give loupe.request_ids when "
            "the batch changes between steps");
  EXPECT_EQ(align_error({{two, {}, std::vector<int64_t>{1, 2}, {}, "a"}}, {"b", "t", "d"}),
            "'o': a: loupe.request_ids has 2 ids, axis 'b' has 1 rows");
  EXPECT_EQ(align_error({{two, {}, {}, std::vector<int64_t>{3}, "a"}}, {"b", "t", "d"}),
            "'o': a: loupe.seq_lens gives row 0 3 tokens, but axis 't' has 2");
  EXPECT_EQ(align_error({{padded_tokens({0, 0}, 1, 1, 0), {}, std::vector<int64_t>{3, 3}, {}, "a"}},
                        {"b", "t", "d"}),
            "'o': a: request 3 appears twice in one step");
  const Tensor packed(DType::kF32, {5, 1});
  EXPECT_EQ(align_error({{packed, {}, {}, std::vector<int64_t>{2, 2}, "a"}}, {"t", "d"}),
            "'o': a: loupe.seq_lens sum to 4, but axis 't' has 5 tokens");
  EXPECT_EQ(align_error({{packed, {}, std::vector<int64_t>{1, 2}, std::vector<int64_t>{5}, "a"}},
                        {"t", "d"}),
            "'o': a: loupe.request_ids has 2 ids, loupe.seq_lens 1 lengths; expected one id per "
            "sequence");
  EXPECT_EQ(align_error({{padded_tokens({0, 1}, 2, 1, 0), 0, std::vector<int64_t>{0, 1}, {}, "a"},
                         {padded_tokens({0}, 1, 1, 2), 1, std::vector<int64_t>{0}, {}, "b"}},
                        {"b", "t", "d"}),
            "'o': request 1 has 2 tokens over the steps, request 0 has 3; give loupe.seq_lens to "
            "compare requests of different lengths");
}

}  // namespace
}  // namespace loupe::check
