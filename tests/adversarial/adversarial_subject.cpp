// One small candidate per known way of gaming a harness (reference/measurement.md, "How
// kernel-writing agents have gamed harnesses"), plus honest ones that must pass every guard.
// Each probe's description names the guard that must catch it; tests/adversarial asserts it.
#include <loupe/probe.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <thread>
#include <vector>

namespace {

constexpr int64_t kColumns = 64;

void fill_normal(std::span<float> values, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& value : values) value = normal(rng);
}

loupe::CheckOutput& rows_setup(loupe::CheckSetup& setup) {
  const int64_t rows = setup.point().get_int("N");
  fill_normal(setup.input<float>("x", {rows, kColumns}, {"N", "D"}), setup.seed());
  return setup.output<float>("y", {rows}, {"N"}).along("N");
}

void rows_tight(loupe::CheckSetup& setup) { rows_setup(setup).tolerance("rms_ratio", 1e-6); }
// A tolerance loose enough for bf16 arithmetic (its rms ratio is about 1e-2, on every seed the
// hidden run may draw): only the oracle can tell the precision.
void rows_loose_with_oracle(loupe::CheckSetup& setup) {
  rows_setup(setup).tolerance("rms_ratio", 3e-2);
}

void sum_sequential(std::span<const float> x, std::span<float> y) {
  for (size_t row = 0; row < y.size(); ++row) {
    float sum = 0;
    for (int64_t column = 0; column < kColumns; ++column) sum += x[row * kColumns + column];
    y[row] = sum;
  }
}

void sum_pairwise(std::span<const float> x, std::span<float> y) {
  for (size_t row = 0; row < y.size(); ++row) {
    float partial[kColumns];
    std::memcpy(partial, &x[row * kColumns], sizeof partial);
    for (int64_t width = kColumns / 2; width >= 1; width /= 2) {
      for (int64_t column = 0; column < width; ++column) partial[column] += partial[column + width];
    }
    y[row] = partial[0];
  }
}

float to_bfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;  // round to nearest even
  std::memcpy(&value, &bits, sizeof bits);
  return value;
}

void reference(loupe::CheckIo& io) { sum_sequential(io.input<float>("x"), io.output<float>("y")); }
void oracle(loupe::CheckIo& io) {
  std::span<const float> x = io.input<float>("x");
  std::span<double> y = io.output<double>("y");
  for (size_t row = 0; row < y.size(); ++row) {
    double sum = 0;
    for (int64_t column = 0; column < kColumns; ++column) sum += x[row * kColumns + column];
    y[row] = sum;
  }
}

std::vector<float>& shared_block() {
  static std::vector<float> block;
  return block;
}

// --- bench work --------------------------------------------------------------------------------

struct Vector {
  std::vector<float> x;
  float result = 0;
  bool pending = false;  // lazy: the result is computed when someone reads it
};

Vector make_vector(int64_t size, uint64_t seed) {
  Vector work;
  work.x.resize(static_cast<size_t>(size));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& value : work.x) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    value = static_cast<float>(static_cast<int32_t>(state >> 32)) * (1.0f / 2147483648.0f);
  }
  return work;
}

// `passes` sweeps of sum of squares: enough arithmetic per element that reading (or hashing) the
// input is a small part of a call.
float sum_of_squares(const std::vector<float>& x, int passes) {
  float total = 0;
  for (int pass = 0; pass < passes; ++pass) {
    float sum = 0;
    for (float value : x) sum += value * value * (1.0f + 1e-3f * static_cast<float>(pass));
    total += sum;
  }
  return total;
}

std::vector<loupe::NamedTensor> result_tensor(const Vector& work) {
  float value = work.result;
  if (work.pending) value = sum_of_squares(work.x, 1);
  loupe::Tensor tensor(loupe::DType::kF32, {1});
  tensor.mutable_data<float>()[0] = value;
  return {{"result", tensor}};
}

uint64_t content_hash(const std::vector<float>& x) {
  uint64_t hash = 1469598103934665603ull;
  const auto* words = reinterpret_cast<const uint32_t*>(x.data());
  for (size_t index = 0; index < x.size(); ++index) hash = (hash ^ words[index]) * 1099511628211ull;
  return hash;
}

