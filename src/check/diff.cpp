#include "check/diff.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "check/align.hpp"
#include "check/dims.hpp"
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
  std::string file;  // a string, not a path: a path splits itself into components when built
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
  std::map<fs::path, std::map<std::string, std::string>> metadata_cache;
  // A directory of rank-<r>/ (kSharded) or step-<s>/ (kSteps) subdirectories: one Source each,
  // in rank or step order; names and entries are those of the first.
  enum class Layering { kPlain, kSharded, kSteps } layering = Layering::kPlain;
  std::vector<Source> parts;
  std::vector<std::string> part_names;  // "rank-3", "step-1"
};

// A tensor as read from a source: unsharded, or still a list of steps to align.
struct Loaded {
  Tensor tensor;
  DumpMetadata meta;
  std::optional<ShardLayout> layout;
  std::vector<ReplicaMismatch> replicas;
  std::vector<StepTensor> steps;  // from a kSteps source; `tensor` is empty then
  std::string origin;
};

// The settings that decide how a side's shards go back together.
struct ShardSettings {
  const std::vector<std::string>* dims = nullptr;  // --dims
  std::optional<std::string> parallel;             // --parallel or --parallel-b
};

std::string lower_extension(const fs::path& path) {
  std::string extension = path.extension().string();
  for (char& c : extension) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return extension;
}

// One directory's entries, sorted by name, with their type from the listing itself (readdir's
// d_type; a symbolic link or a file system without d_type is stat'ed, following the link). No
// std::filesystem::path per entry: a dump of 10,000 tensors is listed before its first pair is
// compared, which --jsonl's first line waits for.
struct Listed {
  std::string name;
  enum class Type { kDirectory, kRegular, kOther } type = Type::kOther;
};

std::vector<Listed> list_directory(const fs::path& path, const std::string& side) {
  DIR* directory = ::opendir(path.c_str());
  if (directory == nullptr) {
    throw Error(
        ErrorCode::kInput,
        side + " (" + path.string() + "): cannot list the directory: " + std::strerror(errno),
        "pass a directory loupe may read");
  }
  std::vector<Listed> listed;
  while (const dirent* item = ::readdir(directory)) {
    const char* name = item->d_name;
    if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0) continue;
    Listed entry{name};
    unsigned char type = item->d_type;
    if (type == DT_LNK || type == DT_UNKNOWN) {
      struct stat status;
      type = ::fstatat(::dirfd(directory), name, &status, 0) != 0 ? DT_UNKNOWN
             : S_ISDIR(status.st_mode)                            ? DT_DIR
             : S_ISREG(status.st_mode)                            ? DT_REG
                                                                  : DT_UNKNOWN;
    }
    entry.type = type == DT_DIR   ? Listed::Type::kDirectory
                 : type == DT_REG ? Listed::Type::kRegular
                                  : Listed::Type::kOther;
    listed.push_back(std::move(entry));
  }
  ::closedir(directory);
  std::sort(listed.begin(), listed.end(),
            [](const Listed& left, const Listed& right) { return left.name < right.name; });
  return listed;
}

// The lower-cased extension of a file name ("" when none; a leading dot is not one), as
// lower_extension gives it for a path.
std::string lower_extension_of_name(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0 || name == "..") return "";
  std::string extension = name.substr(dot);
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

Tensor load_plain(Source& source, const std::string& name) {
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
  throw Error(ErrorCode::kInternal, "tensor '" + *entry.tensor + "' vanished from " + entry.file);
}

void add_safetensors_entries(Source& source, const fs::path& file, const std::string& prefix) {
  for (const NamedTensor& named : safetensors_of(source, file)) {
    const std::string name = prefix + named.name;
    source.names.push_back(name);
    source.entries[name] = Entry{file.string(), named.name};
  }
}

Source open_source(const fs::path& path, const std::string& side,
                   const std::optional<std::string>& npy_name);
std::string file_of(const Source& source, const std::string& name);

// "rank-12" → 12 for prefix "rank-"; nullopt for anything else.
std::optional<int64_t> numbered(const std::string& file_name, const std::string& prefix) {
  if (file_name.rfind(prefix, 0) != 0 || file_name.size() == prefix.size() ||
      file_name.size() > prefix.size() + 9) {
    return std::nullopt;
  }
  int64_t value = 0;
  for (size_t index = prefix.size(); index < file_name.size(); ++index) {
    if (!std::isdigit(static_cast<unsigned char>(file_name[index]))) return std::nullopt;
    value = value * 10 + (file_name[index] - '0');
  }
  return value;
}

// A directory whose subdirectories are rank-<r>/ or step-<s>/ becomes a layered source. Returns
// false for an ordinary directory. Ranks must run 0..N-1 without a gap; steps are ordered by
// number (loupe.step metadata, when present, decides later).
bool open_layered(Source& source, const std::string& side) {
  std::map<int64_t, fs::path> ranks, steps;
  const std::vector<Listed> listed = list_directory(source.path, side);
  for (const Listed& item : listed) {
    if (item.type != Listed::Type::kDirectory) continue;
    const std::string& file_name = item.name;
    for (auto [prefix, parts] : {std::pair{"rank-", &ranks}, {"step-", &steps}}) {
      const auto number = numbered(file_name, prefix);
      if (!number) continue;
      // rank-1/ and rank-01/ both read as 1: one must not silently replace the other.
      const auto [where, added] = parts->emplace(*number, source.path / file_name);
      if (!added) {
        std::string first = where->second.filename().string(), second = file_name;
        if (second < first) std::swap(first, second);
        throw Error(ErrorCode::kInput,
                    side + " (" + source.path.string() + "): " + first + "/ and " + second +
                        "/ are both " + prefix + std::to_string(*number) +
                        "; expected one directory per number",
                    "remove or rename one of them (loupe.dump writes rank-<r>/ without leading "
                    "zeros)");
      }
    }
  }
  if (ranks.empty() && steps.empty()) return false;
  if (!ranks.empty() && !steps.empty()) {
    throw Error(ErrorCode::kInput,
                side + " (" + source.path.string() +
                    "): holds both rank-<r>/ and step-<s>/ directories; expected one kind",
                "put each step's rank-<r>/ directories inside its step-<s>/ directory");
  }
  const bool sharded = !ranks.empty();
  if (sharded) {
    int64_t expected = 0;
    for (const auto& [rank, path] : ranks) {
      if (rank != expected) {
        throw Error(ErrorCode::kInput,
                    side + " (" + source.path.string() + "): rank-" + std::to_string(expected) +
                        "/ is missing (found rank-" + std::to_string(rank) +
                        "/); expected rank-0/, rank-1/, ... without a gap",
                    "every rank of the run writes its own rank-<r>/ directory");
      }
      ++expected;
    }
  }
  source.layering = sharded ? Source::Layering::kSharded : Source::Layering::kSteps;
  for (const auto& [number, path] : sharded ? ranks : steps) {
    const std::string part_name = path.filename().string();
    source.parts.push_back(open_source(path, side + " " + part_name, std::nullopt));
    source.part_names.push_back(part_name);
  }
  const Source& first = source.parts.front();
  source.names = first.names;
  source.entries = first.entries;
  source.manifest = first.manifest;
  source.has_manifest = first.has_manifest;
  for (const Listed& item : listed) {
    if (item.type != Listed::Type::kDirectory && item.name != "manifest.txt") {
      source.not_tensor.push_back(item.name);
    }
  }
  return true;
}

