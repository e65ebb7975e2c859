#include "check/stats_diff.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <string_view>

#include "check/metrics.hpp"
#include "core/json.hpp"
#include "core/sha256.hpp"
#include "loupe/error.hpp"

namespace loupe::check {
namespace {

namespace fs = std::filesystem;

// JSON has no NaN or infinity: a stats file writes them as "nan", "inf", "-inf".
double number_field(const Json& value, const std::string& where) {
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    if (text == "nan") return NAN;
    if (text == "inf") return INFINITY;
    if (text == "-inf") return -INFINITY;
  }
  throw Error(ErrorCode::kInput, where + ": expected a number (or \"nan\", \"inf\", \"-inf\")");
}

TensorStats stats_from_json(const Json& line, const std::string& where) {
  TensorStats stats;
  try {
    stats.name = line.at("name").get<std::string>();
    stats.module = line.value("module", "");
    stats.call = line.value("call", int64_t{-1});
    stats.dtype = line.at("dtype").get<std::string>();
    stats.shape = line.at("shape").get<std::vector<int64_t>>();
    stats.sha256 = line.at("sha256").get<std::string>();
    stats.norm = number_field(line.at("norm"), where + ": norm");
    stats.mean = number_field(line.at("mean"), where + ": mean");
    stats.finite = line.at("finite").get<int64_t>();
    stats.nan_count = line.at("nan_count").get<int64_t>();
    stats.inf_count = line.at("inf_count").get<int64_t>();
    for (const Json& value : line.at("quantiles")) {
      stats.quantiles.push_back(number_field(value, where + ": quantiles"));
    }
  } catch (const Json::exception& error) {
    throw Error(ErrorCode::kInput,
                where + ": " + json_error_text(error) +
                    "; expected name, dtype, shape, sha256, norm, mean, finite, nan_count, "
                    "inf_count, quantiles",
                "write stats-only dumps with loupe.dump(..., stats_only=True)");
  }
  if (!dtype_from_name(stats.dtype)) {
    throw Error(ErrorCode::kInput, where + ": dtype '" + stats.dtype + "' is not a loupe dtype");
  }
  if (!stats.quantiles.empty() && stats.quantiles.size() != std::size(kStatsQuantiles)) {
    throw Error(ErrorCode::kInput,
                where + ": expected " + std::to_string(std::size(kStatsQuantiles)) +
                    " quantiles, found " + std::to_string(stats.quantiles.size()));
  }
  return stats;
}

double relative(double a, double b) {
  if (a == b) return 0;
  const double scale = std::max(std::fabs(a), std::fabs(b));
  return std::fabs(a - b) / scale;
}

double rms_of(const TensorStats& stats) {
  return stats.finite > 0 ? stats.norm / std::sqrt(static_cast<double>(stats.finite)) : 0;
}

// The stats of one side's tensor: read from its stats file, or computed from its full dump.
struct Side {
  std::string label;  // "A" or "B"
  fs::path path;
  bool stats_only = false;
  std::vector<TensorStats> stats;         // stats-only: in the file's order
  std::map<std::string, size_t> by_name;  // stats-only: index into stats
};

Side open_side(const fs::path& path, const std::string& label) {
  Side side;
  side.label = label;
  side.path = path;
  if (!fs::is_directory(path)) {
    throw Error(ErrorCode::kUsage,
                label + " (" + path.string() + "): a stats-only dump compares with a directory",
                "pass two dump directories");
  }
  side.stats_only = is_stats_dump(path);
  if (side.stats_only) {
    side.stats = read_stats_dump(path, label);
    for (size_t index = 0; index < side.stats.size(); ++index) {
      side.by_name.emplace(side.stats[index].name, index);
    }
    return side;
  }
  for (const auto& item : fs::directory_iterator(path)) {
    const std::string file_name = item.path().filename().string();
    if (item.is_directory() &&
        (file_name.rfind("rank-", 0) == 0 || file_name.rfind("step-", 0) == 0)) {
      throw Error(ErrorCode::kUsage,
                  label + " (" + path.string() + "): holds " + file_name +
                      "/; a stats-only comparison reads one plain dump directory per side",
                  "compare one rank's (or step's) directory against the stats-only dump of the "
                  "same rank");
    }
  }
  return side;
}

// The full side's tensor of a stats name ("file.safetensors:tensor", or "file.npy"), nullopt
// when the dump has no such file or tensor.
std::optional<TensorStats> full_stats(const Side& side, const std::string& name) {
  const size_t colon = name.rfind(':');
  if (colon != std::string::npos) {
    const fs::path file = side.path / name.substr(0, colon);
    if (!fs::exists(file)) return std::nullopt;
    const std::string tensor_name = name.substr(colon + 1);
    for (const NamedTensor& named : read_safetensors(file)) {
      if (named.name == tensor_name) return tensor_stats(name, named.tensor);
    }
    return std::nullopt;
  }
  const fs::path file = side.path / name;
  if (!fs::exists(file)) return std::nullopt;
  return tensor_stats(name, read_npy(file));
}

StatsComparison compare_stats(const TensorStats& a, const TensorStats& b,
                              const DiffRequest& request) {
  StatsComparison out;
  out.name = a.name;
  out.module = !a.module.empty() ? a.module : b.module;
  out.call = a.call >= 0 ? a.call : b.call;
  out.a = a;
  out.b = b;
  const DType dtype_a = *dtype_from_name(a.dtype);
  const DType dtype_b = *dtype_from_name(b.dtype);
  out.limit =
      request.tolerance ? request.tolerance->rtol : default_tolerance(dtype_a, dtype_b).rtol;
  if (a.shape != b.shape) {
    out.verdict = "diverged";
    out.reason =
        "shapes differ: A " + shape_to_string(a.shape) + " vs B " + shape_to_string(b.shape);
    return out;
  }
  if (a.dtype == b.dtype && a.sha256 == b.sha256) {
    out.verdict = "identical";
    out.reason = "the same bytes (sha256 " + a.sha256.substr(0, 12) + ")";
    return out;
  }
  if (a.nan_count != b.nan_count || a.inf_count != b.inf_count) {
    out.verdict = "diverged";
    out.reason = "non-finite counts differ: A " + std::to_string(a.nan_count) + " NaN, " +
                 std::to_string(a.inf_count) + " Inf vs B " + std::to_string(b.nan_count) +
                 " NaN, " + std::to_string(b.inf_count) + " Inf";
    return out;
  }
  out.norm_rel = relative(a.norm, b.norm);
  const double scale = std::max(rms_of(a), rms_of(b));
  for (size_t level = 0; level < std::min(a.quantiles.size(), b.quantiles.size()); ++level) {
    const double gap = std::fabs(a.quantiles[level] - b.quantiles[level]);
    const double rel = gap == 0 ? 0 : (scale > 0 ? gap / scale : INFINITY);
    out.quantile_rel = std::max(out.quantile_rel, rel);
  }
  const bool norm_past = !(out.norm_rel <= out.limit);
  const bool quantile_past = !(out.quantile_rel <= out.limit);
  out.verdict = norm_past || quantile_past ? "diverged" : "agrees";
  out.reason = "norm_rel " + format_number(out.norm_rel) + (norm_past ? " > " : " <= ") +
               format_number(out.limit) + ", quantile_rel " + format_number(out.quantile_rel) +
               (quantile_past ? " > " : " <= ") + format_number(out.limit);
  return out;
}

std::string next_step(const StatsComparison& comparison) {
  const std::string module = comparison.module.empty() ? "its module" : comparison.module;
  return "dump " + comparison.name + " in full on both runs (loupe.dump(model, DIR, modules=\"" +
         module + "\")), then loupe diff DIR_A DIR_B --name " + comparison.name;
}

Json stats_json(const TensorStats& stats) {
  Json quantiles = Json::array();
  for (double value : stats.quantiles) quantiles.push_back(number_to_json(value));
  return {{"dtype", stats.dtype},
          {"shape", stats.shape},
          {"sha256", stats.sha256},
          {"norm", number_to_json(stats.norm)},
          {"mean", number_to_json(stats.mean)},
          {"finite", stats.finite},
          {"nan_count", stats.nan_count},
          {"inf_count", stats.inf_count},
          {"quantiles", std::move(quantiles)}};
}

}  // namespace

