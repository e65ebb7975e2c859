// Trace ingest and analysis throughput on synthetic traces written once per run:
//   chrome_json_import   a Kineto-shaped JSON file (bytes/s, mean of 10 loads, freeing the model
//                        untimed; best_MB/s: the fastest load); cold:1 frees the retained parser
//                        before each load (a one-shot CLI import), cold:0 reuses it
//   binary_import        a loupe binary file recorded through the public API (events/s; best_...)
//   analyze_1m_events    load + breakdown + overlap + locks + gaps over ~1 M events
//   analyze_kineto_default  load + the default analyses of the 50 MB Kineto file (GPU analyses on)
//   load_eight_ranks     eight ~20 MB Kineto rank files (NCCL all-gathers every 16 kernels) loaded
//                        on `threads` workers (1: the serial import), wall time
//   analyze_eight_ranks  the same load on one worker per core + the default analyses (collectives
//                        matched across the ranks), wall time
//   analyze_large_kineto `loupe trace analyze FILE`'s work on the file LOUPE_INGEST_LARGE_FILE
//                        names (bench/trace/multiply_kineto.py writes one of any size): wall and
//                        CPU time, and the process's peak resident memory against the file's size;
//                        skipped without it
//   analyses_threads     the default analyses alone on a loaded model, on 1 or 2 threads (the
//                        TaskPool; 1: one after another): that file when set, else the 50 MB one
// Run: build/bin/trace_ingest_bench
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "loupe/trace.hpp"
#include "trace/analyze/analyze.hpp"
#include "trace/import/import.hpp"

namespace {

namespace fs = std::filesystem;
using loupe::trace::load_traces;

const fs::path kDir = fs::temp_directory_path();

// ~230 bytes per event, like the PyTorch profiler's: one CPU thread launching kernels on a stream.
const std::string& chrome_json_path() {
  static const std::string path = [] {
    const std::string file = (kDir / "loupe_ingest_bench.json").string();
    std::ofstream out(file);
    out << "{\"schemaVersion\":1,\"traceEvents\":[\n";
    constexpr int kKernels = 100000;
    for (int index = 0; index < kKernels; ++index) {
      const double ts = index * 10.0;
      out << "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":4242,"
             "\"tid\":4242,\"ts\":"
          << ts << ".125,\"dur\":3.5,\"args\":{\"correlation\":" << index << "}},\n";
      out << "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"sm90_xmma_gemm_bf16bf16_bf16f32\","
             "\"pid\":0,\"tid\":7,\"ts\":"
          << ts + 4 << ".5,\"dur\":5.25,\"args\":{\"correlation\":" << index
          << ",\"stream\":7,\"device\":0,\"grid\":[132,1,1],\"block\":[384,1,1]}},\n";
      out << "{\"ph\":\"s\",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"id\":" << index
          << ",\"pid\":4242,\"tid\":4242,\"ts\":" << ts + 1 << "},\n";
      out << "{\"ph\":\"f\",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"id\":" << index
          << ",\"pid\":0,\"tid\":7,\"ts\":" << ts + 4 << ".5,\"bp\":\"e\"}"
          << (index + 1 == kKernels ? "\n" : ",\n");
    }
    out << "]}\n";
    return file;
  }();
  return path;
}

// Eight ranks' Kineto traces of ~20 MB each (the shape of tests/integration/multirank's): a CPU
// thread launching kernels, compute kernels and an NCCL all-gather every 16 kernels with Kineto's
// args; rank r arrives r x 3 us late at each collective.
const std::vector<std::string>& rank_paths() {
  static const std::vector<std::string> paths = [] {
    constexpr int kRanks = 8;
    constexpr int kKernels = 90000;
    std::vector<std::string> files;
    for (int rank = 0; rank < kRanks; ++rank) {
      const std::string file =
          (kDir / ("loupe_ingest_bench_rank-" + std::to_string(rank) + ".json")).string();
      std::ofstream out(file);
      out << "{\"schemaVersion\":1,\"distributedInfo\":{\"backend\":\"nccl\",\"rank\":" << rank
          << ",\"world_size\":" << kRanks << "},\"traceEvents\":[\n";
      for (int index = 0; index < kKernels; ++index) {
        const bool collective = index % 16 == 15;
        const double ts = index * 10.0 + (collective ? rank * 3.0 : 0.0);
        out << "{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\","
               "\"pid\":4242,\"tid\":4242,\"ts\":"
            << ts << ",\"dur\":3.5,\"args\":{\"correlation\":" << index << "}},\n";
        out << "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\""
            << (collective ? "ncclDevKernel_AllGather_RING_LL" : "sm90_xmma_gemm_bf16bf16_bf16f32")
            << "\",\"pid\":0,\"tid\":7,\"ts\":" << ts + 4
            << ",\"dur\":5.25,\"args\":{\"correlation\":" << index << ",\"stream\":7";
        if (collective) {
          out << ",\"Collective name\":\"_allgather_base\",\"In msg nelems\":4096,"
                 "\"Out msg nelems\":"
              << 4096 * kRanks << ",\"Group size\":" << kRanks
              << ",\"Process Group Name\":\"0\",\"Seq\":" << index / 16;
        }
        out << "}}" << (index + 1 == kKernels ? "\n" : ",\n");
      }
      out << "]}\n";
      files.push_back(file);
    }
    return files;
  }();
  return paths;
}

// Two threads, each `zones` zones (two events each) under a traced lock every 8 zones.
std::string record_binary(const std::string& name, int zones) {
  const std::string file = (kDir / name).string();
  loupe::trace::Options options;
  options.events_per_thread = static_cast<uint64_t>(zones) * 3;
  loupe::trace::start(file, options);
  loupe::trace::TracedMutex lock("bench_lock");
  auto work = [&](const char* thread_name, const char* zone_name) {
    LOUPE_THREAD_NAME(thread_name);
    for (int index = 0; index < zones; ++index) {
      if (index % 8 == 0) {
        std::lock_guard guard(lock);
        LOUPE_ZONE("critical");
      } else {
        LOUPE_ZONE_DYNAMIC(zone_name);
      }
    }
  };
  std::thread first(work, "prefill", "moe_dispatch");
  std::thread second(work, "transfer", "kv_transfer_layer");
  first.join();
  second.join();
  loupe::trace::stop();
  return file;
}

// CPU time of this thread, for the best single load: on a shared machine the minimum is the
// figure least disturbed by other processes (the mean is reported as well).
double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

// `cold`: the thread's retained parser is freed before every load, so each one pays for a fresh
// structural index, as a one-shot `loupe trace analyze FILE` does; otherwise later loads reuse it,
// as a second file, `trace diff` or the MCP server do.
void chrome_json_import(benchmark::State& state) {
  const std::string& path = chrome_json_path();
  const bool cold = state.range(0) != 0;
  double best = 1e300;
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      loupe::trace::release_import_buffers();
      state.ResumeTiming();
    }
    const double begin = thread_cpu_seconds();
    auto model = std::make_unique<loupe::trace::Model>(load_traces({path}));
    benchmark::DoNotOptimize(model->slices.size());
    best = std::min(best, thread_cpu_seconds() - begin);
    // Import ends with the model built; freeing it is the caller's, not the importer's, time.
    state.PauseTiming();
    model.reset();
    state.ResumeTiming();
  }
  const auto bytes = static_cast<double>(fs::file_size(path));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  state.counters["best_MB/s"] = bytes / best / 1e6;
}
BENCHMARK(chrome_json_import)
    ->ArgName("cold")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(10);

