// ledger/ledger.hpp — the ledger: every run, its gate verdicts, findings and observations, and the
// hypotheses and decisions that refer to runs, in one SQLite file (WAL mode).
//
// The schema is declared once (ledger.cpp, kMigrations) and versioned with PRAGMA user_version;
// opening a file migrates it to kSchemaVersion in one transaction. A run is written in two steps:
// begin_run records it as in-progress, finish_run adds its gate verdicts, findings and
// observation paths and sets its final status in one transaction, so a killed run is never
// visible as completed. Every write is a transaction (BEGIN IMMEDIATE) and the connection waits
// up to busy_timeout for another writer, so two processes recording at once both land.
// Errors: every SQLite failure is rethrown as Error(kInput) naming the file and what loupe was
// doing; unknown runs or hypotheses are Error(kUsage).
// JSON-valued fields (environment, config, gate statistics) are held as JSON text here so that
// this header stays free of nlohmann-json; src/ledger/exchange.hpp reads and writes them.
// Thread-safety: one Ledger per thread; several Ledger objects (or processes) may share a file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/finding.hpp"
#include "core/json.hpp"
#include "loupe/error.hpp"

namespace loupe::ledger {

inline constexpr int kSchemaVersion = 4;
// PRAGMA application_id of every loupe ledger ("loup"): how loupe tells its ledger from any other
// SQLite file before it writes anything. Ledgers from before it carry 0 and are recognised by
// their tables, then stamped on their first write.
inline constexpr int32_t kApplicationId = 0x6C6F7570;

enum class RunStatus { kInProgress, kCompleted, kInterrupted, kFailed };
enum class LinkRole { kBaseline, kCandidate };
enum class DecisionKind { kRetain, kRevise, kReject, kNeedsReview };
enum class HypothesisStatus { kOpen, kRetained, kRevised, kRejected, kNeedsReview };

// "in-progress", "completed", "interrupted", "failed"; the parsers throw Error(kInput) naming the
// text and the accepted words.
std::string_view run_status_name(RunStatus status);
RunStatus parse_run_status(std::string_view text);
// "baseline", "candidate".
std::string_view link_role_name(LinkRole role);
LinkRole parse_link_role(std::string_view text);
// "retain", "revise", "reject", "needs-review".
std::string_view decision_name(DecisionKind decision);
DecisionKind parse_decision(std::string_view text);
// "open", "retained", "revised", "rejected", "needs-review".
std::string_view hypothesis_status_name(HypothesisStatus status);
HypothesisStatus parse_hypothesis_status(std::string_view text);
// "pass", "fail", "inconclusive", "not-run" (the inverse of gate_verdict_name).
GateVerdict parse_gate_verdict(std::string_view text);

// The UTC time now as ISO 8601 with seconds: "2026-11-30T04:15:02Z".
std::string utc_now();

struct GitState {
  std::string commit;  // empty outside a repository
  bool dirty = false;
  std::string diff_hash;  // sha256 of `git diff HEAD` when dirty, else empty
  // Paths (relative to the repository root, sorted) that differ from HEAD, untracked files
  // included: what a hypothesis's review boundary compares when the commits are the same.
  std::vector<std::string> dirty_paths;
  bool operator==(const GitState&) const = default;
};

struct GateRecord {
  std::string name;
  GateVerdict verdict = GateVerdict::kNotRun;
  std::string statistics_json = "{}";  // n, interval, threshold, estimate ... (a JSON object)
  std::string rule;                    // the rule that decided, in words
  bool operator==(const GateRecord&) const = default;
};

// What is known when a run starts.
struct RunStart {
  std::string id;          // core/home.hpp new_run_id()
  std::string started_at;  // utc_now()
  std::string objective_path;
  std::string objective_hash;  // sha256 of the file's bytes (provenance.hpp)
  GitState git;
  std::string environment_json = "{}";  // the environment fingerprint (a JSON object)
  std::string config_json = "{}";       // the configuration used (a JSON object)
};

// Where an imported run came from (`loupe ledger import`): its numbers were not produced by
// this ledger's loupe, so decisions that rest on it need review (src/hypothesis).
struct ImportOrigin {
  std::string source;       // the export file, as an absolute path
  std::string digest;       // sha256 of the export's bytes
  std::string imported_at;  // utc_now()
  bool operator==(const ImportOrigin&) const = default;
};

struct RunRecord {
  std::string id;
  std::string started_at;
  std::optional<std::string> ended_at;  // absent while in progress
  RunStatus status = RunStatus::kInProgress;
  std::string objective_path;
  std::string objective_hash;
  GitState git;
  std::string environment_json = "{}";
  std::string config_json = "{}";
  std::vector<GateRecord> gates;
  std::vector<Finding> findings;
  std::vector<std::string> observations;  // observation directories or files
  std::optional<ImportOrigin> imported;   // set on runs `loupe ledger import` recorded
  bool operator==(const RunRecord&) const = default;
};

// The deployment settings `loupe run` recorded in run.config_json ({"settings": {...}}), in the
// recorded order; empty when there are none. Throws Error(kInput) naming the run when the config
// is not JSON or its settings are not an object.
std::vector<std::pair<std::string, Json>> recorded_settings(const RunRecord& run);

// One line of `loupe ledger list`.
struct RunSummary {
  std::string id;
  std::string started_at;
  std::optional<std::string> ended_at;
  RunStatus status = RunStatus::kInProgress;
  std::string objective_path;
  int64_t gates_passed = 0;
  int64_t gates_failed = 0;
  int64_t gates_inconclusive = 0;
  int64_t gates_not_run = 0;
  int64_t findings = 0;
  bool imported = false;
};

struct HypothesisLink {
  std::string run_id;
  LinkRole role = LinkRole::kBaseline;
  std::string linked_at;
  bool operator==(const HypothesisLink&) const = default;
};

// Why a decision was recorded as needs-review: a [review] category and what touched it.
struct ReviewNote {
  std::string category;
  std::string reason;
  bool operator==(const ReviewNote&) const = default;
};

// A person's sign-off on a needs-review decision (CLI only).
struct Approval {
  std::string by;
  std::string approved_at;
  bool operator==(const Approval&) const = default;
};

struct Decision {
  int64_t id = 0;
  DecisionKind decision = DecisionKind::kRetain;
  std::string why;
  std::string who;
  std::string decided_at;
  std::vector<ReviewNote> triggers;  // needs-review decisions: every trigger, in order
  std::optional<Approval> approval;  // needs-review decisions, once approved
  bool operator==(const Decision&) const = default;
};

struct Hypothesis {
  int64_t id = 0;
  std::string text;
  std::optional<std::string> skeleton_id;
  HypothesisStatus status = HypothesisStatus::kOpen;
  std::string created_at;
  std::vector<HypothesisLink> links;  // in the order they were made
  std::vector<Decision> decisions;    // oldest first
  bool operator==(const Hypothesis&) const = default;
};

class Ledger {
 public:
  // Opens (creating the file and its folder when absent) and migrates to kSchemaVersion.
  // Throws Error(kInput), having written nothing, when the file is not a SQLite database, is a
  // database that is not a loupe ledger (application_id and tables), or was written by a newer
  // loupe.
  static Ledger open(const std::filesystem::path& file);
  // Opens an existing ledger for reading only (SQLITE_OPEN_READONLY): never creates the file or
  // a schema, never migrates or switches the journal mode; reads older schemas as they are.
  // Throws as open() does, and Error(kUsage) when the file does not exist.
  static Ledger open_read_only(const std::filesystem::path& file);
  // For migration tests: creates or migrates only up to `version` (1 <= version <= latest).
  static Ledger open_at_version(const std::filesystem::path& file, int version);

