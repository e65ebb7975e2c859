// kda/kernels/cuda/chunk_state.cu — the sequential half of the chunked prefill
// (chunk_prefill.cuh): one CTA of 8 warps per (sequence, value head, V tile) walks the chunks in
// order. Per chunk, on the tensor cores (mma.sync m16n8k8):
//   V' = U − W S          warp w: rows 16 (w / 2) … + 15, half the tile's columns, K = 128
//   O  = Q_g S + A_qk V'  warp w: the same part of O, straight to global memory
//   S ← e^{G_C} ⊙ S + K_gᵀ V'   warp w: state rows 16w … 16w + 15, kept in registers
// The product K_gᵀ V' goes into a fresh accumulator and is added to the decayed state in fp32, so
// the inherited state is never rounded by a tensor-core operand or accumulator (incident 1).
// The state tile is mirrored into shared memory as the B operand of the next chunk's products.
// Sequences may end inside a chunk (chunk_intra zeroed the rows past the end; their o is not
// written) and may be packed (cu_seqlens). With transition_global, extra tiles carry the shard
// transition M of the context-parallel pass from the identity (chunk_prefill.cuh), in 3×TF32.
// V tiles of 32 columns while the CTAs fit in one wave of the GPU, else 64 (half the CTAs, and half
// the re-reads of W, Q_g, K_g, A_qk per column): 161 or 190 KB of shared memory, one CTA per SM.
// Loads: cp.async into one buffer per operand, each refilled for the next chunk right after its
// last read in this one (W and U after V', the rest after the state update), so a chunk's loads
// overlap the previous chunk's remaining products.
// Shared-memory pitches make every fragment read of a warp hit 32 distinct banks: row-major A
// operands (W, Q_g: 132; A_qk: 68), the transposed A operand K_g (136), B operands (tile + 8).
#include "kda/kernels/cuda/affine_merge_tile.cuh"
#include "kda/kernels/cuda/chunk_prefill.cuh"

namespace kda::kernels::cuda {
namespace {

using affine_merge_detail::mma_tf32;
using affine_merge_detail::SplitTf32x3;
using affine_merge_detail::to_tf32;

constexpr int kC = kPrefillChunk;     // 64
constexpr int kK = kPrefillKeyDim;    // 128
constexpr int kV = kPrefillValueDim;  // 128
constexpr int kThreads = 256;
constexpr int kRowPitch = kK + 4;  // W, Q_g
constexpr int kKgPitch = kK + 8;   // K_g, read transposed
constexpr int kAqkPitch = kC + 4;  // A_qk

// kTile: the V columns of one CTA (32 or 64); S, V' and U rows are padded to kTile + 8.
template <int kTile>
struct StateShared {
  static constexpr int kTilePitch = kTile + 8;
  float w[kC][kRowPitch];
  float q_decayed[kC][kRowPitch];
  float k_to_end[kC][kKgPitch];
  float a_qk[kC][kAqkPitch];
  float u[kC][kTilePitch];
  float decay_end[kK];
  float state[kK][kTilePitch];
  float v_new[kC][kTilePitch];
};

// D += A · B on operands that already hold TF32 values (rounded to nearest where they were
// stored: Q_g, K_g, W, A_qk by chunk_intra, the state and V' copies here), so no conversion runs
// in the inner loops.
struct RoundedTf32 {
  __device__ __forceinline__ void operator()(float (&d)[4], const float (&a)[4],
                                             const float (&b)[2]) const {
    const uint32_t a_bits[4] = {__float_as_uint(a[0]), __float_as_uint(a[1]), __float_as_uint(a[2]),
                                __float_as_uint(a[3])};
    const uint32_t b_bits[2] = {__float_as_uint(b[0]), __float_as_uint(b[1])};
    mma_tf32(d, a_bits, b_bits);
  }
};

// The shared copy of a B operand: rounded to TF32 once when the products read TF32.
template <ChainPrecision kPrecision>
__device__ __forceinline__ float b_operand(float value) {
  if constexpr (kPrecision == ChainPrecision::kTf32) return __uint_as_float(to_tf32(value));
  return value;
}

__device__ __forceinline__ void copy16(void* shared, const void* global) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global));
}
__device__ __forceinline__ void commit_group() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Rows of `width` floats from a dense (rows, row_stride) global block into a pitched shared one.
template <int kRows, int kWidth, int kPitchFloats>
__device__ __forceinline__ void copy_rows(float (*shared)[kPitchFloats], const float* global,
                                          int row_stride) {
  constexpr int kVectors = kRows * kWidth / 4;
  for (int idx = threadIdx.x; idx < kVectors; idx += kThreads) {
    const int row = idx / (kWidth / 4), col = 4 * (idx % (kWidth / 4));
    copy16(&shared[row][col], global + static_cast<int64_t>(row) * row_stride + col);
  }
}

