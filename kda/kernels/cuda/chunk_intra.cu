// kda/kernels/cuda/chunk_intra.cu — the parallel half of the chunked prefill (chunk_prefill.cuh):
// one CTA of 256 threads per (sequence, chunk, value head), fp32 on the CUDA cores, writing the
// chunk's Q_g, K_g, e^{G_C}, A_qk, W and U to the workspace.
// A_kk and A_qk come in block rows of 16 against the block's first token a0 (as kda's CPU chunk):
// left factors e^{G_i − G_a0} ≤ 1 and right factors e^{G_a0 − G_j}, ≤ 1 for earlier blocks and at
// most e^{span} inside the diagonal block, so each block row is one small product of bounded
// factors. When a diagonal block's decay span exceeds kSafeSpan (fast-forgetting gates), its pairs
// take one exp each instead. T = (I + A_kk)^{-1} by blocks of 16: the four diagonal inverses by
// forward substitution, then each block row below from the ones above (X_ij = −X_ii Σ_k A_ik X_kj).
#include "kda/kernels/cuda/chunk_prefill.cuh"

namespace kda::kernels::cuda {
namespace {

constexpr int kC = kPrefillChunk;    // 64
constexpr int kK = kPrefillKeyDim;   // 128
constexpr int kV = kPrefillValueDim; // 128
constexpr int kSub = 16;
constexpr int kBlocks = kC / kSub;   // 4
constexpr int kThreads = 256;
constexpr int kPitch = kK + 1;  // rows read by 16 threads at one column land in 16 banks
constexpr int kCPitch = kC + 1;
// e^30 · e^-30 keeps every factor and product far from fp32's range limits.
constexpr float kSafeSpan = 30.0f;

struct IntraShared {
  float g[kC][kPitch];         // G, the in-chunk cumulative log decay
  float right[kC][kPitch];     // right factors of a block row; then β e^G ⊙ k
  float left_k[kSub][kPitch];  // k ⊙ e^{G_i − G_a0} of a block row; then scratch of the inverse
  float left_q[kSub][kPitch];  // scale · q ⊙ e^{G_i − G_a0}
  float a_kk[kC][kCPitch];     // strictly lower, rows scaled by β
  float inverse[kC][kCPitch];  // (I + A_kk)^{-1}, lower with a unit diagonal
  __nv_bfloat16 k[kC][kK];
  __nv_bfloat16 v[kC][kV];
  float beta[kC];
  float span[kBlocks];  // max over channels of G_a0 − G_{a0+15}, as ordered bits (≥ 0)
};

__global__ void __launch_bounds__(kThreads) chunk_intra_kernel(const ChunkPrefillProblem p) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  IntraShared& s = *reinterpret_cast<IntraShared*>(shared_raw);
  const int chunk = blockIdx.x, value_head = blockIdx.y, sequence = blockIdx.z;
  const int tid = threadIdx.x;
  const int heads = p.heads, value_heads = p.value_heads;
  const int head = value_head / (value_heads / heads);
  const int64_t token0 = int64_t{sequence} * p.tokens + int64_t{chunk} * kC;
  const int64_t entry = (int64_t{sequence} * (p.tokens / kC) + chunk) * value_heads + value_head;
  auto qk_offset = [&](int row) { return ((token0 + row) * heads + head) * kK; };
  auto hv_offset = [&](int row) { return ((token0 + row) * value_heads + value_head) * kK; };
  const __nv_bfloat16* q_global = p.q_global;

  // Inputs: k, v as bf16 (16-byte loads), g as fp32, β.
  for (int idx = tid; idx < kC * kK / 8; idx += kThreads) {
    const int row = idx / (kK / 8), col = 8 * (idx % (kK / 8));
    *reinterpret_cast<uint4*>(&s.k[row][col]) =
        *reinterpret_cast<const uint4*>(p.k_global + qk_offset(row) + col);
    *reinterpret_cast<uint4*>(&s.v[row][col]) =
        *reinterpret_cast<const uint4*>(p.v_global + hv_offset(row) + col);
  }
  for (int idx = tid; idx < kC * kK / 4; idx += kThreads) {
    const int row = idx / (kK / 4), col = 4 * (idx % (kK / 4));
    const float4 g = *reinterpret_cast<const float4*>(p.g_global + hv_offset(row) + col);
    s.g[row][col] = g.x, s.g[row][col + 1] = g.y, s.g[row][col + 2] = g.z, s.g[row][col + 3] = g.w;
  }
  if (tid < kC) s.beta[tid] = p.beta_global[(token0 + tid) * value_heads + value_head];
  if (tid < kBlocks) s.span[tid] = 0.0f;
  for (int idx = tid; idx < kC * kCPitch; idx += kThreads) {
    const int row = idx / kCPitch, col = idx % kCPitch;
    (&s.a_kk[0][0])[idx] = 0.0f;
    (&s.inverse[0][0])[idx] = row == col ? 1.0f : 0.0f;
  }
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
    const float q = __bfloat162float(q_global[qk_offset(row) + dim]);
    q_decayed[idx] = p.scale * q * expf(g);
    k_to_end[idx] = __bfloat162float(s.k[row][dim]) * expf(g_end - g);
    if (row == 0) p.workspace.decay_end[entry * kK + dim] = expf(g_end);
  }

