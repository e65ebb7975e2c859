// Round 5 (issue 16, fifth session): call-counting candidates against the secret repeats whose
// count grows with how cheap a call is (src/subject/check_runner.cpp, run_secret_repeats). Each
// description says what it does and what catches it (or that nothing does); round5_test.cpp
// asserts the outcome. Linked into loupe_adversarial_subject.
#include <time.h>

#include <loupe/probe.hpp>

#include <chrono>
#include <cstdint>
#include <random>
#include <span>
#include <thread>

#include "sums_probe.hpp"

namespace {

using loupe::adversarial::kWidth;
using loupe::adversarial::sums;
using loupe::adversarial::sums_reference;
using loupe::adversarial::sums_setup;

// Spends `seconds` of this thread's CPU time.
void spin_cpu(double seconds) {
  timespec start{}, now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
  do {
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  } while (static_cast<double>(now.tv_sec - start.tv_sec) +
               1e-9 * static_cast<double>(now.tv_nsec - start.tv_nsec) <
           seconds);
}

// Right on the first `right_for` calls of its process, 1 % off on every later one.
void right_first(loupe::CheckIo& io, int right_for) {
  static int calls = 0;
  std::span<float> y = io.output<float>("y");
  sums(io.input<float>("x"), y);
  if (++calls > right_for) {
    for (float& value : y) value *= 1.01f;
  }
}

}  // namespace

// --- 2. recognising the check --------------------------------------------------------------------

LOUPE_CHECK(right_first_forty)
    .description(
        "right on its first forty calls in a process, off by 1 % on every later one: more calls "
        "than the secret repeats' floor (1 to 6), fewer than a cheap body's count (as many calls "
        "as fit 25 to 50 ms)")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) { right_first(io, 40); });

LOUPE_CHECK(right_first_nine_sleeping)
    .description(
        "right on its first nine calls in a process, off by 1 % on every later one, and sleeps "
        "4 ms in every call to look costly: a call's cost is the lesser of its time and its CPU, "
        "so the count stays high and stops at 4 budgets of wall time (100 ms or more): call 10 "
        "comes")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      std::this_thread::sleep_for(std::chrono::milliseconds(4));
      right_first(io, 9);
    });

LOUPE_CHECK(right_first_nine_busy)
    .description(
        "right on its first nine calls in a process, off by 1 % on every later one, and spends "
        "10 ms of CPU in every call: at most 5 such calls fit the secret repeats' budget, so the "
        "floor (1 to 6) decides and a check makes at most 9 calls in the process")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { sums_setup(setup).tolerance("rms_ratio", 1e-6); })
    .reference(sums_reference)
    .candidate([](loupe::CheckIo& io) {
      spin_cpu(0.010);
      right_first(io, 9);
    });
