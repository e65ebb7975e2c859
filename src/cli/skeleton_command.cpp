// `loupe skeleton list|show|match`: the optimisation skeleton library (src/skeleton does the work).
#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/commands.hpp"
#include "core/home.hpp"
#include "core/json.hpp"
#include "ledger/ledger.hpp"
#include "skeleton/library.hpp"

namespace loupe::cli {
namespace {

constexpr size_t kMaxReasonsShown = 6;

struct SkeletonOptions {
  std::string skeletons;
  std::string ledger;
  std::string home;
  bool json = false;
  bool detail = false;
  int64_t limit = 10;
  std::string id;
  std::string run;
};

std::filesystem::path library_dir(const SkeletonOptions& options) {
  return options.skeletons.empty() ? skeleton::default_library_dir()
                                   : std::filesystem::path(options.skeletons);
}

void print_skeleton_envelope(Json data, bool truncated = false) {
  Envelope envelope;
  envelope.kind = "skeleton";
  envelope.verdict = Verdict::kNone;
  envelope.data = std::move(data);
  envelope.truncated = truncated;
  std::cout << render_envelope(envelope) << "\n";
}

void add_common_options(CLI::App* command, SkeletonOptions& options) {
  command->add_option("--skeletons", options.skeletons,
                      "the folder of skeleton files (default $LOUPE_SKELETONS, else skeletons/)");
  command->add_flag("--json", options.json, "print one JSON envelope");
}

std::string indent_prose(const std::string& text) {
  std::string out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() && out.empty()) continue;
    out += "  " + line + "\n";
  }
  return out;
}

void add_skeleton_list(CLI::App* parent, CommandResult& result) {
  auto options = std::make_shared<SkeletonOptions>();
  CLI::App* list = parent->add_subcommand("list", "Every skeleton: id, evidence strength, title");
  add_common_options(list, *options);
  list->callback([options, &result] {
    result.kind = "skeleton";
    const auto dir = library_dir(*options);
    const auto library = skeleton::load_library(dir);
    if (options->json) {
      Json skeletons = Json::array();
      for (const auto& entry : library)
        skeletons.push_back(skeleton::skeleton_to_json(entry, false));
      print_skeleton_envelope({{"library", dir.string()}, {"skeletons", skeletons}});
      return;
    }
    std::cout << library.size() << " skeletons in " << dir.string() << "\n";
    for (const auto& entry : library) {
      std::cout << "  " << std::left << std::setw(36) << entry.id << std::setw(16)
                << skeleton::evidence_strength_name(entry.strength) << entry.title << "\n";
    }
  });
}

void add_skeleton_show(CLI::App* parent, CommandResult& result) {
  auto options = std::make_shared<SkeletonOptions>();
  CLI::App* show = parent->add_subcommand(
      "show", "One skeleton: when it applies, what it changes, what it costs, the evidence");
  show->add_option("ID", options->id, "the skeleton id (see `loupe skeleton list`)")->required();
  add_common_options(show, *options);
  show->callback([options, &result] {
    result.kind = "skeleton";
    const auto library = skeleton::load_library(library_dir(*options));
    const skeleton::Skeleton* found = skeleton::find_skeleton(library, options->id);
    if (found == nullptr) {
      std::string ids;
      for (const auto& entry : library) ids += (ids.empty() ? "" : ", ") + entry.id;
      throw Error(ErrorCode::kUsage,
                  "no skeleton '" + options->id + "' in " + library_dir(*options).string(),
                  "known skeletons: " + ids);
    }
    if (options->json) {
      print_skeleton_envelope({{"skeleton", skeleton::skeleton_to_json(*found, true)}});
      return;
    }
    const auto& s = *found;
    std::cout << s.id << ": " << s.title << "\n"
              << "file " << s.file.string() << "\n\napplies when\n  "
              << skeleton::condition_to_string(s.condition) << "\n\ntransformation\n"
              << indent_prose(s.transformation);
    for (const auto& pointer : s.code) {
      std::cout << "  -> " << pointer.path << (pointer.symbol.empty() ? "" : " " + pointer.symbol)
                << "\n";
    }
    std::cout << "\nconstraints\n  registers: " << s.constraints.registers
              << "\n  shared memory: " << s.constraints.shared_memory
              << "\n  parallelism: " << s.constraints.parallelism
              << "\n  precision: " << s.constraints.precision << "\n\nvalidation\n";
    for (const auto& probe : s.validation.probes) std::cout << "  probe " << probe << "\n";
    for (const auto& gate : s.validation.gates) std::cout << "  gate  " << gate << "\n";
    std::cout << indent_prose(s.validation.how) << "\nevidence ("
              << skeleton::evidence_strength_name(s.strength) << ")\n";
    for (const auto& item : s.evidence) {
      std::cout << "  " << item.source << ": " << item.claim << "\n";
    }
  });
}

