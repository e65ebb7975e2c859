// `kda dist cp ...` and `kda dist tp ...`: CP prefill, and the tensor-parallel model prefill,
// across the ranks a launcher started (kda/dist). Every rank runs this same command line;
// nothing here starts processes.
//   mpirun -n 4 --oversubscribe build/bin/kda dist cp --shape 1,65536,1,1,128,128
//       --precision tf32_rz --out cp --dump-shards shards --trace traces [--slow-rank 2]
//   mpirun -n 4 --oversubscribe build/bin/kda dist tp --heads 4 --out tp
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kda/cli/commands.hpp"
#include "kda/cli/shard_dump.hpp"
#include "kda/dist/communicator.hpp"
#include "kda/dist/cp_ranks.hpp"
#include "kda/dist/rank_trace.hpp"
#include "kda/dist/tp_ranks.hpp"
#include "kda/math/generator.hpp"
#include "kda/model/model.hpp"
#include "loupe/error.hpp"
#include "loupe/tensor.hpp"
#include "loupe/trace.hpp"

namespace kda::cli {
namespace {

namespace fs = std::filesystem;

struct DistArgs {
  std::vector<int64_t> shape;
  std::string decay = "slow";
  uint64_t seed = 1;
  std::string precision = "ieee";
  std::string order = "natural";
  std::string backend = "auto";
  std::string out_dir, dump_shards_dir, trace_dir;
  int slow_rank = -1;
  int slow_ms = 300;
  int threads = 1;
  bool json = false;
};

void write_npy(const fs::path& path, const std::vector<float>& values, std::vector<int64_t> shape) {
  loupe::Tensor tensor(loupe::DType::kF32, std::move(shape));
  auto data = tensor.mutable_data<float>();
  std::copy(values.begin(), values.end(), data.begin());
  loupe::write_npy(path, tensor);
}

int run_dist_cp(const DistArgs& args) {
  if (args.shape.size() != 6) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda dist cp: --shape takes six numbers B,T,H,HV,K,V, got " +
                           std::to_string(args.shape.size()),
                       "e.g. --shape 1,65536,1,1,128,128");
  }
  dist::Communicator& communicator = dist::world(args.backend);
  const int rank = communicator.rank(), ranks = communicator.size();
  if (args.slow_rank >= ranks) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda dist cp: --slow-rank " + std::to_string(args.slow_rank) +
                           " but the launcher started " + std::to_string(ranks) + " ranks",
                       "name a rank below the world size");
  }
  const Shape shape{args.shape[0], args.shape[1], args.shape[2],
                    args.shape[3], args.shape[4], args.shape[5]};
  math::GeneratorOptions generator;
  generator.decay = math::parse_decay(args.decay);
  generator.seed = args.seed;
  // Every rank generates the same inputs from the seed, as every rank of an engine holds the
  // prompt; each then computes only its own pieces.
  const Inputs<float> inputs = math::generate_inputs(shape, generator);

  const std::string rank_name = "rank-" + std::to_string(rank);
  if (!args.trace_dir.empty()) {
    fs::create_directories(args.trace_dir);
    loupe::trace::set_thread_name("rank " + std::to_string(rank) + " main");
    loupe::trace::start((fs::path(args.trace_dir) / (rank_name + ".loupetrace")).string());
  }
  dist::RankTrace trace(rank, ranks, std::string(communicator.backend()));
  dist::RankedCpOptions options;
  options.precision = math::parse_precision(args.precision);
  options.order = args.order;
  options.slow_rank = args.slow_rank;
  options.slow_ms = args.slow_ms;
  options.trace = &trace;
  KernelOptions kernel_options;
  kernel_options.threads = args.threads;
  std::vector<float> local_o;
  communicator.barrier();  // start together, so the first stage's times compare across ranks
  const auto start = std::chrono::steady_clock::now();
  const Outputs<float> outputs =
      dist::cp_across_ranks(inputs, kernel_options, communicator, options, &local_o);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!args.trace_dir.empty()) {
    loupe::trace::stop();
    trace.write_kineto_json(fs::path(args.trace_dir) / (rank_name + ".json"));
  }
  if (!args.dump_shards_dir.empty()) {
    dump_cp_rank(args.dump_shards_dir, shape, local_o, ranks, rank, args.order);
  }
  const int pieces = args.order == "zigzag" ? 2 * ranks : ranks;
  if (rank == 0 && !args.out_dir.empty()) {
    const fs::path out(args.out_dir);
    fs::create_directories(out);
    write_npy(out / "o.npy", outputs.o,
              {shape.batch, shape.tokens, shape.value_heads, shape.value_dim});
    write_npy(out / "S.npy", outputs.state,
              {shape.batch, shape.value_heads, shape.key_dim, shape.value_dim});
    write_npy(out / "S_shard_starts.npy", outputs.boundary_states,
              {shape.batch, pieces, shape.value_heads, shape.key_dim, shape.value_dim});
  }
  if (rank == 0) {
    if (args.json) {
      std::printf(
          "{\"kda\": \"dist cp\", \"backend\": \"%s\", \"ranks\": %d, \"pieces\": %d, "
          "\"order\": \"%s\", \"precision\": \"%s\", \"shape\": \"%s\", \"wall_s\": %.6f}\n",
          std::string(communicator.backend()).c_str(), ranks, pieces, args.order.c_str(),
          args.precision.c_str(), shape.to_string().c_str(), seconds);
    } else {
      std::printf("kda dist cp: %d ranks (%s), %d pieces (%s), %s precision=%s: %.3f s\n", ranks,
                  std::string(communicator.backend()).c_str(), pieces, args.order.c_str(),
                  shape.to_string().c_str(), args.precision.c_str(), seconds);
    }
  }
  return 0;
}

