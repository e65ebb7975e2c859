// kda/dist/communicator.hpp — the ranks of one multi-rank kda run and the collectives they use.
//
// kda runs across ranks the way inference engines do: started by a launcher users already have
// (mpirun, srun, torchrun-style RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT), one process
// per rank, never a launcher of kda's own. LaunchInfo says what the environment declared; a
// Communicator moves bytes between the ranks. Backends: "self" (one rank, no library), "mpi"
// (OpenMPI or any MPI; compiled in where CMake finds MPI, KDA_HAVE_MPI), "nccl" (one GPU per
// rank; compiled into CUDA builds where nccl.h is found, KDA_HAVE_NCCL; libnccl opened at run
// time; ranks meet at MASTER_ADDR:MASTER_PORT). One interface, so the CP code path is the same on
// every backend.
// Thread-safety: a Communicator is used by one thread at a time (MPI is initialised with
// MPI_THREAD_FUNNELED). world() initialises the process-wide communicator once; it is finalised
// at exit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace kda::dist {

// What the launcher put in the environment. Read in this order, the first that is present wins:
// OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK} (OpenMPI's mpirun), PMI_RANK/PMI_SIZE (MPICH, Intel
// MPI), PMIX_RANK with OMPI_COMM_WORLD_SIZE, SLURM_PROCID/SLURM_STEP_NUM_TASKS/SLURM_LOCALID (srun;
// the batch script itself is not a rank), RANK/WORLD_SIZE/LOCAL_RANK (torchrun). None: one rank.
struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string source = "none";  // the variable the rank came from
  std::string master_addr;      // MASTER_ADDR / MASTER_PORT where set (torchrun style)
  int master_port = 0;
};
// Throws loupe::Error(kUsage) naming the variable when a value is not a number or the rank lies
// outside [0, world_size).
LaunchInfo launch_from_environment();

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view backend() const = 0;
  // Every rank contributes `bytes` bytes from `in`; `out` receives size() · bytes, in rank order.
  // REQUIRES: the same `bytes` on every rank; `out` does not overlap `in`.
  virtual void allgather(const void* in, size_t bytes, void* out) = 0;
  virtual void barrier() = 0;
};

// The process-wide communicator. `backend`: "auto" (when the environment declares more than one
// rank: mpi where compiled in, else nccl where compiled in; one rank: self), "self", "mpi", "nccl".
// Throws loupe::Error(kUsage) when the backend is not compiled in, or the library's world disagrees
// with the environment (e.g. RANK/WORLD_SIZE set but MPI started as a singleton), naming both.
Communicator& world(std::string_view backend = "auto");

// Shuts the process-wide communicator down (MPI_Finalize for mpi). For a process that ends with
// _exit, where no atexit handler runs: the child loupe's runtime runs a check path in
// (loupe::at_path_process_exit). No-op when none is open.
void finalize_world();

// The backends this build has, e.g. "self, mpi".
std::string compiled_backends();

// One process, no library: rank 0 of 1.
std::unique_ptr<Communicator> make_self_communicator();

}  // namespace kda::dist
