// The kda subject's kernel probes (issue 4): checks of every optimised path against its
// reference and an fp64 oracle, and benches of the prefill and decode kernels.
//   kda probe list
//   loupe probe run cp_vs_nocp --set T=16384 --set shards=8 --set precision=tf32_rz
//       --set decay=slow -- build/bin/kda probe
#include <loupe/probe.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kda/dist/communicator.hpp"
#include "kda/dist/cp_ranks.hpp"
#include "kda/kernels/cpu/chunk.hpp"
#include "kda/kernels/cpu/cp.hpp"
#include "kda/kernels/cpu/decode.hpp"
#include "kda/kernels/cpu/recurrent.hpp"
#include "kda/kernels/cpu/replay.hpp"
#include "kda/math/generator.hpp"
#include "kda/probes/oracle.hpp"
#include "kda/probes/rank_world.hpp"
#include "loupe/error.hpp"

namespace kda::probes {
namespace {

constexpr int64_t kDim = 128;

// The chunked pass's error against the fp64 oracle may be this many times the fp32 recurrence's
// own: measured 2.6x (o) and 23x (S) at the default point, seed 7; the state sums 64-token
// products where the recurrence adds one token at a time.
constexpr double kChunkOverRecurrence = 100;

// decode_vs_recurrence: the decode kernel's error against the fp64 oracle may be this many times
// the plain fp32 recurrence's own. Over 1,400 runs of the unchanged kernels (both variants, the
// shown point and the hidden domain, random 31-bit seeds, 2026-12-07) the largest ratio was 1.39
// (o) and 1.15 (S); 10 leaves a seven-fold margin and still fails anything that adds ten times
// fp32's rounding. The second bound caps the kernel's distance from the fp32 recurrence where that
// recurrence's own error is large (a nearly cancelling output, where the first bound loosens with
// it): largest 1.2e-5 over the same runs.
constexpr double kDecodeOverFp32 = 10;
constexpr double kDecodeVsFp32 = 1e-2;

// Declares q, k, v, g, beta as check inputs and fills them from `generated`.
void declare_inputs(loupe::CheckSetup& setup, const Inputs<float>& generated) {
  const Shape& s = generated.shape;
  auto put = [&](const char* name, const std::vector<float>& values, std::vector<int64_t> shape,
                 std::vector<std::string> axes) {
    auto storage = setup.input<float>(name, std::move(shape), std::move(axes));
    std::copy(values.begin(), values.end(), storage.begin());
  };
  put("q", generated.q, {s.batch, s.tokens, s.heads, s.key_dim}, {"B", "T", "H", "K"});
  put("k", generated.k, {s.batch, s.tokens, s.heads, s.key_dim}, {"B", "T", "H", "K"});
  put("v", generated.v, {s.batch, s.tokens, s.value_heads, s.value_dim}, {"B", "T", "HV", "V"});
  put("g", generated.g, {s.batch, s.tokens, s.value_heads, s.key_dim}, {"B", "T", "HV", "K"});
  put("beta", generated.beta, {s.batch, s.tokens, s.value_heads}, {"B", "T", "HV"});
}

// Rebuilds kernel inputs from the check's input tensors (their shapes carry the dimensions).
template <class Real>
Inputs<Real> read_inputs(const loupe::CheckIo& io) {
  const auto& q_shape = io.input_tensor("q").shape();
  const auto& v_shape = io.input_tensor("v").shape();
  Inputs<Real> inputs;
  inputs.shape = {q_shape[0], q_shape[1], q_shape[2], v_shape[2], q_shape[3], v_shape[3]};
  auto take = [&](const char* name) {
    const auto values = io.input<float>(name);
    return std::vector<Real>(values.begin(), values.end());
  };
  inputs.q = take("q");
  inputs.k = take("k");
  inputs.v = take("v");
  inputs.g = take("g");
  inputs.beta = take("beta");
  return inputs;
}

template <class Real>
void write(loupe::CheckIo& io, const char* name, const std::vector<Real>& values) {
  auto out = io.output<Real>(name);
  std::copy(values.begin(), values.end(), out.begin());
}

// The independent fp64 token recurrence (oracle.hpp) on the check's prefill inputs.
OracleOutputs prefill_oracle(const loupe::CheckIo& io, std::span<const int64_t> boundaries = {}) {
  const auto& q_shape = io.input_tensor("q").shape();
  const auto& v_shape = io.input_tensor("v").shape();
  const Shape shape{q_shape[0], q_shape[1], q_shape[2], v_shape[2], q_shape[3], v_shape[3]};
  return oracle_recurrence(shape, io.input<float>("q"), io.input<float>("k"), io.input<float>("v"),
                           io.input<float>("g"), io.input<float>("beta"), OracleForms{},
                           boundaries);
}

KernelOptions two_threads() {
  KernelOptions options;
  options.threads = 2;
  return options;
}

// Runs `kernel` (a generic callable on Inputs<Real>) at the point's dtype and writes its o and S.
template <class Kernel>
void write_o_and_state_at_dtype(loupe::CheckIo& io, Kernel kernel) {
  auto run = [&](auto inputs) {
    const auto out = kernel(inputs);
    write(io, "o", out.o);
    write(io, "S", out.state);
  };
  if (io.point().get_string("dtype") == "f64") {
    run(read_inputs<double>(io));
  } else {
    run(read_inputs<float>(io));
  }
}

// The non-CP chunked pass, recording the states where cp's shards start (S) and the output (o).
template <class Real>
void write_chunk_at_shard_starts(loupe::CheckIo& io, int shards) {
  const Inputs<Real> inputs = read_inputs<Real>(io);
  KernelOptions options = two_threads();
  options.boundary_tokens = kernels::cpu::cp_shard_starts(inputs.shape.tokens, shards);
  const auto out = kernels::cpu::chunk(inputs, options);
  write(io, "S", out.boundary_states);
  write(io, "o", out.o);
}

// The inputs and outputs of a CP check cutting the sequence into `pieces`: S, the states at every
// piece start (profiled along P), and o, the output (along T), both bounded at rms_ratio 2e-6.
void declare_cp_io(loupe::CheckSetup& setup, int64_t pieces) {
  const auto& p = setup.point();
  const Shape shape{1, p.get_int("T"), p.get_int("H"), p.get_int("H"), kDim, kDim};
  math::GeneratorOptions options;
  options.decay = math::parse_decay(p.get_string("decay"));
  options.seed = setup.seed();
  declare_inputs(setup, math::generate_inputs(shape, options));
  setup
      .add_output("S", loupe::DType::kF32, {pieces, shape.value_heads, kDim, kDim},
                  {"P", "HV", "K", "V"})
      .along("P")
      .tolerance("rms_ratio", 2e-6);
  setup
      .add_output("o", loupe::DType::kF32, {1, shape.tokens, shape.value_heads, kDim},
                  {"B", "T", "HV", "V"})
      .along("T")
      .tolerance("rms_ratio", 2e-6);
}

// A CP check's oracle: the fp64 token recurrence at the piece starts. Not the fp64 chunked pass:
// a fault in the chunk code would move reference and oracle together and cancel out.
void write_recurrence_at_shard_starts(loupe::CheckIo& io, int pieces) {
  const int64_t tokens = io.input_tensor("q").shape()[1];
  const OracleOutputs out = prefill_oracle(io, kernels::cpu::cp_shard_starts(tokens, pieces));
  write(io, "S", out.boundary_states);
  write(io, "o", out.o);
}

}  // namespace

LOUPE_CHECK(chunk_vs_recurrent)
    .description("chunked prefill (C=64) against the token recurrence; oracle: fp64 recurrence")
    .param("B", 2, {}, "batch")
    .param("T", 1024, {}, "tokens")
    .param("H", 2, {}, "query/key heads")
    .param("HV", 4, {}, "value heads (a multiple of H)")
    .param("K", 128, {}, "key dimension")
    .param("V", 128, {}, "value dimension")
    .param("dtype", "f32", {"f32", "f64"})
    // A corner of the domain the default point does not touch: HV = 3 H (the head mapping
    // hv / (HV / H) matters), K != V; over it loupe draws the batch and a length (most not a
    // multiple of the chunk size) in secret.
    .hidden_point({{"B", int64_t{3}},
                   {"T", int64_t{1000}},
                   {"H", int64_t{2}},
                   {"HV", int64_t{6}},
                   {"K", int64_t{96}},
                   {"V", int64_t{80}}})
    .hidden_range("B", 1, 3)
    .hidden_range("T", 600, 1100)
    .inputs([](loupe::CheckSetup& setup) {
      const auto& p = setup.point();
      const Shape shape{p.get_int("B"),  p.get_int("T"), p.get_int("H"),
                        p.get_int("HV"), p.get_int("K"), p.get_int("V")};
      math::GeneratorOptions options;
      options.seed = setup.seed();
      declare_inputs(setup, math::generate_inputs(shape, options));
      const bool fp64 = p.get_string("dtype") == "f64";
      const double bound = fp64 ? 1e-10 : 5e-3;
      const loupe::DType dtype = fp64 ? loupe::DType::kF64 : loupe::DType::kF32;
      setup
          .add_output("o", dtype, {shape.batch, shape.tokens, shape.value_heads, shape.value_dim},
                      {"B", "T", "HV", "V"})
          .along("T")
          .tolerance("rms_ratio", bound)
          .tolerance_vs_oracle("rms_ratio", kChunkOverRecurrence);
      setup
          .add_output("S", dtype, {shape.batch, shape.value_heads, shape.key_dim, shape.value_dim},
                      {"B", "HV", "K", "V"})
          .tolerance("rms_ratio", bound)
          .tolerance_vs_oracle("rms_ratio", kChunkOverRecurrence);
    })
    .reference([](loupe::CheckIo& io) {
      write_o_and_state_at_dtype(
          io, [](const auto& inputs) { return kernels::cpu::recurrent(inputs, two_threads()); });
    })
    .candidate([](loupe::CheckIo& io) {
      write_o_and_state_at_dtype(
          io, [](const auto& inputs) { return kernels::cpu::chunk(inputs, two_threads()); });
    })
    .oracle([](loupe::CheckIo& io) {
      const OracleOutputs out = prefill_oracle(io);
      write(io, "o", out.o);
      write(io, "S", out.state);
    });

LOUPE_CHECK(cp_vs_nocp)
    .description(
        "context-parallel prefill against the one-device chunked pass: states at every shard "
        "start and the output; oracle: fp64 token recurrence (independent of the chunk code)")
    .param("T", 16384, {}, "tokens")
    .param("shards", 8, {}, "CP shards")
    .param("precision", "ieee", {"ieee", "bf16", "tf32_rz", "tf32_rne", "tf32x3"},
           "dot precision of the (M, H) products and the merge")
    .param("decay", "slow", {"slow", "fast"}, "slow: rates in [1e-6, 1e-1]; fast: -5 sigmoid")
    .param("H", 1, {}, "heads (H = HV, K = V = 128)")
    // The hidden run's length, drawn in secret for each run (most not a multiple of the chunk
    // or of the shard count; loupe keeps the asked shards, precision and decay): a few thousand
    // tokens, so the hidden run costs about what the T = 4,096 point does rather than as much
    // again as the asked point (at T = 16,384 a hidden run at the asked length took 9-14 s).
    .hidden_range("T", 2048, 6144)
    .inputs([](loupe::CheckSetup& setup) { declare_cp_io(setup, setup.point().get_int("shards")); })
    .reference([](loupe::CheckIo& io) {
      write_chunk_at_shard_starts<float>(io, static_cast<int>(io.point().get_int("shards")));
    })
    .candidate([](loupe::CheckIo& io) {
      const auto out =
          kernels::cpu::cp(read_inputs<float>(io), two_threads(),
                           {static_cast<int>(io.point().get_int("shards")),
                            math::parse_precision(io.point().get_string("precision"))});
      write(io, "S", out.boundary_states);
      write(io, "o", out.o);
    })
    .oracle([](loupe::CheckIo& io) {
      write_recurrence_at_shard_starts(io, static_cast<int>(io.point().get_int("shards")));
    });

namespace {

// The pieces a CP run over `ranks` ranks cuts the sequence into (zigzag: two per rank).
int cp_pieces(const loupe::Point& point) {
  const int ranks = static_cast<int>(point.get_int("ranks"));
  return point.get_string("order") == "zigzag" ? 2 * ranks : ranks;
}

}  // namespace

// The same comparison with the CP candidate spread over processes: every rank a launcher started
// runs the candidate (kda/dist: its pieces' (M, H), an allgather, the scan, its outputs, an
// allgather); rank 0 alone runs the reference and the oracle (loupe's subject runtime). Run it
// with `loupe probe run cp_ranks_vs_nocp --launch "mpirun -n {ranks} --oversubscribe"
// --set ranks=4 ... -- build/bin/kda probe` (docs/multi-rank.md).
LOUPE_CHECK(cp_ranks_vs_nocp)
    .description(
        "context-parallel prefill across ranks (MPI; every rank a process) against the "
        "one-process chunked pass: states at every piece start and the output; oracle: fp64")
    .param("T", 16384, {}, "tokens")
    .param("ranks", 4, {}, "CP ranks: the launcher must start this many (--launch ... {ranks})")
    .param("order", "natural", {"natural", "zigzag"}, "rank r holds piece r, or r and 2W-1-r")
    .param("precision", "ieee", {"ieee", "bf16", "tf32_rz", "tf32_rne", "tf32x3"},
           "dot precision of the (M, H) products and the scan")
    .param("decay", "slow", {"slow", "fast"}, "slow: rates in [1e-6, 1e-1]; fast: -5 sigmoid")
    .param("H", 1, {}, "heads (H = HV, K = V = 128)")
    // The hidden run's lengths (loupe keeps the asked precision, order and ranks): an eighth to
    // a fifth of the incident's 65,536 tokens, so the hidden run adds a fraction of the asked
    // run's time rather than as much again (issue 22's 60 s bound); multiples of 4096, so
    // zigzag's cut into 2W pieces of whole 64-token chunks holds up to 32 ranks. Drawn in
    // secret for each run.
    .hidden_range("T", 8192, 12288, 4096)
    .inputs([](loupe::CheckSetup& setup) { declare_cp_io(setup, cp_pieces(setup.point())); })
    .reference([](loupe::CheckIo& io) {
      write_chunk_at_shard_starts<float>(io, cp_pieces(io.point()));
    })
    .candidate([](loupe::CheckIo& io) {
      dist::Communicator& world = launched_world(io.point(), "cp_ranks_vs_nocp");
      dist::RankedCpOptions options;
      options.precision = math::parse_precision(io.point().get_string("precision"));
      options.order = io.point().get_string("order");
      KernelOptions kernel_options;
      kernel_options.threads = 1;  // one process per rank already
      const auto out =
          dist::cp_across_ranks(read_inputs<float>(io), kernel_options, world, options);
      write(io, "S", out.boundary_states);
      write(io, "o", out.o);
    })
    .oracle([](loupe::CheckIo& io) {
      write_recurrence_at_shard_starts(io, cp_pieces(io.point()));
    });

namespace {

// Raw decode inputs and parameters for `steps` tokens of `batch` sequences (H = HV).
struct DecodeWork {
  math::RawDecodeInputs raw;
  kernels::cpu::DecodeParams<float> params;
  std::vector<float> state;  // (N, HV, K, V)
  std::vector<float> o;      // (N, HV, V) of the last step
};

DecodeWork make_decode_work(int64_t batch, int64_t heads, int64_t steps, int64_t key_dim,
                            int64_t value_dim, uint64_t seed) {
  DecodeWork work;
  work.raw =
      math::generate_raw_decode_inputs({batch, steps, heads, heads, key_dim, value_dim}, seed);
  work.params.gate_form = math::GateForm::kSoftplus;
  work.params.beta_form = math::BetaForm::kSigmoid;
  work.params.l2norm = true;
  work.params.a_log = work.raw.a_log;
  work.params.dt_bias = work.raw.dt_bias;
  work.state.assign(static_cast<size_t>(batch * heads * key_dim * value_dim), 0.0f);
  work.o.assign(static_cast<size_t>(batch * heads * value_dim), 0.0f);
  return work;
}

kernels::cpu::DecodeStep<float> decode_step_at(const math::RawDecodeInputs& raw, int64_t token) {
  const Shape& s = raw.shape;
  return {raw.q.data() + token * s.heads * s.key_dim,
          raw.k.data() + token * s.heads * s.key_dim,
          raw.v.data() + token * s.value_heads * s.value_dim,
          raw.g_raw.data() + token * s.value_heads * s.key_dim,
          raw.b_raw.data() + token * s.value_heads,
          s.tokens};
}

// Raw decode inputs as check inputs: the generator's arrays under their own names.
void declare_raw_inputs(loupe::CheckSetup& setup, const math::RawDecodeInputs& raw) {
  const Shape& s = raw.shape;
  auto put = [&](const char* name, const std::vector<float>& values, std::vector<int64_t> shape,
                 std::vector<std::string> axes) {
    auto storage = setup.input<float>(name, std::move(shape), std::move(axes));
    std::copy(values.begin(), values.end(), storage.begin());
  };
  put("q", raw.q, {s.batch, s.tokens, s.heads, s.key_dim}, {"B", "T", "H", "K"});
  put("k", raw.k, {s.batch, s.tokens, s.heads, s.key_dim}, {"B", "T", "H", "K"});
  put("v", raw.v, {s.batch, s.tokens, s.value_heads, s.value_dim}, {"B", "T", "HV", "V"});
  put("g_raw", raw.g_raw, {s.batch, s.tokens, s.value_heads, s.key_dim}, {"B", "T", "HV", "K"});
  put("b_raw", raw.b_raw, {s.batch, s.tokens, s.value_heads}, {"B", "T", "HV"});
  put("a_log", raw.a_log, {s.value_heads}, {"HV"});
  put("dt_bias", raw.dt_bias, {s.value_heads, s.key_dim}, {"HV", "K"});
}

math::RawDecodeInputs read_raw_inputs(const loupe::CheckIo& io) {
  const auto& q_shape = io.input_tensor("q").shape();
  const auto& v_shape = io.input_tensor("v").shape();
  math::RawDecodeInputs raw;
  raw.shape = {q_shape[0], q_shape[1], q_shape[2], v_shape[2], q_shape[3], v_shape[3]};
  auto take = [&](const char* name) {
    const auto values = io.input<float>(name);
    return std::vector<float>(values.begin(), values.end());
  };
  raw.q = take("q");
  raw.k = take("k");
  raw.v = take("v");
  raw.g_raw = take("g_raw");
  raw.b_raw = take("b_raw");
  raw.a_log = take("a_log");
  raw.dt_bias = take("dt_bias");
  return raw;
}

void declare_decode_outputs(loupe::CheckSetup& setup, const Shape& s) {
  setup.output<float>("o", {s.batch, s.tokens, s.value_heads, s.value_dim}, {"B", "T", "HV", "V"})
      .along("T")
      .tolerance("rms_ratio", 1e-6);
  setup.output<float>("S", {s.batch, s.value_heads, s.key_dim, s.value_dim}, {"B", "HV", "K", "V"})
      .tolerance("rms_ratio", 1e-6);
}

kernels::cpu::DecodeParams<float> raw_params(const math::RawDecodeInputs& raw) {
  kernels::cpu::DecodeParams<float> params;
  params.gate_form = math::GateForm::kSoftplus;
  params.beta_form = math::BetaForm::kSigmoid;
  params.l2norm = true;
  params.a_log = raw.a_log;
  params.dt_bias = raw.dt_bias;
  return params;
}

// How the decode step reads the raw inputs: softplus gate, sigmoid beta, L2-normalised q and k.
OracleForms decode_forms(const math::RawDecodeInputs& raw) {
  OracleForms forms;
  forms.gate = math::GateForm::kSoftplus;
  forms.beta = math::BetaForm::kSigmoid;
  forms.l2norm = true;
  forms.a_log.assign(raw.a_log.begin(), raw.a_log.end());
  forms.dt_bias.assign(raw.dt_bias.begin(), raw.dt_bias.end());
  return forms;
}

// The independent fp64 token recurrence on the raw decode inputs.
OracleOutputs decode_oracle(const math::RawDecodeInputs& raw) {
  return oracle_recurrence(raw.shape, raw.q, raw.k, raw.v, raw.g_raw, raw.b_raw, decode_forms(raw));
}

// The same recurrence in plain fp32 arithmetic: what any fp32 decode costs on these inputs.
OracleOutputs decode_recurrence_fp32(const math::RawDecodeInputs& raw) {
  return oracle_recurrence<float>(raw.shape, raw.q, raw.k, raw.v, raw.g_raw, raw.b_raw,
                                  decode_forms(raw));
}

void write_decode_oracle(loupe::CheckIo& io) {
  const OracleOutputs out = decode_oracle(read_raw_inputs(io));
  write(io, "o", out.o);
  write(io, "S", out.state);
}

// Plain decode over every step; writes o (B, T, HV, V) and the final state.
void run_plain_decode(loupe::CheckIo& io, kernels::cpu::DecodeVariant variant) {
  const math::RawDecodeInputs raw = read_raw_inputs(io);
  const Shape& s = raw.shape;
  const auto params = raw_params(raw);
  std::vector<float> state(static_cast<size_t>(s.batch * s.value_heads * s.key_dim * s.value_dim));
  auto o = io.output<float>("o");
  for (int64_t token = 0; token < s.tokens; ++token) {
    kernels::cpu::decode_step(variant, params, s, decode_step_at(raw, token), state.data(),
                              o.data() + token * s.value_heads * s.value_dim);
  }
  write(io, "S", state);
}

}  // namespace

LOUPE_CHECK(decode_tiled_vs_merged)
    .description(
        "decode: one program per (sequence, head, V tile of 32) recomputing the per-token work, "
        "against one per (sequence, head); raw q/k, softplus gate, sigmoid beta")
    .param("batch", 8, {}, "sequences")
    .param("H", 16, {}, "heads (H = HV)")
    .param("K", 128, {}, "key dimension")
    .param("V", 128, {}, "value dimension")
    .param("steps", 4, {}, "decode tokens")
    .inputs([](loupe::CheckSetup& setup) {
      const auto& p = setup.point();
      const Shape shape{p.get_int("batch"), p.get_int("steps"), p.get_int("H"),
                        p.get_int("H"),     p.get_int("K"),     p.get_int("V")};
      const auto raw = math::generate_raw_decode_inputs(shape, setup.seed());
      declare_raw_inputs(setup, raw);
      declare_decode_outputs(setup, shape);
    })
    .reference([](loupe::CheckIo& io) {
      run_plain_decode(io, kernels::cpu::DecodeVariant::kMerged);
    })
    .candidate([](loupe::CheckIo& io) {
      run_plain_decode(io, kernels::cpu::DecodeVariant::kTiled);
    })
    .oracle(write_decode_oracle);

LOUPE_CHECK(replay_vs_decode)
    .description(
        "replay decode (checkpoint + ring of the last L steps, state written every L steps) "
        "against plain merged decode")
    .param("batch", 4, {}, "sequences")
    .param("H", 4, {}, "heads (H = HV, K = V = 128)")
    .param("steps", 37, {}, "decode tokens")
    .param("L", 4, {}, "replay window")
    .inputs([](loupe::CheckSetup& setup) {
      const auto& p = setup.point();
      const Shape shape{
          p.get_int("batch"), p.get_int("steps"), p.get_int("H"), p.get_int("H"), kDim, kDim};
      const auto raw = math::generate_raw_decode_inputs(shape, setup.seed());
      declare_raw_inputs(setup, raw);
      declare_decode_outputs(setup, shape);
    })
    .reference([](loupe::CheckIo& io) {
      run_plain_decode(io, kernels::cpu::DecodeVariant::kMerged);
    })
    .candidate([](loupe::CheckIo& io) {
      const math::RawDecodeInputs raw = read_raw_inputs(io);
      const Shape& s = raw.shape;
      kernels::cpu::ReplayDecoder<float> decoder(raw_params(raw), s, io.point().get_int("L"), {});
      auto o = io.output<float>("o");
      for (int64_t token = 0; token < s.tokens; ++token) {
        decoder.step(decode_step_at(raw, token), o.data() + token * s.value_heads * s.value_dim);
      }
      write(io, "S", decoder.state());
    })
    .oracle(write_decode_oracle);

// Both decode variants share their per-token preparation (head mapping, gates, normalisation),
// and replay's reference is merged decode: a fault there agrees with itself in
// decode_tiled_vs_merged and replay_vs_decode. Here the reference is the independent fp64 token
// recurrence (oracle.hpp), and the default point sits at a corner of the domain: grouped value
// heads (HV = 3 H, where hv / (HV / H) matters), K != V, and a V that is not a multiple of the
// tiled kernel's tile of 32.
LOUPE_CHECK(decode_vs_recurrence)
    .description(
        "decode (merged-V or V-tiled kernel) step by step against the independent fp64 token "
        "recurrence; grouped value heads, K != V, V not a multiple of the tile")
    .param("variant", "merged", {"merged", "tiled"}, "the decode kernel")
    .param("batch", 3, {}, "sequences")
    .param("H", 2, {}, "query/key heads")
    .param("HV", 6, {}, "value heads (a multiple of H)")
    .param("K", 96, {}, "key dimension")
    .param("V", 80, {}, "value dimension")
    .param("steps", 5, {}, "decode tokens")
    // Another corner: four value heads on one key head, one token, V under one tile.
    .hidden_point({{"batch", int64_t{2}},
                   {"H", int64_t{1}},
                   {"HV", int64_t{4}},
                   {"K", int64_t{64}},
                   {"V", int64_t{24}},
                   {"steps", int64_t{3}}})
    // Over it, drawn in secret: the batch, V (under a tile or across one) and the steps.
    .hidden_range("batch", 1, 4)
    .hidden_range("V", 8, 56)
    .hidden_range("steps", 1, 6)
    .inputs([](loupe::CheckSetup& setup) {
      const auto& p = setup.point();
      const int64_t heads = p.get_int("H"), value_heads = p.get_int("HV");
      if (heads < 1 || value_heads < heads || value_heads % heads != 0) {
        throw loupe::Error(loupe::ErrorCode::kUsage,
                           "decode_vs_recurrence: HV=" + std::to_string(value_heads) +
                               " is not a positive multiple of H=" + std::to_string(heads),
                           "each key head serves HV / H value heads");
      }
      const Shape shape{p.get_int("batch"), p.get_int("steps"), heads,
                        value_heads,        p.get_int("K"),     p.get_int("V")};
      declare_raw_inputs(setup, math::generate_raw_decode_inputs(shape, setup.seed()));
      // Judged against the fp64 recurrence (the oracle) relative to what plain fp32 arithmetic
      // costs on the same inputs (the reference: the recurrence in fp32): a fixed bound on the
      // error over the output's rms failed an unchanged kernel wherever a one-step output nearly
      // cancels (q . k small against |q| |k|: 5.5e-5 against 1e-5 at one seed of 100), because
      // the rounding error scales with the summed terms and not with their sum; both fp32 paths
      // lose the same digits there. A wrong head, gate or column is of order 1 either way, far
      // above both bounds.
      setup
          .output<float>("o", {shape.batch, shape.tokens, shape.value_heads, shape.value_dim},
                         {"B", "T", "HV", "V"})
          .along("T")
          .tolerance("rms_ratio", kDecodeVsFp32)
          .tolerance_vs_oracle("rms_ratio", kDecodeOverFp32);
      setup
          .output<float>("S", {shape.batch, shape.value_heads, shape.key_dim, shape.value_dim},
                         {"B", "HV", "K", "V"})
          .tolerance("rms_ratio", kDecodeVsFp32)
          .tolerance_vs_oracle("rms_ratio", kDecodeOverFp32);
    })
    .reference([](loupe::CheckIo& io) {
      const OracleOutputs out = decode_recurrence_fp32(read_raw_inputs(io));
      write(io, "o", std::vector<float>(out.o.begin(), out.o.end()));
      write(io, "S", std::vector<float>(out.state.begin(), out.state.end()));
    })
    .candidate([](loupe::CheckIo& io) {
      run_plain_decode(io, kernels::cpu::parse_decode_variant(io.point().get_string("variant")));
    })
    .oracle(write_decode_oracle);

LOUPE_BENCH(decode)
    .description("one decode token for a batch: V-tiled kernel (baseline) against merged-V")
    .param("batch", 32, {}, "sequences")
    .param("H", 16, {}, "heads (H = HV, K = V = 128)")
    .body([](loupe::BenchState& state) {
      const int64_t batch = state.point().get_int("batch");
      const int64_t heads = state.point().get_int("H");
      // Each (token, head) reads and writes the fp32 state twice (two passes).
      state.set_bytes_per_call(4.0 * kDim * kDim * sizeof(float) *
                               static_cast<double>(batch * heads));
      const Shape shape{batch, 1, heads, heads, kDim, kDim};
      auto run = [shape](kernels::cpu::DecodeVariant variant) {
        return [shape, variant](DecodeWork& work) {
          kernels::cpu::decode_step(variant, work.params, shape, decode_step_at(work.raw, 0),
                                    work.state.data(), work.o.data());
        };
      };
      state.exec([batch, heads](
                     uint64_t seed) { return make_decode_work(batch, heads, 1, kDim, kDim, seed); },
                 {{"tiled", run(kernels::cpu::DecodeVariant::kTiled)},
                  {"merged", run(kernels::cpu::DecodeVariant::kMerged)}},
                 [](const DecodeWork& work) {
                   loupe::Tensor o(loupe::DType::kF32, {static_cast<int64_t>(work.o.size())});
                   std::copy(work.o.begin(), work.o.end(), o.mutable_data<float>().begin());
                   return std::vector<loupe::NamedTensor>{{"o", o}};
                 });
    });

namespace {

struct PrefillWork {
  Inputs<float> inputs;
  std::vector<float> o;
};

std::vector<loupe::NamedTensor> prefill_output(const PrefillWork& work) {
  loupe::Tensor o(loupe::DType::kF32, {static_cast<int64_t>(work.o.size())});
  std::copy(work.o.begin(), work.o.end(), o.mutable_data<float>().begin());
  return {{"o", o}};
}

}  // namespace

LOUPE_BENCH(chunk_prefill)
    .description("chunked prefill (C = 64, fp32, 2 threads), K = V = 128, slow decay")
    .param("T", 8192, {}, "tokens")
    .param("H", 2, {}, "heads (H = HV)")
    .body([](loupe::BenchState& state) {
      const int64_t tokens = state.point().get_int("T");
      const int64_t heads = state.point().get_int("H");
      state.exec(
          [tokens, heads](uint64_t seed) {
            math::GeneratorOptions options;
            options.decay = math::Decay::kSlow;
            options.seed = seed;
            return PrefillWork{
                math::generate_inputs({1, tokens, heads, heads, kDim, kDim}, options), {}};
          },
          [](PrefillWork& work) { work.o = kernels::cpu::chunk(work.inputs, two_threads()).o; },
          prefill_output);
    });

LOUPE_BENCH(cp_prefill)
    .description("context-parallel prefill (ieee), K = V = 128, H = 2, slow decay")
    .param("T", 8192, {}, "tokens")
    .param("shards", 8, {}, "CP shards")
    .param("threads", 2, {}, "worker threads")
    .body([](loupe::BenchState& state) {
      const int64_t tokens = state.point().get_int("T");
      const int shards = static_cast<int>(state.point().get_int("shards"));
      KernelOptions options;
      options.threads = static_cast<int>(state.point().get_int("threads"));
      state.exec(
          [tokens](uint64_t seed) {
            math::GeneratorOptions generator;
            generator.decay = math::Decay::kSlow;
            generator.seed = seed;
            return PrefillWork{math::generate_inputs({1, tokens, 2, 2, kDim, kDim}, generator), {}};
          },
          [options, shards](PrefillWork& work) {
            work.o = kernels::cpu::cp(work.inputs, options, {shards, math::DotPrecision::kIeee}).o;
          },
          prefill_output);
    });

}  // namespace kda::probes
