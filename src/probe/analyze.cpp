// The decision half of a probe: observation files in, findings and a verdict out.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "bench/compare.hpp"
#include "bench/report.hpp"
#include "bench/stopping.hpp"
#include "check/compare.hpp"
#include "check/findings.hpp"
#include "core/limits.hpp"
#include "probe/runner.hpp"

namespace loupe::probe {
namespace {

using check::format_number;

// Reads JSON fields with errors that name the file and the field.
class ObservationReader {
 public:
  explicit ObservationReader(std::filesystem::path dir) : dir_(std::move(dir)) {
    const auto path = dir_ / "observation.json";
    std::ifstream in(path);
    if (!in) {
      throw Error(ErrorCode::kInput, path.string() + ": cannot be read",
                  "a subject's `run --out DIR` writes it");
    }
    std::stringstream text;
    text << in.rdbuf();
    try {
      check_json_nesting(text.str(), path.string());  // written by the subject: bounded first
      json_ = Json::parse(text.str());
    } catch (const nlohmann::json::exception& error) {
      throw Error(ErrorCode::kInput, path.string() + ": not valid JSON: " + json_error_text(error));
    }
    if (!json_.is_object() || json_.value("loupe_observation", 0) != 1) {
      throw Error(ErrorCode::kInput,
                  path.string() + ": field 'loupe_observation' must be 1 (an observation)");
    }
  }

  const Json& json() const { return json_; }
  Json& mutable_json() { return json_; }
  const std::filesystem::path& dir() const { return dir_; }

  const Json& at(const Json& object, const std::string& field, const std::string& where) const {
    if (!object.is_object() || !object.contains(field)) {
      throw Error(ErrorCode::kInput, (dir_ / "observation.json").string() + ": missing field '" +
                                         where + (where.empty() ? "" : ".") + field + "'");
    }
    return object.at(field);
  }

  Tensor tensor(const std::string& file) const {
    const auto path = dir_ / file;
    if (path.extension() == ".safetensors") {
      auto tensors = read_safetensors(path);
      if (tensors.size() != 1) {
        throw Error(ErrorCode::kInput, path.string() + ": expected exactly one tensor");
      }
      return tensors[0].tensor;
    }
    return read_npy(path);
  }

  void write_back() const {
    std::ofstream out(dir_ / "observation.json");
    out << json_.dump(1) << "\n";
  }

