// Recording overhead: a zone (begin + end) enabled and disabled, and a traced mutex against a
// plain std::mutex, uncontended. Run: build/bin/trace_record_bench (median of 5 repetitions).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <mutex>

#include "loupe/trace.hpp"

namespace {

const std::string kPath =
    (std::filesystem::temp_directory_path() / "loupe_record_bench.loupetrace").string();

// A ring buffer never fills, so every iteration records.
void start_ring() {
  loupe::trace::Options options;
  options.events_per_thread = 1u << 20;
  options.mode = loupe::trace::BufferMode::kRing;
  loupe::trace::start(kPath, options);
}

void stop_and_clean() {
  loupe::trace::stop();
  std::filesystem::remove(kPath);
}

void zone_enabled(benchmark::State& state) {
  start_ring();
  for (auto _ : state) {
    LOUPE_ZONE("bench_zone");
    benchmark::ClobberMemory();
  }
  stop_and_clean();
}
BENCHMARK(zone_enabled)->Repetitions(5)->ReportAggregatesOnly(true);

void zone_disabled(benchmark::State& state) {
  for (auto _ : state) {
    LOUPE_ZONE("bench_zone");
    benchmark::ClobberMemory();
  }
}
BENCHMARK(zone_disabled)->Repetitions(5)->ReportAggregatesOnly(true);

void zone_dynamic_name_enabled(benchmark::State& state) {
  start_ring();
  const std::string name = "dynamic_zone";
  for (auto _ : state) {
    LOUPE_ZONE_DYNAMIC(name);
    benchmark::ClobberMemory();
  }
  stop_and_clean();
}
BENCHMARK(zone_dynamic_name_enabled)->Repetitions(5)->ReportAggregatesOnly(true);

void std_mutex_uncontended(benchmark::State& state) {
  std::mutex mutex;
  for (auto _ : state) {
    mutex.lock();
    benchmark::ClobberMemory();
    mutex.unlock();
  }
}
BENCHMARK(std_mutex_uncontended)->Repetitions(5)->ReportAggregatesOnly(true);

void traced_mutex_uncontended_enabled(benchmark::State& state) {
  loupe::trace::TracedMutex mutex("bench_lock");
  start_ring();
  for (auto _ : state) {
    mutex.lock();
    benchmark::ClobberMemory();
    mutex.unlock();
  }
  stop_and_clean();
}
BENCHMARK(traced_mutex_uncontended_enabled)->Repetitions(5)->ReportAggregatesOnly(true);

void traced_mutex_uncontended_disabled(benchmark::State& state) {
  loupe::trace::TracedMutex mutex("bench_lock");
  for (auto _ : state) {
    mutex.lock();
    benchmark::ClobberMemory();
    mutex.unlock();
  }
}
BENCHMARK(traced_mutex_uncontended_disabled)->Repetitions(5)->ReportAggregatesOnly(true);

}  // namespace

BENCHMARK_MAIN();
