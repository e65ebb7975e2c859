// subject/runtime.hpp — the parts of the subject runtime that run one probe point.
//
// subject_main (subject_main.cpp) parses the command line, resolves the parameter point and the
// seed, and hands the probe to run_check, run_bench or run_scenario, which run it with the
// guards and return their section of observation.json. Files go through an ObservationFiles,
// which names them, writes them once (identical tensors share one file) and lists them.
// Internal to libloupe: nothing here is public API. Uses nlohmann-json (loupe::Json).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "loupe/probe.hpp"

namespace loupe::subject {

struct RunOptions {
  std::filesystem::path out_dir;
  // A rank other than 0 of a multi-rank launch (docs/multi-rank.md): a check runs only its
  // candidate calls, in rank 0's order, so the candidate's collectives meet; rank 0 alone runs
  // the reference, the oracle and the second seed, and writes the tensors.
  bool candidate_only = false;
  // Any rank of a multi-rank launch: every candidate call of the rank runs in one child process,
  // since a collective library (MPI) starts once per rank and cannot start again in a later child.
  bool multi_rank = false;
  uint64_t seed = 0;
  // Checks: extra candidate calls on the same inputs, in the process of its first call (a
  // candidate right only for its first calls fails). On by default: `run --repeat 0` turns
  // them off.
  int repeat = 2;
  // Draws the poison of every output buffer (guards.hpp); secret, never written anywhere.
  uint64_t poison_key = 0;
  double precision = 0.01;  // benches: target relative CI half-width of each median
  double budget_s = 2.0;    // benches: time budget for sampling at this point
  // benches: the counters pass (docs/counters.md, "Bench attachment"): when > 0, each selected
  // variant's call runs this many times on fresh inputs with no timer and no samples, for ncu
  // to profile in this process while the timed samples come from another.
  int64_t counters_pass = 0;
  std::string counters_variant;  // empty: every selected variant (`variants`), in their order
  // benches: the variants to run (`run --variants A,B`), in this order: one child process each,
  // the first the baseline every other is compared with and verified against. Empty: every
  // variant the body declares, in declaration order. A name the body does not declare is
  // Error(kUsage) once the first child has declared.
  std::vector<std::string> variants;
  // benches: a later round (>= 1) of a point that loupe measures in rounds of whole runs (`loupe
  // run --baseline BUILD`): what round 0 of the same point and binary measured once — the
  // content-cache replays and the roofline read — is not measured again, the warm-up is one call
  // per variant, at least one timed call per variant is still verified (the last timed batch when
  // none was), and the inputs are round R's own (the work indices start at R * 2^32), the same for
  // both builds. docs/security.md, "Rounds of whole runs".
  int64_t round = 0;
};

// Every file a probe writes into the observation directory, listed for observation.json.
class ObservationFiles {
 public:
  explicit ObservationFiles(std::filesystem::path dir) : dir_(std::move(dir)) {}

  const std::filesystem::path& dir() const { return dir_; }
  // Writes `tensor` as <stem>.npy (.safetensors for bfloat16 and fp8, which .npy cannot name)
  // unless a tensor with identical dtype, shape and bytes was written before, and returns the
  // file name relative to dir().
  std::string write_tensor(const std::string& stem, const Tensor& tensor);
  // Records a file the probe wrote itself, relative to dir().
  void add(std::string relative_path, std::string kind);
  // Clears the way for the runtime to write `relative_path` (write_tensor calls it; so do the
  // writers of samples.json and observation.json): a symbolic link, or anything else already
  // there, at the file or at a folder on its way is removed, and recorded in planted() — the
  // runtime writes only after its last child is gone, so whatever is already there was left by
  // a path (round 3's symlink_planted made the runtime write through a link). The file is then
  // created anew, never written through a link or a hard link to a file elsewhere.
  void prepare(const std::string& relative_path);
  // Removes every symbolic link left anywhere under dir() (recorded in planted()): loupe moves
  // the folder into its home, where a link would point anywhere.
  void remove_links();
  // "NAME -> TARGET" (a link) or "NAME (a file)" for each entry prepare() removed.
  const std::vector<std::string>& planted() const { return planted_; }
  const Json& listing() const { return listing_; }
  // SHA-256 of each file, taken as it was written (the seal: subject_main.cpp).
  const std::map<std::string, std::string>& digests() const { return digests_; }

 private:
  void digest(const std::string& relative_path);
  // What was written, without keeping the data in memory: a candidate match (same checksum) is
  // confirmed by the SHA-256 of the data, never by reading the file back (a thread started before
  // main that truncated it while the runtime read it through a mapping killed the runtime with
  // SIGBUS: round 3's static_thread_copier).
  struct Written {
    DType dtype;
    std::vector<int64_t> shape;
    std::string file;
    std::string data_sha256;
  };
  std::filesystem::path dir_;
  std::multimap<uint64_t, Written> by_checksum_;
  Json listing_ = Json::array();
  std::map<std::string, std::string> digests_;
  std::vector<std::string> planted_;
};

// Seals the probe registry (probe.hpp, register_probe) and returns the probes in registration
// order. The first call moves the definitions out of the registry the macros fill, into storage
// only this function names; register_probe throws from then on. subject_main calls it before it
// reads a probe, so no code that runs after main — a path, a bench body — can add, replace or
// reach a definition through the public API.
const std::vector<std::unique_ptr<detail::ProbeDefinition>>& seal_registry();

Json run_check(const detail::ProbeDefinition& probe, const Point& point, const RunOptions& options,
               ObservationFiles& files);
Json run_bench(const detail::ProbeDefinition& probe, const Point& point, const RunOptions& options,
               ObservationFiles& files);
Json run_scenario(const detail::ProbeDefinition& probe, const Point& point,
                  const RunOptions& options, ObservationFiles& files);

// The seed the second reference run (cannot-discriminate guard) uses, and the seeds of a bench's
// input sets: splitmix64 steps, so every seed follows from the one recorded.
uint64_t derive_seed(uint64_t seed, uint64_t stream);

// The rank a launcher gave this process (mpirun, srun, torchrun-style RANK/WORLD_SIZE), read
// the way kda/dist reads it: OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/PMI_SIZE,
// SLURM_PROCID/SLURM_STEP_NUM_TASKS, RANK/WORLD_SIZE. Without any: rank 0 of 1.
// Throws Error(kUsage) naming the variable when a value is not a rank of its world.
struct LaunchRank {
  int rank = 0;
  int world_size = 1;
  std::string source = "none";
};
LaunchRank launch_rank_from_environment();

// cpu model, cores, os, kernel, compiler, build type, hostname.
Json environment_fingerprint(const detail::BuildInfo& build);

// Validates `sets` ("name=value" texts) against the probe's parameters and returns the full point
// in declaration order. Throws Error(kUsage) naming the parameter and the valid choices.
Params resolve_point(const detail::ProbeDefinition& probe, const std::vector<std::string>& sets,
                     const Params* hidden_point);

}  // namespace loupe::subject
