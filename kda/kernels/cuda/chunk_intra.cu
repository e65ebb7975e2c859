// kda/kernels/cuda/chunk_intra.cu — the parallel half of the chunked prefill (chunk_prefill.cuh):
// one CTA of 256 threads per (sequence, chunk, value head), two CTAs per SM (110 KB of shared
// memory each), writing the chunk's Q_g, K_g, e^{G_C}, A_qk, W and U to the workspace.
// A_kk and A_qk: as one product over the whole lower triangle (whole_chunk_a: no factor phases,
// no barriers), its factors made as the fragments are loaded: row block b (16 rows) against a
// per-channel reference r_b halfway between the block's largest G and the smallest G up to its
// end, left factors k_i e^{G_i − r_b}, right factors k_j e^{r_b − G_j}, every one within e^{±40}
// while each block's reach (that largest minus that smallest) is at most kWholeChunkReach = 80.
// Slow gates reach far less, and fast-forgetting gates with a per-token decay of at most 5
// (FlashKDA's bound) at most 75. Past that (steeper gates) A is made in block rows of 16 against
// the block's first token a0 (as kda's CPU chunk):
// left factors e^{G_i − G_a0} ≤ 1 and right factors e^{G_a0 − G_j}, ≤ 1 for earlier blocks and at
// most e^{span} inside the diagonal block, so each block row is one small product of bounded
// factors, on the tensor cores in 3×TF32 (fp32-grade whatever the state pass's precision). When a
// diagonal block's decay span exceeds kSafeSpan, its pairs take one exp
// each instead, on the CUDA cores. T = (I + A_kk)^{-1} by blocks of 16: the four diagonal inverses
// by forward substitution (fp32, CUDA cores), then each block row below from the ones above
// (X_ij = −X_ii Σ_k A_ik X_kj) as two small products on the tensor cores in 3×TF32;
// [W | U] = T diag(β) [e^G ⊙ k | v] in one pass over T: W in 3×TF32, U as hi·v + lo·v (bf16 v is
// exact in TF32).
// Inputs arrive by cp.async, every copy of a thread in flight at once; v is staged into q's buffer
// (q is read no more) while the inverse runs. Measured (H200, kda/gpu/README.md, T = 8192,
// H = 32): 1.14 ms before; 1.04 ms with the asynchronous loads (one memory latency instead of one
// per loop trip); 0.95 ms with W and U in one pass; 0.76 ms with whole_chunk_a (16 barriers and
// the factor phases gone). What is left is the inverse (4 barriers) and W | U.
#include "kda/kernels/cuda/affine_merge_tile.cuh"
#include "kda/kernels/cuda/chunk_prefill.cuh"

