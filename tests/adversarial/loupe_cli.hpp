// Runs `loupe ... -- SUBJECT` for the adversarial and isolation tests, in a scratch home.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/json.hpp"
#include "core/process.hpp"
#include "support/cli_run.hpp"

namespace loupe::adversarial {

using test_support::CliRun;

class LoupeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    home_ = std::filesystem::temp_directory_path() /
            ("loupe_adversarial_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(home_);
    std::filesystem::create_directories(home_);
  }
  void TearDown() override { std::filesystem::remove_all(home_); }

  CliRun probe_run(const std::string& subject, std::vector<std::string> arguments,
                   std::vector<std::pair<std::string, std::string>> extra_env = {}) const {
    ProcessSpec spec;
    spec.extra_env = std::move(extra_env);
    spec.argv = {LOUPE_EXECUTABLE, "probe", "run"};
    spec.argv.insert(spec.argv.end(), arguments.begin(), arguments.end());
    spec.argv.insert(spec.argv.end(), {"--json", "--home", home_.string(), "--", subject});
    spec.timeout = std::chrono::seconds(100);
    return test_support::run_cli(spec);
  }

  // The kinds after "<layer>.<probe>." of every finding of one severity (all when empty).
  static std::set<std::string> kinds(const CliRun& run, const std::string& severity = "") {
    std::set<std::string> out;
    for (const auto& finding : run.envelope.at("findings")) {
      if (!severity.empty() && finding.at("severity") != severity) continue;
      const std::string id = finding.at("id");
      const size_t first = id.find('.');
      const size_t second = id.find('.', first + 1);
      out.insert(id.substr(second + 1));
    }
    return out;
  }

  // Only the guard.* kinds.
  static std::set<std::string> guards(const CliRun& run, const std::string& severity = "") {
    std::set<std::string> out;
    for (const auto& kind : kinds(run, severity)) {
      if (kind.rfind("guard.", 0) == 0) out.insert(kind);
    }
    return out;
  }

  static const Json& finding(const CliRun& run, const std::string& id) {
    for (const auto& item : run.envelope.at("findings")) {
      if (item.at("id") == id) return item;
    }
    throw std::runtime_error("no finding " + id + " in " + run.out);
  }

  std::filesystem::path home_;
};

}  // namespace loupe::adversarial
