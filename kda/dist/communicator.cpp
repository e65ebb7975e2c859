#include "kda/dist/communicator.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "loupe/error.hpp"

namespace kda::dist {

#if KDA_HAVE_MPI
std::unique_ptr<Communicator> make_mpi_communicator(const LaunchInfo& launch);
#endif
#if KDA_HAVE_NCCL
std::unique_ptr<Communicator> make_nccl_communicator(const LaunchInfo& launch);
#endif

namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

int env_int(const char* name, const char* text) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || errno != 0 || value < 0 || value > 1 << 20) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       std::string("environment variable ") + name + "='" + text +
                           "': expected a non-negative integer",
                       "it is set by the launcher (mpirun, srun, torchrun); unset it to run "
                       "one rank");
  }
  return static_cast<int>(value);
}

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string_view backend() const override { return "self"; }
  void allgather(const void* in, size_t bytes, void* out) override {
    if (bytes > 0) std::memcpy(out, in, bytes);
  }
  void barrier() override {}
};

}  // namespace

LaunchInfo launch_from_environment() {
  struct Scheme {
    const char* rank;
    const char* size;
    const char* local_rank;
  };
  static constexpr Scheme kSchemes[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
      {"PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID"},
      {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
  };
  LaunchInfo info;
  for (const Scheme& scheme : kSchemes) {
    const char* rank = env(scheme.rank);
    const char* size = env(scheme.size);
    if (rank == nullptr || size == nullptr) continue;
    info.rank = env_int(scheme.rank, rank);
    info.world_size = env_int(scheme.size, size);
    const char* local = env(scheme.local_rank);
    info.local_rank = local != nullptr ? env_int(scheme.local_rank, local) : info.rank;
    info.source = scheme.rank;
    if (info.world_size < 1 || info.rank >= info.world_size) {
      throw loupe::Error(loupe::ErrorCode::kUsage,
                         std::string("environment: ") + scheme.rank + "=" + rank + " with " +
                             scheme.size + "=" + size + ": the rank must lie in [0, size)",
                         "the launcher sets both; check the job's task count");
    }
    break;
  }
  if (const char* addr = env("MASTER_ADDR")) info.master_addr = addr;
  if (const char* port = env("MASTER_PORT")) info.master_port = env_int("MASTER_PORT", port);
  return info;
}

std::string compiled_backends() {
  std::string out = "self";
#if KDA_HAVE_MPI
  out += ", mpi";
#endif
#if KDA_HAVE_NCCL
  out += ", nccl";
#endif
  return out;
}

std::unique_ptr<Communicator> make_self_communicator() {
  return std::make_unique<SelfCommunicator>();
}

namespace {

struct World {
  std::mutex mutex;
  std::unique_ptr<Communicator> communicator;
  std::string opened;
};

World& the_world() {
  static World world;
  return world;
}

}  // namespace

void finalize_world() {
  World& state = the_world();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.communicator.reset();
}

Communicator& world(std::string_view backend) {
  World& state = the_world();
  std::lock_guard<std::mutex> lock(state.mutex);
  std::unique_ptr<Communicator>& communicator = state.communicator;
  std::string& opened = state.opened;
  const LaunchInfo launch = launch_from_environment();
  std::string chosen(backend);
  if (chosen == "auto") {
    // MPI where it is built (mpirun, srun start it); else NCCL (torchrun-style rendezvous).
    chosen = "self";
#if KDA_HAVE_NCCL
    if (launch.world_size > 1) chosen = "nccl";
#endif
#if KDA_HAVE_MPI
    if (launch.world_size > 1) chosen = "mpi";
#endif
  }
  if (communicator != nullptr) {
    if (chosen != opened) {
      throw loupe::Error(loupe::ErrorCode::kUsage,
                         "kda: the " + opened + " communicator is open; cannot also open " + chosen,
                         "one backend per process");
    }
    return *communicator;
  }
  if (chosen == "self") {
    if (launch.world_size > 1) {
      throw loupe::Error(loupe::ErrorCode::kUsage,
                         "kda: the launcher declared " + std::to_string(launch.world_size) +
                             " ranks (" + launch.source + ") but this build's backends are " +
                             compiled_backends() + "; one rank cannot stand for many",
                         "build kda where CMake finds MPI (apt-get install libopenmpi-dev), or "
                         "run one rank");
    }
    communicator = make_self_communicator();
  } else if (chosen == "mpi") {
#if KDA_HAVE_MPI
    communicator = make_mpi_communicator(launch);
#else
    throw loupe::Error(
        loupe::ErrorCode::kUsage,
        "kda: the mpi backend is not compiled in (backends: " + compiled_backends() + ")",
        "install libopenmpi-dev and reconfigure");
#endif
  } else if (chosen == "nccl") {
#if KDA_HAVE_NCCL
    communicator = make_nccl_communicator(launch);
#else
    throw loupe::Error(
        loupe::ErrorCode::kUsage,
        "kda: the nccl backend is not compiled in (backends: " + compiled_backends() + ")",
        "build with CUDA and NCCL (make device-bundle)");
#endif
  } else {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda: unknown communicator backend '" + chosen + "'",
                       "use auto, self, mpi or nccl");
  }
  opened = chosen;
  return *communicator;
}

}  // namespace kda::dist
