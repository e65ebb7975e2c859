// kda/kernels/cpu/token_step.hpp — one token of the KDA recurrence on a K × V state (or a slice
// of its columns), the step every CPU kernel but chunk is built from:
//   S ← Diag(α) S;  v̂ = Sᵀ k;  S ← S + k (β (v − v̂))ᵀ;  o = Sᵀ q
// Two passes over the state, each fused (decay with v̂, update with o), in column blocks of up to
// four vectors whose accumulators stay in registers: the step is bound by the bandwidth
// of the cache level that holds the state.
// Thread-safety: touches only its arguments.
#pragma once

#include <cstdint>
#include <cstring>

// The vectors below never cross a non-inlined call, so the ABI note GCC gives for wide vectors
// on targets without them does not apply.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kda::kernels::cpu {
namespace token_step_detail {

// GCC/Clang vector extension as wide as the target's registers (64 bytes with AVX-512, 32 with
// AVX, 16 otherwise): wider generic vectors than the hardware has are lowered poorly.
#if defined(__AVX512F__)
inline constexpr int kVectorBytes = 64;
#elif defined(__AVX__)
inline constexpr int kVectorBytes = 32;
#else
inline constexpr int kVectorBytes = 16;
#endif

template <class Real>
struct Vector {
  typedef Real Type __attribute__((vector_size(kVectorBytes)));
  static constexpr int64_t kLanes = kVectorBytes / sizeof(Real);
};

template <class Real>
inline typename Vector<Real>::Type load(const Real* source) {
  typename Vector<Real>::Type value;
  std::memcpy(&value, source, sizeof(value));
  return value;
}

template <class Real>
inline void store(Real* target, const typename Vector<Real>::Type& value) {
  std::memcpy(target, &value, sizeof(value));
}

// Pass 1 over `kVectors` vectors of columns from col0: decay the rows, accumulate v̂ = Sᵀ k,
// write δ = β (v − v̂).
template <class Real, int kVectors>
inline void decay_and_project(Real* state, int64_t key_dim, int64_t ld, int64_t col0,
                              const Real* alpha, const Real* k, const Real* v, Real beta,
                              Real* delta) {
  using Vec = typename Vector<Real>::Type;
  constexpr int64_t kLanes = Vector<Real>::kLanes;
  Vec acc[kVectors] = {};
  for (int64_t row = 0; row < key_dim; ++row) {
    Real* state_row = state + row * ld + col0;
    const Real decay = alpha[row], key = k[row];
    for (int vec = 0; vec < kVectors; ++vec) {
      Vec values = load(state_row + vec * kLanes) * decay;
      store(state_row + vec * kLanes, values);
      acc[vec] += key * values;
    }
  }
  for (int vec = 0; vec < kVectors; ++vec) {
    store(delta + col0 + vec * kLanes, beta * (load(v + col0 + vec * kLanes) - acc[vec]));
  }
}

// Pass 2: S ← S + k δᵀ and o = Sᵀ q over the same columns.
template <class Real, int kVectors>
inline void update_and_read(Real* state, int64_t key_dim, int64_t ld, int64_t col0, const Real* k,
                            const Real* q, const Real* delta, Real* o) {
  using Vec = typename Vector<Real>::Type;
  constexpr int64_t kLanes = Vector<Real>::kLanes;
  Vec acc[kVectors] = {};
  Vec delta_block[kVectors];
  for (int vec = 0; vec < kVectors; ++vec) delta_block[vec] = load(delta + col0 + vec * kLanes);
  for (int64_t row = 0; row < key_dim; ++row) {
    Real* state_row = state + row * ld + col0;
    const Real key = k[row], query = q[row];
    for (int vec = 0; vec < kVectors; ++vec) {
      Vec values = load(state_row + vec * kLanes) + key * delta_block[vec];
      store(state_row + vec * kLanes, values);
      acc[vec] += query * values;
    }
  }
  for (int vec = 0; vec < kVectors; ++vec) store(o + col0 + vec * kLanes, acc[vec]);
}

// One sweep that finishes token t and starts token t + 1 on the same rows:
//   S ← S + k_t δ_tᵀ;  o_t = Sᵀ q_t;  S ← Diag(α_{t+1}) S;  v̂_{t+1} = Sᵀ k_{t+1}
// so the recurrence reads and writes the state once per token instead of twice.
// With `next_k` null the sweep only finishes token t.
template <class Real, int kVectors>
inline void finish_and_start(Real* state, int64_t key_dim, int64_t ld, int64_t col0, const Real* k,
                             const Real* q, const Real* delta, Real* o, const Real* next_alpha,
                             const Real* next_k, Real* next_projection) {
  using Vec = typename Vector<Real>::Type;
  constexpr int64_t kLanes = Vector<Real>::kLanes;
  Vec out[kVectors] = {}, projection[kVectors] = {};
  Vec delta_block[kVectors];
  for (int vec = 0; vec < kVectors; ++vec) delta_block[vec] = load(delta + col0 + vec * kLanes);
  for (int64_t row = 0; row < key_dim; ++row) {
    Real* state_row = state + row * ld + col0;
    const Real key = k[row], query = q[row];
    const Real decay = next_k ? next_alpha[row] : Real(1),
               next_key = next_k ? next_k[row] : Real(0);
    for (int vec = 0; vec < kVectors; ++vec) {
      Vec values = load(state_row + vec * kLanes) + key * delta_block[vec];
      out[vec] += query * values;
      values *= decay;
      projection[vec] += next_key * values;
      store(state_row + vec * kLanes, values);
    }
  }
  for (int vec = 0; vec < kVectors; ++vec) {
    store(o + col0 + vec * kLanes, out[vec]);
    if (next_k) store(next_projection + col0 + vec * kLanes, projection[vec]);
  }
}

}  // namespace token_step_detail

