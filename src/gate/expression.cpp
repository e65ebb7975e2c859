#include "gate/expression.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace loupe::gate {
namespace {

enum class TokenKind { kWord, kNumber, kString, kSymbol, kEnd };

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  size_t column = 0;  // 1-based
  Value number;       // kNumber: int64_t or double
};

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::string describe(const Token& token) {
  switch (token.kind) {
    case TokenKind::kEnd:
      return "the end";
    case TokenKind::kString:
      return "\"" + token.text + "\"";
    default:
      return "'" + token.text + "'";
  }
}

[[noreturn]] void fail_at(size_t column, const std::string& expected, const std::string& found) {
  throw Error(ErrorCode::kConfig,
              "at column " + std::to_string(column) + ": expected " + expected + ", found " + found,
              "see docs/objective.md, \"Gate expressions\"");
}

std::vector<Token> tokenize(std::string_view text) {
  std::vector<Token> tokens;
  size_t at = 0;
  while (at < text.size()) {
    const char c = text[at];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++at;
      continue;
    }
    Token token;
    token.column = at + 1;
    const bool signed_number =
        (c == '-' || c == '+') && at + 1 < text.size() &&
        (std::isdigit(static_cast<unsigned char>(text[at + 1])) || text[at + 1] == '.');
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = at;
      while (end < text.size() &&
             (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_')) {
        ++end;
      }
      token.kind = TokenKind::kWord;
      token.text = std::string(text.substr(at, end - at));
      at = end;
    } else if (std::isdigit(static_cast<unsigned char>(c)) || signed_number ||
               (c == '.' && at + 1 < text.size() &&
                std::isdigit(static_cast<unsigned char>(text[at + 1])))) {
      const std::string rest(text.substr(at));
      char* end = nullptr;
      errno = 0;
      const double value = std::strtod(rest.c_str(), &end);
      const size_t length = static_cast<size_t>(end - rest.c_str());
      // "+." or "-." followed by no digit reads nothing: without this check the tokenizer would
      // never move past it (found by fuzz/objective_fuzz).
      if (length == 0) fail_at(token.column, "a number", "'" + rest.substr(0, 2) + "'");
      token.kind = TokenKind::kNumber;
      token.text = rest.substr(0, length);
      if (errno == ERANGE || !std::isfinite(value)) {
        fail_at(token.column, "a finite number", "'" + token.text + "'");
      }
      const bool integral = token.text.find_first_of(".eE") == std::string::npos;
      if (integral) {
        token.number = static_cast<int64_t>(std::strtoll(token.text.c_str(), nullptr, 10));
      } else {
        token.number = value;
      }
      at += length;
    } else if (c == '"' || c == '\'') {
      const size_t close = text.find(c, at + 1);
      if (close == std::string_view::npos) {
        fail_at(token.column, std::string("a closing ") + c, "the end");
      }
      token.kind = TokenKind::kString;
      token.text = std::string(text.substr(at + 1, close - at - 1));
      at = close + 1;
    } else {
      static constexpr std::string_view kTwoCharacter[] = {"<=", ">=", "==", "!="};
      token.kind = TokenKind::kSymbol;
      token.text = std::string(1, c);
      for (auto symbol : kTwoCharacter) {
        if (text.substr(at, 2) == symbol) token.text = std::string(symbol);
      }
      static constexpr std::string_view kOne = "<>./[]()";
      if (token.text.size() == 1 && kOne.find(c) == std::string_view::npos) {
        fail_at(token.column, "a name, a number, a comparison, '.', '/', '[', ']', '(' or ')'",
                "'" + token.text + "'");
      }
      at += token.text.size();
    }
    tokens.push_back(std::move(token));
  }
  Token end;
  end.column = text.size() + 1;
  tokens.push_back(end);
  return tokens;
}

