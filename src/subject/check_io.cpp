// CheckOutput, CheckSetup and CheckIo: what the input generator and the paths are handed.
#include <algorithm>

#include "loupe/check.hpp"
#include "subject/guards.hpp"

namespace loupe {
namespace {

std::string join_names(const std::vector<NamedTensor>& tensors) {
  std::string names;
  for (const auto& tensor : tensors) names += (names.empty() ? "" : ", ") + tensor.name;
  return names.empty() ? "none" : names;
}

}  // namespace

CheckOutput& CheckOutput::along(std::string axis) {
  if (std::find(axes.begin(), axes.end(), axis) == axes.end()) {
    std::string names;
    for (const auto& name : axes) names += (names.empty() ? "" : ", ") + name;
    throw Error(ErrorCode::kInternal,
                "output '" + name + "': profile axis '" + axis + "' is not one of its axes (" +
                    (names.empty() ? "none declared" : names) + ")",
                "declare the axes in setup.output(name, shape, axes)");
  }
  profile_axis = std::move(axis);
  return *this;
}

CheckOutput& CheckOutput::tolerance(std::string metric, double bound) {
  tolerances.push_back({std::move(metric), bound, false});
  return *this;
}

CheckOutput& CheckOutput::tolerance_vs_oracle(std::string metric, double factor) {
  tolerances.push_back({std::move(metric), factor, true});
  return *this;
}

CheckOutput& CheckOutput::worst_element(double bound) {
  if (!(bound > 0)) {
    throw Error(ErrorCode::kInternal, "output '" + name + "': worst_element bound must be > 0");
  }
  worst_element_bound = bound;
  return *this;
}

CheckOutput& CheckOutput::approximate(std::string how) {
  approximates = std::move(how);
  return *this;
}

CheckOutput& CheckOutput::stored_narrow(std::string format) {
  stored_in = std::move(format);
  return *this;
}

namespace {

void check_axes(const std::string& what, const std::string& name, const std::vector<int64_t>& shape,
                const std::vector<std::string>& axes) {
  for (int64_t extent : shape) {
    if (extent < 0) {
      throw Error(ErrorCode::kInternal, what + " '" + name + "' has a negative extent");
    }
  }
  if (!axes.empty() && axes.size() != shape.size()) {
    throw Error(ErrorCode::kInternal, what + " '" + name + "' has " + std::to_string(shape.size()) +
                                          " dimensions but " + std::to_string(axes.size()) +
                                          " axis names");
  }
}

}  // namespace

Tensor& CheckSetup::add_input(std::string name, DType dtype, std::vector<int64_t> shape,
                              std::vector<std::string> axes) {
  for (const auto& input : inputs_) {
    if (input.name == name) {
      throw Error(ErrorCode::kInternal, "input '" + name + "' is declared twice");
    }
  }
  check_axes("input", name, shape, axes);
  Tensor tensor(dtype, std::move(shape));
  tensor.axes = std::move(axes);
  inputs_.push_back({std::move(name), std::move(tensor)});
  return inputs_.back().tensor;
}

CheckOutput& CheckSetup::add_output(std::string name, DType dtype, std::vector<int64_t> shape,
                                    std::vector<std::string> axes) {
  for (const auto& output : outputs_) {
    if (output.name == name) {
      throw Error(ErrorCode::kInternal, "output '" + name + "' is declared twice");
    }
  }
  check_axes("output", name, shape, axes);
  CheckOutput output;
  output.name = std::move(name);
  output.dtype = dtype;
  output.shape = std::move(shape);
  output.axes = std::move(axes);
  outputs_.push_back(std::move(output));
  return outputs_.back();
}

const Tensor& CheckIo::input_tensor(std::string_view name) const {
  for (const auto& input : *inputs_) {
    if (input.name == name) return input.tensor;
  }
  throw Error(ErrorCode::kInternal, "a check path asked for input '" + std::string(name) +
                                        "'; the inputs are: " + join_names(*inputs_));
}

size_t CheckIo::output_index(std::string_view name) const {
  for (size_t index = 0; index < outputs_->size(); ++index) {
    if ((*outputs_)[index].name == name) return index;
  }
  throw Error(ErrorCode::kInternal, "a check path asked for output '" + std::string(name) +
                                        "'; the outputs are: " + join_names(*outputs_));
}

Tensor& CheckIo::output_tensor(std::string_view name) {
  return (*outputs_)[output_index(name)].tensor;
}

void CheckIo::bind_output_bytes(std::string_view name, DType dtype, const void* data) {
  const size_t index = output_index(name);
  const Tensor& output = (*outputs_)[index].tensor;
  if (output.dtype() != dtype) {
    throw Error(ErrorCode::kInternal, "bind_output('" + std::string(name) + "') with " +
                                          std::string(dtype_name(dtype)) + " data; the output is " +
                                          std::string(dtype_name(output.dtype())));
  }
  if (data == nullptr) {
    throw Error(ErrorCode::kInternal, "bind_output('" + std::string(name) + "') with null data");
  }
  bound_[index] = data;
}

}  // namespace loupe
