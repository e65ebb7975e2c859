// kda/serve/server.hpp — a prefill/decode-disaggregated KDA server in one process, on real
// threads, that reproduces incident 2 of reference/kda.md.
//
//   prefill worker   per layer: attention (the layer's states are then final and handed to the
//                    transfer thread, a flow in the trace) → moe_dispatch (gather, then poll a
//                    simulated remote counter until it reports the received-token count; the
//                    latency is a parameter; interpreter_lock.hpp's poll_until says why the poll
//                    sleeps) → experts → moe_combine. It runs holding the interpreter lock, as a
//                    Python thread holds the GIL, and honours switch requests between stages.
//                    With dispatch_holds_lock it waits holding the lock (the incident); otherwise
//                    it releases the lock around the wait (the fix).
//   transfer thread  per finished layer and request: bookkeeping under the interpreter lock
//                    (digest of the state, padded to bookkeeping_us of lock hold), then a
//                    real copy into the decode side's StateCache through DecodeIntake, which
//                    verifies the digest.
//   decode worker    once every state arrived and was verified, greedy decode of new_tokens per
//                    request.
// Modes: prefill (the worker alone), prefill+transfer (worker and transfer thread; wall time ends
// when the last state is verified in the cache), decode (decode alone from states a colocated
// prefill put into the cache beforehand, untimed), disaggregated (all three threads end to end).
// Zones: prefill_layer, moe_dispatch, experts, moe_combine, kv_transfer_layer, decode_step; flows
// "layer_state" from each layer's prefill to its transfer; the lock is "interpreter_lock".
// Errors (a digest mismatch, a missing layer) are rethrown by run_server as loupe::Error naming the
// request and the layer. Thread-safety: run_server may be called from one thread at a time
// (trace recording is process-wide).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kda/model/model.hpp"
#include "kda/serve/handoff.hpp"

namespace kda::serve {

enum class Mode { kPrefill, kPrefillTransfer, kDecode, kDisaggregated };

std::string_view mode_name(Mode mode);
// Throws loupe::Error(kUsage) unless `name` is prefill, prefill+transfer, decode or
// disaggregated.
Mode parse_mode(std::string_view name);

struct ServeOptions {
  Mode mode = Mode::kPrefill;
  bool dispatch_holds_lock = false;
  model::ModelConfig model;  // model.layers is the server's --layers
  int64_t requests = 2;
  int64_t prompt_len = 32;
  int64_t new_tokens = 8;
  uint64_t seed = 0;  // of the prompts; the weights come from model.seed
  // The prompts (requests, prompt_len); empty: generated from `seed`.
  std::vector<int32_t> prompts;
  // Latency of the simulated remote counter each dispatch spins on, per layer.
  int64_t dispatch_wait_us = 10000;
  // Interpreter-lock work of the transfer thread per (layer, request).
  int64_t bookkeeping_us = 2500;
  int64_t switch_interval_us = 5000;  // CPython's default sys.getswitchinterval()
  model::CacheDType cache_dtype = model::CacheDType::kF32;
  // Fault injection: skip this layer's states (−1: none); exchange the labels of requests 0 and 1
  // after the digest was computed.
  int64_t drop_state_layer = -1;
  bool swap_requests = false;
  bool verify_digests = true;
  std::string trace_path;  // record a loupe trace here when not empty

  // Throws loupe::Error(kUsage) naming the option when a value is out of range.
  void validate() const;
};

// Seconds spent per stage, summed over layers and steps (zero for stages a mode does not run).
struct StageTimes {
  double attention_s = 0, moe_dispatch_s = 0, dispatch_wait_s = 0, experts_s = 0, moe_combine_s = 0,
         prefill_lock_wait_s = 0, prefill_s = 0;
  double transfer_s = 0, transfer_bookkeeping_s = 0, transfer_lock_wait_s = 0;
  // How long the transfer thread ran on after the prefill worker finished (0 when it finished
  // first): the part of the state transfer prefill did not hide, what a disaggregated decode
  // waits for after prefill.
  double transfer_tail_s = 0;
  double decode_s = 0;
};

struct ServeResult {
  double wall_s = 0;
  double tokens_per_s = 0;  // prompt tokens (prefill modes) or generated tokens, per wall second
  int64_t tokens = 0;       // the tokens tokens_per_s counts
  StageTimes stages;
  int64_t states_received = 0, states_verified = 0;
  uint64_t forced_switches = 0;  // switch requests the prefill worker honoured
  uint64_t trace_events = 0;
  // How long finished layers sat in the queue from the prefill worker to the transfer thread, and
  // how much of it while the transfer thread was waiting for work (handoff.hpp); modes with a
  // transfer only.
  HandoffStats layer_queue;
  // Generated tokens (requests, new_tokens) and their logits (requests, new_tokens, vocab):
  // decode and disaggregated modes only.
  model::Generation generation;
};

ServeResult run_server(const ServeOptions& options);

// The same requests served in one worker without transfer (model::generate), for
// disaggregated_vs_colocated.
model::Generation serve_colocated(const ServeOptions& options);

// One JSON object: mode, options, wall_s, tokens_per_s, stages, transfer counts, layer_queue.
std::string result_json(const ServeOptions& options, const ServeResult& result);

}  // namespace kda::serve
