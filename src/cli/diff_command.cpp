// `loupe diff A B`: compare tensors file by file (src/check/diff.hpp does the work).
#include <iostream>
#include <memory>

#include "check/diff.hpp"
#include "cli/commands.hpp"
#include "loupe/error.hpp"

namespace loupe::cli {
namespace {

struct DiffOptions {
  std::string a;
  std::string b;
  std::string oracle;
  std::string name;
  std::string axes;
  std::string along;
  std::vector<std::string> tolerances;
  bool report_only = false;
  bool json = false;
  std::vector<std::string> dims;
  std::string parallel;
  std::string parallel_b;
};

std::vector<std::string> split_axes(const std::string& text) {
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const size_t end = comma == std::string::npos ? text.size() : comma;
    std::string name = text.substr(start, end - start);
    if (name.empty()) {
      throw Error(
          ErrorCode::kUsage,
          "--axes " + text + ": empty axis name at position " + std::to_string(names.size() + 1),
          "name every axis, e.g. --axes B,T,H,V");
    }
    names.push_back(std::move(name));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return names;
}

void add_diff_command(CLI::App& app, CommandResult& result) {
  auto options = std::make_shared<DiffOptions>();
  CLI::App* diff = app.add_subcommand(
      "diff",
      "Compare tensors (.npy, .safetensors, or directories of them): metrics, the worst "
      "coordinate, the first divergence in order, the error profile along an axis");
  diff->add_option("A", options->a, "candidate: a .npy or .safetensors file, or a directory")
      ->required();
  diff->add_option("B", options->b, "reference: the same kind of input as A")->required();
  diff->add_option("--oracle", options->oracle,
                   "an oracle (e.g. fp64) laid out like B: report A's error relative to B's own");
  diff->add_option("--name", options->name, "compare only this tensor (or file) name");
  diff->add_option("--axes", options->axes, "axis names, comma-separated, e.g. B,T,H,V");
  diff->add_option("--along", options->along,
                   "profile the error along this axis and find the slice holding most of it");
  diff->add_option("--tol", options->tolerances,
                   "METRIC=VALUE bound (repeatable) in place of the per-dtype default "
                   "tolerances (atol + rtol*|B|, docs/formats.md)")
      ->take_first();
  diff->add_flag("--report-only", options->report_only,
                 "print the comparison and exit 0 whatever it shows (no verdict)");
  diff->add_flag("--json", options->json, "print one JSON envelope");
  // Sharded dumps (docs/sharded-diff.md): rank-<r>/ directories put back together by a dims spec.
  diff->add_option("--dims", options->dims,
                   "dims spec of a rank-sharded tensor, e.g. 'b t(cp,zigzag) h(tp) d'; "
                   "NAME=SPEC for one tensor (repeatable); overrides loupe.dims metadata")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  diff->add_option("--parallel", options->parallel,
                   "the run's groups, first varying fastest over rank-<r>/, e.g. tp=2,cp=4; "
                   "overrides loupe.parallel");
  diff->add_option("--parallel-b", options->parallel_b,
                   "B's groups when they differ from A's (default: --parallel)");
  diff->callback([options, &result] {
    result.kind = "diff";
    check::DiffRequest request;
    request.a = options->a;
    request.b = options->b;
    if (!options->oracle.empty()) request.oracle = options->oracle;
    if (!options->name.empty()) request.name = options->name;
    if (!options->axes.empty()) request.axes = split_axes(options->axes);
    if (!options->along.empty()) request.along = options->along;
    for (const auto& text : options->tolerances) request.bounds.push_back(check::parse_bound(text));
    request.report_only = options->report_only;
    request.dims = options->dims;
    if (!options->parallel.empty()) request.parallel = options->parallel;
    if (!options->parallel_b.empty()) request.parallel_b = options->parallel_b;
    const check::DiffResult diff_result = check::run_diff(request);
    if (options->json) {
      std::cout << check::render_diff_json(diff_result, request) << "\n";
    } else {
      std::cout << check::render_diff_summary(diff_result, request);
    }
    result.exit_code = check::diff_exit_code(diff_result, request);
  });
}

}  // namespace

LOUPE_REGISTER_COMMAND(10, add_diff_command);

}  // namespace loupe::cli
