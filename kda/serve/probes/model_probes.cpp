// Probes of the KDA model (kda/model/model.hpp), registered into the `kda` subject:
//   check w8a8_vs_fp32         W8A8 linear layers against fp32: the residual stream after every
//                              layer (profile along L: which layer the error grows in) and the
//                              last token's logits
//   check state_cache_vs_fp32  a bf16 or int8 decode state cache against fp32, teacher-forced
//                              over decode steps: logits along S (which steps) and the final
//                              states along L (which layer)
//   check decode_vs_prefill    the model's prefill then teacher-forced decode steps against
//                              prefill of the extended prompt, both fp32: logits after each
//                              step, final states
//   bench model_decode         one decode step of the model as it is served (W8A8 or fp32 linear
//                              layers, the state cache's dtype): what times those components
// W8A8 and cache tolerances: 1.5x the largest rms_ratio the unchanged build gave over random 31-bit
// seeds at the default points (the seeds a hidden run draws; 2026-12-07, `loupe probe run ...
// --seed N
// --no-hidden --repeat 0`), rounded up to two digits (kda/README.md has the table):
//   w8a8 (the weights vary with the seed), hidden / logits, median and largest:
//     iid, 664 seeds:               0.049, 0.102 -> 0.16 / 0.038, 0.385 -> 0.58
//     outlier_channels, 200 seeds:  0.082, 0.133 -> 0.2  / 0.077, 0.390 -> 0.59
//   the caches, logits / states, median and largest:
//     int8, 1200 seeds:             0.034, 0.100 -> 0.15 / 0.032, 0.132 -> 0.2
//     bf16, 300 seeds:              0.003, 0.094 -> 0.15 / 0.006, 0.067 -> 0.11
// The tails are long (the largest is 4-10x the median): a token whose top-2 experts nearly tie can
// route differently once its inputs are narrowed, a discrete change. The earlier bounds, 2x the
// largest over 10-12 seeds, failed the unchanged build at 15 of 1200 int8 seeds (states up to
// 0.132 against 0.09) and 2 of 664 w8a8 iid seeds (logits 0.29 and 0.39 against 0.25): a hidden
// run's fresh seed failed an unchanged build about one documented run in 50. A fault these bounds
// pass is still compared with the baseline build at the same seeds (`..._not_above_baseline`).
// The states' worst element, as a multiple of the reference's rms, over seeds 1-40 (2026-12-06):
// int8 up to 2.48 (seed 32; 2.19 at 35, 1.97 at the secret seed 812417708 that failed the default
// 1.8), bf16 up to 1.55 (seed 4): a row with a large scale quantises its small elements coarsely.
// Bounds 2x those: 5 and 3.2. (Logits stay under their default: 1.36 and 0.99.)
#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <string>

#include "kda/model/model.hpp"
#include "loupe/bench.hpp"
#include "loupe/probe.hpp"

