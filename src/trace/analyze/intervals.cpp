#include <algorithm>

#include "trace/analyze/analyze.hpp"

namespace loupe::trace {

std::vector<Interval> union_of(std::vector<Interval> intervals) {
  // Most callers pass one track's intervals, already in order.
  if (!std::is_sorted(intervals.begin(), intervals.end())) {
    std::sort(intervals.begin(), intervals.end());
  }
  // Merged in place: the union is never longer than its input, and a second vector grown by
  // push_back cost the analyses of a large trace a page fault per 4 KiB of it.
  size_t kept = 0;
  for (const Interval interval : intervals) {
    if (interval.second <= interval.first) continue;
    if (kept > 0 && interval.first <= intervals[kept - 1].second) {
      intervals[kept - 1].second = std::max(intervals[kept - 1].second, interval.second);
    } else {
      intervals[kept++] = interval;
    }
  }
  intervals.resize(kept);
  // Callers keep unions: a small one does not hold the storage of a large input.
  if (kept < intervals.capacity() / 4) intervals.shrink_to_fit();
  return intervals;
}

int64_t total_length(const std::vector<Interval>& intervals) {
  int64_t total = 0;
  for (const Interval& interval : intervals) total += interval.second - interval.first;
  return total;
}

std::vector<Interval> intersect(const std::vector<Interval>& left,
                                const std::vector<Interval>& right) {
  std::vector<Interval> out;
  size_t left_index = 0, right_index = 0;
  while (left_index < left.size() && right_index < right.size()) {
    const int64_t start = std::max(left[left_index].first, right[right_index].first);
    const int64_t end = std::min(left[left_index].second, right[right_index].second);
    if (start < end) out.emplace_back(start, end);
    if (left[left_index].second < right[right_index].second) {
      ++left_index;
    } else {
      ++right_index;
    }
  }
  return out;
}

std::string format_duration(int64_t ns) {
  char buffer[48];
  const double value = static_cast<double>(ns);
  const int64_t magnitude = ns < 0 ? -ns : ns;
  if (magnitude >= 1'000'000'000) {
    std::snprintf(buffer, sizeof(buffer), "%.3g s", value / 1e9);
  } else if (magnitude >= 1'000'000) {
    std::snprintf(buffer, sizeof(buffer), "%.3g ms", value / 1e6);
  } else if (magnitude >= 1'000) {
    std::snprintf(buffer, sizeof(buffer), "%.3g us", value / 1e3);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%lld ns", static_cast<long long>(ns));
  }
  return buffer;
}

}  // namespace loupe::trace
