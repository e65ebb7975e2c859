// `kda serve`: the disaggregated server of incident 2 (kda/serve/server.hpp) on one command line.
#include <cstdio>
#include <iostream>
#include <string>

#include "kda/cli/commands.hpp"
#include "kda/serve/server.hpp"

namespace kda::cli {
namespace {

struct ServeArgs {
  std::string mode = "prefill";
  std::string cache = "f32";
  std::string decode_variant = "merged";
  bool no_verify = false;
  bool json = false;
  serve::ServeOptions options;
};

void print_text(const serve::ServeOptions& options, const serve::ServeResult& result) {
  const serve::StageTimes& s = result.stages;
  std::printf("kda serve --mode %s%s: %lld layers, %lld requests x %lld tokens\n",
              std::string(serve::mode_name(options.mode)).c_str(),
              options.dispatch_holds_lock ? " --dispatch-holds-lock" : "",
              static_cast<long long>(options.model.layers),
              static_cast<long long>(options.requests), static_cast<long long>(options.prompt_len));
  std::printf("  wall        %.3f ms\n  throughput  %.1f tokens/s (%lld tokens)\n",
              result.wall_s * 1e3, result.tokens_per_s, static_cast<long long>(result.tokens));
  std::printf(
      "  prefill     %.3f ms: attention %.3f, moe_dispatch %.3f (wait %.3f), experts %.3f, "
      "moe_combine %.3f, interpreter-lock wait %.3f\n",
      s.prefill_s * 1e3, s.attention_s * 1e3, s.moe_dispatch_s * 1e3, s.dispatch_wait_s * 1e3,
      s.experts_s * 1e3, s.moe_combine_s * 1e3, s.prefill_lock_wait_s * 1e3);
  std::printf(
      "  transfer    %.3f ms: bookkeeping %.3f, interpreter-lock wait %.3f; %lld states "
      "received, %lld verified; %llu forced lock switches\n",
      s.transfer_s * 1e3, s.transfer_bookkeeping_s * 1e3, s.transfer_lock_wait_s * 1e3,
      static_cast<long long>(result.states_received),
      static_cast<long long>(result.states_verified),
      static_cast<unsigned long long>(result.forced_switches));
  const serve::HandoffStats& q = result.layer_queue;
  if (q.items > 0) {
    std::printf(
        "  layer queue %lld layers handed over: residence median %.3f ms, p90 %.3f, max %.3f; "
        "idle residence (the transfer thread waiting meanwhile) %.3f ms in all, at most %.3f\n",
        static_cast<long long>(q.items), q.residence_median_s * 1e3, q.residence_p90_s * 1e3,
        q.residence_max_s * 1e3, q.idle_residence_s * 1e3, q.idle_residence_max_s * 1e3);
  }
  std::printf("  decode      %.3f ms\n", s.decode_s * 1e3);
  if (!options.trace_path.empty()) {
    std::printf("  trace       %s (%llu events)\n", options.trace_path.c_str(),
                static_cast<unsigned long long>(result.trace_events));
  }
}

}  // namespace

void add_serve_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* command = app.add_subcommand(
      "serve",
      "Serve seeded prompts with the disaggregated KDA server (incident 2 of reference/kda.md)");
  serve::ServeOptions& o = args->options;
  o.model.layers = 12;
  command->add_option("--mode", args->mode, "prefill | prefill+transfer | decode | disaggregated")
      ->capture_default_str();
  command->add_flag("--dispatch-holds-lock", o.dispatch_holds_lock,
                    "MoE dispatch spins holding the interpreter lock (the incident)");
  command->add_option("--layers", o.model.layers, "model layers")->capture_default_str();
  command->add_option("--requests", o.requests, "requests in the prefill batch")
      ->capture_default_str();
  command->add_option("--prompt-len", o.prompt_len, "tokens per prompt")->capture_default_str();
  command->add_option("--new-tokens", o.new_tokens, "tokens generated per request")
      ->capture_default_str();
  command->add_option("--seed", o.seed, "seed of the prompts")->capture_default_str();
  command->add_option("--model-seed", o.model.seed, "seed of the weights")->capture_default_str();
  command
      ->add_option("--dispatch-wait-us", o.dispatch_wait_us,
                   "latency of the remote counter each dispatch spins on")
      ->capture_default_str();
  command
      ->add_option("--bookkeeping-us", o.bookkeeping_us,
                   "interpreter-lock work of the transfer per layer and request")
      ->capture_default_str();
  command
      ->add_option("--switch-interval-us", o.switch_interval_us,
                   "wait after which a thread asks the lock holder to switch")
      ->capture_default_str();
  command->add_option("--cache", args->cache, "decode state cache: f32 | bf16 | int8")
      ->capture_default_str();
  command->add_option("--decode-variant", args->decode_variant, "tiled | merged")
      ->capture_default_str();
  command->add_flag("--w8a8", o.model.w8a8, "W8A8 linear layers");
  command
      ->add_option("--drop-state-layer", o.drop_state_layer,
                   "fault injection: never ship this layer's states")
      ->capture_default_str();
  command->add_flag("--swap-requests", o.swap_requests,
                    "fault injection: deliver request 0's states as request 1's and back");
  command->add_flag("--no-verify", args->no_verify,
                    "skip digest and completeness checks at the decode side");
  command->add_option("--trace", o.trace_path, "record a loupe trace into this file");
  command->add_flag("--json", args->json, "print one JSON object");
  command->callback([args, &exit_code] {
    serve::ServeOptions options = args->options;
    options.mode = serve::parse_mode(args->mode);
    options.cache_dtype = model::parse_cache_dtype(args->cache);
    options.model.decode_variant = kernels::cpu::parse_decode_variant(args->decode_variant);
    options.verify_digests = !args->no_verify;
    const serve::ServeResult result = serve::run_server(options);
    if (args->json) {
      std::cout << serve::result_json(options, result) << "\n";
    } else {
      print_text(options, result);
    }
    exit_code = 0;
  });
}

}  // namespace kda::cli