namespace {

using kda::model::CacheDType;
using kda::model::Model;
using kda::model::ModelConfig;
using kda::model::StateCache;

ModelConfig config_of(const loupe::Point& point) {
  ModelConfig config;
  config.layers = point.get_int("layers");
  return config;
}

// A teacher-forced decode point: the model, its requests and lengths, and the token sequences
// (prompt_len + steps per request) drawn from the check's seed.
struct ForcedDecodePoint {
  ModelConfig config;
  int64_t requests = 0;
  int64_t tokens = 0;  // the prompt's
  int64_t steps = 0;
  std::vector<int32_t> sequences;  // (requests, tokens + steps)
};

ForcedDecodePoint forced_decode_point(const loupe::CheckSetup& setup) {
  const loupe::Point& point = setup.point();
  ForcedDecodePoint out;
  out.config = config_of(point);
  out.requests = point.get_int("requests");
  out.tokens = point.get_int("prompt_len");
  out.steps = point.get_int("steps");
  out.sequences = kda::model::generate_prompts(out.requests, out.tokens + out.steps,
                                               out.config.vocab, setup.seed());
  return out;
}

void copy_into(std::span<float> out, const std::vector<float>& values) {
  std::copy(values.begin(), values.end(), out.begin());
}

void run_w8a8_path(loupe::CheckIo& io, bool w8a8) {
  ModelConfig config = config_of(io.point());
  config.w8a8 = w8a8;
  config.weights = kda::model::parse_weight_structure(io.point().get_string("weights"));
  config.seed = static_cast<uint64_t>(io.input<int64_t>("weights_seed")[0]);
  const Model model(config);
  const int64_t requests = io.point().get_int("requests");
  const int64_t tokens = io.point().get_int("prompt_len");
  std::span<const int32_t> prompts = io.input<int32_t>("prompts");
  StateCache cache(CacheDType::kF32, requests, config.layers, config.head_dim);
  std::vector<float> hidden;
  copy_into(io.output<float>("logits"), model.prefill(prompts, requests, tokens, cache, &hidden));
  copy_into(io.output<float>("hidden"), hidden);
}

LOUPE_CHECK(w8a8_vs_fp32)
    .description(
        "KDA model prefill with W8A8 linear layers (int8 weights per channel, int8 activations "
        "per token, int32 accumulation) against fp32: hidden states per layer and logits")
    .param("layers", 4)
    .param("requests", 2)
    .param("prompt_len", 64)
    .param("weights", "outlier_channels", {"outlier_channels", "iid"},
           "how the weights are drawn: outlier_channels scales about one output channel in 16 of "
           "every linear layer by 10-100x, as trained weights have; iid draws every weight alike")
    .inputs([](loupe::CheckSetup& setup) {
      const loupe::Point& point = setup.point();
      const ModelConfig config = config_of(point);
      const int64_t requests = point.get_int("requests"), tokens = point.get_int("prompt_len");
      const std::vector<int32_t> prompts =
          kda::model::generate_prompts(requests, tokens, config.vocab, setup.seed());
      std::span<int32_t> input = setup.input<int32_t>("prompts", {requests, tokens}, {"R", "T"});
      std::copy(prompts.begin(), prompts.end(), input.begin());
      // The weights vary with the seed too: an outlier channel lands in other rows each time.
      setup.input<int64_t>("weights_seed", {1}, {"one"})[0] =
          static_cast<int64_t>(setup.seed() % (uint64_t{1} << 62));
      const bool outliers = point.get_string("weights") == "outlier_channels";
      setup
          .output<float>("hidden", {config.layers, requests * tokens, config.hidden},
                         {"L", "RT", "D"})
          .along("L")
          .tolerance("rms_ratio", outliers ? 0.2 : 0.16)
          .approximate("w8a8: int8 weights and activations in every linear layer");
      setup.output<float>("logits", {requests, config.vocab}, {"R", "vocab"})
          .tolerance("rms_ratio", outliers ? 0.59 : 0.58)
          .approximate("w8a8: int8 weights and activations in every linear layer");
    })
    .reference([](loupe::CheckIo& io) { run_w8a8_path(io, false); })
    .candidate([](loupe::CheckIo& io) { run_w8a8_path(io, true); });

// Every layer's recurrent state of each request, (L, R, H·K·V).
void copy_states(const Model& model, StateCache& cache, int64_t requests, std::span<float> out) {
  const ModelConfig& config = model.config();
  const int64_t state_size = config.heads * config.head_dim * config.head_dim;
  kda::model::LayerState state;
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    for (int64_t request = 0; request < requests; ++request) {
      cache.load(request, layer, state);
      std::copy(state.recurrent.begin(), state.recurrent.end(),
                out.data() + (layer * requests + request) * state_size);
    }
  }
}

void run_cache_path(loupe::CheckIo& io, CacheDType dtype) {
  const ModelConfig config = config_of(io.point());
  const Model model(config);
  const int64_t requests = io.point().get_int("requests");
  const int64_t tokens = io.point().get_int("prompt_len");
  const int64_t steps = io.point().get_int("steps");
  std::span<const int32_t> prompts = io.input<int32_t>("prompts");
  std::span<const int32_t> forced = io.input<int32_t>("forced_tokens");  // (R, S)
  StateCache cache(dtype, requests, config.layers, config.head_dim);
  model.prefill(prompts, requests, tokens, cache);
  std::vector<int64_t> ids(requests);
  std::iota(ids.begin(), ids.end(), 0);
  std::span<float> logits = io.output<float>("logits");  // (R, S, vocab)
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<int32_t> inputs(requests);
    for (int64_t request = 0; request < requests; ++request) {
      inputs[request] = forced[request * steps + step];
    }
    const std::vector<float> step_logits = model.decode_step(inputs, ids, cache);
    for (int64_t request = 0; request < requests; ++request) {
      std::copy_n(step_logits.data() + request * config.vocab, config.vocab,
                  logits.data() + (request * steps + step) * config.vocab);
    }
  }
  copy_states(model, cache, requests, io.output<float>("states"));  // (L, R, H·K·V)
}

