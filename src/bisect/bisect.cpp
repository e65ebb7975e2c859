#include "bisect/bisect.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <system_error>
#include <variant>

#include "bench/compare.hpp"
#include "core/home.hpp"
#include "core/process.hpp"
#include "core/trust.hpp"
#include "gate/cascade.hpp"
#include "gate/gate_eval.hpp"
#include "gate/objective.hpp"
#include "gate/plan.hpp"
#include "ledger/ledger.hpp"
#include "ledger/provenance.hpp"
#include "probe/runner.hpp"

namespace loupe::bisect {

std::string_view step_verdict_name(StepVerdict verdict) {
  switch (verdict) {
    case StepVerdict::kGood:
      return "good";
    case StepVerdict::kBad:
      return "bad";
    case StepVerdict::kAmbiguous:
      return "ambiguous";
    case StepVerdict::kUnbuildable:
      return "unbuildable";
  }
  return "ambiguous";
}

Search::Search(size_t points) : verdicts_(points), last_good_(0), first_bad_(points - 1) {}

std::optional<size_t> Search::next() const {
  // The middle of the bracket; when it has a verdict already (set aside as ambiguous), the
  // nearest point without one, the earlier first on a tie.
  const size_t middle = (last_good_ + first_bad_) / 2;
  std::optional<size_t> best;
  size_t best_distance = 0;
  for (size_t index = last_good_ + 1; index < first_bad_; ++index) {
    if (verdicts_[index]) continue;
    const size_t distance = index > middle ? index - middle : middle - index;
    if (!best || distance < best_distance) {
      best = index;
      best_distance = distance;
    }
  }
  return best;
}

void Search::record(size_t index, StepVerdict verdict) {
  verdicts_.at(index) = verdict;
  // Only decided verdicts move the bracket; one already outside it changes nothing.
  if (verdict == StepVerdict::kGood && index > last_good_ && index < first_bad_) last_good_ = index;
  if (verdict == StepVerdict::kBad && index < first_bad_ && index > last_good_) first_bad_ = index;
}

std::vector<size_t> Search::undecided() const {
  std::vector<size_t> out;
  for (size_t index = last_good_ + 1; index < first_bad_; ++index) {
    if (verdicts_[index]) out.push_back(index);
  }
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string format_number(double value, const char* format = "%.4g") {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

// `git -C REPO ARGS...`; throws Error(kUsage) with git's own message when it fails.
std::string git(const std::filesystem::path& repo, std::vector<std::string> args,
                const std::string& what) {
  ProcessSpec spec;
  spec.argv = {"git", "-C", repo.string()};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.timeout = std::chrono::minutes(5);
  const ProcessResult result = run_process(spec);
  if (!result.succeeded()) {
    throw Error(ErrorCode::kUsage,
                what + ": git " + args.front() + " " + result.describe() + ": " +
                    result.stderr_tail(3, 400),
                "check that the revisions exist in " + repo.string());
  }
  std::string out = result.stdout_text;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// One point of the search: a commit, or a value of --over-values at one commit.
struct Point {
  std::string commit;   // full hash
  std::string subject;  // the commit's subject line
  std::string value;    // --over-values: the value; empty otherwise
  std::string label() const { return value.empty() ? commit.substr(0, 12) : value; }
};

struct OverValues {
  std::string name;
  std::vector<std::string> values;
};

OverValues parse_over_values(const std::string& text) {
  const size_t equals = text.find('=');
  if (equals == std::string::npos || equals == 0 || equals + 1 == text.size()) {
    throw Error(ErrorCode::kUsage, "--over-values '" + text + "': expected NAME=V1,V2,...",
                "for example --over-values openblas=v0.3.21,v0.3.24,v0.3.26");
  }
  OverValues out;
  out.name = text.substr(0, equals);
  std::stringstream values(text.substr(equals + 1));
  std::string value;
  while (std::getline(values, value, ',')) {
    if (value.empty()) {
      throw Error(ErrorCode::kUsage, "--over-values '" + text + "': an empty value",
                  "separate the values with single commas");
    }
    out.values.push_back(value);
  }
  if (out.values.size() < 2) {
    throw Error(ErrorCode::kUsage, "--over-values '" + text + "': expected at least two values",
                "the first is the known-good value, the last the bad one");
  }
  return out;
}

// What a bench or scenario step compares between the builds: one value per round and build.
struct AbMetric {
  std::string entry;
  std::optional<std::string> variant;  // benches: the variant timed
  std::string metric;
  bool higher_is_better = false;
  std::vector<gate::Condition> where;
  std::string describe() const {
    return entry + (variant ? "[" + *variant + "]" : "") + "." + metric;
  }
};

AbMetric ab_metric(const gate::GateSpec& spec, const gate::Objective& objective,
                   const gate::Plan& plan) {
  AbMetric out;
  if (const auto* bound = std::get_if<gate::MetricBound>(&spec.expression)) {
    out.entry = bound->metric.entry;
    out.variant = bound->metric.variant;
    out.metric = bound->metric.metric;
    out.higher_is_better = bound->comparison == gate::Comparison::kGreater ||
                           bound->comparison == gate::Comparison::kGreaterEqual;
    out.where = bound->where;
  } else if (const auto* verdict = std::get_if<gate::BenchVerdict>(&spec.expression)) {
    out.entry = verdict->subject.bench;
    out.metric = "median_s";
    out.where = verdict->where;
    if (verdict->subject.selector == gate::VariantSelector::kNamed) {
      out.variant = verdict->subject.variant;
    } else if (verdict->subject.selector == gate::VariantSelector::kConfigured) {
      out.variant = gate::configured_variant(plan, verdict->subject.bench);
    }
    if (!out.variant) {
      const gate::ProbeEntry* entry = objective.find_entry(Layer::kBench, out.entry);
      if (entry && !entry->variants.empty()) out.variant = entry->variants.front();
    }
  }
  return out;
}

// The round's value of the metric on one build: the mean over the selected points (the first
// variant present when the gate names none). nullopt when no point holds it.
std::optional<double> round_value(const AbMetric& metric,
                                  const std::vector<gate::PointResult>& points) {
  double sum = 0;
  int64_t count = 0;
  for (const auto& point : points) {
    if (point.entry != metric.entry || !gate::conditions_hold(metric.where, point.params)) continue;
    for (const auto& value : point.metrics) {
      if (value.name != metric.metric) continue;
      if (metric.variant && value.variant != *metric.variant) continue;
      sum += value.value;
      ++count;
      break;
    }
  }
  if (count == 0) return std::nullopt;
  return sum / static_cast<double>(count);
}

// The step's value over the good build's, paired by round: the two builds of a round run back to
// back, so the load of a shared machine falls on both alike and cancels in their ratio (an
// unpaired comparison of the rounds' values kept that load in its interval). gate's
// compare_builds, as `loupe run --baseline BUILD` decides its benches: the median of the
// per-round ratios, its bootstrap interval, DESIGN.md's rule.
bench::Comparison paired_comparison(const std::vector<double>& good_values,
                                    const std::vector<double>& step_values, double threshold,
                                    double confidence) {
  return gate::compare_builds(good_values, step_values, threshold, confidence);
}

// Where the subject runs in a build's tree, and its program when that is a path in the tree.
gate::Objective objective_in_tree(const gate::Objective& objective,
                                  const std::filesystem::path& repo_root,
                                  const std::filesystem::path& cwd,
                                  const std::filesystem::path& tree,
                                  const std::string& subject_from) {
  gate::Objective out = objective;
  auto map = [&](const std::filesystem::path& path) -> std::optional<std::filesystem::path> {
    const std::filesystem::path relative =
        std::filesystem::absolute(path).lexically_normal().lexically_relative(repo_root);
    if (relative.empty() || *relative.begin() == "..") return std::nullopt;
    return (tree / relative).lexically_normal();
  };
  if (!subject_from.empty()) {
    out.subject.working_dir = (tree / subject_from).lexically_normal();
  } else {
    const std::filesystem::path from = objective.subject.working_dir.value_or(cwd);
    const auto mapped = map(from);
    if (!mapped) {
      throw Error(ErrorCode::kUsage,
                  objective.file.string() + ": the subject runs in " + from.string() +
                      ", outside the repository " + repo_root.string(),
                  "give --subject-from DIR: the subject's folder relative to the repository root");
    }
    out.subject.working_dir = *mapped;
  }
  if (!out.subject.command.empty() &&
      std::filesystem::path(out.subject.command.front()).is_absolute()) {
    if (const auto mapped = map(out.subject.command.front())) {
      out.subject.command.front() = mapped->string();
    }
  }
  return out;
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
  return text;
}

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::filesystem::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw Error(ErrorCode::kInput, file.string() + ": cannot write", "check the disk");
}

// A point's tree: a git worktree at its commit, built with the build command. The tree is the
// cache: a stamp next to it records the build command that succeeded there.
struct Tree {
  std::filesystem::path dir;
  bool built = false;   // a build ran now
  bool reused = false;  // a stamp said the same build already succeeded
  bool ok = true;
  std::string problem;  // why it could not be built
  std::filesystem::path log;
  double build_s = 0;
};

class Bisector {
 public:
  explicit Bisector(const Request& request) : request_(request) {}

  Outcome run();

 private:
  struct Evaluation {
    StepVerdict verdict = StepVerdict::kAmbiguous;
    std::string reason;  // one line
    Json json = Json::object();
    std::vector<Finding> findings;  // the gate's findings (fail and warn) at the step
    std::vector<std::string> observations;
  };

  void say(const std::string& line) const {
    if (request_.progress) request_.progress(line);
  }
  std::string point_key(const Point& point) const {
    return point.value.empty() ? point.commit
                               : point.commit + "-" + over_.name + "=" + sanitize(point.value);
  }
  static std::string sanitize(const std::string& text) {
    std::string out = text;
    for (char& c : out) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
    }
    return out;
  }
  Tree prepare(const Point& point);
  std::vector<gate::PointResult> run_tasks(const gate::Objective& objective,
                                           const std::string& run_id, int64_t repeats_cap);
  Evaluation evaluate(const Point& point, const Tree& tree);
  Evaluation evaluate_check(const Point& point, const Tree& tree);
  Evaluation evaluate_ab(const Point& point, const Tree& tree);
  void check_interrupted() const {
    if (request_.interrupted && request_.interrupted->load()) {
      throw Error(ErrorCode::kSubject, "bisect interrupted", "nothing was recorded");
    }
  }

  const Request& request_;
  std::filesystem::path cwd_;
  std::filesystem::path repo_;
  std::filesystem::path home_;
  std::string run_id_;
  gate::Objective objective_;
  gate::Plan plan_;
  const gate::GateSpec* gate_ = nullptr;
  Layer layer_ = Layer::kCheck;
  OverValues over_;
  std::vector<Point> points_;
  int64_t builds_ = 0;
  int64_t builds_reused_ = 0;
  std::optional<Tree> good_tree_;
  double threshold_ = 0.02;
  int64_t rounds_scale_ = 1;  // 2 when ambiguous points are retried
  // A bench or scenario point's paired rounds so far: a retry goes on from them (a fresh start
  // would throw away the rounds that made it AMBIGUOUS and decide on five new ones).
  std::map<std::string, PairedRounds> ab_rounds_;
  AbMetric metric_;
  std::vector<std::string> observations_;
  // --build and --subject-from, else the objective's [build] table.
  std::string build_;
  std::string subject_from_;
  double build_timeout_s_ = 3600;
};

Tree Bisector::prepare(const Point& point) {
  Tree tree;
  const std::filesystem::path builds = home_ / "bisect" / "builds";
  const std::string key = point_key(point);
  tree.dir = builds / key;
  tree.log = builds / (key + ".build.log");
  const std::filesystem::path stamp = builds / (key + ".built");
  std::filesystem::create_directories(builds);
  if (!std::filesystem::exists(tree.dir / ".git")) {
    std::error_code ignored;
    std::filesystem::remove_all(tree.dir, ignored);
    // A detached worktree: the user's checkout, branches and index stay as they are.
    git(repo_, {"worktree", "add", "--detach", "--force", tree.dir.string(), point.commit},
        "checking out " + point.commit.substr(0, 12));
    std::filesystem::remove(stamp, ignored);
  }
  const std::string build =
      over_.name.empty() ? build_ : replace_all(build_, "{" + over_.name + "}", point.value);
  if (std::filesystem::exists(stamp) && read_text(stamp) == build) {
    tree.reused = true;
    ++builds_reused_;
    return tree;
  }
  if (build.empty()) {
    write_text(stamp, build);
    return tree;
  }
  check_interrupted();
  say("build " + point.label() + ": " + build);
  const auto start = Clock::now();
  ProcessSpec spec = shell_command(build);
  spec.working_dir = tree.dir;
  spec.timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(build_timeout_s_));
  spec.extra_env = {{"LOUPE_BISECT_COMMIT", point.commit}};
  if (!over_.name.empty()) spec.extra_env.emplace_back("LOUPE_BISECT_VALUE", point.value);
  const ProcessResult result = run_process(spec);
  tree.build_s = seconds_since(start);
  tree.built = true;
  ++builds_;
  write_text(tree.log, result.stdout_text + result.stderr_text);
  if (!result.succeeded()) {
    tree.ok = false;
    tree.problem = "the build " + result.describe() + " (log: " + tree.log.string() + ")";
    return tree;
  }
  write_text(stamp, build);
  return tree;
}

std::vector<gate::PointResult> Bisector::run_tasks(const gate::Objective& objective,
                                                   const std::string& run_id, int64_t repeats_cap) {
  // Scoped to the bisect: every step and its good build see the same hidden runs.
  const gate::PointRunner runner = gate::subject_point_runner(objective, home_, run_id, 0, run_id_);
  std::vector<gate::PointResult> results;
  int64_t most_repeats = 0;
  for (const auto& task : plan_.tasks) most_repeats = std::max(most_repeats, task.repeats);
  most_repeats = std::min(most_repeats, repeats_cap);
  // Repeats interleaved across the tasks, as the cascade does.
  for (int64_t repeat = 0; repeat < most_repeats; ++repeat) {
    for (const auto& task : plan_.tasks) {
      if (repeat >= task.repeats) continue;
      check_interrupted();
      const gate::ProbeEntry* entry = objective.find_entry(task.layer, task.entry);
      gate::PointResult point = runner(task, *entry, repeat);
      observations_.push_back(point.observation_dir);
      results.push_back(std::move(point));
    }
  }
  if (layer_ == Layer::kBench) gate::control_bench_false_discovery(results);
  return results;
}

std::vector<Finding> notable_findings(const gate::GateResult& gate,
                                      const std::vector<gate::PointResult>& points) {
  std::vector<Finding> out;
  std::set<std::string> seen;
  auto add = [&](const Finding& finding) {
    if (finding.severity == Severity::kInfo) return;
    if (!seen.insert(finding.id + "|" + finding.claim).second) return;
    out.push_back(finding);
  };
  for (const auto& finding : gate.findings) add(finding);
  for (const auto& point : points) {
    for (const auto& finding : point.findings) add(finding);
  }
  return out;
}

Bisector::Evaluation Bisector::evaluate_check(const Point& point, const Tree& tree) {
  Evaluation out;
  const gate::Objective objective =
      objective_in_tree(objective_, repo_, cwd_, tree.dir, subject_from_);
  std::vector<gate::PointResult> results;
  try {
    results = run_tasks(objective, run_id_ + "/" + sanitize(point.label()), INT64_MAX);
  } catch (const probe::SubjectFailure& failure) {
    // A subject that crashes is not the gate's verdict: the step is set aside, not blamed.
    out.verdict = StepVerdict::kUnbuildable;
    out.reason = "the subject failed: " + failure.message();
    out.json["subject_failure"] = failure.message();
    return out;
  }
  const gate::GateResult result = gate::evaluate_gate(*gate_, objective, plan_, results);
  out.json["gate"] = gate::gate_result_to_json(result);
  out.json["gate"].erase("findings");
  out.findings = notable_findings(result, results);
  out.reason =
      "gate " + std::string(gate_verdict_name(result.verdict)) + ": " + gate::key_statistic(result);
  switch (result.verdict) {
    case GateVerdict::kPass:
      out.verdict = StepVerdict::kGood;
      break;
    case GateVerdict::kFail:
      out.verdict = StepVerdict::kBad;
      break;
    default:
      out.verdict = StepVerdict::kAmbiguous;
  }
  // A failing guard makes the step bad whatever the gate says, as in `loupe run`
  // (gate::cascade_verdict): the results the gate judged cannot be believed.
  for (const auto& result_point : results) {
    for (const auto& finding : result_point.findings) {
      if (out.verdict == StepVerdict::kBad || !undermines_results(finding)) continue;
      out.verdict = StepVerdict::kBad;
      out.reason =
          "guard " + finding.id + " failed (the run fails whatever its gates say); " + out.reason;
      out.json["failed_guard"] = finding.id;
    }
  }
  for (const auto& result_point : results) out.observations.push_back(result_point.observation_dir);
  return out;
}

Bisector::Evaluation Bisector::evaluate_ab(const Point& point, const Tree& tree) {
  Evaluation out;
  const gate::Objective good_objective =
      objective_in_tree(objective_, repo_, cwd_, good_tree_->dir, subject_from_);
  const gate::Objective step_objective =
      objective_in_tree(objective_, repo_, cwd_, tree.dir, subject_from_);
  PairedRounds::Rule rule;
  rule.min_rounds = request_.min_rounds;
  rule.max_rounds = request_.max_rounds;
  rule.threshold = threshold_;
  rule.confidence = gate_->confidence;
  PairedRounds& rounds = ab_rounds_.try_emplace(point_key(point), rule).first->second;
  std::vector<gate::PointResult> last_step_results;
  const std::string label = sanitize(point.label());
  auto one_round = [&](int64_t round) {
    // Alternate which build runs first, so drift of the machine falls on both alike.
    std::vector<gate::PointResult> good_results;
    std::vector<gate::PointResult> step_results;
    const std::string suffix = "/r" + std::to_string(round + 1);
    if (round % 2 == 0) {
      good_results = run_tasks(good_objective, run_id_ + "/" + label + "/good" + suffix, 1);
      step_results = run_tasks(step_objective, run_id_ + "/" + label + "/step" + suffix, 1);
    } else {
      step_results = run_tasks(step_objective, run_id_ + "/" + label + "/step" + suffix, 1);
      good_results = run_tasks(good_objective, run_id_ + "/" + label + "/good" + suffix, 1);
    }
    const auto good_value = round_value(metric_, good_results);
    const auto step_value = round_value(metric_, step_results);
    if (!good_value || !step_value) {
      throw Error(ErrorCode::kConfig,
                  objective_.file.string() + ": gate " + gate_->name + ": no point produced " +
                      metric_.describe(),
                  "the gate's metric must be one its entries' points report");
    }
    last_step_results = std::move(step_results);
    return std::pair{*good_value, *step_value};
  };
  auto progress = [&](int64_t round, const PairedRounds::State& state) {
    const bench::Comparison& comparison = state.comparison;
    std::string line = "  " + point.label() + " round " + std::to_string(round) + ": " +
                       metric_.describe() + " step/good " + format_number(comparison.ratio) + " [" +
                       format_number(comparison.ci.low) + ", " + format_number(comparison.ci.high) +
                       "] " + std::string(bench::ab_verdict_name(comparison.verdict));
    if (comparison.verdict == bench::AbVerdict::kSlower ||
        comparison.verdict == bench::AbVerdict::kFaster) {
      line += " p " + format_number(comparison.p_value);
      if (!state.decided) {
        line += rule.is_look(round) ? " > " + format_number(rule.alpha()) + ": not decided"
                                    : ": not a look";
      }
    }
    say(line);
  };
  PairedRounds::State state;
  try {
    state = rounds.run(request_.max_rounds * rounds_scale_, one_round, progress);
  } catch (const probe::SubjectFailure& failure) {
    out.verdict = StepVerdict::kUnbuildable;
    out.reason = "the subject failed: " + failure.message();
    out.json["subject_failure"] = failure.message();
    return out;
  }
  if (!state.compared) {
    throw Error(ErrorCode::kUsage,
                "--max-rounds " + std::to_string(request_.max_rounds) + " is below --min-rounds " +
                    std::to_string(request_.min_rounds),
                "give at least as many rounds as --min-rounds");
  }
  const bench::Comparison& comparison = state.comparison;
  const std::vector<double>& good_values = rounds.good();
  const std::vector<double>& step_values = rounds.step();
  const bool worse = metric_.higher_is_better ? comparison.verdict == bench::AbVerdict::kFaster
                                              : comparison.verdict == bench::AbVerdict::kSlower;
  if (worse) {
    out.verdict = StepVerdict::kBad;
  } else if (comparison.verdict == bench::AbVerdict::kAmbiguous) {
    out.verdict = StepVerdict::kAmbiguous;
  } else {
    out.verdict = StepVerdict::kGood;
  }
  Json ab = Json::object();
  ab["metric"] = metric_.describe();
  ab["higher_is_better"] = metric_.higher_is_better;
  ab["ratio_of"] = "candidate/baseline";  // the step's build over the good build
  ab["ratio"] = number_to_json(comparison.ratio);
  ab["ci"] = Json::array({number_to_json(comparison.ci.low), number_to_json(comparison.ci.high)});
  ab["threshold"] = threshold_;
  ab["confidence"] = comparison.confidence;
  ab["verdict"] = std::string(bench::ab_verdict_name(comparison.verdict));
  ab["rounds"] = good_values.size();
  ab["good_values"] = good_values;
  ab["step_values"] = step_values;
  ab["p_value"] = number_to_json(comparison.p_value);
  ab["alpha"] = rule.alpha();  // a change's p-value at a look must be at most this
  ab["rule"] = comparison.rule;
  out.json["ab"] = ab;
  // The gate's own rule on the step's last round: evidence, not the decision.
  const gate::GateResult own =
      gate::evaluate_gate(*gate_, step_objective, plan_, last_step_results);
  out.json["gate"] = gate::gate_result_to_json(own);
  out.json["gate"].erase("findings");
  out.findings = notable_findings(own, last_step_results);
  for (const auto& result_point : last_step_results) {
    out.observations.push_back(result_point.observation_dir);
  }
  out.reason = metric_.describe() + " step/good " + format_number(comparison.ratio) + " [" +
               format_number(comparison.ci.low) + ", " + format_number(comparison.ci.high) + "] " +
               std::string(bench::ab_verdict_name(comparison.verdict)) + " (t " +
               format_number(threshold_) + ", " + std::to_string(good_values.size()) + " rounds)";
  return out;
}

Bisector::Evaluation Bisector::evaluate(const Point& point, const Tree& tree) {
  if (!tree.ok) {
    Evaluation out;
    out.verdict = StepVerdict::kUnbuildable;
    out.reason = tree.problem;
    return out;
  }
  return layer_ == Layer::kCheck ? evaluate_check(point, tree) : evaluate_ab(point, tree);
}

std::string shell_quote(const std::string& text) {
  if (!text.empty() && text.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_-./=,:@+") == std::string::npos) {
    return text;
  }
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Outcome Bisector::run() {
  const auto start = Clock::now();
  cwd_ = request_.cwd.empty() ? std::filesystem::current_path() : request_.cwd;
  cwd_ = std::filesystem::absolute(cwd_).lexically_normal();
  repo_ = git(cwd_, {"rev-parse", "--show-toplevel"}, "finding the repository of " + cwd_.string());
  home_ = std::filesystem::absolute(resolve_home(request_.home, cwd_));
  if (request_.min_rounds < bench::kMinSamplesForVerdict) {
    throw Error(ErrorCode::kUsage,
                "--min-rounds " + std::to_string(request_.min_rounds) + ": expected at least " +
                    std::to_string(bench::kMinSamplesForVerdict),
                "fewer rounds than that can never decide an A/B verdict");
  }
  if (request_.max_rounds < request_.min_rounds) {
    throw Error(ErrorCode::kUsage,
                "--max-rounds " + std::to_string(request_.max_rounds) + " is below --min-rounds " +
                    std::to_string(request_.min_rounds),
                "give at least as many rounds as --min-rounds");
  }

  // The objective, the gate and the entries it reads; nothing else runs.
  const std::filesystem::path objective_file =
      std::filesystem::absolute(cwd_ / request_.objective).lexically_normal();
  objective_ = gate::parse_objective_file(objective_file);
  for (const auto& spec : objective_.gates) {
    if (spec.name == request_.gate) gate_ = &spec;
  }
  if (!gate_) {
    std::string names;
    for (const auto& spec : objective_.gates) names += (names.empty() ? "" : ", ") + spec.name;
    throw Error(ErrorCode::kUsage,
                "--gate " + request_.gate + ": " + objective_file.string() + " has no such gate",
                "its gates: " + names);
  }
  build_ = request_.build;
  subject_from_ = request_.subject_from;
  build_timeout_s_ = request_.build_timeout_s;
  if (build_.empty() && objective_.build) {
    build_ = objective_.build->command;
    build_timeout_s_ = objective_.build->timeout_s;
    if (subject_from_.empty()) subject_from_ = objective_.build->subject_from;
  }
  layer_ = gate::gate_layer(gate_->expression);
  plan_ = gate::make_plan(objective_, gate::resolve_configuration(objective_, request_.config));
  // The entries the gate reads (gate/gate_eval.hpp; the layer is the gate's).
  std::set<std::string> entries;
  for (const auto& [layer, entry] : gate::gate_entries(gate_->expression)) entries.insert(entry);
  std::erase_if(plan_.tasks, [&](const gate::PlanTask& task) {
    return task.layer != layer_ || !entries.count(task.entry);
  });
  if (plan_.tasks.empty()) {
    throw Error(ErrorCode::kUsage,
                "--gate " + gate_->name + ": the configuration leaves none of its entries to run",
                "choose another --config");
  }
  if (layer_ != Layer::kCheck) {
    metric_ = ab_metric(*gate_, objective_, plan_);
    threshold_ = 0.02;
    if (const gate::ProbeEntry* entry = objective_.find_entry(layer_, metric_.entry);
        entry && entry->threshold) {
      threshold_ = *entry->threshold;
    }
    if (request_.threshold) threshold_ = *request_.threshold;
  }

  // The points: the commits from good (exclusive of nothing: it is point 0) to bad along the
  // first-parent line, or the values at one commit.
  if (!request_.over_values.empty()) {
    over_ = parse_over_values(request_.over_values);
    if (build_.find("{" + over_.name + "}") == std::string::npos) {
      throw Error(
          ErrorCode::kUsage,
          "--over-values " + over_.name + ": --build does not mention {" + over_.name + "}",
          "the build command must use the value, e.g. --build 'make DEP_TAG={" + over_.name + "}'");
    }
    const std::string revision = request_.bad.empty() ? "HEAD" : request_.bad;
    const std::string commit =
        git(repo_, {"rev-parse", "--verify", revision + "^{commit}"}, "--bad " + revision);
    const std::string subject =
        git(repo_, {"log", "-1", "--format=%s", commit}, "reading " + commit);
    for (const auto& value : over_.values) points_.push_back({commit, subject, value});
  } else {
    if (request_.good.empty() || request_.bad.empty()) {
      throw Error(ErrorCode::kUsage, "bisect needs --good REV and --bad REV",
                  "or --over-values NAME=V1,V2,... to search over a dependency's versions");
    }
    const std::string good = git(repo_, {"rev-parse", "--verify", request_.good + "^{commit}"},
                                 "--good " + request_.good);
    const std::string bad =
        git(repo_, {"rev-parse", "--verify", request_.bad + "^{commit}"}, "--bad " + request_.bad);
    ProcessSpec ancestor;
    ancestor.argv = {"git", "-C", repo_.string(), "merge-base", "--is-ancestor", good, bad};
    if (!run_process(ancestor).succeeded() || good == bad) {
      throw Error(ErrorCode::kUsage,
                  "--good " + request_.good + " is not an ancestor of --bad " + request_.bad,
                  "the good revision must come before the bad one in the history");
    }
    const std::string log =
        git(repo_, {"log", "--first-parent", "--reverse", "--format=%H %s", good + ".." + bad},
            "listing the commits from " + request_.good + " to " + request_.bad);
    const std::string good_subject =
        git(repo_, {"log", "-1", "--format=%s", good}, "reading " + good);
    points_.push_back({good, good_subject, ""});
    std::stringstream lines(log);
    std::string line;
    while (std::getline(lines, line)) {
      const size_t space = line.find(' ');
      points_.push_back(
          {line.substr(0, space), space == std::string::npos ? "" : line.substr(space + 1), ""});
    }
    if (points_.back().commit != bad) {
      throw Error(ErrorCode::kUsage,
                  "--bad " + request_.bad + " is not on the first-parent line from --good",
                  "give a --bad reached from --good by first parents (a merge's own commit)");
    }
  }
  run_id_ = new_run_id();
  say("bisect " + run_id_ + ": gate " + gate_->name + " (" + std::string(layer_name(layer_)) +
      "), " + std::to_string(points_.size()) + " points from " + points_.front().label() + " to " +
      points_.back().label() + " (" + std::to_string(points_.size() - 2) + " between)");

  Json steps = Json::array();
  std::vector<std::optional<Evaluation>> evaluations(points_.size());
  bool budget_spent = false;
  std::vector<std::optional<Tree>> trees(points_.size());
  auto tree_of = [&](size_t index) -> const Tree& {
    if (!trees[index]) trees[index] = prepare(points_[index]);
    return *trees[index];
  };
  auto evaluate_point = [&](size_t index, const std::string& role) -> StepVerdict {
    const Point& point = points_[index];
    const Tree& tree = tree_of(index);
    Evaluation evaluation = evaluate(point, tree);
    Json step = Json::object();
    step["index"] = index;
    step["role"] = role;
    step["commit"] = point.commit;
    step["subject"] = point.subject;
    if (!point.value.empty()) step["value"] = point.value;
    step["verdict"] = std::string(step_verdict_name(evaluation.verdict));
    step["reason"] = evaluation.reason;
    step["build"] = tree.built ? "built" : (tree.reused ? "reused" : "none");
    if (tree.built) step["build_s"] = number_to_json(tree.build_s);
    step["tree"] = tree.dir.string();
    for (auto& [key, value] : evaluation.json.items()) step[key] = value;
    steps.push_back(step);
    say(role + " " + point.label() + " (" + point.subject.substr(0, 50) +
        "): " + std::string(step_verdict_name(evaluation.verdict)) + " — " + evaluation.reason);
    const StepVerdict verdict = evaluation.verdict;
    evaluations[index] = std::move(evaluation);
    return verdict;
  };
  auto out_of_builds = [&] { return request_.max_builds > 0 && builds_ >= request_.max_builds; };

  // The good end: its build is the A side of every A/B; a check gate must pass there.
  good_tree_ = tree_of(0);
  if (!good_tree_->ok) {
    throw Error(ErrorCode::kUsage, "--good " + points_.front().label() + ": " + good_tree_->problem,
                "the good end must build; check --build");
  }
  if (layer_ == Layer::kCheck) {
    const StepVerdict verdict = evaluate_point(0, "good end");
    if (verdict != StepVerdict::kGood) {
      throw Error(ErrorCode::kUsage,
                  "--good " + points_.front().label() + ": gate " + gate_->name +
                      " does not pass there (" + evaluations[0]->reason + ")",
                  "choose a good revision at which the gate passes");
    }
  }
  Search search(points_.size());
  // The bad end first: an A/A range (nothing regressed) must blame nothing.
  const StepVerdict bad_verdict = evaluate_point(points_.size() - 1, "bad end");
  std::string conclusion;
  Verdict verdict = Verdict::kInconclusive;
  if (bad_verdict == StepVerdict::kGood) {
    verdict = Verdict::kPass;
    conclusion = "no regression: gate " + gate_->name + " is good at the bad end " +
                 points_.back().label() + " (" + evaluations.back()->reason + ")";
  } else if (bad_verdict != StepVerdict::kBad) {
    conclusion = "inconclusive: the bad end " + points_.back().label() + " is " +
                 std::string(step_verdict_name(bad_verdict)) + " (" + evaluations.back()->reason +
                 ")";
  } else {
    search.record(points_.size() - 1, StepVerdict::kBad);
    for (bool retried = false;; retried = true) {
      while (const auto next = search.next()) {
        if (out_of_builds()) {
          budget_spent = true;
          break;
        }
        const size_t left = search.first_bad() - search.last_good() - 1;
        search.record(*next, evaluate_point(*next, "step (" + std::to_string(left) + " left)"));
      }
      if (search.found() || budget_spent || retried || layer_ == Layer::kCheck) break;
      // The points set aside as AMBIGUOUS get one more chance with twice the rounds: more
      // samples are what decides a small effect on a noisy machine (no build is repeated).
      rounds_scale_ = 2;
      for (size_t index : search.undecided()) {
        const bool inside = index > search.last_good() && index < search.first_bad();
        if (inside && evaluations[index] &&
            evaluations[index]->verdict == StepVerdict::kAmbiguous) {
          search.record(index, evaluate_point(index, "retry with more rounds"));
        }
      }
    }
    if (search.found()) {
      verdict = Verdict::kFail;
    } else {
      std::string candidates;
      for (size_t index : search.undecided()) candidates += points_[index].label() + " ";
      candidates += points_[search.first_bad()].label();
      conclusion = std::string(budget_spent ? "the build budget is spent" : "inconclusive") +
                   ": the first bad point is one of " + candidates;
    }
  }

  // The result.
  Outcome outcome;
  outcome.run_id = run_id_;
  outcome.verdict = verdict;
  outcome.exit_code = verdict == Verdict::kPass ? 0 : 1;
  auto reproduce_for = [&](const Point& good, const Point& bad) {
    std::string line = "loupe bisect";
    if (over_.name.empty()) {
      line += " --good " + good.commit.substr(0, 12) + " --bad " + bad.commit.substr(0, 12);
    } else {
      line += " --bad " + bad.commit.substr(0, 12) + " --over-values " +
              shell_quote(over_.name + "=" + good.value + "," + bad.value);
    }
    line += " --objective " + shell_quote(request_.objective.string()) + " --gate " +
            shell_quote(gate_->name);
    if (!request_.config.empty()) line += " --config " + shell_quote(request_.config);
    if (!request_.build.empty()) line += " --build " + shell_quote(request_.build);
    if (!request_.subject_from.empty())
      line += " --subject-from " + shell_quote(request_.subject_from);
    return line;
  };
  Json data = Json::object();
  data["run"] = run_id_;
  data["gate"] = gate_->name;
  data["layer"] = std::string(layer_name(layer_));
  data["objective"] = objective_file.string();
  data["good"] = points_.front().commit;
  data["bad"] = points_.back().commit;
  if (!over_.name.empty()) data["over_values"] = {{"name", over_.name}, {"values", over_.values}};
  data["points"] = points_.size();
  data["first_bad"] = nullptr;
  data["builds"] = builds_;
  data["builds_reused"] = builds_reused_;
  data["steps_evaluated"] = steps.size();  // retries of ambiguous points included
  std::set<size_t> distinct;
  for (const auto& step : steps) distinct.insert(step["index"].get<size_t>());
  data["points_evaluated"] = distinct.size();  // each needs its tree (a build or the cache)
  data["budget_spent"] = budget_spent;
  if (layer_ != Layer::kCheck) {
    data["ab"] = {{"metric", metric_.describe()},
                  {"threshold", threshold_},
                  {"min_rounds", request_.min_rounds},
                  {"max_rounds", request_.max_rounds}};
  }
  if (verdict == Verdict::kFail) {
    const size_t bad_index = search.first_bad();
    const size_t parent_index = search.last_good();
    const Point& bad = points_[bad_index];
    const Point& parent = points_[parent_index];
    const Evaluation& bad_eval = *evaluations[bad_index];
    Json first_bad = Json::object();
    first_bad["commit"] = bad.commit;
    first_bad["subject"] = bad.subject;
    if (!bad.value.empty()) first_bad["value"] = bad.value;
    first_bad["evidence"] = steps.back();  // replaced below by the step's own record
    for (const auto& step : steps) {
      if (step["index"] == bad_index) first_bad["evidence"] = step;
    }
    Json parent_json = Json::object();
    parent_json["commit"] = parent.commit;
    parent_json["subject"] = parent.subject;
    if (!parent.value.empty()) parent_json["value"] = parent.value;
    for (const auto& step : steps) {
      if (step["index"] == parent_index) parent_json["evidence"] = step;
    }
    if (!parent_json.contains("evidence")) {
      parent_json["evidence"] = {{"role", "good end"},
                                 {"verdict", "good"},
                                 {"reason", "the known-good end: the A side of every A/B"}};
    }
    // Findings at the first bad point that its parent did not have.
    std::set<std::string> parent_ids;
    if (evaluations[parent_index]) {
      for (const auto& finding : evaluations[parent_index]->findings) parent_ids.insert(finding.id);
    }
    Json changed = Json::array();
    std::vector<Finding> changed_findings;
    for (const auto& finding : bad_eval.findings) {
      if (parent_ids.count(finding.id)) continue;
      if (changed.size() < 5) changed.push_back(finding.id + ": " + finding.claim);
      if (changed_findings.size() < 3) changed_findings.push_back(finding);
    }
    first_bad["changed_findings"] = changed;
    data["first_bad"] = first_bad;
    data["parent"] = parent_json;
    conclusion = "first bad " + std::string(over_.name.empty() ? "commit " : "value ") +
                 bad.label() + " \"" + bad.subject + "\": " + bad_eval.reason + "; its " +
                 (over_.name.empty() ? "parent " : "predecessor ") + parent.label() +
                 (evaluations[parent_index] ? ": " + evaluations[parent_index]->reason
                                            : " is the known-good end");

    Finding finding;
    finding.id = "bisect." + gate_->name + ".first_bad";
    finding.layer = layer_;
    finding.severity = Severity::kFail;
    finding.claim = conclusion;
    finding.where.subject = objective_.name;
    finding.where.path = bad.commit;
    if (!bad.value.empty()) finding.where.params.emplace_back(over_.name, bad.value);
    if (const auto* ab = bad_eval.json.contains("ab") ? &bad_eval.json["ab"] : nullptr) {
      finding.evidence.metrics = {{"ratio", (*ab)["ratio"].get<double>()},
                                  {"ci_low", (*ab)["ci"][0].get<double>()},
                                  {"ci_high", (*ab)["ci"][1].get<double>()},
                                  {"threshold", threshold_},
                                  {"rounds", (*ab)["rounds"].get<double>()}};
    }
    finding.evidence.files = bad_eval.observations;
    if (finding.evidence.files.size() > 4) finding.evidence.files.resize(4);
    finding.next = "read the diff of " + bad.label() + " (git show " + bad.commit.substr(0, 12) +
                   "); the changed findings say where the gate's evidence moved";
    finding.reproduce = reproduce_for(parent, bad);
    outcome.findings.push_back(finding);
    for (auto& changed_finding : changed_findings) outcome.findings.push_back(changed_finding);
  } else {
    data["parent"] = nullptr;
    Finding finding;
    finding.id = "bisect." + gate_->name + (verdict == Verdict::kPass ? ".none" : ".inconclusive");
    finding.layer = layer_;
    finding.severity = verdict == Verdict::kPass ? Severity::kInfo : Severity::kWarn;
    finding.claim = conclusion;
    finding.where.subject = objective_.name;
    finding.next = verdict == Verdict::kPass
                       ? "the regression, if any, lies outside this range or under the threshold"
                       : "rerun with more --max-rounds (or a quieter machine) to decide the "
                         "ambiguous points";
    finding.reproduce = reproduce_for(points_.front(), points_.back());
    outcome.findings.push_back(finding);
  }
  data["conclusion"] = conclusion;
  data["steps"] = steps;
  data["wall_s"] = number_to_json(seconds_since(start));

  // The ledger: one entry for the bisect, its verdict as the gate's, every observation listed.
  const std::filesystem::path ledger_file =
      request_.ledger ? *request_.ledger : home_ / "ledger.sqlite";
  ledger::Ledger ledger = ledger::Ledger::open(ledger_file);
  ledger::RunStart start_record;
  start_record.id = run_id_;
  start_record.started_at = ledger::utc_now();
  start_record.objective_path = objective_file.string();
  start_record.objective_hash = ledger::file_sha256(objective_file);
  start_record.git = ledger::read_git_state(cwd_);
  start_record.config_json = Json{
      {"bisect",
       {{"good", data["good"]},
        {"bad", data["bad"]},
        {"gate", gate_->name},
        {"first_bad", data["first_bad"].is_object() ? data["first_bad"]["commit"] : Json(nullptr)},
        {"builds", builds_},
        {"steps",
         steps.size()}}}}.dump();
  ledger.begin_run(start_record);
  ledger::GateRecord record;
  record.name = gate_->name;
  record.verdict = verdict == Verdict::kFail   ? GateVerdict::kFail
                   : verdict == Verdict::kPass ? GateVerdict::kPass
                                               : GateVerdict::kInconclusive;
  record.rule = "bisect: " + conclusion;
  Json statistics = Json::object();
  if (data["first_bad"].is_object() && data["first_bad"]["evidence"].contains("ab")) {
    statistics = data["first_bad"]["evidence"]["ab"];
    statistics.erase("good_values");
    statistics.erase("step_values");
  }
  statistics["builds"] = builds_;
  statistics["steps"] = steps.size();
  record.statistics_json = statistics.dump();
  ledger.finish_run(run_id_, ledger::RunStatus::kCompleted, ledger::utc_now(), {record},
                    outcome.findings, observations_);
  data["ledger"] = ledger_file.string();

  std::string text = "bisect " + run_id_ + " (gate " + gate_->name + ", " +
                     std::to_string(points_.size()) + " points)\n";
  for (const auto& step : steps) {
    text += "  " + step["role"].get<std::string>() + "  " +
            (step.contains("value") ? step["value"].get<std::string>()
                                    : step["commit"].get<std::string>().substr(0, 12)) +
            "  " + step["verdict"].get<std::string>() + "  " + step["reason"].get<std::string>() +
            "\n";
  }
  text += conclusion + "\n";
  if (data["first_bad"].is_object()) {
    for (const auto& changed : data["first_bad"]["changed_findings"]) {
      text += "  changed: " + changed.get<std::string>() + "\n";
    }
  }
  text += "builds: " + std::to_string(builds_) + " run, " + std::to_string(builds_reused_) +
          " reused; " + std::to_string(steps.size()) + " points evaluated in " +
          format_number(seconds_since(start), "%.1f") + " s; recorded as " + run_id_ + "\n";
  text += "reproduce: " + outcome.findings.front().reproduce + "\n";
  outcome.text = text;
  outcome.data = std::move(data);
  return outcome;
}

}  // namespace

// The looks: gate's (after rounds 5, 8 and 12) and the last round of the first pass and of the
// retry. Each round looked at with the whole 95 % interval — the rule before — blamed a
// notes-only commit: AMBIGUOUS over 12 rounds (0.998 [0.978, 1.005]), then a retry started afresh
// decided SLOWER on its first five (1.029 [1.016, 1.065]).
bool PairedRounds::Rule::is_look(int64_t rounds) const {
  return gate::is_round_look(rounds) || rounds == max_rounds || rounds == 2 * max_rounds;
}

double PairedRounds::Rule::alpha() const {
  int64_t looks = 0;
  for (int64_t rounds = min_rounds; rounds <= 2 * max_rounds; ++rounds) {
    if (is_look(rounds)) ++looks;
  }
  return 0.05 / static_cast<double>(std::max<int64_t>(1, looks));
}

PairedRounds::State PairedRounds::run(int64_t last_round, const RoundFn& round,
                                      const Progress& progress) {
  State state;
  const double alpha = rule_.alpha();
  for (int64_t index = std::ssize(good_); index < last_round; ++index) {
    const auto [good_value, step_value] = round(index);
    good_.push_back(good_value);
    step_.push_back(step_value);
    if (index + 1 < rule_.min_rounds) continue;
    state.comparison = paired_comparison(good_, step_, rule_.threshold, rule_.confidence);
    state.compared = true;
    state.decided =
        state.comparison.verdict == bench::AbVerdict::kSame ||
        (rule_.is_look(index + 1) && state.comparison.verdict != bench::AbVerdict::kAmbiguous &&
         state.comparison.p_value <= alpha);
    if (progress) progress(index + 1, state);
    if (state.decided) break;
  }
  if (state.compared && !state.decided &&
      state.comparison.verdict != bench::AbVerdict::kAmbiguous) {
    // The interval alone said a change, but not at a look with the look's p-value.
    state.comparison.rule = "AMBIGUOUS: " + state.comparison.rule +
                            "; a change is decided only at a look (rounds 5, 8, 12, " +
                            std::to_string(rule_.max_rounds) + " and " +
                            std::to_string(2 * rule_.max_rounds) +
                            ") with p <= " + format_number(alpha) + ", here p " +
                            format_number(state.comparison.p_value);
    state.comparison.verdict = bench::AbVerdict::kAmbiguous;
  }
  return state;
}

Outcome run_bisect(const Request& request) { return Bisector(request).run(); }

}  // namespace loupe::bisect
