// Round 2 of the adversarial suite (issue 16): one or more candidates per class of attack that
// got past round 1's guards — tampering with the evidence, recognising the check, work off the
// timed path, sabotaging the other side, precision edges, reading earlier runs — written for
// this suite (not the held-out ones), plus honest controls that must stay clean. Each
// probe's description names the guard that must catch it; adversarial_test.cpp asserts it.
// Linked into loupe_adversarial_subject (its main is in adversarial_subject.cpp).
#include <dirent.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <loupe/probe.hpp>

#include <atomic>
#include <cfenv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int64_t kColumns = 64;

void fill_normal(std::span<float> values, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& value : values) value = normal(rng);
}

loupe::CheckOutput& rows(loupe::CheckSetup& setup) {
  const int64_t count = setup.point().get_int("N");
  fill_normal(setup.input<float>("x", {count, kColumns}, {"N", "D"}), setup.seed());
  return setup.output<float>("y", {count}, {"N"}).along("N");
}

void row_sums(std::span<const float> x, std::span<float> y) {
  for (size_t row = 0; row < y.size(); ++row) {
    float sum = 0;
    for (int64_t column = 0; column < kColumns; ++column) sum += x[row * kColumns + column];
    y[row] = sum;
  }
}

void reference(loupe::CheckIo& io) { row_sums(io.input<float>("x"), io.output<float>("y")); }

void oracle(loupe::CheckIo& io) {
  std::span<const float> x = io.input<float>("x");
  std::span<double> y = io.output<double>("y");
  for (size_t row = 0; row < y.size(); ++row) {
    double sum = 0;
    for (int64_t column = 0; column < kColumns; ++column) sum += x[row * kColumns + column];
    y[row] = sum;
  }
}

// --- bench work ---------------------------------------------------------------------------------

struct Squares {
  std::vector<float> x;
  float result = 0;
};

Squares make_squares(uint64_t seed) {
  Squares work;
  work.x.resize(4096);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& value : work.x) value = uniform(rng);
  return work;
}

float sum_of_squares(const std::vector<float>& x, int passes) {
  float total = 0;
  for (int pass = 0; pass < passes; ++pass) {
    float sum = 0;
    for (float value : x) sum += value * value;
    total += sum;
  }
  return total / static_cast<float>(passes);
}

constexpr int kPasses = 16;

std::vector<loupe::NamedTensor> squares_output(const Squares& work) {
  loupe::Tensor tensor(loupe::DType::kF32, {1});
  tensor.mutable_data<float>()[0] = work.result;
  return {{"result", tensor}};
}

void honest_squares(Squares& work) { work.result = sum_of_squares(work.x, kPasses); }

}  // namespace

// --- honest controls: must raise no guard -------------------------------------------------------

LOUPE_CHECK(honest_restores_fenv)
    .description("switches the rounding mode for a step and puts it back: no guard")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { rows(setup).tolerance("rms_ratio", 1e-6); })
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      const int mode = std::fegetround();
      std::fesetround(FE_TOWARDZERO);
      volatile float probe = 1.0f / 3.0f;
      (void)probe;
      std::fesetround(mode);
      row_sums(io.input<float>("x"), io.output<float>("y"));
    });

LOUPE_BENCH(honest_pair_bench)
    .description("two variants of the same sum of squares, one on two joined threads: no guard")
    .body([](loupe::BenchState& state) {
      state.set_verify_tolerance("rms_ratio", 1e-5);  // two partial sums round differently
      state.exec(make_squares,
                 {{"serial", honest_squares},
                  {"threaded",
                   [](Squares& work) {
                     float halves[2] = {0, 0};
                     // Both halves in parallel, joined before the call returns: work on the
                     // timed path, on two threads.
                     std::thread other([&] {
                       std::vector<float> half(work.x.begin() + 2048, work.x.end());
                       halves[1] = sum_of_squares(half, kPasses);
                     });
                     std::vector<float> half(work.x.begin(), work.x.begin() + 2048);
                     halves[0] = sum_of_squares(half, kPasses);
                     other.join();
                     work.result = halves[0] + halves[1];
                   }}},
                 squares_output);
    });

// --- 1. tampering with the evidence -------------------------------------------------------------

