// kda/model/linear.hpp — the model's linear layers, in fp32 or W8A8.
//
// fp32: y = x Wᵀ through OpenBLAS sgemm (single-threaded, math/blas.hpp).
// W8A8: W is stored as int8 with one scale per output channel (max |w| / 127 of the row), x is
// quantised per token (max |x| / 127 of the row) at every call, the dot products accumulate in
// int32, and y = acc · x_scale · w_scale. Rounding is to nearest, ties away from zero.
// Thread-safety: forward() is const and may run on many threads at once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kda::model {

class Linear {
 public:
  Linear() = default;
  // `weight` is (out, in), row-major. With `w8a8` the weight is quantised here once.
  Linear(int64_t out_features, int64_t in_features, std::vector<float> weight, bool w8a8);

  // y (rows, out) = x (rows, in) Wᵀ.
  void forward(const float* x, int64_t rows, float* y) const;
  // y (rows, out_end − out_begin) = x (rows, in) W[out_begin:out_end]ᵀ: only the output channels
  // [out_begin, out_end), each the same dot product over `in` that forward() computes (a
  // tensor-parallel rank's share of a layer split by output channel).
  // REQUIRES: 0 <= out_begin <= out_end <= out_features().
  void forward_rows(const float* x, int64_t rows, int64_t out_begin, int64_t out_end,
                    float* y) const;

  int64_t out_features() const { return out_; }
  int64_t in_features() const { return in_; }
  bool w8a8() const { return w8a8_; }

 private:
  int64_t out_ = 0, in_ = 0;
  bool w8a8_ = false;
  std::vector<float> weight_;        // (out, in), fp32 layers only
  std::vector<int8_t> weight_int8_;  // (out, in), W8A8 layers only
  std::vector<float> weight_scale_;  // (out)
};

// Quantises `row` to int8 with scale max |x| / 127 (1 when the row is zero); returns the scale.
float quantize_row_int8(std::span<const float> row, std::span<int8_t> out);

}  // namespace kda::model