void binary_import(benchmark::State& state) {
  static const std::string path = record_binary("loupe_ingest_bench_500k.loupetrace", 250000);
  uint64_t events = 0;
  double best = 1e300;
  for (auto _ : state) {
    const double begin = thread_cpu_seconds();
    auto model = std::make_unique<loupe::trace::Model>(load_traces({path}));
    events = model->files[0].events;
    benchmark::DoNotOptimize(model->slices.size());
    best = std::min(best, thread_cpu_seconds() - begin);
    state.PauseTiming();
    model.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * events));
  state.counters["best_Mevents/s"] = static_cast<double>(events) / best / 1e6;
}
BENCHMARK(binary_import)->Unit(benchmark::kMillisecond)->Iterations(10);

void analyze_1m_events(benchmark::State& state) {
  static const std::string path = record_binary("loupe_ingest_bench_1m.loupetrace", 480000);
  loupe::trace::AnalyzeRequest request;
  request.classes = {loupe::trace::parse_class("dispatch=name:^moe_dispatch$"),
                     loupe::trace::parse_class("transfer=name:^kv_transfer")};
  request.overlap = std::make_pair("transfer", "dispatch");
  uint64_t events = 0;
  for (auto _ : state) {
    const loupe::trace::Model model = load_traces({path});
    const loupe::Envelope envelope = loupe::trace::analyze(model, request);
    events = model.files[0].events;
    benchmark::DoNotOptimize(envelope.findings.size());
  }
  state.counters["events"] = static_cast<double>(events);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * events));
}
BENCHMARK(analyze_1m_events)->Unit(benchmark::kMillisecond)->Iterations(3);

// The 50 MB Kineto-shaped trace (400 k events: launches, kernels, ac2g flows) loaded and analysed
// with no options, as `loupe trace analyze FILE` does: on a trace with GPU activity that runs the
// default GPU analyses.
void analyze_kineto_default(benchmark::State& state) {
  const std::string& path = chrome_json_path();
  const loupe::trace::AnalyzeRequest request;
  uint64_t events = 0;
  for (auto _ : state) {
    const loupe::trace::Model model = load_traces({path});
    const loupe::Envelope envelope = loupe::trace::analyze(model, request);
    events = model.files[0].events;
    benchmark::DoNotOptimize(envelope.findings.size());
  }
  state.counters["events"] = static_cast<double>(events);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * events));
}
BENCHMARK(analyze_kineto_default)->Unit(benchmark::kMillisecond)->Iterations(5);

