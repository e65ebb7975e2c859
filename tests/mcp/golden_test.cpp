// Golden transcripts of `loupe mcp` (tests/mcp/golden/*.jsonl): each file is a conversation with
// the real executable over its stdin and stdout, checked message by message.
//
// Transcript lines:
//   # ...        a comment
//   > TEXT       send TEXT (a line; need not be valid JSON) to the server
//   < JSON       the next message must equal JSON. A progress notification is skipped unless the
//                expected message is one, and a heartbeat ("still running after N s", sent when a
//                call has said nothing for 5 s) is skipped unless the expected message is one: how
//                many heartbeats come depends on the machine's load, not on what the server did.
//                "<any>" in JSON matches any value.
//   close        close the server's stdin (EOF)
//   exit N       the server must exit with status N
//   no-subjects  no process may remain whose command line names this test's folder
// Before sending and comparing, $TMP (this test's scratch folder), $SRC (the source tree) and
// $BIN (the build's executables) stand for those paths, run ids read as $RUN and UTC times as
// $TIME. A tool result's text content is checked to be its structuredContent serialised, and then
// shown as "(structuredContent, serialised)".
// LOUPE_UPDATE_GOLDEN=1 rewrites the expected messages from what the server said, keeping "<any>".
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "support/cli_run.hpp"

extern char** environ;

namespace loupe {
namespace {

namespace fs = std::filesystem;

constexpr int kMessageDeadlineMs = 120'000;  // a deadline against hangs, not a timing assertion

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  size_t at = 0;
  while ((at = text.find(from, at)) != std::string::npos) {
    text.replace(at, from.size(), to);
    at += to.size();
  }
  return text;
}

// The server as a child with pipes on stdin and stdout; stderr goes to a file.
class ServerProcess {
 public:
  ServerProcess(const std::vector<std::string>& argv, const fs::path& cwd,
                const fs::path& stderr_file) {
    int in_pipe[2];
    int out_pipe[2];
    if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0) {
      throw std::runtime_error("pipe failed");
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
    posix_spawn_file_actions_addopen(&actions, 2, stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
    std::vector<char*> args;
    for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ) != 0) {
      throw std::runtime_error("cannot start " + argv[0]);
    }
    posix_spawn_file_actions_destroy(&actions);
    ::close(in_pipe[0]);
    ::close(out_pipe[1]);
    stdin_ = in_pipe[1];
    stdout_ = out_pipe[0];
  }
  ~ServerProcess() {
    close_stdin();
    if (stdout_ >= 0) ::close(stdout_);
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }

  void send(const std::string& line) {
    const std::string text = line + "\n";
    size_t written = 0;
    while (written < text.size()) {
      const ssize_t n = ::write(stdin_, text.data() + written, text.size() - written);
      if (n <= 0) throw std::runtime_error("write to the server failed");
      written += static_cast<size_t>(n);
    }
  }

  void close_stdin() {
    if (stdin_ >= 0) ::close(stdin_);
    stdin_ = -1;
  }

