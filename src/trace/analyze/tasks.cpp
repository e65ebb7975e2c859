// TaskPool (tasks.hpp).
#include "trace/analyze/tasks.hpp"

#include <algorithm>
#include <exception>
#include <system_error>

namespace loupe::trace {

struct TaskPool::Batch {
  std::vector<std::function<void()>> tasks;
  std::vector<std::exception_ptr> errors;  // per task
  size_t left = 0;                         // tasks not yet finished
};

TaskPool::TaskPool(unsigned threads) {
  if (threads == 0) threads = std::clamp(std::thread::hardware_concurrency(), 1u, kMaxThreads);
  for (unsigned helper = 1; helper < threads; ++helper) {
    try {
      helpers_.emplace_back([this] { help(); });
    } catch (const std::system_error&) {  // no thread to be had: the caller runs more
      break;
    }
  }
}

TaskPool::~TaskPool() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (std::thread& helper : helpers_) helper.join();
}

bool TaskPool::run_one(std::unique_lock<std::mutex>& lock) {
  if (queue_.empty()) return false;
  const Entry entry = queue_.front();
  queue_.pop_front();
  lock.unlock();
  std::exception_ptr error;
  try {
    entry.batch->tasks[entry.task]();
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  entry.batch->errors[entry.task] = error;
  if (--entry.batch->left == 0) changed_.notify_all();
  return true;
}

void TaskPool::help() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    if (run_one(lock)) continue;
    if (stopping_) return;
    changed_.wait(lock);
  }
}

void TaskPool::run(std::vector<std::function<void()>> tasks) {
  if (tasks.empty()) return;
  if (helpers_.empty()) {
    for (std::function<void()>& task : tasks) task();
    return;
  }
  Batch batch;
  batch.left = tasks.size();
  batch.errors.resize(tasks.size());
  batch.tasks = std::move(tasks);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    // At the front, in order: a batch started inside a task (work that waited on that task)
    // goes before the rest of the outer batch, so chains of dependent work are not held up.
    for (size_t task = batch.tasks.size(); task-- > 0;) queue_.push_front({&batch, task});
    changed_.notify_all();
    // The caller works too: its own batch's tasks or any other queued one, until its batch is
    // done; it sleeps only while every task left of its batch is running on another thread.
    while (batch.left > 0) {
      if (!run_one(lock)) changed_.wait(lock);
    }
  }
  for (const std::exception_ptr& error : batch.errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace loupe::trace
