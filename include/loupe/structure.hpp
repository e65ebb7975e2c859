// loupe/structure.hpp — a named family of input structures that real models' tensors have and
// i.i.d. Gaussian inputs do not, for any probe to draw (docs/structures.md).
//
// A fault that only structured inputs show passes a check fed i.i.d. draws: one weight scale per
// tensor instead of per channel agrees with per-channel scaling when every row has the same
// range. Each structure has a name that objectives declare (`structures = [...]` on an entry;
// `loupe plan` names the ones a check never sees) and a seeded generator: the same seed gives the
// same values on every platform (splitmix64 and the polar method, no <random> distributions), and
// another seed moves the structure (other outlier rows, another ragged tail).
//   outlier_channels  a few output channels (rows) 10-100x the rest
//   heavy_tails       Student-t draws (3 degrees of freedom) at unit variance
//   long_history      slow decay: per-channel rates log-uniform in [1e-6, 1e-1] per token, so a
//                     state remembers across many chunks
//   fast_gates        fast decay: g = -5 sigmoid(N(0, 1)), forgotten within a chunk
//   k_ne_v            a value dimension below the key dimension, not a multiple of the tile
//   ragged_tail       a length that is not a multiple of the chunk (a partial last chunk)
//   v_above_k         a value dimension about twice the key dimension (expanded value heads),
//                     not a multiple of the tile
// Thread-safety: pure functions and a value-type stream. Header-only; depends on nothing.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace loupe::structure {

enum class Kind {
  kOutlierChannels,
  kHeavyTails,
  kLongHistory,
  kFastGates,
  kKNotV,
  kRaggedTail,
  kVAboveK
};

inline constexpr std::array<std::string_view, 7> kNames = {
    "outlier_channels", "heavy_tails", "long_history", "fast_gates",
    "k_ne_v",           "ragged_tail", "v_above_k"};

inline std::string_view name(Kind kind) { return kNames[static_cast<size_t>(kind)]; }

inline std::optional<Kind> parse(std::string_view text) {
  for (size_t index = 0; index < kNames.size(); ++index) {
    if (kNames[index] == text) return static_cast<Kind>(index);
  }
  return std::nullopt;
}

// Seeded uniform and normal draws, identical on every platform.
class Stream {
 public:
  explicit Stream(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() {  // in (0, 1)
    return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53;
  }
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u = 0, v = 0, s = 0;
    do {
      u = 2 * uniform() - 1;
      v = 2 * uniform() - 1;
      s = u * u + v * v;
    } while (s >= 1 || s == 0);
    const double factor = std::sqrt(-2 * std::log(s) / s);
    spare_ = v * factor;
    has_spare_ = true;
    return u * factor;
  }

 private:
  uint64_t state_;
  double spare_ = 0;
  bool has_spare_ = false;
};

struct OutlierOptions {
  double fraction = 1.0 / 16;  // each row is an outlier with this probability (at least one is)
  double low = 10;             // its scale, log-uniform in [low, high]
  double high = 100;
};

// Scales a seeded few rows of a (rows, cols) row-major matrix (a linear layer's output channels)
// by 10-100x; returns the rows scaled, ascending. REQUIRES: matrix.size() == rows * cols, rows > 0.
inline std::vector<int64_t> scale_outlier_channels(std::span<float> matrix, int64_t rows,
                                                   int64_t cols, uint64_t seed,
                                                   const OutlierOptions& options = {}) {
  Stream stream(seed);
  std::vector<int64_t> chosen;
  for (int64_t row = 0; row < rows; ++row) {
    if (stream.uniform() < options.fraction) chosen.push_back(row);
  }
  if (chosen.empty()) chosen.push_back(static_cast<int64_t>(stream.next() % uint64_t(rows)));
  for (int64_t row : chosen) {
    const double scale =
        options.low * std::exp(stream.uniform() * std::log(options.high / options.low));
    for (int64_t col = 0; col < cols; ++col) {
      matrix[static_cast<size_t>(row * cols + col)] *= static_cast<float>(scale);
    }
  }
  return chosen;
}

// Student-t draws with `dof` degrees of freedom (> 2), scaled to unit variance: most values
// small, a few many standard deviations out.
inline void fill_heavy_tailed(std::span<float> values, uint64_t seed, int dof = 3) {
  Stream stream(seed);
  const double unit = std::sqrt((dof - 2.0) / dof);
  for (float& value : values) {
    double chi2 = 0;
    for (int draw = 0; draw < dof; ++draw) {
      const double z = stream.normal();
      chi2 += z * z;
    }
    value = static_cast<float>(stream.normal() / std::sqrt(chi2 / dof) * unit);
  }
}

// Per-token log decay of `channels` channels over `tokens` tokens, (tokens, channels): each
// channel's rate r log-uniform in [1e-6, 1e-1], g = -r at every token.
inline void fill_long_history_decay(std::span<float> log_decay, int64_t tokens, int64_t channels,
                                    uint64_t seed) {
  Stream stream(seed);
  std::vector<float> rates(static_cast<size_t>(channels));
  for (float& rate : rates) rate = static_cast<float>(1e-6 * std::pow(1e5, stream.uniform()));
  for (int64_t token = 0; token < tokens; ++token) {
    for (int64_t channel = 0; channel < channels; ++channel) {
      log_decay[static_cast<size_t>(token * channels + channel)] =
          -rates[static_cast<size_t>(channel)];
    }
  }
}

// g = -5 sigmoid(N(0, 1)) per element: every channel forgets within a few tokens.
inline void fill_fast_gate_decay(std::span<float> log_decay, uint64_t seed) {
  Stream stream(seed);
  for (float& value : log_decay) {
    value = static_cast<float>(-5.0 / (1.0 + std::exp(-stream.normal())));
  }
}

// A value dimension for `key_dim`: about 5/6 of it, a multiple of 8, never equal to it and never
// a multiple of `tile` (K = 96, tile 32 -> 80; K = 128 -> 104). REQUIRES: key_dim >= 16, tile > 8.
inline int64_t distinct_value_dim(int64_t key_dim, int64_t tile) {
  int64_t value_dim = key_dim * 5 / 6 / 8 * 8;
  while (value_dim == key_dim || value_dim % tile == 0) value_dim += 8;
  return value_dim;
}

// A value dimension above `key_dim`: twice it (value heads expanded over the keys, as gated delta
// networks' expand_v = 2 has them), moved up by 8 until it is not a multiple of `tile` (K = 64,
// tile 32 -> 136; K = 96 -> 200). A kernel that sizes, strides or decays the state as if it were
// K x K is right whenever V <= K and wrong here. REQUIRES: key_dim >= 8, tile > 8.
inline int64_t wider_value_dim(int64_t key_dim, int64_t tile) {
  int64_t value_dim = 2 * key_dim / 8 * 8;
  while (value_dim <= key_dim || value_dim % tile == 0) value_dim += 8;
  return value_dim;
}

// A length of `chunks` whole chunks plus a seeded partial one of 1 to chunk - 1 tokens.
// REQUIRES: chunk >= 2, chunks >= 0.
inline int64_t ragged_length(int64_t chunk, int64_t chunks, uint64_t seed) {
  Stream stream(seed);
  return chunks * chunk + 1 + static_cast<int64_t>(stream.next() % uint64_t(chunk - 1));
}

}  // namespace loupe::structure
