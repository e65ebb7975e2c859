// libFuzzer target: the .npy reader (src/core/npy.cpp) on arbitrary bytes. A loupe::Error is the
// expected answer to bad input; anything else (a crash, a sanitizer report, another exception)
// is a bug.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "loupe/error.hpp"
#include "loupe/tensor.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loupe::fuzz::ScratchFile file(data, size);
  try {
    const loupe::Tensor tensor = loupe::read_npy(file.path());
    // Touch every element, so a shape that promises more bytes than the file holds is caught.
    double sum = 0;
    for (int64_t index = 0; index < tensor.numel(); ++index) sum += tensor.element_as_double(index);
    (void)sum;
  } catch (const loupe::Error&) {
  }
  return 0;
}
