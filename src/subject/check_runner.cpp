// Runs a check probe with its guards and records what happened; decides nothing.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cfenv>
#include <cstring>
#include <ctime>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include <algorithm>
#include <optional>
#include <set>

#include "loupe/check.hpp"
#include "subject/guards.hpp"
#include "subject/isolation.hpp"
#include "subject/runtime.hpp"

namespace loupe::subject {
namespace {

std::string hex(uint64_t value) {
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(value));
  return buffer;
}

struct Range {
  std::string path;  // "input", "reference", "candidate", "oracle"
  std::string name;  // input or output name
  const void* begin;
  size_t size;
};

// One call of one path: the buffers it was handed, what it bound, and its outputs afterwards.
struct PathCall {
  std::string path;
  std::vector<NamedTensor> handed;   // poisoned buffers given to the path
  std::vector<const void*> bound;    // what bind_output pointed at, per output
  std::vector<NamedTensor> outputs;  // the result: the handed buffer or a copy of the bound one
};

// One path call a child makes, in order.
struct JobCall {
  std::string pass;
  std::string path;
};

// The secret repeats a child made. Their outputs pass through one slot of the shared region, in
// turn: the runtime compares each with the first candidate call's before it starts the next, and
// keeps only the first that differs (the check fails on it; no call is made after it).
struct SecretRepeats {
  int made = 0;
  int first_differing = 0;             // 1-based among the secret repeats; 0: all bit-identical
  std::vector<NamedTensor> differing;  // that repeat's outputs
};

// What a child hands back: its calls' outputs, and what the guards saw next to them.
struct JobResult {
  std::vector<PathCall> calls;
  SecretRepeats secret;
  Json guards = Json::object();
};

// The head of a job's shared region: the JSON the child writes (its guards, or its error), and
// the call it is in, for the message when it crashes.
struct JobHeader {
  uint64_t json_size;
  char current[120];
};
constexpr size_t kJobJsonBytes = size_t{1} << 20;

// The secret repeats: after the asked ones, the candidate runs more times in the same process, a
// count the runtime decides after the child started and hands it one call at a time (round 3's
// right_first_three knew there would be exactly 3 calls). The count grows with how cheap a call
// is (round 4's right_first_nine outlasted a count of 1 to 6): as many calls as fit a budget
// drawn in [kSecretBudgetSeconds, 2 kSecretBudgetSeconds) at the cheapest call seen so far, never
// fewer than a draw of 1 to kSecretRepeatsFloor and never more than kSecretRepeatsMax
// (run_secret_repeats). A candidate that spends time and CPU on every call shrinks the count,
// but not below that draw.
constexpr int kSecretRepeatsFloor = 6;
constexpr int kSecretRepeatsMax = 256;
constexpr double kSecretBudgetSeconds = 0.025;
// Past the floor, the secret repeats also stop once their calls have taken this many budgets of
// wall time: a call that waits (sleeps, a device) costs little CPU and would otherwise be made
// up to kSecretRepeatsMax times.
constexpr double kSecretWallBudgets = 4;

// What a bound output is recorded as once its pointer, which meant something only in the child,
// has been reduced to "bound or not".
const char kBoundMarker = 0;

DType output_dtype(const CheckOutput& output, bool oracle) {
  return oracle && dtype_is_floating(output.dtype) ? DType::kF64 : output.dtype;
}

class CheckRun {
 public:
  CheckRun(const detail::ProbeDefinition& probe, const Point& point, const RunOptions& options,
           ObservationFiles& files)
      : probe_(probe), point_(point), options_(options), files_(files) {}