constexpr int64_t kBenchSize = 4096;
constexpr int kHeavyPasses = 32;

}  // namespace

// --- honest: must pass every guard -----------------------------------------------------------

LOUPE_CHECK(honest_check)
    .description("pairwise row sums with an oracle and a hidden point: passes every guard")
    .param("N", 1024, {256, 1024})
    .hidden_point({{"N", int64_t{777}}})
    .hidden_range("N", 600, 1000)
    .inputs([](loupe::CheckSetup& setup) {
      rows_setup(setup).tolerance("rms_ratio", 1e-6).tolerance_vs_oracle("rms_ratio", 10.0);
    })
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      sum_pairwise(io.input<float>("x"), io.output<float>("y"));
    })
    .oracle(oracle);

LOUPE_BENCH(honest_bench)
    .description("sum of squares, one pass against two, work declared: passes every guard")
    .body([](loupe::BenchState& state) {
      state.set_bytes_per_call(4.0 * kBenchSize);
      state.set_flops_per_call(3.0 * kBenchSize * kHeavyPasses);
      state.exec(
          [](uint64_t seed) { return make_vector(kBenchSize, seed); },
          {{"heavy", [](Vector& work) { work.result = sum_of_squares(work.x, kHeavyPasses); }}},
          result_tensor);
    });

namespace {

// A timer for work on "another device": timed by the steady clock, with a device ceiling the
// bench chooses. The roofline guard must judge the claim against that ceiling, not this CPU's.
class AcceleratorTimer final : public loupe::Timer {
 public:
  explicit AcceleratorTimer(double bytes_per_s) : bytes_per_s_(bytes_per_s) {}
  std::string_view name() const override { return "test_accelerator_clock"; }
  void start() override { clock_.start(); }
  double stop() override { return clock_.stop(); }
  std::optional<loupe::DeviceCeiling> ceiling(double /*bytes_per_call*/) override {
    return loupe::DeviceCeiling{"test accelerator", "declared by the test subject", bytes_per_s_,
                                4};
  }

 private:
  loupe::SteadyClockTimer clock_;
  double bytes_per_s_;
};

}  // namespace

LOUPE_BENCH(offloaded_bench)
    .description(
        "claims 1 GB moved per call on an accelerator whose ceiling the timer reports: judged "
        "against that device (generous: passes; slow: guard.roofline naming the device)")
    .param("ceiling", "generous", {"generous", "slow"})
    .body([](loupe::BenchState& state) {
      const bool generous = state.get_string("ceiling") == "generous";
      state.set_timer(std::make_unique<AcceleratorTimer>(generous ? 1e15 : 1e9));
      state.set_bytes_per_call(1e9);
      state.exec(
          [](uint64_t seed) { return make_vector(kBenchSize, seed); },
          {{"heavy", [](Vector& work) { work.result = sum_of_squares(work.x, kHeavyPasses); }}},
          result_tensor);
    });

// --- adversarial checks ------------------------------------------------------------------------

LOUPE_CHECK(reuse_reference_buffer)
    .description("returns the buffer the reference left its result in: guard.output_alias")
    .param("N", 1024, {256, 1024})
    .inputs(rows_tight)
    .reference([](loupe::CheckIo& io) {
      std::vector<float>& block = shared_block();
      block.assign(io.output_tensor("y").numel(), 0.0f);
      sum_sequential(io.input<float>("x"), block);
      io.bind_output("y", block.data());
    })
    .candidate([](loupe::CheckIo& io) {
      std::vector<float>& block = shared_block();
      block.resize(io.output_tensor("y").numel());
      io.bind_output("y", block.data());  // no work: whatever the reference left
    });

LOUPE_CHECK(mutate_input)
    .description("zeroes its input so every path agrees on zeros: guard.input_mutation")
    .param("N", 1024, {256, 1024})
    .inputs(rows_tight)
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<const float> x = io.input<float>("x");
      std::fill(const_cast<float*>(x.data()), const_cast<float*>(x.data()) + x.size(), 0.0f);
      std::span<float> y = io.output<float>("y");
      std::fill(y.begin(), y.end(), 0.0f);
    });

