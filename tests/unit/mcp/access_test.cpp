// Issue 17: what an MCP client may reach (src/mcp/access.hpp). A client named any command for
// run_probe, any file for the ledger and file tools, probe names with "../", and a message nested
// 100,000 deep killed the server. Each case goes through Server::handle_line, as a client's call.
#include "mcp/access.hpp"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "loupe/error.hpp"
#include "mcp/server.hpp"

namespace loupe::mcp {
namespace {

namespace fs = std::filesystem;

class AccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() /
            ("loupe_mcp_access_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    root_ = base_ / "project";
    outside_ = base_ / "outside";
    fs::create_directories(root_ / ".git");  // the project root is the git root
    fs::create_directories(outside_);
    write(outside_ / "secret.npy", "not a tensor");
  }
  void TearDown() override { fs::remove_all(base_); }

  static void write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary);
    out << text;
  }

  // A server in the project root, allowed `allowed` besides.
  void start(const std::vector<fs::path>& allowed = {}) {
    ServerSettings settings;
    settings.cwd = root_;
    settings.home = root_ / ".loupe";
    std::vector<fs::path> dirs = allowed;
    dirs.push_back(*settings.home);
    settings.access = std::make_shared<const AccessPolicy>(load_access_policy(root_, dirs));
    server_ = std::make_unique<Server>(settings);
  }

  // The envelope a tool call answers.
  Json call(const std::string& tool, const Json& arguments) {
    const Json request = {{"jsonrpc", "2.0"},
                          {"id", 1},
                          {"method", "tools/call"},
                          {"params", {{"name", tool}, {"arguments", arguments}}}};
    const auto out = server_->handle_line(request.dump());
    EXPECT_EQ(out.size(), 1u);
    return Json::parse(out.back())["result"]["structuredContent"];
  }
  static std::string message(const Json& envelope) {
    if (envelope["error"].is_null()) return "(no error)";
    return envelope["error"]["message"].get<std::string>();
  }
  static std::string hint(const Json& envelope) {
    if (envelope["error"].is_null()) return "(no error)";
    return envelope["error"]["hint"].get<std::string>();
  }

  fs::path base_, root_, outside_;
  std::unique_ptr<Server> server_;
};

TEST_F(AccessTest, APathOutsideTheProjectRootIsRefused) {
  start();
  const std::string secret = (outside_ / "secret.npy").string();
  const Json envelope = call("diff_tensors", {{"a", secret}, {"b", secret}});
  EXPECT_EQ(envelope["error"]["code"], "usage");
  EXPECT_EQ(message(envelope), "path '" + secret + "' resolves to " + secret +
                                   ", outside the project root " + fs::canonical(root_).string() +
                                   "; expected a path inside it or inside a folder the server "
                                   "was allowed");
  EXPECT_NE(hint(envelope).find("loupe mcp --allow-path DIR"), std::string::npos);
}

TEST_F(AccessTest, ARelativePathClimbingOutOfTheRootIsRefused) {
  start();
  const Json envelope = call("list_runs", {{"ledger", "../outside/ledger.sqlite"}});
  EXPECT_NE(message(envelope).find("path '../outside/ledger.sqlite' resolves to " +
                                   (fs::canonical(outside_) / "ledger.sqlite").string() +
                                   ", outside the project root"),
            std::string::npos)
      << message(envelope);
  EXPECT_FALSE(fs::exists(outside_ / "ledger.sqlite"));
}

TEST_F(AccessTest, ASymbolicLinkInsideTheRootThatLeavesItIsRefused) {
  start();
  fs::create_directory_symlink(outside_, root_ / "escape");
  const Json envelope =
      call("diff_tensors", {{"a", "escape/secret.npy"}, {"b", "escape/secret.npy"}});
  EXPECT_NE(message(envelope).find("path 'escape/secret.npy' resolves to " +
                                   (fs::canonical(outside_) / "secret.npy").string()),
            std::string::npos)
      << message(envelope);
}