struct TpArgs {
  int64_t heads = 4, head_dim = 64, layers = 2, vocab = 256, requests = 2, prompt_len = 64;
  uint64_t model_seed = 0, prompt_seed = 1;
  bool w8a8 = false;
  std::string backend = "auto";
  std::string out_dir;
  bool json = false;
};

int run_dist_tp(const TpArgs& args) {
  model::ModelConfig config;
  config.heads = args.heads;
  config.head_dim = args.head_dim;
  config.layers = args.layers;
  config.vocab = args.vocab;
  config.w8a8 = args.w8a8;
  config.seed = args.model_seed;
  const model::Model model(config);  // validates the sizes (exit 2 naming the field)
  dist::Communicator& communicator = dist::world(args.backend);
  const int rank = communicator.rank(), ranks = communicator.size();
  // Every rank holds the prompts, as every rank of an engine does.
  const std::vector<int32_t> prompts =
      model::generate_prompts(args.requests, args.prompt_len, config.vocab, args.prompt_seed);
  std::vector<float> hidden;
  communicator.barrier();
  const auto start = std::chrono::steady_clock::now();
  const std::vector<float> logits = dist::tp_prefill_across_ranks(
      model, prompts, args.requests, args.prompt_len, communicator, &hidden);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rank == 0 && !args.out_dir.empty()) {
    const fs::path out(args.out_dir);
    fs::create_directories(out);
    write_npy(out / "logits.npy", logits, {args.requests, config.vocab});
    write_npy(out / "hidden.npy", hidden,
              {config.layers, args.requests * args.prompt_len, config.hidden});
  }
  if (rank == 0) {
    const std::vector<int64_t> heads = model::tensor_parallel_starts(config.heads, ranks, "heads");
    const std::vector<int64_t> vocab =
        model::tensor_parallel_starts(config.vocab, ranks, "vocabulary rows", model::kVocabGranule);
    if (args.json) {
      std::printf(
          "{\"kda\": \"dist tp\", \"backend\": \"%s\", \"ranks\": %d, \"heads_per_rank0\": "
          "%lld, \"vocab_rows_rank0\": %lld, \"model\": \"%s\", \"wall_s\": %.6f}\n",
          std::string(communicator.backend()).c_str(), ranks,
          static_cast<long long>(heads[1] - heads[0]), static_cast<long long>(vocab[1] - vocab[0]),
          config.to_string().c_str(), seconds);
    } else {
      std::printf(
          "kda dist tp: %d ranks (%s), rank 0 holds %lld of %lld heads per layer and %lld of "
          "%lld vocabulary rows; %lld prompts of %lld tokens: %.3f s\n",
          ranks, std::string(communicator.backend()).c_str(),
          static_cast<long long>(heads[1] - heads[0]), static_cast<long long>(config.heads),
          static_cast<long long>(vocab[1] - vocab[0]), static_cast<long long>(config.vocab),
          static_cast<long long>(args.requests), static_cast<long long>(args.prompt_len), seconds);
    }
  }
  return 0;
}

}  // namespace