// REQUIRES: state holds K rows of `columns` values with row stride `ld`; alpha, k, q have K
// values (q already scaled), v and o have `columns` values; `delta` is scratch of `columns`.
template <class Real>
inline void token_step(Real* state, int64_t key_dim, int64_t columns, int64_t ld, const Real* alpha,
                       const Real* k, const Real* q, const Real* v, Real beta, Real* delta,
                       Real* o) {
  using namespace token_step_detail;
  constexpr int64_t kLanes = Vector<Real>::kLanes;
  int64_t col0 = 0;
  for (; col0 + 4 * kLanes <= columns; col0 += 4 * kLanes) {
    decay_and_project<Real, 4>(state, key_dim, ld, col0, alpha, k, v, beta, delta);
    update_and_read<Real, 4>(state, key_dim, ld, col0, k, q, delta, o);
  }
  for (; col0 + kLanes <= columns; col0 += kLanes) {
    decay_and_project<Real, 1>(state, key_dim, ld, col0, alpha, k, v, beta, delta);
    update_and_read<Real, 1>(state, key_dim, ld, col0, k, q, delta, o);
  }
  if (col0 == columns) return;
  // Fewer columns than one vector remain.
  for (int64_t col = col0; col < columns; ++col) delta[col] = 0;
  for (int64_t row = 0; row < key_dim; ++row) {
    Real* state_row = state + row * ld;
    for (int64_t col = col0; col < columns; ++col) {
      state_row[col] *= alpha[row];
      delta[col] += k[row] * state_row[col];
    }
  }
  for (int64_t col = col0; col < columns; ++col) delta[col] = beta * (v[col] - delta[col]);
  for (int64_t col = col0; col < columns; ++col) o[col] = 0;
  for (int64_t row = 0; row < key_dim; ++row) {
    Real* state_row = state + row * ld;
    for (int64_t col = col0; col < columns; ++col) {
      state_row[col] += k[row] * delta[col];
      o[col] += q[row] * state_row[col];
    }
  }
}

}  // namespace kda::kernels::cpu

namespace kda::kernels::cpu {

// The token recurrence over a sequence with one state sweep per token (finish_and_start above).
// `at` gives per-token pointers: alpha(t), k(t), q(t) (scaled) to K values, v(t) and o(t) to V
// values, and beta(t). Each is called once per token; a pointer from alpha(t) or q(t) must stay
// valid until the next call of the same accessor after that (two-slot buffers suffice). Columns
// must be a multiple of the vector width (Vector<Real>::kLanes); other widths use token_step.
// REQUIRES: state is K × columns with row stride `ld`; delta and projection hold `columns`.
template <class Real, class Accessors>
inline void sweep_tokens(Real* state, int64_t key_dim, int64_t columns, int64_t ld, int64_t tokens,
                         const Accessors& at, Real* delta, Real* projection) {
  using namespace token_step_detail;
  constexpr int64_t kLanes = Vector<Real>::kLanes;
  if (tokens == 0) return;
  // Start token 0: decay by α_0 and project onto k_0.
  const Real* first_alpha = at.alpha(0);
  const Real* first_k = at.k(0);
  const Real* first_v = at.v(0);
  const Real first_beta = at.beta(0);
  for (int64_t col0 = 0; col0 < columns;) {
    if (col0 + 4 * kLanes <= columns) {
      decay_and_project<Real, 4>(state, key_dim, ld, col0, first_alpha, first_k, first_v,
                                 first_beta, delta);
      col0 += 4 * kLanes;
    } else {
      decay_and_project<Real, 1>(state, key_dim, ld, col0, first_alpha, first_k, first_v,
                                 first_beta, delta);
      col0 += kLanes;
    }
  }
  const Real* k_now = first_k;
  for (int64_t token = 0; token < tokens; ++token) {
    const bool has_next = token + 1 < tokens;
    const Real* q_now = at.q(token);
    Real* o_now = at.o(token);
    const Real* next_alpha = has_next ? at.alpha(token + 1) : nullptr;
    const Real* next_k = has_next ? at.k(token + 1) : nullptr;
    for (int64_t col0 = 0; col0 < columns;) {
      if (col0 + 4 * kLanes <= columns) {
        finish_and_start<Real, 4>(state, key_dim, ld, col0, k_now, q_now, delta, o_now, next_alpha,
                                  next_k, projection);
        col0 += 4 * kLanes;
      } else {
        finish_and_start<Real, 1>(state, key_dim, ld, col0, k_now, q_now, delta, o_now, next_alpha,
                                  next_k, projection);
        col0 += kLanes;
      }
    }
    if (has_next) {
      const Real beta = at.beta(token + 1);
      const Real* v = at.v(token + 1);
      for (int64_t col = 0; col < columns; ++col) delta[col] = beta * (v[col] - projection[col]);
      k_now = next_k;
    }
  }
}

}  // namespace kda::kernels::cpu

#pragma GCC diagnostic pop
