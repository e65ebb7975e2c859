#include "kda/dist/rank_trace.hpp"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "loupe/error.hpp"

namespace kda::dist {

int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

RankTrace::RankTrace(int rank, int world_size, std::string backend)
    : rank_(rank),
      world_size_(world_size),
      backend_(std::move(backend)),
      pid_(static_cast<int64_t>(getpid())),
      tid_(static_cast<int64_t>(syscall(SYS_gettid))),
      base_ns_(monotonic_ns()) {}

RankTrace::Scope::Scope(RankTrace& trace, size_t index)
    : trace_(trace), index_(index), zone_(std::string_view(trace.events_[index].name)) {}

RankTrace::Scope::~Scope() { trace_.events_[index_].end_ns = monotonic_ns(); }

size_t RankTrace::open(std::string name, std::string args) {
  events_.push_back({std::move(name), monotonic_ns(), 0, std::move(args)});
  return events_.size() - 1;
}

size_t RankTrace::open_stage(const std::string& name) {
  return open(name, "\"rank\": " + std::to_string(rank_));
}

size_t RankTrace::open_collective(const std::string& op, int64_t in_elements, int64_t out_elements,
                                  const std::string& dtype) {
  std::string ranks;
  for (int rank = 0; rank < world_size_; ++rank) ranks += (rank ? ", " : "") + std::to_string(rank);
  std::string args =
      "\"Collective name\": \"" + op + "\", \"In msg nelems\": " + std::to_string(in_elements) +
      ", \"Out msg nelems\": " + std::to_string(out_elements) + ", \"dtype\": \"" + dtype +
      "\", \"Group size\": " + std::to_string(world_size_) +
      ", \"Process Group Name\": \"0\", \"Process Group Ranks\": \"[" + ranks +
      "]\", \"Seq\": " + std::to_string(collectives_++) + ", \"rank\": " + std::to_string(rank_);
  return open(backend_ + ":" + op, std::move(args));
}

void RankTrace::write_kineto_json(const std::filesystem::path& path) const {
  std::ofstream out(path);
  std::string ranks;
  for (int rank = 0; rank < world_size_; ++rank) ranks += (rank ? ", " : "") + std::to_string(rank);
  out << "{\n\"schemaVersion\": 1,\n\"distributedInfo\": {\"backend\": \"" << backend_
      << "\", \"rank\": " << rank_ << ", \"world_size\": " << world_size_
      << ", \"pg_count\": 1, \"pg_config\": [{\"pg_name\": \"0\", \"pg_desc\": \"default_pg\", "
         "\"backend_config\": \""
      << backend_ << "\", \"pg_size\": " << world_size_ << ", \"ranks\": [" << ranks
      << "]}]},\n\"baseTimeNanoseconds\": " << base_ns_ << ",\n\"traceEvents\": [\n";
  out << "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " << pid_
      << ", \"tid\": 0, \"args\": {\"name\": \"kda rank " << rank_ << "\"}},\n";
  out << "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " << pid_ << ", \"tid\": " << tid_
      << ", \"args\": {\"name\": \"rank " << rank_ << " main\"}}";
  char number[64];
  for (const Event& event : events_) {
    // Kineto writes µs relative to baseTimeNanoseconds; three decimals keep whole ns.
    std::snprintf(number, sizeof number, "%.3f",
                  static_cast<double>(event.start_ns - base_ns_) / 1e3);
    out << ",\n{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"" << event.name
        << "\", \"pid\": " << pid_ << ", \"tid\": " << tid_ << ", \"ts\": " << number;
    std::snprintf(number, sizeof number, "%.3f",
                  static_cast<double>(event.end_ns - event.start_ns) / 1e3);
    out << ", \"dur\": " << number << ", \"args\": {" << event.args << "}}";
  }
  out << "\n]}\n";
  if (!out) {
    throw loupe::Error(loupe::ErrorCode::kInput, "cannot write the trace " + path.string(),
                       "check that the directory exists and is writable");
  }
}

}  // namespace kda::dist
