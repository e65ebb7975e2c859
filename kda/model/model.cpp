#include "kda/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "kda/faults.hpp"
#include "kda/kernels/cpu/chunk.hpp"
#include "kda/kernels/cpu/cp.hpp"
#include "kda/math/blas.hpp"
#include "kda/math/gates.hpp"
#include "kda/math/generator.hpp"
#include "loupe/error.hpp"
#include "loupe/trace.hpp"

namespace kda::model {

namespace {

constexpr float kRmsEps = 1e-6f;

std::vector<float> normal_values(math::NormalStream& stream, int64_t count, double stddev,
                                 double mean = 0.0) {
  std::vector<float> values(static_cast<size_t>(count));
  for (float& value : values) value = static_cast<float>(mean + stddev * stream.normal());
  return values;
}

Linear make_linear(math::NormalStream& stream, int64_t out, int64_t in, bool w8a8,
                   WeightStructure structure) {
  std::vector<float> weight = normal_values(stream, out * in, 1.0 / std::sqrt(double(in)));
  if (structure == WeightStructure::kOutlierChannels) {
    bool any = false;
    for (int64_t row = 0; row < out; ++row) {
      const bool outlier = stream.uniform() < 1.0 / 16.0;
      const double scale = std::pow(10.0, 1.0 + stream.uniform());  // 10-100x
      if (!outlier && (any || row + 1 < out)) continue;
      any = true;
      for (int64_t column = 0; column < in; ++column) {
        weight[row * in + column] = static_cast<float>(weight[row * in + column] * scale);
      }
    }
  }
  return Linear(out, in, std::move(weight), w8a8);
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

void require_positive(int64_t value, const char* field) {
  if (value <= 0) {
    throw loupe::Error(
        loupe::ErrorCode::kUsage,
        std::string("kda model: ") + field + " must be positive, got " + std::to_string(value));
  }
}

}  // namespace

WeightStructure parse_weight_structure(std::string_view name) {
  if (name == "iid") return WeightStructure::kIid;
  if (name == "outlier_channels") return WeightStructure::kOutlierChannels;
  throw loupe::Error(loupe::ErrorCode::kUsage, "kda model: weights = '" + std::string(name) +
                                                   "': expected iid or outlier_channels");
}

void ModelConfig::validate() const {
  require_positive(vocab, "vocab");
  require_positive(hidden, "hidden");
  require_positive(layers, "layers");
  require_positive(heads, "heads");
  require_positive(head_dim, "head_dim");
  require_positive(experts, "experts");
  require_positive(top_k, "top_k");
  require_positive(expert_hidden, "expert_hidden");
  require_positive(conv_width, "conv_width");
  if (top_k > experts) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda model: top_k = " + std::to_string(top_k) +
                           " exceeds experts = " + std::to_string(experts));
  }
  if (cp_shards < 0) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda model: cp_shards must be 0 (chunk kernel) or positive, got " +
                           std::to_string(cp_shards));
  }
}

std::string ModelConfig::to_string() const {
  std::ostringstream out;
  out << "vocab=" << vocab << ",D=" << hidden << ",layers=" << layers << ",H=" << heads
      << ",K=V=" << head_dim << ",E=" << experts << ",top_k=" << top_k << ",F=" << expert_hidden
      << (w8a8 ? ",w8a8" : ",fp32");
  return out.str();
}

int64_t MoeBatch::received_tokens() const {
  int64_t total = 0;
  for (const auto& rows_of_expert : slot_rows) total += static_cast<int64_t>(rows_of_expert.size());
  return total;
}

void rms_norm(const float* x, int64_t rows, int64_t width, const float* weight, float* out) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* in_row = x + row * width;
    float sum_sq = 0.0f;
    for (int64_t col = 0; col < width; ++col) sum_sq += in_row[col] * in_row[col];
    const float inverse = 1.0f / std::sqrt(sum_sq / static_cast<float>(width) + kRmsEps);
    for (int64_t col = 0; col < width; ++col) {
      out[row * width + col] = in_row[col] * inverse * weight[col];
    }
  }
}

std::vector<int32_t> argmax_rows(std::span<const float> logits, int64_t vocab) {
  std::vector<int32_t> tokens(logits.size() / static_cast<size_t>(vocab));
  for (size_t row = 0; row < tokens.size(); ++row) {
    const float* begin = logits.data() + row * vocab;
    tokens[row] = static_cast<int32_t>(std::max_element(begin, begin + vocab) - begin);
  }
  return tokens;
}

