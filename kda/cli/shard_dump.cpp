#include "kda/cli/shard_dump.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "kda/kernels/cpu/chunk.hpp"
#include "kda/kernels/cpu/cp.hpp"
#include "kda/math/blas.hpp"
#include "kda/math/generator.hpp"
#include "loupe/error.hpp"
#include "loupe/tensor.hpp"

namespace kda::cli {
namespace {

namespace fs = std::filesystem;
using Metadata = std::map<std::string, std::string>;

template <class Real>
void write_tensor(const fs::path& path, const std::string& name, const Real* values,
                  std::vector<int64_t> shape, Metadata metadata) {
  loupe::Tensor tensor(loupe::dtype_of<Real>(), std::move(shape));
  auto data = tensor.mutable_data<Real>();
  std::copy_n(values, data.size(), data.begin());
  loupe::write_safetensors(path, {{name, tensor}}, metadata);
}

Metadata rank_metadata(const std::string& dims, const std::string& group, int ranks, int rank) {
  return {{"loupe.dims", dims},
          {"loupe.parallel", group + "=" + std::to_string(ranks)},
          {"loupe.rank", std::to_string(rank)},
          {"loupe.rank." + group, std::to_string(rank)}};
}

fs::path rank_dir(const fs::path& dir, int rank) {
  const fs::path path = dir / ("rank-" + std::to_string(rank));
  fs::create_directories(path);
  return path;
}

}  // namespace

template <class Real>
std::vector<Real> output_projection(const std::vector<Real>& o, const Shape& shape,
                                    int64_t first_head, int64_t heads, int64_t all_heads) {
  // W_o (all_heads·V, D) from one seeded stream, so every rank reads the same weights.
  const int64_t rows_all = all_heads * shape.value_dim, dim = kOutputProjectionDim;
  std::vector<Real> weights(static_cast<size_t>(rows_all * dim));
  math::NormalStream stream(kOutputProjectionSeed);
  const double scale = 1.0 / std::sqrt(static_cast<double>(rows_all));
  for (Real& weight : weights) weight = static_cast<Real>(stream.normal() * scale);
  const int64_t tokens = shape.batch * shape.tokens;
  const int64_t rows = heads * shape.value_dim;  // o's columns for these heads
  std::vector<Real> out(static_cast<size_t>(tokens * dim), 0);
  math::use_single_threaded_blas();
  math::gemm<Real>(false, false, tokens, dim, rows, Real(1), o.data(), rows,
                   weights.data() + first_head * shape.value_dim * dim, dim, Real(0), out.data(),
                   dim);
  return out;
}

template <class Real>
void dump_single_device(const fs::path& dir, const Shape& shape, const Outputs<Real>& outputs,
                        int64_t step) {
  fs::create_directories(dir);
  auto metadata = [&](const std::string& dims) {
    Metadata out = {{"loupe.dims", dims}};
    if (step >= 0) out["loupe.step"] = std::to_string(step);
    return out;
  };
  write_tensor(dir / "o.safetensors", "o", outputs.o.data(),
               {shape.batch, shape.tokens, shape.value_heads, shape.value_dim},
               metadata("b t h v"));
  const std::vector<Real> projected =
      output_projection(outputs.o, shape, 0, shape.value_heads, shape.value_heads);
  write_tensor(dir / "o_proj.safetensors", "o_proj", projected.data(),
               {shape.batch, shape.tokens, kOutputProjectionDim}, metadata("b t d"));
  if (!outputs.state.empty() && step < 0) {
    // A step's state is not a token-aligned tensor: only a whole run dumps it.
    const int64_t sequences = static_cast<int64_t>(outputs.state.size()) /
                              (shape.value_heads * shape.key_dim * shape.value_dim);
    write_tensor(dir / "S.safetensors", "S", outputs.state.data(),
                 {sequences, shape.value_heads, shape.key_dim, shape.value_dim},
                 metadata("n h k v"));
  }
}

CpShardPlan plan_cp_shards(int64_t tokens, int ranks, const std::string& order, int fault_rank,
                           int fault_chunk) {
  CpShardPlan plan;
  const bool zigzag = order == "zigzag";
  plan.pieces = zigzag ? 2 * ranks : ranks;
  if (zigzag && tokens % (int64_t{2} * ranks * kernels::cpu::kChunkSize) != 0) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda kernel cp --shard-order zigzag: T = " + std::to_string(tokens) +
                           " does not cut into 2W = " + std::to_string(2 * ranks) +
                           " equal chunks of whole 64-token blocks",
                       "use T a multiple of " + std::to_string(2 * ranks * 64));
  }
  if (fault_rank < 0) return plan;
  if (fault_rank >= ranks || fault_chunk < 0 || fault_chunk > (zigzag ? 1 : 0)) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda kernel cp: --fault-rank " + std::to_string(fault_rank) +
                           " --fault-chunk " + std::to_string(fault_chunk) +
                           ": expected a rank below " + std::to_string(ranks) + " and chunk " +
                           (zigzag ? "0 or 1" : "0"),
                       "natural order gives each rank one chunk, zigzag two");
  }
  plan.lost_piece = fault_chunk == 0 ? fault_rank : 2 * ranks - 1 - fault_rank;
  if (plan.lost_piece == 0) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda kernel cp: --fault-rank 0 --fault-chunk 0 plants nothing: the "
                       "sequence's first chunk starts from the zero state anyway",
                       "plant the fault in another rank or chunk");
  }
  return plan;
}

