#include "check/localise.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "loupe/error.hpp"

namespace loupe::check {
namespace {

// Ranks 1..n with ties given their average rank.
std::vector<double> average_ranks(std::span<const double> values) {
  const size_t count = values.size();
  std::vector<size_t> order(count);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t left, size_t right) { return values[left] < values[right]; });
  std::vector<double> ranks(count);
  size_t start = 0;
  while (start < count) {
    size_t stop = start + 1;
    while (stop < count && values[order[stop]] == values[order[start]]) ++stop;
    const double rank = (static_cast<double>(start + 1) + static_cast<double>(stop)) / 2.0;
    for (size_t position = start; position < stop; ++position) ranks[order[position]] = rank;
    start = stop;
  }
  return ranks;
}

double pearson(std::span<const double> x, std::span<const double> y) {
  const double count = static_cast<double>(x.size());
  const double mean_x = std::accumulate(x.begin(), x.end(), 0.0) / count;
  const double mean_y = std::accumulate(y.begin(), y.end(), 0.0) / count;
  double covariance = 0, variance_x = 0, variance_y = 0;
  for (size_t index = 0; index < x.size(); ++index) {
    covariance += (x[index] - mean_x) * (y[index] - mean_y);
    variance_x += (x[index] - mean_x) * (x[index] - mean_x);
    variance_y += (y[index] - mean_y) * (y[index] - mean_y);
  }
  if (variance_x == 0 || variance_y == 0) return 0;
  return covariance / std::sqrt(variance_x * variance_y);
}

double median_of(std::vector<double> values) {
  const size_t middle = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + middle, values.end());
  double upper = values[middle];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + middle);
  return (lower + upper) / 2;
}

}  // namespace

std::vector<std::string> resolve_axis_names(int64_t rank, const std::vector<std::string>& given) {
  if (static_cast<int64_t>(given.size()) == rank) return given;
  std::vector<std::string> names;
  for (int64_t axis = 0; axis < rank; ++axis) names.push_back("d" + std::to_string(axis));
  return names;
}

Coords coords_of(int64_t flat_index, const std::vector<int64_t>& shape,
                 const std::vector<std::string>& axes) {
  Coords coords(shape.size());
  for (size_t axis = shape.size(); axis-- > 0;) {
    const int64_t extent = std::max<int64_t>(shape[axis], 1);
    coords[axis] = {axes[axis], flat_index % extent};
    flat_index /= extent;
  }
  return coords;
}

std::string coords_to_string(const Coords& coords) {
  std::string out;
  for (const auto& [name, index] : coords) {
    if (!out.empty()) out += ' ';
    out += name + "=" + std::to_string(index);
  }
  return out;
}

std::string_view profile_shape_name(ProfileShape shape) {
  switch (shape) {
    case ProfileShape::kFlat:
      return "flat";
    case ProfileShape::kGrowing:
      return "growing";
    case ProfileShape::kConcentrated:
      return "concentrated";
    case ProfileShape::kSpiky:
      return "spiky";
  }
  return "flat";
}

ProfileClassification classify_profile(std::span<const ProfileBucket> buckets) {
  ProfileClassification result;
  const size_t count = buckets.size();
  double total = 0;
  for (const auto& bucket : buckets) total += bucket.squared_error;
  if (count < 2 || !(total > 0)) return result;

  std::vector<double> values(count), positions(count), indices(count);
  for (size_t index = 0; index < count; ++index) {
    values[index] = buckets[index].value;
    positions[index] = (static_cast<double>(buckets[index].begin) + buckets[index].end) / 2.0;
    indices[index] = static_cast<double>(index);
  }
  result.spearman = pearson(average_ranks(indices), average_ranks(values));
  const size_t quarter = std::max<size_t>(1, count / 4);
  double first = 0, last = 0;
  for (size_t index = 0; index < quarter; ++index) {
    first += values[index];
    last += values[count - 1 - index];
  }
  result.end_to_start = first > 0 ? last / first : (last > 0 ? INFINITY : 1.0);
  // Least-squares slope of value against position (centre of each bucket).
  const double mean_position = std::accumulate(positions.begin(), positions.end(), 0.0) / count;
  const double mean_value = std::accumulate(values.begin(), values.end(), 0.0) / count;
  double covariance = 0, variance = 0;
  for (size_t index = 0; index < count; ++index) {
    covariance += (positions[index] - mean_position) * (values[index] - mean_value);
    variance += (positions[index] - mean_position) * (positions[index] - mean_position);
  }
  result.slope_per_1000 = variance > 0 ? 1000.0 * covariance / variance : 0.0;

  if (result.spearman >= 0.8 && result.end_to_start >= 2) {
    result.shape = ProfileShape::kGrowing;
    return result;
  }

  // Smallest run of adjacent buckets holding >= 80% of the squared error (two pointers).
  size_t best_begin = 0, best_end = count;
  double window = 0;
  size_t begin = 0;
  for (size_t end = 0; end < count; ++end) {
    window += buckets[end].squared_error;
    while (begin <= end && window - buckets[begin].squared_error >= 0.8 * total) {
      window -= buckets[begin].squared_error;
      ++begin;
    }
    if (window >= 0.8 * total && end + 1 - begin < best_end - best_begin) {
      best_begin = begin;
      best_end = end + 1;
    }
  }
  if (best_end - best_begin <= std::max<size_t>(1, count / 4)) {
    result.shape = ProfileShape::kConcentrated;
    result.region_begin = buckets[best_begin].begin;
    result.region_end = buckets[best_end - 1].end;
    double held = 0;
    for (size_t index = best_begin; index < best_end; ++index) held += buckets[index].squared_error;
    result.region_share = held / total;
    return result;
  }

  const double median = median_of(values);
  const double maximum = *std::max_element(values.begin(), values.end());
  if (maximum <= 3 * median) return result;  // flat
  result.shape = ProfileShape::kSpiky;
  for (size_t index = 0; index < count && result.spikes.size() < 8; ++index) {
    if (values[index] > 3 * median) result.spikes.push_back(buckets[index].begin);
  }
  return result;
}