namespace kda::kernels::cuda {
namespace {

using affine_merge_detail::mma_tf32;
using affine_merge_detail::split_tf32;
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
// bf16 q, then v (read as [j][col] B operands): 68 words a row, so the four k rows of a fragment
// read fall on distinct banks.
constexpr int kQPitch = kK + 8;
// e^30 · e^-30 keeps every factor and product far from fp32's range limits.
constexpr float kSafeSpan = 30.0f;
// whole_chunk_a runs when every block's reach is at most this: its left factors lie in
// [e^-40, e^40], its right factors at most e^40, so no product overflows (the largest, above the
// diagonal and discarded, is e^80 ≈ 5.5e34 against fp32's 3.4e38). A right factor of an earlier
// token can be tiny; its 3×TF32 low part may then flush, or the factor underflow, but the term it
// carries is at most e^40 times it: under e^-32 where that happens, against entries of order 1.
constexpr float kWholeChunkReach = 80.0f;

// 109 KB, so two CTAs share an SM: the kernel is a chain of short phases between barriers, and a
// second CTA fills the gaps of the first.
struct IntraShared {
  float g[kC][kBPitch];  // G, the in-chunk cumulative log decay; then e^G ⊙ k
  union {
    float right[kC][kFPitch];    // right factors of a block row over one half of K
    float inverse[kC][kCPitch];  // (I + A_kk)^{-1}, lower with a unit diagonal
  };
  union {
    float left_k[kSub][kFPitch];  // k ⊙ e^{G_i − G_a0} of a block row; then scratch of the inverse
    float reference[kBlocks][kK];  // whole_chunk_a's r_b per channel
  };
  float left_q[kSub][kFPitch];   // scale · q ⊙ e^{G_i − G_a0}
  float a_kk[kC][kCPitch];       // strictly lower, rows scaled by β
  __nv_bfloat16 q[kC][kQPitch];  // q; after A_kk, A_qk: v (bf16, staged by cp.async)
  __nv_bfloat16 k[kC][kQPitch];  // pitch 68 words: fragment reads of k as A and B operands
  float beta[kC];
  float span[kBlocks];  // max over channels of G_a0 − G_{a0+15}, as ordered bits (≥ 0)
  float reach;          // max over blocks and channels of a block's reach, as ordered bits
};

// The state pass reads Q_g, K_g, W and A_qk as tensor-core operands only: in TF32 they are stored
// already rounded to nearest TF32 (the same rounding, done once instead of once per V tile).
__device__ __forceinline__ float operand(float value, bool round) {
  return round ? __uint_as_float(to_tf32(value)) : value;
}

// 16 bytes global -> shared without a register round trip: every copy of a thread is in flight at
// once, so the chunk's inputs cost one memory latency instead of one per loop trip. `valid` false
// reads nothing from `global` and writes 16 zero bytes (rows past a sequence's end).
__device__ __forceinline__ void copy16_or_zero(void* shared, const void* global, bool valid) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global),
               "r"(source_bytes));
}
__device__ __forceinline__ void wait_copies() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

// [W | U] = T diag(β) [e^G ⊙ k | v] (64 × 128 each, row-major in global memory) in one pass over
// T: warp w owns columns 16 w … 16 w + 15 of both; T is lower triangular, so rows 16 mt … take
// only k < 16 (mt + 1). Each fragment of T is read, scaled by β (fp32) and split once for both
// products. W's right side is fp32 (3×TF32); v is bf16, exact in TF32, so U needs only hi·v + lo·v.
__device__ __forceinline__ void w_and_u_products(const IntraShared& s, float* w_out, float* u_out,
                                                 bool round, int warp, int lane) {
  const int group = lane / 4, quad = lane % 4, col0 = 16 * warp;
#pragma unroll 1
  for (int mt = 0; mt < kC / 16; ++mt) {
    float acc_w[2][4] = {}, acc_u[2][4] = {};
    for (int k0 = 0; k0 < 16 * (mt + 1); k0 += 8) {
      const int r = 16 * mt + group;
      const float beta0 = s.beta[k0 + quad], beta4 = s.beta[k0 + quad + 4];
      const float a[4] = {s.inverse[r][k0 + quad] * beta0, s.inverse[r + 8][k0 + quad] * beta0,
                          s.inverse[r][k0 + quad + 4] * beta4,
                          s.inverse[r + 8][k0 + quad + 4] * beta4};
      uint32_t a_hi[4], a_lo[4];
      split_tf32(a, a_hi, a_lo);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int col = col0 + 8 * nt + group;
        const float b[2] = {s.g[k0 + quad][col], s.g[k0 + quad + 4][col]};
        uint32_t b_hi[2], b_lo[2];
        split_tf32(b, b_hi, b_lo);
        float small[4] = {}, large[4] = {};
        mma_tf32(small, a_lo, b_hi);
        mma_tf32(small, a_hi, b_lo);
        mma_tf32(large, a_hi, b_hi);
        // A bf16's fp32 pattern is its 16 bits shifted up: a TF32 operand as it is.
        const uint32_t v[2] = {uint32_t{__bfloat16_as_ushort(s.q[k0 + quad][col])} << 16,
                               uint32_t{__bfloat16_as_ushort(s.q[k0 + quad + 4][col])} << 16};
        float small_u[4] = {}, large_u[4] = {};
        mma_tf32(small_u, a_lo, v);
        mma_tf32(large_u, a_hi, v);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          acc_w[nt][i] += large[i] + small[i];
          acc_u[nt][i] += large_u[i] + small_u[i];
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = 16 * mt + group + 8 * half, col = col0 + 8 * nt + 2 * quad;
        *reinterpret_cast<float2*>(w_out + row * kK + col) = make_float2(
            operand(acc_w[nt][2 * half], round), operand(acc_w[nt][2 * half + 1], round));
        *reinterpret_cast<float2*>(u_out + row * kV + col) =
            make_float2(acc_u[nt][2 * half], acc_u[nt][2 * half + 1]);
      }
    }
  }
}

