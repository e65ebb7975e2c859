// check/localise.hpp — where the error of a comparison lives: the worst element's coordinates,
// the error profile along one axis and its shape in one word, and the slice (a head, a channel)
// that holds most of the squared error. Rules: docs/formats.md, "Comparison metrics".
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "check/metrics.hpp"
#include "loupe/tensor.hpp"

namespace loupe::check {

using Coords = std::vector<std::pair<std::string, int64_t>>;

// `given` when it names every axis (size == rank), else d0, d1, ...
std::vector<std::string> resolve_axis_names(int64_t rank, const std::vector<std::string>& given);
// The coordinates of C-order `flat_index` in `shape`, named by `axes` (REQUIRES: same size).
Coords coords_of(int64_t flat_index, const std::vector<int64_t>& shape,
                 const std::vector<std::string>& axes);
// "T=49152 H=1 V=17"
std::string coords_to_string(const Coords& coords);

enum class ProfileShape { kFlat, kGrowing, kConcentrated, kSpiky };
std::string_view profile_shape_name(ProfileShape shape);

// One bucket of positions [begin, end) along the profiled axis.
struct ProfileBucket {
  int64_t begin = 0;
  int64_t end = 0;
  double value = 0;          // rms(A - B) over the bucket / (rms(B) over the tensor + 1e-8)
  double squared_error = 0;  // sum of (A - B)^2 over the bucket
};

struct ProfileClassification {
  ProfileShape shape = ProfileShape::kFlat;
  double spearman = 0;          // rank correlation of value with bucket position
  double end_to_start = 0;      // mean value of the last quarter of buckets / first quarter
  double slope_per_1000 = 0;    // least-squares slope of value per 1000 positions
  int64_t region_begin = 0;     // concentrated: the smallest run of buckets holding
  int64_t region_end = 0;       //   >= 80% of squared error, as positions [begin, end)
  double region_share = 0;      //   and the share it holds
  std::vector<int64_t> spikes;  // spiky: begins of buckets above 3x the median (at most 8)
};

// The classification, in this order (docs/formats.md states the same rules):
//   flat          fewer than 2 buckets, or no error at all
//   growing       spearman >= 0.8 and end_to_start >= 2
//   concentrated  <= max(1, n/4) adjacent buckets hold >= 80% of the squared error
//   flat          max value <= 3x the median value
//   spiky         otherwise
ProfileClassification classify_profile(std::span<const ProfileBucket> buckets);

struct ErrorProfile {
  std::string axis;
  int64_t axis_index = 0;
  int64_t length = 0;                  // extent of the axis
  std::vector<ProfileBucket> buckets;  // at most kMaxProfileBuckets, equal-width up to rounding
  ProfileClassification classification;
};
inline constexpr int64_t kMaxProfileBuckets = 64;

// The slice of one axis holding the largest share of squared error, and the slices that share
// the error with it: when the error is spread over several slices alike, naming the largest one
// alone blames a different slice on every seed.
struct SliceShare {
  std::string axis;
  int64_t index = 0;
  int64_t extent = 0;
  double share = 0;  // of the tensor's squared error, in [0, 1]
  // Every slice holding at least half the top slice's share, ascending; `index` is among them.
  std::vector<int64_t> sharing;
  double sharing_share = 0;  // what they hold together
};

// Error concentrated at positions == residue (mod period) along the profiled axis.
struct Periodicity {
  int64_t period = 0;
  int64_t residue = 0;
  double share = 0;         // of the axis's squared error those positions hold
  int64_t occurrences = 0;  // positions of the class with error (>= 3)
};

// Per-position error along the profiled axis: rms(A - B) over the position's slice / (rms(B) over
// the tensor + 1e-8), the unit of the profile buckets and of rms_ratio.
//   first_exceeding  the first position whose error exceeds `threshold` (the step that first went
//                    wrong), when a threshold is given and some position exceeds it
//   periodicity      the smallest period p (2 <= p <= length/3, p <= 4096) and residue r such that
//                    the positions == r (mod p) hold >= 80 % of the squared error and >= 80 % of
//                    those positions carry error (above a tenth of the largest position's), at
//                    least 3 of them. A multiple of the true period fails the first test (the
//                    error splits over several residues); a divisor fails the second.
std::optional<int64_t> first_exceeding(std::span<const double> position_error, double threshold);
std::optional<Periodicity> find_periodicity(std::span<const double> position_error);

// The per-position (per-token) table along the profiled axis and where its error starts and jumps.
struct PositionErrors {
  std::vector<double> error;        // as position_error above
  std::vector<double> max_abs;      // max |a - b| over the position's finite pairs
  std::vector<int64_t> mismatches;  // outside the tolerance of `metrics` (NaN/Inf rule included)
  std::optional<int64_t> start;     // the first position with a mismatch
  std::optional<int64_t> jump;      // the position t >= 1 whose error is the largest multiple of
  double jump_factor = 0;           //   position t-1's (> 0), when that multiple >= kJumpFactor
};
inline constexpr double kJumpFactor = 4.0;
// start and jump from the three tables.
void find_onset(PositionErrors& positions);

struct Localisation {
  Coords worst_coords;  // empty when every position agrees
  std::optional<ErrorProfile> profile;
  std::optional<PositionErrors> positions;  // with `along`
  std::optional<int64_t> first_exceeding;   // see above; needs CompareOptions::profile_threshold
  std::optional<Periodicity> periodicity;
  // For every axis except the profiled one with extent > 1: its top slice, ordered by
  // share * extent (how many times its fair share it holds), largest first.
  std::vector<SliceShare> top_slices;
};

// Worst coordinates always; the profile, the first exceeding position, the periodicity and the
// slices only when `along` is set. Throws Error(kUsage) when `along` names no axis of `axes`.
// Positions holding NaN/Inf are left out of the profile and slices (they are counted by
// nonfinite_mismatch and located by worst_coords).
Localisation localise(const Tensor& a, const Tensor& b, const Metrics& metrics,
                      const std::vector<std::string>& axes, const std::optional<std::string>& along,
                      std::optional<double> threshold = std::nullopt);

}  // namespace loupe::check
