// The `counters` tool: Nsight Compute exports as findings (src/counters), one kernel's limits or
// two kernels side by side. Read-only: it never runs ncu on a command (the CLI's `-- CMD` does).
#include "core/json.hpp"
#include "counters/envelope.hpp"
#include "mcp/tools.hpp"

namespace loupe::mcp {
namespace {

std::vector<std::string> resolved(const CallContext& context,
                                  const std::vector<std::string>& files) {
  std::vector<std::string> paths;
  for (const std::string& file : files)
    paths.push_back(resolve_path(context.settings, file).string());
  return paths;
}

std::string quoted_list(const std::vector<std::string>& files) {
  std::string text;
  for (const std::string& file : files) text += " '" + file + "'";
  return text;
}

Json counters_call(const Json& arguments, CallContext& context) {
  const std::vector<std::string> files = resolved(context, strings_argument(arguments, "files"));
  if (files.empty()) {
    throw Error(ErrorCode::kUsage, "counters: argument 'files' is empty",
                "name ncu CSV exports (details and/or raw page, .gz too) or .ncu-rep reports");
  }
  const std::string kernel = string_argument(arguments, "kernel").value_or("");
  const std::vector<std::string> compare_files =
      resolved(context, strings_argument(arguments, "compare_files"));
  const auto compare_kernel = string_argument(arguments, "compare_kernel");
  const bool detail = flag_argument(arguments, "detail");

  StatsRegistry stats;
  const counters::Profile profile = counters::load_profile(files, stats);
  if (!compare_files.empty() || compare_kernel) {
    counters::Profile other;
    if (!compare_files.empty()) other = counters::load_profile(compare_files, stats);
    const counters::Profile& profile_b = compare_files.empty() ? profile : other;
    const counters::DiffSide a{"A", counters::pick_group(profile, kernel, "kernel", "A")};
    const counters::DiffSide b{
        "B", counters::pick_group(profile_b, compare_kernel.value_or(""), "compare_kernel", "B")};
    std::string reproduce = "loupe counters diff" + quoted_list({files.front()});
    if (!compare_files.empty()) reproduce += quoted_list({compare_files.front()});
    if (!kernel.empty()) reproduce += " --kernel-a '" + kernel + "'";
    if (compare_kernel) reproduce += " --kernel-b '" + *compare_kernel + "'";
    return envelope_to_json(
        counters::comparison_envelope(a, b, counters::compare(a, b, reproduce), stats));
  }
  counters::AnalyzeOptions options;
  if (!kernel.empty()) {
    options.kernel_filter = Pattern::compile(kernel, "kernel");
    options.kernel_pattern = kernel;
  }
  for (const std::string& text : strings_argument(arguments, "bytes"))
    options.declared.push_back(counters::parse_declared_bytes(text));
  options.detail = detail;
  if (!detail) options.max_findings = 8;
  options.reproduce =
      "loupe counters" + quoted_list(files) + (kernel.empty() ? "" : " --kernel '" + kernel + "'");
  Json envelope = envelope_to_json(
      counters::analysis_envelope(profile, counters::analyze(profile, options), stats));
  if (!detail) {
    // Concise: each kernel's identity and limits; the findings carry the rest.
    for (Json& group : envelope["data"]["kernels"]) {
      Json medians = Json::object();
      for (const char* key : {"duration_ns", "dram_pct", "l2_pct", "l1_pct", "sm_pct",
                              "occupancy_achieved_pct", "occupancy_theoretical_pct"}) {
        if (group["medians"].contains(key)) medians[key] = group["medians"][key];
      }
      group["medians"] = medians;
      group.erase("stalls");
    }
  }
  return envelope;
}

}  // namespace

void add_counters_tools(std::vector<Tool>& tools) {
  Tool tool;
  tool.name = "counters";
  tool.envelope_kind = "counters";
  tool.annotations = {true, false, true, false};
  tool.description =
      "Nsight Compute exports (CSV, .gz, .ncu-rep) per kernel: binding limit, share of peak, "
      "occupancy, stalls, DRAM bytes, ncu's advice; compare_*: two kernels.";
  tool.params = {
      {"files", ParamType::kStringArray, "exports of one run (details and/or raw page)", true},
      {"kernel", ParamType::kString, "regex on 'NAME block (..) grid (..)'; kernel A"},
      {"bytes", ParamType::kStringArray, "REGEX=BYTES a launch must move"},
      {"compare_files", ParamType::kStringArray, "B's exports"},
      {"compare_kernel", ParamType::kString, "regex choosing kernel B"},
      detail_param("every finding, rule and median")};
  tool.narrow_hint = "choose one kernel with kernel";
  tool.call = counters_call;
  tools.push_back(std::move(tool));
}

}  // namespace loupe::mcp
