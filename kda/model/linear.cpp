#include "kda/model/linear.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "kda/faults.hpp"
#include "kda/math/blas.hpp"
#include "loupe/error.hpp"

namespace kda::model {

float quantize_row_int8(std::span<const float> row, std::span<int8_t> out) {
  float max_abs = 0.0f;
  for (float value : row) max_abs = std::max(max_abs, std::fabs(value));
  const float scale = max_abs > 0.0f ? max_abs / 127.0f : 1.0f;
  const float inverse = 1.0f / scale;
  for (size_t idx = 0; idx < row.size(); ++idx) {
    const float scaled = std::round(row[idx] * inverse);
    out[idx] = static_cast<int8_t>(std::clamp(scaled, -127.0f, 127.0f));
  }
  return scale;
}

Linear::Linear(int64_t out_features, int64_t in_features, std::vector<float> weight, bool w8a8)
    : out_(out_features), in_(in_features), w8a8_(w8a8) {
  if (static_cast<int64_t>(weight.size()) != out_features * in_features) {
    throw loupe::Error(
        loupe::ErrorCode::kInternal,
        "kda model: a linear layer's weight holds " + std::to_string(weight.size()) +
            " values, expected out*in = " + std::to_string(out_features * in_features));
  }
  if (!w8a8) {
    weight_ = std::move(weight);
    return;
  }
  weight_int8_.resize(weight.size());
  weight_scale_.resize(out_features);
  for (int64_t row = 0; row < out_features; ++row) {
    weight_scale_[row] =
        quantize_row_int8(std::span<const float>(weight).subspan(row * in_features, in_features),
                          std::span<int8_t>(weight_int8_).subspan(row * in_features, in_features));
  }
  // Planted faults w8a8_weight_tensor_scale / w8a8_weight_group_scale: one weight scale for the
  // whole tensor, or one per group of 8 rows (the group's largest), instead of one per row.
  const int64_t group = fault("w8a8_weight_tensor_scale")  ? out_features
                        : fault("w8a8_weight_group_scale") ? 8
                                                           : 1;
  if (group > 1) {
    for (int64_t first = 0; first < out_features; first += group) {
      const int64_t last = std::min(out_features, first + group);
      float scale = 0.0f;
      for (int64_t row = first; row < last; ++row) scale = std::max(scale, weight_scale_[row]);
      for (int64_t idx = first * in_features; idx < last * in_features; ++idx) {
        weight_int8_[idx] =
            static_cast<int8_t>(std::clamp(std::round(weight[idx] / scale), -127.0f, 127.0f));
      }
      for (int64_t row = first; row < last; ++row) weight_scale_[row] = scale;
    }
  }
}

void Linear::forward(const float* x, int64_t rows, float* y) const {
  forward_rows(x, rows, 0, out_, y);
}

void Linear::forward_rows(const float* x, int64_t rows, int64_t out_begin, int64_t out_end,
                          float* y) const {
  const int64_t width = out_end - out_begin;
  if (rows == 0 || width == 0) return;
  if (!w8a8_) {
    math::gemm<float>(false, true, rows, width, in_, 1.0f, x, in_, weight_.data() + out_begin * in_,
                      in_, 0.0f, y, width);
    return;
  }
  std::vector<int8_t> x_int8(in_);
  // Planted fault w8a8_tensor_scale: one activation scale for all rows (the largest row's), not
  // one per row, so rows of small magnitude keep few significant bits.
  float tensor_scale = 0.0f;
  if (fault("w8a8_tensor_scale")) {
    float max_abs = 0.0f;
    for (int64_t idx = 0; idx < rows * in_; ++idx) max_abs = std::max(max_abs, std::fabs(x[idx]));
    tensor_scale = max_abs > 0.0f ? max_abs / 127.0f : 1.0f;
  }
  for (int64_t row = 0; row < rows; ++row) {
    float x_scale = quantize_row_int8(std::span<const float>(x + row * in_, in_), x_int8);
    if (tensor_scale > 0.0f) {
      x_scale = tensor_scale;
      for (int64_t idx = 0; idx < in_; ++idx) {
        x_int8[idx] = static_cast<int8_t>(
            std::clamp(std::round(x[row * in_ + idx] / tensor_scale), -127.0f, 127.0f));
      }
    }
    // Planted fault w8a8_clip: activations clipped at 7/8 of their int8 range.
    if (fault("w8a8_clip")) {
      for (int8_t& value : x_int8) value = static_cast<int8_t>(std::clamp<int>(value, -111, 111));
    }
    // Planted fault w8a8_pair_saturation: the dot product in the form of an unsigned-by-signed
    // int8 multiply-add instruction (x86's vpmaddubsw): activations shifted by +128 to unsigned,
    // each pair of adjacent products summed in int16 with saturation, the shift's term
    // 128 * sum(w) taken off in int32 afterwards. Exact until a pair's sum passes 32767 (a large
    // activation meeting a large weight with the same sign twice in a row), which is clipped.
    const bool pair_saturation = fault("w8a8_pair_saturation");
    for (int64_t out_idx = out_begin; out_idx < out_end; ++out_idx) {
      const int8_t* weight_row = weight_int8_.data() + out_idx * in_;
      // Planted fault w8a8_scale_in_inner_loop: each product scaled to float in the inner loop
      // instead of one int32 dot product scaled once (the same values to fp32 rounding, slower).
      if (fault("w8a8_scale_in_inner_loop")) {
        const float scale = x_scale * weight_scale_[out_idx];
        float sum = 0.0f;
        for (int64_t in_idx = 0; in_idx < in_; ++in_idx) {
          sum +=
              static_cast<float>(x_int8[in_idx]) * static_cast<float>(weight_row[in_idx]) * scale;
        }
        y[row * width + out_idx - out_begin] = sum;
        continue;
      }
      int32_t accumulator = 0;
      if (pair_saturation) {
        int32_t weight_sum = 0;
        for (int64_t in_idx = 0; in_idx < in_; in_idx += 2) {
          int32_t pair = (static_cast<int32_t>(x_int8[in_idx]) + 128) * weight_row[in_idx];
          weight_sum += weight_row[in_idx];
          if (in_idx + 1 < in_) {
            pair += (static_cast<int32_t>(x_int8[in_idx + 1]) + 128) * weight_row[in_idx + 1];
            weight_sum += weight_row[in_idx + 1];
          }
          accumulator += std::clamp<int32_t>(pair, -32768, 32767);
        }
        accumulator -= 128 * weight_sum;
      }
      for (int64_t in_idx = 0; in_idx < in_ && !pair_saturation; ++in_idx) {
        accumulator +=
            static_cast<int32_t>(x_int8[in_idx]) * static_cast<int32_t>(weight_row[in_idx]);
      }
      y[row * width + out_idx - out_begin] =
          static_cast<float>(accumulator) * x_scale * weight_scale_[out_idx];
    }
  }
}

}  // namespace kda::model