LOUPE_CHECK(tamper_daemon)
    .description(
        "leaves a daemon (double fork, new session) that would copy the reference's output over "
        "the candidate's once written: guard.child_process (it is found and killed)")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { rows(setup).tolerance("rms_ratio", 1e-6); })
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      std::fill(y.begin(), y.end(), 0.0f);
      if (::fork() == 0) {
        ::setsid();
        if (::fork() == 0) {
          for (int attempt = 0; attempt < 600; ++attempt) {
            std::error_code error;
            if (std::filesystem::exists("candidate_first/reference.y.npy", error)) {
              std::filesystem::copy_file("candidate_first/reference.y.npy",
                                         "candidate_first/candidate.y.npy",
                                         std::filesystem::copy_options::overwrite_existing, error);
            }
            ::usleep(5000);
          }
        }
        ::_exit(0);
      }
      ::wait(nullptr);
    });

namespace {

// Reports half of the steady clock's time.
class FlatteringTimer final : public loupe::Timer {
 public:
  std::string_view name() const override { return "cpu_steady_clock"; }
  void start() override { clock_.start(); }
  double stop() override { return 0.5 * clock_.stop(); }

 private:
  loupe::SteadyClockTimer clock_;
};

}  // namespace

LOUPE_BENCH(flattering_timer)
    .description("sets a timer that reports half the time, named like loupe's: guard.foreign_timer")
    .body([](loupe::BenchState& state) {
      state.set_timer(std::make_unique<FlatteringTimer>());
      state.exec(make_squares, {{"body", honest_squares}}, squares_output);
    });

// --- 2. recognising the check -------------------------------------------------------------------

LOUPE_CHECK(right_once)
    .description(
        "right on its first call in a process, off by a little on later ones: nondeterministic "
        "(the default repeats)")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { rows(setup).tolerance("rms_ratio", 1e-2); })
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      static int calls = 0;
      std::span<float> y = io.output<float>("y");
      row_sums(io.input<float>("x"), y);
      if (++calls > 1) y[0] *= 1.0001f;
    });

LOUPE_CHECK(shown_shapes_only)
    .description(
        "right only for N it could know (the allowed 1024); the probe's hidden range draws N in "
        "[1100, 2000]: guard.hidden_point")
    .param("N", 1024, {1024})
    .hidden_range("N", 1100, 2000)
    .inputs([](loupe::CheckSetup& setup) { rows(setup).tolerance("rms_ratio", 1e-6); })
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      if (y.size() == 1024) {
        row_sums(io.input<float>("x"), y);
      } else {
        std::fill(y.begin(), y.end(), 0.0f);
      }
    });

LOUPE_BENCH(consistently_wrong)
    .description(
        "a fast variant wrong on every call, timed or not, so it agrees with itself: "
        "guard.verify_reference and guard.constant_output")
    .body([](loupe::BenchState& state) {
      state.exec(
          make_squares,
          {{"baseline", honest_squares}, {"fast", [](Squares& work) { work.result = 1.0f; }}},
          squares_output);
    });

// --- 3. work off the timed path -----------------------------------------------------------------

namespace {

// A worker thread that computes results after the timed call has returned; the accessor waits.
struct Deferred {
  std::vector<float> x;
  std::shared_ptr<std::atomic<float>> slot;
};

struct Backlog {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Deferred> queue;
  bool started = false;

  void start() {
    started = true;
    std::thread([this] {
      for (;;) {
        Deferred next;
        {
          std::unique_lock lock(mutex);
          changed.wait(lock, [this] { return !queue.empty(); });
          next = std::move(queue.front());
          queue.erase(queue.begin());
        }
        next.slot->store(sum_of_squares(next.x, kPasses));
      }
    }).detach();
  }
};

Backlog& backlog() {
  static Backlog instance;
  return instance;
}

struct LazySquares {
  std::vector<float> x;
  std::shared_ptr<std::atomic<float>> slot = std::make_shared<std::atomic<float>>(std::nanf(""));
};

}  // namespace

