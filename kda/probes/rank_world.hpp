// kda/probes/rank_world.hpp — the communicator of a multi-rank probe's candidate (cp_ranks_vs_nocp,
// tp_ranks_vs_notp): the world the launcher started (`loupe probe run --launch "mpirun -n
// {ranks} ..."`, docs/multi-rank.md), checked against the point's `ranks`.
// Thread-safety: called from the candidate path, one thread.
#pragma once

#include <loupe/probe.hpp>

#include <string>

#include "kda/dist/communicator.hpp"

namespace kda::probes {

// The process-wide communicator, finalised when the runtime ends the path's process (it ends
// with _exit: without MPI_Finalize, mpirun counts the rank as failed). Throws
// loupe::Error(kUsage) naming `probe` and the launch when the world is not `ranks` ranks.
inline dist::Communicator& launched_world(const loupe::Point& point, const std::string& probe) {
  dist::Communicator& world = dist::world("auto");
  // Once per process (a static of the path's child).
  static const bool finalised_at_exit = [] {
    loupe::at_path_process_exit([] { dist::finalize_world(); });
    return true;
  }();
  (void)finalised_at_exit;
  const int64_t ranks = point.get_int("ranks");
  if (world.size() != ranks) {
    throw loupe::Error(loupe::ErrorCode::kUsage,
                       probe + " at ranks=" + std::to_string(ranks) + " runs in a world of " +
                           std::to_string(world.size()) + " rank(s)",
                       "launch one process per rank: loupe probe run " + probe +
                           " --launch \"mpirun -n {ranks} --oversubscribe\" --set ranks=" +
                           std::to_string(ranks) + " ... -- build/bin/kda probe");
  }
  return world;
}

}  // namespace kda::probes
