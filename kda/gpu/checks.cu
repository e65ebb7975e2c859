// kda/gpu/checks.cu — mode --check: every CUDA kernel against the fp64 CPU reference on fresh
// random inputs, outputs poisoned with NaN before each run.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kda/gpu/harness.cuh"
#include "kda/gpu/reference.hpp"
#include "kda/kernels/cuda/affine_merge.cuh"
#include "kda/kernels/cuda/decode.cuh"

namespace kda::gpu {
namespace {

namespace cuda = kda::kernels::cuda;

// fp32 state and outputs against fp64: rounding of K = 128 sums and of expf/log1pf lands near
// 1e-7; a wrong index or a missed term lands above 1e-3.
constexpr double kDecodeTolerance = 1e-5;
constexpr double kTiledVsMergedTolerance = 1e-6;
constexpr double kFp32MergeTolerance = 1e-5;
constexpr double kTf32x3MergeTolerance = 1e-5;
// Truncated TF32 operands (10 mantissa bits) land near 3e-4 on random data: above fp32 noise,
// below 1e-2.
constexpr double kTf32TruncateLowerBound = 1e-5;
constexpr double kTf32TruncateUpperBound = 1e-2;

__nv_bfloat16* as_bf16(DeviceBuffer<uint16_t>& buffer) {
  return reinterpret_cast<__nv_bfloat16*>(buffer.get());
}

// The larger ratio, and NaN if either is NaN (std::fmax would drop it).
double worst_of(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? NAN : std::fmax(a, b);
}

struct DecodeShape {
  int num_sequences, num_heads, num_value_heads, num_states, steps;
};

void check_decode(const DecodeShape& shape, uint64_t seed, std::vector<Result>& results) {
  Random random(seed);
  const int64_t head_state = int64_t{kKeyDim} * kValueDim;
  const int64_t state_count = int64_t{shape.num_states} * shape.num_value_heads * head_state;
  std::vector<float> state_initial(state_count);
  for (auto& value : state_initial) value = static_cast<float>(random.normal());
  std::vector<double> state_reference(state_initial.begin(), state_initial.end());
  DeviceBuffer<float> state_tiled = to_device(state_initial);
  DeviceBuffer<float> state_merged = to_device(state_initial);
  const int64_t o_count = int64_t{shape.num_sequences} * shape.num_value_heads * kValueDim;
  DeviceBuffer<float> o_tiled(o_count), o_merged(o_count);

  double worst_o_tiled = 0, worst_o_merged = 0, worst_o_between = 0;
  std::vector<int32_t> touched_slots;
  for (int step = 0; step < shape.steps; ++step) {
    // Fresh inputs every step, and fresh slots: continuous batching reassigns them.
    const DecodeInputs inputs = random_decode_inputs(
        shape.num_sequences, shape.num_heads, shape.num_value_heads, shape.num_states, random);
    touched_slots.insert(touched_slots.end(), inputs.state_indices.begin(),
                         inputs.state_indices.end());
    auto q = to_device(inputs.q), k = to_device(inputs.k), v = to_device(inputs.v);
    auto g_raw = to_device(inputs.g_raw), b_raw = to_device(inputs.b_raw);
    auto a_log = to_device(inputs.a_log), dt_bias = to_device(inputs.dt_bias);
    auto indices = to_device(inputs.state_indices);
    cuda::DecodeProblem problem;
    problem.q_global = as_bf16(q), problem.k_global = as_bf16(k), problem.v_global = as_bf16(v);
    problem.g_raw_global = as_bf16(g_raw), problem.b_raw_global = as_bf16(b_raw);
    problem.a_log_global = a_log.get(), problem.dt_bias_global = dt_bias.get();
    problem.state_indices_global = indices.get();
    problem.num_sequences = shape.num_sequences, problem.num_heads = shape.num_heads;
    problem.num_value_heads = shape.num_value_heads, problem.num_states = shape.num_states;
    problem.key_dim = kKeyDim, problem.value_dim = kValueDim;
    o_tiled.poison();
    o_merged.poison();
    // Alternate which kernel runs first, so neither can profit from what the other left behind.
    for (int order = 0; order < 2; ++order) {
      const bool tiled_now = (order == 0) == (step % 2 == 0);
      problem.state_global = tiled_now ? state_tiled.get() : state_merged.get();
      problem.o_global = tiled_now ? o_tiled.get() : o_merged.get();
      KDA_CUDA_CHECK(tiled_now ? cuda::launch_tiled_v_decode(problem, nullptr)
                               : cuda::launch_merged_v_decode(problem, nullptr));
      KDA_CUDA_CHECK(cudaDeviceSynchronize());
    }
    std::vector<double> o_reference;
    decode_reference(inputs, state_reference, o_reference);
    const auto o_tiled_host = o_tiled.download(), o_merged_host = o_merged.download();
    worst_o_tiled =
        worst_of(worst_o_tiled, rms_ratio(o_tiled_host.data(), o_reference.data(), o_count));
    worst_o_merged =
        worst_of(worst_o_merged, rms_ratio(o_merged_host.data(), o_reference.data(), o_count));
    worst_o_between =
        worst_of(worst_o_between, rms_ratio(o_merged_host.data(), o_tiled_host.data(), o_count));
  }
  const auto tiled_host = state_tiled.download(), merged_host = state_merged.download();
  const double state_tiled_ratio =
      rms_ratio(tiled_host.data(), state_reference.data(), state_count);
  const double state_merged_ratio =
      rms_ratio(merged_host.data(), state_reference.data(), state_count);
  const double state_between = rms_ratio(merged_host.data(), tiled_host.data(), state_count);
  // Slots no sequence named must be bit-identical to before.
  std::vector<bool> touched(shape.num_states, false);
  for (int32_t slot : touched_slots) touched[slot] = true;
  int64_t untouched_changed = 0;
  for (int slot = 0; slot < shape.num_states; ++slot) {
    if (touched[slot]) continue;
    const int64_t begin = int64_t{slot} * shape.num_value_heads * head_state;
    const size_t bytes = sizeof(float) * shape.num_value_heads * head_state;
    untouched_changed +=
        std::memcmp(tiled_host.data() + begin, state_initial.data() + begin, bytes) != 0;
    untouched_changed +=
        std::memcmp(merged_host.data() + begin, state_initial.data() + begin, bytes) != 0;
  }
  const bool passed = worst_o_tiled <= kDecodeTolerance && worst_o_merged <= kDecodeTolerance &&
                      state_tiled_ratio <= kDecodeTolerance &&
                      state_merged_ratio <= kDecodeTolerance &&
                      worst_o_between <= kTiledVsMergedTolerance &&
                      state_between <= kTiledVsMergedTolerance && untouched_changed == 0;
  Result result;
  result.mode = "check";
  result.name = "decode N=" + std::to_string(shape.num_sequences) +
                " H=" + std::to_string(shape.num_heads) +
                " HV=" + std::to_string(shape.num_value_heads);
  result.gated = true;
  result.passed = passed;
  result.record.add("check", "decode_tiled_merged_vs_fp64")
      .add("N", shape.num_sequences)
      .add("H", shape.num_heads)
      .add("HV", shape.num_value_heads)
      .add("num_states", shape.num_states)
      .add("steps", shape.steps)
      .add("seed", static_cast<int64_t>(seed))
      .add("o_rms_ratio_tiled", worst_o_tiled)
      .add("o_rms_ratio_merged", worst_o_merged)
      .add("state_rms_ratio_tiled", state_tiled_ratio)
      .add("state_rms_ratio_merged", state_merged_ratio)
      .add("o_rms_ratio_merged_vs_tiled", worst_o_between)
      .add("state_rms_ratio_merged_vs_tiled", state_between)
      .add("untouched_slots_changed", untouched_changed)
      .add("tolerance", kDecodeTolerance)
      .add("tolerance_merged_vs_tiled", kTiledVsMergedTolerance)
      .add("passed", passed);
  std::printf(
      "check %-32s o tiled %.2e merged %.2e | state tiled %.2e merged %.2e | "
      "merged vs tiled %.2e %.2e | untouched changed %lld  %s\n",
      result.name.c_str(), worst_o_tiled, worst_o_merged, state_tiled_ratio, state_merged_ratio,
      worst_o_between, state_between, static_cast<long long>(untouched_changed),
      passed ? "PASS" : "FAIL");
  results.push_back(std::move(result));
}

using MergeLauncher = cudaError_t (*)(const cuda::AffineMergeProblem&, cudaStream_t);

struct MergeForm {
  const char* name;
  MergeLauncher launch;
};

const MergeForm kMergeForms[] = {
    {"tf32_truncate", cuda::launch_tf32_truncate_affine_merge},
    {"tf32x3", cuda::launch_tf32x3_affine_merge},
    {"fp32", cuda::launch_fp32_affine_merge},
    {"tf32x3_chained_accumulator", cuda::launch_tf32x3_chained_accumulator_affine_merge},
    {"tf32x3_exact_diagonal", cuda::launch_tf32x3_exact_diagonal_affine_merge},
};

// out = A·B + C on `batch` random problems: A near identity (like M), B and C like states.
void check_merge(const MergeForm& form, int rows, int inner, int cols, int batch, uint64_t seed,
                 std::vector<Result>& results) {
  Random random(seed);
  std::vector<float> a(int64_t{batch} * rows * inner), b(int64_t{batch} * inner * cols),
      c(int64_t{batch} * rows * cols);
  for (int entry = 0; entry < batch; ++entry) {
    for (int row = 0; row < rows; ++row) {
      for (int col = 0; col < inner; ++col) {
        a[(int64_t{entry} * rows + row) * inner + col] =
            static_cast<float>((row == col ? 1.0 : 0.0) + 0.05 * random.normal());
      }
    }
  }
  for (auto& value : b) value = static_cast<float>(random.normal());
  for (auto& value : c) value = static_cast<float>(random.normal());
  auto a_device = to_device(a), b_device = to_device(b), c_device = to_device(c);
  DeviceBuffer<float> out(c.size());
  out.poison();
  cuda::AffineMergeProblem problem;
  problem.a_global = a_device.get(), problem.a_batch_stride = int64_t{rows} * inner;
  problem.b_global = b_device.get(), problem.b_batch_stride = int64_t{inner} * cols;
  problem.c_global = c_device.get(), problem.c_batch_stride = int64_t{rows} * cols;
  problem.out_global = out.get(), problem.out_batch_stride = int64_t{rows} * cols;
  problem.batch = batch, problem.rows = rows, problem.inner = inner, problem.cols = cols;
  KDA_CUDA_CHECK(form.launch(problem, nullptr));
  KDA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> reference(c.size());
  for (int entry = 0; entry < batch; ++entry) {
    for (int row = 0; row < rows; ++row) {
      for (int col = 0; col < cols; ++col) {
        double sum = c[(int64_t{entry} * rows + row) * cols + col];
        for (int k = 0; k < inner; ++k) {
          sum += double(a[(int64_t{entry} * rows + row) * inner + k]) *
                 double(b[(int64_t{entry} * inner + k) * cols + col]);
        }
        reference[(int64_t{entry} * rows + row) * cols + col] = sum;
      }
    }
  }
  const auto out_host = out.download();
  const double ratio = rms_ratio(out_host.data(), reference.data(), out_host.size());
  const std::string name = form.name;
  bool passed;
  std::string expectation;
  if (name == "tf32_truncate") {
    passed = ratio >= kTf32TruncateLowerBound && ratio <= kTf32TruncateUpperBound;
    expectation = "in [1e-5, 1e-2] (TF32 operands)";
  } else {
    const double tolerance = name == "fp32" ? kFp32MergeTolerance : kTf32x3MergeTolerance;
    passed = ratio <= tolerance;
    expectation = "<= 1e-5";
  }
  Result result;
  result.mode = "check";
  result.name = "affine_merge " + name + " " + std::to_string(rows) + "x" + std::to_string(inner) +
                "x" + std::to_string(cols) + " batch " + std::to_string(batch);
  result.gated = true;
  result.passed = passed;
  result.record.add("check", "affine_merge_vs_fp64")
      .add("form", name)
      .add("rows", rows)
      .add("inner", inner)
      .add("cols", cols)
      .add("batch", batch)
      .add("seed", static_cast<int64_t>(seed))
      .add("rms_ratio", ratio)
      .add("expected", expectation)
      .add("passed", passed);
  std::printf("check %-40s rms ratio %.2e (expected %s)  %s\n", result.name.c_str(), ratio,
              expectation.c_str(), passed ? "PASS" : "FAIL");
  results.push_back(std::move(result));
}

// How does the tensor core read an fp32 operand as TF32? A = (1 + 3·2^-12) I, B = I: truncation
// (keep 10 mantissa bits) gives 1, round-to-nearest gives 1 + 2^-10, exact gives 1 + 3·2^-12.
void check_tf32_rounding(const MergeForm& form, const char* expected_mode,
                         std::vector<Result>& results) {
  const int n = 128;
  const float diagonal = 1.0f + 3.0f * 0x1.0p-12f;
  std::vector<float> a(n * n, 0.0f), b(n * n, 0.0f);
  for (int i = 0; i < n; ++i) a[i * n + i] = diagonal, b[i * n + i] = 1.0f;
  auto a_device = to_device(a), b_device = to_device(b);
  DeviceBuffer<float> out(n * n);
  out.poison();
  cuda::AffineMergeProblem problem;
  problem.a_global = a_device.get(), problem.b_global = b_device.get();
  problem.out_global = out.get();
  problem.batch = 1, problem.rows = n, problem.inner = n, problem.cols = n;
  KDA_CUDA_CHECK(form.launch(problem, nullptr));
  KDA_CUDA_CHECK(cudaDeviceSynchronize());
  const auto host = out.download();
  int truncated = 0, rounded = 0, exact = 0, other = 0;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const float value = host[i * n + j];
      if (i != j) {
        other += value != 0.0f;
        continue;
      }
      if (value == 1.0f) {
        ++truncated;
      } else if (value == 1.0f + 0x1.0p-10f) {
        ++rounded;
      } else if (value == diagonal) {
        ++exact;
      } else {
        ++other;
      }
    }
  }
  const char* observed = truncated == n && other == 0 ? "truncate"
                         : rounded == n && other == 0 ? "round_nearest"
                         : exact == n && other == 0   ? "exact"
                                                      : "mixed";
  const bool passed = std::string(observed) == expected_mode;
  Result result;
  result.mode = "check";
  result.name = std::string("operand rounding ") + form.name;
  result.gated = true;
  result.passed = passed;
  result.record.add("check", "tf32_operand_rounding")
      .add("form", form.name)
      .add("observed", observed)
      .add("expected", expected_mode)
      .add("passed", passed);
  std::printf("check %-40s A = (1 + 3*2^-12) I: observed %s (expected %s)  %s\n",
              result.name.c_str(), observed, expected_mode, passed ? "PASS" : "FAIL");
  results.push_back(std::move(result));
}