template <class Real>
void dump_cp_shards(const fs::path& dir, const Shape& shape, const Outputs<Real>& outputs,
                    int ranks, const std::string& order) {
  const bool zigzag = order == "zigzag";
  const int pieces = zigzag ? 2 * ranks : ranks;
  std::vector<int64_t> starts = kernels::cpu::cp_shard_starts(shape.tokens, pieces);
  starts.push_back(shape.tokens);
  const std::string dims = zigzag ? "b t(cp,zigzag) h v" : "b t(cp) h v";
  const int64_t token_size = shape.value_heads * shape.value_dim;
  for (int rank = 0; rank < ranks; ++rank) {
    std::vector<int> held = {rank};
    if (zigzag) held.push_back(2 * ranks - 1 - rank);
    int64_t local_tokens = 0;
    for (int piece : held) local_tokens += starts[piece + 1] - starts[piece];
    std::vector<Real> local(static_cast<size_t>(shape.batch * local_tokens * token_size));
    for (int64_t batch_idx = 0; batch_idx < shape.batch; ++batch_idx) {
      Real* out = local.data() + batch_idx * local_tokens * token_size;
      for (int piece : held) {
        const int64_t count = (starts[piece + 1] - starts[piece]) * token_size;
        std::copy_n(outputs.o.data() + (batch_idx * shape.tokens + starts[piece]) * token_size,
                    count, out);
        out += count;
      }
    }
    write_tensor(rank_dir(dir, rank) / "o.safetensors", "o", local.data(),
                 {shape.batch, local_tokens, shape.value_heads, shape.value_dim},
                 rank_metadata(dims, "cp", ranks, rank));
  }
}

template <class Real>
void dump_cp_rank(const fs::path& dir, const Shape& shape, const std::vector<Real>& local_o,
                  int ranks, int rank, const std::string& order) {
  const std::string dims = order == "zigzag" ? "b t(cp,zigzag) h v" : "b t(cp) h v";
  const int64_t local_tokens =
      static_cast<int64_t>(local_o.size()) / (shape.batch * shape.value_heads * shape.value_dim);
  write_tensor(rank_dir(dir, rank) / "o.safetensors", "o", local_o.data(),
               {shape.batch, local_tokens, shape.value_heads, shape.value_dim},
               rank_metadata(dims, "cp", ranks, rank));
}

