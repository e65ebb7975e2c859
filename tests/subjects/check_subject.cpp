// A subject whose checks exercise every guard of the check runtime: one correct candidate that
// must pass within tolerance, and one adversarial candidate per guard. Used by
// tests/integration/probe; each probe's description says which guard must catch it.
#include <loupe/probe.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace {

constexpr int64_t kColumns = 64;

loupe::CheckOutput& generate_rows(loupe::CheckSetup& setup) {
  const int64_t rows = setup.point().get_int("N");
  std::span<float> x = setup.input<float>("x", {rows, kColumns}, {"N", "D"});
  std::mt19937_64 rng(setup.seed());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& value : x) value = normal(rng);
  return setup.output<float>("y", {rows}, {"N"}).along("N").tolerance("rms_ratio", 1e-6);
}

void generate_rows_with_oracle(loupe::CheckSetup& setup) {
  generate_rows(setup).tolerance_vs_oracle("rms_ratio", 10.0);
}

// y[row] = sum over the row, left to right, in float.
void sum_rows_sequential(std::span<const float> x, std::span<float> y) {
  for (size_t row = 0; row < y.size(); ++row) {
    float sum = 0;
    for (int64_t column = 0; column < kColumns; ++column) sum += x[row * kColumns + column];
    y[row] = sum;
  }
}

// The same sums in a different order (pairwise), so the float result differs in the last bits.
void sum_rows_pairwise(std::span<const float> x, std::span<float> y) {
  for (size_t row = 0; row < y.size(); ++row) {
    float partial[kColumns];
    for (int64_t column = 0; column < kColumns; ++column) {
      partial[column] = x[row * kColumns + column];
    }
    for (int64_t width = kColumns / 2; width >= 1; width /= 2) {
      for (int64_t column = 0; column < width; ++column) {
        partial[column] += partial[column + width];
      }
    }
    y[row] = partial[0];
  }
}

void sum_rows_fp64(std::span<const float> x, std::span<double> y) {
  for (size_t row = 0; row < y.size(); ++row) {
    double sum = 0;
    for (int64_t column = 0; column < kColumns; ++column) sum += x[row * kColumns + column];
    y[row] = sum;
  }
}

void reference(loupe::CheckIo& io) {
  sum_rows_sequential(io.input<float>("x"), io.output<float>("y"));
}
void oracle(loupe::CheckIo& io) { sum_rows_fp64(io.input<float>("x"), io.output<double>("y")); }

// A block a caching allocator hands to whoever asks next.
std::vector<float>& reused_block() {
  static std::vector<float> block;
  return block;
}

}  // namespace

LOUPE_CHECK(sum_correct)
    .description("row sums, pairwise order: differs in the last bits, must pass")
    .param("N", 1024, {256, 1024})
    .hidden_point({{"N", int64_t{777}}})
    .hidden_range("N", 700, 900)
    .inputs(generate_rows_with_oracle)
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      sum_rows_pairwise(io.input<float>("x"), io.output<float>("y"));
    })
    .oracle(oracle);

LOUPE_CHECK(sum_alias)
    .description(
        "returns the reference's buffer: caught by output_alias and the candidate-first order")
    .param("N", 1024, {256, 1024})
    .inputs(generate_rows)
    .reference([](loupe::CheckIo& io) {
      std::vector<float>& block = reused_block();
      block.assign(io.output_tensor("y").numel(), 0.0f);
      sum_rows_sequential(io.input<float>("x"), block);
      io.bind_output("y", block.data());
    })
    .candidate([](loupe::CheckIo& io) {
      std::vector<float>& block = reused_block();
      block.resize(io.output_tensor("y").numel());  // whatever the last user left there
      io.bind_output("y", block.data());
    });

LOUPE_CHECK(sum_mutate)
    .description("zeroes its input and its output: caught by input_mutation")
    .param("N", 1024, {256, 1024})
    .inputs(generate_rows)
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<const float> x = io.input<float>("x");
      // The adversary casts the constness away: after this, a reference run next sees zeros too.
      std::fill(const_cast<float*>(x.data()), const_cast<float*>(x.data()) + x.size(), 0.0f);
      sum_rows_sequential(x, io.output<float>("y"));
    });

LOUPE_CHECK(sum_half)
    .description("writes only the first half of its output: caught by output_unwritten")
    .param("N", 1024, {256, 1024})
    .inputs(generate_rows)
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      std::vector<float> full(y.size());
      sum_rows_sequential(io.input<float>("x"), full);
      std::copy(full.begin(), full.begin() + full.size() / 2, y.begin());
    });

LOUPE_CHECK(sum_vacuous)
    .description("a reference whose output ignores its inputs: flagged cannot_discriminate")
    .param("N", 1024, {256, 1024})
    .inputs(generate_rows)
    .reference([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      std::fill(y.begin(), y.end(), 1.0f);
    })
    .candidate([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      std::fill(y.begin(), y.end(), 1.0f);
    });

LOUPE_CHECK(sum_flaky)
    .description("every other call perturbs one element: caught by --repeat")
    .param("N", 1024, {256, 1024})
    .inputs(generate_rows)
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      static int calls = 0;
      std::span<float> y = io.output<float>("y");
      sum_rows_sequential(io.input<float>("x"), y);
      if (calls++ % 2 == 1) y[y.size() / 3] = std::nextafter(y[y.size() / 3], INFINITY);
    });

int main(int argc, char** argv) { return loupe::subject_main(argc, argv); }
