// Check points on two workers (CascadeOptions::check_workers, issue 39): the next check points
// run while the cascade waits for the one it needs, and the cascade still takes every result in
// its own order, so the gates, their announcements, the causes and the points recorded are those
// of one worker — with a failing composite check bringing its component's check forward, a
// baseline build's check points after the candidate's, and a subject failure that stops the run.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gate/cascade.hpp"

namespace loupe::gate {
namespace {

// A composite check (model) and its component's (kernel), a check of two points before the
// component's, and gates within the build and against the baseline.
const std::string kWorkersObjective = R"(name = "workers"
[subject]
command = ["subject", "probe"]

[components]
kernel = "the kernel"
model = "the layers around the kernel"

[[check]]
name = "model"
probe = "model_vs_fp32"
covers = ["kernel", "model"]
params = { layers = [1, 2] }

[[check]]
name = "decode"
probe = "decode_vs_recurrence"
params = { variant = ["merged", "tiled"] }

[[check]]
name = "kernel"
probe = "kernel_vs_reference"
covers = ["kernel"]

[[check]]
name = "replay"
probe = "replay_vs_decode"
params = { L = [4, 8] }

[[gate]]
name = "model_ok"
expr = "check.model passes"

[[gate]]
name = "decode_ok"
expr = "check.decode.rms_ratio <= 2e-6"

[[gate]]
name = "kernel_ok"
expr = "check.kernel passes"

[[gate]]
name = "replay_ok"
expr = "check.replay passes"

[[gate]]
name = "kernel_not_worse_than_baseline"
expr = "check.kernel.rms_ratio / baseline <= 1.5"

[[gate]]
name = "replay_not_worse_than_baseline"
expr = "check.replay.rms_ratio / baseline <= 1.5"
)";

// Thread-safe: both sides' points may run at once. The entries in `failing` fail on the
// candidate's side; the candidate's first point of `crash_at` throws as a crashed subject does.
// With `first_waits_for_second` the first point started waits (up to 10 s) until a second one
// has started, and then still ends after it: results come back out of the cascade's order.
struct WorkersSubject {
  std::set<std::string> failing;
  std::string crash_at;
  bool first_waits_for_second = false;

  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::string> events;  // "start ENTRY" and "end ENTRY", in the order they happened
  int started = 0;
  int in_flight = 0;
  int most_in_flight = 0;
  std::set<std::thread::id> threads;