  Json run() {
    CheckSetup setup(point_, options_.seed);
    generate(setup, options_.seed);
    inputs_ = setup.inputs();
    pristine_.reserve(inputs_.size());
    for (const auto& input : inputs_) {
      Tensor copy(input.tensor.dtype(), input.tensor.shape());
      std::memcpy(copy.mutable_bytes(), input.tensor.bytes(), input.tensor.nbytes());
      pristine_.push_back(std::move(copy));
      input_checksums_.push_back(checksum(input.tensor));
    }
    outputs_.assign(setup.outputs().begin(), setup.outputs().end());

    Json check = Json::object();
    check["inputs"] = inputs_json();
    check["outputs"] = outputs_json();
    check["has_oracle"] = static_cast<bool>(probe_.check_oracle);

    // Every path runs in a child process (isolation.hpp): the candidate never shares a process
    // with the files, and whatever it leaves behind ends with its child. The files are written
    // only after the last child is gone, so no path can read another's output from disk.
    const int repeats = std::max(options_.repeat, 0);
    if (options_.candidate_only) return run_candidate_only(std::move(check), repeats);
    std::vector<JobCall> first_calls = {{"candidate_first", "candidate"},
                                        {"candidate_first", "reference"}};
    for (int index = 1; index <= repeats; ++index) {
      first_calls.push_back({"repeat/" + std::to_string(index), "candidate"});
    }
    JobResult first, second;
    if (options_.multi_rank) {
      // Across ranks the candidate's collective library starts once per rank: every candidate
      // call in one child (candidate, reference, candidate, repeats), in the order every other
      // rank makes them. The reference the candidate is judged against runs before, in a child
      // of its own that no candidate code ran in (rank 0's reference is its own).
      JobResult untouched = run_job({{"reference_first", "reference"}}, inputs_);
      std::vector<JobCall> calls = {
          first_calls[0], first_calls[1], {"reference_first", "candidate"}};
      calls.insert(calls.end(), first_calls.begin() + 2, first_calls.end());
      JobResult all = run_job(calls, inputs_);
      first.guards = all.guards;
      first.calls = {all.calls[0], all.calls[1]};
      first.calls.insert(first.calls.end(), all.calls.begin() + 3, all.calls.end());
      second.guards = untouched.guards;
      second.calls = {untouched.calls[0], all.calls[2]};
    } else {
      // Secret repeats only where repeats were asked for (`--repeat 0` turns them all off); a
      // multi-rank launch keeps the asked count, which every rank must make alike.
      first = run_job(first_calls, inputs_, repeats > 0);
      second =
          run_job({{"reference_first", "reference"}, {"reference_first", "candidate"}}, inputs_);
    }
    std::optional<JobResult> oracle_result;
    if (probe_.check_oracle) oracle_result = run_job({{"oracle", "oracle"}}, inputs_);
    // Without an oracle, the reference once rounding upward and once downward: how far its
    // outputs move is the size of its own rounding error, which loupe compares the candidate's
    // error with (guard.precision; round 3's even_error_no_oracle).
    // A reference that fails under a directed rounding mode leaves the guard without a measure,
    // not the check without a verdict: the reason is recorded instead.
    std::optional<JobResult> rounding_result;
    std::string rounding_skipped;
    if (!probe_.check_oracle && !options_.candidate_only) {
      try {
        rounding_result =
            run_job({{"rounding_up", "reference"}, {"rounding_down", "reference"}}, inputs_);
      } catch (const Error& error) {
        rounding_skipped = error.message();
      }
    }
    // The reference on inputs from a second seed: loupe flags a reference whose output does not
    // depend on its inputs.
    const uint64_t alt_seed = derive_seed(options_.seed, 1);
    CheckSetup alt_setup(point_, alt_seed);
    generate(alt_setup, alt_seed);
    JobResult alt_result = run_job({{"alt_seed", "reference"}}, alt_setup.inputs());

    Json runs = Json::array();
    for (size_t index = 0; index < 2; ++index) {
      runs.push_back(record_call("candidate_first", first.calls[index].path, first.calls[index]));
    }
    for (const auto& call : second.calls)
      runs.push_back(record_call("reference_first", call.path, call));
    if (oracle_result) runs.push_back(record_call("oracle", "oracle", oracle_result->calls[0]));
    check["runs"] = std::move(runs);
    {
      Json alt = Json::object();
      alt["seed"] = alt_seed;
      Json files = Json::object();
      for (const auto& output : alt_result.calls[0].outputs) {
        files[output.name] =
            files_.write_tensor("alt_seed/reference." + output.name, output.tensor);
      }
      alt["outputs"] = std::move(files);
      check["alt_seed"] = std::move(alt);
    }
    if (rounding_result) {
      Json rounding = Json::object();
      for (size_t index = 0; index < 2; ++index) {
        const std::string pass = index == 0 ? "rounding_up" : "rounding_down";
        Json files = Json::object();
        for (const auto& output : rounding_result->calls[index].outputs) {
          files[output.name] =
              files_.write_tensor(pass + "/reference." + output.name, output.tensor);
        }
        rounding[index == 0 ? "up" : "down"] = std::move(files);
      }
      check["rounding"] = std::move(rounding);
    } else if (!rounding_skipped.empty()) {
      check["rounding_skipped"] = rounding_skipped;
    }
    // The asked repeats and the secret ones: every candidate call after the first two. A secret
    // repeat bit-identical to the first call names the first call's file, as a written one would.
    const int asked_made = static_cast<int>(first.calls.size()) - 2;
    const int made_repeats = asked_made + first.secret.made;
    if (made_repeats > 0) {
      Json repeat_files = Json::array();
      for (int index = 1; index <= asked_made; ++index) {
        const std::string pass = "repeat/" + std::to_string(index);
        Json files = Json::object();
        for (const auto& output : first.calls[1 + index].outputs) {
          files[output.name] =
              files_.write_tensor(pass + "/candidate." + output.name, output.tensor);
        }
        repeat_files.push_back(std::move(files));
      }
      const Json& first_files = check["runs"][0]["outputs"];
      for (int index = 1; index <= first.secret.made; ++index) {
        if (index != first.secret.first_differing) {
          repeat_files.push_back(first_files);
          continue;
        }
        const std::string pass = "repeat/" + std::to_string(asked_made + index);
        Json files = Json::object();
        for (const auto& output : first.secret.differing) {
          files[output.name] =
              files_.write_tensor(pass + "/candidate." + output.name, output.tensor);
        }
        repeat_files.push_back(std::move(files));
      }
      Json repeat = Json::object();
      repeat["count"] = made_repeats;
      repeat["asked"] = repeats;
      repeat["outputs"] = std::move(repeat_files);
      check["repeat"] = std::move(repeat);
    }
    for (const JobResult* job : {&first, &second, &alt_result}) absorb(*job);
    if (oracle_result) absorb(*oracle_result);
    if (rounding_result) absorb(*rounding_result);

    Json guards = Json::object();
    guards["input_mutation"] = std::move(mutations_);
    guards["output_unwritten"] = std::move(unwritten_);
    guards["output_alias"] = std::move(aliases_);
    guards["environment"] = std::move(environment_);
    guards["stray_processes"] = std::move(strays_);
    guards["output_overwritten"] = std::move(overwritten_);
    check["guards"] = std::move(guards);
    check["poison"] = "NaN, payload and sign drawn per element from a secret of the run";
    return check;
  }