LOUPE_CHECK(partial_write)
    .description("writes the first half of its output only: guard.output_unwritten")
    .param("N", 1024, {256, 1024})
    .inputs(rows_tight)
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      std::vector<float> full(y.size());
      sum_sequential(io.input<float>("x"), full);
      std::copy(full.begin(), full.begin() + full.size() / 2, y.begin());
    });

LOUPE_CHECK(nan_output)
    .description("writes NaN everywhere, hoping '<' comparisons pass: guard.nonfinite")
    .param("N", 1024, {256, 1024})
    .inputs(rows_tight)
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
    });

LOUPE_CHECK(vacuous_reference)
    .description(
        "a reference that is nearly constant (1000 + 1e-4 x row sum), so a constant candidate "
        "passes: guard.cannot_discriminate")
    .param("N", 1024, {256, 1024})
    .inputs([](loupe::CheckSetup& setup) { rows_setup(setup).tolerance("rms_ratio", 1e-5); })
    .reference([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      sum_sequential(io.input<float>("x"), y);
      for (float& value : y) value = 1000.0f + 1e-4f * value;
    })
    .candidate([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      std::fill(y.begin(), y.end(), 1000.0f);  // never reads its input
    });

LOUPE_CHECK(hardcoded_shape)
    .description(
        "right for the shown N (256, 1024), wrong for any other: guard.hidden_point (N drawn "
        "from 700 to 760)")
    .param("N", 1024, {256, 1024})
    .hidden_point({{"N", int64_t{777}}})
    .hidden_range("N", 700, 760)
    .inputs(rows_tight)
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<const float> x = io.input<float>("x");
      std::span<float> y = io.output<float>("y");
      // "Tiles" of 256 rows; the tail of any other N is left as zeros.
      const size_t full_tiles = y.size() / 256 * 256;
      std::fill(y.begin(), y.end(), 0.0f);
      sum_sequential(x.first(full_tiles * kColumns), y.first(full_tiles));
    });

LOUPE_CHECK(bf16_downgrade)
    .description(
        "an 'fp32' output computed in bf16, within a loose tolerance: guard.precision (oracle)")
    .param("N", 1024, {256, 1024})
    .inputs(rows_loose_with_oracle)
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<const float> x = io.input<float>("x");
      std::span<float> y = io.output<float>("y");
      for (size_t row = 0; row < y.size(); ++row) {
        float sum = 0;
        for (int64_t column = 0; column < kColumns; ++column) {
          sum = to_bfloat16(sum + to_bfloat16(x[row * kColumns + column]));
        }
        y[row] = sum;
      }
    })
    .oracle(oracle);

// TF32's rounding: 10 mantissa bits kept, to nearest (tensor cores round their inputs so).
float to_tf32(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits = (bits + 0xFFFu + ((bits >> 13) & 1u)) & 0xFFFFE000u;
  std::memcpy(&value, &bits, sizeof bits);
  return value;
}

// Every input rounded to TF32, sums kept in fp32: an error against the oracle thousands of times
// the reference's own, the GPU's tensor-core arithmetic, declared (an honest candidate: its
// tolerance judges it, guard.precision stays silent); the twin below does not declare it.
void tf32_row_sums(loupe::CheckIo& io) {
  std::span<const float> x = io.input<float>("x");
  std::span<float> y = io.output<float>("y");
  for (size_t row = 0; row < y.size(); ++row) {
    float sum = 0;
    for (int64_t column = 0; column < kColumns; ++column)
      sum += to_tf32(x[row * kColumns + column]);
    y[row] = sum;
  }
}

LOUPE_CHECK(tf32_inputs_declared)
    .description("inputs rounded to TF32, declared .approximate: honest, passes every guard")
    .param("N", 1024, {256, 1024})
    .inputs([](loupe::CheckSetup& setup) {
      rows_setup(setup).tolerance("rms_ratio", 3e-2).approximate("TF32 inputs, fp32 sums");
    })
    .reference(reference)
    .candidate(tf32_row_sums)
    .oracle(oracle);

