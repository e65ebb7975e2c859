#include "counters/profile.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <new>
#include <unordered_map>

#include "core/gzip.hpp"
#include "core/mapped_file.hpp"
#include "counters/csv.hpp"
#include "loupe/error.hpp"

namespace loupe::counters {

uint32_t Profile::intern_key(std::string_view section, std::string_view name) {
  scratch_.assign(section);
  scratch_.push_back('\x1f');
  scratch_.append(name);
  auto found = key_index_.find(scratch_);
  if (found != key_index_.end()) return found->second;
  const auto index = static_cast<uint32_t>(keys.size());
  keys.push_back({std::string(section), std::string(name)});
  key_index_.emplace(scratch_, index);
  return index;
}

uint32_t Profile::intern_unit(std::string_view unit) {
  for (size_t index = 0; index < units.size(); ++index) {
    if (units[index] == unit) return static_cast<uint32_t>(index);
  }
  units.emplace_back(unit);
  return static_cast<uint32_t>(units.size() - 1);
}

std::optional<uint32_t> Profile::key_of(std::string_view section, std::string_view name) const {
  std::string composite(section);
  composite.push_back('\x1f');
  composite.append(name);
  auto found = key_index_.find(composite);
  if (found == key_index_.end()) return std::nullopt;
  return found->second;
}

MetricView Profile::view(const Metric& metric) const {
  MetricView view;
  view.section = keys[metric.key].section;
  view.name = keys[metric.key].name;
  view.unit = units[metric.unit];
  view.value = metric.value;
  if (metric.text != Metric::kNoText) view.text = texts[metric.text];
  return view;
}

std::optional<MetricView> Profile::find(const Launch& launch, std::string_view section,
                                        std::string_view name) const {
  const std::optional<uint32_t> key = key_of(section, name);
  if (!key) return std::nullopt;
  for (const Metric& metric : launch.metrics) {
    if (metric.key == *key) return view(metric);
  }
  return std::nullopt;
}

namespace {

// Columns that describe the launch rather than measure it, on either page.
constexpr std::array<std::string_view, 13> kLaunchColumns = {
    "ID",     "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time",  "Context",
    "Stream", "Block Size", "Grid Size",    "Device",    "CC",          "Function Name"};

bool is_launch_column(std::string_view name) {
  return std::find(kLaunchColumns.begin(), kLaunchColumns.end(), name) != kLaunchColumns.end();
}

std::optional<int64_t> parse_id(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

struct Columns {
  std::vector<std::string> names;
  int id = -1, kernel = -1, block = -1, grid = -1, device = -1, cc = -1, process_id = -1,
      process_name = -1, stream = -1;
  // Details page.
  int section = -1, metric_name = -1, metric_unit = -1, metric_value = -1;
  int rule_name = -1, rule_type = -1, rule_description = -1, speedup_type = -1, speedup = -1;
  bool details = false;
  std::vector<int> metric_columns;  // raw page

  int index(std::string_view name) const {
    for (size_t position = 0; position < names.size(); ++position) {
      if (names[position] == name) return static_cast<int>(position);
    }
    return -1;
  }
};

// A unit as printed → its scale and the normalised unit's index in the profile, cached: a file
// holds a few dozen distinct units.
struct CachedUnit {
  std::string printed;
  UnitScale scale;
  uint32_t index = 0;
};

class UnitCache {
 public:
  const CachedUnit& get(std::string_view unit, Profile& profile) {
    for (const CachedUnit& entry : entries_) {
      if (entry.printed == unit) return entry;
    }
    CachedUnit entry{std::string(unit), normalise_unit(unit), 0};
    entry.index = profile.intern_unit(entry.scale.unit);
    entries_.push_back(std::move(entry));
    return entries_.back();
  }

 private:
  std::vector<CachedUnit> entries_;
};

class Reader {
 public:
  Reader(std::string_view text, const std::string& source, Profile& profile, StatsRegistry& stats)
      : scanner_(text, source), source_(source), profile_(profile), stats_(stats) {
    for (size_t position = 0; position < profile_.launches.size(); ++position)
      index_[profile_.launches[position].id] = position;
  }

  void read() {
    std::vector<std::string_view> split;
    while (true) {
      const CsvScanner::Kind kind = scanner_.next();
      if (kind == CsvScanner::Kind::kEnd) break;
      if (kind == CsvScanner::Kind::kLine) {
        const std::string_view line = scanner_.line_text();
        if (starts_with(line, "==")) {
          stats_.add(Stat::counters_preamble_line);
          if (starts_with(line, "==ERROR==") && ncu_errors_.size() < 3)
            ncu_errors_.emplace_back(line);
          continue;
        }
        // An export re-saved without quotes still reads; anything else is the program's output.
        if (scanner_.split_unquoted(line, split) && take_record(split)) continue;
        stats_.add(Stat::counters_foreign_line);
        continue;
      }
      if (!take_record(scanner_.fields())) {
        // A quoted line that is neither header nor row: a short or long row.
        stats_.add(header_.names.empty() ? Stat::counters_foreign_line
                                         : Stat::counters_row_malformed);
      }
    }
    if (header_.names.empty()) {
      throw Error(ErrorCode::kInput,
                  source_ + ": no ncu CSV header (a row starting with \"ID\") in " +
                      std::to_string(scanner_.line()) + " line(s)" + quoted_errors(),
                  "export with `ncu --csv` (details page) or `ncu --csv --page raw`");
    }
    if (header_.details) {
      profile_.has_details = true;
    } else {
      profile_.has_raw = true;
    }
    if (rows_ == 0) {
      throw Error(
          ErrorCode::kInput,
          source_ + ": the ncu CSV header is there but no launch row follows" + quoted_errors(),
          "check that the kernel filter matched a launch and that ncu could read the "
          "counters (ERR_NVGPUCTRPERM means counter access is off)");
    }
  }

 private:
  std::string quoted_errors() const {
    std::string text;
    for (const std::string& error : ncu_errors_) text += "; ncu said: " + error;
    return text;
  }

  // Returns false when the record is neither the header nor a usable row.
  bool take_record(const std::vector<std::string_view>& fields) {
    if (header_.names.empty()) {
      if (fields.empty() || fields[0] != "ID") return false;
      set_header(fields);
      return true;
    }
    if (fields.size() == header_.names.size() && fields[0] == "ID") {
      stats_.add(Stat::counters_header_repeated);
      return true;
    }
    if (!header_.details && !units_read_) {
      read_units(fields);
      return true;
    }
    return header_.details ? details_row(fields) : raw_row(fields);
  }

  void set_header(const std::vector<std::string_view>& fields) {
    for (std::string_view field : fields) header_.names.emplace_back(field);
    Columns& c = header_;
    c.id = 0;
    c.kernel = c.index("Kernel Name");
    c.block = c.index("Block Size");
    c.grid = c.index("Grid Size");
    c.device = c.index("Device");
    c.cc = c.index("CC");
    c.process_id = c.index("Process ID");
    c.process_name = c.index("Process Name");
    c.stream = c.index("Stream");
    c.section = c.index("Section Name");
    c.metric_name = c.index("Metric Name");
    c.metric_unit = c.index("Metric Unit");
    c.metric_value = c.index("Metric Value");
    c.rule_name = c.index("Rule Name");
    c.rule_type = c.index("Rule Type");
    c.rule_description = c.index("Rule Description");
    c.speedup_type = c.index("Estimated Speedup Type");
    c.speedup = c.index("Estimated Speedup");
    if (c.kernel < 0) {
      throw Error(ErrorCode::kInput,
                  source_ + ":" + std::to_string(scanner_.line()) +
                      ": the ncu header has no \"Kernel Name\" column",
                  "export with `ncu --csv` or `ncu --csv --page raw`");
    }
    c.details = c.metric_name >= 0 || c.metric_value >= 0;
    if (c.details) {
      for (auto [column, name] : {std::pair{c.section, "Section Name"},
                                  {c.metric_name, "Metric Name"},
                                  {c.metric_unit, "Metric Unit"},
                                  {c.metric_value, "Metric Value"}}) {
        if (column < 0) {
          throw Error(ErrorCode::kInput,
                      source_ + ":" + std::to_string(scanner_.line()) +
                          ": a details-page header without the \"" + name + "\" column",
                      "export with `ncu --csv --page details`, unedited");
        }
      }
      // The rule columns close the row; rows that stop before them lose nothing.
      required_fields_ = static_cast<size_t>(
          std::max({c.kernel, c.section, c.metric_name, c.metric_unit, c.metric_value}) + 1);
    } else {
      for (size_t column = 0; column < c.names.size(); ++column) {
        if (!is_launch_column(c.names[column]))
          c.metric_columns.push_back(static_cast<int>(column));
      }
      required_fields_ = c.names.size();
    }
  }

  void read_units(const std::vector<std::string_view>& fields) {
    if (fields.size() != header_.names.size() || !fields[0].empty()) {
      throw Error(ErrorCode::kInput,
                  source_ + ":" + std::to_string(scanner_.line()) +
                      ": expected the units row of a --page raw export (its ID field empty, " +
                      std::to_string(header_.names.size()) + " fields), found " +
                      std::to_string(fields.size()) + " field(s) starting '" +
                      std::string(fields.empty() ? "" : fields[0]) + "'",
                  "export with `ncu --csv --page raw`, unedited");
    }
    for (std::string_view unit : fields) units_.emplace_back(unit);
    for (int column : header_.metric_columns)
      column_keys_.push_back(profile_.intern_key({}, header_.names[column]));
    units_read_ = true;
  }

  std::string_view field(const std::vector<std::string_view>& fields, int column) const {
    if (column < 0 || static_cast<size_t>(column) >= fields.size()) return {};
    return fields[column];
  }

  // The launch for this row, created on first sight; nullptr when the row is dropped.
  Launch* launch_for(const std::vector<std::string_view>& fields) {
    const std::optional<int64_t> id = parse_id(fields[0]);
    if (!id) {
      stats_.add(Stat::counters_row_malformed);
      return nullptr;
    }
    const std::string_view kernel = field(fields, header_.kernel);
    if (cached_ != nullptr && cached_->id == *id && cached_->kernel == kernel) return cached_;
    auto found = index_.find(*id);
    if (found != index_.end()) {
      Launch& launch = profile_.launches[found->second];
      if (launch.kernel != kernel) {
        stats_.add(Stat::counters_launch_conflict);
        return nullptr;
      }
      cached_ = &launch;
      return cached_;
    }
    Launch launch;
    launch.id = *id;
    launch.kernel = std::string(kernel);
    launch.block = std::string(field(fields, header_.block));
    launch.grid = std::string(field(fields, header_.grid));
    launch.device = std::string(field(fields, header_.device));
    launch.compute_capability = std::string(field(fields, header_.cc));
    launch.process = std::string(field(fields, header_.process_id));
    const std::string_view process_name = field(fields, header_.process_name);
    if (!process_name.empty()) launch.process += " " + std::string(process_name);
    launch.stream = std::string(field(fields, header_.stream));
    launch.file = source_ + ":" + std::to_string(scanner_.line());
    index_[*id] = profile_.launches.size();
    profile_.launches.push_back(std::move(launch));
    cached_ = &profile_.launches.back();
    return cached_;
  }

  // Adds one value to `launch`; a missing value is left out and counted.
  void add_value(Launch& launch, uint32_t key, std::string_view unit_text,
                 std::string_view value_text) {
    if (value_text.empty() || value_text == "n/a" || value_text == "N/A" ||
        value_text == "no data") {
      stats_.add(Stat::counters_value_missing);
      return;
    }
    const CachedUnit& unit = units_cache_.get(unit_text, profile_);
    if (!unit.scale.known) stats_.add(Stat::counters_unit_unknown);
    Metric metric;
    metric.key = key;
    metric.unit = unit.index;
    if (const std::optional<double> number = parse_number(value_text)) {
      metric.value = *number * unit.scale.factor;
    } else {
      // Text with no unit is a setting ("CachePreferNone"); with a unit it was meant as a number.
      if (!unit_text.empty()) stats_.add(Stat::counters_value_not_number);
      metric.text = static_cast<uint32_t>(profile_.texts.size());
      profile_.texts.emplace_back(value_text);
    }
    launch.metrics.push_back(metric);
  }

  bool details_row(const std::vector<std::string_view>& fields) {
    if (fields.size() < required_fields_ || fields.size() > header_.names.size()) return false;
    Launch* launch = launch_for(fields);
    ++rows_;
    if (launch == nullptr) return true;
    const std::string_view metric_name = field(fields, header_.metric_name);
    if (!metric_name.empty()) {
      add_value(*launch, profile_.intern_key(field(fields, header_.section), metric_name),
                field(fields, header_.metric_unit), field(fields, header_.metric_value));
    }
    const std::string_view rule_name = field(fields, header_.rule_name);
    if (!rule_name.empty()) {
      RuleResult rule;
      rule.section = std::string(field(fields, header_.section));
      rule.name = std::string(rule_name);
      rule.type = std::string(field(fields, header_.rule_type));
      rule.description = std::string(field(fields, header_.rule_description));
      rule.speedup_type = std::string(field(fields, header_.speedup_type));
      if (auto speedup = parse_number(field(fields, header_.speedup))) rule.speedup_pct = *speedup;
      launch->rules.push_back(std::move(rule));
    }
    return true;
  }

  bool raw_row(const std::vector<std::string_view>& fields) {
    if (fields.size() != header_.names.size()) return false;
    Launch* launch = launch_for(fields);
    ++rows_;
    if (launch == nullptr) return true;
    launch->metrics.reserve(launch->metrics.size() + header_.metric_columns.size());
    for (size_t index = 0; index < header_.metric_columns.size(); ++index) {
      const int column = header_.metric_columns[index];
      add_value(*launch, column_keys_[index], units_[column], fields[column]);
    }
    return true;
  }

  CsvScanner scanner_;
  const std::string& source_;
  Profile& profile_;
  StatsRegistry& stats_;
  Columns header_;
  size_t required_fields_ = 0;
  bool units_read_ = false;
  std::vector<std::string> units_;
  std::vector<uint32_t> column_keys_;  // raw page: each metric column's key
  UnitCache units_cache_;
  std::unordered_map<int64_t, size_t> index_;
  Launch* cached_ = nullptr;
  int64_t rows_ = 0;
  std::vector<std::string> ncu_errors_;
};

}  // namespace

void parse_ncu_csv(std::string_view text, const std::string& source, Profile& profile,
                   StatsRegistry& stats) {
  profile.files.push_back(source);
  Reader reader(text, source, profile, stats);
  reader.read();
  std::stable_sort(profile.launches.begin(), profile.launches.end(),
                   [](const Launch& a, const Launch& b) { return a.id < b.id; });
}

void read_ncu_csv_file(const std::filesystem::path& file, Profile& profile, StatsRegistry& stats) {
  const auto mapped = MappedFile::open(file);
  const std::string_view bytes(reinterpret_cast<const char*>(mapped->data()), mapped->size());
  try {
    if (is_gzip(bytes)) {
      parse_ncu_csv(inflate_gzip(bytes, file.string(), TruncatedGzip::kError), file.string(),
                    profile, stats);
    } else {
      parse_ncu_csv(bytes, file.string(), profile, stats);
    }
  } catch (const std::bad_alloc&) {
    throw Error(
        ErrorCode::kInput,
        file.string() + ": the ncu export needs more memory than the process could allocate",
        "read fewer or smaller exports at once; a gzip file is inflated under "
        "--max-inflated and --max-inflate-ratio");
  }
}

Profile read_ncu_csv(const std::vector<std::filesystem::path>& files, StatsRegistry& stats) {
  Profile profile;
  for (const std::filesystem::path& file : files) read_ncu_csv_file(file, profile, stats);
  return profile;
}

}  // namespace loupe::counters