std::optional<Layer> layer_word(const std::string& word) {
  const std::string lower = lowercase(word);
  if (lower == "check") return Layer::kCheck;
  if (lower == "bench") return Layer::kBench;
  if (lower == "scenario") return Layer::kScenario;
  return std::nullopt;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : tokens_(tokenize(text)) {}

  GateExpression parse() {
    const Token& first = peek();
    if (first.kind != TokenKind::kWord) {
      fail_at(first.column,
              "a metric (check.NAME.METRIC), a bench verdict (NAME[VARIANT] ...) "
              "or check.NAME passes",
              describe(first));
    }
    GateExpression expression;
    const auto layer = layer_word(first.text);
    if (lowercase(first.text) == "median" && peek(1).kind == TokenKind::kSymbol &&
        peek(1).text == "(") {
      take();
      take();
      const Token& inner = peek();
      const auto inner_layer =
          inner.kind == TokenKind::kWord ? layer_word(inner.text) : std::nullopt;
      if (!inner_layer || !(peek(1).kind == TokenKind::kSymbol && peek(1).text == ".")) {
        fail_at(inner.column, "a metric (LAYER.NAME.METRIC) inside median(...)", describe(inner));
      }
      expression = parse_metric_gate(*inner_layer, /*median=*/true);
    } else if (layer && peek(1).kind == TokenKind::kSymbol && peek(1).text == ".") {
      expression = parse_metric_gate(*layer);
    } else {
      expression = parse_bench_verdict();
    }
    const Token& end = peek();
    if (end.kind != TokenKind::kEnd) fail_at(end.column, "'where' or the end", describe(end));
    return expression;
  }

 private:
  const Token& peek(size_t ahead = 0) const {
    const size_t index = std::min(position_ + ahead, tokens_.size() - 1);
    return tokens_[index];
  }
  const Token& take() {
    const Token& token = peek();
    if (position_ + 1 < tokens_.size()) ++position_;
    return token;
  }
  bool at_symbol(std::string_view symbol) const {
    return peek().kind == TokenKind::kSymbol && peek().text == symbol;
  }
  bool at_word(std::string_view word) const {
    return peek().kind == TokenKind::kWord && lowercase(peek().text) == word;
  }
  void expect_symbol(std::string_view symbol) {
    if (!at_symbol(symbol))
      fail_at(peek().column, "'" + std::string(symbol) + "'", describe(peek()));
    take();
  }
  void expect_word(std::string_view word) {
    if (!at_word(word)) fail_at(peek().column, "'" + std::string(word) + "'", describe(peek()));
    take();
  }
  std::string name(const std::string& what) {
    if (peek().kind != TokenKind::kWord) fail_at(peek().column, what, describe(peek()));
    return take().text;
  }

  std::optional<Comparison> comparison_here() const {
    if (peek().kind != TokenKind::kSymbol) return std::nullopt;
    const std::string& text = peek().text;
    if (text == "<") return Comparison::kLess;
    if (text == "<=") return Comparison::kLessEqual;
    if (text == ">") return Comparison::kGreater;
    if (text == ">=") return Comparison::kGreaterEqual;
    if (text == "==") return Comparison::kEqual;
    if (text == "!=") return Comparison::kNotEqual;
    return std::nullopt;
  }
  Comparison comparison() {
    const auto found = comparison_here();
    if (!found) fail_at(peek().column, "a comparison (<=, <, >=, >, ==, !=)", describe(peek()));
    take();
    return *found;
  }

  // After LAYER ".": either "ENTRY passes" (checks) or a metric reference and a bound.
  // `median`: inside median( ... ), which closes after the metric and takes an absolute bound.
  GateExpression parse_metric_gate(Layer layer, bool median = false) {
    take();  // the layer word
    take();  // "."
    const std::string entry = name("a probe name after '" + std::string(layer_name(layer)) + ".'");
    if (median && at_word("passes")) {
      fail_at(peek().column, "'.' and a metric (median takes a metric)", describe(peek()));
    }
    if (at_word("passes")) {
      if (layer != Layer::kCheck) {
        fail_at(peek().column, "'.' and a metric ('passes' applies to checks)", describe(peek()));
      }
      take();
      CheckPasses passes{entry, {}};
      passes.where = where_clause();
      return passes;
    }
    MetricBound bound;
    bound.metric = metric_rest(layer, entry);
    if (median) {
      expect_symbol(")");
      bound.median = true;
      if (at_symbol("/")) {
        fail_at(peek().column,
                "a comparison (median(...) takes an absolute bound: a ratio has its own interval)",
                describe(peek()));
      }
    }
    if (at_symbol("/")) {
      take();
      if (at_word("baseline") && !(peek(1).kind == TokenKind::kSymbol && peek(1).text == ".")) {
        take();
        bound.versus_baseline = true;
        bound.comparison = comparison();
        const Token& limit = peek();
        if (limit.kind != TokenKind::kNumber) fail_at(limit.column, "a number", describe(limit));
        bound.limit = std::holds_alternative<int64_t>(limit.number)
                          ? static_cast<double>(std::get<int64_t>(limit.number))
                          : std::get<double>(limit.number);
        take();
        bound.where = where_clause();
        return bound;
      }
      const Token& start = peek();
      const auto other_layer =
          start.kind == TokenKind::kWord ? layer_word(start.text) : std::nullopt;
      if (!other_layer) {
        fail_at(start.column, "a metric (LAYER.NAME.METRIC) after '/'", describe(start));
      }
      if (*other_layer != layer) {
        fail_at(start.column,
                "a metric of the same layer (" + std::string(layer_name(layer)) +
                    ") after '/': a ratio compares two probes of one layer",
                describe(start));
      }
      take();
      expect_symbol(".");
      const std::string other = name("a probe name");
      bound.baseline = metric_rest(layer, other);
    }
    bound.comparison = comparison();
    const Token& limit = peek();
    if (limit.kind != TokenKind::kNumber) fail_at(limit.column, "a number", describe(limit));
    bound.limit = std::holds_alternative<int64_t>(limit.number)
                      ? static_cast<double>(std::get<int64_t>(limit.number))
                      : std::get<double>(limit.number);
    take();
    bound.where = where_clause();
    return bound;
  }

  // [ "[" VARIANT "]" ] "." METRIC
  MetricRef metric_rest(Layer layer, const std::string& entry) {
    MetricRef ref{layer, entry, std::nullopt, {}};
    if (at_symbol("[")) {
      take();
      ref.variant = name("a variant name");
      expect_symbol("]");
    }
    if (!at_symbol(".")) {
      fail_at(peek().column,
              layer == Layer::kCheck ? "'.' and a metric, or 'passes'" : "'.' and a metric",
              describe(peek()));
    }
    take();
    ref.metric = name("a metric name");
    return ref;
  }

  // `bare_ok`: a bench name alone (no selector) means every variant, as `[any]` does; only
  // before "than baseline", where no other variant is named.
  VariantRef variant_ref(bool bare_ok = false) {
    VariantRef ref;
    ref.bench = name("a bench name");
    if (bare_ok && !at_symbol("[")) {
      ref.selector = VariantSelector::kAny;
      return ref;
    }
    expect_symbol("[");
    ref.variant = name("a variant name, 'configured' or 'any'");
    const std::string lower = lowercase(ref.variant);
    if (lower == "configured") {
      ref.selector = VariantSelector::kConfigured;
      ref.variant.clear();
    } else if (lower == "any") {
      ref.selector = VariantSelector::kAny;
      ref.variant.clear();
    }
    expect_symbol("]");
    return ref;
  }

  GateExpression parse_bench_verdict() {
    BenchVerdict verdict;
    const Token subject_variant = peek(2);  // NAME "[" VARIANT
    // Against the baseline build every variant may be gated: `decode[any]` or `decode`.
    bool baseline_ahead = false;
    for (size_t ahead = 0; peek(ahead).kind != TokenKind::kEnd; ++ahead) {
      if (peek(ahead).kind == TokenKind::kWord && lowercase(peek(ahead).text) == "baseline") {
        baseline_ahead = true;
      }
    }
    verdict.subject = variant_ref(baseline_ahead);
    if (verdict.subject.selector == VariantSelector::kAny && !baseline_ahead) {
      fail_at(subject_variant.column,
              "a variant name or 'configured' on the left ('any' belongs on the right)",
              describe(subject_variant));
    }
    if (at_word("not")) {
      take();
      verdict.negated = true;
    }
    const Token& relation = peek();
    const std::string word = relation.kind == TokenKind::kWord ? lowercase(relation.text) : "";
    if (word == "slower") {
      verdict.relation = AbRelation::kSlower;
      take();
      expect_word("than");
    } else if (word == "faster") {
      verdict.relation = AbRelation::kFaster;
      take();
      expect_word("than");
    } else if (word == "same") {
      verdict.relation = AbRelation::kSame;
      take();
      expect_word("as");
    } else {
      fail_at(relation.column, "SLOWER, FASTER or SAME (optionally after 'not')",
              describe(relation));
    }
    const Token& other_start = peek();
    if (at_word("baseline") && !(peek(1).kind == TokenKind::kSymbol && peek(1).text == "[")) {
      take();
      verdict.versus_baseline = true;
      verdict.other = verdict.subject;
      verdict.where = where_clause();
      return verdict;
    }
    verdict.other = variant_ref();
    if (verdict.other.bench != verdict.subject.bench) {
      fail_at(other_start.column,
              "the bench '" + verdict.subject.bench +
                  "' again: a verdict compares two variants of one bench",
              "'" + verdict.other.bench + "'");
    }
    verdict.where = where_clause();
    return verdict;
  }

  std::vector<Condition> where_clause() {
    std::vector<Condition> conditions;
    if (!at_word("where")) return conditions;
    take();
    while (true) {
      Condition condition;
      condition.param = name("a parameter name");
      condition.comparison = comparison();
      const Token& literal = peek();
      if (literal.kind == TokenKind::kNumber) {
        condition.value = literal.number;
      } else if (literal.kind == TokenKind::kString) {
        condition.value = literal.text;
      } else if (literal.kind == TokenKind::kWord) {
        const std::string lower = lowercase(literal.text);
        if (lower == "true" || lower == "false") {
          condition.value = lower == "true";
        } else {
          condition.value = literal.text;
        }
      } else {
        fail_at(literal.column, "a number, true, false, a word or a quoted string",
                describe(literal));
      }
      take();
      conditions.push_back(std::move(condition));
      if (!at_word("and")) break;
      take();
    }
    return conditions;
  }

  std::vector<Token> tokens_;
  size_t position_ = 0;
};