void add_match(CLI::App* parent, CommandResult& result) {
  auto options = std::make_shared<SkeletonOptions>();
  CLI::App* match = parent->add_subcommand(
      "match", "The skeletons whose conditions hold for a run's findings, best first, and why");
  match->add_option("RUN", options->run, "the run id (see `loupe ledger list`)")->required();
  match->add_option("--ledger", options->ledger, "the ledger file (default .loupe/ledger.sqlite)");
  match->add_option("--home", options->home, "loupe's folder (default .loupe/ at the git root)");
  match->add_option("--limit", options->limit, "matches shown (default 10)")
      ->check(CLI::PositiveNumber);
  add_common_options(match, *options);
  match->callback([options, &result] {
    result.kind = "skeleton";
    std::filesystem::path path = options->ledger;
    if (path.empty()) {
      std::optional<std::filesystem::path> home;
      if (!options->home.empty()) home = options->home;
      path = resolve_home(home, std::filesystem::current_path()) / "ledger.sqlite";
    }
    if (!std::filesystem::exists(path)) {
      throw Error(ErrorCode::kUsage, "no ledger at " + path.string(),
                  "`loupe run OBJECTIVE` records runs there; pass --ledger FILE or --home DIR");
    }
    const ledger::RunRecord run = ledger::Ledger::open_read_only(path).get_run(options->run);
    const auto dir = library_dir(*options);
    const auto library = skeleton::load_library(dir);
    const auto matches = skeleton::match_run(library, run);
    const size_t shown = std::min(matches.size(), static_cast<size_t>(options->limit));
    if (options->json) {
      Json list = Json::array();
      for (size_t index = 0; index < shown; ++index) {
        Json entry = skeleton::match_to_json(matches[index]);
        entry["title"] = skeleton::find_skeleton(library, matches[index].skeleton_id)->title;
        list.push_back(std::move(entry));
      }
      Json data = {{"run", run.id},
                   {"library", dir.string()},
                   {"skeletons", library.size()},
                   {"matched", matches.size()},
                   {"matches", list}};
      if (shown < matches.size()) {
        data["truncation"] = "showing " + std::to_string(shown) + " of " +
                             std::to_string(matches.size()) + " matches; pass --limit N for more";
      }
      print_skeleton_envelope(std::move(data), shown < matches.size());
      return;
    }
    std::cout << "run " << run.id << ": " << matches.size() << " of " << library.size()
              << " skeletons apply\n";
    for (size_t index = 0; index < shown; ++index) {
      const auto& entry = matches[index];
      std::ostringstream score;
      score << std::fixed << std::setprecision(2) << entry.score;
      std::cout << "\n"
                << index + 1 << ". " << entry.skeleton_id << "  (score " << score.str() << ")  "
                << skeleton::find_skeleton(library, entry.skeleton_id)->title << "\n";
      for (size_t reason = 0; reason < entry.reasons.size() && reason < kMaxReasonsShown;
           ++reason) {
        const bool inferred = std::find(entry.inferred.begin(), entry.inferred.end(),
                                        entry.reasons[reason]) != entry.inferred.end();
        // Issue 25: a condition met by a correlation says so.
        std::cout << "   - " << entry.reasons[reason]
                  << (inferred ? "  [inferred: verify before relying on it]" : "") << "\n";
      }
      if (entry.reasons.size() > kMaxReasonsShown) {
        std::cout << "   - ... " << entry.reasons.size() - kMaxReasonsShown << " more (--json)\n";
      }
    }
    if (shown < matches.size()) {
      std::cout << "\n(" << matches.size() - shown << " more; pass --limit N)\n";
    }
    if (!matches.empty()) {
      std::cout << "\n`loupe skeleton show ID` says what to change and how to validate it\n";
    }
  });
}

void add_skeleton_command(CLI::App& app, CommandResult& result) {
  CLI::App* skeleton_app = app.add_subcommand(
      "skeleton", "The optimisation skeleton library: list, show, and match against a run");
  skeleton_app->require_subcommand(1);
  add_skeleton_list(skeleton_app, result);
  add_skeleton_show(skeleton_app, result);
  add_match(skeleton_app, result);
}

}  // namespace

LOUPE_REGISTER_COMMAND(80, add_skeleton_command);

}  // namespace loupe::cli
