// kda/kernels/cuda/chunk_intra.cu — the parallel half of the chunked prefill (chunk_prefill.cuh):
// one CTA of 256 threads per (sequence, chunk, value head), two CTAs per SM (109 KB of shared
// memory each), writing the chunk's Q_g, K_g, e^{G_C}, A_qk, W and U to the workspace.
// A_kk and A_qk come in block rows of 16 against the block's first token a0 (as kda's CPU chunk):
// left factors e^{G_i − G_a0} ≤ 1 and right factors e^{G_a0 − G_j}, ≤ 1 for earlier blocks and at
// most e^{span} inside the diagonal block, so each block row is one small product of bounded
// factors, on the tensor cores in 3×TF32 (fp32-grade whatever the state pass's precision). When a
// diagonal block's decay span exceeds kSafeSpan (fast-forgetting gates), its pairs take one exp
// each instead, on the CUDA cores. T = (I + A_kk)^{-1} by blocks of 16: the four diagonal inverses
// by forward substitution, then each block row below from the ones above (X_ij = −X_ii Σ_k A_ik
// X_kj), fp32 on the CUDA cores; [W | U] = T [β e^G ⊙ k | β v] in 3×TF32.
// Measured (H200, kda/gpu/README.md): this kernel is three quarters of a pass at H = 64 and
// latency-bound (a chain of short phases between barriers, ~0.26 µs per chunk and head over the
// whole GPU): the next speed-up is here, not in the state pass.
#include "kda/kernels/cuda/affine_merge_tile.cuh"
#include "kda/kernels/cuda/chunk_prefill.cuh"

