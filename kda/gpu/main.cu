// kda/gpu/main.cu — kda_gpu: checks and times kda's CUDA kernels on one GPU, standalone.
//   kda_gpu [--check] [--cp] [--time] [--prefill] [--quick] [--seed N] [--samples N] [--json FILE]
// With no mode flag it runs the first three (--prefill, minutes at full size, only when asked).
// Prints one line per result, a compact summary last, and writes every result (raw timing samples
// included) to the JSON file. Exit: 0 every check passed; 1 a check failed; 2 bad usage; 3 a CUDA
// call failed; 4 no usable CUDA device: none, or not sm_90 (nothing ran — callers skip on this
// code).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "kda/gpu/harness.cuh"

namespace kda::gpu {

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";  // JSON has no NaN; the record's "passed" says why
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.9g", value);
  return buffer;
}

namespace {
std::string json_string(const std::string& value) {
  std::string out = "\"";
  for (char c : value) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
      out += buffer;
      continue;
    }
    out += c;
  }
  return out + "\"";
}
}  // namespace

std::string json_array(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? "," : "") + items[i];
  return out + "]";
}

void JsonObject::key(const std::string& name) {
  if (!body_.empty()) body_ += ",";
  body_ += json_string(name) + ":";
}
JsonObject& JsonObject::add(const std::string& name, double value) {
  key(name);
  body_ += json_number(value);
  return *this;
}
JsonObject& JsonObject::add(const std::string& name, int64_t value) {
  key(name);
  body_ += std::to_string(value);
  return *this;
}
JsonObject& JsonObject::add(const std::string& name, bool value) {
  key(name);
  body_ += value ? "true" : "false";
  return *this;
}
JsonObject& JsonObject::add(const std::string& name, const std::string& value) {
  key(name);
  body_ += json_string(value);
  return *this;
}
JsonObject& JsonObject::add(const std::string& name, const std::vector<double>& values) {
  std::vector<std::string> items;
  for (double value : values) items.push_back(json_number(value));
  return add_raw(name, json_array(items));
}
JsonObject& JsonObject::add_raw(const std::string& name, const std::string& json) {
  key(name);
  body_ += json;
  return *this;
}

}  // namespace kda::gpu

