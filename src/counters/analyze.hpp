// counters/analyze.hpp — per-kernel findings and two-kernel comparisons from ncu measurements.
//
// Launches group by kernel (demangled name) and launch configuration (block, grid); every
// quantity of a group is the median over its launches. Quantities are looked up through one
// table (analyze.cpp, kQuantities) that lists, for each, the details-page (section, metric) and
// raw-page metric names ncu uses, so a renamed metric is one table line.
// Findings (layer counters, ids counters.<kernel>.<kind>, metric names in docs/formats.md):
//   bound      the binding limit: DRAM, L2, L1, SM (compute) — the unit with the highest share
//              of its peak — or latency when none reaches kBoundThresholdPct
//   occupancy  achieved vs theoretical occupancy, what limits the theoretical one, and the gap
//   stalls     the top warp-stall reasons (raw page)
//   bytes      DRAM bytes per launch, against the bytes the kernel must move when declared
//   advice     ncu's own rule results, quoted with their estimated speedup, largest first
// diff compares two groups side by side and leads with the difference that explains the time
// difference: the work counts (instructions, global loads, DRAM bytes) that moved with the time,
// largest first; when none did, the stalls and occupancy.
// Errors: bad patterns and kernels that match nothing (or too much) throw Error(kUsage) naming
// the option and listing the kernels there are.
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/finding.hpp"
#include "core/pattern.hpp"
#include "counters/profile.hpp"

namespace loupe::counters {

inline constexpr double kBoundThresholdPct = 60.0;

enum class Quantity {
  kDurationNs,
  kElapsedCycles,
  kSolMemoryPct,
  kSolDramPct,
  kSolL1Pct,
  kSolL2Pct,
  kSolSmPct,
  kDramBytesRead,
  kDramBytesWrite,
  kDramBandwidth,  // byte/s
  kL1HitPct,
  kL2HitPct,
  kIpcElapsed,  // per SM
  kIpcActive,
  kIssueSlotsBusyPct,
  kInstructions,            // warp-level instructions executed
  kGlobalLoadInstructions,  // warp-level global load instructions
  kGlobalLoadRequests,      // L1/TEX requests of global loads
  kGlobalLoadSectors,       // 32-byte sectors of global loads
  kTheoreticalOccupancyPct,
  kAchievedOccupancyPct,
  kTheoreticalWarps,
  kAchievedWarps,
  kBlockLimitRegisters,
  kBlockLimitSharedMem,
  kBlockLimitWarps,
  kBlockLimitSm,
  kBlockLimitBarriers,
  kRegistersPerThread,
  kStaticSharedBytes,
  kDynamicSharedBytes,
  kBlockThreads,
  kGridBlocks,
  kSmCount,
  kWavesPerSm,
  kWarpCyclesPerIssued,
  kLsuPipeElapsedPct,  // the LSU (load/store) pipe's share of its peak over the elapsed cycles
  // Derived, proportional to the load/store instructions: the SM-cycles the LSU work would take
  // at the pipe's peak rate (lsu_pipe_elapsed_pct / 100 × elapsed cycles × SMs). Used when no
  // load counter was collected; comparable between kernels of one device, not an absolute count.
  kLsuPeakSmCycles,
  kCount
};
inline constexpr size_t kQuantityCount = static_cast<size_t>(Quantity::kCount);

// The metric name a quantity carries in findings (evidence.metrics) and in data: "duration_ns".
std::string_view quantity_key(Quantity quantity);
// The quantity's value in one launch through the lookup table, in base units; nullopt if absent.
std::optional<double> lookup(const Profile& profile, const Launch& launch, Quantity quantity);

struct RuleAdvice {
  std::string name;
  std::string type;
  std::string description;
  std::string speedup_type;
  double speedup_pct = 0;  // median over the launches it fired in; NaN when ncu gave none
  size_t launches = 0;
};

struct KernelGroup {
  std::string kernel;      // as ncu printed it
  std::string short_name;  // the function's own name, id-safe: "merged_v_decode"
  std::string block;
  std::string grid;
  std::vector<const Launch*> launches;
  std::array<std::optional<double>, kQuantityCount> medians{};
  bool instructions_derived = false;                   // from IPC × cycles × SMs, not a counter
  std::vector<std::pair<std::string, double>> stalls;  // reason → cycles per issued instruction
  std::vector<RuleAdvice> advice;                      // largest estimated speedup first

  std::optional<double> get(Quantity quantity) const {
    return medians[static_cast<size_t>(quantity)];
  }
  // "merged_v_decode block (128, 1, 1) grid (64, 16, 1)".
  std::string label() const;
};

// Groups the launches (in first-launch order). `filter` keeps the launches it finds in
// "KERNEL block (x, y, z) grid (x, y, z)": a name, or a name and a configuration.
std::vector<KernelGroup> group_launches(const Profile& profile,
                                        const std::optional<Pattern>& filter = std::nullopt);

struct DeclaredBytes {
  Pattern kernel;
  std::string pattern;
  double bytes = 0;
};

struct AnalyzeOptions {
  std::optional<Pattern> kernel_filter;
  std::string kernel_pattern;  // as given, for messages
  std::vector<DeclaredBytes> declared;
  std::string reproduce;
  size_t max_findings = 24;  // the most severe first; the rest counted in data
  bool detail = false;       // every finding and rule
};

struct Analysis {
  std::vector<KernelGroup> groups;
  std::vector<Finding> findings;
  size_t findings_omitted = 0;
};

Analysis analyze(const Profile& profile, const AnalyzeOptions& options);
// The findings of one kernel, in the order bound, occupancy, stalls, bytes, advice.
std::vector<Finding> kernel_findings(const KernelGroup& group, const AnalyzeOptions& options);

// The binding limit of a group, as its `bound` finding states it: the unit with the highest share
// of its peak ("DRAM", "L2", "L1", "SM"), or "latency" when none reaches kBoundThresholdPct
// (then `top` names the highest unit); nullopt when no speed-of-light share was measured.
struct BoundSummary {
  std::string limit;
  double pct = 0;
  std::string top;
};
std::optional<BoundSummary> bound_of(const KernelGroup& group);

struct DiffSide {
  std::string label;  // "A" / "B" or the file name
  KernelGroup group;
};

// A row of the side-by-side table.
struct DiffRow {
  std::string metric;  // quantity_key or "stall_<reason>"
  std::optional<double> a;
  std::optional<double> b;
};

struct Comparison {
  std::vector<DiffRow> rows;
  std::vector<Finding> findings;  // the explanation first
};

Comparison compare(const DiffSide& a, const DiffSide& b, const std::string& reproduce);

// Parses "REGEX=BYTES" (BYTES a number with an optional K/M/G/Ki/Mi/Gi suffix and optional B).
// Throws Error(kUsage) naming the text.
DeclaredBytes parse_declared_bytes(const std::string& text);

}  // namespace loupe::counters