LOUPE_CHECK(tf32_inputs_undeclared)
    .description("inputs rounded to TF32, not declared: guard.precision (oracle)")
    .param("N", 1024, {256, 1024})
    .inputs(rows_loose_with_oracle)
    .reference(reference)
    .candidate(tf32_row_sums)
    .oracle(oracle);

// A chain: y[n] is the running total of the row sums up to row n. The candidate carries the
// total truncated to TF32 (round toward zero, as incident 1's merges did): the first rows are
// exact and the error compounds along N.
void running_totals(loupe::CheckIo& io, bool truncate) {
  std::span<const float> x = io.input<float>("x");
  std::span<float> y = io.output<float>("y");
  float carried = 0;
  for (size_t row = 0; row < y.size(); ++row) {
    float sum = 0;
    for (int64_t column = 0; column < kColumns; ++column) sum += x[row * kColumns + column];
    const float total = carried + sum;
    y[row] = total;  // written at fp32: only what is carried to the next row is truncated
    carried = total;
    if (truncate && row >= y.size() / 8) {
      uint32_t bits;
      std::memcpy(&bits, &carried, sizeof bits);
      bits &= 0xFFFFE000u;
      std::memcpy(&carried, &bits, sizeof bits);
    }
  }
}

LOUPE_CHECK(truncated_chain)
    .description(
        "a running total carried in truncated TF32 after the first eighth of the rows: "
        "guard.precision says the error compounds along N")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) {
      const int64_t rows = setup.point().get_int("N");
      fill_normal(setup.input<float>("x", {rows, kColumns}, {"N", "D"}), setup.seed() + 1);
      setup.output<float>("y", {rows}, {"N"}).along("N").tolerance("rms_ratio", 1e-6);
    })
    .reference([](loupe::CheckIo& io) { running_totals(io, false); })
    .candidate([](loupe::CheckIo& io) { running_totals(io, true); })
    .oracle([](loupe::CheckIo& io) {
      std::span<const float> x = io.input<float>("x");
      std::span<double> y = io.output<double>("y");
      double total = 0;
      for (size_t row = 0; row < y.size(); ++row) {
        for (int64_t column = 0; column < kColumns; ++column) total += x[row * kColumns + column];
        y[row] = total;
      }
    });

// Regression (guard_precision_blamed_float8_for_a_masking_bug): a candidate that zeroes every 64th
// row (a wrong mask) has an error against the oracle near float8's roundoff; the precision guard
// must not call it float8 arithmetic.
LOUPE_CHECK(masking_bug)
    .description("zeroes rows == 63 (mod 64), a mask off by a row: an error that is not rounding")
    .param("N", 1024, {1024})
    .inputs(rows_loose_with_oracle)
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      sum_sequential(io.input<float>("x"), y);
      for (size_t row = 63; row < y.size(); row += 64) y[row] = 0.0f;
    })
    .oracle(oracle);

// Regression (nonfinite_reference_called_zero): a reference that is mostly Inf/NaN was reported
// as "zero (rms 0)"; it is its own finding.
LOUPE_CHECK(nonfinite_reference)
    .description("a reference that overflows in 7 rows of 8: guard.nonfinite_reference")
    .param("N", 1024, {1024})
    .inputs(rows_tight)
    .reference([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      sum_sequential(io.input<float>("x"), y);
      for (size_t row = 0; row < y.size(); ++row) {
        if (row % 8 != 0)
          y[row] = row % 2 == 0 ? std::numeric_limits<float>::infinity()
                                : std::numeric_limits<float>::quiet_NaN();
      }
    })
    .candidate(reference);

// --- adversarial benches -------------------------------------------------------------------------

