// kda/kernels/cpu/recurrent.hpp — the token-by-token KDA recurrence (reference/kda.md).
//
// recurrent<double> is the oracle every other path is checked against. Both sweep the K × V
// state once per token (token_step.hpp, sweep_tokens: the update of token t fused with the decay
// and projection of token t + 1), vectorised over V; V not a multiple of the vector width takes
// the two-pass token_step.
// Work is split over (sequence, value head) pairs on options.threads threads.
// Thread-safety: reads `inputs` only; returns fresh outputs.
#pragma once

#include "kda/math/layout.hpp"

namespace kda::kernels::cpu {

// REQUIRES: validate_inputs(inputs) passes (called here; throws loupe::Error(kInput) otherwise).
template <class Real>
Outputs<Real> recurrent(const Inputs<Real>& inputs, const KernelOptions& options);

}  // namespace kda::kernels::cpu
