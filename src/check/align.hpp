// check/align.hpp — line up the tokens of an engine that ran a prefill and N decode steps with a
// single forward over the whole sequence, so the two compare position by position.
//
// Layouts (docs/sharded-diff.md, "Token alignment"); the token axis is the one named t, T, s or S
// and must lead, after a batch axis b or B when there is one:
//   padded  (b, t, ...)  row i of a step is request request_ids[i] (default i) and holds its first
//                        seq_lens[i] tokens (default all of t);
//   packed  (t, ...)     the step holds its requests one after another, seq_lens[i] tokens each
//                        (default: one sequence; or one token per request when request_ids has
//                        one id per token, as a decode step does).
// Steps are taken in loupe.step order (else in the order given); each request's tokens are
// concatenated in step order. Requests come out in ascending id order, so two runs that batched
// them differently line up. Without request ids or lengths anywhere the steps are simply
// concatenated along t; with lengths the result is packed (t, ...), the batch axis dropped.
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loupe/tensor.hpp"

namespace loupe::check {

struct StepTensor {
  Tensor tensor;
  std::optional<int64_t> step;                      // loupe.step
  std::optional<std::vector<int64_t>> request_ids;  // loupe.request_ids
  std::optional<std::vector<int64_t>> seq_lens;     // loupe.seq_lens
  std::string origin;                               // for messages
};

struct AlignedTokens {
  Tensor tensor;                       // axes: `axes` (without the batch axis when packed)
  std::string layout;                  // "concatenated", "padded" or "packed"
  std::vector<int64_t> request_ids;    // in output order (empty when concatenated)
  std::vector<int64_t> request_begin;  // packed: where each request starts along t, + the end
  std::vector<int64_t> steps;          // step numbers in the order used (else 0, 1, ...)
  // For every (row, t) of the output (rows = the batch when padded or concatenated, 1 when
  // packed): the index into `steps` of the step the token came from.
  int64_t rows = 1;
  std::vector<int32_t> token_step;
};

// Where along the steps the error of an aligned comparison lies.
struct StepAttribution {
  std::vector<double> squared_error;  // per step, in the order of AlignedTokens::steps
  std::vector<int64_t> mismatches;    // per step: elements outside atol + rtol·|b| (or NaN/Inf)
  double total_squared_error = 0;
  // The first token in (row, t) order holding a mismatch: its step index, row and t.
  std::optional<size_t> first_step;
  int64_t first_row = 0;
  int64_t first_token = 0;
  double share_from_first = 0;  // of the squared error, held by first_step and later steps
};

// REQUIRES: a and b have aligned.tensor's shape. One pass over the pair.
StepAttribution attribute_steps(const Tensor& a, const Tensor& b, const AlignedTokens& aligned,
                                double atol, double rtol);

// "the first token past tolerance is t=2044, from step 5 (6 of 9 steps; a decode step); that
// step and the ones after it hold 100% of the squared error; ...". Empty when none is past.
std::string step_sentence(const StepAttribution& attribution, const AlignedTokens& aligned);

// The axis named t/T/s/S, or nullopt.
std::optional<size_t> token_axis_of(const std::vector<std::string>& axes);

// REQUIRES nothing: throws Error(kInput) naming `what`, the step's origin and the axis when the
// steps disagree on dtype or on an axis other than t (or b), a request appears twice in a step,
// lengths or ids do not match the step's extents, or steps mix having loupe.step and not;
// Error(kUsage) when `axes` names no token axis or it is not where the layouts need it.
AlignedTokens align_tokens(std::span<const StepTensor> steps, const std::vector<std::string>& axes,
                           std::string_view what, bool force_packed = false);

// Whether a set of steps needs the request-aware path (any ids or lengths given).
bool has_request_metadata(std::span<const StepTensor> steps);

}  // namespace loupe::check