LOUPE_CHECK(state_cache_vs_fp32)
    .description(
        "KDA model decode with the state cache in bf16 or int8 (per-row scales) against fp32, "
        "teacher-forced over decode steps: logits along steps, final states along layers")
    .param("cache", "int8", {"int8", "bf16"})
    .param("layers", 4)
    .param("requests", 2)
    .param("prompt_len", 64)
    .param("steps", 32)
    .inputs([](loupe::CheckSetup& setup) {
      const loupe::Point& point = setup.point();
      const auto [config, requests, tokens, steps, prompts] = forced_decode_point(setup);
      std::span<int32_t> prompt_input =
          setup.input<int32_t>("prompts", {requests, tokens}, {"R", "T"});
      std::span<int32_t> forced_input =
          setup.input<int32_t>("forced_tokens", {requests, steps}, {"R", "S"});
      for (int64_t request = 0; request < requests; ++request) {
        const auto begin = prompts.begin() + request * (tokens + steps);
        std::copy(begin, begin + tokens, prompt_input.begin() + request * tokens);
        std::copy(begin + tokens, begin + tokens + steps, forced_input.begin() + request * steps);
      }
      const bool int8 = point.get_string("cache") == "int8";
      const std::string cache = point.get_string("cache");
      setup.output<float>("logits", {requests, steps, config.vocab}, {"R", "S", "vocab"})
          .along("S")
          .tolerance("rms_ratio", 0.15)
          .approximate("the decode reads its states back from a " + cache + " cache");
      // The states come back through the cache: narrowing them is what this check measures.
      setup
          .output<float>(
              "states", {config.layers, requests, config.heads * config.head_dim * config.head_dim},
              {"L", "R", "HKV"})
          .along("L")
          .tolerance("rms_ratio", int8 ? 0.2 : 0.11)
          .worst_element(int8 ? 5.0 : 3.2)
          .stored_narrow(cache);
    })
    .reference([](loupe::CheckIo& io) { run_cache_path(io, CacheDType::kF32); })
    .candidate([](loupe::CheckIo& io) {
      run_cache_path(io, kda::model::parse_cache_dtype(io.point().get_string("cache")));
    });

// The model's two ways through a sequence, in fp32: prefill of a prompt extended by s tokens
// gives the logits after its last token; prefill of the prompt then s decode steps (teacher-
// forced with the same tokens) must give the same logits, and the same states at the end. The
// decode path keeps its own per-layer history (the convolution's window, the recurrent state),
// which every other model check runs identically on both sides.
void prefill_logits(const Model& model, std::span<const int32_t> sequences, int64_t requests,
                    int64_t total, int64_t tokens, std::vector<float>& logits,
                    StateCache* keep = nullptr) {
  std::vector<int32_t> prefix(static_cast<size_t>(requests * tokens));
  for (int64_t request = 0; request < requests; ++request) {
    std::copy_n(sequences.begin() + request * total, tokens, prefix.begin() + request * tokens);
  }
  StateCache scratch(CacheDType::kF32, requests, model.config().layers, model.config().head_dim);
  logits = model.prefill(prefix, requests, tokens, keep != nullptr ? *keep : scratch);
}

LOUPE_CHECK(decode_vs_prefill)
    .description(
        "KDA model in fp32: prefill of the prompt then teacher-forced decode steps against prefill "
        "of the prompt extended by as many tokens: logits after each step, final states per layer")
    .param("layers", 4)
    .param("requests", 2)
    .param("prompt_len", 37)
    .param("steps", 4)
    .inputs([](loupe::CheckSetup& setup) {
      const auto [config, requests, tokens, steps, sequences] = forced_decode_point(setup);
      std::span<int32_t> input =
          setup.input<int32_t>("sequences", {requests, tokens + steps}, {"R", "T"});
      std::copy(sequences.begin(), sequences.end(), input.begin());
      // Both paths are fp32; they differ by the chunked against the token recurrence and by the
      // BLAS's summation order: over 300 random seeds (2026-12-07) the largest rms_ratio was
      // 8e-7 (logits) and 5e-7 (states); the bound is ~100x that. A wrong per-layer history or
      // flag in the decode step gives 0.3 (the convolution's window one step stale).
      setup.output<float>("logits", {requests, steps, config.vocab}, {"R", "S", "vocab"})
          .along("S")
          .tolerance("rms_ratio", 1e-4)
          .approximate("the chunked prefill and the token recurrence sum in other orders");
      setup
          .output<float>(
              "states", {config.layers, requests, config.heads * config.head_dim * config.head_dim},
              {"L", "R", "HKV"})
          .along("L")
          .tolerance("rms_ratio", 1e-4)
          .approximate("the chunked prefill and the token recurrence sum in other orders");
    })
    .reference([](loupe::CheckIo& io) {
      const ModelConfig config = config_of(io.point());
      const Model model(config);
      const int64_t requests = io.point().get_int("requests");
      const int64_t tokens = io.point().get_int("prompt_len");
      const int64_t steps = io.point().get_int("steps");
      std::span<const int32_t> sequences = io.input<int32_t>("sequences");
      std::span<float> logits = io.output<float>("logits");  // (R, S, vocab)
      std::vector<float> step_logits;
      StateCache last(CacheDType::kF32, requests, config.layers, config.head_dim);
      for (int64_t step = 0; step < steps; ++step) {
        prefill_logits(model, sequences, requests, tokens + steps, tokens + step + 1, step_logits,
                       step + 1 == steps ? &last : nullptr);
        for (int64_t request = 0; request < requests; ++request) {
          std::copy_n(step_logits.data() + request * config.vocab, config.vocab,
                      logits.data() + (request * steps + step) * config.vocab);
        }
      }
      copy_states(model, last, requests, io.output<float>("states"));
    })
    .candidate([](loupe::CheckIo& io) {
      const ModelConfig config = config_of(io.point());
      const Model model(config);
      const int64_t requests = io.point().get_int("requests");
      const int64_t tokens = io.point().get_int("prompt_len");
      const int64_t steps = io.point().get_int("steps");
      std::span<const int32_t> sequences = io.input<int32_t>("sequences");
      StateCache cache(CacheDType::kF32, requests, config.layers, config.head_dim);
      std::vector<float> ignored;
      prefill_logits(model, sequences, requests, tokens + steps, tokens, ignored, &cache);
      std::vector<int64_t> ids(requests);
      std::iota(ids.begin(), ids.end(), 0);
      std::span<float> logits = io.output<float>("logits");  // (R, S, vocab)
      for (int64_t step = 0; step < steps; ++step) {
        std::vector<int32_t> inputs(requests);
        for (int64_t request = 0; request < requests; ++request) {
          inputs[request] = sequences[request * (tokens + steps) + tokens + step];
        }
        const std::vector<float> step_logits = model.decode_step(inputs, ids, cache);
        for (int64_t request = 0; request < requests; ++request) {
          std::copy_n(step_logits.data() + request * config.vocab, config.vocab,
                      logits.data() + (request * steps + step) * config.vocab);
        }
      }
      copy_states(model, cache, requests, io.output<float>("states"));
    });

