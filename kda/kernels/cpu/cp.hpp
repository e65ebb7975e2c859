// kda/kernels/cpu/cp.hpp — context-parallel prefill: a prefix scan over shards (reference/kda.md).
//
// One sequence is split into P shards on chunk boundaries. Phase 1, per shard on the thread pool:
// H = the shard's chunked pass from a zero state (fp32 or fp64, exactly as the non-CP pass), and
// M = the product of its chunks' transitions Diag(e^{G_C}) − K_gᵀ W, each product reading its
// operands at the chosen DotPrecision. Merge, serially: S_0 = h0, S_{r+1} = M_r S_r + H_r at the
// same precision. Phase 2, per shard: the ordinary chunked pass from S_r writes the outputs.
// Dot precision applies to the (M, H) products and the merge only, which is where incident 1's
// drift comes from: truncating the ≈identity M to TF32 every chunk biases it by ≈2^-10 per product.
// Thread-safety: reads `inputs` only.
#pragma once

#include <cstdint>
#include <vector>

#include "kda/math/layout.hpp"
#include "kda/math/precision.hpp"

namespace kda::kernels::cpu {

struct CpOptions {
  int shards = 8;                                            // P ≥ 1
  math::DotPrecision precision = math::DotPrecision::kIeee;  // of the M chain and the merge
  // Fault injection (`kda kernel cp --fault-rank`): this shard runs its output pass from a zero
  // state instead of its scanned start state, as if the ring hop carrying it had been lost. Only
  // that shard's outputs change; -1: no fault.
  int64_t lost_start_state_shard = -1;
};

// The sequence-relative token offset where each of `shards` shards starts: shard r holds chunks
// [r·n/P, (r+1)·n/P) of the n = ceil(T / 64) chunks. Pass them as KernelOptions::boundary_tokens
// to chunk() to get the non-CP states at the same places.
std::vector<int64_t> cp_shard_starts(int64_t tokens, int shards);

// Outputs::boundary_states is (B, P, HV, K, V): the state each shard starts from (shard 0: h0).
// REQUIRES: no cu_seqlens and no boundary_tokens (loupe::Error(kUsage) otherwise); shards ≥ 1.
template <class Real>
Outputs<Real> cp(const Inputs<Real>& inputs, const KernelOptions& options,
                 const CpOptions& cp_options);

// The three steps of cp(), one piece of one (sequence, value head) at a time, so the multi-rank
// CP (kda/dist/cp_ranks.hpp) runs the very same arithmetic as the threads of cp(): its result is
// bit-identical to cp() over the same pieces.
//
// The (M, H) summary of tokens [begin, end) (sequence-relative, multiples of 64 but the last):
// h = the chunked pass from a zero state (K, V); m = the product of the chunks' transitions read
// at `precision` (K, K), or the identity when `need_chain` is false (a piece whose M multiplies
// only the zero state: the first one without h0).
template <class Real>
void cp_piece_summary(const Inputs<Real>& inputs, Real scale, const SequenceSpan& span,
                      int64_t value_head, int64_t begin, int64_t end, math::DotPrecision precision,
                      bool need_chain, Real* m, Real* h);

// next = m · previous + h, the product's operands read at `precision`.
template <class Real>
void cp_merge_step(math::DotPrecision precision, int64_t key_dim, int64_t value_dim, const Real* m,
                   const Real* previous, const Real* h, Real* next);

// The chunked pass over [begin, end) from `state` (K, V; updated in place to the piece's end
// state), writing the piece's rows of `o`, the (B, T, HV, V) output of the whole batch.
template <class Real>
void cp_piece_outputs(const Inputs<Real>& inputs, Real scale, const SequenceSpan& span,
                      int64_t value_head, int64_t begin, int64_t end, Real* state, Real* o);

}  // namespace kda::kernels::cpu
