// Recording overhead: a zone (begin + end) enabled and disabled, and a traced mutex against a
// plain std::mutex, uncontended; next to them the floor a zone cannot go below, its two clock
// reads (TSC, and CLOCK_MONOTONIC for LOUPE_TRACE_NO_TSC=1). Run: build/bin/trace_record_bench
// (median of 5 repetitions); on a shared machine read the CPU column, pinned (taskset -c 1).
#include <benchmark/benchmark.h>
#include <time.h>

#include <filesystem>
#include <mutex>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define LOUPE_BENCH_HAS_TSC 1
#else
#define LOUPE_BENCH_HAS_TSC 0
#endif

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

#if LOUPE_BENCH_HAS_TSC
// Two back-to-back TSC reads, as a zone takes: the clock's share of zone_enabled.
void clock_tsc_pair(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(__rdtsc());
    benchmark::DoNotOptimize(__rdtsc());
  }
}
BENCHMARK(clock_tsc_pair)->Repetitions(5)->ReportAggregatesOnly(true);
#endif

void clock_monotonic_pair(benchmark::State& state) {
  timespec now{};
  for (auto _ : state) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    benchmark::DoNotOptimize(now);
    clock_gettime(CLOCK_MONOTONIC, &now);
    benchmark::DoNotOptimize(now);
  }
}
BENCHMARK(clock_monotonic_pair)->Repetitions(5)->ReportAggregatesOnly(true);

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
