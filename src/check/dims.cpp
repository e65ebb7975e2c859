#include "check/dims.hpp"

#include <cctype>

namespace loupe::check {
namespace {

constexpr std::string_view kModifiers = "tp, cp, ep, sp, dp, natural, zigzag or partial";

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::string single_quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

}  // namespace

std::string_view parallel_axis_name(ParallelAxis axis) {
  switch (axis) {
    case ParallelAxis::kTp:
      return "tp";
    case ParallelAxis::kCp:
      return "cp";
    case ParallelAxis::kEp:
      return "ep";
    case ParallelAxis::kSp:
      return "sp";
    case ParallelAxis::kDp:
      return "dp";
  }
  return "?";
}

std::string parallel_axis_label(ParallelAxis axis) {
  std::string label(parallel_axis_name(axis));
  for (char& c : label) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return label;
}

std::optional<ParallelAxis> parse_parallel_axis(std::string_view name) {
  for (ParallelAxis axis : kAllParallelAxes) {
    if (parallel_axis_name(axis) == name) return axis;
  }
  return std::nullopt;
}

std::string_view shard_order_name(ShardOrder order) {
  return order == ShardOrder::kZigzag ? "zigzag" : "natural";
}

std::vector<std::string> DimsSpec::names() const {
  std::vector<std::string> out;
  for (const DimAxis& axis : axes) out.push_back(axis.name);
  return out;
}

const DimAxis* DimsSpec::axis_of(ParallelAxis group) const {
  for (const DimAxis& axis : axes) {
    if (axis.group == group) return &axis;
  }
  return nullptr;
}

DimsSpec parse_dims(std::string_view text, std::string_view origin, ErrorCode code) {
  const std::string hint =
      "a dims spec is space-separated axis names with optional modifiers, e.g. "
      "'b t(cp,zigzag) h(tp) d' or 'b t d(tp,partial)' (docs/sharded-diff.md)";
  DimsSpec spec;
  spec.text = std::string(text);
  size_t position = 0;
  int token_index = 0;
  auto fail = [&](std::string_view token, const std::string& what) -> Error {
    return Error(code,
                 std::string(origin) + " " + single_quoted(text) + ": token " +
                     std::to_string(token_index) + " " + single_quoted(token) + ": " + what,
                 hint);
  };
  while (true) {
    while (position < text.size() && text[position] == ' ') ++position;
    if (position >= text.size()) break;
    const size_t token_begin = position;
    size_t token_end = position;
    // A token runs to the next space outside parentheses.
    int depth = 0;
    while (token_end < text.size() && (depth > 0 || text[token_end] != ' ')) {
      if (text[token_end] == '(') ++depth;
      if (text[token_end] == ')') --depth;
      ++token_end;
    }
    ++token_index;
    const std::string_view token = text.substr(token_begin, token_end - token_begin);
    position = token_end;

    DimAxis axis;
    size_t cursor = 0;
    if (!is_name_start(token[0])) {
      throw fail(token, "expected an axis name (a letter or '_' first), found " +
                            single_quoted(token.substr(0, 1)));
    }
    while (cursor < token.size() && is_name_char(token[cursor])) ++cursor;
    axis.name = std::string(token.substr(0, cursor));
    if (cursor < token.size()) {
      if (token[cursor] != '(') {
        throw fail(token, "expected '(' or the end of the token after the name " +
                              single_quoted(axis.name) + ", found " +
                              single_quoted(token.substr(cursor, 1)));
      }
      if (token.back() != ')') {
        throw fail(token, "expected ')' to close the modifiers at the end of the token");
      }
      const std::string_view inner = token.substr(cursor + 1, token.size() - cursor - 2);
      bool order_given = false;
      size_t start = 0;
      int modifier_index = 0;
      while (true) {
        const size_t comma = inner.find(',', start);
        const std::string_view modifier = inner.substr(
            start, comma == std::string_view::npos ? inner.size() - start : comma - start);
        ++modifier_index;
        const std::string where = "modifier " + std::to_string(modifier_index);
        if (modifier.empty()) {
          throw fail(token, where + " is empty; expected " + std::string(kModifiers));
        }
        if (auto group = parse_parallel_axis(modifier)) {
          if (axis.group) {
            throw fail(token, where + " " + single_quoted(modifier) +
                                  ": the axis already names group " +
                                  single_quoted(parallel_axis_name(*axis.group)) +
                                  "; expected one group per axis");
          }
          axis.group = group;
        } else if (modifier == "natural" || modifier == "zigzag") {
          if (order_given) {
            throw fail(token, where + " " + single_quoted(modifier) +
                                  ": the order is already given; expected one of natural, zigzag");
          }
          order_given = true;
          axis.order = modifier == "zigzag" ? ShardOrder::kZigzag : ShardOrder::kNatural;
        } else if (modifier == "partial") {
          if (axis.partial) throw fail(token, where + " 'partial' is given twice");
          axis.partial = true;
        } else {
          throw fail(token, where + " " + single_quoted(modifier) + " is unknown; expected " +
                                std::string(kModifiers));
        }
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
      if (!axis.group && (axis.partial || axis.order == ShardOrder::kZigzag)) {
        throw fail(token, std::string(axis.partial ? "'partial'" : "'zigzag'") +
                              " needs a parallel group on the same axis, e.g. " +
                              (axis.partial ? "d(tp,partial)" : "t(cp,zigzag)"));
      }
      if (axis.partial && axis.order == ShardOrder::kZigzag) {
        throw fail(token,
                   "'partial' and 'zigzag' exclude each other: a partial sum is not cut into "
                   "chunks");
      }
    }
    for (const DimAxis& earlier : spec.axes) {
      if (earlier.name == axis.name) {
        throw fail(token, "the axis name " + single_quoted(axis.name) +
                              " is already used; expected one name per axis");
      }
      if (axis.group && earlier.group == axis.group) {
        throw fail(token, "group " + single_quoted(parallel_axis_name(*axis.group)) +
                              " already shards or sums axis " + single_quoted(earlier.name) +
                              "; expected each group on at most one axis");
      }
    }
    spec.axes.push_back(std::move(axis));
  }
  if (spec.axes.empty()) {
    throw Error(
        code,
        std::string(origin) + " " + single_quoted(text) + ": no axis; expected one token per axis",
        hint);
  }
  return spec;
}

int64_t ParallelConfig::world_size() const {
  int64_t size = 1;
  for (const auto& [group, group_size] : groups) size *= group_size;
  return size;
}

int64_t ParallelConfig::size_of(ParallelAxis group) const {
  for (const auto& [axis, size] : groups) {
    if (axis == group) return size;
  }
  return 1;
}

bool ParallelConfig::has(ParallelAxis group) const {
  for (const auto& entry : groups) {
    if (entry.first == group) return true;
  }
  return false;
}

std::vector<int64_t> ParallelConfig::coords_of(int64_t rank) const {
  std::vector<int64_t> coords;
  for (const auto& [group, size] : groups) {
    coords.push_back(rank % size);
    rank /= size;
  }
  return coords;
}

int64_t ParallelConfig::rank_of(const std::vector<int64_t>& coords) const {
  int64_t rank = 0, stride = 1;
  for (size_t index = 0; index < groups.size(); ++index) {
    rank += coords[index] * stride;
    stride *= groups[index].second;
  }
  return rank;
}

std::string ParallelConfig::to_string() const {
  std::string out;
  for (const auto& [group, size] : groups) {
    out += (out.empty() ? "" : ",") + std::string(parallel_axis_name(group)) + "=" +
           std::to_string(size);
  }
  return out;
}

ParallelConfig parse_parallel(std::string_view text, std::string_view origin, ErrorCode code) {
  const std::string hint = "name each group once with its size, e.g. tp=2,cp=4";
  ParallelConfig config;
  size_t start = 0;
  int item_index = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view item =
        text.substr(start, comma == std::string_view::npos ? text.size() - start : comma - start);
    ++item_index;
    auto fail = [&](const std::string& what) {
      return Error(code,
                   std::string(origin) + " " + single_quoted(text) + ": item " +
                       std::to_string(item_index) + " " + single_quoted(item) + ": " + what,
                   hint);
    };
    const size_t equals = item.find('=');
    if (equals == std::string_view::npos) throw fail("expected GROUP=SIZE");
    const std::string_view name = item.substr(0, equals);
    const std::string_view size_text = item.substr(equals + 1);
    const auto group = parse_parallel_axis(name);
    if (!group)
      throw fail("unknown group " + single_quoted(name) + "; expected tp, cp, ep, sp or dp");
    if (config.has(*group)) throw fail("group " + single_quoted(name) + " is given twice");
    int64_t size = 0;
    bool digits = !size_text.empty() && size_text.size() <= 9;
    for (char c : size_text) {
      if (!std::isdigit(static_cast<unsigned char>(c))) digits = false;
    }
    if (digits) {
      for (char c : size_text) size = size * 10 + (c - '0');
    }
    if (!digits || size < 1) {
      throw fail("size " + single_quoted(size_text) +
                 ": expected a whole number from 1 to 999999999");
    }
    config.groups.emplace_back(*group, size);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return config;
}

}  // namespace loupe::check
