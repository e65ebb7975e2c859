// kda/gpu/cp_chain.cu — context parallelism of one head on the GPU (cp_chain.cuh).
#include <utility>

#include "kda/gpu/cp_chain.cuh"
#include "kda/gpu/reference.hpp"

namespace kda::gpu {
namespace {

namespace cuda = kda::kernels::cuda;

constexpr int64_t kMatrix = int64_t{kKeyDim} * kKeyDim;   // K × K
constexpr int64_t kState = int64_t{kKeyDim} * kValueDim;  // K × V

cuda::AffineMergeProblem merge_problem(const float* a, int64_t a_stride, const float* b,
                                       int64_t b_stride, const float* c, int64_t c_stride,
                                       float* out, int64_t out_stride, int batch) {
  cuda::AffineMergeProblem problem;
  problem.a_global = a, problem.a_batch_stride = a_stride;
  problem.b_global = b, problem.b_batch_stride = b_stride;
  problem.c_global = c, problem.c_batch_stride = c_stride;
  problem.out_global = out, problem.out_batch_stride = out_stride;
  problem.batch = batch, problem.rows = kKeyDim, problem.inner = kKeyDim, problem.cols = kValueDim;
  return problem;
}

}  // namespace

const std::vector<MergeForm>& merge_forms() {
  static const std::vector<MergeForm> forms = {
      {"tf32_truncate", cuda::launch_tf32_truncate_affine_merge},
      {"tf32x3", cuda::launch_tf32x3_affine_merge},
      {"fp32", cuda::launch_fp32_affine_merge},
      {"tf32x3_chained_accumulator", cuda::launch_tf32x3_chained_accumulator_affine_merge},
      {"tf32x3_exact_diagonal", cuda::launch_tf32x3_exact_diagonal_affine_merge},
  };
  return forms;
}

const MergeForm* find_merge_form(std::string_view name) {
  for (const auto& form : merge_forms()) {
    if (name == form.name) return &form;
  }
  return nullptr;
}

CpRun run_cp(const MergeForm& form, const DeviceBuffer<float>& m_all,
             const DeviceBuffer<float>& h_all, int num_chunks, int shards) {
  const int per_shard = num_chunks / shards;
  DeviceBuffer<float> m_chain(shards * kMatrix), m_next(shards * kMatrix);
  DeviceBuffer<float> h_chain(shards * kState), h_next(shards * kState);
  DeviceBuffer<float> boundaries(int64_t{shards - 1} * kState);
  boundaries.poison();
  cudaEvent_t start, stop;
  KDA_CUDA_CHECK(cudaEventCreate(&start));
  KDA_CUDA_CHECK(cudaEventCreate(&stop));
  KDA_CUDA_CHECK(cudaEventRecord(start));
  for (int shard = 0; shard < shards; ++shard) {
    const int64_t first = int64_t{shard} * per_shard;
    KDA_CUDA_CHECK(cudaMemcpyAsync(m_chain.get() + shard * kMatrix, m_all.get() + first * kMatrix,
                                   kMatrix * sizeof(float), cudaMemcpyDeviceToDevice));
    KDA_CUDA_CHECK(cudaMemcpyAsync(h_chain.get() + shard * kState, h_all.get() + first * kState,
                                   kState * sizeof(float), cudaMemcpyDeviceToDevice));
  }
  for (int step = 1; step < per_shard; ++step) {
    // All shards at once: entry `shard` multiplies by chunk shard·per_shard + step.
    const float* m_step = m_all.get() + int64_t{step} * kMatrix;
    const float* h_step = h_all.get() + int64_t{step} * kState;
    KDA_CUDA_CHECK(form.launch(merge_problem(m_step, per_shard * kMatrix, m_chain.get(), kMatrix,
                                             nullptr, 0, m_next.get(), kMatrix, shards),
                               nullptr));
    KDA_CUDA_CHECK(cuda::launch_fp32_affine_merge(
        merge_problem(m_step, per_shard * kMatrix, h_chain.get(), kState, h_step,
                      per_shard * kState, h_next.get(), kState, shards),
        nullptr));
    std::swap(m_chain, m_next);
    std::swap(h_chain, h_next);
  }
  // The scan: S_1 = H_0 (shard 0 starts from zero), S_{r+1} = M_r S_r + H_r.
  KDA_CUDA_CHECK(cudaMemcpyAsync(boundaries.get(), h_chain.get(), kState * sizeof(float),
                                 cudaMemcpyDeviceToDevice));
  for (int shard = 1; shard + 1 < shards; ++shard) {
    KDA_CUDA_CHECK(form.launch(
        merge_problem(m_chain.get() + shard * kMatrix, 0, boundaries.get() + (shard - 1) * kState,
                      0, h_chain.get() + shard * kState, 0, boundaries.get() + shard * kState, 0,
                      1),
        nullptr));
  }
  KDA_CUDA_CHECK(cudaEventRecord(stop));
  KDA_CUDA_CHECK(cudaEventSynchronize(stop));
  CpRun run;
  KDA_CUDA_CHECK(cudaEventElapsedTime(&run.gpu_ms, start, stop));
  KDA_CUDA_CHECK(cudaEventDestroy(start));
  KDA_CUDA_CHECK(cudaEventDestroy(stop));
  run.boundaries = boundaries.download();
  return run;
}

}  // namespace kda::gpu
