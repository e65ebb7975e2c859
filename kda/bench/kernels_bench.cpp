// Speed of kda's CPU kernels: tokens/s of recurrent, chunk and cp; cp's thread scaling; decode
// tiled vs merged; the cp_vs_nocp probe's work at T = 65536; and the in-cache read-modify-write
// bandwidth the token recurrence is bound by. All shapes use K = V = 128.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "kda/kernels/cpu/chunk.hpp"
#include "kda/kernels/cpu/cp.hpp"
#include "kda/kernels/cpu/decode.hpp"
#include "kda/kernels/cpu/recurrent.hpp"
#include "kda/math/generator.hpp"

namespace kda::kernels::cpu {
namespace {

constexpr int64_t kDim = 128;

// Inputs are generated once per (T, H, decay): generation costs more than some kernels.
const Inputs<float>& cached_inputs(int64_t tokens, int64_t heads, math::Decay decay) {
  static std::map<std::tuple<int64_t, int64_t, int>, std::unique_ptr<Inputs<float>>> cache;
  auto& slot = cache[{tokens, heads, static_cast<int>(decay)}];
  if (!slot) {
    math::GeneratorOptions options;
    options.decay = decay;
    options.seed = 1;
    slot = std::make_unique<Inputs<float>>(
        math::generate_inputs({1, tokens, heads, heads, kDim, kDim}, options));
  }
  return *slot;
}

void set_token_rate(benchmark::State& state, int64_t tokens) {
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(tokens) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

// Args: T, H, threads.
void BM_Recurrent(benchmark::State& state) {
  const Inputs<float>& inputs = cached_inputs(state.range(0), state.range(1), math::Decay::kSlow);
  KernelOptions options;
  options.threads = static_cast<int>(state.range(2));
  for (auto _ : state) benchmark::DoNotOptimize(recurrent(inputs, options));
  set_token_rate(state, state.range(0));
  // One sweep per token and head, reading and writing the fp32 K × V state.
  state.counters["state_bytes_per_s"] = benchmark::Counter(
      2.0 * kDim * kDim * sizeof(float) * static_cast<double>(state.range(0) * state.range(1)) *
          static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Recurrent)
    ->ArgNames({"T", "H", "threads"})
    ->Args({8192, 2, 1})
    ->Args({65536, 2, 1})
    ->Args({65536, 2, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

// Args: T, H, threads, dtype bits (32 or 64).
void BM_Chunk(benchmark::State& state) {
  const Inputs<float>& inputs = cached_inputs(state.range(0), state.range(1), math::Decay::kSlow);
  KernelOptions options;
  options.threads = static_cast<int>(state.range(2));
  if (state.range(3) == 64) {
    const Inputs<double> wide = convert_inputs<double>(inputs);
    for (auto _ : state) benchmark::DoNotOptimize(chunk(wide, options));
  } else {
    for (auto _ : state) benchmark::DoNotOptimize(chunk(inputs, options));
  }
  set_token_rate(state, state.range(0));
}
BENCHMARK(BM_Chunk)
    ->ArgNames({"T", "H", "threads", "bits"})
    ->Args({8192, 2, 1, 32})
    ->Args({65536, 2, 1, 32})
    ->Args({65536, 2, 2, 32})
    ->Args({65536, 2, 2, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

// Args: T, H, shards, threads, precision (math::DotPrecision as an integer).
void BM_Cp(benchmark::State& state) {
  const Inputs<float>& inputs = cached_inputs(state.range(0), state.range(1), math::Decay::kSlow);
  KernelOptions options;
  options.threads = static_cast<int>(state.range(3));
  const CpOptions cp_options{static_cast<int>(state.range(2)),
                             static_cast<math::DotPrecision>(state.range(4))};
  for (auto _ : state) benchmark::DoNotOptimize(cp(inputs, options, cp_options));
  set_token_rate(state, state.range(0));
  state.SetLabel(std::string(math::precision_name(cp_options.precision)));
}
BENCHMARK(BM_Cp)
    ->ArgNames({"T", "H", "shards", "threads", "precision"})
    ->Args({8192, 2, 8, 1, 0})
    ->Args({8192, 2, 8, 2, 0})
    ->Args({65536, 2, 8, 1, 0})
    ->Args({65536, 2, 8, 2, 0})
    ->Args({65536, 2, 8, 2, static_cast<int64_t>(math::DotPrecision::kTf32Rz)})
    ->Args({65536, 2, 8, 2, static_cast<int64_t>(math::DotPrecision::kTf32x3)})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

// The work of the cp_vs_nocp probe at T = 65536, 8 shards, H = 2: the non-CP fp32 chunked pass
// (with boundary states), cp, and the fp64 chunked oracle. Its budget is 30 s.
void BM_CpVsNoCpProbeWork(benchmark::State& state) {
  const Inputs<float>& inputs = cached_inputs(65536, 2, math::Decay::kSlow);
  KernelOptions options;
  options.threads = static_cast<int>(state.range(0));
  KernelOptions boundaries = options;
  boundaries.boundary_tokens = cp_shard_starts(65536, 8);
  for (auto _ : state) {
    benchmark::DoNotOptimize(chunk(inputs, boundaries));
    benchmark::DoNotOptimize(cp(inputs, options, {8, math::DotPrecision::kTf32Rz}));
    benchmark::DoNotOptimize(chunk(convert_inputs<double>(inputs), boundaries));
  }
}
BENCHMARK(BM_CpVsNoCpProbeWork)
    ->ArgNames({"threads"})
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);

// Args: variant (0 tiled, 1 merged), batch, value heads. One decode token for the whole batch,
// from raw inputs (softplus gate, sigmoid beta, in-kernel L2 normalisation).
void BM_Decode(benchmark::State& state) {
  const auto variant = state.range(0) == 0 ? DecodeVariant::kTiled : DecodeVariant::kMerged;
  const Shape shape{state.range(1), 1, state.range(2), state.range(2), kDim, kDim};
  const auto raw = math::generate_raw_decode_inputs(shape, 2);
  DecodeParams<float> params;
  params.gate_form = math::GateForm::kSoftplus;
  params.beta_form = math::BetaForm::kSigmoid;
  params.l2norm = true;
  params.a_log = raw.a_log;
  params.dt_bias = raw.dt_bias;
  std::vector<float> states(static_cast<size_t>(shape.batch * shape.value_heads * kDim * kDim));
  std::vector<float> o(static_cast<size_t>(shape.batch * shape.value_heads * kDim));
  const DecodeStep<float> step{raw.q.data(),     raw.k.data(),     raw.v.data(),
                               raw.g_raw.data(), raw.b_raw.data(), 1};
  for (auto _ : state) {
    decode_step(variant, params, shape, step, states.data(), o.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(decode_variant_name(variant)));
  // Two passes per token (token_step.hpp), each reading and writing the state.
  state.counters["state_bytes_per_s"] = benchmark::Counter(
      4.0 * kDim * kDim * sizeof(float) * static_cast<double>(shape.batch * shape.value_heads) *
          static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Decode)
    ->ArgNames({"merged", "batch", "HV"})
    ->ArgsProduct({{0, 1}, {1, 8, 32}, {16}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The yardstick for the token recurrence: the plainest read-modify-write sweep over one K × V
// fp32 state (64 KiB, resident in L2), one multiply-add per element.
void BM_StateSweepBandwidth(benchmark::State& state) {
  std::vector<float> buffer(static_cast<size_t>(kDim * kDim), 1.0f);
  std::vector<float> alpha(kDim, 0.999f);
  for (auto _ : state) {
    for (int repeat = 0; repeat < 64; ++repeat) {
      for (int64_t row = 0; row < kDim; ++row) {
        float* state_row = buffer.data() + row * kDim;
        for (int64_t col = 0; col < kDim; ++col)
          state_row[col] = state_row[col] * alpha[row] + 1e-3f;
      }
      benchmark::ClobberMemory();
    }
  }
  state.counters["bytes_per_s"] = benchmark::Counter(
      2.0 * kDim * kDim * sizeof(float) * 64 * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_StateSweepBandwidth)->UseRealTime();

}  // namespace
}  // namespace kda::kernels::cpu

BENCHMARK_MAIN();
