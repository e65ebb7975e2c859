// kda/kernels/cpu/thread_pool.hpp — run independent work items on a fixed number of threads.
//
// parallel_for hands out item indices from an atomic counter to `threads` workers (the caller is
// one of them) and returns when every item is done; the first exception thrown by an item is
// rethrown in the caller. Workers call math::use_single_threaded_blas() semantics by construction:
// OpenBLAS is set to one thread process-wide before any kernel runs (math/blas.hpp).
// Thread-safety: `body` must be safe to call concurrently for distinct indices.
#pragma once

#include <cstdint>
#include <functional>

namespace kda::kernels::cpu {

// REQUIRES: threads >= 1. Runs body(index) for index in [0, count).
void parallel_for(int64_t count, int threads, const std::function<void(int64_t)>& body);

}  // namespace kda::kernels::cpu
