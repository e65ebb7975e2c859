// `loupe diff A B`: compare tensors file by file (src/check/diff.hpp does the work).
#include <iostream>
#include <memory>
#include <optional>
#include <utility>

#include "check/diff.hpp"
#include "check/stats_diff.hpp"
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
  std::optional<double> rtol;
  std::optional<double> atol;
  bool equal_nan = false;
  bool report_only = false;
  bool json = false;
  bool jsonl = false;
  std::string rules;
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
  diff->add_option("--rtol", options->rtol,
                   "relative tolerance of the elementwise rule |A-B| <= atol + rtol*|B| (with "
                   "--atol; default per dtype, torch.testing.assert_close's)");
  diff->add_option("--atol", options->atol,
                   "absolute tolerance of the elementwise rule (with --rtol)");
  diff->add_flag("--equal-nan", options->equal_nan,
                 "NaN against NaN agrees (assert_close's equal_nan); otherwise it is a mismatch");
  diff->add_flag("--report-only", options->report_only,
                 "print the comparison and exit 0 whatever it shows (no verdict)");
  diff->add_flag("--json", options->json, "print one JSON envelope");
  diff->add_flag("--jsonl", options->jsonl,
                 "print one JSON object per tensor as it is compared (flushed), then a summary "
                 "envelope without data.tensors");
  diff->add_option("--rules", options->rules,
                   "TOML file of ordered [[rule]] tables (match = REGEX, when = [\"rel <= "
                   "0.0085\", ...]): the first rule matching a tensor's name decides it; a "
                   "tensor no rule matches exits 2");
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
    if (options->rtol.has_value() != options->atol.has_value()) {
      throw Error(ErrorCode::kUsage,
                  std::string("--") + (options->rtol ? "rtol" : "atol") + " given without --" +
                      (options->rtol ? "atol" : "rtol") + "; expected both or neither",
                  "give both, e.g. --rtol 1.3e-6 --atol 1e-5 (torch.testing.assert_close's rule)");
    }
    for (const auto& [flag, value] :
         {std::pair{"--rtol", options->rtol}, {"--atol", options->atol}}) {
      if (value && !(*value >= 0)) {
        throw Error(
            ErrorCode::kUsage,
            std::string(flag) + " " + check::format_number(*value) + ": expected a number >= 0",
            "tolerances are non-negative, e.g. --rtol 1.3e-6 --atol 1e-5");
      }
    }
    if (options->rtol) request.tolerance = check::Tolerance{*options->atol, *options->rtol};
    request.equal_nan = options->equal_nan;
    request.statistics = options->json || options->jsonl;  // JSON lists every metric
    request.report_only = options->report_only;
    if (options->json && options->jsonl) {
      throw Error(ErrorCode::kUsage, "--json and --jsonl: expected one of them",
                  "--json prints one envelope at the end, --jsonl a line per tensor as it goes");
    }
    if (!options->rules.empty()) {
      if (!request.bounds.empty() || request.tolerance) {
        throw Error(ErrorCode::kUsage,
                    "--rules with --tol/--rtol/--atol: expected one way of deciding",
                    "put the bounds in the rules file (when = [\"max_abs <= 1e-2\"])");
      }
      request.rules = check::read_rules(options->rules);
    }
    if (options->jsonl) {
      request.on_compared = [&request](const check::DiffResult& partial, size_t index) {
        std::cout << check::render_diff_tensor_line(partial, request, index) << "\n" << std::flush;
      };
    }
    request.dims = options->dims;
    if (!options->parallel.empty()) request.parallel = options->parallel;
    if (!options->parallel_b.empty()) request.parallel_b = options->parallel_b;
    // A stats-only dump on either side (loupe-stats.jsonl): compare stats, name the tensor to
    // dump in full next. --jsonl prints the one envelope there: there is nothing heavy to stream.
    if (check::is_stats_dump(request.a) || check::is_stats_dump(request.b)) {
      request.on_compared = nullptr;
      const check::StatsDiffResult stats_result = check::run_stats_diff(request);
      if (options->json || options->jsonl) {
        std::cout << check::render_stats_diff_json(stats_result, request) << "\n";
      } else {
        std::cout << check::render_stats_diff_summary(stats_result, request);
      }
      result.exit_code = check::stats_diff_exit_code(stats_result, request);
      return;
    }
    const check::DiffResult diff_result = check::run_diff(request);
    if (options->jsonl) {
      std::cout << check::render_diff_summary_line(diff_result, request) << "\n";
    } else if (options->json) {
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
