// Issue 17: a ledger is recognised before anything is written to it, reading opens read-only, and
// imported runs say where they came from. A read-only MCP tool, given an unrelated SQLite
// database, once switched it to WAL mode and created loupe's tables in it.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fstream>
#include <sstream>

#include "ledger/exchange.hpp"
#include "ledger/ledger.hpp"
#include "test_support.hpp"

namespace loupe::ledger {
namespace {

using testing::make_run;
using testing::ScratchDir;

void execute(const std::filesystem::path& file, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(file.c_str(), &db), SQLITE_OK);
  char* message = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message), SQLITE_OK)
      << (message ? message : "");
  sqlite3_free(message);
  sqlite3_close(db);
}

int64_t integer(const std::filesystem::path& file, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* statement = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &statement, nullptr), SQLITE_OK);
  int64_t value = -1;
  if (sqlite3_step(statement) == SQLITE_ROW) value = sqlite3_column_int64(statement, 0);
  sqlite3_finalize(statement);
  sqlite3_close(db);
  return value;
}

std::string bytes_of(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// An application's own database: one table, rollback journal, no application id.
std::filesystem::path unrelated_database(const ScratchDir& dir) {
  const auto file = dir.path() / "app.sqlite";
  execute(file,
          "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT); "
          "INSERT INTO notes (text) VALUES ('keep me');");
  return file;
}

TEST(LedgerRecognition, ANewLedgerIsStampedWithLoupesApplicationId) {
  ScratchDir dir("stamp");
  const auto file = dir.path() / "ledger.sqlite";
  { Ledger::open(file); }
  EXPECT_EQ(integer(file, "PRAGMA application_id"), kApplicationId);
  EXPECT_EQ(integer(file, "PRAGMA user_version"), kSchemaVersion);
}

TEST(LedgerRecognition, Issue17AnUnrelatedDatabaseIsRefusedAndLeftAsItWas) {
  ScratchDir dir("unrelated");
  const auto file = unrelated_database(dir);
  const std::string before = bytes_of(file);
  for (const bool read_only : {false, true}) {
    try {
      if (read_only) {
        (void)Ledger::open_read_only(file);
      } else {
        (void)Ledger::open(file);
      }
      FAIL() << "an unrelated database was opened as a ledger";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInput);
      EXPECT_EQ(error.message(),
                "ledger " + file.string() +
                    ": not a loupe ledger (application_id 0x00000000, user_version 0, tables: "
                    "notes); expected a SQLite file loupe created (application_id 0x6c6f7570)");
    }
  }
  EXPECT_EQ(bytes_of(file), before);
  EXPECT_FALSE(std::filesystem::exists(file.string() + "-wal"));
  EXPECT_EQ(integer(file, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'runs'"), 0);
}

TEST(LedgerRecognition, ADatabaseStampedByAnotherApplicationIsRefused) {
  ScratchDir dir("other-app");
  const auto file = dir.path() / "ledger.sqlite";
  { Ledger::open(file); }
  execute(file, "PRAGMA application_id = 1234");
  EXPECT_THROW((void)Ledger::open(file), Error);
  EXPECT_THROW((void)Ledger::open_read_only(file), Error);
}

TEST(LedgerRecognition, AnUnstampedVersionThreeLedgerMigratesAndIsStamped) {
  ScratchDir dir("legacy");
  const auto file = dir.path() / "ledger.sqlite";
  const RunRecord run = make_run("r1", "2026-11-30T04:00:00Z");
  {
    Ledger v3 = Ledger::open_at_version(file, 3);
    v3.insert_run(run);
  }
  // What a ledger written before application_id existed looks like.
  execute(file, "PRAGMA application_id = 0");
  {
    const Ledger reader = Ledger::open_read_only(file);
    EXPECT_EQ(reader.schema_version(), 3);
    EXPECT_EQ(reader.get_run("r1"), run);
    EXPECT_EQ(reader.list_runs(10).size(), 1u);
  }
  EXPECT_EQ(integer(file, "PRAGMA application_id"), 0) << "reading must not stamp";
  Ledger ledger = Ledger::open(file);
  EXPECT_EQ(ledger.schema_version(), kSchemaVersion);
  EXPECT_EQ(integer(file, "PRAGMA application_id"), kApplicationId);
  EXPECT_EQ(ledger.get_run("r1"), run);
}

TEST(LedgerRecognition, OpeningReadOnlyCreatesNoFileSchemaOrJournal) {
  ScratchDir dir("read-only");
  const auto missing = dir.path() / "missing.sqlite";
  try {
    (void)Ledger::open_read_only(missing);
    FAIL() << "a missing ledger was opened";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kUsage);
    EXPECT_EQ(error.message(), "no ledger at " + missing.string());
  }
  EXPECT_FALSE(std::filesystem::exists(missing));
  // An empty file is not a ledger to read: nothing is created in it.
  const auto empty = dir.path() / "empty.sqlite";
  std::ofstream(empty).close();
  EXPECT_THROW((void)Ledger::open_read_only(empty), Error);
  EXPECT_EQ(std::filesystem::file_size(empty), 0u);
}

TEST(LedgerRecognition, ImportedRunsKeepTheirOriginAndListingsSaySo) {
  ScratchDir dir("imported");
  const auto file = dir.path() / "ledger.sqlite";
  RunRecord run = make_run("r-imported", "2026-11-30T04:00:00Z");
  run.imported = ImportOrigin{"/tmp/export.json", std::string(64, 'a'), "2026-12-01T00:00:00Z"};
  const RunRecord local = make_run("r-local", "2026-11-30T03:00:00Z");
  {
    Ledger ledger = Ledger::open(file);
    ledger.insert_run(run);
    ledger.insert_run(local);
  }
  const Ledger ledger = Ledger::open_read_only(file);
  EXPECT_EQ(ledger.get_run("r-imported"), run);
  EXPECT_FALSE(ledger.get_run("r-local").imported);
  const auto runs = ledger.list_runs(10);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_TRUE(runs[0].imported);  // newest first: r-imported
  EXPECT_FALSE(runs[1].imported);
  EXPECT_NE(render_run_list(runs, 2, 0, file.string()).find("completed imported"),
            std::string::npos);
  EXPECT_EQ(run_list_to_json(runs, 2, 0)["runs"][0]["imported"], true);
  const std::string shown = render_run(ledger.get_run("r-imported"), 5);
  EXPECT_NE(shown.find("imported from /tmp/export.json (export sha256 aaaaaaaaaaaa)"),
            std::string::npos)
      << shown;
  EXPECT_EQ(run_to_json(ledger.get_run("r-imported"))["imported"]["source"], "/tmp/export.json");
  // An export does not carry this ledger's record of where the run came from.
  EXPECT_EQ(export_run(ledger.get_run("r-imported")).find("\"imported\""), std::string::npos);
}

TEST(LedgerImport, TheWholeExportIsCheckedAgainstItsSchema) {
  const std::string good = export_run(make_run("r1", "2026-11-30T04:00:00Z"));
  EXPECT_EQ(import_run(good, "good.json"), make_run("r1", "2026-11-30T04:00:00Z"));
  auto error_of = [](const std::string& text) {
    try {
      (void)import_run(text, "x.json");
    } catch (const Error& error) {
      return error.message();
    }
    return std::string("(accepted)");
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  EXPECT_EQ(error_of(replaced("\"status\"", "\"imported\": {}, \"status\"")),
            "x.json: field 'run.imported': unknown field; expected one of id, status, started_at, "
            "ended_at, objective, git, environment, config, gates, findings, observations");
  EXPECT_EQ(error_of(replaced("\"id\": \"r1\"", "\"id\": \"../../etc\"")),
            "x.json: field 'run.id': expected a run id of 1 to 128 characters of A-Z a-z 0-9 _ -, "
            "found '../../etc'");
  EXPECT_EQ(error_of(replaced("\"rule\"", "\"verdict_by\": 1, \"rule\"")),
            "x.json: field 'run.gates[0].verdict_by': unknown field; expected one of name, "
            "verdict, statistics, rule");
  EXPECT_EQ(error_of("[1, 2]"), "x.json: field '(document)': expected an object, found array");
}

}  // namespace
}  // namespace loupe::ledger
