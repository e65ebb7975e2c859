// The server end to end: disaggregated serving equals colocated serving exactly; every transfer
// fault is an error naming the request and the layer, and with verification off the same faults
// change the generated logits (what disaggregated_vs_colocated catches).
#include "kda/serve/server.hpp"

#include <gtest/gtest.h>

#include <string>

#include "kda/serve/transfer.hpp"
#include "loupe/error.hpp"

namespace kda::serve {
namespace {

ServeOptions quick_options(Mode mode) {
  ServeOptions options;
  options.mode = mode;
  options.model.layers = 3;
  options.model.hidden = 64;
  options.model.head_dim = 32;
  options.model.expert_hidden = 64;
  options.requests = 2;
  options.prompt_len = 24;
  options.new_tokens = 4;
  options.dispatch_wait_us = 200;
  options.bookkeeping_us = 50;
  options.seed = 11;
  return options;
}

std::string error_of(const ServeOptions& options) {
  try {
    run_server(options);
  } catch (const loupe::Error& error) {
    return error.message();
  }
  return "";
}

TEST(Server, DisaggregatedEqualsColocated) {
  for (bool holds_lock : {false, true}) {
    ServeOptions options = quick_options(Mode::kDisaggregated);
    options.dispatch_holds_lock = holds_lock;
    const ServeResult result = run_server(options);
    const model::Generation colocated = serve_colocated(options);
    EXPECT_EQ(result.generation.tokens, colocated.tokens);
    EXPECT_EQ(result.generation.logits, colocated.logits);
    EXPECT_EQ(result.states_received, 6);
    EXPECT_EQ(result.states_verified, 6);
    EXPECT_EQ(result.tokens, 8);
  }
}

TEST(Server, DecodeModeEqualsColocated) {
  const ServeOptions options = quick_options(Mode::kDecode);
  const ServeResult result = run_server(options);
  EXPECT_EQ(result.generation.tokens, serve_colocated(options).tokens);
}

TEST(Server, PrefillTransferVerifiesEveryState) {
  const ServeResult result = run_server(quick_options(Mode::kPrefillTransfer));
  EXPECT_EQ(result.states_received, 6);
  EXPECT_EQ(result.states_verified, 6);
  EXPECT_EQ(result.tokens, 48);
  EXPECT_TRUE(result.generation.tokens.empty());
  // Every layer went through the queue to the transfer thread once; prefill alone uses none.
  EXPECT_EQ(result.layer_queue.items, 3);
  EXPECT_EQ(run_server(quick_options(Mode::kPrefill)).layer_queue.items, 0);
}

TEST(Server, DroppedLayerIsAnErrorNamingRequestAndLayer) {
  for (Mode mode : {Mode::kPrefillTransfer, Mode::kDisaggregated}) {
    ServeOptions options = quick_options(mode);
    options.drop_state_layer = 1;
    const std::string message = error_of(options);
    EXPECT_NE(message.find("request 0, layer 1: the state never arrived"), std::string::npos)
        << message;
  }
}

TEST(Server, SwappedRequestsAreADigestMismatchNamingRequestAndLayer) {
  ServeOptions options = quick_options(Mode::kDisaggregated);
  options.swap_requests = true;
  const std::string message = error_of(options);
  EXPECT_NE(message.find("request 1, layer 0: digest"), std::string::npos) << message;
}

TEST(Server, UnverifiedFaultsChangeTheLogits) {
  const model::Generation colocated = serve_colocated(quick_options(Mode::kDisaggregated));
  ServeOptions dropped = quick_options(Mode::kDisaggregated);
  dropped.drop_state_layer = 2;
  dropped.verify_digests = false;
  EXPECT_NE(run_server(dropped).generation.logits, colocated.logits);
  ServeOptions swapped = quick_options(Mode::kDisaggregated);
  swapped.swap_requests = true;
  swapped.verify_digests = false;
  EXPECT_NE(run_server(swapped).generation.logits, colocated.logits);
}

TEST(Server, RejectsBadOptionsWithUsageErrors) {
  ServeOptions options = quick_options(Mode::kPrefill);
  options.drop_state_layer = 0;  // no transfer in this mode
  EXPECT_THROW(run_server(options), loupe::Error);
  options = quick_options(Mode::kDisaggregated);
  options.drop_state_layer = 3;  // only layers 0..2
  EXPECT_THROW(run_server(options), loupe::Error);
  EXPECT_THROW(parse_mode("prefill+decode"), loupe::Error);
  EXPECT_EQ(parse_mode("prefill+transfer"), Mode::kPrefillTransfer);
}

TEST(Server, GivenPromptsReplaceTheSeededOnesAndAreChecked) {
  ServeOptions options = quick_options(Mode::kDisaggregated);
  const model::Generation seeded = run_server(options).generation;
  options.prompts = model::generate_prompts(options.requests, options.prompt_len,
                                            options.model.vocab, options.seed);
  EXPECT_EQ(run_server(options).generation.tokens, seeded.tokens);
  options.prompts.pop_back();
  EXPECT_THROW(run_server(options), loupe::Error);
}

TEST(Server, JsonCarriesWallTimeThroughputAndStages) {
  const ServeOptions options = quick_options(Mode::kPrefill);
  const std::string json = result_json(options, run_server(options));
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
  for (const char* key :
       {"\"wall_s\": ", "\"tokens_per_s\": ", "\"stages\": {", "\"mode\": \"prefill\"",
        "\"moe_dispatch_s\": ", "\"layer_queue\": {\"items\": 0, ", "\"blocked_residence_s\": "}) {
    EXPECT_NE(json.find(key), std::string::npos) << key;
  }
}

TEST(Transfer, DigestCoversRequestLayerAndBytes) {
  model::LayerState state{{1.0f, 2.0f}, {3.0f}};
  const uint64_t digest = state_digest(0, 0, state);
  EXPECT_NE(digest, state_digest(1, 0, state));
  EXPECT_NE(digest, state_digest(0, 1, state));
  state.conv[0] = 3.5f;
  EXPECT_NE(digest, state_digest(0, 0, state));
}

TEST(Transfer, IntakeRejectsADuplicate) {
  model::StateCache cache(model::CacheDType::kF32, 1, 1, 2);
  DecodeIntake intake(cache, true);
  const model::LayerState state{{1.0f, 2.0f}, {}};
  intake.receive(StatePacket{0, 0, state_digest(0, 0, state), state});
  EXPECT_THROW(intake.receive(StatePacket{0, 0, state_digest(0, 0, state), state}), loupe::Error);
  intake.finish(model::LayerState{});
  EXPECT_TRUE(intake.wait_complete());
  EXPECT_EQ(intake.verified(), 1);
}

TEST(Transfer, FinishNamesTheMissingLayerOrFillsZerosWhenUnverified) {
  const model::LayerState zero{{0.0f, 0.0f}, {}};
  const model::LayerState state{{1.0f, 2.0f}, {}};
  model::StateCache verified_cache(model::CacheDType::kF32, 1, 2, 2);
  DecodeIntake verified(verified_cache, true);
  verified.receive(StatePacket{0, 0, state_digest(0, 0, state), state});
  try {
    verified.finish(zero);
    FAIL() << "expected an error";
  } catch (const loupe::Error& error) {
    EXPECT_NE(error.message().find("request 0, layer 1: the state never arrived"),
              std::string::npos)
        << error.message();
  }
  model::StateCache unverified_cache(model::CacheDType::kF32, 1, 2, 2);
  DecodeIntake unverified(unverified_cache, false);
  unverified.receive(StatePacket{0, 0, 0, state});  // a wrong digest passes unverified
  unverified.finish(zero);
  EXPECT_FALSE(unverified.wait_complete());
  model::LayerState loaded;
  unverified_cache.load(0, 1, loaded);
  EXPECT_EQ(loaded.recurrent, zero.recurrent);
}

}  // namespace
}  // namespace kda::serve