TensorStats tensor_stats(const std::string& name, const Tensor& tensor) {
  TensorStats stats;
  stats.name = name;
  stats.dtype = std::string(dtype_name(tensor.dtype()));
  stats.shape = tensor.shape();
  stats.sha256 =
      sha256_hex(std::string_view(reinterpret_cast<const char*>(tensor.bytes()), tensor.nbytes()));
  std::vector<double> finite;
  finite.reserve(static_cast<size_t>(tensor.numel()));
  double sum_squares = 0, sum = 0;
  for (int64_t index = 0; index < tensor.numel(); ++index) {
    const double value = tensor.element_as_double(index);
    if (std::isnan(value)) {
      ++stats.nan_count;
    } else if (std::isinf(value)) {
      ++stats.inf_count;
    } else {
      finite.push_back(value);
      sum_squares += value * value;
      sum += value;
    }
  }
  stats.finite = static_cast<int64_t>(finite.size());
  stats.norm = std::sqrt(sum_squares);
  stats.mean = finite.empty() ? 0 : sum / static_cast<double>(finite.size());
  if (!finite.empty()) {
    std::sort(finite.begin(), finite.end());
    for (double level : kStatsQuantiles) {
      // numpy's "linear" method: position level * (n - 1), interpolated between neighbours.
      const double position = level * static_cast<double>(finite.size() - 1);
      const size_t below = static_cast<size_t>(std::floor(position));
      const size_t above = std::min(below + 1, finite.size() - 1);
      const double fraction = position - static_cast<double>(below);
      stats.quantiles.push_back(finite[below] + (finite[above] - finite[below]) * fraction);
    }
  }
  return stats;
}

