// loupe/check.hpp — check probes: a candidate path against a reference path (and an oracle).
//
//   LOUPE_CHECK(row_sums)
//       .description("row sums: blocked summation against a sequential loop")
//       .param("N", 4096, {1024, 4096})
//       .inputs([](loupe::CheckSetup& setup) {
//         const int64_t n = setup.point().get_int("N");
//         std::span<float> x = setup.input<float>("x", {n, 64}, {"N", "D"});
//         fill_normal(x, setup.seed());                      // inputs come from the seed only
//         setup.output<float>("y", {n}, {"N"}).along("N").tolerance("rms_ratio", 1e-6);
//       })
//       .reference([](loupe::CheckIo& io) { sum_rows(io.input<float>("x"), io.output<float>("y"));
//       }) .candidate([](loupe::CheckIo& io) { sum_rows_blocked(io.input<float>("x"), ...); })
//       .oracle([](loupe::CheckIo& io) { sum_rows_fp64(io.input<float>("x"),
//       io.output<double>("y")); });
//
// The paths are given the inputs, never the seed. Each pass runs in a child process of the
// subject's runtime process (docs/security.md), which applies the guards, takes the outputs back
// and writes every output as .npy once no child is left; `loupe` compares them with src/check
// and decides:
//  - inputs are checksummed before and after every path (input_mutation);
//  - outputs handed to a path are filled with NaN poison drawn per run and per element
//    (output_unwritten counts what is still poison afterwards);
//  - the floating-point environment, affinity and priority are checked and restored after every
//    path (environment); processes a path leaves behind are killed and named (child_process);
//  - both orders run: candidate then reference, reference then candidate (order_dependence);
//  - a path may return its own buffer with bind_output; a candidate buffer overlapping an input
//    or another path's output is recorded (output_alias);
//  - the reference also runs on inputs from a second seed, so loupe can flag a reference output
//    that is near-constant, near-zero or the same for both seeds (cannot_discriminate);
//  - the candidate runs 2 more times on the same inputs in the process of its first call
//    (`run --repeat N` changes it; nondeterministic).
// From those files loupe also fails NaN/Inf where the reference is finite (nonfinite), an error
// against the oracle far beyond the output dtype's arithmetic (precision), one element far off
// while the tolerances pass (worst_element), flags a check whose tolerance a constant output
// would meet (cannot_discriminate), and runs one more point with a seed it draws in secret (a
// hidden point or range, else the first point), passed like any other (hidden_point).
// The oracle writes its floating-point outputs in float64, so it can be more precise than both.
// Thread-safety: a CheckSetup / CheckIo belongs to the one call it is handed to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loupe/probe.hpp"
#include "loupe/tensor.hpp"

namespace loupe {

// metric <= bound, or, relative to the oracle, metric(candidate, oracle) <= bound *
// metric(reference, oracle). Metric names are those of docs/formats.md, "Comparison metrics".
struct CheckTolerance {
  std::string metric;
  double bound = 0;
  bool relative_to_oracle = false;
};

// One output every path produces, declared by the input generator.
struct CheckOutput {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<std::string> axes;  // one name per dimension ("B", "T", "H", "V")
  std::string profile_axis;       // the axis of the error profile; empty for none
  std::vector<CheckTolerance> tolerances;
  std::string stored_in;     // the narrower format the candidate keeps this output in on purpose
  std::string approximates;  // how the candidate approximates the reference on purpose
  double worst_element_bound = 0;  // the worst-element bound; 0: loupe's default (docs/security.md)

  // The axis along which loupe takes this output's error profile (T for sequences).
  // REQUIRES: `axis` is one of `axes`.
  CheckOutput& along(std::string axis);
  // Pass iff metric(candidate, reference) <= bound.
  CheckOutput& tolerance(std::string metric, double bound);
  // Pass iff metric(candidate, oracle) <= factor * metric(reference, oracle).
  // REQUIRES: the check declares an oracle.
  CheckOutput& tolerance_vs_oracle(std::string metric, double factor);
  // The candidate stores this output in a narrower format on purpose ("bfloat16", "int8", ...):
  // the precision guard, which rejects silent narrowing, leaves this output to its tolerances.
  CheckOutput& stored_narrow(std::string format);
  // The candidate approximates the reference on purpose ("w8a8 weights and activations"): without
  // an oracle, loupe compares a candidate's error with the reference's own rounding error (how far
  // it moves between rounding upward and downward) and fails one far above it; an output declared
  // approximate is left to its tolerances instead (docs/security.md).
  CheckOutput& approximate(std::string how);
  // Fail iff some element's |candidate - reference| exceeds `bound` × the reference's rms, even
  // when every tolerance passes (one wrong element hides in an rms). Loupe's default is 0.5.
  CheckOutput& worst_element(double bound);
};

// Handed to the input generator: the point, the seed, and the place to declare inputs and outputs.
class CheckSetup {
 public:
  CheckSetup(const Point& point, uint64_t seed) : point_(&point), seed_(seed) {}

