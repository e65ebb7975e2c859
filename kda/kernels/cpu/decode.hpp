// kda/kernels/cpu/decode.hpp — one decode token for a batch of sequences (reference/kda.md,
// incident 3), in the two variants a GPU decode kernel can take:
//   tiled   one work item per (sequence, value head, V-tile of 32): each recomputes, over all of K,
//           the q/k L2 normalisation, the gate, exp(g) and beta's sigmoid, as the V-tiled fused
//           recurrent kernel does (V / 32 times the per-token work)
//   merged  one work item per (sequence, value head): those values once, then all of V
// Both take the raw inputs (un-normalised q/k, raw gate, raw beta) so the repeated work is real;
// DecodeParams says which forms the raw values take. Both run the same token step per column, so
// they agree to rounding. Decode is bound by the state traffic: 2 · K · V · sizeof(Real) bytes
// read and written per (token, value head).
// Thread-safety: decode_step writes only `state` and `o`; a ReplayDecoder belongs to one thread.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kda/math/gates.hpp"
#include "kda/math/layout.hpp"

namespace kda::kernels::cpu {

enum class DecodeVariant { kTiled, kMerged };

inline constexpr int64_t kDecodeTile = 32;  // BV: the V tile of the tiled variant

std::string_view decode_variant_name(DecodeVariant variant);
// Throws loupe::Error(kUsage) unless `name` is "tiled" or "merged".
DecodeVariant parse_decode_variant(std::string_view name);

template <class Real>
struct DecodeParams {
  math::GateForm gate_form = math::GateForm::kLogDecay;
  math::BetaForm beta_form = math::BetaForm::kGiven;
  bool l2norm = false;        // normalise q and k inside the step
  double scale = 0.0;         // 0: K^-0.5
  std::vector<Real> a_log;    // (HV), for the softplus and bounded-sigmoid gates
  std::vector<Real> dt_bias;  // (HV, K), likewise
};

// One token for each of N sequences. Element (n, head, dim) of q lives at
// q[(n · sequence_stride · H + head) · K + dim], and likewise for every tensor and for o, so the
// step reads (N, H, K) arrays (sequence_stride 1) or token t of (B, T, H, K) arrays
// (pointers advanced by t rows, sequence_stride T).
template <class Real>
struct DecodeStep {
  const Real* q = nullptr;     // (N, H, K)
  const Real* k = nullptr;     // (N, H, K)
  const Real* v = nullptr;     // (N, HV, V)
  const Real* g = nullptr;     // (N, HV, K), raw gate or log decay (DecodeParams::gate_form)
  const Real* beta = nullptr;  // (N, HV), raw or β (DecodeParams::beta_form)
  int64_t sequence_stride = 1;
};

// Advances every state by one token and writes o. `shape.batch` is N; `shape.tokens` is unused.
// REQUIRES: a_log and dt_bias sized (HV) and (HV, K) unless the gate form is kLogDecay
// (loupe::Error(kInput) otherwise).
template <class Real>
void decode_step(DecodeVariant variant, const DecodeParams<Real>& params, const Shape& shape,
                 const DecodeStep<Real>& step, Real* state, Real* o, int threads = 1);
//                                                (N, HV, K, V)  (N, HV, V)

// Runs T decode steps of (B, T, ...) inputs (Inputs::g is the log decay and beta is β, as the
// prefill kernels read them); the same contract and outputs as recurrent().
template <class Real>
Outputs<Real> decode(DecodeVariant variant, const Inputs<Real>& inputs,
                     const KernelOptions& options, bool l2norm);
// The same over raw inputs in the forms `params` names (Inputs::g then holds the raw gate and
// beta the raw beta, as the model and the decode probes pass them); params.scale is replaced by
// the options' scale.
template <class Real>
Outputs<Real> decode(DecodeVariant variant, const Inputs<Real>& inputs,
                     const KernelOptions& options, DecodeParams<Real> params);

}  // namespace kda::kernels::cpu
