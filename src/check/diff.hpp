// check/diff.hpp — `loupe diff`: pair the tensors of two inputs (files or directories), compare
// each pair, find the first divergence in order and the worst pairs, and render the result.
//
// Inputs: .npy files, .safetensors files (every tensor present in both, or the one named), or two
// directories (every file name present in both; a .safetensors inside contributes its tensors as
// "file.safetensors:tensor"). Order: manifest.txt in A's directory (else B's), one name per line;
// else file names in natural numeric order when every name holds a number; a safetensors file's
// own order. A tensor on one side only is reported and counted (diff_tensor_only_in_a/b); a
// non-tensor file in a directory is counted (diff_file_not_tensor).
// Sharded and stepped dumps (docs/sharded-diff.md): a directory of rank-<r>/ subdirectories is
// one run's ranks, each tensor unsharded by its dims spec (--dims, else the loupe.dims metadata)
// and the run's groups (--parallel, else loupe.parallel) before it is compared; a directory of
// step-<s>/ subdirectories is a prefill and its decode steps, aligned token by token with the
// other side (check/align.hpp). A step may itself hold rank-<r>/ subdirectories.
// Errors: unreadable inputs, differing shapes and incomparable dtypes throw Error(kInput) naming
// the side (A, B or the oracle), the file and what was expected.
// Thread-safety: one call owns its result.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "check/align.hpp"
#include "check/compare.hpp"
#include "check/rules.hpp"
#include "check/unshard.hpp"
#include "core/stats_registry.hpp"

namespace loupe::check {

struct DiffResult;

struct DiffRequest {
  std::filesystem::path a;
  std::filesystem::path b;
  std::optional<std::filesystem::path> oracle;
  std::optional<std::string> name;  // compare only this tensor (or file) name
  std::vector<std::string> axes;    // --axes, one name per axis
  std::optional<std::string> along;
  std::vector<Bound> bounds;  // --tol
  // --rules: the first rule matching a tensor's name decides it (check/rules.hpp); exclusive
  // with bounds.
  std::optional<RuleSet> rules;
  // --report-only: print the comparison, decide nothing (verdict none, exit 0).
  bool report_only = false;
  // --dims, each "SPEC" (every tensor) or "NAME=SPEC" (that tensor); over loupe.dims metadata.
  std::vector<std::string> dims;
  std::optional<std::string> parallel;    // --parallel: A's groups (and B's without parallel_b)
  std::optional<std::string> parallel_b;  // --parallel-b
  // The elementwise rule of mismatch_count (assert_close's rtol/atol); per-dtype defaults unset.
  std::optional<Tolerance> tolerance;
  // --equal-nan: NaN against NaN agrees (torch.testing.assert_close's equal_nan).
  bool equal_nan = false;
  // Compute the statistics of every pair (a second pass over the data; `loupe diff` sets it for
  // --json and --jsonl). They are computed anyway when a bound or a rule names one.
  bool statistics = false;
  // Every finding's `reproduce`; unset: the `loupe diff` command line of this request. In-memory
  // callers (the Python package) set it, since their A and B are labels, not files.
  std::optional<std::string> reproduce;
  // Called once per compared pair, as soon as it is compared and decided (`loupe diff --jsonl`
  // streams each line from here); `index` is the pair's index in result.comparisons.
  std::function<void(const DiffResult& result, size_t index)> on_compared;
};

// What unsharding one side of a comparison says about its ranks.
struct ShardReport {
  std::string side;  // "A" or "B"
  ShardLayout layout;
  ShardAttribution attribution;
  std::vector<ReplicaMismatch> replica_mismatches;
};

// How the tokens of the two sides were lined up (check/align.hpp).
struct TokenAlignmentReport {
  std::string layout;  // "concatenated", "padded" or "packed"
  std::vector<int64_t> request_ids;
  std::vector<int64_t> request_begin;
  size_t steps_a = 0;
  size_t steps_b = 0;
  // The stepped side's alignment (A's, else B's; its tensor left empty) and where along its
  // steps the error lies.
  std::string stepped_side;
  AlignedTokens steps;
  StepAttribution attribution;
};

struct DiffResult {
  std::vector<TensorComparison> comparisons;  // in order (see above)
  std::vector<std::string> only_in_a;
  std::vector<std::string> only_in_b;
  std::vector<std::string> not_tensor;  // files in a compared directory that hold no tensor
  std::string order;  // "manifest.txt", "natural", "safetensors", "single" or "unordered"
  bool ordered = false;
  std::vector<bool> diverged;                           // per comparison
  std::vector<std::vector<BoundResult>> bound_results;  // per comparison (empty without --tol)
  std::vector<std::optional<size_t>> rule_index;        // per comparison: its rule (--rules)
  std::optional<size_t> first_divergence;  // index into comparisons (ordered inputs only)
  std::vector<size_t> worst;  // indices of diverged comparisons by rms_ratio, largest first
  bool any_bound_failed = false;
  std::vector<std::vector<ShardReport>> shards;                 // per comparison
  std::vector<std::optional<TokenAlignmentReport>> alignments;  // per comparison
  StatsRegistry stats;
};

DiffResult run_diff(const DiffRequest& request);

// One named pair held in memory (the Python package's arrays and dicts of tensors).
struct TensorPair {
  std::string name;
  Tensor a;
  Tensor b;
  std::optional<Tensor> oracle;
};
// The same comparison over pairs in memory, in the order given (ordered when more than one);
// request.a, request.b and request.oracle are labels for messages; request.name is unused.
DiffResult run_diff_pairs(const std::vector<TensorPair>& pairs, const DiffRequest& request);

// Why a diff fails, empty when it passes (or with report_only): a pair past tolerance (the --tol
// bounds, else the elementwise tolerance: request.tolerance or the per-dtype defaults of
// check/metrics.hpp `default_tolerance`), nothing compared, or a tensor of one side with no
// partner on the other. A dump step that wrote nothing or other names must not read as agreement.
std::vector<std::string> diff_failures(const DiffResult& result, const DiffRequest& request);

// 0: the diff passes, or report_only; 1: diff_failures is not empty.
int diff_exit_code(const DiffResult& result, const DiffRequest& request);

// The compact human summary: the first divergence, the worst few, "+N more; use --json or
// --name". Stays under ~2,000 tokens for any number of tensors.
std::string render_diff_summary(const DiffResult& result, const DiffRequest& request);

// Exactly one envelope (kind "diff") on one line: findings for the first divergence and the worst
// pairs, data with the per-tensor metrics table, the pairing and the profiles.
std::string render_diff_json(const DiffResult& result, const DiffRequest& request);

// One compared pair as `--json` lists it in data.tensors (and `--jsonl` streams it).
std::string render_diff_tensor_line(const DiffResult& result, const DiffRequest& request,
                                    size_t index);
// `--jsonl`'s last line: the envelope of render_diff_json without data.tensors (streamed above),
// kind "diff.summary".
std::string render_diff_summary_line(const DiffResult& result, const DiffRequest& request);

// Natural order: digit runs compare by value ("layer_2" < "layer_10"), the rest by bytes.
bool natural_less(const std::string& left, const std::string& right);

}  // namespace loupe::check
