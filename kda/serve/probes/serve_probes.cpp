// Probes of the disaggregated server (kda/serve/server.hpp), registered into the `kda` subject:
//   scenario serve                       one server run; metrics and the loupe trace
//   check    disaggregated_vs_colocated  tokens and logits of disaggregated serving against the
//                                        same requests served in one worker; `fault` injects a
//                                        dropped layer or swapped requests with verification off,
//                                        which the check must then catch
#include <algorithm>
#include <string>

#include "kda/serve/server.hpp"
#include "loupe/probe.hpp"

namespace {

using kda::serve::Mode;
using kda::serve::ServeOptions;

LOUPE_SCENARIO(serve)
    .description(
        "kda serve: prefill / prefill+transfer / decode / disaggregated, with or without the MoE "
        "dispatch holding the interpreter lock (incident 2); records wall_s, tokens_per_s, stage "
        "times and a loupe trace")
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

}  // namespace
