#include "kda/math/layout.hpp"

#include <cmath>

#include "loupe/error.hpp"

namespace kda {

std::string Shape::to_string() const {
  return "B=" + std::to_string(batch) + ",T=" + std::to_string(tokens) +
         ",H=" + std::to_string(heads) + ",HV=" + std::to_string(value_heads) +
         ",K=" + std::to_string(key_dim) + ",V=" + std::to_string(value_dim);
}

double effective_scale(double scale, int64_t key_dim) {
  return scale != 0.0 ? scale : 1.0 / std::sqrt(static_cast<double>(key_dim));
}

double effective_scale(const KernelOptions& options, int64_t key_dim) {
  return effective_scale(options.scale, key_dim);
}

std::vector<SequenceSpan> sequence_spans(const Shape& shape, std::span<const int64_t> cu_seqlens) {
  std::vector<SequenceSpan> spans;
  if (cu_seqlens.empty()) {
    for (int64_t batch_idx = 0; batch_idx < shape.batch; ++batch_idx) {
      spans.push_back({batch_idx, 0, shape.tokens});
    }
    return spans;
  }
  for (size_t idx = 0; idx + 1 < cu_seqlens.size(); ++idx) {
    spans.push_back({0, cu_seqlens[idx], cu_seqlens[idx + 1]});
  }
  return spans;
}

void validate_boundary_tokens(std::span<const int64_t> boundary_tokens,
                              const std::vector<SequenceSpan>& spans, int64_t multiple) {
  for (size_t idx = 0; idx < boundary_tokens.size(); ++idx) {
    const int64_t offset = boundary_tokens[idx];
    bool valid = offset >= 0 && (idx == 0 || offset > boundary_tokens[idx - 1]);
    for (const auto& span : spans) {
      valid =
          valid && offset <= span.length() && (offset % multiple == 0 || offset == span.length());
    }
    if (!valid) {
      throw loupe::Error(loupe::ErrorCode::kUsage,
                         "kda: boundary token " + std::to_string(idx) + " = " +
                             std::to_string(offset) +
                             " must rise, lie within every sequence and be a multiple of " +
                             std::to_string(multiple) + " (or the sequence length)",
                         "record states at chunk boundaries");
    }
  }
}

namespace {

void expect_size(const char* field, size_t actual, int64_t expected, const char* layout,
                 const Shape& shape) {
  if (static_cast<int64_t>(actual) != expected) {
    throw loupe::Error(loupe::ErrorCode::kInput,
                       std::string("kda inputs: ") + field + " holds " + std::to_string(actual) +
                           " elements, expected " + std::to_string(expected) + " = " + layout +
                           " for " + shape.to_string(),
                       "check the tensor's shape against the layout in kda/math/layout.hpp");
  }
}

}  // namespace

template <class Real>
void validate_inputs(const Inputs<Real>& inputs) {
  const Shape& s = inputs.shape;
  if (s.batch <= 0 || s.tokens < 0 || s.heads <= 0 || s.value_heads <= 0 || s.key_dim <= 0 ||
      s.value_dim <= 0) {
    throw loupe::Error(loupe::ErrorCode::kInput,
                       "kda inputs: every dimension must be positive, got " + s.to_string());
  }
  if (s.value_heads % s.heads != 0) {
    throw loupe::Error(
        loupe::ErrorCode::kInput,
        "kda inputs: HV must be a multiple of H (grouped value heads), got " + s.to_string());
  }
  const int64_t tokens = s.batch * s.tokens;
  expect_size("q", inputs.q.size(), tokens * s.heads * s.key_dim, "(B, T, H, K)", s);
  expect_size("k", inputs.k.size(), tokens * s.heads * s.key_dim, "(B, T, H, K)", s);
  expect_size("v", inputs.v.size(), tokens * s.value_heads * s.value_dim, "(B, T, HV, V)", s);
  expect_size("g", inputs.g.size(), tokens * s.value_heads * s.key_dim, "(B, T, HV, K)", s);
  expect_size("beta", inputs.beta.size(), tokens * s.value_heads, "(B, T, HV)", s);
  int64_t sequences = s.batch;
  if (!inputs.cu_seqlens.empty()) {
    const auto& cu = inputs.cu_seqlens;
    bool valid = s.batch == 1 && cu.size() >= 2 && cu.front() == 0 && cu.back() == s.tokens;
    for (size_t idx = 1; valid && idx < cu.size(); ++idx) valid = cu[idx] >= cu[idx - 1];
    if (!valid) {
      throw loupe::Error(loupe::ErrorCode::kInput, "kda inputs: cu_seqlens must rise from 0 to T=" +
                                                       std::to_string(s.tokens) +
                                                       " with B == 1, for " + s.to_string());
    }
    sequences = static_cast<int64_t>(cu.size()) - 1;
  }
  if (!inputs.h0.empty()) {
    expect_size("h0", inputs.h0.size(), sequences * s.value_heads * s.key_dim * s.value_dim,
                "(N, HV, K, V)", s);
  }
}

template void validate_inputs(const Inputs<float>&);
template void validate_inputs(const Inputs<double>&);

}  // namespace kda
