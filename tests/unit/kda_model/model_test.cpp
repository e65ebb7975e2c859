// The model's building blocks and its two paths: prefill (chunk or CP kernel) followed by decode
// (decode kernel) must agree with a longer prefill, which checks the convolution history, the
// shipped states and the gates end to end.
#include "kda/model/model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "kda/math/generator.hpp"
#include "loupe/error.hpp"

namespace kda::model {
namespace {

double rms_ratio(const std::vector<float>& candidate, const std::vector<float>& reference) {
  double diff = 0, ref = 0;
  for (size_t idx = 0; idx < reference.size(); ++idx) {
    diff += std::pow(double(candidate[idx]) - reference[idx], 2);
    ref += std::pow(double(reference[idx]), 2);
  }
  return std::sqrt(diff / ref);
}

ModelConfig small_config() {
  ModelConfig config;
  config.layers = 2;
  config.hidden = 64;
  config.head_dim = 32;
  config.expert_hidden = 64;
  config.vocab = 97;
  config.seed = 5;
  return config;
}

TEST(Linear, W8A8MatchesFp32WithinQuantisationError) {
  math::NormalStream stream(3);
  std::vector<float> weight(48 * 64), x(5 * 64);
  for (float& value : weight) value = static_cast<float>(stream.normal());
  for (float& value : x) value = static_cast<float>(stream.normal());
  const Linear fp32(48, 64, weight, false), w8a8(48, 64, weight, true);
  std::vector<float> y_fp32(5 * 48), y_w8a8(5 * 48);
  fp32.forward(x.data(), 5, y_fp32.data());
  w8a8.forward(x.data(), 5, y_w8a8.data());
  const double error = rms_ratio(y_w8a8, y_fp32);
  EXPECT_GT(error, 0.0);  // it really quantises
  EXPECT_LT(error, 3e-2);
}

TEST(Linear, QuantizeRowMapsTheLargestMagnitudeTo127) {
  const std::vector<float> row = {0.5f, -2.0f, 1.0f, 0.0f};
  std::vector<int8_t> out(4);
  EXPECT_FLOAT_EQ(quantize_row_int8(row, out), 2.0f / 127.0f);
  EXPECT_EQ(out, (std::vector<int8_t>{32, -127, 64, 0}));
}

TEST(StateCache, RoundTripsPerDtype) {
  LayerState state;
  state.recurrent = {1.0f, -0.5f, 0.25f, 3.0f, 0.001f, -7.0f, 2.0f, 0.0f};
  state.conv = {1.5f, 2.5f};
  for (CacheDType dtype : {CacheDType::kF32, CacheDType::kBf16, CacheDType::kInt8}) {
    StateCache cache(dtype, 2, 3, 4);
    cache.store(1, 2, state);
    LayerState loaded;
    cache.load(1, 2, loaded);
    EXPECT_EQ(loaded.conv, state.conv);
    for (size_t idx = 0; idx < state.recurrent.size(); ++idx) {
      const float value = state.recurrent[idx];
      // f32 exact; bf16 within half a unit of its 8-bit significand; int8 within half a step of
      // the row's scale (max |row| / 127).
      const float row_max = idx < 4 ? 3.0f : 7.0f;
      if (dtype == CacheDType::kF32) {
        EXPECT_EQ(loaded.recurrent[idx], value);
      } else if (dtype == CacheDType::kBf16) {
        EXPECT_NEAR(loaded.recurrent[idx], value, std::fabs(value) / 256);
      } else {
        EXPECT_NEAR(loaded.recurrent[idx], value, row_max / 254 + 1e-7);
      }
    }
  }
}

TEST(StateCache, MissingLayerIsAnErrorNamingRequestAndLayer) {
  StateCache cache(CacheDType::kF32, 2, 3, 4);
  cache.store(0, 0, LayerState{{1, 2, 3, 4}, {}});
  EXPECT_EQ(cache.missing_layers(0), (std::vector<int64_t>{1, 2}));
  LayerState loaded;
  try {
    cache.load(1, 2, loaded);
    FAIL() << "expected an error";
  } catch (const loupe::Error& error) {
    EXPECT_NE(error.message().find("request 1, layer 2"), std::string::npos) << error.message();
  }
  EXPECT_THROW(cache.store(2, 0, LayerState{}), loupe::Error);
}

TEST(Model, EmbedRejectsTokensOutsideTheVocabulary) {
  const Model model(small_config());
  const std::vector<int32_t> tokens = {1, 97};
  EXPECT_THROW(model.embed(tokens), loupe::Error);
}

// prefill(T) then one decode step of token T must give the logits prefill(T + 1) gives for its
// last token: conv history, KDA state and gates carry over exactly between the two kernels.
TEST(Model, PrefillThenDecodeMatchesLongerPrefill) {
  for (bool w8a8 : {false, true}) {
    ModelConfig config = small_config();
    config.w8a8 = w8a8;
    const Model model(config);
    const int64_t requests = 2, tokens = 40;
    const std::vector<int32_t> long_prompts =
        generate_prompts(requests, tokens + 1, config.vocab, 9);
    std::vector<int32_t> prompts, next_tokens;
    for (int64_t request = 0; request < requests; ++request) {
      auto begin = long_prompts.begin() + request * (tokens + 1);
      prompts.insert(prompts.end(), begin, begin + tokens);
      next_tokens.push_back(*(begin + tokens));
    }
    StateCache long_cache(CacheDType::kF32, requests, config.layers, config.head_dim);
    const std::vector<float> expected =
        model.prefill(long_prompts, requests, tokens + 1, long_cache);
    StateCache cache(CacheDType::kF32, requests, config.layers, config.head_dim);
    model.prefill(prompts, requests, tokens, cache);
    const std::vector<int64_t> ids = {0, 1};
    const std::vector<float> decoded = model.decode_step(next_tokens, ids, cache);
    EXPECT_LT(rms_ratio(decoded, expected), 1e-4) << (w8a8 ? "w8a8" : "fp32");
  }
}

TEST(Model, CpPrefillMatchesChunkPrefill) {
  ModelConfig config = small_config();
  const Model chunk_model(config);
  config.cp_shards = 3;
  const Model cp_model(config);
  const std::vector<int32_t> prompts = generate_prompts(1, 256, config.vocab, 4);
  StateCache chunk_cache(CacheDType::kF32, 1, config.layers, config.head_dim);
  StateCache cp_cache(CacheDType::kF32, 1, config.layers, config.head_dim);
  const std::vector<float> expected = chunk_model.prefill(prompts, 1, 256, chunk_cache);
  const std::vector<float> actual = cp_model.prefill(prompts, 1, 256, cp_cache);
  EXPECT_LT(rms_ratio(actual, expected), 1e-4);
}

TEST(Model, SameSeedSameWeightsOtherSeedOtherLogits) {
  const std::vector<int32_t> prompts = generate_prompts(1, 16, 97, 1);
  auto run = [&](uint64_t seed) {
    ModelConfig config = small_config();
    config.seed = seed;
    const Model model(config);
    StateCache cache(CacheDType::kF32, 1, config.layers, config.head_dim);
    return model.prefill(prompts, 1, 16, cache);
  };
  EXPECT_EQ(run(5), run(5));
  EXPECT_NE(run(5), run(6));
}

TEST(Model, GenerateProducesTokensInsideTheVocabulary) {
  const ModelConfig config = small_config();
  const Model model(config);
  const std::vector<int32_t> prompts = generate_prompts(2, 24, config.vocab, 2);
  const Generation generation = generate(model, prompts, 2, 24, 5, CacheDType::kF32);
  ASSERT_EQ(generation.tokens.size(), 10u);
  ASSERT_EQ(generation.logits.size(), 10u * config.vocab);
  for (int32_t token : generation.tokens) {
    EXPECT_GE(token, 0);
    EXPECT_LT(token, config.vocab);
  }
  const std::vector<int32_t> again = argmax_rows(generation.logits, config.vocab);
  EXPECT_EQ(again, generation.tokens);
}

}  // namespace
}  // namespace kda::model
