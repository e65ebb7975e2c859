// `kda generate`: seeded inputs (math/generator.hpp) written as the .npy files `kda kernel` reads.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kda/cli/commands.hpp"
#include "kda/math/generator.hpp"
#include "loupe/error.hpp"
#include "loupe/tensor.hpp"

namespace kda::cli {
namespace {

namespace fs = std::filesystem;

struct GenerateArgs {
  std::vector<int64_t> shape;
  std::string decay = "fast";
  uint64_t seed = 0;
  bool raw_qk = false;
  bool raw_decode = false;
  double h0_scale = 0.0;
  std::string out_dir;
};

void write_floats(const fs::path& path, const std::vector<float>& values,
                  std::vector<int64_t> shape) {
  loupe::Tensor tensor(loupe::DType::kF32, std::move(shape));
  auto data = tensor.mutable_data<float>();
  std::copy(values.begin(), values.end(), data.begin());
  loupe::write_npy(path, tensor);
}

void run_generate(const GenerateArgs& args) {
  if (args.shape.size() != 6) {
    throw loupe::Error(
        loupe::ErrorCode::kUsage,
        "--shape takes six numbers B,T,H,HV,K,V, got " + std::to_string(args.shape.size()),
        "e.g. --shape 1,4096,1,1,128,128");
  }
  const Shape shape{args.shape[0], args.shape[1], args.shape[2],
                    args.shape[3], args.shape[4], args.shape[5]};
  const fs::path out(args.out_dir);
  if (args.raw_decode) {
    // The decode probes' raw inputs: un-normalised q/k, the raw softplus gate and raw beta, with
    // the per-head A_log and dt_bias they need (`kda kernel decode --gate softplus --beta
    // sigmoid --l2norm`).
    const math::RawDecodeInputs raw = math::generate_raw_decode_inputs(shape, args.seed);
    fs::create_directories(out);
    write_floats(out / "q.npy", raw.q, {shape.batch, shape.tokens, shape.heads, shape.key_dim});
    write_floats(out / "k.npy", raw.k, {shape.batch, shape.tokens, shape.heads, shape.key_dim});
    write_floats(out / "v.npy", raw.v,
                 {shape.batch, shape.tokens, shape.value_heads, shape.value_dim});
    write_floats(out / "g.npy", raw.g_raw,
                 {shape.batch, shape.tokens, shape.value_heads, shape.key_dim});
    write_floats(out / "beta.npy", raw.b_raw, {shape.batch, shape.tokens, shape.value_heads});
    write_floats(out / "a_log.npy", raw.a_log, {shape.value_heads});
    write_floats(out / "dt_bias.npy", raw.dt_bias, {shape.value_heads, shape.key_dim});
    std::printf("kda generate: %s raw decode inputs seed=%llu -> %s\n", shape.to_string().c_str(),
                static_cast<unsigned long long>(args.seed), args.out_dir.c_str());
    return;
  }
  math::GeneratorOptions options;
  options.decay = math::parse_decay(args.decay);
  options.seed = args.seed;
  options.normalize_qk = !args.raw_qk;
  Inputs<float> inputs = math::generate_inputs(shape, options);
  validate_inputs(inputs);
  fs::create_directories(out);
  write_floats(out / "q.npy", inputs.q, {shape.batch, shape.tokens, shape.heads, shape.key_dim});
  write_floats(out / "k.npy", inputs.k, {shape.batch, shape.tokens, shape.heads, shape.key_dim});
  write_floats(out / "v.npy", inputs.v,
               {shape.batch, shape.tokens, shape.value_heads, shape.value_dim});
  write_floats(out / "g.npy", inputs.g,
               {shape.batch, shape.tokens, shape.value_heads, shape.key_dim});
  write_floats(out / "beta.npy", inputs.beta, {shape.batch, shape.tokens, shape.value_heads});
  if (args.h0_scale != 0.0) {
    math::NormalStream stream(args.seed ^ 0x5EEDull);
    std::vector<float> h0(
        static_cast<size_t>(shape.batch * shape.value_heads * shape.key_dim * shape.value_dim));
    for (auto& value : h0) value = static_cast<float>(args.h0_scale * stream.normal());
    write_floats(out / "h0.npy", h0,
                 {shape.batch, shape.value_heads, shape.key_dim, shape.value_dim});
  }
  std::printf("kda generate: %s decay=%s seed=%llu -> %s\n", shape.to_string().c_str(),
              args.decay.c_str(), static_cast<unsigned long long>(args.seed), args.out_dir.c_str());
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* command = app.add_subcommand(
      "generate",
      "Write seeded inputs (incident 1's distribution: keys in a 16-dim subspace + 10 % noise, "
      "beta = sigmoid(N(0,1)), slow or fast gates) as q,k,v,g,beta.npy (+ h0.npy)");
  command->add_option("--shape", args->shape, "B,T,H,HV,K,V")->required()->delimiter(',');
  command->add_option("--decay", args->decay, "slow or fast")
      ->check(CLI::IsMember({"slow", "fast"}))
      ->capture_default_str();
  command->add_option("--seed", args->seed, "generator seed")->capture_default_str();
  command->add_flag("--raw-qk", args->raw_qk, "leave q and k un-normalised (for --l2norm)");
  command->add_flag("--raw-decode", args->raw_decode,
                    "the decode probes' raw inputs: raw q/k, softplus gate g, raw beta, plus "
                    "a_log.npy (HV) and dt_bias.npy (HV,K)");
  command
      ->add_option("--h0-scale", args->h0_scale,
                   "write h0.npy with N(0, scale^2) entries; 0 writes none")
      ->capture_default_str();
  command->add_option("--out", args->out_dir, "output directory")->required();
  command->callback([args, &exit_code] {
    run_generate(*args);
    exit_code = 0;
  });
}

}  // namespace kda::cli