 private:
  // A rank other than 0: the candidate calls rank 0 makes (one per order, then the repeats), in
  // one child, outputs discarded; what it records lets loupe confirm the rank computed on rank
  // 0's inputs.
  Json run_candidate_only(Json check, int repeats) {
    std::vector<JobCall> calls = {{"candidate_first", "candidate"},
                                  {"reference_first", "candidate"}};
    for (int index = 1; index <= repeats; ++index) {
      calls.push_back({"repeat/" + std::to_string(index), "candidate"});
    }
    const JobResult result = run_job(calls, inputs_);
    absorb(result);
    check["candidate_calls"] = calls.size();
    Json guards = Json::object();
    guards["input_mutation"] = std::move(mutations_);
    guards["output_unwritten"] = std::move(unwritten_);
    guards["environment"] = std::move(environment_);
    guards["stray_processes"] = std::move(strays_);
    guards["output_overwritten"] = std::move(overwritten_);
    check["guards"] = std::move(guards);
    return check;
  }

  void generate(CheckSetup& setup, uint64_t seed) {
    try {
      probe_.check_inputs(setup);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& error) {
      throw Error(ErrorCode::kSubject, "check '" + probe_.name +
                                           "': the input generator threw (seed " +
                                           std::to_string(seed) + "): " + error.what());
    }
    for (const auto& output : setup.outputs()) {
      for (const auto& tolerance : output.tolerances) {
        if (tolerance.relative_to_oracle && !probe_.check_oracle) {
          throw Error(ErrorCode::kInternal,
                      "check '" + probe_.name + "': output '" + output.name +
                          "' has a tolerance relative to the oracle, but the check has no oracle",
                      "add .oracle(...) or use an absolute tolerance");
        }
      }
    }
    if (setup.outputs().empty()) {
      throw Error(ErrorCode::kInternal, "check '" + probe_.name + "' declares no outputs",
                  "declare them in the input generator with setup.output<T>(name, shape, axes)");
    }
    if (!outputs_.empty()) {
      for (size_t index = 0; index < outputs_.size(); ++index) {
        if (index >= setup.outputs().size() ||
            setup.outputs()[index].shape != outputs_[index].shape) {
          throw Error(ErrorCode::kInternal, "check '" + probe_.name + "': seed " +
                                                std::to_string(seed) +
                                                " declares different outputs than the first seed");
        }
      }
    }
  }

  std::vector<NamedTensor> handed_buffers(bool oracle) const {
    std::vector<NamedTensor> buffers;
    for (const auto& output : outputs_) {
      Tensor tensor(output_dtype(output, oracle), output.shape);
      tensor.axes = output.axes;
      fill_poison(tensor, options_.poison_key);
      buffers.push_back({output.name, std::move(tensor)});
    }
    return buffers;
  }

  void invoke(const std::function<void(CheckIo&)>& path_function, CheckIo& io,
              const std::string& pass, const std::string& path) {
    try {
      path_function(io);
    } catch (const Error& error) {
      throw Error(error.code(),
                  "check '" + probe_.name + "': the " + path + " path (" + pass +
                      ") failed: " + error.message(),
                  error.hint());
    } catch (const std::exception& error) {
      throw Error(ErrorCode::kSubject, "check '" + probe_.name + "': the " + path + " path (" +
                                           pass + ") threw: " + error.what());
    }
  }

  // Copies bound buffers right away: the path only promised them valid until it returned.
  void collect(PathCall& call) {
    call.outputs.clear();
    for (size_t index = 0; index < call.handed.size(); ++index) {
      const NamedTensor& handed = call.handed[index];
      if (call.bound[index] == nullptr) {
        call.outputs.push_back(handed);
        continue;
      }
      Tensor copy(handed.tensor.dtype(), handed.tensor.shape());
      copy.axes = handed.tensor.axes;
      std::memcpy(copy.mutable_bytes(), call.bound[index], copy.nbytes());
      call.outputs.push_back({handed.name, std::move(copy)});
    }
  }

  PathCall call_path(const std::string& pass, const std::string& path) {
    const bool oracle = path == "oracle";
    PathCall call;
    call.path = path;
    call.handed = handed_buffers(oracle);
    CheckIo io(point_, inputs_, call.handed);
    const auto& function = path == "candidate"   ? probe_.check_candidate
                           : path == "reference" ? probe_.check_reference
                                                 : probe_.check_oracle;
    invoke(function, io, pass, path);
    for (size_t index = 0; index < outputs_.size(); ++index) call.bound.push_back(io.bound(index));
    collect(call);

    // Inputs must leave the path as they entered it; a mutated input is recorded and restored
    // so the next path sees what the generator made.
    for (size_t index = 0; index < inputs_.size(); ++index) {
      const uint64_t after = checksum(inputs_[index].tensor);
      if (after == input_checksums_[index]) continue;
      Json entry = Json::object();
      entry["pass"] = pass;
      entry["path"] = path;
      entry["input"] = inputs_[index].name;
      entry["checksum_before"] = hex(input_checksums_[index]);
      entry["checksum_after"] = hex(after);
      mutations_.push_back(std::move(entry));
      std::memcpy(inputs_[index].tensor.mutable_bytes(), pristine_[index].bytes(),
                  pristine_[index].nbytes());
    }
    // Elements still holding the poison were never written.
    for (size_t index = 0; index < call.outputs.size(); ++index) {
      const int64_t poisoned = count_poison(call.outputs[index].tensor, options_.poison_key);
      if (poisoned == 0) continue;
      Json entry = Json::object();
      entry["pass"] = pass;
      entry["path"] = path;
      entry["output"] = call.outputs[index].name;
      entry["poisoned"] = poisoned;
      entry["numel"] = call.outputs[index].tensor.numel();
      unwritten_.push_back(std::move(entry));
    }
    return call;
  }

