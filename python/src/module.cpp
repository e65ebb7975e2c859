// python/src/module.cpp — `loupe._loupe`, the compiled half of the Python package: comparisons
// (src/check) and trace analyses (src/trace) run here, in-process, on the caller's memory.
//
// Arrays arrive through the buffer protocol. A C-contiguous buffer is viewed, not copied: the
// Tensor built on it owns nothing, and every Tensor lives only inside the call while the Python
// objects it views are held by the caller. bfloat16 and fp8 have no buffer format: the Python side
// passes their bits as an integer array of the same width plus the dtype name (`dtype` argument).
// Errors: loupe::Error becomes the loupe.Error subclass of its code (loupe/_errors.py), with
// loupe's message and hint; any other C++ exception becomes loupe.InternalError. Never a crash.
// Thread-safety: the GIL is released while C++ compares, so other Python threads keep running;
// the buffers must not be written meanwhile (as with any numpy call that releases the GIL).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "check/diff.hpp"
#include "check/findings.hpp"
#include "loupe/error.hpp"
#include "loupe/tensor.hpp"
#include "trace/analyze/analyze.hpp"
#include "trace/import/import.hpp"

namespace py = pybind11;

namespace {

using loupe::DType;
using loupe::Error;
using loupe::ErrorCode;

// The dtype a buffer-protocol format character names (numpy's struct-style codes, any byte-order
// prefix that means little-endian or native on this little-endian machine).
std::optional<DType> dtype_of_format(std::string format, size_t itemsize) {
  if (!format.empty() && (format[0] == '<' || format[0] == '=' || format[0] == '@')) {
    format = format.substr(1);
  }
  if (format.size() != 1) return std::nullopt;
  switch (format[0]) {
    case '?':
      return DType::kBool;
    case 'e':
      return DType::kF16;
    case 'f':
      return DType::kF32;
    case 'd':
      return DType::kF64;
    case 'b':
      return DType::kI8;
    case 'B':
      return DType::kU8;
    case 'h':
      return DType::kI16;
    case 'H':
      return DType::kU16;
    case 'i':
    case 'l':
    case 'q':
      if (itemsize == 4) return DType::kI32;
      if (itemsize == 8) return DType::kI64;
      return std::nullopt;
    case 'I':
    case 'L':
    case 'Q':
      if (itemsize == 4) return DType::kU32;
      if (itemsize == 8) return DType::kU64;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

// A view of `array` (no copy). `dtype` overrides the buffer's own format for bf16 and fp8, whose
// bits come as int16 / uint8. REQUIRES: `array` outlives the returned tensor.
loupe::Tensor view_of(const py::buffer& array, const std::optional<std::string>& dtype,
                      const std::string& side) {
  py::buffer_info info = array.request();
  std::optional<DType> resolved = dtype_of_format(info.format, static_cast<size_t>(info.itemsize));
  if (dtype) {
    const auto named = loupe::dtype_from_name(*dtype);
    if (!named) {
      throw Error(ErrorCode::kUsage, side + ": unknown dtype '" + *dtype + "'",
                  "a loupe dtype name: float32, bfloat16, float8_e4m3fn, ...");
    }
    if (static_cast<size_t>(info.itemsize) != loupe::dtype_size(*named)) {
      throw Error(ErrorCode::kInternal, side + ": " + std::to_string(info.itemsize) +
                                            "-byte elements cannot hold " + *dtype);
    }
    resolved = named;
  }
  if (!resolved) {
    throw Error(ErrorCode::kInput,
                side + ": elements of buffer format '" + info.format + "' (" +
                    std::to_string(info.itemsize) + " bytes) are not a dtype loupe compares",
                "pass booleans, integers or floats (float16, bfloat16, float32, float64, fp8)");
  }
  std::vector<int64_t> shape(info.shape.begin(), info.shape.end());
  // C order required: the Python side makes a contiguous copy first when it must.
  int64_t expected_stride = info.itemsize;
  for (size_t axis = shape.size(); axis-- > 0;) {
    if (shape[axis] != 1 && info.strides[axis] != expected_stride) {
      throw Error(ErrorCode::kInternal, side + ": buffer is not C-contiguous");
    }
    expected_stride *= shape[axis];
  }
  // The empty owner: the caller's Python object keeps the memory alive for the whole call.
  return loupe::Tensor(*resolved, std::move(shape), std::shared_ptr<const void>(),
                       static_cast<const std::byte*>(info.ptr));
}

struct DiffOptions {
  std::vector<std::string> axes;
  std::optional<std::string> along;
  std::vector<std::string> bounds;  // "rms_ratio=1e-3"
  std::optional<double> rtol;
  std::optional<double> atol;
  bool equal_nan = false;
  bool statistics = false;
  // Threshold rules (check/rules.hpp): TOML text and where it came from.
  std::optional<std::string> rules_text;
  std::string rules_origin = "rules=";
  std::string label_a = "actual";
  std::string label_b = "expected";
  std::optional<std::string> label_oracle;
  std::optional<std::string> reproduce;
  // Sharded dump directories (docs/sharded-diff.md): `loupe diff --dims/--parallel/--parallel-b`.
  std::vector<std::string> dims;
  std::optional<std::string> parallel;
  std::optional<std::string> parallel_b;
};

loupe::check::DiffRequest make_request(const DiffOptions& options) {
  loupe::check::DiffRequest request;
  request.a = options.label_a;
  request.b = options.label_b;
  if (options.label_oracle) request.oracle = *options.label_oracle;
  request.axes = options.axes;
  request.along = options.along;
  for (const std::string& text : options.bounds) {
    request.bounds.push_back(loupe::check::parse_bound(text));
  }
  if (options.rtol || options.atol) {
    request.tolerance = loupe::check::Tolerance{options.atol.value_or(0), options.rtol.value_or(0)};
  }
  request.equal_nan = options.equal_nan;
  request.statistics = options.statistics;
  if (options.rules_text) {
    request.rules = loupe::check::parse_rules(*options.rules_text, options.rules_origin);
  }
  request.reproduce = options.reproduce;
  request.dims = options.dims;
  request.parallel = options.parallel;
  request.parallel_b = options.parallel_b;
  return request;
}

// (envelope JSON, text summary, sentences) of one finished diff. `sentences` holds, per
// comparison in order, the lines `loupe diff` prints (headline, profile, slice) and finite_count,
// which the envelope leaves out: assert_close's message and DiffResult's repr are made of them.
py::tuple rendered(const loupe::check::DiffResult& result,
                   const loupe::check::DiffRequest& request) {
  py::list sentences;
  for (const loupe::check::TensorComparison& comparison : result.comparisons) {
    py::dict entry;
    entry["headline"] = loupe::check::comparison_headline(comparison);
    entry["profile"] =
        comparison.localisation.profile
            ? py::object(py::str(loupe::check::profile_sentence(*comparison.localisation.profile)))
            : py::object(py::none());
    const std::string slice = loupe::check::slice_sentence(comparison.localisation);
    entry["slice"] = slice.empty() ? py::object(py::none()) : py::object(py::str(slice));
    entry["finite_count"] = comparison.metrics.finite_count;
    entry["worst_index"] = comparison.metrics.worst_index;
    sentences.append(std::move(entry));
  }
  return py::make_tuple(loupe::check::render_diff_json(result, request),
                        loupe::check::render_diff_summary(result, request), sentences);
}

// One entry of diff_arrays' `pairs`: (name, a, a_dtype, b, b_dtype, oracle | None, oracle_dtype).
using PairTuple =
    std::tuple<std::string, py::buffer, std::optional<std::string>, py::buffer,
               std::optional<std::string>, std::optional<py::buffer>, std::optional<std::string>>;

py::tuple diff_arrays(const std::vector<PairTuple>& pairs, const DiffOptions& options) {
  const loupe::check::DiffRequest request = make_request(options);
  std::vector<loupe::check::TensorPair> tensors;
  tensors.reserve(pairs.size());
  for (const auto& [name, a, a_dtype, b, b_dtype, oracle, oracle_dtype] : pairs) {
    loupe::check::TensorPair pair;
    pair.name = name;
    pair.a = view_of(a, a_dtype, options.label_a + " '" + name + "'");
    pair.b = view_of(b, b_dtype, options.label_b + " '" + name + "'");
    if (oracle) pair.oracle = view_of(*oracle, oracle_dtype, "the oracle '" + name + "'");
    tensors.push_back(std::move(pair));
  }
  loupe::check::DiffResult result;
  {
    py::gil_scoped_release release;
    result = loupe::check::run_diff_pairs(tensors, request);
  }
  return rendered(result, request);
}

py::tuple diff_paths(const std::string& a, const std::string& b,
                     const std::optional<std::string>& oracle,
                     const std::optional<std::string>& name, DiffOptions options) {
  options.label_a = a;
  options.label_b = b;
  options.label_oracle = oracle;
  loupe::check::DiffRequest request = make_request(options);
  request.name = name;
  loupe::check::DiffResult result;
  {
    py::gil_scoped_release release;
    result = loupe::check::run_diff(request);
  }
  return rendered(result, request);
}

loupe::trace::AnalyzeRequest analyze_request(const std::vector<std::string>& classes,
                                             const std::optional<std::string>& overlap,
                                             const std::string& window,
                                             const std::string& gap_threshold, bool detail) {
  loupe::trace::AnalyzeRequest request;
  for (const std::string& text : classes)
    request.classes.push_back(loupe::trace::parse_class(text));
  if (overlap) {
    const size_t comma = overlap->find(',');
    if (comma == std::string::npos || comma == 0 || comma + 1 == overlap->size()) {
      throw Error(ErrorCode::kUsage, "overlap '" + *overlap + "' is not \"A,B\"",
                  "name two classes defined in classes=, e.g. overlap=\"compute,transfer\"");
    }
    request.overlap = std::make_pair(overlap->substr(0, comma), overlap->substr(comma + 1));
  }
  request.window_class = window;
  request.gap_threshold_ns = loupe::trace::parse_duration_ns("gap_threshold", gap_threshold);
  request.detail = detail;
  return request;
}

std::string trace_analyze(const std::vector<std::string>& paths,
                          const std::vector<std::string>& classes,
                          const std::optional<std::string>& overlap, const std::string& window,
                          const std::string& gap_threshold, bool detail) {
  const auto request = analyze_request(classes, overlap, window, gap_threshold, detail);
  py::gil_scoped_release release;
  const loupe::trace::Model model = loupe::trace::load_traces(paths);
  return loupe::render_envelope(loupe::trace::analyze(model, request));
}

std::string trace_diff(const std::string& a, const std::string& b,
                       const std::vector<std::string>& classes,
                       const std::optional<std::string>& overlap, const std::string& window,
                       const std::string& gap_threshold, bool detail) {
  const auto request = analyze_request(classes, overlap, window, gap_threshold, detail);
  py::gil_scoped_release release;
  const loupe::trace::Model model_a = loupe::trace::load_traces({a});
  const loupe::trace::Model model_b = loupe::trace::load_traces({b});
  return loupe::render_envelope(loupe::trace::diff(model_a, model_b, request));
}

// Raises the loupe.Error subclass for `code` (loupe/_errors.py builds it from these three).
void raise_loupe_error(const std::string& code, const std::string& message,
                       const std::string& hint) {
  py::object make = py::module_::import("loupe._errors").attr("from_code");
  py::object error = make(code, message, hint);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
}

}  // namespace

PYBIND11_MODULE(_loupe, module) {
  module.doc() = "loupe's comparisons and trace analyses, in-process (use the `loupe` package)";

  py::register_exception_translator([](std::exception_ptr pending) {
    try {
      if (pending) std::rethrow_exception(pending);
    } catch (const py::error_already_set&) {
      throw;
    } catch (const py::builtin_exception&) {
      throw;
    } catch (const Error& error) {
      raise_loupe_error(std::string(loupe::error_code_name(error.code())), error.message(),
                        error.hint());
    } catch (const std::exception& error) {
      raise_loupe_error("internal", error.what(), "");
    }
  });

  py::class_<DiffOptions>(module, "DiffOptions")
      .def(py::init<>())
      .def_readwrite("axes", &DiffOptions::axes)
      .def_readwrite("along", &DiffOptions::along)
      .def_readwrite("bounds", &DiffOptions::bounds)
      .def_readwrite("rtol", &DiffOptions::rtol)
      .def_readwrite("atol", &DiffOptions::atol)
      .def_readwrite("equal_nan", &DiffOptions::equal_nan)
      .def_readwrite("statistics", &DiffOptions::statistics)
      .def_readwrite("rules_text", &DiffOptions::rules_text)
      .def_readwrite("rules_origin", &DiffOptions::rules_origin)
      .def_readwrite("label_a", &DiffOptions::label_a)
      .def_readwrite("label_b", &DiffOptions::label_b)
      .def_readwrite("label_oracle", &DiffOptions::label_oracle)
      .def_readwrite("reproduce", &DiffOptions::reproduce)
      .def_readwrite("dims", &DiffOptions::dims)
      .def_readwrite("parallel", &DiffOptions::parallel)
      .def_readwrite("parallel_b", &DiffOptions::parallel_b);

  module.def("diff_arrays", &diff_arrays, py::arg("pairs"), py::arg("options"),
             "Compare named in-memory pairs; returns (envelope JSON, text summary).");
  module.def("diff_paths", &diff_paths, py::arg("a"), py::arg("b"), py::arg("oracle"),
             py::arg("name"), py::arg("options"),
             "`loupe diff A B`: files or dump directories; returns (envelope JSON, summary).");
  module.def("trace_analyze", &trace_analyze, py::arg("paths"), py::arg("classes"),
             py::arg("overlap"), py::arg("window"), py::arg("gap_threshold"), py::arg("detail"),
             "`loupe trace analyze`; returns the envelope JSON.");
  module.def("trace_diff", &trace_diff, py::arg("a"), py::arg("b"), py::arg("classes"),
             py::arg("overlap"), py::arg("window"), py::arg("gap_threshold"), py::arg("detail"),
             "`loupe trace diff A B`; returns the envelope JSON.");
  module.def(
      "dtype_names",
      [] {
        std::vector<std::string> names;
        for (DType dtype : loupe::kAllDTypes) names.emplace_back(loupe::dtype_name(dtype));
        return names;
      },
      "Every dtype name loupe knows.");
}
