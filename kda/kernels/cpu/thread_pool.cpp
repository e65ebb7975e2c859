#include "kda/kernels/cpu/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "kda/math/blas.hpp"

namespace kda::kernels::cpu {

void parallel_for(int64_t count, int threads, const std::function<void(int64_t)>& body) {
  math::use_single_threaded_blas();
  const int workers =
      static_cast<int>(std::clamp<int64_t>(threads, 1, std::max<int64_t>(count, 1)));
  if (workers == 1) {
    for (int64_t index = 0; index < count; ++index) body(index);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto work = [&] {
    for (int64_t index = next++; index < count; index = next++) {
      try {
        body(index);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        next = count;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int worker = 1; worker < workers; ++worker) pool.emplace_back(work);
  work();
  for (auto& thread : pool) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace kda::kernels::cpu