  Json record_call(const std::string& pass, const std::string& path, const PathCall& call) {
    Json run = Json::object();
    run["pass"] = pass;
    run["path"] = path;
    Json files = Json::object();
    Json bound = Json::object();
    for (size_t index = 0; index < call.outputs.size(); ++index) {
      const auto& output = call.outputs[index];
      const std::string stem =
          pass == "oracle" ? "oracle/" + output.name : pass + "/" + path + "." + output.name;
      files[output.name] = files_.write_tensor(stem, output.tensor);
      bound[output.name] = call.bound[index] != nullptr;
    }
    run["outputs"] = std::move(files);
    run["bound"] = std::move(bound);
    return run;
  }

  // A bound output may not overlap an input or another path's output of the same pass.
  void check_aliasing(const std::string& pass, const std::vector<PathCall>& calls) {
    std::vector<Range> ranges;
    for (const auto& input : inputs_) {
      ranges.push_back({"input", input.name, input.tensor.bytes(), input.tensor.nbytes()});
    }
    for (size_t call_index = 0; call_index < calls.size(); ++call_index) {
      const PathCall& call = calls[call_index];
      for (size_t index = 0; index < call.handed.size(); ++index) {
        const void* begin = call.bound[index] != nullptr
                                ? call.bound[index]
                                : static_cast<const void*>(call.handed[index].tensor.bytes());
        ranges.push_back(
            {call.path, call.handed[index].name, begin, call.handed[index].tensor.nbytes()});
      }
    }
    for (size_t call_index = 0; call_index < calls.size(); ++call_index) {
      const PathCall& call = calls[call_index];
      const std::string path = call.path;
      // The guard protects against the candidate; the reference's own buffers are trusted.
      if (path != "candidate") continue;
      for (size_t index = 0; index < call.handed.size(); ++index) {
        if (call.bound[index] == nullptr) continue;
        const size_t size = call.handed[index].tensor.nbytes();
        for (const auto& range : ranges) {
          if (range.path == path) continue;
          if (!ranges_overlap(call.bound[index], size, range.begin, range.size)) continue;
          Json entry = Json::object();
          entry["pass"] = pass;
          entry["path"] = path;
          entry["output"] = call.handed[index].name;
          entry["aliases"] =
              range.path == "input" ? "input " + range.name : range.path + " output " + range.name;
          aliases_.push_back(std::move(entry));
        }
      }
    }
  }

