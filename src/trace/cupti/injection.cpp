// libloupe_cupti_inject.so: traces any CUDA program without relinking it.
//   CUDA_INJECTION64_PATH=build/lib/libloupe_cupti_inject.so LOUPE_CUPTI_TRACE=gpu.json PROGRAM
// The CUDA driver loads this library at cuInit and calls InitializeInjection; the trace is
// written at exit (an atexit handler registered after the runtime's, so it runs before teardown).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "loupe/error.hpp"
#include "trace/cupti/cupti_tracer.hpp"

namespace {

std::string& trace_path() {
  static std::string path;
  return path;
}

void write_at_exit() {
  try {
    const auto counts = loupe::trace::cupti::stop_and_write(trace_path());
    std::fprintf(stderr,
                 "loupe cupti: wrote %s (%llu kernels, %llu memcpy, %llu memset, %llu syncs, "
                 "%llu runtime calls, %llu dropped)\n",
                 trace_path().c_str(), static_cast<unsigned long long>(counts.kernels),
                 static_cast<unsigned long long>(counts.memcpys),
                 static_cast<unsigned long long>(counts.memsets),
                 static_cast<unsigned long long>(counts.synchronizations),
                 static_cast<unsigned long long>(counts.runtime_calls),
                 static_cast<unsigned long long>(counts.dropped));
  } catch (const loupe::Error& error) {
    std::fprintf(stderr, "loupe cupti: %s\n", error.message().c_str());
  }
}

}  // namespace

extern "C" int InitializeInjection() {
  const char* path = std::getenv("LOUPE_CUPTI_TRACE");
  if (path == nullptr || *path == '\0') {
    std::fprintf(stderr, "loupe cupti: LOUPE_CUPTI_TRACE is not set; not tracing\n");
    return 1;
  }
  trace_path() = path;
  try {
    loupe::trace::cupti::start();
  } catch (const loupe::Error& error) {
    std::fprintf(stderr, "loupe cupti: %s\n", error.message().c_str());
    return 1;
  }
  std::atexit(write_at_exit);
  return 1;
}
