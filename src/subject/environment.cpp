// The environment fingerprint recorded in every observation, and the seed derivation.
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/sha256.hpp"
#include "core/tensor_file_bytes.hpp"
#include "subject/guards.hpp"
#include "subject/runtime.hpp"

namespace loupe::subject {
namespace {

// The value of the first line "key<sep>value" in a text file, trimmed; empty when absent.
std::string read_field(const std::string& file, const std::string& key, char separator) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t at = line.find(separator, key.size());
    if (at == std::string::npos) continue;
    std::string value = line.substr(at + 1);
    const size_t begin = value.find_first_not_of(" \t\"");
    const size_t end = value.find_last_not_of(" \t\"");
    return begin == std::string::npos ? std::string() : value.substr(begin, end - begin + 1);
  }
  return {};
}

}  // namespace

uint64_t derive_seed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Json environment_fingerprint(const detail::BuildInfo& build) {
  Json env = Json::object();
  std::string cpu = read_field("/proc/cpuinfo", "model name", ':');
  env["cpu_model"] = cpu.empty() ? "unknown" : cpu;
  env["cores"] = std::thread::hardware_concurrency();
  std::string os = read_field("/etc/os-release", "PRETTY_NAME", '=');
  env["os"] = os.empty() ? "unknown" : os;
  struct utsname names {};
  if (uname(&names) == 0) {
    env["kernel"] = std::string(names.sysname) + " " + names.release + " " + names.machine;
    env["hostname"] = names.nodename;
  } else {
    env["kernel"] = "unknown";
    env["hostname"] = "unknown";
  }
  env["compiler"] = build.compiler;
  env["build_type"] = build.build_type;
  return env;
}

std::string ObservationFiles::write_tensor(const std::string& stem, const Tensor& tensor) {
  const uint64_t sum = checksum(tensor);
  const std::string_view data(reinterpret_cast<const char*>(tensor.bytes()), tensor.nbytes());
  std::string data_sha256;
  auto [begin, end] = by_checksum_.equal_range(sum);
  for (auto it = begin; it != end; ++it) {
    const Written& earlier = it->second;
    if (earlier.dtype != tensor.dtype() || earlier.shape != tensor.shape()) continue;
    if (data_sha256.empty()) data_sha256 = sha256_hex(data);
    if (earlier.data_sha256 == data_sha256) return earlier.file;
  }
  const bool npy_can_name = tensor.dtype() != DType::kBF16 && tensor.dtype() != DType::kF8E4M3 &&
                            tensor.dtype() != DType::kF8E5M2;
  std::string file = stem + (npy_can_name ? ".npy" : ".safetensors");
  const std::filesystem::path path = dir_ / file;
  prepare(file);
  // The file is built here and sealed with the digest of these bytes, not of a re-read: a file
  // changed between the write and the digest (by code in this process: a thread started before
  // main) breaks the seal instead of being sealed as changed.
  std::string bytes =
      npy_can_name
          ? npy_head(path.string(), tensor)
          : safetensors_head(path.string(),
                             {{std::filesystem::path(stem).filename().string(), tensor}}, {});
  bytes.append(data);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out.flush()) {
      throw Error(ErrorCode::kSubject, path.string() + ": cannot write: " + std::strerror(errno));
    }
  }
  digests_[file] = sha256_hex(bytes);
  if (data_sha256.empty()) data_sha256 = sha256_hex(data);
  by_checksum_.emplace(sum, Written{tensor.dtype(), tensor.shape(), file, data_sha256});
  Json entry = Json::object();
  entry["path"] = file;
  entry["kind"] = "tensor";
  entry["dtype"] = std::string(dtype_name(tensor.dtype()));
  entry["shape"] = tensor.shape();
  listing_.push_back(std::move(entry));
  return file;
}

void ObservationFiles::prepare(const std::string& relative_path) {
  namespace fs = std::filesystem;
  const fs::path relative(relative_path);
  fs::path at = dir_;
  std::error_code error;
  size_t index = 0;
  const size_t parts = static_cast<size_t>(std::distance(relative.begin(), relative.end()));
  for (const auto& part : relative) {
    at /= part;
    const bool last = ++index == parts;
    const fs::file_status status = fs::symlink_status(at, error);
    if (!fs::exists(status)) {
      if (!last) fs::create_directory(at, error);
      continue;
    }
    const std::string name = fs::relative(at, dir_, error).string();
    if (fs::is_symlink(status)) {
      const fs::path target = fs::read_symlink(at, error);
      planted_.push_back(name + " -> " + target.string());
      fs::remove(at, error);
      if (!last) fs::create_directory(at, error);
    } else if (last) {
      // A file the runtime has not written yet: left by a path (a hard link to a file elsewhere
      // would be written through).
      planted_.push_back(
          name + " (" +
          (fs::is_directory(status) ? std::string("a folder") : std::string("a file")) + ")");
      fs::remove_all(at, error);
    } else if (!fs::is_directory(status)) {
      planted_.push_back(name + " (a file where a folder goes)");
      fs::remove(at, error);
      fs::create_directory(at, error);
    }
  }
}

void ObservationFiles::remove_links() {
  namespace fs = std::filesystem;
  std::error_code error;
  std::vector<fs::path> links;
  for (fs::recursive_directory_iterator it(dir_, fs::directory_options::none, error), end;
       !error && it != end; it.increment(error)) {
    if (it->is_symlink(error)) links.push_back(it->path());
  }
  for (const fs::path& link : links) {
    planted_.push_back(fs::relative(link, dir_, error).string() + " -> " +
                       fs::read_symlink(link, error).string());
    fs::remove(link, error);
  }
}

void ObservationFiles::digest(const std::string& relative_path) {
  std::ifstream in(dir_ / relative_path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  digests_[relative_path] = sha256_hex(bytes.str());
}

void ObservationFiles::add(std::string relative_path, std::string kind) {
  digest(relative_path);
  Json entry = Json::object();
  entry["path"] = std::move(relative_path);
  entry["kind"] = std::move(kind);
  listing_.push_back(std::move(entry));
}

LaunchRank launch_rank_from_environment() {
  static constexpr std::pair<const char*, const char*> kSchemes[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
      {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS"},
      {"RANK", "WORLD_SIZE"},
  };
  auto number = [](const char* name, const char* text) {
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || errno != 0 || value < 0 || value > (1 << 20)) {
      throw Error(ErrorCode::kUsage,
                  std::string("environment variable ") + name + "='" + text +
                      "': expected a non-negative integer",
                  "the launcher sets it (mpirun, srun, torchrun); unset it to run one rank");
    }
    return static_cast<int>(value);
  };
  LaunchRank launch;
  for (const auto& [rank_name, size_name] : kSchemes) {
    const char* rank = std::getenv(rank_name);
    const char* size = std::getenv(size_name);
    if (rank == nullptr || size == nullptr || *rank == '\0' || *size == '\0') continue;
    launch.rank = number(rank_name, rank);
    launch.world_size = number(size_name, size);
    launch.source = rank_name;
    if (launch.world_size < 1 || launch.rank >= launch.world_size) {
      throw Error(ErrorCode::kUsage, std::string("environment: ") + rank_name + "=" + rank +
                                         " with " + size_name + "=" + size +
                                         ": the rank must lie in [0, size)");
    }
    break;
  }
  return launch;
}

}  // namespace loupe::subject
