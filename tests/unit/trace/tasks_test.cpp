// TaskPool (analyze/tasks.hpp) and the analyses run on it: the same answer on any number of
// threads.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "loupe/error.hpp"
#include "trace/analyze/analyze.hpp"
#include "trace/analyze/tasks.hpp"
#include "trace/import/import.hpp"

namespace loupe::trace {
namespace {

namespace fs = std::filesystem;
const fs::path kKineto = fs::path(LOUPE_KINETO_FIXTURE_DIR);

TEST(TraceTaskPool, OneThreadRunsTheBatchInOrderOnTheCaller) {
  TaskPool pool(1);
  EXPECT_EQ(pool.threads(), 1u);
  std::vector<int> order;
  std::vector<std::function<void()>> tasks;
  for (int task = 0; task < 5; ++task)
    tasks.emplace_back([&order, task] { order.push_back(task); });
  pool.run(std::move(tasks));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(TraceTaskPool, NestedBatchesRunEveryTaskOnce) {
  for (unsigned threads : {1u, 2u, 4u}) {
    TaskPool pool(threads);
    std::vector<std::atomic<int>> runs(100);
    std::vector<std::function<void()>> outer;
    for (size_t group = 0; group < 10; ++group) {
      outer.emplace_back([&pool, &runs, group] {
        std::vector<std::function<void()>> inner;
        for (size_t item = 0; item < 10; ++item) {
          inner.emplace_back([&runs, group, item] { ++runs[group * 10 + item]; });
        }
        pool.run(std::move(inner));
        // Every inner task finished before run() returned.
        for (size_t item = 0; item < 10; ++item) EXPECT_EQ(runs[group * 10 + item].load(), 1);
      });
    }
    pool.run(std::move(outer));
    for (size_t slot = 0; slot < runs.size(); ++slot) {
      EXPECT_EQ(runs[slot].load(), 1) << "threads " << threads << " slot " << slot;
    }
  }
}

TEST(TraceTaskPool, RethrowsTheFirstFailureInBatchOrder) {
  for (unsigned threads : {1u, 2u, 4u}) {
    TaskPool pool(threads);
    std::vector<std::function<void()>> tasks;
    tasks.emplace_back([] {});
    tasks.emplace_back([] { throw std::runtime_error("second"); });
    tasks.emplace_back([] {});
    tasks.emplace_back([] { throw std::runtime_error("fourth"); });
    try {
      pool.run(std::move(tasks));
      ADD_FAILURE() << "no exception with " << threads << " threads";
    } catch (const std::runtime_error& error) {
      EXPECT_STREQ(error.what(), "second") << "threads " << threads;
    }
    // The pool is still usable afterwards.
    int ran = 0;
    pool.run({[&ran] { ++ran; }});
    EXPECT_EQ(ran, 1);
  }
}

// The whole `loupe trace analyze` answer, every finding and row, as text.
std::string analyze_text(const Model& model, AnalyzeRequest request, unsigned threads) {
  request.detail = true;
  request.threads = threads;
  return envelope_to_json(analyze(model, request)).dump();
}

TEST(TraceAnalysisThreads, SameAnswerOneAfterAnotherAndSideBySide) {
  const std::vector<std::vector<std::string>> inputs = {
      {"ddp_nccl.json.gz"},
      {"generate_steps.json.gz"},
      {"copy_overlap.json.gz"},
      {"gil_held.json.gz"},
      {"synthetic/graph_decode.json.gz"},
      {"synthetic/critical_sync.json.gz"},
      {"synthetic/tpdp_rank0.json.gz", "synthetic/tpdp_rank1.json.gz",
       "synthetic/tpdp_rank2.json.gz", "synthetic/tpdp_rank3.json.gz"},
  };
  for (const std::vector<std::string>& names : inputs) {
    std::vector<std::string> paths;
    for (const std::string& name : names) paths.push_back((kKineto / name).string());
    const Model model = load_traces(paths);
    AnalyzeRequest request;
    request.classes = {parse_class("kernels=cat:kernel"), parse_class("launches=name:^cuda")};
    request.overlap = std::make_pair("kernels", "launches");
    const std::string serial = analyze_text(model, request, 1);
    EXPECT_NE(serial.find("\"findings\":[{"), std::string::npos) << names.front();
    EXPECT_EQ(analyze_text(model, request, 2), serial) << names.front();
    EXPECT_EQ(analyze_text(model, request, 4), serial) << names.front();
    EXPECT_EQ(analyze_text(model, AnalyzeRequest{}, 2), analyze_text(model, AnalyzeRequest{}, 1))
        << names.front();
  }
}

TEST(TraceAnalysisThreads, UsageErrorsAreTheSameOnAnyThreadCount) {
  const Model model = load_traces({(kKineto / "generate_steps.json.gz").string()});
  for (unsigned threads : {1u, 2u}) {
    AnalyzeRequest bad_iteration;
    bad_iteration.threads = threads;
    bad_iteration.iteration = "((";
    EXPECT_THROW(analyze(model, bad_iteration), Error) << threads;
    AnalyzeRequest undefined;
    undefined.threads = threads;
    undefined.overlap = std::make_pair("a", "b");
    try {
      analyze(model, undefined);
      ADD_FAILURE() << "undefined class accepted with " << threads << " threads";
    } catch (const Error& error) {
      EXPECT_EQ(error.message(), "class 'a' is used but not defined");
    }
  }
}

}  // namespace
}  // namespace loupe::trace