bool is_stats_dump(const fs::path& path) {
  std::error_code error;
  return fs::is_directory(path, error) && fs::is_regular_file(path / kStatsFile, error);
}

std::vector<TensorStats> read_stats_dump(const fs::path& dir, const std::string& side) {
  const fs::path file = dir / kStatsFile;
  std::ifstream in(file);
  if (!in) {
    throw Error(ErrorCode::kInput, side + " (" + file.string() + "): cannot read the file");
  }
  std::vector<TensorStats> out;
  std::string text;
  int64_t line_number = 0;
  while (std::getline(in, text)) {
    ++line_number;
    if (text.empty()) continue;
    const std::string where = side + " (" + file.string() + ":" + std::to_string(line_number) + ")";
    Json line;
    try {
      line = Json::parse(text);
    } catch (const Json::exception& error) {
      throw Error(ErrorCode::kInput,
                  where + ": " + json_error_text(error) + "; expected a JSON object",
                  "a stats-only dump holds one JSON object per line");
    }
    if (line_number == 1) {
      if (!line.is_object() || line.value("loupe_stats", 0) != 1) {
        throw Error(ErrorCode::kInput,
                    where + ": expected the header {\"loupe_stats\": 1, \"quantiles\": [...]}",
                    "write stats-only dumps with loupe.dump(..., stats_only=True)");
      }
      const std::vector<double> levels = line.value("quantiles", std::vector<double>{});
      if (!std::equal(levels.begin(), levels.end(), std::begin(kStatsQuantiles),
                      std::end(kStatsQuantiles))) {
        throw Error(ErrorCode::kInput, where +
                                           ": quantile levels differ from loupe's (0, 0.01, "
                                           "0.5, 0.99, 1)");
      }
      continue;
    }
    out.push_back(stats_from_json(line, where));
  }
  if (line_number == 0) {
    throw Error(ErrorCode::kInput,
                side + " (" + file.string() + "): empty; expected a header line");
  }
  return out;
}

StatsDiffResult run_stats_diff(const DiffRequest& request) {
  const auto refuse = [](bool given, const std::string& option) {
    if (given) {
      throw Error(ErrorCode::kUsage,
                  option + " needs full values on both sides; a stats-only dump holds only stats",
                  "decide a stats-only comparison with --rtol/--atol, then dump the named tensor "
                  "in full and use " +
                      option + " there");
    }
  };
  refuse(request.rules.has_value(), "--rules");
  refuse(!request.bounds.empty(), "--tol");
  refuse(request.oracle.has_value(), "--oracle");
  refuse(request.along.has_value(), "--along");
  refuse(!request.dims.empty(), "--dims");
  refuse(request.parallel.has_value() || request.parallel_b.has_value(), "--parallel");
  const Side a = open_side(request.a, "A");
  const Side b = open_side(request.b, "B");
  StatsDiffResult result;
  result.side_a = a.stats_only ? "stats" : "full";
  result.side_b = b.stats_only ? "stats" : "full";
  // Execution order: A's stats file, else B's.
  const Side& ordered = a.stats_only ? a : b;
  const Side& other = a.stats_only ? b : a;
  for (const TensorStats& stats : ordered.stats) {
    if (request.name && stats.name != *request.name) continue;
    std::optional<TensorStats> partner;
    if (other.stats_only) {
      const auto found = other.by_name.find(stats.name);
      if (found != other.by_name.end()) partner = other.stats[found->second];
    } else {
      partner = full_stats(other, stats.name);
    }
    if (!partner) {
      (&ordered == &a ? result.only_in_a : result.only_in_b).push_back(stats.name);
      continue;
    }
    const TensorStats& stats_a = &ordered == &a ? stats : *partner;
    const TensorStats& stats_b = &ordered == &a ? *partner : stats;
    result.comparisons.push_back(compare_stats(stats_a, stats_b, request));
    if (result.comparisons.back().module.empty()) result.comparisons.back().module = stats.module;
    if (!result.first_divergence && result.comparisons.back().verdict == "diverged") {
      result.first_divergence = result.comparisons.size() - 1;
    }
  }
  if (other.stats_only) {
    for (const TensorStats& stats : other.stats) {
      if (request.name && stats.name != *request.name) continue;
      if (!ordered.by_name.count(stats.name)) {
        (&other == &a ? result.only_in_a : result.only_in_b).push_back(stats.name);
      }
    }
  }
  if (request.name && result.comparisons.empty() && result.only_in_a.empty() &&
      result.only_in_b.empty()) {
    throw Error(ErrorCode::kUsage, "--name " + *request.name + ": no tensor of that name in A or B",
                "pass a name from loupe-stats.jsonl");
  }
  return result;
}

