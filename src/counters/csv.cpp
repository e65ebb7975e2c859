#include "counters/csv.hpp"

#include <array>
#include <charconv>
#include <cstring>

#include "loupe/error.hpp"

namespace loupe::counters {

void CsvScanner::fail(size_t line, size_t column, const std::string& what) const {
  throw Error(ErrorCode::kInput,
              source_ + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + what,
              "give the file `ncu --csv` (or `ncu --import REPORT --csv`) wrote, unedited");
}

CsvScanner::Kind CsvScanner::next() {
  fields_.clear();
  scratch_.clear();
  const char* const begin = text_.data();
  const size_t size = text_.size();
  // Skip empty lines; they carry nothing.
  while (position_ < size && (begin[position_] == '\n' || begin[position_] == '\r')) {
    if (begin[position_] == '\n') ++line_;
    ++position_;
  }
  if (position_ >= size) return Kind::kEnd;
  record_line_ = line_;
  if (begin[position_] != '"') {
    const void* newline = std::memchr(begin + position_, '\n', size - position_);
    size_t end = newline ? static_cast<const char*>(newline) - begin : size;
    size_t stop = end;
    if (stop > position_ && begin[stop - 1] == '\r') --stop;
    line_text_ = std::string_view(begin + position_, stop - position_);
    position_ = end;
    return Kind::kLine;
  }
  // A record: quoted fields (and, leniently, unquoted ones) separated by commas.
  size_t line_start = position_;
  while (true) {
    if (position_ < size && begin[position_] == '"') {
      const size_t open_line = line_;
      const size_t open_column = position_ - line_start + 1;
      const size_t field_begin = ++position_;
      bool escaped = false;
      while (true) {
        const void* quote = std::memchr(begin + position_, '"', size - position_);
        if (quote == nullptr) {
          fail(open_line, open_column, "the quoted field opened here is never closed");
        }
        const size_t quote_at = static_cast<const char*>(quote) - begin;
        // Newlines inside the field keep the line count true for later errors.
        for (const char* scan = begin + position_; scan < begin + quote_at; ++scan) {
          if (*scan == '\n') {
            ++line_;
            line_start = scan - begin + 1;
          }
        }
        if (quote_at + 1 < size && begin[quote_at + 1] == '"') {
          escaped = true;
          position_ = quote_at + 2;
          continue;
        }
        position_ = quote_at + 1;
        std::string_view raw(begin + field_begin, quote_at - field_begin);
        if (!escaped) {
          fields_.push_back(raw);
        } else {
          std::string& copy = scratch_.emplace_back();
          copy.reserve(raw.size());
          for (size_t index = 0; index < raw.size(); ++index) {
            copy.push_back(raw[index]);
            if (raw[index] == '"') ++index;  // "" → "
          }
          fields_.push_back(copy);
        }
        break;
      }
    } else {
      const size_t field_begin = position_;
      while (position_ < size && begin[position_] != ',' && begin[position_] != '\n' &&
             begin[position_] != '\r') {
        if (begin[position_] == '"') {
          fail(line_, position_ - line_start + 1,
               "a '\"' inside an unquoted field (expected the field to be quoted throughout)");
        }
        ++position_;
      }
      fields_.push_back(std::string_view(begin + field_begin, position_ - field_begin));
    }
    if (position_ >= size) return Kind::kRecord;
    const char after = begin[position_];
    if (after == ',') {
      ++position_;
      continue;
    }
    if (after == '\r' && position_ + 1 < size && begin[position_ + 1] == '\n') ++position_;
    if (after == '\n' || after == '\r') {
      if (begin[position_] == '\n') ++line_;
      ++position_;
      return Kind::kRecord;
    }
    fail(line_, position_ - line_start + 1,
         std::string("expected ',' or the end of the line after the closing quote, found '") +
             after + "'");
  }
}

bool CsvScanner::split_unquoted(std::string_view line, std::vector<std::string_view>& out) const {
  out.clear();
  if (line.find('"') != std::string_view::npos) return false;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      out.push_back(line.substr(start));
      return true;
    }
    out.push_back(line.substr(start, comma - start));
    start = comma + 1;
  }
}

