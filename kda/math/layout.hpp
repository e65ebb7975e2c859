// kda/math/layout.hpp — the shapes and tensors every kda kernel reads and writes.
//
// Layouts follow flash-linear-attention's usual API (reference/kda.md):
//   q, k  (B, T, H, K)     v (B, T, HV, V)     g (B, T, HV, K) per-token log decay (≤ 0)
//   beta  (B, T, HV)       state (N, HV, K, V) with N the number of sequences
// Value heads are grouped: HV % H == 0 and value head hv reads query/key head hv / (HV / H).
// Variable-length batches follow cu_seqlens: B == 1, the sequences are the token ranges
// [cu_seqlens[n], cu_seqlens[n + 1]) and N = cu_seqlens.size() - 1; otherwise N == B.
// Thread-safety: plain values; kernels only read Inputs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kda {

struct Shape {
  int64_t batch = 1;        // B
  int64_t tokens = 0;       // T
  int64_t heads = 1;        // H, query/key heads
  int64_t value_heads = 1;  // HV, a multiple of H
  int64_t key_dim = 0;      // K
  int64_t value_dim = 0;    // V

  int64_t group_size() const { return value_heads / heads; }
  // "B=2,T=512,H=3,HV=3,K=60,V=60", for messages.
  std::string to_string() const;
};

// One sequence of a batch: its batch row and token range.
struct SequenceSpan {
  int64_t batch_idx = 0;
  int64_t token_begin = 0;
  int64_t token_end = 0;
  int64_t length() const { return token_end - token_begin; }
};

template <class Real>
struct Inputs {
  Shape shape;
  std::vector<Real> q;              // (B, T, H, K), L2-normalised (math/gates.hpp)
  std::vector<Real> k;              // (B, T, H, K), L2-normalised
  std::vector<Real> v;              // (B, T, HV, V)
  std::vector<Real> g;              // (B, T, HV, K), log decay per token and channel
  std::vector<Real> beta;           // (B, T, HV)
  std::vector<Real> h0;             // (N, HV, K, V); empty: every sequence starts from zero
  std::vector<int64_t> cu_seqlens;  // empty: B sequences of T tokens
};

template <class Real>
struct Outputs {
  std::vector<Real> o;      // (B, T, HV, V)
  std::vector<Real> state;  // (N, HV, K, V), the state after each sequence's last token
  // (N, P, HV, K, V): the state before each of KernelOptions::boundary_tokens (chunk, recurrent)
  // or before each shard (cp); empty when none were asked for.
  std::vector<Real> boundary_states;
};

// Options every prefill kernel takes.
struct KernelOptions {
  double scale = 0.0;  // applied to q inside the kernel; 0 means K^-0.5
  int threads = 1;     // worker threads over (sequence, head) pairs or shards
  // Token offsets within each sequence before which the state is recorded into
  // Outputs::boundary_states (an offset equal to the length records the final state). The chunk
  // kernel requires multiples of 64 (or the length); cp refuses them (it records its shards).
  std::vector<int64_t> boundary_tokens;
};

// The scale a kernel applies: options.scale, or K^-0.5 when it is 0.
double effective_scale(const KernelOptions& options, int64_t key_dim);
double effective_scale(double scale, int64_t key_dim);

// Throws loupe::Error(kInput) naming the field and the expected size when a shape is invalid
// (a non-positive dimension, HV % H != 0) or a vector has the wrong length, or when cu_seqlens is
// not a non-decreasing list from 0 to T with B == 1.
template <class Real>
void validate_inputs(const Inputs<Real>& inputs);

// The sequences of a batch, in order (B of them, or one per cu_seqlens range).
std::vector<SequenceSpan> sequence_spans(const Shape& shape, std::span<const int64_t> cu_seqlens);

// Throws loupe::Error(kUsage) unless `boundary_tokens` rises strictly, each offset lies within
// every sequence (≤ its length) and is a multiple of `multiple` or equal to that length.
void validate_boundary_tokens(std::span<const int64_t> boundary_tokens,
                              const std::vector<SequenceSpan>& spans, int64_t multiple);

// Element-wise conversion (float ↔ double), keeping shape and cu_seqlens.
template <class To, class From>
Inputs<To> convert_inputs(const Inputs<From>& inputs) {
  Inputs<To> out;
  out.shape = inputs.shape;
  auto convert = [](const std::vector<From>& from) {
    return std::vector<To>(from.begin(), from.end());
  };
  out.q = convert(inputs.q);
  out.k = convert(inputs.k);
  out.v = convert(inputs.v);
  out.g = convert(inputs.g);
  out.beta = convert(inputs.beta);
  out.h0 = convert(inputs.h0);
  out.cu_seqlens = inputs.cu_seqlens;
  return out;
}

}  // namespace kda