std::vector<int64_t> tensor_parallel_starts(int64_t count, int ranks, const char* what,
                                            int64_t granule) {
  if (ranks < 1 || count < ranks) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda model: " + std::to_string(count) + " " + what +
                           " cannot be split over " + std::to_string(ranks) +
                           " tensor-parallel ranks",
                       std::string("every rank needs at least one: use at most ") +
                           std::to_string(count) + " ranks, or more " + what);
  }
  // Whole granules while every rank still gets one, single items otherwise.
  if (count < granule * ranks) granule = 1;
  const int64_t units = (count + granule - 1) / granule;
  std::vector<int64_t> starts(static_cast<size_t>(ranks) + 1, 0);
  for (int rank = 0; rank < ranks; ++rank) {
    const int64_t share = units / ranks + (rank < units % ranks ? 1 : 0);
    starts[rank + 1] = std::min(count, starts[rank] + share * granule);
  }
  return starts;
}

std::vector<int32_t> generate_prompts(int64_t requests, int64_t tokens, int64_t vocab,
                                      uint64_t seed) {
  math::NormalStream stream(seed ^ 0x70726f6d70747300ull);
  std::vector<int32_t> prompts(static_cast<size_t>(requests * tokens));
  for (int32_t& token : prompts) {
    token = static_cast<int32_t>(std::min<int64_t>(vocab - 1, int64_t(stream.uniform() * vocab)));
  }
  return prompts;
}

Model::Model(const ModelConfig& config) : config_(config) {
  config_.validate();
  math::use_single_threaded_blas();
  math::NormalStream stream(config.seed);
  const int64_t d = config.hidden, kw = config.key_width(), f = config.expert_hidden;
  embedding_ = normal_values(stream, config.vocab * d, 1.0);
  final_norm_.assign(d, 1.0f);
  lm_head_ = make_linear(stream, config.vocab, d, config.w8a8, WeightStructure::kIid);
  layers_.resize(config.layers);
  for (Layer& layer : layers_) {
    layer.attn_norm.assign(d, 1.0f);
    layer.ffn_norm.assign(d, 1.0f);
    layer.out_norm.assign(config.head_dim, 1.0f);
    layer.q_proj = make_linear(stream, kw, d, config.w8a8, config.weights);
    layer.k_proj = make_linear(stream, kw, d, config.w8a8, config.weights);
    layer.v_proj = make_linear(stream, kw, d, config.w8a8, WeightStructure::kIid);
    layer.g_proj = make_linear(stream, kw, d, config.w8a8, config.weights);
    layer.b_proj = make_linear(stream, config.heads, d, config.w8a8, WeightStructure::kIid);
    layer.out_gate = make_linear(stream, kw, d, config.w8a8, WeightStructure::kIid);
    layer.o_proj = make_linear(stream, d, kw, config.w8a8, WeightStructure::kIid);
    // A near-identity convolution (the newest tap ≈ 1) keeps the token's own projection dominant.
    layer.conv_weight = normal_values(stream, config.conv_channels() * config.conv_width, 0.2);
    for (int64_t channel = 0; channel < config.conv_channels(); ++channel) {
      layer.conv_weight[channel * config.conv_width + config.conv_width - 1] += 1.0f;
    }
    // Slow gates (softplus of ≈ −3): the state remembers over tens of tokens, so a lost or
    // misdelivered state changes what decode produces.
    layer.a_log.resize(config.heads);
    for (float& value : layer.a_log) value = static_cast<float>(-1.0 + 1.5 * stream.uniform());
    layer.dt_bias = normal_values(stream, kw, 0.5, -3.0);
    layer.router = make_linear(stream, config.experts, d, config.w8a8, config.weights);
    for (int64_t expert = 0; expert < config.experts; ++expert) {
      layer.experts.push_back({make_linear(stream, f, d, config.w8a8, WeightStructure::kIid),
                               make_linear(stream, f, d, config.w8a8, WeightStructure::kIid),
                               make_linear(stream, d, f, config.w8a8, WeightStructure::kIid)});
    }
    layer.shared = {make_linear(stream, f, d, config.w8a8, WeightStructure::kIid),
                    make_linear(stream, f, d, config.w8a8, WeightStructure::kIid),
                    make_linear(stream, d, f, config.w8a8, WeightStructure::kIid)};
  }
}

