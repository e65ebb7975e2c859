#include "counters/envelope.hpp"

#include <filesystem>
#include <sstream>

#include "counters/ncu.hpp"
#include "loupe/error.hpp"

namespace loupe::counters {

namespace fs = std::filesystem;

Profile load_profile(const std::vector<std::string>& inputs, StatsRegistry& stats) {
  Profile profile;
  for (const std::string& input : inputs) {
    std::stringstream parts(input);
    std::string part;
    while (std::getline(parts, part, ',')) {
      if (part.empty()) continue;
      const fs::path file(part);
      if (file.extension() != ".ncu-rep") {
        read_ncu_csv_file(file, profile, stats);
        continue;
      }
      if (!fs::exists(file)) {
        throw Error(ErrorCode::kInput, file.string() + ": cannot open: no such file",
                    "give an ncu CSV export or a .ncu-rep report");
      }
      const Pages pages = import_report(find_ncu(), file);
      parse_ncu_csv(pages.details, file.string() + " (details page)", profile, stats);
      parse_ncu_csv(pages.raw, file.string() + " (raw page)", profile, stats);
    }
  }
  if (profile.files.empty()) {
    throw Error(ErrorCode::kUsage, "no input file", "give ncu CSV exports or .ncu-rep reports");
  }
  return profile;
}

Json group_to_json(const KernelGroup& group) {
  Json json = Json::object();
  json["kernel"] = group.kernel;
  json["name"] = group.short_name;
  json["block"] = group.block;
  json["grid"] = group.grid;
  json["launches"] = group.launches.size();
  Json medians = Json::object();
  for (size_t q = 0; q < kQuantityCount; ++q) {
    if (group.medians[q])
      medians[std::string(quantity_key(static_cast<Quantity>(q)))] =
          number_to_json(*group.medians[q]);
  }
  json["medians"] = medians;
  json["instructions_derived"] = group.instructions_derived;
  Json stalls = Json::object();
  for (const auto& [reason, cycles] : group.stalls) stalls[reason] = number_to_json(cycles);
  json["stalls"] = stalls;
  return json;
}

Envelope analysis_envelope(const Profile& profile, const Analysis& analysis,
                           const StatsRegistry& stats) {
  Envelope envelope;
  envelope.kind = "counters";
  envelope.verdict = Verdict::kNone;
  envelope.findings = analysis.findings;
  envelope.stats = stats;
  envelope.truncated = analysis.findings_omitted > 0;
  Json& data = envelope.data;
  data["files"] = profile.files;
  data["pages"] = {{"details", profile.has_details}, {"raw", profile.has_raw}};
  data["launches"] = profile.launches.size();
  Json kernels = Json::array();
  for (const KernelGroup& group : analysis.groups) kernels.push_back(group_to_json(group));
  data["kernels"] = kernels;
  data["findings_omitted"] = analysis.findings_omitted;
  if (analysis.findings_omitted > 0) {
    data["truncation"] = std::to_string(analysis.findings_omitted) +
                         " less severe finding(s) left out; detail shows all, a kernel regex "
                         "narrows";
  }
  return envelope;
}

Envelope comparison_envelope(const DiffSide& a, const DiffSide& b, const Comparison& comparison,
                             const StatsRegistry& stats) {
  Envelope envelope;
  envelope.kind = "counters.diff";
  envelope.verdict = Verdict::kNone;
  envelope.findings = comparison.findings;
  envelope.stats = stats;
  Json rows = Json::array();
  for (const DiffRow& row : comparison.rows) {
    Json entry = {{"metric", row.metric},
                  {"a", row.a ? number_to_json(*row.a) : Json(nullptr)},
                  {"b", row.b ? number_to_json(*row.b) : Json(nullptr)}};
    if (row.a && row.b && *row.a != 0) entry["ratio_b_a"] = number_to_json(*row.b / *row.a);
    rows.push_back(entry);
  }
  envelope.data["a"] = group_to_json(a.group);
  envelope.data["b"] = group_to_json(b.group);
  envelope.data["rows"] = rows;
  return envelope;
}

KernelGroup pick_group(const Profile& profile, const std::string& pattern, std::string_view option,
                       std::string_view side) {
  std::optional<Pattern> filter;
  if (!pattern.empty()) filter = Pattern::compile(pattern, option);
  std::vector<KernelGroup> groups = group_launches(profile, filter);
  if (groups.size() == 1) return std::move(groups.front());
  std::string names;
  const std::vector<KernelGroup> all = group_launches(profile);
  for (size_t index = 0; index < all.size() && index < 8; ++index)
    names += (index ? "; " : "") + all[index].label();
  if (all.size() > 8) names += "; ...";
  std::string what = groups.empty()
                         ? "no kernel configuration matches"
                         : std::to_string(groups.size()) + " kernel configurations match";
  if (!pattern.empty()) what += " " + std::string(option) + " '" + pattern + "'";
  throw Error(ErrorCode::kUsage, std::string(side) + ": " + what + "; the input holds: " + names,
              "choose one with " + std::string(option) +
                  " REGEX, searched in 'KERNEL block (x, y, z) grid (x, y, z)': e.g. "
                  "'tiled.*grid .4, 32'");
}

}  // namespace loupe::counters
