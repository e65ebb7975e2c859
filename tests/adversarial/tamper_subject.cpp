// A subject whose static initialiser starts a thread in the runtime process itself, before main:
// it waits for the observation to be written and then copies the reference's output over the
// candidate's. Nothing the runtime does after main can stop code that already runs in it; loupe
// catches the result: guard.evidence_sealed (the file no longer matches the seal) and
// guard.runtime_thread (a thread was running before the run began).
#include <unistd.h>
#include <loupe/probe.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <span>
#include <thread>

namespace {

// It takes stdout's lock as soon as the runtime starts writing files (every child is gone by
// then, so the runtime flushes stdout before no more forks) and holds it until it is done: the
// runtime sends its reply (the seal) through std::cout after writing observation.json, so it
// waits for the copy. Only the step from the first file to the lock is a race, one the thread,
// which spins from the start, wins unless it is kept off the CPU for the whole write.
const bool tamperer_started = [] {
  std::thread([] {
    namespace fs = std::filesystem;
    std::error_code error;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists("candidate_first", error)) {
      if (std::chrono::steady_clock::now() > give_up) return;
      std::this_thread::yield();
    }
    ::flockfile(stdout);
    while (std::chrono::steady_clock::now() < give_up) {
      if (fs::exists("observation.json", error) &&
          fs::exists("candidate_first/reference.y.npy", error)) {
        fs::copy_file("candidate_first/reference.y.npy", "candidate_first/candidate.y.npy",
                      fs::copy_options::overwrite_existing, error);
        break;
      }
      std::this_thread::yield();
    }
    ::funlockfile(stdout);
  }).detach();
  return true;
}();

}  // namespace

LOUPE_CHECK(sealed_evidence)
    .description("writes zeros; a thread started before main swaps in the reference's file")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) {
      std::span<float> x = setup.input<float>("x", {1024}, {"N"});
      for (size_t index = 0; index < x.size(); ++index) {
        x[index] = static_cast<float>((setup.seed() + index) % 97) - 48.0f;
      }
      setup.output<float>("y", {1024}, {"N"}).tolerance("rms_ratio", 1e-6);
    })
    .reference([](loupe::CheckIo& io) {
      auto x = io.input<float>("x");
      auto y = io.output<float>("y");
      for (size_t index = 0; index < x.size(); ++index) y[index] = 2 * x[index];
    })
    .candidate([](loupe::CheckIo& io) {
      auto y = io.output<float>("y");
      std::fill(y.begin(), y.end(), 0.0f);
    });

int main(int argc, char** argv) { return loupe::subject_main(argc, argv); }