std::vector<float> Model::embed(std::span<const int32_t> tokens) const {
  const int64_t d = config_.hidden;
  std::vector<float> hidden(tokens.size() * d);
  for (size_t position = 0; position < tokens.size(); ++position) {
    const int32_t token = tokens[position];
    if (token < 0 || token >= config_.vocab) {
      throw loupe::Error(loupe::ErrorCode::kInput, "kda model: token " + std::to_string(token) +
                                                       " at position " + std::to_string(position) +
                                                       " is outside the vocabulary [0, " +
                                                       std::to_string(config_.vocab) + ")");
    }
    std::copy_n(embedding_.data() + token * d, d, hidden.data() + position * d);
  }
  return hidden;
}

void Model::project(const Layer& layer, const float* normed, int64_t sequences, int64_t tokens,
                    std::vector<float*>& conv_history, std::vector<float>& q, std::vector<float>& k,
                    std::vector<float>& v, std::vector<float>& g_raw, std::vector<float>& b_raw,
                    int64_t head_begin, int64_t head_end) const {
  const int64_t rows = sequences * tokens, key_dim = config_.head_dim;
  const int64_t kw = config_.key_width();                      // H·K, the whole layer's width
  const int64_t local_kw = (head_end - head_begin) * key_dim;  // these heads' width
  const int64_t channel_begin = head_begin * key_dim;
  const int64_t channels = 3 * local_kw, width = config_.conv_width;
  std::vector<float> raw(rows * channels);  // (rows, [q | k | v]) of these heads
  {
    std::vector<float> part(rows * local_kw);
    const Linear* projections[3] = {&layer.q_proj, &layer.k_proj, &layer.v_proj};
    for (int part_idx = 0; part_idx < 3; ++part_idx) {
      projections[part_idx]->forward_rows(normed, rows, channel_begin, channel_begin + local_kw,
                                          part.data());
      for (int64_t row = 0; row < rows; ++row) {
        std::copy_n(part.data() + row * local_kw, local_kw,
                    raw.data() + row * channels + part_idx * local_kw);
      }
    }
  }
  q.resize(rows * local_kw);
  k.resize(rows * local_kw);
  v.resize(rows * local_kw);
  const int64_t history = width - 1;
  for (int64_t seq = 0; seq < sequences; ++seq) {
    float* past = conv_history[seq];  // (history, channels), oldest first
    for (int64_t token = 0; token < tokens; ++token) {
      const int64_t row = seq * tokens + token;
      for (int64_t channel = 0; channel < channels; ++channel) {
        const int64_t part_idx = channel / local_kw, column = channel % local_kw;
        // The layer's convolution channel: q, k, v blocks of H·K, these heads at channel_begin.
        const float* weight =
            layer.conv_weight.data() + (part_idx * kw + channel_begin + column) * width;
        float sum = 0.0f;
        for (int64_t tap = 0; tap < width; ++tap) {
          const int64_t source = token - history + tap;  // token index of this tap
          const float input = source >= 0 ? raw[(seq * tokens + source) * channels + channel]
                                          : past[(history + source) * channels + channel];
          sum += weight[tap] * input;
        }
        const float activated = silu(sum);
        std::vector<float>& target = part_idx == 0 ? q : (part_idx == 1 ? k : v);
        target[row * local_kw + column] = activated;
      }
    }
    // The new history: the last `history` raw inputs, reaching into the old one for short inputs.
    // Planted fault conv_history_stale: the old history's slot read one earlier than its token, so
    // a short input (a decode step) keeps the oldest tap instead of advancing it.
    const int64_t stale = fault("conv_history_stale") ? 1 : 0;
    std::vector<float> next(history * channels);
    for (int64_t slot = 0; slot < history; ++slot) {
      const int64_t source = tokens - history + slot;
      for (int64_t channel = 0; channel < channels; ++channel) {
        next[slot * channels + channel] =
            source >= 0 ? raw[(seq * tokens + source) * channels + channel]
                        : past[(history + source - stale) * channels + channel];
      }
    }
    std::copy(next.begin(), next.end(), past);
  }
  g_raw.resize(rows * local_kw);
  layer.g_proj.forward_rows(normed, rows, channel_begin, channel_begin + local_kw, g_raw.data());
  b_raw.resize(rows * (head_end - head_begin));
  layer.b_proj.forward_rows(normed, rows, head_begin, head_end, b_raw.data());
}

