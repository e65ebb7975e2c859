// counters/csv.hpp — the CSV that Nsight Compute prints, tokenised in place, and its numbers.
//
// ncu quotes every field, doubles a quote inside one ("" → "), may break a long rule description
// over lines inside quotes, and interleaves its own `==PROF==` lines and the profiled program's
// output with the rows. CsvScanner walks a buffer line by line: a line that opens with '"' is
// a record (it may span lines); anything else is returned as a plain line for the caller to
// classify. Fields are views into the buffer, or into the scanner's scratch when a field held
// an escaped quote; they stay valid until the next call.
// Errors: a quoted field never closed, or text after a closing quote, throws Error(kInput) naming
// the source, the line and the column (1-based) and what was expected.
// Thread-safety: one scanner per thread; the buffer must outlive it.
#pragma once

#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loupe::counters {

class CsvScanner {
 public:
  enum class Kind { kRecord, kLine, kEnd };

  CsvScanner(std::string_view text, std::string source) : text_(text), source_(std::move(source)) {}

  // Advances past the next non-empty line. kRecord: `fields()` holds the record's fields;
  // kLine: `line_text()` holds the line (no terminator); kEnd: nothing is left.
  Kind next();

  const std::vector<std::string_view>& fields() const { return fields_; }
  std::string_view line_text() const { return line_text_; }
  // The 1-based line on which the current record or line starts.
  size_t line() const { return record_line_; }
  // Splits a plain line on commas (no quotes allowed): for exports re-saved without quoting.
  // Returns false when the line holds a quote.
  bool split_unquoted(std::string_view line, std::vector<std::string_view>& out) const;
  const std::string& source() const { return source_; }

 private:
  [[noreturn]] void fail(size_t line, size_t column, const std::string& what) const;

  std::string_view text_;
  std::string source_;
  size_t position_ = 0;
  size_t line_ = 1;  // the line `position_` is on
  size_t record_line_ = 0;
  std::vector<std::string_view> fields_;
  std::string_view line_text_;
  std::deque<std::string> scratch_;  // unescaped copies of fields that held ""
};

// A number as ncu prints it: optional sign, digits with optional thousands separators ("7,232",
// "1,215,000,000.00"), an optional fraction and exponent. Surrounding spaces are allowed.
// nullopt when the text is anything else (empty, "n/a", "(256, 1, 1)", "CachePreferNone").
std::optional<double> parse_number(std::string_view text);

// A unit normalised to loupe's base units: bytes, nanoseconds, hertz, bytes per second; counts
// (inst, cycle, sector, warp, ...) and ratios (%) keep their unit with factor 1.
struct UnitScale {
  std::string unit;    // the base unit: "byte", "ns", "hz", "byte/s", "%", "inst", "cycle", ...
  double factor = 1;   // value_in_base = value * factor
  bool known = false;  // false: an unknown unit, kept as printed with factor 1
};
UnitScale normalise_unit(std::string_view unit);

}  // namespace loupe::counters