  // Runs `listed` in a child forked for them, on `inputs`, and takes back their outputs and the
  // guards' records. The child's error (an exception from a path) is rethrown here; a crash is
  // an Error(kSubject) naming the call it happened in.
  //
  // With `secret` the child, after `listed`, makes more candidate calls ("repeat/K", K after the
  // listed repeats) for as long as the runtime says so: one byte down a socket after each call's
  // checksums have come back, so the child never holds the count, which is decided here as the
  // calls come back (run_secret_repeats). Their outputs share one slot of the region.
  JobResult run_job(const std::vector<JobCall>& listed, const std::vector<NamedTensor>& inputs,
                    bool secret = false) {
    std::vector<JobCall> calls = listed;
    const int listed_repeats =
        static_cast<int>(std::count_if(listed.begin(), listed.end(), [](const JobCall& call) {
          return call.pass.rfind("repeat/", 0) == 0;
        }));
    // The secret repeats' slot, after the listed calls' (the child names each call's own pass).
    if (secret) calls.push_back({"repeat/" + std::to_string(listed_repeats + 1), "candidate"});
    std::vector<size_t> offsets;
    size_t total = sizeof(JobHeader) + kJobJsonBytes;
    for (const auto& call : calls) {
      for (const auto& output : outputs_) {
        offsets.push_back(total);
        const size_t bytes = static_cast<size_t>(
            Tensor(output_dtype(output, call.path == "oracle"), output.shape).nbytes());
        total += (bytes + 63) / 64 * 64;
      }
    }
    SharedRegion region(total);
    // Each path's output checksums go down this pipe before the next path runs: what is in a pipe
    // cannot be changed by code that runs later in the child, while the region can (a candidate
    // that ran after the reference rewrote the reference's outputs there: round 3's
    // rewrites_the_reference_slot).
    int seal[2] = {-1, -1};
    if (::pipe2(seal, O_CLOEXEC) != 0) {
      throw Error(ErrorCode::kSubject,
                  std::string("cannot create a pipe for a check's child: ") + std::strerror(errno));
    }
    int gate[2] = {-1, -1};
    // A socket rather than a pipe: send(MSG_NOSIGNAL) to a child that died is an error, not a
    // SIGPIPE in the runtime.
    if (secret && ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, gate) != 0) {
      ::close(seal[0]);
      ::close(seal[1]);
      throw Error(ErrorCode::kSubject,
                  std::string("cannot create a pipe for a check's child: ") + std::strerror(errno));
    }
    const size_t listed_count = listed.size();
    const pid_t pid = fork_child([&] {
      ::close(seal[0]);
      if (gate[1] >= 0) ::close(gate[1]);
      // Non-blocking: a path that fills the pipe makes the child's own records fail to go in,
      // which the runtime sees as missing, instead of hanging the child.
      ::fcntl(seal[1], F_SETFL, O_NONBLOCK);
      return execute_job(calls, listed_count, listed_repeats, inputs, offsets, region, seal[1],
                         gate[0]);
    });
    ::close(seal[1]);
    std::string sealed;
    SecretRepeats secret_repeats;
    Json overwritten = Json::array();
    if (secret) {
      ::close(gate[0]);
      run_secret_repeats(pid, seal[0], gate[1], listed, listed_repeats, offsets, region, sealed,
                         secret_repeats, overwritten);
      ::close(gate[1]);
      calls.pop_back();
    }
    const ChildEnd end = reap_child(pid);
    {
      ::fcntl(seal[0], F_SETFL, O_NONBLOCK);
      char buffer[4096];
      for (;;) {
        const ssize_t got = ::read(seal[0], buffer, sizeof buffer);
        if (got <= 0) break;
        sealed.append(buffer, static_cast<size_t>(got));
      }
      ::close(seal[0]);
    }
    JobHeader header{};
    std::memcpy(&header, region.data(), sizeof header);
    header.current[sizeof header.current - 1] = '\0';
    Json written = Json::object();
    if (header.json_size > 0 && header.json_size <= kJobJsonBytes) {
      try {
        written = Json::parse(std::string(
            reinterpret_cast<const char*>(region.data() + sizeof(JobHeader)), header.json_size));
      } catch (const nlohmann::json::exception&) {
        written = Json::object();
      }
    }
    if (written.contains("error") && written["error"].is_object()) {
      const Json& error = written["error"];
      throw Error(
          static_cast<ErrorCode>(error.value("code", static_cast<int>(ErrorCode::kSubject))),
          error.value("message", std::string()), error.value("hint", std::string()));
    }
    if (!end.exited_zero || !written.contains("guards")) {
      throw Error(ErrorCode::kSubject,
                  "check '" + probe_.name + "': the child process running " +
                      std::string(header.current) + " " + end.how,
                  "run the probe directly (SUBJECT run ...) to see the failure");
    }
    JobResult result;
    result.guards = written["guards"];
    // Every slot's bytes must still have the checksum its path's record sent (the secret
    // repeats' slot: the last one's). A slot already reported while the repeats ran is not
    // reported again.
    auto reported = [&overwritten](const std::string& pass, const std::string& path,
                                   const std::string& output) {
      for (const auto& entry : overwritten) {
        if (entry.value("pass", "") == pass && entry.value("path", "") == path &&
            entry.value("output", "") == output) {
          return true;
        }
      }
      return false;
    };
    {
      size_t slot = 0;
      for (size_t call_index = 0; call_index < calls.size(); ++call_index) {
        for (size_t index = 0; index < outputs_.size(); ++index, ++slot) {
          if (reported(calls[call_index].pass, calls[call_index].path, outputs_[index].name)) {
            continue;
          }
          const size_t bytes = static_cast<size_t>(
              Tensor(output_dtype(outputs_[index], calls[call_index].path == "oracle"),
                     outputs_[index].shape)
                  .nbytes());
          uint64_t recorded = 0;
          const bool have = sealed.size() >= (slot + 1) * sizeof recorded;
          if (have) std::memcpy(&recorded, sealed.data() + slot * sizeof recorded, sizeof recorded);
          if (have && recorded == checksum_bytes(region.data() + offsets[slot], bytes)) continue;
          // Whoever ran after it in this child: the other paths of the job.
          std::string later;
          for (size_t other = call_index + 1; other < calls.size(); ++other) {
            if (calls[other].path == calls[call_index].path) continue;
            if (later.find(calls[other].path) == std::string::npos) {
              later += (later.empty() ? "" : ", ") + calls[other].path;
            }
          }
          if (later.empty() && calls[call_index].path != "candidate") later = "candidate";
          Json entry = Json::object();
          entry["pass"] = calls[call_index].pass;
          entry["path"] = calls[call_index].path;
          entry["output"] = outputs_[index].name;
          entry["by"] = later.empty() ? calls[call_index].path : later;
          entry["record"] = have ? "changed" : "missing";
          overwritten.push_back(std::move(entry));
        }
      }
    }
    if (secret_repeats.made > 0) {
      const size_t first_slot = calls.size() * outputs_.size();
      const size_t last_record =
          (calls.size() + static_cast<size_t>(secret_repeats.made) - 1) * outputs_.size();
      const std::string pass = "repeat/" + std::to_string(listed_repeats + secret_repeats.made);
      for (size_t index = 0; index < outputs_.size(); ++index) {
        if (reported(pass, "candidate", outputs_[index].name)) continue;
        const size_t bytes =
            static_cast<size_t>(Tensor(outputs_[index].dtype, outputs_[index].shape).nbytes());
        uint64_t recorded = 0;
        std::memcpy(&recorded, sealed.data() + (last_record + index) * sizeof recorded,
                    sizeof recorded);
        if (recorded == checksum_bytes(region.data() + offsets[first_slot + index], bytes)) {
          continue;
        }
        Json entry = Json::object();
        entry["pass"] = pass;
        entry["path"] = "candidate";
        entry["output"] = outputs_[index].name;
        entry["by"] = "candidate";
        entry["record"] = "changed";
        overwritten.push_back(std::move(entry));
      }
    }
    if (sealed.size() >
        (slot_count(calls) + static_cast<size_t>(secret_repeats.made) * outputs_.size()) *
            sizeof(uint64_t)) {
      Json entry = Json::object();
      entry["pass"] = calls.front().pass;
      entry["path"] = "";
      entry["output"] = "";
      entry["by"] = "candidate";
      entry["record"] = "extra";
      overwritten.push_back(std::move(entry));
    }
    if (!overwritten.empty()) result.guards["output_overwritten"] = std::move(overwritten);
    if (!end.strays.empty()) {
      Json stray = Json::object();
      stray["after"] = std::string(header.current);
      stray["processes"] = end.strays;
      result.guards["stray_processes"] = Json::array({stray});
    }
    const Json& bound = written.at("bound");
    size_t slot = 0;
    for (size_t call_index = 0; call_index < calls.size(); ++call_index) {
      PathCall call;
      call.path = calls[call_index].path;
      for (size_t index = 0; index < outputs_.size(); ++index, ++slot) {
        const auto& output = outputs_[index];
        Tensor tensor(output_dtype(output, call.path == "oracle"), output.shape);
        tensor.axes = output.axes;
        std::memcpy(tensor.mutable_bytes(), region.data() + offsets[slot], tensor.nbytes());
        call.outputs.push_back({output.name, std::move(tensor)});
        call.bound.push_back(bound[call_index][index].get<bool>() ? &kBoundMarker : nullptr);
      }
      result.calls.push_back(std::move(call));
    }
    result.secret = std::move(secret_repeats);
    return result;
  }