void Model::finish_attention(const Layer& layer, const float* normed, const float* o, int64_t rows,
                             float* hidden, int64_t head_begin, int64_t head_end,
                             const TensorParallel* tp) const {
  const int64_t v_dim = config_.head_dim, d = config_.hidden, kw = config_.key_width();
  const int64_t local_kw = (head_end - head_begin) * v_dim, channel_begin = head_begin * v_dim;
  std::vector<float> gated(rows * local_kw), gate(rows * local_kw);
  rms_norm(o, rows * (head_end - head_begin), v_dim, layer.out_norm.data(), gated.data());
  layer.out_gate.forward_rows(normed, rows, channel_begin, channel_begin + local_kw, gate.data());
  for (size_t idx = 0; idx < gated.size(); ++idx) gated[idx] *= math::sigmoid(gate[idx]);
  if (tp != nullptr) {
    // Every rank's heads side by side: the output projection mixes all of them.
    std::vector<int64_t> starts = tensor_parallel_starts(config_.heads, tp->ranks, "heads");
    for (int64_t& start : starts) start *= v_dim;
    std::vector<float> all_heads(rows * kw);
    tp->gather(gated.data(), rows, starts, all_heads.data());
    gated = std::move(all_heads);
  }
  std::vector<float> projected(rows * d);
  layer.o_proj.forward(gated.data(), rows, projected.data());
  for (size_t idx = 0; idx < projected.size(); ++idx) hidden[idx] += projected[idx];
}

void Model::attention_prefill(int64_t layer_idx, int64_t requests, int64_t tokens, float* hidden,
                              std::vector<LayerState>& states) const {
  attention_prefill_heads(layer_idx, requests, tokens, hidden, states, nullptr);
}

void Model::attention_prefill_heads(int64_t layer_idx, int64_t requests, int64_t tokens,
                                    float* hidden, std::vector<LayerState>& states,
                                    const TensorParallel* tp) const {
  const Layer& layer = layers_.at(layer_idx);
  const int64_t rows = requests * tokens, d = config_.hidden, key_dim = config_.head_dim;
  int64_t head_begin = 0, head_end = config_.heads;
  if (tp != nullptr) {
    const std::vector<int64_t> starts = tensor_parallel_starts(config_.heads, tp->ranks, "heads");
    head_begin = starts[tp->rank];
    head_end = starts[tp->rank + 1];
  }
  const int64_t heads = head_end - head_begin, local_kw = heads * key_dim;
  std::vector<float> normed(rows * d);
  rms_norm(hidden, rows, d, layer.attn_norm.data(), normed.data());
  states.assign(requests, LayerState{});
  std::vector<float*> conv_history(requests);
  for (int64_t request = 0; request < requests; ++request) {
    states[request].conv.assign((config_.conv_width - 1) * 3 * local_kw, 0.0f);
    conv_history[request] = states[request].conv.data();
  }
  Inputs<float> inputs;
  inputs.shape = Shape{requests, tokens, heads, heads, key_dim, key_dim};
  std::vector<float> g_raw, b_raw;
  project(layer, normed.data(), requests, tokens, conv_history, inputs.q, inputs.k, inputs.v, g_raw,
          b_raw, head_begin, head_end);
  math::l2_normalize_rows(std::span<float>(inputs.q), key_dim);
  math::l2_normalize_rows(std::span<float>(inputs.k), key_dim);
  inputs.g.resize(rows * local_kw);
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t head = 0; head < heads; ++head) {
      const int64_t layer_head = head_begin + head;
      for (int64_t channel = 0; channel < key_dim; ++channel) {
        const int64_t idx = (row * heads + head) * key_dim + channel;
        inputs.g[idx] =
            math::log_decay(math::GateForm::kSoftplus, g_raw[idx], layer.a_log[layer_head],
                            layer.dt_bias[layer_head * key_dim + channel]);
      }
    }
  }
  inputs.beta.resize(rows * heads);
  for (size_t idx = 0; idx < b_raw.size(); ++idx) inputs.beta[idx] = math::sigmoid(b_raw[idx]);
  KernelOptions options;
  options.threads = 1;
  Outputs<float> outputs =
      config_.cp_shards > 0
          ? kernels::cpu::cp(inputs, options,
                             kernels::cpu::CpOptions{config_.cp_shards, config_.cp_precision})
          : kernels::cpu::chunk(inputs, options);
  const int64_t state_size = heads * key_dim * key_dim;
  for (int64_t request = 0; request < requests; ++request) {
    states[request].recurrent.assign(outputs.state.begin() + request * state_size,
                                     outputs.state.begin() + (request + 1) * state_size);
  }
  finish_attention(layer, normed.data(), outputs.o.data(), rows, hidden, head_begin, head_end, tp);
}

