#include "kda/dist/cp_ranks.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "kda/kernels/cpu/chunk.hpp"
#include "kda/kernels/cpu/cp.hpp"
#include "kda/kernels/cpu/thread_pool.hpp"
#include "loupe/error.hpp"

namespace kda::dist {

std::vector<int> owned_pieces(int rank, int ranks, const std::string& order) {
  if (order == "zigzag") return {rank, 2 * ranks - 1 - rank};
  return {rank};
}

template <class Real>
Outputs<Real> cp_across_ranks(const Inputs<Real>& inputs, const KernelOptions& options,
                              Communicator& communicator, const RankedCpOptions& cp_options,
                              std::vector<Real>* local_o) {
  using kernels::cpu::kChunkSize;
  validate_inputs(inputs);
  if (!inputs.cu_seqlens.empty() || !options.boundary_tokens.empty()) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda cp across ranks: variable-length batches and boundary_tokens are not "
                       "supported");
  }
  if (cp_options.order != "natural" && cp_options.order != "zigzag") {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda cp across ranks: unknown order '" + cp_options.order + "'",
                       "use natural or zigzag");
  }
  const Shape& shape = inputs.shape;
  const int ranks = communicator.size(), rank = communicator.rank();
  const bool zigzag = cp_options.order == "zigzag";
  const int pieces = zigzag ? 2 * ranks : ranks;
  if (zigzag && shape.tokens % (int64_t{2} * ranks * kChunkSize) != 0) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda cp across ranks, zigzag: T = " + std::to_string(shape.tokens) +
                           " does not cut into 2W = " + std::to_string(pieces) +
                           " equal pieces of whole 64-token chunks",
                       "use T a multiple of " + std::to_string(pieces * kChunkSize));
  }
  std::vector<int64_t> starts = kernels::cpu::cp_shard_starts(shape.tokens, pieces);
  starts.push_back(shape.tokens);
  const std::vector<int> mine = owned_pieces(rank, ranks, cp_options.order);
  const int64_t key_dim = shape.key_dim, value_dim = shape.value_dim;
  const int64_t value_heads = shape.value_heads, pairs = shape.batch * value_heads;
  const int64_t state_size = key_dim * value_dim, transition_size = key_dim * key_dim;
  const int64_t summary_size = transition_size + state_size;  // [M | H] per (pair, piece)
  const Real scale = static_cast<Real>(effective_scale(options, key_dim));
  const auto spans = sequence_spans(shape, {});
  const math::DotPrecision precision = cp_options.precision;
  RankTrace* trace = cp_options.trace;

  // 1. (M, H) of the owned pieces: slot [owned index][pair].
  const int64_t slots_per_rank = static_cast<int64_t>(mine.size()) * pairs;
  std::vector<Real> summaries(static_cast<size_t>(slots_per_rank * summary_size), 0);
  {
    std::optional<RankTrace::Scope> scope;
    if (trace != nullptr) scope.emplace(*trace, trace->open_stage("cp_summaries"));
    kernels::cpu::parallel_for(slots_per_rank, options.threads, [&](int64_t slot) {
      const int piece = mine[static_cast<size_t>(slot / pairs)];
      const int64_t pair = slot % pairs;
      if (piece == pieces - 1) return;  // the last piece's summary is never used
      Real* m = summaries.data() + slot * summary_size;
      kernels::cpu::cp_piece_summary(inputs, scale, spans[static_cast<size_t>(pair / value_heads)],
                                     pair % value_heads, starts[piece], starts[piece + 1],
                                     precision, piece > 0 || !inputs.h0.empty(), m,
                                     m + transition_size);
    });
    if (rank == cp_options.slow_rank && cp_options.slow_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(cp_options.slow_ms));
    }
  }

  // 2. Every rank's summaries to every rank.
  std::vector<Real> all_summaries(static_cast<size_t>(ranks) * summaries.size());
  {
    std::optional<RankTrace::Scope> scope;
    if (trace != nullptr) {
      scope.emplace(*trace,
                    trace->open_collective("allgather", static_cast<int64_t>(summaries.size()),
                                           static_cast<int64_t>(all_summaries.size()),
                                           sizeof(Real) == 4 ? "float" : "double"));
    }
    communicator.allgather(summaries.data(), summaries.size() * sizeof(Real), all_summaries.data());
  }

  // 3. The scan, in sequence order, on every rank: start state of piece p, per pair.
  std::vector<const Real*> summary_of(static_cast<size_t>(pieces * pairs), nullptr);
  for (int owner = 0; owner < ranks; ++owner) {
    const std::vector<int> held = owned_pieces(owner, ranks, cp_options.order);
    for (size_t index = 0; index < held.size(); ++index) {
      for (int64_t pair = 0; pair < pairs; ++pair) {
        summary_of[static_cast<size_t>(held[index] * pairs + pair)] =
            all_summaries.data() +
            (owner * slots_per_rank + static_cast<int64_t>(index) * pairs + pair) * summary_size;
      }
    }
  }
  Outputs<Real> outputs;
  outputs.boundary_states.assign(
      static_cast<size_t>(shape.batch * pieces * value_heads * state_size), 0);
  auto start_state = [&](int piece, int64_t pair) {
    const int64_t batch_idx = pair / value_heads, value_head = pair % value_heads;
    return outputs.boundary_states.data() +
           ((batch_idx * pieces + piece) * value_heads + value_head) * state_size;
  };
  {
    std::optional<RankTrace::Scope> scope;
    if (trace != nullptr) scope.emplace(*trace, trace->open_stage("cp_scan"));
    for (int64_t pair = 0; pair < pairs; ++pair) {
      if (!inputs.h0.empty()) {
        std::copy_n(inputs.h0.data() + pair * state_size, state_size, start_state(0, pair));
      }
      for (int piece = 0; piece + 1 < pieces; ++piece) {
        const Real* m = summary_of[static_cast<size_t>(piece * pairs + pair)];
        kernels::cpu::cp_merge_step(precision, key_dim, value_dim, m, start_state(piece, pair),
                                    m + transition_size, start_state(piece + 1, pair));
      }
    }
  }

  // 4. The owned pieces' outputs from their start states; the last piece's owner also has the
  // final state.
  const int64_t token_size = value_heads * value_dim;
  int64_t local_tokens = 0, max_piece_tokens = 0;
  for (int piece : mine) local_tokens += starts[piece + 1] - starts[piece];
  for (int piece = 0; piece < pieces; ++piece)
    max_piece_tokens = std::max(max_piece_tokens, starts[piece + 1] - starts[piece]);
  outputs.o.assign(static_cast<size_t>(shape.batch * shape.tokens * token_size), 0);
  // Per rank, a fixed-size block: each owned piece's rows padded to the longest piece, then the
  // final state (meaningful on the last piece's owner only), so one equal-size allgather carries
  // it.
  const int64_t piece_block = shape.batch * max_piece_tokens * token_size;
  const int64_t rank_block = static_cast<int64_t>(mine.size()) * piece_block + pairs * state_size;
  std::vector<Real> block(static_cast<size_t>(rank_block), 0);
  {
    std::optional<RankTrace::Scope> scope;
    if (trace != nullptr) scope.emplace(*trace, trace->open_stage("cp_outputs"));
    kernels::cpu::parallel_for(slots_per_rank, options.threads, [&](int64_t slot) {
      const int piece = mine[static_cast<size_t>(slot / pairs)];
      const int64_t pair = slot % pairs;
      std::vector<Real> state(start_state(piece, pair), start_state(piece, pair) + state_size);
      // Rows land in the full-size o first (the layout ChunkPass writes), then move to the block.
      kernels::cpu::cp_piece_outputs(inputs, scale, spans[static_cast<size_t>(pair / value_heads)],
                                     pair % value_heads, starts[piece], starts[piece + 1],
                                     state.data(), outputs.o.data());
      if (piece == pieces - 1) {
        std::copy(
            state.begin(), state.end(),
            block.data() + static_cast<int64_t>(mine.size()) * piece_block + pair * state_size);
      }
    });
    for (size_t index = 0; index < mine.size(); ++index) {
      const int piece = mine[index];
      const int64_t count = (starts[piece + 1] - starts[piece]) * token_size;
      for (int64_t batch_idx = 0; batch_idx < shape.batch; ++batch_idx) {
        std::copy_n(outputs.o.data() + (batch_idx * shape.tokens + starts[piece]) * token_size,
                    count,
                    block.data() + static_cast<int64_t>(index) * piece_block +
                        batch_idx * max_piece_tokens * token_size);
      }
    }
  }
  if (local_o != nullptr) {
    local_o->assign(static_cast<size_t>(shape.batch * local_tokens * token_size), 0);
    for (int64_t batch_idx = 0; batch_idx < shape.batch; ++batch_idx) {
      Real* out = local_o->data() + batch_idx * local_tokens * token_size;
      for (int piece : mine) {
        const int64_t count = (starts[piece + 1] - starts[piece]) * token_size;
        std::copy_n(outputs.o.data() + (batch_idx * shape.tokens + starts[piece]) * token_size,
                    count, out);
        out += count;
      }
    }
  }

  // 5. Every rank's outputs to every rank.
  std::vector<Real> all_blocks(static_cast<size_t>(ranks * rank_block));
  {
    std::optional<RankTrace::Scope> scope;
    if (trace != nullptr) {
      scope.emplace(*trace, trace->open_collective("allgather", rank_block, ranks * rank_block,
                                                   sizeof(Real) == 4 ? "float" : "double"));
    }
    communicator.allgather(block.data(), block.size() * sizeof(Real), all_blocks.data());
  }
  outputs.state.assign(static_cast<size_t>(pairs * state_size), 0);
  for (int owner = 0; owner < ranks; ++owner) {
    const std::vector<int> held = owned_pieces(owner, ranks, cp_options.order);
    const Real* owner_block = all_blocks.data() + owner * rank_block;
    for (size_t index = 0; index < held.size(); ++index) {
      const int piece = held[index];
      const int64_t count = (starts[piece + 1] - starts[piece]) * token_size;
      for (int64_t batch_idx = 0; batch_idx < shape.batch; ++batch_idx) {
        std::copy_n(owner_block + static_cast<int64_t>(index) * piece_block +
                        batch_idx * max_piece_tokens * token_size,
                    count,
                    outputs.o.data() + (batch_idx * shape.tokens + starts[piece]) * token_size);
      }
      if (piece == pieces - 1) {
        std::copy_n(owner_block + static_cast<int64_t>(held.size()) * piece_block,
                    pairs * state_size, outputs.state.data());
      }
    }
  }
  return outputs;
}

template Outputs<float> cp_across_ranks(const Inputs<float>&, const KernelOptions&, Communicator&,
                                        const RankedCpOptions&, std::vector<float>*);
template Outputs<double> cp_across_ranks(const Inputs<double>&, const KernelOptions&, Communicator&,
                                         const RankedCpOptions&, std::vector<double>*);

}  // namespace kda::dist
