// The group-sequential look on paired ratios (see sequential.hpp).
#include "bench/sequential.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "bench/compare.hpp"

namespace loupe::bench {
namespace {

std::string format_number(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.3g", value);
  return buffer;
}

}  // namespace

std::vector<int64_t> sequential_looks(int64_t total) {
  std::vector<int64_t> looks;
  auto add = [&](int64_t look) {
    if (look < total) looks.push_back(look);
  };
  add(kFirstLook);
  add(5);
  for (int64_t look = 8; look < total; look *= 2) {
    add(look);
    add(look * 3 / 2);
  }
  return looks;
}

SequentialDecision sequential_look(std::span<const double> ratios, double bound, bool above,
                                   int64_t looks, double alpha, bool paired) {
  SequentialDecision decision;
  decision.alpha = alpha / static_cast<double>(std::max<int64_t>(1, looks));
  // Each ratio over the bound, turned so that "beyond the bound" is above 1 either way.
  std::vector<double> scaled;
  for (double ratio : ratios) {
    if (!(ratio > 0.0) || !std::isfinite(ratio)) continue;
    scaled.push_back(above ? ratio / bound : bound / ratio);
  }
  decision.n = static_cast<int64_t>(scaled.size());
  const std::string side = above ? "above" : "below";
  const std::string many = paired ? " pairs" : " repeats";
  const std::string value = paired ? "ratio" : "value";
  if (decision.n < kFirstLook) {
    decision.rule = "undecided: " + std::to_string(decision.n) +
                    (paired ? " pair(s)" : " repeat(s)") + ", fewer than the " +
                    std::to_string(kFirstLook) + " of the first look";
    return decision;
  }
  std::vector<double> sorted = scaled;
  std::sort(sorted.begin(), sorted.end());
  const size_t middle = sorted.size() / 2;
  const double median_scaled =
      sorted.size() % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2.0;
  decision.estimate = above ? median_scaled * bound : bound / median_scaled;
  decision.beyond = std::count_if(scaled.begin(), scaled.end(), [](double v) { return v > 1.0; });
  const double two_sided = trimmed_t_p(scaled);
  decision.p_value = median_scaled > 1.0 ? two_sided / 2.0 : 1.0 - two_sided / 2.0;
  const int64_t allowed_short = decision.n / 5;  // what the 20 % trimming drops on that side
  const bool enough_beyond = decision.n - decision.beyond <= allowed_short;
  const std::string counts = std::to_string(decision.beyond) + " of " + std::to_string(decision.n) +
                             (paired ? " pair ratios " : " values ") + side + " " +
                             format_number(bound) + " (median " + format_number(decision.estimate) +
                             ")";
  const std::string test = "one-sided 20 %-trimmed t-test on log(" + value + " / " +
                           format_number(bound) + ") p = " + format_number(decision.p_value) +
                           " against " + format_number(decision.alpha) + " (" +
                           format_number(alpha) + " spent over " +
                           std::to_string(std::max<int64_t>(1, looks)) + " looks)";
  if (enough_beyond && decision.p_value <= decision.alpha) {
    decision.side = above ? SequentialSide::kAbove : SequentialSide::kBelow;
    decision.rule = side + " beyond doubt after " + std::to_string(decision.n) + many + ": " +
                    counts + ", " + test;
  } else {
    decision.rule =
        "undecided after " + std::to_string(decision.n) + many + ": " + counts + ", " + test +
        (enough_beyond
             ? ""
             : "; more than " + std::to_string(allowed_short) + " at or on the other side of it");
  }
  return decision;
}

}  // namespace loupe::bench