void Model::attention_decode(int64_t layer_idx, float* hidden,
                             std::vector<LayerState*>& states) const {
  const Layer& layer = layers_.at(layer_idx);
  const int64_t n = static_cast<int64_t>(states.size()), d = config_.hidden;
  const int64_t heads = config_.heads, key_dim = config_.head_dim;
  const int64_t state_size = heads * key_dim * key_dim;
  std::vector<float> normed(n * d);
  rms_norm(hidden, n, d, layer.attn_norm.data(), normed.data());
  std::vector<float*> conv_history(n);
  std::vector<float> state(n * state_size);  // (N, HV, K, V)
  for (int64_t seq = 0; seq < n; ++seq) {
    conv_history[seq] = states[seq]->conv.data();
    std::copy(states[seq]->recurrent.begin(), states[seq]->recurrent.end(),
              state.begin() + seq * state_size);
  }
  std::vector<float> q, k, v, g_raw, b_raw;
  project(layer, normed.data(), n, 1, conv_history, q, k, v, g_raw, b_raw, 0, heads);
  kernels::cpu::DecodeParams<float> params;
  params.gate_form = math::GateForm::kSoftplus;
  params.beta_form = math::BetaForm::kSigmoid;
  // Planted (tests/planted): the decode step leaves q and k unnormalised where prefill normalises.
  params.l2norm = !fault("decode_step_skips_l2norm");
  params.a_log = layer.a_log;
  params.dt_bias = layer.dt_bias;
  const Shape shape{n, 1, heads, heads, key_dim, key_dim};
  kernels::cpu::DecodeStep<float> step{q.data(), k.data(), v.data(), g_raw.data(), b_raw.data(), 1};
  std::vector<float> o(n * heads * key_dim);
  kernels::cpu::decode_step(config_.decode_variant, params, shape, step, state.data(), o.data(), 1);
  for (int64_t seq = 0; seq < n; ++seq) {
    std::copy(state.begin() + seq * state_size, state.begin() + (seq + 1) * state_size,
              states[seq]->recurrent.begin());
  }
  finish_attention(layer, normed.data(), o.data(), n, hidden, 0, heads, nullptr);
}

MoeBatch Model::moe_dispatch(int64_t layer_idx, const float* hidden, int64_t rows) const {
  const Layer& layer = layers_.at(layer_idx);
  const int64_t d = config_.hidden, experts = config_.experts, top_k = config_.top_k;
  MoeBatch batch;
  batch.rows = rows;
  batch.normed.resize(rows * d);
  rms_norm(hidden, rows, d, layer.ffn_norm.data(), batch.normed.data());
  std::vector<float> router_logits(rows * experts);
  layer.router.forward(batch.normed.data(), rows, router_logits.data());
  batch.expert_of.resize(rows * top_k);
  batch.weight_of.resize(rows * top_k);
  batch.slot_rows.assign(experts, {});
  std::vector<int32_t> order(experts);
  for (int64_t row = 0; row < rows; ++row) {
    const float* scores = router_logits.data() + row * experts;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
    // Softmax over the chosen experts only = the renormalised top-k of the full softmax.
    float total = 0.0f;
    for (int64_t slot = 0; slot < top_k; ++slot) {
      const float weight = std::exp(scores[order[slot]] - scores[order[0]]);
      batch.expert_of[row * top_k + slot] = order[slot];
      batch.weight_of[row * top_k + slot] = weight;
      total += weight;
    }
    for (int64_t slot = 0; slot < top_k; ++slot) {
      batch.weight_of[row * top_k + slot] /= total;
      batch.slot_rows[order[slot]].push_back(row * top_k + slot);
    }
  }
  batch.expert_in.resize(experts);
  for (int64_t expert = 0; expert < experts; ++expert) {
    const auto& slots = batch.slot_rows[expert];
    batch.expert_in[expert].resize(slots.size() * d);
    for (size_t idx = 0; idx < slots.size(); ++idx) {
      std::copy_n(batch.normed.data() + (slots[idx] / top_k) * d, d,
                  batch.expert_in[expert].data() + idx * d);
    }
  }
  return batch;
}