  // The next line, or nullopt at EOF or after the deadline.
  std::optional<std::string> read_line(int deadline_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(deadline_ms);
    while (true) {
      const size_t newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        std::string line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) return std::nullopt;
      pollfd poll_fd{stdout_, POLLIN, 0};
      if (::poll(&poll_fd, 1, static_cast<int>(left)) <= 0) continue;
      char chunk[65536];
      const ssize_t n = ::read(stdout_, chunk, sizeof(chunk));
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  // The exit status, or -1 when it did not exit before the deadline.
  int wait_exit(int deadline_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(deadline_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      ::usleep(20'000);
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  bool exited_ = false;
  std::string buffer_;
};

// Does `actual` match `expected`, where "<any>" in expected matches anything? `path` names the
// first difference.
bool matches(const Json& expected, const Json& actual, const std::string& path,
             std::string* difference) {
  if (expected.is_string() && expected.get<std::string>() == "<any>") return true;
  if (expected.type() != actual.type() && !(expected.is_number() && actual.is_number())) {
    *difference = path + ": expected " + expected.dump() + ", got " + actual.dump();
    return false;
  }
  if (expected.is_object()) {
    for (const auto& item : expected.items()) {
      if (!actual.contains(item.key())) {
        *difference = path + "." + item.key() + ": missing";
        return false;
      }
      if (!matches(item.value(), actual[item.key()], path + "." + item.key(), difference)) {
        return false;
      }
    }
    for (const auto& item : actual.items()) {
      if (!expected.contains(item.key())) {
        *difference = path + "." + item.key() + ": unexpected, " + item.value().dump();
        return false;
      }
    }
    return true;
  }
  if (expected.is_array()) {
    if (expected.size() != actual.size()) {
      *difference = path + ": expected " + std::to_string(expected.size()) + " items, got " +
                    std::to_string(actual.size()) + ": " + actual.dump();
      return false;
    }
    for (size_t index = 0; index < expected.size(); ++index) {
      if (!matches(expected[index], actual[index], path + "[" + std::to_string(index) + "]",
                   difference)) {
        return false;
      }
    }
    return true;
  }
  if (expected != actual) {
    *difference = path + ": expected " + expected.dump() + ", got " + actual.dump();
    return false;
  }
  return true;
}

// `actual` with the "<any>" of `expected` kept, for LOUPE_UPDATE_GOLDEN.
Json merge_wildcards(const Json& expected, const Json& actual) {
  if (expected.is_string() && expected.get<std::string>() == "<any>") return expected;
  if (expected.is_object() && actual.is_object()) {
    Json out = actual;
    for (auto& item : out.items()) {
      if (expected.contains(item.key()))
        item.value() = merge_wildcards(expected[item.key()], item.value());
    }
    return out;
  }
  if (expected.is_array() && actual.is_array() && expected.size() == actual.size()) {
    Json out = actual;
    for (size_t index = 0; index < out.size(); ++index) {
      out[index] = merge_wildcards(expected[index], actual[index]);
    }
    return out;
  }
  return actual;
}

bool is_progress(const Json& message) {
  return message.is_object() && message.value("method", "") == "notifications/progress";
}

// A progress notification the server sends on a timer while a call is quiet (src/mcp/server.cpp,
// ProgressSink::heartbeat), as opposed to one a tool reports at a step of its work.
bool is_heartbeat(const Json& message) {
  if (!is_progress(message)) return false;
  const Json& params = message.at("params");
  return params.contains("message") && params.at("message").is_string() &&
         params.at("message").get<std::string>().rfind("still running after ", 0) == 0;
}

// Processes other than `except` whose command line holds `text` (the test's folder): leftover
// subjects.
std::vector<std::string> processes_naming(const std::string& text, pid_t except) {
  std::vector<std::string> found;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (name == std::to_string(except)) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (auto& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    if (cmdline.find(text) != std::string::npos) found.push_back(name + ": " + cmdline);
  }
  return found;
}

std::vector<std::string> golden_files() {
  std::vector<std::string> names;
  for (const auto& entry :
       fs::directory_iterator(fs::path(LOUPE_SOURCE_DIR) / "tests/mcp/golden")) {
    if (entry.path().extension() == ".jsonl") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class GoldenTranscript : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    tmp_ = fs::temp_directory_path() /
           ("loupe_mcp_golden_" + std::to_string(::getpid()) + "_" + GetParam());
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
    // The smoke objective with the kda of this build (examples/kda/smoke.toml names the default
    // preset's) and no working directory (the path is absolute).
    ASSERT_TRUE(test_support::copy_objective(fs::path(LOUPE_SOURCE_DIR) / "examples/kda/smoke.toml",
                                             tmp_ / "smoke.toml", KDA_EXECUTABLE));
  }
  void TearDown() override { fs::remove_all(tmp_); }

  std::string substitute(std::string text) const {
    text = replace_all(text, "$TMP", tmp_.string());
    text = replace_all(text, "$SRC", LOUPE_SOURCE_DIR);
    return replace_all(text, "$BIN", fs::path(KDA_EXECUTABLE).parent_path().string());
  }
  std::string normalise(std::string text) const {
    text = replace_all(text, tmp_.string(), "$TMP");
    text = replace_all(text, fs::path(KDA_EXECUTABLE).parent_path().string(), "$BIN");
    text = replace_all(text, LOUPE_SOURCE_DIR, "$SRC");
    static const std::regex run_id("r[0-9]{8}-[0-9]{6}-[0-9a-f]{4}");
    static const std::regex time("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z");
    return std::regex_replace(std::regex_replace(text, run_id, "$$RUN"), time, "$$TIME");
  }
  // A tools/call result's text content must be its structuredContent, serialised; the transcript
  // then shows the structured form only, so that "<any>" can reach inside it.
  static Json fold_text_content(Json message, const std::string& where) {
    if (!message.contains("result") || !message["result"].is_object()) return message;
    Json& result = message["result"];
    if (!result.contains("content") || !result.contains("structuredContent")) return message;
    EXPECT_EQ(result["content"].size(), 1u) << where;
    EXPECT_EQ(Json::parse(result["content"][0]["text"].get<std::string>()),
              result["structuredContent"])
        << where << ": the text content differs from structuredContent";
    result["content"][0]["text"] = "(structuredContent, serialised)";
    return message;
  }

  fs::path tmp_;
};

TEST_P(GoldenTranscript, Matches) {
  const fs::path file = fs::path(LOUPE_SOURCE_DIR) / "tests/mcp/golden" / (GetParam() + ".jsonl");
  std::ifstream in(file);
  ASSERT_TRUE(in) << file;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  const bool update = std::getenv("LOUPE_UPDATE_GOLDEN") != nullptr;

  // The transcripts name objectives in the scratch folder, outside the project root (the source
  // tree): the server is allowed that folder, as a person would allow it (docs/mcp.md, Access).
  ServerProcess server(
      {LOUPE_EXECUTABLE, "mcp", "--home", (tmp_ / "home").string(), "--allow-path", tmp_.string()},
      LOUPE_SOURCE_DIR, tmp_ / "stderr.txt");
  std::vector<std::string> rewritten;
  for (size_t index = 0; index < lines.size(); ++index) {
    const std::string& line = lines[index];
    const std::string where = file.filename().string() + ":" + std::to_string(index + 1);
    rewritten.push_back(line);
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("> ", 0) == 0) {
      server.send(substitute(line.substr(2)));
    } else if (line.rfind("< ", 0) == 0) {
      const Json expected = Json::parse(line.substr(2));
      Json actual;
      while (true) {
        const auto received = server.read_line(kMessageDeadlineMs);
        ASSERT_TRUE(received.has_value()) << where << ": no message; expected " << line;
        actual = fold_text_content(Json::parse(normalise(*received)), where);
        if (is_progress(actual) && !is_progress(expected)) continue;
        if (is_heartbeat(actual) && !is_heartbeat(expected)) continue;
        break;
      }
      if (update) {
        rewritten.back() = "< " + merge_wildcards(expected, actual).dump();
        continue;
      }
      std::string difference;
      EXPECT_TRUE(matches(expected, actual, "$", &difference))
          << where << ": " << difference << "\n  got " << actual.dump();
    } else if (line == "close") {
      server.close_stdin();
    } else if (line.rfind("exit ", 0) == 0) {
      EXPECT_EQ(server.wait_exit(kMessageDeadlineMs), std::stoi(line.substr(5))) << where;
    } else if (line == "no-subjects") {
      EXPECT_EQ(processes_naming(tmp_.string(), server.pid()), std::vector<std::string>{}) << where;
    } else {
      FAIL() << where << ": unknown transcript line: " << line;
    }
  }
  if (update) {
    std::ofstream out(file);
    for (const auto& line : rewritten) out << line << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(Mcp, GoldenTranscript, ::testing::ValuesIn(golden_files()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (auto& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace loupe
