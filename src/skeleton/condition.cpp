#include "skeleton/condition.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "loupe/error.hpp"

namespace loupe::skeleton {
namespace {

constexpr std::string_view kHint = "skeletons/README.md documents the applies_when language";

enum class TokenKind { kWord, kString, kNumber, kOperator, kPunct, kEnd };

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;  // words, operators and punctuation as written; strings unquoted
  double number = 0;
  bool integral = false;
  size_t offset = 0;
};

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) { tokenize(); }

  Condition parse() {
    Condition condition = parse_or();
    if (peek().kind != TokenKind::kEnd) fail(peek(), "'and', 'or' or the end");
    return condition;
  }

 private:
  [[noreturn]] void fail_at(size_t offset, const std::string& expected,
                            const std::string& found) const {
    // Line and column inside the expression (multi-line TOML strings span lines).
    int line = 1;
    int column = 1;
    for (size_t index = 0; index < offset && index < text_.size(); ++index) {
      if (text_[index] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    const bool multi_line = text_.find('\n') != std::string_view::npos;
    std::string where =
        multi_line ? "at line " + std::to_string(line) + ", column " + std::to_string(column)
                   : "at column " + std::to_string(column);
    std::string shown(text_);
    std::replace(shown.begin(), shown.end(), '\n', ' ');
    throw Error(ErrorCode::kConfig,
                where + ": expected " + expected + ", found " + found + " in '" + shown + "'",
                std::string(kHint));
  }
  [[noreturn]] void fail(const Token& token, const std::string& expected) const {
    fail_at(token.offset, expected, describe(token));
  }
  static std::string describe(const Token& token) {
    switch (token.kind) {
      case TokenKind::kEnd:
        return "the end";
      case TokenKind::kString:
        return "the string \"" + token.text + "\"";
      default:
        return "'" + token.text + "'";
    }
  }

  void tokenize() {
    size_t at = 0;
    while (true) {
      while (at < text_.size() && std::isspace(static_cast<unsigned char>(text_[at]))) ++at;
      Token token;
      token.offset = at;
      if (at >= text_.size()) {
        tokens_.push_back(token);
        return;
      }
      const char c = text_[at];
      if (c == '"' || c == '\'') {
        const size_t close = text_.find(c, at + 1);
        if (close == std::string_view::npos) fail_at(at, "a closing quote", "the end");
        token.kind = TokenKind::kString;
        token.text = std::string(text_.substr(at + 1, close - at - 1));
        at = close + 1;
      } else if (std::isdigit(static_cast<unsigned char>(c)) ||
                 ((c == '-' || c == '+' || c == '.') && at + 1 < text_.size() &&
                  (std::isdigit(static_cast<unsigned char>(text_[at + 1])) ||
                   text_[at + 1] == '.'))) {
        // A number: strtod decides where it ends (1e-4, -0.5, 2048).
        const std::string rest(text_.substr(at));
        char* end = nullptr;
        token.number = std::strtod(rest.c_str(), &end);
        const size_t length = static_cast<size_t>(end - rest.c_str());
        if (length == 0) fail_at(at, "a number", "'" + std::string(1, c) + "'");
        token.kind = TokenKind::kNumber;
        token.text = rest.substr(0, length);
        token.integral = token.text.find_first_of(".eE") == std::string::npos;
        at += length;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t end = at;
        while (end < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[end])) ||
                                      text_[end] == '_' || text_[end] == '-')) {
          ++end;
        }
        token.kind = TokenKind::kWord;
        token.text = std::string(text_.substr(at, end - at));
        at = end;
      } else if (c == '<' || c == '>' || c == '=' || c == '!') {
        const bool two = at + 1 < text_.size() && text_[at + 1] == '=';
        token.kind = TokenKind::kOperator;
        token.text = std::string(text_.substr(at, two ? 2 : 1));
        if (token.text == "=" || token.text == "!") {
          fail_at(at, "a comparison (<, <=, >, >=, ==, !=)", "'" + token.text + "'");
        }
        at += two ? 2 : 1;
      } else if (c == '(' || c == ')' || c == '[' || c == ']' || c == ',' || c == '.') {
        token.kind = TokenKind::kPunct;
        token.text = std::string(1, c);
        ++at;
      } else {
        fail_at(at, "a word, a string, a number, an operator or a parenthesis",
                "'" + std::string(1, c) + "'");
      }
      tokens_.push_back(std::move(token));
    }
  }

  const Token& peek() const { return tokens_[position_]; }
  Token next() { return tokens_[position_ < tokens_.size() - 1 ? position_++ : position_]; }
  bool is_word(const Token& token, std::string_view word) const {
    return token.kind == TokenKind::kWord && token.text == word;
  }
  bool is_punct(const Token& token, std::string_view punct) const {
    return token.kind == TokenKind::kPunct && token.text == punct;
  }
  void expect_punct(std::string_view punct) {
    if (!is_punct(peek(), punct)) fail(peek(), "'" + std::string(punct) + "'");
    next();
  }

  Condition parse_or() {
    Condition first = parse_and();
    if (!is_word(peek(), "or")) return first;
    Condition combined;
    combined.kind = Condition::Kind::kOr;
    combined.column = first.column;
    combined.operands.push_back(std::move(first));
    while (is_word(peek(), "or")) {
      next();
      combined.operands.push_back(parse_and());
    }
    return combined;
  }

  Condition parse_and() {
    Condition first = parse_unary();
    if (!is_word(peek(), "and")) return first;
    Condition combined;
    combined.kind = Condition::Kind::kAnd;
    combined.column = first.column;
    combined.operands.push_back(std::move(first));
    while (is_word(peek(), "and")) {
      next();
      combined.operands.push_back(parse_unary());
    }
    return combined;
  }

  Condition parse_unary() {
    const Token& token = peek();
    if (is_word(token, "not")) {
      Condition negated;
      negated.kind = Condition::Kind::kNot;
      negated.column = static_cast<int>(token.offset) + 1;
      next();
      negated.operands.push_back(parse_unary());
      return negated;
    }
    if (is_punct(token, "(")) {
      next();
      Condition inner = parse_or();
      expect_punct(")");
      return inner;
    }
    if (is_word(token, "finding")) return parse_finding();
    if (is_word(token, "param")) return parse_param();
    fail(token, "finding(...), param(...), 'not' or '('");
  }

  CompareOp parse_op(bool allow_in) {
    const Token& token = peek();
    static const std::vector<std::pair<std::string_view, CompareOp>> kOps = {
        {"<", CompareOp::kLess},    {"<=", CompareOp::kLessEqual},
        {">", CompareOp::kGreater}, {">=", CompareOp::kGreaterEqual},
        {"==", CompareOp::kEqual},  {"!=", CompareOp::kNotEqual}};
    if (token.kind == TokenKind::kOperator) {
      for (const auto& [text, op] : kOps) {
        if (token.text == text) {
          next();
          return op;
        }
      }
    }
    if (allow_in && is_word(token, "in")) {
      next();
      return CompareOp::kIn;
    }
    fail(token, allow_in ? "a comparison (<, <=, >, >=, ==, !=) or 'in'"
                         : "a comparison (<, <=, >, >=, ==, !=)");
  }

  Value parse_value(bool numbers_only) {
    const Token token = peek();
    if (token.kind == TokenKind::kNumber) {
      next();
      if (token.integral) return static_cast<int64_t>(std::llround(token.number));
      return token.number;
    }
    if (!numbers_only) {
      if (token.kind == TokenKind::kString) {
        next();
        return token.text;
      }
      if (is_word(token, "true") || is_word(token, "false")) {
        next();
        return token.text == "true";
      }
    }
    fail(token, numbers_only ? "a number" : "a number, a string, true or false");
  }

  Condition parse_finding() {
    Condition atom;
    atom.kind = Condition::Kind::kFinding;
    atom.column = static_cast<int>(peek().offset) + 1;
    next();  // finding
    expect_punct("(");
    const Token pattern = peek();
    if (pattern.kind != TokenKind::kString) fail(pattern, "a quoted finding id pattern");
    if (pattern.text.empty()) fail(pattern, "a non-empty finding id pattern");
    next();
    atom.pattern = pattern.text;
    while (is_punct(peek(), ",")) {
      next();
      const Token severity = peek();
      if (is_word(severity, "fail")) {
        atom.severities.push_back(Severity::kFail);
      } else if (is_word(severity, "warn")) {
        atom.severities.push_back(Severity::kWarn);
      } else if (is_word(severity, "info")) {
        atom.severities.push_back(Severity::kInfo);
      } else {
        fail(severity, "a severity (fail, warn, info)");
      }
      next();
    }
    expect_punct(")");
    if (is_punct(peek(), ".")) {
      next();
      const Token metric = peek();
      if (metric.kind != TokenKind::kWord) fail(metric, "a metric name");
      next();
      atom.name = metric.text;
      atom.has_comparison = true;
      atom.op = parse_op(false);
      atom.values.push_back(parse_value(true));
    }
    return atom;
  }

  Condition parse_param() {
    Condition atom;
    atom.kind = Condition::Kind::kParam;
    atom.column = static_cast<int>(peek().offset) + 1;
    next();  // param
    expect_punct("(");
    const Token name = peek();
    if (name.kind != TokenKind::kWord && name.kind != TokenKind::kString) {
      fail(name, "a parameter name");
    }
    next();
    atom.name = name.text;
    expect_punct(")");
    atom.has_comparison = true;
    atom.op = parse_op(true);
    if (atom.op == CompareOp::kIn) {
      expect_punct("[");
      atom.values.push_back(parse_value(false));
      while (is_punct(peek(), ",")) {
        next();
        atom.values.push_back(parse_value(false));
      }
      expect_punct("]");
    } else {
      atom.values.push_back(parse_value(false));
    }
    return atom;
  }

  std::string_view text_;
  std::vector<Token> tokens_;
  size_t position_ = 0;
};

