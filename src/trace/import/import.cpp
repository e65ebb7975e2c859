// Format detection, gzip inflation and the merge of several files into one model.
#include "trace/import/import.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

#include "core/gzip.hpp"
#include "core/pattern.hpp"
#include "loupe/error.hpp"
#include "trace/record/binary_format.hpp"

namespace loupe::trace {
namespace {

// simdjson reads up to 64 bytes past the end of its input.
constexpr size_t kReadPadding = 64;

// Reads the file in one piece, leaving room for simdjson's padding so the JSON reader needs no
// second copy.
std::string read_plain(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    throw Error(ErrorCode::kInput, "cannot open trace file '" + path + "'",
                "check the path; traces are loupe binary (.loupetrace) or Chrome/Kineto JSON");
  }
  std::string bytes;
  std::error_code size_error;
  const auto size = std::filesystem::file_size(path, size_error);
  if (!size_error) {
    bytes.reserve(size + kReadPadding);
    bytes.resize(size);
    bytes.resize(std::fread(bytes.data(), 1, size, file));
  }
  char chunk[1 << 16];
  size_t got = 0;
  while ((got = std::fread(chunk, 1, sizeof(chunk), file)) > 0) bytes.append(chunk, got);
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) throw Error(ErrorCode::kInput, "cannot read trace file '" + path + "'");
  return bytes;
}

// A regular file mapped read-only and followed by at least kReadPadding readable zero bytes (an
// anonymous reservation the file is mapped over), so simdjson and the binary reader read it in
// place: no copy into a buffer whose pages the kernel must first zero. Pages are populated up front
// from the page cache.
class PaddedMapping {
 public:
  // nullptr when the file is not a regular non-empty file or cannot be mapped; the caller then
  // reads it with stdio, which reports the error.
  static std::unique_ptr<PaddedMapping> open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nullptr;
    std::unique_ptr<PaddedMapping> mapping;
    struct stat status {};
    if (::fstat(fd, &status) == 0 && S_ISREG(status.st_mode) && status.st_size > 0) {
      const auto size = static_cast<size_t>(status.st_size);
      const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
      const size_t total = (size + kReadPadding + page - 1) / page * page;
      void* region = ::mmap(nullptr, total, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (region != MAP_FAILED) {
        void* file = ::mmap(region, size, PROT_READ, MAP_PRIVATE | MAP_FIXED | MAP_POPULATE, fd, 0);
        if (file == MAP_FAILED) {
          ::munmap(region, total);
        } else {
          mapping.reset(new PaddedMapping(static_cast<const char*>(region), size, total));
        }
      }
    }
    ::close(fd);
    return mapping;
  }
  PaddedMapping(const PaddedMapping&) = delete;
  PaddedMapping& operator=(const PaddedMapping&) = delete;
  ~PaddedMapping() { ::munmap(const_cast<char*>(data_), mapped_size_); }

  std::string_view bytes() const { return {data_, size_}; }
  size_t capacity() const { return mapped_size_; }

 private:
  PaddedMapping(const char* data, size_t size, size_t mapped_size)
      : data_(data), size_(size), mapped_size_(mapped_size) {}

  const char* data_;
  size_t size_;
  size_t mapped_size_;
};

}  // namespace

std::string read_trace_bytes(const std::string& path) {
  std::string bytes = read_plain(path);
  if (is_gzip(bytes)) return inflate_gzip(bytes, path, TruncatedGzip::kKeep);
  return bytes;
}

namespace {

// Dispatches on the content. `bytes` has at least kReadPadding readable bytes past its end; when
// `owned` is given it holds `bytes` and JSON repairs may modify it in place.
void import_bytes(std::string_view bytes, std::string* owned, const std::string& path,
                  ModelBuilder& builder, uint32_t file_index) {
  if (bytes.size() >= sizeof(format::kMagic) &&
      std::memcmp(bytes.data(), format::kMagic, sizeof(format::kMagic)) == 0) {
    import_loupe_binary(bytes, path, builder, file_index);
    return;
  }
  size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || (bytes[first] != '[' && bytes[first] != '{')) {
    throw Error(ErrorCode::kInput,
                "trace file '" + path + "' is neither a loupe binary trace (magic LOUPETRC) nor " +
                    "JSON: offset " + std::to_string(first == std::string::npos ? 0 : first) +
                    " holds no '[' or '{'",
                "loupe reads .loupetrace files and Chrome/Kineto JSON, plain or gzip");
  }
  if (owned != nullptr) {
    import_chrome_json(*owned, path, builder, file_index);
  } else {
    import_chrome_json_file(path, builder, file_index);
  }
}

