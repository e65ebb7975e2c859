// kda/kernels/cuda/chunk_cp.cu — intra-card context parallelism for the chunked prefill
// (chunk_prefill.cuh): a long sequence with few heads leaves most SMs idle in chunk_state (one CTA
// per (sequence, value head, V tile) walks every chunk), so the sequence is cut into P shards that
// walk at once:
//   1. chunk_intra on the whole problem (every chunk is independent);
//   2. chunk_state on the problem reshaped to B·P sequences of T / P tokens, from zero, writing
//   each
//      shard's end state H_r and, in extra tiles, its transition M_r (3×TF32);
//   3. chunk_cp_scan_kernel: S_0 = h0 (or 0), S_{r+1} = M_r S_r + H_r, writing every S_r and the
//      final state S_P; M_r's diagonal multiplies in fp32 and only its off-diagonal part goes
//      through the tensor cores in 3×TF32 (the tf32x3_exact_diagonal form: TF32 here is incident
//      1);
//   4. chunk_state on the reshaped problem from S_r, writing o.
// Four launches on one stream, no host round trip.
#include "kda/kernels/cuda/affine_merge_tile.cuh"
#include "kda/kernels/cuda/chunk_prefill.cuh"

namespace kda::kernels::cuda {
namespace {

using affine_merge_detail::SplitTf32x3;

constexpr int kK = kPrefillKeyDim;    // 128
constexpr int kV = kPrefillValueDim;  // 128
constexpr int kScanTile = 16;         // V columns per scan CTA
constexpr int kScanThreads = 256;     // 8 warps × 16 rows of M
constexpr int kMatrixPitch = kK + 4;  // conflict-free A fragments
constexpr int kTilePitch = kScanTile + 8;

struct ScanShared {
  float transition[kK][kMatrixPitch];  // M_r
  float state[kK][kTilePitch];         // S_r's tile, the B operand
};

__device__ __forceinline__ void copy16(void* shared, const void* global) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global));
}

