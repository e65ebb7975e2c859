// libFuzzer target: a trace file as `loupe trace` reads it (src/trace/import/import.cpp):
// gzip inflation (whole, truncated, concatenated members), format detection, then the Chrome JSON
// or loupe binary importer and the model's finish(). The seeds are gzip files, so mutations
// exercise the inflater and the JSON behind it. A loupe::Error is expected; anything else is a bug.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "loupe/error.hpp"
#include "trace/import/import.hpp"
#include "trace/model/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loupe::fuzz::ScratchFile file(data, size);
  try {
    const loupe::trace::Model model = loupe::trace::load_traces({file.path()});
    (void)model;
  } catch (const loupe::Error&) {
  }
  return 0;
}