bool match_parts(std::string_view pattern, std::string_view id) {
  while (!pattern.empty()) {
    if (pattern.substr(0, 2) == "**") {
      const std::string_view rest = pattern.substr(2);
      for (size_t at = 0; at <= id.size(); ++at) {
        if (match_parts(rest, id.substr(at))) return true;
      }
      return false;
    }
    if (pattern[0] == '*') {
      const std::string_view rest = pattern.substr(1);
      for (size_t at = 0; at <= id.size(); ++at) {
        if (match_parts(rest, id.substr(at))) return true;
        if (at < id.size() && id[at] == '.') break;
      }
      return false;
    }
    if (id.empty()) return false;
    if (pattern[0] == '?') {
      if (id[0] == '.') return false;
    } else if (pattern[0] != id[0]) {
      return false;
    }
    pattern.remove_prefix(1);
    id.remove_prefix(1);
  }
  return id.empty();
}

std::optional<double> as_number(const Value& value) {
  if (const auto* integer = std::get_if<int64_t>(&value)) return static_cast<double>(*integer);
  if (const auto* real = std::get_if<double>(&value)) return *real;
  return std::nullopt;
}

bool compare(const Value& left, CompareOp op, const Value& right) {
  const auto left_number = as_number(left);
  const auto right_number = as_number(right);
  if (left_number && right_number) {
    const double a = *left_number;
    const double b = *right_number;
    switch (op) {
      case CompareOp::kLess:
        return a < b;
      case CompareOp::kLessEqual:
        return a <= b;
      case CompareOp::kGreater:
        return a > b;
      case CompareOp::kGreaterEqual:
        return a >= b;
      case CompareOp::kEqual:
      case CompareOp::kIn:
        return a == b;
      case CompareOp::kNotEqual:
        return a != b;
    }
    return false;
  }
  // Strings and booleans compare only for (in)equality; a number never equals a string.
  const bool same = left.index() == right.index() && left == right;
  if (op == CompareOp::kEqual || op == CompareOp::kIn) return same;
  if (op == CompareOp::kNotEqual) return !same && left.index() == right.index();
  return false;
}