struct ChunkAddress {
  const float *w, *u, *q_decayed, *k_to_end, *a_qk, *decay_end;
};

__device__ __forceinline__ ChunkAddress chunk_address(const ChunkPrefillProblem& p, int64_t entry,
                                                      int col0) {
  const ChunkWorkspace& ws = p.workspace;
  return {ws.w + entry * kC * kK,         ws.u + entry * kC * kV + col0,
          ws.q_decayed + entry * kC * kK, ws.k_to_end + entry * kC * kK,
          ws.a_qk + entry * kC * kC,      ws.decay_end + entry * kK};
}

// A transition tile takes U as zero (reads none); a pass without o reads no Q_g and A_qk.
template <int kTile, bool kTransition>
__device__ __forceinline__ void load_first_operands(StateShared<kTile>& s, const ChunkAddress& a) {
  copy_rows<kC, kK, kRowPitch>(s.w, a.w, kK);
  if constexpr (!kTransition) copy_rows<kC, kTile, kTile + 8>(s.u, a.u, kV);
}

template <int kTile>
__device__ __forceinline__ void load_second_operands(StateShared<kTile>& s, const ChunkAddress& a,
                                                     bool with_output) {
  if (with_output) copy_rows<kC, kK, kRowPitch>(s.q_decayed, a.q_decayed, kK);
  copy_rows<kC, kK, kKgPitch>(s.k_to_end, a.k_to_end, kK);
  if (with_output) copy_rows<kC, kC, kAqkPitch>(s.a_qk, a.a_qk, kC);
  if (threadIdx.x < kK / 4) copy16(&s.decay_end[4 * threadIdx.x], a.decay_end + 4 * threadIdx.x);
}

template <ChainPrecision kPrecision>
struct Mac {
  __device__ __forceinline__ void operator()(float (&d)[4], const float (&a)[4],
                                             const float (&b)[2]) const {
    if constexpr (kPrecision == ChainPrecision::kTf32x3) {
      SplitTf32x3{}(d, a, b);
    } else {
      RoundedTf32{}(d, a, b);
    }
  }
};

// B fragment (k rows k0 + quad, k0 + quad + 4; column n0 + group) of a (rows, kTile) tile.
template <int kTilePitch>
__device__ __forceinline__ void b_fragment(const float (*tile)[kTilePitch], int k0, int n0,
                                           int lane, float (&b)[2]) {
  const int group = lane / 4, quad = lane % 4;
  b[0] = tile[k0 + quad][n0 + group];
  b[1] = tile[k0 + quad + 4][n0 + group];
}

// A fragment of a row-major operand: rows m0 + group (+ 8), columns k0 + quad (+ 4).
template <int kPitchFloats>
__device__ __forceinline__ void a_fragment(const float (*rows)[kPitchFloats], int m0, int k0,
                                           int lane, float (&a)[4]) {
  const int group = lane / 4, quad = lane % 4;
  a[0] = rows[m0 + group][k0 + quad];
  a[1] = rows[m0 + group + 8][k0 + quad];
  a[2] = rows[m0 + group][k0 + quad + 4];
  a[3] = rows[m0 + group + 8][k0 + quad + 4];
}

