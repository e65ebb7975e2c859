// `loupe evidence` on the incident and fixed runs of the demo objective's smoke version
// (tests/integration/run/tiny.toml with this build's kda): the Markdown fits GitHub's comment
// limit and every number in it sits next to a command that reproduces it (issue 25).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "core/json.hpp"
#include "support/cli_run.hpp"
#include "support/scratch_dir.hpp"

namespace loupe {
namespace {

using test_support::CliRun;
using test_support::run_loupe;

TEST(EvidenceCli, IncidentAgainstFixedFitsTheLimitAndEveryNumberHasACommand) {
  test_support::ScratchDir dir("evidence-cli");
  const std::filesystem::path objective = dir.path() / "tiny.toml";
  ASSERT_TRUE(test_support::copy_objective(
      std::filesystem::path(LOUPE_SOURCE_DIR) / "tests/integration/run/tiny.toml", objective,
      KDA_EXECUTABLE));
  const std::string home = (dir.path() / "home").string();
  const CliRun incident =
      run_loupe({"run", objective.string(), "--config", "incident", "--home", home, "--json"});
  ASSERT_EQ(incident.exit_code, 1) << incident.out << incident.err;
  const CliRun fixed =
      run_loupe({"run", objective.string(), "--config", "fixed", "--home", home, "--json"});
  ASSERT_EQ(fixed.exit_code, 0) << fixed.out << fixed.err;
  const std::string base = incident.envelope["data"]["run"];
  const std::string candidate = fixed.envelope["data"]["run"];
  const std::string html = (dir.path() / "evidence.html").string();

  const CliRun bundle =
      run_loupe({"evidence", base, candidate, "--home", home, "--html", html, "--json"});
  ASSERT_EQ(bundle.exit_code, 0) << bundle.out << bundle.err;
  const Json& data = bundle.envelope["data"];
  EXPECT_EQ(bundle.envelope["verdict"], "pass");
  const std::string markdown = data["markdown"];
  EXPECT_LE(markdown.size(), 65536u);
  EXPECT_EQ(data["markdown_chars"].get<size_t>(), markdown.size());
  // The check and bench gates the fix turns from fail to pass (the scenario gate compares wall
  // times, which a loaded machine may leave inconclusive in the smoke objective).
  std::map<std::string, std::pair<std::string, std::string>> gates;
  for (const auto& gate : data["gates"]) {
    gates[gate["name"]] = {gate["before"].is_string() ? gate["before"].get<std::string>() : "",
                           gate["after"].is_string() ? gate["after"].get<std::string>() : ""};
  }
  using Change = std::pair<std::string, std::string>;
  EXPECT_EQ(gates["cp_matches_single_device"], Change("fail", "pass")) << data["gates"].dump();
  EXPECT_EQ(gates["decode_kernel_not_slower"], Change("fail", "pass")) << data["gates"].dump();
  EXPECT_FALSE(data["benches"].empty());
  EXPECT_FALSE(data["checks"].empty());
  EXPECT_EQ(data["base"]["command"].get<std::string>().rfind("loupe run ", 0), 0u);

  // Every table row and list item that holds a number also holds a command.
  std::istringstream lines(markdown);
  const std::regex digit("[0-9]");
  const std::regex command("`(loupe|env) [^`]+`");
  int rows = 0;
  for (std::string line; std::getline(lines, line);) {
    const bool row = (line.rfind("| ", 0) == 0 && line.find("|---") == std::string::npos) ||
                     line.rfind("- ", 0) == 0;
    if (!row || !std::regex_search(line, digit)) continue;
    ++rows;
    EXPECT_TRUE(std::regex_search(line, command)) << line;
  }
  EXPECT_GE(rows, 8);
  std::ifstream page(html);
  std::stringstream text;
  text << page.rdbuf();
  EXPECT_NE(text.str().find("<h2>Benches</h2>"), std::string::npos);

  // The Markdown is also what the command prints without --json.
  const CliRun plain = run_loupe({"evidence", base, candidate, "--home", home});
  EXPECT_EQ(plain.exit_code, 0);
  EXPECT_EQ(plain.out, markdown);

  const CliRun unknown = run_loupe({"evidence", base, "r-nope", "--home", home, "--json"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.out.find("r-nope"), std::string::npos);
}

}  // namespace
}  // namespace loupe
