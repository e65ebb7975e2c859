// bisect/bisect.hpp — `loupe bisect`: the first commit (or dependency version) at which one gate
// of an objective goes bad, decided with the gate's own statistics at every step.
//
// Each commit is checked out in a git worktree of its own under <home>/bisect/builds/ (the
// user's checkout is never touched) and built there with the build command; the worktree is the
// commit's build cache, reused by every later bisect. Only the entries the gate reads run.
//   check gates       the gate's own rule on the step's build: pass is good, fail is bad.
//   bench, scenario   an interleaved A/B of the known-good build against the step's build, one
//                     round (both builds, alternating which runs first) after another, until the
//                     rounds decide (PairedRounds below) or the round budget is spent: SLOWER
//                     (worse) is bad, SAME or FASTER good, AMBIGUOUS stays ambiguous.
// Search (Search below): the bad end is verified first (an A/A range blames nothing); then the
// commit nearest the middle of the bracket that has no verdict yet. An ambiguous or unbuildable
// commit is set aside and never moves the bracket, so one noisy step cannot send the search the
// wrong way; when only such commits are left, the ambiguous ones go on to twice the rounds (the
// rounds they have kept), and if that does not decide, the result names the candidates.
// Errors: bad revisions, gates or options are Error(kUsage); a subject that fails is
// Error(kSubject), as in `loupe run`.
// Thread-safety: run_bisect runs on the calling thread; `interrupted` may be set from another.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/compare.hpp"
#include "core/finding.hpp"
#include "core/json.hpp"

namespace loupe::bisect {

enum class StepVerdict { kGood, kBad, kAmbiguous, kUnbuildable };
// "good", "bad", "ambiguous", "unbuildable".
std::string_view step_verdict_name(StepVerdict verdict);

// The bisection over points 0..n-1, where 0 is the known-good end and n-1 the bad end (verified
// by the caller before the search starts). Pure: tested on synthetic verdicts.
class Search {
 public:
  // REQUIRES: points >= 2.
  explicit Search(size_t points);
  // The next point to evaluate, or nullopt when the bracket cannot be narrowed any more.
  std::optional<size_t> next() const;
  // REQUIRES: index < points. Only a good or bad verdict strictly inside the bracket moves it;
  // recording a point again replaces its verdict (a retried ambiguous point).
  void record(size_t index, StepVerdict verdict);
  size_t last_good() const { return last_good_; }
  size_t first_bad() const { return first_bad_; }
  // Found: the first bad point's parent is decided good.
  bool found() const { return first_bad_ == last_good_ + 1; }
  // The points strictly inside the bracket that stayed ambiguous or unbuildable.
  std::vector<size_t> undecided() const;

 private:
  std::vector<std::optional<StepVerdict>> verdicts_;
  size_t last_good_ = 0;
  size_t first_bad_ = 0;
};

// A step's paired rounds against the good build, and the rule that decides them: after
// `min_rounds`, SAME at any round; a change (SLOWER, FASTER) only at a look — rounds 5, 8, 12,
// `max_rounds` and 2 x `max_rounds` — with the paired p-value (bench::trimmed_t_p) at most
// alpha() = 0.05 / the looks there can be (Bonferroni), as `loupe run --baseline` decides its
// benches. The rounds are kept: a retry goes on from them to its larger budget, so its looks
// weigh every round. Pure: tested on scripted values.
class PairedRounds {
 public:
  struct Rule {
    int64_t min_rounds = 5;
    int64_t max_rounds = 12;
    double threshold = 0.02;
    double confidence = 0.95;
    bool is_look(int64_t rounds) const;
    double alpha() const;
  };
  struct State {
    bench::Comparison comparison;  // at the last round compared
    bool compared = false;         // at least min_rounds rounds
    bool decided = false;          // SAME, or a change at a look within alpha
  };
  // One round's values: the good build's and the step's. May throw (the subject failed).
  using RoundFn = std::function<std::pair<double, double>(int64_t round)>;
  // Called after each round from min_rounds on, with the round's number (1-based).
  using Progress = std::function<void(int64_t rounds, const State&)>;

  explicit PairedRounds(Rule rule) : rule_(rule) {}
  // Runs rounds from the ones kept up to `last_round` in all, stopping at the first decided.
  // A comparison that ends undecided with the interval's SLOWER or FASTER is AMBIGUOUS, its rule
  // saying why.
  State run(int64_t last_round, const RoundFn& round, const Progress& progress = {});
  const std::vector<double>& good() const { return good_; }
  const std::vector<double>& step() const { return step_; }
  const Rule& rule() const { return rule_; }

 private:
  Rule rule_;
  std::vector<double> good_;
  std::vector<double> step_;
};

struct Request {
  std::string good;  // git revisions; with over_values, optional (default HEAD for both)
  std::string bad;
  std::filesystem::path objective;
  std::string gate;
  std::string config;  // a [[deployment]] or KEY=VALUE settings, as `loupe run --config`
  // Run in each build's tree (sh -c) before its probes; empty: the objective's [build] command,
  // else nothing to build. {NAME} is replaced by the value under test with over_values.
  std::string build;
  // The subject's working directory inside each build's tree, relative to the repository root;
  // empty: the objective's [build] subject_from, else its subject's folder mapped into the tree.
  std::string subject_from;
  // NAME=V1,V2,...: bisect over these values (V1 good, the last bad) at one commit instead of
  // over commits.
  std::string over_values;
  int64_t max_builds = 0;  // stop when this many builds were run (0: no limit)
  int64_t min_rounds = 5;  // A/B rounds before a bench or scenario step may be decided
  int64_t max_rounds = 12;
  std::optional<double> threshold;  // A/B threshold t; default: the entry's, else 0.02
  double build_timeout_s = 3600;    // when `build` is given; else [build] timeout_s
  std::optional<std::filesystem::path> home;
  std::optional<std::filesystem::path> ledger;
  std::filesystem::path cwd;  // where the repository and .loupe/ are found; empty: current
  std::string command_line;   // how the user invoked it, for the reproduce lines
  const std::atomic<bool>* interrupted = nullptr;
  std::function<void(const std::string&)> progress;  // one line per event, no newline
};

struct Outcome {
  Json data = Json::object();  // the envelope's data (docs/bisect.md)
  std::vector<Finding> findings;
  Verdict verdict = Verdict::kNone;  // fail: a first bad commit named; pass: none regressed
  int exit_code = 0;                 // 1 when a commit is blamed or the search is inconclusive
  std::string run_id;                // the ledger entry
  std::string text;                  // the human report
};

Outcome run_bisect(const Request& request);

}  // namespace loupe::bisect
