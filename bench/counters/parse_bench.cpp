// Parsing ncu CSV exports: a ~100 MB details page (one row per launch × metric, quoted, with
// thousands separators and rule rows, as `ncu --csv` writes it) and a ~100 MB raw page (one row
// per launch, 300 metric columns), each written once per run under the temp directory.
//   details_page  read_ncu_csv of the details page (bytes/s; the file is in the page cache)
//   raw_page      read_ncu_csv of the raw page
//   analyze       read + group + findings of the details page
// Target: 100 MB in ≤ 2 s on the 2-core development machine. Run: build/bin/counters_parse_bench
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "counters/analyze.hpp"
#include "counters/profile.hpp"

namespace {

namespace fs = std::filesystem;
constexpr size_t kTargetBytes = size_t{100} << 20;

std::string prefix(int id, int kernel) {
  return "\"" + std::to_string(id) +
         "\",\"84211\",\"python3.11\",\"127.0.0.1\",\"void kda::cuda::" +
         (kernel % 2 ? std::string("merged_v_decode<128, true>") : "tiled_v_decode<32, true>") +
         "(const float *, const float *, float *, int, int)\",\"1\",\"7\",\"(128, 1, 1)\",\"(" +
         std::to_string(64 + kernel % 4) + ", 16, 1)\",\"0\",\"9.0\",";
}

const fs::path& details_file() {
  static const fs::path path = [] {
    const fs::path file = fs::temp_directory_path() / "loupe_counters_bench_details.csv";
    std::ofstream out(file);
    out << "==PROF== Connected to process 84211 (/usr/bin/python3.11)\n"
           "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\","
           "\"Stream\",\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric "
           "Name\",\"Metric Unit\",\"Metric Value\",\"Rule Name\",\"Rule Type\",\"Rule "
           "Description\",\"Estimated Speedup Type\",\"Estimated Speedup\"\n";
    const char* const sections[][4] = {
        {"GPU Speed Of Light Throughput", "DRAM Throughput", "%", "93.12"},
        {"GPU Speed Of Light Throughput", "Duration", "usecond", "542.30"},
        {"GPU Speed Of Light Throughput", "Elapsed Cycles", "cycle", "1,021,437"},
        {"GPU Speed Of Light Throughput", "L2 Cache Throughput", "%", "41.06"},
        {"Memory Workload Analysis", "Memory Throughput", "Tbyte/second", "3.96"},
        {"Compute Workload Analysis", "Executed Ipc Elapsed", "inst/cycle", "0.52"},
        {"Launch Statistics", "Registers Per Thread", "register/thread", "128"},
        {"Launch Statistics", "Static Shared Memory Per Block", "Kbyte/block", "16.38"},
        {"Occupancy", "Achieved Occupancy", "%", "23.47"},
        {"Warp State Statistics", "Warp Cycles Per Issued Instruction", "cycle", "12.07"},
    };
    int id = 0;
    while (static_cast<size_t>(out.tellp()) < kTargetBytes) {
      const std::string row = prefix(id, id);
      for (const auto& metric : sections) {
        out << row << '"' << metric[0] << "\",\"" << metric[1] << "\",\"" << metric[2] << "\",\""
            << metric[3] << "\",\"\",\"\",\"\",\"\",\"\"\n";
      }
      out << row
          << "\"Occupancy\",\"\",\"\",\"\",\"AchievedOccupancy\",\"OPT\",\"The difference "
             "between calculated theoretical (50.0%) and measured achieved occupancy (23.5%) can "
             "be the result of warp scheduling overheads or workload imbalances.\",\"local\","
             "\"53.05\"\n";
      ++id;
    }
    return file;
  }();
  return path;
}

const fs::path& raw_file() {
  static const fs::path path = [] {
    const fs::path file = fs::temp_directory_path() / "loupe_counters_bench_raw.csv";
    std::ofstream out(file);
    constexpr int kColumns = 300;
    out << "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\","
           "\"Stream\",\"Block Size\",\"Grid Size\",\"Device\",\"CC\"";
    for (int column = 0; column < kColumns; ++column)
      out << ",\"smsp__metric_" << column << ".sum.per_cycle_active\"";
    out << "\n\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\"";
    for (int column = 0; column < kColumns; ++column)
      out << (column % 3 == 0 ? ",\"Mbyte\"" : column % 3 == 1 ? ",\"%\"" : ",\"inst\"");
    out << "\n";
    int id = 0;
    while (static_cast<size_t>(out.tellp()) < kTargetBytes) {
      std::string row = prefix(id, id);
      row.pop_back();
      out << row;
      for (int column = 0; column < kColumns; ++column)
        out << (column % 3 == 0   ? ",\"3,210.51\""
                : column % 3 == 1 ? ",\"93.12\""
                                  : ",\"1,482,112\"");
      out << "\n";
      ++id;
    }
    return file;
  }();
  return path;
}

void read_file(benchmark::State& state, const fs::path& file) {
  const auto bytes = static_cast<int64_t>(fs::file_size(file));
  size_t launches = 0;
  for (auto _ : state) {
    loupe::StatsRegistry stats;
    const loupe::counters::Profile profile = loupe::counters::read_ncu_csv({file}, stats);
    launches = profile.launches.size();
    benchmark::DoNotOptimize(launches);
  }
  state.SetBytesProcessed(bytes * state.iterations());
  state.counters["MB"] = static_cast<double>(bytes) / 1e6;
  state.counters["launches"] = static_cast<double>(launches);
}

void details_page(benchmark::State& state) { read_file(state, details_file()); }
void raw_page(benchmark::State& state) { read_file(state, raw_file()); }

void analyze(benchmark::State& state) {
  const fs::path& file = details_file();
  for (auto _ : state) {
    loupe::StatsRegistry stats;
    const loupe::counters::Profile profile = loupe::counters::read_ncu_csv({file}, stats);
    const auto analysis = loupe::counters::analyze(profile, {});
    benchmark::DoNotOptimize(analysis.findings.size());
  }
  state.SetBytesProcessed(static_cast<int64_t>(fs::file_size(file)) * state.iterations());
}

BENCHMARK(details_page)->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(raw_page)->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(analyze)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // 200 MB of temporary files: not left behind.
  std::error_code ignored;
  fs::remove(fs::temp_directory_path() / "loupe_counters_bench_details.csv", ignored);
  fs::remove(fs::temp_directory_path() / "loupe_counters_bench_raw.csv", ignored);
  return 0;
}
