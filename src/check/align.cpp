#include "check/align.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "check/compare.hpp"
#include "check/metrics.hpp"
#include "loupe/error.hpp"

namespace loupe::check {
namespace {

// One run of tokens of one request in one step: `count` tokens from byte offset `offset`.
struct Run {
  size_t step = 0;
  int64_t first_token = 0;  // flat token index in the step's tensor (row * T + t, or t)
  int64_t count = 0;
};

const std::string kAlignHint =
    "token alignment reads (b, t, ...) padded or (t, ...) packed steps with loupe.step, "
    "loupe.request_ids and loupe.seq_lens (docs/sharded-diff.md)";

}  // namespace

std::optional<size_t> token_axis_of(const std::vector<std::string>& axes) {
  for (size_t index = 0; index < axes.size(); ++index) {
    const std::string& name = axes[index];
    if (name == "t" || name == "T" || name == "s" || name == "S") return index;
  }
  return std::nullopt;
}

bool has_request_metadata(std::span<const StepTensor> steps) {
  return std::any_of(steps.begin(), steps.end(), [](const StepTensor& step) {
    return step.request_ids.has_value() || step.seq_lens.has_value();
  });
}

AlignedTokens align_tokens(std::span<const StepTensor> steps, const std::vector<std::string>& axes,
                           std::string_view what, bool force_packed) {
  const std::string name(what);
  if (steps.empty()) {
    throw Error(ErrorCode::kInput, "'" + name + "': no step to align", kAlignHint);
  }
  const auto token = token_axis_of(axes);
  if (!token) {
    std::string names;
    for (const auto& axis : axes) names += (names.empty() ? "" : " ") + axis;
    throw Error(ErrorCode::kUsage,
                "'" + name +
                    "': aligning tokens needs an axis named t (or T, s, S); the axes are '" +
                    names + "'",
                "name the axes with --dims (e.g. --dims 'b t h d') or loupe.dims");
  }
  const bool padded = *token == 1 && (axes[0] == "b" || axes[0] == "B");
  if (!padded && *token != 0) {
    throw Error(ErrorCode::kUsage,
                "'" + name + "': the token axis '" + axes[*token] + "' is axis " +
                    std::to_string(*token) +
                    "; expected it first (packed t ...) or second after "
                    "a batch axis b (padded b t ...)",
                kAlignHint);
  }
  // Steps in loupe.step order when every step has one.
  std::vector<size_t> order(steps.size());
  for (size_t index = 0; index < steps.size(); ++index) order[index] = index;
  const size_t with_step = static_cast<size_t>(std::count_if(
      steps.begin(), steps.end(), [](const StepTensor& step) { return step.step.has_value(); }));
  if (with_step != 0 && with_step != steps.size()) {
    for (const StepTensor& step : steps) {
      if (!step.step) {
        throw Error(ErrorCode::kInput,
                    "'" + name + "': " + step.origin +
                        " has no loupe.step, but other steps have one; expected all or none",
                    kAlignHint);
      }
    }
  }
  if (with_step == steps.size()) {
    std::stable_sort(order.begin(), order.end(), [&](size_t left, size_t right) {
      return *steps[left].step < *steps[right].step;
    });
    for (size_t index = 1; index < order.size(); ++index) {
      if (*steps[order[index]].step == *steps[order[index - 1]].step) {
        throw Error(ErrorCode::kInput,
                    "'" + name + "': " + steps[order[index - 1]].origin + " and " +
                        steps[order[index]].origin + " are both step " +
                        std::to_string(*steps[order[index]].step),
                    kAlignHint);
      }
    }
  }

  // Every step agrees on dtype and on the axes after t.
  const Tensor& first = steps[order[0]].tensor;
  const size_t rank = axes.size();
  for (size_t index : order) {
    const StepTensor& step = steps[index];
    if (static_cast<size_t>(step.tensor.rank()) != rank) {
      throw Error(ErrorCode::kInput,
                  "'" + name + "': " + step.origin + " has shape " +
                      shape_to_string(step.tensor.shape()) + ", but the axes name " +
                      std::to_string(rank),
                  kAlignHint);
    }
    if (step.tensor.dtype() != first.dtype()) {
      throw Error(ErrorCode::kInput,
                  "'" + name + "': " + step.origin + " is " +
                      std::string(dtype_name(step.tensor.dtype())) + ", the first step is " +
                      std::string(dtype_name(first.dtype())),
                  kAlignHint);
    }
    for (size_t axis = *token + 1; axis < rank; ++axis) {
      if (step.tensor.shape()[axis] != first.shape()[axis]) {
        throw Error(ErrorCode::kInput,
                    "'" + name + "': " + step.origin + ": axis '" + axes[axis] + "' has extent " +
                        std::to_string(step.tensor.shape()[axis]) + ", the first step has " +
                        std::to_string(first.shape()[axis]) + "; only " + axes[*token] +
                        (padded ? " and " + axes[0] : std::string()) + " may differ",
                    kAlignHint);
      }
    }
  }
  int64_t inner = 1;
  for (size_t axis = *token + 1; axis < rank; ++axis) inner *= first.shape()[axis];
  const size_t element = dtype_size(first.dtype());
  const size_t token_bytes = static_cast<size_t>(inner) * element;

  AlignedTokens result;
  for (size_t position = 0; position < order.size(); ++position) {
    result.steps.push_back(steps[order[position]].step.value_or(static_cast<int64_t>(position)));
  }
  std::vector<int32_t> step_position(steps.size(), 0);
  for (size_t position = 0; position < order.size(); ++position) {
    step_position[order[position]] = static_cast<int32_t>(position);
  }
  const bool requests = has_request_metadata(steps);

  if (!requests && !force_packed) {
    // Plain concatenation along t, row by row when padded.
    std::vector<int64_t> shape = first.shape();
    const int64_t batch = padded ? first.shape()[0] : 1;
    int64_t total = 0;
    for (size_t index : order) {
      const Tensor& tensor = steps[index].tensor;
      if (padded && tensor.shape()[0] != batch) {
        throw Error(ErrorCode::kInput,
                    "'" + name + "': " + steps[index].origin + ": axis '" + axes[0] +
                        "' has extent " + std::to_string(tensor.shape()[0]) +
                        ", the first step has " + std::to_string(batch) +
                        "; give loupe.request_ids when the batch changes between steps",
                    kAlignHint);
      }
      total += tensor.shape()[*token];
    }
    shape[*token] = total;
    result.tensor = Tensor(first.dtype(), shape);
    result.layout = "concatenated";
    std::byte* out = result.tensor.mutable_bytes();
    result.rows = batch;
    result.token_step.resize(static_cast<size_t>(batch * total));
    for (int64_t row = 0; row < batch; ++row) {
      int64_t position = 0;
      for (size_t index : order) {
        const Tensor& tensor = steps[index].tensor;
        const int64_t length = tensor.shape()[*token];
        std::memcpy(out + (row * total + position) * token_bytes,
                    tensor.bytes() + row * length * token_bytes,
                    static_cast<size_t>(length) * token_bytes);
        std::fill_n(result.token_step.begin() + row * total + position, length,
                    step_position[index]);
        position += length;
      }
    }
    result.tensor.axes = axes;
    return result;
  }

  // Request-aware: collect each request's runs in step order.
  std::map<int64_t, std::vector<Run>> runs;
  bool any_lengths = force_packed;
  for (size_t index : order) {
    const StepTensor& step = steps[index];
    const std::vector<int64_t>& shape = step.tensor.shape();
    const int64_t rows = padded ? shape[0] : 1;
    const int64_t tokens = shape[*token];
    std::vector<int64_t> ids, lengths, starts;
    if (padded) {
      ids.resize(static_cast<size_t>(rows));
      for (int64_t row = 0; row < rows; ++row) ids[row] = row;
      if (step.request_ids) ids = *step.request_ids;
      if (static_cast<int64_t>(ids.size()) != rows) {
        throw Error(ErrorCode::kInput,
                    "'" + name + "': " + step.origin + ": loupe.request_ids has " +
                        std::to_string(ids.size()) + " ids, axis '" + axes[0] + "' has " +
                        std::to_string(rows) + " rows",
                    kAlignHint);
      }
      lengths.assign(static_cast<size_t>(rows), tokens);
      if (step.seq_lens) {
        lengths = *step.seq_lens;
        any_lengths = true;
      }
      if (static_cast<int64_t>(lengths.size()) != rows) {
        throw Error(ErrorCode::kInput,
                    "'" + name + "': " + step.origin + ": loupe.seq_lens has " +
                        std::to_string(lengths.size()) + " lengths, axis '" + axes[0] + "' has " +
                        std::to_string(rows) + " rows",
                    kAlignHint);
      }
      for (int64_t row = 0; row < rows; ++row) {
        if (lengths[row] > tokens) {
          throw Error(ErrorCode::kInput,
                      "'" + name + "': " + step.origin + ": loupe.seq_lens gives row " +
                          std::to_string(row) + " " + std::to_string(lengths[row]) +
                          " tokens, but axis '" + axes[*token] + "' has " + std::to_string(tokens),
                      kAlignHint);
        }
        starts.push_back(row * tokens);
      }
    } else {
      any_lengths = true;
      if (step.seq_lens) {
        lengths = *step.seq_lens;
      } else if (step.request_ids && static_cast<int64_t>(step.request_ids->size()) == tokens) {
        lengths.assign(static_cast<size_t>(tokens), 1);  // a decode step: one token per request
      } else {
        lengths = {tokens};
      }
      ids.resize(lengths.size());
      for (size_t item = 0; item < ids.size(); ++item) ids[item] = static_cast<int64_t>(item);
      if (step.request_ids) ids = *step.request_ids;
      if (ids.size() != lengths.size()) {
        throw Error(ErrorCode::kInput,
                    "'" + name + "': " + step.origin + ": loupe.request_ids has " +
                        std::to_string(ids.size()) + " ids, loupe.seq_lens " +
                        std::to_string(lengths.size()) + " lengths; expected one id per sequence",
                    kAlignHint);
      }
      int64_t sum = 0;
      for (int64_t length : lengths) {
        starts.push_back(sum);
        sum += length;
      }
      if (sum != tokens) {
        throw Error(ErrorCode::kInput,
                    "'" + name + "': " + step.origin + ": loupe.seq_lens sum to " +
                        std::to_string(sum) + ", but axis '" + axes[*token] + "' has " +
                        std::to_string(tokens) + " tokens",
                    kAlignHint);
      }
    }
    for (size_t item = 0; item < ids.size(); ++item) {
      std::vector<Run>& list = runs[ids[item]];
      if (!list.empty() && list.back().step == index) {
        throw Error(ErrorCode::kInput,
                    "'" + name + "': " + step.origin + ": request " + std::to_string(ids[item]) +
                        " appears twice in one step",
                    kAlignHint);
      }
      list.push_back({index, starts[item], lengths[item]});
    }
  }

  std::vector<int64_t> totals;
  int64_t grand_total = 0;
  for (const auto& [id, list] : runs) {
    int64_t total = 0;
    for (const Run& run : list) total += run.count;
    result.request_ids.push_back(id);
    totals.push_back(total);
    grand_total += total;
  }
  std::vector<int64_t> shape;
  if (any_lengths) {
    // Packed: (t, ...) with every request's tokens one after another.
    shape.push_back(grand_total);
    for (size_t axis = *token + 1; axis < rank; ++axis) shape.push_back(first.shape()[axis]);
    result.layout = "packed";
    int64_t begin = 0;
    for (int64_t total : totals) {
      result.request_begin.push_back(begin);
      begin += total;
    }
    result.request_begin.push_back(begin);
  } else {
    // Padded with full rows everywhere: (b, t, ...) needs every request to reach one length.
    for (size_t item = 0; item < totals.size(); ++item) {
      if (totals[item] != totals[0]) {
        throw Error(ErrorCode::kInput,
                    "'" + name + "': request " + std::to_string(result.request_ids[item]) +
                        " has " + std::to_string(totals[item]) +
                        " tokens over the steps, request " + std::to_string(result.request_ids[0]) +
                        " has " + std::to_string(totals[0]) +
                        "; give loupe.seq_lens to compare requests of different lengths",
                    kAlignHint);
      }
    }
    shape = first.shape();
    shape[0] = static_cast<int64_t>(totals.size());
    shape[1] = totals.empty() ? 0 : totals[0];
    result.layout = "padded";
  }
  result.tensor = Tensor(first.dtype(), shape);
  std::byte* out = result.tensor.mutable_bytes();
  result.rows = any_lengths ? 1 : static_cast<int64_t>(totals.size());
  result.token_step.resize(static_cast<size_t>(grand_total));
  int64_t position = 0;
  for (const auto& [id, list] : runs) {
    for (const Run& run : list) {
      std::memcpy(out + position * token_bytes,
                  steps[run.step].tensor.bytes() + run.first_token * token_bytes,
                  static_cast<size_t>(run.count) * token_bytes);
      std::fill_n(result.token_step.begin() + position, run.count, step_position[run.step]);
      position += run.count;
    }
  }
  std::vector<std::string> out_axes;
  if (any_lengths) {
    for (size_t axis = *token; axis < rank; ++axis) out_axes.push_back(axes[axis]);
  } else {
    out_axes = axes;
  }
  result.tensor.axes = out_axes;
  return result;
}

StepAttribution attribute_steps(const Tensor& a, const Tensor& b, const AlignedTokens& aligned,
                                double atol, double rtol) {
  StepAttribution result;
  result.squared_error.assign(aligned.steps.size(), 0.0);
  result.mismatches.assign(aligned.steps.size(), 0);
  const int64_t positions = static_cast<int64_t>(aligned.token_step.size());
  if (positions == 0) return result;
  const int64_t inner = a.numel() / positions;
  const int64_t tokens = positions / aligned.rows;
  std::vector<double> values_a(static_cast<size_t>(inner)), values_b(values_a.size());
  // Per step, the first position holding a mismatch: rows interleave steps differently, so
  // the earliest step (not the earliest position) is the one to name.
  std::vector<int64_t> first_position(aligned.steps.size(), -1);
  for (int64_t position = 0; position < positions; ++position) {
    detail::decode_to_double(a, position * inner, inner, values_a.data());
    detail::decode_to_double(b, position * inner, inner, values_b.data());
    const size_t step = static_cast<size_t>(aligned.token_step[position]);
    double squared = 0;
    int64_t mismatches = 0;
    for (int64_t index = 0; index < inner; ++index) {
      const double value_a = values_a[index], value_b = values_b[index];
      const double diff = value_a - value_b;
      if (std::isfinite(diff)) {
        squared += diff * diff;
        if (std::abs(diff) > atol + rtol * std::abs(value_b)) ++mismatches;
      } else if (!(value_a == value_b) && !(std::isnan(value_a) && std::isnan(value_b))) {
        ++mismatches;  // a NaN/Inf the other side does not have
      }
    }
    result.squared_error[step] += squared;
    result.mismatches[step] += mismatches;
    if (mismatches > 0 && first_position[step] < 0) first_position[step] = position;
  }
  for (size_t step = 0; step < first_position.size(); ++step) {
    if (first_position[step] < 0) continue;
    result.first_step = step;
    result.first_row = first_position[step] / tokens;
    result.first_token = first_position[step] % tokens;
    break;
  }
  for (double value : result.squared_error) result.total_squared_error += value;
  if (result.first_step && result.total_squared_error > 0) {
    double held = 0;
    for (size_t step = *result.first_step; step < result.squared_error.size(); ++step) {
      held += result.squared_error[step];
    }
    result.share_from_first = held / result.total_squared_error;
  }
  return result;
}

std::string step_sentence(const StepAttribution& attribution, const AlignedTokens& aligned) {
  if (!attribution.first_step) return {};
  const size_t step = *attribution.first_step;
  std::string where = "t=" + std::to_string(attribution.first_token);
  if (!aligned.request_begin.empty()) {
    // Packed: the request and the token's index within it.
    for (size_t request = 0; request + 1 < aligned.request_begin.size(); ++request) {
      if (attribution.first_token < aligned.request_begin[request + 1]) {
        where += " (request " + std::to_string(aligned.request_ids[request]) + ", its token " +
                 std::to_string(attribution.first_token - aligned.request_begin[request]) + ")";
        break;
      }
    }
  } else if (aligned.rows > 1) {
    where += " of row " + std::to_string(attribution.first_row);
    if (!aligned.request_ids.empty()) {
      where += " (request " + std::to_string(aligned.request_ids[attribution.first_row]) + ")";
    }
  }
  char share[32];
  std::snprintf(share, sizeof share, "%.3g%%", attribution.share_from_first * 100);
  std::string out = "the first token past tolerance is " + where + ", from step " +
                    std::to_string(aligned.steps[step]) + " (" + std::to_string(step + 1) + " of " +
                    std::to_string(aligned.steps.size()) + " steps; " +
                    (step == 0 ? "the prefill" : "a decode step") + ")";
  out +=
      step + 1 < aligned.steps.size()
          ? "; that step and the ones after it hold " + std::string(share) + " of the squared error"
          : "; it holds " + std::string(share) + " of the squared error";
  if (step > 0) out += "; the steps before it are within tolerance";
  return out;
}

}  // namespace loupe::check
