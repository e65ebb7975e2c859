// tests/unit/kda_cuda/chunk_prefill_shape_test.cpp — what the chunked prefill's launchers refuse
// (chunk_prefill_shape_error, kda/kernels/cuda/chunk_prefill.cuh) and the workspace they need,
// on the host: the launchers return cudaErrorInvalidValue without launching for every problem
// named here, so a bad shape never reaches a kernel.
#include <gtest/gtest.h>

#ifdef LOUPE_CUDA_TIMER_TESTS  // the CUDA headers are on the include path
#include <string>

#include "kda/kernels/cuda/chunk_prefill.cuh"

namespace {

namespace cuda = kda::kernels::cuda;

// A problem the kernels can run; pointers are never dereferenced by the shape check.
cuda::ChunkPrefillProblem runnable() {
  static float storage[1];
  static const __nv_bfloat16 bf16_storage[1] = {};
  cuda::ChunkPrefillProblem p;
  p.q_global = p.k_global = p.v_global = bf16_storage;
  p.g_global = p.beta_global = storage;
  p.batch = 2, p.tokens = 128, p.heads = 1, p.value_heads = 3;
  p.key_dim = 128, p.value_dim = 128, p.scale = 0.088f;
  p.workspace = {storage, storage, storage, storage, storage, storage};
  return p;
}

std::string error_of(const cuda::ChunkPrefillProblem& p) {
  const char* error = cuda::chunk_prefill_shape_error(p);
  return error == nullptr ? "" : error;
}

TEST(ChunkPrefillShapeTest, ARunnableProblemHasNoError) { EXPECT_EQ(error_of(runnable()), ""); }

TEST(ChunkPrefillShapeTest, EachBadDimensionIsNamed) {
  auto p = runnable();
  p.tokens = 100;
  EXPECT_EQ(error_of(p), "T must be a positive multiple of 64");
  p = runnable();
  p.key_dim = 64;
  EXPECT_EQ(error_of(p), "K and V must be 128 (the only head sizes compiled)");
  p = runnable();
  p.value_heads = 4, p.heads = 3;
  EXPECT_EQ(error_of(p), "HV must be a positive multiple of H (at most 65535)");
  p = runnable();
  p.batch = 0;
  EXPECT_EQ(error_of(p), "batch must be in [1, 65535]");
}

TEST(ChunkPrefillShapeTest, RecordedStatesMustFallOnAnEvenGridOfChunks) {
  auto p = runnable();  // 2 chunks per sequence
  static float records[1];
  p.record_global = records;
  p.record_every = 2;
  EXPECT_EQ(error_of(p), "");
  p.record_every = 3;
  EXPECT_EQ(error_of(p), "record_every must divide the number of chunks T / 64");
  p.record_every = 0;
  EXPECT_EQ(error_of(p), "record_every must divide the number of chunks T / 64");
}

TEST(ChunkPrefillShapeTest, MissingBuffersAreRefused) {
  auto p = runnable();
  p.beta_global = nullptr;
  EXPECT_EQ(error_of(p), "an input pointer is null");
  p = runnable();
  p.workspace.a_qk = nullptr;
  EXPECT_EQ(error_of(p), "a workspace pointer is null");
}

TEST(ChunkPrefillShapeTest, WorkspaceHasOneEntryPerSequenceChunkAndValueHead) {
  const auto sizes = cuda::chunk_workspace_sizes(runnable());  // B = 2, T = 128, HV = 3
  EXPECT_EQ(sizes.entries, 2 * 2 * 3);
  EXPECT_EQ(sizes.q_decayed, 12 * 64 * 128);
  EXPECT_EQ(sizes.w, 12 * 64 * 128);
  EXPECT_EQ(sizes.u, 12 * 64 * 128);
  EXPECT_EQ(sizes.a_qk, 12 * 64 * 64);
  EXPECT_EQ(sizes.decay_end, 12 * 128);
}

}  // namespace
#else
TEST(ChunkPrefillShapeTest, Skipped) {
  GTEST_SKIP() << "no CUDA toolkit at configure time: the prefill's header is not compiled here";
}
#endif
