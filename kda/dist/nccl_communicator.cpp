// The NCCL backend (compiled where CMake finds CUDA and NCCL: KDA_HAVE_NCCL). One GPU per rank,
// chosen by the local rank. NCCL needs one ncclUniqueId on every rank before it can start; with no
// MPI to carry it, rank 0 hands it out over TCP at MASTER_ADDR:MASTER_PORT, the torchrun-style
// rendezvous (torchrun sets both; under srun or mpirun, export them). Host buffers go through
// device buffers: kda's CP runs on the CPU and the backend moves its bytes, which is what a GPU
// engine's collectives would move.
// libnccl is opened at run time (dlopen: KDA_NCCL_LIBRARY, else libnccl.so.2 on the loader's
// path), not linked: it is 200 MB, too big for the device bundle, and every GPU machine that runs
// NCCL jobs has one (PyTorch wheels ship it). nccl.h gives the types and signatures.
#include <arpa/inet.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>

#include "kda/dist/communicator.hpp"
#include "loupe/error.hpp"

namespace kda::dist {
namespace {

void check_cuda(cudaError_t code, const char* call) {
  if (code == cudaSuccess) return;
  throw loupe::Error(loupe::ErrorCode::kSubject,
                     std::string("kda nccl: ") + call + " failed: " + cudaGetErrorString(code));
}

// The NCCL entry points kda uses, resolved from the library once.
struct NcclApi {
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&::ncclAllGather) all_gather = nullptr;
  decltype(&::ncclCommDestroy) comm_destroy = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
};

const NcclApi& nccl() {
  static const NcclApi api = [] {
    const char* configured = std::getenv("KDA_NCCL_LIBRARY");
    const std::string name = configured != nullptr && *configured ? configured : "libnccl.so.2";
    void* library = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      throw loupe::Error(loupe::ErrorCode::kUsage,
                         "kda nccl: cannot open " + name + ": " + ::dlerror(),
                         "set KDA_NCCL_LIBRARY to libnccl.so.2's path (a PyTorch install has one: "
                         "python -c 'import nvidia.nccl, os; print(os.path.dirname("
                         "nvidia.nccl.__file__))'/lib) or add its folder to LD_LIBRARY_PATH");
    }
    NcclApi loaded;
    auto resolve = [&](auto& slot, const char* symbol) {
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(::dlsym(library, symbol));
      if (slot == nullptr) {
        throw loupe::Error(loupe::ErrorCode::kUsage, "kda nccl: " + name + " has no " + symbol,
                           "use NCCL 2.x");
      }
    };
    resolve(loaded.get_unique_id, "ncclGetUniqueId");
    resolve(loaded.comm_init_rank, "ncclCommInitRank");
    resolve(loaded.all_gather, "ncclAllGather");
    resolve(loaded.comm_destroy, "ncclCommDestroy");
    resolve(loaded.error_string, "ncclGetErrorString");
    return loaded;
  }();
  return api;
}

void check_nccl(ncclResult_t code, const char* call) {
  if (code == ncclSuccess) return;
  throw loupe::Error(loupe::ErrorCode::kSubject,
                     std::string("kda nccl: ") + call + " failed: " + nccl().error_string(code));
}

// Closes the socket it owns.
struct Socket {
  int fd = -1;
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

void send_all(int fd, const void* data, size_t bytes) {
  const char* at = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t sent = ::send(fd, at, bytes, MSG_NOSIGNAL);
    if (sent <= 0)
      throw loupe::Error(loupe::ErrorCode::kSubject, "kda nccl: rendezvous send failed");
    at += sent;
    bytes -= static_cast<size_t>(sent);
  }
}

void receive_all(int fd, void* data, size_t bytes) {
  char* at = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t got = ::recv(fd, at, bytes, 0);
    if (got <= 0) {
      throw loupe::Error(loupe::ErrorCode::kSubject,
                         "kda nccl: the rendezvous closed before the NCCL id arrived");
    }
    at += got;
    bytes -= static_cast<size_t>(got);
  }
}

