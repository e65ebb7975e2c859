// isolated_harness_bench — the bench harness as a subject meets it since round 2 (issue 16): every
// variant in a child process of its own, driven and checked by the runtime process, decided by
// `loupe probe run`. Measures what harness_bench measures for the in-process sampler — A/A false
// verdicts, sensitivity to a 3 % slower body, time to verdict for a ~100 µs body — end to end,
// plus the isolation's overhead per timed call, and the machine's load average around each row.
// The A/B comparison it exercises is the tool's own: paired by round (src/bench compare_paired).
//   build/bin/isolated_harness_bench measure [--comparisons N] [--loupe build/bin/loupe]
// The same binary is the subject it measures (`isolated_harness_bench list|run ...`).
#include <loupe/probe.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

// A dependent chain of integer and floating-point arithmetic, as in harness_bench: time linear
// in `iterations`, nothing to hoist.
__attribute__((noinline)) double arithmetic_body(int64_t iterations) {
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  double accumulator = 0.0;
  for (int64_t step = 0; step < iterations; ++step) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    accumulator += static_cast<double>(state >> 40) * 1e-7;
    accumulator *= 0.999999;
  }
  return accumulator;
}

struct Work {
  double result = 0;
};

// About 100 µs on the development machine.
constexpr int64_t kIterations = 60000;

}  // namespace

LOUPE_BENCH(aa)
    .description("two identical ~100 us bodies: any verdict but SAME/AMBIGUOUS is false")
    .body([](loupe::BenchState& state) {
      state.exec([](uint64_t) { return Work{}; },
                 {{"a", [](Work& work) { work.result = arithmetic_body(kIterations); }},
                  {"b", [](Work& work) { work.result = arithmetic_body(kIterations); }}});
    });

LOUPE_BENCH(slower3)
    .description("B runs 3 % more iterations than A: SLOWER is right")
    .body([](loupe::BenchState& state) {
      state.exec([](uint64_t) { return Work{}; },
                 {{"a", [](Work& work) { work.result = arithmetic_body(kIterations); }},
                  {"b", [](Work& work) {
                     work.result = arithmetic_body(kIterations + kIterations * 3 / 100);
                   }}});
    });

namespace {

struct Tally {
  int faster = 0, slower = 0, same = 0, ambiguous = 0, errors = 0;
  std::vector<double> seconds;
  std::vector<double> overhead_per_call;  // the runtime's window less the batch, per call
  std::vector<double> per_call;
};

double percentile(std::vector<double> values, double fraction) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(fraction * values.size()))];
}

std::string run_capture(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t read = 0;
  while ((read = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, read);
  ::pclose(pipe);
  return out;
}

void measure_one(const std::string& loupe, const std::string& self, const std::string& home,
                 const char* probe, int index, Tally& tally) {
  const std::string command = loupe + " probe run " + probe + " --seed " +
                              std::to_string(1000 + index) + " --budget 2 --json --home " + home +
                              " -- " + self + " 2>/dev/null";
  const auto start = std::chrono::steady_clock::now();
  const std::string out = run_capture(command);
  tally.seconds.push_back(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  nlohmann::json envelope;
  try {
    envelope = nlohmann::json::parse(out);
    const std::string verdict = envelope.at("data").at("comparisons").at(0).at("verdict");
    if (verdict == "FASTER") ++tally.faster;
    if (verdict == "SLOWER") ++tally.slower;
    if (verdict == "SAME") ++tally.same;
    if (verdict == "AMBIGUOUS") ++tally.ambiguous;
    // The isolation's cost, from the samples: what the runtime's window adds to each batch.
    const std::string observation = envelope.at("data").at("observation");
    std::ifstream in(observation.substr(0, observation.rfind('/')) + "/samples.json");
    const nlohmann::json samples = nlohmann::json::parse(in);
    const double calls = samples.at("calls_per_sample");
    for (const auto& variant : samples.at("variants")) {
      const auto times = variant.at("samples").get<std::vector<double>>();
      const auto windows = variant.at("window_s").get<std::vector<double>>();
      for (size_t sample = 0; sample < times.size() && sample < windows.size(); ++sample) {
        tally.overhead_per_call.push_back((windows[sample] - times[sample] * calls) / calls);
        tally.per_call.push_back(times[sample]);
      }
    }
  } catch (const std::exception&) {
    ++tally.errors;
  }
}

// The 1-minute load average: the figures depend on it, so the table states it.
double load_average() {
  double load = 0;
  std::ifstream in("/proc/loadavg");
  in >> load;
  return load;
}

int measure(int argc, char** argv) {
  int comparisons = 40;
  std::string loupe = "build/bin/loupe";
  for (int index = 2; index + 1 < argc; index += 2) {
    if (std::strcmp(argv[index], "--comparisons") == 0) comparisons = std::atoi(argv[index + 1]);
    if (std::strcmp(argv[index], "--loupe") == 0) loupe = argv[index + 1];
  }
  char self[4096] = {};
  if (::readlink("/proc/self/exe", self, sizeof self - 1) <= 0) return 2;
  char home_template[] = "/tmp/isolated_harness_XXXXXX";
  const char* home = ::mkdtemp(home_template);
  if (home == nullptr) return 2;
  std::printf(
      "| experiment | verdicts (of %d) | time to verdict (loupe probe run, wall) | "
      "isolation overhead per timed call | load average (1 min) before -> after |\n"
      "|---|---|---|---|---|\n",
      comparisons);
  for (const char* probe : {"aa", "slower3"}) {
    const double load_before = load_average();
    Tally tally;
    for (int index = 0; index < comparisons; ++index) {
      measure_one(loupe, self, home, probe, index, tally);
    }
    std::printf(
        "| %s | FASTER %d, SLOWER %d, SAME %d, AMBIGUOUS %d, errors %d | median %.2f s, "
        "p90 %.2f s | median %.2f us, p90 %.2f us (call median %.1f us) | %.1f -> %.1f |\n",
        probe, tally.faster, tally.slower, tally.same, tally.ambiguous, tally.errors,
        percentile(tally.seconds, 0.5), percentile(tally.seconds, 0.9),
        percentile(tally.overhead_per_call, 0.5) * 1e6,
        percentile(tally.overhead_per_call, 0.9) * 1e6, percentile(tally.per_call, 0.5) * 1e6,
        load_before, load_average());
    std::fflush(stdout);
  }
  std::string cleanup = std::string("rm -rf ") + home;
  return std::system(cleanup.c_str()) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "measure") == 0) return measure(argc, argv);
  return loupe::subject_main(argc, argv);
}