// The first bytes of a file (up to 4 KiB); empty when it cannot be opened or read, which the
// caller's full read then reports.
std::string read_head(const std::string& path) {
  std::string head(4096, '\0');
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  const ssize_t got = ::read(fd, head.data(), head.size());
  ::close(fd);
  head.resize(got > 0 ? static_cast<size_t>(got) : 0);
  return head;
}

// Plain JSON is streamed from the file (the JSON importer reads it in pieces): mapping it whole
// would make the file part of the resident memory.
bool is_plain_json(std::string_view head) {
  if (is_gzip(head)) return false;
  const size_t first = head.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && (head[first] == '[' || head[first] == '{');
}

}  // namespace

void import_file(const std::string& path, ModelBuilder& builder, uint32_t file_index) {
  try {
    // A pipe (`/dev/stdin` fed by one) gives its bytes once: sniffing its head would take them
    // from the reader, so it is read whole (gzip inflated) and imported from memory.
    struct stat status {};
    if (::stat(path.c_str(), &status) == 0 && !S_ISREG(status.st_mode) &&
        !S_ISDIR(status.st_mode)) {
      std::string bytes = read_trace_bytes(path);
      if (bytes.capacity() < bytes.size() + kReadPadding) {
        bytes.reserve(bytes.size() + kReadPadding);
      }
      import_bytes(bytes, &bytes, path, builder, file_index);
      return;
    }
    if (is_plain_json(read_head(path))) {
      import_chrome_json_file(path, builder, file_index);
      return;
    }
    const std::unique_ptr<PaddedMapping> mapping = PaddedMapping::open(path);
    if (mapping != nullptr && !is_gzip(mapping->bytes())) {
      import_bytes(mapping->bytes(), nullptr, path, builder, file_index);
      return;
    }
    std::string bytes = mapping != nullptr
                            ? inflate_gzip(mapping->bytes(), path, TruncatedGzip::kKeep)
                            : read_trace_bytes(path);
    if (bytes.capacity() < bytes.size() + kReadPadding) bytes.reserve(bytes.size() + kReadPadding);
    import_bytes(bytes, &bytes, path, builder, file_index);
  } catch (const std::bad_alloc&) {
    // The input, not loupe, is too large for this machine's memory: exit 2 naming it.
    throw Error(ErrorCode::kInput,
                "trace file '" + path + "' needs more memory than the process could allocate",
                "import fewer or smaller files at once; a gzip file is inflated under "
                "--max-inflated and --max-inflate-ratio");
  }
}

