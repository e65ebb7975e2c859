#include "ledger/ledger.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <ctime>
#include <utility>

#include "core/json.hpp"
#include "core/limits.hpp"
#include "loupe/error.hpp"

namespace loupe::ledger {
namespace {

// The schema, declared once: migration N takes a database from user_version N-1 to N. Never edit
// a shipped step; append a new one (and a test that migrates data through it).
struct Migration {
  int version;
  const char* sql;
};

constexpr std::array<Migration, 4> kMigrations = {{
    {1, R"sql(
CREATE TABLE runs (
  id TEXT PRIMARY KEY,
  started_at TEXT NOT NULL,
  ended_at TEXT,
  status TEXT NOT NULL CHECK (status IN ('in-progress', 'completed', 'interrupted', 'failed')),
  objective_path TEXT NOT NULL,
  objective_hash TEXT NOT NULL,
  git_commit TEXT NOT NULL,
  git_dirty INTEGER NOT NULL,
  git_diff_hash TEXT NOT NULL,
  environment TEXT NOT NULL,
  config TEXT NOT NULL
);
CREATE INDEX runs_by_start ON runs (started_at);
CREATE TABLE gate_verdicts (
  run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  name TEXT NOT NULL,
  verdict TEXT NOT NULL CHECK (verdict IN ('pass', 'fail', 'inconclusive', 'not-run')),
  statistics TEXT NOT NULL,
  rule TEXT NOT NULL,
  PRIMARY KEY (run_id, seq)
);
CREATE TABLE findings (
  run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  finding_id TEXT NOT NULL,
  layer TEXT NOT NULL,
  severity TEXT NOT NULL,
  json TEXT NOT NULL,
  PRIMARY KEY (run_id, seq)
);
CREATE INDEX findings_by_id ON findings (finding_id);
CREATE INDEX findings_by_layer_severity ON findings (layer, severity);
CREATE TABLE observations (
  run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  path TEXT NOT NULL,
  PRIMARY KEY (run_id, seq)
);
)sql"},
    {2, R"sql(
CREATE TABLE hypotheses (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  text TEXT NOT NULL,
  skeleton_id TEXT,
  status TEXT NOT NULL
    CHECK (status IN ('open', 'retained', 'revised', 'rejected', 'needs-review')),
  created_at TEXT NOT NULL
);
CREATE TABLE hypothesis_runs (
  hypothesis_id INTEGER NOT NULL REFERENCES hypotheses (id) ON DELETE CASCADE,
  run_id TEXT NOT NULL REFERENCES runs (id),
  role TEXT NOT NULL CHECK (role IN ('baseline', 'candidate')),
  linked_at TEXT NOT NULL,
  seq INTEGER NOT NULL,
  PRIMARY KEY (hypothesis_id, run_id, role)
);
CREATE TABLE decisions (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  hypothesis_id INTEGER NOT NULL REFERENCES hypotheses (id) ON DELETE CASCADE,
  decision TEXT NOT NULL CHECK (decision IN ('retain', 'revise', 'reject', 'needs-review')),
  why TEXT NOT NULL,
  who TEXT NOT NULL,
  decided_at TEXT NOT NULL
);
CREATE INDEX decisions_by_hypothesis ON decisions (hypothesis_id);
)sql"},
    // 3: what the review boundary needs (issue 8): the paths each run's working tree changed,
    // why a decision needs review, and who approved it. Runs recorded before this step have no
    // dirty paths; a dirty one among them makes its changes unknown to the review boundary.
    {3, R"sql(
CREATE TABLE run_dirty_paths (
  run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  path TEXT NOT NULL,
  PRIMARY KEY (run_id, seq)
);
CREATE TABLE decision_triggers (
  decision_id INTEGER NOT NULL REFERENCES decisions (id) ON DELETE CASCADE,
  seq INTEGER NOT NULL,
  category TEXT NOT NULL,
  reason TEXT NOT NULL,
  PRIMARY KEY (decision_id, seq)
);
CREATE TABLE approvals (
  decision_id INTEGER PRIMARY KEY REFERENCES decisions (id) ON DELETE CASCADE,
  approved_by TEXT NOT NULL,
  approved_at TEXT NOT NULL
);
)sql"},
    // 4: runs recorded by `loupe ledger import` (issue 17): where each came from and the digest
    // of the export, so every listing can say so and decisions resting on one need review.
    {4, R"sql(
CREATE TABLE run_imports (
  run_id TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
  source TEXT NOT NULL,
  digest TEXT NOT NULL,
  imported_at TEXT NOT NULL
);
)sql"},
}};

// The tables every loupe ledger has had since schema 1: how a ledger written before
// application_id was set is told from another database.
constexpr std::array<const char*, 4> kLedgerTables = {"runs", "gate_verdicts", "findings",
                                                      "observations"};

constexpr int kBusyTimeoutMs = 10000;

template <class Enum, size_t N>
Enum parse_word(std::string_view text,
                const std::array<std::pair<Enum, std::string_view>, N>& words,
                std::string_view what) {
  std::string accepted;
  for (const auto& [value, word] : words) {
    if (word == text) return value;
    if (!accepted.empty()) accepted += ", ";
    accepted += word;
  }
  throw Error(ErrorCode::kInput, "unknown " + std::string(what) + " '" + std::string(text) +
                                     "'; expected one of " + accepted);
}

template <class Enum, size_t N>
std::string_view word_of(Enum value,
                         const std::array<std::pair<Enum, std::string_view>, N>& words) {
  for (const auto& [candidate, word] : words) {
    if (candidate == value) return word;
  }
  return "?";
}

constexpr std::array<std::pair<RunStatus, std::string_view>, 4> kRunStatusWords = {{
    {RunStatus::kInProgress, "in-progress"},
    {RunStatus::kCompleted, "completed"},
    {RunStatus::kInterrupted, "interrupted"},
    {RunStatus::kFailed, "failed"},
}};
constexpr std::array<std::pair<LinkRole, std::string_view>, 2> kLinkRoleWords = {{
    {LinkRole::kBaseline, "baseline"},
    {LinkRole::kCandidate, "candidate"},
}};
constexpr std::array<std::pair<DecisionKind, std::string_view>, 4> kDecisionWords = {{
    {DecisionKind::kRetain, "retain"},
    {DecisionKind::kRevise, "revise"},
    {DecisionKind::kReject, "reject"},
    {DecisionKind::kNeedsReview, "needs-review"},
}};
constexpr std::array<std::pair<HypothesisStatus, std::string_view>, 5> kHypothesisStatusWords = {{
    {HypothesisStatus::kOpen, "open"},
    {HypothesisStatus::kRetained, "retained"},
    {HypothesisStatus::kRevised, "revised"},
    {HypothesisStatus::kRejected, "rejected"},
    {HypothesisStatus::kNeedsReview, "needs-review"},
}};
constexpr std::array<std::pair<GateVerdict, std::string_view>, 4> kGateVerdictWords = {{
    {GateVerdict::kPass, "pass"},
    {GateVerdict::kFail, "fail"},
    {GateVerdict::kInconclusive, "inconclusive"},
    {GateVerdict::kNotRun, "not-run"},
}};

HypothesisStatus status_after(DecisionKind decision) {
  switch (decision) {
    case DecisionKind::kRetain:
      return HypothesisStatus::kRetained;
    case DecisionKind::kRevise:
      return HypothesisStatus::kRevised;
    case DecisionKind::kReject:
      return HypothesisStatus::kRejected;
    case DecisionKind::kNeedsReview:
      return HypothesisStatus::kNeedsReview;
  }
  return HypothesisStatus::kOpen;
}

}  // namespace

std::string_view run_status_name(RunStatus status) { return word_of(status, kRunStatusWords); }
RunStatus parse_run_status(std::string_view text) {
  return parse_word(text, kRunStatusWords, "run status");
}
std::string_view link_role_name(LinkRole role) { return word_of(role, kLinkRoleWords); }
LinkRole parse_link_role(std::string_view text) {
  return parse_word(text, kLinkRoleWords, "link role");
}
std::string_view decision_name(DecisionKind decision) { return word_of(decision, kDecisionWords); }
DecisionKind parse_decision(std::string_view text) {
  return parse_word(text, kDecisionWords, "decision");
}
std::string_view hypothesis_status_name(HypothesisStatus status) {
  return word_of(status, kHypothesisStatusWords);
}
HypothesisStatus parse_hypothesis_status(std::string_view text) {
  return parse_word(text, kHypothesisStatusWords, "hypothesis status");
}
GateVerdict parse_gate_verdict(std::string_view text) {
  return parse_word(text, kGateVerdictWords, "gate verdict");
}

std::string utc_now() {
  std::time_t seconds = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return stamp;
}

// ---------------------------------------------------------------------------------------------
// The SQLite edge: every call below goes through check(), which turns a failure into loupe::Error.

struct Ledger::Impl {
  std::filesystem::path file;
  sqlite3* db = nullptr;
  // Lower for migration tests (open_at_version) and for older ledgers opened read-only.
  int version = kSchemaVersion;