// grid (V / 16, HV, B). The scan is sequential in r but independent per column tile: each CTA
// carries its 128 × 16 tile of S through the P shards, warp w rows 16 w … 16 w + 15.
__global__ void __launch_bounds__(kScanThreads)
    chunk_cp_scan_kernel(const float* h0, const float* transitions, const float* shard_ends,
                         float* starts, float* final_states, int shards, int value_heads) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  ScanShared& s = *reinterpret_cast<ScanShared*>(shared_raw);
  const int col0 = blockIdx.x * kScanTile, value_head = blockIdx.y, sequence = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = lane / 4, quad = lane % 4;
  const int row0 = 16 * warp;
  constexpr int64_t kStateSize = int64_t{kK} * kV;

  // st[nt]: rows row0 + group (+ 8), columns col0 + 8 nt + 2 quad (+ 1).
  float st[2][4];
  auto for_tile = [&](auto&& body) {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half)
        body(nt, half, row0 + group + 8 * half, 8 * nt + 2 * quad);
    }
  };
  const int64_t sequence_pair = int64_t{sequence} * value_heads + value_head;
  for_tile([&](int nt, int half, int row, int col) {
    float2 value = make_float2(0.0f, 0.0f);
    if (h0 != nullptr) {
      value =
          *reinterpret_cast<const float2*>(h0 + sequence_pair * kStateSize + row * kV + col0 + col);
    }
    st[nt][2 * half] = value.x, st[nt][2 * half + 1] = value.y;
  });

  for (int shard = 0; shard < shards; ++shard) {
    const int64_t pair = (int64_t{sequence} * shards + shard) * value_heads + value_head;
    for_tile([&](int nt, int half, int row, int col) {
      *reinterpret_cast<float2*>(starts + pair * kStateSize + row * kV + col0 + col) =
          make_float2(st[nt][2 * half], st[nt][2 * half + 1]);
    });
    __syncthreads();  // the previous step's reads of s are done
    const float* transition = transitions + pair * kK * kK;
    for (int idx = threadIdx.x; idx < kK * kK / 4; idx += kScanThreads) {
      const int row = idx / (kK / 4), col = 4 * (idx % (kK / 4));
      copy16(&s.transition[row][col], transition + row * kK + col);
    }
    asm volatile("cp.async.commit_group;\n" ::);
    for_tile([&](int nt, int half, int row, int col) {
      s.state[row][col] = st[nt][2 * half];
      s.state[row][col + 1] = st[nt][2 * half + 1];
    });
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    __syncthreads();

    // The off-diagonal part of M_r S_r in 3×TF32.
    float product[2][4] = {};
#pragma unroll 4
    for (int k0 = 0; k0 < kK; k0 += 8) {
      float a[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = row0 + group + 8 * (e % 2), col = k0 + quad + 4 * (e / 2);
        a[e] = row == col ? 0.0f : s.transition[row][col];
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const float b[2] = {s.state[k0 + quad][8 * nt + group],
                            s.state[k0 + quad + 4][8 * nt + group]};
        SplitTf32x3{}(product[nt], a, b);
      }
    }
    const float* end = shard_ends + pair * kStateSize;
    for_tile([&](int nt, int half, int row, int col) {
      const float diagonal = s.transition[row][row];
      const float2 h = *reinterpret_cast<const float2*>(end + row * kV + col0 + col);
      float& s0 = st[nt][2 * half];
      float& s1 = st[nt][2 * half + 1];
      s0 = fmaf(diagonal, s0, product[nt][2 * half]) + h.x;
      s1 = fmaf(diagonal, s1, product[nt][2 * half + 1]) + h.y;
    });
  }
  if (final_states != nullptr) {
    for_tile([&](int nt, int half, int row, int col) {
      *reinterpret_cast<float2*>(final_states + sequence_pair * kStateSize + row * kV + col0 +
                                 col) = make_float2(st[nt][2 * half], st[nt][2 * half + 1]);
    });
  }
}

}  // namespace

cudaError_t launch_chunk_prefill_cp(const ChunkPrefillProblem& problem, int shards,
                                    const ChunkCpWorkspace& cp, cudaStream_t stream) {
  if (chunk_prefill_cp_error(problem, shards) != nullptr || cp.transitions == nullptr ||
      cp.shard_ends == nullptr || cp.starts == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (const cudaError_t status = launch_chunk_intra(problem, stream); status != cudaSuccess) {
    return status;
  }
  ChunkPrefillProblem sharded = problem;
  sharded.batch = problem.batch * shards;
  sharded.tokens = problem.tokens / shards;
  sharded.h0_global = nullptr;
  sharded.o_global = nullptr;
  sharded.state_global = cp.shard_ends;
  sharded.transition_global = cp.transitions;
  if (const cudaError_t status = launch_chunk_state(sharded, stream); status != cudaSuccess) {
    return status;
  }

  const int bytes = static_cast<int>(sizeof(ScanShared));
  if (const cudaError_t status = cudaFuncSetAttribute(
          chunk_cp_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      status != cudaSuccess) {
    return status;
  }
  const dim3 grid(kV / kScanTile, problem.value_heads, problem.batch);
  chunk_cp_scan_kernel<<<grid, kScanThreads, bytes, stream>>>(
      problem.h0_global, cp.transitions, cp.shard_ends, cp.starts, problem.state_global, shards,
      problem.value_heads);
  if (const cudaError_t status = cudaGetLastError(); status != cudaSuccess) return status;

  if (problem.o_global == nullptr) return cudaSuccess;
  sharded.transition_global = nullptr;
  sharded.state_global = nullptr;
  sharded.h0_global = cp.starts;
  sharded.o_global = problem.o_global;
  return launch_chunk_state(sharded, stream);
}

}  // namespace kda::kernels::cuda
