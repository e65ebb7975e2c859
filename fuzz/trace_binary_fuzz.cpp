// libFuzzer target: the loupe binary trace reader (src/trace/import/binary_import.cpp) on
// arbitrary bytes, then the model's finish(). A loupe::Error is expected for bad input; anything
// else is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "loupe/error.hpp"
#include "trace/import/import.hpp"
#include "trace/model/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  loupe::trace::Model model;
  loupe::trace::ModelBuilder builder(model);
  try {
    loupe::trace::import_loupe_binary(bytes, "fuzz.loupetrace", builder, 0);
    builder.finish();
  } catch (const loupe::Error&) {
  }
  return 0;
}