  ~Impl() {
    if (db != nullptr) sqlite3_close_v2(db);
  }

  [[noreturn]] void fail(int rc, std::string_view doing) const {
    const char* detail = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    throw Error(ErrorCode::kInput,
                "ledger " + file.string() + ": " + std::string(doing) + ": " + detail,
                rc == SQLITE_BUSY ? "another loupe process holds the ledger; retry when it ends"
                                  : "check that the file is a loupe ledger and is writable, or "
                                    "pass --ledger FILE to use another");
  }

  void check(int rc, std::string_view doing) const {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) fail(rc, doing);
  }

  void exec(const char* sql, std::string_view doing) const {
    char* message = nullptr;
    const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &message);
    if (rc != SQLITE_OK) {
      std::string detail = message != nullptr ? message : sqlite3_errstr(rc);
      sqlite3_free(message);
      throw Error(ErrorCode::kInput,
                  "ledger " + file.string() + ": " + std::string(doing) + ": " + detail,
                  "check that the file is a loupe ledger and is writable, or pass --ledger FILE");
    }
  }
};

namespace {

// One prepared statement; binds by position (1-based) and steps.
class Statement {
 public:
  Statement(const Ledger::Impl& impl, const char* sql, std::string_view doing)
      : impl_(impl), doing_(doing) {
    impl_.check(sqlite3_prepare_v2(impl_.db, sql, -1, &statement_, nullptr), doing_);
  }
  ~Statement() { sqlite3_finalize(statement_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int index, const std::string& text) {
    impl_.check(sqlite3_bind_text(statement_, index, text.data(), static_cast<int>(text.size()),
                                  SQLITE_TRANSIENT),
                doing_);
    return *this;
  }
  Statement& bind(int index, std::string_view text) { return bind(index, std::string(text)); }
  Statement& bind(int index, const char* text) { return bind(index, std::string(text)); }
  Statement& bind(int index, int64_t number) {
    impl_.check(sqlite3_bind_int64(statement_, index, number), doing_);
    return *this;
  }
  Statement& bind(int index, const std::optional<std::string>& text) {
    if (!text) {
      impl_.check(sqlite3_bind_null(statement_, index), doing_);
      return *this;
    }
    return bind(index, *text);
  }

  // True while a row is available.
  bool step() {
    const int rc = sqlite3_step(statement_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    impl_.fail(rc, doing_);
  }
  void run() {
    while (step()) {
    }
  }
  // Ready for the next row's bindings.
  void reset() {
    sqlite3_reset(statement_);
    sqlite3_clear_bindings(statement_);
  }

  std::string text(int column) const {
    const unsigned char* value = sqlite3_column_text(statement_, column);
    if (value == nullptr) return {};
    return std::string(reinterpret_cast<const char*>(value),
                       static_cast<size_t>(sqlite3_column_bytes(statement_, column)));
  }
  std::optional<std::string> optional_text(int column) const {
    if (sqlite3_column_type(statement_, column) == SQLITE_NULL) return std::nullopt;
    return text(column);
  }
  int64_t integer(int column) const { return sqlite3_column_int64(statement_, column); }

 private:
  const Ledger::Impl& impl_;
  std::string doing_;
  sqlite3_stmt* statement_ = nullptr;
};

// BEGIN IMMEDIATE takes the write lock up front, so busy_timeout applies; a deferred transaction
// that reads first could not wait for a writer that committed in between (SQLITE_BUSY_SNAPSHOT).
class WriteTransaction {
 public:
  WriteTransaction(const Ledger::Impl& impl, std::string doing)
      : impl_(impl), doing_(std::move(doing)) {
    impl_.exec("BEGIN IMMEDIATE", doing_);
  }
  ~WriteTransaction() {
    if (!committed_) sqlite3_exec(impl_.db, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  WriteTransaction(const WriteTransaction&) = delete;
  WriteTransaction& operator=(const WriteTransaction&) = delete;
  void commit() {
    impl_.exec("COMMIT", doing_);
    committed_ = true;
  }

 private:
  const Ledger::Impl& impl_;
  std::string doing_;
  bool committed_ = false;
};

int read_user_version(const Ledger::Impl& impl) {
  Statement statement(impl, "PRAGMA user_version", "reading the schema version");
  statement.step();
  return static_cast<int>(statement.integer(0));
}

void refuse_newer(const Ledger::Impl& impl, int current) {
  if (current > kSchemaVersion) {
    throw Error(ErrorCode::kInput,
                "ledger " + impl.file.string() + ": schema version " + std::to_string(current) +
                    " was written by a newer loupe (this one reads up to " +
                    std::to_string(kSchemaVersion) + ")",
                "update loupe, or pass --ledger FILE to use another ledger");
  }
}

int32_t read_application_id(const Ledger::Impl& impl) {
  Statement statement(impl, "PRAGMA application_id", "reading the application id");
  statement.step();
  return static_cast<int32_t>(statement.integer(0));
}

// Says whether the open file is a loupe ledger before anything is written to it: stamped with
// kApplicationId; or unstamped with loupe's tables (a ledger from before the stamp); or an empty
// database (a new ledger) when `allow_empty`. Anything else is refused. The first statement also
// tells whether the file is a SQLite database at all.
//
// Its reads share one read transaction: two `loupe run`s starting on a new ledger at once once had
// the second read the application id (0) before the first committed its schema and the table list
// after, and refuse the ledger as "not a loupe ledger" (LedgerDurabilityTest's two runs, ~1 in 2
// under ctest -j2 on a 2-core machine). In one snapshot it sees the file empty or stamped.
void recognise(const Ledger::Impl& impl, bool allow_empty) {
  impl.exec("BEGIN", "starting a read of the ledger's header");
  struct EndRead {
    sqlite3* db;
    ~EndRead() { sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr); }
  } end_read{impl.db};
  const int32_t application_id = read_application_id(impl);
  const int version = read_user_version(impl);
  if (application_id == kApplicationId) {
    refuse_newer(impl, version);
    return;
  }
  std::vector<std::string> tables;
  {
    Statement statement(impl, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
                        "listing the tables");
    while (statement.step()) tables.push_back(statement.text(0));
  }
  if (application_id == 0 && tables.empty() && version == 0 && allow_empty) return;
  const bool has_loupe_tables =
      std::all_of(kLedgerTables.begin(), kLedgerTables.end(), [&](const char* table) {
        return std::find(tables.begin(), tables.end(), table) != tables.end();
      });
  if (application_id == 0 && has_loupe_tables && version >= 1) {
    refuse_newer(impl, version);
    return;
  }
  std::string listed;
  for (size_t index = 0; index < tables.size() && index < 8; ++index) {
    listed += (index ? ", " : "") + tables[index];
  }
  if (tables.size() > 8) listed += ", ...";
  char id_text[16];
  std::snprintf(id_text, sizeof id_text, "0x%08x", static_cast<uint32_t>(application_id));
  throw Error(ErrorCode::kInput,
              "ledger " + impl.file.string() + ": not a loupe ledger (application_id " + id_text +
                  ", user_version " + std::to_string(version) + ", " +
                  (tables.empty() ? std::string("no tables") : "tables: " + listed) +
                  "); expected a SQLite file loupe created (application_id 0x6c6f7570)",
              "loupe writes nothing to it; pass --ledger FILE (or the ledger argument) naming a "
              "loupe ledger, or a new file");
}

void migrate(Ledger::Impl& impl, int target) {
  // Most opens find the schema current and stamped: check without taking the write lock.
  const int before = read_user_version(impl);
  refuse_newer(impl, before);
  if (before >= target && read_application_id(impl) == kApplicationId) return;
  WriteTransaction transaction(impl, "migrating the schema");
  const int current = read_user_version(impl);  // another process may have migrated meanwhile
  refuse_newer(impl, current);
  for (const auto& migration : kMigrations) {
    if (migration.version <= current || migration.version > target) continue;
    impl.exec(migration.sql,
              "migrating the schema to version " + std::to_string(migration.version));
    impl.exec(("PRAGMA user_version = " + std::to_string(migration.version)).c_str(),
              "recording schema version " + std::to_string(migration.version));
  }
  impl.exec(("PRAGMA application_id = " + std::to_string(kApplicationId)).c_str(),
            "stamping the ledger's application id");
  transaction.commit();
}

int64_t next_seq(const Ledger::Impl& impl, const char* table, const std::string& run_id) {
  const std::string sql =
      std::string("SELECT COALESCE(MAX(seq) + 1, 0) FROM ") + table + " WHERE run_id = ?1";
  Statement statement(impl, sql.c_str(), std::string("numbering ") + table);
  statement.bind(1, run_id);
  statement.step();
  return statement.integer(0);
}

bool run_exists(const Ledger::Impl& impl, const std::string& run_id) {
  Statement statement(impl, "SELECT 1 FROM runs WHERE id = ?1", "looking up run " + run_id);
  statement.bind(1, run_id);
  return statement.step();
}

void insert_run_row(const Ledger::Impl& impl, const RunRecord& run) {
  if (run_exists(impl, run.id)) {
    throw Error(ErrorCode::kUsage,
                "ledger " + impl.file.string() + ": run " + run.id + " is already recorded",
                "a run id is recorded once; `loupe ledger show " + run.id + "` shows it");
  }
  Statement statement(impl,
                      "INSERT INTO runs (id, started_at, ended_at, status, objective_path, "
                      "objective_hash, git_commit, git_dirty, git_diff_hash, environment, config) "
                      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                      "recording run " + run.id);
  statement.bind(1, run.id)
      .bind(2, run.started_at)
      .bind(3, run.ended_at)
      .bind(4, run_status_name(run.status))
      .bind(5, run.objective_path)
      .bind(6, run.objective_hash)
      .bind(7, run.git.commit)
      .bind(8, int64_t{run.git.dirty ? 1 : 0})
      .bind(9, run.git.diff_hash)
      .bind(10, run.environment_json)
      .bind(11, run.config_json);
  statement.run();
  if (impl.version < 3) return;  // a migration test's older schema has no dirty paths
  Statement insert_path(impl, "INSERT INTO run_dirty_paths (run_id, seq, path) VALUES (?1, ?2, ?3)",
                        "recording the dirty paths of run " + run.id);
  int64_t seq = 0;
  for (const auto& path : run.git.dirty_paths) {
    insert_path.bind(1, run.id).bind(2, seq++).bind(3, path);
    insert_path.run();
    insert_path.reset();
  }
  if (!run.imported) return;
  if (impl.version < 4) {
    throw Error(ErrorCode::kInternal, "recording an imported run needs ledger schema 4");
  }
  Statement insert_import(impl,
                          "INSERT INTO run_imports (run_id, source, digest, imported_at) "
                          "VALUES (?1, ?2, ?3, ?4)",
                          "recording where run " + run.id + " was imported from");
  insert_import.bind(1, run.id)
      .bind(2, run.imported->source)
      .bind(3, run.imported->digest)
      .bind(4, run.imported->imported_at);
  insert_import.run();
}

void insert_children(const Ledger::Impl& impl, const std::string& run_id,
                     const std::vector<GateRecord>& gates, const std::vector<Finding>& findings,
                     const std::vector<std::string>& observations) {
  const std::string doing = "recording the results of run " + run_id;
  {
    int64_t seq = next_seq(impl, "gate_verdicts", run_id);
    Statement insert(impl,
                     "INSERT INTO gate_verdicts (run_id, seq, name, verdict, statistics, rule) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                     doing);
    for (const auto& gate : gates) {
      insert.bind(1, run_id)
          .bind(2, seq++)
          .bind(3, gate.name)
          .bind(4, gate_verdict_name(gate.verdict))
          .bind(5, gate.statistics_json)
          .bind(6, gate.rule);
      insert.run();
      insert.reset();
    }
  }
  {
    int64_t seq = next_seq(impl, "findings", run_id);
    Statement insert(impl,
                     "INSERT INTO findings (run_id, seq, finding_id, layer, severity, json) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                     doing);
    for (const auto& finding : findings) {
      std::string json;
      try {
        json = finding_to_json(finding).dump();
      } catch (const Json::exception& error) {
        throw Error(ErrorCode::kInput,
                    "ledger " + impl.file.string() + ": " + doing + ": finding " + finding.id +
                        " cannot be written as JSON: " + json_error_text(error),
                    "findings hold UTF-8 text");
      }
      insert.bind(1, run_id)
          .bind(2, seq++)
          .bind(3, finding.id)
          .bind(4, layer_name(finding.layer))
          .bind(5, severity_name(finding.severity))
          .bind(6, json);
      insert.run();
      insert.reset();
    }
  }
  {
    int64_t seq = next_seq(impl, "observations", run_id);
    Statement insert(impl, "INSERT INTO observations (run_id, seq, path) VALUES (?1, ?2, ?3)",
                     doing);
    for (const auto& path : observations) {
      insert.bind(1, run_id).bind(2, seq++).bind(3, path);
      insert.run();
      insert.reset();
    }
  }
}

void require_hypothesis(const Ledger::Impl& impl, int64_t hypothesis_id) {
  Statement statement(impl, "SELECT 1 FROM hypotheses WHERE id = ?1",
                      "looking up hypothesis " + std::to_string(hypothesis_id));
  statement.bind(1, hypothesis_id);
  if (!statement.step()) {
    throw Error(ErrorCode::kUsage,
                "ledger " + impl.file.string() + ": no hypothesis " + std::to_string(hypothesis_id),
                "`loupe hypothesis list` shows the recorded hypotheses");
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Ledger::Ledger(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Ledger::Ledger(Ledger&&) noexcept = default;
Ledger& Ledger::operator=(Ledger&&) noexcept = default;
Ledger::~Ledger() = default;

Ledger Ledger::open(const std::filesystem::path& file) {
  return open_at_version(file, kSchemaVersion);
}

Ledger Ledger::open_at_version(const std::filesystem::path& file, int version) {
  if (version < 1 || version > kSchemaVersion) {
    throw Error(ErrorCode::kInternal, "ledger schema version " + std::to_string(version) +
                                          " does not exist (1.." + std::to_string(kSchemaVersion) +
                                          ")");
  }
  auto impl = std::make_unique<Impl>();
  impl->file = file;
  if (file.has_parent_path()) {
    std::error_code error;
    std::filesystem::create_directories(file.parent_path(), error);
    if (error) {
      throw Error(ErrorCode::kInput,
                  "ledger " + file.string() + ": cannot create its folder: " + error.message(),
                  "pass --ledger FILE or --home DIR to put the ledger somewhere writable");
    }
  }
  const int rc =
      sqlite3_open_v2(file.c_str(), &impl->db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) impl->fail(rc, "opening the ledger");
  impl->check(sqlite3_busy_timeout(impl->db, kBusyTimeoutMs), "setting busy_timeout");
  // Nothing is written (not even the journal mode) until the file is known to be a ledger: a
  // read-only tool once switched an unrelated database to WAL and created loupe's tables in it.
  recognise(*impl, true);
  // WAL lets readers proceed while a run is being recorded.
  {
    Statement statement(*impl, "PRAGMA journal_mode = WAL", "switching to WAL mode");
    statement.run();
  }
  impl->exec("PRAGMA foreign_keys = ON", "enabling foreign keys");
  migrate(*impl, version);
  impl->version = version;
  return Ledger(std::move(impl));
}

Ledger Ledger::open_read_only(const std::filesystem::path& file) {
  std::error_code error;
  if (!std::filesystem::exists(file, error)) {
    throw Error(ErrorCode::kUsage, "no ledger at " + file.string(),
                "`loupe run OBJECTIVE` records runs there; pass --ledger FILE or --home DIR to "
                "read another");
  }
  auto impl = std::make_unique<Impl>();
  impl->file = file;
  const int rc =
      sqlite3_open_v2(file.c_str(), &impl->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) impl->fail(rc, "opening the ledger read-only");
  impl->check(sqlite3_busy_timeout(impl->db, kBusyTimeoutMs), "setting busy_timeout");
  recognise(*impl, false);
  impl->version = read_user_version(*impl);
  return Ledger(std::move(impl));
}

const std::filesystem::path& Ledger::file() const { return impl_->file; }

int Ledger::schema_version() const { return read_user_version(*impl_); }

void Ledger::begin_run(const RunStart& start) {
  RunRecord run;
  run.id = start.id;
  run.started_at = start.started_at;
  run.status = RunStatus::kInProgress;
  run.objective_path = start.objective_path;
  run.objective_hash = start.objective_hash;
  run.git = start.git;
  run.environment_json = start.environment_json;
  run.config_json = start.config_json;
  WriteTransaction transaction(*impl_, "starting run " + start.id);
  insert_run_row(*impl_, run);
  transaction.commit();
}

void Ledger::finish_run(const std::string& run_id, RunStatus status, const std::string& ended_at,
                        const std::vector<GateRecord>& gates, const std::vector<Finding>& findings,
                        const std::vector<std::string>& observations,
                        const std::optional<std::string>& config_json) {
  if (status == RunStatus::kInProgress) {
    throw Error(ErrorCode::kInternal, "finish_run of " + run_id + " with status in-progress");
  }
  WriteTransaction transaction(*impl_, "finishing run " + run_id);
  if (!run_exists(*impl_, run_id)) {
    throw Error(ErrorCode::kUsage,
                "ledger " + impl_->file.string() + ": no run " + run_id + " to finish",
                "begin_run records a run before finish_run completes it");
  }
  insert_children(*impl_, run_id, gates, findings, observations);
  Statement update(*impl_, "UPDATE runs SET status = ?2, ended_at = ?3 WHERE id = ?1",
                   "finishing run " + run_id);
  update.bind(1, run_id).bind(2, run_status_name(status)).bind(3, ended_at);
  update.run();
  if (config_json) {
    Statement config(*impl_, "UPDATE runs SET config = ?2 WHERE id = ?1",
                     "recording the configuration of run " + run_id);
    config.bind(1, run_id).bind(2, *config_json);
    config.run();
  }
  transaction.commit();
}

void Ledger::insert_run(const RunRecord& run) {
  WriteTransaction transaction(*impl_, "importing run " + run.id);
  insert_run_row(*impl_, run);
  insert_children(*impl_, run.id, run.gates, run.findings, run.observations);
  transaction.commit();
}

std::optional<RunRecord> Ledger::find_run(const std::string& run_id) const {
  const std::string doing = "reading run " + run_id;
  RunRecord run;
  {
    Statement statement(*impl_,
                        "SELECT id, started_at, ended_at, status, objective_path, objective_hash, "
                        "git_commit, git_dirty, git_diff_hash, environment, config FROM runs "
                        "WHERE id = ?1",
                        doing);
    statement.bind(1, run_id);
    if (!statement.step()) return std::nullopt;
    run.id = statement.text(0);
    run.started_at = statement.text(1);
    run.ended_at = statement.optional_text(2);
    run.status = parse_run_status(statement.text(3));
    run.objective_path = statement.text(4);
    run.objective_hash = statement.text(5);
    run.git.commit = statement.text(6);
    run.git.dirty = statement.integer(7) != 0;
    run.git.diff_hash = statement.text(8);
    run.environment_json = statement.text(9);
    run.config_json = statement.text(10);
  }
  if (impl_->version >= 3) {
    Statement statement(*impl_, "SELECT path FROM run_dirty_paths WHERE run_id = ?1 ORDER BY seq",
                        doing);
    statement.bind(1, run_id);
    while (statement.step()) run.git.dirty_paths.push_back(statement.text(0));
  }
  {
    Statement statement(*impl_,
                        "SELECT name, verdict, statistics, rule FROM gate_verdicts WHERE run_id = "
                        "?1 ORDER BY seq",
                        doing);
    statement.bind(1, run_id);
    while (statement.step()) {
      run.gates.push_back({statement.text(0), parse_gate_verdict(statement.text(1)),
                           statement.text(2), statement.text(3)});
    }
  }
  {
    Statement statement(*impl_, "SELECT json FROM findings WHERE run_id = ?1 ORDER BY seq", doing);
    statement.bind(1, run_id);
    while (statement.step()) {
      const std::string text = statement.text(0);
      try {
        check_json_nesting(text,
                           "ledger " + impl_->file.string() + ": run " + run_id + ": a finding");
        run.findings.push_back(finding_from_json(Json::parse(text)));
      } catch (const Json::exception& error) {
        throw Error(ErrorCode::kInput,
                    "ledger " + impl_->file.string() + ": run " + run_id +
                        ": a finding's JSON is unreadable: " + json_error_text(error));
      }
    }
  }
  {
    Statement statement(*impl_, "SELECT path FROM observations WHERE run_id = ?1 ORDER BY seq",
                        doing);
    statement.bind(1, run_id);
    while (statement.step()) run.observations.push_back(statement.text(0));
  }
  if (impl_->version >= 4) {
    Statement statement(
        *impl_, "SELECT source, digest, imported_at FROM run_imports WHERE run_id = ?1", doing);
    statement.bind(1, run_id);
    if (statement.step()) {
      run.imported = ImportOrigin{statement.text(0), statement.text(1), statement.text(2)};
    }
  }
  return run;
}

RunRecord Ledger::get_run(const std::string& run_id) const {
  auto run = find_run(run_id);
  if (!run) {
    throw Error(ErrorCode::kUsage, "ledger " + impl_->file.string() + ": no run " + run_id,
                "`loupe ledger list` shows the recorded runs");
  }
  return *std::move(run);
}

std::vector<RunSummary> Ledger::list_runs(int64_t limit, int64_t offset) const {
  const std::string imported =
      impl_->version >= 4 ? " EXISTS (SELECT 1 FROM run_imports i WHERE i.run_id = r.id)" : " 0";
  const std::string sql =
      "SELECT r.id, r.started_at, r.ended_at, r.status, r.objective_path,"
      " (SELECT COUNT(*) FROM gate_verdicts g WHERE g.run_id = r.id AND g.verdict = 'pass'),"
      " (SELECT COUNT(*) FROM gate_verdicts g WHERE g.run_id = r.id AND g.verdict = 'fail'),"
      " (SELECT COUNT(*) FROM gate_verdicts g WHERE g.run_id = r.id AND"
      "  g.verdict = 'inconclusive'),"
      " (SELECT COUNT(*) FROM gate_verdicts g WHERE g.run_id = r.id AND g.verdict = 'not-run'),"
      " (SELECT COUNT(*) FROM findings f WHERE f.run_id = r.id)," +
      imported + " FROM runs r ORDER BY r.started_at DESC, r.id DESC LIMIT ?1 OFFSET ?2";
  Statement statement(*impl_, sql.c_str(), "listing runs");
  statement.bind(1, limit).bind(2, offset);
  std::vector<RunSummary> runs;
  while (statement.step()) {
    RunSummary summary;
    summary.id = statement.text(0);
    summary.started_at = statement.text(1);
    summary.ended_at = statement.optional_text(2);
    summary.status = parse_run_status(statement.text(3));
    summary.objective_path = statement.text(4);
    summary.gates_passed = statement.integer(5);
    summary.gates_failed = statement.integer(6);
    summary.gates_inconclusive = statement.integer(7);
    summary.gates_not_run = statement.integer(8);
    summary.findings = statement.integer(9);
    summary.imported = statement.integer(10) != 0;
    runs.push_back(std::move(summary));
  }
  return runs;
}

int64_t Ledger::count_runs() const {
  Statement statement(*impl_, "SELECT COUNT(*) FROM runs", "counting runs");
  statement.step();
  return statement.integer(0);
}

int64_t Ledger::add_hypothesis(const std::string& text,
                               const std::optional<std::string>& skeleton_id,
                               const std::string& created_at) {
  WriteTransaction transaction(*impl_, "adding a hypothesis");
  Statement insert(*impl_,
                   "INSERT INTO hypotheses (text, skeleton_id, status, created_at) "
                   "VALUES (?1, ?2, 'open', ?3)",
                   "adding a hypothesis");
  insert.bind(1, text).bind(2, skeleton_id).bind(3, created_at);
  insert.run();
  const int64_t id = sqlite3_last_insert_rowid(impl_->db);
  transaction.commit();
  return id;
}

void Ledger::link_run(int64_t hypothesis_id, const std::string& run_id, LinkRole role,
                      const std::string& linked_at) {
  const std::string doing =
      "linking run " + run_id + " to hypothesis " + std::to_string(hypothesis_id);
  WriteTransaction transaction(*impl_, doing);
  require_hypothesis(*impl_, hypothesis_id);
  if (!run_exists(*impl_, run_id)) {
    throw Error(ErrorCode::kUsage, "ledger " + impl_->file.string() + ": no run " + run_id,
                "`loupe ledger list` shows the recorded runs");
  }
  Statement insert(*impl_,
                   "INSERT OR IGNORE INTO hypothesis_runs (hypothesis_id, run_id, role, linked_at,"
                   " seq) VALUES (?1, ?2, ?3, ?4, (SELECT COALESCE(MAX(seq) + 1, 0) FROM "
                   "hypothesis_runs WHERE hypothesis_id = ?1))",
                   doing);
  insert.bind(1, hypothesis_id).bind(2, run_id).bind(3, link_role_name(role)).bind(4, linked_at);
  insert.run();
  transaction.commit();
}

int64_t Ledger::add_decision(int64_t hypothesis_id, DecisionKind decision, const std::string& why,
                             const std::string& who, const std::string& decided_at) {
  return add_decision(hypothesis_id, decision, why, who, decided_at, {});
}

namespace {

int64_t insert_decision(const Ledger::Impl& impl, int64_t hypothesis_id, DecisionKind decision,
                        const std::string& why, const std::string& who,
                        const std::string& decided_at, const std::vector<ReviewNote>& triggers,
                        const std::string& doing) {
  Statement insert(impl,
                   "INSERT INTO decisions (hypothesis_id, decision, why, who, decided_at) "
                   "VALUES (?1, ?2, ?3, ?4, ?5)",
                   doing);
  insert.bind(1, hypothesis_id)
      .bind(2, decision_name(decision))
      .bind(3, why)
      .bind(4, who)
      .bind(5, decided_at);
  insert.run();
  const int64_t id = sqlite3_last_insert_rowid(impl.db);
  if (impl.version < 3 && !triggers.empty()) {
    throw Error(ErrorCode::kInternal, "review triggers need ledger schema 3");
  }
  if (!triggers.empty()) {
    Statement insert_trigger(impl,
                             "INSERT INTO decision_triggers (decision_id, seq, category, reason) "
                             "VALUES (?1, ?2, ?3, ?4)",
                             doing);
    int64_t seq = 0;
    for (const auto& trigger : triggers) {
      insert_trigger.bind(1, id).bind(2, seq++).bind(3, trigger.category).bind(4, trigger.reason);
      insert_trigger.run();
      insert_trigger.reset();
    }
  }
  Statement update(impl, "UPDATE hypotheses SET status = ?2 WHERE id = ?1", doing);
  update.bind(1, hypothesis_id).bind(2, hypothesis_status_name(status_after(decision)));
  update.run();
  return id;
}

}  // namespace

int64_t Ledger::add_decision(int64_t hypothesis_id, DecisionKind decision, const std::string& why,
                             const std::string& who, const std::string& decided_at,
                             const std::vector<ReviewNote>& triggers) {
  const std::string doing = "deciding hypothesis " + std::to_string(hypothesis_id);
  WriteTransaction transaction(*impl_, doing);
  require_hypothesis(*impl_, hypothesis_id);
  const int64_t id =
      insert_decision(*impl_, hypothesis_id, decision, why, who, decided_at, triggers, doing);
  transaction.commit();
  return id;
}

int64_t Ledger::approve_review(int64_t hypothesis_id, const std::string& by,
                               const std::string& approved_at) {
  const std::string doing = "approving hypothesis " + std::to_string(hypothesis_id);
  WriteTransaction transaction(*impl_, doing);
  require_hypothesis(*impl_, hypothesis_id);
  int64_t decision_id = 0;
  std::string why;
  {
    Statement newest(*impl_,
                     "SELECT d.id, d.decision, d.why, a.decision_id FROM decisions d LEFT JOIN "
                     "approvals a ON a.decision_id = d.id WHERE d.hypothesis_id = ?1 "
                     "ORDER BY d.id DESC LIMIT 1",
                     doing);
    newest.bind(1, hypothesis_id);
    const bool has_decision = newest.step();
    if (!has_decision || newest.text(1) != decision_name(DecisionKind::kNeedsReview) ||
        newest.optional_text(3)) {
      throw Error(ErrorCode::kUsage,
                  "ledger " + impl_->file.string() + ": hypothesis " +
                      std::to_string(hypothesis_id) +
                      " is not awaiting review (its newest "
                      "decision is " +
                      (has_decision ? "'" + newest.text(1) + "'" +
                                          (newest.optional_text(3) ? ", already approved" : "")
                                    : "absent") +
                      ")",
                  "only a retain recorded as needs-review is approved; `loupe hypothesis show " +
                      std::to_string(hypothesis_id) + "` shows its decisions");
    }
    decision_id = newest.integer(0);
    why = newest.text(2);
  }
  Statement insert(*impl_,
                   "INSERT INTO approvals (decision_id, approved_by, approved_at) "
                   "VALUES (?1, ?2, ?3)",
                   doing);
  insert.bind(1, decision_id).bind(2, by).bind(3, approved_at);
  insert.run();
  const int64_t retain_id = insert_decision(
      *impl_, hypothesis_id, DecisionKind::kRetain,
      "approved by " + by + " (decision " + std::to_string(decision_id) + "): " + why, by,
      approved_at, {}, doing);
  transaction.commit();
  return retain_id;
}

namespace {

Hypothesis read_hypothesis_row(const Statement& statement) {
  Hypothesis hypothesis;
  hypothesis.id = statement.integer(0);
  hypothesis.text = statement.text(1);
  hypothesis.skeleton_id = statement.optional_text(2);
  hypothesis.status = parse_hypothesis_status(statement.text(3));
  hypothesis.created_at = statement.text(4);
  return hypothesis;
}

void read_hypothesis_children(const Ledger::Impl& impl, Hypothesis& hypothesis) {
  const std::string doing = "reading hypothesis " + std::to_string(hypothesis.id);
  {
    Statement statement(impl,
                        "SELECT run_id, role, linked_at FROM hypothesis_runs WHERE hypothesis_id = "
                        "?1 ORDER BY seq",
                        doing);
    statement.bind(1, hypothesis.id);
    while (statement.step()) {
      hypothesis.links.push_back(
          {statement.text(0), parse_link_role(statement.text(1)), statement.text(2)});
    }
  }
  {
    Statement statement(impl,
                        "SELECT id, decision, why, who, decided_at FROM decisions WHERE "
                        "hypothesis_id = ?1 ORDER BY id",
                        doing);
    statement.bind(1, hypothesis.id);
    while (statement.step()) {
      Decision decision;
      decision.id = statement.integer(0);
      decision.decision = parse_decision(statement.text(1));
      decision.why = statement.text(2);
      decision.who = statement.text(3);
      decision.decided_at = statement.text(4);
      hypothesis.decisions.push_back(std::move(decision));
    }
  }
  if (impl.version < 3) return;  // a migration test's older schema has no review tables
  for (auto& decision : hypothesis.decisions) {
    Statement triggers(impl,
                       "SELECT category, reason FROM decision_triggers WHERE decision_id = ?1 "
                       "ORDER BY seq",
                       doing);
    triggers.bind(1, decision.id);
    while (triggers.step()) decision.triggers.push_back({triggers.text(0), triggers.text(1)});
    Statement approval(
        impl, "SELECT approved_by, approved_at FROM approvals WHERE decision_id = ?1", doing);
    approval.bind(1, decision.id);
    if (approval.step()) decision.approval = Approval{approval.text(0), approval.text(1)};
  }
}

}  // namespace

std::optional<Hypothesis> Ledger::find_hypothesis(int64_t hypothesis_id) const {
  Statement statement(*impl_,
                      "SELECT id, text, skeleton_id, status, created_at FROM hypotheses WHERE "
                      "id = ?1",
                      "reading hypothesis " + std::to_string(hypothesis_id));
  statement.bind(1, hypothesis_id);
  if (!statement.step()) return std::nullopt;
  Hypothesis hypothesis = read_hypothesis_row(statement);
  read_hypothesis_children(*impl_, hypothesis);
  return hypothesis;
}

std::vector<Hypothesis> Ledger::list_hypotheses() const {
  std::vector<Hypothesis> hypotheses;
  {
    Statement statement(*impl_,
                        "SELECT id, text, skeleton_id, status, created_at FROM hypotheses "
                        "ORDER BY id",
                        "listing hypotheses");
    while (statement.step()) hypotheses.push_back(read_hypothesis_row(statement));
  }
  for (auto& hypothesis : hypotheses) read_hypothesis_children(*impl_, hypothesis);
  return hypotheses;
}

std::vector<std::pair<std::string, Json>> recorded_settings(const RunRecord& run) {
  Json config;
  try {
    check_json_nesting(run.config_json, "run " + run.id + ": its recorded config");
    config = Json::parse(run.config_json);
  } catch (const Json::exception& error) {
    throw Error(ErrorCode::kInput,
                "run " + run.id + ": its recorded config is not JSON: " + json_error_text(error),
                "the ledger holds what `loupe run` recorded; re-run the objective");
  }
  std::vector<std::pair<std::string, Json>> settings;
  if (!config.is_object() || !config.contains("settings")) return settings;
  const Json& values = config["settings"];
  if (!values.is_object()) {
    throw Error(ErrorCode::kInput, "run " + run.id +
                                       ": config.settings: expected an object, found " +
                                       std::string(values.type_name()));
  }
  for (const auto& [key, value] : values.items()) settings.emplace_back(key, value);
  return settings;
}

}  // namespace loupe::ledger
