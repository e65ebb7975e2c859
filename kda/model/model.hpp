// kda/model/model.hpp — a small KDA language model whose weights come from a seed.
//
//   token embedding → layers × [ RMSNorm → KDA attention → residual
//                                RMSNorm → MoE (top-k of E experts + one shared) → residual ]
//   → RMSNorm → LM head
// KDA attention: q, k, v projections, a causal depthwise convolution of width 4 with SiLU on each,
// the softplus gate g = −exp(A_log) · softplus(g_proj x + dt_bias), β = sigmoid(b_proj x), the KDA
// recurrence (chunk kernel in prefill, optional CP; decode kernel, tiled or merged, in decode),
// a per-head RMSNorm of the output times sigmoid(out_gate x), and the output projection.
// MoE runs as three explicit steps, the ones a disaggregated server schedules separately:
// moe_dispatch (route, then gather each expert's tokens), moe_experts (SwiGLU per expert and the
// shared expert), moe_combine (weighted scatter-add back, plus the residual).
// Thread-safety: a Model is immutable after construction; every method is const and may run on
// several threads at once (each call owns its buffers).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kda/kernels/cpu/decode.hpp"
#include "kda/math/precision.hpp"
#include "kda/model/linear.hpp"
#include "kda/model/state_cache.hpp"

namespace kda::model {

// How the weights are drawn. kIid: every weight i.i.d. normal with variance 1/in. kOutlierChannels:
// the same, then about one output channel (row) in 16 of the q, k, gate and router projections
// scaled by 10–100x, as trained models have (what per-channel weight scales exist for; i.i.d.
// weights cannot tell them from one scale per tensor). Only layers whose outputs do not write the
// residual stream: outliers there make activation outliers, which per-token int8 activations
// cannot hold whatever the weight scales (measured: hidden-state rms ratio 0.2-0.55 of fp32).
enum class WeightStructure { kIid, kOutlierChannels };

// "iid" | "outlier_channels"; throws loupe::Error(kUsage) naming the value otherwise.
WeightStructure parse_weight_structure(std::string_view name);

struct ModelConfig {
  int64_t vocab = 256;
  int64_t hidden = 128;  // D
  int64_t layers = 4;
  int64_t heads = 2;      // H = HV
  int64_t head_dim = 64;  // K = V
  int64_t experts = 4;    // E
  int64_t top_k = 2;
  int64_t expert_hidden = 128;  // F, of each expert and of the shared expert
  int64_t conv_width = 4;
  bool w8a8 = false;  // every projection and expert layer in W8A8
  uint64_t seed = 0;  // the weights' seed
  WeightStructure weights = WeightStructure::kIid;
  // Prefill through the CP kernel with this many shards (0: the chunk kernel).
  int cp_shards = 0;
  math::DotPrecision cp_precision = math::DotPrecision::kIeee;
  kernels::cpu::DecodeVariant decode_variant = kernels::cpu::DecodeVariant::kMerged;