std::optional<double> parse_number(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  if (text.empty() || text.size() > 64) return std::nullopt;
  // Copy without the thousands separators, checking that each one sits between digit groups of
  // three in the integer part: "7,232" is a number, "1,2" or "(256, 1, 1)" is not.
  char buffer[72];
  size_t length = 0;
  size_t index = 0;
  if (text[0] == '+') {
    index = 1;
  } else if (text[0] == '-') {
    buffer[length++] = '-';
    index = 1;
  }
  size_t digits_since_separator = 0;
  bool saw_separator = false;
  bool saw_digit = false;
  for (; index < text.size(); ++index) {
    const char character = text[index];
    if (character >= '0' && character <= '9') {
      buffer[length++] = character;
      ++digits_since_separator;
      saw_digit = true;
    } else if (character == ',') {
      if (!saw_digit || (saw_separator && digits_since_separator != 3) ||
          (!saw_separator && digits_since_separator > 3)) {
        return std::nullopt;
      }
      saw_separator = true;
      digits_since_separator = 0;
    } else {
      break;
    }
  }
  if (saw_separator && digits_since_separator != 3) return std::nullopt;
  bool fraction_digit = false;
  for (; index < text.size(); ++index) {
    fraction_digit = fraction_digit || (text[index] >= '0' && text[index] <= '9');
    buffer[length++] = text[index];
  }
  // from_chars would take "inf" and "nan"; ncu prints digits.
  if (!saw_digit && !fraction_digit) return std::nullopt;
  double value = 0;
  const auto [end, error] = std::from_chars(buffer, buffer + length, value);
  if (error != std::errc() || end != buffer + length || length == 0) return std::nullopt;
  return value;
}

namespace {

struct Prefix {
  char letter;
  double factor;
};
constexpr std::array<Prefix, 9> kPrefixes = {{{'K', 1e3},
                                              {'k', 1e3},
                                              {'M', 1e6},
                                              {'G', 1e9},
                                              {'T', 1e12},
                                              {'P', 1e15},
                                              {'m', 1e-3},
                                              {'u', 1e-6},
                                              {'n', 1e-9}}};

// Units ncu scales with an SI prefix (Kbyte, Ghz, usecond, Mcycle, Kinst, ...).
// ncu 2025 prints "ns", "byte/s" and "%/register" where older versions print "nsecond" and
// "byte/second": both spellings are here.
constexpr std::array<std::string_view, 20> kBaseUnits = {
    "byte",     "second",  "s",      "hz",       "cycle",       "inst",      "sector", "request",
    "warp",     "block",   "thread", "register", "transaction", "wavefront", "SM",     "bit",
    "instance", "cluster", "pass",   "%"};

bool is_base(std::string_view word) {
  for (std::string_view base : kBaseUnits) {
    if (base == word) return true;
  }
  return false;
}

// One side of a unit ("Gbyte", "usecond", "cycle"): its base word and SI factor.
bool split_prefix(std::string_view word, std::string_view& base, double& factor) {
  bool found = false;
  if (is_base(word)) {
    base = word;
    factor = 1;
    found = true;
  } else if (word.size() > 1 && is_base(word.substr(1))) {
    for (const Prefix& prefix : kPrefixes) {
      if (prefix.letter == word[0]) {
        base = word.substr(1);
        factor = prefix.factor;
        found = true;
        break;
      }
    }
  }
  if (found && base == "s") base = "second";
  return found;
}

}  // namespace

UnitScale normalise_unit(std::string_view unit) {
  if (unit.empty() || unit == "%" || unit == "ratio") return {std::string(unit), 1, true};
  const size_t slash = unit.find('/');
  std::string_view numerator_word = unit.substr(0, slash);
  std::string_view numerator;
  double numerator_factor = 1;
  if (!split_prefix(numerator_word, numerator, numerator_factor)) {
    return {std::string(unit), 1, false};
  }
  if (slash == std::string_view::npos) {
    if (numerator == "second") return {"ns", numerator_factor * 1e9, true};
    return {std::string(numerator), numerator_factor, true};
  }
  std::string_view denominator;
  double denominator_factor = 1;
  if (!split_prefix(unit.substr(slash + 1), denominator, denominator_factor)) {
    return {std::string(unit), 1, false};
  }
  if (denominator == "second") {
    // Rates per second; a cycle rate is a frequency.
    const double factor = numerator_factor / denominator_factor;
    if (numerator == "cycle") return {"hz", factor, true};
    return {std::string(numerator) + "/s", factor, true};
  }
  return {std::string(numerator) + "/" + std::string(denominator),
          numerator_factor / denominator_factor, true};
}

}  // namespace loupe::counters
