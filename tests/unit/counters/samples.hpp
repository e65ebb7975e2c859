// tests/unit/counters/samples.hpp — HAND-MADE ncu CSV text for the unit tests, shaped like the
// documented format (header, one row per launch × metric, --page raw with a units row). The
// numbers are invented; the real exports are tests/fixtures/ncu (golden tests).
#pragma once

#include <string>
#include <vector>

namespace loupe::counters::samples {

inline const std::string kDetailsHeader =
    "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\","
    "\"Block Size\",\"Grid Size\",\"Device\",\"CC\",\"Section Name\",\"Metric Name\","
    "\"Metric Unit\",\"Metric Value\",\"Rule Name\",\"Rule Type\",\"Rule Description\","
    "\"Estimated Speedup Type\",\"Estimated Speedup\"\n";

inline std::string launch_prefix(int id, const std::string& kernel, const std::string& block,
                                 const std::string& grid) {
  return "\"" + std::to_string(id) + "\",\"4242\",\"kda_gpu\",\"127.0.0.1\",\"" + kernel +
         "\",\"1\",\"7\",\"" + block + "\",\"" + grid + "\",\"0\",\"9.0\",";
}

inline std::string metric_row(int id, const std::string& kernel, const std::string& section,
                              const std::string& name, const std::string& unit,
                              const std::string& value, const std::string& block = "(128, 1, 1)",
                              const std::string& grid = "(64, 16, 1)") {
  return launch_prefix(id, kernel, block, grid) + "\"" + section + "\",\"" + name + "\",\"" + unit +
         "\",\"" + value + "\",\"\",\"\",\"\",\"\",\"\"\n";
}

inline std::string rule_row(int id, const std::string& kernel, const std::string& section,
                            const std::string& rule, const std::string& type,
                            const std::string& description, const std::string& speedup_type,
                            const std::string& speedup) {
  return launch_prefix(id, kernel, "(128, 1, 1)", "(64, 16, 1)") + "\"" + section +
         "\",\"\",\"\",\"\",\"" + rule + "\",\"" + type + "\",\"" + description + "\",\"" +
         speedup_type + "\",\"" + speedup + "\"\n";
}

// A launch with the speed-of-light, occupancy and launch rows the findings read.
struct Shape {
  std::string dram = "93.10", l2 = "41.00", l1 = "22.30", sm = "18.00";
  std::string duration = "542.11", duration_unit = "usecond";
  std::string achieved = "23.50", theoretical = "50.00";
  std::string limit_registers = "4", limit_shared = "32", limit_warps = "16", limit_sm = "32";
  std::string registers = "128", grid_blocks = "1,024", sms = "132", waves = "1.94";
  std::string ipc = "0.52", cycles = "1,021,400";
};

inline std::string launch_rows(int id, const std::string& kernel, const Shape& shape = {}) {
  const std::string sol = "GPU Speed Of Light Throughput";
  std::string text;
  text += metric_row(id, kernel, sol, "DRAM Frequency", "Ghz", "2.62");
  text += metric_row(id, kernel, sol, "Elapsed Cycles", "cycle", shape.cycles);
  text += metric_row(id, kernel, sol, "Memory Throughput", "%", shape.dram);
  text += metric_row(id, kernel, sol, "DRAM Throughput", "%", shape.dram);
  text += metric_row(id, kernel, sol, "Duration", shape.duration_unit, shape.duration);
  text += metric_row(id, kernel, sol, "L1/TEX Cache Throughput", "%", shape.l1);
  text += metric_row(id, kernel, sol, "L2 Cache Throughput", "%", shape.l2);
  text += metric_row(id, kernel, sol, "Compute (SM) Throughput", "%", shape.sm);
  text += metric_row(id, kernel, "Memory Workload Analysis", "Memory Throughput", "Tbyte/second",
                     "3.96");
  text += metric_row(id, kernel, "Compute Workload Analysis", "Executed Ipc Elapsed", "inst/cycle",
                     shape.ipc);
  text += metric_row(id, kernel, "Launch Statistics", "Registers Per Thread", "register/thread",
                     shape.registers);
  text += metric_row(id, kernel, "Launch Statistics", "Grid Size", "", shape.grid_blocks);
  text += metric_row(id, kernel, "Launch Statistics", "# SMs", "SM", shape.sms);
  text += metric_row(id, kernel, "Launch Statistics", "Waves Per SM", "", shape.waves);
  text += metric_row(id, kernel, "Launch Statistics", "Function Cache Configuration", "",
                     "CachePreferNone");
  text +=
      metric_row(id, kernel, "Occupancy", "Block Limit Registers", "block", shape.limit_registers);
  text +=
      metric_row(id, kernel, "Occupancy", "Block Limit Shared Mem", "block", shape.limit_shared);
  text += metric_row(id, kernel, "Occupancy", "Block Limit Warps", "block", shape.limit_warps);
  text += metric_row(id, kernel, "Occupancy", "Block Limit SM", "block", shape.limit_sm);
  text += metric_row(id, kernel, "Occupancy", "Theoretical Occupancy", "%", shape.theoretical);
  text += metric_row(id, kernel, "Occupancy", "Achieved Occupancy", "%", shape.achieved);
  return text;
}

inline const std::string kRawLaunchColumns =
    "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\","
    "\"Block Size\",\"Grid Size\",\"Device\",\"CC\"";

// A raw page: the header, the units row, one row per launch.
inline std::string raw_page(const std::vector<std::string>& metrics,
                            const std::vector<std::string>& units,
                            const std::vector<std::pair<std::string, std::vector<std::string>>>&
                                launches /* kernel, values */) {
  std::string text = kRawLaunchColumns;
  for (const std::string& metric : metrics) text += ",\"" + metric + "\"";
  text += "\n\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\"";
  for (const std::string& unit : units) text += ",\"" + unit + "\"";
  text += "\n";
  int id = 0;
  for (const auto& [kernel, values] : launches) {
    std::string row = launch_prefix(id++, kernel, "(128, 1, 1)", "(64, 16, 1)");
    row.pop_back();  // the prefix ends with a comma
    for (const std::string& value : values) row += ",\"" + value + "\"";
    text += row + "\n";
  }
  return text;
}

}  // namespace loupe::counters::samples