  // The runtime's side of the secret repeats, once the child's records for every listed call have
  // come back: it keeps the first candidate call's outputs, then sends one 'c' per repeat and,
  // when that call's records are back, checks the shared slot against them and against the first
  // call, until the count is reached, a repeat differs or its slot was changed; then an 's'.
  //
  // The count: a draw of 1 to kSecretRepeatsFloor (the floor, as before the count grew with the
  // cost), raised to as many calls as fit a budget drawn in [kSecretBudgetSeconds,
  // 2 kSecretBudgetSeconds) at the cheapest call so far, at most kSecretRepeatsMax; past the
  // floor, the calls also stop once they have taken kSecretWallBudgets budgets of wall time. A
  // call costs the lesser of its wall time, from the word that starts it to its last record, and
  // the CPU time the child used meanwhile (exact while it waits for a word; a reading taken
  // while it still runs misses at most what it used since the last scheduler tick), both
  // on the runtime's own clocks (the system call: a clock the subject defines cannot reach
  // them). Both include the runtime's own work per call (poison, checksums); on a loaded machine
  // the wall time grows while the CPU time does not, and a call that sleeps costs little CPU. So
  // to keep the count low a candidate must both spend CPU and take the time on every call, and
  // the cheapest call sets the count, which only grows.
  void run_secret_repeats(pid_t pid, int seal_fd, int gate_fd, const std::vector<JobCall>& listed,
                          int listed_repeats, const std::vector<size_t>& offsets,
                          const SharedRegion& region, std::string& sealed, SecretRepeats& secret,
                          Json& overwritten) {
    const size_t outputs = outputs_.size();
    auto record = [&sealed](size_t at) {
      uint64_t value = 0;
      std::memcpy(&value, sealed.data() + at * sizeof value, sizeof value);
      return value;
    };
    auto changed = [&overwritten](const std::string& pass, const std::string& output) {
      Json entry = Json::object();
      entry["pass"] = pass;
      entry["path"] = "candidate";
      entry["output"] = output;
      entry["by"] = "candidate";
      entry["record"] = "changed";
      overwritten.push_back(std::move(entry));
    };
    auto stop = [gate_fd] {
      const char token = 's';
      (void)::send(gate_fd, &token, 1, MSG_NOSIGNAL);
    };
    if (!read_records(pid, seal_fd, sealed, listed.size() * outputs * sizeof(uint64_t))) return;
    // The first candidate call's outputs, as its records sealed them.
    std::vector<std::vector<std::byte>> first(outputs);
    for (size_t index = 0; index < outputs; ++index) {
      const size_t bytes =
          static_cast<size_t>(Tensor(outputs_[index].dtype, outputs_[index].shape).nbytes());
      const std::byte* slot = region.data() + offsets[index];
      first[index].assign(slot, slot + bytes);
      if (checksum_bytes(first[index].data(), bytes) != record(index)) {
        changed(listed[0].pass, outputs_[index].name);
        return stop();
      }
    }
    std::random_device entropy;
    const int least = 1 + static_cast<int>(entropy() % static_cast<unsigned>(kSecretRepeatsFloor));
    const double budget = kSecretBudgetSeconds * (1.0 + entropy() / 4294967296.0);
    double cheapest = 0;  // the least cost of a call so far
    double spent = 0;     // the wall time of the calls so far
    int target = least;
    const size_t rolling = listed.size() * outputs;  // the secret repeats' slot
    while (secret.made < target &&
           !(secret.made >= least && spent >= kSecretWallBudgets * budget)) {
      const double started = raw_clock_seconds(CLOCK_MONOTONIC);
      const double cpu_before = process_cpu_seconds(pid);
      const char token = 'c';
      if (::send(gate_fd, &token, 1, MSG_NOSIGNAL) != 1) return;
      const size_t records = (listed.size() + static_cast<size_t>(secret.made) + 1) * outputs;
      if (!read_records(pid, seal_fd, sealed, records * sizeof(uint64_t))) return;
      const double wall = raw_clock_seconds(CLOCK_MONOTONIC) - started;
      const double cpu = process_cpu_seconds(pid) - cpu_before;
      spent += wall;
      ++secret.made;
      const std::string pass = "repeat/" + std::to_string(listed_repeats + secret.made);
      bool differs = false;
      for (size_t index = 0; index < outputs; ++index) {
        const std::byte* slot = region.data() + offsets[rolling + index];
        const size_t bytes = first[index].size();
        if (checksum_bytes(slot, bytes) != record(records - outputs + index)) {
          changed(pass, outputs_[index].name);
          return stop();
        }
        differs = differs || std::memcmp(slot, first[index].data(), bytes) != 0;
      }
      if (differs) {
        secret.first_differing = secret.made;
        for (size_t index = 0; index < outputs; ++index) {
          Tensor tensor(outputs_[index].dtype, outputs_[index].shape);
          tensor.axes = outputs_[index].axes;
          std::memcpy(tensor.mutable_bytes(), region.data() + offsets[rolling + index],
                      tensor.nbytes());
          secret.differing.push_back({outputs_[index].name, std::move(tensor)});
        }
        // The check fails on this repeat: a later one could add nothing.
        return stop();
      }
      // A call's cost: the lesser of its wall time (which waiting for a CPU on a loaded machine
      // lengthens) and the CPU time its process used (which sleeping does not).
      const double cost = cpu_before >= 0 && cpu >= 0 ? std::min(wall, cpu) : wall;
      if (cost > 0 && (cheapest == 0 || cost < cheapest)) cheapest = cost;
      const double fit = cheapest > 0 ? budget / cheapest : kSecretRepeatsMax;
      target = std::clamp(static_cast<int>(std::min<double>(fit, kSecretRepeatsMax)), least,
                          kSecretRepeatsMax);
    }
    stop();
  }