// One CTA's walk over its sequence's chunks. kTransition: the tile carries columns col0 … of the
// transition M from the identity with U = 0 (V' = −W M) and writes them to transition_global; no
// o, no records.
template <ChainPrecision kPrecision, int kTile, bool kTransition>
__device__ __forceinline__ void state_walk(const ChunkPrefillProblem& p, StateShared<kTile>& s,
                                           int col0) {
  constexpr int kOutTiles = kTile / 16;   // n-tiles of V' and O per warp (half the columns)
  constexpr int kStateTiles = kTile / 8;  // n-tiles of the state per warp (all the columns)
  const Mac<kPrecision> mac;
  const int value_head = blockIdx.y, sequence = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = lane / 4, quad = lane % 4;
  const int value_heads = p.value_heads;
  const SequenceSpan span = sequence_span(p, sequence);
  const int chunks = chunks_of(span.tokens);
  const bool with_output = !kTransition && p.o_global != nullptr;
  const bool with_records = !kTransition && p.record_global != nullptr;
  const int64_t pair = int64_t{sequence} * value_heads + value_head;
  const int state_row0 = 16 * warp;      // this warp's 16 rows of the state, all kTile columns
  const int out_row0 = 16 * (warp / 2);  // this warp's 16 rows of V' and O …
  const int out_col0 = (kTile / 2) * (warp % 2);  // … and half of their columns

  // The state tile: st[nt] holds rows state_row0 + group (+ 8), columns 8 nt + 2 quad (+ 1).
  float st[kStateTiles][4];
  auto for_state = [&](auto&& body) {
#pragma unroll
    for (int nt = 0; nt < kStateTiles; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        body(nt, half, state_row0 + group + 8 * half, 8 * nt + 2 * quad);
      }
    }
  };
  {
    const float* h0 = p.h0_global && !kTransition ? p.h0_global + pair * kK * kV + col0 : nullptr;
    for_state([&](int nt, int half, int row, int col) {
      float2 value = make_float2(0.0f, 0.0f);
      if (h0) value = *reinterpret_cast<const float2*>(h0 + row * kV + col);
      if (kTransition) {  // the identity's columns col0 …
        value.x = row == col0 + col ? 1.0f : 0.0f;
        value.y = row == col0 + col + 1 ? 1.0f : 0.0f;
      }
      st[nt][2 * half] = value.x, st[nt][2 * half + 1] = value.y;
      s.state[row][col] = b_operand<kPrecision>(value.x);
      s.state[row][col + 1] = b_operand<kPrecision>(value.y);
    });
  }
  auto entry_of = [&](int chunk) { return (span.chunk_begin + chunk) * value_heads + value_head; };
  {
    const ChunkAddress first = chunk_address(p, entry_of(0), col0);
    load_first_operands<kTile, kTransition>(s, first);
    commit_group();
    load_second_operands(s, first, with_output);
    commit_group();
  }

  for (int chunk = 0; chunk < chunks; ++chunk) {
    if (with_records && chunk % p.record_every == 0) {
      const int records = chunks / p.record_every;
      float* record =
          p.record_global +
          ((int64_t{sequence} * records + chunk / p.record_every) * value_heads + value_head) * kK *
              kV +
          col0;
      for_state([&](int nt, int half, int row, int col) {
        *reinterpret_cast<float2*>(record + row * kV + col) =
            make_float2(st[nt][2 * half], st[nt][2 * half + 1]);
      });
    }
    wait_group<1>();  // W and U of this chunk
    __syncthreads();  // … from every thread, and the state tile written

    // V' = U − W S: this warp's 16 rows × kTile / 2 columns.
    {
      float product[kOutTiles][4] = {};
#pragma unroll 4
      for (int k0 = 0; k0 < kK; k0 += 8) {
        float a[4];
        a_fragment(s.w, out_row0, k0, lane, a);
#pragma unroll
        for (int nt = 0; nt < kOutTiles; ++nt) {
          float b[2];
          b_fragment(s.state, k0, out_col0 + 8 * nt, lane, b);
          mac(product[nt], a, b);
        }
      }
#pragma unroll
      for (int nt = 0; nt < kOutTiles; ++nt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = out_row0 + group + 8 * half, col = out_col0 + 8 * nt + 2 * quad;
          const float u0 = kTransition ? 0.0f : s.u[row][col];
          const float u1 = kTransition ? 0.0f : s.u[row][col + 1];
          s.v_new[row][col] = b_operand<kPrecision>(u0 - product[nt][2 * half]);
          s.v_new[row][col + 1] = b_operand<kPrecision>(u1 - product[nt][2 * half + 1]);
        }
      }
    }
    __syncthreads();  // V' complete; W and U are free
    const bool more = chunk + 1 < chunks;
    const ChunkAddress next = chunk_address(p, entry_of(more ? chunk + 1 : chunk), col0);
    if (more) load_first_operands<kTile, kTransition>(s, next);
    commit_group();
    wait_group<1>();  // Q_g, K_g, A_qk, e^{G_C} of this chunk
    __syncthreads();

    // O = Q_g S + A_qk V' (A_qk is lower triangular: columns past the warp's rows are zero).
    if (with_output) {
      float out[kOutTiles][4] = {};
#pragma unroll 4
      for (int k0 = 0; k0 < kK; k0 += 8) {
        float a[4];
        a_fragment(s.q_decayed, out_row0, k0, lane, a);
#pragma unroll
        for (int nt = 0; nt < kOutTiles; ++nt) {
          float b[2];
          b_fragment(s.state, k0, out_col0 + 8 * nt, lane, b);
          mac(out[nt], a, b);
        }
      }
      for (int k0 = 0; k0 < out_row0 + 16; k0 += 8) {
        float a[4];
        a_fragment(s.a_qk, out_row0, k0, lane, a);
#pragma unroll
        for (int nt = 0; nt < kOutTiles; ++nt) {
          float b[2];
          b_fragment(s.v_new, k0, out_col0 + 8 * nt, lane, b);
          mac(out[nt], a, b);
        }
      }
      const int64_t token0 = span.token_begin + int64_t{chunk} * kC;
      const int valid = min(kC, span.tokens - chunk * kC);  // rows past the sequence's end: none
#pragma unroll
      for (int nt = 0; nt < kOutTiles; ++nt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = out_row0 + group + 8 * half, col = out_col0 + 8 * nt + 2 * quad;
          if (row >= valid) continue;
          float* o = p.o_global + ((token0 + row) * value_heads + value_head) * kV + col0 + col;
          *reinterpret_cast<float2*>(o) = make_float2(out[nt][2 * half], out[nt][2 * half + 1]);
        }
      }
    }

    // S ← e^{G_C} ⊙ S + K_gᵀ V': the product in a fresh accumulator, added in fp32.
    {
      float product[kStateTiles][4] = {};
#pragma unroll 2
      for (int k0 = 0; k0 < kC; k0 += 8) {
        const int m = state_row0 + group;
        const float a[4] = {s.k_to_end[k0 + quad][m], s.k_to_end[k0 + quad][m + 8],
                            s.k_to_end[k0 + quad + 4][m], s.k_to_end[k0 + quad + 4][m + 8]};
#pragma unroll
        for (int nt = 0; nt < kStateTiles; ++nt) {
          float b[2];
          b_fragment(s.v_new, k0, 8 * nt, lane, b);
          mac(product[nt], a, b);
        }
      }
      for_state([&](int nt, int half, int row, int) {
        const float decay = s.decay_end[row];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& value = st[nt][2 * half + e];
          value = fmaf(decay, value, product[nt][2 * half + e]);
        }
      });
    }
    __syncthreads();  // every read of this chunk's state, Q_g, K_g, A_qk, V' is done
    for_state([&](int nt, int half, int row, int col) {
      s.state[row][col] = b_operand<kPrecision>(st[nt][2 * half]);
      s.state[row][col + 1] = b_operand<kPrecision>(st[nt][2 * half + 1]);
    });
    if (more) load_second_operands(s, next, with_output);
    commit_group();
  }
  wait_group<0>();

  float* out = kTransition ? p.transition_global + pair * kK * kK + col0
                           : (p.state_global ? p.state_global + pair * kK * kV + col0 : nullptr);
  if (out != nullptr) {
    for_state([&](int nt, int half, int row, int col) {
      *reinterpret_cast<float2*>(out + row * kV + col) =
          make_float2(st[nt][2 * half], st[nt][2 * half + 1]);
    });
  }
}

