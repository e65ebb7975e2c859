// kda/dist/cp_ranks.hpp — context-parallel prefill across ranks (reference/kda.md, "CP").
//
// Each rank owns pieces of the sequence: natural order, rank r holds piece r of W; zigzag, the
// sequence is cut into 2W pieces and rank r holds pieces r and 2W-1-r (ring attention's load
// balance). Per rank: the (M, H) summary of each owned piece (kernels/cpu/cp.hpp's
// cp_piece_summary, the dot precision applied to the M chain), one allgather of every piece's
// summary, the prefix scan S_{p+1} = M_p S_p + H_p over the pieces in sequence order (every rank
// scans the same summaries in the same order, so every rank holds every start state), the chunked
// pass of each owned piece from its start state, and one allgather of the outputs. Only (M, H)
// cross ranks before the output pass, independent of T; the same arithmetic as cp() over the same
// pieces, so the result is bit-identical to the one-process path (tests/unit/kda_dist).
// Thread-safety: collective: every rank of `communicator` calls it with the same inputs shape and
// options.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kda/dist/communicator.hpp"
#include "kda/dist/rank_trace.hpp"
#include "kda/math/layout.hpp"
#include "kda/math/precision.hpp"

namespace kda::dist {

struct RankedCpOptions {
  math::DotPrecision precision = math::DotPrecision::kIeee;
  std::string order = "natural";  // natural | zigzag
  // Fault injection (`kda dist cp --slow-rank R --slow-ms N`): rank R sleeps N ms inside its
  // cp_summaries stage, as a rank on a throttled or shared device would run late.
  int slow_rank = -1;
  int slow_ms = 0;
  RankTrace* trace = nullptr;  // stages and collectives recorded here when set
};

// The pieces rank `rank` of `ranks` owns, in sequence order.
std::vector<int> owned_pieces(int rank, int ranks, const std::string& order);

// Outputs on every rank: o (B, T, HV, V), the final state (B, HV, K, V) and boundary_states
// (B, P, HV, K, V), the start state of each of the P pieces. `local_o` (when not null) receives
// this rank's rows of o, its pieces in sequence order: (B, T_local, HV, V).
// REQUIRES: no cu_seqlens, no h0 beyond (B, HV, K, V); zigzag needs T a multiple of 2W · 64.
// Throws loupe::Error(kUsage) otherwise.
template <class Real>
Outputs<Real> cp_across_ranks(const Inputs<Real>& inputs, const KernelOptions& options,
                              Communicator& communicator, const RankedCpOptions& cp_options,
                              std::vector<Real>* local_o = nullptr);

}  // namespace kda::dist
