#include "bench/command.hpp"

#include <gtest/gtest.h>

#include "loupe/error.hpp"

namespace loupe::bench {
namespace {

TEST(CommandBenchTest, TimesOneCommand) {
  CommandBenchOptions options;
  options.command_a = "true";
  options.sampler.stopping = {.precision = 0.5, .budget_s = 2.0, .min_samples = 5};
  options.sampler.warmup = 1;
  CommandBench bench = bench_commands(options);
  EXPECT_GE(bench.a.n, 5);
  EXPECT_EQ(static_cast<size_t>(bench.a.n), bench.sampling.a.size());
  EXPECT_GT(bench.a.median, 0.0);
  EXPECT_FALSE(bench.comparison.has_value());
  EXPECT_TRUE(bench.sampling.b.empty());
}

TEST(CommandBenchTest, ComparesTwoCommands) {
  CommandBenchOptions options;
  options.command_a = "true";
  options.command_b = "true";
  options.sampler.stopping = {.precision = 0.5, .budget_s = 2.0, .min_samples = 5};
  CommandBench bench = bench_commands(options);
  ASSERT_TRUE(bench.comparison.has_value());
  EXPECT_EQ(bench.comparison->a.n, bench.comparison->b.n);
  EXPECT_EQ(bench.sampling.order.size(), 2 * bench.sampling.a.size());
}

TEST(CommandBenchTest, AFailingCommandIsASubjectErrorNamingItsStderr) {
  CommandBenchOptions options;
  options.command_a = "true";
  options.command_b = "echo boom >&2; exit 3";
  try {
    bench_commands(options);
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kSubject);
    EXPECT_NE(error.message().find("command B"), std::string::npos) << error.message();
    EXPECT_NE(error.message().find("exited with status 3"), std::string::npos) << error.message();
    EXPECT_NE(error.message().find("boom"), std::string::npos) << error.message();
  }
}

}  // namespace
}  // namespace loupe::bench