  int64_t key_width() const { return heads * head_dim; }          // H·K
  int64_t conv_channels() const { return 3 * heads * head_dim; }  // q, k and v channels
  // Throws loupe::Error(kUsage) naming the field when a size is not positive or top_k > experts.
  void validate() const;
  std::string to_string() const;
};

// One rank's share of a tensor-parallel forward (kda/dist/tp_ranks.hpp): rank `rank` of `ranks`
// owns the heads [head_starts[rank], head_starts[rank + 1]) of every KDA layer (their q, k, v,
// gate, beta and output-gate channels, convolution, recurrence and norm) and the vocabulary rows
// [vocab_starts[rank], vocab_starts[rank + 1]) of the LM head. `gather` assembles a
// (rows, starts.back()) matrix on every rank from every rank's column block: given this rank's
// block (rows, starts[rank + 1] − starts[rank]) and every rank's column starts (ranks + 1), it
// writes the whole matrix to `full`. A collective: every rank calls it in the same order.
struct TensorParallel {
  int rank = 0;
  int ranks = 1;
  std::function<void(const float* block, int64_t rows, std::span<const int64_t> starts,
                     float* full)>
      gather;
};

// Contiguous near-equal shares of `count` items over `ranks`, in whole `granule`s of items (the
// last share ends at `count`) when every rank still gets one, else in single items: ranks + 1
// starts. Throws loupe::Error(kUsage) naming `what` when count < ranks.
std::vector<int64_t> tensor_parallel_starts(int64_t count, int ranks, const char* what,
                                            int64_t granule = 1);
// The LM head's vocabulary shares are cut at multiples of this many rows (as engines pad the
// vocabulary to a multiple of 64 or 128 per rank): each rank's slice then starts where the BLAS
// starts a block of the whole matrix, and every logit is summed as in the one-process head.
inline constexpr int64_t kVocabGranule = 64;

// The MoE state of one layer for a batch of token rows, between the three steps.
struct MoeBatch {
  int64_t rows = 0;
  std::vector<float> normed;                    // (rows, D) the RMSNorm'd input
  std::vector<int32_t> expert_of;               // (rows, top_k)
  std::vector<float> weight_of;                 // (rows, top_k) renormalised router weights
  std::vector<std::vector<int64_t>> slot_rows;  // per expert: the (row · top_k + slot) it holds
  std::vector<std::vector<float>> expert_in;    // per expert: (tokens, D) gathered rows
  std::vector<std::vector<float>> expert_out;   // per expert: (tokens, D)
  std::vector<float> shared_out;                // (rows, D)
  // Tokens each expert received: what the dispatch waits to see on the remote counter.
  int64_t received_tokens() const;
};

class Model {
 public:
  explicit Model(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }

  // hidden (tokens.size(), D) = embedding rows. Throws loupe::Error(kInput) naming the position
  // of a token outside [0, vocab).
  std::vector<float> embed(std::span<const int32_t> tokens) const;

  // Attention of `layer` for `requests` sequences of `tokens` tokens each, in place on the
  // residual stream hidden (requests · tokens, D), starting from zero states; writes each
  // request's state after its last token into states[request].
  void attention_prefill(int64_t layer, int64_t requests, int64_t tokens, float* hidden,
                         std::vector<LayerState>& states) const;
  // One decode token for states.size() sequences: hidden (N, D) in place, states advanced.
  void attention_decode(int64_t layer, float* hidden, std::vector<LayerState*>& states) const;

  MoeBatch moe_dispatch(int64_t layer, const float* hidden, int64_t rows) const;
  void moe_experts(int64_t layer, MoeBatch& batch) const;
  void moe_combine(const MoeBatch& batch, float* hidden) const;  // hidden += MoE output

  // logits (rows, vocab) of hidden rows (rows, D).
  std::vector<float> logits(const float* hidden, int64_t rows) const;

  // The whole model in one worker (no server): prefill of `requests` prompts of equal length
  // (prompts (requests, tokens)), storing every layer's state into `cache` and returning the
  // logits of each prompt's last token (requests, vocab). `hidden_per_layer`, when not null,
  // receives the residual stream after every layer (layers, requests · tokens, D).
  std::vector<float> prefill(std::span<const int32_t> prompts, int64_t requests, int64_t tokens,
                             StateCache& cache,
                             std::vector<float>* hidden_per_layer = nullptr) const;
  // prefill()'s logits and residual streams with the heads of every layer and the LM head's
  // vocabulary split over the ranks of `tp` (tensor parallelism): each rank projects, convolves,
  // runs the recurrence and normalises its heads only; `tp.gather` assembles the gated attention
  // output (rows, H·K) before the output projection and the logits (rows, vocab) after the LM
  // head. The output projection, the MoE and the norms run whole on every rank. Each element is
  // computed by the same arithmetic as in prefill(), so the result equals prefill()'s bit for bit
  // wherever the BLAS sums a dot product the same way in a narrower matrix, and within fp32
  // rounding where its tail kernels do not (tests/unit/kda/tp_ranks_test.cpp, probe
  // tp_ranks_vs_notp). The per-layer states stay with the ranks' heads and are not returned.
  std::vector<float> prefill_tensor_parallel(std::span<const int32_t> prompts, int64_t requests,
                                             int64_t tokens, const TensorParallel& tp,
                                             std::vector<float>* hidden_per_layer = nullptr) const;
  // One decode step for the given requests from their cached states (advanced in the cache).
  // Returns logits (requests.size(), vocab).
  std::vector<float> decode_step(std::span<const int32_t> tokens, std::span<const int64_t> requests,
                                 StateCache& cache) const;

