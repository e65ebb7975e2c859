// Probes of the disaggregated server (kda/serve/server.hpp), registered into the `kda` subject:
//   scenario serve                       one server run; metrics and the loupe trace
//   check    disaggregated_vs_colocated  tokens and logits of disaggregated serving against the
//                                        same requests served in one worker; `fault` injects a
//                                        dropped layer or swapped requests with verification off,
//                                        which the check must then catch
//   check    transfer_verifier           the decode side's digest verification against the truth of
//                                        which packets were tampered with: a verifier that accepts
//                                        a relabelled, corrupted, swapped or repeated state fails
//                                        it
#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "kda/serve/server.hpp"
#include "kda/serve/transfer.hpp"
#include "loupe/error.hpp"
#include "loupe/probe.hpp"

namespace {

using kda::serve::Mode;
using kda::serve::ServeOptions;

LOUPE_SCENARIO(serve)
    .description(
        "kda serve: prefill / prefill+transfer / decode / disaggregated, with or without the MoE "
        "dispatch holding the interpreter lock (incident 2); records wall_s, tokens_per_s, stage "
        "times, the layer queue's residence and a loupe trace")
    .param("mode", "prefill", {"prefill", "prefill+transfer", "decode", "disaggregated"})
    .param("dispatch_holds_lock", false, {}, "the dispatch spins holding the interpreter lock")
    .param("layers", 12)
    .param("requests", 2)
    .param("prompt_len", 32)
    .param("new_tokens", 8)
    .param("dispatch_wait_us", 10000, {}, "latency of the remote counter each dispatch waits on")
    .param("bookkeeping_us", 2500, {}, "interpreter-lock work per transferred (layer, request)")
    .body([](loupe::ScenarioState& state) {
      const loupe::Point& point = state.point();
      ServeOptions options;
      options.mode = kda::serve::parse_mode(point.get_string("mode"));
      options.dispatch_holds_lock = point.get_bool("dispatch_holds_lock");
      options.model.layers = point.get_int("layers");
      options.requests = point.get_int("requests");
      options.prompt_len = point.get_int("prompt_len");
      options.new_tokens = point.get_int("new_tokens");
      options.dispatch_wait_us = point.get_int("dispatch_wait_us");
      options.bookkeeping_us = point.get_int("bookkeeping_us");
      options.seed = state.seed();
      options.trace_path = (state.out_dir() / "trace.loupetrace").string();
      const kda::serve::ServeResult result = kda::serve::run_server(options);
      state.add_trace("trace.loupetrace");
      state.record_metric("wall_s", result.wall_s);
      state.record_metric("tokens_per_s", result.tokens_per_s);
      const kda::serve::StageTimes& s = result.stages;
      state.record_metric("attention_s", s.attention_s);
      state.record_metric("moe_dispatch_s", s.moe_dispatch_s);
      state.record_metric("dispatch_wait_s", s.dispatch_wait_s);
      state.record_metric("experts_s", s.experts_s);
      state.record_metric("moe_combine_s", s.moe_combine_s);
      state.record_metric("prefill_s", s.prefill_s);
      state.record_metric("prefill_lock_wait_s", s.prefill_lock_wait_s);
      state.record_metric("transfer_s", s.transfer_s);
      state.record_metric("transfer_lock_wait_s", s.transfer_lock_wait_s);
      state.record_metric("decode_s", s.decode_s);
      state.record_metric("states_verified", static_cast<double>(result.states_verified));
      // The handoff from the prefill worker to the transfer thread (kda/serve/handoff.hpp).
      const kda::serve::HandoffStats& queue = result.layer_queue;
      state.record_metric("layer_queue_items", static_cast<double>(queue.items));
      state.record_metric("layer_queue_residence_median_s", queue.residence_median_s);
      state.record_metric("layer_queue_residence_p90_s", queue.residence_p90_s);
      state.record_metric("layer_queue_residence_max_s", queue.residence_max_s);
      state.record_metric("layer_queue_residence_s", queue.residence_s);
      state.record_metric("layer_queue_idle_residence_s", queue.idle_residence_s);
      state.record_metric("layer_queue_idle_residence_max_s", queue.idle_residence_max_s);
      state.record_metric("layer_queue_blocked_residence_s", queue.blocked_residence_s);
      state.record_metric("layer_queue_blocked_residence_max_s", queue.blocked_residence_max_s);
      state.record_metric("layer_queue_consumer_times_known", queue.consumer_times_known ? 1 : 0);
    });

ServeOptions check_options(const loupe::Point& point) {
  ServeOptions options;
  options.mode = Mode::kDisaggregated;
  options.model.layers = point.get_int("layers");
  options.requests = point.get_int("requests");
  options.prompt_len = point.get_int("prompt_len");
  options.new_tokens = point.get_int("new_tokens");
  // Integrity, not timing, is under study: short waits keep the check fast.
  options.dispatch_wait_us = 200;
  options.bookkeeping_us = 50;
  return options;
}

void write_generation(loupe::CheckIo& io, const kda::model::Generation& generation) {
  std::span<int32_t> tokens = io.output<int32_t>("tokens");
  std::span<float> logits = io.output<float>("logits");
  std::copy(generation.tokens.begin(), generation.tokens.end(), tokens.begin());
  std::copy(generation.logits.begin(), generation.logits.end(), logits.begin());
}

std::vector<int32_t> prompts_of(loupe::CheckIo& io) {
  std::span<const int32_t> prompts = io.input<int32_t>("prompts");
  return std::vector<int32_t>(prompts.begin(), prompts.end());
}

LOUPE_CHECK(disaggregated_vs_colocated)
    .description(
        "disaggregated serving (prefill worker, verified per-layer state transfer, decode worker) "
        "against the same requests served in one worker: tokens exactly, logits to rounding; "
        "fault=drop_layer|swap_requests injects a transfer fault with digests off")
    .param("layers", 4)
    .param("requests", 2)
    .param("prompt_len", 32)
    .param("new_tokens", 6)
    .param("fault", "none", {"none", "drop_layer", "swap_requests"},
           "a transfer fault, injected with digest verification off")
    .inputs([](loupe::CheckSetup& setup) {
      const loupe::Point& point = setup.point();
      const int64_t requests = point.get_int("requests"), tokens = point.get_int("prompt_len");
      const int64_t new_tokens = point.get_int("new_tokens");
      const int64_t vocab = kda::model::ModelConfig{}.vocab;
      const std::vector<int32_t> prompts =
          kda::model::generate_prompts(requests, tokens, vocab, setup.seed());
      std::span<int32_t> input = setup.input<int32_t>("prompts", {requests, tokens}, {"R", "T"});
      std::copy(prompts.begin(), prompts.end(), input.begin());
      setup.output<int32_t>("tokens", {requests, new_tokens}, {"R", "S"})
          .along("S")
          .tolerance("mismatch_count", 0);
      // Both paths run the same kernels in the same order: anything above rounding is a fault.
      setup.output<float>("logits", {requests, new_tokens, vocab}, {"R", "S", "vocab"})
          .along("S")
          .tolerance("rms_ratio", 1e-6);
    })
    .reference([](loupe::CheckIo& io) {
      ServeOptions options = check_options(io.point());
      options.prompts = prompts_of(io);
      write_generation(io, kda::serve::serve_colocated(options));
    })
    .candidate([](loupe::CheckIo& io) {
      ServeOptions options = check_options(io.point());
      options.prompts = prompts_of(io);
      const std::string& fault = io.point().get_string("fault");
      if (fault != "none") {
        options.verify_digests = false;
        if (fault == "drop_layer") options.drop_state_layer = options.model.layers / 2;
        if (fault == "swap_requests") options.swap_requests = true;
      }
      write_generation(io, kda::serve::run_server(options).generation);
    });

// What happens to a packet on its way to the decode side (transfer_verifier's input "tamper").
enum Tamper : int32_t {
  kIntact = 0,
  kRelabelRequest = 1,  // delivered under another request's label
  kRelabelLayer = 2,    // delivered under another layer's label
  kFlipRecurrent = 3,   // one bit of the recurrent state flipped
  kFlipConv = 4,        // one bit of the convolution state flipped
  kSwapContent = 5,     // carries another request's state under its own label and digest
  kRepeat = 6,          // the intact packet arrives twice
  kTamperKinds = 7,
};

// The packets' layout: each row of "states" is one (request, layer) state, recurrent then conv.
constexpr int64_t kVerifierRecurrent = 2 * 16 * 16;  // (HV, K, V) of a small model
constexpr int64_t kVerifierConv = 3 * 3 * 2 * 16;    // (conv_width − 1, q + k + v channels)

kda::model::LayerState state_of_row(std::span<const float> states, int64_t row) {
  const int64_t width = kVerifierRecurrent + kVerifierConv;
  kda::model::LayerState state;
  const float* begin = states.data() + row * width;
  state.recurrent.assign(begin, begin + kVerifierRecurrent);
  state.conv.assign(begin + kVerifierRecurrent, begin + width);
  return state;
}

void flip_bit(std::vector<float>& values, int32_t where) {
  const size_t index = static_cast<size_t>(where) % values.size();
  uint32_t bits = 0;
  std::memcpy(&bits, &values[index], sizeof(bits));
  bits ^= 1u << (static_cast<uint32_t>(where) % 23u);  // a mantissa bit: the value stays finite
  std::memcpy(&values[index], &bits, sizeof(bits));
}

// Every packet goes to a fresh intake (one cache of `requests` x `layers` slots), so one packet's
// verdict never depends on another's.
LOUPE_CHECK(transfer_verifier)
    .description(
        "the decode side's state verification (sender's digest, DecodeIntake) against the truth "
        "of which packets were tampered with in transit: relabelled to another request or layer, "
        "a bit flipped in the recurrent or convolution state, another request's state under this "
        "label, or the same packet twice; every tampered packet must be rejected and every intact "
        "one accepted")
    .param("packets", 128)
    .param("requests", 4)
    .param("layers", 6)
    .inputs([](loupe::CheckSetup& setup) {
      const loupe::Point& point = setup.point();
      const int64_t packets = point.get_int("packets"), requests = point.get_int("requests");
      const int64_t layers = point.get_int("layers");
      if (requests < 2 || layers < 2) {
        throw loupe::Error(loupe::ErrorCode::kUsage,
                           "transfer_verifier: requests and layers must be at least 2 (a packet is "
                           "relabelled to another one)");
      }
      std::mt19937_64 generator(setup.seed());
      std::normal_distribution<float> normal;
      std::span<float> states = setup.input<float>(
          "states", {packets, kVerifierRecurrent + kVerifierConv}, {"N", "state"});
      for (float& value : states) value = normal(generator);
      // (request, layer, tamper kind, tamper argument) per packet; about half arrive intact.
      std::span<int32_t> plan = setup.input<int32_t>("plan", {packets, 4}, {"N", "field"});
      std::uniform_int_distribution<int32_t> any(0, 1 << 30);
      for (int64_t packet = 0; packet < packets; ++packet) {
        int32_t* row = plan.data() + packet * 4;
        row[0] = static_cast<int32_t>(any(generator) % requests);
        row[1] = static_cast<int32_t>(any(generator) % layers);
        row[2] = any(generator) % 2 == 0 ? kIntact : 1 + any(generator) % (kTamperKinds - 1);
        row[3] = any(generator);
      }
      setup.output<int32_t>("rejected", {packets}, {"N"}).tolerance("mismatch_count", 0);
    })
    .reference([](loupe::CheckIo& io) {
      std::span<const int32_t> plan = io.input<int32_t>("plan");
      std::span<int32_t> rejected = io.output<int32_t>("rejected");
      for (size_t packet = 0; packet < rejected.size(); ++packet) {
        rejected[packet] = plan[packet * 4 + 2] == kIntact ? 0 : 1;
      }
    })
    .candidate([](loupe::CheckIo& io) {
      const int64_t requests = io.point().get_int("requests");
      const int64_t layers = io.point().get_int("layers");
      std::span<const float> states = io.input<float>("states");
      std::span<const int32_t> plan = io.input<int32_t>("plan");
      std::span<int32_t> rejected = io.output<int32_t>("rejected");
      const int64_t packets = static_cast<int64_t>(rejected.size());
      for (int64_t packet = 0; packet < packets; ++packet) {
        const int32_t* row = plan.data() + packet * 4;
        const int64_t request = row[0], layer = row[1];
        const int32_t tamper = row[2], argument = row[3];
        // The sender: the digest over the packet's true labels and bytes.
        kda::serve::StatePacket sent{request, layer, 0, state_of_row(states, packet)};
        sent.digest = kda::serve::state_digest(request, layer, sent.state);
        // In transit.
        kda::serve::StatePacket arrived = sent;
        const int64_t other_request = (request + 1 + argument % (requests - 1)) % requests;
        switch (tamper) {
          case kRelabelRequest:
            arrived.request = other_request;
            break;
          case kRelabelLayer:
            arrived.layer = (layer + 1 + argument % (layers - 1)) % layers;
            break;
          case kFlipRecurrent:
            flip_bit(arrived.state.recurrent, argument);
            break;
          case kFlipConv:
            flip_bit(arrived.state.conv, argument);
            break;
          case kSwapContent:
            arrived.state = state_of_row(states, (packet + 1) % packets);
            break;
          default:
            break;
        }
        // The decode side.
        kda::model::StateCache cache(kda::model::CacheDType::kF32, requests, layers, 16);
        kda::serve::DecodeIntake intake(cache, /*verify=*/true);
        bool refused = false;
        try {
          if (tamper == kRepeat) intake.receive(sent);
          intake.receive(std::move(arrived));
        } catch (const loupe::Error&) {
          refused = true;
        }
        rejected[packet] = refused ? 1 : 0;
      }
    });

}  // namespace
