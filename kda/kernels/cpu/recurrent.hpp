// kda/kernels/cpu/recurrent.hpp — the token-by-token KDA recurrence (reference/kda.md).
//
// recurrent<double> is the oracle every other path is checked against; recurrent<float> is
// vectorised over V and bound by the bandwidth of the cache that holds the K × V state.
// Work is split over (sequence, value head) pairs on options.threads threads.
// Thread-safety: reads `inputs` only; returns fresh outputs.
#pragma once

#include "kda/math/layout.hpp"

namespace kda::kernels::cpu {

// REQUIRES: validate_inputs(inputs) passes (called here; throws loupe::Error(kInput) otherwise).
template <class Real>
Outputs<Real> recurrent(const Inputs<Real>& inputs, const KernelOptions& options);

}  // namespace kda::kernels::cpu
