// kda/gpu/prefill_check.cu — `kda_gpu --prefill`: the chunked prefill on the GPU against the fp64
// token recurrence, at issue 26's shapes up to T = 65536, H = 64, and issue 36's: the
// context-parallel pass (T = 65536, H = 4, 16 shards), T = 1000 (a partial last chunk) and a packed
// varlen batch (cu_seqlens), in memory. Each point: fresh
// inputs (reference.hpp's prefill_inputs, q/k/v in bf16), one GPU pass (chunk_intra +
// chunk_state, outputs poisoned first), the fp64 recurrence of kda/probes/oracle.hpp (the
// independent formulation kda's probes judge against, one thread per (sequence, value head)), and
// the bf16 floor: that recurrence rounded to bf16, the best a bf16 engine can store. A point
// passes when the GPU is at least as close to fp64 as the floor (gpu / floor <= 1) and within
// bf16's unit roundoff of the floor (rms(GPU − floor) / rms(floor) <= 2^-8) — the tolerances of
// `loupe probe run chunk_gpu_vs_recurrent`, which moves every tensor through loupe's runtime and
// so takes over ten minutes at T = 65536, H = 64; this takes seconds.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kda/gpu/harness.cuh"
#include "kda/gpu/prefill.cuh"
#include "kda/gpu/reference.hpp"
#include "kda/probes/oracle.hpp"

namespace kda::gpu {
namespace {

namespace cuda = kda::kernels::cuda;

struct PrefillPoint {
  int tokens, heads, value_heads;
  GateKind gate;
  cuda::ChainPrecision precision;
  int shards = 1;              // >= 2: intra-card context parallelism (launch_chunk_prefill_cp)
  std::vector<int> lengths{};  // varlen: the packed sequences (tokens = their sum)
};

std::string lengths_name(const std::vector<int>& lengths) {
  std::string name = "[";
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (i > 0) name.push_back(',');
    name.append(std::to_string(lengths[i]));
  }
  name.push_back(']');
  return name;
}

const char* precision_name(cuda::ChainPrecision precision) {
  return precision == cuda::ChainPrecision::kTf32x3 ? "tf32x3" : "tf32";
}

// rms(x − y) / rms(y) for two float arrays against one double array, and x against y itself.
struct Ratios {
  double gpu = NAN, floor = NAN, gpu_vs_floor = NAN;
};

Ratios ratios(const std::vector<float>& gpu, const std::vector<double>& exact) {
  std::vector<float> floor(exact.size());
  for (size_t i = 0; i < exact.size(); ++i) {
    floor[i] = bf16_bits_to_float(to_bf16_bits(static_cast<float>(exact[i])));
  }
  Ratios out;
  out.gpu = rms_ratio(gpu.data(), exact.data(), static_cast<int64_t>(exact.size()));
  out.floor = rms_ratio(floor.data(), exact.data(), static_cast<int64_t>(exact.size()));
  out.gpu_vs_floor = rms_ratio(gpu.data(), floor.data(), static_cast<int64_t>(exact.size()));
  return out;
}

bool within(const Ratios& r) {
  // NaN (an unwritten, poisoned element) fails every comparison.
  return r.gpu <= r.floor && r.gpu_vs_floor <= 0x1p-8;
}

Result run_point(const HarnessOptions& options, const PrefillPoint& point, int threads) {
  const auto start = std::chrono::steady_clock::now();
  // Inputs for T rounded up to 64 (what prefill_inputs draws), cut to T: a sequence's tail chunk
  // then holds real tokens only, and the GPU must not read past them.
  const int drawn = (point.tokens + kChunkSize - 1) / kChunkSize * kChunkSize;
  PrefillInputs in =
      prefill_inputs(options.seed, point.gate, 1, drawn, point.heads, point.value_heads, threads);
  const int64_t key_row = int64_t{point.heads} * kKeyDim, value_row = int64_t{point.value_heads};
  in.q.resize(point.tokens * key_row), in.k.resize(point.tokens * key_row);
  in.v.resize(point.tokens * value_row * kValueDim),
      in.g.resize(point.tokens * value_row * kKeyDim);
  in.beta.resize(point.tokens * value_row);
  PrefillShape prefill_shape{1, point.tokens, point.heads, point.value_heads};
  prefill_shape.lengths = point.lengths;
  GpuPrefill prefill(prefill_shape);
  prefill.upload(in.q, in.k, in.v, in.g, in.beta);
  prefill.o.poison();
  prefill.state.poison();
  if (point.shards > 1) {
    prefill.launch_cp(point.precision, point.shards);
  } else {
    prefill.launch(point.precision);
  }
  KDA_CUDA_CHECK(cudaGetLastError());
  KDA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> o = prefill.o.download();
  const std::vector<float> state = prefill.state.download();

  // The fp64 recurrence per sequence (one sequence unless varlen), packed like the GPU's outputs.
  const std::vector<int> lengths =
      point.lengths.empty() ? std::vector<int>{point.tokens} : point.lengths;
  std::vector<double> exact_o, exact_state;
  int64_t first = 0;
  for (const int length : lengths) {
    auto rows = [&](const std::vector<float>& all, int64_t row) {
      return std::span<const float>(all).subspan(first * row, length * row);
    };
    const Shape shape{1, length, point.heads, point.value_heads, kKeyDim, kValueDim};
    const probes::OracleOutputs exact = probes::oracle_recurrence(
        shape, rows(in.q, key_row), rows(in.k, key_row), rows(in.v, value_row * kValueDim),
        rows(in.g, value_row * kKeyDim), rows(in.beta, value_row), probes::OracleForms{}, {},
        threads);
    exact_o.insert(exact_o.end(), exact.o.begin(), exact.o.end());
    exact_state.insert(exact_state.end(), exact.state.begin(), exact.state.end());
    first += length;
  }
  const Ratios o_ratios = ratios(o, exact_o);
  const Ratios s_ratios = ratios(state, exact_state);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  Result result;
  result.mode = "prefill";
  // Appended piece by piece: GCC 12 misreads `const char* + std::string&&` chains (-Wrestrict).
  std::string name;
  if (point.lengths.empty()) {
    name.append("T=").append(std::to_string(point.tokens));
  } else {
    name.append("varlen ").append(lengths_name(point.lengths));
  }
  name.append(" H=").append(std::to_string(point.heads));
  name.append(" HV=").append(std::to_string(point.value_heads));
  if (point.shards > 1) name.append(" CP P=").append(std::to_string(point.shards));
  name.append(" ").append(gate_kind_name(point.gate));
  name.append(" ").append(precision_name(point.precision));
  result.name = name;
  result.gated = true;
  result.passed = within(o_ratios) && within(s_ratios);
  result.record.add("tokens", point.tokens)
      .add("heads", point.heads)
      .add("value_heads", point.value_heads)
      .add("gate", gate_kind_name(point.gate))
      .add("precision", precision_name(point.precision))
      .add("shards", point.shards)
      .add("sequences", static_cast<int>(lengths.size()))
      .add("o_rms_ratio_gpu_vs_fp64", o_ratios.gpu)
      .add("o_rms_ratio_floor_vs_fp64", o_ratios.floor)
      .add("o_gpu_over_floor", o_ratios.gpu / o_ratios.floor)
      .add("o_rms_ratio_gpu_vs_floor", o_ratios.gpu_vs_floor)
      .add("state_rms_ratio_gpu_vs_fp64", s_ratios.gpu)
      .add("state_rms_ratio_floor_vs_fp64", s_ratios.floor)
      .add("state_gpu_over_floor", s_ratios.gpu / s_ratios.floor)
      .add("state_rms_ratio_gpu_vs_floor", s_ratios.gpu_vs_floor)
      .add("threads", threads)
      .add("seconds", seconds)
      .add("passed", result.passed);
  std::printf(
      "prefill %-34s o: gpu %.3e floor %.3e (%.3f of the floor) | S: gpu %.3e floor %.3e (%.3f) | "
      "%s (%.1f s)\n",
      result.name.c_str(), o_ratios.gpu, o_ratios.floor, o_ratios.gpu / o_ratios.floor,
      s_ratios.gpu, s_ratios.floor, s_ratios.gpu / s_ratios.floor, result.passed ? "pass" : "FAIL",
      seconds);
  std::fflush(stdout);
  return result;
}

}  // namespace