  const Point& point() const { return *point_; }
  // The seed the inputs must be generated from (the paths never see it).
  uint64_t seed() const { return seed_; }

  // Declares an input and returns its zero-filled storage for the generator to fill.
  template <class T>
  std::span<T> input(std::string name, std::vector<int64_t> shape,
                     std::vector<std::string> axes = {}) {
    return add_input(std::move(name), dtype_of<T>(), std::move(shape), std::move(axes))
        .template mutable_data<T>();
  }
  Tensor& add_input(std::string name, DType dtype, std::vector<int64_t> shape,
                    std::vector<std::string> axes = {});

  // Declares an output of every path. The returned reference stays valid for the whole check.
  template <class T>
  CheckOutput& output(std::string name, std::vector<int64_t> shape,
                      std::vector<std::string> axes = {}) {
    return add_output(std::move(name), dtype_of<T>(), std::move(shape), std::move(axes));
  }
  CheckOutput& add_output(std::string name, DType dtype, std::vector<int64_t> shape,
                          std::vector<std::string> axes = {});

  const std::vector<NamedTensor>& inputs() const { return inputs_; }
  const std::deque<CheckOutput>& outputs() const { return outputs_; }

 private:
  const Point* point_;
  uint64_t seed_;
  std::vector<NamedTensor> inputs_;
  std::deque<CheckOutput> outputs_;  // a deque keeps references to earlier outputs valid
};

// Handed to a path (reference, candidate or oracle) for one call.
class CheckIo {
 public:
  // Built by the runtime. `outputs` holds one poisoned tensor per declared output.
  CheckIo(const Point& point, const std::vector<NamedTensor>& inputs,
          std::vector<NamedTensor>& outputs)
      : point_(&point), inputs_(&inputs), outputs_(&outputs), bound_(outputs.size(), nullptr) {}

  const Point& point() const { return *point_; }

  const Tensor& input_tensor(std::string_view name) const;
  template <class T>
  std::span<const T> input(std::string_view name) const {
    return input_tensor(name).template data<T>();
  }

  // The output's buffer, filled with a poison NaN (integers: all bits set) before the call.
  Tensor& output_tensor(std::string_view name);
  template <class T>
  std::span<T> output(std::string_view name) {
    return output_tensor(name).template mutable_data<T>();
  }

  // Returns the path's result in a buffer the path owns instead of writing into output(): the
  // runtime copies output_tensor(name).numel() elements from `data` right after the path returns
  // and checks that the buffer overlaps no input and no other path's output.
  // REQUIRES: `data` stays valid until the path has returned (static or member storage).
  template <class T>
  void bind_output(std::string_view name, const T* data) {
    bind_output_bytes(name, dtype_of<T>(), data);
  }
  void bind_output_bytes(std::string_view name, DType dtype, const void* data);

  // For the runtime: the buffer bound to output `index`, or null.
  const void* bound(size_t index) const { return bound_[index]; }

 private:
  size_t output_index(std::string_view name) const;

  const Point* point_;
  const std::vector<NamedTensor>* inputs_;
  std::vector<NamedTensor>* outputs_;
  std::vector<const void*> bound_;
};

class CheckBuilder : public ProbeBuilder<CheckBuilder> {
 public:
  using ProbeBuilder::ProbeBuilder;

  // Generates the inputs from setup.seed() and declares the outputs. Required.
  CheckBuilder& inputs(std::function<void(CheckSetup&)> generate) {
    definition_->check_inputs = std::move(generate);
    return *this;
  }
  // The path everyone trusts. Required.
  CheckBuilder& reference(std::function<void(CheckIo&)> path) {
    definition_->check_reference = std::move(path);
    return *this;
  }
  // The path under study. Required.
  CheckBuilder& candidate(std::function<void(CheckIo&)> path) {
    definition_->check_candidate = std::move(path);
    return *this;
  }
  // A more precise path (fp64, say) both are measured against. Optional; its floating-point
  // outputs are float64.
  CheckBuilder& oracle(std::function<void(CheckIo&)> path) {
    definition_->check_oracle = std::move(path);
    return *this;
  }
};

}  // namespace loupe

// LOUPE_CHECK(name).param(...).inputs(...).reference(...).candidate(...);
#define LOUPE_CHECK(name)                                                                     \
  [[maybe_unused]] static const ::loupe::detail::Registered LOUPE_PROBE_CONCAT(loupe_check_,  \
                                                                               __COUNTER__) = \
      ::loupe::CheckBuilder(                                                                  \
          ::loupe::detail::register_probe(#name, ::loupe::ProbeKind::kCheck, __FILE__, __LINE__))