namespace {

// Hands freed blocks back first (last freed, first reused), as glibc's malloc does for blocks of
// one size: the reuse a pointer-keyed cache feeds on, made independent of the build's allocator
// (AddressSanitizer's quarantine would otherwise keep every address fresh and the cheat idle).
template <typename T>
struct RecyclingAllocator {
  using value_type = T;
  RecyclingAllocator() = default;
  template <typename U>
  RecyclingAllocator(const RecyclingAllocator<U>&) {}
  // Never destroyed: the blocks stay reachable for the leak checker after static destructors.
  static std::map<size_t, std::vector<T*>>& free_blocks() {
    static auto* blocks = new std::map<size_t, std::vector<T*>>();
    return *blocks;
  }
  static std::mutex& mutex() {
    static auto* instance = new std::mutex();
    return *instance;
  }
  T* allocate(size_t count) {
    std::lock_guard lock(mutex());
    auto& blocks = free_blocks()[count];
    if (blocks.empty()) return std::allocator<T>().allocate(count);
    T* block = blocks.back();
    blocks.pop_back();
    return block;
  }
  void deallocate(T* block, size_t count) {
    std::lock_guard lock(mutex());
    free_blocks()[count].push_back(block);
  }
  bool operator==(const RecyclingAllocator&) const { return true; }
};

struct RecycledVector {
  std::vector<float, RecyclingAllocator<float>> x;
  float result = 0;
};

RecycledVector make_recycled_vector(int64_t size, uint64_t seed) {
  const Vector fresh = make_vector(size, seed);
  RecycledVector work;
  work.x.assign(fresh.x.begin(), fresh.x.end());
  return work;
}

}  // namespace

LOUPE_BENCH(pointer_cache)
    .description("replays results cached by input address: guard.verify_mismatch")
    .body([](loupe::BenchState& state) {
      state.exec([](uint64_t seed) { return make_recycled_vector(kBenchSize, seed); },
                 [](RecycledVector& work) {
                   // Freed input sets come back at the same addresses with other content.
                   static std::map<const float*, float> cache;
                   if (auto hit = cache.find(work.x.data()); hit != cache.end()) {
                     work.result = hit->second;
                     return;
                   }
                   const std::vector<float> values(work.x.begin(), work.x.end());
                   work.result = sum_of_squares(values, kHeavyPasses);
                   cache[work.x.data()] = work.result;
                 },
                 [](const RecycledVector& work) {
                   loupe::Tensor tensor(loupe::DType::kF32, {1});
                   tensor.mutable_data<float>()[0] = work.result;
                   return std::vector<loupe::NamedTensor>{{"result", tensor}};
                 });
    });

LOUPE_BENCH(content_cache)
    .description("replays correct results cached by input content: guard.content_cache")
    .body([](loupe::BenchState& state) {
      state.exec([](uint64_t seed) { return make_vector(kBenchSize, seed); },
                 [](Vector& work) {
                   static std::map<uint64_t, float> cache;
                   const uint64_t key = content_hash(work.x);
                   if (auto hit = cache.find(key); hit != cache.end()) {
                     work.result = hit->second;
                     return;
                   }
                   work.result = sum_of_squares(work.x, kHeavyPasses);
                   cache[key] = work.result;
                 },
                 result_tensor);
    });

LOUPE_BENCH(detached_thread)
    .description("does the work on a detached thread the timer never waits for: guard.thread_count")
    .body([](loupe::BenchState& state) {
      state.exec([](uint64_t seed) { return make_vector(kBenchSize, seed); },
                 [](Vector& work) {
                   // A copy: the input set is freed before the thread is done with it.
                   std::thread([x = work.x] {
                     volatile float result = sum_of_squares(x, kHeavyPasses / 4);
                     (void)result;
                   }).detach();
                 });
    });

LOUPE_BENCH(lazy_speedup)
    .description(
        "declares 4 MiB read per call but defers the work to the output accessor: "
        "guard.roofline")
    .body([](loupe::BenchState& state) {
      constexpr int64_t kSize = 1 << 20;
      state.set_bytes_per_call(4.0 * kSize);
      state.exec([](uint64_t seed) { return make_vector(kSize, seed); },
                 [](Vector& work) { work.pending = true; }, result_tensor);
    });

int main(int argc, char** argv) { return loupe::subject_main(argc, argv); }