// How does one mma round its sum? Row i of A is (1, 3·2^-25, 0, …), B's first two rows are ones:
// every output is 1 + 0.75 ulp(1), exact operands in TF32. Round to nearest gives 1 + 2^-23,
// truncation gives 1. Reported, not gated: it explains the chained-accumulator drift.
void probe_mma_accumulation(std::vector<Result>& results) {
  const int n = 128;
  std::vector<float> a(n * n, 0.0f), b(n * n, 0.0f);
  for (int i = 0; i < n; ++i) a[i * n] = 1.0f, a[i * n + 1] = 3.0f * 0x1.0p-25f;
  for (int j = 0; j < n; ++j) b[j] = 1.0f, b[n + j] = 1.0f;
  auto a_device = to_device(a), b_device = to_device(b);
  DeviceBuffer<float> out(n * n);
  out.poison();
  cuda::AffineMergeProblem problem;
  problem.a_global = a_device.get(), problem.b_global = b_device.get();
  problem.out_global = out.get();
  problem.batch = 1, problem.rows = n, problem.inner = n, problem.cols = n;
  KDA_CUDA_CHECK(cuda::launch_tf32_truncate_affine_merge(problem, nullptr));
  KDA_CUDA_CHECK(cudaDeviceSynchronize());
  const auto host = out.download();
  int truncated = 0, rounded = 0;
  for (float value : host) {
    truncated += value == 1.0f;
    rounded += value == 1.0f + 0x1.0p-23f;
  }
  const char* observed = truncated == n * n ? "truncate"
                         : rounded == n * n ? "round_nearest"
                                            : "mixed";
  Result result;
  result.mode = "check";
  result.name = "mma accumulation rounding";
  result.record.add("check", "mma_accumulation_rounding").add("observed", observed);
  std::printf("check %-40s 1 + 0.75 ulp summed in one mma: observed %s (reported)\n",
              result.name.c_str(), observed);
  results.push_back(std::move(result));
}

}  // namespace

void run_checks(const HarnessOptions& options, std::vector<Result>& results) {
  const DecodeShape shapes[] = {
      {3, 2, 4, 7, 3},    // grouped value heads, slots drawn from a larger pool
      {33, 4, 8, 40, 3},  // more sequences than one wave of tiny CTAs
      {4, 32, 32, 4, 2},  // Kimi-Linear's head count
  };
  uint64_t seed = options.seed * 1000 + 1;
  for (const auto& shape : shapes) check_decode(shape, seed++, results);
  for (const auto& form : kMergeForms) check_merge(form, 128, 128, 128, 3, seed++, results);
  check_merge(kMergeForms[1], 128, 128, 256, 2, seed++, results);  // [M | H] side by side
  check_tf32_rounding(kMergeForms[0], "truncate", results);
  check_tf32_rounding(kMergeForms[1], "exact", results);
  check_tf32_rounding(kMergeForms[2], "exact", results);
  check_tf32_rounding(kMergeForms[3], "exact", results);
  check_tf32_rounding(kMergeForms[4], "exact", results);
  check_merge(kMergeForms[4], 128, 128, 256, 2, seed++, results);  // rows ≠ cols, diagonal per tile
  probe_mma_accumulation(results);
}

}  // namespace kda::gpu
