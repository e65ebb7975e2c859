// kda/gpu/reference.cpp — fp64 references and input generators of the GPU harness.
#include "kda/gpu/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>

namespace kda::gpu {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double softplus(double x) { return x > 30.0 ? x : std::log1p(std::exp(x)); }

// Runs body(begin, end) over [0, count) split into contiguous ranges on up to `threads` threads.
template <class Body>
void parallel_ranges(int count, int threads, Body body) {
  threads = std::max(1, std::min(threads, count));
  std::vector<std::thread> workers;
  for (int worker = 0; worker < threads; ++worker) {
    const int begin = static_cast<int>(static_cast<int64_t>(count) * worker / threads);
    const int end = static_cast<int>(static_cast<int64_t>(count) * (worker + 1) / threads);
    workers.emplace_back([=] { body(begin, end); });
  }
  for (auto& thread : workers) thread.join();
}

constexpr int kSubspaceDim = 16;
constexpr double kKeyNoise = 0.1;

}  // namespace

Random::Random(uint64_t seed) {
  for (auto& word : state_) word = splitmix64(seed);
}

uint64_t Random::next() {
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t shifted = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= shifted;
  state_[3] = rotl(state_[3], 45);
  return result;
}

double Random::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Random::normal() {
  const double u1 = 1.0 - uniform(), u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

uint16_t to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if (std::isnan(value)) return 0x7FC0;
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float bf16_bits_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

DecodeInputs random_decode_inputs(int num_sequences, int num_heads, int num_value_heads,
                                  int num_states, Random& random) {
  DecodeInputs inputs;
  inputs.num_sequences = num_sequences;
  inputs.num_heads = num_heads;
  inputs.num_value_heads = num_value_heads;
  inputs.num_states = num_states;
  auto bf16_normal = [&](int64_t count, double scale, double shift) {
    std::vector<uint16_t> values(count);
    for (auto& value : values) {
      value = to_bf16_bits(static_cast<float>(shift + scale * random.normal()));
    }
    return values;
  };
  const int64_t n = num_sequences;
  inputs.q = bf16_normal(n * num_heads * kKeyDim, 1.0, 0.0);
  inputs.k = bf16_normal(n * num_heads * kKeyDim, 1.0, 0.0);
  inputs.v = bf16_normal(n * num_value_heads * kValueDim, 1.0, 0.0);
  inputs.g_raw = bf16_normal(n * num_value_heads * kKeyDim, 1.0, 0.0);
  inputs.b_raw = bf16_normal(n * num_value_heads, 1.0, 0.0);
  inputs.a_log.resize(num_value_heads);
  for (auto& value : inputs.a_log) value = static_cast<float>(random.uniform() * 2.0 - 2.0);
  inputs.dt_bias.resize(static_cast<size_t>(num_value_heads) * kKeyDim);
  for (auto& value : inputs.dt_bias) value = static_cast<float>(0.5 * random.normal());
  std::vector<int32_t> slots(num_states);
  std::iota(slots.begin(), slots.end(), 0);
  for (int i = num_states - 1; i > 0; --i) {
    std::swap(slots[i], slots[random.next() % static_cast<uint64_t>(i + 1)]);
  }
  inputs.state_indices.assign(slots.begin(), slots.begin() + num_sequences);
  return inputs;
}

void decode_reference(const DecodeInputs& inputs, std::vector<double>& state,
                      std::vector<double>& o) {
  const int hv_count = inputs.num_value_heads, group = hv_count / inputs.num_heads;
  o.assign(static_cast<size_t>(inputs.num_sequences) * hv_count * kValueDim, 0.0);
  std::vector<double> q(kKeyDim), k(kKeyDim), alpha(kKeyDim), projection(kValueDim),
      delta(kValueDim);
  for (int sequence = 0; sequence < inputs.num_sequences; ++sequence) {
    for (int value_head = 0; value_head < hv_count; ++value_head) {
      const int head = value_head / group;
      const int64_t qk_offset =
          (static_cast<int64_t>(sequence) * inputs.num_heads + head) * kKeyDim;
      const int64_t row = static_cast<int64_t>(sequence) * hv_count + value_head;
      double q_norm2 = 0, k_norm2 = 0;
      for (int key = 0; key < kKeyDim; ++key) {
        q[key] = bf16_bits_to_float(inputs.q[qk_offset + key]);
        k[key] = bf16_bits_to_float(inputs.k[qk_offset + key]);
        q_norm2 += q[key] * q[key];
        k_norm2 += k[key] * k[key];
      }
      const double q_scale = 1.0 / std::sqrt(q_norm2 + 1e-6) / std::sqrt(double(kKeyDim));
      const double k_scale = 1.0 / std::sqrt(k_norm2 + 1e-6);
      const double decay_rate = std::exp(double(inputs.a_log[value_head]));
      for (int key = 0; key < kKeyDim; ++key) {
        q[key] *= q_scale;
        k[key] *= k_scale;
        const double x = bf16_bits_to_float(inputs.g_raw[row * kKeyDim + key]) +
                         double(inputs.dt_bias[value_head * kKeyDim + key]);
        alpha[key] = std::exp(-decay_rate * softplus(x));
      }
      const double beta = sigmoid(bf16_bits_to_float(inputs.b_raw[row]));
      double* s = state.data() +
                  (static_cast<int64_t>(inputs.state_indices[sequence]) * hv_count + value_head) *
                      kKeyDim * kValueDim;
      std::fill(projection.begin(), projection.end(), 0.0);
      for (int key = 0; key < kKeyDim; ++key) {
        for (int column = 0; column < kValueDim; ++column) {
          s[key * kValueDim + column] *= alpha[key];
          projection[column] += k[key] * s[key * kValueDim + column];
        }
      }
      for (int column = 0; column < kValueDim; ++column) {
        const double v = bf16_bits_to_float(inputs.v[row * kValueDim + column]);
        delta[column] = beta * (v - projection[column]);
      }
      double* out = o.data() + row * kValueDim;
      for (int key = 0; key < kKeyDim; ++key) {
        for (int column = 0; column < kValueDim; ++column) {
          s[key * kValueDim + column] += k[key] * delta[column];
          out[column] += q[key] * s[key * kValueDim + column];
        }
      }
    }
  }
}

void chunk_affine_map(const ChunkInputs& chunk, double* m, double* h) {
  const int c_count = static_cast<int>(chunk.beta.size());
  std::vector<double> cumulative(static_cast<size_t>(c_count) * kKeyDim);  // (C, K) G
  for (int key = 0; key < kKeyDim; ++key) {
    double sum = 0;
    for (int c = 0; c < c_count; ++c) {
      sum += chunk.g[c * kKeyDim + key];
      cumulative[c * kKeyDim + key] = sum;
    }
  }
  // e^{G_c − G_i} factorises as e^{G_c} e^{−G_i}; within one chunk |G| ≤ 5·64 fits a double.
  std::vector<double> k_decayed(cumulative.size()), k_grown(cumulative.size()),
      k_to_end(cumulative.size());
  const double* last = cumulative.data() + static_cast<int64_t>(c_count - 1) * kKeyDim;
  for (int c = 0; c < c_count; ++c) {
    for (int key = 0; key < kKeyDim; ++key) {
      const int64_t at = static_cast<int64_t>(c) * kKeyDim + key;
      k_decayed[at] = chunk.k[at] * std::exp(cumulative[at]);
      k_grown[at] = chunk.k[at] * std::exp(-cumulative[at]);
      k_to_end[at] = chunk.k[at] * std::exp(last[key] - cumulative[at]);
    }
  }
  // X = (I + A_kk)^-1 Diag(β) by forward substitution; X is lower triangular.
  std::vector<double> x(static_cast<size_t>(c_count) * c_count, 0.0), a_row(c_count);
  for (int c = 0; c < c_count; ++c) {
    for (int i = 0; i < c; ++i) {
      double dot = 0;
      for (int key = 0; key < kKeyDim; ++key) {
        dot += k_decayed[c * kKeyDim + key] * k_grown[i * kKeyDim + key];
      }
      a_row[i] = chunk.beta[c] * dot;
    }
    double* x_row = x.data() + static_cast<int64_t>(c) * c_count;
    x_row[c] = chunk.beta[c];
    for (int i = 0; i < c; ++i) {
      const double* x_prev = x.data() + static_cast<int64_t>(i) * c_count;
      for (int j = 0; j <= i; ++j) x_row[j] -= a_row[i] * x_prev[j];
    }
  }
  std::vector<double> w(static_cast<size_t>(c_count) * kKeyDim, 0.0),
      u(static_cast<size_t>(c_count) * kValueDim, 0.0);
  for (int c = 0; c < c_count; ++c) {
    for (int j = 0; j <= c; ++j) {
      const double factor = x[static_cast<int64_t>(c) * c_count + j];
      for (int key = 0; key < kKeyDim; ++key) {
        w[c * kKeyDim + key] += factor * k_decayed[j * kKeyDim + key];
      }
      for (int column = 0; column < kValueDim; ++column) {
        u[c * kValueDim + column] += factor * chunk.v[j * kValueDim + column];
      }
    }
  }
  for (int row = 0; row < kKeyDim; ++row) {
    double* m_row = m + static_cast<int64_t>(row) * kKeyDim;
    double* h_row = h + static_cast<int64_t>(row) * kValueDim;
    std::fill(m_row, m_row + kKeyDim, 0.0);
    std::fill(h_row, h_row + kValueDim, 0.0);
    m_row[row] = std::exp(last[row]);
    for (int c = 0; c < c_count; ++c) {
      const double factor = k_to_end[c * kKeyDim + row];
      for (int key = 0; key < kKeyDim; ++key) m_row[key] -= factor * w[c * kKeyDim + key];
      for (int column = 0; column < kValueDim; ++column) {
        h_row[column] += factor * u[c * kValueDim + column];
      }
    }
  }
}

void chunk_token_steps(const ChunkInputs& chunk, double* state) {
  const int c_count = static_cast<int>(chunk.beta.size());
  std::vector<double> projection(kValueDim);
  for (int c = 0; c < c_count; ++c) {
    const double* k = chunk.k.data() + static_cast<int64_t>(c) * kKeyDim;
    std::fill(projection.begin(), projection.end(), 0.0);
    for (int key = 0; key < kKeyDim; ++key) {
      const double alpha = std::exp(chunk.g[c * kKeyDim + key]);
      for (int column = 0; column < kValueDim; ++column) {
        state[key * kValueDim + column] *= alpha;
        projection[column] += k[key] * state[key * kValueDim + column];
      }
    }
    for (int key = 0; key < kKeyDim; ++key) {
      for (int column = 0; column < kValueDim; ++column) {
        state[key * kValueDim + column] +=
            k[key] * chunk.beta[c] * (chunk.v[c * kValueDim + column] - projection[column]);
      }
    }
  }
}

const char* gate_kind_name(GateKind gate) {
  switch (gate) {
    case GateKind::kSlowDecay:
      return "slow_decay";
    case GateKind::kFastForget:
      return "fast_forget";
    case GateKind::kSteepForget:
      return "steep_forget";
  }
  return "unknown_gate";
}

ChunkInputs incident1_chunk(uint64_t seed, GateKind gate, int chunk_index) {
  // Stream-wide parameters: the key subspace and the per-channel decay rates.
  Random global(seed);
  std::vector<double> basis(static_cast<size_t>(kSubspaceDim) * kKeyDim);  // (16, K)
  for (auto& value : basis) value = global.normal();
  std::vector<double> rate(kKeyDim);
  for (auto& value : rate) value = std::exp(std::log(1e-6) + global.uniform() * std::log(1e5));

  uint64_t chunk_seed = seed ^ (0xD1B54A32D192ED03ull * static_cast<uint64_t>(chunk_index + 1));
  Random random(splitmix64(chunk_seed));
  ChunkInputs chunk;
  chunk.k.resize(static_cast<size_t>(kChunkSize) * kKeyDim);
  chunk.v.resize(static_cast<size_t>(kChunkSize) * kValueDim);
  chunk.g.resize(static_cast<size_t>(kChunkSize) * kKeyDim);
  chunk.beta.resize(kChunkSize);
  std::vector<double> subspace(kKeyDim), noise(kKeyDim);
  for (int c = 0; c < kChunkSize; ++c) {
    std::fill(subspace.begin(), subspace.end(), 0.0);
    for (int axis = 0; axis < kSubspaceDim; ++axis) {
      const double weight = random.normal();
      for (int key = 0; key < kKeyDim; ++key) subspace[key] += weight * basis[axis * kKeyDim + key];
    }
    double subspace_norm2 = 0, noise_norm2 = 0;
    for (int key = 0; key < kKeyDim; ++key) {
      noise[key] = random.normal();
      subspace_norm2 += subspace[key] * subspace[key];
      noise_norm2 += noise[key] * noise[key];
    }
    double* k = chunk.k.data() + static_cast<int64_t>(c) * kKeyDim;
    double k_norm2 = 0;
    for (int key = 0; key < kKeyDim; ++key) {
      k[key] = subspace[key] / std::sqrt(subspace_norm2) +
               kKeyNoise * noise[key] / std::sqrt(noise_norm2);
      k_norm2 += k[key] * k[key];
    }
    for (int key = 0; key < kKeyDim; ++key) k[key] /= std::sqrt(k_norm2);
    for (int column = 0; column < kValueDim; ++column) {
      chunk.v[c * kValueDim + column] = random.normal();
    }
    for (int key = 0; key < kKeyDim; ++key) {
      chunk.g[c * kKeyDim + key] =
          gate == GateKind::kSlowDecay
              ? -rate[key]
              : (gate == GateKind::kSteepForget ? -20.0 : -5.0) * sigmoid(random.normal());
    }
    chunk.beta[c] = sigmoid(random.normal());
  }
  return chunk;
}

void incident1_chunk_maps(uint64_t seed, GateKind gate, int num_chunks, int threads,
                          std::vector<double>& m_all, std::vector<double>& h_all) {
  m_all.assign(static_cast<size_t>(num_chunks) * kKeyDim * kKeyDim, 0.0);
  h_all.assign(static_cast<size_t>(num_chunks) * kKeyDim * kValueDim, 0.0);
  parallel_ranges(num_chunks, threads, [&](int begin, int end) {
    for (int chunk_index = begin; chunk_index < end; ++chunk_index) {
      chunk_affine_map(incident1_chunk(seed, gate, chunk_index),
                       m_all.data() + static_cast<int64_t>(chunk_index) * kKeyDim * kKeyDim,
                       h_all.data() + static_cast<int64_t>(chunk_index) * kKeyDim * kValueDim);
    }
  });
}

PrefillInputs prefill_inputs(uint64_t seed, GateKind gate, int batch, int tokens, int heads,
                             int value_heads, int threads) {
  if (batch < 1 || tokens < kChunkSize || tokens % kChunkSize != 0 || heads < 1 ||
      value_heads < heads || value_heads % heads != 0) {
    throw std::invalid_argument(
        "prefill_inputs: B >= 1, T a positive multiple of 64 and HV a "
        "multiple of H (got B=" +
        std::to_string(batch) + ", T=" + std::to_string(tokens) + ", H=" + std::to_string(heads) +
        ", HV=" + std::to_string(value_heads) + ")");
  }
  PrefillInputs in;
  in.batch = batch, in.tokens = tokens, in.heads = heads, in.value_heads = value_heads;
  const int64_t rows = int64_t{batch} * tokens;
  in.q.resize(static_cast<size_t>(rows * heads * kKeyDim));
  in.k.resize(in.q.size());
  in.v.resize(static_cast<size_t>(rows * value_heads * kValueDim));
  in.g.resize(static_cast<size_t>(rows * value_heads * kKeyDim));
  in.beta.resize(static_cast<size_t>(rows * value_heads));
  auto bf16 = [](double value) {
    return bf16_bits_to_float(to_bf16_bits(static_cast<float>(value)));
  };
  // A stream per (sequence, head) and kind: its own subspace basis and decay rates.
  auto stream_seed = [seed](int b, int head, uint64_t kind) {
    uint64_t x = seed ^ (kind * 0xA0761D6478BD642Full) ^
                 (0xE7037ED1A0B428DBull * static_cast<uint64_t>(int64_t{b} * 65536 + head + 1));
    return splitmix64(x);
  };
  const int chunks = tokens / kChunkSize;
  // Work items: (b, chunk) pairs; each fills every head's rows of its 64 tokens.
  parallel_ranges(batch * chunks, threads, [&](int begin, int end) {
    std::vector<double> q_row(kKeyDim);
    for (int item = begin; item < end; ++item) {
      const int b = item / chunks, chunk = item % chunks;
      const int64_t first = int64_t{b} * tokens + int64_t{chunk} * kChunkSize;
      for (int h = 0; h < heads; ++h) {
        const ChunkInputs keys = incident1_chunk(stream_seed(b, h, 1), gate, chunk);
        uint64_t q_seed = stream_seed(b, h, 2) ^ (0xD1B54A32D192ED03ull * (chunk + 1ull));
        Random q_random(splitmix64(q_seed));
        for (int c = 0; c < kChunkSize; ++c) {
          const int64_t row = ((first + c) * heads + h) * kKeyDim;
          double norm2 = 0;
          for (int d = 0; d < kKeyDim; ++d) {
            q_row[d] = q_random.normal();
            norm2 += q_row[d] * q_row[d];
          }
          for (int d = 0; d < kKeyDim; ++d) {
            in.q[row + d] = bf16(q_row[d] / std::sqrt(norm2));
            in.k[row + d] = bf16(keys.k[c * kKeyDim + d]);
          }
        }
      }
      for (int hv = 0; hv < value_heads; ++hv) {
        const ChunkInputs values = incident1_chunk(stream_seed(b, hv, 3), gate, chunk);
        for (int c = 0; c < kChunkSize; ++c) {
          const int64_t row = (first + c) * value_heads + hv;
          for (int e = 0; e < kValueDim; ++e) {
            in.v[row * kValueDim + e] = bf16(values.v[c * kValueDim + e]);
          }
          for (int d = 0; d < kKeyDim; ++d) {
            in.g[row * kKeyDim + d] = static_cast<float>(values.g[c * kKeyDim + d]);
          }
          in.beta[row] = static_cast<float>(values.beta[c]);
        }
      }
    }
  });
  return in;
}

std::map<int, std::vector<double>> chain_states(const std::vector<double>& m_all,
                                                const std::vector<double>& h_all, int num_chunks,
                                                const std::vector<int>& boundaries, int threads) {
  std::map<int, std::vector<double>> states;
  for (int boundary : boundaries) {
    states[boundary].assign(static_cast<size_t>(kKeyDim) * kValueDim, 0.0);
  }
  // Columns of S evolve independently: each thread chains its own column range.
  parallel_ranges(kValueDim, threads, [&](int column0, int column1) {
    const int width = column1 - column0;
    std::vector<double> s(static_cast<size_t>(kKeyDim) * width, 0.0), next(s.size());
    for (int chunk_index = 0; chunk_index <= num_chunks; ++chunk_index) {
      if (auto found = states.find(chunk_index); found != states.end()) {
        for (int row = 0; row < kKeyDim; ++row) {
          for (int j = 0; j < width; ++j) {
            found->second[row * kValueDim + column0 + j] = s[row * width + j];
          }
        }
      }
      if (chunk_index == num_chunks) break;
      const double* m = m_all.data() + static_cast<int64_t>(chunk_index) * kKeyDim * kKeyDim;
      const double* h = h_all.data() + static_cast<int64_t>(chunk_index) * kKeyDim * kValueDim;
      for (int row = 0; row < kKeyDim; ++row) {
        double* out = next.data() + static_cast<int64_t>(row) * width;
        for (int j = 0; j < width; ++j) out[j] = h[row * kValueDim + column0 + j];
        for (int key = 0; key < kKeyDim; ++key) {
          const double factor = m[row * kKeyDim + key];
          const double* in = s.data() + static_cast<int64_t>(key) * width;
          for (int j = 0; j < width; ++j) out[j] += factor * in[j];
        }
      }
      s.swap(next);
    }
  });
  return states;
}

namespace {
template <class X, class Y>
double rms_ratio_impl(const X* x, const Y* y, int64_t n) {
  double difference2 = 0, reference2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(x[i]) - double(y[i]);
    difference2 += d * d;
    reference2 += double(y[i]) * double(y[i]);
  }
  return std::sqrt(difference2) / (std::sqrt(reference2) + 1e-300);
}
}  // namespace

double rms_ratio(const double* x, const double* y, int64_t n) { return rms_ratio_impl(x, y, n); }
double rms_ratio(const float* x, const double* y, int64_t n) { return rms_ratio_impl(x, y, n); }
double rms_ratio(const float* x, const float* y, int64_t n) { return rms_ratio_impl(x, y, n); }

}  // namespace kda::gpu
