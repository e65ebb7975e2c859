// kda/gpu/prefill_check.cu — `kda_gpu --prefill`: the chunked prefill on the GPU against the fp64
// token recurrence, at issue 26's shapes up to T = 65536, H = 64, in memory. Each point: fresh
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
};

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
  const PrefillInputs in = prefill_inputs(options.seed, point.gate, 1, point.tokens, point.heads,
                                          point.value_heads, threads);
  GpuPrefill prefill({1, point.tokens, point.heads, point.value_heads});
  prefill.upload(in.q, in.k, in.v, in.g, in.beta);
  prefill.o.poison();
  prefill.state.poison();
  prefill.launch(point.precision);
  KDA_CUDA_CHECK(cudaGetLastError());
  KDA_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> o = prefill.o.download();
  const std::vector<float> state = prefill.state.download();

  const Shape shape{1, point.tokens, point.heads, point.value_heads, kKeyDim, kValueDim};
  const probes::OracleOutputs exact = probes::oracle_recurrence(
      shape, in.q, in.k, in.v, in.g, in.beta, probes::OracleForms{}, {}, threads);
  const Ratios o_ratios = ratios(o, exact.o);
  const Ratios s_ratios = ratios(state, exact.state);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  Result result;
  result.mode = "prefill";
  result.name = "T=" + std::to_string(point.tokens) + " H=" + std::to_string(point.heads) +
                " HV=" + std::to_string(point.value_heads) + " " + gate_kind_name(point.gate) +
                " " + precision_name(point.precision);
  result.gated = true;
  result.passed = within(o_ratios) && within(s_ratios);
  result.record.add("tokens", point.tokens)
      .add("heads", point.heads)
      .add("value_heads", point.value_heads)
      .add("gate", gate_kind_name(point.gate))
      .add("precision", precision_name(point.precision))
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
  for (auto precision : {cuda::ChainPrecision::kTf32, cuda::ChainPrecision::kTf32x3}) {
    for (GateKind gate : {GateKind::kSlowDecay, GateKind::kFastForget}) {
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
  std::printf(
      "prefill: GPU chunked pass vs the fp64 token recurrence (B = 1, K = V = 128, %d "
      "threads); floor = the fp64 answer rounded to bf16\n",
      threads);
  for (const auto& point : points) results.push_back(run_point(options, point, threads));
}

}  // namespace kda::gpu
