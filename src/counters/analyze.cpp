#include "counters/analyze.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>

#include "core/statistics.hpp"
#include "counters/csv.hpp"
#include "loupe/error.hpp"

namespace loupe::counters {
namespace {

constexpr std::string_view kSol = "GPU Speed Of Light Throughput";
constexpr std::string_view kMemory = "Memory Workload Analysis";
constexpr std::string_view kCompute = "Compute Workload Analysis";
constexpr std::string_view kOccupancy = "Occupancy";
constexpr std::string_view kLaunch = "Launch Statistics";
constexpr std::string_view kWarps = "Warp State Statistics";
constexpr std::string_view kInstructionStats = "Instruction Statistics";
constexpr std::string_view kRaw = "";

struct Source {
  std::string_view section;
  std::string_view name;
};

struct QuantitySpec {
  Quantity quantity;
  std::string_view key;
  std::array<Source, 4> sources;  // tried in order; an empty name ends the list
};

// Where each quantity lives: the details page's (section, metric) first, then the raw page's
// metric names. Adjust here when ncu renames a metric.
const std::array<QuantitySpec, kQuantityCount> kQuantities = {{
    {Quantity::kDurationNs,
     "duration_ns",
     {{{kSol, "Duration"}, {kRaw, "gpu__time_duration.sum"}}}},
    {Quantity::kElapsedCycles,
     "elapsed_cycles",
     {{{kSol, "Elapsed Cycles"}, {kRaw, "gpc__cycles_elapsed.max"}}}},
    {Quantity::kSolMemoryPct,
     "memory_pct",
     {{{kSol, "Memory Throughput"},
       {kRaw, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"}}}},
    {Quantity::kSolDramPct,
     "dram_pct",
     {{{kSol, "DRAM Throughput"},
       {kRaw, "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"},
       {kRaw, "dram__throughput.avg.pct_of_peak_sustained_elapsed"}}}},
    {Quantity::kSolL1Pct,
     "l1_pct",
     {{{kSol, "L1/TEX Cache Throughput"},
       {kRaw, "l1tex__throughput.avg.pct_of_peak_sustained_active"}}}},
    {Quantity::kSolL2Pct,
     "l2_pct",
     {{{kSol, "L2 Cache Throughput"},
       {kRaw, "lts__throughput.avg.pct_of_peak_sustained_elapsed"}}}},
    {Quantity::kSolSmPct,
     "sm_pct",
     {{{kSol, "Compute (SM) Throughput"},
       {kRaw, "sm__throughput.avg.pct_of_peak_sustained_elapsed"}}}},
    {Quantity::kDramBytesRead, "dram_read_bytes", {{{kRaw, "dram__bytes_read.sum"}}}},
    {Quantity::kDramBytesWrite, "dram_write_bytes", {{{kRaw, "dram__bytes_write.sum"}}}},
    {Quantity::kDramBandwidth,
     "dram_bytes_per_s",
     {{{kRaw, "dram__bytes.sum.per_second"}, {kMemory, "Memory Throughput"}}}},
    {Quantity::kL1HitPct,
     "l1_hit_pct",
     {{{kMemory, "L1/TEX Hit Rate"}, {kRaw, "l1tex__t_sector_hit_rate.pct"}}}},
    {Quantity::kL2HitPct,
     "l2_hit_pct",
     {{{kMemory, "L2 Hit Rate"}, {kRaw, "lts__t_sector_hit_rate.pct"}}}},
    {Quantity::kIpcElapsed,
     "ipc_elapsed",
     {{{kCompute, "Executed Ipc Elapsed"}, {kRaw, "sm__inst_executed.avg.per_cycle_elapsed"}}}},
    {Quantity::kIpcActive,
     "ipc_active",
     {{{kCompute, "Executed Ipc Active"}, {kRaw, "sm__inst_executed.avg.per_cycle_active"}}}},
    {Quantity::kIssueSlotsBusyPct,
     "issue_slots_busy_pct",
     {{{kCompute, "Issue Slots Busy"},
       {kRaw, "sm__instruction_throughput.avg.pct_of_peak_sustained_active"}}}},
    {Quantity::kInstructions,
     "instructions",
     {{{kRaw, "smsp__inst_executed.sum"},
       {kRaw, "sm__inst_executed.sum"},
       {kRaw, "inst_executed"},
       {kInstructionStats, "Executed Instructions"}}}},
    {Quantity::kGlobalLoadInstructions,
     "global_load_instructions",
     {{{kRaw, "smsp__inst_executed_op_global_ld.sum"},
       {kRaw, "smsp__sass_inst_executed_op_global_ld.sum"}}}},
    {Quantity::kGlobalLoadRequests,
     "global_load_requests",
     {{{kRaw, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"}}}},
    {Quantity::kGlobalLoadSectors,
     "global_load_sectors",
     {{{kRaw, "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"}}}},
    {Quantity::kTheoreticalOccupancyPct,
     "occupancy_theoretical_pct",
     {{{kOccupancy, "Theoretical Occupancy"}, {kRaw, "sm__maximum_warps_per_active_cycle_pct"}}}},
    {Quantity::kAchievedOccupancyPct,
     "occupancy_achieved_pct",
     {{{kOccupancy, "Achieved Occupancy"},
       {kRaw, "sm__warps_active.avg.pct_of_peak_sustained_active"}}}},
    {Quantity::kTheoreticalWarps,
     "warps_theoretical",
     {{{kOccupancy, "Theoretical Active Warps per SM"},
       {kRaw, "sm__maximum_warps_avg_per_active_cycle"}}}},
    {Quantity::kAchievedWarps,
     "warps_achieved",
     {{{kOccupancy, "Achieved Active Warps Per SM"},
       {kRaw, "sm__warps_active.avg.per_cycle_active"}}}},
    {Quantity::kBlockLimitRegisters,
     "block_limit_registers",
     {{{kOccupancy, "Block Limit Registers"}, {kRaw, "launch__occupancy_limit_registers"}}}},
    {Quantity::kBlockLimitSharedMem,
     "block_limit_shared_mem",
     {{{kOccupancy, "Block Limit Shared Mem"}, {kRaw, "launch__occupancy_limit_shared_mem"}}}},
    {Quantity::kBlockLimitWarps,
     "block_limit_warps",
     {{{kOccupancy, "Block Limit Warps"}, {kRaw, "launch__occupancy_limit_warps"}}}},
    {Quantity::kBlockLimitSm,
     "block_limit_sm",
     {{{kOccupancy, "Block Limit SM"}, {kRaw, "launch__occupancy_limit_blocks"}}}},
    {Quantity::kBlockLimitBarriers,
     "block_limit_barriers",
     {{{kOccupancy, "Block Limit Barriers"}, {kRaw, "launch__occupancy_limit_barriers"}}}},
    {Quantity::kRegistersPerThread,
     "registers_per_thread",
     {{{kLaunch, "Registers Per Thread"}, {kRaw, "launch__registers_per_thread"}}}},
    {Quantity::kStaticSharedBytes,
     "static_shared_bytes",
     {{{kLaunch, "Static Shared Memory Per Block"},
       {kRaw, "launch__shared_mem_per_block_static"}}}},
    {Quantity::kDynamicSharedBytes,
     "dynamic_shared_bytes",
     {{{kLaunch, "Dynamic Shared Memory Per Block"},
       {kRaw, "launch__shared_mem_per_block_dynamic"}}}},
    {Quantity::kBlockThreads,
     "block_threads",
     {{{kLaunch, "Block Size"}, {kRaw, "launch__block_size"}}}},
    {Quantity::kGridBlocks, "grid_blocks", {{{kLaunch, "Grid Size"}, {kRaw, "launch__grid_size"}}}},
    {Quantity::kSmCount,
     "sm_count",
     {{{kLaunch, "# SMs"}, {kRaw, "device__attribute_multiprocessor_count"}}}},
    {Quantity::kWavesPerSm,
     "waves_per_sm",
     {{{kLaunch, "Waves Per SM"}, {kRaw, "launch__waves_per_multiprocessor"}}}},
    {Quantity::kWarpCyclesPerIssued,
     "warp_cycles_per_issued",
     {{{kWarps, "Warp Cycles Per Issued Instruction"},
       {kRaw, "smsp__average_warp_latency_per_inst_issued.ratio"}}}},
    {Quantity::kLsuPipeElapsedPct,
     "lsu_pipe_elapsed_pct",
     {{{kRaw, "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_elapsed"}}}},
    {Quantity::kLsuPeakSmCycles, "lsu_peak_sm_cycles", {}},  // derived in group_launches
}};

// Raw-page metric families that hold one warp-stall reason each, in cycles per issued
// instruction: prefix + reason + suffix.
constexpr std::array<std::pair<std::string_view, std::string_view>, 2> kStallFamilies = {{
    {"smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"},
    {"smsp__average_warp_latency_issue_stalled_", ".ratio"},
}};

const QuantitySpec& spec(Quantity quantity) { return kQuantities[static_cast<size_t>(quantity)]; }

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), pattern, value);
  return buffer;
}

std::string pct(double value) { return format("%.1f %%", value); }
std::string times(double ratio) { return format(ratio >= 10 ? "%.1fx" : "%.2fx", ratio); }

std::string count_text(double value) {
  const double magnitude = std::fabs(value);
  if (magnitude >= 1e9) return format("%.3g G", value / 1e9);
  if (magnitude >= 1e6) return format("%.3g M", value / 1e6);
  if (magnitude >= 1e4) return format("%.3g k", value / 1e3);
  return format("%.4g", value);
}

std::string bytes_text(double bytes) {
  const double magnitude = std::fabs(bytes);
  if (magnitude >= 1e9) return format("%.3g GB", bytes / 1e9);
  if (magnitude >= 1e6) return format("%.3g MB", bytes / 1e6);
  if (magnitude >= 1e3) return format("%.3g kB", bytes / 1e3);
  return format("%.0f B", bytes);
}

std::string duration_text(double ns) {
  if (ns >= 1e9) return format("%.4g s", ns / 1e9);
  if (ns >= 1e6) return format("%.4g ms", ns / 1e6);
  if (ns >= 1e3) return format("%.4g us", ns / 1e3);
  return format("%.4g ns", ns);
}

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::string demangle(const std::string& name) {
  if (name.rfind("_Z", 0) != 0) return name;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> text(
      abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && text ? std::string(text.get()) : name;
}

// "void kda::cuda::merged_v_decode<128>(const float *, int)" → "merged_v_decode".
std::string short_name_of(const std::string& kernel) {
  std::string name = demangle(kernel);
  for (const std::string_view anonymous : {"(anonymous namespace)", "`anonymous namespace'"}) {
    for (size_t at = name.find(anonymous); at != std::string::npos; at = name.find(anonymous))
      name.replace(at, anonymous.size(), "anonymous");
  }
  // Keep depth-0 text before the parameter list; drop template arguments.
  std::string kept;
  int angle = 0;
  for (char character : name) {
    if (character == '<') ++angle;
    if (angle == 0 && character == '(') break;
    if (angle == 0) kept.push_back(character);
    if (character == '>' && angle > 0) --angle;
  }
  const size_t space = kept.find_last_of(' ');
  if (space != std::string::npos) kept = kept.substr(space + 1);
  const size_t scope = kept.rfind("::");
  if (scope != std::string::npos) kept = kept.substr(scope + 2);
  std::string safe;
  for (char character : kept) {
    const bool ok = (character >= 'a' && character <= 'z') ||
                    (character >= 'A' && character <= 'Z') ||
                    (character >= '0' && character <= '9') || character == '_';
    safe.push_back(ok ? character : '_');
  }
  return safe.empty() ? "kernel" : safe;
}

std::string compact_dims(const std::string& dims) {
  std::string out;
  for (char character : dims) {
    if (character >= '0' && character <= '9') {
      out.push_back(character);
    } else if (character == ',' && !out.empty() && out.back() != 'x') {
      out.push_back('x');
    }
  }
  return out;
}

// The stall reason a raw-page key holds, in the first family the profile has; empty otherwise.
std::map<uint32_t, std::string> stall_keys(const Profile& profile) {
  for (const auto& [prefix, suffix] : kStallFamilies) {
    std::map<uint32_t, std::string> keys;
    for (size_t index = 0; index < profile.keys.size(); ++index) {
      const MetricKey& key = profile.keys[index];
      const std::string& name = key.name;
      if (!key.section.empty() || name.size() <= prefix.size() + suffix.size()) continue;
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
      std::string reason = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
      // "_not_issued" variants count the same stall differently; "selected" is issuing.
      if (reason.size() > 11 && reason.compare(reason.size() - 11, 11, "_not_issued") == 0)
        continue;
      if (reason == "selected") continue;
      keys.emplace(static_cast<uint32_t>(index), std::move(reason));
    }
    if (!keys.empty()) return keys;
  }
  return {};
}

void fill_stalls(KernelGroup& group, const std::map<uint32_t, std::string>& keys) {
  if (keys.empty()) return;
  std::map<std::string, std::vector<double>> values;
  for (const Launch* launch : group.launches) {
    for (const Metric& metric : launch->metrics) {
      if (std::isnan(metric.value)) continue;
      auto found = keys.find(metric.key);
      if (found != keys.end()) values[found->second].push_back(metric.value);
    }
  }
  for (auto& [name, samples] : values) group.stalls.emplace_back(name, median_of(samples));
  std::stable_sort(group.stalls.begin(), group.stalls.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
}

void fill_advice(KernelGroup& group) {
  std::vector<std::string> order;
  std::map<std::string, std::pair<RuleAdvice, std::vector<double>>> rules;
  for (const Launch* launch : group.launches) {
    for (const RuleResult& rule : launch->rules) {
      // One rule may fire several times per launch with different types (CPIStall: WRN, OPT, INF).
      const std::string key = rule.name + "\x1f" + rule.type;
      auto [entry, inserted] = rules.try_emplace(key);
      if (inserted) {
        order.push_back(key);
        entry->second.first = {rule.name, rule.type, rule.description, rule.speedup_type, 0, 0};
      }
      ++entry->second.first.launches;
      if (!std::isnan(rule.speedup_pct)) entry->second.second.push_back(rule.speedup_pct);
    }
  }
  for (const std::string& name : order) {
    auto& [advice, speedups] = rules[name];
    advice.speedup_pct = speedups.empty() ? std::nan("") : median_of(speedups);
    group.advice.push_back(advice);
  }
  // Advice to act on (OPT, WRN) before information; a larger estimated speedup first.
  auto rank = [](const RuleAdvice& advice) { return advice.type == "INF" ? 1 : 0; };
  std::stable_sort(group.advice.begin(), group.advice.end(),
                   [&](const RuleAdvice& a, const RuleAdvice& b) {
                     if (rank(a) != rank(b)) return rank(a) < rank(b);
                     const double sa = std::isnan(a.speedup_pct) ? -1 : a.speedup_pct;
                     const double sb = std::isnan(b.speedup_pct) ? -1 : b.speedup_pct;
                     return sa > sb;
                   });
}

}  // namespace

std::string_view quantity_key(Quantity quantity) { return spec(quantity).key; }

std::optional<double> lookup(const Profile& profile, const Launch& launch, Quantity quantity) {
  for (const Source& source : spec(quantity).sources) {
    if (source.name.empty()) break;
    const std::optional<MetricView> metric = profile.find(launch, source.section, source.name);
    if (!metric || std::isnan(metric->value)) continue;
    // The memory section's "Memory Throughput" is a rate; only take it as one.
    if (quantity == Quantity::kDramBandwidth && metric->unit != "byte/s") continue;
    return metric->value;
  }
  return std::nullopt;
}

std::string KernelGroup::label() const {
  std::string text = short_name;
  if (!block.empty()) text += " block " + block;
  if (!grid.empty()) text += " grid " + grid;
  return text;
}

std::vector<KernelGroup> group_launches(const Profile& profile,
                                        const std::optional<Pattern>& filter) {
  std::vector<KernelGroup> groups;
  std::map<std::tuple<std::string, std::string, std::string>, size_t> index;
  for (const Launch& launch : profile.launches) {
    // Searched in the name and the launch configuration, so that 'grid .4, 32' picks one of
    // several configurations of a kernel.
    if (filter &&
        !filter->search(launch.kernel + " block " + launch.block + " grid " + launch.grid)) {
      continue;
    }
    const auto key = std::make_tuple(launch.kernel, launch.block, launch.grid);
    auto [found, inserted] = index.try_emplace(key, groups.size());
    if (inserted) {
      KernelGroup group;
      group.kernel = launch.kernel;
      group.short_name = short_name_of(launch.kernel);
      group.block = launch.block;
      group.grid = launch.grid;
      groups.push_back(std::move(group));
    }
    groups[found->second].launches.push_back(&launch);
  }
  // Two configurations of one kernel keep distinct ids: the grid joins the name.
  std::map<std::string, int> uses;
  for (const KernelGroup& group : groups) ++uses[group.short_name];
  for (KernelGroup& group : groups) {
    if (uses[group.short_name] > 1) group.short_name += "_g" + compact_dims(group.grid);
  }
  const std::map<uint32_t, std::string> stalls = stall_keys(profile);
  for (KernelGroup& group : groups) {
    for (size_t q = 0; q < kQuantityCount; ++q) {
      std::vector<double> values;
      for (const Launch* launch : group.launches) {
        if (auto value = lookup(profile, *launch, static_cast<Quantity>(q)))
          values.push_back(*value);
      }
      if (!values.empty()) group.medians[q] = median_of(std::move(values));
    }
    // Without an instruction counter: IPC per SM × cycles × SMs is the same count, derived.
    if (!group.get(Quantity::kInstructions)) {
      const auto ipc = group.get(Quantity::kIpcElapsed);
      const auto cycles = group.get(Quantity::kElapsedCycles);
      const auto sms = group.get(Quantity::kSmCount);
      if (ipc && cycles && sms) {
        group.medians[static_cast<size_t>(Quantity::kInstructions)] = *ipc * *cycles * *sms;
        group.instructions_derived = true;
      }
    }
    const auto lsu_pct = group.get(Quantity::kLsuPipeElapsedPct);
    const auto elapsed = group.get(Quantity::kElapsedCycles);
    const auto sm_count = group.get(Quantity::kSmCount);
    if (lsu_pct && elapsed && sm_count) {
      group.medians[static_cast<size_t>(Quantity::kLsuPeakSmCycles)] =
          *lsu_pct / 100 * *elapsed * *sm_count;
    }
    fill_stalls(group, stalls);
    fill_advice(group);
  }
  return groups;
}

namespace {

struct Limit {
  std::string_view name;  // "DRAM", "L2", "L1", "SM"
  Quantity quantity;
};
constexpr std::array<Limit, 4> kLimits = {{{"DRAM", Quantity::kSolDramPct},
                                           {"L2", Quantity::kSolL2Pct},
                                           {"L1", Quantity::kSolL1Pct},
                                           {"SM", Quantity::kSolSmPct}}};

Finding base_finding(const KernelGroup& group, std::string_view kind, Severity severity,
                     const AnalyzeOptions& options) {
  Finding finding;
  finding.id = "counters." + group.short_name + "." + std::string(kind);
  finding.layer = Layer::kCounters;
  finding.severity = severity;
  finding.where.subject = "ncu";
  finding.where.path = group.kernel;
  if (!group.block.empty()) finding.where.params.emplace_back("block", group.block);
  if (!group.grid.empty()) finding.where.params.emplace_back("grid", group.grid);
  finding.where.params.emplace_back("launches", static_cast<int64_t>(group.launches.size()));
  if (!group.launches.empty()) finding.evidence.files.push_back(group.launches.front()->file);
  finding.reproduce = options.reproduce;
  return finding;
}

void add_metric(Finding& finding, const KernelGroup& group, Quantity quantity) {
  if (auto value = group.get(quantity))
    finding.evidence.metrics.emplace_back(std::string(quantity_key(quantity)), *value);
}

std::string launches_text(const KernelGroup& group) {
  const size_t n = group.launches.size();
  return n == 1 ? "1 launch" : "median of " + std::to_string(n) + " launches";
}

// The binding limit: the unit nearest its peak, or latency when none is near.
struct Binding {
  std::string_view name;  // "DRAM", "L2", "L1", "SM", "latency"
  double pct = 0;         // the highest share of peak
  std::string_view top;   // the unit with that share
};

std::optional<Binding> binding_of(const KernelGroup& group) {
  std::optional<Binding> binding;
  for (const Limit& limit : kLimits) {
    const auto value = group.get(limit.quantity);
    if (!value) continue;
    if (!binding || *value > binding->pct) binding = Binding{limit.name, *value, limit.name};
  }
  if (binding && binding->pct < kBoundThresholdPct) binding->name = "latency";
  return binding;
}

std::string bound_next(std::string_view name) {
  if (name == "DRAM")
    return "DRAM is the limit: gains come from moving fewer bytes (fusion, reuse through shared "
           "memory, narrower types), not from fewer instructions";
  if (name == "L2")
    return "L2 is the limit: raise L1 reuse or coalescing so fewer requests reach L2 "
           "(MemoryWorkloadAnalysis_Tables shows the traffic per unit)";
  if (name == "L1")
    return "L1/TEX is the limit: look for shared-memory bank conflicts and uncoalesced global "
           "accesses (MemoryWorkloadAnalysis_Tables, SourceCounters)";
  if (name == "SM")
    return "the SM pipes are the limit: fewer instructions per result or a faster pipe (tensor "
           "cores); ComputeWorkloadAnalysis shows which pipe";
  return "no unit is near its peak: the kernel waits on latency; more independent work in "
         "flight (occupancy, ILP, more blocks) helps — see the stall reasons";
}

}  // namespace

std::optional<BoundSummary> bound_of(const KernelGroup& group) {
  const auto binding = binding_of(group);
  if (!binding) return std::nullopt;
  return BoundSummary{std::string(binding->name), binding->pct, std::string(binding->top)};
}

namespace {

std::optional<Finding> bound_finding(const KernelGroup& group, const AnalyzeOptions& options) {
  const auto binding = binding_of(group);
  if (!binding) return std::nullopt;
  const bool latency = binding->name == "latency";
  Finding finding =
      base_finding(group, "bound", latency ? Severity::kWarn : Severity::kInfo, options);
  std::string units;
  for (const Limit& limit : kLimits) {
    const auto value = group.get(limit.quantity);
    if (!value) continue;
    if (!units.empty()) units += ", ";
    units += std::string(limit.name) + " " + pct(*value);
  }
  std::string claim = group.label() + " is ";
  if (latency) {
    claim += "latency-bound: no unit reaches " + format("%.0f", kBoundThresholdPct) +
             " % of its peak (highest " + std::string(binding->top) + " " + pct(binding->pct) + ")";
  } else {
    claim += std::string(binding->name) + "-bound at " + pct(binding->pct) + " of peak";
    if (binding->pct >= 85) claim += " (little left to gain at this traffic)";
  }
  claim += "; " + units;
  if (auto duration = group.get(Quantity::kDurationNs))
    claim += "; " + duration_text(*duration) + " per launch";
  claim += " (" + launches_text(group) + ")";
  finding.claim = claim;
  finding.evidence.metrics.emplace_back("bound_pct", binding->pct);
  for (const Limit& limit : kLimits) add_metric(finding, group, limit.quantity);
  add_metric(finding, group, Quantity::kSolMemoryPct);
  add_metric(finding, group, Quantity::kDurationNs);
  finding.next = bound_next(binding->name);
  return finding;
}

std::optional<Finding> occupancy_finding(const KernelGroup& group, const AnalyzeOptions& options) {
  const auto theoretical = group.get(Quantity::kTheoreticalOccupancyPct);
  const auto achieved = group.get(Quantity::kAchievedOccupancyPct);
  if (!theoretical && !achieved) return std::nullopt;
  // What caps the theoretical occupancy: the smallest blocks-per-SM limit.
  struct BlockLimit {
    std::string_view name;
    Quantity quantity;
  };
  constexpr std::array<BlockLimit, 5> kBlockLimits = {
      {{"registers", Quantity::kBlockLimitRegisters},
       {"shared memory", Quantity::kBlockLimitSharedMem},
       {"warps (block size)", Quantity::kBlockLimitWarps},
       {"blocks per SM", Quantity::kBlockLimitSm},
       {"barriers", Quantity::kBlockLimitBarriers}}};
  std::optional<double> smallest;
  std::string limiters;
  for (const BlockLimit& limit : kBlockLimits) {
    const auto value = group.get(limit.quantity);
    if (!value) continue;
    if (!smallest || *value < *smallest) {
      smallest = *value;
      limiters = std::string(limit.name);
    } else if (*value == *smallest) {
      limiters += " and " + std::string(limit.name);
    }
  }
  const auto binding = binding_of(group);
  const bool latency = binding && binding->name == "latency";
  const double gap = theoretical && achieved ? *theoretical - *achieved : 0;
  const bool low = (theoretical && *theoretical < 50) || gap >= 10;
  Finding finding =
      base_finding(group, "occupancy", latency && low ? Severity::kWarn : Severity::kInfo, options);
  std::string claim = group.label() + ": achieved occupancy ";
  claim += achieved ? pct(*achieved) : std::string("unknown");
  claim += " of a theoretical ";
  claim += theoretical ? pct(*theoretical) : std::string("unknown");
  if (theoretical && achieved) claim += " (gap " + format("%.1f", gap) + " points)";
  if (smallest) {
    claim += "; the theoretical limit is " + format("%.0f", *smallest) +
             " block(s) per SM, set by " + limiters;
    if (limiters.find("registers") != std::string::npos) {
      if (auto registers = group.get(Quantity::kRegistersPerThread))
        claim += " (" + format("%.0f", *registers) + " registers per thread)";
    }
  }
  std::string next;
  const auto blocks = group.get(Quantity::kGridBlocks);
  const auto sms = group.get(Quantity::kSmCount);
  const auto waves = group.get(Quantity::kWavesPerSm);
  bool few_blocks = false;
  if (blocks && sms && smallest && *smallest > 0) {
    const double slots = *sms * *smallest;
    few_blocks = *blocks < slots;
    claim += "; the grid's " + format("%.0f", *blocks) + " blocks fill " +
             format("%.2f", *blocks / slots) + " wave(s) of " + format("%.0f", slots) +
             " block slots";
  } else if (waves) {
    claim += "; " + format("%.2f", *waves) + " wave(s) per SM";
    few_blocks = *waves < 1;
  }
  if (few_blocks && gap >= 5) {
    next =
        "the grid is too small to fill the GPU: split the work into more blocks (or more "
        "warps per block) — the gap to theoretical is empty block slots";
  } else if (gap >= 10) {
    next =
        "achieved trails theoretical: blocks finish unevenly or warps idle at barriers; "
        "check the tail (waves per SM) and the stall reasons";
  } else if (limiters.find("registers") != std::string::npos) {
    next =
        "registers cap the theoretical occupancy: __launch_bounds__ or fewer live values "
        "raise it (check for spills); it matters only when the kernel is latency-bound";
  } else if (limiters.find("shared") != std::string::npos) {
    next =
        "shared memory caps the theoretical occupancy: smaller tiles or fewer stages raise "
        "it; it matters only when the kernel is latency-bound";
  } else {
    next = "occupancy is near what the launch configuration allows";
  }
  finding.claim = claim;
  finding.next = next;
  for (Quantity quantity :
       {Quantity::kAchievedOccupancyPct, Quantity::kTheoreticalOccupancyPct,
        Quantity::kBlockLimitRegisters, Quantity::kBlockLimitSharedMem, Quantity::kBlockLimitWarps,
        Quantity::kBlockLimitSm, Quantity::kRegistersPerThread, Quantity::kGridBlocks,
        Quantity::kSmCount, Quantity::kWavesPerSm}) {
    add_metric(finding, group, quantity);
  }
  if (theoretical && achieved) finding.evidence.metrics.emplace_back("occupancy_gap_pct", gap);
  return finding;
}

std::string stall_hint(const std::string& reason) {
  static const std::map<std::string, std::string> kHints = {
      {"long_scoreboard",
       "waiting for global or local memory: more loads in flight, prefetch, reuse"},
      {"short_scoreboard", "waiting for shared memory or special-function results"},
      {"barrier", "waiting at __syncthreads: uneven work between the warps of a block"},
      {"wait", "fixed-latency dependencies: more independent instructions (ILP)"},
      {"math_pipe_throttle", "a math pipe is saturated"},
      {"mio_throttle", "the shared-memory / special-instruction queue is full"},
      {"lg_throttle", "too many global/local memory instructions queued: wider (vector) loads"},
      {"not_selected", "eligible warps wait for the scheduler: there is parallelism to spare"},
      {"membar", "memory barriers"},
      {"branch_resolving", "branch targets being resolved: divergent control flow"},
      {"no_instruction", "instruction cache misses or the start of the kernel"},
      {"dispatch_stall", "the dispatcher stalled"},
      {"drain", "stores draining at the end of the kernel"},
      {"imc_miss", "constant cache misses"},
      {"tex_throttle", "the texture pipe is saturated"},
      {"sleeping", "warps asleep (nanosleep)"},
  };
  auto found = kHints.find(reason);
  return found == kHints.end() ? std::string() : found->second;
}

std::optional<Finding> stalls_finding(const KernelGroup& group, const AnalyzeOptions& options) {
  if (group.stalls.empty()) return std::nullopt;
  Finding finding = base_finding(group, "stalls", Severity::kInfo, options);
  double total = 0;
  for (const auto& [reason, cycles] : group.stalls) total += cycles;
  std::string claim = group.label() + ": warps stall mostly on ";
  const size_t shown = std::min<size_t>(3, group.stalls.size());
  for (size_t index = 0; index < shown; ++index) {
    const auto& [reason, cycles] = group.stalls[index];
    if (index > 0) claim += index + 1 == shown ? ", then " : ", ";
    claim += reason + " (" + format("%.2f", cycles) + " cycles per issued instruction";
    if (total > 0) claim += ", " + format("%.0f", 100 * cycles / total) + " %";
    claim += ")";
    finding.evidence.metrics.emplace_back("stall_" + reason, cycles);
  }
  if (auto per_issue = group.get(Quantity::kWarpCyclesPerIssued)) {
    claim += "; " + format("%.2f", *per_issue) + " warp cycles per issued instruction";
    add_metric(finding, group, Quantity::kWarpCyclesPerIssued);
  }
  finding.claim = claim;
  const std::string hint = stall_hint(group.stalls.front().first);
  finding.next = group.stalls.front().first + (hint.empty() ? "" : ": " + hint) +
                 "; SourceCounters (ncu --section SourceCounters) names the instructions";
  return finding;
}

std::optional<double> dram_bytes(const KernelGroup& group) {
  const auto read = group.get(Quantity::kDramBytesRead);
  const auto write = group.get(Quantity::kDramBytesWrite);
  if (read || write) return read.value_or(0) + write.value_or(0);
  const auto rate = group.get(Quantity::kDramBandwidth);
  const auto duration = group.get(Quantity::kDurationNs);
  if (rate && duration) return *rate * *duration * 1e-9;
  return std::nullopt;
}

std::optional<Finding> bytes_finding(const KernelGroup& group, const AnalyzeOptions& options) {
  const auto bytes = dram_bytes(group);
  if (!bytes) return std::nullopt;
  const bool measured = group.get(Quantity::kDramBytesRead) || group.get(Quantity::kDramBytesWrite);
  std::optional<double> declared;
  std::string declared_pattern;
  for (const DeclaredBytes& entry : options.declared) {
    if (entry.kernel.search(group.kernel)) {
      declared = entry.bytes;
      declared_pattern = entry.pattern;
      break;
    }
  }
  const double ratio = declared && *declared > 0 ? *bytes / *declared : 0;
  const bool off = declared && (ratio > 1.25 || ratio < 0.8);
  Finding finding = base_finding(group, "bytes", off ? Severity::kWarn : Severity::kInfo, options);
  std::string claim =
      group.label() + " moves " + bytes_text(*bytes) + " per launch to and from DRAM";
  if (measured) {
    claim += " (read " + bytes_text(group.get(Quantity::kDramBytesRead).value_or(0)) + ", write " +
             bytes_text(group.get(Quantity::kDramBytesWrite).value_or(0)) + ")";
  } else {
    claim += " (DRAM throughput × duration: no byte counter in the export)";
  }
  if (auto duration = group.get(Quantity::kDurationNs); duration && *duration > 0)
    claim += ", " + format("%.3g", *bytes / *duration) + " GB/s";
  if (declared) {
    claim += "; " + times(ratio) + " the " + bytes_text(*declared) + " it must move";
    if (ratio > 1.25) claim += ": it re-reads or over-fetches";
    if (ratio < 0.8)
      claim += ": less than declared — the declaration is wrong or the data sat in L2";
  }
  finding.claim = claim;
  finding.evidence.metrics.emplace_back("dram_bytes", *bytes);
  add_metric(finding, group, Quantity::kDramBytesRead);
  add_metric(finding, group, Quantity::kDramBytesWrite);
  if (declared) {
    finding.evidence.metrics.emplace_back("declared_bytes", *declared);
    finding.evidence.metrics.emplace_back("bytes_ratio", ratio);
  }
  finding.next = declared ? (off ? "compare the access pattern with the declared traffic "
                                   "(MemoryWorkloadAnalysis_Tables: sectors per request)"
                                 : "the kernel moves what it must; speed comes from bandwidth")
                          : "declare what the kernel must move (--bytes '" + group.short_name +
                                "=BYTES') to compare";
  return finding;
}

std::string quote_advice(const std::string& text, size_t limit) {
  std::string out;
  for (char character : text) out.push_back(character == '\n' ? ' ' : character);
  if (out.size() > limit) out = out.substr(0, limit) + "...";
  return out;
}

std::optional<Finding> advice_finding(const KernelGroup& group, const AnalyzeOptions& options) {
  if (group.advice.empty()) return std::nullopt;
  const RuleAdvice& top = group.advice.front();
  const bool act = top.type != "INF" && !std::isnan(top.speedup_pct) && top.speedup_pct >= 10;
  Finding finding = base_finding(group, "advice", act ? Severity::kWarn : Severity::kInfo, options);
  std::string claim = group.label() + ": ncu " + top.name + " (" + top.type;
  if (!std::isnan(top.speedup_pct)) {
    claim += ", estimated speedup " + format("%.1f", top.speedup_pct) + " %";
    if (!top.speedup_type.empty()) claim += " " + top.speedup_type;
  }
  claim += "): \"" + quote_advice(top.description, options.detail ? 2000 : 400) + "\"";
  const size_t shown =
      std::min<size_t>(options.detail ? group.advice.size() : 4, group.advice.size());
  std::string others;
  for (size_t index = 1; index < shown; ++index) {
    const RuleAdvice& rule = group.advice[index];
    if (!others.empty()) others += ", ";
    others += rule.name + " (" + rule.type;
    if (!std::isnan(rule.speedup_pct)) others += " " + format("%.1f", rule.speedup_pct) + " %";
    others += ")";
  }
  if (!others.empty()) claim += "; also " + others;
  if (group.advice.size() > shown)
    claim += " and " + std::to_string(group.advice.size() - shown) + " more (--detail)";
  for (size_t index = 0; index < shown; ++index) {
    const RuleAdvice& rule = group.advice[index];
    if (!std::isnan(rule.speedup_pct))
      finding.evidence.metrics.emplace_back("rule_" + rule.name + "_speedup_pct", rule.speedup_pct);
  }
  finding.claim = claim;
  finding.next =
      "ncu's estimate assumes the named issue is fixed alone; confirm with a bench "
      "of the changed kernel (loupe probe run ... bench)";
  return finding;
}

int severity_rank(Severity severity) {
  return severity == Severity::kFail ? 0 : severity == Severity::kWarn ? 1 : 2;
}

}  // namespace

std::vector<Finding> kernel_findings(const KernelGroup& group, const AnalyzeOptions& options) {
  std::vector<Finding> findings;
  for (auto make :
       {bound_finding, occupancy_finding, stalls_finding, bytes_finding, advice_finding}) {
    if (auto finding = make(group, options)) findings.push_back(std::move(*finding));
  }
  return findings;
}

Analysis analyze(const Profile& profile, const AnalyzeOptions& options) {
  Analysis analysis;
  if (profile.launches.empty()) {
    std::string files;
    for (const std::string& file : profile.files) files += (files.empty() ? "" : ", ") + file;
    throw Error(ErrorCode::kInput, files + ": no usable launch: every row was dropped",
                "the stats say why (counters_row_malformed, counters_launch_conflict)");
  }
  analysis.groups = group_launches(profile, options.kernel_filter);
  if (analysis.groups.empty()) {
    std::string names;
    std::vector<std::string> seen;
    for (const Launch& launch : profile.launches) {
      if (std::find(seen.begin(), seen.end(), launch.kernel) != seen.end()) continue;
      seen.push_back(launch.kernel);
      if (seen.size() <= 8) names += (names.empty() ? "" : "; ") + launch.kernel;
    }
    throw Error(ErrorCode::kUsage,
                "--kernel '" + options.kernel_pattern + "' matches none of the " +
                    std::to_string(seen.size()) + " kernel(s): " + names,
                "the pattern is searched (RE2 syntax) in 'KERNEL block (x, y, z) grid (x, y, z)'");
  }
  std::vector<Finding> all;
  for (const KernelGroup& group : analysis.groups) {
    for (Finding& finding : kernel_findings(group, options)) all.push_back(std::move(finding));
  }
  std::stable_sort(all.begin(), all.end(), [](const Finding& a, const Finding& b) {
    return severity_rank(a.severity) < severity_rank(b.severity);
  });
  const size_t keep = options.detail ? all.size() : std::min(all.size(), options.max_findings);
  analysis.findings_omitted = all.size() - keep;
  all.resize(keep);
  analysis.findings = std::move(all);
  return analysis;
}

namespace {

struct Work {
  std::string key;
  std::string words;  // "the instructions"
  std::string noun;   // "instructions", for the finding of its own
  std::optional<double> a;
  std::optional<double> b;
};

std::string side_name(const DiffSide& side) {
  return side.group.short_name + " (" + side.label + ")";
}

Finding diff_finding(std::string_view kind, Severity severity, const DiffSide& a, const DiffSide& b,
                     const std::string& reproduce) {
  Finding finding;
  finding.id = "counters.diff." + std::string(kind);
  finding.layer = Layer::kCounters;
  finding.severity = severity;
  finding.where.subject = "ncu";
  finding.where.path =
      a.group.kernel == b.group.kernel ? a.group.kernel : a.group.kernel + " vs " + b.group.kernel;
  finding.where.params = {{"a", a.group.label()}, {"b", b.group.label()}};
  if (!a.group.launches.empty()) finding.evidence.files.push_back(a.group.launches.front()->file);
  if (!b.group.launches.empty()) finding.evidence.files.push_back(b.group.launches.front()->file);
  finding.reproduce = reproduce;
  return finding;
}

}  // namespace

Comparison compare(const DiffSide& a, const DiffSide& b, const std::string& reproduce) {
  Comparison comparison;
  const KernelGroup& ga = a.group;
  const KernelGroup& gb = b.group;
  auto row = [&](const std::string& metric, std::optional<double> va, std::optional<double> vb) {
    if (va || vb) comparison.rows.push_back({metric, va, vb});
  };
  for (Quantity quantity :
       {Quantity::kDurationNs, Quantity::kInstructions, Quantity::kGlobalLoadInstructions,
        Quantity::kGlobalLoadRequests, Quantity::kGlobalLoadSectors, Quantity::kLsuPeakSmCycles}) {
    row(std::string(quantity_key(quantity)), ga.get(quantity), gb.get(quantity));
  }
  row("dram_bytes", dram_bytes(ga), dram_bytes(gb));
  for (Quantity quantity :
       {Quantity::kSolDramPct, Quantity::kSolL2Pct, Quantity::kSolL1Pct, Quantity::kSolSmPct,
        Quantity::kIpcElapsed, Quantity::kWarpCyclesPerIssued, Quantity::kAchievedOccupancyPct,
        Quantity::kTheoreticalOccupancyPct, Quantity::kRegistersPerThread, Quantity::kGridBlocks,
        Quantity::kBlockThreads}) {
    row(std::string(quantity_key(quantity)), ga.get(quantity), gb.get(quantity));
  }
  // The stall reasons that matter on either side, largest first.
  std::vector<std::string> reasons;
  for (const auto* stalls : {&ga.stalls, &gb.stalls}) {
    for (size_t index = 0; index < std::min<size_t>(4, stalls->size()); ++index) {
      if (std::find(reasons.begin(), reasons.end(), (*stalls)[index].first) == reasons.end())
        reasons.push_back((*stalls)[index].first);
    }
  }
  auto stall_of = [](const KernelGroup& group, const std::string& reason) -> std::optional<double> {
    for (const auto& [name, cycles] : group.stalls) {
      if (name == reason) return cycles;
    }
    return std::nullopt;
  };
  for (const std::string& reason : reasons)
    row("stall_" + reason, stall_of(ga, reason), stall_of(gb, reason));

  const auto time_a = ga.get(Quantity::kDurationNs);
  const auto time_b = gb.get(Quantity::kDurationNs);
  if (!time_a || !time_b || *time_a <= 0 || *time_b <= 0) {
    Finding finding = diff_finding("time", Severity::kInfo, a, b, reproduce);
    finding.claim = "no duration for " + std::string(!time_a || *time_a <= 0 ? "A" : "B") +
                    ": the export lacks the SpeedOfLight section (or gpu__time_duration.sum)";
    finding.next = "record with --section SpeedOfLight";
    comparison.findings.push_back(std::move(finding));
    return comparison;
  }
  const bool a_slower = *time_a >= *time_b;
  const DiffSide& slow = a_slower ? a : b;
  const DiffSide& fast = a_slower ? b : a;
  const double time_ratio = a_slower ? *time_a / *time_b : *time_b / *time_a;

  // The work each did per launch; loads counted the finest way both sides have.
  std::vector<Work> work;
  work.push_back({"instructions", "the instructions", "instructions",
                  slow.group.get(Quantity::kInstructions),
                  fast.group.get(Quantity::kInstructions)});
  struct Loads {
    Quantity quantity;
    const char* words;
    const char* noun;
  };
  for (const Loads& loads :
       {Loads{Quantity::kGlobalLoadInstructions, "the global load instructions",
              "global load instructions"},
        Loads{Quantity::kGlobalLoadRequests, "the global load requests", "global load requests"},
        Loads{Quantity::kGlobalLoadSectors, "the global load sectors", "global load sectors"},
        Loads{Quantity::kLsuPeakSmCycles, "the load/store (LSU pipe) work",
              "load/store (LSU pipe) work, in SM-cycles at the pipe's peak rate,"}}) {
    const auto s = slow.group.get(loads.quantity);
    const auto f = fast.group.get(loads.quantity);
    if (s && f) {
      work.push_back({std::string(quantity_key(loads.quantity)), loads.words, loads.noun, s, f});
      break;
    }
  }
  work.push_back({"dram_bytes", "the DRAM bytes", "DRAM bytes", dram_bytes(slow.group),
                  dram_bytes(fast.group)});
  std::vector<std::pair<double, const Work*>> moved;  // ratio slow/fast, beyond 5 %
  std::string unchanged;
  for (const Work& item : work) {
    if (!item.a || !item.b || *item.b <= 0) continue;
    const double ratio = *item.a / *item.b;
    if (ratio > 1.05) {
      moved.emplace_back(ratio, &item);
    } else {
      unchanged += (unchanged.empty() ? "" : ", ") + item.key + " " + times(ratio);
    }
  }
  std::stable_sort(moved.begin(), moved.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });

  const bool same_time = time_ratio < 1.02;
  Finding lead =
      diff_finding("time", same_time ? Severity::kInfo : Severity::kWarn, a, b, reproduce);
  std::string claim = side_name(slow) + " takes " + times(time_ratio) + " the time per launch of " +
                      side_name(fast) + " (" + duration_text(a_slower ? *time_a : *time_b) +
                      " vs " + duration_text(a_slower ? *time_b : *time_a) + ")";
  lead.evidence.metrics.emplace_back("time_ratio", time_ratio);
  lead.evidence.metrics.emplace_back("duration_ns_a", *time_a);
  lead.evidence.metrics.emplace_back("duration_ns_b", *time_b);
  if (!moved.empty()) {
    claim += ": it executes ";
    for (size_t index = 0; index < moved.size(); ++index) {
      if (index > 0) claim += index + 1 == moved.size() ? " and " : ", ";
      claim += times(moved[index].first) + " " + moved[index].second->words;
      lead.evidence.metrics.emplace_back(moved[index].second->key + "_ratio", moved[index].first);
    }
    if (!unchanged.empty()) claim += " (" + unchanged + ")";
    const bool bytes_moved = std::any_of(moved.begin(), moved.end(), [](const auto& item) {
      return item.second->key == "dram_bytes";
    });
    lead.next = bytes_moved ? "the slower kernel moves more DRAM bytes: find the re-read "
                              "(MemoryWorkloadAnalysis_Tables) and remove it"
                            : "same DRAM traffic, more work per byte: remove the repeated "
                              "instructions and loads (SourceCounters names them)";
  } else {
    const auto cycles_slow = slow.group.get(Quantity::kWarpCyclesPerIssued);
    const auto cycles_fast = fast.group.get(Quantity::kWarpCyclesPerIssued);
    claim += ": the same work";
    if (!unchanged.empty()) claim += " (" + unchanged + ")";
    if (cycles_slow && cycles_fast) {
      claim += "; its warps wait longer: " + format("%.2f", *cycles_slow) + " vs " +
               format("%.2f", *cycles_fast) + " cycles per issued instruction";
    }
    if (!slow.group.stalls.empty()) claim += ", top stall " + slow.group.stalls.front().first;
    lead.next = "compare the stall reasons and occupancy rows: the difference is latency, not work";
  }
  if (same_time) {
    claim = side_name(a) + " and " + side_name(b) + " take the same time per launch (" +
            duration_text(*time_a) + " vs " + duration_text(*time_b) + ")";
    lead.next = "no time difference to explain";
  }
  lead.claim = claim;
  comparison.findings.push_back(std::move(lead));

  // One finding per other difference worth reading, the moved work first.
  for (const auto& [ratio, item] : moved) {
    Finding finding = diff_finding(item->key, Severity::kInfo, a, b, reproduce);
    const double value_a = a_slower ? *item->a : *item->b;
    const double value_b = a_slower ? *item->b : *item->a;
    const bool bytes = item->key == "dram_bytes";
    finding.claim = item->noun + " per launch: A " +
                    (bytes ? bytes_text(value_a) : count_text(value_a)) + ", B " +
                    (bytes ? bytes_text(value_b) : count_text(value_b)) + " (" + side_name(slow) +
                    " " + times(ratio) + ")";
    finding.evidence.metrics = {{item->key + "_a", value_a}, {item->key + "_b", value_b}};
    finding.next = bytes ? "MemoryWorkloadAnalysis_Tables on both kernels shows where the extra "
                           "traffic goes (sectors per request, hit rates)"
                         : "SourceCounters (ncu --section SourceCounters) on both kernels "
                           "names the source lines behind the difference";
    comparison.findings.push_back(std::move(finding));
  }
  const auto binding_a = binding_of(ga);
  const auto binding_b = binding_of(gb);
  if (binding_a && binding_b) {
    Finding finding = diff_finding("bound", Severity::kInfo, a, b, reproduce);
    finding.claim = "A is " + std::string(binding_a->name) + "-bound (top " +
                    std::string(binding_a->top) + " " + pct(binding_a->pct) + "), B is " +
                    std::string(binding_b->name) + "-bound (top " + std::string(binding_b->top) +
                    " " + pct(binding_b->pct) + ")";
    finding.evidence.metrics = {{"bound_pct_a", binding_a->pct}, {"bound_pct_b", binding_b->pct}};
    finding.next = bound_next(binding_of(slow.group)->name);
    comparison.findings.push_back(std::move(finding));
  }
  const auto occupancy_a = ga.get(Quantity::kAchievedOccupancyPct);
  const auto occupancy_b = gb.get(Quantity::kAchievedOccupancyPct);
  if (occupancy_a && occupancy_b) {
    Finding finding = diff_finding("occupancy", Severity::kInfo, a, b, reproduce);
    finding.claim = "achieved occupancy A " + pct(*occupancy_a) + ", B " + pct(*occupancy_b);
    if (auto ta = ga.get(Quantity::kTheoreticalOccupancyPct),
        tb = gb.get(Quantity::kTheoreticalOccupancyPct);
        ta && tb) {
      finding.claim += " (theoretical " + pct(*ta) + ", " + pct(*tb) + ")";
    }
    finding.evidence.metrics = {{"occupancy_achieved_pct_a", *occupancy_a},
                                {"occupancy_achieved_pct_b", *occupancy_b}};
    finding.next = "loupe counters FILE --kernel NAME shows what limits each";
    comparison.findings.push_back(std::move(finding));
  }
  if (!ga.stalls.empty() && !gb.stalls.empty()) {
    Finding finding = diff_finding("stalls", Severity::kInfo, a, b, reproduce);
    finding.claim = "top stall A " + ga.stalls.front().first + " " +
                    format("%.2f", ga.stalls.front().second) + ", B " + gb.stalls.front().first +
                    " " + format("%.2f", gb.stalls.front().second) +
                    " cycles per issued instruction";
    finding.evidence.metrics = {{"stall_top_a", ga.stalls.front().second},
                                {"stall_top_b", gb.stalls.front().second}};
    finding.next = "the stall rows of the table compare every reason";
    comparison.findings.push_back(std::move(finding));
  }
  return comparison;
}

DeclaredBytes parse_declared_bytes(const std::string& text) {
  const size_t equals = text.rfind('=');
  auto bad = [&](const std::string& why) -> DeclaredBytes {
    throw Error(ErrorCode::kUsage, "--bytes '" + text + "': " + why,
                "give REGEX=BYTES, e.g. --bytes 'merged_v_decode=3.2G' (K, M, G, Ki, Mi, Gi)");
  };
  if (equals == std::string::npos || equals == 0 || equals + 1 == text.size())
    return bad("expected REGEX=BYTES");
  std::string number = text.substr(equals + 1);
  if (!number.empty() && (number.back() == 'B' || number.back() == 'b')) number.pop_back();
  double factor = 1;
  for (auto [suffix, scale] : {std::pair{"Ki", 1024.0},
                               {"Mi", 1048576.0},
                               {"Gi", 1073741824.0},
                               {"K", 1e3},
                               {"k", 1e3},
                               {"M", 1e6},
                               {"G", 1e9},
                               {"T", 1e12}}) {
    const std::string_view s(suffix);
    if (number.size() > s.size() && number.compare(number.size() - s.size(), s.size(), s) == 0) {
      number.resize(number.size() - s.size());
      factor = scale;
      break;
    }
  }
  const auto value = parse_number(number);
  if (!value || *value <= 0) return bad("'" + text.substr(equals + 1) + "' is not a positive size");
  const std::string pattern = text.substr(0, equals);
  return DeclaredBytes{Pattern::compile(pattern, "--bytes"), pattern, *value * factor};
}

}  // namespace loupe::counters
