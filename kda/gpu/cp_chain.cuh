// kda/gpu/cp_chain.cuh — context parallelism of one head on the GPU, as the engine runs it: per
// shard, H chained from a zero state in fp32 (the ordinary chunked pass) and M chained as a product
// of chunk maps in the precision form under test; then the prefix scan S_{r+1} = M_r S_r + H_r in
// that form. Shared by kda_gpu's --cp mode and kda's cp_merge_gpu check probe.
// Thread-safety: one caller per device at a time (launches on the legacy default stream).
// Ownership: the caller owns the chunk maps; the result is host memory.
#pragma once

#include <string_view>
#include <vector>

#include "kda/gpu/harness.cuh"
#include "kda/kernels/cuda/affine_merge.cuh"

namespace kda::gpu {

using MergeLauncher = cudaError_t (*)(const kernels::cuda::AffineMergeProblem&, cudaStream_t);

struct MergeForm {
  const char* name;
  MergeLauncher launch;
};

// tf32_truncate, tf32x3, fp32, tf32x3_chained_accumulator (affine_merge.cuh).
const std::vector<MergeForm>& merge_forms();
// The form named `name`, or nullptr.
const MergeForm* find_merge_form(std::string_view name);

struct CpRun {
  std::vector<float> boundaries;  // (P − 1, K, V): S_1 … S_{P−1}
  float gpu_ms = 0;
};

// REQUIRES: num_chunks % shards == 0, shards >= 2; m_all (≥ num_chunks, K, K) and
// h_all (≥ num_chunks, K, V) on the device. Throws CudaFailure on a CUDA error.
CpRun run_cp(const MergeForm& form, const DeviceBuffer<float>& m_all,
             const DeviceBuffer<float>& h_all, int num_chunks, int shards);

}  // namespace kda::gpu
