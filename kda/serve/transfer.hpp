// kda/serve/transfer.hpp — what crosses from the prefill side to the decode side, and its checks.
//
// Each finished layer's state of each request travels as a StatePacket: the request and layer it
// belongs to, a digest the sender computed over (request, layer, state bytes), and a copy of the
// state. The decode side's DecodeIntake recomputes the digest from the packet's labels and bytes
// before the state enters its StateCache, so a corrupted state or one delivered to the wrong
// request is an error naming the request and the layer; after the transfer ends, a layer that
// never arrived is one too. (Engines have shipped the silent version of this bug: a recurrent
// state that was never transferred still decodes fluent text.)
// With verification off (the fault-injection runs that show the disaggregated_vs_colocated check
// catching the same faults), packets are stored as labelled and missing layers decode from zero.
// Thread-safety: DecodeIntake is safe to call from any thread (one internal mutex).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "kda/model/state_cache.hpp"

namespace kda::serve {

// FNV-1a (64 bit) over the request, the layer and the state's bytes (recurrent, then conv).
uint64_t state_digest(int64_t request, int64_t layer, const model::LayerState& state);

struct StatePacket {
  int64_t request = 0;
  int64_t layer = 0;
  uint64_t digest = 0;
  model::LayerState state;
};

class DecodeIntake {
 public:
  DecodeIntake(model::StateCache& cache, bool verify);

  // Verifies (when on) and stores one packet. Throws loupe::Error(kInput) naming the request and
  // the layer on a digest mismatch, a duplicate, or a label outside the cache.
  void receive(StatePacket packet);
  // The sender is done: from now on waiters stop waiting. With verification on, throws
  // loupe::Error(kInput) naming the first request and layer that never arrived; with it off,
  // stores `zero_state` (zeros of the right sizes) for them.
  void finish(const model::LayerState& zero_state);
  // The sender failed (its error is recorded elsewhere): wake waiters without checking anything.
  void abandon();
  // Blocks until finish() or abandon() ran; returns whether every layer of every request arrived
  // (false after abandon(), or with verification off when zero states filled the gaps). After it
  // returns the cache belongs to the caller.
  bool wait_complete();

  int64_t received() const;
  int64_t verified() const;

 private:
  model::StateCache& cache_;
  const bool verify_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int64_t received_ = 0, verified_ = 0;
  bool finished_ = false;
};

}  // namespace kda::serve
