// `kda prefill` and `kda decode`: the model alone (kda/model/model.hpp), throughput and latency.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "kda/cli/commands.hpp"
#include "kda/model/model.hpp"
#include "loupe/error.hpp"

namespace kda::cli {
namespace {

struct ModelArgs {
  model::ModelConfig config;
  int64_t requests = 4;
  int64_t prompt_len = 64;
  int64_t new_tokens = 16;
  int repeats = 3;
  uint64_t seed = 0;
  std::string cache = "f32";
  std::string decode_variant = "merged";
  std::string cp_precision = "ieee";
  bool json = false;
};

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void add_model_options(CLI::App* command, ModelArgs& args) {
  command->add_option("--layers", args.config.layers, "model layers")->capture_default_str();
  command->add_option("--hidden", args.config.hidden, "model width D")->capture_default_str();
  command->add_option("--heads", args.config.heads, "KDA heads H")->capture_default_str();
  command->add_option("--head-dim", args.config.head_dim, "K = V")->capture_default_str();
  command->add_option("--experts", args.config.experts, "experts E")->capture_default_str();
  command->add_option("--top-k", args.config.top_k, "experts per token")->capture_default_str();
  command->add_option("--model-seed", args.config.seed, "seed of the weights")
      ->capture_default_str();
  command->add_flag("--w8a8", args.config.w8a8, "W8A8 linear layers");
  command->add_option("--requests", args.requests, "sequences per batch")->capture_default_str();
  command->add_option("--prompt-len", args.prompt_len, "tokens per prompt")->capture_default_str();
  command->add_option("--seed", args.seed, "seed of the prompts")->capture_default_str();
  command->add_option("--repeats", args.repeats, "timed repetitions (the median is reported)")
      ->capture_default_str();
  command->add_flag("--json", args.json, "print one JSON object");
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

void require_repeats(int repeats) {
  if (repeats < 1) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "--repeats must be at least 1, got " + std::to_string(repeats));
  }
}

}  // namespace

