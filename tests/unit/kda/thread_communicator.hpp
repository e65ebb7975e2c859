// Ranks as threads of one test process sharing an in-process communicator, so every build
// checks kda/dist's multi-rank paths without MPI (tests/integration/multirank runs them under
// mpirun where MPI is built).
#pragma once

#include <barrier>
#include <cstring>
#include <string_view>
#include <vector>

#include "kda/dist/communicator.hpp"

namespace kda::dist {

// Ranks as threads: allgather publishes each rank's pointer, waits for all, copies, waits again
// (so no rank's buffer is released while another still reads it).
struct ThreadGroup {
  explicit ThreadGroup(int ranks) : sync(ranks), inputs(static_cast<size_t>(ranks)) {}
  std::barrier<> sync;
  std::vector<const void*> inputs;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_.inputs.size()); }
  std::string_view backend() const override { return "threads"; }
  void allgather(const void* in, size_t bytes, void* out) override {
    group_.inputs[static_cast<size_t>(rank_)] = in;
    group_.sync.arrive_and_wait();
    for (size_t rank = 0; rank < group_.inputs.size(); ++rank) {
      std::memcpy(static_cast<char*>(out) + rank * bytes, group_.inputs[rank], bytes);
    }
    group_.sync.arrive_and_wait();
  }
  void barrier() override { group_.sync.arrive_and_wait(); }

 private:
  ThreadGroup& group_;
  int rank_;
};

}  // namespace kda::dist
