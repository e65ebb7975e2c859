// Round 2, second set (issue 16): candidates written after round 2's guards landed, against them,
// in three of the classes — recognising the check (a variant that tells timed calls from
// verification calls by their cadence), work off the timed path (an outputs accessor that
// finishes the call's work, below round 2's 4x bound), sabotaging the other side (a variant that
// lowers and pins its sibling variant's process). Each description names the general guard that
// rejects it; round2b_test.cpp asserts it. Linked into loupe_adversarial_subject.
#include <dirent.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>
#include <loupe/probe.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

// A polynomial evaluated at every element, summed: time linear in `degree`, a dependent chain per
// element (nothing the compiler can hoist out of a repeated call).
struct Poly {
  std::vector<double> x;
  double result = 0;
  // accessor_finishes_the_work: where the timed call stopped.
  double partial = 0;
  int next_term = 0;
};

constexpr int kDegree = 24;

Poly make_poly(uint64_t seed) {
  Poly work;
  work.x.resize(2048);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(-0.9, 0.9);
  for (double& value : work.x) value = uniform(rng);
  return work;
}

// Terms [first, last) of sum_i sum_k x_i^k / (k + 1).
double poly_terms(const std::vector<double>& x, int first, int last) {
  double total = 0;
  for (double value : x) {
    double power = 1;
    for (int k = 0; k < first; ++k) power *= value;
    for (int k = first; k < last; ++k) {
      total += power / (k + 1);
      power *= value;
    }
  }
  return total;
}

std::vector<loupe::NamedTensor> poly_output(const Poly& work) {
  loupe::Tensor tensor(loupe::DType::kF64, {1});
  tensor.mutable_data<double>()[0] = work.result;
  return {{"result", tensor}};
}

void honest_poly(Poly& work) { work.result = poly_terms(work.x, 0, kDegree); }

}  // namespace

// --- 2. recognising the check
// ---------------------------------------------------------------------

LOUPE_BENCH(stale_when_batched)
    .description(
        "a variant that computes only when called after a pause (the untimed verification calls, "
        "the first call of a batch) and otherwise returns its previous result: "
        "guard.verify_mismatch")
    .body([](loupe::BenchState& state) {
      state.exec(make_poly,
                 {{"baseline", honest_poly},
                  {"cadence",
                   [](Poly& work) {
                     using Clock = std::chrono::steady_clock;
                     static Clock::time_point last_return{};
                     static double last_result = 0;
                     static bool have_result = false;
                     // Back-to-back calls are a timed batch; a call after a pause is one that
                     // might be checked.
                     if (have_result && Clock::now() - last_return < std::chrono::microseconds(2)) {
                       work.result = last_result;
                     } else {
                       honest_poly(work);
                       last_result = work.result;
                       have_result = true;
                     }
                     last_return = Clock::now();
                   }}},
                 poly_output);
    });

// --- 3. work off the timed path
// -------------------------------------------------------------------

LOUPE_BENCH(accessor_finishes_the_work)
    .description(
        "a variant whose timed call computes a third of the terms and whose outputs accessor "
        "computes the rest (2x the call: under the 4x bound on its own): guard.deferred_output, "
        "against the baseline's accessor")
    .body([](loupe::BenchState& state) {
      state.exec(make_poly,
                 {{"baseline", honest_poly},
                  {"lazy",
                   [](Poly& work) {
                     work.next_term = kDegree / 3;
                     work.partial = poly_terms(work.x, 0, work.next_term);
                   }}},
                 [](const Poly& work) {
                   if (work.next_term == 0) return poly_output(work);  // the baseline's: a copy
                   Poly done;
                   done.result = work.partial + poly_terms(work.x, work.next_term, kDegree);
                   return poly_output(done);
                 });
    });

// --- 4. sabotaging the other side
// -----------------------------------------------------------------

namespace {

// The other processes with the same parent as this one: the sibling variants' processes.
std::vector<pid_t> siblings() {
  std::vector<pid_t> found;
  const pid_t parent = ::getppid();
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* entry = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0 || pid == ::getpid()) continue;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::stringstream text;
    text << stat.rdbuf();
    const std::string line = text.str();
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) found.push_back(pid);
  }
  ::closedir(proc);
  return found;
}

}  // namespace

LOUPE_BENCH(slows_the_sibling)
    .description(
        "a variant that lowers the priority of the other variant's process to 19 and pins it to "
        "one CPU, so the baseline runs slowly: guard.environment (naming the baseline's process)")
    .body([](loupe::BenchState& state) {
      state.exec(make_poly,
                 {{"baseline", honest_poly},
                  {"saboteur",
                   [](Poly& work) {
                     static bool done = false;
                     if (!done) {
                       done = true;
                       cpu_set_t one;
                       CPU_ZERO(&one);
                       CPU_SET(0, &one);
                       for (pid_t pid : siblings()) {
                         ::setpriority(PRIO_PROCESS, static_cast<id_t>(pid), 19);
                         ::sched_setaffinity(pid, sizeof one, &one);
                       }
                     }
                     honest_poly(work);
                   }}},
                 poly_output);
    });
