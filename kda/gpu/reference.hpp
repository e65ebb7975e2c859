// kda/gpu/reference.hpp — the fp64 CPU side of the GPU harness: seeded random inputs, bf16
// rounding, the decode token step, the chunkwise affine map (M, H) of reference/kda.md, the
// incident-1 input distribution, and the sequential fp64 chain of chunk maps.
// Standard library only, so kda_gpu builds with nvcc alone and the CPU tests build without CUDA.
// Thread-safety: free functions touch only their arguments; Random is not shared across threads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kda::gpu {

inline constexpr int kKeyDim = 128;
inline constexpr int kValueDim = 128;
inline constexpr int kChunkSize = 64;

// xoshiro256** seeded through splitmix64; normal() by Box–Muller.
class Random {
 public:
  explicit Random(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1)
  double normal();

 private:
  uint64_t state_[4];
};

// Round to the nearest bf16 (ties to even); returns the bit pattern or its value.
uint16_t to_bf16_bits(float value);
float bf16_bits_to_float(uint16_t bits);

// One decode token for a batch: the layouts of kda/kernels/cuda/decode.cuh, inputs as bf16 bits.
struct DecodeInputs {
  int num_sequences = 0, num_heads = 0, num_value_heads = 0, num_states = 0;
  std::vector<uint16_t> q, k;          // (N, H, K)
  std::vector<uint16_t> v;             // (N, HV, V)
  std::vector<uint16_t> g_raw;         // (N, HV, K)
  std::vector<uint16_t> b_raw;         // (N, HV)
  std::vector<float> a_log;            // (HV)
  std::vector<float> dt_bias;          // (HV, K)
  std::vector<int32_t> state_indices;  // (N)
};

// Fresh random inputs; state indices are distinct slots drawn from [0, num_states).
DecodeInputs random_decode_inputs(int num_sequences, int num_heads, int num_value_heads,
                                  int num_states, Random& random);

// S ← Diag(α) S; v̂ = Sᵀk; S ← S + k (β (v − v̂))ᵀ; o = Sᵀ(q K^-0.5), in fp64, in place on
// state (num_states, HV, K, V); o is (N, HV, V).
void decode_reference(const DecodeInputs& inputs, std::vector<double>& state,
                      std::vector<double>& o);

// One chunk of one head, already gated and normalised: k (C, K) L2-normalised, v (C, V),
// g (C, K) log-decay per token and channel, beta (C).
struct ChunkInputs {
  std::vector<double> k, v, g, beta;
};

// The chunk as an affine map of the state: S_next = M S + H, M (K, K), H (K, V).
void chunk_affine_map(const ChunkInputs& chunk, double* m, double* h);

// The same chunk as C token steps on state (K, V) in place (the definition the map must match).
void chunk_token_steps(const ChunkInputs& chunk, double* state);

// The gates of reference/kda.md's incident 1 and its control.
enum class GateKind {
  kSlowDecay,   // per-channel decay rate log-uniform in [1e-6, 1e-1] per token
  kFastForget,  // g = −5 · sigmoid(N(0, 1)), the usual test gate: forgets within a chunk
  // g = −20 · sigmoid(N(0, 1)): 16 tokens decay past e^-80, so chunk_intra takes its block-row
  // path (kda/kernels/cuda/chunk_intra.cu) instead of the whole-chunk product
  kSteepForget,
};
const char* gate_kind_name(GateKind gate);

// Chunk c of the incident-1 stream: keys in a 16-dim subspace + 10 % noise, v ~ N(0, 1),
// β = sigmoid(N(0, 1)). Depends only on (seed, gate, c), so chunks can be made in any order.
ChunkInputs incident1_chunk(uint64_t seed, GateKind gate, int chunk_index);

// M and H of chunks [0, num_chunks) in fp64: m_all (num_chunks, K, K), h_all (num_chunks, K, V),
// on up to `threads` threads.
void incident1_chunk_maps(uint64_t seed, GateKind gate, int num_chunks, int threads,
                          std::vector<double>& m_all, std::vector<double>& h_all);

// The non-CP state in fp64: S_0 = 0, S_{c+1} = M_c S_c + H_c; returns S_c for each c in
// `boundaries` (chunk counts), K × V each.
std::map<int, std::vector<double>> chain_states(const std::vector<double>& m_all,
                                                const std::vector<double>& h_all, int num_chunks,
                                                const std::vector<int>& boundaries, int threads);

// The chunked prefill's inputs for `kda_gpu --prefill`, (B, T, H, HV, K = V = 128): the incident-1
// stream above, one stream per (sequence, head) for q and k and one per (sequence, value head) for
// v, g and β, so the rows of every chunk can be drawn on any thread in any order with the same
// result; q ~ N(0, 1) per channel, L2-normalised. q, k and v are rounded to bf16 (what the GPU
// reads), so the fp64 recurrence and the GPU see the same numbers. REQUIRES: T a multiple of 64,
// HV a multiple of H (std::invalid_argument otherwise).
struct PrefillInputs {
  int batch = 0, tokens = 0, heads = 0, value_heads = 0;
  std::vector<float> q, k;  // (B, T, H, K)
  std::vector<float> v;     // (B, T, HV, V)
  std::vector<float> g;     // (B, T, HV, K), log decay
  std::vector<float> beta;  // (B, T, HV)
};
PrefillInputs prefill_inputs(uint64_t seed, GateKind gate, int batch, int tokens, int heads,
                             int value_heads, int threads);

// rms(x − y) / rms(y); NaN when x holds a NaN (so any `ratio <= tolerance` test fails).
double rms_ratio(const double* x, const double* y, int64_t n);
double rms_ratio(const float* x, const double* y, int64_t n);
double rms_ratio(const float* x, const float* y, int64_t n);

}  // namespace kda::gpu