bool is_plain_word(const std::string& text) {
  if (text.empty() || !(std::isalpha(static_cast<unsigned char>(text[0])) || text[0] == '_')) {
    return false;
  }
  for (char c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  const std::string lower = lowercase(text);
  return lower != "true" && lower != "false" && lower != "and";
}

std::string literal_to_string(const Value& value) {
  if (const auto* text = std::get_if<std::string>(&value)) {
    return is_plain_word(*text) ? *text : "\"" + *text + "\"";
  }
  if (std::holds_alternative<double>(value)) {
    std::string text = value_to_string(value);
    // Keep a float a float when it reads back.
    if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
    return text;
  }
  return value_to_string(value);
}

std::string where_to_string(const std::vector<Condition>& where) {
  std::string out;
  for (size_t index = 0; index < where.size(); ++index) {
    out += index == 0 ? " where " : " and ";
    out += where[index].param + " " + std::string(comparison_symbol(where[index].comparison)) +
           " " + literal_to_string(where[index].value);
  }
  return out;
}

std::string metric_to_string(const MetricRef& ref) {
  std::string out = std::string(layer_name(ref.layer)) + "." + ref.entry;
  if (ref.variant) out += "[" + *ref.variant + "]";
  return out + "." + ref.metric;
}

std::string variant_to_string(const VariantRef& ref) {
  switch (ref.selector) {
    case VariantSelector::kConfigured:
      return ref.bench + "[configured]";
    case VariantSelector::kAny:
      return ref.bench + "[any]";
    case VariantSelector::kNamed:
      break;
  }
  return ref.bench + "[" + ref.variant + "]";
}

std::optional<double> as_number(const Value& value) {
  if (const auto* integer = std::get_if<int64_t>(&value)) return static_cast<double>(*integer);
  if (const auto* real = std::get_if<double>(&value)) return *real;
  return std::nullopt;
}

}  // namespace