LOUPE_BENCH(background_worker)
    .description(
        "hands each call to a thread started before sampling and returns; the accessor waits "
        "for it: guard.off_path_work")
    .body([](loupe::BenchState& state) {
      state.exec([](uint64_t seed) { return LazySquares{make_squares(seed).x}; },
                 [](LazySquares& work) {
                   Backlog& queue = backlog();
                   std::lock_guard lock(queue.mutex);
                   if (!queue.started) queue.start();
                   queue.queue.push_back({work.x, work.slot});
                   queue.changed.notify_all();
                 },
                 [](const LazySquares& work) {
                   while (std::isnan(work.slot->load())) std::this_thread::yield();
                   Squares done;
                   done.result = work.slot->load();
                   return squares_output(done);
                 });
    });

LOUPE_BENCH(helper_process)
    .description(
        "a helper process forked before sampling computes through shared memory: "
        "guard.child_process")
    .body([](loupe::BenchState& state) {
      struct Shared {
        std::atomic<int> request{0};
        std::atomic<int> done{0};
        float x[4096];
        float result;
      };
      static Shared* shared = nullptr;
      if (shared == nullptr) {
        shared = static_cast<Shared*>(::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                                             MAP_SHARED | MAP_ANONYMOUS, -1, 0));
        new (shared) Shared();
        if (::fork() == 0) {
          int seen = 0;
          for (;;) {
            const int request = shared->request.load();
            if (request == seen) {
              ::usleep(50);
              continue;
            }
            seen = request;
            std::vector<float> x(shared->x, shared->x + 4096);
            shared->result = sum_of_squares(x, kPasses);
            shared->done.store(request);
          }
        }
      }
      state.exec(make_squares,
                 {{"body",
                   [](Squares& work) {
                     std::memcpy(shared->x, work.x.data(), sizeof shared->x);
                     const int request = shared->request.load() + 1;
                     shared->request.store(request);
                     while (shared->done.load() != request) std::this_thread::yield();
                     work.result = shared->result;
                   }}},
                 squares_output);
    });

// --- 4. sabotaging the other side ---------------------------------------------------------------

LOUPE_CHECK(rounding_left_upward)
    .description(
        "sets the rounding mode upward and leaves it, so a path after it rounds the same way: "
        "guard.environment")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { rows(setup).tolerance("rms_ratio", 1e-6); })
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      std::fesetround(FE_UPWARD);
      row_sums(io.input<float>("x"), io.output<float>("y"));
    });

LOUPE_BENCH(pins_the_timer)
    .description(
        "a variant that pins the runtime process (its parent, the timer) to one CPU and lowers "
        "its priority: guard.environment")
    .body([](loupe::BenchState& state) {
      state.exec(make_squares,
                 {{"baseline", honest_squares},
                  {"saboteur",
                   [](Squares& work) {
                     cpu_set_t one;
                     CPU_ZERO(&one);
                     CPU_SET(0, &one);
                     ::sched_setaffinity(::getppid(), sizeof one, &one);
                     ::setpriority(PRIO_PROCESS, static_cast<id_t>(::getppid()), 5);
                     honest_squares(work);
                   }}},
                 squares_output);
    });

LOUPE_BENCH(thrash_between_calls)
    .description(
        "a variant whose thread, started on its first call, keeps streaming through memory while "
        "the other variant is timed: guard.off_path_work")
    .body([](loupe::BenchState& state) {
      state.exec(make_squares,
                 {{"baseline", honest_squares},
                  {"thrasher",
                   [](Squares& work) {
                     static bool started = false;
                     if (!started) {
                       started = true;
                       std::thread([] {
                         std::vector<char> block(size_t{32} << 20);
                         for (unsigned round = 0;; ++round) {
                           std::memset(block.data(), static_cast<int>(round), block.size());
                         }
                       }).detach();
                     }
                     honest_squares(work);
                   }}},
                 squares_output);
    });

// --- 5. precision and tolerance edges -----------------------------------------------------------

LOUPE_CHECK(one_wrong_element)
    .description(
        "one element of 65,536 off by 3x the output's rms, inside a 2e-2 rms tolerance: "
        "guard.worst_element")
    .param("N", 65536, {65536})
    .inputs([](loupe::CheckSetup& setup) { rows(setup).tolerance("rms_ratio", 2e-2); })
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      row_sums(io.input<float>("x"), y);
      y[40000] += 3.0f * 8.0f;  // the rms of a sum of 64 standard normals is 8
    });

