// Helpers shared by kda's unit tests: the rms ratio every kda check reports.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace kda::testing {

// rms(candidate − reference) / rms(reference), accumulated in double.
template <class A, class B>
double rms_ratio(const std::vector<A>& candidate, const std::vector<B>& reference, size_t begin = 0,
                 size_t end = static_cast<size_t>(-1)) {
  if (end > reference.size()) end = reference.size();
  double diff_sq = 0.0, ref_sq = 0.0;
  for (size_t idx = begin; idx < end; ++idx) {
    const double diff = static_cast<double>(candidate[idx]) - static_cast<double>(reference[idx]);
    diff_sq += diff * diff;
    ref_sq += static_cast<double>(reference[idx]) * static_cast<double>(reference[idx]);
  }
  return std::sqrt(diff_sq / ref_sq);
}

}  // namespace kda::testing
