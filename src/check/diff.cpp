#include "check/diff.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "check/findings.hpp"
#include "core/json.hpp"
#include "loupe/error.hpp"

namespace loupe::check {
namespace {

namespace fs = std::filesystem;

constexpr size_t kListedInSummary = 5;

enum class SourceKind { kNpy, kSafetensors, kDirectory };

// Where one named tensor of a source lives.
struct Entry {
  fs::path file;
  std::optional<std::string> tensor;  // the name inside a .safetensors file
};

struct Source {
  std::string side;  // "A", "B", "the oracle"
  fs::path path;
  SourceKind kind = SourceKind::kNpy;
  std::vector<std::string> names;  // in the source's own order
  std::map<std::string, Entry> entries;
  std::vector<std::string> manifest;  // names from manifest.txt, in order
  bool has_manifest = false;
  std::vector<std::string> not_tensor;
  // .safetensors files read so far (reading parses the header and maps the data once).
  std::map<fs::path, std::vector<NamedTensor>> safetensors_cache;
};

std::string lower_extension(const fs::path& path) {
  std::string extension = path.extension().string();
  for (char& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return extension;
}

[[noreturn]] void rethrow_for_side(const Error& error, const std::string& side) {
  throw Error(error.code(), "reading " + side + ": " + error.message(), error.hint());
}

const std::vector<NamedTensor>& safetensors_of(Source& source, const fs::path& file) {
  auto found = source.safetensors_cache.find(file);
  if (found != source.safetensors_cache.end()) return found->second;
  try {
    return source.safetensors_cache.emplace(file, read_safetensors(file)).first->second;
  } catch (const Error& error) {
    rethrow_for_side(error, source.side);
  }
}

Tensor load(Source& source, const std::string& name) {
  const Entry& entry = source.entries.at(name);
  if (!entry.tensor) {
    try {
      return read_npy(entry.file);
    } catch (const Error& error) {
      rethrow_for_side(error, source.side);
    }
  }
  for (const NamedTensor& named : safetensors_of(source, entry.file)) {
    if (named.name == *entry.tensor) return named.tensor;
  }
  throw Error(ErrorCode::kInternal,
              "tensor '" + *entry.tensor + "' vanished from " + entry.file.string());
}

void add_safetensors_entries(Source& source, const fs::path& file, const std::string& prefix) {
  for (const NamedTensor& named : safetensors_of(source, file)) {
    const std::string name = prefix + named.name;
    source.names.push_back(name);
    source.entries[name] = Entry{file, named.name};
  }
}

Source open_source(const fs::path& path, const std::string& side,
                   const std::optional<std::string>& npy_name) {
  Source source;
  source.side = side;
  source.path = path;
  std::error_code status_error;
  const fs::file_status status = fs::status(path, status_error);
  if (status_error || !fs::exists(status)) {
    throw Error(ErrorCode::kInput, side + " (" + path.string() + "): no such file or directory",
                "pass two .npy files, two .safetensors files or two directories");
  }
  if (fs::is_directory(status)) {
    source.kind = SourceKind::kDirectory;
    std::vector<fs::path> files;
    for (const auto& item : fs::directory_iterator(path)) files.push_back(item.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& file : files) {
      const std::string file_name = file.filename().string();
      if (file_name == "manifest.txt") continue;
      const std::string extension = lower_extension(file);
      if (fs::is_regular_file(file) && extension == ".npy") {
        source.names.push_back(file_name);
        source.entries[file_name] = Entry{file, std::nullopt};
      } else if (fs::is_regular_file(file) && extension == ".safetensors") {
        add_safetensors_entries(source, file, file_name + ":");
      } else {
        source.not_tensor.push_back(file_name);
      }
    }
    const fs::path manifest_path = path / "manifest.txt";
    if (fs::is_regular_file(manifest_path)) {
      source.has_manifest = true;
      std::ifstream manifest(manifest_path);
      std::string line;
      while (std::getline(manifest, line)) {
        while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) {
          line.pop_back();
        }
        size_t start = 0;
        while (start < line.size() && std::isspace(static_cast<unsigned char>(line[start]))) {
          ++start;
        }
        line = line.substr(start);
        if (line.empty() || line[0] == '#') continue;
        source.manifest.push_back(line);
      }
    }
    return source;
  }
  const std::string extension = lower_extension(path);
  if (extension == ".npy") {
    source.kind = SourceKind::kNpy;
    const std::string name = npy_name.value_or(path.filename().string());
    source.names.push_back(name);
    source.entries[name] = Entry{path, std::nullopt};
    return source;
  }
  if (extension == ".safetensors") {
    source.kind = SourceKind::kSafetensors;
    add_safetensors_entries(source, path, "");
    return source;
  }
  throw Error(ErrorCode::kInput,
              side + " (" + path.string() + "): found a file ending in '" + extension +
                  "'; expected a .npy file, a .safetensors file or a directory",
              "loupe diff reads .npy and .safetensors tensors");
}

std::string file_of(const Source& source, const std::string& name) {
  const Entry& entry = source.entries.at(name);
  return entry.tensor ? entry.file.string() + ":" + *entry.tensor : entry.file.string();
}

bool every_name_has_digit(const std::vector<std::string>& names) {
  for (const auto& name : names) {
    if (std::none_of(name.begin(), name.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      return false;
    }
  }
  return !names.empty();
}

std::string joined_names(const std::vector<std::string>& names, size_t limit) {
  std::string out;
  for (size_t index = 0; index < names.size() && index < limit; ++index) {
    out += (index > 0 ? ", " : "") + names[index];
  }
  if (names.size() > limit) out += ", +" + std::to_string(names.size() - limit) + " more";
  return out;
}

Json metrics_json(const Metrics& metrics) {
  Json out = Json::object();
  for (Metric metric : all_metrics()) {
    if (metric == Metric::kOracleRatio) continue;
    out[std::string(metric_name(metric))] = number_to_json(metric_value(metrics, metric));
  }
  return out;
}

Json comparison_json(const TensorComparison& comparison, bool past_tolerance,
                     const std::vector<BoundResult>& bounds) {
  Json out = {{"name", comparison.name},
              {"shape", comparison.shape},
              {"dtype_a", dtype_name(comparison.dtype_a)},
              {"dtype_b", dtype_name(comparison.dtype_b)},
              {"axes", comparison.axes},
              {"diverged", past_tolerance},
              {"metrics", metrics_json(comparison.metrics)}};
  out["metrics"]["rms_diff"] = number_to_json(comparison.metrics.rms_diff);
  out["metrics"]["rms_b"] = number_to_json(comparison.metrics.rms_b);
  if (comparison.oracle) {
    out["metrics"]["oracle_ratio"] = number_to_json(comparison.oracle->ratio);
  }
  out["tolerance"] = {{"atol", comparison.metrics.tolerance.atol},
                      {"rtol", comparison.metrics.tolerance.rtol}};
  out["ulp_dtype"] = dtype_name(comparison.metrics.ulp_dtype);
  Json worst = Json::object();
  for (const auto& [axis, index] : comparison.localisation.worst_coords) worst[axis] = index;
  out["worst_coords"] = worst;
  out["worst_values"] = {{"a", number_to_json(comparison.metrics.worst_a)},
                         {"b", number_to_json(comparison.metrics.worst_b)}};
  Json bound_list = Json::array();
  for (const BoundResult& result : bounds) {
    bound_list.push_back({{"metric", metric_name(result.metric)},
                          {"value", number_to_json(result.value)},
                          {"limit", number_to_json(result.limit)},
                          {"pass", result.pass}});
  }
  out["bounds"] = bound_list;
  if (comparison.oracle) {
    out["oracle"] = {{"a_vs_oracle", metrics_json(comparison.oracle->a_vs_oracle)},
                     {"b_vs_oracle", metrics_json(comparison.oracle->b_vs_oracle)},
                     {"ratio", number_to_json(comparison.oracle->ratio)}};
  }
  if (const auto& profile = comparison.localisation.profile) {
    const ProfileClassification& shape = profile->classification;
    Json buckets = Json::array();
    for (const ProfileBucket& bucket : profile->buckets) {
      buckets.push_back(
          {{"begin", bucket.begin}, {"end", bucket.end}, {"value", number_to_json(bucket.value)}});
    }
    out["profile"] = {{"axis", profile->axis},
                      {"length", profile->length},
                      {"shape", profile_shape_name(shape.shape)},
                      {"spearman", number_to_json(shape.spearman)},
                      {"end_to_start", number_to_json(shape.end_to_start)},
                      {"slope_per_1000", number_to_json(shape.slope_per_1000)},
                      {"region", {shape.region_begin, shape.region_end}},
                      {"region_share", number_to_json(shape.region_share)},
                      {"spikes", shape.spikes},
                      {"buckets", std::move(buckets)}};
    Json slices = Json::array();
    for (const SliceShare& slice : comparison.localisation.top_slices) {
      slices.push_back({{"axis", slice.axis},
                        {"index", slice.index},
                        {"extent", slice.extent},
                        {"share", number_to_json(slice.share)}});
    }
    out["top_slices"] = std::move(slices);
  }
  return out;
}

std::string reproduce_command(const DiffRequest& request, const std::string& name) {
  if (request.reproduce) return *request.reproduce;
  std::string out = "loupe diff " + request.a.string() + " " + request.b.string();
  if (request.oracle) out += " --oracle " + request.oracle->string();
  if (!name.empty()) out += " --name " + name;
  if (!request.axes.empty()) {
    out += " --axes ";
    for (size_t index = 0; index < request.axes.size(); ++index) {
      out += (index > 0 ? "," : "") + request.axes[index];
    }
  }
  if (request.along) out += " --along " + *request.along;
  for (const Bound& bound : request.bounds) {
    out += " --tol " + std::string(metric_name(bound.metric)) + "=" + format_number(bound.limit);
  }
  return out;
}

// Compares one pair and appends it to `result`; `where` names both sides in an error.
void compare_pair(const std::string& name, const Tensor& a, const Tensor& b, const Tensor* oracle,
                  const DiffRequest& request, const std::string& where, DiffResult& result,
                  bool& along_found) {
  CompareOptions options;
  options.axes = request.axes;
  options.tolerance = request.tolerance;
  const auto axes = resolve_axis_names(
      a.rank(), static_cast<int64_t>(request.axes.size()) == a.rank() ? request.axes : a.axes);
  if (request.along && std::find(axes.begin(), axes.end(), *request.along) != axes.end()) {
    options.along = request.along;
    along_found = true;
  }
  try {
    result.comparisons.push_back(compare_tensors(name, a, b, oracle, options));
  } catch (const Error& error) {
    throw Error(error.code(), "comparing '" + name + "' (" + where + "): " + error.message(),
                error.hint());
  }
}

// Bounds, divergence, the first divergence and the worst pairs, once every pair is compared.
void finish_diff(const DiffRequest& request, bool along_found, DiffResult& result) {
  if (request.along && !along_found && !result.comparisons.empty()) {
    throw Error(ErrorCode::kUsage,
                "--along " + *request.along + ": no compared tensor has an axis of that name",
                "name the axes with --axes (e.g. --axes B,T,H,V), then profile along one of them");
  }
  for (size_t index = 0; index < result.comparisons.size(); ++index) {
    const TensorComparison& comparison = result.comparisons[index];
    result.bound_results.push_back(evaluate_bounds(comparison, request.bounds));
    const bool past = diverged(comparison, request.bounds);
    result.diverged.push_back(past);
    for (const BoundResult& bound : result.bound_results.back()) {
      if (!bound.pass) result.any_bound_failed = true;
    }
    if (past) {
      result.worst.push_back(index);
      if (result.ordered && !result.first_divergence) result.first_divergence = index;
    }
  }
  auto severity = [&](size_t index) {
    const double value = result.comparisons[index].metrics.rms_ratio;
    return std::isnan(value) ? std::numeric_limits<double>::infinity() : value;
  };
  std::stable_sort(result.worst.begin(), result.worst.end(),
                   [&](size_t left, size_t right) { return severity(left) > severity(right); });
}

}  // namespace

bool natural_less(const std::string& left, const std::string& right) {
  size_t i = 0, j = 0;
  while (i < left.size() && j < right.size()) {
    const bool digit_left = std::isdigit(static_cast<unsigned char>(left[i]));
    const bool digit_right = std::isdigit(static_cast<unsigned char>(right[j]));
    if (digit_left && digit_right) {
      size_t end_left = i, end_right = j;
      while (end_left < left.size() && std::isdigit(static_cast<unsigned char>(left[end_left]))) {
        ++end_left;
      }
      while (end_right < right.size() &&
             std::isdigit(static_cast<unsigned char>(right[end_right]))) {
        ++end_right;
      }
      // Compare by value: strip leading zeros, then longer is larger, then digit by digit.
      size_t start_left = i, start_right = j;
      while (start_left + 1 < end_left && left[start_left] == '0') ++start_left;
      while (start_right + 1 < end_right && right[start_right] == '0') ++start_right;
      const size_t length_left = end_left - start_left, length_right = end_right - start_right;
      if (length_left != length_right) return length_left < length_right;
      const int order = left.compare(start_left, length_left, right, start_right, length_right);
      if (order != 0) return order < 0;
      i = end_left;
      j = end_right;
      continue;
    }
    if (left[i] != right[j]) return left[i] < right[j];
    ++i;
    ++j;
  }
  if (left.size() - i != right.size() - j) return left.size() - i < right.size() - j;
  return left < right;  // equal by value ("01" vs "1"): fall back to bytes for a strict order
}

DiffResult run_diff(const DiffRequest& request) {
  const bool a_is_npy = !fs::is_directory(request.a) && lower_extension(request.a) == ".npy";
  const bool b_is_npy = !fs::is_directory(request.b) && lower_extension(request.b) == ".npy";
  // A single .npy against a single .npy pairs whatever the names; against a .safetensors file it
  // takes the --name it is compared with.
  const bool single_pair = a_is_npy && b_is_npy;
  Source a = open_source(request.a, "A",
                         single_pair ? std::optional<std::string>("tensor") : request.name);
  Source b = open_source(request.b, "B",
                         single_pair ? std::optional<std::string>("tensor") : request.name);
  if ((a.kind == SourceKind::kDirectory) != (b.kind == SourceKind::kDirectory)) {
    throw Error(ErrorCode::kUsage,
                "A (" + request.a.string() + ") and B (" + request.b.string() +
                    ") must both be files or both be directories",
                "pass two .npy files, two .safetensors files or two directories");
  }
  if (single_pair && request.name) {
    throw Error(ErrorCode::kUsage, "--name selects a tensor in .safetensors files or directories",
                "drop --name when comparing two .npy files");
  }

  DiffResult result;
  for (const auto& file : a.not_tensor) result.not_tensor.push_back("A/" + file);
  for (const auto& file : b.not_tensor) result.not_tensor.push_back("B/" + file);
  result.stats.add(Stat::diff_file_not_tensor, static_cast<int64_t>(result.not_tensor.size()));

  // The union of names, in order.
  std::vector<std::string> names;
  std::set<std::string> seen;
  auto add_name = [&](const std::string& name) {
    if ((a.entries.count(name) || b.entries.count(name)) && seen.insert(name).second) {
      names.push_back(name);
    }
  };
  if (single_pair) {
    result.order = "single";
    names.push_back("tensor");
  } else if (a.kind == SourceKind::kDirectory) {
    const std::vector<std::string>& manifest = a.has_manifest ? a.manifest : b.manifest;
    if (a.has_manifest || b.has_manifest) {
      result.order = "manifest.txt";
      result.ordered = true;
      for (const auto& line : manifest) {
        add_name(a.entries.count(line) || b.entries.count(line) ? line : line + ".npy");
      }
    }
    std::vector<std::string> rest;
    for (const auto& name : a.names) rest.push_back(name);
    for (const auto& name : b.names) rest.push_back(name);
    std::sort(rest.begin(), rest.end(), natural_less);
    if (!result.ordered) {
      result.ordered = every_name_has_digit(rest);
      result.order = result.ordered ? "natural" : "unordered";
    }
    for (const auto& name : rest) add_name(name);
  } else {
    result.order = a.kind == SourceKind::kSafetensors ? "safetensors" : "safetensors (B)";
    result.ordered = true;
    for (const auto& name : a.names) add_name(name);
    for (const auto& name : b.names) add_name(name);
  }

  if (request.name && !single_pair) {
    if (!seen.count(*request.name)) {
      throw Error(ErrorCode::kUsage,
                  "--name " + *request.name +
                      ": no tensor of that name in A or B; names: " + joined_names(names, 8),
                  "pass one of the names listed");
    }
    names = {*request.name};
  }

  // The oracle is read the way B is: the same names, or the one file.
  std::optional<Source> oracle;
  if (request.oracle) {
    oracle = open_source(*request.oracle, "the oracle",
                         single_pair ? std::optional<std::string>("tensor") : request.name);
  }
  bool along_found = false;
  for (const std::string& name : names) {
    const bool in_a = a.entries.count(name) > 0;
    const bool in_b = b.entries.count(name) > 0;
    if (!in_a || !in_b) {
      (in_a ? result.only_in_a : result.only_in_b).push_back(name);
      result.stats.add(in_a ? Stat::diff_tensor_only_in_a : Stat::diff_tensor_only_in_b);
      continue;
    }
    const Tensor tensor_a = load(a, name);
    const Tensor tensor_b = load(b, name);
    std::optional<Tensor> tensor_oracle;
    if (oracle) {
      if (!oracle->entries.count(name)) {
        throw Error(ErrorCode::kInput,
                    "the oracle (" + request.oracle->string() + ") has no tensor '" + name + "'",
                    "give the oracle the same layout as A and B");
      }
      tensor_oracle = load(*oracle, name);
    }
    if (single_pair && !request.axes.empty() &&
        static_cast<int64_t>(request.axes.size()) != tensor_a.rank()) {
      throw Error(ErrorCode::kUsage,
                  "--axes names " + std::to_string(request.axes.size()) + " axes but A (" +
                      request.a.string() + ") has shape " + shape_to_string(tensor_a.shape()),
                  "name one axis per dimension, e.g. --axes T,H,V for a 3-d tensor");
    }
    const std::string shown_name = single_pair ? request.a.filename().string() : name;
    compare_pair(shown_name, tensor_a, tensor_b, tensor_oracle ? &*tensor_oracle : nullptr, request,
                 "A: " + file_of(a, name) + ", B: " + file_of(b, name), result, along_found);
  }
  finish_diff(request, along_found, result);
  return result;
}

DiffResult run_diff_pairs(const std::vector<TensorPair>& pairs, const DiffRequest& request) {
  DiffResult result;
  result.order = pairs.size() == 1 ? "single" : "given";
  result.ordered = pairs.size() > 1;
  bool along_found = false;
  for (const TensorPair& pair : pairs) {
    if (!request.axes.empty() && static_cast<int64_t>(request.axes.size()) != pair.a.rank() &&
        pairs.size() == 1) {
      throw Error(ErrorCode::kUsage,
                  "axes names " + std::to_string(request.axes.size()) + " axes but " +
                      request.a.string() + " has shape " + shape_to_string(pair.a.shape()),
                  "name one axis per dimension, e.g. axes=(\"T\", \"H\", \"V\") for 3-d");
    }
    compare_pair(pair.name, pair.a, pair.b, pair.oracle ? &*pair.oracle : nullptr, request,
                 request.a.string() + " vs " + request.b.string(), result, along_found);
  }
  finish_diff(request, along_found, result);
  return result;
}

int diff_exit_code(const DiffResult& result, const DiffRequest& request) {
  return !request.bounds.empty() && result.any_bound_failed ? 1 : 0;
}

std::string render_diff_summary(const DiffResult& result, const DiffRequest& request) {
  std::string out = "loupe diff  A=" + request.a.string() + "  B=" + request.b.string();
  if (request.oracle) out += "  oracle=" + request.oracle->string();
  out += "\n";
  std::string rule = "assert_close defaults (atol+rtol*|B| per dtype)";
  if (!request.bounds.empty()) {
    rule = "bounds ";
    for (size_t index = 0; index < request.bounds.size(); ++index) {
      rule += (index > 0 ? ", " : "") + std::string(metric_name(request.bounds[index].metric)) +
              "<=" + format_number(request.bounds[index].limit);
    }
  }
  out += std::to_string(result.comparisons.size()) + " compared, " +
         std::to_string(result.worst.size()) + " past tolerance (" + rule +
         "); order: " + result.order + "\n";

  auto describe = [&](const std::string& label, size_t index) {
    const TensorComparison& comparison = result.comparisons[index];
    std::string text = label + comparison.name;
    if (result.ordered && result.comparisons.size() > 1) {
      text += " (#" + std::to_string(index + 1) + " of " +
              std::to_string(result.comparisons.size()) + ")";
    }
    text +=
        " " + shape_to_string(comparison.shape) + "\n    " + comparison_headline(comparison) + "\n";
    for (const BoundResult& bound : result.bound_results[index]) {
      if (!bound.pass) {
        text += "    bound failed: " + std::string(metric_name(bound.metric)) + " " +
                format_number(bound.value) + " > " + format_number(bound.limit) + "\n";
      }
    }
    if (const auto& profile = comparison.localisation.profile) {
      text += "    error " + profile_sentence(*profile) + "\n";
    }
    const std::string slice = slice_sentence(comparison.localisation);
    if (!slice.empty()) text += "    " + slice + "\n";
    if (comparison.oracle) {
      text += "    A's error is " + format_number(comparison.oracle->ratio) +
              "× B's own error against the oracle (rms_ratio " +
              format_number(comparison.oracle->a_vs_oracle.rms_ratio) + " vs " +
              format_number(comparison.oracle->b_vs_oracle.rms_ratio) + ")\n";
    }
    return text;
  };

  if (result.first_divergence) {
    out += describe("first divergence: ", *result.first_divergence);
  } else if (result.ordered && !result.worst.empty()) {
    out += "first divergence: none in order\n";
  }
  if (!result.worst.empty()) {
    if (!result.first_divergence || result.worst.front() != *result.first_divergence) {
      out += describe("worst: ", result.worst.front());
    } else if (result.comparisons.size() > 1) {
      out += "worst: the first divergence is also the worst\n";
    }
  }
  if (result.worst.empty() && !result.comparisons.empty()) {
    size_t largest = 0;
    for (size_t index = 1; index < result.comparisons.size(); ++index) {
      if (result.comparisons[index].metrics.rms_ratio >
          result.comparisons[largest].metrics.rms_ratio) {
        largest = index;
      }
    }
    out += describe("all within tolerance; largest rms_ratio: ", largest);
  }
  if (result.worst.size() > 1) {
    out += "past tolerance, worst first:\n";
    for (size_t rank = 0; rank < result.worst.size() && rank < kListedInSummary; ++rank) {
      const TensorComparison& comparison = result.comparisons[result.worst[rank]];
      out += "  " + comparison.name + "  rms_ratio " + format_number(comparison.metrics.rms_ratio) +
             "  max_abs " + format_number(comparison.metrics.max_abs) + "  mismatch " +
             std::to_string(comparison.metrics.mismatch_count) + "/" +
             std::to_string(comparison.metrics.numel) + "\n";
    }
    if (result.worst.size() > kListedInSummary) {
      out += "  +" + std::to_string(result.worst.size() - kListedInSummary) +
             " more; use --json or --name\n";
    }
  }
  if (!result.only_in_a.empty()) {
    out += "only in A (" + std::to_string(result.only_in_a.size()) +
           "): " + joined_names(result.only_in_a, kListedInSummary) + "\n";
  }
  if (!result.only_in_b.empty()) {
    out += "only in B (" + std::to_string(result.only_in_b.size()) +
           "): " + joined_names(result.only_in_b, kListedInSummary) + "\n";
  }
  if (!result.not_tensor.empty()) {
    out += "not tensors (" + std::to_string(result.not_tensor.size()) +
           "): " + joined_names(result.not_tensor, kListedInSummary) + "\n";
  }
  if (request.bounds.empty()) {
    out += "verdict: none (no --tol given; report only)\n";
  } else {
    out += std::string("verdict: ") + (result.any_bound_failed ? "fail" : "pass") + "\n";
  }
  return out;
}

std::string render_diff_json(const DiffResult& result, const DiffRequest& request) {
  Envelope envelope;
  envelope.kind = "diff";
  envelope.verdict = request.bounds.empty()
                         ? Verdict::kNone
                         : (result.any_bound_failed ? Verdict::kFail : Verdict::kPass);
  envelope.stats = result.stats;

  // Findings: the first divergence, then the worst few; the rest are in data.tensors.
  std::vector<size_t> reported;
  if (result.first_divergence) reported.push_back(*result.first_divergence);
  for (size_t index : result.worst) {
    if (reported.size() >= kListedInSummary) break;
    if (std::find(reported.begin(), reported.end(), index) == reported.end()) {
      reported.push_back(index);
    }
  }
  if (result.worst.empty() && result.comparisons.size() == 1) reported.push_back(0);
  for (size_t index : reported) {
    const TensorComparison& comparison = result.comparisons[index];
    FindingContext context;
    context.where.subject = "diff";
    context.reproduce =
        reproduce_command(request, result.comparisons.size() > 1 ? comparison.name : std::string());
    context.files = {request.a.string(), request.b.string()};
    if (request.oracle) context.files.push_back(request.oracle->string());
    for (Finding& finding : comparison_findings(comparison, request.bounds, context)) {
      if (result.first_divergence == index && finding.id == "check.diff.mismatch" &&
          result.comparisons.size() > 1) {
        finding.claim = "first divergence (#" + std::to_string(index + 1) + " of " +
                        std::to_string(result.comparisons.size()) + " in " + result.order +
                        " order): " + finding.claim;
      }
      envelope.findings.push_back(std::move(finding));
    }
  }
  const size_t omitted =
      result.worst.size() - std::count_if(reported.begin(), reported.end(),
                                          [&](size_t index) { return result.diverged[index]; });
  envelope.truncated = omitted > 0;
  for (const auto* list : {&result.only_in_a, &result.only_in_b}) {
    if (list->empty()) continue;
    const bool in_a = list == &result.only_in_a;
    Finding finding;
    finding.id = in_a ? "check.diff.only_in_a" : "check.diff.only_in_b";
    finding.layer = Layer::kCheck;
    finding.severity = Severity::kWarn;
    finding.where.subject = "diff";
    finding.claim = std::to_string(list->size()) + " tensors present in " + (in_a ? "A" : "B") +
                    " only, not compared: " + joined_names(*list, kListedInSummary);
    finding.evidence.metrics.emplace_back("count", static_cast<double>(list->size()));
    finding.evidence.files = {(in_a ? request.a : request.b).string()};
    finding.next = "check that both sides dumped the same tensors";
    finding.reproduce = reproduce_command(request, "");
    envelope.findings.push_back(std::move(finding));
  }

  Json data = Json::object();
  data["a"] = request.a.string();
  data["b"] = request.b.string();
  data["oracle"] = request.oracle ? Json(request.oracle->string()) : Json(nullptr);
  data["order"] = result.order;
  data["ordered"] = result.ordered;
  Json bounds = Json::array();
  for (const Bound& bound : request.bounds) {
    bounds.push_back({{"metric", metric_name(bound.metric)}, {"limit", bound.limit}});
  }
  data["bounds"] = bounds;
  data["first_divergence"] = result.first_divergence
                                 ? Json(result.comparisons[*result.first_divergence].name)
                                 : Json(nullptr);
  Json worst = Json::array();
  for (size_t index : result.worst) worst.push_back(result.comparisons[index].name);
  data["worst"] = worst;
  Json compared = Json::array();
  for (const auto& comparison : result.comparisons) compared.push_back(comparison.name);
  data["pairing"] = {{"compared", compared},
                     {"only_in_a", result.only_in_a},
                     {"only_in_b", result.only_in_b},
                     {"not_tensor", result.not_tensor}};
  data["findings_omitted"] = omitted;
  Json tensors = Json::array();
  for (size_t index = 0; index < result.comparisons.size(); ++index) {
    tensors.push_back(comparison_json(result.comparisons[index], result.diverged[index],
                                      result.bound_results[index]));
  }
  data["tensors"] = std::move(tensors);
  envelope.data = std::move(data);
  return render_envelope(envelope);
}

}  // namespace loupe::check