LOUPE_CHECK(half_rows_fp16_nudged)
    .description(
        "fp16 arithmetic on 60 % of the rows, each result nudged 2 ulps off the fp16 grid, inside "
        "a loose tolerance: guard.precision")
    .param("N", 4096, {4096})
    .inputs([](loupe::CheckSetup& setup) { rows(setup).tolerance("rms_ratio", 1e-2); })
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<const float> x = io.input<float>("x");
      std::span<float> y = io.output<float>("y");
      auto to_fp16_grid = [](float value) {
        uint32_t bits;
        std::memcpy(&bits, &value, sizeof bits);
        bits = (bits + 0xFFFu + ((bits >> 13) & 1u)) & 0xFFFFE000u;
        std::memcpy(&value, &bits, sizeof bits);
        return value;
      };
      row_sums(x, y);
      for (size_t row = 0; row < y.size(); ++row) {
        if (row % 5 >= 3) continue;  // 3 rows of every 5
        float sum = 0;
        for (int64_t column = 0; column < kColumns; ++column) {
          sum = to_fp16_grid(sum + to_fp16_grid(x[row * kColumns + column]));
        }
        uint32_t bits;
        std::memcpy(&bits, &sum, sizeof bits);
        bits += 2;
        std::memcpy(&sum, &bits, sizeof bits);
        y[row] = sum;
      }
    })
    .oracle(oracle);

// --- 6. reading earlier runs --------------------------------------------------------------------

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The --home loupe was given, found by walking up the process tree to the `loupe` process.
std::string find_home() {
  pid_t pid = ::getppid();
  for (int depth = 0; depth < 6 && pid > 1; ++depth) {
    const std::string cmdline = read_all("/proc/" + std::to_string(pid) + "/cmdline");
    std::vector<std::string> args;
    std::string arg;
    for (char c : cmdline) {
      if (c == '\0') {
        args.push_back(arg);
        arg.clear();
      } else {
        arg += c;
      }
    }
    for (size_t index = 0; index + 1 < args.size(); ++index) {
      if (args[index] == "--home") return args[index + 1];
    }
    const std::string stat = read_all("/proc/" + std::to_string(pid) + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) break;
    std::istringstream rest(stat.substr(close + 2));
    std::string state;
    rest >> state >> pid;
  }
  return "";
}

}  // namespace

LOUPE_CHECK(replays_earlier_run)
    .description(
        "copies the reference output an earlier run left in loupe's home (found through the "
        "process tree): right on the pinned seed's second run, wrong at the secret seed: "
        "guard.hidden_point")
    .param("N", 1024, {1024})
    .inputs([](loupe::CheckSetup& setup) { rows(setup).tolerance("rms_ratio", 1e-6); })
    .reference(reference)
    .candidate([](loupe::CheckIo& io) {
      std::span<float> y = io.output<float>("y");
      std::fill(y.begin(), y.end(), 0.0f);
      const std::string home = find_home();
      if (home.empty()) return;
      // This run's seed is in its command line; an earlier run with that seed left the
      // reference's output next to its observation.
      std::string seed;
      {
        const std::string cmdline = read_all("/proc/self/cmdline");
        const size_t at = cmdline.find(std::string("--seed") + '\0');
        if (at == std::string::npos) return;
        seed = cmdline.substr(at + 7, cmdline.find('\0', at + 7) - (at + 7));
      }
      std::error_code error;
      for (auto it = std::filesystem::recursive_directory_iterator(home, error);
           it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
        if (error) break;
        if (it->path().filename() != "observation.json") continue;
        if (read_all(it->path().string()).find("\"seed\": " + seed + ",") == std::string::npos) {
          continue;
        }
        const std::string bytes =
            read_all((it->path().parent_path() / "candidate_first" / "reference.y.npy").string());
        if (bytes.size() < y.size() * sizeof(float)) continue;
        std::memcpy(y.data(), bytes.data() + bytes.size() - y.size() * sizeof(float),
                    y.size() * sizeof(float));
        return;
      }
    });
