// diff_bench: how fast `loupe diff` computes every metric (max_abs, max_rel, rms_ratio, cos_dist,
// ulp_max, ulp_p99, mismatch_count/frac, nonfinite_mismatch) over a pair of tensors.
//
// The pair is realistic rather than kind: A is B rounded to bfloat16 (stored as float32), so ULP
// distances spread over many binades and the exact ULP p99 needs its refinement pass.
// Bytes processed count both sides: a 256 MiB pair is two 128 MiB float32 tensors.
//   build/bin/diff_bench --benchmark_filter=Float32Pair/33554432
#include <benchmark/benchmark.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "check/localise.hpp"
#include "check/metrics.hpp"

namespace {

using loupe::DType;
using loupe::Tensor;

struct Pair {
  Tensor a;
  Tensor b;
};

Pair make_pair(int64_t count, DType dtype_a) {
  Pair pair{Tensor(DType::kF32, {count}), Tensor(DType::kF32, {count})};
  auto data_a = pair.a.mutable_data<float>();
  auto data_b = pair.b.mutable_data<float>();
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (int64_t index = 0; index < count; ++index) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float value = static_cast<float>(static_cast<int64_t>(state >> 40) - (1 << 23)) / 4e6f;
    data_b[index] = value;
    uint32_t bits = std::bit_cast<uint32_t>(value);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    data_a[index] = std::bit_cast<float>(bits & 0xffff0000u);
  }
  if (dtype_a != DType::kF32) pair.a = pair.a.converted(dtype_a);
  return pair;
}

// The f32/f32 loop `loupe diff` runs on two float32 files: every metric in one pass (plus the
// p99 refinement pass).
void Float32Pair(benchmark::State& state) {
  const Pair pair = make_pair(state.range(0), DType::kF32);
  for (auto _ : state) {
    loupe::check::Metrics metrics = loupe::check::compute_metrics(pair.a, pair.b);
    benchmark::DoNotOptimize(metrics);
  }
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(pair.a.nbytes() + pair.b.nbytes()));
}
BENCHMARK(Float32Pair)->Arg(1 << 20)->Arg(1 << 25)->Unit(benchmark::kMillisecond);

// A pair within a few ULPs (a float32 kernel against its reference): the ULP p99 is read from
// the exact buckets, so this is the one pass alone.
void Float32PairWithinFewUlps(benchmark::State& state) {
  const int64_t count = state.range(0);
  Pair pair = make_pair(count, DType::kF32);
  auto data_a = pair.a.mutable_data<float>();
  const auto data_b = pair.b.data<float>();
  for (int64_t index = 0; index < count; ++index) {
    data_a[index] = std::bit_cast<float>(
        static_cast<uint32_t>(std::bit_cast<uint32_t>(data_b[index]) + index % 5));
  }
  for (auto _ : state) {
    loupe::check::Metrics metrics = loupe::check::compute_metrics(pair.a, pair.b);
    benchmark::DoNotOptimize(metrics);
  }
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(pair.a.nbytes() + pair.b.nbytes()));
}
BENCHMARK(Float32PairWithinFewUlps)->Arg(1 << 20)->Arg(1 << 25)->Unit(benchmark::kMillisecond);

// bfloat16 against float32: the chunked decode-to-double path.
void BFloat16AgainstFloat32(benchmark::State& state) {
  const Pair pair = make_pair(state.range(0), DType::kBF16);
  for (auto _ : state) {
    loupe::check::Metrics metrics = loupe::check::compute_metrics(pair.a, pair.b);
    benchmark::DoNotOptimize(metrics);
  }
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(pair.a.nbytes() + pair.b.nbytes()));
}
BENCHMARK(BFloat16AgainstFloat32)->Arg(1 << 22)->Unit(benchmark::kMillisecond);

// The --along pass (error profile and slice shares) over a (T, H, V) tensor.
void ProfileAlongT(benchmark::State& state) {
  const int64_t count = state.range(0);
  Pair pair = make_pair(count, DType::kF32);
  const std::vector<int64_t> shape = {count / 512, 4, 128};
  const Tensor a(DType::kF32, shape, std::shared_ptr<const void>(), pair.a.bytes());
  const Tensor b(DType::kF32, shape, std::shared_ptr<const void>(), pair.b.bytes());
  const loupe::check::Metrics metrics = loupe::check::compute_metrics(a, b);
  for (auto _ : state) {
    auto where = loupe::check::localise(a, b, metrics, {"T", "H", "V"}, std::string("T"));
    benchmark::DoNotOptimize(where);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(a.nbytes() + b.nbytes()));
}
BENCHMARK(ProfileAlongT)->Arg(1 << 22)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
