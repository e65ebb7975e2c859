// kda/kernels/cpu/replay.hpp — ReplaySSM-style decode: a checkpoint state plus a ring of the
// last L steps' prepared inputs (normalised k, α = exp(g), β, v).
//
// Each step appends its inputs to the ring, rebuilds the current state from the checkpoint by
// replaying the ring (the replay lives in registers on a GPU; here in a scratch state), writes o
// from it, and writes the state back to the checkpoint only every L steps. The arithmetic per
// token is the merged decode's, so outputs equal plain decode's to rounding for every L.
// Thread-safety: a ReplayDecoder belongs to one thread at a time (step() may use `threads`).
#pragma once

#include <cstdint>
#include <vector>

#include "kda/kernels/cpu/decode.hpp"

namespace kda::kernels::cpu {

template <class Real>
class ReplayDecoder {
 public:
  // `shape.batch` is N. `initial_state` is (N, HV, K, V) or empty (zero).
  // REQUIRES: window ≥ 1 (loupe::Error(kUsage) otherwise).
  ReplayDecoder(DecodeParams<Real> params, const Shape& shape, int64_t window,
                std::vector<Real> initial_state);

  void step(const DecodeStep<Real>& step, Real* o, int threads = 1);  // o: (N, HV, V)

  const std::vector<Real>& checkpoint() const { return checkpoint_; }  // (N, HV, K, V)
  int64_t ring_fill() const { return fill_; }
  // The state after every step so far: the checkpoint advanced through the ring.
  std::vector<Real> state() const;

 private:
  void replay(int64_t pair, Real* scratch, const Real* q, Real* o) const;

  DecodeParams<Real> params_;
  Shape shape_;
  int64_t window_;
  Real scale_;
  int64_t fill_ = 0;
  std::vector<Real> checkpoint_;  // (N, HV, K, V)
  std::vector<Real> ring_k_;      // (L, N, HV, K) normalised keys
  std::vector<Real> ring_alpha_;  // (L, N, HV, K)
  std::vector<Real> ring_beta_;   // (L, N, HV)
  std::vector<Real> ring_v_;      // (L, N, HV, V)
};

// Runs T steps of (B, T, ...) inputs through a ReplayDecoder with window L; the contract and
// outputs of decode().
template <class Real>
Outputs<Real> replay(const Inputs<Real>& inputs, const KernelOptions& options, bool l2norm,
                     int64_t window);

}  // namespace kda::kernels::cpu