 private:
  struct Expert {
    Linear gate, up, down;
  };
  struct Layer {
    std::vector<float> attn_norm, ffn_norm, out_norm;  // (D), (D), (V)
    Linear q_proj, k_proj, v_proj, g_proj, b_proj, out_gate, o_proj;
    std::vector<float> conv_weight;  // (conv_channels, conv_width)
    std::vector<float> a_log;        // (H)
    std::vector<float> dt_bias;      // (H, K)
    Linear router;
    std::vector<Expert> experts;
    Expert shared;
  };
  // Projections and convolution shared by prefill and decode: q, k, v (after conv + SiLU), the
  // raw gate and the raw beta for `rows` rows of normed input, per sequence of `tokens` rows,
  // continuing from (and updating) each sequence's conv history.
  // The heads [head_begin, head_end) only (all of them outside tensor parallelism): q, k, v,
  // g_raw (rows, heads·K), b_raw (rows, heads), conv history (history, 3·heads·K).
  void project(const Layer& layer, const float* normed, int64_t sequences, int64_t tokens,
               std::vector<float*>& conv_history, std::vector<float>& q, std::vector<float>& k,
               std::vector<float>& v, std::vector<float>& g_raw, std::vector<float>& b_raw,
               int64_t head_begin, int64_t head_end) const;
  // o (rows, heads, V) of the heads [head_begin, head_end): norm and output gate, then (with
  // `tp`) the gather of every rank's heads, the output projection and the residual.
  void finish_attention(const Layer& layer, const float* normed, const float* o, int64_t rows,
                        float* hidden, int64_t head_begin, int64_t head_end,
                        const TensorParallel* tp) const;
  void attention_prefill_heads(int64_t layer, int64_t requests, int64_t tokens, float* hidden,
                               std::vector<LayerState>& states, const TensorParallel* tp) const;
  std::vector<float> prefill_layers(std::span<const int32_t> prompts, int64_t requests,
                                    int64_t tokens, StateCache* cache, const TensorParallel* tp,
                                    std::vector<float>* hidden_per_layer) const;
  void run_expert(const Expert& expert, const float* x, int64_t rows, float* y) const;

  ModelConfig config_;
  std::vector<float> embedding_;  // (vocab, D)
  std::vector<float> final_norm_;
  Linear lm_head_;
  std::vector<Layer> layers_;
};

// RMSNorm of each row: x / sqrt(mean(x²) + 1e-6) · weight.
void rms_norm(const float* x, int64_t rows, int64_t width, const float* weight, float* out);

// Index of the largest logit per row (the first on ties): greedy decoding.
std::vector<int32_t> argmax_rows(std::span<const float> logits, int64_t vocab);

// Seeded prompts (requests, tokens) of token ids in [0, vocab).
std::vector<int32_t> generate_prompts(int64_t requests, int64_t tokens, int64_t vocab,
                                      uint64_t seed);

// Colocated generation: prefill, then new_tokens − 1 decode steps, greedy. logits
// (requests, new_tokens, vocab): row 0 from the prefill's last token, row i from decode step i;
// tokens (requests, new_tokens) their argmax.
struct Generation {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
};
Generation generate(const Model& model, std::span<const int32_t> prompts, int64_t requests,
                    int64_t tokens, int64_t new_tokens, CacheDType cache_dtype);

// Decode only, from states already in `cache` (the disaggregated server's decode worker uses it):
// continues from first_logits (requests, vocab) for new_tokens − 1 steps.
Generation decode_from_cache(const Model& model, std::span<const float> first_logits,
                             int64_t requests, int64_t new_tokens, StateCache& cache);

}  // namespace kda::model
