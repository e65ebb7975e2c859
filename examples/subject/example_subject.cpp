// An example subject built outside loupe: softmax rows, a check (a fused single-pass candidate
// against the textbook two-pass reference, with an fp64 oracle) and a bench of the two.
//
//   example_subject list
//   loupe probe run softmax_check --set N=256 -- ./example_subject
//   loupe probe run softmax_speed -- ./example_subject
#include <loupe/probe.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace {

// Textbook: subtract the row max, exponentiate, divide by the sum.
void softmax_two_pass(std::span<const float> x, std::span<float> y, int64_t columns) {
  const int64_t rows = static_cast<int64_t>(x.size()) / columns;
  for (int64_t row = 0; row < rows; ++row) {
    const float* in = x.data() + row * columns;
    float* out = y.data() + row * columns;
    const float max = *std::max_element(in, in + columns);
    float sum = 0;
    for (int64_t column = 0; column < columns; ++column) {
      out[column] = std::exp(in[column] - max);
      sum += out[column];
    }
    for (int64_t column = 0; column < columns; ++column) out[column] /= sum;
  }
}

// Online softmax: the running max and sum in one pass, rescaling the sum when the max grows.
void softmax_online(std::span<const float> x, std::span<float> y, int64_t columns) {
  const int64_t rows = static_cast<int64_t>(x.size()) / columns;
  for (int64_t row = 0; row < rows; ++row) {
    const float* in = x.data() + row * columns;
    float* out = y.data() + row * columns;
    float max = -INFINITY;
    float sum = 0;
    for (int64_t column = 0; column < columns; ++column) {
      const float next_max = std::max(max, in[column]);
      sum = sum * std::exp(max - next_max) + std::exp(in[column] - next_max);
      max = next_max;
    }
    const float inverse = 1.0f / sum;
    for (int64_t column = 0; column < columns; ++column) {
      out[column] = std::exp(in[column] - max) * inverse;
    }
  }
}

void softmax_fp64(std::span<const float> x, std::span<double> y, int64_t columns) {
  const int64_t rows = static_cast<int64_t>(x.size()) / columns;
  for (int64_t row = 0; row < rows; ++row) {
    const float* in = x.data() + row * columns;
    double* out = y.data() + row * columns;
    double max = *std::max_element(in, in + columns);
    double sum = 0;
    for (int64_t column = 0; column < columns; ++column) {
      out[column] = std::exp(static_cast<double>(in[column]) - max);
      sum += out[column];
    }
    for (int64_t column = 0; column < columns; ++column) out[column] /= sum;
  }
}

void fill_logits(std::span<float> x, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& value : x) value = normal(rng);
}

struct Rows {
  int64_t columns = 0;
  std::vector<float> x;
  std::vector<float> y;
};

}  // namespace

LOUPE_CHECK(softmax_check)
    .description("online softmax against the two-pass reference, anchored to an fp64 oracle")
    .param("N", 256, {64, 256, 1024})
    .param("C", 512, {128, 512})
    // The hidden run: a corner off the allowed sizes, with N and C drawn over it in secret.
    .hidden_point({{"N", int64_t{100}}, {"C", int64_t{333}}})
    .hidden_range("N", 65, 200)
    .hidden_range("C", 300, 400)
    .inputs([](loupe::CheckSetup& setup) {
      const int64_t rows = setup.point().get_int("N");
      const int64_t columns = setup.point().get_int("C");
      fill_logits(setup.input<float>("x", {rows, columns}, {"N", "C"}), setup.seed());
      setup.output<float>("y", {rows, columns}, {"N", "C"})
          .along("C")
          .tolerance("rms_ratio", 1e-5)
          .tolerance_vs_oracle("rms_ratio", 4.0);
    })
    .reference([](loupe::CheckIo& io) {
      softmax_two_pass(io.input<float>("x"), io.output<float>("y"), io.point().get_int("C"));
    })
    .candidate([](loupe::CheckIo& io) {
      softmax_online(io.input<float>("x"), io.output<float>("y"), io.point().get_int("C"));
    })
    .oracle([](loupe::CheckIo& io) {
      softmax_fp64(io.input<float>("x"), io.output<double>("y"), io.point().get_int("C"));
    });

LOUPE_BENCH(softmax_speed)
    .description("two-pass against online softmax, per row block")
    .param("N", 64, {16, 64})
    .param("C", 512, {128, 512})
    .body([](loupe::BenchState& state) {
      const int64_t rows = state.point().get_int("N");
      const int64_t columns = state.point().get_int("C");
      state.set_bytes_per_call(8.0 * static_cast<double>(rows * columns));
      state.exec(
          [rows, columns](uint64_t seed) {
            Rows work{columns, std::vector<float>(rows * columns),
                      std::vector<float>(rows * columns)};
            fill_logits(work.x, seed);
            return work;
          },
          {{"two_pass", [](Rows& work) { softmax_two_pass(work.x, work.y, work.columns); }},
           {"online", [](Rows& work) { softmax_online(work.x, work.y, work.columns); }}},
          [](const Rows& work) {
            loupe::Tensor y(loupe::DType::kF32, {static_cast<int64_t>(work.y.size())});
            std::copy(work.y.begin(), work.y.end(), y.mutable_data<float>().begin());
            return std::vector<loupe::NamedTensor>{{"y", y}};
          });
    });

int main(int argc, char** argv) { return loupe::subject_main(argc, argv); }
