// Probes of the disaggregated server (kda/serve/server.hpp), registered into the `kda` subject:
//   scenario serve                       one server run; metrics and the loupe trace
//   check    disaggregated_vs_colocated  tokens and logits of disaggregated serving against the
//                                        same requests served in one worker; `fault` injects a
//                                        dropped layer or swapped requests with verification off,
//                                        which the check must then catch
//   scenario lock_handoff                the interpreter lock's forced switch alone: a holder
//   working
//                                        in short steps with an eval-breaker point after each, a
//                                        waiter asking for the lock; how long the waiter waits
//   check    transfer_verifier           the decode side's digest verification against the truth of
//                                        which packets were tampered with: a verifier that accepts
//                                        a relabelled, corrupted, swapped or repeated state fails
//                                        it, each packet alone and in whole transfers through one
//                                        intake (a verifier that trusts what it verified before)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kda/serve/interpreter_lock.hpp"
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
      state.record_metric("transfer_tail_s", s.transfer_tail_s);
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

// The lock's contract apart from any workload: a thread that has waited the switch interval gets
// the lock at the holder's next eval-breaker point. The server's own scenarios take the lock in
// holds shorter than the interval once the dispatch releases it, so a fault in the forced switch
// itself (a holder that drops the lock and takes it straight back) changes nothing they measure;
// here the holder works for `hold_ms` in steps of `step_us` with a breaker point after each, and
// the waiter's wait is what the switch gives it.
LOUPE_SCENARIO(lock_handoff)
    .description(
        "the interpreter lock's forced switch: a holder working in steps with an eval-breaker "
        "point after each, a waiter asking for the lock; records the waiter's wait per handoff")
    .param("handoffs", 8, {}, "handoffs per run")
    .param("hold_ms", 40, {}, "how long the holder works per handoff unless it is made to yield")
    .param("step_us", 200, {}, "the holder's work between eval-breaker points")
    .param("switch_interval_us", 5000)
    .body([](loupe::ScenarioState& state) {
      const loupe::Point& point = state.point();
      const int64_t handoffs = point.get_int("handoffs");
      const int64_t hold_ns = point.get_int("hold_ms") * 1'000'000;
      const int64_t step_ns = point.get_int("step_us") * 1'000;
      const int64_t interval_ns = point.get_int("switch_interval_us") * 1'000;
      if (handoffs < 1 || hold_ns <= 0 || step_ns <= 0 || interval_ns <= 0) {
        throw loupe::Error(loupe::ErrorCode::kUsage,
                           "lock_handoff: handoffs, hold_ms, step_us and switch_interval_us must "
                           "be positive",
                           "e.g. --set handoffs=8 --set hold_ms=40");
      }
      kda::serve::InterpreterLock lock{std::chrono::nanoseconds(interval_ns)};
      std::vector<double> waits;
      for (int64_t handoff = 0; handoff < handoffs; ++handoff) {
        std::atomic<bool> holding{false};
        std::thread holder([&] {
          lock.acquire();
          holding.store(true, std::memory_order_release);
          const int64_t end = kda::serve::now_ns() + hold_ns;
          while (kda::serve::now_ns() < end) {
            kda::serve::spin_until(std::min(end, kda::serve::now_ns() + step_ns));
            lock.yield_if_requested();
          }
          lock.release();
        });
        while (!holding.load(std::memory_order_acquire)) std::this_thread::yield();
        const std::chrono::nanoseconds waited = lock.acquire();
        lock.release();
        holder.join();
        waits.push_back(static_cast<double>(waited.count()) * 1e-9);
      }
      std::vector<double> sorted = waits;
      std::sort(sorted.begin(), sorted.end());
      state.record_metric("handoff_wait_median_s", sorted[sorted.size() / 2]);
      state.record_metric("handoff_wait_max_s", sorted.back());
      state.record_metric("switch_interval_s", static_cast<double>(interval_ns) * 1e-9);
      state.record_metric("forced_switches", static_cast<double>(lock.forced_switches()));
      // One forced switch hands the lock over: the holder drops it and waits for the waiter to
      // take it. More per handoff is a switch that did not hand the lock over.
      state.record_metric(
          "forced_switches_per_handoff",
          static_cast<double>(lock.forced_switches()) / static_cast<double>(handoffs));
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

// The packet as sent (its true labels, the sender's digest) and as it arrives after `tamper`;
// `swap_with` is another state to carry under this packet's label (kSwapContent).
struct InTransit {
  kda::serve::StatePacket sent, arrived;
};
InTransit in_transit(int64_t request, int64_t layer, kda::model::LayerState state, int32_t tamper,
                     int32_t argument, const kda::model::LayerState& swap_with, int64_t requests,
                     int64_t layers) {
  InTransit out;
  out.sent = kda::serve::StatePacket{request, layer, 0, std::move(state)};
  out.sent.digest = kda::serve::state_digest(request, layer, out.sent.state);
  out.arrived = out.sent;
  switch (tamper) {
    case kRelabelRequest:
      out.arrived.request = (request + 1 + argument % (requests - 1)) % requests;
      break;
    case kRelabelLayer:
      out.arrived.layer = (layer + 1 + argument % (layers - 1)) % layers;
      break;
    case kFlipRecurrent:
      flip_bit(out.arrived.state.recurrent, argument);
      break;
    case kFlipConv:
      flip_bit(out.arrived.state.conv, argument);
      break;
    case kSwapContent:
      out.arrived.state = swap_with;
      break;
    default:
      break;
  }
  return out;
}

// Hands a packet to the intake as the transit left it (kRepeat: the intact packet, then the same
// again); true when the intake refused it.
bool refused_by(kda::serve::DecodeIntake& intake, InTransit transit, int32_t tamper) {
  try {
    if (tamper == kRepeat) intake.receive(transit.sent);
    intake.receive(std::move(transit.arrived));
  } catch (const loupe::Error&) {
    return true;
  }
  return false;
}

// About half intact, the rest one of the tamper kinds, and the tamper's argument.
void draw_tamper(std::mt19937_64& generator, int32_t* row) {
  std::uniform_int_distribution<int32_t> any(0, 1 << 30);
  row[0] = any(generator) % 2 == 0 ? kIntact : 1 + any(generator) % (kTamperKinds - 1);
  row[1] = any(generator);
}

// Each packet of "plan" goes to a fresh intake (one cache of `requests` x `layers` slots), so its
// verdict depends on nothing else; then `transfers` whole transfers each go through one intake,
// every (request, layer) state once in the order the server sends them (layer by layer, the
// requests in turn), about half tampered: a verifier must judge every packet afresh, whatever it
// accepted before (one that trusts a layer, a request or a sender once verified passes the first
// part and fails this one).
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
    .param("transfers", 4, {}, "whole transfers, each through one intake")
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
        draw_tamper(generator, row + 2);
      }
      setup.output<int32_t>("rejected", {packets}, {"N"}).tolerance("mismatch_count", 0);
      // The transfers: (transfer, layer, request) in sending order, each a state and a tamper.
      const int64_t transfers = point.get_int("transfers");
      if (transfers < 0) {
        throw loupe::Error(
            loupe::ErrorCode::kUsage,
            "transfer_verifier: transfers must be 0 or more, not " + std::to_string(transfers),
            "each transfer sends every (request, layer) state once");
      }
      const int64_t sent = transfers * layers * requests;
      std::span<float> transfer_states = setup.input<float>(
          "transfer_states", {sent, kVerifierRecurrent + kVerifierConv}, {"P", "state"});
      for (float& value : transfer_states) value = normal(generator);
      std::span<int32_t> transfer_plan =
          setup.input<int32_t>("transfer_plan", {sent, 2}, {"P", "field"});
      for (int64_t packet = 0; packet < sent; ++packet) {
        draw_tamper(generator, transfer_plan.data() + packet * 2);
      }
      setup.output<int32_t>("transfer_rejected", {sent}, {"P"}).tolerance("mismatch_count", 0);
    })
    .reference([](loupe::CheckIo& io) {
      std::span<const int32_t> plan = io.input<int32_t>("plan");
      std::span<int32_t> rejected = io.output<int32_t>("rejected");
      for (size_t packet = 0; packet < rejected.size(); ++packet) {
        rejected[packet] = plan[packet * 4 + 2] == kIntact ? 0 : 1;
      }
      std::span<const int32_t> transfer_plan = io.input<int32_t>("transfer_plan");
      std::span<int32_t> transfer_rejected = io.output<int32_t>("transfer_rejected");
      for (size_t packet = 0; packet < transfer_rejected.size(); ++packet) {
        transfer_rejected[packet] = transfer_plan[packet * 2] == kIntact ? 0 : 1;
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
        // The sender's packet (its digest over the true labels and bytes), in transit, then a
        // fresh decode side.
        InTransit transit =
            in_transit(row[0], row[1], state_of_row(states, packet), row[2], row[3],
                       state_of_row(states, (packet + 1) % packets), requests, layers);
        kda::model::StateCache cache(kda::model::CacheDType::kF32, requests, layers, 16);
        kda::serve::DecodeIntake intake(cache, /*verify=*/true);
        rejected[packet] = refused_by(intake, std::move(transit), row[2]) ? 1 : 0;
      }
      std::span<const float> transfer_states = io.input<float>("transfer_states");
      std::span<const int32_t> transfer_plan = io.input<int32_t>("transfer_plan");
      std::span<int32_t> transfer_rejected = io.output<int32_t>("transfer_rejected");
      const int64_t per_transfer = requests * layers;
      const int64_t sent = static_cast<int64_t>(transfer_rejected.size());
      for (int64_t first = 0; first < sent; first += per_transfer) {
        kda::model::StateCache cache(kda::model::CacheDType::kF32, requests, layers, 16);
        kda::serve::DecodeIntake intake(cache, /*verify=*/true);
        for (int64_t packet = first; packet < first + per_transfer; ++packet) {
          const int64_t layer = (packet - first) / requests, request = (packet - first) % requests;
          const int32_t* row = transfer_plan.data() + packet * 2;
          InTransit transit =
              in_transit(request, layer, state_of_row(transfer_states, packet), row[0], row[1],
                         state_of_row(transfer_states, first + (packet - first + 1) % per_transfer),
                         requests, layers);
          transfer_rejected[packet] = refused_by(intake, std::move(transit), row[0]) ? 1 : 0;
        }
      }
    });

}  // namespace