namespace kda::kernels::cuda {
namespace {

using affine_merge_detail::SplitTf32x3;
using affine_merge_detail::to_tf32;

constexpr int kC = kPrefillChunk;     // 64
constexpr int kK = kPrefillKeyDim;    // 128
constexpr int kV = kPrefillValueDim;  // 128
constexpr int kSub = 16;
constexpr int kBlocks = kC / kSub;  // 4
constexpr int kThreads = 256;
// Shared-memory pitches (floats) that make a warp's mma fragment reads hit 32 distinct banks:
// row-major A operands and B operands read transposed ([n][k]) need pitch ≡ 4 (mod 32); B
// operands read as [k][n] need ≡ 8.
constexpr int kHalfK = kK / 2;       // the factors of A_kk, A_qk go through in two halves of K
constexpr int kFPitch = kHalfK + 4;  // 68: left factors, right factors read as [j][d]
constexpr int kBPitch = kK + 8;      // 136: β e^G ⊙ k and β v, read as [j][col]
constexpr int kCPitch = kC + 4;      // 68: A_kk, the inverse
// e^30 · e^-30 keeps every factor and product far from fp32's range limits.
constexpr float kSafeSpan = 30.0f;

// 109 KB, so two CTAs share an SM: the kernel is a chain of short phases between barriers, and a
// second CTA fills the gaps of the first.
struct IntraShared {
  float g[kC][kBPitch];  // G, the in-chunk cumulative log decay; then β e^G ⊙ k; then β v
  union {
    float right[kC][kFPitch];    // right factors of a block row over one half of K
    float inverse[kC][kCPitch];  // (I + A_kk)^{-1}, lower with a unit diagonal
  };
  float left_k[kSub][kFPitch];  // k ⊙ e^{G_i − G_a0} of a block row; then scratch of the inverse
  float left_q[kSub][kFPitch];  // scale · q ⊙ e^{G_i − G_a0}
  float a_kk[kC][kCPitch];      // strictly lower, rows scaled by β
  __nv_bfloat16 q[kC][kK];
  __nv_bfloat16 k[kC][kK];
  float beta[kC];
  float span[kBlocks];  // max over channels of G_a0 − G_{a0+15}, as ordered bits (≥ 0)
};

// The state pass reads Q_g, K_g, W and A_qk as tensor-core operands only: in TF32 they are stored
// already rounded to nearest TF32 (the same rounding, done once instead of once per V tile).
__device__ __forceinline__ float operand(float value, bool round) {
  return round ? __uint_as_float(to_tf32(value)) : value;
}

// out (64 × 128, row-major in global memory) = T · rhs in 3×TF32: warp w owns columns 16 w … 16 w
// + 15 and all 64 rows; T is lower triangular, so rows 16 mt … take only k < 16 (mt + 1).
__device__ __forceinline__ void triangular_product(const IntraShared& s,
                                                   const float (*rhs)[kBPitch], float* out,
                                                   bool round, int warp, int lane) {
  const int group = lane / 4, quad = lane % 4, col0 = 16 * warp;
#pragma unroll 1
  for (int mt = 0; mt < kC / 16; ++mt) {
    float acc[2][4] = {};
    for (int k0 = 0; k0 < 16 * (mt + 1); k0 += 8) {
      const int r = 16 * mt + group;
      const float a[4] = {s.inverse[r][k0 + quad], s.inverse[r + 8][k0 + quad],
                          s.inverse[r][k0 + quad + 4], s.inverse[r + 8][k0 + quad + 4]};
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int col = col0 + 8 * nt + group;
        const float b[2] = {rhs[k0 + quad][col], rhs[k0 + quad + 4][col]};
        SplitTf32x3{}(acc[nt], a, b);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = 16 * mt + group + 8 * half, col = col0 + 8 * nt + 2 * quad;
        *reinterpret_cast<float2*>(out + row * kK + col) =
            make_float2(operand(acc[nt][2 * half], round), operand(acc[nt][2 * half + 1], round));
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads, 2) chunk_intra_kernel(const ChunkPrefillProblem p) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  IntraShared& s = *reinterpret_cast<IntraShared*>(shared_raw);
  const int chunk = blockIdx.x, value_head = blockIdx.y, sequence = blockIdx.z;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int group = lane / 4, quad = lane % 4;
  const int heads = p.heads, value_heads = p.value_heads;
  const int head = value_head / (value_heads / heads);
  const bool round = p.precision == ChainPrecision::kTf32;
  const int64_t token0 = int64_t{sequence} * p.tokens + int64_t{chunk} * kC;
  const int64_t entry = (int64_t{sequence} * (p.tokens / kC) + chunk) * value_heads + value_head;
  auto qk_offset = [&](int row) { return ((token0 + row) * heads + head) * kK; };
  auto hv_offset = [&](int row) { return ((token0 + row) * value_heads + value_head) * kK; };

  // Inputs: q, k as bf16 (16-byte loads), g as fp32, β.
  for (int idx = tid; idx < kC * kK / 8; idx += kThreads) {
    const int row = idx / (kK / 8), col = 8 * (idx % (kK / 8));
    *reinterpret_cast<uint4*>(&s.q[row][col]) =
        *reinterpret_cast<const uint4*>(p.q_global + qk_offset(row) + col);
    *reinterpret_cast<uint4*>(&s.k[row][col]) =
        *reinterpret_cast<const uint4*>(p.k_global + qk_offset(row) + col);
  }
  for (int idx = tid; idx < kC * kK / 4; idx += kThreads) {
    const int row = idx / (kK / 4), col = 4 * (idx % (kK / 4));
    *reinterpret_cast<float4*>(&s.g[row][col]) =
        *reinterpret_cast<const float4*>(p.g_global + hv_offset(row) + col);
  }
  if (tid < kC) s.beta[tid] = p.beta_global[(token0 + tid) * value_heads + value_head];
  if (tid < kBlocks) s.span[tid] = 0.0f;
  for (int idx = tid; idx < kC * kCPitch; idx += kThreads) (&s.a_kk[0][0])[idx] = 0.0f;
  __syncthreads();

  // G = cumsum(g) per channel, and each diagonal block's decay span.
  if (tid < kK) {
    float sum = 0.0f;
    for (int row = 0; row < kC; ++row) {
      sum += s.g[row][tid];
      s.g[row][tid] = sum;
    }
    for (int block = 0; block < kBlocks; ++block) {
      float span = fmaxf(s.g[block * kSub][tid] - s.g[block * kSub + kSub - 1][tid], 0.0f);
      for (int offset = 16; offset > 0; offset /= 2) {
        span = fmaxf(span, __shfl_xor_sync(0xFFFFFFFFu, span, offset));
      }
      // Non-negative floats order as their bit patterns.
      if (tid % 32 == 0) atomicMax(reinterpret_cast<int*>(&s.span[block]), __float_as_int(span));
    }
  }
  __syncthreads();

  // Q_g, K_g, e^{G_C}.
  const int64_t key_block = entry * kC * kK;
  float* q_decayed = p.workspace.q_decayed + key_block;
  float* k_to_end = p.workspace.k_to_end + key_block;
  for (int idx = tid; idx < kC * kK; idx += kThreads) {
    const int row = idx / kK, dim = idx % kK;
    const float g = s.g[row][dim], g_end = s.g[kC - 1][dim];
    q_decayed[idx] = operand(p.scale * __bfloat162float(s.q[row][dim]) * expf(g), round);
    k_to_end[idx] = operand(__bfloat162float(s.k[row][dim]) * expf(g_end - g), round);
    if (row == 0) p.workspace.decay_end[entry * kK + dim] = expf(g_end);
  }

  // A_kk and A_qk, one block row of 16 at a time, on the tensor cores in 3×TF32 (fp32-grade).
  float* a_qk = p.workspace.a_qk + entry * kC * kC;
  for (int block = 0; block < kBlocks; ++block) {
    const int row0 = block * kSub;
    const bool factored = s.span[block] <= kSafeSpan;
    const int right_rows = factored ? row0 + kSub : row0;
    for (int idx = tid; idx < kSub * kC; idx += kThreads) {
      const int row = row0 + idx / kC, col = idx % kC;
      if (col >= row0 + kSub) a_qk[row * kC + col] = 0.0f;
    }
    // Tiles of 16 × 8: the first right_rows / 8 are A_kk's, the next as many A_qk's; a warp
    // holds at most two (16 tiles over 8 warps).
    const int n_tiles = right_rows / 8;
    float acc[2][4] = {};
    for (int half_k = 0; half_k < 2; ++half_k) {
      const int d0 = half_k * kHalfK;
      for (int idx = tid; idx < kSub * kHalfK; idx += kThreads) {
        const int i = idx / kHalfK, d = idx % kHalfK;
        const float factor = expf(s.g[row0 + i][d0 + d] - s.g[row0][d0 + d]);
        s.left_k[i][d] = __bfloat162float(s.k[row0 + i][d0 + d]) * factor;
        s.left_q[i][d] = p.scale * __bfloat162float(s.q[row0 + i][d0 + d]) * factor;
      }
      for (int idx = tid; idx < right_rows * kHalfK; idx += kThreads) {
        const int j = idx / kHalfK, d = idx % kHalfK;
        s.right[j][d] = __bfloat162float(s.k[j][d0 + d]) * expf(s.g[row0][d0 + d] - s.g[j][d0 + d]);
      }
      __syncthreads();
#pragma unroll
      for (int slot = 0; slot < 2; ++slot) {
        const int tile = warp + slot * (kThreads / 32);
        if (tile >= 2 * n_tiles) continue;
        const bool is_q = tile >= n_tiles;
        const int n0 = 8 * (is_q ? tile - n_tiles : tile);
        const float(*left)[kFPitch] = is_q ? s.left_q : s.left_k;
#pragma unroll 4
        for (int k0 = 0; k0 < kHalfK; k0 += 8) {
          const float a[4] = {left[group][k0 + quad], left[group + 8][k0 + quad],
                              left[group][k0 + quad + 4], left[group + 8][k0 + quad + 4]};
          const float b[2] = {s.right[n0 + group][k0 + quad], s.right[n0 + group][k0 + quad + 4]};
          SplitTf32x3{}(acc[slot], a, b);
        }
      }
      __syncthreads();  // the factors are rewritten next
    }
#pragma unroll
    for (int slot = 0; slot < 2; ++slot) {
      const int tile = warp + slot * (kThreads / 32);
      if (tile >= 2 * n_tiles) continue;
      const bool is_q = tile >= n_tiles;
      const int n0 = 8 * (is_q ? tile - n_tiles : tile);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + group + 8 * half;
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = n0 + 2 * quad + e;
          const float value = acc[slot][2 * half + e];
          if (!is_q) {
            if (col < row) s.a_kk[row][col] = s.beta[row] * value;
          } else {
            a_qk[row * kC + col] = operand(col <= row ? value : 0.0f, round);
          }
        }
      }
    }
    if (!factored) {
      // Strong decay inside the diagonal block: one exp per pair and channel, each at most 1.
      const int i = tid / kSub, j = tid % kSub;
      const int row = row0 + i, col = row0 + j;
      if (j <= i) {
        float pair_kk = 0.0f, pair_qk = 0.0f;
        for (int dim = 0; dim < kK; ++dim) {
          const float kj = __bfloat162float(s.k[col][dim]) * expf(s.g[row][dim] - s.g[col][dim]);
          pair_kk = fmaf(__bfloat162float(s.k[row][dim]), kj, pair_kk);
          pair_qk = fmaf(__bfloat162float(s.q[row][dim]), kj, pair_qk);
        }
        if (j < i) s.a_kk[row][col] = s.beta[row] * pair_kk;
        a_qk[row * kC + col] = operand(p.scale * pair_qk, round);
      } else {
        a_qk[row * kC + col] = 0.0f;
      }
    }
  }
  __syncthreads();  // A_kk complete; the factors' memory becomes the inverse