std::optional<int64_t> first_exceeding(std::span<const double> position_error, double threshold) {
  for (size_t position = 0; position < position_error.size(); ++position) {
    if (position_error[position] > threshold) return static_cast<int64_t>(position);
  }
  return std::nullopt;
}

std::optional<Periodicity> find_periodicity(std::span<const double> position_error) {
  const int64_t length = static_cast<int64_t>(position_error.size());
  double total = 0, largest = 0;
  for (double value : position_error) {
    total += value * value;
    largest = std::max(largest, value);
  }
  if (length < 6 || !(total > 0)) return std::nullopt;
  // A position "carries error" above a tenth of the worst one: rounding noise sits orders of
  // magnitude below a planted or structural error, and must not count as a hit.
  const double hot = 0.1 * largest;
  const int64_t max_period = std::min<int64_t>(length / 3, 4096);
  std::vector<double> class_error;
  std::vector<int64_t> class_hot, class_size;
  for (int64_t period = 2; period <= max_period; ++period) {
    class_error.assign(static_cast<size_t>(period), 0.0);
    class_hot.assign(static_cast<size_t>(period), 0);
    class_size.assign(static_cast<size_t>(period), 0);
    for (int64_t position = 0; position < length; ++position) {
      const double value = position_error[static_cast<size_t>(position)];
      const size_t residue = static_cast<size_t>(position % period);
      class_error[residue] += value * value;
      class_size[residue] += 1;
      if (value > hot) class_hot[residue] += 1;
    }
    const size_t best = static_cast<size_t>(
        std::max_element(class_error.begin(), class_error.end()) - class_error.begin());
    const double share = class_error[best] / total;
    if (share < 0.8 || class_hot[best] < 3) continue;
    if (static_cast<double>(class_hot[best]) < 0.8 * static_cast<double>(class_size[best])) {
      continue;
    }
    return Periodicity{period, static_cast<int64_t>(best), share, class_hot[best]};
  }
  return std::nullopt;
}

void find_onset(PositionErrors& positions) {
  positions.start.reset();
  positions.jump.reset();
  positions.jump_factor = 0;
  for (size_t position = 0; position < positions.mismatches.size(); ++position) {
    if (positions.mismatches[position] > 0) {
      positions.start = static_cast<int64_t>(position);
      break;
    }
  }
  double largest = 0;
  size_t at = 0;
  for (size_t position = 1; position < positions.error.size(); ++position) {
    const double before = positions.error[position - 1];
    if (!(before > 0)) continue;
    const double factor = positions.error[position] / before;
    if (factor > largest) {
      largest = factor;
      at = position;
    }
  }
  if (largest >= kJumpFactor) {
    positions.jump = static_cast<int64_t>(at);
    positions.jump_factor = largest;
  }
}

