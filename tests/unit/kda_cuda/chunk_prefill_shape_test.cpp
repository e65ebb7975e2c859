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

std::string cp_error_of(const cuda::ChunkPrefillProblem& p, int shards) {
  const char* error = cuda::chunk_prefill_cp_error(p, shards);
  return error == nullptr ? "" : error;
}

TEST(ChunkPrefillShapeTest, ARunnableProblemHasNoError) { EXPECT_EQ(error_of(runnable()), ""); }

TEST(ChunkPrefillShapeTest, EachBadDimensionIsNamed) {
  auto p = runnable();
  p.tokens = 0;
  EXPECT_EQ(error_of(p), "T must be positive");
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
  EXPECT_EQ(error_of(p), "record_every must divide the number of chunks ⌈T / 64⌉");
  p.record_every = 0;
  EXPECT_EQ(error_of(p), "record_every must divide the number of chunks ⌈T / 64⌉");
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

TEST(ChunkPrefillShapeTest, ASequenceMayEndInsideAChunk) {
  auto p = runnable();  // B = 2, HV = 3
  p.tokens = 100;       // chunks of 64 and 36 tokens per sequence
  EXPECT_EQ(error_of(p), "");
  EXPECT_EQ(cuda::chunk_count(p), 4);
  EXPECT_EQ(cuda::chunk_workspace_sizes(p).entries, 4 * 3);
  p.tokens = 1;
  EXPECT_EQ(cuda::chunk_count(p), 2);
  EXPECT_EQ(cuda::chunks_of(64), 1);
  EXPECT_EQ(cuda::chunks_of(65), 2);
}

TEST(ChunkPrefillShapeTest, AVarlenBatchNeedsBothDescriptorsAndItsChunkCount) {
  static const int cu_seqlens[4] = {0, 100, 164, 165}, cu_chunks[4] = {0, 2, 3, 4};
  auto p = runnable();
  p.batch = 3, p.tokens = 165;  // lengths 100, 64, 1 packed
  p.cu_seqlens = cu_seqlens;
  EXPECT_EQ(error_of(p), "cu_seqlens and cu_chunks go together");
  p.cu_chunks = cu_chunks;
  EXPECT_EQ(error_of(p), "total_chunks must be cu_chunks[B], at least one chunk per sequence");
  p.total_chunks = 2;  // fewer chunks than sequences
  EXPECT_EQ(error_of(p), "total_chunks must be cu_chunks[B], at least one chunk per sequence");
  p.total_chunks = 4;
  EXPECT_EQ(error_of(p), "");
  // The workspace follows the descriptors' chunks, not ⌈165 / 64⌉ = 3.
  EXPECT_EQ(cuda::chunk_workspace_sizes(p).entries, 4 * 3);
  static float buffer[1];
  p.transition_global = buffer;
  EXPECT_EQ(error_of(p),
            "recorded states and transitions need sequences of equal length (no cu_seqlens)");
}

TEST(ChunkPrefillShapeTest, ContextParallelismNeedsEqualShardsOfWholeChunks) {
  auto p = runnable();  // B = 2, T = 128: two chunks per sequence
  EXPECT_EQ(cp_error_of(p, 2), "");
  EXPECT_EQ(cp_error_of(p, 1), "context parallelism needs at least 2 shards");
  EXPECT_EQ(cp_error_of(p, 4), "T must be a multiple of 64 x shards");
  p.tokens = 100;
  EXPECT_EQ(cp_error_of(p, 2), "T must be a multiple of 64 x shards");
  p = runnable();
  static const int cu_seqlens[3] = {0, 128, 256}, cu_chunks[3] = {0, 2, 4};
  p.cu_seqlens = cu_seqlens, p.cu_chunks = cu_chunks, p.total_chunks = 4, p.tokens = 256;
  EXPECT_EQ(cp_error_of(p, 2), "context parallelism takes sequences of equal length");
  p = runnable();
  p.batch = 40000;
  EXPECT_EQ(cp_error_of(p, 2), "B x shards must be at most 65535");
  p = runnable();
  p.tokens = 0;  // the plain shape check comes first
  EXPECT_EQ(cp_error_of(p, 2), "T must be positive");
  // Each CP buffer: one K x K (= K x V) matrix per (sequence, shard, value head).
  EXPECT_EQ(cuda::chunk_cp_workspace_elements(runnable(), 2), int64_t{2} * 2 * 3 * 128 * 128);
}

TEST(ChunkPrefillShapeTest, ShardsDoubleUntilTheSecondPassFillsTheGpuOrShardsGetThin) {
  auto p = runnable();
  p.batch = 1, p.heads = p.value_heads = 4, p.tokens = 65536;  // 16 CTAs, 1024 chunks
  EXPECT_EQ(cuda::chunk_prefill_cp_shards(p, 132), 8);         // 128 CTAs in the second pass
  EXPECT_EQ(cuda::chunk_prefill_cp_shards(p, 256), 16);
  EXPECT_EQ(cuda::chunk_prefill_cp_shards(p, 4096), 64);  // 16 chunks per shard at the most
  p.value_heads = p.heads = 64;                           // 256 CTAs already: no CP
  EXPECT_EQ(cuda::chunk_prefill_cp_shards(p, 132), 1);
  p.value_heads = p.heads = 4, p.tokens = 2048;  // 32 chunks: 2 shards of 16
  EXPECT_EQ(cuda::chunk_prefill_cp_shards(p, 132), 2);
  p.tokens = 65536 - 64;  // 1023 chunks: odd, no equal shards
  EXPECT_EQ(cuda::chunk_prefill_cp_shards(p, 132), 1);
  p.tokens = 8100;  // not whole chunks
  EXPECT_EQ(cuda::chunk_prefill_cp_shards(p, 132), 1);
}

}  // namespace
#else
TEST(ChunkPrefillShapeTest, Skipped) {
  GTEST_SKIP() << "no CUDA toolkit at configure time: the prefill's header is not compiled here";
}
#endif