template <class Real>
Outputs<Real> run_and_dump_tp(const fs::path& dir, const Inputs<Real>& inputs,
                              const KernelOptions& options, int ranks, int fault_rank) {
  const Shape& shape = inputs.shape;
  if (shape.heads % ranks != 0 || shape.value_heads % ranks != 0) {
    throw loupe::Error(
        loupe::ErrorCode::kUsage,
        "kda kernel chunk --tp " + std::to_string(ranks) + ": H = " + std::to_string(shape.heads) +
            " and HV = " + std::to_string(shape.value_heads) + " must both split evenly",
        "pick --tp dividing H (each rank keeps whole groups of value heads)");
  }
  if (fault_rank >= ranks) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda kernel chunk: --fault-rank " + std::to_string(fault_rank) +
                           ": expected a rank below --tp " + std::to_string(ranks));
  }
  const int64_t heads_local = shape.heads / ranks, value_heads_local = shape.value_heads / ranks;
  const int64_t tokens = shape.batch * shape.tokens;
  const int64_t key_dim = shape.key_dim, value_dim = shape.value_dim;
  Outputs<Real> assembled;
  assembled.o.assign(static_cast<size_t>(tokens * shape.value_heads * value_dim), 0);
  std::vector<Real> projected_sum(static_cast<size_t>(tokens * kOutputProjectionDim), 0);
  for (int rank = 0; rank < ranks; ++rank) {
    const int64_t head0 = rank * heads_local, value_head0 = rank * value_heads_local;
    // The rank's own inputs: its query/key heads and value heads, as a TP engine holds them.
    Inputs<Real> local;
    local.shape = shape;
    local.shape.heads = heads_local;
    local.shape.value_heads = value_heads_local;
    local.cu_seqlens = inputs.cu_seqlens;
    auto slice = [&](const std::vector<Real>& all, int64_t all_heads, int64_t first, int64_t count,
                     int64_t width) {
      std::vector<Real> out;
      out.reserve(static_cast<size_t>(tokens * count * width));
      for (int64_t token = 0; token < tokens; ++token) {
        const Real* row = all.data() + (token * all_heads + first) * width;
        out.insert(out.end(), row, row + count * width);
      }
      return out;
    };
    local.q = slice(inputs.q, shape.heads, head0, heads_local, key_dim);
    local.k = slice(inputs.k, shape.heads, head0, heads_local, key_dim);
    local.v = slice(inputs.v, shape.value_heads, value_head0, value_heads_local, value_dim);
    local.beta = slice(inputs.beta, shape.value_heads, value_head0, value_heads_local, 1);
    if (rank == fault_rank) {
      // The planted bug: the gate slice starts one value head too far (wrapping at the end).
      local.g.reserve(static_cast<size_t>(tokens * value_heads_local * key_dim));
      for (int64_t token = 0; token < tokens; ++token) {
        for (int64_t head = 0; head < value_heads_local; ++head) {
          const int64_t source = (value_head0 + head + 1) % shape.value_heads;
          const Real* row = inputs.g.data() + (token * shape.value_heads + source) * key_dim;
          local.g.insert(local.g.end(), row, row + key_dim);
        }
      }
    } else {
      local.g = slice(inputs.g, shape.value_heads, value_head0, value_heads_local, key_dim);
    }
    if (!inputs.h0.empty()) {
      const int64_t state_size = key_dim * value_dim;
      const int64_t sequences =
          static_cast<int64_t>(inputs.h0.size()) / (shape.value_heads * state_size);
      for (int64_t sequence = 0; sequence < sequences; ++sequence) {
        const Real* first =
            inputs.h0.data() + (sequence * shape.value_heads + value_head0) * state_size;
        local.h0.insert(local.h0.end(), first, first + value_heads_local * state_size);
      }
    }
    KernelOptions local_options = options;
    local_options.boundary_tokens.clear();
    const Outputs<Real> outputs = kernels::cpu::chunk(local, local_options);
    const int64_t sequences =
        static_cast<int64_t>(outputs.state.size()) / (value_heads_local * key_dim * value_dim);
    if (assembled.state.empty()) {
      assembled.state.assign(
          static_cast<size_t>(sequences * shape.value_heads * key_dim * value_dim), 0);
    }
    for (int64_t token = 0; token < tokens; ++token) {
      std::copy_n(outputs.o.data() + token * value_heads_local * value_dim,
                  value_heads_local * value_dim,
                  assembled.o.data() + (token * shape.value_heads + value_head0) * value_dim);
    }
    const int64_t state_size = key_dim * value_dim;
    for (int64_t sequence = 0; sequence < sequences; ++sequence) {
      std::copy_n(
          outputs.state.data() + sequence * value_heads_local * state_size,
          value_heads_local * state_size,
          assembled.state.data() + (sequence * shape.value_heads + value_head0) * state_size);
    }
    const std::vector<Real> projected = output_projection(outputs.o, local.shape, value_head0,
                                                          value_heads_local, shape.value_heads);
    for (size_t index = 0; index < projected.size(); ++index)
      projected_sum[index] += projected[index];

    const fs::path out = rank_dir(dir, rank);
    write_tensor(out / "o.safetensors", "o", outputs.o.data(),
                 {shape.batch, shape.tokens, value_heads_local, value_dim},
                 rank_metadata("b t h(tp) v", "tp", ranks, rank));
    write_tensor(out / "S.safetensors", "S", outputs.state.data(),
                 {sequences, value_heads_local, key_dim, value_dim},
                 rank_metadata("n h(tp) k v", "tp", ranks, rank));
    write_tensor(out / "o_proj.safetensors", "o_proj", projected.data(),
                 {shape.batch, shape.tokens, kOutputProjectionDim},
                 rank_metadata("b t d(tp,partial)", "tp", ranks, rank));
  }
  return assembled;
}

template std::vector<float> output_projection(const std::vector<float>&, const Shape&, int64_t,
                                              int64_t, int64_t);
template std::vector<double> output_projection(const std::vector<double>&, const Shape&, int64_t,
                                               int64_t, int64_t);
template void dump_single_device(const fs::path&, const Shape&, const Outputs<float>&, int64_t);
template void dump_single_device(const fs::path&, const Shape&, const Outputs<double>&, int64_t);
template void dump_cp_shards(const fs::path&, const Shape&, const Outputs<float>&, int,
                             const std::string&);
template void dump_cp_shards(const fs::path&, const Shape&, const Outputs<double>&, int,
                             const std::string&);
template void dump_cp_rank(const fs::path&, const Shape&, const std::vector<float>&, int, int,
                           const std::string&);
template Outputs<float> run_and_dump_tp(const fs::path&, const Inputs<float>&, const KernelOptions&,
                                        int, int);
template Outputs<double> run_and_dump_tp(const fs::path&, const Inputs<double>&,
                                         const KernelOptions&, int, int);

}  // namespace kda::cli
