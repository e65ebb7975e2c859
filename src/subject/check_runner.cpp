// Runs a check probe with its guards and records what happened; decides nothing.
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "loupe/check.hpp"
#include "subject/guards.hpp"
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
  std::vector<NamedTensor> handed;   // poisoned buffers given to the path
  std::vector<const void*> bound;    // what bind_output pointed at, per output
  std::vector<NamedTensor> outputs;  // the result: the handed buffer or a copy of the bound one
};

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

    if (options_.candidate_only) return run_candidate_only(std::move(check));

    Json runs = Json::array();
    for (const char* pass : {"candidate_first", "reference_first"}) {
      const bool candidate_first = std::string(pass) == "candidate_first";
      std::vector<Range> pass_ranges;
      const char* order[2] = {candidate_first ? "candidate" : "reference",
                              candidate_first ? "reference" : "candidate"};
      std::vector<PathCall> calls;
      for (const char* path : order) {
        calls.push_back(call_path(pass, path));
        runs.push_back(record_call(pass, path, calls.back()));
      }
      check_aliasing(pass, order, calls);
    }
    if (probe_.check_oracle) {
      PathCall call = call_path("oracle", "oracle");
      runs.push_back(record_call("oracle", "oracle", call));
    }
    check["runs"] = std::move(runs);

    // The reference on inputs from a second seed: loupe flags a reference whose output does not
    // depend on its inputs.
    const uint64_t alt_seed = derive_seed(options_.seed, 1);
    {
      CheckSetup alt_setup(point_, alt_seed);
      generate(alt_setup, alt_seed);
      std::vector<NamedTensor> alt_outputs = handed_buffers(false);
      CheckIo io(point_, alt_setup.inputs(), alt_outputs);
      invoke(probe_.check_reference, io, "alt_seed", "reference");
      PathCall call{alt_outputs, {}, {}};
      for (size_t index = 0; index < outputs_.size(); ++index)
        call.bound.push_back(io.bound(index));
      collect(call);
      Json alt = Json::object();
      alt["seed"] = alt_seed;
      Json files = Json::object();
      for (const auto& output : call.outputs) {
        files[output.name] =
            files_.write_tensor("alt_seed/reference." + output.name, output.tensor);
      }
      alt["outputs"] = std::move(files);
      check["alt_seed"] = std::move(alt);
    }

    if (options_.repeat > 0) {
      Json repeats = Json::array();
      for (int index = 1; index <= options_.repeat; ++index) {
        const std::string pass = "repeat/" + std::to_string(index);
        PathCall call = call_path(pass, "candidate");
        Json files = Json::object();
        for (const auto& output : call.outputs) {
          files[output.name] =
              files_.write_tensor(pass + "/candidate." + output.name, output.tensor);
        }
        repeats.push_back(std::move(files));
      }
      Json repeat = Json::object();
      repeat["count"] = options_.repeat;
      repeat["outputs"] = std::move(repeats);
      check["repeat"] = std::move(repeat);
    }

    Json guards = Json::object();
    guards["input_mutation"] = std::move(mutations_);
    guards["output_unwritten"] = std::move(unwritten_);
    guards["output_alias"] = std::move(aliases_);
    check["guards"] = std::move(guards);
    return check;
  }

 private:
  // A rank other than 0: the candidate calls rank 0 makes (one per order, then the repeats), in
  // the same sequence, outputs discarded; what it records lets loupe confirm the rank computed on
  // rank 0's inputs.
  Json run_candidate_only(Json check) {
    int calls = 0;
    for (const char* pass : {"candidate_first", "reference_first"}) {
      call_path(pass, "candidate");
      ++calls;
    }
    for (int index = 1; index <= options_.repeat; ++index) {
      call_path("repeat/" + std::to_string(index), "candidate");
      ++calls;
    }
    check["candidate_calls"] = calls;
    Json guards = Json::object();
    guards["input_mutation"] = std::move(mutations_);
    guards["output_unwritten"] = std::move(unwritten_);
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
      fill_poison(tensor);
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
      const int64_t poisoned = count_poison(call.outputs[index].tensor);
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
  void check_aliasing(const std::string& pass, const char* const order[2],
                      const std::vector<PathCall>& calls) {
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
        ranges.push_back({order[call_index], call.handed[index].name, begin,
                          call.handed[index].tensor.nbytes()});
      }
    }
    for (size_t call_index = 0; call_index < calls.size(); ++call_index) {
      const PathCall& call = calls[call_index];
      const std::string path = order[call_index];
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
