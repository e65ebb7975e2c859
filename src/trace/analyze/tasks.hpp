// trace/analyze/tasks.hpp — runs the analyses' independent parts on a few threads.
//
// The analyses read a finished Model only, so once it is built they can run side by side. A
// TaskPool holds `threads - 1` helper threads; run() hands it a batch of tasks and returns when
// every one has finished, the calling thread running queued tasks meanwhile. A task may itself
// call run() (the GPU analysis splits its summaries that way): a waiting thread keeps taking
// queued tasks, so nested batches cannot starve. Each task writes only its own result, which is
// what keeps the output independent of which thread ran what and in which order.
// With one thread every batch runs on the calling thread, in order, as a plain loop would (and
// stops at the first task that throws).
// Thread-safety: run() may be called from any thread, including from inside a task.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace loupe::trace {

class TaskPool {
 public:
  // `threads`: how many threads run tasks, the caller's included; 0 picks
  // min(hardware threads, kMaxThreads). A helper that cannot be started leaves fewer.
  explicit TaskPool(unsigned threads);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Runs every task and returns once all have finished. When tasks threw, rethrows the exception
  // of the first of them in batch order (the one a serial loop would have met first).
  void run(std::vector<std::function<void()>> tasks);
  unsigned threads() const { return static_cast<unsigned>(helpers_.size()) + 1; }

  static constexpr unsigned kMaxThreads = 4;

 private:
  struct Batch;
  struct Entry {
    Batch* batch;
    size_t task;
  };
  // Runs one queued task, if any; returns whether one ran. REQUIRES: `lock` holds mutex_.
  bool run_one(std::unique_lock<std::mutex>& lock);
  void help();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Entry> queue_;
  bool stopping_ = false;
  std::vector<std::thread> helpers_;
};

}  // namespace loupe::trace