// Eight rank files loaded on `threads` workers (1: one after the other on this thread). Wall time:
// the workers' CPU is not this thread's.
void load_eight_ranks(benchmark::State& state) {
  const std::vector<std::string>& paths = rank_paths();
  const auto threads = static_cast<unsigned>(state.range(0));
  uint64_t bytes = 0;
  for (const std::string& path : paths) bytes += fs::file_size(path);
  for (auto _ : state) {
    auto model = std::make_unique<loupe::trace::Model>(load_traces(paths, false, {}, threads));
    benchmark::DoNotOptimize(model->slices.size());
    state.PauseTiming();
    model.reset();
    state.ResumeTiming();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(load_eight_ranks)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);

// The eight rank files loaded on one worker per core and analysed as `loupe trace analyze
// rank-*.json` does: the collectives matched across ranks, the straggler, overlap per rank.
void analyze_eight_ranks(benchmark::State& state) {
  const std::vector<std::string>& paths = rank_paths();
  const loupe::trace::AnalyzeRequest request;
  for (auto _ : state) {
    const loupe::trace::Model model = load_traces(paths);
    const loupe::Envelope envelope = loupe::trace::analyze(model, request);
    benchmark::DoNotOptimize(envelope.findings.size());
  }
}
BENCHMARK(analyze_eight_ranks)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

// A file as large as real jobs write (bench/trace/multiply_kineto.py multiplies a recorded Kineto
// trace to any size), loaded and analysed with no options. The peak resident memory is the
// process's (getrusage), so run this case alone: --benchmark_filter=analyze_large_kineto.
void analyze_large_kineto(benchmark::State& state) {
  const char* path = std::getenv("LOUPE_INGEST_LARGE_FILE");
  if (path == nullptr || !fs::exists(path)) {
    state.SkipWithError(
        "set LOUPE_INGEST_LARGE_FILE to a Kineto file (bench/trace/multiply_kineto.py writes one)");
    return;
  }
  const loupe::trace::AnalyzeRequest request;
  uint64_t events = 0;
  double cpu_seconds = 0;
  for (auto _ : state) {
    rusage before{};
    getrusage(RUSAGE_SELF, &before);
    const loupe::trace::Model model = load_traces({path});
    const loupe::Envelope envelope = loupe::trace::analyze(model, request);
    events = model.files[0].events;
    benchmark::DoNotOptimize(envelope.findings.size());
    rusage after{};
    getrusage(RUSAGE_SELF, &after);
    auto seconds = [](const timeval& time) { return time.tv_sec + time.tv_usec / 1e6; };
    cpu_seconds += seconds(after.ru_utime) - seconds(before.ru_utime) + seconds(after.ru_stime) -
                   seconds(before.ru_stime);
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto bytes = static_cast<double>(fs::file_size(path));
  const double peak = static_cast<double>(usage.ru_maxrss) * 1024;  // kilobytes on Linux
  state.counters["file_MB"] = bytes / 1e6;
  state.counters["events"] = static_cast<double>(events);
  state.counters["cpu_s"] = cpu_seconds / static_cast<double>(state.iterations());
  state.counters["peak_MB"] = peak / 1e6;
  state.counters["peak_per_file"] = peak / bytes;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}
BENCHMARK(analyze_large_kineto)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

// The default analyses alone (the model loaded once, untimed) on `threads` threads (1: one after
// another, as before the TaskPool), wall time: LOUPE_INGEST_LARGE_FILE's file when set, else the
// 50 MB Kineto file.
void analyses_threads(benchmark::State& state) {
  const char* large = std::getenv("LOUPE_INGEST_LARGE_FILE");
  const std::string path =
      large != nullptr && fs::exists(large) ? std::string(large) : chrome_json_path();
  static std::string loaded_path;
  static std::unique_ptr<loupe::trace::Model> model;
  if (loaded_path != path) {
    model.reset();
    model = std::make_unique<loupe::trace::Model>(load_traces({path}));
    loaded_path = path;
  }
  loupe::trace::AnalyzeRequest request;
  request.threads = static_cast<unsigned>(state.range(0));
  for (auto _ : state) {
    const loupe::Envelope envelope = loupe::trace::analyze(*model, request);
    benchmark::DoNotOptimize(envelope.findings.size());
  }
  state.counters["events"] = static_cast<double>(model->files[0].events);
}
BENCHMARK(analyses_threads)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(5);

}  // namespace

BENCHMARK_MAIN();
