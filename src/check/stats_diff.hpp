// check/stats_diff.hpp — `loupe diff` of stats-only dumps (docs/formats.md, "Stats-only dumps"):
// a run too large to write out records per tensor its shape, dtype, a SHA-256 of its bytes, its
// norm, mean and a few quantiles (loupe.dump(..., stats_only=True) writes DIR/loupe-stats.jsonl).
// Two such runs, or one and a full dump (whose stats are computed here, the same way), are
// compared tensor by tensor in execution order; the first divergent tensor is the one to dump in
// full next.
//
// The rule, per tensor: differing shapes diverge; equal dtypes and equal SHA-256 are identical;
// differing NaN or Inf counts diverge; otherwise norm_rel = |‖A‖ − ‖B‖| / max(‖A‖, ‖B‖) and
// quantile_rel = max over the levels of |qA − qB| / max(rmsA, rmsB) (rms = ‖·‖ / √finite) are
// each held to the relative tolerance (--rtol, else assert_close's default rtol for the coarser
// dtype): past it, the tensor diverges; within it, it agrees in its stats (its values differ).
// Thread-safety: one call owns its result.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "check/diff.hpp"
#include "loupe/tensor.hpp"

namespace loupe::check {

// min, 1 %, median, 99 %, max: the levels a stats-only dump records.
inline constexpr double kStatsQuantiles[] = {0.0, 0.01, 0.5, 0.99, 1.0};
inline constexpr const char* kStatsFile = "loupe-stats.jsonl";

struct TensorStats {
  std::string name;    // as a full dump names it: "<module>.call<k>.safetensors:output"
  std::string module;  // the module path (empty for a tensor of a full dump)
  int64_t call = -1;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string sha256;  // of the raw little-endian bytes in C order
  double norm = 0;     // L2 norm of the finite values, in float64
  double mean = 0;     // of the finite values
  int64_t finite = 0;
  int64_t nan_count = 0;
  int64_t inf_count = 0;
  std::vector<double> quantiles;  // of the finite values at kStatsQuantiles (numpy's linear)
};

// The stats of a tensor, computed as loupe.dump's stats_only does.
TensorStats tensor_stats(const std::string& name, const Tensor& tensor);

// Whether `path` is a directory holding a stats-only dump (loupe-stats.jsonl).
bool is_stats_dump(const std::filesystem::path& path);

// Reads DIR/loupe-stats.jsonl. Throws Error(kInput) naming the file, the line and the field for a
// malformed header or record.
std::vector<TensorStats> read_stats_dump(const std::filesystem::path& dir, const std::string& side);

struct StatsComparison {
  std::string name;
  std::string module;  // from the stats-only side
  int64_t call = -1;
  TensorStats a;
  TensorStats b;
  // "identical" (same bytes), "agrees" (stats within tolerance, bytes differ), "diverged".
  std::string verdict;
  std::string reason;  // why it diverged, or how closely it agrees
  double norm_rel = 0;
  double quantile_rel = 0;
  double limit = 0;  // the relative tolerance applied
};

struct StatsDiffResult {
  std::string side_a;  // "stats" or "full"
  std::string side_b;
  std::vector<StatsComparison> comparisons;  // in execution order
  std::vector<std::string> only_in_a;
  std::vector<std::string> only_in_b;
  std::optional<size_t> first_divergence;
};

// Either side (or both) a stats-only dump, the other a plain directory of .safetensors/.npy files.
// Throws Error(kUsage) for an option that needs full values on both sides (--rules, --tol,
// --oracle, --along, --dims, --parallel) and for a sharded (rank-<r>/) full side.
StatsDiffResult run_stats_diff(const DiffRequest& request);

// 0 when every tensor is identical or agrees and both sides hold the same names (or
// report_only); 1 otherwise.
int stats_diff_exit_code(const StatsDiffResult& result, const DiffRequest& request);
std::string render_stats_diff_summary(const StatsDiffResult& result, const DiffRequest& request);
// One envelope (kind "diff", data.mode "stats"): the first divergence as a finding whose `next`
// names the tensor to dump in full, data.tensors with each tensor's stats and verdict.
std::string render_stats_diff_json(const StatsDiffResult& result, const DiffRequest& request);

}  // namespace loupe::check