void run_prefill_check(const HarnessOptions& options, std::vector<Result>& results) {
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> tokens = options.token_counts;
  if (tokens.empty())
    tokens = options.quick ? std::vector<int>{1024} : std::vector<int>{1024, 8192, 65536};
  std::vector<int> heads = options.head_counts;
  if (heads.empty()) heads = options.quick ? std::vector<int>{16} : std::vector<int>{16, 32, 64};
  std::vector<PrefillPoint> points;
  // Grouped value heads first (H = 2, HV = 4): both chain precisions, both gates.
  // Steep gates take chunk_intra's block-row path (its whole-chunk product needs each 16-token
  // block's decay within e^80), the others its whole-chunk product.
  for (auto precision : {cuda::ChainPrecision::kTf32, cuda::ChainPrecision::kTf32x3}) {
    for (GateKind gate : {GateKind::kSlowDecay, GateKind::kFastForget, GateKind::kSteepForget}) {
      points.push_back({1024, 2, 4, gate, precision});
    }
  }
  for (int t : tokens) {
    for (int h : heads) {
      for (GateKind gate : {GateKind::kSlowDecay, GateKind::kFastForget}) {
        points.push_back({t, h, h, gate, cuda::ChainPrecision::kTf32});
      }
    }
  }
  // Intra-card context parallelism (few heads, a long sequence), a sequence ending inside a chunk,
  // and packed varlen batches (issue 36's mix; quick: a smaller one).
  const int cp_tokens = options.quick ? 4096 : 65536, cp_shards = options.quick ? 4 : 16;
  const std::vector<int> mix = options.quick ? std::vector<int>{300, 57, 512, 171}
                                             : std::vector<int>{1300, 547, 2048, 963, 271, 3063};
  for (GateKind gate : {GateKind::kSlowDecay, GateKind::kFastForget}) {
    for (auto precision : {cuda::ChainPrecision::kTf32, cuda::ChainPrecision::kTf32x3}) {
      points.push_back({cp_tokens, 4, 4, gate, precision, cp_shards, {}});
    }
    points.push_back({1000, 4, 4, gate, cuda::ChainPrecision::kTf32, 1, {}});
    int mix_tokens = 0;
    for (const int length : mix) mix_tokens += length;
    points.push_back({mix_tokens, 4, 4, gate, cuda::ChainPrecision::kTf32, 1, mix});
    points.push_back({mix_tokens, 2, 4, gate, cuda::ChainPrecision::kTf32x3, 1, mix});
  }
  std::printf(
      "prefill: GPU chunked pass vs the fp64 token recurrence (B = 1, K = V = 128, %d "
      "threads); floor = the fp64 answer rounded to bf16\n",
      threads);
  for (const auto& point : points) results.push_back(run_point(options, point, threads));
}

}  // namespace kda::gpu
