// A subject whose check candidate replays outputs instead of computing them (issue 33, "one
// door"): `replay_recorder` sums rows honestly and leaves its outputs, named by a hash of its
// inputs, in a fixed folder of this build (REPLAY_STORE, outside every run directory, readable
// inside the sandbox); `replay_candidate` computes nothing and returns what an earlier process
// left there for its inputs, zeros when nothing. Recorded at the shown seed, the candidate passes
// there and fails at any seed it was not shown: what the hidden run's secret seed must catch on
// every path a candidate runs through (tests/integration/door).
#include <loupe/probe.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <sstream>
#include <string>

namespace {

constexpr int64_t kColumns = 64;

void generate_rows(loupe::CheckSetup& setup) {
  const int64_t rows = setup.point().get_int("N");
  std::span<float> x = setup.input<float>("x", {rows, kColumns}, {"N", "D"});
  std::mt19937_64 rng(setup.seed());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& value : x) value = normal(rng);
  setup.output<float>("y", {rows}, {"N"}).along("N").tolerance("rms_ratio", 1e-6);
}

void sum_rows_sequential(std::span<const float> x, std::span<float> y) {
  for (size_t row = 0; row < y.size(); ++row) {
    float sum = 0;
    for (int64_t column = 0; column < kColumns; ++column) sum += x[row * kColumns + column];
    y[row] = sum;
  }
}

// Pairwise order: within the tolerance of the sequential reference, not bit for bit equal.
void sum_rows_pairwise(std::span<const float> x, std::span<float> y) {
  for (size_t row = 0; row < y.size(); ++row) {
    float partial[kColumns];
    for (int64_t column = 0; column < kColumns; ++column)
      partial[column] = x[row * kColumns + column];
    for (int64_t width = kColumns / 2; width >= 1; width /= 2) {
      for (int64_t column = 0; column < width; ++column) partial[column] += partial[column + width];
    }
    y[row] = partial[0];
  }
}

// Where the recorder leaves its outputs: named by a hash of the inputs, so the candidate finds
// them again for the same inputs only.
std::filesystem::path stored_outputs(std::span<const float> x) {
  uint64_t hash = 1469598103934665603ull;
  for (const float value : x) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    hash = (hash ^ bits) * 1099511628211ull;
  }
  return std::filesystem::path(REPLAY_STORE) /
         ("outputs-" + std::to_string(hash) + "-" + std::to_string(x.size()));
}

}  // namespace

LOUPE_CHECK(replay_recorder)
    .description("row sums, pairwise order; leaves its outputs in the replay store")
    .param("N", 256, {256})
    .inputs(generate_rows)
    .reference([](loupe::CheckIo& io) {
      sum_rows_sequential(io.input<float>("x"), io.output<float>("y"));
    })
    .candidate([](loupe::CheckIo& io) {
      std::span<const float> x = io.input<float>("x");
      std::span<float> y = io.output<float>("y");
      sum_rows_pairwise(x, y);
      std::error_code ignored;
      std::filesystem::create_directories(REPLAY_STORE, ignored);
      std::ofstream out(stored_outputs(x), std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(y.data()),
                static_cast<std::streamsize>(y.size() * sizeof(float)));
    });

LOUPE_CHECK(replay_candidate)
    .description("computes nothing: replays what replay_recorder left for the same inputs")
    .param("N", 256, {256})
    .inputs(generate_rows)
    .reference([](loupe::CheckIo& io) {
      sum_rows_sequential(io.input<float>("x"), io.output<float>("y"));
    })
    .candidate([](loupe::CheckIo& io) {
      std::span<const float> x = io.input<float>("x");
      std::span<float> y = io.output<float>("y");
      std::fill(y.begin(), y.end(), 0.0f);
      std::ifstream in(stored_outputs(x), std::ios::binary);
      std::stringstream bytes;
      bytes << in.rdbuf();
      const std::string stored = bytes.str();
      if (stored.size() == y.size() * sizeof(float))
        std::memcpy(y.data(), stored.data(), stored.size());
    });

int main(int argc, char** argv) { return loupe::subject_main(argc, argv); }