  // T = (I + A_kk)^{-1}. Diagonal blocks: thread (block, column c) by forward substitution.
  for (int idx = tid; idx < kC * kCPitch; idx += kThreads) {
    (&s.inverse[0][0])[idx] = idx / kCPitch == idx % kCPitch ? 1.0f : 0.0f;
  }
  __syncthreads();
  if (tid < kC) {
    const int base = (tid / kSub) * kSub, c = base + tid % kSub;
    for (int r = c + 1; r < base + kSub; ++r) {
      float sum = 0.0f;
      for (int j = c; j < r; ++j) sum = fmaf(s.a_kk[r][j], s.inverse[j][c], sum);
      s.inverse[r][c] = -sum;
    }
  }
  __syncthreads();
  // Block rows 1..3: P = Σ_{k<row0} A[row0 + a][k] X[k][c], then X[row0 + a][c] = −X_ii P.
  float(*partial)[kFPitch] = s.left_k;
  for (int block = 1; block < kBlocks; ++block) {
    const int row0 = block * kSub;
    for (int idx = tid; idx < kSub * row0; idx += kThreads) {
      const int a = idx / row0, c = idx % row0;
      float sum = 0.0f;
      for (int k = c; k < row0; ++k) sum = fmaf(s.a_kk[row0 + a][k], s.inverse[k][c], sum);
      partial[a][c] = sum;
    }
    __syncthreads();
    for (int idx = tid; idx < kSub * row0; idx += kThreads) {
      const int a = idx / row0, c = idx % row0;
      float sum = 0.0f;
      for (int b = 0; b <= a; ++b) sum = fmaf(s.inverse[row0 + a][row0 + b], partial[b][c], sum);
      s.inverse[row0 + a][c] = -sum;
    }
    __syncthreads();
  }

