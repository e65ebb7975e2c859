// gate/baseline_cache.hpp — the baseline build's check results, kept under loupe's home and
// reused by the next run against the same build.
//
// A check point of the baseline build is a function of the build and of the point's request:
// the same program bytes, the same libraries, the same loupe (it analyses the outputs), the same
// command line, environment, parameters, seed, tolerances and rules give the same metrics. So
// `loupe run --baseline BUILD` stores each baseline check point it runs under
//   <home>/baseline-cache/<key>.json
// where key = SHA-256 over the build's identity (identify_build) and the request's description
// (describe_request), and a later run whose key matches takes the stored result instead of
// running the point: the second run against an unpatched build (an agent iterating on a change,
// a kit of faults against one build) spends nothing on the baseline's checks. Benches and
// scenarios are never cached: a timing is only comparable with one taken beside it.
// What is not in the key, on purpose: the run's hidden-run secret (a baseline build runs no hidden
// run: gates read its shown points' metrics), the run id and home, the memory limit.
// An entry that cannot be read, parsed or does not match its key is a miss with a warning; the
// point runs and its result replaces the entry.
// Thread-safety: a BaselineCache is used from one thread; entries are written through a
// per-process temporary file and a rename, so concurrent runs never read half an entry.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "gate/gate_eval.hpp"
#include "gate/objective.hpp"

namespace loupe::probe {
struct RunRequest;
}

namespace loupe::gate {

// What a build is, as far as its results go: the program the subject command starts, every
// shared library the dynamic loader resolves for it (`ldd`), and the loupe executable that
// analyses the outputs, each with the SHA-256 of its bytes; `hash` is the SHA-256 over those
// hashes in that order (not the paths: the program's path is in each request's command line).
struct BuildIdentity {
  std::filesystem::path program;
  std::vector<std::pair<std::filesystem::path, std::string>> files;  // path, SHA-256
  std::string hash;
};

// The identity of `subject`'s program (subject.command[0]: a path, resolved against the working
// directory, or a name looked up in PATH) and of `analyser` (loupe's own executable; empty: none).
// Throws Error(kInput) naming the program when it cannot be found or read, when it is not an ELF
// executable or the command names a file after it (a script, run by it or by an interpreter,
// imports files no hash would cover), or when `ldd` cannot name its libraries.
BuildIdentity identify_build(const SubjectSpec& subject, const std::filesystem::path& analyser);

// The fields of a point's request that decide its result (docs/objective.md, "The baseline
// cache"): probe, sets, seed, the cascade's repeat, the check repeats, precision, budget, round,
// the bench's variants, hidden-run switches, subject command line, launcher, the values of the
// environment variables the subject gets from loupe (the allowlist and pass_env), tolerances, rules
// and threshold.
Json describe_request(const probe::RunRequest& request, int64_t repeat);

// A cached point: its result and the run that stored it.
struct CachedPoint {
  PointResult point;
  std::string run;
};

class BaselineCache {
 public:
  // Entries under `dir` (created on the first store); `build_hash` is BuildIdentity::hash;
  // `run_id` is what stores record as their run.
  BaselineCache(std::filesystem::path dir, std::string build_hash, std::string run_id);

  // 64 hex digits: SHA-256 of the build hash and the description.
  std::string key(const Json& description) const;
  // The stored point of `key`; nullopt when there is none, or (with a warning) when the entry
  // cannot be read, is not valid JSON, lacks a field, or names another key or format.
  std::optional<CachedPoint> find(const std::string& key);
  // Stores `point` under `key` (a check point; others are not stored). A failure to write is a
  // warning, never an error: the run goes on without the entry.
  void store(const std::string& key, const PointResult& point);

  const std::vector<std::string>& warnings() const { return warnings_; }
  size_t stored() const { return stored_; }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::string build_hash_;
  std::string run_id_;
  std::vector<std::string> warnings_;
  size_t stored_ = 0;
};

// A check point as a cache entry's "point", and back (Error(kInput) naming the field).
Json cached_point_to_json(const PointResult& point);
PointResult cached_point_from_json(const Json& json);

}  // namespace loupe::gate
