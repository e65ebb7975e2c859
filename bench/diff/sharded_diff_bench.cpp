// sharded_diff_bench: what `loupe diff` costs on a rank-sharded dump — putting the logical tensor
// back together from its shards (check/unshard.hpp), every comparison metric, and the pass that
// attributes the error to ranks — against the plain two-file diff (diff_bench's Float32Pair).
//
// A is cut over 8 ranks as `b t(cp,zigzag) h(tp) d` with tp=2,cp=4 (t and h cut, so every shard
// is many short runs: the hard case for the slab copy); B is the single-device tensor. A is B
// rounded to bfloat16, as in diff_bench, so every metric does real work. Bytes processed count
// both logical sides: a "256 MiB pair" is two 128 MiB float32 tensors, as diff_bench counts.
//   taskset -c 1 build/bin/sharded_diff_bench --benchmark_filter='/33554432'
#include <benchmark/benchmark.h>

#include <bit>
#include <cstdint>
#include <vector>

#include "check/metrics.hpp"
#include "check/unshard.hpp"

namespace {

using loupe::DType;
using loupe::Tensor;
using namespace loupe::check;

struct Setup {
  Tensor logical_b;
  std::vector<Shard> shards_a;
  DimsSpec dims;
  ParallelConfig parallel;
};

// (1, T, 16, 128) float32 with T = count / 2048.
Setup make_setup(int64_t count) {
  Setup setup;
  setup.dims = parse_dims("b t(cp,zigzag) h(tp) d", "bench");
  setup.parallel = parse_parallel("tp=2,cp=4", "bench");
  const int64_t tokens = count / (16 * 128);
  setup.logical_b = Tensor(DType::kF32, {1, tokens, 16, 128});
  auto data_b = setup.logical_b.mutable_data<float>();
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (float& value : data_b) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    value = static_cast<float>(static_cast<int64_t>(state >> 40) - (1 << 23)) / 4e6f;
  }
  // Shard the bf16-rounded copy: rank (tp, cp) holds heads [8 tp, 8 tp + 8) of cp's two chunks.
  const int64_t chunk = tokens / 8;
  for (int64_t rank = 0; rank < 8; ++rank) {
    Shard shard;
    shard.rank = rank;
    shard.coords = setup.parallel.coords_of(rank);
    shard.origin = "bench";
    const int64_t tp = shard.coords[0], cp = shard.coords[1];
    shard.tensor = Tensor(DType::kF32, {1, 2 * chunk, 8, 128});
    auto out = shard.tensor.mutable_data<float>();
    size_t position = 0;
    for (int64_t piece : {cp, 7 - cp}) {
      for (int64_t token = piece * chunk; token < (piece + 1) * chunk; ++token) {
        for (int64_t head = 8 * tp; head < 8 * tp + 8; ++head) {
          for (int64_t channel = 0; channel < 128; ++channel) {
            uint32_t bits = std::bit_cast<uint32_t>(data_b[(token * 16 + head) * 128 + channel]);
            bits += 0x7fffu + ((bits >> 16) & 1u);
            out[position++] = std::bit_cast<float>(bits & 0xffff0000u);
          }
        }
      }
    }
    setup.shards_a.push_back(std::move(shard));
  }
  return setup;
}

void count_bytes(benchmark::State& state, const Setup& setup) {
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<int64_t>(setup.logical_b.nbytes()));
}

// What `loupe diff` adds and does on a sharded side: unshard, every metric, rank attribution.
void ShardedPairEndToEnd(benchmark::State& state) {
  const Setup setup = make_setup(state.range(0));
  for (auto _ : state) {
    const Unsharded a = unshard(setup.shards_a, setup.dims, setup.parallel, "bench");
    const Metrics metrics = compute_metrics(a.tensor, setup.logical_b);
    const ShardAttribution where = attribute_error(a.tensor, setup.logical_b, a.layout);
    benchmark::DoNotOptimize(metrics);
    benchmark::DoNotOptimize(where);
  }
  count_bytes(state, setup);
}
BENCHMARK(ShardedPairEndToEnd)->Arg(1 << 20)->Arg(1 << 25)->Unit(benchmark::kMillisecond);

// The parts alone.
void UnshardOnly(benchmark::State& state) {
  const Setup setup = make_setup(state.range(0));
  for (auto _ : state) {
    const Unsharded a = unshard(setup.shards_a, setup.dims, setup.parallel, "bench");
    benchmark::DoNotOptimize(a.tensor.bytes());
  }
  count_bytes(state, setup);
}
BENCHMARK(UnshardOnly)->Arg(1 << 25)->Unit(benchmark::kMillisecond);

void AttributeOnly(benchmark::State& state) {
  const Setup setup = make_setup(state.range(0));
  const Unsharded a = unshard(setup.shards_a, setup.dims, setup.parallel, "bench");
  for (auto _ : state) {
    const ShardAttribution where = attribute_error(a.tensor, setup.logical_b, a.layout);
    benchmark::DoNotOptimize(where);
  }
  count_bytes(state, setup);
}
BENCHMARK(AttributeOnly)->Arg(1 << 25)->Unit(benchmark::kMillisecond);

// The plain pair on the same data, for the difference unsharding makes.
void PlainPair(benchmark::State& state) {
  const Setup setup = make_setup(state.range(0));
  const Unsharded a = unshard(setup.shards_a, setup.dims, setup.parallel, "bench");
  for (auto _ : state) {
    const Metrics metrics = compute_metrics(a.tensor, setup.logical_b);
    benchmark::DoNotOptimize(metrics);
  }
  count_bytes(state, setup);
}
BENCHMARK(PlainPair)->Arg(1 << 25)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
