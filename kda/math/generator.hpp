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

#include <cmath>
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

// N(0, 1) samples from a seeded stream (splitmix64 + Marsaglia's polar method). Defined here so
// that the generator's fill loops inline them: a bench's fresh inputs per timed call are drawn
// from this stream, and each draw is a few nanoseconds.
class NormalStream {
 public:
  explicit NormalStream(uint64_t seed) : state_(seed) {}
  // In (0, 1).
  double uniform() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (static_cast<double>(z >> 11) + 0.5) * 0x1.0p-53;
  }
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    // Marsaglia's polar method: one log per pair of samples, no sin or cos.
    double x = 0.0, y = 0.0, radius_sq = 0.0;
    do {
      x = 2.0 * uniform() - 1.0;
      y = 2.0 * uniform() - 1.0;
      radius_sq = x * x + y * y;
    } while (radius_sq >= 1.0 || radius_sq == 0.0);
    const double factor = std::sqrt(-2.0 * std::log(radius_sq) / radius_sq);
    spare_ = y * factor;
    has_spare_ = true;
    return x * factor;
  }

 private:
  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace kda::math