// One decode step of a served batch: the model (built once per process; its weights are not the
// input), and per timed call a fresh cache prefilled from prompts drawn from the call's seed, and
// the step's tokens.
struct ModelDecodeWork {
  std::shared_ptr<const Model> model;
  StateCache cache;
  std::vector<int32_t> tokens;
  std::vector<int64_t> ids;
  std::vector<float> logits;
};

LOUPE_BENCH(model_decode)
    .description(
        "one decode step of the KDA model for a batch of requests, served with W8A8 linear layers "
        "or fp32 and the state cache in int8, bf16 or f32 (prefill untimed)")
    .param("layers", 4, {}, "model layers (hidden 128, 2 heads of 64, 4 experts top-2)")
    .param("requests", 16, {}, "requests decoded together")
    .param("prompt_len", 16, {}, "prompt tokens prefilled into each request's cache")
    .param("w8a8", true, {}, "W8A8 linear layers (false: fp32)")
    .param("cache", "int8", {"int8", "bf16", "f32"}, "the state cache's dtype")
    .body([](loupe::BenchState& state) {
      ModelConfig config = config_of(state.point());
      config.w8a8 = state.get_bool("w8a8");
      const auto model = std::make_shared<const Model>(config);
      const int64_t requests = state.get_int("requests");
      const int64_t tokens = state.get_int("prompt_len");
      const CacheDType dtype = kda::model::parse_cache_dtype(state.get_string("cache"));
      state.exec(
          [model, requests, tokens, dtype](uint64_t seed) {
            const ModelConfig& c = model->config();
            std::mt19937_64 random(seed);
            std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(c.vocab - 1));
            std::vector<int32_t> prompts(static_cast<size_t>(requests * tokens));
            for (int32_t& value : prompts) value = token(random);
            ModelDecodeWork work{model,
                                 StateCache(dtype, requests, c.layers, c.head_dim),
                                 std::vector<int32_t>(static_cast<size_t>(requests)),
                                 std::vector<int64_t>(static_cast<size_t>(requests)),
                                 {}};
            model->prefill(prompts, requests, tokens, work.cache);
            for (int32_t& value : work.tokens) value = token(random);
            std::iota(work.ids.begin(), work.ids.end(), 0);
            return work;
          },
          [](ModelDecodeWork& work) {
            work.logits = work.model->decode_step(work.tokens, work.ids, work.cache);
          },
          [](const ModelDecodeWork& work) {
            loupe::Tensor logits(loupe::DType::kF32, {static_cast<int64_t>(work.logits.size())});
            std::copy(work.logits.begin(), work.logits.end(), logits.mutable_data<float>().begin());
            return std::vector<loupe::NamedTensor>{{"logits", logits}};
          });
    });

}  // namespace