// D += A · B in 3×TF32 on operands already split (as SplitTf32x3, without re-splitting).
__device__ __forceinline__ void mma_split(float (&d)[4], const uint32_t (&a_hi)[4],
                                          const uint32_t (&a_lo)[4], const uint32_t (&b_hi)[2],
                                          const uint32_t (&b_lo)[2]) {
  float small[4] = {}, large[4] = {};
  mma_tf32(small, a_lo, b_hi);
  mma_tf32(small, a_hi, b_lo);
  mma_tf32(large, a_hi, b_hi);
#pragma unroll
  for (int i = 0; i < 4; ++i) d[i] += large[i] + small[i];
}

// A_kk (β-scaled rows, strictly lower, into shared memory) and A_qk (lower with the diagonal,
// into `a_qk`) over the whole chunk when every block's reach is at most kWholeChunkReach:
// A[i][j] = Σ_d (k_i e^{G_i − r_b})_d (k_j e^{r_b − G_j})_d for row i in block b, each factor made
// from G and the block's reference r_b as its fragment is loaded. Row block b (16 rows) has
// 2 (b + 1) column tiles of 8; the 20 (block, tile) pairs are dealt to the 8 warps, at most 3
// each, and each pair yields both A_kk's and A_qk's tile from one right-hand fragment.
__device__ __forceinline__ void whole_chunk_a(IntraShared& s, float* a_qk, float scale, bool round,
                                              int warp, int lane) {
  // warp → (row block, first tile, tiles): block 3 over warps 0-2, 2 over 3-4, 1 over 5-6, 0 on 7.
  // One hex digit per warp, warp 0 lowest (indexing a table would put it in local memory).
  constexpr uint32_t kBlockOf = 0x01122333u, kFirst = 0x02030630u, kCount = 0x22233233u;
  const int group = lane / 4, quad = lane % 4;
  auto digit = [warp](uint32_t table) { return static_cast<int>((table >> (4 * warp)) & 0xFu); };
  const int row0 = 16 * digit(kBlockOf), first = digit(kFirst), count = digit(kCount);
  const float* reference = s.reference[row0 / kSub];
  float acc_k[3][4] = {}, acc_q[3][4] = {};
#pragma unroll 2
  for (int k0 = 0; k0 < kK; k0 += 8) {
    float a_k[4], a_q[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + group + 8 * (e % 2), dim = k0 + quad + 4 * (e / 2);
      const float decay = expf(s.g[row][dim] - reference[dim]);
      a_k[e] = __bfloat162float(s.k[row][dim]) * decay;
      a_q[e] = scale * __bfloat162float(s.q[row][dim]) * decay;
    }
    uint32_t k_hi[4], k_lo[4], q_hi[4], q_lo[4];
    split_tf32(a_k, k_hi, k_lo);
    split_tf32(a_q, q_hi, q_lo);
#pragma unroll
    for (int t = 0; t < 3; ++t) {
      if (t >= count) break;
      const int j = 8 * (first + t) + group;
      float b[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int dim = k0 + quad + 4 * e;
        b[e] = __bfloat162float(s.k[j][dim]) * expf(reference[dim] - s.g[j][dim]);
      }
      uint32_t b_hi[2], b_lo[2];
      split_tf32(b, b_hi, b_lo);
      mma_split(acc_k[t], k_hi, k_lo, b_hi, b_lo);
      mma_split(acc_q[t], q_hi, q_lo, b_hi, b_lo);
    }
  }
#pragma unroll
  for (int t = 0; t < 3; ++t) {
    if (t >= count) break;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + group + 8 * half;
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = 8 * (first + t) + 2 * quad + e;
        if (col < row) s.a_kk[row][col] = s.beta[row] * acc_k[t][2 * half + e];
        a_qk[row * kC + col] = operand(col <= row ? acc_q[t][2 * half + e] : 0.0f, round);
      }
    }
  }
  // Above the diagonal blocks A_qk is zero: row block b, columns 16 (b + 1) … 63.
  for (int idx = threadIdx.x; idx < kC * kC; idx += kThreads) {
    const int row = idx / kC, col = idx % kC;
    if (col >= 16 * (row / 16 + 1)) a_qk[idx] = 0.0f;
  }
}

