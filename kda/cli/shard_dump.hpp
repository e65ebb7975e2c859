// kda/cli/shard_dump.hpp — kda's tensors as a distributed engine dumps them: one directory per
// rank (rank-<r>/), safetensors files whose metadata says how they were cut (loupe.dims,
// loupe.parallel, loupe.rank, loupe.rank.<group>; docs/sharded-diff.md), so `loupe diff` can put
// them back together and compare them with a single-device run.
//
//   CP   `kda kernel cp --shards W --dump-shards DIR [--shard-order natural|zigzag]`: the CP
//        prefill over W ranks; natural: rank r holds the r-th of W token ranges; zigzag: the
//        sequence is cut into 2W chunks and rank r holds chunks r and 2W-1-r (the scan runs over
//        the 2W chunks in sequence order). Dumps o (b t(cp[,zigzag]) h v).
//   TP   `kda kernel chunk --tp W --dump-shards DIR`: value heads split over W ranks, each rank
//        running the chunked pass on its own heads. Dumps o (b t h(tp) v), S (n h(tp) k v) and
//        o_proj (b t d(tp,partial)), each rank's partial product with the output projection.
//   one  `kda kernel chunk|cp|recurrent --dump DIR`: the same names, unsharded (b t h v, ...).
// Faults (`--fault-rank R [--fault-chunk C]`): CP: chunk C of rank R runs from a zero state (a
// lost ring hop); TP: rank R reads the gates of the next value head (an off-by-one head slice).
// o_proj's weights are seeded (kOutputProjectionSeed), D = kOutputProjectionDim.
// Thread-safety: single-threaded callers; each call writes its own files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kda/math/layout.hpp"

namespace kda::cli {

inline constexpr uint64_t kOutputProjectionSeed = 0x6f70726f6aull;  // "oproj"
inline constexpr int64_t kOutputProjectionDim = 64;

// (B, T, D) = o (B, T, HV·V) · W_o[first_head·V .. (first_head + heads)·V, :], the contribution
// of value heads [first_head, first_head + heads) to the output projection.
template <class Real>
std::vector<Real> output_projection(const std::vector<Real>& o, const Shape& shape,
                                    int64_t first_head, int64_t heads, int64_t all_heads);

// DIR/{o,S,o_proj}.safetensors of a single-device run (S omitted when empty); `step` >= 0 adds
// loupe.step (a prefill or decode step of a run dumped step by step).
template <class Real>
void dump_single_device(const std::filesystem::path& dir, const Shape& shape,
                        const Outputs<Real>& outputs, int64_t step = -1);

// The pieces cp must run over for W ranks in `order` ("natural": W, "zigzag": 2W), and the
// piece whose start state the fault drops (-1 without one). Throws loupe::Error(kUsage) when the
// tokens cannot be cut into equal zigzag chunks of whole 64-token blocks, or the fault names a
// rank or chunk that does not exist or would change nothing.
struct CpShardPlan {
  int pieces = 0;
  int64_t lost_piece = -1;
};
CpShardPlan plan_cp_shards(int64_t tokens, int ranks, const std::string& order, int fault_rank,
                           int fault_chunk);

// DIR/rank-<r>/o.safetensors from the outputs of cp run over plan.pieces pieces.
template <class Real>
void dump_cp_shards(const std::filesystem::path& dir, const Shape& shape,
                    const Outputs<Real>& outputs, int ranks, const std::string& order);

// DIR/rank-<rank>/o.safetensors from one rank's own rows of o (its pieces in sequence order,
// (B, T_local, HV, V)), as each rank of a multi-rank run writes it (kda dist cp --dump-shards).
template <class Real>
void dump_cp_rank(const std::filesystem::path& dir, const Shape& shape,
                  const std::vector<Real>& local_o, int ranks, int rank, const std::string& order);

// Runs the chunked pass with value heads split over `ranks` (rank `fault_rank` reading the next
// head's gates; -1 for none), writes DIR/rank-<r>/{o,S,o_proj}.safetensors and returns the
// assembled outputs. Throws loupe::Error(kUsage) unless H % ranks == 0 and HV % ranks == 0.
template <class Real>
Outputs<Real> run_and_dump_tp(const std::filesystem::path& dir, const Inputs<Real>& inputs,
                              const KernelOptions& options, int ranks, int fault_rank);

}  // namespace kda::cli
