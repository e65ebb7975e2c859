// kda/math/generator.hpp — seeded inputs for tests, benchmarks and probes.
//
// The distribution is incident 1's (reference/kda.md): keys in a 16-dimensional subspace plus
// 10 % noise, β = sigmoid(N(0, 1)), v ~ N(0, 1), and one of two gates:
//   slow  per-(sequence, value head, channel) decay rate r log-uniform in [1e-6, 1e-1] per token,
//         g = −r at every token: the state remembers across many chunks (CP drift shows)
//   fast  g = −5 · sigmoid(N(0, 1)) per token and channel: the state forgets within a chunk
// The same seed gives the same tensors on every run and platform (own normal sampler).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kda/math/layout.hpp"

namespace kda::math {

enum class Decay { kSlow, kFast };

std::string_view decay_name(Decay decay);
// Throws loupe::Error(kUsage) unless `name` is "slow" or "fast".
Decay parse_decay(std::string_view name);

struct GeneratorOptions {
  Decay decay = Decay::kFast;
  int64_t key_subspace = 16;  // keys lie in a subspace of this dimension (≤ K) ...
  double key_noise = 0.1;     // ... plus isotropic noise of this relative norm
  bool normalize_qk = true;   // false: q and k are left raw (for --l2norm and decode)
  uint64_t seed = 0;
};

// Inputs of `shape` (B equal-length sequences, zero h0). The values are fp32 numbers, so the fp64
// oracle widened from them sees exactly the same inputs.
Inputs<float> generate_inputs(const Shape& shape, const GeneratorOptions& options);

// Raw decode inputs, for the decode kernels that normalise, gate and squash themselves:
// q, k, v as above (un-normalised), g_raw ~ N(0, 1), b_raw ~ N(0, 1), A_log ~ U[-1, 1] per value
// head, dt_bias ~ 0.1 · N(0, 1) per (value head, channel).
struct RawDecodeInputs {
  Shape shape;                 // B sequences, T decode steps
  std::vector<float> q;        // (B, T, H, K), raw
  std::vector<float> k;        // (B, T, H, K), raw
  std::vector<float> v;        // (B, T, HV, V)
  std::vector<float> g_raw;    // (B, T, HV, K)
  std::vector<float> b_raw;    // (B, T, HV)
  std::vector<float> a_log;    // (HV)
  std::vector<float> dt_bias;  // (HV, K)
};
RawDecodeInputs generate_raw_decode_inputs(const Shape& shape, uint64_t seed);

// N(0, 1) samples from a seeded stream (splitmix64 + Marsaglia's polar method).
class NormalStream {
 public:
  explicit NormalStream(uint64_t seed) : state_(seed) {}
  double uniform();  // in (0, 1)
  double normal();

 private:
  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace kda::math