namespace {

// "rank-3", "rank_3", "rank3", "RANK.3" in the file's name (not its folders): the rank, or -1.
int rank_from_file_name(const std::string& path) {
  static const Pattern pattern =
      Pattern::compile("rank[-_.]?([0-9]{1,6})", "the rank-from-file-name pattern",
                       ErrorCode::kInternal, /*case_insensitive=*/true);
  const std::string name = std::filesystem::path(path).filename().string();
  std::vector<std::string_view> groups;
  if (!pattern.search(name, groups)) return -1;
  return std::stoi(std::string(groups[1]));
}

// Several files: each parsed on a worker thread into a model of its own (at most `threads`
// workers, each taking the next file in order), while this thread appends the parsed parts in the
// files' order (ModelBuilder::append) and frees each as soon as it is in, so at most the parts
// parsed ahead of the merge are held twice. The result is the model a serial import builds. A
// file's error is rethrown in the files' order, as a serial import meets it: once a file fails,
// files after it are skipped, and every file before it is still read (one of them may fail too).
void import_in_parallel(const std::vector<std::string>& paths, ModelBuilder& builder,
                        size_t threads) {
  struct Part {
    Model model;
    std::unique_ptr<ModelBuilder> builder;
    std::exception_ptr error;
    bool done = false;
  };
  std::vector<Part> parts(paths.size());
  std::mutex mutex;
  std::condition_variable part_done;
  std::atomic<size_t> next{0};
  std::atomic<size_t> first_failure{paths.size()};
  auto work = [&] {
    for (size_t index = next++; index < paths.size(); index = next++) {
      if (index > first_failure) continue;  // never merged: an earlier file failed
      Part& part = parts[index];
      try {
        part.builder = std::make_unique<ModelBuilder>(part.model);
        part.builder->keep_args(builder.keeps_args());
        import_file(paths[index], *part.builder, static_cast<uint32_t>(index));
      } catch (...) {
        part.error = std::current_exception();
        size_t failure = first_failure;
        while (index < failure && !first_failure.compare_exchange_weak(failure, index)) {
        }
      }
      {
        const std::lock_guard<std::mutex> lock(mutex);
        part.done = true;
      }
      part_done.notify_all();
    }
    // Each worker's retained JSON parser dies with its thread.
  };
  std::vector<std::thread> workers;
  for (size_t worker = 0; worker < std::min(threads, paths.size()); ++worker) {
    try {
      workers.emplace_back(work);
    } catch (const std::system_error&) {  // no thread to be had: fewer workers, or this one
      break;
    }
  }
  if (workers.empty()) work();
  std::exception_ptr error;
  try {
    for (size_t index = 0; index < parts.size(); ++index) {
      Part& part = parts[index];
      {
        std::unique_lock<std::mutex> lock(mutex);
        part_done.wait(lock, [&] { return part.done; });
      }
      if (part.error) {
        error = part.error;
        break;
      }
      // Room for the rest, guessing the files left are as large as this one: the columns then
      // grow in place instead of doubling (a reserve is address space; only what is written
      // becomes resident).
      const size_t left = parts.size() - index;
      builder.reserve_slices(part.model.slices.size() * left);
      std::string& args_text = builder.model().args_text;
      if (!args_text.empty())
        args_text.reserve(args_text.size() + part.model.args_text.size() * left);
      builder.append(*part.builder);
      part.builder.reset();
    }
  } catch (...) {  // out of memory while merging: the workers stop taking files
    error = std::current_exception();
    first_failure = 0;
  }
  for (std::thread& worker : workers) worker.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

Model load_traces(const std::vector<std::string>& paths, bool keep_args,
                  const std::vector<int>& ranks, unsigned threads) {
  if (paths.empty()) throw Error(ErrorCode::kUsage, "no trace file given");
  if (!ranks.empty() && ranks.size() != paths.size()) {
    throw Error(ErrorCode::kUsage,
                "--rank gives " + std::to_string(ranks.size()) + " ranks for " +
                    std::to_string(paths.size()) + " trace files",
                "one rank per file, in the files' order: --rank 0,1,2,3");
  }
  Model model;
  ModelBuilder builder(model);
  // Several files are the ranks of one job: the collectives' analysis reads their process group
  // from the args (Kineto's "Process Group Name"), so they are kept then.
  builder.keep_args(keep_args || paths.size() > 1);
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  if (paths.size() == 1 || threads == 1) {
    for (size_t index = 0; index < paths.size(); ++index) {
      import_file(paths[index], builder, static_cast<uint32_t>(index));
    }
  } else {
    import_in_parallel(paths, builder, threads);
  }
  for (size_t index = 0; index < model.files.size(); ++index) {
    FileInfo& file = model.files[index];
    if (!ranks.empty() && ranks[index] >= 0) {
      file.rank = ranks[index];
      file.rank_source = "--rank";
    } else if (file.rank < 0) {
      file.rank = rank_from_file_name(file.path);
      if (file.rank >= 0) file.rank_source = "file name";
    }
  }
  // Each importer maps its file onto its clock domain (loupe binary: CLOCK_MONOTONIC ns; Kineto
  // with baseTimeNanoseconds: that base added). Files of one domain need no shift; files of
  // different domains cannot be aligned from the files alone, which the alignment says.
  std::set<std::string> domains;
  for (const FileInfo& file : model.files) domains.insert(file.clock_domain);
  if (model.files.size() == 1) {
    model.alignment = "one file; timestamps as recorded (" + model.files[0].clock_domain + ")";
  } else if (domains.size() == 1 && *domains.begin() != "unknown") {
    model.alignment = std::to_string(model.files.size()) + " files share the clock domain '" +
                      *domains.begin() + "'; merged without shifting";
    model.one_clock = true;
  } else {
    std::string list;
    for (const std::string& domain : domains) list += (list.empty() ? "" : ", ") + domain;
    model.alignment = "not aligned: the files' clock domains differ or are unknown (" + list +
                      "); timestamps used as written";
  }
  builder.finish();
  return model;
}

}  // namespace loupe::trace