// grid (V / kTile, HV, B), plus K / kTile transition tiles per (sequence, value head) when
// transition_global is set: those run in 3×TF32 whatever kPrecision (the M chain drifts in TF32:
// incident 1).
// A separate instantiation with transitions keeps the plain pass's code and registers as they are.
template <ChainPrecision kPrecision, int kTile, bool kWithTransitions>
__global__ void __launch_bounds__(kThreads, 1) chunk_state_kernel(const ChunkPrefillProblem p) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  StateShared<kTile>& s = *reinterpret_cast<StateShared<kTile>*>(shared_raw);
  constexpr int kStateTilesPerHead = kV / kTile;
  if (!kWithTransitions || static_cast<int>(blockIdx.x) < kStateTilesPerHead) {
    state_walk<kPrecision, kTile, false>(p, s, blockIdx.x * kTile);
  } else if constexpr (kWithTransitions) {
    state_walk<ChainPrecision::kTf32x3, kTile, true>(p, s,
                                                     (blockIdx.x - kStateTilesPerHead) * kTile);
  }
}

template <ChainPrecision kPrecision, int kTile, bool kWithTransitions>
cudaError_t launch_state_kernel(const ChunkPrefillProblem& problem, cudaStream_t stream) {
  const int bytes = static_cast<int>(sizeof(StateShared<kTile>));
  const auto kernel = chunk_state_kernel<kPrecision, kTile, kWithTransitions>;
  if (const cudaError_t status =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      status != cudaSuccess) {
    return status;
  }
  const dim3 grid(kV / kTile + (kWithTransitions ? kK / kTile : 0), problem.value_heads,
                  problem.batch);
  kernel<<<grid, kThreads, bytes, stream>>>(problem);
  return cudaGetLastError();
}

