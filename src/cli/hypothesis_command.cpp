// `loupe hypothesis add|link|decide|review|list|show`: claims, the runs that test them, and the
// decisions, with the objective's review boundary enforced (src/hypothesis does the work).
// `review --approve` is the only way to approve a needs-review decision: no MCP tool can.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.hpp"
#include "core/home.hpp"
#include "core/json.hpp"
#include "hypothesis/hypothesis.hpp"
#include "ledger/ledger.hpp"
#include "skeleton/library.hpp"

namespace loupe::cli {
namespace {

struct HypothesisOptions {
  std::string ledger;
  std::string home;
  bool json = false;
  std::string text;
  std::string skeleton;
  std::string skeletons;
  int64_t id = 0;
  std::string run;
  std::string role;
  std::string decision;
  std::string why;
  std::string by;
  std::string repo;
  bool approve = false;
};

std::filesystem::path ledger_path(const HypothesisOptions& options) {
  if (!options.ledger.empty()) return options.ledger;
  std::optional<std::filesystem::path> home;
  if (!options.home.empty()) home = options.home;
  return resolve_home(home, std::filesystem::current_path()) / "ledger.sqlite";
}

ledger::Ledger open_existing(const HypothesisOptions& options) {
  const auto path = ledger_path(options);
  if (!std::filesystem::exists(path)) {
    throw Error(ErrorCode::kUsage, "no ledger at " + path.string(),
                "`loupe run OBJECTIVE` records runs there; pass --ledger FILE or --home DIR to "
                "use another");
  }
  return ledger::Ledger::open(path);
}

void add_location_options(CLI::App* command, HypothesisOptions& options) {
  command->add_option("--ledger", options.ledger, "the ledger file (default .loupe/ledger.sqlite)");
  command->add_option("--home", options.home, "loupe's folder (default .loupe/ at the git root)");
  command->add_flag("--json", options.json, "print one JSON envelope");
}

void add_id_option(CLI::App* command, HypothesisOptions& options) {
  command->add_option("H", options.id, "the hypothesis id (see `loupe hypothesis list`)")
      ->required()
      ->check(CLI::PositiveNumber);
}

void print_hypothesis_envelope(Json data) {
  Envelope envelope;
  envelope.kind = "hypothesis";
  envelope.verdict = Verdict::kNone;
  envelope.data = std::move(data);
  std::cout << render_envelope(envelope) << "\n";
}

ledger::Hypothesis get(const ledger::Ledger& ledger, int64_t id) {
  auto hypothesis = ledger.find_hypothesis(id);
  if (!hypothesis) {
    throw Error(ErrorCode::kUsage,
                "ledger " + ledger.file().string() + ": no hypothesis " + std::to_string(id),
                "`loupe hypothesis list` shows the recorded hypotheses");
  }
  return *std::move(hypothesis);
}

std::string default_who() {
  const char* user = std::getenv("USER");
  return user != nullptr && *user != '\0' ? user : "unknown";
}

void print_hypothesis(const ledger::Hypothesis& hypothesis) {
  std::cout << "hypothesis " << hypothesis.id << " ["
            << ledger::hypothesis_status_name(hypothesis.status) << "] " << hypothesis.text << "\n";
  if (hypothesis.skeleton_id) std::cout << "  skeleton " << *hypothesis.skeleton_id << "\n";
  std::cout << "  created " << hypothesis.created_at << "\n";
  for (const auto& link : hypothesis.links) {
    std::cout << "  " << ledger::link_role_name(link.role) << " run " << link.run_id << "\n";
  }
  for (const auto& decision : hypothesis.decisions) {
    std::cout << "  decision " << decision.id << ": " << ledger::decision_name(decision.decision)
              << " by " << decision.who << " at " << decision.decided_at << ": " << decision.why
              << "\n";
    for (const auto& trigger : decision.triggers) {
      std::cout << "    review " << trigger.category << ": " << trigger.reason << "\n";
    }
    if (decision.approval) {
      std::cout << "    approved by " << decision.approval->by << " at "
                << decision.approval->approved_at << "\n";
    }
  }
}

void add_add(CLI::App* parent, CommandResult& result) {
  auto options = std::make_shared<HypothesisOptions>();
  CLI::App* command = parent->add_subcommand("add", "Record a claim to test");
  command->add_option("TEXT", options->text, "the claim, e.g. \"3xTF32 removes the CP drift\"")
      ->required();
  command->add_option("--skeleton", options->skeleton,
                      "the skeleton it applies (see `loupe skeleton match RUN`)");
  command->add_option("--skeletons", options->skeletons,
                      "the folder of skeleton files (default $LOUPE_SKELETONS, else skeletons/)");
  add_location_options(command, *options);
  command->callback([options, &result] {
    result.kind = "hypothesis";
    std::optional<std::string> skeleton_id;
    if (!options->skeleton.empty()) {
      const auto dir = options->skeletons.empty() ? skeleton::default_library_dir()
                                                  : std::filesystem::path(options->skeletons);
      const auto library = skeleton::load_library(dir);
      if (skeleton::find_skeleton(library, options->skeleton) == nullptr) {
        std::string ids;
        for (const auto& entry : library) ids += (ids.empty() ? "" : ", ") + entry.id;
        throw Error(ErrorCode::kUsage,
                    "--skeleton: no skeleton '" + options->skeleton + "' in " + dir.string(),
                    "known skeletons: " + ids);
      }
      skeleton_id = options->skeleton;
    }
    ledger::Ledger ledger = ledger::Ledger::open(ledger_path(*options));
    const int64_t id = hypothesis::add(ledger, options->text, skeleton_id);
    if (options->json) {
      print_hypothesis_envelope({{"hypothesis", hypothesis::hypothesis_to_json(get(ledger, id))}});
    } else {
      std::cout << "hypothesis " << id << " recorded; link runs with `loupe hypothesis link " << id
                << " RUN --as baseline|candidate`\n";
    }
  });
}

void add_link(CLI::App* parent, CommandResult& result) {
  auto options = std::make_shared<HypothesisOptions>();
  CLI::App* command = parent->add_subcommand("link", "Link a recorded run to a hypothesis");
  add_id_option(command, *options);
  command->add_option("RUN", options->run, "the run id (see `loupe ledger list`)")->required();
  command->add_option("--as", options->role, "the run's role: baseline or candidate")
      ->required()
      ->check(CLI::IsMember({"baseline", "candidate"}));
  add_location_options(command, *options);
  command->callback([options, &result] {
    result.kind = "hypothesis";
    ledger::Ledger ledger = open_existing(*options);
    hypothesis::link(ledger, options->id, options->run, ledger::parse_link_role(options->role));
    if (options->json) {
      print_hypothesis_envelope(
          {{"hypothesis", hypothesis::hypothesis_to_json(get(ledger, options->id))}});
    } else {
      std::cout << "run " << options->run << " linked to hypothesis " << options->id << " as "
                << options->role << "\n";
    }
  });
}

void add_decide(CLI::App* parent, CommandResult& result) {
  auto options = std::make_shared<HypothesisOptions>();
  CLI::App* command = parent->add_subcommand(
      "decide",
      "Retain, revise or reject; retain needs a candidate run that passed every gate, and a change "
      "that crosses the objective's review boundary is recorded as needs-review");
  add_id_option(command, *options);
  command->add_option("DECISION", options->decision, "retain, revise or reject")
      ->required()
      ->check(CLI::IsMember({"retain", "revise", "reject"}));
  command->add_option("--why", options->why, "the reason, citing what the runs showed")->required();
  command->add_option("--by", options->by, "who decides (default $USER)");
  command->add_option("--repo", options->repo,
                      "the git repository of the runs' commits (default the working directory)");
  add_location_options(command, *options);
  command->callback([options, &result] {
    result.kind = "hypothesis";
    ledger::Ledger ledger = open_existing(*options);
    const std::filesystem::path repo = options->repo.empty() ? std::filesystem::current_path()
                                                             : std::filesystem::path(options->repo);
    const auto outcome =
        hypothesis::decide(ledger, options->id, ledger::parse_decision(options->decision),
                           options->why, options->by.empty() ? default_who() : options->by, repo);
    if (options->json) {
      Json triggers = Json::array();
      for (const auto& trigger : outcome.triggers) {
        triggers.push_back({{"category", trigger.category}, {"reason", trigger.reason}});
      }
      print_hypothesis_envelope(
          {{"recorded", ledger::decision_name(outcome.recorded)},
           {"decision", outcome.decision_id},
           {"triggers", triggers},
           {"hypothesis", hypothesis::hypothesis_to_json(get(ledger, options->id))}});
      return;
    }
    std::cout << "hypothesis " << options->id << ": recorded "
              << ledger::decision_name(outcome.recorded) << "\n";
    for (const auto& trigger : outcome.triggers) {
      std::cout << "  review " << trigger.category << ": " << trigger.reason << "\n";
    }
    if (outcome.recorded == ledger::DecisionKind::kNeedsReview) {
      std::cout << "a person approves it with `loupe hypothesis review " << options->id
                << " --approve --by NAME`\n";
    }
  });
}

void add_review(CLI::App* parent, CommandResult& result) {
  auto options = std::make_shared<HypothesisOptions>();
  CLI::App* command = parent->add_subcommand(
      "review", "A person's sign-off on a needs-review decision (the CLI only; never over MCP)");
  add_id_option(command, *options);
  command->add_flag("--approve", options->approve, "approve the pending retain")->required();
  command->add_option("--by", options->by, "the name of the person approving")->required();
  add_location_options(command, *options);
  command->callback([options, &result] {
    result.kind = "hypothesis";
    ledger::Ledger ledger = open_existing(*options);
    hypothesis::approve(ledger, options->id, options->by);
    if (options->json) {
      print_hypothesis_envelope(
          {{"hypothesis", hypothesis::hypothesis_to_json(get(ledger, options->id))}});
    } else {
      std::cout << "hypothesis " << options->id << ": approved by " << options->by
                << "; recorded retain\n";
    }
  });
}

void add_hypothesis_list(CLI::App* parent, CommandResult& result) {
  auto options = std::make_shared<HypothesisOptions>();
  CLI::App* command = parent->add_subcommand("list", "Every hypothesis, oldest first");
  add_location_options(command, *options);
  command->callback([options, &result] {
    result.kind = "hypothesis";
    std::vector<ledger::Hypothesis> hypotheses;
    const auto path = ledger_path(*options);
    if (std::filesystem::exists(path))
      hypotheses = ledger::Ledger::open_read_only(path).list_hypotheses();
    if (options->json) {
      Json list = Json::array();
      for (const auto& hypothesis : hypotheses) {
        list.push_back(hypothesis::hypothesis_to_json(hypothesis));
      }
      print_hypothesis_envelope({{"ledger", path.string()}, {"hypotheses", list}});
      return;
    }
    std::cout << hypotheses.size() << " hypotheses in " << path.string() << "\n";
    for (const auto& hypothesis : hypotheses) {
      std::cout << "  " << hypothesis.id << "  ["
                << ledger::hypothesis_status_name(hypothesis.status) << "] " << hypothesis.text
                << "  (" << hypothesis.links.size() << " runs, " << hypothesis.decisions.size()
                << " decisions)\n";
    }
  });
}

void add_hypothesis_show(CLI::App* parent, CommandResult& result) {
  auto options = std::make_shared<HypothesisOptions>();
  CLI::App* command =
      parent->add_subcommand("show", "One hypothesis: its runs, decisions and review triggers");
  add_id_option(command, *options);
  add_location_options(command, *options);
  command->callback([options, &result] {
    result.kind = "hypothesis";
    const ledger::Hypothesis hypothesis =
        get(ledger::Ledger::open_read_only(ledger_path(*options)), options->id);
    if (options->json) {
      print_hypothesis_envelope({{"hypothesis", hypothesis::hypothesis_to_json(hypothesis)}});
    } else {
      print_hypothesis(hypothesis);
    }
  });
}

void add_hypothesis_command(CLI::App& app, CommandResult& result) {
  CLI::App* parent = app.add_subcommand(
      "hypothesis", "Claims, the runs that test them, and decisions under the review boundary");
  parent->require_subcommand(1);
  add_add(parent, result);
  add_link(parent, result);
  add_decide(parent, result);
  add_review(parent, result);
  add_hypothesis_list(parent, result);
  add_hypothesis_show(parent, result);
}

}  // namespace

LOUPE_REGISTER_COMMAND(70, add_hypothesis_command);

}  // namespace loupe::cli
