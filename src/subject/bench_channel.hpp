// subject/bench_channel.hpp — how the runtime process drives a bench variant's child.
//
// Each variant runs in a child of its own (bench_runner.cpp). The runtime process writes a
// command into the child's control block and wakes it; the child does it and answers. The runtime
// process checks the clock: the child's runtime code reads the steady clock right around the
// batch's calls (two processes handing a command back and forth on a loaded machine would add
// scheduling delays of hundreds of microseconds to every batch), and the runtime process requires
// that interval to lie inside its own window from "run" to the answer, and the child's CPU time
// in the window (which the child cannot forge) to fit in it. Outputs come back serialised in the
// block's output area. Internal to libloupe.
// Thread-safety: one runtime thread and one child thread per block.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loupe/tensor.hpp"

namespace loupe::subject {

enum class BenchOp : uint32_t {
  kNone = 0,
  kPrepare,  // build `calls` input sets from work_seed and first_work .., or all from repeat_seed
  kRun,      // call the variant on each prepared set (the timed batch)
  kMaterialise,  // outputs(set `chosen`) into the output area
  kCopy,         // the last materialised outputs into the output area again (a copy's cost)
  kUntimed,      // make(seed), one call, outputs into the output area
  kCeiling,      // the timer's device ceiling at bytes_per_call
  kQuit,
};

constexpr size_t kMaxVariants = 16;
constexpr size_t kNameBytes = 64;
constexpr size_t kOutputAreaBytes = size_t{1} << 30;  // reserved, not committed (MAP_NORESERVE)

// What a body declares before exec, in its child. The runtime process copies it out of the block
// once, when the child has declared and before any variant call runs in that process, and reads
// only its copy afterwards: a variant's call could otherwise rewrite what the runtime verifies
// against (the tolerance, whether there are outputs) or the work the roofline judges.
struct BenchDeclaration {
  bool executed;
  bool skipped;
  char skip_reason[512];
  uint32_t variant_count;
  char variant_names[kMaxVariants][kNameBytes];
  double bytes_per_call;
  double flops_per_call;
  char timer_name[kNameBytes];
  char timer_type[256];
  bool timer_is_loupes;
  bool timer_is_device;
  char verify_metric[kNameBytes];
  double verify_bound;
  bool has_outputs;
  char timer_method[2048];  // JSON object
};

struct BenchControl {
  std::atomic<uint32_t> command;  // bumped by the runtime for each command (a futex word)
  std::atomic<uint32_t> answer;   // set to `command` by the child when done (a futex word)
  BenchOp op;
  uint64_t calls;
  uint64_t first_work;
  uint64_t repeat_seed;
  uint64_t work_seed;  // kPrepare: the input sets' seeds derive from it and the work index
  bool repeat;
  uint64_t chosen;
  uint64_t seed;
  // kUntimed: drop the prepared input sets before making the untimed call's (no verification
  // still reads them).
  bool release_works;
  // Answers.
  bool failed;
  char message[2048];
  double timer_seconds;   // the device timer's reading of the batch (cuda_events only)
  double batch_start;     // steady clock around the batch's calls, read by the runtime's code
  double batch_end;       // in the child (the runtime process checks them against its own)
  double accessor_s;      // kMaterialise: the outputs accessor's own time
  double accessor_cpu_s;  // kMaterialise: the CPU its process used meanwhile (every thread)
  double serialise_s;     // kMaterialise, kCopy: copying the tensors into the output area
  double to_host_s;       // kCopy, a device timer's body: bringing output_bytes from the device
  char drop_reason[128];
  uint32_t fact_count;
  char fact_names[8][kNameBytes];
  double fact_values[8];
  uint64_t output_bytes;
  // Set by the child once the body has declared (then `declaration` holds what it declared).
  bool declared;
  BenchDeclaration declaration;
  char ceiling[1024];  // JSON object, or empty
};

// Serialises tensors into `area` (at most `capacity` bytes); returns the bytes used. Throws
// Error(kSubject) when they do not fit.
size_t write_tensors(const std::vector<NamedTensor>& tensors, std::byte* area, size_t capacity);
std::vector<NamedTensor> read_tensors(const std::byte* area, size_t size);

// Futex waits on a shared word: until *word != value, or `timeout_s` passes (<= 0: no timeout).
void futex_wait(std::atomic<uint32_t>& word, uint32_t value, double timeout_s);
void futex_wake(std::atomic<uint32_t>& word);

}  // namespace loupe::subject