void Model::run_expert(const Expert& expert, const float* x, int64_t rows, float* y) const {
  const int64_t f = config_.expert_hidden;
  std::vector<float> gate(rows * f), up(rows * f);
  expert.gate.forward(x, rows, gate.data());
  expert.up.forward(x, rows, up.data());
  for (size_t idx = 0; idx < gate.size(); ++idx) gate[idx] = silu(gate[idx]) * up[idx];
  expert.down.forward(gate.data(), rows, y);
}

void Model::moe_experts(int64_t layer_idx, MoeBatch& batch) const {
  const Layer& layer = layers_.at(layer_idx);
  const int64_t d = config_.hidden;
  batch.expert_out.resize(config_.experts);
  for (int64_t expert = 0; expert < config_.experts; ++expert) {
    const int64_t tokens = static_cast<int64_t>(batch.slot_rows[expert].size());
    batch.expert_out[expert].resize(tokens * d);
    run_expert(layer.experts[expert], batch.expert_in[expert].data(), tokens,
               batch.expert_out[expert].data());
  }
  batch.shared_out.resize(batch.rows * d);
  run_expert(layer.shared, batch.normed.data(), batch.rows, batch.shared_out.data());
}

void Model::moe_combine(const MoeBatch& batch, float* hidden) const {
  const int64_t d = config_.hidden, top_k = config_.top_k;
  for (size_t idx = 0; idx < batch.shared_out.size(); ++idx) hidden[idx] += batch.shared_out[idx];
  for (size_t expert = 0; expert < batch.slot_rows.size(); ++expert) {
    const auto& slots = batch.slot_rows[expert];
    for (size_t idx = 0; idx < slots.size(); ++idx) {
      const int64_t row = slots[idx] / top_k;
      const float weight = batch.weight_of[slots[idx]];
      const float* out = batch.expert_out[expert].data() + idx * d;
      for (int64_t col = 0; col < d; ++col) hidden[row * d + col] += weight * out[col];
    }
  }
}

std::vector<float> Model::logits(const float* hidden, int64_t rows) const {
  std::vector<float> normed(rows * config_.hidden), out(rows * config_.vocab);
  rms_norm(hidden, rows, config_.hidden, final_norm_.data(), normed.data());
  lm_head_.forward(normed.data(), rows, out.data());
  return out;
}

std::vector<float> Model::prefill(std::span<const int32_t> prompts, int64_t requests,
                                  int64_t tokens, StateCache& cache,
                                  std::vector<float>* hidden_per_layer) const {
  return prefill_layers(prompts, requests, tokens, &cache, nullptr, hidden_per_layer);
}

std::vector<float> Model::prefill_tensor_parallel(std::span<const int32_t> prompts,
                                                  int64_t requests, int64_t tokens,
                                                  const TensorParallel& tp,
                                                  std::vector<float>* hidden_per_layer) const {
  if (tp.rank < 0 || tp.rank >= tp.ranks || !tp.gather) {
    throw loupe::Error(loupe::ErrorCode::kInternal,
                       "kda model: tensor-parallel rank " + std::to_string(tp.rank) + " of " +
                           std::to_string(tp.ranks) + (tp.gather ? "" : " without a gather"));
  }
  // Refused before any collective: a rank without heads would leave the others waiting.
  tensor_parallel_starts(config_.heads, tp.ranks, "heads");
  tensor_parallel_starts(config_.vocab, tp.ranks, "vocabulary rows", kVocabGranule);
  return prefill_layers(prompts, requests, tokens, nullptr, &tp, hidden_per_layer);
}