  // W = T (β e^G ⊙ k), with β e^G ⊙ k written over G in place.
  for (int idx = tid; idx < kC * kK; idx += kThreads) {
    const int j = idx / kK, dim = idx % kK;
    s.g[j][dim] = s.beta[j] * expf(s.g[j][dim]) * __bfloat162float(s.k[j][dim]);
  }
  __syncthreads();
  triangular_product(s, s.g, p.workspace.w + key_block, round, warp, lane);
  __syncthreads();
  // U = T (β v), β v read straight from global memory into the same buffer.
  for (int idx = tid; idx < kC * kV / 8; idx += kThreads) {
    const int j = idx / (kV / 8), col = 8 * (idx % (kV / 8));
    const uint4 raw = *reinterpret_cast<const uint4*>(p.v_global + hv_offset(j) + col);
    const __nv_bfloat16* v = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
    for (int e = 0; e < 8; ++e) s.g[j][col + e] = s.beta[j] * __bfloat162float(v[e]);
  }
  __syncthreads();
  triangular_product(s, s.g, p.workspace.u + entry * kC * kV, false, warp, lane);
}

__global__ void transition_operands_kernel(const ChunkPrefillProblem p, float* neg_k_to_end_t,
                                           float* diagonal) {
  const int64_t entry = blockIdx.x;
  const float* k_to_end = p.workspace.k_to_end + entry * kC * kK;
  float* out_t = neg_k_to_end_t + entry * kK * kC;
  for (int idx = threadIdx.x; idx < kK * kC; idx += blockDim.x) {
    const int dim = idx / kC, row = idx % kC;
    out_t[idx] = -k_to_end[row * kK + dim];
  }
  float* out_d = diagonal + entry * kK * kK;
  for (int idx = threadIdx.x; idx < kK * kK; idx += blockDim.x) {
    const int r = idx / kK, c = idx % kK;
    out_d[idx] = r == c ? p.workspace.decay_end[entry * kK + r] : 0.0f;
  }
}

}  // namespace

cudaError_t launch_chunk_intra(const ChunkPrefillProblem& problem, cudaStream_t stream) {
  if (chunk_prefill_shape_error(problem) != nullptr) return cudaErrorInvalidValue;
  const int bytes = static_cast<int>(sizeof(IntraShared));
  if (const cudaError_t status = cudaFuncSetAttribute(
          chunk_intra_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      status != cudaSuccess) {
    return status;
  }
  // Two CTAs per SM need the largest shared-memory carve-out.
  if (const cudaError_t status =
          cudaFuncSetAttribute(chunk_intra_kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                               cudaSharedmemCarveoutMaxShared);
      status != cudaSuccess) {
    return status;
  }
  const dim3 grid(problem.tokens / kC, problem.value_heads, problem.batch);
  chunk_intra_kernel<<<grid, kThreads, bytes, stream>>>(problem);
  return cudaGetLastError();
}

cudaError_t launch_chunk_transition_operands(const ChunkPrefillProblem& problem,
                                             float* neg_k_to_end_t, float* diagonal,
                                             cudaStream_t stream) {
  if (chunk_prefill_shape_error(problem) != nullptr || !neg_k_to_end_t || !diagonal) {
    return cudaErrorInvalidValue;
  }
  const int64_t entries = chunk_workspace_sizes(problem).entries;
  if (entries > 0x7FFFFFFF) return cudaErrorInvalidValue;
  transition_operands_kernel<<<static_cast<unsigned>(entries), 256, 0, stream>>>(
      problem, neg_k_to_end_t, diagonal);
  return cudaGetLastError();
}

}  // namespace kda::kernels::cuda
