// kda/probes/oracle.hpp — the oracle every kda kernel check is judged against: the KDA token
// recurrence of reference/kda.md written out in float64, one token at a time, sharing no code
// with kda's kernels (recurrent, chunk, cp, decode, replay).
//
// Why independent: an oracle that runs the code it judges (the fp64 chunked pass for the CP
// check, as it once was) makes a fault in that code cancel out — reference and oracle move
// together and the candidate's error looks like the reference's own. The token recurrence is
// the definition the chunked, context-parallel and decode forms are all derived from, so a fault
// in any of them shows against it.
// Thread-safety: pure functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
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
// with scale = K^-0.5. The inputs are float (what the check wrote); everything else is double.
inline OracleOutputs oracle_recurrence(const Shape& shape, std::span<const float> q,
                                       std::span<const float> k, std::span<const float> v,
                                       std::span<const float> g, std::span<const float> beta,
                                       const OracleForms& forms,
                                       std::span<const int64_t> boundaries = {}) {
  const int64_t B = shape.batch, T = shape.tokens, H = shape.heads, HV = shape.value_heads;
  const int64_t K = shape.key_dim, V = shape.value_dim;
  const int64_t group = HV / H;
  const double scale = 1.0 / std::sqrt(static_cast<double>(K));
  const int64_t P = static_cast<int64_t>(boundaries.size());
  OracleOutputs out;
  out.o.assign(static_cast<size_t>(B * T * HV * V), 0.0);
  out.state.assign(static_cast<size_t>(B * HV * K * V), 0.0);
  out.boundary_states.assign(static_cast<size_t>(B * P * HV * K * V), 0.0);
  std::vector<double> state(static_cast<size_t>(K * V)), q_t(K), k_t(K), predicted(V);
  std::vector<double> error(V), output(V);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t hv = 0; hv < HV; ++hv) {
      const int64_t h = hv / group;
      std::fill(state.begin(), state.end(), 0.0);
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
        const double beta_t = math::beta_value<double>(forms.beta, beta[(b * T + t) * HV + hv]);
        // Two sweeps over the state's rows instead of four: the decay with the prediction
        // S^T k, then the update with the output S^T (scale q). Each sum still runs over d in
        // ascending order with the same expression, so the values are those of the four-sweep
        // form, bit for bit; the rows are read contiguously (the output's column sums used to
        // stride by V), which made this oracle the longest serial step of the CP checks.
        std::fill(predicted.begin(), predicted.end(), 0.0);
        for (int64_t d = 0; d < K; ++d) {
          const double g_value =
              forms.gate == math::GateForm::kLogDecay
                  ? static_cast<double>(g[g_row + d])
                  : math::log_decay<double>(forms.gate, g[g_row + d], forms.a_log[hv],
                                            forms.dt_bias[hv * K + d]);
          const double decay = std::exp(g_value);
          double* state_row = state.data() + d * V;
          const double k_d = k_t[d];
          for (int64_t e = 0; e < V; ++e) {
            state_row[e] *= decay;
            predicted[e] += state_row[e] * k_d;
          }
        }
        for (int64_t e = 0; e < V; ++e) {
          error[e] = static_cast<double>(v[v_row + e]) - predicted[e];
          output[e] = 0;
        }
        for (int64_t d = 0; d < K; ++d) {
          double* state_row = state.data() + d * V;
          const double beta_k = beta_t * k_t[d];
          const double q_d = q_t[d];
          for (int64_t e = 0; e < V; ++e) {
            state_row[e] += beta_k * error[e];
            output[e] += state_row[e] * scale * q_d;
          }
        }
        std::copy(output.begin(), output.end(), out.o.begin() + v_row);
      }
      std::copy(state.begin(), state.end(), out.state.begin() + (b * HV + hv) * K * V);
    }
  }
  return out;
}

}  // namespace kda::probes