  // In the child: the calls, their guards, and the outputs copied into the region.
  size_t slot_count(const std::vector<JobCall>& calls) const {
    return calls.size() * outputs_.size();
  }

  // Reads `fd` into `into` until it holds `want` bytes; false when the child ended (or closed
  // the pipe) first. Polls, so a child that ends while a process it started holds the pipe open
  // does not hang the runtime.
  static bool read_records(pid_t pid, int fd, std::string& into, size_t want) {
    while (into.size() < want) {
      pollfd poll_fd{fd, POLLIN, 0};
      const int ready = ::poll(&poll_fd, 1, 50);
      if (ready < 0 && errno == EINTR) continue;
      if (ready > 0) {
        char buffer[4096];
        const ssize_t got = ::read(fd, buffer, std::min(sizeof buffer, want - into.size()));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        into.append(buffer, static_cast<size_t>(got));
        continue;
      }
      siginfo_t info{};
      if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == pid) {
        return false;
      }
    }
    return true;
  }

  // A `calls` entry past `listed` is the secret repeats' slot: each repeat is made only when a
  // 'c' comes down `gate_fd` after the previous call's records went out, and writes its outputs
  // there, over the previous repeat's, as "repeat/K" (K after the `listed_repeats`).
  int execute_job(const std::vector<JobCall>& calls, size_t listed, int listed_repeats,
                  const std::vector<NamedTensor>& inputs, const std::vector<size_t>& offsets,
                  SharedRegion& region, int seal_fd, int gate_fd) {
    JobHeader header{};
    auto publish = [&](const Json& json) {
      const std::string text = json.dump();
      header.json_size = text.size() <= kJobJsonBytes ? text.size() : 0;
      if (header.json_size > 0) {
        std::memcpy(region.data() + sizeof(JobHeader), text.data(), text.size());
      }
      std::memcpy(region.data(), &header, sizeof header);
    };
    try {
      // The check's own inputs, their pristine copy and their checksums were made in this
      // process's parent before any path ran, which runs no path itself, and came with the fork
      // (copy-on-write, so no page is copied unless a path writes it): copying and checksumming
      // them again in every child only re-derived what it inherited. Other inputs (the second
      // seed's) are copied and checksummed here, once per child.
      if (&inputs != &inputs_) {
        inputs_ = inputs;
        pristine_.clear();
        input_checksums_.clear();
        for (const auto& input : inputs_) {
          Tensor copy(input.tensor.dtype(), input.tensor.shape());
          std::memcpy(copy.mutable_bytes(), input.tensor.bytes(), input.tensor.nbytes());
          pristine_.push_back(std::move(copy));
          input_checksums_.push_back(checksum(input.tensor));
        }
      }
      const ExecEnvironment base = capture_environment();
      // One call: its environment checked and restored, its outputs copied into the region from
      // `slot` on and their checksums sent.
      auto make_call = [&](const JobCall& call, size_t slot, Json& call_bound) {
        const std::string current = "the " + call.path + " path (" + call.pass + " pass)";
        std::snprintf(header.current, sizeof header.current, "%s", current.c_str());
        std::memcpy(region.data(), &header, sizeof header);
        // The reference's rounding runs (no oracle): the rounding mode is set for the call and
        // is what the path must leave.
        ExecEnvironment handed = base;
        if (call.pass == "rounding_up" || call.pass == "rounding_down") {
          std::fesetround(call.pass == "rounding_up" ? FE_UPWARD : FE_DOWNWARD);
          handed = capture_environment();
          handed.threads = base.threads;
        }
        PathCall result = call_path(call.pass, call.path);
        // A path must leave the floating-point state, the affinity and the priority as it found
        // them; a change is recorded against it and undone for the next path.
        ExecEnvironment after = capture_environment();
        // A library may start a thread on first use and keep it (a BLAS pool): the thread
        // count is not part of what a path must leave as it found it.
        after.threads = base.threads;
        for (const auto& change : environment_changes(handed, after)) {
          Json entry = Json::object();
          entry["pass"] = call.pass;
          entry["path"] = call.path;
          entry["change"] = change;
          environment_.push_back(std::move(entry));
        }
        restore_environment(base);
        for (size_t index = 0; index < result.outputs.size(); ++index, ++slot) {
          const Tensor& tensor = result.outputs[index].tensor;
          std::memcpy(region.data() + offsets[slot], tensor.bytes(), tensor.nbytes());
          const uint64_t digest = checksum_bytes(region.data() + offsets[slot], tensor.nbytes());
          // Sent now, before the next path runs; a failed write shows up as a missing record.
          if (::write(seal_fd, &digest, sizeof digest) != static_cast<ssize_t>(sizeof digest)) {
          }
          call_bound.push_back(result.bound[index] != nullptr);
        }
        return result;
      };
      std::vector<PathCall> done;
      Json bound = Json::array();
      for (size_t call_index = 0; call_index < listed; ++call_index) {
        Json call_bound = Json::array();
        done.push_back(make_call(calls[call_index], call_index * outputs_.size(), call_bound));
        bound.push_back(std::move(call_bound));
      }
      // The secret repeats: nothing of them is kept here but the guards' records, and those once
      // (a candidate that changes the rounding mode on every call is named once, not 256 times).
      if (calls.size() > listed) {
        std::set<std::string> seen;
        auto once = [&seen](Json& records, size_t from) {
          Json kept = Json::array();
          for (size_t index = 0; index < records.size(); ++index) {
            if (index >= from) {
              Json key = records[index];
              key.erase("pass");
              if (!seen.insert(key.dump()).second) continue;
            }
            kept.push_back(std::move(records[index]));
          }
          records = std::move(kept);
        };
        for (int made = 1;; ++made) {
          char token = 0;
          ssize_t got = 0;
          do {
            got = ::read(gate_fd, &token, 1);
          } while (got < 0 && errno == EINTR);
          if (got != 1 || token != 'c') break;
          const size_t mutations = mutations_.size(), unwritten = unwritten_.size(),
                       environment = environment_.size();
          Json call_bound = Json::array();
          make_call({"repeat/" + std::to_string(listed_repeats + made), "candidate"},
                    listed * outputs_.size(), call_bound);
          once(mutations_, mutations);
          once(unwritten_, unwritten);
          once(environment_, environment);
        }
      }
      if (done.size() >= 2 &&
          (calls[0].pass == "candidate_first" || calls[0].pass == "reference_first")) {
        check_aliasing(calls[0].pass, {done[0], done[1]});
      }
      Json json = Json::object();
      Json guards = Json::object();
      guards["input_mutation"] = mutations_;
      guards["output_unwritten"] = unwritten_;
      guards["output_alias"] = aliases_;
      guards["environment"] = environment_;
      json["guards"] = std::move(guards);
      json["bound"] = std::move(bound);
      publish(json);
      return 0;
    } catch (const Error& error) {
      Json json = Json::object();
      Json detail = Json::object();
      detail["code"] = static_cast<int>(error.code());
      detail["message"] = error.message();
      detail["hint"] = error.hint();
      json["error"] = std::move(detail);
      publish(json);
      return 3;
    }
  }

  // Adds a job's guard records to the check's.
  void absorb(const JobResult& job) {
    for (const char* name : {"input_mutation", "output_unwritten", "output_alias"}) {
      Json& into = std::string(name) == "input_mutation"     ? mutations_
                   : std::string(name) == "output_unwritten" ? unwritten_
                                                             : aliases_;
      for (const auto& entry : job.guards.value(name, Json::array())) into.push_back(entry);
    }
    for (const auto& entry : job.guards.value("environment", Json::array())) {
      environment_.push_back(entry);
    }
    for (const auto& entry : job.guards.value("stray_processes", Json::array())) {
      strays_.push_back(entry);
    }
    for (const auto& entry : job.guards.value("output_overwritten", Json::array())) {
      overwritten_.push_back(entry);
    }
  }

  Json inputs_json() const {
    Json list = Json::array();
    for (size_t index = 0; index < inputs_.size(); ++index) {
      Json entry = Json::object();
      entry["name"] = inputs_[index].name;
      entry["dtype"] = std::string(dtype_name(inputs_[index].tensor.dtype()));
      entry["shape"] = inputs_[index].tensor.shape();
      entry["axes"] = inputs_[index].tensor.axes;
      entry["checksum"] = hex(input_checksums_[index]);
      list.push_back(std::move(entry));
    }
    return list;
  }

  Json outputs_json() const {
    Json list = Json::array();
    for (const auto& output : outputs_) {
      Json entry = Json::object();
      entry["name"] = output.name;
      entry["dtype"] = std::string(dtype_name(output.dtype));
      entry["shape"] = output.shape;
      entry["axes"] = output.axes;
      entry["profile_axis"] = output.profile_axis;
      if (!output.stored_in.empty()) entry["stored_in"] = output.stored_in;
      if (!output.approximates.empty()) entry["approximates"] = output.approximates;
      if (output.worst_element_bound > 0) entry["worst_element_bound"] = output.worst_element_bound;
      Json tolerances = Json::array();
      for (const auto& tolerance : output.tolerances) {
        Json item = Json::object();
        item["metric"] = tolerance.metric;
        item["bound"] = number_to_json(tolerance.bound);
        item["relative_to_oracle"] = tolerance.relative_to_oracle;
        tolerances.push_back(std::move(item));
      }
      entry["tolerances"] = std::move(tolerances);
      list.push_back(std::move(entry));
    }
    return list;
  }

  const detail::ProbeDefinition& probe_;
  const Point& point_;
  const RunOptions& options_;
  ObservationFiles& files_;
  std::vector<NamedTensor> inputs_;
  std::vector<Tensor> pristine_;
  std::vector<uint64_t> input_checksums_;
  std::vector<CheckOutput> outputs_;
  Json mutations_ = Json::array();
  Json unwritten_ = Json::array();
  Json aliases_ = Json::array();
  Json environment_ = Json::array();
  Json strays_ = Json::array();
  Json overwritten_ = Json::array();
};

}  // namespace

Json run_check(const detail::ProbeDefinition& probe, const Point& point, const RunOptions& options,
               ObservationFiles& files) {
  for (const auto* required : {&probe.check_inputs}) {
    if (!*required) {
      throw Error(ErrorCode::kInternal, "check '" + probe.name + "' has no input generator",
                  "add .inputs([](loupe::CheckSetup& setup) { ... })");
    }
  }
  if (!probe.check_reference || !probe.check_candidate) {
    throw Error(ErrorCode::kInternal,
                "check '" + probe.name + "' needs both a reference and a candidate path",
                "add .reference(...) and .candidate(...)");
  }
  return CheckRun(probe, point, options, files).run();
}

}  // namespace loupe::subject