 private:
  std::filesystem::path dir_;
  Json json_;
};

Params params_of(const Json& observation) {
  Params params;
  if (observation.contains("params") && observation["params"].is_object()) {
    for (const auto& [name, value] : observation["params"].items()) {
      params.emplace_back(name, value_from_json(value, "params." + name));
    }
  }
  return params;
}

struct Context {
  std::string subject;
  std::string probe;
  Params params;
  std::string reproduce;
  std::string observation_file;  // relative to the home: the evidence file
};

Finding make_finding(const Context& context, Layer layer, const std::string& kind,
                     Severity severity, std::string claim, std::string path, std::string next) {
  Finding finding;
  finding.id = std::string(layer_name(layer)) + "." + context.probe + "." + kind;
  finding.layer = layer;
  finding.severity = severity;
  finding.claim = std::move(claim);
  finding.where.subject = context.subject;
  finding.where.probe = context.probe;
  finding.where.path = std::move(path);
  finding.where.params = context.params;
  finding.evidence.files = {context.observation_file};
  finding.next = std::move(next);
  finding.reproduce = context.reproduce;
  return finding;
}

// The first element where two tensors differ bit for bit, or -1.
int64_t first_difference(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return 0;
  const size_t element = dtype_size(a.dtype());
  const std::byte* left = a.bytes();
  const std::byte* right = b.bytes();
  for (int64_t index = 0; index < a.numel(); ++index) {
    if (std::memcmp(left + index * element, right + index * element, element) != 0) return index;
  }
  return -1;
}

std::string coords_text(const Tensor& tensor, int64_t flat_index,
                        const std::vector<std::string>& axes, check::Coords* coords_out) {
  const auto names = check::resolve_axis_names(tensor.rank(), axes);
  const auto coords = check::coords_of(flat_index, tensor.shape(), names);
  if (coords_out != nullptr) *coords_out = coords;
  return check::coords_to_string(coords);
}

std::vector<std::string> string_list(const Json& array) {
  std::vector<std::string> out;
  if (array.is_array()) {
    for (const auto& item : array) out.push_back(item.get<std::string>());
  }
  return out;
}

Json comparison_json(const check::TensorComparison& comparison, const std::string& pass) {
  Json out = Json::object();
  out["output"] = comparison.name;
  out["pass"] = pass;
  Json metrics = Json::object();
  for (check::Metric metric : check::all_metrics()) {
    const double value = check::comparison_value(comparison, metric);
    if (metric == check::Metric::kOracleRatio && !comparison.oracle) continue;
    metrics[std::string(check::metric_name(metric))] = number_to_json(value);
  }
  out["metrics"] = std::move(metrics);
  Json worst = Json::object();
  for (const auto& [axis, index] : comparison.localisation.worst_coords) worst[axis] = index;
  out["worst"] = std::move(worst);
  if (comparison.localisation.profile) {
    const auto& profile = *comparison.localisation.profile;
    Json profile_json = Json::object();
    profile_json["axis"] = profile.axis;
    profile_json["shape"] = std::string(check::profile_shape_name(profile.classification.shape));
    profile_json["sentence"] = check::profile_sentence(profile);
    Json buckets = Json::array();
    for (const auto& bucket : profile.buckets) buckets.push_back(number_to_json(bucket.value));
    profile_json["buckets"] = std::move(buckets);
    const check::Localisation& localisation = comparison.localisation;
    profile_json["first_exceeding"] =
        localisation.first_exceeding ? Json(*localisation.first_exceeding) : Json(nullptr);
    if (localisation.periodicity) {
      profile_json["period"] = localisation.periodicity->period;
      profile_json["period_residue"] = localisation.periodicity->residue;
    }
    const std::string structure = check::structure_sentence(localisation);
    if (!structure.empty()) profile_json["structure"] = structure;
    out["profile"] = std::move(profile_json);
  }
  out["headline"] = check::comparison_headline(comparison);
  return out;
}

// The unit roundoff of a floating dtype (half the gap between 1 and the next number): the
// relative error one rounding to it makes at most.
std::optional<double> unit_roundoff(const std::string& dtype) {
  if (dtype == "float64") return std::ldexp(1.0, -53);
  if (dtype == "float32") return std::ldexp(1.0, -24);
  if (dtype == "float16") return std::ldexp(1.0, -11);
  if (dtype == "bfloat16") return std::ldexp(1.0, -8);
  if (dtype == "float8_e4m3fn") return std::ldexp(1.0, -4);
  if (dtype == "float8_e5m2") return std::ldexp(1.0, -3);
  return std::nullopt;
}

// The arithmetic whose unit roundoff is nearest (in log scale) to a measured relative error.
std::string nearest_arithmetic(double relative_error) {
  static const std::pair<const char*, int> kFormats[] = {{"float64", -53},
                                                         {"float32", -24},
                                                         {"tf32 or float16", -11},
                                                         {"bfloat16", -8},
                                                         {"float8", -4}};
  std::string best = kFormats[0].first;
  double best_distance = INFINITY;
  for (const auto& [name, exponent] : kFormats) {
    // An accumulated rms error is typically a few roundoffs: compare with 2u.
    const double distance = std::fabs(std::log2(relative_error) - (exponent + 1));
    if (distance < best_distance) {
      best_distance = distance;
      best = name;
    }
  }
  return best;
}

struct Analysis {
  std::vector<Finding> findings;
  Json data = Json::object();
  std::vector<std::string> lines;  // the human report
  bool cannot_discriminate = false;
  std::vector<BenchComparisonRecord> bench_comparisons;
};

// --- checks ----------------------------------------------------------------------------------

std::vector<check::Bound> bounds_for(const Json& output, const AnalyzeOptions& options,
                                     const std::string& file) {
  std::vector<check::Bound> bounds;
  if (output.contains("tolerances")) {
    for (const auto& tolerance : output["tolerances"]) {
      if (tolerance.value("relative_to_oracle", false)) continue;
      const std::string name = tolerance.at("metric").get<std::string>();
      auto metric = check::parse_metric(name);
      if (!metric) {
        throw Error(ErrorCode::kConfig,
                    file + ": output '" + output.value("name", "") + "': tolerance metric '" +
                        name + "' is not a metric; the metrics are " + check::metric_names_list());
      }
      bounds.push_back({*metric, number_from_json(tolerance.at("bound"), "bound")});
    }
  }
  for (const auto& text : options.tolerances) {
    const check::Bound bound = check::parse_bound(text);
    bool replaced = false;
    for (auto& existing : bounds) {
      if (existing.metric == bound.metric) {
        existing.limit = bound.limit;
        replaced = true;
      }
    }
    if (!replaced) bounds.push_back(bound);
  }
  return bounds;
}

// Guard: NaN or Inf where the reference is finite. A NaN makes every "<" comparison vacuous, so
// it fails outright, whatever the metrics say. Elements still holding the poison are counted by
// output_unwritten, not here.
void guard_nonfinite(const Context& context, const Json& check, const std::string& name,
                     const std::vector<std::string>& axes, const Tensor& candidate,
                     const Tensor& reference, Analysis& analysis) {
  if (candidate.shape() != reference.shape()) return;
  int64_t nans = 0, infinities = 0, first = -1;
  for (int64_t index = 0; index < candidate.numel(); ++index) {
    const double value = candidate.element_as_double(index);
    if (std::isfinite(value) || !std::isfinite(reference.element_as_double(index))) continue;
    if (std::isnan(value)) {
      ++nans;
    } else {
      ++infinities;
    }
    if (first < 0) first = index;
  }
  int64_t poisoned = 0;
  const Json guards = check.value("guards", Json::object());
  for (const auto& entry : guards.value("output_unwritten", Json::array())) {
    if (entry.value("pass", "") == "candidate_first" && entry.value("path", "") == "candidate" &&
        entry.value("output", "") == name) {
      poisoned += entry.value("poisoned", int64_t{0});
    }
  }
  if (nans + infinities - poisoned <= 0) return;
  check::Coords coords;
  const std::string where = coords_text(candidate, first, axes, &coords);
  Finding finding = make_finding(
      context, Layer::kCheck, "guard.nonfinite", Severity::kFail,
      "candidate output " + name + " holds " + std::to_string(nans) + " NaN and " +
          std::to_string(infinities) + " Inf where the reference is finite" +
          (poisoned > 0 ? " (" + std::to_string(poisoned) + " of them never written)" : "") +
          ", first at " + where + ": a NaN passes no tolerance",
      "candidate." + name, "look for 0/0, overflow, or reads of uninitialised memory");
  finding.where.coords = coords;
  finding.evidence.metrics = {{"nan_count", static_cast<double>(nans)},
                              {"inf_count", static_cast<double>(infinities)}};
  analysis.findings.push_back(std::move(finding));
}

// The narrower formats a value of `dtype` could have been computed in, with the low mantissa
// bits such a result leaves zero when it is widened back: (name, dropped bits).
std::vector<std::pair<std::string, int>> narrower_formats(DType dtype) {
  if (dtype == DType::kF32) return {{"bfloat16", 16}, {"float16 or tf32", 13}};
  if (dtype == DType::kF64) return {{"float32", 29}};
  return {};
}

// How many finite non-zero elements lie within kNarrowSlack units in the last place of a value of
// the narrower format: their `bits` lowest mantissa bits are all zero, or nearly (a result nudged
// an ulp or two off the narrow grid is still a narrow result).
constexpr uint64_t kNarrowSlack = 4;
int64_t count_narrow(const Tensor& tensor, int bits, int64_t* considered) {
  int64_t narrow = 0;
  *considered = 0;
  if (tensor.dtype() == DType::kF32) {
    for (float value : tensor.data<float>()) {
      if (!std::isfinite(value) || value == 0) continue;
      ++*considered;
      uint32_t word;
      std::memcpy(&word, &value, sizeof word);
      const uint32_t low = word & ((uint32_t{1} << bits) - 1);
      if (low <= kNarrowSlack || low >= (uint32_t{1} << bits) - kNarrowSlack) ++narrow;
    }
  } else if (tensor.dtype() == DType::kF64) {
    for (double value : tensor.data<double>()) {
      if (!std::isfinite(value) || value == 0) continue;
      ++*considered;
      uint64_t word;
      std::memcpy(&word, &value, sizeof word);
      const uint64_t low = word & ((uint64_t{1} << bits) - 1);
      if (low <= kNarrowSlack || low >= (uint64_t{1} << bits) - kNarrowSlack) ++narrow;
    }
  }
  return narrow;
}

// Guard: an output declared at one precision but computed at a narrower one.
//  - fail: nearly every candidate element is exactly representable in a narrower format (its
//    low mantissa bits are zero, as a bf16 result widened to float32 leaves them; arithmetic at
//    the declared dtype leaves that in about 1 element of 2^bits) while the reference's are not;
//  - fail: the candidate's error against the oracle is more than kOverReference (64) times the
//    reference's own and kOverRoundoff (1024) times the dtype's unit roundoff: a narrower
//    arithmetic inside, or an algorithm that loses that much (an output whose declared
//    tolerance_vs_oracle allows more is judged by that tolerance instead).
// It judges a silent downgrade even when the declared tolerance is loose enough to pass it.
// Whether an error against the oracle has the pattern a narrower arithmetic leaves: rounding
// touches nearly every element by a similar amount, so at least half of the elements carry more
// than a tenth of the rms error, and no region or single slice holds most of it. A masking or
// indexing fault leaves a few elements (a region, a slice, a period) far off instead.
bool error_fits_narrowing(const Tensor& candidate, const Tensor& oracle,
                          const check::TensorComparison& comparison) {
  if (candidate.shape() != oracle.shape() || candidate.numel() == 0) return false;
  const check::Localisation& localisation = comparison.localisation;
  if (localisation.periodicity) return false;
  if (localisation.profile) {
    const check::ProfileShape shape = localisation.profile->classification.shape;
    if (shape == check::ProfileShape::kConcentrated || shape == check::ProfileShape::kSpiky) {
      return false;
    }
  }
  if (!localisation.top_slices.empty() && localisation.top_slices.front().share > 0.5) {
    return false;
  }
  double sum_squares = 0;
  std::vector<double> errors(static_cast<size_t>(candidate.numel()));
  for (int64_t index = 0; index < candidate.numel(); ++index) {
    const double error =
        std::fabs(candidate.element_as_double(index) - oracle.element_as_double(index));
    errors[static_cast<size_t>(index)] = std::isfinite(error) ? error : 0.0;
    sum_squares += errors[static_cast<size_t>(index)] * errors[static_cast<size_t>(index)];
  }
  const double rms = std::sqrt(sum_squares / static_cast<double>(candidate.numel()));
  if (!(rms > 0)) return false;
  int64_t carrying = 0;
  for (double error : errors) carrying += error > 0.1 * rms ? 1 : 0;
  return 2 * carrying >= candidate.numel();
}

void guard_precision(const Context& context, const Json& output, const std::string& name,
                     const Tensor& candidate, const Tensor& reference, const Tensor* oracle,
                     const check::TensorComparison& comparison, Analysis& analysis) {
  const std::string dtype = output.value("dtype", "");
  // Declared narrow storage (CheckOutput::stored_narrow) is the point of such a check, not a
  // silent downgrade: its tolerances judge it.
  if (!output.value("stored_in", std::string()).empty()) return;
  for (const auto& [format, bits] : narrower_formats(candidate.dtype())) {
    int64_t candidate_considered = 0, reference_considered = 0;
    const int64_t candidate_narrow = count_narrow(candidate, bits, &candidate_considered);
    const int64_t reference_narrow = count_narrow(reference, bits, &reference_considered);
    if (candidate_considered < 64 || reference_considered < 64) continue;
    const double candidate_share =
        static_cast<double>(candidate_narrow) / static_cast<double>(candidate_considered);
    const double reference_share =
        static_cast<double>(reference_narrow) / static_cast<double>(reference_considered);
    // Half the elements narrow is already a narrow computation (bf16 on most rows); arithmetic
    // at the declared dtype leaves about 1 in 2^bits there.
    if (candidate_share < 0.5 || reference_share > 0.1) continue;
    // A constant or few-valued output (say 1000.0 everywhere) is exactly representable without
    // having been computed narrowly: that is cannot_discriminate's business, not this guard's.
    std::vector<double> values;
    for (int64_t index = 0; index < candidate.numel(); ++index) {
      values.push_back(candidate.element_as_double(index));
    }
    std::sort(values.begin(), values.end());
    const auto distinct = std::unique(values.begin(), values.end()) - values.begin();
    if (distinct < std::min<int64_t>(64, candidate_considered / 4)) continue;
    Finding finding = make_finding(
        context, Layer::kCheck, "guard.precision", Severity::kFail,
        "candidate output " + name + " is declared " + dtype + " but " +
            std::to_string(candidate_narrow) + " of its " + std::to_string(candidate_considered) +
            " non-zero elements are " + format + " values, or within " +
            std::to_string(kNarrowSlack) + " ulps of one (the low " + std::to_string(bits) +
            " mantissa bits zero or nearly; " + std::to_string(reference_narrow) +
            " of the reference's): it was computed in " + format + ", not " + dtype,
        "candidate." + name,
        "look for a cast to " + format + " inside the candidate; compute at " + dtype +
            " or declare the output " + format);
    finding.evidence.metrics = {{"candidate_narrow_share", candidate_share},
                                {"reference_narrow_share", reference_share}};
    analysis.findings.push_back(std::move(finding));
    return;
  }

  constexpr double kOverReference = 64;
  constexpr double kOverRoundoff = 1024;
  if (!comparison.oracle) return;
  // An output the candidate approximates on purpose (CheckOutput::approximate: TF32 tensor-core
  // products against an fp32 reference, quantisation) is far from the oracle by design: its
  // tolerances judge it, as they do without an oracle.
  if (!output.value("approximates", std::string()).empty()) return;
  for (const auto& tolerance : output.value("tolerances", Json::array())) {
    if (tolerance.value("relative_to_oracle", false) &&
        tolerance.value("bound", 0.0) > kOverReference) {
      return;  // the author allows more error against the oracle, on purpose
    }
  }
  const std::optional<double> roundoff = unit_roundoff(dtype);
  if (!roundoff) return;
  const double candidate_error =
      check::metric_value(comparison.oracle->a_vs_oracle, check::Metric::kRmsRatio);
  const double reference_error =
      check::metric_value(comparison.oracle->b_vs_oracle, check::Metric::kRmsRatio);
  if (!std::isfinite(candidate_error) || !std::isfinite(reference_error)) return;
  if (candidate_error <= kOverReference * reference_error ||
      candidate_error <= kOverRoundoff * *roundoff) {
    return;
  }
  const std::string measured =
      "candidate output " + name + " is declared " + dtype +
      " but its rms ratio against the oracle (" + format_number(candidate_error) + ") is " +
      format_number(candidate_error / std::max(reference_error, 1e-300)) +
      "x the reference's own (" + format_number(reference_error) + ") and " +
      format_number(candidate_error / *roundoff) + "x " + dtype + "'s unit roundoff";
  // Narrowing is named only when the error looks like rounding; a masking bug that happens to
  // be as large as float8's roundoff is not float8 arithmetic.
  const bool narrowing = oracle != nullptr && error_fits_narrowing(candidate, *oracle, comparison);
  // An error that grows along the profile axis compounds along a chain of steps: a narrower
  // arithmetic in a chained product does that (incident 1: TF32-truncated merges of CP shards
  // leave the first shard exact and the last far off), and so does a fault in what each step
  // hands the next. Neither "rounding everywhere" nor "a mask" describes it.
  const auto& profile = comparison.localisation.profile;
  const bool compounding =
      profile && profile->classification.shape == check::ProfileShape::kGrowing;
  Finding finding =
      compounding
          ? make_finding(context, Layer::kCheck, "guard.precision", Severity::kFail,
                         measured + "; the error grows along " + profile->axis +
                             " (rising steadily, at least twice as large at the end as at the "
                             "start): it compounds along a "
                             "chain, as a narrower arithmetic in a chained product does "
                             "(TF32-truncated merges) or a fault in what each step passes on",
                         "candidate." + name,
                         "look at the products and states carried from one " + profile->axis +
                             " step to the next: their precision (tf32, bf16, a cast) first")
      : narrowing
          ? make_finding(context, Layer::kCheck, "guard.precision", Severity::kFail,
                         measured + ": the error of " + nearest_arithmetic(candidate_error) +
                             " arithmetic, or of an algorithm that loses that much",
                         "candidate." + name,
                         "look for a cast to a narrower type (bf16, fp16, tf32) inside the "
                         "candidate; if the algorithm is the cause, declare a tolerance relative "
                         "to the oracle")
          : make_finding(context, Layer::kCheck, "guard.precision", Severity::kFail,
                         measured +
                             "; the error is not spread like rounding (it sits in few elements, "
                             "a region, a slice or a period): a logic fault such as a mask or an "
                             "index, not a narrower arithmetic",
                         "candidate." + name,
                         "look where the error sits (the mismatch finding's profile and slices) "
                         "for a wrong mask, bound or index");
  finding.evidence.metrics = {{"candidate_vs_oracle", candidate_error},
                              {"reference_vs_oracle", reference_error},
                              {"unit_roundoff", *roundoff}};
  analysis.findings.push_back(std::move(finding));
}

// Guard (a check without an oracle): the candidate's error against the reference, set against
// the reference's own rounding error. Without an oracle loupe cannot tell how far the reference
// is from the exact result; the runtime runs it once rounding upward and once downward
// (check.rounding), and how far its outputs move between the two bounds the error its own
// rounding makes (directed rounding pushes every operation's error the same way: the spread is
// an overestimate of round-to-nearest's). Fails when the rms of candidate - reference is more
// than kOverSpread (64) times the rms of up - down and kOverRoundoff (1024) times the dtype's
// unit roundoff of the reference's rms: an error spread evenly just under a loose tolerance
// (round 3's even_error_no_oracle) is neither rounding nor a narrower arithmetic's. Silent when
// the directed rounding moved nothing (the reference's arithmetic ignores the host's rounding
// mode: a GPU, integers, a copy), and for outputs declared stored narrow or approximate
// (CheckOutput::approximate: quantisation, judged by its tolerances).
void guard_rounding_spread(const Context& context, const Json& output, const std::string& name,
                           const Tensor& candidate, const Tensor& reference, const Tensor& up,
                           const Tensor& down, Analysis& analysis) {
  constexpr double kOverSpread = 64;
  constexpr double kOverRoundoff = 1024;
  if (!output.value("stored_in", std::string()).empty()) return;
  if (!output.value("approximates", std::string()).empty()) return;  // on purpose, said so
  if (!dtype_is_floating(reference.dtype())) return;
  if (candidate.shape() != reference.shape() || up.shape() != reference.shape() ||
      down.shape() != reference.shape() || reference.numel() == 0) {
    return;
  }
  const std::string dtype = output.value("dtype", "");
  const std::optional<double> roundoff = unit_roundoff(dtype);
  if (!roundoff) return;
  double error_squares = 0, spread_squares = 0, scale_squares = 0;
  int64_t compared = 0;
  for (int64_t index = 0; index < reference.numel(); ++index) {
    const double a = candidate.element_as_double(index);
    const double b = reference.element_as_double(index);
    const double high = up.element_as_double(index);
    const double low = down.element_as_double(index);
    if (!std::isfinite(a) || !std::isfinite(b) || !std::isfinite(high) || !std::isfinite(low)) {
      continue;  // nonfinite's business
    }
    error_squares += (a - b) * (a - b);
    spread_squares += (high - low) * (high - low);
    scale_squares += b * b;
    ++compared;
  }
  if (compared == 0) return;
  const double count = static_cast<double>(compared);
  const double error = std::sqrt(error_squares / count);
  const double spread = std::sqrt(spread_squares / count);
  const double scale = std::sqrt(scale_squares / count);
  if (!(spread > 0) || !(scale > 0)) return;
  if (error <= kOverSpread * spread || error <= kOverRoundoff * *roundoff * scale) return;
  Finding finding = make_finding(
      context, Layer::kCheck, "guard.precision", Severity::kFail,
      "candidate output " + name + " is declared " + dtype + " and the check has no oracle: its " +
          "rms error against the reference (" + format_number(error / scale) +
          " of the reference's rms) is " + format_number(error / spread) +
          "x how far the reference itself moves between rounding upward and downward (" +
          format_number(spread / scale) + ") and " + format_number(error / scale / *roundoff) +
          "x " + dtype +
          "'s unit roundoff: an error that large is not rounding, whatever the tolerance allows",
      "candidate." + name,
      "declare an oracle (.oracle) so the error is judged against the exact result; if the "
      "candidate approximates on purpose (quantisation), declare the output .approximate(how)");
  finding.evidence.metrics = {{"candidate_vs_reference", error / scale},
                              {"reference_rounding_spread", spread / scale},
                              {"unit_roundoff", *roundoff}};
  analysis.findings.push_back(std::move(finding));
}

// Guard: one element far off hides in an rms (one element off by 2.5x the output's rms among
// 65,536 moves rms_ratio by 1 %). Fails when the worst |candidate - reference| exceeds the
// output's worst-element bound (default kWorstElementBound, or kWorstPerTolerance times a
// declared rms_ratio tolerance when that is larger; CheckOutput::worst_element sets it) times
// the reference's rms and kConcentration times the error's own rms (so an error spread evenly,
// as quantisation spreads it, is left to the tolerances), whatever the tolerances say.
constexpr double kWorstElementBound = 0.5;
constexpr double kConcentration = 16;
constexpr double kWorstPerTolerance = 20;

void guard_worst_element(const Context& context, const Json& output, const std::string& name,
                         const std::vector<std::string>& axes, const Tensor& candidate,
                         const Tensor& reference, Analysis& analysis) {
  if (candidate.shape() != reference.shape() || reference.numel() == 0) return;
  if (!dtype_is_floating(reference.dtype())) return;
  double sum_squares = 0;
  int64_t finite = 0;
  for (int64_t index = 0; index < reference.numel(); ++index) {
    const double value = reference.element_as_double(index);
    if (!std::isfinite(value)) continue;
    sum_squares += value * value;
    ++finite;
  }
  if (finite == 0) return;
  const double scale = std::sqrt(sum_squares / static_cast<double>(finite));
  if (!(scale > 0)) return;
  double worst = 0, error_squares = 0;
  int64_t at = -1, compared = 0;
  for (int64_t index = 0; index < reference.numel(); ++index) {
    const double b = reference.element_as_double(index);
    const double a = candidate.element_as_double(index);
    if (!std::isfinite(a) || !std::isfinite(b)) continue;  // nonfinite's business
    const double error = std::fabs(a - b);
    error_squares += error * error;
    ++compared;
    if (error > worst) {
      worst = error;
      at = index;
    }
  }
  // A loose rms tolerance (a quantised path) loosens the default with it.
  double bound = kWorstElementBound;
  for (const auto& tolerance : output.value("tolerances", Json::array())) {
    if (tolerance.value("metric", "") == "rms_ratio" &&
        !tolerance.value("relative_to_oracle", false)) {
      bound = std::max(bound, kWorstPerTolerance * tolerance.value("bound", 0.0));
    }
  }
  bound = output.value("worst_element_bound", bound);
  if (at < 0 || worst <= bound * scale) return;
  // Concentrated: an error spread over the output (a coarser arithmetic, quantisation) has its
  // worst element a few times its rms; a few wrong elements stand far above it.
  const double error_rms = std::sqrt(error_squares / static_cast<double>(compared));
  if (worst <= kConcentration * error_rms) return;
  check::Coords coords;
  const std::string where = coords_text(candidate, at, axes, &coords);
  Finding finding = make_finding(
      context, Layer::kCheck, "guard.worst_element", Severity::kFail,
      "candidate output " + name + " is off by " + format_number(worst) + " at " + where + " (" +
          format_number(candidate.element_as_double(at)) + " vs " +
          format_number(reference.element_as_double(at)) + "), " + format_number(worst / scale) +
          "x the reference's rms (" + format_number(scale) + "); the bound is " +
          format_number(bound) + "x: one element this wrong is wrong whatever the rms says",
      "candidate." + name,
      "look at that element's computation; if the output is meant to be this coarse, set "
      ".worst_element(bound) on it");
  finding.where.coords = coords;
  finding.evidence.metrics = {{"worst_abs", worst},
                              {"reference_rms", scale},
                              {"worst_over_rms", worst / scale},
                              {"bound", bound}};
  analysis.findings.push_back(std::move(finding));
}

void analyze_check(const ObservationReader& reader, const Context& context,
                   const AnalyzeOptions& options, Analysis& analysis) {
  const Json& observation = reader.json();
  const std::string file = (reader.dir() / "observation.json").string();
  const Json& check = reader.at(observation, "check", "");
  const Json& runs = reader.at(check, "runs", "check");
  const bool has_oracle = check.value("has_oracle", false);

  // output -> pass -> path -> file
  std::map<std::string, std::map<std::string, std::map<std::string, std::string>>> files;
  for (const auto& run : runs) {
    for (const auto& [output, path] : run.at("outputs").items()) {
      files[output][run.at("pass").get<std::string>()][run.at("path").get<std::string>()] =
          path.get<std::string>();
    }
  }

  Json comparisons = Json::array();
  for (const auto& output : reader.at(check, "outputs", "check")) {
    const std::string name = output.at("name").get<std::string>();
    const std::vector<std::string> axes = string_list(output.value("axes", Json::array()));
    const std::string along = output.value("profile_axis", "");
    // With rules, the first rule matching the output's name decides it, in place of every
    // absolute tolerance; an output no rule decides is a configuration mistake, not a pass.
    const check::Rule* rule = nullptr;
    if (options.rules) {
      const auto index = check::deciding_rule(*options.rules, name);
      if (!index) {
        throw Error(ErrorCode::kConfig,
                    file + ": output '" + name + "' matches no rule in " + options.rules->origin +
                        " (" + std::to_string(options.rules->rules.size()) +
                        " rules); expected every output of the check to match one",
                    "add a rule whose match is found in '" + name +
                        "' (a catch-all last rule: match = '.*')");
      }
      rule = &options.rules->rules[*index];
    }
    const auto bounds = rule ? rule->when : bounds_for(output, options, file);
    auto& by_pass = files[name];
    const std::string candidate_first = by_pass["candidate_first"]["candidate"];
    const std::string candidate_second = by_pass["reference_first"]["candidate"];
    // The candidate is judged against the reference that ran first in its process, before any
    // candidate code: the candidate_first pass's reference ran after the candidate in the same
    // process, where the candidate could have changed what it computes (patched its code,
    // rewritten the state it reads). That one only confirms the other (guard.reference_tampered).
    const std::string after_candidate_file = by_pass["candidate_first"]["reference"];
    const std::string untouched_file = by_pass["reference_first"]["reference"];
    const std::string reference_file =
        untouched_file.empty() ? after_candidate_file : untouched_file;
    if (candidate_first.empty() || reference_file.empty()) {
      throw Error(ErrorCode::kInput,
                  file + ": output '" + name + "' lacks the candidate_first pass's files");
    }
    const Tensor reference = reader.tensor(reference_file);
    if (!untouched_file.empty() && !after_candidate_file.empty() &&
        untouched_file != after_candidate_file) {
      const Tensor after_candidate = reader.tensor(after_candidate_file);
      const int64_t index = first_difference(reference, after_candidate);
      if (index >= 0) {
        check::Coords coords;
        const std::string where = coords_text(reference, index, axes, &coords);
        Finding finding = make_finding(
            context, Layer::kCheck, "guard.reference_tampered", Severity::kFail,
            "the reference output " + name +
                " computed after the candidate in its process differs from the one computed "
                "before any candidate code ran (first at " +
                where +
                "): the reference was tampered with; the candidate is judged against the "
                "untouched one",
            "reference." + name,
            "the candidate must not change the reference's code or the state it reads");
        finding.where.coords = coords;
        analysis.findings.push_back(std::move(finding));
      }
    }
    std::optional<Tensor> oracle;
    if (has_oracle && !by_pass["oracle"]["oracle"].empty()) {
      oracle = reader.tensor(by_pass["oracle"]["oracle"]);
    }
    check::CompareOptions compare_options;
    compare_options.axes = axes;
    if (!along.empty()) compare_options.along = along;
    compare_options.statistics = rule != nullptr && check::rules_name_statistic(*options.rules);
    for (const check::Bound& bound : bounds) {
      if (bound.metric == check::Metric::kRmsRatio) compare_options.profile_threshold = bound.limit;
    }
    std::optional<double> oracle_factor;
    for (const auto& tolerance : output.value("tolerances", Json::array())) {
      if (tolerance.value("relative_to_oracle", false) && tolerance.contains("bound")) {
        oracle_factor = number_from_json(tolerance.at("bound"), "bound");
      }
    }

    // Both orders; identical candidate files are compared once.
    std::vector<std::pair<std::string, std::string>> passes = {
        {"candidate_first", candidate_first}};
    if (!candidate_second.empty() && candidate_second != candidate_first) {
      passes.push_back({"reference_first", candidate_second});
    }
    for (const auto& [pass, candidate_file] : passes) {
      const Tensor candidate = reader.tensor(candidate_file);
      check::TensorComparison comparison;
      try {
        comparison = check::compare_tensors(name, candidate, reference, oracle ? &*oracle : nullptr,
                                            compare_options);
      } catch (const Error& error) {
        throw Error(error.code(), file + ": output '" + name + "': " + error.message());
      }
      check::FindingContext finding_context;
      finding_context.id_prefix = "check." + context.probe;
      finding_context.where.subject = context.subject;
      finding_context.where.probe = context.probe;
      finding_context.where.params = context.params;
      finding_context.where.path =
          passes.size() > 1 ? "candidate." + name + " (" + pass + ")" : "candidate." + name;
      finding_context.files = {context.observation_file};
      finding_context.reproduce = context.reproduce;
      finding_context.oracle_factor = oracle_factor;
      const std::vector<check::BoundResult> evaluated = check::evaluate_bounds(comparison, bounds);
      // The deciding rule is part of every finding about the output, so a reader of any one of
      // them knows which rule judged it and by how much.
      const std::string decision =
          rule ? check::rule_decision_sentence(*rule, options.rules->origin, evaluated) : "";
      for (auto& finding : check::comparison_findings(comparison, bounds, finding_context)) {
        if (rule) finding.claim += "; " + decision;
        analysis.findings.push_back(std::move(finding));
      }
      Json entry = comparison_json(comparison, pass);
      Json bound_results = Json::array();
      for (const auto& result : evaluated) {
        Json item = Json::object();
        item["metric"] = std::string(check::metric_name(result.metric));
        if (rule) item["op"] = std::string(check::comparison_op_text(result.op));
        item["value"] = number_to_json(result.value);
        item["limit"] = number_to_json(result.limit);
        item["pass"] = result.pass;
        bound_results.push_back(std::move(item));
      }
      entry["bounds"] = std::move(bound_results);
      if (rule) {
        entry["rule"] = {{"name", rule->name},      {"match", rule->match},
                         {"when", rule->when_text}, {"file", options.rules->origin},
                         {"line", rule->line},      {"sentence", decision}};
      }
      analysis.lines.push_back("  " + name + (passes.size() > 1 ? " (" + pass + ")" : "") + ": " +
                               check::comparison_headline(comparison) +
                               (rule ? "; " + decision : ""));
      if (comparison.localisation.profile) {
        analysis.lines.push_back("    profile along " + along + ": " +
                                 check::profile_sentence(*comparison.localisation.profile));
        const std::string structure = check::structure_sentence(comparison.localisation);
        if (!structure.empty()) analysis.lines.push_back("    " + structure);
      }

      // Relative to the oracle: the candidate's error may be at most `factor` times the
      // reference's own.
      for (const auto& tolerance : output.value("tolerances", Json::array())) {
        if (!tolerance.value("relative_to_oracle", false)) continue;
        const std::string metric_text = tolerance.at("metric").get<std::string>();
        const double factor = number_from_json(tolerance.at("bound"), "bound");
        auto metric = check::parse_metric(metric_text);
        if (!metric) {
          throw Error(ErrorCode::kConfig, file + ": output '" + name + "': tolerance metric '" +
                                              metric_text + "' is not a metric; the metrics are " +
                                              check::metric_names_list());
        }
        if (!comparison.oracle) {
          throw Error(ErrorCode::kConfig,
                      file + ": output '" + name +
                          "' has a tolerance relative to the oracle, "
                          "but the check declares no oracle",
                      "add .oracle(...) to the check, or use an absolute tolerance");
        }
        const double candidate_error = check::metric_value(comparison.oracle->a_vs_oracle, *metric);
        const double reference_error = check::metric_value(comparison.oracle->b_vs_oracle, *metric);
        const bool pass_bound = candidate_error <= factor * reference_error ||
                                (candidate_error == 0 && reference_error == 0);
        Json item = Json::object();
        item["metric"] = metric_text;
        item["relative_to_oracle"] = true;
        item["candidate_vs_oracle"] = number_to_json(candidate_error);
        item["reference_vs_oracle"] = number_to_json(reference_error);
        item["factor"] = factor;
        item["pass"] = pass_bound;
        entry["bounds"].push_back(std::move(item));
        if (!pass_bound) {
          Finding finding = make_finding(
              context, Layer::kCheck, "oracle_bound", Severity::kFail,
              "candidate's " + metric_text + " against the oracle (" +
                  format_number(candidate_error) + ") exceeds " + format_number(factor) +
                  "x the reference's own (" + format_number(reference_error) + ") for output " +
                  name,
              "candidate." + name, "compare the two paths' error profiles against the oracle");
          finding.evidence.metrics = {{"candidate_vs_oracle", candidate_error},
                                      {"reference_vs_oracle", reference_error},
                                      {"factor", factor}};
          analysis.findings.push_back(std::move(finding));
        }
      }
      comparisons.push_back(std::move(entry));

      if (pass == "candidate_first") {
        guard_nonfinite(context, check, name, axes, candidate, reference, analysis);
        guard_precision(context, output, name, candidate, reference, oracle ? &*oracle : nullptr,
                        comparison, analysis);
        // Like the worst element: only where the tolerances pass (an error hiding under them).
        if (!has_oracle && check.contains("rounding") && !check::diverged(comparison, bounds)) {
          const Json& rounding = check["rounding"];
          const std::string up_file = rounding.value("up", Json::object()).value(name, "");
          const std::string down_file = rounding.value("down", Json::object()).value(name, "");
          if (!up_file.empty() && !down_file.empty()) {
            guard_rounding_spread(context, output, name, candidate, reference,
                                  reader.tensor(up_file), reader.tensor(down_file), analysis);
          }
        }
        // Only where the tolerances pass: a failed tolerance already says the output is wrong.
        if (!check::diverged(comparison, bounds)) {
          guard_worst_element(context, output, name, axes, candidate, reference, analysis);
        }
      }
    }

    // Guard: the candidate's output depends on whether it ran first.
    if (!candidate_second.empty() && candidate_second != candidate_first) {
      const Tensor first = reader.tensor(candidate_first);
      const Tensor second = reader.tensor(candidate_second);
      const int64_t index = first_difference(first, second);
      check::Coords coords;
      const std::string where = index >= 0 ? coords_text(first, index, axes, &coords) : "";
      Finding finding = make_finding(
          context, Layer::kCheck, "guard.order_dependence", Severity::kFail,
          "candidate output " + name +
              " differs between running first and running after the reference (first at " + where +
              "): it depends on state another path left behind",
          "candidate." + name, "look for buffers or caches shared with the reference path");
      finding.where.coords = coords;
      analysis.findings.push_back(std::move(finding));
    }

    // Guard: a reference holding NaN/Inf judges nothing at those positions (every "<" is
    // vacuous there), and a mostly non-finite one is not "zero": it is its own finding.
    int64_t reference_nonfinite = 0, first_nonfinite = -1;
    for (int64_t index = 0; index < reference.numel(); ++index) {
      if (std::isfinite(reference.element_as_double(index))) continue;
      ++reference_nonfinite;
      if (first_nonfinite < 0) first_nonfinite = index;
    }
    if (reference_nonfinite > 0) {
      check::Coords coords;
      const std::string where = coords_text(reference, first_nonfinite, axes, &coords);
      const double share =
          static_cast<double>(reference_nonfinite) / static_cast<double>(reference.numel());
      Finding finding = make_finding(
          context, Layer::kCheck, "guard.nonfinite_reference", Severity::kFail,
          "the reference output " + name + " holds " + std::to_string(reference_nonfinite) +
              " NaN/Inf of " + std::to_string(reference.numel()) + " elements (" +
              format_number(100 * share) + " %), first at " + where +
              ": no comparison against it can pass or fail honestly",
          "reference." + name,
          "find the first op of the reference path producing a non-finite value");
      finding.where.coords = coords;
      finding.evidence.metrics = {{"nonfinite_count", static_cast<double>(reference_nonfinite)},
                                  {"nonfinite_share", share}};
      analysis.findings.push_back(std::move(finding));
    }

    // Guard: a reference that cannot discriminate (near-zero, near-constant, seed-insensitive).
    if (reference_nonfinite == 0) {
      double low = INFINITY, high = -INFINITY, sum_squares = 0;
      for (int64_t index = 0; index < reference.numel(); ++index) {
        const double value = reference.element_as_double(index);
        if (!std::isfinite(value)) continue;
        low = std::min(low, value);
        high = std::max(high, value);
        sum_squares += value * value;
      }
      const double rms = reference.numel() > 0
                             ? std::sqrt(sum_squares / static_cast<double>(reference.numel()))
                             : 0;
      std::string reason;
      if (!(high >= low) || rms <= 1e-30) {
        reason = "is zero (rms " + format_number(rms) + ")";
      } else if (high - low <= 1e-6 * std::max(std::fabs(high), std::fabs(low))) {
        reason = "is constant (every element within 1e-6 relative of " + format_number(low) + ")";
      }
      // A check whose tolerance a constant output would meet cannot tell a candidate that
      // computes from one that does not: try the reference's own mean against the bounds.
      if (reason.empty() && !bounds.empty() && reference.numel() > 0) {
        double sum = 0;
        int64_t finite = 0;
        for (int64_t index = 0; index < reference.numel(); ++index) {
          const double value = reference.element_as_double(index);
          if (!std::isfinite(value)) continue;
          sum += value;
          ++finite;
        }
        const double mean = finite > 0 ? sum / static_cast<double>(finite) : 0;
        Tensor constant(DType::kF64, reference.shape());
        for (double& value : constant.mutable_data<double>()) value = mean;
        const auto trivial = check::compare_tensors(name, constant, reference, nullptr, {});
        if (!check::diverged(trivial, bounds)) {
          std::string met;
          for (const auto& result : check::evaluate_bounds(trivial, bounds)) {
            met += (met.empty() ? "" : ", ") + std::string(check::metric_name(result.metric)) +
                   " " + format_number(result.value) + " <= " + format_number(result.limit);
          }
          reason = "is so nearly constant that a constant output (its mean, " +
                   format_number(mean) + ") meets every tolerance (" + met + ")";
        }
      }
      const Json alt = check.value("alt_seed", Json::object());
      if (reason.empty() && alt.contains("outputs") && alt["outputs"].contains(name)) {
        const std::string alt_file = alt["outputs"][name].get<std::string>();
        bool same = alt_file == reference_file;
        if (!same) {
          const Tensor other = reader.tensor(alt_file);
          if (other.shape() == reference.shape()) {
            check::CompareOptions plain;
            const auto comparison = check::compare_tensors(name, other, reference, nullptr, plain);
            same = comparison.metrics.rms_ratio <= 1e-9;
            if (!same && !bounds.empty() && !check::diverged(comparison, bounds)) {
              reason = "for seed " + std::to_string(alt.value("seed", 0ull)) +
                       " meets every tolerance against the one for seed " +
                       std::to_string(observation.value("seed", 0ull)) +
                       ": an output computed from other inputs would pass";
            }
          }
        }
        if (same) {
          reason = "is the same for seeds " + std::to_string(observation.value("seed", 0ull)) +
                   " and " + std::to_string(alt.value("seed", 0ull)) + ": it ignores its inputs";
        }
      }
      if (!reason.empty()) {
        analysis.cannot_discriminate = true;
        analysis.findings.push_back(make_finding(
            context, Layer::kCheck, "guard.cannot_discriminate", Severity::kWarn,
            "cannot discriminate: the reference output " + name + " " + reason +
                ", so a wrong candidate could match it",
            "reference." + name, "make the inputs exercise the computation (non-zero, varied)"));
      }
    }
  }
  analysis.data["comparisons"] = std::move(comparisons);

  // Guards the subject measured next to the candidate.
  const Json guards = check.value("guards", Json::object());
  for (const auto& entry : guards.value("input_mutation", Json::array())) {
    analysis.findings.push_back(make_finding(
        context, Layer::kCheck, "guard.input_mutation", Severity::kFail,
        "the " + entry.value("path", "") + " path changed input " + entry.value("input", "") +
            " (" + entry.value("pass", "") + " pass; checksum " +
            entry.value("checksum_before", "") + " -> " + entry.value("checksum_after", "") + ")",
        entry.value("path", "") + "." + entry.value("input", ""),
        "inputs are read-only: write into the outputs only"));
  }
  for (const auto& entry : guards.value("output_unwritten", Json::array())) {
    const int64_t poisoned = entry.value("poisoned", int64_t{0});
    const int64_t numel = entry.value("numel", int64_t{0});
    Finding finding = make_finding(
        context, Layer::kCheck, "guard.output_unwritten", Severity::kFail,
        "the " + entry.value("path", "") + " path left " + std::to_string(poisoned) + " of " +
            std::to_string(numel) + " elements of output " + entry.value("output", "") +
            " unwritten (still the NaN poison, " + entry.value("pass", "") + " pass)",
        entry.value("path", "") + "." + entry.value("output", ""),
        "write every element of the output; check loop bounds and tails");
    finding.evidence.metrics = {{"poisoned", static_cast<double>(poisoned)},
                                {"numel", static_cast<double>(numel)}};
    analysis.findings.push_back(std::move(finding));
  }
  for (const auto& entry : guards.value("output_alias", Json::array())) {
    analysis.findings.push_back(
        make_finding(context, Layer::kCheck, "guard.output_alias", Severity::kFail,
                     "the " + entry.value("path", "") + " path returned output " +
                         entry.value("output", "") + " in a buffer overlapping " +
                         entry.value("aliases", "") + " (" + entry.value("pass", "") + " pass)",
                     entry.value("path", "") + "." + entry.value("output", ""),
                     "return a buffer the path owns, or write into io.output()"));
  }

  // A path's outputs whose bytes no longer had the checksum the check's child sent down a pipe
  // right after the path returned: code that ran later in that child rewrote them.
  for (const auto& entry : guards.value("output_overwritten", Json::array())) {
    const std::string record = entry.value("record", "");
    const std::string claim =
        record == "extra"
            ? "the check's child sent more output checksums than its paths have outputs (" +
                  entry.value("pass", "") + " pass): something else wrote to the runtime's pipe"
            : "the " + entry.value("path", "") + " path's output " + entry.value("output", "") +
                  (record == "missing" ? " has no checksum record"
                                       : " changed after the path returned and its checksum was "
                                         "sent") +
                  " (" + entry.value("pass", "") +
                  " pass): rewritten by code that ran after it in "
                  "the same process (" +
                  entry.value("by", "") + ")";
    analysis.findings.push_back(
        make_finding(context, Layer::kCheck, "guard.evidence_sealed", Severity::kFail, claim,
                     entry.value("path", "") +
                         (entry.value("output", "").empty() ? "" : "." + entry.value("output", "")),
                     "a path may write only its own outputs, and nothing after it returns"));
  }

  // A path that changed the floating-point state, the affinity, the priority or the thread
  // count: undone before the next path ran, and a failure for the candidate (the reference is
  // the harness's own: a warning).
  for (const auto& entry : guards.value("environment", Json::array())) {
    const std::string path = entry.value("path", "");
    analysis.findings.push_back(make_finding(
        context, Layer::kCheck, "guard.environment",
        path == "candidate" ? Severity::kFail : Severity::kWarn,
        "the " + path + " path changed the " + entry.value("change", "") + " (" +
            entry.value("pass", "") + " pass); the runtime put it back before the next path",
        path, "leave the floating-point state, affinity, priority and threads as they were"));
  }
  for (const auto& entry : guards.value("stray_processes", Json::array())) {
    std::string names;
    for (const auto& item : entry.value("processes", Json::array())) {
      names += (names.empty() ? "" : ", ") + item.get<std::string>();
    }
    analysis.findings.push_back(make_finding(
        context, Layer::kCheck, "guard.child_process", Severity::kFail,
        "after " + entry.value("after", std::string("a path")) +
            ", processes it started were still running (" + names + "); they were killed",
        "candidate", "a path must not leave processes behind"));
  }

  // Determinism over --repeat.
  if (check.contains("repeat")) {
    const Json& repeat = check["repeat"];
    int differing = 0;
    for (const auto& output : check.at("outputs")) {
      const std::string name = output.at("name").get<std::string>();
      const std::string first_file = files[name]["candidate_first"]["candidate"];
      int index = 0;
      for (const auto& run : repeat.value("outputs", Json::array())) {
        ++index;
        const std::string file_name = run.at(name).get<std::string>();
        if (file_name == first_file) continue;
        const Tensor first = reader.tensor(first_file);
        const Tensor again = reader.tensor(file_name);
        const int64_t at = first_difference(first, again);
        if (at < 0) continue;
        ++differing;
        check::Coords coords;
        const std::string where =
            coords_text(first, at, string_list(output.value("axes", Json::array())), &coords);
        Finding finding = make_finding(
            context, Layer::kCheck, "nondeterministic", Severity::kFail,
            "candidate output " + name + " differs between runs on the same inputs: repeat " +
                std::to_string(index) + " first differs at " + where + " (" +
                format_number(first.element_as_double(at)) + " vs " +
                format_number(again.element_as_double(at)) + ")",
            "candidate." + name, "look for unordered reductions, atomics or uninitialised reads");
        finding.where.coords = coords;
        analysis.findings.push_back(std::move(finding));
        break;
      }
    }
    if (differing == 0) {
      analysis.findings.push_back(
          make_finding(context, Layer::kCheck, "deterministic", Severity::kInfo,
                       "candidate outputs are bitwise identical over " +
                           std::to_string(repeat.value("count", 0)) + " repeats on the same inputs",
                       "candidate", ""));
    }
  }
}

// --- benches ---------------------------------------------------------------------------------

void analyze_bench(const ObservationReader& reader, const Context& context,
                   const AnalyzeOptions& options, Analysis& analysis) {
  const Json& bench_json = reader.at(reader.json(), "bench", "");
  const std::string file = (reader.dir() / "observation.json").string();
  if (bench_json.contains("skipped") && bench_json["skipped"].is_string()) {
    const std::string reason = bench_json["skipped"].get<std::string>();
    analysis.findings.push_back(make_finding(context, Layer::kBench, "skipped", Severity::kInfo,
                                             "skipped at this point: " + reason, "", ""));
    analysis.lines.push_back("  skipped: " + reason);
    analysis.data["skipped"] = reason;
    return;
  }
  const std::string samples_file = bench_json.value("samples_file", "samples.json");
  std::ifstream in(reader.dir() / samples_file);
  if (!in) throw Error(ErrorCode::kInput, (reader.dir() / samples_file).string() + ": missing");
  Json samples_json;
  try {
    std::stringstream samples_text;
    samples_text << in.rdbuf();
    check_json_nesting(samples_text.str(), (reader.dir() / samples_file).string());
    samples_json = Json::parse(samples_text.str());
  } catch (const nlohmann::json::exception& error) {
    throw Error(ErrorCode::kInput, (reader.dir() / samples_file).string() +
                                       ": not valid JSON: " + json_error_text(error));
  }
  struct Variant {
    std::string name;
    std::vector<double> samples;
    std::vector<int64_t> before, after;
    std::vector<int64_t> rounds;  // the round of each sample; empty when not recorded
  };
  std::vector<Variant> variants;
  for (const auto& entry : samples_json.at("variants")) {
    variants.push_back({entry.at("name").get<std::string>(),
                        entry.at("samples").get<std::vector<double>>(),
                        entry.value("threads_before", std::vector<int64_t>{}),
                        entry.value("threads_after", std::vector<int64_t>{}),
                        entry.value("rounds", std::vector<int64_t>{})});
    if (variants.back().samples.empty()) {
      throw Error(ErrorCode::kInput, (reader.dir() / samples_file).string() + ": variant '" +
                                         variants.back().name + "' has no samples");
    }
  }
  if (variants.empty()) throw Error(ErrorCode::kInput, samples_file + ": no variants");

  const double bytes = bench_json.value("bytes_per_call", 0.0);
  const double flops = bench_json.value("flops_per_call", 0.0);
  Json summaries = Json::object();
  bench::SummaryOptions summary_options;
  summary_options.seed = options.bootstrap_seed;
  for (const auto& variant : variants) {
    const bench::ArmSummary summary = bench::summarize(variant.samples, summary_options);
    Json entry = bench::summary_to_json(summary);
    if (bytes > 0) entry["bytes_per_s"] = bytes / summary.median;
    if (flops > 0) entry["flops_per_s"] = flops / summary.median;
    summaries[variant.name] = std::move(entry);
    std::string line = "  " + variant.name + ": median " + format_number(summary.median * 1e6) +
                       " us/call, 95% CI [" + format_number(summary.median_ci.low * 1e6) + ", " +
                       format_number(summary.median_ci.high * 1e6) + "], n " +
                       std::to_string(summary.n) + ", cv " + format_number(summary.cv);
    if (bytes > 0) line += ", " + format_number(bytes / summary.median / 1e9) + " GB/s";
    if (flops > 0) line += ", " + format_number(flops / summary.median / 1e9) + " GFLOP/s";
    analysis.lines.push_back(line);
  }
  analysis.data["summaries"] = std::move(summaries);
  // Where the run's time went, and which round of whole runs it was (a runtime that writes it
  // takes --round: src/gate's rounds against a baseline build ask for later rounds only then).
  analysis.data["warmup_s"] = bench_json.value("warmup_s", 0.0);
  analysis.data["sampling_s"] = bench_json.value("sampling_s", 0.0);
  if (bench_json.contains("phases_s")) analysis.data["phases_s"] = bench_json["phases_s"];
  if (bench_json.contains("round") && bench_json["round"].is_number_integer()) {
    analysis.data["round"] = bench_json["round"];
  }
  analysis.data["stop_reason"] = bench_json.value("stop_reason", "");
  analysis.data["stop_relative_half_width"] =
      bench_json.value("stop_relative_half_width", Json::array());
  analysis.data["stop_minimum_detectable_effect"] =
      bench_json.value("stop_minimum_detectable_effect", Json::array());
  {
    // When the budget ended sampling, say what the run could and could not resolve.
    std::string line = "  sampling stopped: " + bench_json.value("stop_reason", std::string()) +
                       " after " + format_number(bench_json.value("sampling_s", 0.0)) + " s";
    const Json half_widths = bench_json.value("stop_relative_half_width", Json::array());
    const Json effects = bench_json.value("stop_minimum_detectable_effect", Json::array());
    // JSON has no NaN: the subject writes an undefined width (too few samples) as null.
    auto number_or_nan = [](const Json& value, const char* field) {
      return value.is_null() ? NAN : number_from_json(value, field);
    };
    if (!half_widths.empty() && !effects.empty()) {
      line += "; CI half-width " + format_number(number_or_nan(half_widths[0], "half_width")) +
              ", minimum detectable effect " + format_number(number_or_nan(effects[0], "effect"));
    }
    analysis.lines.push_back(line);
  }
  analysis.data["calls_per_sample"] = bench_json.value("calls_per_sample", 0);

  std::vector<bench::Comparison> comparisons;
  bench::CompareOptions compare_options;
  compare_options.threshold = options.threshold;
  compare_options.seed = options.bootstrap_seed;
  // Paired by round where the samples say which round each came from (libloupe's runtime, which
  // flips the order every round): load that lasts longer than a round then cancels in each
  // round's ratio. Samples without rounds (an observation from before pairing) are compared
  // unpaired.
  for (const auto& variant : variants) {
    const bool ascending =
        std::adjacent_find(variant.rounds.begin(), variant.rounds.end(),
                           std::greater_equal<int64_t>()) == variant.rounds.end();
    if (!variant.rounds.empty() &&
        (variant.rounds.size() != variant.samples.size() || !ascending)) {
      throw Error(ErrorCode::kInput,
                  (reader.dir() / samples_file).string() + ": variant '" + variant.name +
                      "': expected one strictly ascending round index per sample (" +
                      std::to_string(variant.samples.size()) + " samples, " +
                      std::to_string(variant.rounds.size()) + " rounds)");
    }
  }
  // Work a variant's outputs accessor does beyond the baseline's (the same outputs) is work of
  // its calls done outside the timed region: it is charged to each of the variant's calls before
  // the comparison, so deferring work into the accessor buys no speed-up (the lazy outputs of
  // issue 33 passed with only guard.implausible_speedup's warning). Per variant the least CPU its
  // process spent in the accessor over every verified call and accessor probe, less the
  // baseline's least; a difference of kAccessorNoise or less is not charged (the least of a
  // dozen readings of two honest variants' accessors differed by up to 2 us on this VM, softmax
  // twice). guard.deferred_output still fails what exceeds its allowances.
  // For a device body the accessor waits for a device-to-host copy, and that wait spins a CPU
  // for a latency that varies from copy to copy (guard.deferred_output's allowance below): two
  // honest GPU accessors of 8 MB of outputs differed by 25-230 us of CPU from one run to the next
  // (kda's decode_gpu at batch 128-256 on an H100, a 370-760 us call), which, charged, read as a
  // 9-47 % slower variant. So a difference is charged only beyond kAccessorNoise and twice the
  // longest device-to-host copy measured beside the readings (0 for a body on this CPU).
  constexpr double kAccessorNoise = 2e-6;
  std::map<std::string, double> least_accessor_cpu;
  double device_copy_latency = 0;
  for (const auto& entry : bench_json.value("verified", Json::array())) {
    device_copy_latency = std::max(device_copy_latency, 2 * entry.value("to_host_s", 0.0));
    if (!entry.contains("accessor_cpu_s")) continue;
    const std::string name = entry.value("variant", "");
    double least = entry.value("accessor_cpu_s", 0.0);
    for (const auto& probe : entry.value("accessor_probes", Json::array())) {
      if (probe.contains("accessor_cpu_s"))
        least = std::min(least, probe.value("accessor_cpu_s", 0.0));
    }
    const auto found = least_accessor_cpu.find(name);
    least_accessor_cpu[name] =
        found == least_accessor_cpu.end() ? least : std::min(found->second, least);
  }
  Json charges = Json::object();
  std::vector<std::vector<double>> charged_samples(variants.size());
  for (size_t index = 1; index < variants.size(); ++index) {
    charged_samples[index] = variants[index].samples;
    const auto own = least_accessor_cpu.find(variants[index].name);
    const auto base = least_accessor_cpu.find(variants[0].name);
    if (own == least_accessor_cpu.end() || base == least_accessor_cpu.end()) continue;
    const double charge = own->second - base->second;
    if (!(charge > std::max(kAccessorNoise, device_copy_latency))) continue;
    for (double& sample : charged_samples[index]) sample += charge;
    charges[variants[index].name] = charge;
    Finding finding = make_finding(
        context, Layer::kBench, "accessor_charged", Severity::kInfo,
        "variant " + variants[index].name + ": its outputs accessor uses " +
            format_number(charge * 1e6) + " us more CPU than the baseline " + variants[0].name +
            "'s (more than the " +
            format_number(std::max(kAccessorNoise, device_copy_latency) * 1e6) +
            " us two honest accessors differ by" +
            (device_copy_latency > kAccessorNoise ? ": twice the device-to-host copy" : "") +
            "); that time is added to each of its calls in the comparison",
        variants[index].name, "compute the outputs inside the timed call");
    finding.evidence.metrics = {{"accessor_charge_s", charge}};
    analysis.findings.push_back(std::move(finding));
  }
  analysis.data["accessor_charge_s"] = std::move(charges);
  for (size_t index = 1; index < variants.size(); ++index) {
    comparisons.push_back(bench::compare_rounds(variants[0].samples, variants[0].rounds,
                                                charged_samples[index], variants[index].rounds,
                                                compare_options));
  }
  if (comparisons.size() > 1) bench::control_false_discovery(comparisons);
  Json comparison_list = Json::array();
  for (size_t index = 0; index < comparisons.size(); ++index) {
    const auto& comparison = comparisons[index];
    bench::FindingContext finding_context;
    finding_context.subject = context.subject;
    finding_context.probe = context.probe;
    finding_context.params = context.params;
    finding_context.path = variants[index + 1].name + " vs " + variants[0].name;
    finding_context.name_a = variants[0].name;
    finding_context.name_b = variants[index + 1].name;
    finding_context.reproduce = context.reproduce;
    finding_context.files = {context.observation_file};
    analysis.bench_comparisons.push_back(
        {comparison, finding_context, analysis.findings.size(), comparison_list.size(), ""});
    analysis.findings.push_back(bench::comparison_finding(comparison, finding_context));
    comparison_list.push_back(
        bench::comparison_to_json(comparison, variants[0].name, variants[index + 1].name));
    analysis.lines.push_back("  " + variants[index + 1].name + " / " + variants[0].name + " = " +
                             format_number(comparison.ratio) + " [" +
                             format_number(comparison.ci.low) + ", " +
                             format_number(comparison.ci.high) +
                             "]: " + std::string(bench::ab_verdict_name(comparison.verdict)) +
                             " (" + comparison.rule + ")");
  }
  analysis.data["comparisons"] = std::move(comparison_list);

  // Guard: the thread count moved during a sample (work the timer may not have seen).
  for (const auto& variant : variants) {
    int64_t changed = 0, example_before = 0, example_after = 0;
    for (size_t index = 0; index < variant.before.size() && index < variant.after.size(); ++index) {
      if (variant.before[index] != variant.after[index]) {
        if (changed == 0) {
          example_before = variant.before[index];
          example_after = variant.after[index];
        }
        ++changed;
      }
    }
    if (changed == 0) continue;
    Finding finding = make_finding(
        context, Layer::kBench, "guard.thread_count", Severity::kFail,
        "variant " + variant.name + ": the thread count changed during " + std::to_string(changed) +
            " of " + std::to_string(variant.samples.size()) + " samples (e.g. " +
            std::to_string(example_before) + " -> " + std::to_string(example_after) +
            "): work may run on threads the timer does not see",
        variant.name, "join every thread the body starts before it returns");
    finding.evidence.metrics = {{"samples_changed", static_cast<double>(changed)}};
    analysis.findings.push_back(std::move(finding));
  }

  // Guard: faster than this machine can read the declared bytes or do the declared flops. The
  // subject measured one thread's best streaming read and multiply-add rate; a body may use
  // every hardware thread and wider vectors, hence the margins.
  const Json roofline = bench_json.value("roofline", Json(nullptr));
  if (roofline.is_object()) {
    constexpr double kReadMargin = 16;  // vector width and prefetch beyond the 8-lane loop
    constexpr double kFlopMargin = 32;  // FMA and vector width beyond 8 scalar chains
    const double threads = std::max(1.0, roofline.value("hardware_threads", 1.0));
    // A timer of another device (a GPU) measured that device's rate and chose its own margin.
    const std::string device = roofline.value("device", std::string());
    const double read_margin = roofline.value("read_margin", kReadMargin);
    const Json summaries_json = analysis.data.value("summaries", Json::object());
    const double device_rate = roofline.value("read_bytes_per_s", 0.0);
    for (const auto& variant : variants) {
      const double median = summaries_json.contains(variant.name)
                                ? summaries_json[variant.name].value("median_s", 0.0)
                                : 0.0;
      if (!(median > 0)) continue;
      // On another device (a GPU), the declared bytes' rate as a share of the rate the device
      // reached next to the samples: a bound a gate can state once for every card
      // (`bench.E[v].device_bytes_share >= 0.8`), where bytes_per_s differs by card.
      if (!device.empty() && bytes > 0 && device_rate > 0) {
        analysis.data["summaries"][variant.name]["device_bytes_share"] =
            bytes / median / device_rate;
      }
      struct Roof {
        const char* what;
        double work;
        double measured;
        double margin;
        const char* unit;
      };
      const Roof roofs[] = {
          {"bytes", bytes, roofline.value("read_bytes_per_s", 0.0), read_margin, "B/s"},
          {"flops", flops, roofline.value("flops_per_s", 0.0), kFlopMargin, "flop/s"}};
      for (const auto& roof : roofs) {
        if (!(roof.work > 0) || !(roof.measured > 0)) continue;
        const double implied = roof.work / median;
        const double bound = roof.measured * threads * roof.margin;
        if (implied <= bound) continue;
        Finding finding = make_finding(
            context, Layer::kBench, "guard.roofline", Severity::kFail,
            "variant " + variant.name + " claims " + format_number(roof.work) + " " + roof.what +
                " per call in " + format_number(median * 1e9) + " ns: " + format_number(implied) +
                " " + roof.unit + ", " + format_number(implied / (roof.measured * threads)) +
                "x what " +
                (device.empty() ? format_number(threads) + " thread(s) of this machine reach (" +
                                      format_number(roof.measured) + " " + roof.unit + " per thread"
                                : "the device (" + device + ") reaches (" +
                                      format_number(roof.measured) + " " + roof.unit) +
                ", measured next to it): the timed call cannot be doing that work",
            variant.name,
            "check the declared work (set_bytes_per_call, set_flops_per_call) and that the timed "
            "call does it, not a later accessor");
        finding.evidence.metrics = {{"implied_per_s", implied},
                                    {"measured_per_thread_per_s", roof.measured},
                                    {"hardware_threads", threads},
                                    {"margin", roof.margin}};
        analysis.findings.push_back(std::move(finding));
      }
    }
  }

  // Guard: more than 10x faster than the baseline is flagged for a look, not failed: real
  // rewrites can do it, cheats usually do.
  for (size_t index = 0; index < comparisons.size(); ++index) {
    const auto& comparison = comparisons[index];
    if (!(comparison.ratio > 0) || comparison.ratio >= 0.1) continue;
    Finding finding = make_finding(
        context, Layer::kBench, "guard.implausible_speedup", Severity::kWarn,
        "variant " + variants[index + 1].name + " is " + format_number(1.0 / comparison.ratio) +
            "x faster than " + variants[0].name +
            ": beyond 10x, check that it does the same work (outputs verified, work declared)",
        variants[index + 1].name + " vs " + variants[0].name,
        "declare bytes or flops per call so the roofline guard can judge the speed");
    finding.evidence.metrics = {{"ratio", comparison.ratio}};
    analysis.findings.push_back(std::move(finding));
  }

  // Guard: batches whose inputs repeat content already timed run much faster than batches on
  // fresh inputs: the body replays results cached by content (or by address). Fail only on a
  // complete separation (every repeated batch faster than every fresh one) that is also 2x.
  for (const auto& replay : bench_json.value("replays", Json::array())) {
    const auto fresh = replay.value("fresh", std::vector<double>{});
    const auto repeated = replay.value("repeated", std::vector<double>{});
    if (fresh.size() < 3 || repeated.size() < 3) continue;
    const double slowest_repeated = *std::max_element(repeated.begin(), repeated.end());
    const double fastest_fresh = *std::min_element(fresh.begin(), fresh.end());
    std::vector<double> sorted_fresh = fresh, sorted_repeated = repeated;
    std::sort(sorted_fresh.begin(), sorted_fresh.end());
    std::sort(sorted_repeated.begin(), sorted_repeated.end());
    const double fresh_median = sorted_fresh[sorted_fresh.size() / 2];
    const double repeated_median = sorted_repeated[sorted_repeated.size() / 2];
    if (!(slowest_repeated < fastest_fresh) || !(repeated_median * 2 < fresh_median)) continue;
    // And pair by pair (the batches alternate fresh, repeated): every repeated batch at least 2x
    // faster than the fresh one run just before it. A cache replays on every repeated batch;
    // complete separation alone failed an honest variant in 1 of 40 runs of honest_pair_bench on
    // 2 cores at load 7-12 (load bursts falling on the fresh batches).
    bool every_pair = true;
    for (size_t pair = 0; pair < fresh.size() && pair < repeated.size(); ++pair) {
      every_pair = every_pair && repeated[pair] * 2 < fresh[pair];
    }
    if (!every_pair) continue;
    const std::string variant_name = replay.value("variant", "");
    Finding finding = make_finding(
        context, Layer::kBench, "guard.content_cache", Severity::kFail,
        "variant " + variant_name + " runs " + format_number(fresh_median / repeated_median) +
            "x faster on inputs whose content it has seen before (median " +
            format_number(repeated_median * 1e9) + " ns/call, " + std::to_string(repeated.size()) +
            " batches) than on fresh ones (" + format_number(fresh_median * 1e9) +
            " ns/call, every batch slower): it replays "
            "cached results",
        variant_name, "remove the cache: a timed call must compute from its inputs");
    finding.evidence.metrics = {{"fresh_median_s", fresh_median},
                                {"repeated_median_s", repeated_median}};
    analysis.findings.push_back(std::move(finding));
  }

  // Guards on what the runtime process measured around each variant's process.
  // Only loupe's own timers: any other could report whatever it likes.
  if (!bench_json.value("timer_is_loupes", true)) {
    analysis.findings.push_back(make_finding(
        context, Layer::kBench, "guard.foreign_timer", Severity::kFail,
        "the body set its own timer (" + bench_json.value("timer", std::string()) + ", type " +
            bench_json.value("timer_type", std::string()) +
            "); only loupe's timers (the steady clock, make_cuda_event_timer) may time a bench. "
            "The samples were taken with the steady clock instead",
        "", "remove set_timer, or use loupe::make_cuda_event_timer()"));
  }
  // A clock the subject defines itself (round 4's interposed_clock: clock_gettime slowed to 0.7x
  // in its variant's process) reaches every caller in the process. loupe's timings read the
  // clock by the system call and are not changed by it; defining one is tampering all the same.
  {
    const Json runtime = reader.json().value("runtime", Json::object());
    std::string clocks;
    for (const auto& clock : runtime.value("interposed_clocks", Json::array())) {
      if (clock.is_string()) clocks += (clocks.empty() ? "" : ", ") + clock.get<std::string>();
    }
    if (!clocks.empty()) {
      analysis.findings.push_back(make_finding(
          context, Layer::kBench, "guard.foreign_timer", Severity::kFail,
          "the subject defines its own clock (" + clocks +
              "): every caller in its processes reads it, a body's timer too. loupe read the "
              "samples by the system call, which it does not reach",
          "", "remove the definition; time nothing but with loupe's timers"));
    }
  }
  const Json accounting = samples_json.value("accounting", Json::array());
  double baseline_prepare_per_call = -1;
  std::set<std::string> off_path;
  for (const auto& account : accounting) {
    const std::string name = account.value("variant", "");
    // Work off the timed path: CPU the variant's process used while it was asked to do nothing
    // (threads or helpers working between its batches, or while another variant was timed).
    const double idle_cpu = account.value("idle_cpu_s", 0.0);
    const double idle_wall = account.value("idle_wall_s", 0.0);
    const double run_cpu = account.value("run_cpu_s", 0.0);
    const double others_cpu = account.value("cpu_while_others_timed_s", 0.0);
    const double others_wall = account.value("wall_while_others_timed_s", 0.0);
    const double prepared = std::max(1.0, account.value("prepared_calls", 1.0));
    const double prepare_per_call = account.value("prepare_cpu_s", 0.0) / prepared;
    if (baseline_prepare_per_call < 0) baseline_prepare_per_call = prepare_per_call;
    double timed_thread_cpu = 0;
    for (const auto& thread : account.value("threads", Json::array())) {
      if (thread.value("timed", false)) timed_thread_cpu += thread.value("cpu_s", 0.0);
    }
    const HelperThreads helpers = judge_helper_threads(account);
    const double other_threads_cpu = helpers.cpu_s;
    const std::string& busiest = helpers.busiest;
    const std::string batches_clause =
        helpers.stretches == 0 ? std::string()
                               : ", busy in " + std::to_string(helpers.busy_stretches) + " of " +
                                     std::to_string(helpers.stretches) + " stretches of its " +
                                     std::to_string(helpers.batches) + " batches";
    std::string why;
    // Each command costs the child a few microseconds the runtime cannot attribute (the wake-up,
    // the answer): allowed for, with the rest of the idle time's CPU.
    const double commands = account.value("commands", 0.0);
    const double idle_allowance = 0.02 * idle_wall + 2e-3 + 30e-6 * commands;
    if (helpers.off_path()) {
      why = "threads other than the timed one, alive through sampling, used " +
            format_number(other_threads_cpu * 1e3) + " ms of CPU against the process's " +
            format_number(run_cpu * 1e3) + " ms inside its timed batches (busiest: " + busiest +
            ")" + batches_clause + "; threads a call starts and joins are not counted here";
    } else if (idle_cpu > idle_allowance && idle_cpu > 0.02 * run_cpu) {
      why = "its process used " + format_number(idle_cpu * 1e3) +
            " ms of CPU while it had no "
            "command (" +
            format_number(idle_wall * 1e3) + " ms), " + format_number(others_cpu * 1e3) +
            " ms of it while another variant was timed";
    } else if (prepare_per_call > 3 * baseline_prepare_per_call + 50e-6) {
      why = "its process used " + format_number(prepare_per_call * 1e6) +
            " us of CPU per input set built, against the baseline's " +
            format_number(baseline_prepare_per_call * 1e6) +
            " us for the same inputs: work was done while its inputs were built";
    }
    if (why.empty() && helpers.over()) {
      // A burst in a minority of batches moves no median the verdicts read: said, not failed.
      Finding finding = make_finding(
          context, Layer::kBench, "guard.off_path_burst", Severity::kInfo,
          "variant " + name + ": threads other than the timed one used " +
              format_number(other_threads_cpu * 1e3) + " ms of CPU against " +
              format_number(run_cpu * 1e3) + " ms inside its timed batches (busiest: " + busiest +
              ")" + batches_clause +
              ": not work handed off per call, which recurs through the sampling",
          name, "rerun on a quieter machine if the burst repeats");
      finding.evidence.metrics = {{"other_threads_cpu_s", other_threads_cpu},
                                  {"run_cpu_s", run_cpu},
                                  {"busy_stretches", static_cast<double>(helpers.busy_stretches)},
                                  {"stretches", static_cast<double>(helpers.stretches)},
                                  {"batches", static_cast<double>(helpers.batches)}};
      analysis.findings.push_back(std::move(finding));
    }
    if (!why.empty()) {
      off_path.insert(name);
      Finding finding = make_finding(
          context, Layer::kBench, "guard.off_path_work", Severity::kFail,
          "variant " + name + ": work runs off the timed path: " + why, name,
          "do all of a call's work inside the call; join every thread before it returns");
      finding.evidence.metrics = {{"other_threads_cpu_s", other_threads_cpu},
                                  {"timed_thread_cpu_s", timed_thread_cpu},
                                  {"idle_cpu_s", idle_cpu},
                                  {"idle_wall_s", idle_wall},
                                  {"cpu_while_others_timed_s", others_cpu},
                                  {"wall_while_others_timed_s", others_wall},
                                  {"prepare_cpu_per_call_s", prepare_per_call}};
      analysis.findings.push_back(std::move(finding));
    }
    std::vector<std::string> processes =
        account.value("child_processes", std::vector<std::string>{});
    const double waited = account.value("waited_children_cpu_s", 0.0);
    if (!processes.empty() || waited > 0) {
      std::string list;
      for (size_t item = 0; item < processes.size() && item < 5; ++item) {
        list += (list.empty() ? "" : ", ") + processes[item];
      }
      Finding finding = make_finding(
          context, Layer::kBench, "guard.child_process", Severity::kFail,
          "variant " + name + ": " +
              (processes.empty() ? std::string()
                                 : "child processes existed during its samples (" + list + ")") +
              (!processes.empty() && waited > 0 ? "; " : "") +
              (waited > 0
                   ? "children it waited for used " + format_number(waited * 1e3) + " ms of CPU"
                   : std::string()) +
              ": work the timer does not see",
          name, "do the work in the timed call's own process");
      finding.evidence.metrics = {{"waited_children_cpu_s", waited}};
      analysis.findings.push_back(std::move(finding));
    }
    for (const auto& change : account.value("environment_changes", std::vector<std::string>{})) {
      analysis.findings.push_back(make_finding(
          context, Layer::kBench, "guard.environment", Severity::kFail,
          "variant " + name + "'s process had its " + change +
              " changed during sampling: a state that changes its speed or the others'",
          name, "leave affinity and priority as they were"));
    }
    for (const auto& what : account.value("syscall_interception", std::vector<std::string>{})) {
      analysis.findings.push_back(make_finding(
          context, Layer::kBench, "guard.syscall_interception", Severity::kFail,
          "variant " + name + "'s process had its system calls intercepted: " + what +
              "; a filter or a tracer can answer the clock system call the runtime times with",
          name, "install no seccomp filter and attach no tracer in a variant's process"));
    }
  }
  const double cores = std::max(1.0, static_cast<double>(std::thread::hardware_concurrency()));
  for (size_t index = 0; index < variants.size(); ++index) {
    const auto& entry = samples_json.at("variants")[index];
    const auto windows = entry.value("window_s", std::vector<double>{});
    const auto cpu = entry.value("window_cpu_s", std::vector<double>{});
    const auto main_cpu = entry.value("window_main_thread_cpu_s", std::vector<double>{});
    const double calls = std::max(1.0, samples_json.value("calls_per_sample", 1.0));
    // The child reads the clock around its batch; the runtime process's window from "run" to
    // the answer must contain that interval, and the CPU the child used in the window must fit
    // in it (on every core at most).
    const auto threads_before = entry.value("threads_before", std::vector<int64_t>{});
    const auto threads_after = entry.value("threads_after", std::vector<int64_t>{});
    int64_t outside = 0, overfull = 0, cores_overfull = 0, single_overfull = 0;
    for (size_t sample = 0;
         sample < variants[index].samples.size() && sample < windows.size() &&
         sample < cpu.size() && bench_json.value("timer", "") == "cpu_steady_clock";
         ++sample) {
      const double reported = variants[index].samples[sample] * calls;
      if (reported > windows[sample] + 20e-6) ++outside;
      // A variant already caught working on other threads fills the window with their CPU.
      if (!off_path.count(variants[index].name) && cpu[sample] > 1.25 * cores * reported + 200e-6) {
        ++cores_overfull;
      } else if (sample < threads_before.size() && sample < threads_after.size() &&
                 sample < main_cpu.size() && threads_before[sample] == 1 &&
                 threads_after[sample] == 1 &&
                 // One thread through the batch: the main thread used (nearly) all of its CPU. A
                 // body that starts and joins threads inside the batch has one thread before and
                 // after, and on an idle machine more CPU than time (kda's two-thread prefill).
                 cpu[sample] - main_cpu[sample] <= 0.05 * cpu[sample] + 200e-6 &&
                 cpu[sample] > 1.1 * reported + 200e-6) {
        // One thread cannot use more CPU than the time that passed: the CPU in the window also
        // holds the child's wake-up and answer around the batch, tens of microseconds. A clock
        // slowed in the variant's process (a seccomp filter answering the clock system call)
        // reports less time than its thread ran.
        ++single_overfull;
      }
    }
    // A single-threaded batch over its time by the margin is impossible; three of them and half
    // the samples, since an honest batch is read over it now and then under load (one of 46 by
    // 0.46 ms, three of seven by 0.2 ms on this loaded 2-core VM), while a slowed clock is over
    // it in every batch.
    const size_t judged = std::min({variants[index].samples.size(), windows.size(), cpu.size()});
    if (single_overfull >= 3 && single_overfull * 2 >= static_cast<int64_t>(judged)) {
      overfull += single_overfull;
    }
    // CPU beyond every core's time: a tampered timing moves the median only in half the samples
    // or more, while an honest batch's window can hold the answer's page faults and cache misses
    // now and then (one of 21 samples of 0.12 ms batches at load ~10). One sample suffices when
    // there are fewer than three; a report outside the window counts from the first.
    const int64_t needed = std::min<int64_t>(3, static_cast<int64_t>(judged));
    if (cores_overfull >= needed && cores_overfull * 2 >= static_cast<int64_t>(judged)) {
      overfull += cores_overfull;
    }
    if (outside + overfull > 0) {
      Finding finding = make_finding(
          context, Layer::kBench, "guard.timing", Severity::kFail,
          "variant " + variants[index].name + ": in " + std::to_string(outside + overfull) +
              " of " + std::to_string(variants[index].samples.size()) +
              " samples the batch time its process reported does not fit what the runtime "
              "measured around it (" +
              std::to_string(outside) +
              " longer than the runtime's "
              "window, " +
              std::to_string(overfull) +
              " shorter than the CPU time the process used): the timing was tampered with",
          variants[index].name, "nothing in a variant's process may write loupe's timings");
      finding.evidence.metrics = {{"outside_window", static_cast<double>(outside)},
                                  {"cpu_beyond_time", static_cast<double>(overfull)}};
      analysis.findings.push_back(std::move(finding));
    }
  }
  for (const auto& change : samples_json.value("runtime_environment_changes", Json::array())) {
    analysis.findings.push_back(
        make_finding(context, Layer::kBench, "guard.environment", Severity::kFail,
                     "the runtime process (the timer) had its " + change.get<std::string>() +
                         " changed during sampling, by a variant's process; it was put back",
                     "", "a variant must not touch other processes"));
  }
  for (const auto& stray : samples_json.value("left_running", Json::array())) {
    analysis.findings.push_back(
        make_finding(context, Layer::kBench, "guard.child_process", Severity::kFail,
                     "a variant's process left " + stray.get<std::string>() +
                         " running after it quit; it was killed",
                     "", "join and wait for everything a variant starts"));
  }

  // Guard: timed calls must produce what the same variant produces untimed.
  const Json tolerance = bench_json.value("verify_tolerance", Json::object());
  const std::string metric_text = tolerance.value("metric", "rms_ratio");
  auto metric = check::parse_metric(metric_text);
  if (!metric) {
    throw Error(ErrorCode::kConfig, file + ": bench.verify_tolerance.metric '" + metric_text +
                                        "' is not a metric; the metrics are " +
                                        check::metric_names_list());
  }
  const std::vector<check::Bound> bounds = {{*metric, tolerance.value("bound", 1e-6)}};
  int verified = 0, failed = 0;
  // Per variant: (seed, timed outputs, what to compare them with) of every verified call: the
  // baseline's outputs on the same inputs, or the variant's own untimed ones for the baseline.
  std::map<std::string, std::vector<std::tuple<uint64_t, std::map<std::string, Tensor>,
                                               std::map<std::string, Tensor>>>>
      seen;
  std::map<std::string, std::vector<double>> deferred;      // accessor's own seconds per call
  std::map<std::string, std::vector<double>> accessor_cpu;  // its process's CPU seconds in it
  std::map<std::string, double> to_host_seconds;  // the longest device-to-host copy beside them
  std::map<std::string, double> call_seconds;
  for (const auto& entry : bench_json.value("verified", Json::array())) {
    const std::string variant_name = entry.value("variant", "");
    std::map<std::string, Tensor> timed_outputs, untimed_outputs;
    for (const auto& [name, timed_file] : entry.at("timed").items()) {
      ++verified;
      const Tensor timed = reader.tensor(timed_file.get<std::string>());
      const Tensor untimed = reader.tensor(entry.at("untimed").at(name).get<std::string>());
      timed_outputs.emplace(name, timed);
      if (!entry.contains("reference")) untimed_outputs.emplace(name, untimed);
      const auto comparison = check::compare_tensors(name, timed, untimed, nullptr, {});
      if (check::diverged(comparison, bounds)) {
        ++failed;
        Finding finding = make_finding(
            context, Layer::kBench, "guard.verify_mismatch", Severity::kFail,
            "variant " + variant_name + ": timed call in sample " +
                std::to_string(entry.value("sample", 0)) + " produced output " + name +
                " unlike the same variant run untimed on the same inputs (" +
                check::comparison_headline(comparison) + ")",
            variant_name + "." + name,
            "a timed call must do the full work: no caching or skipping between calls");
        finding.where.coords = comparison.localisation.worst_coords;
        analysis.findings.push_back(std::move(finding));
      }
      // Against the baseline (the first variant) run untimed on the same inputs: a variant
      // that is consistently wrong agrees with itself, not with the baseline.
      if (entry.contains("reference") && entry["reference"].contains(name)) {
        const Tensor reference = reader.tensor(entry["reference"][name].get<std::string>());
        untimed_outputs.emplace(name, reference);
        check::TensorComparison against;
        try {
          against = check::compare_tensors(name, timed, reference, nullptr, {});
        } catch (const Error& error) {
          against.metrics.rms_ratio = INFINITY;
          against.metrics.max_abs = INFINITY;
        }
        if (check::diverged(against, bounds)) {
          ++failed;
          Finding finding = make_finding(
              context, Layer::kBench, "guard.verify_reference", Severity::kFail,
              "variant " + variant_name + ": timed call in sample " +
                  std::to_string(entry.value("sample", 0)) + " produced output " + name +
                  " unlike the baseline " + variants[0].name + " on the same inputs (" +
                  check::comparison_headline(against) + ", bound " + metric_text +
                  " <= " + format_number(bounds[0].limit) + ")",
              variant_name + "." + name,
              "the variants must compute the same thing; if they differ in precision on "
              "purpose, state.set_verify_tolerance(metric, bound)");
          finding.where.coords = against.localisation.worst_coords;
          analysis.findings.push_back(std::move(finding));
        }
      }
    }
    seen[variant_name].emplace_back(entry.value("seed", uint64_t{0}), std::move(timed_outputs),
                                    std::move(untimed_outputs));
    // The accessor's own time, less twice a plain copy of what it returned (it builds tensors:
    // a copy or two is what an honest accessor costs) and, for a body on another device, twice a
    // copy of the same bytes from that device (measured by its timer beside the host copy: a
    // device-to-host copy has a latency of tens of microseconds that no host copy shows).
    const double to_host = entry.value("to_host_s", 0.0);
    to_host_seconds[variant_name] = std::max(to_host_seconds[variant_name], to_host);
    // One reading of the accessor ({accessor_s, accessor_cpu_s?, copy_s}): the lesser of its wall
    // time and the CPU its process used meanwhile (every thread) — work deferred into the
    // accessor costs both, a preemption only the wall time (a 2.5 us squares call's accessor read
    // 46 us of wall once in a few runs under load).
    auto add_reading = [&](const Json& timing) {
      double accessor = timing.value("accessor_s", 0.0);
      if (timing.contains("accessor_cpu_s")) {
        const double cpu = timing.value("accessor_cpu_s", accessor);
        accessor = std::min(accessor, cpu);
        accessor_cpu[variant_name].push_back(cpu);
      }
      deferred[variant_name].push_back(accessor - 2 * timing.value("copy_s", 0.0) - 2 * to_host);
    };
    add_reading(entry);
    // The accessor timed on other calls of the same batch (the runtime's accessor probes): more
    // readings of the same cost, each the first accessor call on its call.
    if (entry.contains("accessor_probes") && entry["accessor_probes"].is_array()) {
      for (const Json& probe : entry["accessor_probes"]) {
        if (probe.is_object()) add_reading(probe);
      }
    }
    call_seconds[variant_name] = entry.value("call_s", 0.0);
  }
  // Guard: two verified calls on different inputs gave bit-identical outputs while the baseline
  // on those inputs did not (for the baseline itself: while its untimed runs did not): the timed
  // calls return something that does not depend on their inputs.
  for (const auto& [variant_name, calls] : seen) {
    bool reported = false;
    for (size_t i = 0; i < calls.size() && !reported; ++i) {
      for (size_t j = i + 1; j < calls.size() && !reported; ++j) {
        if (std::get<0>(calls[i]) == std::get<0>(calls[j])) continue;
        bool timed_same = !std::get<1>(calls[i]).empty();
        bool untimed_same = true;
        for (const auto& [name, tensor] : std::get<1>(calls[i])) {
          auto other = std::get<1>(calls[j]).find(name);
          timed_same = timed_same && other != std::get<1>(calls[j]).end() &&
                       first_difference(tensor, other->second) < 0;
          auto untimed_a = std::get<2>(calls[i]).find(name);
          auto untimed_b = std::get<2>(calls[j]).find(name);
          untimed_same = untimed_same && untimed_a != std::get<2>(calls[i]).end() &&
                         untimed_b != std::get<2>(calls[j]).end() &&
                         first_difference(untimed_a->second, untimed_b->second) < 0;
        }
        if (!timed_same || untimed_same) continue;
        reported = true;
        analysis.findings.push_back(make_finding(
            context, Layer::kBench, "guard.constant_output", Severity::kFail,
            "variant " + variant_name + ": timed calls on inputs from seeds " +
                std::to_string(std::get<0>(calls[i])) + " and " +
                std::to_string(std::get<0>(calls[j])) +
                " gave bit-identical outputs, where the baseline's differ: they do not depend "
                "on their inputs",
            variant_name, "a timed call must compute its outputs from its own inputs"));
      }
    }
  }
  // Guard: the outputs accessor does the work the timed call skipped (materialising a timed
  // call's outputs costs far more than copying them, and more than the call itself).
  std::set<std::string> flagged_deferral;
  for (const auto& [variant_name, owns] : deferred) {
    if (owns.empty()) continue;
    // The least of them: a preempted accessor only looks slower, deferred work is always there.
    const double median = *std::min_element(owns.begin(), owns.end());
    const double call = call_seconds[variant_name];
    if (!(median > std::max(4.0 * call, 20e-6))) continue;
    Finding finding = make_finding(
        context, Layer::kBench, "guard.deferred_output", Severity::kFail,
        "variant " + variant_name + ": its outputs accessor takes " + format_number(median * 1e6) +
            " us beyond a copy of the outputs, " +
            format_number(call > 0 ? median / call : INFINITY) + "x the timed call (" +
            format_number(call * 1e6) +
            " us): the work is done when the outputs are read, "
            "outside the timed region",
        variant_name, "compute the outputs inside the timed call; the accessor should only copy");
    finding.evidence.metrics = {{"accessor_own_s", median}, {"call_s", call}};
    analysis.findings.push_back(std::move(finding));
    flagged_deferral.insert(variant_name);
  }
  // The same guard against the baseline: variants return the same outputs, so an accessor that
  // costs more CPU than the baseline's does part of the call's work. CPU rather than wall time
  // (preemption does not add to it), the least of the verified calls (page faults and cold
  // caches only add); allowed: a quarter of the variant's call and of the baseline's accessor,
  // and 10 us, and for a device body twice the longest device-to-host copy measured beside them
  // (waiting for a device copy spins a CPU for a latency that varies from copy to copy). What a
  // variant can still hide there is under a quarter of its call's work (plus that latency).
  const auto baseline_cpu = accessor_cpu.find(variants[0].name);
  if (baseline_cpu != accessor_cpu.end() && !baseline_cpu->second.empty()) {
    const double base = *std::min_element(baseline_cpu->second.begin(), baseline_cpu->second.end());
    for (const auto& [variant_name, cpus] : accessor_cpu) {
      if (variant_name == variants[0].name || cpus.empty() ||
          flagged_deferral.count(variant_name)) {
        continue;
      }
      const double own = *std::min_element(cpus.begin(), cpus.end());
      const double call = call_seconds[variant_name];
      const double latency =
          2 * std::max(to_host_seconds[variant_name], to_host_seconds[variants[0].name]);
      const double allowed = 0.25 * call + 0.25 * base + 10e-6 + latency;
      if (!(own - base > allowed)) continue;
      Finding finding = make_finding(
          context, Layer::kBench, "guard.deferred_output", Severity::kFail,
          "variant " + variant_name + ": its outputs accessor uses " + format_number(own * 1e6) +
              " us of CPU against the baseline " + variants[0].name + "'s " +
              format_number(base * 1e6) + " us for the same outputs; the " +
              format_number((own - base) * 1e6) + " us more exceed the " +
              format_number(allowed * 1e6) + " us allowed (a quarter of its timed call of " +
              format_number(call * 1e6) + " us, a quarter of the baseline's accessor, 10 us" +
              (latency > 0 ? ", twice the device-to-host copy" : "") +
              "): part of the work is done when "
              "the outputs are read, outside the timed region",
          variant_name, "compute the outputs inside the timed call; the accessor should only copy");
      finding.evidence.metrics = {{"accessor_cpu_s", own},
                                  {"baseline_accessor_cpu_s", base},
                                  {"call_s", call},
                                  {"allowed_s", allowed}};
      analysis.findings.push_back(std::move(finding));
    }
  }
  // Guard: the last warm-up call of each variant, judged like a timed one. The warm-up is not
  // timed, so work done there costs nothing measured: a variant that fills a cache there, or
  // computes later calls' outputs, must at least be right on that call.
  for (const auto& entry : bench_json.value("warmup_verified", Json::array())) {
    const std::string variant_name = entry.value("variant", "");
    for (const auto& [name, timed_file] : entry.at("timed").items()) {
      const Tensor timed = reader.tensor(timed_file.get<std::string>());
      std::vector<std::pair<std::string, std::string>> against = {
          {"the same variant run untimed", entry.at("untimed").value(name, "")}};
      if (entry.contains("reference")) {
        against.push_back({"the baseline " + variants[0].name, entry["reference"].value(name, "")});
      }
      for (const auto& [what, other_file] : against) {
        if (other_file.empty()) continue;
        check::TensorComparison comparison;
        try {
          comparison = check::compare_tensors(name, timed, reader.tensor(other_file), nullptr, {});
        } catch (const Error&) {
          comparison.metrics.rms_ratio = INFINITY;
          comparison.metrics.max_abs = INFINITY;
        }
        if (!check::diverged(comparison, bounds)) continue;
        Finding finding = make_finding(
            context, Layer::kBench, "guard.warmup_mismatch", Severity::kFail,
            "variant " + variant_name + ": its last warm-up call produced output " + name +
                " unlike " + what + " on the same inputs (" +
                check::comparison_headline(comparison) + ")",
            variant_name + "." + name, "a warm-up call must do the full work, like a timed one");
        finding.where.coords = comparison.localisation.worst_coords;
        analysis.findings.push_back(std::move(finding));
      }
    }
  }
  // Guard: a warm-up call far costlier than the timed calls did work nothing timed.
  for (size_t index = 0; index < variants.size(); ++index) {
    const auto& entry = samples_json.at("variants")[index];
    const auto warmup = entry.value("warmup_call_s", std::vector<double>{});
    if (warmup.empty() || variants[index].samples.empty()) continue;
    std::vector<double> sorted = variants[index].samples;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    const double costliest = *std::max_element(warmup.begin(), warmup.end());
    if (!(costliest > 0.02 && costliest > 100 * median)) continue;
    Finding finding = make_finding(
        context, Layer::kBench, "guard.costly_warmup", Severity::kWarn,
        "variant " + variants[index].name + ": a warm-up call took " +
            format_number(costliest * 1e3) + " ms, " + format_number(costliest / median) +
            "x its median timed call: work done in the warm-up is not timed",
        variants[index].name,
        "do one-time set-up before exec (in the body), where it is not a call of the variant");
    finding.evidence.metrics = {{"warmup_call_s", costliest}, {"median_call_s", median}};
    analysis.findings.push_back(std::move(finding));
  }
  analysis.data["verified_outputs"] = verified;
  // Guard: a bench whose body declared an outputs accessor and had no call verified judged
  // nothing it claimed to (the runtime verifies at least two calls per variant when the body
  // declared one: round 6's unverify_baseline cleared that declaration in another's block).
  if (bench_json.value("declared_outputs", false) && verified == 0) {
    analysis.findings.push_back(make_finding(
        context, Layer::kBench, "guard.unverified", Severity::kFail,
        "the body declared an outputs accessor, but no timed call's outputs were verified: the "
        "variants' speeds are claims about work nobody checked",
        "", "rerun; a variant must not touch the runtime's record of what the body declared"));
  }
  analysis.data["verify_failures"] = failed;
}

// --- scenarios -------------------------------------------------------------------------------

void analyze_scenario(const ObservationReader& reader, const Context& context, Analysis& analysis) {
  const Json& scenario = reader.at(reader.json(), "scenario", "");
  Finding finding = make_finding(context, Layer::kScenario, "metrics", Severity::kInfo, "", "", "");
  std::string claim;
  const Json metrics = scenario.value("metrics", Json::object());
  for (const auto& [name, value] : metrics.items()) {
    const double number = number_from_json(value, "scenario.metrics." + name);
    finding.evidence.metrics.emplace_back(name, number);
    claim += (claim.empty() ? "" : ", ") + name + " " + format_number(number);
    analysis.lines.push_back("  " + name + ": " + format_number(number));
  }
  finding.claim = claim.empty() ? "no metrics recorded" : claim;
  for (const auto& trace : scenario.value("traces", Json::array())) {
    finding.evidence.files.push_back(
        (std::filesystem::path(context.observation_file).parent_path() / trace.get<std::string>())
            .string());
    analysis.lines.push_back("  trace: " + (reader.dir() / trace.get<std::string>()).string());
  }
  analysis.data["metrics"] = scenario.value("metrics", Json::object());
  analysis.data["traces"] = scenario.value("traces", Json::array());
  analysis.findings.push_back(std::move(finding));
}

}  // namespace

Json rules_to_json(const check::RuleSet& rules) {
  Json list = Json::array();
  for (const check::Rule& rule : rules.rules) {
    list.push_back({{"name", rule.name},
                    {"match", rule.match},
                    {"when", rule.when_text},
                    {"line", rule.line}});
  }
  return {{"origin", rules.origin}, {"rules", std::move(list)}};
}

check::RuleSet rules_from_json(const Json& json) {
  check::RuleSet rules;
  try {
    rules.origin = json.at("origin").get<std::string>();
    for (const Json& rule : json.at("rules")) {
      const int line = rule.at("line").get<int>();
      rules.rules.push_back(check::make_rule(rule.at("name").get<std::string>(),
                                             rule.at("match").get<std::string>(),
                                             rule.at("when").get<std::vector<std::string>>(), line,
                                             rules.origin + ":" + std::to_string(line)));
    }
  } catch (const Json::exception& error) {
    throw Error(ErrorCode::kInput, std::string("threshold rules: expected {origin, rules: [{name, "
                                               "match, when, line}]}: ") +
                                       error.what());
  }
  return rules;
}

HelperThreads judge_helper_threads(const Json& account) {
  HelperThreads helpers;
  helpers.run_cpu_s = account.value("run_cpu_s", 0.0);
  double busiest_cpu = 0;
  for (const auto& thread : account.value("threads", Json::array())) {
    if (thread.value("timed", false)) continue;
    const double cpu = thread.value("cpu_s", 0.0);
    helpers.cpu_s += cpu;
    if (cpu > busiest_cpu) {
      busiest_cpu = cpu;
      helpers.busiest = thread.value("name", std::string()) + " (tid " +
                        std::to_string(thread.value("tid", 0)) + ")";
    }
  }
  const Json per_batch = account.value("helper_cpu_per_sample_s", Json::array());
  if (!per_batch.is_array() || per_batch.empty()) return helpers;
  for (const auto& value : per_batch) {
    if (!value.is_number()) return helpers;
  }
  // The batches in consecutive stretches: a thread that runs through a batch is charged only up
  // to its last scheduler tick (a few ms), so a worker busy all along shows CPU in some batches
  // shorter than a tick and none in the next; a stretch of several batches spans the ticks.
  helpers.batches = per_batch.size();
  helpers.stretches = std::min(helpers.batches, HelperThreads::kStretches);
  const double share = helpers.run_cpu_s / static_cast<double>(helpers.batches);
  for (size_t stretch = 0; stretch < helpers.stretches; ++stretch) {
    const size_t begin = stretch * helpers.batches / helpers.stretches;
    const size_t end = (stretch + 1) * helpers.batches / helpers.stretches;
    double cpu = 0;
    for (size_t batch = begin; batch < end; ++batch) cpu += per_batch[batch].get<double>();
    if (cpu > 0.05 * share * static_cast<double>(end - begin) + 20e-6) ++helpers.busy_stretches;
  }
  return helpers;
}

RunOutcome analyze_observation(const std::filesystem::path& dir, const AnalyzeOptions& options) {
  ObservationReader reader(dir);
  const Json& observation = reader.json();
  Context context;
  try {
    context.subject = observation.value("subject", "");
    context.probe = reader.at(observation, "probe", "").get<std::string>();
    context.params = params_of(observation);
  } catch (const nlohmann::json::exception& error) {
    throw Error(ErrorCode::kInput,
                (dir / "observation.json").string() + ": " + json_error_text(error));
  }
  context.observation_file = (dir / "observation.json").string();
  context.reproduce = options.reproduce;
  if (context.reproduce.empty()) {
    std::vector<std::string> argv;
    for (const auto& arg : observation.value("argv", Json::array())) {
      argv.push_back(arg.get<std::string>());
    }
    for (const auto& arg : argv) context.reproduce += (context.reproduce.empty() ? "" : " ") + arg;
  }
  const std::string kind = observation.value("kind", "");

  Analysis analysis;
  try {
    if (kind == "check") {
      analyze_check(reader, context, options, analysis);
    } else if (kind == "bench") {
      analyze_bench(reader, context, options, analysis);
    } else if (kind == "scenario") {
      analyze_scenario(reader, context, analysis);
    } else {
      throw Error(ErrorCode::kInput, context.observation_file + ": field 'kind' is '" + kind +
                                         "'; expected check, bench or scenario");
    }
  } catch (const nlohmann::json::exception& error) {
    throw Error(ErrorCode::kInput, context.observation_file + ": " + json_error_text(error));
  }

  // Guard: a thread already ran in the runtime process when the run began, started before main
  // by a static initialiser: code the runtime cannot keep away from its files.
  const Json runtime = observation.value("runtime", Json::object());
  const int64_t threads_at_start = runtime.value("threads_at_start", int64_t{1});
  // Info only: libraries start threads before main too (kda's has one), so it is a fact to
  // weigh, not a verdict; the seal catches what such a thread changes in the files.
  if (threads_at_start > 1 && (kind == "check" || kind == "bench")) {
    Finding finding = make_finding(
        context, kind == "check" ? Layer::kCheck : Layer::kBench, "guard.runtime_thread",
        Severity::kInfo,
        "the subject's runtime process already had " + std::to_string(threads_at_start) +
            " threads when the run began: something started a thread before main (a library or a "
            "static initialiser); such code runs next to the files loupe decides from",
        "", "start no thread before main; start it inside a path or a variant");
    finding.evidence.metrics = {{"threads_at_start", static_cast<double>(threads_at_start)}};
    analysis.findings.push_back(std::move(finding));
  }

  // Guard: what a path left where the runtime writes its files (a symbolic link, a hard link, a
  // file): the runtime removed it and wrote its own (ObservationFiles::prepare); leaving it was
  // an attempt on the evidence.
  const Json planted = observation.value("planted", Json::array());
  if (planted.is_array() && !planted.empty() && (kind == "check" || kind == "bench")) {
    std::string names;
    for (const auto& entry : planted) {
      if (!entry.is_string()) continue;
      names += (names.empty() ? "" : ", ") + entry.get<std::string>();
    }
    Finding finding = make_finding(
        context, kind == "check" ? Layer::kCheck : Layer::kBench, "guard.evidence_sealed",
        Severity::kFail,
        "the run directory held entries where the runtime writes its files, left there by a "
        "path or a variant before the runtime wrote (" +
            names + "); they were removed and the runtime's files written in their place",
        "", "a path must not create files or links in the run directory");
    finding.evidence.metrics = {{"planted", static_cast<double>(planted.size())}};
    analysis.findings.push_back(std::move(finding));
  }

  RunOutcome outcome;
  outcome.observation_dir = dir;
  bool failed = false;
  for (const auto& finding : analysis.findings)
    failed = failed || finding.severity == Severity::kFail;
  if (failed) {
    outcome.verdict = Verdict::kFail;
  } else if (analysis.cannot_discriminate) {
    outcome.verdict = Verdict::kInconclusive;
  } else if (kind == "bench" && analysis.data.contains("skipped")) {
    outcome.verdict = Verdict::kNone;
  } else {
    outcome.verdict = Verdict::kPass;
  }
  outcome.exit_code =
      outcome.verdict == Verdict::kFail || outcome.verdict == Verdict::kInconclusive ? 1 : 0;
  outcome.findings = analysis.findings;
  outcome.bench_comparisons = analysis.bench_comparisons;

  outcome.data["probe"] = context.probe;
  outcome.data["kind"] = kind;
  outcome.data["params"] = observation.value("params", Json::object());
  outcome.data["seed"] = observation.value("seed", Json(nullptr));
  outcome.data["hidden"] = observation.value("hidden", Json(nullptr));
  outcome.data["observation"] = context.observation_file;
  outcome.data["environment"] = observation.value("environment", Json::object());
  for (auto& [key, value] : analysis.data.items()) outcome.data[key] = value;

  // The human report: verdict, numbers, then the findings that are not plain matches.
  std::string summary = context.probe + " [" + kind + "] " + params_to_string(context.params) +
                        " seed " + observation.value("seed", Json(0)).dump() + ": " +
                        std::string(verdict_name(outcome.verdict)) + "\n";
  for (const auto& line : analysis.lines) summary += line + "\n";
  for (const auto& finding : analysis.findings) {
    if (finding.severity == Severity::kInfo && kind == "check") continue;
    summary += "  " + std::string(severity_name(finding.severity)) + " " + finding.id + ": " +
               finding.claim + "\n";
  }
  summary += "  observation: " + context.observation_file + "\n";
  summary += "  reproduce: " + context.reproduce + "\n";
  outcome.summary = std::move(summary);

  // The observation keeps what loupe concluded from it.
  Json findings = Json::array();
  for (const auto& finding : analysis.findings) findings.push_back(finding_to_json(finding));
  reader.mutable_json()["findings"] = std::move(findings);
  reader.mutable_json()["verdict"] = std::string(verdict_name(outcome.verdict));
  reader.write_back();
  return outcome;
}

}  // namespace loupe::probe
