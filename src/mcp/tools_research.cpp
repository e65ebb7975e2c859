// Hypotheses and skeletons: the tools an agent uses to say what it believes, tie runs to it,
// decide it, and find validated optimisation moves. They call src/hypothesis and src/skeleton.
// No tool here approves a decision: approval is a person's act, through the CLI only.
#include <algorithm>

#include "hypothesis/hypothesis.hpp"
#include "ledger/ledger.hpp"
#include "mcp/tools.hpp"
#include "skeleton/library.hpp"

namespace loupe::mcp {
namespace {

constexpr int64_t kConciseMatches = 5;

std::filesystem::path library_dir(const ServerSettings& settings, const Json& arguments) {
  if (auto library = string_argument(arguments, "library")) return resolve_path(settings, *library);
  if (settings.skeletons) return *settings.skeletons;
  return skeleton::default_library_dir();
}

ledger::Ledger open_ledger(const ServerSettings& settings, const Json& arguments, bool create,
                           bool writes = true) {
  const auto path = ledger_file(settings, arguments);
  if (!create && !std::filesystem::exists(path)) {
    throw Error(ErrorCode::kUsage, "no ledger at " + path.string(),
                "run_objective records runs there; pass home or ledger to read another");
  }
  // Only tools that record something (create, or an existing ledger they add to) open it for
  // writing.
  return writes ? ledger::Ledger::open(path) : ledger::Ledger::open_read_only(path);
}

ledger::Hypothesis get_hypothesis(const ledger::Ledger& ledger, int64_t id) {
  auto hypothesis = ledger.find_hypothesis(id);
  if (!hypothesis) {
    throw Error(ErrorCode::kUsage,
                "hypothesis " + std::to_string(id) + " is not in " + ledger.file().string(),
                "list_hypotheses shows the recorded ones");
  }
  return *hypothesis;
}

Json envelope_with(const std::string& kind, Json data) {
  Envelope envelope;
  envelope.kind = kind;
  envelope.verdict = Verdict::kNone;
  envelope.data = std::move(data);
  return envelope_to_json(envelope);
}

Json add_hypothesis(const Json& arguments, CallContext& context) {
  const std::string text = *string_argument(arguments, "text");
  if (text.find_first_not_of(" \t\n") == std::string::npos) {
    throw Error(ErrorCode::kUsage, "add_hypothesis: argument 'text' is empty",
                "state the claim to test, e.g. \"3xTF32 merges remove the CP drift\"");
  }
  const auto skeleton_id = string_argument(arguments, "skeleton");
  if (skeleton_id) {
    const auto dir = library_dir(context.settings, arguments);
    const auto library = skeleton::load_library(dir);
    if (skeleton::find_skeleton(library, *skeleton_id) == nullptr) {
      throw Error(ErrorCode::kUsage,
                  "add_hypothesis: no skeleton '" + *skeleton_id + "' in " + dir.string(),
                  "list_skeletons shows the ids");
    }
  }
  ledger::Ledger ledger = open_ledger(context.settings, arguments, true);
  const int64_t id = hypothesis::add(ledger, text, skeleton_id);
  return envelope_with("hypothesis.add",
                       {{"hypothesis", hypothesis::hypothesis_to_json(get_hypothesis(ledger, id))},
                        {"next", "link_run {hypothesis: " + std::to_string(id) +
                                     ", run, role: baseline|candidate}"}});
}

Json link_run(const Json& arguments, CallContext& context) {
  ledger::Ledger ledger = open_ledger(context.settings, arguments, false);
  const int64_t id = *integer_argument(arguments, "hypothesis");
  hypothesis::link(ledger, id, *string_argument(arguments, "run"),
                   ledger::parse_link_role(*string_argument(arguments, "role")));
  return envelope_with(
      "hypothesis.link",
      {{"hypothesis", hypothesis::hypothesis_to_json(get_hypothesis(ledger, id))}});
}

Json decide_hypothesis(const Json& arguments, CallContext& context) {
  ledger::Ledger ledger = open_ledger(context.settings, arguments, false);
  const int64_t id = *integer_argument(arguments, "hypothesis");
  const std::string wanted = *string_argument(arguments, "decision");
  const std::filesystem::path repo =
      context.settings.cwd.empty() ? std::filesystem::current_path() : context.settings.cwd;
  const auto outcome = hypothesis::decide(ledger, id, ledger::parse_decision(wanted),
                                          *string_argument(arguments, "why"),
                                          "mcp:" + context.settings.client_name, repo);
  Json triggers = Json::array();
  for (const auto& trigger : outcome.triggers) {
    triggers.push_back({{"category", trigger.category}, {"reason", trigger.reason}});
  }
  Json data = {{"recorded", std::string(ledger::decision_name(outcome.recorded))},
               {"triggers", std::move(triggers)},
               {"hypothesis", hypothesis::hypothesis_to_json(get_hypothesis(ledger, id))}};
  if (outcome.recorded == ledger::DecisionKind::kNeedsReview) {
    data["review"] =
        "what changed touches the objective's [review] categories: a person must approve it "
        "with `loupe hypothesis review " +
        std::to_string(id) + " --approve --by NAME` (no MCP tool can approve)";
  }
  return envelope_with("hypothesis.decide", std::move(data));
}

Json list_hypotheses(const Json& arguments, CallContext& context) {
  const auto path = ledger_file(context.settings, arguments);
  std::vector<ledger::Hypothesis> hypotheses;
  if (std::filesystem::exists(path)) {
    hypotheses = ledger::Ledger::open_read_only(path).list_hypotheses();
  }
  const auto status = string_argument(arguments, "status");
  const bool detail = flag_argument(arguments, "detail");
  Json list = Json::array();
  for (const auto& hypothesis : hypotheses) {
    if (status && ledger::hypothesis_status_name(hypothesis.status) != *status) continue;
    if (detail) {
      list.push_back(hypothesis::hypothesis_to_json(hypothesis));
      continue;
    }
    list.push_back(
        {{"id", hypothesis.id},
         {"text", hypothesis.text},
         {"skeleton", hypothesis.skeleton_id ? Json(*hypothesis.skeleton_id) : Json(nullptr)},
         {"status", std::string(ledger::hypothesis_status_name(hypothesis.status))},
         {"links", hypothesis.links.size()},
         {"decisions", hypothesis.decisions.size()}});
  }
  return envelope_with("hypothesis.list",
                       {{"hypotheses", std::move(list)}, {"ledger", path.string()}});
}

Json show_hypothesis(const Json& arguments, CallContext& context) {
  const ledger::Ledger ledger = open_ledger(context.settings, arguments, false, false);
  return envelope_with("hypothesis.show",
                       {{"hypothesis", hypothesis::hypothesis_to_json(get_hypothesis(
                                           ledger, *integer_argument(arguments, "hypothesis")))}});
}

Json list_skeletons(const Json& arguments, CallContext& context) {
  const auto dir = library_dir(context.settings, arguments);
  const bool detail = flag_argument(arguments, "detail");
  Json list = Json::array();
  for (const auto& skeleton : skeleton::load_library(dir)) {
    list.push_back(skeleton::skeleton_to_json(skeleton, detail));
  }
  return envelope_with("skeleton.list",
                       {{"skeletons", std::move(list)}, {"library", dir.string()}});
}

Json show_skeleton(const Json& arguments, CallContext& context) {
  const auto dir = library_dir(context.settings, arguments);
  const auto library = skeleton::load_library(dir);
  const std::string id = *string_argument(arguments, "id");
  const skeleton::Skeleton* found = skeleton::find_skeleton(library, id);
  if (found == nullptr) {
    std::string ids;
    for (const auto& skeleton : library) ids += (ids.empty() ? "" : ", ") + skeleton.id;
    throw Error(ErrorCode::kUsage, "show_skeleton: no skeleton '" + id + "' in " + dir.string(),
                "known ids: " + ids);
  }
  return envelope_with("skeleton.show", {{"skeleton", skeleton::skeleton_to_json(*found, true)}});
}

Json match_skeletons(const Json& arguments, CallContext& context) {
  const auto dir = library_dir(context.settings, arguments);
  const auto library = skeleton::load_library(dir);
  const ledger::Ledger ledger = open_ledger(context.settings, arguments, false, false);
  const std::string run_id = *string_argument(arguments, "run");
  const ledger::RunRecord run = ledger.get_run(run_id);
  const bool detail = flag_argument(arguments, "detail");
  const int64_t limit = integer_argument(arguments, "limit").value_or(kConciseMatches);
  const auto matches = skeleton::match_run(library, run);
  Json list = Json::array();
  for (const auto& match : matches) {
    if (static_cast<int64_t>(list.size()) >= limit) break;
    Json row = skeleton::match_to_json(match);
    if (const auto* skeleton = skeleton::find_skeleton(library, match.skeleton_id)) {
      row["title"] = skeleton->title;
      if (detail) row["detail"] = skeleton::skeleton_to_json(*skeleton, true);
    }
    list.push_back(std::move(row));
  }
  Json out = envelope_with("skeleton.match", {{"run", run_id},
                                              {"matches", std::move(list)},
                                              {"total", matches.size()},
                                              {"library", dir.string()}});
  if (static_cast<int64_t>(matches.size()) > limit) {
    out["truncated"] = true;
    out["data"]["truncation"] = "showing " + std::to_string(limit) + " of " +
                                std::to_string(matches.size()) + " matches; raise limit";
  }
  return out;
}

Tool make_tool(std::string name, std::string kind, Annotations annotations) {
  Tool tool;
  tool.name = std::move(name);
  tool.envelope_kind = std::move(kind);
  tool.annotations = annotations;
  return tool;
}

Param library_param() { return {"library", ParamType::kString, ""}; }

constexpr Annotations kReadOnly{true, false, true, false};

}  // namespace

void add_research_tools(std::vector<Tool>& tools) {
  Tool add = make_tool("add_hypothesis", "hypothesis.add", {false, false, false, false});
  add.description = "A claim to test (status open); then link_run and decide_hypothesis.";
  add.params = {{"text", ParamType::kString, "the claim", true},
                {"skeleton", ParamType::kString, "skeleton id it applies"},
                library_param(),
                home_param(),
                ledger_param()};
  add.narrow_hint = "show_hypothesis answers one hypothesis";
  add.call = add_hypothesis;
  tools.push_back(std::move(add));

  Tool link = make_tool("link_run", "hypothesis.link", {false, false, true, false});
  link.description =
      "Links a run to a hypothesis as baseline (before the change) or candidate (after).";
  link.params = {{"hypothesis", ParamType::kInteger, "", true, {}, 1.0},
                 {"run", ParamType::kString, "", true},
                 {"role", ParamType::kString, "", true, {"baseline", "candidate"}},
                 home_param(),
                 ledger_param()};
  link.narrow_hint = "show_hypothesis answers one hypothesis";
  link.call = link_run;
  tools.push_back(std::move(link));

  Tool decide = make_tool("decide_hypothesis", "hypothesis.decide", {false, false, false, false});
  decide.description =
      "Retain, revise or reject. Retain needs a linked baseline and a passing candidate; "
      "[review] categories stay needs-review until a person approves.";
  decide.params = {{"hypothesis", ParamType::kInteger, "", true, {}, 1.0},
                   {"decision", ParamType::kString, "", true, {"retain", "revise", "reject"}},
                   {"why", ParamType::kString, "the evidence, in a sentence", true},
                   home_param(),
                   ledger_param()};
  decide.narrow_hint = "show_hypothesis answers one hypothesis";
  decide.call = decide_hypothesis;
  tools.push_back(std::move(decide));

  Tool list = make_tool("list_hypotheses", "hypothesis.list", kReadOnly);
  list.description = "Hypotheses, oldest first, with status.";
  list.params = {{"status",
                  ParamType::kString,
                  "only this status",
                  false,
                  {"open", "retained", "revised", "rejected", "needs-review"}},
                 home_param(),
                 ledger_param(),
                 detail_param("links and decisions")};
  list.narrow_hint = "filter with status, or read one with show_hypothesis";
  list.call = list_hypotheses;
  tools.push_back(std::move(list));

  Tool show = make_tool("show_hypothesis", "hypothesis.show", kReadOnly);
  show.description = "One hypothesis: text, skeleton, status, linked runs, decisions.";
  show.params = {
      {"hypothesis", ParamType::kInteger, "", true, {}, 1.0}, home_param(), ledger_param()};
  show.narrow_hint = "show_run answers one linked run";
  show.call = show_hypothesis;
  tools.push_back(std::move(show));

  Tool skeletons = make_tool("list_skeletons", "skeleton.list", kReadOnly);
  skeletons.description = "Validated optimisation moves, each with when it applies.";
  skeletons.params = {library_param(), detail_param("transformation, costs, evidence")};
  skeletons.narrow_hint = "read one with show_skeleton";
  skeletons.call = list_skeletons;
  tools.push_back(std::move(skeletons));

  Tool skeleton = make_tool("show_skeleton", "skeleton.show", kReadOnly);
  skeleton.description =
      "One skeleton: when it applies, the change, its costs, validation, evidence.";
  skeleton.params = {{"id", ParamType::kString, "skeleton id", true}, library_param()};
  skeleton.narrow_hint = "list_skeletons gives the short form";
  skeleton.call = show_skeleton;
  tools.push_back(std::move(skeleton));

  Tool match = make_tool("match_skeletons", "skeleton.match", kReadOnly);
  match.description =
      "Skeletons whose conditions hold for a run's findings, best first, with reasons.";
  match.params = {{"run", ParamType::kString, "", true},
                  {"limit", ParamType::kInteger, "matches (default 5)", false, {}, 1.0, 100.0},
                  library_param(),
                  home_param(),
                  ledger_param(),
                  detail_param("matches in full")};
  match.narrow_hint = "lower limit, or read one skeleton with show_skeleton";
  match.call = match_skeletons;
  tools.push_back(std::move(match));
}

}  // namespace loupe::mcp