std::vector<float> Model::prefill_layers(std::span<const int32_t> prompts, int64_t requests,
                                         int64_t tokens, StateCache* cache,
                                         const TensorParallel* tp,
                                         std::vector<float>* hidden_per_layer) const {
  const int64_t rows = requests * tokens, d = config_.hidden;
  std::vector<float> hidden = embed(prompts);
  if (hidden_per_layer) hidden_per_layer->clear();
  std::vector<LayerState> states;
  for (int64_t layer = 0; layer < config_.layers; ++layer) {
    attention_prefill_heads(layer, requests, tokens, hidden.data(), states, tp);
    if (cache != nullptr) {
      for (int64_t request = 0; request < requests; ++request) {
        cache->store(request, layer, states[request]);
      }
    }
    MoeBatch batch = moe_dispatch(layer, hidden.data(), rows);
    moe_experts(layer, batch);
    moe_combine(batch, hidden.data());
    if (hidden_per_layer) {
      hidden_per_layer->insert(hidden_per_layer->end(), hidden.begin(), hidden.end());
    }
  }
  std::vector<float> last_rows(requests * d);
  for (int64_t request = 0; request < requests; ++request) {
    std::copy_n(hidden.data() + ((request + 1) * tokens - 1) * d, d,
                last_rows.data() + request * d);
  }
  if (tp == nullptr) return logits(last_rows.data(), requests);
  // The LM head by vocabulary rows: each rank its slice, gathered into whole rows.
  std::vector<float> normed(requests * d), out(requests * config_.vocab);
  rms_norm(last_rows.data(), requests, d, final_norm_.data(), normed.data());
  const std::vector<int64_t> starts =
      tensor_parallel_starts(config_.vocab, tp->ranks, "vocabulary rows", kVocabGranule);
  std::vector<float> slice(requests * (starts[tp->rank + 1] - starts[tp->rank]));
  lm_head_.forward_rows(normed.data(), requests, starts[tp->rank], starts[tp->rank + 1],
                        slice.data());
  tp->gather(slice.data(), requests, starts, out.data());
  return out;
}

std::vector<float> Model::decode_step(std::span<const int32_t> tokens,
                                      std::span<const int64_t> requests, StateCache& cache) const {
  // Zones per stage, so that a trace of a decode step (its critical path, its breakdown) can
  // say which stage the step spends its time in.
  const int64_t n = static_cast<int64_t>(requests.size());
  std::vector<float> hidden = embed(tokens);
  std::vector<LayerState> states(n);
  std::vector<LayerState*> pointers(n);
  for (int64_t seq = 0; seq < n; ++seq) pointers[seq] = &states[seq];
  for (int64_t layer = 0; layer < config_.layers; ++layer) {
    {
      LOUPE_ZONE("state_load");
      for (int64_t seq = 0; seq < n; ++seq) cache.load(requests[seq], layer, states[seq]);
    }
    {
      LOUPE_ZONE("attention_decode");
      attention_decode(layer, hidden.data(), pointers);
    }
    {
      LOUPE_ZONE("state_store");
      for (int64_t seq = 0; seq < n; ++seq) cache.store(requests[seq], layer, states[seq]);
    }
    LOUPE_ZONE("moe");
    MoeBatch batch = moe_dispatch(layer, hidden.data(), n);
    moe_experts(layer, batch);
    moe_combine(batch, hidden.data());
  }
  LOUPE_ZONE("logits");
  return logits(hidden.data(), n);
}

Generation decode_from_cache(const Model& model, std::span<const float> first_logits,
                             int64_t requests, int64_t new_tokens, StateCache& cache) {
  const int64_t vocab = model.config().vocab;
  Generation generation;
  generation.tokens.assign(requests * new_tokens, 0);
  generation.logits.assign(requests * new_tokens * vocab, 0.0f);
  std::vector<int64_t> request_ids(requests);
  std::iota(request_ids.begin(), request_ids.end(), 0);
  std::vector<float> step_logits(first_logits.begin(), first_logits.end());
  for (int64_t step = 0; step < new_tokens; ++step) {
    if (step > 0) {
      std::vector<int32_t> inputs(requests);
      for (int64_t request = 0; request < requests; ++request) {
        inputs[request] = generation.tokens[request * new_tokens + step - 1];
      }
      step_logits = model.decode_step(inputs, request_ids, cache);
    }
    const std::vector<int32_t> chosen = argmax_rows(step_logits, vocab);
    for (int64_t request = 0; request < requests; ++request) {
      generation.tokens[request * new_tokens + step] = chosen[request];
      std::copy_n(step_logits.data() + request * vocab, vocab,
                  generation.logits.data() + (request * new_tokens + step) * vocab);
    }
  }
  return generation;
}

Generation generate(const Model& model, std::span<const int32_t> prompts, int64_t requests,
                    int64_t tokens, int64_t new_tokens, CacheDType cache_dtype) {
  StateCache cache(cache_dtype, requests, model.config().layers, model.config().head_dim);
  const std::vector<float> first_logits = model.prefill(prompts, requests, tokens, cache);
  return decode_from_cache(model, first_logits, requests, new_tokens, cache);
}

}  // namespace kda::model