namespace {

using kda::gpu::Result;

void print_usage() {
  std::printf(
      "usage: kda_gpu [--check] [--cp] [--time] [--prefill] [--quick] [--batch B]... [--heads "
      "H]...\n"
      "               [--tokens T]... [--seed N] [--samples N] [--json FILE]\n"
      "  --check    every CUDA kernel against the fp64 CPU reference\n"
      "  --cp       incident 1: CP merge drift of TF32 / 3xTF32 / fp32 on hardware\n"
      "  --time     decode timing, tiled vs merged, batch {1,8,32,128,256} x H {32,64}\n"
      "  --quick    fewer points (a smoke run)\n"
      "  --prefill  the chunked prefill vs the fp64 recurrence and its bf16 floor, T {1024,8192,"
      "65536}\n"
      "             x H {16,32,64}, slow and fast gates, and GVA (H=2, HV=4); then CP (T=65536,\n"
      "             H=4, 16 shards), T=1000 and the varlen mix [1300,547,2048,963,271,3063]\n"
      "  --batch B, --heads H  time only these shapes (repeatable; e.g. for ncu)\n"
      "  --tokens T, --heads H  --prefill at these T and H only (repeatable)\n"
      "  (no mode flag: --check --cp --time)\n");
}

// Finds the timing record of (batch, H, mode) by its name.
const Result* find_timing(const std::vector<Result>& results, int batch, int heads,
                          const std::string& mode) {
  const std::string name =
      "B=" + std::to_string(batch) + " H=" + std::to_string(heads) + " " + mode;
  for (const auto& result : results) {
    if (result.mode == "decode_timing" && result.name == name) return &result;
  }
  return nullptr;
}

// Pulls a number out of a record written by JsonObject ("key":value): the records are ours.
double number_after(const std::string& json, const std::string& key, size_t from = 0) {
  const std::string needle = "\"" + key + "\":";
  const size_t at = json.find(needle, from);
  if (at == std::string::npos) return NAN;
  return std::strtod(json.c_str() + at + needle.size(), nullptr);
}

std::string string_after(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\":\"";
  const size_t at = json.find(needle);
  if (at == std::string::npos) return "?";
  const size_t end = json.find('"', at + needle.size());
  return json.substr(at + needle.size(), end - at - needle.size());
}

double kernel_median(const Result& result, const std::string& kernel) {
  const std::string json = result.record.str();
  const size_t at = json.find("\"" + kernel + "\":{");
  return at == std::string::npos ? NAN : number_after(json, "median_us", at);
}

struct Target {
  std::string name, figure;
  bool met;
};

void print_summary(const std::vector<Result>& results, std::vector<Target>& targets) {
  int checks = 0, checks_passed = 0;
  for (const auto& result : results) {
    if (!result.gated || result.mode == "decode_timing") continue;
    ++checks;
    checks_passed += result.passed;
  }
  std::printf("\n== kda_gpu summary ==\n");
  std::printf("checks and gated CP points passed: %d / %d\n", checks_passed, checks);
  for (const auto& result : results) {
    if (result.gated && !result.passed && result.mode != "decode_timing") {
      std::printf("  FAILED: %s %s\n", result.mode.c_str(), result.name.c_str());
    }
  }
  bool any_prefill = false;
  for (const auto& result : results) {
    if (result.mode != "prefill") continue;
    if (!any_prefill) {
      std::printf(
          "prefill vs fp64 recurrence (rms ratio; /floor = the GPU's error over the bf16 "
          "floor's):\n  %-34s %-10s %-10s %-7s %-10s %-7s\n",
          "point", "o gpu", "o floor", "/floor", "S gpu", "/floor");
    }
    any_prefill = true;
    const std::string json = result.record.str();
    std::printf("  %-34s %-10.3e %-10.3e %-7.3f %-10.3e %-7.3f %s\n", result.name.c_str(),
                number_after(json, "o_rms_ratio_gpu_vs_fp64"),
                number_after(json, "o_rms_ratio_floor_vs_fp64"),
                number_after(json, "o_gpu_over_floor"),
                number_after(json, "state_rms_ratio_gpu_vs_fp64"),
                number_after(json, "state_gpu_over_floor"), result.passed ? "pass" : "FAIL");
  }
  bool any_cp = false;
  for (const auto& result : results) {
    if (result.mode != "cp_drift") continue;
    if (!any_cp) std::printf("cp drift rms ratio at shard boundaries vs fp64 non-CP chain:\n");
    any_cp = true;
    std::printf("  %-40s %.2e\n", result.name.c_str(),
                number_after(result.record.str(), "rms_ratio"));
  }
  bool any_time = false;
  for (int heads : {32, 64}) {
    for (int batch : {1, 8, 32, 128, 256}) {
      const Result* cold = find_timing(results, batch, heads, "stream_cold");
      const Result* hot = find_timing(results, batch, heads, "stream_hot");
      const Result* graph_cold = find_timing(results, batch, heads, "graph_cold");
      const Result* graph_hot = find_timing(results, batch, heads, "graph_hot");
      if (!cold || !hot || !graph_cold || !graph_hot) continue;
      if (!any_time) {
        std::printf(
            "decode, us per call (median); cold = state rotated over >= 2x L2; ratio = merged/tiled"
            " cold [95%% CI]\n"
            "  B    H | tiled cold merged cold | ratio  [ci]          verdict   | merged TB/s |"
            " graph cold t/m     | graph hot t/m      | hot t/m\n");
      }
      any_time = true;
      const std::string json = cold->record.str();
      const double merged_cold = kernel_median(*cold, "merged");
      const double bytes = number_after(json, "state_bytes_per_call");
      std::printf(
          "  %-4d %-2d| %10.2f %11.2f | %.3f [%.3f,%.3f] %-9s | %11.2f | %8.2f %8.2f | "
          "%8.2f %8.2f | %8.2f %8.2f\n",
          batch, heads, kernel_median(*cold, "tiled"), merged_cold,
          number_after(json, "ratio_merged_over_tiled"), number_after(json, "ratio_ci95_low"),
          number_after(json, "ratio_ci95_high"),
          string_after(json, "verdict_merged_vs_tiled").c_str(),
          bytes / (merged_cold * 1e-6) / 1e12, kernel_median(*graph_cold, "tiled"),
          kernel_median(*graph_cold, "merged"), kernel_median(*graph_hot, "tiled"),
          kernel_median(*graph_hot, "merged"), kernel_median(*hot, "tiled"),
          kernel_median(*hot, "merged"));
      if (batch >= 32) {
        const std::string verdict = string_after(json, "verdict_merged_vs_tiled");
        char figure[96];
        std::snprintf(figure, sizeof(figure), "ratio %.3f, %s",
                      number_after(json, "ratio_merged_over_tiled"), verdict.c_str());
        targets.push_back({"merged FASTER than tiled, B=" + std::to_string(batch) +
                               " H=" + std::to_string(heads) + " cold",
                           figure, verdict == "FASTER"});
      }
      if (batch == 256 && heads == 64) {
        char figure[64];
        const double tb = bytes / (merged_cold * 1e-6) / 1e12;
        std::snprintf(figure, sizeof(figure), "%.2f TB/s", tb);
        targets.push_back({"merged B=256 H=64 cold >= 3.5 TB/s", figure, tb >= 3.5});
      }
      if (batch == 1) {
        const double best =
            std::fmin(kernel_median(*graph_cold, "tiled"), kernel_median(*graph_cold, "merged"));
        char figure[96];
        std::snprintf(
            figure, sizeof(figure), "%.2f us (hot %.2f us)", best,
            std::fmin(kernel_median(*graph_hot, "tiled"), kernel_median(*graph_hot, "merged")));
        targets.push_back(
            {"B=1 H=" + std::to_string(heads) + " CUDA graph cold <= 10 us (best kernel)", figure,
             best <= 10.0});
      }
    }
  }
  for (const auto& result : results) {
    if (result.name == "copy_bandwidth") {
      std::printf("copy bandwidth (1 GiB D2D, read + write): %.2f TB/s\n",
                  number_after(result.record.str(), "median_tb_per_s"));
    }
  }
  if (!targets.empty()) std::printf("issue 9 targets:\n");
  for (const auto& target : targets) {
    std::printf("  %-52s %-28s %s\n", target.name.c_str(), target.figure.c_str(),
                target.met ? "MET" : "MISSED");
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kda::gpu;
  HarnessOptions options;
  bool check = false, cp = false, time = false, prefill = false;
  std::string json_path = "kda_gpu.json";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "kda_gpu: %s expects a value\n", flag);
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--check") {
      check = true;
    } else if (arg == "--cp") {
      cp = true;
    } else if (arg == "--time") {
      time = true;
    } else if (arg == "--prefill") {
      prefill = true;
    } else if (arg == "--quick") {
      options.quick = true;
    } else if (arg == "--seed") {
      options.seed = std::strtoull(value("--seed").c_str(), nullptr, 10);
    } else if (arg == "--samples") {
      options.samples = std::atoi(value("--samples").c_str());
      if (options.samples < 4) {
        std::fprintf(stderr, "kda_gpu: --samples must be at least 4\n");
        return 2;
      }
    } else if (arg == "--batch" || arg == "--heads") {
      const std::string flag = arg;
      const std::string text = value(flag.c_str());
      char* end = nullptr;
      const long number = std::strtol(text.c_str(), &end, 10);
      if (end == text.c_str() || *end != '\0' || number < 1 || number > 4096) {
        std::fprintf(stderr, "kda_gpu: %s expects an integer in [1, 4096], got '%s'\n",
                     flag.c_str(), text.c_str());
        return 2;
      }
      (flag == "--batch" ? options.batches : options.head_counts)
          .push_back(static_cast<int>(number));
    } else if (arg == "--tokens") {
      const std::string text = value("--tokens");
      char* end = nullptr;
      const long number = std::strtol(text.c_str(), &end, 10);
      if (end == text.c_str() || *end != '\0' || number < 64 || number > 1048576 ||
          number % 64 != 0) {
        std::fprintf(stderr,
                     "kda_gpu: --tokens expects a multiple of 64 in [64, 1048576], got '%s'\n",
                     text.c_str());
        return 2;
      }
      options.token_counts.push_back(static_cast<int>(number));
    } else if (arg == "--json") {
      json_path = value("--json");
    } else if (arg == "--help" || arg == "-h") {
      print_usage();
      return 0;
    } else {
      std::fprintf(stderr, "kda_gpu: unknown argument '%s'\n", arg.c_str());
      print_usage();
      return 2;
    }
  }
  if (!check && !cp && !time && !prefill) check = cp = time = true;

  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::printf("kda_gpu: no CUDA device (%s); nothing ran\n",
                cudaGetErrorString(cudaGetLastError()));
    return 4;
  }
  cudaDeviceProp first_device;
  if (cudaGetDeviceProperties(&first_device, 0) == cudaSuccess && first_device.major != 9) {
    // The kernels are built for sm_90a only: another GPU could not load them.
    std::printf(
        "kda_gpu: device 0 is %s (sm_%d%d); the kernels are built for sm_90a only; "
        "nothing ran\n",
        first_device.name, first_device.major, first_device.minor);
    return 4;
  }
  std::vector<Result> results;
  int exit_code = 0;
  try {
    cudaDeviceProp device;
    KDA_CUDA_CHECK(cudaGetDeviceProperties(&device, 0));
    int driver = 0, runtime = 0;
    KDA_CUDA_CHECK(cudaDriverGetVersion(&driver));
    KDA_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    std::printf(
        "device: %s, sm_%d%d, %d SMs, L2 %.1f MB, %.1f GB; driver %d, runtime %d; seed %llu\n",
        device.name, device.major, device.minor, device.multiProcessorCount,
        device.l2CacheSize / 1e6, device.totalGlobalMem / 1e9, driver, runtime,
        static_cast<unsigned long long>(options.seed));
    Result environment;
    environment.mode = "environment";
    environment.name = "device";
    environment.record.add("device", device.name)
        .add("compute_capability",
             std::to_string(device.major) + "." + std::to_string(device.minor))
        .add("multiprocessors", device.multiProcessorCount)
        .add("l2_bytes", device.l2CacheSize)
        .add("global_memory_bytes", static_cast<int64_t>(device.totalGlobalMem))
        .add("driver_version", driver)
        .add("runtime_version", runtime)
        .add("seed", static_cast<int64_t>(options.seed))
        .add("samples", options.samples)
        .add("quick", options.quick);
    results.push_back(std::move(environment));
    if (check) run_checks(options, results);
    if (cp) run_cp_drift(options, results);
    if (time) run_decode_timing(options, results);
    if (prefill) run_prefill_check(options, results);
  } catch (const CudaFailure& failure) {
    std::printf("kda_gpu: CUDA failure: %s\n", failure.what());
    exit_code = 3;
  }
  std::vector<struct Target> targets;
  print_summary(results, targets);
  for (const auto& result : results) {
    if (result.gated && !result.passed && exit_code == 0) exit_code = 1;
  }
  std::vector<std::string> items;
  for (const auto& result : results) {
    JsonObject item;
    item.add("mode", result.mode).add("name", result.name).add("gated", result.gated);
    item.add("passed", result.passed).add_raw("record", result.record.str());
    items.push_back(item.str());
  }
  std::vector<std::string> target_items;
  for (const auto& target : targets) {
    JsonObject item;
    item.add("target", target.name).add("figure", target.figure).add("met", target.met);
    target_items.push_back(item.str());
  }
  JsonObject document;
  document.add("tool", "kda_gpu").add("exit_code", exit_code);
  document.add_raw("results", json_array(items)).add_raw("targets", json_array(target_items));
  std::ofstream out(json_path);
  out << document.str() << "\n";
  if (!out) {
    std::fprintf(stderr, "kda_gpu: cannot write %s\n", json_path.c_str());
    return exit_code ? exit_code : 2;
  }
  std::printf("results: %s (exit %d)\n", json_path.c_str(), exit_code);
  return exit_code;
}