TEST_F(AccessTest, AnAllowedFolderMayBeNamed) {
  start({outside_});
  const std::string secret = (outside_ / "secret.npy").string();
  const Json envelope = call("diff_tensors", {{"a", secret}, {"b", secret}});
  // Past the access check: the reader now says what is wrong with the file itself.
  EXPECT_EQ(message(envelope).find("outside the project root"), std::string::npos)
      << message(envelope);
  EXPECT_NE(message(envelope).find(secret), std::string::npos) << message(envelope);
}

TEST_F(AccessTest, RunProbeRefusesASubjectNoObjectiveDeclares) {
  start();
  const fs::path marker = base_ / "ran";
  const Json envelope =
      call("run_probe", {{"probe", "p"}, {"subject", {"sh", "-c", "touch " + marker.string()}}});
  EXPECT_EQ(envelope["error"]["code"], "usage");
  EXPECT_NE(message(envelope).find("run_probe: subject [\"sh\", \"-c\", \"touch "),
            std::string::npos)
      << message(envelope);
  EXPECT_NE(message(envelope).find("is not declared by an objective under the project root"),
            std::string::npos)
      << message(envelope);
  EXPECT_NE(hint(envelope).find("add [mcp] allow_subjects = [[\"sh\", \"-c\""), std::string::npos)
      << hint(envelope);
  EXPECT_FALSE(fs::exists(marker)) << "the command ran";
  EXPECT_FALSE(fs::exists(root_ / ".loupe" / "runs")) << "a run folder was created";
}

TEST_F(AccessTest, RunProbeRunsASubjectAnObjectiveUnderTheRootDeclares) {
  write(root_ / "objectives" / "false.toml", R"(name = "declares /bin/false"
[subject]
command = ["/bin/false"]
[[check]]
probe = "p"
)");
  start();
  const Json envelope =
      call("run_probe", {{"probe", "p"}, {"subject", Json::array({"/bin/false"})}});
  // It ran: /bin/false exits 1 without an observation, which is the subject's failure.
  EXPECT_EQ(envelope["error"]["code"], "subject") << message(envelope);
  EXPECT_NE(message(envelope).find("exited with status 1"), std::string::npos) << message(envelope);
}

TEST_F(AccessTest, RunProbeRunsASubjectTheProjectConfigAllows) {
  write(root_ / ".loupe" / "config.toml", "[mcp]\nallow_subjects = [[\"/bin/false\"]]\n");
  start();
  const Json envelope =
      call("run_probe", {{"probe", "p"}, {"subject", Json::array({"/bin/false"})}});
  EXPECT_EQ(envelope["error"]["code"], "subject") << message(envelope);
}

TEST_F(AccessTest, AMalformedProjectConfigNamesItsLineAndKey) {
  write(root_ / ".loupe" / "config.toml", "[mcp]\nallow_subject = [[\"/bin/false\"]]\n");
  try {
    (void)load_access_policy(root_, {});
    FAIL() << "a config with an unknown key was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kConfig);
    EXPECT_EQ(error.message(), (fs::canonical(root_) / ".loupe" / "config.toml").string() +
                                   ":2: mcp.allow_subject: unknown key; expected one of "
                                   "allow_subjects, allow_paths");
  }
}

TEST_F(AccessTest, RunProbeRefusesAProbeNameThatLeavesTheHome) {
  write(root_ / ".loupe" / "config.toml", "[mcp]\nallow_subjects = [[\"/bin/true\"]]\n");
  start();
  const Json envelope =
      call("run_probe", {{"probe", "../../escape"}, {"subject", Json::array({"/bin/true"})}});
  EXPECT_EQ(message(envelope),
            "run_probe: argument 'probe': probe name '../../escape': character 1 is not allowed; "
            "expected 1 to 128 characters of A-Z a-z 0-9 _ -, the first a letter, digit or _");
  EXPECT_FALSE(fs::exists(root_ / "escape"));
  EXPECT_FALSE(fs::exists(root_ / ".loupe" / "runs"));
}

