// libFuzzer target: the .safetensors reader (src/core/safetensors.cpp) on arbitrary bytes. A
// loupe::Error is the expected answer to bad input; anything else is a bug.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.hpp"
#include "loupe/error.hpp"
#include "loupe/tensor.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loupe::fuzz::ScratchFile file(data, size);
  try {
    const std::vector<loupe::NamedTensor> tensors = loupe::read_safetensors(file.path());
    // Touch every element, so an entry that promises more bytes than the file holds is caught.
    double sum = 0;
    for (const loupe::NamedTensor& named : tensors) {
      for (int64_t index = 0; index < named.tensor.numel(); ++index) {
        sum += named.tensor.element_as_double(index);
      }
    }
    (void)sum;
  } catch (const loupe::Error&) {
  }
  return 0;
}
