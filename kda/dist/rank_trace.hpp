// kda/dist/rank_trace.hpp — one rank's time line: its stages and its collectives, with the rank.
//
// Every scope is recorded twice: as a loupe zone (include/loupe/trace.hpp; written to the loupe
// binary trace when recording is on) and in this object, which writes a Kineto-compatible JSON
// (PyTorch profiler layout: `cpu_op` slices, `distributedInfo` with the rank, world size and the
// process group, collectives named `mpi:<op>` with the args Kineto gives `nccl:<op>`:
// "Collective name", "In msg nelems", "Out msg nelems", "Group size", "Process Group Name").
// Timestamps: CLOCK_MONOTONIC, the clock of loupe's binary traces; the JSON's
// baseTimeNanoseconds anchors them, so the ranks of one host share a clock domain.
// Thread-safety: one RankTrace per rank, used by one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "loupe/trace.hpp"

namespace kda::dist {

class RankTrace {
 public:
  RankTrace(int rank, int world_size, std::string backend);

  // Closes the event `index` (from open_stage / open_collective) when it goes out of scope.
  class Scope {
   public:
    Scope(RankTrace& trace, size_t index);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    RankTrace& trace_;
    size_t index_;
    loupe::trace::Zone zone_;
  };

  // A stage of the rank's own work ("cp_summaries", "cp_outputs", ...); returns its index.
  size_t open_stage(const std::string& name);
  // A collective over the whole world: `op` ("allgather"), elements sent by this rank and received
  // in all, the element type ("float", "double").
  size_t open_collective(const std::string& op, int64_t in_elements, int64_t out_elements,
                         const std::string& dtype);

  // Writes the Kineto-compatible JSON. Throws loupe::Error(kInput) when the file cannot be written.
  void write_kineto_json(const std::filesystem::path& path) const;

  int rank() const { return rank_; }

 private:
  struct Event {
    std::string name;
    int64_t start_ns = 0, end_ns = 0;
    std::string args;  // a JSON object's members, or empty
  };
  size_t open(std::string name, std::string args);

  int rank_, world_size_;
  std::string backend_;
  int64_t pid_ = 0, tid_ = 0, base_ns_ = 0;
  uint64_t collectives_ = 0;
  std::vector<Event> events_;
};

// CLOCK_MONOTONIC in ns.
int64_t monotonic_ns();

}  // namespace kda::dist