void add_model_commands(CLI::App& app, int& exit_code) {
  auto prefill_args = std::make_shared<ModelArgs>();
  CLI::App* prefill = app.add_subcommand("prefill", "Prefill seeded prompts with the KDA model");
  add_model_options(prefill, *prefill_args);
  prefill
      ->add_option("--cp-shards", prefill_args->config.cp_shards,
                   "context-parallel prefill over this many shards (0: chunk kernel)")
      ->capture_default_str();
  prefill
      ->add_option("--cp-precision", prefill_args->cp_precision,
                   "dot precision of the CP scan: ieee | bf16 | tf32_rz | tf32_rne | tf32x3")
      ->capture_default_str();
  prefill->callback([prefill_args, &exit_code] {
    ModelArgs& args = *prefill_args;
    require_repeats(args.repeats);
    args.config.cp_precision = math::parse_precision(args.cp_precision);
    const model::Model model(args.config);
    const std::vector<int32_t> prompts =
        model::generate_prompts(args.requests, args.prompt_len, args.config.vocab, args.seed);
    std::vector<double> walls;
    std::vector<int32_t> first_tokens;
    for (int repeat = 0; repeat < args.repeats; ++repeat) {
      model::StateCache cache(model::CacheDType::kF32, args.requests, args.config.layers,
                              args.config.head_dim);
      const auto start = std::chrono::steady_clock::now();
      const std::vector<float> logits =
          model.prefill(prompts, args.requests, args.prompt_len, cache);
      walls.push_back(since(start));
      first_tokens = model::argmax_rows(logits, args.config.vocab);
    }
    const double wall = median(walls);
    const double tokens = static_cast<double>(args.requests * args.prompt_len);
    if (args.json) {
      std::printf(
          "{\"command\": \"prefill\", \"model\": \"%s\", \"requests\": %lld, \"prompt_len\": %lld, "
          "\"repeats\": %d, \"wall_s\": %.9g, \"latency_s\": %.9g, \"tokens_per_s\": %.9g, "
          "\"first_token\": %d}\n",
          args.config.to_string().c_str(), static_cast<long long>(args.requests),
          static_cast<long long>(args.prompt_len), args.repeats, wall, wall, tokens / wall,
          first_tokens.empty() ? -1 : first_tokens[0]);
    } else {
      std::printf("kda prefill (%s): %lld requests x %lld tokens, median of %d\n",
                  args.config.to_string().c_str(), static_cast<long long>(args.requests),
                  static_cast<long long>(args.prompt_len), args.repeats);
      std::printf("  latency     %.3f ms per batch\n  throughput  %.1f tokens/s\n", wall * 1e3,
                  tokens / wall);
    }
    exit_code = 0;
  });

  auto decode_args = std::make_shared<ModelArgs>();
  CLI::App* decode =
      app.add_subcommand("decode", "Prefill, then decode greedily with the KDA model");
  add_model_options(decode, *decode_args);
  decode->add_option("--new-tokens", decode_args->new_tokens, "decode steps per request")
      ->capture_default_str();
  decode->add_option("--cache", decode_args->cache, "state cache: f32 | bf16 | int8")
      ->capture_default_str();
  decode->add_option("--decode-variant", decode_args->decode_variant, "tiled | merged")
      ->capture_default_str();
  decode->callback([decode_args, &exit_code] {
    ModelArgs& args = *decode_args;
    require_repeats(args.repeats);
    if (args.new_tokens < 1) {
      throw loupe::Error(loupe::ErrorCode::kUsage,
                         "--new-tokens must be at least 1, got " + std::to_string(args.new_tokens));
    }
    args.config.decode_variant = kernels::cpu::parse_decode_variant(args.decode_variant);
    const model::CacheDType cache_dtype = model::parse_cache_dtype(args.cache);
    const model::Model model(args.config);
    const std::vector<int32_t> prompts =
        model::generate_prompts(args.requests, args.prompt_len, args.config.vocab, args.seed);
    std::vector<double> step_latencies;
    std::vector<int32_t> tokens;
    for (int repeat = 0; repeat < args.repeats; ++repeat) {
      model::StateCache cache(cache_dtype, args.requests, args.config.layers, args.config.head_dim);
      const std::vector<float> first =
          model.prefill(prompts, args.requests, args.prompt_len, cache);
      std::vector<int32_t> current = model::argmax_rows(first, args.config.vocab);
      tokens = current;
      std::vector<int64_t> ids(args.requests);
      for (int64_t request = 0; request < args.requests; ++request) ids[request] = request;
      for (int64_t step = 0; step < args.new_tokens; ++step) {
        const auto start = std::chrono::steady_clock::now();
        const std::vector<float> logits = model.decode_step(current, ids, cache);
        step_latencies.push_back(since(start));
        current = model::argmax_rows(logits, args.config.vocab);
      }
    }
    const double latency = median(step_latencies);
    const double tokens_per_s = static_cast<double>(args.requests) / latency;
    if (args.json) {
      std::printf(
          "{\"command\": \"decode\", \"model\": \"%s\", \"requests\": %lld, \"prompt_len\": %lld, "
          "\"new_tokens\": %lld, \"cache\": \"%s\", \"decode_variant\": \"%s\", \"repeats\": %d, "
          "\"step_latency_s\": %.9g, \"tokens_per_s\": %.9g}\n",
          args.config.to_string().c_str(), static_cast<long long>(args.requests),
          static_cast<long long>(args.prompt_len), static_cast<long long>(args.new_tokens),
          args.cache.c_str(), args.decode_variant.c_str(), args.repeats, latency, tokens_per_s);
    } else {
      std::printf("kda decode (%s): %lld requests, %lld steps, %s cache, %s kernel\n",
                  args.config.to_string().c_str(), static_cast<long long>(args.requests),
                  static_cast<long long>(args.new_tokens), args.cache.c_str(),
                  args.decode_variant.c_str());
      std::printf("  step latency  %.3f ms (median)\n  throughput    %.1f tokens/s\n",
                  latency * 1e3, tokens_per_s);
    }
    exit_code = 0;
  });
}

}  // namespace kda::cli