bool compare_any(const Value& left, const Condition& atom) {
  if (atom.op == CompareOp::kIn) {
    return std::any_of(atom.values.begin(), atom.values.end(),
                       [&](const Value& value) { return compare(left, CompareOp::kIn, value); });
  }
  return compare(left, atom.op, atom.values.front());
}

std::string number_text(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g", value);
  return buffer;
}

std::string value_text(const Value& value) {
  if (std::holds_alternative<std::string>(value)) return "\"" + std::get<std::string>(value) + "\"";
  if (const auto* real = std::get_if<double>(&value)) return number_text(*real);
  return value_to_string(value);
}

std::string operand_text(const Condition& atom) {
  if (atom.op != CompareOp::kIn) return value_text(atom.values.front());
  std::string out = "[";
  for (size_t index = 0; index < atom.values.size(); ++index) {
    if (index > 0) out += ", ";
    out += value_text(atom.values[index]);
  }
  return out + "]";
}

double severity_weight(Severity severity) {
  switch (severity) {
    case Severity::kFail:
      return 1.0;
    case Severity::kWarn:
      return 0.7;
    case Severity::kInfo:
      return 0.5;
  }
  return 0;
}

constexpr double kParamWeight = 0.5;

int severity_rank(Severity severity) {
  return severity == Severity::kFail ? 2 : severity == Severity::kWarn ? 1 : 0;
}

