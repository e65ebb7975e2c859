// Ledger durability (issue 10): `loupe run` on durability.toml (examples/kda/smoke.toml at
// smaller sizes: the same layers, gates and ledger writes) is killed with SIGKILL at 50 seeded
// random points; after each kill the ledger opens, `PRAGMA integrity_check` says ok and every run
// that completed before is still there, unchanged (`loupe ledger list/show --json`). Two `loupe
// run` processes started at once on a fresh ledger both land.
//
// The kills run in three lanes at once on one ledger (so they also race each other's writes); a
// third of the kill points fall in the last fifth of a run, where the ledger is written. The seed
// is printed and recorded as a test property; LOUPE_DURABILITY_SEED=N replays a schedule.
// About 60-90 s on two loaded cores.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/json.hpp"
#include "support/cli_run.hpp"

extern char** environ;

namespace loupe {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kKills = 50;
constexpr int kLanes = 3;
// Every lane lets one run in this many complete, so later kills have completed runs to protect.
constexpr int kCompleteEvery = 9;
constexpr uint64_t kDefaultSeed = 20261130;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The test process adopts the subjects of a killed `loupe run` (a subject runs in its own process
// group, so it outlives loupe's SIGKILL) and ends them by pid. Spawning and the orphan sweep share
// one lock, so a lane never mistakes another lane's fresh loupe for an orphan.
class Children {
 public:
  Children() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

  pid_t spawn(const std::vector<std::string>& args, const fs::path& out, const fs::path& err) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> copy = args;
    std::vector<char*> argv;
    for (std::string& arg : copy) argv.push_back(arg.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    std::lock_guard lock(mutex_);
    const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return -1;
    live_.insert(pid);
    return pid;
  }

  // The exit status when `pid` exits before `deadline`; nullopt when it is still running.
  std::optional<int> wait_until(pid_t pid, Clock::time_point deadline) {
    while (true) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        forget(pid);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (Clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  // SIGKILL, reap, then end the subjects it left behind.
  void kill(pid_t pid) {
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    forget(pid);
    std::lock_guard lock(mutex_);
    for (const auto& entry : fs::directory_iterator("/proc")) {
      const std::string name = entry.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      const pid_t child = static_cast<pid_t>(std::stol(name));
      if (live_.count(child) != 0 || parent_of(child) != ::getpid()) continue;
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
    }
  }

 private:
  static pid_t parent_of(pid_t pid) {
    const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    const size_t close = stat.rfind(')');  // the command name may hold spaces and parentheses
    if (close == std::string::npos) return -1;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    pid_t parent = -1;
    rest >> state >> parent;
    return parent;
  }
  void forget(pid_t pid) {
    std::lock_guard lock(mutex_);
    live_.erase(pid);
  }

  std::mutex mutex_;
  std::set<pid_t> live_;
};

struct Completed {
  std::string id;
  Json list_entry;  // its row in `loupe ledger list --json`
  Json shown;       // data.run of `loupe ledger show --json`
};

class LedgerDurabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("loupe_durability_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    home_ = dir_ / "home";
    // durability.toml with the subject of this build (its path in the file is that of the
    // default preset) and no working directory (the path is absolute).
    objective_ = dir_ / "durability.toml";
    ASSERT_TRUE(test_support::copy_objective(
        fs::path(LOUPE_SOURCE_DIR) / "tests/integration/durability/durability.toml", objective_,
        KDA_EXECUTABLE))
        << "durability.toml has no [subject] command line";
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  std::vector<std::string> run_args(const std::string& config) const {
    std::vector<std::string> args = {LOUPE_EXECUTABLE, "run",          objective_.string(),
                                     "--home",         home_.string(), "--json"};
    if (!config.empty()) args.insert(args.end(), {"--config", config});
    return args;
  }

  // A loupe command run to completion; its stdout parsed as the envelope.
  Json loupe_json(const std::vector<std::string>& arguments, const std::string& tag) {
    std::vector<std::string> args = {LOUPE_EXECUTABLE};
    args.insert(args.end(), arguments.begin(), arguments.end());
    const fs::path out = dir_ / (tag + ".out");
    const fs::path err = dir_ / (tag + ".err");
    const pid_t pid = children_.spawn(args, out, err);
    EXPECT_GT(pid, 0);
    const std::optional<int> code =
        children_.wait_until(pid, Clock::now() + std::chrono::minutes(2));
    if (!code) children_.kill(pid);
    EXPECT_EQ(code.value_or(-1), 0) << read_file(out) << read_file(err);
    const std::string text = read_file(out);
    return text.empty() || text.front() != '{' ? Json() : Json::parse(text);
  }

  Json list_runs(const std::string& tag) {
    const Json envelope =
        loupe_json({"ledger", "list", "--home", home_.string(), "--limit", "1000", "--json"}, tag);
    return envelope.is_null() ? Json::array() : envelope.at("data").at("runs");
  }
  Json show_run(const std::string& id, const std::string& tag) {
    const Json envelope =
        loupe_json({"ledger", "show", id, "--home", home_.string(), "--json"}, tag);
    return envelope.is_null() ? Json() : envelope.at("data").at("run");
  }

  // "ok" when SQLite finds the file sound, else what it found.
  std::string integrity() const {
    sqlite3* db = nullptr;
    std::string result;
    const fs::path file = home_ / "ledger.sqlite";
    if (sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      result = "cannot open: " + std::string(sqlite3_errmsg(db));
    } else {
      sqlite3_busy_timeout(db, 10000);
      for (const char* pragma : {"PRAGMA integrity_check", "PRAGMA foreign_key_check"}) {
        sqlite3_stmt* statement = nullptr;
        if (sqlite3_prepare_v2(db, pragma, -1, &statement, nullptr) != SQLITE_OK) {
          result += std::string(pragma) + ": " + sqlite3_errmsg(db) + "; ";
          continue;
        }
        int rc = 0;
        while ((rc = sqlite3_step(statement)) == SQLITE_ROW) {
          const auto* text = sqlite3_column_text(statement, 0);
          const std::string row = text == nullptr ? "" : reinterpret_cast<const char*>(text);
          if (row != "ok") result += std::string(pragma) + ": " + row + "; ";
        }
        if (rc != SQLITE_DONE) result += std::string(pragma) + ": " + sqlite3_errmsg(db) + "; ";
        sqlite3_finalize(statement);
      }
    }
    sqlite3_close(db);
    return result.empty() ? "ok" : result;
  }

  // Records a run that exited on its own: its envelope says completed, the ledger agrees.
  void record_completed(const std::string& out_text, const std::string& err_text, int code,
                        const std::string& tag) {
    ASSERT_TRUE(code == 0 || code == 1) << tag << " exit " << code << "\n" << err_text;
    ASSERT_FALSE(out_text.empty()) << tag << "\n" << err_text;
    const Json envelope = Json::parse(out_text);
    ASSERT_EQ(envelope.at("data").at("status"), "completed") << tag;
    Completed run;
    run.id = envelope.at("data").at("run");
    run.shown = show_run(run.id, tag + "_show");
    ASSERT_EQ(run.shown.at("status"), "completed") << tag;
    ASSERT_EQ(run.shown.at("gates").size(), envelope.at("data").at("gates").size()) << tag;
    gate_count_ = envelope.at("data").at("gates").size();
    for (const Json& entry : list_runs(tag + "_list")) {
      if (entry.at("id") == run.id) run.list_entry = entry;
    }
    ASSERT_FALSE(run.list_entry.is_null()) << tag << ": run " << run.id << " not listed";
    std::lock_guard lock(completed_mutex_);
    completed_.push_back(std::move(run));
  }

  // After a kill: the ledger opens, is sound, and every run completed so far is unchanged.
  void verify_after_kill(const std::string& tag) {
    ASSERT_EQ(integrity(), "ok") << tag;
    std::vector<Completed> before;
    {
      std::lock_guard lock(completed_mutex_);
      before = completed_;
    }
    std::map<std::string, Json> listed;
    for (const Json& entry : list_runs(tag + "_list")) {
      listed[entry.at("id")] = entry;
      // A run is never half finished: a completed run has every gate of the objective recorded.
      if (entry.at("status") != "completed") continue;
      size_t gates = 0;
      for (const auto& [verdict, count] : entry.at("gates").items()) gates += count.get<size_t>();
      EXPECT_EQ(gates, gate_count_) << tag << ": run " << entry.dump();
    }
    for (const Completed& run : before) {
      ASSERT_EQ(listed.count(run.id), 1u) << tag << ": completed run " << run.id << " is gone";
      EXPECT_EQ(listed.at(run.id), run.list_entry) << tag << ": run " << run.id;
      EXPECT_EQ(show_run(run.id, tag + "_show"), run.shown) << tag << ": run " << run.id;
    }
  }

  fs::path dir_;
  fs::path home_;
  fs::path objective_;
  Children children_;
  std::mutex completed_mutex_;
  std::vector<Completed> completed_;
  std::atomic<size_t> gate_count_{0};  // gates of the objective, as completed runs record them
};

TEST_F(LedgerDurabilityTest, SigkillAtFiftyPointsNeverCorruptsOrLosesACompletedRun) {
  uint64_t seed = kDefaultSeed;
  if (const char* text = std::getenv("LOUPE_DURABILITY_SEED")) seed = std::stoull(text);
  RecordProperty("seed", std::to_string(seed));
  std::cout << "durability seed " << seed << " (LOUPE_DURABILITY_SEED=" << seed << " replays it)\n";

  // One whole run first: it creates the ledger and measures how long a run takes here.
  const auto reference_start = Clock::now();
  {
    const pid_t pid = children_.spawn(run_args(""), dir_ / "reference.out", dir_ / "reference.err");
    ASSERT_GT(pid, 0);
    const std::optional<int> code =
        children_.wait_until(pid, Clock::now() + std::chrono::minutes(2));
    ASSERT_TRUE(code.has_value()) << "the reference run did not finish in 2 minutes";
    record_completed(read_file(dir_ / "reference.out"), read_file(dir_ / "reference.err"), *code,
                     "reference");
  }
  const double run_s = std::chrono::duration<double>(Clock::now() - reference_start).count();
  std::cout << "a whole run takes " << run_s << " s\n";

  // A kill point is a fraction of a run. Each lane turns it into a delay with its own estimate of a
  // run's length: the reference run's at first, then the shortest run the lane has seen complete,
  // so a load that falls after the reference run (runs getting faster) does not push kill points
  // past the end of the runs.
  struct KillPoint {
    int lane;
    double fraction;
  };
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<double> anywhere(0.0, 1.0);
  std::uniform_real_distribution<double> near_the_end(0.8, 1.0);
  std::vector<std::vector<KillPoint>> lanes(kLanes);
  for (int kill = 0; kill < kKills; ++kill) {
    const double fraction = kill % 3 == 2 ? near_the_end(random) : anywhere(random);
    lanes[kill % kLanes].push_back({kill % kLanes, fraction});
  }

  std::mutex tally_mutex;
  int killed = 0;
  int finished_first = 0;
  const char* configs[kLanes] = {"incident", "fixed", ""};
  std::vector<std::thread> threads;
  for (int lane = 0; lane < kLanes; ++lane) {
    threads.emplace_back([&, lane] {
      int step = 0;
      double lane_run_s = run_s;
      for (size_t index = 0; index < lanes[lane].size(); ++step) {
        const std::string tag = "lane" + std::to_string(lane) + "_step" + std::to_string(step);
        const bool whole = step % kCompleteEvery == kCompleteEvery - 1;
        const double delay_s = whole ? 600.0 : lanes[lane][index].fraction * lane_run_s;
        const fs::path out = dir_ / (tag + ".out");
        const fs::path err = dir_ / (tag + ".err");
        const auto start = Clock::now();
        const pid_t pid = children_.spawn(run_args(configs[lane]), out, err);
        ASSERT_GT(pid, 0) << tag;
        const std::optional<int> code =
            children_.wait_until(pid, start + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(delay_s)));
        if (code) {
          lane_run_s =
              std::min(lane_run_s, std::chrono::duration<double>(Clock::now() - start).count());
          record_completed(read_file(out), read_file(err), *code, tag);
          if (!whole) {
            std::lock_guard lock(tally_mutex);
            ++finished_first;
          }
        } else {
          children_.kill(pid);
          {
            std::lock_guard lock(tally_mutex);
            ++killed;
          }
          verify_after_kill(tag + " (SIGKILL after " + std::to_string(delay_s) + " s, seed " +
                            std::to_string(seed) + ")");
        }
        if (::testing::Test::HasFatalFailure()) return;
        if (!whole) ++index;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  std::cout << killed << " runs killed, " << finished_first << " finished before their kill point, "
            << completed_.size() << " completed runs in the ledger\n";
  RecordProperty("killed", killed);
  RecordProperty("completed", static_cast<int>(completed_.size()));
  EXPECT_EQ(killed + finished_first, kKills);
  // Most kill points must land inside a run, or the test proves little.
  EXPECT_GE(killed, kKills * 4 / 5);
  verify_after_kill("after every lane");
}

TEST_F(LedgerDurabilityTest, TwoRunsStartedAtOnceOnAFreshLedgerBothLand) {
  const pid_t first = children_.spawn(run_args("incident"), dir_ / "a.out", dir_ / "a.err");
  const pid_t second = children_.spawn(run_args("fixed"), dir_ / "b.out", dir_ / "b.err");
  ASSERT_GT(first, 0);
  ASSERT_GT(second, 0);
  const auto deadline = Clock::now() + std::chrono::minutes(2);
  const std::optional<int> first_code = children_.wait_until(first, deadline);
  const std::optional<int> second_code = children_.wait_until(second, deadline);
  if (!first_code) children_.kill(first);
  if (!second_code) children_.kill(second);
  ASSERT_TRUE(first_code && second_code) << "a run did not finish in 2 minutes";
  record_completed(read_file(dir_ / "a.out"), read_file(dir_ / "a.err"), *first_code, "a");
  record_completed(read_file(dir_ / "b.out"), read_file(dir_ / "b.err"), *second_code, "b");
  ASSERT_EQ(completed_.size(), 2u);
  EXPECT_NE(completed_[0].id, completed_[1].id);
  EXPECT_EQ(integrity(), "ok");
  EXPECT_EQ(list_runs("list").size(), 2u);
}

}  // namespace
}  // namespace loupe
