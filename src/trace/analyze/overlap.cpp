#include <algorithm>

#include "trace/analyze/analyze.hpp"

namespace loupe::trace {
namespace {

std::vector<Interval> intervals_of(const Model& model, const std::vector<uint8_t>& selected) {
  std::vector<Interval> intervals;
  for (SliceId id = 0; id < selected.size(); ++id) {
    if (selected[id]) intervals.emplace_back(model.slices.start_ns[id], model.slices.end_ns[id]);
  }
  return union_of(std::move(intervals));
}

// Length of `intervals` (sorted, disjoint) inside [start, end).
int64_t length_within(const std::vector<Interval>& intervals, int64_t start, int64_t end) {
  auto it = std::upper_bound(intervals.begin(), intervals.end(), Interval{start, INT64_MIN});
  if (it != intervals.begin()) --it;
  int64_t total = 0;
  for (; it != intervals.end() && it->first < end; ++it) {
    total += std::max<int64_t>(0, std::min(it->second, end) - std::max(it->first, start));
  }
  return total;
}

}  // namespace

Overlap compute_overlap(const Model& model, const Selector& a, const Selector& b,
                        const std::string& a_name, const std::string& b_name,
                        const Selector* window, const std::string& window_name) {
  Overlap result;
  result.a = a_name;
  result.b = b_name;
  const std::vector<Interval> a_intervals = intervals_of(model, a.select(model));
  const std::vector<Interval> b_intervals = intervals_of(model, b.select(model));
  const std::vector<Interval> both = intersect(a_intervals, b_intervals);
  result.a_ns = total_length(a_intervals);
  result.b_ns = total_length(b_intervals);
  result.both_ns = total_length(both);
  if (window != nullptr) {
    result.window_class = window_name;
    const std::vector<uint8_t> windows = window->select(model);
    std::vector<SliceId> ids;
    for (SliceId id = 0; id < windows.size(); ++id) {
      if (windows[id]) ids.push_back(id);
    }
    std::stable_sort(ids.begin(), ids.end(), [&](SliceId left, SliceId right) {
      return model.slices.start_ns[left] < model.slices.start_ns[right];
    });
    for (SliceId id : ids) {
      const int64_t start = model.slices.start_ns[id], end = model.slices.end_ns[id];
      result.windows.push_back({id, length_within(a_intervals, start, end),
                                length_within(b_intervals, start, end),
                                length_within(both, start, end)});
    }
  }
  return result;
}

}  // namespace loupe::trace