__global__ void __launch_bounds__(kThreads, 2) chunk_intra_kernel(const ChunkPrefillProblem p) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  IntraShared& s = *reinterpret_cast<IntraShared*>(shared_raw);
  const int value_head = blockIdx.y;
  int sequence = blockIdx.z, chunk = blockIdx.x;
  if (p.cu_seqlens != nullptr) {  // blockIdx.x counts every sequence's chunks: find its sequence
    int low = 0, high = p.batch - 1;
    while (low < high) {
      const int middle = (low + high + 1) / 2;
      if (p.cu_chunks[middle] <= chunk)
        low = middle;
      else
        high = middle - 1;
    }
    sequence = low;
    chunk -= p.cu_chunks[sequence];
  }
  const SequenceSpan span = sequence_span(p, sequence);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int group = lane / 4, quad = lane % 4;
  const int heads = p.heads, value_heads = p.value_heads;
  const int head = value_head / (value_heads / heads);
  const bool round = p.precision == ChainPrecision::kTf32;
  const int64_t token0 = span.token_begin + int64_t{chunk} * kC;
  // Rows at or past `valid` lie beyond the sequence's end: read as zero (k = 0, β = 0, g = 0 make
  // them identity steps; q = 0 gives them a zero output, which chunk_state does not write).
  const int valid = min(kC, span.tokens - chunk * kC);
  const int64_t entry = (span.chunk_begin + chunk) * value_heads + value_head;
  auto qk_offset = [&](int row) { return ((token0 + row) * heads + head) * kK; };
  auto hv_offset = [&](int row) { return ((token0 + row) * value_heads + value_head) * kK; };

  // Inputs: q, k as bf16, g as fp32 (16-byte asynchronous copies, all in flight together), β.
  // Trip counts are compile-time constants (kThreads divides every extent) so loops unroll.
#pragma unroll
  for (int trip = 0; trip < kC * kK / 8 / kThreads; ++trip) {
    const int idx = tid + trip * kThreads;
    const int row = idx / (kK / 8), col = 8 * (idx % (kK / 8));
    const bool inside = row < valid;
    const int source_row = inside ? row : 0;  // an address inside the inputs, never read
    copy16_or_zero(&s.q[row][col], p.q_global + qk_offset(source_row) + col, inside);
    copy16_or_zero(&s.k[row][col], p.k_global + qk_offset(source_row) + col, inside);
  }
