// A subject that misbehaves as a process: it hangs with a grandchild, floods stdout or stderr,
// or allocates without bound. tests/adversarial/isolation_test.cpp runs each through
// `loupe probe run` and asserts the finding and exit 3. `list` answers normally.
#include <unistd.h>
#include <loupe/probe.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>
#include <vector>

LOUPE_SCENARIO(hang)
    .description("forks a grandchild, prints both pids to stderr, and both sleep forever")
    .body([](loupe::ScenarioState&) {
      const pid_t child = ::fork();
      if (child == 0) {
        for (;;) ::pause();
      }
      std::fprintf(stderr, "pids %d %d\n", static_cast<int>(::getpid()), static_cast<int>(child));
      std::fflush(stderr);
      for (;;) ::pause();
    });

LOUPE_SCENARIO(flood_stdout)
    .description("writes to stdout without end")
    .body([](loupe::ScenarioState&) {
      const std::string line(1023, 'x');
      for (;;) std::cout << line << '\n';
    });

LOUPE_SCENARIO(flood_stderr)
    .description("writes to stderr without end")
    .body([](loupe::ScenarioState&) {
      const std::string line(1023, 'e');
      for (;;) std::cerr << line << '\n';
    });

LOUPE_SCENARIO(grow)
    .description("allocates and touches 16 MiB every 5 ms without end")
    .body([](loupe::ScenarioState&) {
      std::vector<std::vector<char>> blocks;
      for (;;) {
        blocks.emplace_back(size_t{16} << 20);
        std::memset(blocks.back().data(), 1, blocks.back().size());
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });

int main(int argc, char** argv) { return loupe::subject_main(argc, argv); }