TEST_F(AccessTest, Issue17AMessageNestedHundredThousandDeepIsAParseError) {
  start();
  const std::string line = R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":)" +
                           std::string(100000, '[') + std::string(100000, ']') + "}}";
  const auto out = server_->handle_line(line);
  ASSERT_EQ(out.size(), 1u);
  const Json response = Json::parse(out.front());
  EXPECT_EQ(response["id"], nullptr);
  EXPECT_EQ(response["error"]["code"], -32700);
  // Two objects are open; the 127th '[' after the 54-byte prefix opens level 129.
  EXPECT_EQ(response["error"]["message"],
            "Parse error: message: offset 180 (line 1, column 181): JSON nested deeper than 128 "
            "levels; expected at most 128 nested arrays and objects");
  // The server still answers.
  const auto ping = server_->handle_line(R"({"jsonrpc":"2.0","id":2,"method":"ping"})");
  ASSERT_EQ(ping.size(), 1u);
  EXPECT_EQ(Json::parse(ping.front())["result"], Json::object());
}

// Issue 25: a build command is arbitrary shell, so the bisect tool takes none from the client:
// it builds with the objective's [build] command and refuses an objective without one, before
// any git or build runs. A revision is never passed to git as an option.
TEST_F(AccessTest, BisectBuildsOnlyWhatTheObjectiveDeclares) {
  start();
  write(root_ / "plain.toml", "[subject]\ncommand = \"./subject\"\n[[check]]\nprobe = \"sums\"\n");
  Json out = call(
      "bisect", {{"objective", "plain.toml"}, {"gate", "g"}, {"good", "HEAD~3"}, {"bad", "HEAD"}});
  ASSERT_EQ(out["error"]["code"], "usage") << out.dump();
  EXPECT_EQ(out["error"]["message"],
            "bisect: " + (root_ / "plain.toml").string() +
                " has no [build] table, and a client may not send a build command");
  EXPECT_FALSE(fs::exists(root_ / ".loupe" / "bisect"));

  out = call(
      "bisect",
      {{"objective", "plain.toml"}, {"gate", "g"}, {"good", "--output=/tmp/x"}, {"bad", "HEAD"}});
  EXPECT_EQ(out["error"]["message"],
            "bisect: argument 'good' is \"--output=/tmp/x\", not a git revision")
      << out.dump();
  out = call("bisect",
             {{"objective", "plain.toml"}, {"gate", "g"}, {"good", "HEAD"}, {"bad", "a b"}});
  EXPECT_EQ(out["error"]["message"], "bisect: argument 'bad' is \"a b\", not a git revision");
  // The objective must lie inside the project, as for run_objective.
  write(outside_ / "built.toml",
        "[subject]\ncommand = \"x\"\n[[check]]\nprobe = \"p\"\n"
        "[build]\ncommand = \"touch pwned\"\n");
  out = call("bisect", {{"objective", (outside_ / "built.toml").string()},
                        {"gate", "g"},
                        {"good", "HEAD~1"},
                        {"bad", "HEAD"}});
  EXPECT_EQ(out["error"]["code"], "usage");
  EXPECT_NE(out["error"]["message"].get<std::string>().find("outside the project root"),
            std::string::npos)
      << out.dump();
  // No build argument exists to send one.
  out = call("bisect", {{"objective", "plain.toml"},
                        {"gate", "g"},
                        {"good", "HEAD~1"},
                        {"bad", "HEAD"},
                        {"build", "touch pwned"}});
  EXPECT_EQ(out["error"]["code"], "usage");
  EXPECT_FALSE(fs::exists(root_ / "pwned"));
}

TEST_F(AccessTest, TheRunToolsAreAnnotatedDestructive) {
  for (const auto& tool : all_tools()) {
    const bool runs_a_subject =
        tool.name == "run_objective" || tool.name == "run_probe" || tool.name == "bisect";
    EXPECT_EQ(tool.annotations.destructive, runs_a_subject) << tool.name;
    if (runs_a_subject) {
      EXPECT_FALSE(tool.annotations.read_only) << tool.name;
    }
  }
}

}  // namespace
}  // namespace loupe::mcp