#pragma unroll
  for (int trip = 0; trip < kC * kK / 4 / kThreads; ++trip) {
    const int idx = tid + trip * kThreads;
    const int row = idx / (kK / 4), col = 4 * (idx % (kK / 4));
    const bool inside = row < valid;
    copy16_or_zero(&s.g[row][col], p.g_global + hv_offset(inside ? row : 0) + col, inside);
  }
  if (tid < kC) {
    s.beta[tid] = tid < valid ? p.beta_global[(token0 + tid) * value_heads + value_head] : 0.0f;
  }
  if (tid < kBlocks) s.span[tid] = 0.0f;
  if (tid == 0) s.reach = 0.0f;
  // A_kk needs no clearing: every entry read below (strictly lower) is written by the A phase.
  wait_copies();
  __syncthreads();

  // G = cumsum(g) per channel; each block's reference r_b and reach (whole_chunk_a), and each
  // diagonal block's decay span (the block-row path).
  if (tid < kK) {
    float sum = 0.0f, reach = 0.0f;
    float prefix_min = INFINITY;  // the smallest G so far
#pragma unroll
    for (int block = 0; block < kBlocks; ++block) {
      float block_max = -INFINITY;
#pragma unroll 4
      for (int row = block * kSub; row < (block + 1) * kSub; ++row) {
        sum += s.g[row][tid];
        s.g[row][tid] = sum;
        block_max = fmaxf(block_max, sum);
        prefix_min = fminf(prefix_min, sum);
      }
      s.reference[block][tid] = 0.5f * (block_max + prefix_min);
      // An infinite G (a zero decay) makes the reach infinite or NaN: the block-row path.
      const float block_reach = block_max - prefix_min;
      reach = block_reach < INFINITY ? fmaxf(reach, block_reach) : INFINITY;
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      reach = fmaxf(reach, __shfl_xor_sync(0xFFFFFFFFu, reach, offset));
    }
    // Non-negative floats order as their bit patterns. (A NaN G drops out of fmaxf: its chunk then
    // takes either path and its NaN reaches the outputs through the products all the same.)
    if (tid % 32 == 0) atomicMax(reinterpret_cast<int*>(&s.reach), __float_as_int(reach));
    for (int block = 0; block < kBlocks; ++block) {
      float span = fmaxf(s.g[block * kSub][tid] - s.g[block * kSub + kSub - 1][tid], 0.0f);
      for (int offset = 16; offset > 0; offset /= 2) {
        span = fmaxf(span, __shfl_xor_sync(0xFFFFFFFFu, span, offset));
      }
      if (tid % 32 == 0) atomicMax(reinterpret_cast<int*>(&s.span[block]), __float_as_int(span));
    }
  }
  __syncthreads();

  // Q_g, K_g, e^{G_C}.
  const int64_t key_block = entry * kC * kK;
  float* q_decayed = p.workspace.q_decayed + key_block;
  float* k_to_end = p.workspace.k_to_end + key_block;
  // Each thread keeps one channel (tid % 128) across its rows: e^{G_C} is read once.
  {
    const int dim = tid % kK;
    const float g_end = s.g[kC - 1][dim];
    if (tid < kK) p.workspace.decay_end[entry * kK + dim] = expf(g_end);
#pragma unroll 8
    for (int row = tid / kK; row < kC; row += kThreads / kK) {
      const int idx = row * kK + dim;
      const float g = s.g[row][dim];
      q_decayed[idx] = operand(p.scale * __bfloat162float(s.q[row][dim]) * expf(g), round);
      k_to_end[idx] = operand(__bfloat162float(s.k[row][dim]) * expf(g_end - g), round);
    }
  }

  float* a_qk = p.workspace.a_qk + entry * kC * kC;
  if (s.reach <= kWholeChunkReach) {
    // Every factor k_i e^{G_i − r_b}, k_j e^{r_b − G_j} at most e^40: the whole lower triangle is
    // one product, its fragments made on the fly (no factor phases, no barrier).
    whole_chunk_a(s, a_qk, p.scale, round, warp, lane);
  } else {
    // A_kk and A_qk, one block row of 16 at a time, on the tensor cores in 3×TF32 (fp32-grade).
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
        // Each thread keeps one channel d (tid % 64) over rows tid / 64, + 4, …: G_a0 read once.
        const int d = tid % kHalfK, i0 = tid / kHalfK;
        const float g_a0 = s.g[row0][d0 + d];
#pragma unroll
        for (int i = i0; i < kSub; i += kThreads / kHalfK) {
          const float factor = expf(s.g[row0 + i][d0 + d] - g_a0);
          s.left_k[i][d] = __bfloat162float(s.k[row0 + i][d0 + d]) * factor;
          s.left_q[i][d] = p.scale * __bfloat162float(s.q[row0 + i][d0 + d]) * factor;
        }
        // right_rows is a multiple of 16: four trips at a time.
#pragma unroll 4
        for (int j = i0; j < right_rows; j += kThreads / kHalfK) {
          s.right[j][d] = __bfloat162float(s.k[j][d0 + d]) * expf(g_a0 - s.g[j][d0 + d]);
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
  }
  __syncthreads();  // A_kk complete; the factors' memory becomes the inverse
  // q is read no more: v (bf16) comes into its buffer while the inverse and W are computed.
  __nv_bfloat16(*v_staged)[kQPitch] = s.q;
#pragma unroll
  for (int trip = 0; trip < kC * kV / 8 / kThreads; ++trip) {
    const int idx = tid + trip * kThreads;
    const int j = idx / (kV / 8), col = 8 * (idx % (kV / 8));
    const bool inside = j < valid;
    copy16_or_zero(&v_staged[j][col], p.v_global + hv_offset(inside ? j : 0) + col, inside);
  }

  // T = (I + A_kk)^{-1}. Diagonal blocks: thread (block, column c) by forward substitution,
  // writing its whole column of the block (zeros above the unit diagonal), so nothing needs
  // clearing first: blocks above the diagonal are never read, those below are written next.
  if (tid < kC) {
    const int base = (tid / kSub) * kSub, c = base + tid % kSub;
    for (int r = base; r < c; ++r) s.inverse[r][c] = 0.0f;
    s.inverse[c][c] = 1.0f;
    for (int r = c + 1; r < base + kSub; ++r) {
      float sum = 0.0f;
      for (int j = c; j < r; ++j) sum = fmaf(s.a_kk[r][j], s.inverse[j][c], sum);
      s.inverse[r][c] = -sum;
    }
  }
  __syncthreads();
  // Block rows 1..3 on the tensor cores in 3×TF32: P = A[rows b, :row0] X[:row0, :row0], then
  // X[rows b, :row0] = −X_bb P. Warp w < 2 b owns columns 8 w … 8 w + 7 of both products: P goes
  // through its own columns of `partial` (no barrier between them), one barrier per block row.
  // X[k][c] is zero for k in c's block above c (written so) and never read for k in blocks above.
  float(*partial)[kFPitch] = s.left_k;
  for (int block = 1; block < kBlocks; ++block) {
    const int row0 = block * kSub;
    if (warp < 2 * block) {
      const int n0 = 8 * warp;
      float product[4] = {};
      for (int k0 = kSub * (n0 / kSub); k0 < row0; k0 += 8) {
        const float a[4] = {s.a_kk[row0 + group][k0 + quad], s.a_kk[row0 + group + 8][k0 + quad],
                            s.a_kk[row0 + group][k0 + quad + 4],
                            s.a_kk[row0 + group + 8][k0 + quad + 4]};
        const float b[2] = {s.inverse[k0 + quad][n0 + group], s.inverse[k0 + quad + 4][n0 + group]};
        SplitTf32x3{}(product, a, b);
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        partial[group + 8 * half][n0 + 2 * quad] = product[2 * half];
        partial[group + 8 * half][n0 + 2 * quad + 1] = product[2 * half + 1];
      }
      __syncwarp();
      float x[4] = {};
#pragma unroll
      for (int k0 = 0; k0 < kSub; k0 += 8) {
        const int col = row0 + k0 + quad;
        const float a[4] = {s.inverse[row0 + group][col], s.inverse[row0 + group + 8][col],
                            s.inverse[row0 + group][col + 4], s.inverse[row0 + group + 8][col + 4]};
        const float b[2] = {partial[k0 + quad][n0 + group], partial[k0 + quad + 4][n0 + group]};
        SplitTf32x3{}(x, a, b);
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        s.inverse[row0 + group + 8 * half][n0 + 2 * quad] = -x[2 * half];
        s.inverse[row0 + group + 8 * half][n0 + 2 * quad + 1] = -x[2 * half + 1];
      }
    }
    __syncthreads();
  }

  // e^G ⊙ k written over G in place; then W = T diag(β) (e^G ⊙ k) and U = T diag(β) v together.
#pragma unroll 8
  for (int trip = 0; trip < kC * kK / kThreads; ++trip) {
    const int idx = tid + trip * kThreads;
    const int j = idx / kK, dim = idx % kK;
    s.g[j][dim] = expf(s.g[j][dim]) * __bfloat162float(s.k[j][dim]);
  }
  wait_copies();  // this thread's v copies; the barrier makes everyone's visible
  __syncthreads();
  w_and_u_products(s, p.workspace.w + key_block, p.workspace.u + entry * kC * kV, round, warp,
                   lane);
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
  const bool packed = problem.cu_seqlens != nullptr;
  const dim3 grid(packed ? problem.total_chunks : chunks_of(problem.tokens), problem.value_heads,
                  packed ? 1 : problem.batch);
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