int stats_diff_exit_code(const StatsDiffResult& result, const DiffRequest& request) {
  if (request.report_only) return 0;
  if (result.first_divergence || result.comparisons.empty() || !result.only_in_a.empty() ||
      !result.only_in_b.empty()) {
    return 1;
  }
  return 0;
}

std::string render_stats_diff_summary(const StatsDiffResult& result, const DiffRequest& request) {
  size_t identical = 0, agrees = 0, diverged = 0;
  for (const auto& comparison : result.comparisons) {
    if (comparison.verdict == "identical") ++identical;
    if (comparison.verdict == "agrees") ++agrees;
    if (comparison.verdict == "diverged") ++diverged;
  }
  std::string out = "stats-only comparison (A: " + result.side_a + ", B: " + result.side_b +
                    "): " + std::to_string(result.comparisons.size()) + " tensors, " +
                    std::to_string(identical) + " identical, " + std::to_string(agrees) +
                    " agree in their stats, " + std::to_string(diverged) + " diverged\n";
  if (result.first_divergence) {
    const StatsComparison& first = result.comparisons[*result.first_divergence];
    out += "first divergence (#" + std::to_string(*result.first_divergence + 1) + " of " +
           std::to_string(result.comparisons.size()) + "): " + first.name + ": " + first.reason +
           "\n";
    out += "next: " + next_step(first) + "\n";
  } else if (!result.comparisons.empty()) {
    out += "no tensor diverged in its stats\n";
  }
  if (!result.only_in_a.empty()) {
    out += std::to_string(result.only_in_a.size()) + " only in A, first " +
           result.only_in_a.front() + "\n";
  }
  if (!result.only_in_b.empty()) {
    out += std::to_string(result.only_in_b.size()) + " only in B, first " +
           result.only_in_b.front() + "\n";
  }
  (void)request;
  return out;
}

std::string render_stats_diff_json(const StatsDiffResult& result, const DiffRequest& request) {
  Envelope envelope;
  envelope.kind = "diff";
  const int exit_code = stats_diff_exit_code(result, request);
  envelope.verdict = request.report_only ? Verdict::kNone
                     : exit_code == 0    ? Verdict::kPass
                                         : Verdict::kFail;
  if (result.first_divergence) {
    const StatsComparison& first = result.comparisons[*result.first_divergence];
    Finding finding;
    finding.id = "check.diff.stats_divergence";
    finding.layer = Layer::kCheck;
    finding.severity = Severity::kFail;
    finding.claim = "first divergence in stats (#" + std::to_string(*result.first_divergence + 1) +
                    " of " + std::to_string(result.comparisons.size()) + "): " + first.name + ": " +
                    first.reason;
    finding.where.subject = "diff";
    finding.where.path = first.name;
    finding.evidence.metrics = {
        {"norm_rel", first.norm_rel}, {"quantile_rel", first.quantile_rel}, {"rtol", first.limit}};
    finding.evidence.files = {request.a.string(), request.b.string()};
    finding.next = next_step(first);
    finding.reproduce =
        "loupe diff " + request.a.string() + " " + request.b.string() + " --name " + first.name;
    envelope.findings.push_back(std::move(finding));
  }
  Json tensors = Json::array();
  for (const auto& comparison : result.comparisons) {
    tensors.push_back({{"name", comparison.name},
                       {"module", comparison.module},
                       {"call", comparison.call},
                       {"verdict", comparison.verdict},
                       {"reason", comparison.reason},
                       {"norm_rel", number_to_json(comparison.norm_rel)},
                       {"quantile_rel", number_to_json(comparison.quantile_rel)},
                       {"rtol", number_to_json(comparison.limit)},
                       {"a", stats_json(comparison.a)},
                       {"b", stats_json(comparison.b)}});
  }
  Json data = Json::object();
  data["mode"] = "stats";
  data["sides"] = {{"a", result.side_a}, {"b", result.side_b}};
  data["first_divergence"] = result.first_divergence
                                 ? Json(result.comparisons[*result.first_divergence].name)
                                 : Json(nullptr);
  data["only_in_a"] = result.only_in_a;
  data["only_in_b"] = result.only_in_b;
  data["tensors"] = std::move(tensors);
  envelope.data = std::move(data);
  return render_envelope(envelope);
}

}  // namespace loupe::check