std::string_view comparison_symbol(Comparison comparison) {
  switch (comparison) {
    case Comparison::kLess:
      return "<";
    case Comparison::kLessEqual:
      return "<=";
    case Comparison::kGreater:
      return ">";
    case Comparison::kGreaterEqual:
      return ">=";
    case Comparison::kEqual:
      return "==";
    case Comparison::kNotEqual:
      return "!=";
  }
  return "?";
}

bool compare_values(const Value& left, Comparison comparison, const Value& right) {
  auto ordered = [&](auto a, auto b) {
    switch (comparison) {
      case Comparison::kLess:
        return a < b;
      case Comparison::kLessEqual:
        return a <= b;
      case Comparison::kGreater:
        return a > b;
      case Comparison::kGreaterEqual:
        return a >= b;
      case Comparison::kEqual:
        return a == b;
      case Comparison::kNotEqual:
        return a != b;
    }
    return false;
  };
  if (std::holds_alternative<int64_t>(left) && std::holds_alternative<int64_t>(right)) {
    return ordered(std::get<int64_t>(left), std::get<int64_t>(right));
  }
  const auto left_number = as_number(left);
  const auto right_number = as_number(right);
  if (left_number && right_number) return ordered(*left_number, *right_number);
  if (std::holds_alternative<std::string>(left) && std::holds_alternative<std::string>(right)) {
    return ordered(std::get<std::string>(left), std::get<std::string>(right));
  }
  if (std::holds_alternative<bool>(left) && std::holds_alternative<bool>(right)) {
    if (comparison == Comparison::kEqual) return std::get<bool>(left) == std::get<bool>(right);
    if (comparison == Comparison::kNotEqual) return std::get<bool>(left) != std::get<bool>(right);
    return false;
  }
  return comparison == Comparison::kNotEqual;
}

