// A subject with benches and a scenario for the tests: two variants 2x apart, three variants (for
// --variants), one that counts the input sets its process holds, a variant that leaves a thread
// running, one that replays cached results, one that
// skips, and a scenario.
#include <loupe/probe.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace {

struct Vector {
  std::vector<float> x;
  float result = 0;
};

Vector make_vector(int64_t size, uint64_t seed) {
  Vector work;
  work.x.resize(static_cast<size_t>(size));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& value : work.x) value = uniform(rng);
  return work;
}

// `passes` sweeps over x: the work is proportional to it, so 2 passes take twice as long.
void sum_of_squares(Vector& work, int passes) {
  float total = 0;
  for (int pass = 0; pass < passes; ++pass) {
    float sum = 0;
    for (float value : work.x) sum += value * value;
    total += sum;
  }
  work.result = total / static_cast<float>(passes);
}

std::vector<loupe::NamedTensor> result_tensor(const Vector& work) {
  loupe::Tensor tensor(loupe::DType::kF32, {1});
  tensor.mutable_data<float>()[0] = work.result;
  return {{"result", tensor}};
}

// Input sets alive in this process: a variant's process holds those of its last batch, and a
// verification's untimed call makes one more (held_inputs below).
int64_t live_inputs = 0;

struct CountedVector {
  Vector vector;
  float live_at_call = 0;
  explicit CountedVector(Vector made) : vector(std::move(made)) { ++live_inputs; }
  CountedVector(const CountedVector& other)
      : vector(other.vector), live_at_call(other.live_at_call) {
    ++live_inputs;
  }
  CountedVector(CountedVector&& other) noexcept
      : vector(std::move(other.vector)), live_at_call(other.live_at_call) {
    ++live_inputs;
  }
  CountedVector& operator=(const CountedVector&) = default;
  CountedVector& operator=(CountedVector&&) = default;
  ~CountedVector() { --live_inputs; }
};

}  // namespace

LOUPE_BENCH(squares)
    .description("sum of squares: one pass (base) against two passes (twice the work)")
    .param("size", 4096, {1024, 4096, 65536})
    .body([](loupe::BenchState& state) {
      const int64_t size = state.get_int("size");
      state.set_bytes_per_call(4.0 * static_cast<double>(size));
      state.set_flops_per_call(2.0 * static_cast<double>(size));
      state.exec([size](uint64_t seed) { return make_vector(size, seed); },
                 {{"base", [](Vector& work) { sum_of_squares(work, 1); }},
                  {"double", [](Vector& work) { sum_of_squares(work, 2); }}},
                 result_tensor);
    });

LOUPE_BENCH(trio)
    .description("three variants of one, two and three passes: `--variants` runs a subset")
    .body([](loupe::BenchState& state) {
      state.exec([](uint64_t seed) { return make_vector(1024, seed); },
                 {{"one", [](Vector& work) { sum_of_squares(work, 1); }},
                  {"two", [](Vector& work) { sum_of_squares(work, 2); }},
                  {"three", [](Vector& work) { sum_of_squares(work, 3); }}},
                 result_tensor);
    });

// Each call takes over a millisecond (one call per batch) and records how many input sets its
// process holds; the outputs carry that count, so a verification's untimed call agrees with the
// timed one only if the process dropped the batch's input set before making its own.
LOUPE_BENCH(held_inputs)
    .description("outputs the input sets alive at each call: a verification holds one at a time")
    .body([](loupe::BenchState& state) {
      state.exec(
          [](uint64_t seed) { return CountedVector(make_vector(1024, seed)); },
          [](CountedVector& work) {
            const auto start = std::chrono::steady_clock::now();
            do {
              sum_of_squares(work.vector, 1);
            } while (std::chrono::steady_clock::now() - start < std::chrono::microseconds(1500));
            work.live_at_call = static_cast<float>(live_inputs);
          },
          [](const CountedVector& work) {
            std::vector<loupe::NamedTensor> outputs = result_tensor(work.vector);
            loupe::Tensor live(loupe::DType::kF32, {1});
            live.mutable_data<float>()[0] = work.live_at_call;
            outputs.push_back({"live_inputs", live});
            return outputs;
          });
    });

LOUPE_BENCH(thread_leak)
    .description("each call leaves a thread running past the timer: caught by thread_count")
    .body([](loupe::BenchState& state) {
      state.exec([](uint64_t seed) { return make_vector(1024, seed); },
                 [](Vector& work) {
                   sum_of_squares(work, 1);
                   std::thread([] {
                     std::this_thread::sleep_for(std::chrono::milliseconds(20));
                   }).detach();
                 });
    });

LOUPE_BENCH(stale)
    .description("caches results keyed on the input's address: caught by verification")
    .body([](loupe::BenchState& state) {
      state.exec([](uint64_t seed) { return make_vector(4096, seed); },
                 [](Vector& work) {
                   // Freed input buffers come back at the same addresses, so this replays old
                   // results.
                   static std::map<const float*, float> cache;
                   if (auto hit = cache.find(work.x.data()); hit != cache.end()) {
                     work.result = hit->second;
                     return;
                   }
                   sum_of_squares(work, 1);
                   cache[work.x.data()] = work.result;
                 },
                 result_tensor);
    });

LOUPE_BENCH(needs_gpu)
    .description("skips itself: the observation carries the reason")
    .body([](loupe::BenchState& state) { state.skip("needs a GPU"); });

LOUPE_SCENARIO(pipeline)
    .description("a toy pipeline: records tokens_per_s and a Chrome JSON trace")
    .param("tokens", 1000, {1000, 4000})
    .body([](loupe::ScenarioState& state) {
      const int64_t tokens = state.point().get_int("tokens");
      Vector work = make_vector(tokens, state.seed());
      const auto start = std::chrono::steady_clock::now();
      sum_of_squares(work, 4);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      state.record_metric("tokens_per_s", static_cast<double>(tokens) / std::max(seconds, 1e-9));
      std::ofstream trace(state.out_dir() / "trace.json");
      trace << R"({"traceEvents":[{"name":"sum","ph":"X","ts":0,"dur":)"
            << static_cast<int64_t>(seconds * 1e6) << R"(,"pid":1,"tid":1}]})"
            << "\n";
      state.add_trace("trace.json");
    });

int main(int argc, char** argv) { return loupe::subject_main(argc, argv); }