void add_dist_command(CLI::App& app, int& exit_code) {
  CLI::App* dist = app.add_subcommand(
      "dist", "kda across the ranks a launcher started (mpirun, srun, torchrun-style env)");
  dist->require_subcommand(1);
  auto args = std::make_shared<DistArgs>();
  CLI::App* cp = dist->add_subcommand(
      "cp",
      "CP prefill: each rank owns pieces of the sequence; (M, H) summaries allgathered and "
      "scanned on every rank");
  cp->add_option("--shape", args->shape, "B,T,H,HV,K,V")->required()->delimiter(',');
  cp->add_option("--decay", args->decay, "slow | fast (kda generate's inputs)")
      ->check(CLI::IsMember({"slow", "fast"}));
  cp->add_option("--seed", args->seed, "the inputs' seed (every rank the same)");
  cp->add_option("--precision", args->precision,
                 "dot precision of the M chain and the scan: ieee | bf16 | tf32_rz | tf32_rne | "
                 "tf32x3");
  cp->add_option("--order", args->order, "natural (rank r: piece r of W) | zigzag (r and 2W-1-r)")
      ->check(CLI::IsMember({"natural", "zigzag"}));
  cp->add_option("--backend", args->backend, "auto | self | mpi | nccl");
  cp->add_option("--out", args->out_dir, "rank 0 writes o.npy, S.npy, S_shard_starts.npy here");
  cp->add_option("--dump-shards", args->dump_shards_dir,
                 "each rank writes DIR/rank-<r>/o.safetensors (docs/sharded-diff.md)");
  cp->add_option("--trace", args->trace_dir,
                 "each rank writes DIR/rank-<r>.json (Kineto, distributedInfo) and "
                 "DIR/rank-<r>.loupetrace");
  cp->add_option("--slow-rank", args->slow_rank,
                 "fault: this rank sleeps --slow-ms inside its cp_summaries stage (a straggler)");
  cp->add_option("--slow-ms", args->slow_ms, "milliseconds the slow rank loses (default 300)");
  cp->add_option("--threads", args->threads, "threads per rank (default 1)");
  cp->add_flag("--json", args->json, "rank 0 prints one JSON object");
  cp->callback([args, &exit_code] { exit_code = run_dist_cp(*args); });

  auto tp_args = std::make_shared<TpArgs>();
  CLI::App* tp = dist->add_subcommand(
      "tp",
      "tensor-parallel model prefill: each rank owns a share of every layer's heads and of the "
      "LM head's vocabulary; the heads' outputs and the logits allgathered");
  tp->add_option("--heads", tp_args->heads, "heads per KDA layer (default 4; at least the ranks)");
  tp->add_option("--head-dim", tp_args->head_dim, "K = V (default 64)");
  tp->add_option("--layers", tp_args->layers, "layers (default 2)");
  tp->add_option("--vocab", tp_args->vocab, "vocabulary (default 256)");
  tp->add_option("--requests", tp_args->requests, "prompts (default 2)");
  tp->add_option("--prompt-len", tp_args->prompt_len, "tokens per prompt (default 64)");
  tp->add_option("--model-seed", tp_args->model_seed, "the weights' seed (default 0)");
  tp->add_option("--seed", tp_args->prompt_seed, "the prompts' seed (default 1)");
  tp->add_flag("--w8a8", tp_args->w8a8, "W8A8 linear layers");
  tp->add_option("--backend", tp_args->backend, "auto | self | mpi | nccl");
  tp->add_option("--out", tp_args->out_dir,
                 "rank 0 writes logits.npy (requests, vocab) and hidden.npy (layers, rows, D)");
  tp->add_flag("--json", tp_args->json, "rank 0 prints one JSON object");
  tp->callback([tp_args, &exit_code] { exit_code = run_dist_tp(*tp_args); });
}

}  // namespace kda::cli
