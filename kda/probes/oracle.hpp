// kda/probes/oracle.hpp — the oracle every kda kernel check is judged against: the KDA token
// recurrence of reference/kda.md written out in float64, one token at a time, sharing no code
// with kda's kernels (recurrent, chunk, cp, decode, replay).
//
// Why independent: an oracle that runs the code it judges (the fp64 chunked pass for the CP
// check, as it once was) makes a fault in that code cancel out — reference and oracle move
// together and the candidate's error looks like the reference's own. The token recurrence is
// the definition the chunked, context-parallel and decode forms are all derived from, so a fault
// in any of them shows against it.
// Thread-safety: pure functions; oracle_recurrence may start its own threads and joins them.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <span>
#include <thread>
#include <vector>

#include "kda/math/gates.hpp"
#include "kda/math/layout.hpp"

namespace kda::probes {

struct OracleOutputs {
  std::vector<double> o;                // (B, T, HV, V)
  std::vector<double> state;            // (B, HV, K, V), after the last token
  std::vector<double> boundary_states;  // (B, P, HV, K, V): before token boundary[p]
};

// How the raw inputs become the recurrence's q, k, g and β (the decode probes' raw forms).
struct OracleForms {
  math::GateForm gate = math::GateForm::kLogDecay;
  math::BetaForm beta = math::BetaForm::kGiven;
  bool l2norm = false;          // normalise q and k over K first (eps 1e-6)
  std::vector<double> a_log;    // (HV)
  std::vector<double> dt_bias;  // (HV, K)
};

// For each sequence b and value head hv (query/key head hv / (HV / H)):
//   S <- Diag(exp g_t) S;  S <- S + beta_t k_t (v_t - S^T k_t)^T;  o_t = S^T (scale q_t)
// with scale = K^-0.5. The inputs are float (what the check wrote); everything else is Real:
// double for the oracle, float for the plain fp32 recurrence that sets a check's rounding scale
// (its error against the double one is what fp32 arithmetic costs on these very inputs).
// The (b, hv) pairs are independent recurrences: with threads > 1 they are dealt to that many
// std::threads (one pair at a time, from a shared counter), each pair still computed by the same
// sequential loop, so the result is bit-identical whatever the thread count. Why threads here
// and not kda's thread pool: the oracle shares no code with the kernels it judges. At T = 65536,
// HV = 64 one thread needs minutes (2.7e11 double operations); the GPU checks pass the host's
// hardware threads.
template <class Real = double>
OracleOutputs oracle_recurrence(const Shape& shape, std::span<const float> q,
                                std::span<const float> k, std::span<const float> v,
                                std::span<const float> g, std::span<const float> beta,
                                const OracleForms& forms, std::span<const int64_t> boundaries = {},
                                int threads = 1) {
  const int64_t B = shape.batch, T = shape.tokens, H = shape.heads, HV = shape.value_heads;
  const int64_t K = shape.key_dim, V = shape.value_dim;
  const int64_t group = HV / H;
  const Real scale = Real{1} / std::sqrt(static_cast<Real>(K));
  const int64_t P = static_cast<int64_t>(boundaries.size());
  OracleOutputs out;
  out.o.assign(static_cast<size_t>(B * T * HV * V), 0.0);
  out.state.assign(static_cast<size_t>(B * HV * K * V), 0.0);
  out.boundary_states.assign(static_cast<size_t>(B * P * HV * K * V), 0.0);
  // One (b, hv) recurrence; writes only that pair's rows of o, state and boundary_states.
  auto run_pair = [&](int64_t b, int64_t hv) {
    std::vector<Real> state(static_cast<size_t>(K * V), Real{0}), q_t(K), k_t(K), decay(K),
        predicted(V), o_t(V);
    const int64_t h = hv / group;
    int64_t next_boundary = 0;
    for (int64_t t = 0; t <= T; ++t) {
      while (next_boundary < P && boundaries[next_boundary] == t) {
        std::copy(state.begin(), state.end(),
                  out.boundary_states.begin() + (((b * P + next_boundary) * HV + hv) * K * V));
        ++next_boundary;
      }
      if (t == T) break;
      const int64_t qk_row = ((b * T + t) * H + h) * K;
      const int64_t v_row = ((b * T + t) * HV + hv) * V;
      const int64_t g_row = ((b * T + t) * HV + hv) * K;
      for (int64_t d = 0; d < K; ++d) {
        q_t[d] = q[qk_row + d];
        k_t[d] = k[qk_row + d];
      }
      if (forms.l2norm) {
        math::l2_normalize(q_t.data(), K);
        math::l2_normalize(k_t.data(), K);
      }
      const Real beta_t = math::beta_value<Real>(forms.beta, beta[(b * T + t) * HV + hv]);
      for (int64_t d = 0; d < K; ++d) {
        const Real g_value = forms.gate == math::GateForm::kLogDecay
                                 ? static_cast<Real>(g[g_row + d])
                                 : math::log_decay<Real>(
                                       forms.gate, g[g_row + d], static_cast<Real>(forms.a_log[hv]),
                                       static_cast<Real>(forms.dt_bias[hv * K + d]));
        decay[d] = std::exp(g_value);
      }
      // Decay, then S^T k, row by row: the same products and the same order of sums as the
      // three loops of the definition, in one sweep over the state.
      std::fill(predicted.begin(), predicted.end(), Real{0});
      for (int64_t d = 0; d < K; ++d) {
        Real* row = state.data() + d * V;
        for (int64_t e = 0; e < V; ++e) {
          row[e] *= decay[d];
          predicted[e] += row[e] * k_t[d];
        }
      }
      // The delta-rule update, then o = S^T (scale q), again in one sweep.
      std::fill(o_t.begin(), o_t.end(), Real{0});
      for (int64_t d = 0; d < K; ++d) {
        Real* row = state.data() + d * V;
        const Real beta_k = beta_t * k_t[d];
        for (int64_t e = 0; e < V; ++e) {
          row[e] += beta_k * (static_cast<Real>(v[v_row + e]) - predicted[e]);
          o_t[e] += row[e] * scale * q_t[d];
        }
      }
      std::copy(o_t.begin(), o_t.end(), out.o.begin() + v_row);
    }
    std::copy(state.begin(), state.end(), out.state.begin() + (b * HV + hv) * K * V);
  };
  const int64_t pairs = B * HV;
  const int64_t workers = std::clamp<int64_t>(threads, 1, std::max<int64_t>(pairs, 1));
  if (workers == 1) {
    for (int64_t pair = 0; pair < pairs; ++pair) run_pair(pair / HV, pair % HV);
    return out;
  }
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t pair = next++; pair < pairs; pair = next++) run_pair(pair / HV, pair % HV);
  };
  std::vector<std::thread> pool;
  for (int64_t worker = 1; worker < workers; ++worker) pool.emplace_back(work);
  work();
  for (auto& thread : pool) thread.join();
  return out;
}

}  // namespace kda::probes