ncclUniqueId rendezvous(const LaunchInfo& launch) {
  if (launch.master_addr.empty() || launch.master_port <= 0) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda nccl: " + std::to_string(launch.world_size) +
                           " ranks but no MASTER_ADDR and MASTER_PORT to meet at",
                       "torchrun sets them; under srun or mpirun export MASTER_ADDR=<rank 0's "
                       "host> MASTER_PORT=<a free port>");
  }
  ncclUniqueId id{};
  if (launch.rank == 0) {
    check_nccl(nccl().get_unique_id(&id), "ncclGetUniqueId");
    Socket server;
    server.fd = ::socket(AF_INET, SOCK_STREAM, 0);
    const int yes = 1;
    ::setsockopt(server.fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_ANY);
    address.sin_port = htons(static_cast<uint16_t>(launch.master_port));
    if (::bind(server.fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(server.fd, launch.world_size) != 0) {
      throw loupe::Error(loupe::ErrorCode::kSubject,
                         "kda nccl: rank 0 cannot listen on port " +
                             std::to_string(launch.master_port) + ": " + std::strerror(errno),
                         "pick a free MASTER_PORT");
    }
    for (int peer = 1; peer < launch.world_size; ++peer) {
      Socket client;
      client.fd = ::accept(server.fd, nullptr, nullptr);
      if (client.fd < 0) throw loupe::Error(loupe::ErrorCode::kSubject, "kda nccl: accept failed");
      send_all(client.fd, &id, sizeof id);
    }
    return id;
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(launch.master_port);
  if (::getaddrinfo(launch.master_addr.c_str(), port.c_str(), &hints, &found) != 0 || !found) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       "kda nccl: MASTER_ADDR '" + launch.master_addr + "' does not resolve");
  }
  // Rank 0 may not listen yet: retry for up to a minute.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    Socket client;
    client.fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(client.fd, found->ai_addr, found->ai_addrlen) == 0) {
      receive_all(client.fd, &id, sizeof id);
      ::freeaddrinfo(found);
      return id;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ::freeaddrinfo(found);
      throw loupe::Error(loupe::ErrorCode::kSubject,
                         "kda nccl: rank " + std::to_string(launch.rank) + " could not reach " +
                             launch.master_addr + ":" + port + " within 60 s",
                         "is rank 0 running, and the port open between the hosts?");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(const LaunchInfo& launch)
      : rank_(launch.rank), size_(launch.world_size) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      throw loupe::Error(loupe::ErrorCode::kSubject, "kda nccl: no CUDA device",
                         "run the nccl backend on a GPU machine, one GPU per rank");
    }
    check_cuda(cudaSetDevice(launch.local_rank % devices), "cudaSetDevice");
    const ncclUniqueId id = rendezvous(launch);
    check_nccl(nccl().comm_init_rank(&comm_, size_, id, rank_), "ncclCommInitRank");
    check_cuda(cudaStreamCreate(&stream_), "cudaStreamCreate");
  }
  ~NcclCommunicator() override {
    if (send_ != nullptr) cudaFree(send_);
    if (receive_ != nullptr) cudaFree(receive_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (comm_ != nullptr) nccl().comm_destroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view backend() const override { return "nccl"; }

  void allgather(const void* in, size_t bytes, void* out) override {
    reserve(bytes);
    check_cuda(cudaMemcpyAsync(send_, in, bytes, cudaMemcpyHostToDevice, stream_),
               "cudaMemcpyAsync");
    check_nccl(nccl().all_gather(send_, receive_, bytes, ncclUint8, comm_, stream_),
               "ncclAllGather");
    check_cuda(cudaMemcpyAsync(out, receive_, bytes * static_cast<size_t>(size_),
                               cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  void barrier() override {
    const char token = 0;
    std::string all(static_cast<size_t>(size_), '\0');
    allgather(&token, 1, all.data());
  }

 private:
  void reserve(size_t bytes) {
    if (bytes <= capacity_) return;
    if (send_ != nullptr) cudaFree(send_);
    if (receive_ != nullptr) cudaFree(receive_);
    send_ = receive_ = nullptr;
    check_cuda(cudaMalloc(&send_, bytes), "cudaMalloc");
    check_cuda(cudaMalloc(&receive_, bytes * static_cast<size_t>(size_)), "cudaMalloc");
    capacity_ = bytes;
  }

  int rank_, size_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* send_ = nullptr;
  void* receive_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchInfo& launch) {
  return std::make_unique<NcclCommunicator>(launch);
}

}  // namespace kda::dist
