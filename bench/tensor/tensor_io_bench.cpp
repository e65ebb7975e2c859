// Throughput of tensor I/O: what a diff over large activations pays before comparing anything.
// Run: build/bin/tensor_io_bench (files go to the system temp directory and are removed).
#include <unistd.h>

#include <filesystem>
#include <string>

#include <benchmark/benchmark.h>

#include "loupe/tensor.hpp"

namespace loupe {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() / ("loupe_tensor_bench_" + std::to_string(::getpid()) + name);
}

Tensor ramp_f32(int64_t count) {
  Tensor tensor(DType::kF32, {count});
  auto values = tensor.mutable_data<float>();
  for (int64_t index = 0; index < count; ++index) {
    values[index] = static_cast<float>(index % 4099) * 0.37f - 700.0f;
  }
  return tensor;
}

// Reading a native .npy: above 1 MiB it is a view of the mapping, so this measures parsing and
// mapping, then one pass over the data (as any consumer would make).
void read_npy_native(benchmark::State& state) {
  const fs::path file = scratch(".npy");
  write_npy(file, ramp_f32(state.range(0)));
  for (auto _ : state) {
    const Tensor tensor = read_npy(file);
    double sum = 0;
    for (float value : tensor.data<float>()) sum += value;
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(state.iterations() * state.range(0) * 4);
  fs::remove(file);
}
BENCHMARK(read_npy_native)->Arg(1 << 16)->Arg(1 << 24)->Unit(benchmark::kMillisecond);

void write_npy_f32(benchmark::State& state) {
  const fs::path file = scratch("_w.npy");
  const Tensor tensor = ramp_f32(state.range(0));
  for (auto _ : state) write_npy(file, tensor);
  state.SetBytesProcessed(state.iterations() * state.range(0) * 4);
  fs::remove(file);
}
BENCHMARK(write_npy_f32)->Arg(1 << 24)->Unit(benchmark::kMillisecond);

void read_safetensors_many(benchmark::State& state) {
  const fs::path file = scratch(".safetensors");
  std::vector<NamedTensor> tensors;
  for (int index = 0; index < 64; ++index) {
    tensors.push_back({"layer." + std::to_string(index), ramp_f32(state.range(0) / 64)});
  }
  write_safetensors(file, tensors);
  for (auto _ : state) benchmark::DoNotOptimize(read_safetensors(file));
  state.SetBytesProcessed(state.iterations() * state.range(0) * 4);
  fs::remove(file);
}
BENCHMARK(read_safetensors_many)->Arg(1 << 24)->Unit(benchmark::kMillisecond);

void convert(benchmark::State& state, DType from, DType to) {
  const Tensor source = ramp_f32(state.range(0)).converted(from);
  for (auto _ : state) benchmark::DoNotOptimize(source.converted(to));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK_CAPTURE(convert, f32_to_bf16, DType::kF32, DType::kBF16)->Arg(1 << 22);
BENCHMARK_CAPTURE(convert, f32_to_f16, DType::kF32, DType::kF16)->Arg(1 << 22);
BENCHMARK_CAPTURE(convert, bf16_to_f32, DType::kBF16, DType::kF32)->Arg(1 << 22);
BENCHMARK_CAPTURE(convert, f16_to_f64, DType::kF16, DType::kF64)->Arg(1 << 22);
BENCHMARK_CAPTURE(convert, f32_to_e4m3, DType::kF32, DType::kF8E4M3)->Arg(1 << 22);

void element_as_double_sum(benchmark::State& state) {
  const Tensor source = ramp_f32(state.range(0)).converted(DType::kBF16);
  for (auto _ : state) {
    double sum = 0;
    for (int64_t index = 0; index < source.numel(); ++index) sum += source.element_as_double(index);
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(element_as_double_sum)->Arg(1 << 22);

}  // namespace
}  // namespace loupe

BENCHMARK_MAIN();