  // A_kk and A_qk, one block row of 16 at a time.
  float* a_qk = p.workspace.a_qk + entry * kC * kC;
  for (int block = 0; block < kBlocks; ++block) {
    const int row0 = block * kSub;
    const bool factored = s.span[block] <= kSafeSpan;
    const int right_rows = factored ? row0 + kSub : row0;
    for (int idx = tid; idx < kSub * kK; idx += kThreads) {
      const int i = idx / kK, dim = idx % kK;
      const float factor = expf(s.g[row0 + i][dim] - s.g[row0][dim]);
      s.left_k[i][dim] = __bfloat162float(s.k[row0 + i][dim]) * factor;
      s.left_q[i][dim] = p.scale * __bfloat162float(q_global[qk_offset(row0 + i) + dim]) * factor;
    }
    for (int idx = tid; idx < right_rows * kK; idx += kThreads) {
      const int j = idx / kK, dim = idx % kK;
      s.right[j][dim] = __bfloat162float(s.k[j][dim]) * expf(s.g[row0][dim] - s.g[j][dim]);
    }
    __syncthreads();
    // Thread (i, j0): row row0 + i against columns j0, j0 + 16, … of the factored blocks.
    const int i = tid / kSub, j0 = tid % kSub;
    const int row = row0 + i;
    const int column_blocks = right_rows / kSub;
    float kk[kBlocks] = {}, qk[kBlocks] = {};
    if (column_blocks > 0) {
      for (int dim = 0; dim < kK; ++dim) {
        const float lk = s.left_k[i][dim], lq = s.left_q[i][dim];
#pragma unroll
        for (int m = 0; m < kBlocks; ++m) {
          if (m < column_blocks) {
            const float r = s.right[j0 + kSub * m][dim];
            kk[m] = fmaf(lk, r, kk[m]);
            qk[m] = fmaf(lq, r, qk[m]);
          }
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kBlocks; ++m) {
      const int col = j0 + kSub * m;
      if (m < column_blocks) {
        if (col < row) s.a_kk[row][col] = s.beta[row] * kk[m];
        a_qk[row * kC + col] = col <= row ? qk[m] : 0.0f;
      } else if (m > block) {
        a_qk[row * kC + col] = 0.0f;
      }
    }
    if (!factored) {
      // Strong decay inside the diagonal block: one exp per pair and channel, each at most 1.
      const int col = row0 + j0;
      if (j0 <= i) {
        float pair_kk = 0.0f, pair_qk = 0.0f;
        for (int dim = 0; dim < kK; ++dim) {
          const float kj =
              __bfloat162float(s.k[col][dim]) * expf(s.g[row][dim] - s.g[col][dim]);
          pair_kk = fmaf(__bfloat162float(s.k[row][dim]), kj, pair_kk);
          pair_qk = fmaf(__bfloat162float(q_global[qk_offset(row) + dim]), kj, pair_qk);
        }
        if (j0 < i) s.a_kk[row][col] = s.beta[row] * pair_kk;
        a_qk[row * kC + col] = p.scale * pair_qk;
      } else {
        a_qk[row * kC + col] = 0.0f;
      }
    }
    __syncthreads();  // the factors are rewritten by the next block row
  }

  // T = (I + A_kk)^{-1}. Diagonal blocks: thread (block, column c) by forward substitution.
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
  float (*partial)[kPitch] = s.left_k;
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

  // β e^G ⊙ k, the right-hand side of W.
  for (int idx = tid; idx < kC * kK; idx += kThreads) {
    const int j = idx / kK, dim = idx % kK;
    s.right[j][dim] = s.beta[j] * expf(s.g[j][dim]) * __bfloat162float(s.k[j][dim]);
  }
  __syncthreads();

  // W = T (β e^G ⊙ k), U = T (β v): warp w owns rows 8w … 8w + 7, lane l columns l + 32 m.
  {
    const int row0 = (tid / 32) * 8, lane = tid % 32;
    float acc_w[8][4] = {}, acc_u[8][4] = {};
    for (int j = 0; j < row0 + 8; ++j) {
      float rk[4], rv[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        rk[m] = s.right[j][lane + 32 * m];
        rv[m] = s.beta[j] * __bfloat162float(s.v[j][lane + 32 * m]);
      }
#pragma unroll
      for (int a = 0; a < 8; ++a) {
        const float t = s.inverse[row0 + a][j];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          acc_w[a][m] = fmaf(t, rk[m], acc_w[a][m]);
          acc_u[a][m] = fmaf(t, rv[m], acc_u[a][m]);
        }
      }
    }
    float* w = p.workspace.w + key_block;
    float* u = p.workspace.u + entry * kC * kV;
#pragma unroll
    for (int a = 0; a < 8; ++a) {
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        w[(row0 + a) * kK + lane + 32 * m] = acc_w[a][m];
        u[(row0 + a) * kV + lane + 32 * m] = acc_u[a][m];
      }
    }
  }
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