std::optional<Severity> stronger(std::optional<Severity> a, std::optional<Severity> b) {
  if (!a) return b;
  if (!b) return a;
  return severity_rank(*a) >= severity_rank(*b) ? a : b;
}

std::string point_text(const Params& params) {
  return params.empty() ? std::string() : " at " + params_to_string(params);
}

Evaluation evaluate_finding(const Condition& atom, const std::vector<Finding>& findings) {
  const Finding* best = nullptr;
  double best_value = 0;
  size_t matches = 0;
  for (const auto& finding : findings) {
    if (!finding_id_matches(atom.pattern, finding.id)) continue;
    if (!atom.severities.empty() && std::find(atom.severities.begin(), atom.severities.end(),
                                              finding.severity) == atom.severities.end()) {
      continue;
    }
    double value = 0;
    if (atom.has_comparison) {
      const auto& metrics = finding.evidence.metrics;
      auto it = std::find_if(metrics.begin(), metrics.end(),
                             [&](const auto& metric) { return metric.first == atom.name; });
      if (it == metrics.end() || std::isnan(it->second)) continue;
      if (!compare(Value{it->second}, atom.op, atom.values.front())) continue;
      value = it->second;
    }
    ++matches;
    // Cite the most severe matching finding; the first of equals.
    if (best == nullptr || severity_rank(finding.severity) > severity_rank(best->severity)) {
      best = &finding;
      best_value = value;
    }
  }
  Evaluation result;
  if (best == nullptr) return result;
  result.holds = true;
  result.strongest = best->severity;
  result.weight = severity_weight(best->severity);
  std::string reason = "finding " + best->id + " (" + std::string(severity_name(best->severity)) +
                       ")" + point_text(best->where.params);
  if (atom.has_comparison) {
    reason += ": " + atom.name + " " + number_text(best_value) + " " +
              std::string(compare_op_text(atom.op)) + " " + operand_text(atom);
  }
  if (matches > 1) reason += " (+" + std::to_string(matches - 1) + " more)";
  if (evidence_kind(*best) == EvidenceKind::kInferred) result.inferred.push_back(reason);
  result.reasons.push_back(std::move(reason));
  return result;
}

Evaluation evaluate_param(const Condition& atom, const std::vector<Finding>& findings,
                          const Params& settings) {
  Evaluation result;
  auto hold = [&](const Value& value, const std::string& source) {
    result.holds = true;
    result.weight = kParamWeight;
    result.reasons.push_back("param " + atom.name + " = " + value_to_string(value) + " (" + source +
                             ") " + std::string(compare_op_text(atom.op)) + " " +
                             operand_text(atom));
    return result;
  };
  for (const auto& [name, value] : settings) {
    if (name == atom.name && compare_any(value, atom)) return hold(value, "deployment setting");
  }
  for (const auto& finding : findings) {
    for (const auto& [name, value] : finding.where.params) {
      if (name == atom.name && compare_any(value, atom)) {
        return hold(value, "point of finding " + finding.id);
      }
    }
  }
  return result;
}

void append(std::string& out, const Condition& condition, bool parenthesise);

std::string joined(const Condition& condition, std::string_view word) {
  std::string out;
  for (size_t index = 0; index < condition.operands.size(); ++index) {
    if (index > 0) out += " " + std::string(word) + " ";
    const auto& operand = condition.operands[index];
    // `and` binds tighter than `or`: an `or` inside an `and` needs parentheses.
    append(out, operand,
           condition.kind == Condition::Kind::kAnd && operand.kind == Condition::Kind::kOr);
  }
  return out;
}