const std::map<std::string, std::string>& metadata_of(Source& source, const fs::path& file) {
  auto found = source.metadata_cache.find(file);
  if (found != source.metadata_cache.end()) return found->second;
  try {
    return source.metadata_cache.emplace(file, read_safetensors_metadata(file)).first->second;
  } catch (const Error& error) {
    rethrow_for_side(error, source.side);
  }
}

// The dims for `name`: --dims NAME=SPEC, else --dims SPEC, else the metadata's; nullopt if none.
std::optional<DimsSpec> dims_for(const ShardSettings& settings, const std::string& name,
                                 const DumpMetadata& meta, const std::string& origin) {
  if (settings.dims) {
    const std::string* general = nullptr;
    for (const std::string& text : *settings.dims) {
      const size_t equals = text.find('=');
      if (equals == std::string::npos) {
        general = &text;
      } else if (text.substr(0, equals) == name) {
        return parse_dims(text.substr(equals + 1), "--dims " + text.substr(0, equals));
      }
    }
    if (general) return parse_dims(*general, "--dims");
  }
  if (meta.dims) {
    return parse_dims(*meta.dims, origin + ": metadata loupe.dims", ErrorCode::kInput);
  }
  return std::nullopt;
}

Loaded load(Source& source, const std::string& name, const ShardSettings& settings) {
  Loaded loaded;
  if (source.layering == Source::Layering::kPlain) {
    loaded.tensor = load_plain(source, name);
    loaded.origin = file_of(source, name);
    const Entry& entry = source.entries.at(name);
    if (entry.tensor) {
      loaded.meta = parse_dump_metadata(metadata_of(source, entry.file), *entry.tensor, entry.file);
    }
    // A dims spec names the axes of an unsharded tensor too (worst_coords, --along).
    if (auto dims = dims_for(settings, name, loaded.meta, loaded.origin)) {
      if (static_cast<int64_t>(dims->axes.size()) == loaded.tensor.rank()) {
        loaded.tensor.axes = dims->names();
      }
    }
    return loaded;
  }
  std::vector<Loaded> parts;
  for (size_t index = 0; index < source.parts.size(); ++index) {
    Source& part = source.parts[index];
    if (!part.entries.count(name)) {
      throw Error(ErrorCode::kInput,
                  source.side + " (" + source.path.string() + "): " + source.part_names[index] +
                      "/ has no tensor '" + name + "', which " + source.part_names[0] + "/ has",
                  "every rank (or step) directory must hold the same tensors");
    }
    parts.push_back(load(part, name, settings));
  }
  if (source.layering == Source::Layering::kSteps) {
    for (size_t index = 0; index < parts.size(); ++index) {
      Loaded& part = parts[index];
      if (!part.steps.empty()) {
        throw Error(ErrorCode::kInput,
                    source.side + " (" + source.path.string() + "): " + source.part_names[index] +
                        "/ holds step-<s>/ directories itself; expected one level of steps",
                    "a step may hold rank-<r>/ directories, not further steps");
      }
      StepTensor step;
      step.tensor = part.tensor;
      step.step = part.meta.step;
      step.request_ids = part.meta.request_ids;
      step.seq_lens = part.meta.seq_lens;
      step.origin = part.origin;
      loaded.steps.push_back(std::move(step));
    }
    loaded.meta = parts.front().meta;
    loaded.origin = source.path.string() + " (" + std::to_string(parts.size()) + " steps)";
    return loaded;
  }

  // Sharded: the dims and groups, from the command line or rank 0's metadata.
  for (size_t index = 0; index < parts.size(); ++index) {
    if (!parts[index].steps.empty()) {
      throw Error(ErrorCode::kInput,
                  source.side + " (" + source.path.string() + "): " + source.part_names[index] +
                      "/ holds step-<s>/ directories; expected each step-<s>/ to hold its "
                      "rank-<r>/ directories",
                  "steps outside, ranks inside: DIR/step-<s>/rank-<r>/");
    }
  }
  const Loaded& first = parts.front();
  const std::optional<DimsSpec> dims = dims_for(settings, name, first.meta, first.origin);
  if (parts.size() == 1 && (!dims || (!settings.parallel && !first.meta.parallel))) {
    // One rank (a world of size 1 dumps into rank-0/ too): nothing to put together.
    return std::move(parts.front());
  }
  if (!dims) {
    throw Error(ErrorCode::kUsage,
                source.side + " (" + source.path.string() + "): '" + name +
                    "' is sharded over rank-<r>/ directories, but no dims spec says how (" +
                    first.origin + " has no loupe.dims)",
                "give --dims, e.g. --dims 'b t(cp,zigzag) h(tp) d' --parallel tp=2,cp=4");
  }
  ParallelConfig parallel;
  if (settings.parallel) {
    parallel = parse_parallel(*settings.parallel, "--parallel");
  } else if (first.meta.parallel) {
    parallel = parse_parallel(*first.meta.parallel, first.origin + ": metadata loupe.parallel",
                              ErrorCode::kInput);
  } else {
    throw Error(ErrorCode::kUsage,
                source.side + " (" + source.path.string() + "): '" + name + "' is sharded over " +
                    std::to_string(parts.size()) + " ranks, but nothing gives the run's groups (" +
                    first.origin + " has no loupe.parallel)",
                "give --parallel, e.g. --parallel tp=2,cp=4 (the first group varies fastest)");
  }
  if (parallel.world_size() != static_cast<int64_t>(parts.size())) {
    throw Error(ErrorCode::kInput,
                source.side + " (" + source.path.string() + "): " + std::to_string(parts.size()) +
                    " rank-<r>/ directories, but groups '" + parallel.to_string() + "' make " +
                    std::to_string(parallel.world_size()) + " ranks",
                "give the groups the run had with --parallel");
  }
  std::vector<Shard> shards;
  for (size_t index = 0; index < parts.size(); ++index) {
    Loaded& part = parts[index];
    const int64_t rank = static_cast<int64_t>(index);
    if (part.meta.rank && *part.meta.rank != rank) {
      throw Error(ErrorCode::kInput,
                  part.origin + ": metadata loupe.rank is " + std::to_string(*part.meta.rank) +
                      ", but the file is under " + source.part_names[index] + "/",
                  "rank-<r>/ holds the files rank r wrote");
    }
    Shard shard;
    shard.rank = rank;
    shard.coords = parallel.coords_of(rank);
    // loupe.rank.<group> overrides the layout's numbering, group by group.
    for (const auto& [group, group_rank] : part.meta.group_ranks) {
      for (size_t group_index = 0; group_index < parallel.groups.size(); ++group_index) {
        if (parallel.groups[group_index].first != group) continue;
        if (group_rank >= parallel.groups[group_index].second) {
          throw Error(ErrorCode::kInput,
                      part.origin + ": metadata loupe.rank." +
                          std::string(parallel_axis_name(group)) + " is " +
                          std::to_string(group_rank) + ", but the group has " +
                          std::to_string(parallel.groups[group_index].second) + " ranks",
                      "");
        }
        shard.coords[group_index] = group_rank;
      }
    }
    shard.rank = parallel.rank_of(shard.coords);
    shard.tensor = part.tensor;
    shard.origin = part.origin;
    shards.push_back(std::move(shard));
  }
  Unsharded unsharded = unshard(shards, *dims, parallel, name);
  loaded.tensor = std::move(unsharded.tensor);
  loaded.layout = std::move(unsharded.layout);
  loaded.replicas = std::move(unsharded.replica_mismatches);
  loaded.meta = first.meta;
  loaded.meta.dims = dims->text;
  loaded.origin = source.path.string() + " (" + std::to_string(parts.size()) + " ranks)";
  return loaded;
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
    if (open_layered(source, side)) return source;
    // Entries carry the file type the directory listing gave (list_directory).
    std::string prefix = path.string();
    if (!prefix.empty() && prefix.back() != '/') prefix += '/';
    for (const Listed& item : list_directory(path, side)) {
      const std::string& file_name = item.name;
      if (file_name == "manifest.txt") continue;
      const std::string extension = lower_extension_of_name(file_name);
      const bool regular = item.type == Listed::Type::kRegular;
      if (regular && extension == ".npy") {
        source.names.push_back(file_name);
        source.entries.emplace_hint(source.entries.end(), file_name,
                                    Entry{prefix + file_name, std::nullopt});
      } else if (regular && extension == ".safetensors") {
        add_safetensors_entries(source, path / file_name, file_name + ":");
      } else {
        source.not_tensor.push_back(file_name);
      }
    }
    // A directory of torch.save files only (SGLang's dumper writes one per value, every rank in
    // one directory): say how to read it instead of comparing nothing.
    if (source.names.empty()) {
      const size_t torch_files = static_cast<size_t>(
          std::count_if(source.not_tensor.begin(), source.not_tensor.end(),
                        [](const auto& name) { return lower_extension(name) == ".pt"; }));
      if (torch_files > 0) {
        throw Error(ErrorCode::kInput,
                    side + " (" + path.string() + "): holds " + std::to_string(torch_files) +
                        " torch.save (.pt) files and no .npy or .safetensors tensor",
                    "an SGLang dumper directory: convert each run with PYTHONPATH="
                    "build/release/python python3 -m loupe.sglang DIR OUT and diff the OUT "
                    "directories, which unshards by the dumps' dims; other .pt files: "
                    "loupe.diff in Python (docs/python.md)");
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
    source.entries[name] = Entry{path.string(), std::nullopt};
    return source;
  }
  if (extension == ".safetensors") {
    source.kind = SourceKind::kSafetensors;
    add_safetensors_entries(source, path, "");
    return source;
  }
  if (extension == ".pt" || extension == ".pth") {
    throw Error(ErrorCode::kInput,
                side + " (" + path.string() +
                    "): a torch.save file; expected a .npy file, a .safetensors file or a "
                    "directory",
                "compare .pt files through the Python package, which reads them with torch: "
                "PYTHONPATH=build/release/python python3 -c \"import loupe; "
                "print(loupe.diff('A.pt', 'B.pt').summary)\" (docs/python.md)");
  }
  throw Error(ErrorCode::kInput,
              side + " (" + path.string() + "): found a file ending in '" + extension +
                  "'; expected a .npy file, a .safetensors file or a directory",
              "loupe diff reads .npy and .safetensors tensors");
}

std::string file_of(const Source& source, const std::string& name) {
  const Entry& entry = source.entries.at(name);
  return entry.tensor ? entry.file + ":" + *entry.tensor : entry.file;
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

std::string joined_numbers(const std::vector<int64_t>& numbers) {
  std::string out = "[";
  for (size_t index = 0; index < numbers.size() && index < 16; ++index) {
    out += (index > 0 ? ", " : "") + std::to_string(numbers[index]);
  }
  if (numbers.size() > 16) out += ", +" + std::to_string(numbers.size() - 16) + " more";
  return out + "]";
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
  out["metrics"]["nonfinite_equal"] = comparison.metrics.nonfinite_equal;
  out["metrics"]["cosine"] = number_to_json(comparison.metrics.cosine);
  if (comparison.metrics.has_statistics) {
    for (Metric metric : statistic_metrics()) {
      out["metrics"][std::string(metric_name(metric))] =
          number_to_json(metric_value(comparison.metrics, metric));
    }
    out["downcast_dtype"] = dtype_name(comparison.metrics.downcast_dtype);
  }
  if (comparison.oracle) {
    out["metrics"]["oracle_ratio"] = number_to_json(comparison.oracle->ratio);
  }
  out["tolerance"] = {{"atol", comparison.metrics.tolerance.atol},
                      {"rtol", comparison.metrics.tolerance.rtol},
                      {"equal_nan", comparison.metrics.tolerance.equal_nan}};
  out["ulp_dtype"] = dtype_name(comparison.metrics.ulp_dtype);
  Json worst = Json::object();
  for (const auto& [axis, index] : comparison.localisation.worst_coords) worst[axis] = index;
  out["worst_coords"] = worst;
  out["worst_values"] = {{"a", number_to_json(comparison.metrics.worst_a)},
                         {"b", number_to_json(comparison.metrics.worst_b)}};
  Json bound_list = Json::array();
  for (const BoundResult& result : bounds) {
    bound_list.push_back({{"metric", metric_name(result.metric)},
                          {"op", comparison_op_text(result.op)},
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
                        {"share", number_to_json(slice.share)},
                        {"sharing", slice.sharing},
                        {"sharing_share", number_to_json(slice.sharing_share)}});
    }
    out["top_slices"] = std::move(slices);
    if (const auto& positions = comparison.localisation.positions) {
      Json error = Json::array(), max_abs = Json::array();
      for (double value : positions->error) error.push_back(number_to_json(value));
      for (double value : positions->max_abs) max_abs.push_back(number_to_json(value));
      out["per_position"] = {{"axis", profile->axis},
                             {"error", std::move(error)},
                             {"max_abs", std::move(max_abs)},
                             {"mismatches", positions->mismatches},
                             {"start", positions->start ? Json(*positions->start) : Json(nullptr)},
                             {"jump", positions->jump ? Json(*positions->jump) : Json(nullptr)},
                             {"jump_factor", number_to_json(positions->jump_factor)}};
    }
    const Localisation& localisation = comparison.localisation;
    out["first_exceeding"] =
        localisation.first_exceeding ? Json(*localisation.first_exceeding) : Json(nullptr);
    if (localisation.periodicity) {
      out["periodicity"] = {{"period", localisation.periodicity->period},
                            {"residue", localisation.periodicity->residue},
                            {"share", number_to_json(localisation.periodicity->share)},
                            {"occurrences", localisation.periodicity->occurrences}};
    } else {
      out["periodicity"] = nullptr;
    }
  }
  return out;
}

// A tolerance as the shortest text that reads back as the same double.
std::string exact_number(double value) {
  char buffer[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
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
  for (const std::string& dims : request.dims) out += " --dims '" + dims + "'";
  if (request.parallel) out += " --parallel " + *request.parallel;
  if (request.parallel_b) out += " --parallel-b " + *request.parallel_b;
  for (const Bound& bound : request.bounds) {
    out += " --tol " + std::string(metric_name(bound.metric)) + "=" + format_number(bound.limit);
  }
  if (request.tolerance) {
    out += " --rtol " + exact_number(request.tolerance->rtol) + " --atol " +
           exact_number(request.tolerance->atol);
  }
  if (request.equal_nan) out += " --equal-nan";
  if (request.rules) out += " --rules " + request.rules->origin;
  if (request.report_only) out += " --report-only";
  return out;
}

// The axis names of a loaded tensor: --axes, else its dims (flag or metadata), else its own.
std::vector<std::string> axes_of(const Loaded& loaded, const DiffRequest& request,
                                 const std::string& name, int64_t rank) {
  if (static_cast<int64_t>(request.axes.size()) == rank) return request.axes;
  ShardSettings settings{&request.dims, std::nullopt};
  if (auto dims = dims_for(settings, name, loaded.meta, loaded.origin)) {
    if (static_cast<int64_t>(dims->axes.size()) == rank) return dims->names();
  }
  return loaded.tensor.axes;
}

std::vector<StepTensor> steps_of(const Loaded& loaded) {
  if (!loaded.steps.empty()) return loaded.steps;
  return {StepTensor{loaded.tensor, loaded.meta.step, loaded.meta.request_ids, loaded.meta.seq_lens,
                     loaded.origin}};
}

// Lines the sides' tokens up when either is a list of steps or names its requests; the tensors
// of `a`, `b` (and the oracle) are replaced by the aligned ones. nullopt when nothing was done.
std::optional<TokenAlignmentReport> align_sides(const std::string& name, const DiffRequest& request,
                                                Loaded& a, Loaded& b,
                                                std::optional<Loaded>& oracle) {
  std::vector<Loaded*> sides = {&a, &b};
  if (oracle) sides.push_back(&*oracle);
  bool needed = false;
  for (Loaded* side : sides) {
    const std::vector<StepTensor> steps = steps_of(*side);
    if (!side->steps.empty() || has_request_metadata(steps)) needed = true;
  }
  if (!needed) return std::nullopt;
  std::vector<AlignedTokens> aligned;
  bool packed = false;
  for (Loaded* side : sides) {
    const std::vector<StepTensor> steps = steps_of(*side);
    const std::vector<std::string> axes =
        axes_of(*side, request, name, steps.front().tensor.rank());
    aligned.push_back(align_tokens(steps, axes, name));
    if (aligned.back().layout == "packed") packed = true;
  }
  for (size_t index = 0; index < sides.size(); ++index) {
    if (packed && aligned[index].layout != "packed") {
      const std::vector<StepTensor> steps = steps_of(*sides[index]);
      aligned[index] = align_tokens(
          steps, axes_of(*sides[index], request, name, steps.front().tensor.rank()), name, true);
    }
  }
  TokenAlignmentReport report;
  report.layout = aligned[0].layout;
  report.request_ids = aligned[0].request_ids;
  report.request_begin = aligned[0].request_begin;
  report.steps_a = std::max<size_t>(1, a.steps.size());
  report.steps_b = std::max<size_t>(1, b.steps.size());
  if (aligned[0].request_ids != aligned[1].request_ids) {
    throw Error(ErrorCode::kInput,
                "'" + name + "': A holds requests " + joined_numbers(aligned[0].request_ids) +
                    ", B holds " + joined_numbers(aligned[1].request_ids),
                "compare runs that served the same requests (loupe.request_ids)");
  }
  const size_t stepped = a.steps.size() >= b.steps.size() ? 0 : 1;
  report.stepped_side = stepped == 0 ? "A" : "B";
  for (size_t index = 0; index < sides.size(); ++index) {
    sides[index]->tensor = std::move(aligned[index].tensor);
  }
  report.steps = std::move(aligned[stepped]);
  report.steps.tensor = Tensor();
  return report;
}

std::string replica_sentence(const ReplicaMismatch& mismatch) {
  return parallel_axis_label(mismatch.group) + " replica on rank " + std::to_string(mismatch.rank) +
         " differs from rank " + std::to_string(mismatch.reference_rank) + "'s copy in " +
         std::to_string(mismatch.differing) + " elements (" + mismatch.origin + ")";
}

// The summary's lines about ranks and token alignment for comparison `index`.
std::string shard_lines(const DiffResult& result, size_t index) {
  std::string out;
  if (index < result.shards.size()) {
    for (const ShardReport& report : result.shards[index]) {
      const std::string sentence = attribution_sentence(report.attribution);
      out += "    " + report.side + " unsharded (" + report.layout.parallel.to_string() +
             ", dims '" + report.layout.dims.text + "')";
      out += !sentence.empty() && result.diverged[index] ? ": " + sentence + "\n" : "\n";
      for (const ReplicaMismatch& mismatch : report.replica_mismatches) {
        out += "    " + report.side + ": " + replica_sentence(mismatch) + "\n";
      }
    }
  }
  if (index < result.alignments.size() && result.alignments[index]) {
    const TokenAlignmentReport& alignment = *result.alignments[index];
    out += "    tokens aligned (" + alignment.layout + "): A " + std::to_string(alignment.steps_a) +
           " step(s), B " + std::to_string(alignment.steps_b) + " step(s)";
    if (!alignment.request_ids.empty()) {
      out += ", requests " + joined_numbers(alignment.request_ids) + " in that order";
    }
    out += "\n";
    const std::string sentence = step_sentence(alignment.attribution, alignment.steps);
    if (!sentence.empty() && result.diverged[index]) out += "    " + sentence + "\n";
  }
  return out;
}

// Findings about ranks: `rank` (fail when one rank of every cut axis holds the error, else
// info) for a diverged comparison, `replica` (warn) for a replicated copy that differs.
std::vector<Finding> shard_findings(const DiffResult& result, size_t index,
                                    const FindingContext& context) {
  std::vector<Finding> out;
  if (index >= result.shards.size()) return out;
  const TensorComparison& comparison = result.comparisons[index];
  if (index < result.alignments.size() && result.alignments[index] && result.diverged[index]) {
    const TokenAlignmentReport& alignment = *result.alignments[index];
    const StepAttribution& attribution = alignment.attribution;
    const std::string sentence = step_sentence(attribution, alignment.steps);
    if (!sentence.empty()) {
      Finding finding;
      finding.id = context.id_prefix + ".step";
      finding.layer = Layer::kCheck;
      finding.severity = Severity::kFail;
      finding.where = context.where;
      finding.where.path = comparison.name;
      finding.where.coords = comparison.localisation.worst_coords;
      finding.where.params.emplace_back("step",
                                        Value(alignment.steps.steps[*attribution.first_step]));
      finding.where.params.emplace_back("t", Value(attribution.first_token));
      finding.claim = "'" + comparison.name + "' (" + alignment.stepped_side + " aligned from " +
                      std::to_string(alignment.steps.steps.size()) + " steps, " + alignment.layout +
                      "): " + sentence;
      finding.evidence.metrics.emplace_back(
          "first_step", static_cast<double>(alignment.steps.steps[*attribution.first_step]));
      finding.evidence.metrics.emplace_back("first_t",
                                            static_cast<double>(attribution.first_token));
      finding.evidence.metrics.emplace_back("share_from_first_step", attribution.share_from_first);
      finding.evidence.metrics.emplace_back("rms_ratio", comparison.metrics.rms_ratio);
      finding.evidence.files = context.files;
      finding.next = attribution.first_step == 0
                         ? "the prefill already differs: compare the prefill dumps alone"
                         : "look at what that step received from the one before it (its state, "
                           "its cache entry, its position)";
      finding.reproduce = context.reproduce;
      out.push_back(std::move(finding));
    }
  }
  for (const ShardReport& report : result.shards[index]) {
    const ShardAttribution& attribution = report.attribution;
    if (result.diverged[index] && attribution.total_squared_error > 0) {
      Finding finding;
      finding.id = context.id_prefix + ".rank";
      finding.layer = Layer::kCheck;
      finding.severity = attribution.concentrated ? Severity::kFail : Severity::kInfo;
      finding.where = context.where;
      finding.where.path = comparison.name;
      finding.where.coords = comparison.localisation.worst_coords;
      for (const AxisAttribution& axis : attribution.axes) {
        finding.where.params.emplace_back(
            std::string(parallel_axis_name(axis.axis.group)) + "_rank", Value(axis.top_rank));
      }
      finding.claim = "'" + comparison.name + "' (" + report.side + " unsharded from " +
                      report.layout.parallel.to_string() +
                      "): " + attribution_sentence(attribution);
      if (!attribution.concentrated) finding.claim += "; the error is spread over ranks";
      for (const AxisAttribution& axis : attribution.axes) {
        const std::string group(parallel_axis_name(axis.axis.group));
        finding.evidence.metrics.emplace_back(group + "_top_share", axis.top_share);
        finding.evidence.metrics.emplace_back(group + "_top_rank",
                                              static_cast<double>(axis.top_rank));
      }
      finding.evidence.metrics.emplace_back("rms_ratio", comparison.metrics.rms_ratio);
      finding.evidence.files = context.files;
      finding.next = attribution.concentrated
                         ? "diff that rank's shard alone (loupe diff on its rank-<r>/ file against "
                           "the same slice of B), then look at what feeds it: its input slice, "
                           "the state or message it received"
                         : "the error is not one rank's: profile it along the cut axis (--along) "
                           "to see whether it grows from rank to rank";
      finding.reproduce = context.reproduce;
      out.push_back(std::move(finding));
    }
    for (const ReplicaMismatch& mismatch : report.replica_mismatches) {
      Finding finding;
      finding.id = context.id_prefix + ".replica";
      finding.layer = Layer::kCheck;
      finding.severity = Severity::kWarn;
      finding.where = context.where;
      finding.where.path = comparison.name;
      finding.claim = "'" + comparison.name + "' (" + report.side +
                      "): " + replica_sentence(mismatch) +
                      "; a replicated tensor should be bitwise equal on every rank";
      finding.evidence.metrics.emplace_back("differing", static_cast<double>(mismatch.differing));
      finding.evidence.files = {mismatch.origin};
      finding.next =
          "find where that rank's copy stopped being kept in step (a missed broadcast "
          "or all-reduce)";
      finding.reproduce = context.reproduce;
      out.push_back(std::move(finding));
    }
  }
  return out;
}

Json shards_json(const DiffResult& result, size_t index) {
  Json out = Json::array();
  if (index >= result.shards.size()) return out;
  for (const ShardReport& report : result.shards[index]) {
    Json axes = Json::array();
    for (const AxisAttribution& axis : report.attribution.axes) {
      Json ranks = Json::array();
      for (const RankShare& share : axis.ranks) {
        ranks.push_back({{"rank", share.rank},
                         {"share", number_to_json(share.share)},
                         {"chunk_shares", share.chunk_shares}});
      }
      axes.push_back({{"axis", axis.axis_name},
                      {"group", parallel_axis_name(axis.axis.group)},
                      {"order", shard_order_name(axis.axis.order)},
                      {"piece_begin", axis.axis.piece_begin},
                      {"top_rank", axis.top_rank},
                      {"top_share", number_to_json(axis.top_share)},
                      {"ranks", std::move(ranks)}});
    }
    Json replicas = Json::array();
    for (const ReplicaMismatch& mismatch : report.replica_mismatches) {
      replicas.push_back({{"group", parallel_axis_name(mismatch.group)},
                          {"rank", mismatch.rank},
                          {"reference_rank", mismatch.reference_rank},
                          {"differing", mismatch.differing},
                          {"file", mismatch.origin}});
    }
    Json partial = Json::array(), replicated = Json::array();
    for (ParallelAxis group : report.layout.partial) partial.push_back(parallel_axis_name(group));
    for (ParallelAxis group : report.layout.replicated) {
      replicated.push_back(parallel_axis_name(group));
    }
    out.push_back({{"side", report.side},
                   {"dims", report.layout.dims.text},
                   {"parallel", report.layout.parallel.to_string()},
                   {"partial", std::move(partial)},
                   {"replicated", std::move(replicated)},
                   {"axes", std::move(axes)},
                   {"concentrated", report.attribution.concentrated},
                   {"global_ranks", report.attribution.global_ranks},
                   {"sentence", attribution_sentence(report.attribution)},
                   {"replica_mismatches", std::move(replicas)}});
  }
  return out;
}

// Whether a --tol bound or a rule's predicate names a statistic (add_statistics).
bool names_statistic(const DiffRequest& request) {
  for (const Bound& bound : request.bounds) {
    if (is_statistic(bound.metric)) return true;
  }
  return request.rules && rules_name_statistic(*request.rules);
}

// Compares one pair and appends it to `result`; `where` names both sides in an error.
void compare_pair(const std::string& name, const Tensor& a, const Tensor& b, const Tensor* oracle,
                  const DiffRequest& request, const std::string& where, DiffResult& result,
                  bool& along_found) {
  CompareOptions options;
  options.axes = request.axes;
  options.tolerance = request.tolerance;
  options.equal_nan = request.equal_nan;
  options.statistics = request.statistics || names_statistic(request);
  for (const Bound& bound : request.bounds) {
    if (bound.metric == Metric::kRmsRatio) options.profile_threshold = bound.limit;
  }
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

// The bounds that decide comparison `index`: its rule's predicates with --rules, else --tol.
std::span<const Bound> deciding_bounds(const DiffRequest& request, const DiffResult& result,
                                       size_t index) {
  if (request.rules && index < result.rule_index.size() && result.rule_index[index]) {
    return request.rules->rules[*result.rule_index[index]].when;
  }
  return request.bounds;
}

// The verdict of the comparison just appended (its rule, bounds, whether it is past tolerance),
// then the request's on_compared: each pair is decided as soon as it is compared.
void decide(const DiffRequest& request, DiffResult& result) {
  const size_t index = result.comparisons.size() - 1;
  const TensorComparison& comparison = result.comparisons[index];
  std::optional<size_t> rule;
  if (request.rules) {
    rule = deciding_rule(*request.rules, comparison.name);
    if (!rule) {
      throw Error(ErrorCode::kConfig,
                  "tensor '" + comparison.name + "' matches no rule in " + request.rules->origin +
                      " (" + std::to_string(request.rules->rules.size()) +
                      " rules); expected every compared tensor to match one",
                  "add a rule whose match finds that name, or a last catch-all rule with "
                  "match = '.*'");
    }
  }
  result.rule_index.push_back(rule);
  const std::span<const Bound> bounds = deciding_bounds(request, result, index);
  result.bound_results.push_back(evaluate_bounds(comparison, bounds));
  const bool past = diverged(comparison, bounds);
  result.diverged.push_back(past);
  for (const BoundResult& bound : result.bound_results.back()) {
    if (!bound.pass) result.any_bound_failed = true;
  }
  if (past) {
    result.worst.push_back(index);
    if (result.ordered && !result.first_divergence) result.first_divergence = index;
  }
  if (request.on_compared) request.on_compared(result, index);
}

// "rule 'attention' (rules.toml:4) decided: rel 0.012 > 0.0085; max_abs 3e-3 <= 0.01".
std::string rule_sentence(const DiffRequest& request, const DiffResult& result, size_t index) {
  return rule_decision_sentence(request.rules->rules[*result.rule_index[index]],
                                request.rules->origin, result.bound_results[index]);
}

// The first divergence and the worst pairs, once every pair is compared and decided.
void finish_diff(const DiffRequest& request, bool along_found, DiffResult& result) {
  if (request.along && !along_found && !result.comparisons.empty()) {
    throw Error(ErrorCode::kUsage,
                "--along " + *request.along + ": no compared tensor has an axis of that name",
                "name the axes with --axes (e.g. --axes B,T,H,V), then profile along one of them");
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
    std::vector<std::string> rest = a.names;  // the union, each name once: half the sorting
    for (const auto& name : b.names) {
      if (!a.entries.count(name)) rest.push_back(name);
    }
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
  ShardSettings settings_a{&request.dims, request.parallel};
  ShardSettings settings_b{&request.dims,
                           request.parallel_b ? request.parallel_b : request.parallel};
  bool along_found = false;
  for (const std::string& name : names) {
    const bool in_a = a.entries.count(name) > 0;
    const bool in_b = b.entries.count(name) > 0;
    if (!in_a || !in_b) {
      (in_a ? result.only_in_a : result.only_in_b).push_back(name);
      result.stats.add(in_a ? Stat::diff_tensor_only_in_a : Stat::diff_tensor_only_in_b);
      continue;
    }
    Loaded loaded_a = load(a, name, settings_a);
    Loaded loaded_b = load(b, name, settings_b);
    std::optional<Loaded> loaded_oracle;
    if (oracle) {
      if (!oracle->entries.count(name)) {
        throw Error(ErrorCode::kInput,
                    "the oracle (" + request.oracle->string() + ") has no tensor '" + name + "'",
                    "give the oracle the same layout as A and B");
      }
      loaded_oracle = load(*oracle, name, settings_b);
    }
    std::optional<TokenAlignmentReport> alignment =
        align_sides(name, request, loaded_a, loaded_b, loaded_oracle);
    const Tensor& tensor_a = loaded_a.tensor;
    const Tensor& tensor_b = loaded_b.tensor;
    std::optional<Tensor> tensor_oracle;
    if (loaded_oracle) tensor_oracle = loaded_oracle->tensor;
    if (single_pair && !request.axes.empty() &&
        static_cast<int64_t>(request.axes.size()) != tensor_a.rank()) {
      throw Error(ErrorCode::kUsage,
                  "--axes names " + std::to_string(request.axes.size()) + " axes but A (" +
                      request.a.string() + ") has shape " + shape_to_string(tensor_a.shape()),
                  "name one axis per dimension, e.g. --axes T,H,V for a 3-d tensor");
    }
    const std::string shown_name = single_pair ? request.a.filename().string() : name;
    compare_pair(shown_name, tensor_a, tensor_b, tensor_oracle ? &*tensor_oracle : nullptr, request,
                 "A: " + loaded_a.origin + ", B: " + loaded_b.origin, result, along_found);
    // Rank attribution, in the logical layout (not after token alignment, which moves tokens).
    std::vector<ShardReport> reports;
    for (Loaded* side : {&loaded_a, &loaded_b}) {
      if (!side->layout || alignment) continue;
      ShardReport report;
      report.side = side == &loaded_a ? "A" : "B";
      report.layout = *side->layout;
      report.attribution = attribute_error(tensor_a, tensor_b, report.layout);
      report.replica_mismatches = side->replicas;
      reports.push_back(std::move(report));
    }
    result.shards.push_back(std::move(reports));
    if (alignment) {
      const Tolerance& tolerance = result.comparisons.back().metrics.tolerance;
      alignment->attribution =
          attribute_steps(tensor_a, tensor_b, alignment->steps, tolerance.atol, tolerance.rtol);
    }
    result.alignments.push_back(std::move(alignment));
    decide(request, result);
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
    decide(request, result);
  }
  finish_diff(request, along_found, result);
  return result;
}

std::vector<std::string> diff_failures(const DiffResult& result, const DiffRequest& request) {
  std::vector<std::string> failures;
  if (request.report_only) return failures;
  if (!result.worst.empty()) {
    failures.push_back(std::to_string(result.worst.size()) + " of " +
                       std::to_string(result.comparisons.size()) + " past tolerance");
  }
  if (result.comparisons.empty()) failures.push_back("nothing compared");
  const size_t unmatched = result.only_in_a.size() + result.only_in_b.size();
  if (unmatched > 0) {
    failures.push_back(std::to_string(unmatched) +
                       " unmatched (only in A: " + std::to_string(result.only_in_a.size()) +
                       ", only in B: " + std::to_string(result.only_in_b.size()) + ")");
  }
  return failures;
}

int diff_exit_code(const DiffResult& result, const DiffRequest& request) {
  return diff_failures(result, request).empty() ? 0 : 1;
}

std::string render_diff_summary(const DiffResult& result, const DiffRequest& request) {
  std::string out = "loupe diff  A=" + request.a.string() + "  B=" + request.b.string();
  if (request.oracle) out += "  oracle=" + request.oracle->string();
  out += "\n";
  std::string rule = request.tolerance
                         ? "atol+rtol*|B| with rtol " + exact_number(request.tolerance->rtol) +
                               ", atol " + exact_number(request.tolerance->atol)
                         : std::string("assert_close defaults (atol+rtol*|B| per dtype)");
  if (request.equal_nan) rule += ", NaN equal to NaN";
  if (request.rules) {
    rule = "rules " + request.rules->origin + " (" + std::to_string(request.rules->rules.size()) +
           " rules)";
  }
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
    const bool ruled = index < result.rule_index.size() && result.rule_index[index];
    if (ruled) text += "    " + rule_sentence(request, result, index) + "\n";
    for (const BoundResult& bound : result.bound_results[index]) {
      if (!bound.pass && !ruled) {  // a rule's sentence already says which predicate failed
        text += "    bound failed: " + std::string(metric_name(bound.metric)) + " " +
                format_number(bound.value) + " " + std::string(failed_op_text(bound.op)) + " " +
                format_number(bound.limit) + "\n";
      }
    }
    if (const auto& profile = comparison.localisation.profile) {
      text += "    error " + profile_sentence(*profile) + "\n";
    }
    const std::string onset = onset_sentence(comparison);
    if (!onset.empty() && result.diverged[index]) text += "    " + onset + "\n";
    text += shard_lines(result, index);
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
             std::to_string(comparison.metrics.numel);
      if (result.worst[rank] < result.rule_index.size() && result.rule_index[result.worst[rank]]) {
        out += "  rule '" + request.rules->rules[*result.rule_index[result.worst[rank]]].name + "'";
      }
      out += "\n";
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
  if (result.comparisons.empty()) {
    out += "nothing compared: A holds " + std::to_string(result.only_in_a.size()) +
           " tensors and B " + std::to_string(result.only_in_b.size()) +
           " with no name in common\n";
  }
  const std::vector<std::string> failures = diff_failures(result, request);
  if (request.report_only) {
    out += "verdict: none (--report-only)\n";
  } else if (failures.empty()) {
    out += "verdict: pass\n";
  } else {
    out += "verdict: fail (";
    for (size_t index = 0; index < failures.size(); ++index) {
      out += (index > 0 ? "; " : "") + failures[index];
    }
    out += ")\n";
  }
  return out;
}

namespace {

// One compared pair of data.tensors: its metrics, bounds or rule, ranks and token alignment.
Json tensor_json(const DiffResult& result, const DiffRequest& request, size_t index) {
  Json tensor = comparison_json(result.comparisons[index], result.diverged[index],
                                result.bound_results[index]);
  if (index < result.rule_index.size() && result.rule_index[index]) {
    const Rule& rule = request.rules->rules[*result.rule_index[index]];
    tensor["rule"] = {{"name", rule.name},
                      {"match", rule.match},
                      {"when", rule.when_text},
                      {"file", request.rules->origin},
                      {"line", rule.line}};
  }
  if (index < result.shards.size() && !result.shards[index].empty()) {
    tensor["shards"] = shards_json(result, index);
  }
  if (index < result.alignments.size() && result.alignments[index]) {
    const TokenAlignmentReport& alignment = *result.alignments[index];
    Json per_step = Json::array();
    const StepAttribution& attribution = alignment.attribution;
    for (size_t step = 0; step < attribution.squared_error.size(); ++step) {
      per_step.push_back({{"step", alignment.steps.steps[step]},
                          {"share", number_to_json(attribution.total_squared_error > 0
                                                       ? attribution.squared_error[step] /
                                                             attribution.total_squared_error
                                                       : 0.0)},
                          {"mismatches", attribution.mismatches[step]}});
    }
    tensor["token_alignment"] = {
        {"layout", alignment.layout},
        {"request_ids", alignment.request_ids},
        {"request_begin", alignment.request_begin},
        {"steps_a", alignment.steps_a},
        {"steps_b", alignment.steps_b},
        {"stepped_side", alignment.stepped_side},
        {"first_step", attribution.first_step ? Json(alignment.steps.steps[*attribution.first_step])
                                              : Json(nullptr)},
        {"first_t", attribution.first_step ? Json(attribution.first_token) : Json(nullptr)},
        {"steps", std::move(per_step)}};
  }
  return tensor;
}

std::string diff_envelope(const DiffResult& result, const DiffRequest& request, bool with_tensors) {
  Envelope envelope;
  envelope.kind = "diff";
  envelope.verdict = request.report_only                      ? Verdict::kNone
                     : diff_failures(result, request).empty() ? Verdict::kPass
                                                              : Verdict::kFail;
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
    for (Finding& finding : shard_findings(result, index, context)) {
      envelope.findings.push_back(std::move(finding));
    }
    for (Finding& finding :
         comparison_findings(comparison, deciding_bounds(request, result, index), context)) {
      if (result.first_divergence == index && finding.id == "check.diff.mismatch" &&
          result.comparisons.size() > 1) {
        finding.claim = "first divergence (#" + std::to_string(index + 1) + " of " +
                        std::to_string(result.comparisons.size()) + " in " + result.order +
                        " order): " + finding.claim;
      }
      envelope.findings.push_back(std::move(finding));
    }
    if (auto onset = onset_finding(comparison, deciding_bounds(request, result, index), context)) {
      envelope.findings.push_back(std::move(*onset));
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
    // Unmatched names fail the diff (diff_failures) unless it only reports.
    finding.severity = request.report_only ? Severity::kWarn : Severity::kFail;
    finding.where.subject = "diff";
    finding.claim = std::to_string(list->size()) + " tensors present in " + (in_a ? "A" : "B") +
                    " only, not compared: " + joined_names(*list, kListedInSummary);
    finding.evidence.metrics.emplace_back("count", static_cast<double>(list->size()));
    finding.evidence.files = {(in_a ? request.a : request.b).string()};
    finding.next = "check that both sides dumped the same tensors";
    finding.reproduce = reproduce_command(request, "");
    envelope.findings.push_back(std::move(finding));
  }

  if (result.comparisons.empty()) {
    Finding finding;
    finding.id = "check.diff.nothing_compared";
    finding.layer = Layer::kCheck;
    finding.severity = request.report_only ? Severity::kWarn : Severity::kFail;
    finding.where.subject = "diff";
    finding.claim = "nothing compared: A holds " + std::to_string(result.only_in_a.size()) +
                    " tensors and B " + std::to_string(result.only_in_b.size()) +
                    " with no name in common";
    finding.evidence.files = {request.a.string(), request.b.string()};
    finding.next = "check that both sides dumped the same tensors under the same names";
    finding.reproduce = reproduce_command(request, "");
    envelope.findings.insert(envelope.findings.begin(), std::move(finding));
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
  if (request.rules) {
    Json rules = Json::array();
    for (const Rule& rule : request.rules->rules) {
      rules.push_back({{"name", rule.name},
                       {"match", rule.match},
                       {"when", rule.when_text},
                       {"line", rule.line}});
    }
    data["rules"] = {{"file", request.rules->origin}, {"rules", std::move(rules)}};
  }
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
  if (with_tensors) {
    Json tensors = Json::array();
    for (size_t index = 0; index < result.comparisons.size(); ++index) {
      tensors.push_back(tensor_json(result, request, index));
    }
    data["tensors"] = std::move(tensors);
  } else {
    data["tensors_streamed"] = result.comparisons.size();
  }
  envelope.data = std::move(data);
  return render_envelope(envelope);
}

}  // namespace

std::string render_diff_json(const DiffResult& result, const DiffRequest& request) {
  return diff_envelope(result, request, true);
}

std::string render_diff_summary_line(const DiffResult& result, const DiffRequest& request) {
  return diff_envelope(result, request, false);
}

std::string render_diff_tensor_line(const DiffResult& result, const DiffRequest& request,
                                    size_t index) {
  Json line = Json::object();
  line["kind"] = "diff.tensor";
  line["index"] = index;
  const Json tensor = tensor_json(result, request, index);
  for (const auto& [key, value] : tensor.items()) line[key] = value;
  return line.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace loupe::check