  PointResult run(bool baseline, const PlanTask& task, int64_t repeat,
                  std::optional<uint64_t> seed) {
    int index = 0;
    {
      std::unique_lock lock(mutex);
      index = started++;
      most_in_flight = std::max(most_in_flight, ++in_flight);
      threads.insert(std::this_thread::get_id());
      events.push_back("start " + task.entry);
      changed.notify_all();
      if (first_waits_for_second && index == 0) {
        changed.wait_for(lock, std::chrono::seconds(10), [this] { return started >= 2; });
      }
    }
    // The component's check is slow: the points started before it end while it runs.
    std::this_thread::sleep_for(
        std::chrono::milliseconds(index == 0 ? 60 : (task.entry == "kernel" ? 80 : 5)));
    {
      std::lock_guard lock(mutex);
      --in_flight;
      events.push_back("end " + task.entry);
    }
    if (!baseline && task.entry == crash_at) {
      throw Error(ErrorCode::kSubject, "the subject crashed at " + task.entry);
    }
    PointResult point;
    point.layer = task.layer;
    point.entry = task.entry;
    point.probe = task.probe;
    point.params = task.params;
    point.repeat = repeat;
    const bool fails = !baseline && failing.count(task.entry) > 0;
    point.metrics = {{"", "rms_ratio", fails ? 1e-2 : 1e-7}};
    point.verdict = fails ? Verdict::kFail : Verdict::kPass;
    // The candidate's seed is drawn by its run; the baseline's is the one it was given.
    point.seed = seed.value_or(100 + task.entry.size() * 10 + task.params.size());
    return point;
  }
};

struct WorkersOutcome {
  CascadeResult result;
  std::vector<std::string> announced;  // each gate as it was announced, with its rule
};

WorkersOutcome run_with(int64_t workers, WorkersSubject& subject, bool with_baseline) {
  const Objective objective = parse_objective(kWorkersObjective, "dir/workers.toml");
  const Plan plan = make_plan(objective, Configuration{});
  WorkersOutcome outcome;
  CascadeOptions options;
  options.check_workers = workers;
  options.gate_decided = [&outcome](const GateResult& gate) {
    outcome.announced.push_back(gate.name + " " + std::string(gate_verdict_name(gate.verdict)) +
                                ": " + gate.rule);
  };
  if (with_baseline) {
    BaselineSource baseline;
    baseline.label = "build base";
    baseline.interleave = true;
    baseline.run = [&subject](const PlanTask& task, const ProbeEntry&, int64_t repeat,
                              std::optional<uint64_t> seed) -> std::optional<PointResult> {
      return subject.run(true, task, repeat, seed);
    };
    options.baseline = baseline;
  }
  const PointRunner runner = [&subject](const PlanTask& task, const ProbeEntry&, int64_t repeat) {
    return subject.run(false, task, repeat, std::nullopt);
  };
  outcome.result = run_cascade(objective, plan, options, runner);
  return outcome;
}

std::vector<std::string> describe_all(const std::vector<PointResult>& points) {
  std::vector<std::string> out;
  for (const auto& point : points) {
    out.push_back(point.entry + " " + params_to_string(point.params) + " r" +
                  std::to_string(point.repeat) + " seed " + std::to_string(point.seed) + " " +
                  std::string(verdict_name(point.verdict)));
  }
  return out;
}

std::vector<std::string> describe_all(const std::vector<GateResult>& gates) {
  std::vector<std::string> out;
  for (const auto& gate : gates) {
    out.push_back(gate.name + " " + std::string(gate_verdict_name(gate.verdict)) + ": " +
                  gate.rule);
  }
  return out;
}

TEST(CheckWorkersTest, TwoWorkersDecideAnnounceAndRecordWhatOneDoes) {
  WorkersSubject one;
  one.failing = {"model", "kernel"};
  const WorkersOutcome sequential = run_with(1, one, true);
  WorkersSubject two;
  two.failing = {"model", "kernel"};
  two.first_waits_for_second = true;
  const WorkersOutcome parallel = run_with(2, two, true);

  // One worker: one point at a time, on the cascade's thread.
  EXPECT_EQ(one.most_in_flight, 1);
  EXPECT_EQ(one.threads, (std::set<std::thread::id>{std::this_thread::get_id()}));
  // Two: two at a time, never more, none on the cascade's thread.
  EXPECT_EQ(two.most_in_flight, 2);
  EXPECT_EQ(two.threads.count(std::this_thread::get_id()), 0u);

  // The failing composite brought its component's check forward, and the cause was announced
  // before the symptom, as with one worker.
  const std::vector<std::string> expected_points = {"model layers=1 r0 seed 151 fail",
                                                    "kernel  r0 seed 160 fail",
                                                    "model layers=2 r0 seed 151 fail",
                                                    "decode variant=merged r0 seed 161 pass",
                                                    "decode variant=tiled r0 seed 161 pass",
                                                    "replay L=4 r0 seed 161 pass",
                                                    "replay L=8 r0 seed 161 pass"};
  EXPECT_EQ(describe_all(sequential.result.points), expected_points);
  EXPECT_EQ(describe_all(parallel.result.points), expected_points);
  ASSERT_GE(sequential.announced.size(), 2u);
  EXPECT_EQ(sequential.announced[0].rfind("kernel_ok fail", 0), 0u) << sequential.announced[0];
  EXPECT_EQ(sequential.announced[1].rfind("model_ok fail", 0), 0u) << sequential.announced[1];
  EXPECT_EQ(parallel.announced, sequential.announced);
  EXPECT_EQ(describe_all(parallel.result.gates), describe_all(sequential.result.gates));
  // The baseline build's points, on the candidate's seeds, in the candidate's order.
  EXPECT_EQ(describe_all(sequential.result.baseline_points),
            (std::vector<std::string>{"kernel  r0 seed 160 pass", "replay L=4 r0 seed 161 pass",
                                      "replay L=8 r0 seed 161 pass"}));
  EXPECT_EQ(describe_all(parallel.result.baseline_points),
            describe_all(sequential.result.baseline_points));
  // While the failing model_ok waited for kernel_ok, the component's check ran with no point
  // started beside it (the one started before it may still end meanwhile).
  const auto kernel_start = std::find(two.events.begin(), two.events.end(), "start kernel");
  const auto kernel_end = std::find(two.events.begin(), two.events.end(), "end kernel");
  ASSERT_NE(kernel_start, two.events.end());
  ASSERT_NE(kernel_end, two.events.end());
  for (auto event = kernel_start + 1; event != kernel_end; ++event) {
    EXPECT_NE(event->rfind("start ", 0), 0u) << *event << " started beside the component's check";
  }
  EXPECT_EQ(parallel.result.causes.causes, sequential.result.causes.causes);
  EXPECT_EQ(parallel.result.causes.causes,
            (std::vector<std::string>{"kernel_ok", "kernel_not_worse_than_baseline"}));
  EXPECT_EQ(cascade_verdict(parallel.result), Verdict::kFail);
}

TEST(CheckWorkersTest, WithoutABaselineAndWithEveryCheckPassingTheRecordIsTheSame) {
  WorkersSubject one;
  const WorkersOutcome sequential = run_with(1, one, false);
  WorkersSubject two;
  two.first_waits_for_second = true;
  const WorkersOutcome parallel = run_with(2, two, false);
  EXPECT_EQ(two.most_in_flight, 2);
  EXPECT_EQ(describe_all(parallel.result.points), describe_all(sequential.result.points));
  EXPECT_EQ(parallel.announced, sequential.announced);
  EXPECT_EQ(describe_all(parallel.result.gates), describe_all(sequential.result.gates));
  EXPECT_EQ(cascade_verdict(parallel.result), Verdict::kPass);
}

// A point that ran ahead of a crashed one is waited for and dropped: the run stops where one
// worker's does, with the same error, points and not-run gates.
TEST(CheckWorkersTest, ASubjectFailureStopsTheRunWhereOneWorkersStops) {
  WorkersSubject one;
  one.crash_at = "decode";
  const WorkersOutcome sequential = run_with(1, one, true);
  WorkersSubject two;
  two.crash_at = "decode";
  two.first_waits_for_second = true;
  const WorkersOutcome parallel = run_with(2, two, true);
  ASSERT_TRUE(sequential.result.error.has_value());
  ASSERT_TRUE(parallel.result.error.has_value());
  EXPECT_EQ(parallel.result.error->message(), "the subject crashed at decode");
  EXPECT_EQ(describe_all(sequential.result.points),
            (std::vector<std::string>{"model layers=1 r0 seed 151 pass",
                                      "model layers=2 r0 seed 151 pass"}));
  EXPECT_EQ(describe_all(parallel.result.points), describe_all(sequential.result.points));
  EXPECT_TRUE(parallel.result.baseline_points.empty());
  EXPECT_EQ(describe_all(parallel.result.gates), describe_all(sequential.result.gates));
  EXPECT_EQ(parallel.announced, sequential.announced);
  // Nothing is left running once run_cascade has returned.
  std::lock_guard lock(two.mutex);
  EXPECT_EQ(two.in_flight, 0);
}

}  // namespace
}  // namespace loupe::gate