Localisation localise(const Tensor& a, const Tensor& b, const Metrics& metrics,
                      const std::vector<std::string>& axes, const std::optional<std::string>& along,
                      std::optional<double> threshold) {
  Localisation result;
  const std::vector<int64_t>& shape = a.shape();
  if (metrics.worst_index >= 0) result.worst_coords = coords_of(metrics.worst_index, shape, axes);
  if (!along) return result;

  const auto found = std::find(axes.begin(), axes.end(), *along);
  if (found == axes.end()) {
    std::string names;
    for (const auto& name : axes) names += (names.empty() ? "" : ",") + name;
    throw Error(ErrorCode::kUsage, "--along " + *along + ": no such axis; the axes are " + names,
                "name the axes with --axes (e.g. --axes B,T,H,V) and profile along one of them");
  }
  const size_t along_axis = static_cast<size_t>(found - axes.begin());
  const int64_t length = shape[along_axis];
  const int64_t bucket_count = std::min(length, kMaxProfileBuckets);

  // Squared error per position along `along_axis`, and per index of every axis.
  std::vector<std::vector<double>> per_axis(shape.size());
  for (size_t axis = 0; axis < shape.size(); ++axis) per_axis[axis].assign(shape[axis], 0.0);
  std::vector<int64_t> finite_per_position(length, 0);
  PositionErrors positions;
  positions.max_abs.assign(static_cast<size_t>(length), 0.0);
  positions.mismatches.assign(static_cast<size_t>(length), 0);
  const Tolerance& tolerance = metrics.tolerance;
  std::vector<int64_t> coords(shape.size(), 0);
  constexpr int64_t kChunk = 4096;
  std::vector<double> values_a(kChunk), values_b(kChunk);
  const int64_t numel = a.numel();
  for (int64_t begin = 0; begin < numel; begin += kChunk) {
    const int64_t count = std::min(kChunk, numel - begin);
    detail::decode_to_double(a, begin, count, values_a.data());
    detail::decode_to_double(b, begin, count, values_b.data());
    for (int64_t offset = 0; offset < count; ++offset) {
      const double value_a = values_a[offset];
      const double value_b = values_b[offset];
      const auto position = static_cast<size_t>(coords[along_axis]);
      if (std::isfinite(value_a) && std::isfinite(value_b)) {
        const double squared = (value_a - value_b) * (value_a - value_b);
        for (size_t axis = 0; axis < shape.size(); ++axis) per_axis[axis][coords[axis]] += squared;
        ++finite_per_position[coords[along_axis]];
        const double abs_diff = std::fabs(value_a - value_b);
        positions.max_abs[position] = std::max(positions.max_abs[position], abs_diff);
        positions.mismatches[position] +=
            abs_diff > tolerance.atol + tolerance.rtol * std::fabs(value_b);
      } else {
        const bool agree = value_a == value_b ||
                           (tolerance.equal_nan && std::isnan(value_a) && std::isnan(value_b));
        positions.mismatches[position] += !agree;
      }
      for (size_t axis = shape.size(); axis-- > 0;) {  // C-order odometer
        if (++coords[axis] < shape[axis]) break;
        coords[axis] = 0;
      }
    }
  }

  ErrorProfile profile;
  profile.axis = *along;
  profile.axis_index = static_cast<int64_t>(along_axis);
  profile.length = length;
  for (int64_t bucket = 0; bucket < bucket_count; ++bucket) {
    ProfileBucket out;
    out.begin = bucket * length / bucket_count;
    out.end = (bucket + 1) * length / bucket_count;
    int64_t finite = 0;
    for (int64_t position = out.begin; position < out.end; ++position) {
      out.squared_error += per_axis[along_axis][position];
      finite += finite_per_position[position];
    }
    const double rms = finite > 0 ? std::sqrt(out.squared_error / finite) : 0.0;
    out.value = rms / (metrics.rms_b + 1e-8);
    profile.buckets.push_back(out);
  }
  profile.classification = classify_profile(profile.buckets);
  result.profile = std::move(profile);

  std::vector<double> position_error(static_cast<size_t>(length), 0.0);
  for (int64_t position = 0; position < length; ++position) {
    const int64_t finite = finite_per_position[position];
    position_error[static_cast<size_t>(position)] =
        finite > 0 ? std::sqrt(per_axis[along_axis][position] / static_cast<double>(finite)) /
                         (metrics.rms_b + 1e-8)
                   : 0.0;
  }
  if (threshold) result.first_exceeding = first_exceeding(position_error, *threshold);
  result.periodicity = find_periodicity(position_error);
  positions.error = position_error;
  find_onset(positions);
  result.positions = std::move(positions);

  double total = 0;
  for (double squared : per_axis[along_axis]) total += squared;
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    if (axis == along_axis || shape[axis] <= 1 || !(total > 0)) continue;
    const auto& sums = per_axis[axis];
    const auto top = std::max_element(sums.begin(), sums.end());
    SliceShare slice{
        axes[axis], static_cast<int64_t>(top - sums.begin()), shape[axis], *top / total, {}, 0.0};
    for (size_t index = 0; index < sums.size(); ++index) {
      if (sums[index] >= 0.5 * *top) {
        slice.sharing.push_back(static_cast<int64_t>(index));
        slice.sharing_share += sums[index] / total;
      }
    }
    result.top_slices.push_back(std::move(slice));
  }
  std::stable_sort(result.top_slices.begin(), result.top_slices.end(),
                   [](const SliceShare& left, const SliceShare& right) {
                     return left.share * left.extent > right.share * right.extent;
                   });
  return result;
}

}  // namespace loupe::check
