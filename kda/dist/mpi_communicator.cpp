// The MPI backend (compiled where CMake finds MPI). Collectives are started non-blocking and
// completed by polling with short sleeps: on an oversubscribed node (`mpirun --oversubscribe`,
// more ranks than cores) a rank that waits in a blocking MPI call spins on a core the other ranks
// need, and its spinning would be measured as their compute.
// The C API only: OpenMPI's mpi.h pulls in its deprecated C++ bindings otherwise.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <string>
#include <thread>

#include "kda/dist/communicator.hpp"
#include "loupe/error.hpp"

namespace kda::dist {
namespace {

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw loupe::Error(loupe::ErrorCode::kSubject,
                     std::string("kda mpi: ") + call + " failed: " + std::string(text, length));
}

void wait_sleeping(MPI_Request& request, const char* call) {
  int done = 0;
  for (;;) {
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const LaunchInfo& launch) {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      // Finalised at exit, after every static user is gone: the probes call world() from paths
      // the subject runtime invokes several times in one process.
      std::atexit([] {
        int finalised = 0;
        MPI_Finalized(&finalised);
        if (!finalised) MPI_Finalize();
      });
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    if (launch.world_size != size_ || launch.rank != rank_) {
      throw loupe::Error(
          loupe::ErrorCode::kUsage,
          "kda mpi: the environment says rank " + std::to_string(launch.rank) + " of " +
              std::to_string(launch.world_size) + " (" + launch.source + ") but MPI says rank " +
              std::to_string(rank_) + " of " + std::to_string(size_),
          "launch with mpirun -n N (or srun --mpi=pmix); torchrun-style RANK/WORLD_SIZE alone "
          "cannot start MPI: use the nccl backend there");
    }
  }
  ~MpiCommunicator() override {
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (!finalised) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "mpi"; }

  void allgather(const void* in, size_t bytes, void* out) override {
    if (bytes > static_cast<size_t>(INT_MAX)) {
      throw loupe::Error(loupe::ErrorCode::kUsage,
                         "kda mpi: allgather of " + std::to_string(bytes) +
                             " bytes per rank exceeds MPI's int count",
                         "use fewer tokens or heads per rank");
    }
    MPI_Request request;
    check(MPI_Iallgather(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes),
                         MPI_BYTE, MPI_COMM_WORLD, &request),
          "MPI_Iallgather");
    wait_sleeping(request, "MPI_Iallgather");
  }

  void barrier() override {
    MPI_Request request;
    check(MPI_Ibarrier(MPI_COMM_WORLD, &request), "MPI_Ibarrier");
    wait_sleeping(request, "MPI_Ibarrier");
  }

 private:
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const LaunchInfo& launch) {
  return std::make_unique<MpiCommunicator>(launch);
}

}  // namespace kda::dist