void append(std::string& out, const Condition& condition, bool parenthesise) {
  std::string text;
  switch (condition.kind) {
    case Condition::Kind::kAnd:
      text = joined(condition, "and");
      break;
    case Condition::Kind::kOr:
      text = joined(condition, "or");
      break;
    case Condition::Kind::kNot: {
      const auto& operand = condition.operands.front();
      const bool atom = operand.kind == Condition::Kind::kFinding ||
                        operand.kind == Condition::Kind::kParam ||
                        operand.kind == Condition::Kind::kNot;
      text = "not ";
      append(text, operand, !atom);
      break;
    }
    case Condition::Kind::kFinding: {
      text = "finding(\"" + condition.pattern + "\"";
      for (Severity severity : condition.severities)
        text += ", " + std::string(severity_name(severity));
      text += ")";
      if (condition.has_comparison) {
        text += "." + condition.name + " " + std::string(compare_op_text(condition.op)) + " " +
                value_to_string(condition.values.front());
      }
      break;
    }
    case Condition::Kind::kParam: {
      text = "param(" + condition.name + ") " + std::string(compare_op_text(condition.op)) + " ";
      if (condition.op == CompareOp::kIn) {
        text += "[";
        for (size_t index = 0; index < condition.values.size(); ++index) {
          if (index > 0) text += ", ";
          text += std::holds_alternative<std::string>(condition.values[index])
                      ? "\"" + std::get<std::string>(condition.values[index]) + "\""
                      : value_to_string(condition.values[index]);
        }
        text += "]";
      } else {
        const Value& value = condition.values.front();
        text += std::holds_alternative<std::string>(value)
                    ? "\"" + std::get<std::string>(value) + "\""
                    : value_to_string(value);
      }
      break;
    }
  }
  out += parenthesise ? "(" + text + ")" : text;
}

}  // namespace

std::string_view compare_op_text(CompareOp op) {
  switch (op) {
    case CompareOp::kLess:
      return "<";
    case CompareOp::kLessEqual:
      return "<=";
    case CompareOp::kGreater:
      return ">";
    case CompareOp::kGreaterEqual:
      return ">=";
    case CompareOp::kEqual:
      return "==";
    case CompareOp::kNotEqual:
      return "!=";
    case CompareOp::kIn:
      return "in";
  }
  return "?";
}

Condition parse_condition(std::string_view text) { return Parser(text).parse(); }

std::string condition_to_string(const Condition& condition) {
  std::string out;
  append(out, condition, false);
  return out;
}

bool finding_id_matches(std::string_view pattern, std::string_view id) {
  return match_parts(pattern, id);
}

Evaluation evaluate(const Condition& condition, const std::vector<Finding>& findings,
                    const Params& settings) {
  switch (condition.kind) {
    case Condition::Kind::kFinding:
      return evaluate_finding(condition, findings);
    case Condition::Kind::kParam:
      return evaluate_param(condition, findings, settings);
    case Condition::Kind::kNot: {
      Evaluation inner = evaluate(condition.operands.front(), findings, settings);
      Evaluation result;
      result.holds = !inner.holds;
      if (result.holds) {
        result.reasons.push_back("not " + condition_to_string(condition.operands.front()));
      }
      return result;
    }
    case Condition::Kind::kAnd: {
      Evaluation result;
      result.holds = true;
      for (const auto& operand : condition.operands) {
        Evaluation inner = evaluate(operand, findings, settings);
        if (!inner.holds) return Evaluation{};
        result.weight += inner.weight;
        result.strongest = stronger(result.strongest, inner.strongest);
        for (auto& reason : inner.reasons) result.reasons.push_back(std::move(reason));
        for (auto& reason : inner.inferred) result.inferred.push_back(std::move(reason));
      }
      return result;
    }
    case Condition::Kind::kOr: {
      // The strongest operand that holds speaks for the whole: one alternative is enough.
      Evaluation best;
      for (const auto& operand : condition.operands) {
        Evaluation inner = evaluate(operand, findings, settings);
        if (inner.holds && (!best.holds || inner.weight > best.weight)) best = std::move(inner);
      }
      return best;
    }
  }
  return Evaluation{};
}

}  // namespace loupe::skeleton