template <ChainPrecision kPrecision, int kTile>
cudaError_t launch_state(const ChunkPrefillProblem& problem, cudaStream_t stream) {
  return problem.transition_global != nullptr
             ? launch_state_kernel<kPrecision, kTile, true>(problem, stream)
             : launch_state_kernel<kPrecision, kTile, false>(problem, stream);
}

// V tiles of 32 while (sequence, value head, tile) CTAs fit in one wave of the GPU; tiles of 64
// beyond, which halves the CTAs and the re-reads of W, Q_g, K_g and A_qk per column.
template <ChainPrecision kPrecision>
cudaError_t launch_state_tiled(const ChunkPrefillProblem& problem, cudaStream_t stream) {
  int device = 0, processors = 0;
  if (const cudaError_t status = cudaGetDevice(&device); status != cudaSuccess) return status;
  if (const cudaError_t status =
          cudaDeviceGetAttribute(&processors, cudaDevAttrMultiProcessorCount, device);
      status != cudaSuccess) {
    return status;
  }
  const int columns = kV + (problem.transition_global != nullptr ? kK : 0);
  const int64_t narrow_ctas = int64_t{problem.batch} * problem.value_heads * (columns / 32);
  return narrow_ctas > processors ? launch_state<kPrecision, 64>(problem, stream)
                                  : launch_state<kPrecision, 32>(problem, stream);
}

}  // namespace

cudaError_t launch_chunk_state(const ChunkPrefillProblem& problem, cudaStream_t stream) {
  if (chunk_prefill_shape_error(problem) != nullptr) return cudaErrorInvalidValue;
  return problem.precision == ChainPrecision::kTf32x3
             ? launch_state_tiled<ChainPrecision::kTf32x3>(problem, stream)
             : launch_state_tiled<ChainPrecision::kTf32>(problem, stream);
}

cudaError_t launch_chunk_prefill(const ChunkPrefillProblem& problem, cudaStream_t stream) {
  if (const cudaError_t status = launch_chunk_intra(problem, stream); status != cudaSuccess) {
    return status;
  }
  return launch_chunk_state(problem, stream);
}

}  // namespace kda::kernels::cuda