  Ledger(Ledger&&) noexcept;
  Ledger& operator=(Ledger&&) noexcept;
  ~Ledger();

  const std::filesystem::path& file() const;
  int schema_version() const;

  // --- runs -----------------------------------------------------------------------------------
  // Records the run as in-progress. Throws Error(kUsage) when the id is already taken.
  void begin_run(const RunStart& start);
  // Adds gates, findings and observations (after any already recorded) and sets the status and
  // end time, in one transaction; `config_json`, when given, replaces the recorded configuration
  // (what only the run's end knows, such as the Slurm job ids). REQUIRES: status is not
  // kInProgress.
  void finish_run(const std::string& run_id, RunStatus status, const std::string& ended_at,
                  const std::vector<GateRecord>& gates, const std::vector<Finding>& findings,
                  const std::vector<std::string>& observations,
                  const std::optional<std::string>& config_json = std::nullopt);
  // Inserts a whole run (import) in one transaction, with run.imported when set. Throws
  // Error(kUsage) when the id is taken.
  void insert_run(const RunRecord& run);

  std::optional<RunRecord> find_run(const std::string& run_id) const;
  // Throws Error(kUsage) naming the run and the file when it is not recorded.
  RunRecord get_run(const std::string& run_id) const;
  // Newest first (by start time, then id).
  std::vector<RunSummary> list_runs(int64_t limit, int64_t offset = 0) const;
  int64_t count_runs() const;

  // --- hypotheses and decisions (issue 8 builds the commands) ----------------------------------
  // Returns the new hypothesis id; status open.
  int64_t add_hypothesis(const std::string& text, const std::optional<std::string>& skeleton_id,
                         const std::string& created_at);
  // Throws Error(kUsage) when the hypothesis or the run is unknown; linking twice is a no-op.
  void link_run(int64_t hypothesis_id, const std::string& run_id, LinkRole role,
                const std::string& linked_at);
  // Records the decision and sets the hypothesis's status accordingly, in one transaction.
  int64_t add_decision(int64_t hypothesis_id, DecisionKind decision, const std::string& why,
                       const std::string& who, const std::string& decided_at);
  // The same with the review triggers of a needs-review decision.
  int64_t add_decision(int64_t hypothesis_id, DecisionKind decision, const std::string& why,
                       const std::string& who, const std::string& decided_at,
                       const std::vector<ReviewNote>& triggers);
  // Approves the hypothesis's newest decision, which must be an unapproved needs-review, and
  // records the retain decision it stands for (who = `by`), in one transaction; returns the
  // retain decision's id. Throws Error(kUsage) when the hypothesis is unknown or not awaiting
  // review.
  int64_t approve_review(int64_t hypothesis_id, const std::string& by,
                         const std::string& approved_at);
  std::optional<Hypothesis> find_hypothesis(int64_t hypothesis_id) const;
  // Oldest first, links and decisions included.
  std::vector<Hypothesis> list_hypotheses() const;

  // The connection; opaque outside ledger.cpp.
  struct Impl;

 private:
  explicit Ledger(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace loupe::ledger
