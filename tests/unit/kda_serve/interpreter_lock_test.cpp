// The interpreter lock's switching rule, and the facts of incident 2 as loupe's lock analysis
// reads them from a recorded trace: with --dispatch-holds-lock the transfer thread waits on
// interpreter_lock while the prefill worker is inside moe_dispatch; with the fix the transfer's
// work overlaps moe_dispatch. Structural facts only, no timing assertions.
#include "kda/serve/interpreter_lock.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "kda/serve/server.hpp"
#include "trace/analyze/analyze.hpp"
#include "trace/import/import.hpp"

namespace kda::serve {
namespace {

TEST(InterpreterLock, HolderSwitchesOnlyWhenAWaiterAsked) {
  InterpreterLock lock(std::chrono::nanoseconds(0));
  lock.acquire();
  EXPECT_EQ(lock.yield_if_requested().count(), 0);  // nobody waits: no switch
  EXPECT_EQ(lock.forced_switches(), 0u);
  std::atomic<bool> waiter_ran{false};
  std::thread waiter([&] {
    lock.acquire();
    waiter_ran = true;
    lock.release();
  });
  while (!waiter_ran) lock.yield_if_requested();
  EXPECT_EQ(lock.forced_switches(), 1u);
  lock.release();
  waiter.join();
}

struct TraceFacts {
  double transfer_wait_behind_dispatch = 0;  // fraction of the transfer's lock wait
  int64_t transfer_wait_ns = 0;
  int64_t transfer_dispatch_overlap_ns = 0;
};

TraceFacts serve_and_analyse(bool holds_lock) {
  ServeOptions options;
  options.mode = Mode::kPrefillTransfer;
  options.dispatch_holds_lock = holds_lock;
  options.model.layers = 6;
  options.model.hidden = 64;
  options.model.head_dim = 32;
  options.model.expert_hidden = 64;
  options.prompt_len = 16;
  options.dispatch_wait_us = 4000;
  options.bookkeeping_us = 300;
  options.switch_interval_us = 1000;
  options.trace_path =
      (std::filesystem::temp_directory_path() / ("kda_serve_test_" + std::to_string(::getpid()) +
                                                 (holds_lock ? "_holds" : "_fix") + ".loupetrace"))
          .string();
  run_server(options);
  const loupe::trace::Model model = loupe::trace::load_traces({options.trace_path});
  std::filesystem::remove(options.trace_path);
  TraceFacts facts;
  loupe::StatsRegistry stats;
  const loupe::trace::Locks locks = loupe::trace::compute_locks(model, stats);
  for (const auto& contention : locks.contentions) {
    if (model.tracks[contention.lock].name != "interpreter_lock") continue;
    if (model.tracks[contention.waiter].name != "kv_transfer") continue;
    facts.transfer_wait_ns += contention.wait_ns;
    int64_t behind_dispatch = 0;
    for (const auto& holder : contention.holders) {
      if (model.tracks[holder.thread].name != "prefill_worker") continue;
      for (const auto& [zone, ns] : holder.zones) {
        if (zone == "moe_dispatch") behind_dispatch += ns;
      }
    }
    if (contention.wait_ns > 0) {
      facts.transfer_wait_behind_dispatch =
          static_cast<double>(behind_dispatch) / static_cast<double>(contention.wait_ns);
    }
  }
  const loupe::trace::Selector dispatch("name:^moe_dispatch$");
  const loupe::trace::Selector transfer("name:^kv_transfer_layer$");
  const loupe::trace::Overlap overlap =
      loupe::trace::compute_overlap(model, transfer, dispatch, "transfer", "dispatch", nullptr, "");
  facts.transfer_dispatch_overlap_ns = overlap.both_ns;
  return facts;
}

TEST(InterpreterLock, TraceShowsTransferWaitingBehindDispatchOnlyWhenDispatchHoldsTheLock) {
  const TraceFacts incident = serve_and_analyse(true);
  EXPECT_GT(incident.transfer_wait_ns, 0);
  // Most of the transfer thread's wait is spent while the prefill worker sits in moe_dispatch:
  // the 4 ms dispatch wait dwarfs the rest of the layer at this size.
  EXPECT_GT(incident.transfer_wait_behind_dispatch, 0.5);

  const TraceFacts fix = serve_and_analyse(false);
  EXPECT_GT(fix.transfer_dispatch_overlap_ns, 0);
}

}  // namespace
}  // namespace kda::serve
