// CsvScanner, parse_number and normalise_unit (src/counters/csv.hpp) on hand-made text.
#include "counters/csv.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "loupe/error.hpp"

namespace loupe::counters {
namespace {

std::vector<std::string> record(CsvScanner& scanner) {
  EXPECT_EQ(scanner.next(), CsvScanner::Kind::kRecord);
  return {scanner.fields().begin(), scanner.fields().end()};
}

TEST(CsvScanner, QuotedFieldsEscapesAndLinesInsideQuotes) {
  CsvScanner scanner("\"a\",\"b,c\",\"say \"\"hi\"\"\"\r\n\"multi\nline\",\"\"\n", "t.csv");
  EXPECT_EQ(record(scanner), (std::vector<std::string>{"a", "b,c", "say \"hi\""}));
  EXPECT_EQ(scanner.line(), 1u);
  EXPECT_EQ(record(scanner), (std::vector<std::string>{"multi\nline", ""}));
  EXPECT_EQ(scanner.line(), 2u);
  EXPECT_EQ(scanner.next(), CsvScanner::Kind::kEnd);
}

TEST(CsvScanner, PlainLinesAreReturnedForTheCallerToClassify) {
  CsvScanner scanner("==PROF== Connected to process 1\n\n\"ID\",\"x\"\nhello world\n", "t.csv");
  EXPECT_EQ(scanner.next(), CsvScanner::Kind::kLine);
  EXPECT_EQ(scanner.line_text(), "==PROF== Connected to process 1");
  EXPECT_EQ(record(scanner), (std::vector<std::string>{"ID", "x"}));
  EXPECT_EQ(scanner.line(), 3u);
  EXPECT_EQ(scanner.next(), CsvScanner::Kind::kLine);
  EXPECT_EQ(scanner.line_text(), "hello world");
  EXPECT_EQ(scanner.line(), 4u);
  EXPECT_EQ(scanner.next(), CsvScanner::Kind::kEnd);
}

TEST(CsvScanner, TrailingCommaAtEndOfFileIsAnEmptyField) {
  CsvScanner scanner("\"a\",", "t.csv");
  EXPECT_EQ(record(scanner), (std::vector<std::string>{"a", ""}));
}

TEST(CsvScanner, UnterminatedQuoteNamesFileLineAndColumn) {
  CsvScanner scanner("\"ID\",\"x\"\n\"0\",\"never closed\n", "bad.csv");
  record(scanner);
  try {
    scanner.next();
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInput);
    EXPECT_EQ(error.message(), "bad.csv:2:5: the quoted field opened here is never closed");
  }
}

TEST(CsvScanner, TextAfterAClosingQuoteNamesTheColumn) {
  CsvScanner scanner("\"ID\",\"ab\"c\n", "bad.csv");
  try {
    scanner.next();
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(
        error.message(),
        "bad.csv:1:10: expected ',' or the end of the line after the closing quote, found 'c'");
  }
}

TEST(CsvScanner, QuoteInsideAnUnquotedFieldIsAnError) {
  CsvScanner scanner("\"ID\",ab\"c\n", "bad.csv");
  try {
    scanner.next();
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.message(),
              "bad.csv:1:8: a '\"' inside an unquoted field (expected the field to be quoted "
              "throughout)");
  }
}

TEST(CsvScanner, SplitUnquotedRefusesQuotes) {
  CsvScanner scanner("", "t.csv");
  std::vector<std::string_view> out;
  EXPECT_TRUE(scanner.split_unquoted("ID,Kernel Name,,x", out));
  EXPECT_EQ(out, (std::vector<std::string_view>{"ID", "Kernel Name", "", "x"}));
  EXPECT_FALSE(scanner.split_unquoted("a,\"b\"", out));
}