bool condition_holds(const Condition& condition, const Params& point) {
  for (const auto& [name, value] : point) {
    if (name == condition.param)
      return compare_values(value, condition.comparison, condition.value);
  }
  return false;
}

bool conditions_hold(const std::vector<Condition>& conditions, const Params& point) {
  for (const auto& condition : conditions) {
    if (!condition_holds(condition, point)) return false;
  }
  return true;
}

GateExpression parse_gate_expression(std::string_view text) { return Parser(text).parse(); }

std::string gate_expression_to_string(const GateExpression& expression) {
  struct Visitor {
    std::string operator()(const MetricBound& bound) const {
      std::string out = bound.median ? "median(" + metric_to_string(bound.metric) + ")"
                                     : metric_to_string(bound.metric);
      if (bound.baseline) out += " / " + metric_to_string(*bound.baseline);
      if (bound.versus_baseline) out += " / baseline";
      out += " " + std::string(comparison_symbol(bound.comparison)) + " " +
             literal_to_string(Value(bound.limit));
      return out + where_to_string(bound.where);
    }
    std::string operator()(const BenchVerdict& verdict) const {
      static constexpr std::string_view kRelation[] = {"SLOWER than", "FASTER than", "SAME as"};
      std::string out =
          variant_to_string(verdict.subject) + (verdict.negated ? " not " : " ") +
          std::string(kRelation[static_cast<int>(verdict.relation)]) + " " +
          (verdict.versus_baseline ? std::string("baseline") : variant_to_string(verdict.other));
      return out + where_to_string(verdict.where);
    }
    std::string operator()(const CheckPasses& passes) const {
      return "check." + passes.check + " passes" + where_to_string(passes.where);
    }
  };
  return std::visit(Visitor{}, expression);
}

Layer gate_layer(const GateExpression& expression) {
  struct Visitor {
    Layer operator()(const MetricBound& bound) const { return bound.metric.layer; }
    Layer operator()(const BenchVerdict&) const { return Layer::kBench; }
    Layer operator()(const CheckPasses&) const { return Layer::kCheck; }
  };
  return std::visit(Visitor{}, expression);
}

}  // namespace loupe::gate
