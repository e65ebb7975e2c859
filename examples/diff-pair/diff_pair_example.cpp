// diff_pair_example OUT_DIR [T]: per-layer dumps of a toy linear-attention layer, three ways.
//
//   OUT_DIR/oracle_fp64/     every op in double                        (the oracle)
//   OUT_DIR/reference_fp32/  every op in float                         (the reference, B)
//   OUT_DIR/candidate_bf16/  float, but the recurrent state kept in bf16 (the candidate, A)
//
// Each directory holds layer_00_embed.npy ... layer_05_out.npy, shape (T, H, 16), and a
// manifest.txt with their order. The candidate equals the reference up to the scan: there the
// state S_t = decay_h * S_{t-1} + k_t v_t^T is rounded to bf16 after every step, so its error
// accumulates with t, most in head 1 whose decay is 1 (nothing forgets the error). This is the
// pattern `loupe diff --axes T,H,V --along T` is built to name: the first divergent layer, the
// worst coordinate, a growing profile and the head holding the error.
// Inputs come from a fixed seed (7), so the files are the same on every run.
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "loupe/error.hpp"
#include "loupe/tensor.hpp"

namespace {

constexpr int64_t kHeads = 4;
constexpr int64_t kDim = 16;  // K = V = 16
constexpr std::array<double, kHeads> kDecay = {0.9, 1.0, 0.95, 0.8};
constexpr uint64_t kSeed = 7;

// xorshift64*: the same numbers on every platform (std distributions are not portable).
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  double uniform(double low, double high) {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    const uint64_t bits = state_ * 0x2545F4914F6CDD1Dull;
    return low + (high - low) * static_cast<double>(bits >> 11) * 0x1.0p-53;
  }

 private:
  uint64_t state_;
};

float round_to_bfloat16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even (finite values)
  return std::bit_cast<float>(bits & 0xffff0000u);
}

struct Inputs {
  int64_t length = 0;
  std::vector<double> x;                       // (T, H, K)
  std::array<std::vector<double>, 3> weights;  // Wk, Wv, Wq: (H, K, K)
};

Inputs make_inputs(int64_t length) {
  Random random(kSeed);
  Inputs inputs;
  inputs.length = length;
  inputs.x.resize(length * kHeads * kDim);
  for (double& value : inputs.x) value = random.uniform(-1, 1);
  for (auto& weight : inputs.weights) {
    weight.resize(kHeads * kDim * kDim);
    for (double& value : weight) value = random.uniform(-1, 1) / std::sqrt(double(kDim));
  }
  return inputs;
}

// The layer in arithmetic `Real`; `bf16_state` rounds the scan state after every step.
template <class Real>
std::vector<std::vector<Real>> run_layer(const Inputs& inputs, bool bf16_state) {
  const int64_t length = inputs.length;
  const int64_t size = length * kHeads * kDim;
  std::vector<Real> x(inputs.x.begin(), inputs.x.end());
  std::vector<Real> k(size), v(size), q(size), o(size), out(size);
  auto project = [&](const std::vector<double>& weight, std::vector<Real>& result, int kind) {
    for (int64_t t = 0; t < length; ++t) {
      for (int64_t head = 0; head < kHeads; ++head) {
        for (int64_t row = 0; row < kDim; ++row) {
          Real sum = 0;
          for (int64_t col = 0; col < kDim; ++col) {
            sum += static_cast<Real>(weight[(head * kDim + row) * kDim + col]) *
                   x[(t * kHeads + head) * kDim + col];
          }
          // k: a positive feature map (sigmoid); v, q: tanh.
          result[(t * kHeads + head) * kDim + row] =
              kind == 0 ? Real(1) / (Real(1) + std::exp(-sum)) : std::tanh(sum);
        }
      }
    }
  };
  project(inputs.weights[0], k, 0);
  project(inputs.weights[1], v, 1);
  project(inputs.weights[2], q, 2);

  for (int64_t head = 0; head < kHeads; ++head) {
    std::vector<Real> state(kDim * kDim, 0);  // (K, V)
    const Real decay = static_cast<Real>(kDecay[head]);
    for (int64_t t = 0; t < length; ++t) {
      const Real* k_t = &k[(t * kHeads + head) * kDim];
      const Real* v_t = &v[(t * kHeads + head) * kDim];
      const Real* q_t = &q[(t * kHeads + head) * kDim];
      for (int64_t row = 0; row < kDim; ++row) {
        for (int64_t col = 0; col < kDim; ++col) {
          Real updated = decay * state[row * kDim + col] + k_t[row] * v_t[col];
          if (bf16_state)
            updated = static_cast<Real>(round_to_bfloat16(static_cast<float>(updated)));
          state[row * kDim + col] = updated;
        }
      }
      for (int64_t col = 0; col < kDim; ++col) {
        Real sum = 0;
        for (int64_t row = 0; row < kDim; ++row) sum += state[row * kDim + col] * q_t[row];
        o[(t * kHeads + head) * kDim + col] = sum / static_cast<Real>(kDim);
      }
    }
  }
  for (int64_t index = 0; index < size; ++index) out[index] = std::tanh(o[index]) + x[index];
  return {x, k, v, q, o, out};
}

const std::array<const char*, 6> kLayerNames = {"layer_00_embed", "layer_01_k",    "layer_02_v",
                                                "layer_03_q",     "layer_04_scan", "layer_05_out"};

template <class Real>
void write_dir(const std::filesystem::path& dir, const std::vector<std::vector<Real>>& layers,
               int64_t length) {
  std::filesystem::create_directories(dir);
  std::ofstream manifest(dir / "manifest.txt");
  for (size_t layer = 0; layer < layers.size(); ++layer) {
    loupe::Tensor tensor(loupe::dtype_of<Real>(), {length, kHeads, kDim});
    auto data = tensor.mutable_data<Real>();
    std::copy(layers[layer].begin(), layers[layer].end(), data.begin());
    const std::string file = std::string(kLayerNames[layer]) + ".npy";
    loupe::write_npy(dir / file, tensor);
    manifest << file << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: diff_pair_example OUT_DIR [T]\n";
    return 2;
  }
  const std::filesystem::path out = argv[1];
  const int64_t length = argc == 3 ? std::stoll(argv[2]) : 4096;
  if (length < 1) {
    std::cerr << "diff_pair_example: T must be at least 1, got " << argv[2] << "\n";
    return 2;
  }
  try {
    const Inputs inputs = make_inputs(length);
    write_dir(out / "oracle_fp64", run_layer<double>(inputs, false), length);
    write_dir(out / "reference_fp32", run_layer<float>(inputs, false), length);
    write_dir(out / "candidate_bf16", run_layer<float>(inputs, true), length);
  } catch (const loupe::Error& error) {
    std::cerr << "diff_pair_example: " << error.message() << "\n";
    return 2;
  }
  std::cout << "wrote " << (out / "candidate_bf16").string() << ", "
            << (out / "reference_fp32").string() << ", " << (out / "oracle_fp64").string()
            << " (T=" << length << ", H=" << kHeads << ", V=" << kDim << ", seed " << kSeed
            << ")\n";
  return 0;
}