TEST(ParseNumber, ThousandsSeparatorsSignsAndExponents) {
  EXPECT_EQ(parse_number("7,232"), 7232.0);
  EXPECT_EQ(parse_number("1,215,000,000.50"), 1215000000.5);
  EXPECT_EQ(parse_number("45.7"), 45.7);
  EXPECT_EQ(parse_number("-3.5"), -3.5);
  EXPECT_EQ(parse_number("+2"), 2.0);
  EXPECT_EQ(parse_number("1e+09"), 1e9);
  EXPECT_EQ(parse_number(" 12 "), 12.0);
  EXPECT_EQ(parse_number("0"), 0.0);
}

TEST(ParseNumber, RejectsWhatIsNotANumber) {
  for (const char* text :
       {"", "n/a", "(256, 1, 1)", "CachePreferNone", "1,2", "1,2345", "12,34,567", ",123", "7,232,",
        "1.2.3", "--1", "inf1", "12a", "inf", "nan", "-"}) {
    EXPECT_EQ(parse_number(text), std::nullopt) << text;
  }
}

TEST(NormaliseUnit, EveryUnitNcuPrints) {
  struct Case {
    const char* unit;
    const char* base;
    double factor;
  };
  const Case cases[] = {
      {"byte", "byte", 1},
      {"Kbyte", "byte", 1e3},
      {"Mbyte", "byte", 1e6},
      {"Gbyte", "byte", 1e9},
      {"Tbyte", "byte", 1e12},
      {"%", "%", 1},
      {"", "", 1},
      {"ratio", "ratio", 1},
      {"nsecond", "ns", 1},
      {"usecond", "ns", 1e3},
      {"msecond", "ns", 1e6},
      {"second", "ns", 1e9},
      {"cycle", "cycle", 1},
      {"Kcycle", "cycle", 1e3},
      {"Mcycle", "cycle", 1e6},
      {"inst", "inst", 1},
      {"Kinst", "inst", 1e3},
      {"Minst", "inst", 1e6},
      {"sector", "sector", 1},
      {"Ksector", "sector", 1e3},
      {"request", "request", 1},
      {"warp", "warp", 1},
      {"block", "block", 1},
      {"thread", "thread", 1},
      {"SM", "SM", 1},
      {"hz", "hz", 1},
      {"Khz", "hz", 1e3},
      {"Mhz", "hz", 1e6},
      {"Ghz", "hz", 1e9},
      {"cycle/nsecond", "hz", 1e9},
      {"cycle/usecond", "hz", 1e6},
      {"cycle/second", "hz", 1},
      {"byte/second", "byte/s", 1},
      {"Kbyte/second", "byte/s", 1e3},
      {"Mbyte/second", "byte/s", 1e6},
      {"Gbyte/second", "byte/s", 1e9},
      {"Tbyte/second", "byte/s", 1e12},
      {"byte/usecond", "byte/s", 1e6},
      {"inst/cycle", "inst/cycle", 1},
      {"warp/cycle", "warp/cycle", 1},
      {"register/thread", "register/thread", 1},
      {"byte/block", "byte/block", 1},
      {"Kbyte/block", "byte/block", 1e3},
      {"sector/request", "sector/request", 1},
  };
  for (const Case& c : cases) {
    const UnitScale scale = normalise_unit(c.unit);
    EXPECT_TRUE(scale.known) << c.unit;
    EXPECT_EQ(scale.unit, c.base) << c.unit;
    EXPECT_DOUBLE_EQ(scale.factor, c.factor) << c.unit;
  }
}

TEST(NormaliseUnit, UnknownUnitsKeepTheirTextAndFactorOne) {
  for (const char* unit : {"furlong", "Xbyte", "byte/fortnight", "bytes"}) {
    const UnitScale scale = normalise_unit(unit);
    EXPECT_FALSE(scale.known) << unit;
    EXPECT_EQ(scale.unit, unit);
    EXPECT_EQ(scale.factor, 1);
  }
}

}  // namespace
}  // namespace loupe::counters
