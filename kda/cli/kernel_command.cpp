// `kda kernel NAME --in DIR --out DIR`: files in, files out, so any KDA implementation can be
// checked against kda's kernels. Layouts: kda/math/layout.hpp.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kda/cli/commands.hpp"
#include "kda/cli/shard_dump.hpp"
#include "kda/kernels/cpu/chunk.hpp"
#include "kda/kernels/cpu/cp.hpp"
#include "kda/kernels/cpu/decode.hpp"
#include "kda/kernels/cpu/recurrent.hpp"
#include "kda/kernels/cpu/replay.hpp"
#include "kda/math/gates.hpp"
#include "loupe/error.hpp"
#include "loupe/tensor.hpp"

namespace kda::cli {
namespace {

namespace fs = std::filesystem;

struct KernelArgs {
  std::string kernel;
  std::string in_dir, out_dir;
  std::string dtype = "f32";
  int shards = 8;
  bool shards_given = false;
  std::string precision = "ieee";
  std::string variant = "merged";
  int64_t window = 4;
  bool l2norm = false;
  double scale = 0.0;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Sharded dumps (kda/cli/shard_dump.hpp).
  std::string dump_dir;         // --dump: the single-device tensors with dims metadata
  std::string dump_shards_dir;  // --dump-shards: rank-<r>/ directories
  int tp = 0;                   // --tp: value heads split over this many ranks (chunk)
  std::string shard_order = "natural";
  int fault_rank = -1;
  int fault_chunk = 0;
  int64_t dump_step = -1;  // --dump-step: loupe.step of the --dump files
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t idx = 0; idx < shape.size(); ++idx) {
    text += (idx ? "," : "") + std::to_string(shape[idx]);
  }
  return text + "]";
}

// Reads DIR/NAME.npy as float32 or float64 and checks its shape against `expected`, where -1
// means "any" (the dimension is then taken from this file).
loupe::Tensor read_input(const fs::path& dir, const std::string& name,
                         std::vector<int64_t>& expected, const std::string& layout) {
  const fs::path path = dir / (name + ".npy");
  if (!fs::exists(path)) {
    throw loupe::Error(loupe::ErrorCode::kInput, path.string() + ": no such file",
                       "--in DIR must hold q.npy, k.npy, v.npy, g.npy and beta.npy");
  }
  loupe::Tensor tensor = loupe::read_npy(path);
  if (tensor.dtype() != loupe::DType::kF32 && tensor.dtype() != loupe::DType::kF64) {
    throw loupe::Error(loupe::ErrorCode::kInput,
                       path.string() + ": dtype " + std::string(loupe::dtype_name(tensor.dtype())) +
                           ", expected float32 or float64",
                       "write the tensor as float32");
  }
  bool matches = tensor.rank() == static_cast<int64_t>(expected.size());
  for (size_t idx = 0; matches && idx < expected.size(); ++idx) {
    matches = expected[idx] < 0 || expected[idx] == tensor.shape()[idx];
  }
  if (!matches) {
    std::string wanted = "[";
    for (size_t idx = 0; idx < expected.size(); ++idx) {
      wanted +=
          (idx ? "," : "") + (expected[idx] < 0 ? std::string("?") : std::to_string(expected[idx]));
    }
    throw loupe::Error(loupe::ErrorCode::kInput,
                       path.string() + ": shape " + shape_text(tensor.shape()) + ", expected " +
                           layout + " = " + wanted + "]",
                       "layouts: q, k (B,T,H,K); v (B,T,HV,V); g (B,T,HV,K); beta (B,T,HV); "
                       "h0 (N,HV,K,V)");
  }
  expected = tensor.shape();
  return tensor;
}

template <class Real>
std::vector<Real> values_of(const loupe::Tensor& tensor) {
  const loupe::Tensor converted = tensor.converted(loupe::dtype_of<Real>());
  const auto data = converted.data<Real>();
  return std::vector<Real>(data.begin(), data.end());
}

template <class Real>
Inputs<Real> read_inputs(const fs::path& dir) {
  std::vector<int64_t> qk_shape = {-1, -1, -1, -1};
  const loupe::Tensor q = read_input(dir, "q", qk_shape, "(B,T,H,K)");
  const loupe::Tensor k = read_input(dir, "k", qk_shape, "(B,T,H,K) as q.npy");
  const int64_t batch = qk_shape[0], tokens = qk_shape[1], key_dim = qk_shape[3];
  std::vector<int64_t> v_shape = {batch, tokens, -1, -1};
  const loupe::Tensor v = read_input(dir, "v", v_shape, "(B,T,HV,V)");
  const int64_t value_heads = v_shape[2], value_dim = v_shape[3];
  std::vector<int64_t> g_shape = {batch, tokens, value_heads, key_dim};
  const loupe::Tensor g = read_input(dir, "g", g_shape, "(B,T,HV,K)");
  std::vector<int64_t> beta_shape = {batch, tokens, value_heads};
  const loupe::Tensor beta = read_input(dir, "beta", beta_shape, "(B,T,HV)");

  Inputs<Real> inputs;
  inputs.shape = {batch, tokens, qk_shape[2], value_heads, key_dim, value_dim};
  if (value_heads % qk_shape[2] != 0) {
    throw loupe::Error(loupe::ErrorCode::kInput,
                       (dir / "v.npy").string() + ": HV=" + std::to_string(value_heads) +
                           " is not a multiple of H=" + std::to_string(qk_shape[2]) + " from q.npy",
                       "grouped value heads need HV % H == 0");
  }
  inputs.q = values_of<Real>(q);
  inputs.k = values_of<Real>(k);
  inputs.v = values_of<Real>(v);
  inputs.g = values_of<Real>(g);
  inputs.beta = values_of<Real>(beta);
  int64_t sequences = batch;
  if (fs::exists(dir / "cu_seqlens.npy")) {
    const loupe::Tensor cu = loupe::read_npy(dir / "cu_seqlens.npy");
    if (cu.rank() != 1 || (cu.dtype() != loupe::DType::kI64 && cu.dtype() != loupe::DType::kI32)) {
      throw loupe::Error(
          loupe::ErrorCode::kInput,
          (dir / "cu_seqlens.npy").string() + ": expected a 1-D int64 or int32 array",
          "cu_seqlens holds N+1 token offsets from 0 to T");
    }
    const loupe::Tensor wide = cu.converted(loupe::DType::kI64);
    const auto offsets = wide.data<int64_t>();
    inputs.cu_seqlens.assign(offsets.begin(), offsets.end());
    sequences = static_cast<int64_t>(inputs.cu_seqlens.size()) - 1;
  }
  if (fs::exists(dir / "h0.npy")) {
    std::vector<int64_t> h0_shape = {sequences, value_heads, key_dim, value_dim};
    inputs.h0 = values_of<Real>(read_input(dir, "h0", h0_shape, "(N,HV,K,V)"));
  }
  validate_inputs(inputs);
  return inputs;
}

template <class Real>
void write_output(const fs::path& path, const std::vector<Real>& values,
                  std::vector<int64_t> shape) {
  loupe::Tensor tensor(loupe::dtype_of<Real>(), std::move(shape));
  auto data = tensor.mutable_data<Real>();
  std::copy(values.begin(), values.end(), data.begin());
  loupe::write_npy(path, tensor);
}

template <class Real>
int run_kernel(const KernelArgs& args) {
  Inputs<Real> inputs = read_inputs<Real>(args.in_dir);
  const Shape& shape = inputs.shape;
  const bool decode_like = args.kernel == "decode" || args.kernel == "replay";
  if (args.l2norm && !decode_like) {
    // Prefill kernels read normalised q and k; decode and replay normalise inside the step.
    math::l2_normalize_rows(std::span<Real>(inputs.q), shape.key_dim);
    math::l2_normalize_rows(std::span<Real>(inputs.k), shape.key_dim);
  }
  KernelOptions options;
  options.scale = args.scale;
  options.threads = args.threads;
  const auto start = std::chrono::steady_clock::now();
  Outputs<Real> outputs;
  int64_t boundary_count = 0;
  if (args.kernel == "recurrent") {
    outputs = kernels::cpu::recurrent(inputs, options);
  } else if (args.kernel == "chunk" && args.tp > 0) {
    if (args.dump_shards_dir.empty()) {
      throw loupe::Error(loupe::ErrorCode::kUsage, "kda kernel chunk --tp needs --dump-shards DIR",
                         "--tp splits the heads over ranks to dump each rank's shards");
    }
    outputs = run_and_dump_tp(args.dump_shards_dir, inputs, options, args.tp, args.fault_rank);
  } else if (args.kernel == "chunk") {
    if (args.shards_given) {
      // The non-CP states at the tokens where cp's shards start, to compare with cp's.
      if (!inputs.cu_seqlens.empty()) {
        throw loupe::Error(loupe::ErrorCode::kUsage,
                           "kda kernel chunk: --shards needs equal-length sequences, but "
                           "cu_seqlens.npy is present");
      }
      options.boundary_tokens = kernels::cpu::cp_shard_starts(shape.tokens, args.shards);
      boundary_count = args.shards;
    }
    outputs = kernels::cpu::chunk(inputs, options);
  } else if (args.kernel == "cp") {
    kernels::cpu::CpOptions cp_options{args.shards, math::parse_precision(args.precision)};
    if (!args.dump_shards_dir.empty()) {
      // --shards counts ranks; zigzag runs the scan over their 2W chunks in sequence order.
      const CpShardPlan plan = plan_cp_shards(shape.tokens, args.shards, args.shard_order,
                                              args.fault_rank, args.fault_chunk);
      cp_options.shards = plan.pieces;
      cp_options.lost_start_state_shard = plan.lost_piece;
    }
    outputs = kernels::cpu::cp(inputs, options, cp_options);
    boundary_count = cp_options.shards;
    if (!args.dump_shards_dir.empty()) {
      dump_cp_shards(args.dump_shards_dir, shape, outputs, args.shards, args.shard_order);
    }
  } else if (args.kernel == "decode") {
    outputs = kernels::cpu::decode(kernels::cpu::parse_decode_variant(args.variant), inputs,
                                   options, args.l2norm);
  } else {
    outputs = kernels::cpu::replay(inputs, options, args.l2norm, args.window);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t sequences = static_cast<int64_t>(outputs.state.size()) /
                            (shape.value_heads * shape.key_dim * shape.value_dim);
  fs::create_directories(args.out_dir);
  const fs::path out_dir(args.out_dir);
  write_output(out_dir / "o.npy", outputs.o,
               {shape.batch, shape.tokens, shape.value_heads, shape.value_dim});
  write_output(out_dir / "S.npy", outputs.state,
               {sequences, shape.value_heads, shape.key_dim, shape.value_dim});
  if (boundary_count > 0) {
    write_output(out_dir / "S_shard_starts.npy", outputs.boundary_states,
                 {shape.batch, boundary_count, shape.value_heads, shape.key_dim, shape.value_dim});
  }
  if (!args.dump_dir.empty()) dump_single_device(args.dump_dir, shape, outputs, args.dump_step);
  std::printf("kda kernel %s: %s dtype=%s threads=%d: %.3f s, %.0f tokens/s -> %s\n",
              args.kernel.c_str(), shape.to_string().c_str(), args.dtype.c_str(), args.threads,
              seconds, static_cast<double>(shape.batch * shape.tokens) / seconds,
              args.out_dir.c_str());
  return 0;
}

}  // namespace

void add_kernel_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<KernelArgs>();
  CLI::App* command = app.add_subcommand(
      "kernel",
      "Run one CPU kernel on DIR/{q,k,v,g,beta}.npy (+ optional h0.npy, cu_seqlens.npy); write "
      "o.npy (B,T,HV,V) and S.npy (N,HV,K,V) to --out (cp, and chunk with --shards, also "
      "S_shard_starts.npy (B,P,HV,K,V)). decode and replay step through T one token at a time.");
  command->add_option("kernel", args->kernel, "recurrent | chunk | cp | decode | replay")
      ->required()
      ->check(CLI::IsMember({"recurrent", "chunk", "cp", "decode", "replay"}));
  command->add_option("--in", args->in_dir, "directory of input .npy files")->required();
  command->add_option("--out", args->out_dir, "directory for o.npy and S.npy")->required();
  command->add_option("--dtype", args->dtype, "engine precision: f32 or f64")
      ->check(CLI::IsMember({"f32", "f64"}))
      ->capture_default_str();
  command
      ->add_option("--shards", args->shards,
                   "cp: number of shards P; chunk: also write the states where cp's P shards "
                   "start (S_shard_starts.npy)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command
      ->add_option("--precision", args->precision,
                   "cp: dot precision of the (M, H) products and merge")
      ->check(CLI::IsMember({"ieee", "bf16", "tf32_rz", "tf32_rne", "tf32x3"}))
      ->capture_default_str();
  command->add_option("--variant", args->variant, "decode: tiled or merged")
      ->check(CLI::IsMember({"tiled", "merged"}))
      ->capture_default_str();
  command->add_option("--window", args->window, "replay: ring length L")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_flag("--l2norm", args->l2norm, "q and k are raw: L2-normalise them (eps 1e-6)");
  command->add_option("--scale", args->scale, "query scale; 0 means K^-0.5")->capture_default_str();
  command->add_option("--threads", args->threads, "worker threads")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--dump", args->dump_dir,
                      "also write o, o_proj and S as .safetensors with dims metadata to DIR "
                      "(a single-device reference for sharded dumps)");
  command
      ->add_option("--dump-step", args->dump_step,
                   "--dump: record this step number (loupe.step) for a run dumped step by "
                   "step (prefill 0, then decode steps); S is left out")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--dump-shards", args->dump_shards_dir,
                      "cp: write each CP rank's o to DIR/rank-<r>/ (--shards ranks); chunk with "
                      "--tp: each TP rank's o, S and o_proj partial sum");
  command->add_option("--tp", args->tp, "chunk: split the value heads over this many TP ranks")
      ->check(CLI::PositiveNumber);
  command
      ->add_option("--shard-order", args->shard_order,
                   "cp --dump-shards: natural (rank r holds the r-th range) or zigzag (2W "
                   "chunks; rank r holds r and 2W-1-r)")
      ->check(CLI::IsMember({"natural", "zigzag"}))
      ->capture_default_str();
  command
      ->add_option("--fault-rank", args->fault_rank,
                   "plant a fault in this rank: cp: its chunk runs from a zero state (a lost "
                   "ring hop); chunk --tp: it reads the next value head's gates")
      ->check(CLI::NonNegativeNumber);
  command
      ->add_option("--fault-chunk", args->fault_chunk,
                   "cp --fault-rank with zigzag: which of the rank's chunks (0 or 1)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command->callback([args, command, &exit_code] {
    args->shards_given = command->count("--shards") > 0;
    if (!args->dump_shards_dir.empty() && args->kernel != "cp" &&
        !(args->kernel == "chunk" && args->tp > 0)) {
      throw loupe::Error(loupe::ErrorCode::kUsage,
                         "kda kernel " + args->kernel +
                             ": --dump-shards needs cp (CP ranks) or chunk --tp N (TP ranks)",
                         "use --dump DIR for the single-device tensors");
    }
    if (args->fault_rank >= 0 && args->dump_shards_dir.empty()) {
      throw loupe::Error(loupe::ErrorCode::kUsage,
                         "kda kernel: --fault-rank plants a fault in a rank's shard; it needs "
                         "--dump-shards");
    }
    if ((args->kernel == "decode" || args->kernel == "replay") && !args->dump_dir.empty()) {
      throw loupe::Error(loupe::ErrorCode::kUsage,
                         "kda kernel " + args->kernel + ": --dump writes prefill tensors",
                         "use --dump with recurrent, chunk or cp");
    }
    exit_code = args->dtype == "f64" ? run_kernel<double>(*args) : run_kernel<float>(*args);
  });
}

}  // namespace kda::cli
